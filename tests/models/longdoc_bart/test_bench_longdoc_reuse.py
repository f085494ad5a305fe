"""benchmarks/bench_longdoc_reuse.py: summaries from stored encoder outputs equal those of re-encoding (every
summary kind, tiny dimensions, real XSum text and the packaged tokenizer), and its FLOP bounds are consistent
(no timing is asserted)."""

import importlib.util

import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_longdoc_reuse",
                                                  REPO_ROOT / "benchmarks" / "bench_longdoc_reuse.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_run_gives_identical_summaries(bench, tmp_path):
    result = bench.main(["--documents", "1", "--document_tokens", "200", "--d_model", "32", "--heads", "2", "--ffn",
                         "48", "--layers", "1", "--radius", "8", "--store_dtype", "float32", "--json",
                         str(tmp_path / "reuse.json")])
    assert result["identical_summaries"] == f"{len(bench.SUMMARIES)}/{len(bench.SUMMARIES)}"
    # reusing saves S - 1 encoder passes of S: the bound lies between 1 and S, and counting the fill lowers it (the
    # figures are rounded to 2 decimals, and at these tiny dimensions the LM head dominates, so they may tie)
    assert 1 < result["flop_bound_with_fill"] <= result["flop_bound_summaries"] < len(bench.SUMMARIES) + 1
    assert result["store_bytes_per_document"] == 200 * 32 * 4
    assert (tmp_path / "reuse.json").is_file()


def test_too_little_text_raises_naming_the_flag(bench, tmp_path):
    data = tmp_path / "tiny.jsonl"
    data.write_text('{"document": "one short article"}\n')
    with pytest.raises(ValueError, match="--data"):
        bench.main(["--data", str(data), "--documents", "1", "--document_tokens", "100", "--d_model", "16",
                    "--heads", "2", "--ffn", "16", "--layers", "1", "--radius", "4"])
