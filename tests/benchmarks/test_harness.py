"""benchmarks/harness.py: round-robin order, per-round ratios, the results schema (and every results file under
benchmarks/results/ that a benchmark script wrote has it), cold reads, and bad options exiting with a message that
names them. No timing is asserted."""

import json
import os
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import harness  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results"


def written_by_a_benchmark(path) -> bool:
    """A results file of a `benchmarks/bench_*.py` script: named after one, or recording such a command, or
    claiming the harness schema. (Evaluation tables in sub-folders and `trivial_baselines.json` are not timings;
    files that predate the harness live in `benchmarks/results/legacy/`, excluded.)"""
    if path.name.startswith(("bench_", "cli_vs_api")):
        return True
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        return False
    return isinstance(doc, dict) and ("schema" in doc or str(doc.get("command", "")).startswith(
        "python benchmarks/bench_"))


def test_calls_run_round_robin_after_the_warm_up():
    order = []
    times = harness.interleave({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=3,
                               warmup=1, before=lambda name: order.append(f"before {name}"))
    calls = [c for c in order if not c.startswith("before")]
    assert calls == ["a", "b"] * 4  # 1 warm-up round + 3 timed rounds, A B A B
    assert order[:2] == ["before a", "a"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3} and all(t >= 0 for t in times["a"])
    with pytest.raises(ValueError, match="repeats"):
        harness.interleave({"a": lambda: None}, repeats=0)


def test_ratios_are_formed_per_round_and_summarized():
    entry = harness.Results("bench_x", ["--n", "1"]).add_ratio("r", [2.0, 6.0, 3.0], [1.0, 2.0, 3.0],
                                                              harness.bound("flop", 2.5, "test"))
    assert entry["repeats"] == [2.0, 3.0, 1.0] and entry["median"] == 2.0
    assert (entry["min"], entry["max"], entry["n"], entry["unit"]) == (1.0, 3.0, 3, "x")
    with pytest.raises(ValueError, match="equal lengths"):
        harness.paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="value and a derivation"):
        harness.bound("flop")


def test_results_have_the_schema_and_broken_ones_are_caught(tmp_path):
    results = harness.Results("bench_x", ["--lengths", "4096 8192"], settings={"path": tmp_path}, note="shared")
    results.add("t", [0.3, 0.1, 0.2, 0.5, 0.4])
    results.extra["n"] = float("nan")  # not JSON: written as null
    doc = results.write(tmp_path / "out" / "x.json")
    saved = json.loads((tmp_path / "out" / "x.json").read_text())
    assert saved == doc and harness.validate(saved, harness.MIN_REPEATS) == []
    assert saved["command"] == "python benchmarks/bench_x.py --lengths '4096 8192'"
    assert saved["hardware"]["note"] == "shared" and saved["versions"]["torch"] and saved["extra"]["n"] is None
    assert saved["measurements"][0]["bound"]["kind"] == "none" and saved["measurements"][0]["median"] == 0.3
    broken = json.loads(json.dumps(saved))
    broken["measurements"][0]["median"] = 0.1  # not the median of its repeats
    del broken["measurements"][0]["repeats"][-1]  # and n no longer matches
    assert harness.validate(broken)
    assert harness.validate(saved, min_repeats=6)  # 5 repeats are too few for 6
    assert any("missing field" in p for p in harness.validate({"schema": harness.SCHEMA}))
    with pytest.raises(ValueError, match="twice"):
        results.add("t", [1.0])


@pytest.mark.parametrize("path", sorted(p for p in RESULTS.glob("*.json") if written_by_a_benchmark(p)),
                         ids=lambda p: p.name)
def test_every_results_file_has_the_schema(path):
    """Each results file a benchmark script wrote: the schema, and at least 5 repeats for every time and ratio."""
    assert harness.validate(json.loads(path.read_text()), min_repeats=harness.MIN_REPEATS) == []


def test_results_files_exist_besides_the_legacy_ones():
    assert any(written_by_a_benchmark(p) for p in RESULTS.glob("*.json"))
    assert (RESULTS / "legacy").is_dir()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_flop_count_of_a_bert_forward_is_the_textbook_count(attention):
    """`count_flops` (the source of the break-even FLOP bounds) counts a BERT forward exactly: per layer 8 t d^2
    (Q, K, V, output projections) + 4 t d f (feed-forward) + 4 t^2 d (scores and weighted sum), plus the pooler's
    2 d^2; with SDPA on the CPU too, whose kernel torch's own table lacks."""
    import torch
    from transformers import BertConfig, BertModel

    t, d, f, layers = 11, 32, 48, 3
    model = BertModel(BertConfig(vocab_size=50, hidden_size=d, num_hidden_layers=layers, num_attention_heads=4,
                                 intermediate_size=f, attn_implementation=attention)).eval()
    ids = torch.randint(0, 50, (1, t))
    with torch.no_grad():
        counted = harness.count_flops(lambda: model(ids))
    assert counted == layers * (8 * t * d * d + 4 * t * d * f + 4 * t * t * d) + 2 * d * d


def test_flop_count_of_causal_sdpa_keeps_the_causal_pairs():
    import torch

    query, keys = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8)
    per_pair = 2 * 2 * 3 * (8 + 8)  # scores + weighted sum, 2 rows x 3 heads
    attend = torch.nn.functional.scaled_dot_product_attention
    assert harness.count_flops(lambda: attend(query, keys, keys)) == 5 * 7 * per_pair
    assert harness.count_flops(lambda: attend(keys, keys, keys, is_causal=True)) == 7 * 8 // 2 * per_pair
    assert harness.count_flops(lambda: attend(query, keys, keys, is_causal=True)) == 5 * 6 // 2 * per_pair


def test_drop_page_cache_makes_a_file_cold(tmp_path):
    path = tmp_path / "shard.bin"
    path.write_bytes(os.urandom(1 << 20))
    path.read_bytes()
    if harness.cached_fraction([tmp_path]) is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("mincore/posix_fadvise unavailable")
    if harness.cached_fraction([tmp_path]) == 0.0:
        pytest.skip("this file system keeps no page cache for the file (nothing to drop)")
    assert harness.drop_page_cache([tmp_path]) is True
    assert harness.cached_fraction([tmp_path]) == 0.0
    path.read_bytes()
    assert harness.cached_fraction([tmp_path]) == 1.0


def _run(script: str, argv: list[str]):
    import importlib.util

    spec = importlib.util.spec_from_file_location(script, REPO_ROOT / "benchmarks" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


@pytest.mark.parametrize(("script", "argv", "option"), [
    ("bench_break_even", ["--longdoc_tokens", "20000"], "--longdoc_tokens"),
    ("bench_break_even", ["--families", "deformer,sparse"], "--families"),
    ("bench_longdoc", ["--lengths", "32768"], "--lengths"),
    ("bench_longdoc", ["--types", "dilated"], "--types"),
    ("bench_longdoc_reuse", ["--document_tokens", "20000"], "--document_tokens"),
    ("bench_deformer", ["--passage_length", "600"], "--passage_length"),
    ("bench_readonce", ["--passage_tokens", "2000"], "--passage_tokens"),
    ("bench_readtwice", ["--segment_length", "1024"], "--segment_length"),
    ("bench_recurrent", ["--window_size", "4096"], "--window_size"),
    ("bench_recurrent", ["--throughput_modes", "inference,decode"], "--throughput_modes"),
    ("bench_recurrent_memory", ["--size", "tiny", "--window_size", "1000"], "--window_size"),
    ("bench_store", ["--parts", "5"], "--parts"),
    ("bench_store", ["--parts", "1", "4", "--flops_only"], "--flops_only"),
    ("bench_store", ["--parts", "3", "--max_passages", "2"], "--max_passages"),
    ("bench_store", ["--parts", "3", "--flops_only", "--max_passages", "0"], "--max_passages"),
])
def test_bad_options_exit_naming_the_option(script, argv, option, capsys):
    """Before any model is built: status 2 and the option named on stderr (the script's own message)."""
    with pytest.raises(SystemExit) as raised:
        _run(script, argv)
    assert raised.value.code == 2 and option in str(raised.value) and option in capsys.readouterr().err


def test_bench_store_counts_the_flop_bound_of_answering_from_the_store(capsys):
    """Part 4's speed-up bound is counted (`count_flops` on one pass of each path over the same questions), not left
    out: the plain path reads every pair at every layer, so it does more FLOPs than the store path. `--flops_only`
    times nothing and writes no results file."""
    data = os.environ.get("HF_READONCE_DATA", str(REPO_ROOT.parent / "shared" / "data"))
    validation = REPO_ROOT.joinpath(data, "disfl_qa", "validation.jsonl")  # an absolute `data` replaces REPO_ROOT
    if not validation.is_file():
        pytest.skip(f"{validation} not found; set $HF_READONCE_DATA")
    doc = _run("bench_store", ["--parts", "4", "--flops_only", "--max_questions", "3", "--threads", "1"])
    answer = doc["extra"]["answer"]
    assert doc["measurements"] == []
    assert answer["flop_ratio"] == answer["flops_plain"] / answer["flops_store"] > 1
    assert f"FLOP bound of the speed-up {answer['flop_ratio']:.2f}x" in capsys.readouterr().out


def test_bench_store_counts_the_flop_bound_of_encoding_with_two_processes(capsys):
    """Part 3 compares `hf-readonce encode` with 1 and 2 processes on the same cores; `--flops_only` counts both
    runs' FLOPs (`count_flops` on `fill_store` with the CLI's adapter, one process and each of 2 processes' shares),
    times nothing and writes no results file. Both runs encode the same passages, so the FLOP ratio is the bound of
    their documents/s ratio, and one share alone is the ceiling with a core per process."""
    data = os.environ.get("HF_READONCE_DATA", str(REPO_ROOT.parent / "shared" / "data"))
    if not REPO_ROOT.joinpath(data, "disfl_qa", "validation.jsonl").is_file():
        pytest.skip("Disfl-QA validation not found; set $HF_READONCE_DATA")
    doc = _run("bench_store", ["--parts", "3", "--flops_only", "--max_passages", "6", "--threads", "1"])
    flops = doc["extra"]["encode_flops"]
    one, two = flops["flops_1_process"], flops["flops_2_processes"]
    assert doc["measurements"] == [] and flops["documents"] == 6 and len(two) == 2 and one > 0
    assert flops["flop_ratio"] == one / sum(two) and flops["largest_share_bound"] == one / max(two)
    assert flops["largest_share_bound"] >= flops["flop_ratio"]
    assert f"FLOP bound of the documents/s ratio on the same cores {flops['flop_ratio']:.2f}x" in capsys.readouterr().out


@pytest.mark.parametrize("script", sorted(p.stem for p in (REPO_ROOT / "benchmarks").glob("bench_*.py")))
def test_every_timing_benchmark_takes_threads(script, capsys):
    """`--threads` exists (the results record the count used) and a bad count stops before any work, named."""
    with pytest.raises(SystemExit) as raised:
        _run(script, ["--threads", "0"])
    assert raised.value.code == 2 and "--threads" in capsys.readouterr().err


def test_benchmarks_set_threads_only_through_the_harness():
    """Every script sets its thread count with `harness.set_threads`, so child processes get `OMP_NUM_THREADS` too."""
    direct = [p.name for p in (REPO_ROOT / "benchmarks").glob("*.py")
              if p.name != "harness.py" and "torch.set_num_threads(" in p.read_text()]
    assert direct == []


def test_set_threads_sets_torch_and_child_processes(monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        assert harness.set_threads(None) == before and "OMP_NUM_THREADS" not in os.environ
        assert harness.set_threads(1) == 1 and torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
        for bad in (0, -2, 1.5, True, "2"):
            with pytest.raises(ValueError, match="--threads"):
                harness.set_threads(bad)
    finally:
        torch.set_num_threads(before)
