"""examples/kv-cache/run_block_attention_qa.py end to end on a tiny random Llama (2 training steps with and without
the Block-Attention mask, 4 Quoref validation questions answered from composed stored caches and from the full
prompt), and the task pieces it is made of: deterministic distractors, training rows, the collator."""

import importlib.util
import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_readonce.tasks.document_cache_qa import (
    DocumentQACollator,
    add_distractor_passages,
    answer_kept,
    training_features,
)
from tests.conftest import REPO_ROOT

ROWS = [{"id": f"r{i}", "question": f"Who is number {i}?", "context": f"Passage {i // 2} says that Ann is number "
         f"{i}.", "answers": {"text": ["Ann"], "answer_start": [len(f"Passage {i // 2} says that ")]}}
        for i in range(10)]


@pytest.fixture(scope="module")
def example():
    path = REPO_ROOT / "examples" / "kv-cache" / "run_block_attention_qa.py"
    spec = importlib.util.spec_from_file_location("run_block_attention_qa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_distractors_are_deterministic_and_exclude_the_own_passage():
    rows = add_distractor_passages(ROWS, num_distractors=3, seed=0)
    for row in rows:
        assert len(row["contexts"]) == 4 and row["contexts"][row["gold_passage"]] == row["context"]
        assert len(set(row["contexts"])) == 4  # three other passages
    assert add_distractor_passages(list(reversed(ROWS)), 3, 0) == list(reversed(rows))  # order does not matter
    assert add_distractor_passages(ROWS, 3, 1) != rows
    assert {r["gold_passage"] for r in rows} != {rows[0]["gold_passage"]}  # the gold passage moves
    assert "contexts" not in ROWS[0]  # the input rows are not modified
    with pytest.raises(ValueError, match="distractors"):
        add_distractor_passages(ROWS, num_distractors=10)  # 10 distinct passages: 9 others at most


def test_training_rows_and_collator(tokenizer):
    rows = add_distractor_passages(ROWS[:4], num_distractors=1, seed=0)
    blocked = training_features(tokenizer, rows, max_document_length=6, block_attention=True)
    plain = training_features(tokenizer, rows, max_document_length=6, block_attention=False)
    assert "block_ids" not in plain[0] and plain[0]["input_ids"] == blocked[0]["input_ids"]
    feature = blocked[0]
    answer = tokenizer(" Ann", add_special_tokens=False)["input_ids"]
    assert feature["block_ids"][:12] == [0] * 6 + [1] * 6 and feature["block_ids"][-len(answer):] == [-1] * len(answer)
    assert feature["labels"][-len(answer):] == answer and set(feature["labels"][:-len(answer)]) == {-100}
    batch = DocumentQACollator(pad_token_id=0)([blocked[0], {k: v[:-2] for k, v in blocked[1].items()}])
    assert batch["input_ids"].shape == batch["block_ids"].shape == batch["labels"].shape
    assert batch["attention_mask"][1, -2:].tolist() == [0, 0] and batch["block_ids"][1, -2:].tolist() == [-1, -1]
    assert batch["labels"][1, -2:].tolist() == [-100, -100]
    assert answer_kept(tokenizer, ROWS[0], 32) and not answer_kept(tokenizer, ROWS[0], 3)


@pytest.mark.parametrize("block_attention", [True, False])
def test_example_end_to_end_on_a_tiny_llama(example, block_attention, tmp_path, tokenizer, data_dir, monkeypatch):
    checkpoint = tmp_path / "tiny"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=512)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    seen = []

    class RecordingTrainer(example.Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            seen.append("block_ids" in inputs)
            return super().compute_loss(model, inputs, *args, **kwargs)

    monkeypatch.setattr(example, "Trainer", RecordingTrainer)
    out = tmp_path / "run"
    args = ["--model_name_or_path", str(checkpoint), "--output_dir", str(out), "--do_train", "--do_eval",
            "--max_steps", "2", "--max_train_samples", "8", "--max_eval_samples", "4", "--per_device_train_batch_size",
            "2", "--max_document_length", "24", "--max_answer_tokens", "3", "--eval_mode", "both", "--report_to",
            "none", "--use_cpu", "--save_strategy", "no", "--learning_rate", "1e-3"]
    if block_attention:
        args.append("--block_attention")
    metrics = example.main(args)
    assert seen == [block_attention] * 2  # two steps; the Block-Attention mask only when asked
    saved = json.loads((out / "block_attention_qa_results.json").read_text())
    assert saved["block_attention"] is block_attention and saved["eval_examples"] == 4 and saved["train_loss"] > 0
    for mode in ("full", "stored"):
        assert 0 <= saved[f"eval_{mode}_f1"] <= 100
        lines = (out / f"predictions_{mode}.jsonl").read_text().splitlines()
        assert len(lines) == 4 and {"id", "prediction_text"} <= set(json.loads(lines[0]))
    assert "always-empty_baseline_f1" in saved and "first-span_baseline_f1" in saved
    assert 4 <= saved["eval_stored_passages_encoded"] <= 16  # the 4 questions' passages, each once
    assert metrics["eval_stored_read_seconds"] >= 0
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()  # the fine-tuned model is saved


def test_the_collator_refuses_an_empty_batch_by_name():
    """`DocumentQACollator()([])`: a `ValueError` naming `rows` (it was "max() arg is an empty sequence")."""
    with pytest.raises(ValueError, match="`rows` is empty"):
        DocumentQACollator(pad_token_id=0)([])
