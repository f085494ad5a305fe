"""reproduce/recurrent_table2.py --smoke: pretrained, baseline and a recurrent model at overlap 0 from a tiny random
Llama, two CPU steps, the pretrained model's perplexity beside."""

from tests.reproduce.conftest import check_results, entry_point


def test_recurrent_table2_smoke(tmp_path, data_dir, tiny_llama):
    table2 = entry_point("recurrent_table2")
    out = tmp_path / "out"
    assert table2.main(["--smoke", "--warm_start", str(tiny_llama), "--overlaps", "0",
                        "--recurrence_learning_rates", "same", "--output_dir", str(out),
                        "--data_dir", str(data_dir)]) == 0
    results = check_results(out / "results.json", rows=2)
    baseline, recurrent = results["rows"]
    assert (baseline["run"], recurrent["run"]) == ("baseline", "recurrent_ov0") and recurrent["recurrent"]
    assert baseline["train_steps"] == recurrent["train_steps"] == 2
    assert recurrent["test_token_perplexity"] > 1 and recurrent["test_token_perplexity_recurrence_zeroed"] > 1
    assert results["baselines"]["pretrained"]["overlap0"]["test_token_perplexity"] > 1
