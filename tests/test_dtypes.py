"""The one compute-dtype rule (`hf_readonce.dtypes`): auto = float32 on a CPU and the checkpoint's dtype elsewhere,
explicit requests kept; its verbatim copies in the pipelines that travel to the Hub; the adapters' loader; the
pipelines applying `pipeline(dtype=...)`; and the hint that names the compute dtype a store was written in."""

import ast
import inspect

import pytest
import torch

from hf_readonce import dtypes
from hf_readonce.dtypes import checkpoint_dtype, compute_dtype_hint, load_dtype, resolve_compute_dtype
from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
from hf_readonce.representations import DeformerBertAdapter
from tests.conftest import REPO_ROOT, tiny_model

MARKER = "# Copied from hf_readonce.dtypes.resolve_compute_dtype"


def test_the_rule():
    for saved in (torch.float16, torch.bfloat16, torch.float32, None):
        assert resolve_compute_dtype("auto", "cpu", saved) == torch.float32
        assert resolve_compute_dtype(None, torch.device("cpu"), saved) == torch.float32
        assert resolve_compute_dtype("auto", "cuda", saved) == (saved or torch.float32)
        assert resolve_compute_dtype("auto", torch.device("cuda", 1), saved) == (saved or torch.float32)
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        assert resolve_compute_dtype(name, "cpu", torch.float16) == dtype
        assert resolve_compute_dtype(dtype, "cuda", torch.float32) == dtype
    for bad in ("fp32", "int8", torch.int64, 3):
        with pytest.raises(ValueError, match="compute dtype must be"):
            resolve_compute_dtype(bad, "cpu", None)


def test_checkpoint_dtype_and_load_dtype():
    from transformers import BertConfig

    config = BertConfig()
    config.dtype = torch.float16
    assert checkpoint_dtype(config) == torch.float16 and checkpoint_dtype({"torch_dtype": "bfloat16"}) == torch.bfloat16
    assert checkpoint_dtype({}) is None and checkpoint_dtype({"dtype": "int8"}) is None
    assert load_dtype("auto", "cpu", config) == torch.float32 and load_dtype("auto", "cuda", config) == torch.float16


def test_pipeline_copies_are_verbatim():
    """Every pipeline under models/ holds the rule verbatim under the `# Copied from` marker (they cannot import
    hf_readonce where they travel)."""
    original = inspect.getsource(dtypes.resolve_compute_dtype)
    files = sorted((REPO_ROOT / "src" / "hf_readonce" / "models").glob("*/pipeline_*.py"))
    assert len(files) == 4
    for path in files:
        source = path.read_text()
        tree = ast.parse(source)
        (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "resolve_compute_dtype"]
        assert source.splitlines()[node.lineno - 2] == MARKER, path.name
        assert ast.get_source_segment(source, node) + "\n" == original, path.name


def test_adapter_loads_in_the_compute_dtype(tmp_path, tokenizer):
    model = tiny_model().to(torch.float16)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = DeformerBertAdapter.load_for_compute(str(tmp_path))
    assert loaded.dtype == torch.float32 and not loaded.training
    assert DeformerBertAdapter.load_for_compute(str(tmp_path), compute_dtype="bfloat16").dtype == torch.bfloat16
    loaded, info = DeformerBertAdapter.load_for_compute(str(tmp_path), compute_dtype="float16",
                                                         output_loading_info=True)
    assert loaded.dtype == torch.float16 and "missing_keys" in info
    with pytest.raises(ValueError, match="compute dtype must be"):
        DeformerBertAdapter.load_for_compute(str(tmp_path), compute_dtype="fp8")


def test_pipeline_applies_the_rule_to_pipeline_dtype(tokenizer):
    """`pipeline(...)` passes `dtype="auto"` by default: a float16 model computes in float32 on the CPU; an explicit
    dtype is kept; a pipeline built directly from a model object keeps the model's dtype."""
    assert DeformerQuestionAnsweringPipeline(model=tiny_model().half(), tokenizer=tokenizer,
                                             dtype="auto").model.dtype == torch.float32
    assert DeformerQuestionAnsweringPipeline(model=tiny_model().half(), tokenizer=tokenizer,
                                             dtype=torch.bfloat16).model.dtype == torch.bfloat16
    assert DeformerQuestionAnsweringPipeline(model=tiny_model().half(), tokenizer=tokenizer).model.dtype == torch.float16


def test_compute_dtype_hint_names_the_dtype_of_the_same_weights():
    model = tiny_model().half()
    stored = model.representation_fingerprint()
    fp32 = tiny_model().half().float()  # the same (fp16-exact) weights, computing in float32
    assert fp32.representation_fingerprint() != stored  # keyed apart: the compute dtype is in the fingerprint
    assert compute_dtype_hint(fp32, [stored]) == torch.float16
    assert compute_dtype_hint(fp32, [tiny_model(seed=1).representation_fingerprint()]) is None  # other weights
    assert compute_dtype_hint(fp32, []) is None
    assert fp32.dtype == torch.float32  # the model itself is untouched


def test_compute_dtype_hint_reloads_to_find_a_wider_dtype():
    """float32 states, a bfloat16 model: bfloat16 weights cast back are not the float32 weights, so only reloading
    the checkpoint in float32 (`load`) finds the dtype."""
    stored = tiny_model().representation_fingerprint()  # float32
    bf16 = tiny_model().to(torch.bfloat16)
    assert compute_dtype_hint(bf16, [stored]) is None  # cast back: other numbers
    loads = []

    def load(dtype):
        loads.append(dtype)
        return tiny_model().to(dtype)

    assert compute_dtype_hint(bf16, [stored], load=load) == torch.float32
    assert loads == [torch.float32]
