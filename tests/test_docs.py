"""The documentation site builds with warnings as errors, its generated pages come from the sources they describe,
and every example that the suite does not run says why."""

import argparse
import ast
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

DOC_FILES = [REPO_ROOT / "README.md"] + sorted(p for p in (REPO_ROOT / "docs").rglob("*.md")
                                               if "drafts" not in p.relative_to(REPO_ROOT / "docs").parts)
SKIP = re.compile(r"<!-- skip: (\S+)(.*?)-->")


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO_ROOT / "utils" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sybil_runs_the_examples():
    pytest.importorskip("sybil", reason="sybil (the dev extra) runs the examples of README.md and docs/")


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_skipped_example_gives_its_reason(path):
    text = path.read_text()
    for action, reason in SKIP.findall(text):
        assert action == "next", f"{path.name}: use `skip: next \"reason\"` (one block at a time), not {action}"
        assert re.fullmatch(r'\s*"[^"]{10,}"\s*', reason), f"{path.name}: a skipped example needs a quoted reason"
    # every fenced block is one Sybil runs (python, bash) or plain text
    for language in re.findall(r"^```(\S*)$", text, re.M):
        assert language in ("", "python", "bash", "text"), f"{path.name}: ```{language} blocks are not run"


def test_cli_reference_lists_every_command_and_option():
    from hf_readonce.cli import build_parser

    page = _hooks().render_cli_reference()
    parser = build_parser(family_options=True)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():
        assert f"## `hf-readonce {name}`" in page
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and action.help != argparse.SUPPRESS:
                    assert f"`{option}`" in page, (name, option)
    assert "`--distill`" in page  # the demo's own parser
    # a default the help states is not repeated as this machine's value
    assert "SUPPRESS" not in page and "shared/data`" not in page

def _option_aliases() -> dict[str, str]:
    """Each other spelling of a CLI option -> the spelling its help shows first (`{"--dtype": "--store-dtype"}`);
    argparse's `--x` / `--no-x` pairs are two options, not spellings of one."""
    from hf_readonce.cli import build_parser

    aliases = {}
    for command in build_parser(family_options=True).commands.values():
        for action in command._actions:
            spellings = [option for option in action.option_strings if option.startswith("--")]
            if len(spellings) < 2 or isinstance(action, argparse.BooleanOptionalAction):
                continue
            aliases.update(dict.fromkeys(spellings[1:], spellings[0]))
    return aliases


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_docs_name_an_option_by_its_shown_spelling(path):
    """An option with another spelling (`--store-dtype`, also `--dtype`) is named in the docs as its help shows it
    first; the other spelling appears only in a paragraph (or list item) that also names the shown one."""
    aliases = _option_aliases()
    assert aliases, "the CLI has no option with another spelling: this test checks nothing"
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)  # commands in blocks too, below
    blocks = re.split(r"\n\s*\n|\n(?=\s*[-*] )", text) + re.findall(r"^```.*?^```", path.read_text(), re.M | re.S)
    for block in blocks:
        for alias, shown in aliases.items():
            if re.search(rf"(?<![\w-]){re.escape(alias)}(?![\w-])", block):
                assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", block), \
                    f"{path.name}: {alias} named without {shown}, the spelling --help shows first:\n{block.strip()}"



# names a page shows as an example of what a user writes, not as a part of hf-readonce, and names that are no Python
# names: docs/contributing.md's new family's answer function, the entry point group of families of other packages
HYPOTHETICAL_NAMES = {"hf_readonce.tasks.my_bert_qa", "hf_readonce.families"}


@pytest.mark.parametrize("path", [*DOC_FILES, *sorted((REPO_ROOT / "model_cards").glob("*.md"))],
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_dotted_hf_readonce_name_exists(path):
    """Each `hf_readonce.module.name` a page or card names is importable as written: a module, or an attribute of
    the longest module prefix that imports (the recurrent card named `hf_readonce.tasks.evaluate_perplexity`, which
    lives in `hf_readonce.tasks.perplexity`)."""
    import importlib

    for name in sorted(set(re.findall(r"\bhf_readonce(?:\.\w+)+", path.read_text())) - HYPOTHETICAL_NAMES):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for attribute in parts[cut:]:
            assert hasattr(found, attribute), f"{path.name}: `{name}` does not exist ({found!r} has no {attribute})"
            found = getattr(found, attribute)


def test_benchmark_tables_come_from_every_results_file():
    hooks = _hooks()
    page = hooks.render_benchmark_tables()
    files = hooks.results_files()
    assert len(files) >= 10
    for path in files:
        assert f"### `{path.relative_to(hooks.RESULTS_DIR).as_posix()}`" in page
    # a figure in the table is the JSON's own value: each harness measurement's median and range
    kv = json.loads((hooks.RESULTS_DIR / "bench_kv_cache_smollm2.json").read_text())
    assert kv["schema"] == hooks.HARNESS_SCHEMA
    for m in kv["measurements"]:
        assert f"{hooks._format(m['median'])} [{hooks._format(m['min'])}–{hooks._format(m['max'])}]" in page, m["name"]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
                    reason="mkdocs and mkdocstrings (the docs and dev extras) build the site")
def test_a_model_page_joins_the_navigation_without_editing_mkdocs_yml(tmp_path):
    """`docs/models/<family>.md` is listed under "Model families" by the hook; listed pages are not repeated."""
    import yaml

    (tmp_path / "models").mkdir()
    for name in ("deformer_bert", "toy_bert"):
        (tmp_path / "models" / f"{name}.md").write_text(f"# The {name} family\n\ntext\n")
    nav = yaml.safe_load("nav:\n" + (REPO_ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1])["nav"]
    section = next(entry["Model families"] for entry in _hooks().model_pages_nav(nav, tmp_path)
                   if isinstance(entry, dict) and "Model families" in entry)
    uris = [uri for item in section for uri in item.values()]
    assert uris.count("models/deformer_bert.md") == 1 and section[-1] == {"The toy_bert family": "models/toy_bert.md"}


def test_site_builds_strict_with_no_warning(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")) if p))
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert not re.search(r"^WARNING", log, re.M), log[-4000:]
    site = tmp_path / "site"
    assert (site / "models" / "longdoc_bart" / "index.html").is_file()
    assert (site / "results" / "bench_break_even.png").is_file()  # result figures are part of the site
    assert not (site / "drafts").exists()
    cli = (site / "cli" / "index.html").read_text()
    assert "hf-readonce encode" in cli and "--compute-dtype" in cli


def test_changelog_is_a_product_changelog():
    text = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert len(text.splitlines()) <= 150
    assert re.search(r"^## \[0\.1\.0\] - ", text, re.M)
    categories = set(re.findall(r"^### (.+)$", text, re.M))
    assert categories <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, categories


@pytest.mark.parametrize("path", [REPO_ROOT / "CHANGELOG.md", *DOC_FILES,
                                  *sorted((REPO_ROOT / "model_cards").glob("*.md"))],
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_issue_numbers_or_history(path):
    """Docs, the changelog and the model cards describe the product, not how its work was organised."""
    text = path.read_text()
    assert not re.search(r"\bissues? ?#?\d+", text, re.I), path.name
    assert not re.search(r"previous release|earlier run|before this release|as \d+\.\d+\.x did|today's", text,
                         re.I), path.name
    assert not re.search(r"\bsessions?(?:'s)?\b", text, re.I), path.name


CARDS = sorted((REPO_ROOT / "model_cards").glob("*.md"))
# encode-once APIs that run without gradients themselves (`@torch.no_grad()`): their examples need no `no_grad` block
RUN_WITHOUT_GRADIENTS = {"block_attention": ("BlockAttentionLlamaForCausalLM", "encode_documents")}


def _encodes_once(call: ast.Call) -> bool:
    """`model.encode_passages(...)`, `model.encode_documents(...)` or `model.get_encoder()(...)`."""
    function = call.func
    if isinstance(function, ast.Attribute) and function.attr in ("encode_passages", "encode_documents"):
        return True
    return (isinstance(function, ast.Call) and isinstance(function.func, ast.Attribute)
            and function.func.attr == "get_encoder")


def _without_gradients(item: ast.withitem) -> bool:
    """`with torch.no_grad():` or `with torch.inference_mode():`."""
    context = item.context_expr
    return (isinstance(context, ast.Call) and isinstance(context.func, ast.Attribute)
            and context.func.attr in ("no_grad", "inference_mode"))


@pytest.mark.parametrize("path", [*DOC_FILES, *CARDS], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_states_read_once_are_cached_without_gradients(path):
    """An example that reads documents once and keeps the result (passage states, document representations, encoder
    outputs) does so under `torch.no_grad()` / `torch.inference_mode()`: a newcomer copies it to cache many passages,
    and outside such a block every cached output keeps its autograd graph (the encoder's activations) alive. (The
    README's quick start, the DeFormer page and the cards called `encode_passages` outside one.)"""
    family = next((name for name in RUN_WITHOUT_GRADIENTS if name in path.stem.replace("-", "_")), None)
    if family is not None:  # the method is decorated: check that it still is
        import hf_readonce

        cls, method = RUN_WITHOUT_GRADIENTS[family]
        source = inspect.getsource(getattr(getattr(hf_readonce, cls), method))
        assert source.lstrip().startswith("@torch.no_grad()"), f"{cls}.{method} no longer runs without gradients"
        return
    for block in re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M):
        tree = ast.parse(block)
        guarded = {id(node) for with_node in ast.walk(tree) if isinstance(with_node, ast.With)
                   and any(_without_gradients(item) for item in with_node.items) for node in ast.walk(with_node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _encodes_once(node):
                assert id(node) in guarded, (f"{path.name}: `{ast.unparse(node)}` (line {node.lineno} of its example) "
                                             "is not under `with torch.no_grad():`")


def test_demo_help_states_the_recorded_demo_time():
    """`hf-readonce demo --help` (the module docstring) gives the wall time and CPU of the recorded default run,
    `benchmarks/results/demo/deformer_demo.json`, which it names (it said 58 s on an Intel Xeon; the record is
    88.2 s on an AMD EPYC)."""
    from hf_readonce.recipes import demo

    record = json.loads((REPO_ROOT / "benchmarks/results/demo/deformer_demo.json").read_text())
    first = demo.__doc__.split("\n\n")[1].splitlines()[0]
    assert first.startswith(f"By default ({record['rows'][0]['demo_seconds']} s measured on "
                            f"{record['hardware']['logical_cpus']} cores of an {record['hardware']['cpu']}"), first
    assert "benchmarks/results/demo/deformer_demo.json" in first


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "model_cards").glob("*.md")), ids=lambda p: p.name)
def test_model_cards_speak_of_no_issue(path):
    """A model card is read on the Hub by people who never saw this project's tracker: no 'the issue asks ...'
    (two cards said so, from the warnings of their results files)."""
    assert not re.search(r"\bissue(s|'s)?\b", path.read_text(), re.I), path.name


def test_the_deformer_pages_training_commands_parse(monkeypatch):
    """The DeFormer page's training commands are not run (minutes to hours of training: a skipped example and the
    inline "How it was made" recipe with its follow-up runs), so their options are parsed here with
    `run_deformer_qa.py`'s own parser: a renamed or removed option fails here, not after a newcomer's copy-paste."""
    import shlex

    import transformers.training_args
    from transformers import HfArgumentParser, TrainingArguments

    for name in ("is_torch_bf16_gpu_available", "is_torch_bf16_cpu_available"):  # --bf16: parsed, not run
        if hasattr(transformers.training_args, name):
            monkeypatch.setattr(transformers.training_args, name, lambda *args, **kwargs: True)
    script = "examples/question-answering/run_deformer_qa.py"
    spec = importlib.util.spec_from_file_location("run_deformer_qa", REPO_ROOT / script)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    parser = HfArgumentParser((example.ModelArguments, example.DataArguments, TrainingArguments))
    page = (REPO_ROOT / "docs" / "models" / "deformer_bert.md").read_text()

    block = re.search(r'<!-- skip: next "trains for[^"]*" -->\s*```bash\n(.*?)```', page, re.S).group(1)
    command = next(line for line in block.replace("\\\n", " ").splitlines() if line.startswith("python "))
    argv = shlex.split(command.replace("$REF", "reference-qa-folder"))
    assert argv[1] == script
    model_args, data_args, training = parser.parse_args_into_dataclasses(args=argv[2:])
    assert model_args.num_decomposed_layers == 4 and data_args.allow_no_answer and training.max_steps == 300

    recipe = page.split("How it was made", 1)[1].split("Every candidate was chosen", 1)[0]
    spans = [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", recipe)]
    base = shlex.split(spans[0])
    assert base[:2] == ["python", script], spans[0]
    follow_ups = [shlex.split(span) for span in spans[1:] if span.startswith("--")]
    assert len(follow_ups) == 4, spans  # +800, KD on Quoref too, +2,000 (its steps), +1,500
    for extra in [[], *follow_ups]:
        model_args, data_args, training = parser.parse_args_into_dataclasses(args=base[2:] + extra)
        assert model_args.num_decomposed_layers == 3 and data_args.eval_paths == "both" and training.bf16
