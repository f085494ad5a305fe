"""Every model family as a Hub user meets it: a tiny random model of each family with the MiniLM tokenizer, published
with `publish`, then loaded in ONE fresh process where `import hf_readonce` fails (by folder, or by repo id from the
local Hub server) with `AutoModel*.from_pretrained(..., trust_remote_code=True)` and `pipeline(task, ...,
trust_remote_code=True)`. The same probe code runs on the in-process model, and the same pipeline calls on the
package's pipelines, so the two sides can be compared value for value.

Used by `tests/hub/test_publish_families.py` (folders) and `tests/hub/test_local_hub_server.py` (repo ids). One
subprocess loads all families: importing torch and transformers dominates a fresh process's time."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tests.conftest import BLOCK_HF_READONCE

LLAMA_TINY = dict(vocab_size=30522, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, bos_token_id=101, eos_token_id=102, pad_token_id=0)
GENERATE = {"max_new_tokens": 6, "do_sample": False, "return_full_text": False}


@dataclass
class FamilyCase:
    """One family: how to build it, the Auto class that loads it, a probe (Python source run with `model`,
    `tokenizer` and `torch` in scope, under `torch.no_grad()`, that sets `outputs`, a dict of tensors) and the
    pipeline calls `(task, args, kwargs)` a user makes."""

    name: str
    build: object
    auto_class: str
    probe: str
    calls: list = field(default_factory=list)
    pipeline_tag: str = ""
    method_tag: str = ""


def _cases() -> list:
    """Every registered family's `CASES` (`tests/models/<family>/cases.py`), in registration order; a family without
    a cases module fails here, naming it."""
    from hf_readonce.representations import registered_families

    found = []
    for spec in registered_families().values():
        try:
            module = importlib.import_module(f"tests.models.{spec.name}.cases")
        except ModuleNotFoundError as error:
            raise AssertionError(f"family {spec.name!r} has no tests/models/{spec.name}/cases.py ({error})") from None
        found += module.CASES
    return found


def __getattr__(name):
    # `CASES` and `CASE_BY_NAME` are built on first access: a family's cases module imports `FamilyCase` from here
    if name in ("CASES", "CASE_BY_NAME"):
        cases = _cases()
        globals().update(CASES=cases, CASE_BY_NAME={case.name: case for case in cases})
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_probe(case: FamilyCase, model, tokenizer) -> dict:
    """`case.probe` on `model`: the dict of tensors it sets as `outputs`."""
    namespace = {"model": model, "tokenizer": tokenizer, "torch": torch}
    with torch.no_grad():
        exec(case.probe, namespace)
    return namespace["outputs"]


def in_process_pipeline(task: str, model, tokenizer):
    """The pipeline a user of the package gets in-process for `task` and this model: the family's own pipeline
    class (transformers keeps one class per task, so it is built directly) or transformers' text-generation."""
    from transformers import pipeline

    from hf_readonce.representations import family_of

    pipeline_class = family_of(model.config.model_type).pipelines.get(task)
    if pipeline_class is not None:
        return pipeline_class(model=model, tokenizer=tokenizer)
    return pipeline(task, model=model, tokenizer=tokenizer)


def publish_all(root: Path, tokenizer, repo_prefix: str = "someone/tiny-") -> dict:
    """Publish every case under `root`. Returns name -> {"repo_id", "folder", "result", "probe", "pipelines"}, with
    the in-process model's probe outputs and pipeline outputs (JSON-normalized)."""
    from hf_readonce.hub.publish import publish

    published = {}
    for case in __getattr__("CASES"):
        model = case.build()
        source = root / "checkpoints" / case.name
        model.save_pretrained(source)
        tokenizer.save_pretrained(source)
        repo_id = repo_prefix + case.name.replace("_", "-")
        result = publish(source, repo_id, local_dir=root / "published" / case.name)
        outputs = []
        for task, args, kwargs in case.calls:
            pipe = in_process_pipeline(task, model, tokenizer)
            outputs.append(json.loads(json.dumps(pipe(*args, **kwargs))))
        published[case.name] = {"repo_id": repo_id, "folder": result.folder, "result": result,
                                "probe": run_probe(case, model, tokenizer), "pipelines": outputs}
    return published


LOADER = """
import json, os, sys, traceback
try:
    import hf_readonce
    raise SystemExit("hf_readonce was importable")
except ImportError:
    pass
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoTokenizer, pipeline

spec = json.load(open(SPEC))
torch.set_num_threads(spec["threads"])
results = {}
for case in spec["cases"]:
    name, source = case["name"], case["source"]
    result = results[name] = {"error": None}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = getattr(transformers, case["auto_class"]).from_pretrained(source, trust_remote_code=True).eval()
        result["model_class"] = type(model).__module__ + "." + type(model).__name__
        namespace = {"model": model, "tokenizer": tokenizer, "torch": torch}
        with torch.no_grad():
            exec(case["probe"], namespace)
        save_file({k: v.contiguous() for k, v in namespace["outputs"].items()}, name + ".safetensors")
        result["pipelines"] = []
        for task, args, kwargs in case["calls"]:
            pipe = pipeline(task, model=source, trust_remote_code=True)
            result["pipelines"].append({"class": type(pipe).__module__ + "." + type(pipe).__name__,
                                        "model_class": type(pipe.model).__module__ + "." + type(pipe.model).__name__,
                                        "output": pipe(*args, **kwargs)})
    except Exception:
        result["error"] = traceback.format_exc()
json.dump(results, open("results.json", "w"))
print("DONE", sorted(results))
"""


def load_without_hf_readonce(sources: dict, workdir: Path, env: dict | None = None, timeout: int = 600) -> dict:
    """Load every case from `sources` (name -> folder or repo id) in one fresh process where `import hf_readonce`
    fails. Returns name -> {"error", "model_class", "pipelines": [{"class", "model_class", "output"}], "probe":
    dict of tensors}; raises AssertionError with the process's stderr if it fails as a whole."""
    from safetensors.torch import load_file

    workdir.mkdir(parents=True, exist_ok=True)
    spec = {"threads": torch.get_num_threads(),
            "cases": [{"name": name, "source": str(source), "auto_class": __getattr__("CASE_BY_NAME")[name].auto_class,
                       "probe": __getattr__("CASE_BY_NAME")[name].probe, "calls": __getattr__("CASE_BY_NAME")[name].calls}
                      for name, source in sources.items()]}
    (workdir / "spec.json").write_text(json.dumps(spec))
    script = BLOCK_HF_READONCE + f"\nSPEC = {str(workdir / 'spec.json')!r}\n" + textwrap.dedent(LOADER)
    if env is None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    run = subprocess.run([sys.executable, "-c", script], cwd=workdir, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0 and (workdir / "results.json").is_file(), run.stderr[-5000:]
    results = json.loads((workdir / "results.json").read_text())
    for name, result in results.items():
        if result["error"] is None:
            result["probe"] = load_file(workdir / f"{name}.safetensors")
    return results


def assert_same_as_in_process(name: str, loaded: dict, expected: dict) -> None:
    """The loaded model's probe outputs equal the in-process model's (exactly), its class comes from the folder's
    own code (`transformers_modules`), and each pipeline is the family's (not hf_readonce's) with the in-process
    pipeline's output."""
    assert loaded["error"] is None, f"{name}:\n{loaded['error']}"
    assert loaded["model_class"].startswith("transformers_modules."), loaded["model_class"]
    probe = loaded["probe"]
    assert probe.keys() == expected["probe"].keys()
    for key, value in expected["probe"].items():
        assert probe[key].shape == value.shape and probe[key].dtype == value.dtype, key
        assert torch.equal(probe[key], value), f"{name}: {key} differs by {(probe[key] - value).abs().max()}"
    case = __getattr__("CASE_BY_NAME")[name]
    assert len(loaded["pipelines"]) == len(case.calls)
    for (task, _, _), got, want in zip(case.calls, loaded["pipelines"], expected["pipelines"]):
        assert "hf_readonce" not in got["class"] and "hf_readonce" not in got["model_class"], got
        assert got["model_class"].startswith("transformers_modules."), got["model_class"]
        assert got["output"] == want, f"{name} {task}: {got['output']} != {want}"
        assert _compared(want), f"{name} {task}: only empty outputs, nothing compared"


TEXT_KEYS = ("answer", "generated_text", "summary_text")


def _compared(output) -> bool:
    """Whether a pipeline output holds something to compare: a non-blank answer / generated / summary string (a
    text output's scores alone do not count), or, in an output without text (feature extraction), a number."""
    if isinstance(output, dict):
        texts = [value for key, value in output.items() if key in TEXT_KEYS]
        if texts:
            return any(isinstance(text, str) and text.strip() for text in texts)
        return any(_compared(value) for value in output.values())
    if isinstance(output, list):
        return any(_compared(item) for item in output)
    return isinstance(output, (int, float)) and not isinstance(output, bool)
