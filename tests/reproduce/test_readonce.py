"""reproduce/readonce.py --smoke: baseline and k = 2 from a tiny random BERT, QA then XSum (ReadOnce on stored
representations), two CPU steps each, the trivial baselines beside."""

import json

from tests.reproduce.conftest import check_results, entry_point


def test_readonce_smoke(tmp_path, data_dir, tiny_bert):
    readonce = entry_point("readonce")
    out, pack = tmp_path / "out", tmp_path / "pack"
    assert readonce.main(["--smoke", "--warm_start", str(tiny_bert), "--variants", "baseline", "2",
                          "--eval_compression_ratios", "4", "--output_dir", str(out), "--data_dir", str(data_dir),
                          "--pack_dir", str(pack)]) == 0
    results = check_results(out / "results.json", rows=2)
    baseline, k2 = results["rows"]
    assert (baseline["row"], k2["row"], k2["compression_ratio"]) == ("baseline", "k2", 2)
    for row in (baseline, k2):
        assert row["qa"]["training"]["train_steps"] == 2 and row["xsum"]["training"]["train_steps"] == 2
        assert row["qa"]["disfl_qa"]["examples"] == row["qa"]["quoref"]["examples"] == 4
        assert 0 <= row["xsum"]["rougeL"] <= 100
    assert set(k2["qa"]["disfl_qa"]["at_k"]) == {"4"} and set(k2["qa_f1_below_baseline"]) == {"disfl_qa", "quoref"}
    # the XSum ReadOnce run read stored representations (stage 2 only, document encoder frozen)
    xsum = json.loads((out / "xsum_k2" / "readonce_results.json").read_text())
    assert "stage1_train_loss" not in xsum and xsum["store_documents"] > 0
    assert set(results["baselines"]) == {"disfl_qa", "quoref", "xsum"}
    assert {"always_empty", "first_span", "first_sentence"} == set(results["baselines"]["quoref"])
    assert results["baselines"]["disfl_qa"]["always_empty"]["f1"] == 0.0  # answerable questions only
    assert set(results["baselines"]["xsum"]) == {"lead_1", "lead_3"}
    assert {p.name for p in entry_point("_common").unpack(pack, tmp_path / "u")} == {"results.json", "model_card.md"}


def test_model_card_section_shows_only_the_stages_that_ran():
    """A QA-only run (`--stages qa`) gets a section without XSum columns or an XSum article count (it once printed
    "ROUGE on None validation articles" and empty XSum columns); a run of both stages keeps both."""
    readonce = entry_point("readonce")
    qa = {"training": {"train_steps": 10},
          **{d: {"exact_match": 1.0, "f1": 2.0, "examples": 5} for d in ("disfl_qa", "quoref")}}
    xsum = {"training": {"train_steps": 7}, "rouge1": 20.0, "rouge2": 3.0, "rougeL": 15.0, "examples": 9}
    baselines = {"disfl_qa": {"first_span": {"exact_match": 0.5, "f1": 4.0}},
                 "quoref": {"first_span": {"exact_match": 0.25, "f1": 8.0}},
                 "xsum": {"lead_3": {"rouge1": 21.4, "rouge2": 4.02, "rougeL": 13.82}}}
    qa_only = readonce.model_card_section([{"variant": "baseline", "compression_ratio": None, "qa": qa}],
                                          {k: v for k, v in baselines.items() if k != "xsum"}, "w", command="cmd")
    assert "XSum" not in qa_only and "None" not in qa_only and "(QA)" in qa_only
    assert "| baseline (document as text) | 1.0 | 2.0 | 1.0 | 2.0 | 10 |" in qa_only
    assert "| baseline: first span | 0.5 | 4.0 | 0.25 | 8.0 |  |" in qa_only
    assert qa_only.rstrip().endswith("Command: `cmd`")
    both = readonce.model_card_section([{"variant": "readonce", "compression_ratio": 8, "qa": qa, "xsum": xsum}],
                                       baselines, "w", command="cmd")
    assert "(QA, then XSum)" in both and "ROUGE on 9 validation articles" in both
    assert "| ReadOnce k = 8 | 1.0 | 2.0 | 1.0 | 2.0 | 20.0 | 3.0 | 15.0 | 10 | 7 |" in both
    assert "| baseline: lead-3 |  |  |  |  | 21.4 | 4.02 | 13.82 |  |  |" in both


def test_a_stop_during_the_qa_stage_lists_the_xsum_runs_as_failed(tmp_path, data_dir, tiny_bert, monkeypatch):
    """When a signal stopped stage 1 (even after its runs had all ended), stage 2 never starts, and its runs are
    listed in `failed` (exit status 1) rather than left out of the results in silence."""
    readonce = entry_point("readonce")
    common = readonce._common
    calls = []

    def stopped(commands, log_dir, grace_s=30.0):
        calls.append(list(commands))
        common.STOPPED = True
        return []

    monkeypatch.setattr(common, "run_children", stopped)
    monkeypatch.setattr(common, "STOPPED", False)  # restored after the test
    out = tmp_path / "out"
    assert readonce.main(["--smoke", "--warm_start", str(tiny_bert), "--variants", "baseline", "2",
                          "--output_dir", str(out), "--data_dir", str(data_dir)]) == 1
    results = json.loads((out / "results.json").read_text())
    assert len(calls) == 1 and results["failed"] == ["xsum_baseline", "xsum_k2"] and "stopped" in results
