"""reproduce/readtwice_quoref.py --smoke: the baseline and ReadTwice-E from a tiny random BERT, two CPU steps, the
no-learning baselines beside; the 3-epoch step count."""

import pytest
import torch
from safetensors import safe_open

from tests.reproduce.conftest import check_results, entry_point


def test_readtwice_quoref_smoke(tmp_path, data_dir, tiny_bert):
    from transformers import AutoTokenizer, BertModel

    # the warm start saved in float16, as reproduce/carry.py carries MiniLM to a GPU lease: the rows must still train
    # float32 weights (AdamW on float16 weights did not learn: every ReadTwice row scored 0 F1 on an H100)
    warm_start = tmp_path / "fp16_warm_start"
    BertModel.from_pretrained(tiny_bert, dtype=torch.float16).save_pretrained(warm_start)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(warm_start)
    readtwice = entry_point("readtwice_quoref")
    out = tmp_path / "out"
    assert readtwice.main(["--smoke", "--warm_start", str(warm_start), "--rows", "baseline", "e", "--output_dir",
                           str(out), "--data_dir", str(data_dir)]) == 0
    for row in ("baseline", "e"):
        with safe_open(out / row / "model.safetensors", "pt") as weights:
            assert {weights.get_slice(name).get_dtype() for name in weights.keys()} == {"F32"}, row
    # the entity row records its mention finder, so `hf-readonce encode` / `publish` read it from the checkpoint
    import json

    assert json.loads((out / "e" / "config.json").read_text())["mentions"] == "capitalized_mentions"
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
