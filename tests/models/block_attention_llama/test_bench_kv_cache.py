"""benchmarks/bench_kv_cache.py: its FLOP bounds and store-size expectations at SmolLM2-135M dimensions, the
deterministic question/passage selection, and a tiny in-process run end to end with JSON output (no timing is
asserted: the run only has to produce every figure)."""

import importlib.util
import json

import pytest
from transformers import LlamaConfig

from tests.conftest import REPO_ROOT

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, head_dim=64)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_kv_cache", REPO_ROOT / "benchmarks" / "bench_kv_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bounds_at_smollm2_dimensions(bench):
    config = LlamaConfig(**SMOLLM2)
    b = bench.bounds(config, passage_tokens=1000, question_tokens=15, new_tokens=16)
    assert b["kv_numbers_per_token"] == 2 * 30 * 3 * 64
    assert b["store_bytes_per_question"]["bfloat16"] == 11520 * 2 * 1000
    assert b["ttft_flop_bound"] == pytest.approx(58.6, abs=0.1)  # the figure of the script's docstring
    assert 1 < b["total_flop_bound"] < b["ttft_flop_bound"]
    # a prefill of T tokens costs at least 2 x non-embedding parameters x T
    non_embedding = 30 * (2 * 576 * 576 + 2 * 2 * 576 * 192 + 3 * 576 * 1536)
    assert bench.prefill_flops(config, 1000, 0) > 2 * non_embedding * 1000
    assert bench.prefill_flops(config, 10, 1000) > bench.prefill_flops(config, 10, 0)


def test_questions_are_chosen_deterministically(bench):
    rows = [{"id": str(i), "question": f"q{i}?", "context": f"passage {i // 2}"} for i in range(10)]
    questions = bench.build_questions(rows, 3, 4)
    assert [q["id"] for q in questions] == ["0", "2", "4"]
    assert questions[1]["contexts"] == ["passage 1", "passage 2", "passage 3", "passage 4"]
    assert questions[2]["contexts"][-1] == "passage 0"  # cyclic
    assert bench.build_questions(rows, 3, 4) == questions
    with pytest.raises(ValueError, match="distinct passages"):
        bench.build_questions(rows, 3, 6)


def test_tiny_run_end_to_end(bench, tmp_path, data_dir):
    out = tmp_path / "bench.json"
    results = bench.main(["--tiny", "--questions", "2", "--passages", "2", "--passage_tokens", "24",
                          "--max_new_tokens", "2", "--threads", "1", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["questions_timed"] == 2 == results["questions_timed"] and saved["passages_per_question"] == 2
    assert saved["prompt_tokens_mean"] > 2 * 20  # two passages of ~24 tokens and the question
    for name in ("full_ttft", "composed_ttft", "composed_read", "full_total", "composed_total"):
        assert saved["timing_seconds"][name]["median"] > 0
    assert saved["timing_seconds"]["composed_read"]["median"] < saved["timing_seconds"]["composed_ttft"]["median"]
    sizes = saved["store_bytes_per_1000_tokens"]
    assert sizes["float32"] > sizes["bfloat16"] and sizes["bfloat16"] == pytest.approx(sizes["float16"], rel=0.01)
    # every kv number is on disk: at least the expected bytes (ids and headers come on top)
    assert sizes["bfloat16"] >= saved["bounds"]["kv_numbers_per_token"] * 2 * 1000
    load = saved["load_vs_recompute"]
    assert set(load["recompute_over_load"]) == {"float32", "bfloat16", "float16"} and load["recompute_seconds"] > 0
    assert 0 <= saved["same_greedy_answer_fraction"] <= 1 and saved["ttft_speedup"] > 0
    assert saved["command"].startswith("python benchmarks/bench_kv_cache.py --tiny")
