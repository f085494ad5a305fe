"""A model family of its own package (`examples/new-family/`, the example of docs/contributing.md): installed with its
`hf_readonce.families` entry point, it is registered by `import hf_readonce` and by every `hf-readonce` command in a
fresh process, and served like the package's own families (Auto classes, re-exported names, `info`, `encode`,
`answer`, `verify --recompute`, `publish`; the published folder's pipeline and Auto classes where neither hf-readonce
nor the family package can be imported). A broken entry point is warned about, naming itself, and left out
(`HF_READONCE_NO_ENTRY_POINTS=1` loads none); a family module imports any name of hf-readonce; a family registered
after `import hf_readonce` is re-exported; a family whose classes never called `register_for_auto_class` is refused by
`publish` (its code would not travel); the example's model and pipeline refuse input they would answer wrongly.

Each fresh interpreter costs seconds (torch and transformers are imported again), so the module-scoped fixtures run
each process once and the tests read what it printed: five processes for the seven tests."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types

import pytest

from tests.conftest import REPO_ROOT, run_without_hf_readonce

EXAMPLE = REPO_ROOT / "examples" / "new-family"


def install(tmp_path, entry_points: dict | None = None):
    """A copy of the example package under `tmp_path/site`, with the dist-info `pip install` writes for it: its
    name, version and the entry points its pyproject.toml declares (or `entry_points`, group -> {name: value})."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib (Python 3.11+) reads the example's pyproject.toml")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    points = project["entry-points"] if entry_points is None else entry_points
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                        f"Version: {project['version']}\n")
    (dist_info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in names.items()) + "\n"
        for group, names in points.items()))
    return site


def run(tmp_path, site, script: str, *args, module: bool = False, **env_vars) -> subprocess.CompletedProcess:
    """`python -c script args` (`python -m script args` with `module`) with hf-readonce's `src/` and `site` on the
    path, offline, the family entry points loaded (and `env_vars` set)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), str(site)]), HF_HUB_OFFLINE="1",
               HF_MODULES_CACHE=str(tmp_path / "modules"), TOKENIZERS_PARALLELISM="false")
    env.pop("HF_READONCE_NO_ENTRY_POINTS", None)  # the suite's conftest.py sets it for every other test
    env.update(env_vars)
    argv = ["-m", script] if module else ["-c", textwrap.dedent(script)]
    return subprocess.run([sys.executable, *argv, *map(str, args)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


SERVED = '''
import contextlib, io, json, sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer

import hf_readonce
from hf_readonce.cli import main as cli
from hf_readonce.hub import publish
from hf_readonce.representations import registered_families
from hf_readonce.weights import minilm_path

root = Path(sys.argv[1])
result = {"families": list(registered_families()), "exported": hasattr(hf_readonce, "MeanQaBertForQuestionAnswering")
          and hasattr(hf_readonce, "MeanQaPassageOutput"), "module": registered_families()["mean_qa"].module}
tokenizer = AutoTokenizer.from_pretrained(minilm_path())
torch.manual_seed(0)
config = AutoConfig.for_model("mean_qa_bert", vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=37, max_passage_length=48)
model = AutoModelForQuestionAnswering.from_config(config).eval()
result["auto_model"] = type(model).__name__
model.save_pretrained(root / "checkpoint")
tokenizer.save_pretrained(root / "checkpoint")
result["files"] = publish(root / "checkpoint", "someone/mean-qa", local_dir=root / "published").files
# what the published folder must reproduce where the family package is not installed
question, passage = tokenizer(["Who wrote Emma?"], return_tensors="pt"), tokenizer([PASSAGE], return_tensors="pt")
with torch.no_grad():
    result["start_logits"] = model(input_ids=question["input_ids"], passage_input_ids=passage["input_ids"]
                                   ).start_logits[0].tolist()
result["fingerprint"] = model.representation_fingerprint()

def command(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = cli([*map(str, argv), "--no-progress"])
    return status, out.getvalue()

status, listing = command("info", "--json")
result["info"] = (status, next(row for row in json.loads(listing) if row["family"] == "mean_qa"))
result["encode"] = command("encode", root / "published", "--documents", root / "passages.jsonl", "--store",
                           root / "store", "--store-dtype", "fp32")[0]
result["answer"] = command("answer", root / "published", "--store", root / "store", "--questions",
                           root / "questions.jsonl", "--output", root / "predictions.jsonl")[0]
result["verify"] = command("verify", "--store", root / "store", "--recompute", "2", "--model", root / "published")
json.dump(result, open(root / "result.json", "w"))
'''

PASSAGES = ["Emma is a novel by Jane Austen, published in December 1815.",
            "Persuasion was published in 1817, after the death of its author."]
QUESTIONS = [{"id": "q1", "question": "Who wrote Emma?", "context": PASSAGES[0],
              "answers": {"text": ["Jane Austen"], "answer_start": [19]}},
             {"id": "q2", "question": "When was Persuasion published?", "context": PASSAGES[1],
              "answers": {"text": ["1817"], "answer_start": [28]}}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`(folder, result)`: the example installed, a tiny random checkpoint of its family saved and published to
    `folder/published`, its passages encoded, its questions answered (`folder/predictions.jsonl`) and the store
    verified, all in one fresh process ([`SERVED`]; what it found in `folder/result.json`)."""
    tmp_path = tmp_path_factory.mktemp("served")
    site = install(tmp_path)
    (tmp_path / "passages.jsonl").write_text("".join(json.dumps({"context": p}) + "\n" for p in PASSAGES))
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    done = run(tmp_path, site, SERVED.replace("PASSAGE]", f"{PASSAGES[0]!r}]"), tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    return tmp_path, json.loads((tmp_path / "result.json").read_text())


def predictions_of(folder) -> dict:
    """`{id: prediction_text}` of what `hf-readonce answer` wrote to `folder/predictions.jsonl`."""
    return {row["id"]: row["prediction_text"]
            for row in map(json.loads, (folder / "predictions.jsonl").read_text().splitlines())}


def test_an_installed_family_package_is_registered_and_served(served):
    tmp_path, result = served
    # registered by `import hf_readonce` alone, after the package's own families, and re-exported
    assert result["families"][-1] == "mean_qa" and "deformer_bert" in result["families"]
    assert result["module"] == "mean_qa_family.family" and result["exported"]
    assert result["auto_model"] == "MeanQaBertForQuestionAnswering"
    assert {"configuration_mean_qa.py", "modeling_mean_qa.py", "pipeline_mean_qa.py", "representation_format.json",
            "README.md"} <= set(result["files"])
    status, info = result["info"]
    assert status == 0 and info["answer"] == "extractive" and info["encode"], info
    assert info["pipelines"] == {"question-answering": "MeanQaQuestionAnsweringPipeline"}
    assert result["encode"] == 0 and result["answer"] == 0
    status, report = result["verify"]
    assert status == 0 and "2 of 2 document(s) recomputed from stored tokens" in report, report
    assert set(predictions_of(tmp_path)) == {"q1", "q2"}


# run where neither hf_readonce nor the family package can be imported (`run_without_hf_readonce` blocks the first,
# this the second): what the published card's "Use" section promises
REMOTE = """
import importlib.abc, json, re, sys
from pathlib import Path


class _BlockFamily(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "mean_qa_family":
            raise ImportError("mean_qa_family is blocked in this process")


sys.meta_path.insert(0, _BlockFamily())
import torch
from transformers import AutoConfig, AutoModel, AutoModelForQuestionAnswering, AutoTokenizer

root = Path(ROOT)
folder = str(root / "published")
importable = {}
for name in ("hf_readonce", "mean_qa_family"):
    try:
        __import__(name)
        importable[name] = True
    except ImportError:
        importable[name] = False

# the card's own snippet, the repository id replaced by the folder
card = (root / "published" / "README.md").read_text()
snippet = re.search(r"```python\\n(.*?)```", card, re.S).group(1)
scope = {}
exec(snippet.replace('"someone/mean-qa"', repr(folder)), scope)
qa = scope["qa"]
answers = {row["id"]: qa(question=row["question"], context=row["context"], max_answer_len=30)["answer"]
           for row in map(json.loads, open(root / "questions.jsonl"))}

config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
encoder = AutoModel.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForQuestionAnswering.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # as the cards load it
question, passage = tokenizer(["Who wrote Emma?"], return_tensors="pt"), tokenizer([PASSAGE], return_tensors="pt")
with torch.no_grad():
    start_logits = model(input_ids=question["input_ids"], passage_input_ids=passage["input_ids"]).start_logits[0]
print(json.dumps({
    "importable": importable, "answers": answers, "start_logits": start_logits.tolist(),
    "fingerprints": [model.representation_fingerprint(), encoder.representation_fingerprint()],
    "classes": {name: f"{type(obj).__module__}.{type(obj).__name__}" for name, obj in
                {"config": config, "encoder": encoder, "model": model, "pipeline": qa}.items()},
    "loaded": sorted(name for name in sys.modules if name.split(".")[0] in ("hf_readonce", "mean_qa_family")),
}))
"""


def test_the_published_folder_loads_without_hf_readonce_and_the_family_package(served, monkeypatch):
    """The published folder of a family of another package carries the family's code: where neither hf_readonce
    nor that package can be imported, the card's snippet (`pipeline(..., trust_remote_code=True)`) answers as
    `hf-readonce answer` did from the store, and the Auto classes of its `auto_map` load the config, the encoder and
    the QA model from the folder's own files, with the weights (the same logits) and the representation fingerprint
    (the store's key) of the model that was published."""
    tmp_path, result = served
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "remote_modules"))  # a fresh copy of the folder's code
    script = REMOTE.replace("ROOT", repr(str(tmp_path))).replace("[PASSAGE]", f"[{PASSAGES[0]!r}]")
    loaded = run_without_hf_readonce(script, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-4000:]
    assert "custom code" not in loaded.stdout + loaded.stderr, loaded.stdout + loaded.stderr  # no prompt
    remote = json.loads(loaded.stdout.splitlines()[-1])
    assert remote["importable"] == {"hf_readonce": False, "mean_qa_family": False} and remote["loaded"] == []
    assert remote["answers"] == predictions_of(tmp_path)
    classes = remote["classes"]
    assert {name: path.rsplit(".", 1)[-1] for name, path in classes.items()} == {
        "config": "MeanQaBertConfig", "encoder": "MeanQaBertModel", "model": "MeanQaBertForQuestionAnswering",
        "pipeline": "MeanQaQuestionAnsweringPipeline"}
    assert all(path.startswith("transformers_modules.") for path in classes.values()), classes
    torch = pytest.importorskip("torch")
    torch.testing.assert_close(torch.tensor(remote["start_logits"]), torch.tensor(result["start_logits"]))
    assert remote["fingerprints"] == [result["fingerprint"]] * 2


BROKEN = """
import json
import sys
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import hf_readonce
from hf_readonce.representations import FamilyEntryPointWarning, family_entry_point_failures, registered_families

print("warned:", json.dumps([str(w.message) for w in caught if issubclass(w.category, FamilyEntryPointWarning)]))
print("failures:", json.dumps(family_entry_point_failures()))
print("families:", json.dumps(sorted(registered_families())))
print("deformer:", hf_readonce.DeformerBertConfig.__module__)
print("importing:", hasattr(sys.modules.get("mean_qa_importing"), "IMPORTED"))  # its module ran to its end
"""


def lines_of(done) -> dict:
    """`{label: value}` of the `label: value` lines a script printed."""
    return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)


# a family module that imports names of hf-readonce that exist only once its packages are fully imported: a lazy name
# of `hf_readonce.representations`, a family name and a lazy name of `hf_readonce`
IMPORTING = """
import hf_readonce
from hf_readonce import DeformerBertConfig, RepresentationStore
from hf_readonce.representations import fill_store

import mean_qa_family.family  # registers the family

IMPORTED = (DeformerBertConfig, RepresentationStore, fill_store, hf_readonce.DeformerBertModel)
"""

# a family whose config class is named as hf-readonce's DeFormer config is
SHADOWING = """
from transformers import BertConfig, BertModel

from hf_readonce.representations import CardText, register_family


class DeformerBertConfig(BertConfig):
    model_type = "shadowing_bert"


class ShadowingBertModel(BertModel):
    config_class = DeformerBertConfig


register_family(name="shadowing", configs=(DeformerBertConfig,), auto_models={"AutoModel": ShadowingBertModel},
                auto_class="AutoModel", cards={"shadowing_bert": CardText(
                    tag="shadowing", title="Shadowing", paper="none", paragraphs=("none",),
                    pipeline_tag="feature-extraction", usage="none")})
"""

LATE = '''
import json
import sys
import warnings
from pathlib import Path

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import mean_qa_family.family  # registered by importing its module, before hf_readonce (no entry point loaded)
    import hf_readonce
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer

from hf_readonce.hub import publish
from hf_readonce.representations import FamilyEntryPointWarning, family_entry_point_failures
from hf_readonce.weights import minilm_path

print("warned:", json.dumps([str(w.message) for w in caught if issubclass(w.category, FamilyEntryPointWarning)]))
print("failures:", json.dumps(family_entry_point_failures()))
print("entry point modules:", json.dumps(sorted({"mean_qa_importing", "mean_qa_shadowing"} & set(sys.modules))))
print("families:", json.dumps(sorted(hf_readonce.representations.registered_families())))
print("exported:", getattr(hf_readonce, "MeanQaBertModel", None) is mean_qa_family.family.MeanQaBertModel)
print("listed:", "MeanQaBertModel" in hf_readonce.__all__ and "MeanQaBertModel" in dir(hf_readonce))
names = {}
exec("from hf_readonce import *", names)
print("star:", names.get("MeanQaPassageOutput") is mean_qa_family.family.MeanQaPassageOutput)
print("adapter:", hf_readonce.representations.MeanQaAdapter is mean_qa_family.family.MeanQaAdapter
      and "MeanQaAdapter" in hf_readonce.representations.__all__)
try:
    hf_readonce.MeanQaNoSuchName
except AttributeError as error:
    print("unknown:", error)
root = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(minilm_path())
config = AutoConfig.for_model("mean_qa_bert", vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=37)
AutoModelForQuestionAnswering.from_config(config).save_pretrained(root / "checkpoint")
tokenizer.save_pretrained(root / "checkpoint")
try:
    publish(root / "checkpoint", "someone/mean-qa", local_dir=root / "published")
except ValueError as error:
    print("refused:", error)
print("written:", (root / "published").exists())
'''


@pytest.fixture(scope="module")
def entry_points(tmp_path_factory):
    """The processes the entry point tests read, each run once: the example installed with four entry points
    (`broken`, a module that does not exist; `mean_qa`, the example's own; `importing`, [`IMPORTING`]; and
    `shadowing`, [`SHADOWING`]), its modeling file without the `register_for_auto_class` lines (registering a family
    needs none of them; `publish` does). `loaded`: [`BROKEN`]; `listing`: `python -m hf_readonce.cli info`;
    `skipped`: [`LATE`] with `HF_READONCE_NO_ENTRY_POINTS=true` (no entry point loaded, the family registered by
    importing its module)."""
    tmp_path = tmp_path_factory.mktemp("entry_points")
    site = install(tmp_path, {"hf_readonce.families": {"broken": "no_such_module_of_mean_qa",
                                                       "mean_qa": "mean_qa_family.family",
                                                       "importing": "mean_qa_importing",
                                                       "shadowing": "mean_qa_shadowing"}})
    (site / "mean_qa_importing.py").write_text(IMPORTING)
    (site / "mean_qa_shadowing.py").write_text(SHADOWING)
    modeling = site / "mean_qa_family" / "models" / "mean_qa" / "modeling_mean_qa.py"
    text = modeling.read_text()
    assert text.count(".register_for_auto_class(") == 3
    modeling.write_text("\n".join(line for line in text.splitlines() if ".register_for_auto_class(" not in line))
    return types.SimpleNamespace(
        loaded=run(tmp_path, site, BROKEN), listing=run(tmp_path, site, "hf_readonce.cli", "info", module=True),
        # as for HF_READONCE_TRACEBACK, any value but "" and "0" sets it
        skipped=run(tmp_path, site, LATE, tmp_path, HF_READONCE_NO_ENTRY_POINTS="true"))


def test_a_broken_family_entry_point_is_warned_about_and_left_out(entry_points):
    """An installed package whose family module fails to import: `import hf_readonce` still works, with hf-readonce's
    own families and the other packages' ones; a `FamilyEntryPointWarning` names the entry point, its package and the
    error, and `family_entry_point_failures()` lists it (the error line of a checkpoint no family knows names it:
    tests/test_cli_messages.py). A command says it in one line (`hf-readonce: warning: ...`) and goes on.
    `HF_READONCE_NO_ENTRY_POINTS` (any value but "" and "0") loads no entry point, and so warns of none."""
    done = entry_points.loaded
    assert done.returncode == 0, done.stderr[-3000:]
    lines = lines_of(done)
    warned = [line for line in json.loads(lines["warned"]) if "'broken'" in line]
    assert len(warned) == 1 and warned[0].startswith(
        "the hf-readonce family entry point 'broken' (no_such_module_of_mean_qa) of the package mean-qa-family 0.1.0 "
        "was not loaded: ModuleNotFoundError: No module named 'no_such_module_of_mean_qa'"), warned
    assert "fix or uninstall that package, or set HF_READONCE_NO_ENTRY_POINTS=1" in warned[0]
    assert sorted(json.loads(lines["failures"])) == ["broken", "shadowing"]  # shadowing: the test below
    families = json.loads(lines["families"])
    assert "deformer_bert" in families and "mean_qa" in families, families  # the others load all the same
    assert lines["deformer"].startswith("hf_readonce.models.deformer_bert"), lines

    listing = entry_points.listing
    assert listing.returncode == 0 and "family mean_qa:" in listing.stdout, listing.stderr[-3000:]
    said = listing.stderr.splitlines()
    assert len(said) == 2 and listing.stderr.endswith("\n") and "Traceback" not in listing.stderr, listing.stderr
    assert all(line.startswith("hf-readonce: warning: the hf-readonce family entry point '") for line in said), said
    assert {line.split("'")[1] for line in said} == {"broken", "shadowing"}, said  # one line each

    # the way out the warning names: no family of another package is loaded (nor warned about)
    skipped = entry_points.skipped
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    lines = lines_of(skipped)
    assert json.loads(lines["warned"]) == [] and json.loads(lines["failures"]) == {}
    assert json.loads(lines["entry point modules"]) == [], lines
    families = json.loads(lines["families"])  # its own families and the one whose module was imported
    assert "deformer_bert" in families and "mean_qa" in families and "shadowing" not in families, families


def test_a_family_module_may_import_any_name_of_hf_readonce(entry_points):
    """The entry point modules are imported once `hf_readonce` and `hf_readonce.representations` are complete, so a
    family module imports their names, lazy ones included, as any module does (not "cannot import name ... from
    partially initialized module"). A family whose class would replace a name `hf_readonce` re-exports for another
    family (`hf_readonce.DeformerBertConfig`) is refused, naming both, and the name stays the DeFormer config."""
    done = entry_points.loaded
    assert done.returncode == 0, done.stderr[-3000:]
    lines = lines_of(done)
    assert "mean_qa" in json.loads(lines["families"]) and "shadowing" not in json.loads(lines["families"]), lines
    assert "importing" not in json.loads(lines["failures"]) and lines["importing"] == "True", lines
    warned = [line for line in json.loads(lines["warned"]) if "'shadowing'" in line]
    assert len(warned) == 1 and "ValueError: family 'shadowing': its classes or exports named ['DeformerBertConfig'] "\
        "are other objects than family 'deformer_bert''s" in warned[0], warned
    assert lines["deformer"].startswith("hf_readonce.models.deformer_bert"), lines


def test_a_family_registered_late_is_exported_and_publish_needs_its_code(entry_points):
    """Without its entry point: the family registered by importing its module first is re-exported by hf_readonce
    all the same. Its modeling file without the `register_for_auto_class` lines: `save_pretrained` writes no code and
    no `auto_map`, so `publish` refuses it, naming the lines to add, and writes nothing."""
    done = entry_points.skipped
    assert done.returncode == 0, done.stderr[-4000:]
    lines = lines_of(done)
    assert lines["exported"] == "True" and lines["written"] == "False", done.stdout
    # and listed as the package's own families' names are (`dir`, `__all__`, `import *`), its adapter too
    assert lines["listed"] == lines["star"] == lines["adapter"] == "True", done.stdout
    assert lines["unknown"] == "module 'hf_readonce' has no attribute 'MeanQaNoSuchName'", done.stdout
    message = lines.get("refused", "")
    assert message.startswith("MeanQaBertConfig, MeanQaBertForQuestionAnswering never called "
                              "`register_for_auto_class`"), message
    assert ("`MeanQaBertConfig.register_for_auto_class()`; `MeanQaBertForQuestionAnswering.register_for_auto_class("
            "'AutoModelForQuestionAnswering')`") in message


def test_the_example_model_refuses_passages_it_did_not_read(monkeypatch):
    """The example's QA model reads passage states it computed (a store's, or `encode_passages`') as it reads the
    passages themselves, and refuses, naming the argument, states of another model (a silent wrong answer
    otherwise), passages that are not one per question and an object that is no `MeanQaPassageOutput`."""
    import torch

    monkeypatch.syspath_prepend(str(EXAMPLE))  # the modeling file alone: nothing is registered
    from mean_qa_family.models.mean_qa.configuration_mean_qa import MeanQaBertConfig
    from mean_qa_family.models.mean_qa.modeling_mean_qa import MeanQaBertForQuestionAnswering

    config = MeanQaBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    model, other = MeanQaBertForQuestionAnswering(config).eval(), MeanQaBertForQuestionAnswering(config).eval()
    questions, passages = torch.randint(5, 99, (2, 6)), torch.randint(5, 99, (2, 11))
    with torch.no_grad():
        read = model(input_ids=questions, passage_input_ids=passages)
        stored = model(input_ids=questions, passage_states=model.encode_passages(passages))
        torch.testing.assert_close(stored.start_logits, read.start_logits)
        torch.testing.assert_close(stored.end_logits, read.end_logits)
        with pytest.raises(ValueError, match="computed by another model"):
            model(input_ids=questions, passage_states=other.encode_passages(passages))
        with pytest.raises(ValueError, match=r"`passage_states.passage_states` must be of shape \(3, "):
            model(input_ids=torch.randint(5, 99, (3, 6)), passage_states=model.encode_passages(passages))
        with pytest.raises(TypeError, match="`passage_states` must be the MeanQaPassageOutput"):
            model(input_ids=questions, passage_states=model.encode_passages(passages).passage_states)


def test_the_example_pipeline_refuses_settings_it_would_not_apply(monkeypatch):
    """The example's pipeline takes `max_answer_len` and `max_passage_len` only, checked by name: a setting out of
    range or of another type, or an argument it does not take (`max_answer_length`, `top_k`), is refused naming it,
    at the call and at construction, instead of answering with another setting. Without a passage length, it reads
    at most the model's positions of a long context, and refuses a checkpoint's recorded length beyond them."""
    import torch
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    monkeypatch.syspath_prepend(str(EXAMPLE))  # the files a published checkpoint carries: nothing is registered
    from mean_qa_family.models.mean_qa.configuration_mean_qa import MeanQaBertConfig
    from mean_qa_family.models.mean_qa.modeling_mean_qa import MeanQaBertForQuestionAnswering
    from mean_qa_family.models.mean_qa.pipeline_mean_qa import MeanQaQuestionAnsweringPipeline

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = MeanQaBertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    qa = MeanQaQuestionAnsweringPipeline(model=MeanQaBertForQuestionAnswering(config).eval(), tokenizer=tokenizer)
    context = "Emma is a novel by Jane Austen, published in December 1815. " * 8  # over 64 tokens
    assert len(tokenizer(context)["input_ids"]) > 64
    answer = qa(question="Who wrote Emma?", context=context)
    assert answer == qa(question="Who wrote Emma?", context=context, max_passage_len=64)
    assert answer["answer"] == context[answer["start"]:answer["end"]]
    refused = [({"max_passage_len": 0}, ValueError, "`max_passage_len` must be >= 3, got 0"),
               ({"max_passage_len": 65}, ValueError, "`max_passage_len` must be at most the model's "
                                                     "max_position_embeddings=64, got 65"),
               ({"max_answer_len": 0}, ValueError, "`max_answer_len` must be >= 1, got 0"),
               ({"max_answer_len": 2.5}, TypeError, "`max_answer_len` must be an int"),
               ({"max_answer_length": 1}, TypeError, r"unexpected argument\(s\) \['max_answer_length'\]"),
               ({"top_k": 3}, TypeError, r"unexpected argument\(s\) \['top_k'\]")]
    for settings, error, message in refused:
        with pytest.raises(error, match=message):
            qa(question="Who wrote Emma?", context=context, **settings)
    with pytest.raises(ValueError, match="`max_answer_len` must be >= 1, got 0"):
        MeanQaQuestionAnsweringPipeline(model=qa.model, tokenizer=tokenizer, max_answer_len=0)
    short = MeanQaQuestionAnsweringPipeline(model=qa.model, tokenizer=tokenizer, max_answer_len=1)
    assert len(tokenizer(short(question="Who wrote Emma?", context=context)["answer"],
                         add_special_tokens=False)["input_ids"]) == 1
    # a checkpoint recording a passage length beyond its positions: refused by name, unless the call gives one
    recorded = MeanQaBertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                max_passage_length=100)
    long = MeanQaQuestionAnsweringPipeline(model=MeanQaBertForQuestionAnswering(recorded).eval(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"the checkpoint's `max_passage_length`=100 is beyond the model's "
                                         r"max_position_embeddings=64: pass `max_passage_len` \(3 to 64\)"):
        long(question="Who wrote Emma?", context=context)
    given = long(question="Who wrote Emma?", context=context, max_passage_len=64)
    assert given["answer"] == context[given["start"]:given["end"]]
