"""ReadOnce examples end to end on real MiniLM weights (converted to BART) and real data, tiny budget."""

import json

import pytest
from transformers import Seq2SeqTrainingArguments

from hf_readonce.recipes.readonce import ReadOnceArguments, load_rows, run
from hf_readonce.store import RepresentationStore


def _args(tmp_path, **overrides):
    settings = dict(output_dir=str(tmp_path), do_train=True, do_eval=True, max_steps=2, per_device_train_batch_size=4,
                    learning_rate=1e-4, use_cpu=True, report_to="none", save_strategy="no")
    return Seq2SeqTrainingArguments(**{**settings, **overrides})


def test_load_rows(data_dir):
    qa = load_rows("qa", str(data_dir / "disfl_qa" / "validation.jsonl"), limit=50)
    assert len(qa) == 50 and all(r["targets"] and r["targets"][0].strip() for r in qa)
    xsum = load_rows("summarization", str(data_dir / "xsum" / "validation.jsonl"), limit=3)
    assert [r["question"] for r in xsum] == ["summary"] * 3 and xsum[0]["targets"][0]
    with pytest.raises(ValueError, match="task"):
        load_rows("translation", str(data_dir / "xsum" / "validation.jsonl"))


def test_readonce_two_stages_with_store_and_baseline(data_dir, tmp_path):
    common = dict(train_file=str(data_dir / "disfl_qa" / "train.jsonl"),
                  validation_file=str(data_dir / "disfl_qa" / "validation.jsonl"), max_train_samples=8,
                  max_eval_samples=4, max_document_length=64, generation_max_tokens=4)
    metrics = run(ReadOnceArguments(task="qa", compression_ratio=8, stage2_steps=1, eval_compression_ratios="4",
                                    **common), _args(tmp_path / "ro"))
    assert metrics["eval_loss"] > 0 and metrics["eval_examples"] == 4 and 0 <= metrics["eval_f1"] <= 100 and "eval_k4" in metrics
    assert metrics["stage1_seconds_per_batch"] > 0 and metrics["stage2_seconds_per_batch"] > 0
    store = RepresentationStore(tmp_path / "ro" / "store", create=False)
    assert len(store) == metrics["store_documents"] > 0 and store.verify().ok
    saved = json.loads((tmp_path / "ro" / "config.json").read_text())
    assert saved["model_type"] == "readonce_bart" and saved["compression_ratio"] == 8
    baseline = run(ReadOnceArguments(task="summarization", variant="baseline",
                                     train_file=str(data_dir / "xsum" / "train.jsonl"),
                                     validation_file=str(data_dir / "xsum" / "validation.jsonl"), max_train_samples=8,
                                     max_eval_samples=2, max_document_length=64, generation_max_tokens=4),
                   _args(tmp_path / "base", max_steps=1))
    assert 0 <= baseline["eval_rougeL"] <= 100
    # downstream from the QA-trained checkpoint (§3.4): no stage 1, document encoder frozen, stored representations;
    # two validation files are scored separately
    import torch

    from hf_readonce import ReadOnceBartForConditionalGeneration

    downstream = run(ReadOnceArguments(task="qa", model_name_or_path=str(tmp_path / "ro"), stage1_steps=0,
                                       stage2_steps=1, **{**common, "validation_file": common["validation_file"] + ","
                                                          + str(data_dir / "quoref" / "validation.jsonl")}),
                     _args(tmp_path / "down"))
    assert "stage1_train_loss" not in downstream and downstream["stage2_seconds_per_batch"] > 0
    assert downstream["eval_disfl_qa_examples"] == downstream["eval_quoref_examples"] == 4
    before = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "ro").document_encoder.state_dict()
    after = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "down").document_encoder.state_dict()
    assert all(torch.equal(before[key], after[key]) for key in before)  # frozen: the stored representations hold
