"""reproduce/readtwice_quoref.py --smoke: the baseline and ReadTwice-E from a tiny random BERT, two CPU steps, the
no-learning baselines beside; the 3-epoch step count."""

import pytest

from tests.reproduce.conftest import check_results, entry_point


def test_readtwice_quoref_smoke(tmp_path, data_dir, tiny_bert):
    readtwice = entry_point("readtwice_quoref")
    out = tmp_path / "out"
    assert readtwice.main(["--smoke", "--warm_start", str(tiny_bert), "--rows", "baseline", "e", "--output_dir",
                           str(out), "--data_dir", str(data_dir)]) == 0
    results = check_results(out / "results.json", rows=2)
    baseline, e = results["rows"]
    assert (baseline["model"], e["model"]) == ("baseline", "readtwice-entity")
    assert baseline["train_steps"] == e["train_steps"] == 2 and e["eval_examples"] == 4 and "f1_above_baseline" in e
    assert set(results["baselines"]) == {"first_span", "first_sentence", "first_mention"}


def test_training_steps_make_the_epochs(tmp_path, data_dir):
    readtwice = entry_point("readtwice_quoref")
    assert readtwice.training_steps(data_dir / "quoref" / "train.jsonl", 3, 8, limit=10) == (4, 10)  # ceil(30 / 8)
    with pytest.raises(ValueError, match="--epochs"):
        readtwice.training_steps(data_dir / "quoref" / "train.jsonl", 0, 8)
