"""benchmarks/bench_kv_cache.py: its FLOP bounds and store-size expectations at SmolLM2-135M dimensions, the
deterministic question/passage selection, and a tiny in-process run end to end with JSON output (no timing is
asserted: the run only has to produce every figure)."""

import json
import subprocess
import sys

import pytest
from transformers import LlamaConfig

from tests.conftest import REPO_ROOT, load_benchmark

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import harness  # noqa: E402

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, head_dim=64)


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_kv_cache")


def test_bounds_at_smollm2_dimensions(bench):
    config = LlamaConfig(**SMOLLM2)
    b = bench.bounds(config, passage_tokens=1000, question_tokens=15, new_tokens=16)
    assert b["kv_numbers_per_token"] == 2 * 30 * 3 * 64
    assert b["store_bytes_per_question"]["bfloat16"] == 11520 * 2 * 1000
    assert b["ttft_flop_bound"] == pytest.approx(58.1, abs=0.1)  # the figure of the script's docstring
    assert 1 < b["total_flop_bound"] < b["ttft_flop_bound"]
    # a prefill of T tokens costs at least 2 x non-embedding parameters x T
    non_embedding = 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536)
    assert bench.prefill_flops(config, 1000, 0) > 2 * non_embedding * 1000
    assert bench.prefill_flops(config, 10, 1000) > bench.prefill_flops(config, 10, 0)


@pytest.mark.parametrize("past_tokens", [0, 9])
def test_prefill_flops_is_what_torch_counts(bench, past_tokens):
    """The hand formula behind every KV-cache and selective-recompute FLOP bound equals torch's FLOP counter
    (`harness.count_flops`) on a Llama forward with grouped-query heads, keeping one position's logits as
    `generate` does, from scratch (exactly) and after cached tokens (within 2 %: there the mask is explicit and the
    kernel also scores the masked pairs, which the formula leaves out)."""
    import torch
    from transformers import DynamicCache, LlamaForCausalLM

    config = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=8, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    new = torch.randint(0, 97, (1, 7))
    with torch.no_grad():
        cache = DynamicCache(config=config)
        if past_tokens:
            model(torch.randint(0, 97, (1, past_tokens)), past_key_values=cache)
        counted = harness.count_flops(lambda: model(new, past_key_values=cache, logits_to_keep=1))
    assert counted == pytest.approx(bench.prefill_flops(config, 7, past_tokens), rel=0.02)


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
    doc = bench.main(["--tiny", "--questions", "2", "--passages", "2", "--passage_tokens", "24",
                      "--max_new_tokens", "2", "--threads", "1", "--load_repeats", "1", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved == doc and harness.validate(saved) == []
    extra = saved["extra"]
    assert extra["questions_timed"] == 2 and extra["passages_per_question"] == 2
    assert extra["prompt_tokens_mean"] > 2 * 20  # two passages of ~24 tokens and the question
    m = {entry["name"]: entry for entry in saved["measurements"]}
    for name in ("full ttft", "composed ttft cold", "composed ttft warm", "read cold", "read warm", "full total",
                 "composed total"):
        assert m[name]["n"] == 2 and m[name]["median"] > 0
    for temperature in ("cold", "warm"):
        share = m[f"read share of composed ttft ({temperature})"]
        # a ratio of two separately timed calls: no upper limit is asserted (timings, not logic; under load the
        # read alone can take longer than the composed call that includes it)
        assert share["min"] > 0 and share["bound"]["kind"] == "memory"
        assert m[f"ttft speed-up ({temperature} store read)"]["bound"]["kind"] == "flop"
    # the drop took effect: no page of the store's shards was resident right after it (None: mincore missing)
    assert all(f in (0.0, None) for f in extra["page_cache_resident_fraction_after_drop"])
    assert len(extra["page_cache_resident_fraction_after_drop"]) >= 4
    sizes = extra["store_bytes_per_1000_tokens"]
    assert sizes["float32"] > sizes["bfloat16"] and sizes["bfloat16"] == pytest.approx(sizes["float16"], rel=0.01)
    # every kv number is on disk: at least the expected bytes (ids and headers come on top)
    assert sizes["bfloat16"] >= extra["bounds"]["kv_numbers_per_token"] * 2 * 1000
    count = extra["passages"]
    for name in ("load float32 warm", "load bfloat16 warm", "load float16 warm", "load bfloat16 cold"):
        assert m[f"{name} ({count} passages)"]["n"] == 1 and f"recompute / {name}" in m
    assert 0 <= extra["same_greedy_answer_fraction"] <= 1
    assert saved["command"].startswith("python benchmarks/bench_kv_cache.py --tiny")


def test_passages_beyond_the_positions_exit_naming_the_option(tmp_path, data_dir):
    """The tiny model has 2,048 positions: 4 passages of 1,000 tokens do not fit."""
    done = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "bench_kv_cache.py"), "--tiny",
                           "--passages", "4", "--passage_tokens", "1000"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "--passage_tokens" in done.stderr and "Traceback" not in done.stderr
