"""End to end on the real packaged MiniLM weights and real QA data (small budget)."""

import json
import re
import shlex

import pytest
import torch
from transformers import AutoTokenizer, BertForQuestionAnswering, TrainingArguments

from hf_readonce import DeformerBertForQuestionAnswering
from hf_readonce.recipes.deformer_qa import DataArguments, ModelArguments, run
from hf_readonce.tasks.question_answering import build_features, pair_inputs, read_jsonl
from hf_readonce.weights import minilm_path


def test_minilm_k0_equals_bert_on_real_text(data_dir):
    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    examples = read_jsonl(data_dir / "quoref" / "validation.jsonl")[:2]
    features, windows, _ = build_features(examples, tokenizer, max_question_length=32, max_passage_length=96,
                                          doc_stride=32)
    pair = pair_inputs(features[0]["question_ids"], windows[features[0]["passage_index"]][0])
    inputs = {key: torch.tensor([value]) for key, value in pair.items()}
    torch.manual_seed(0)
    bert = BertForQuestionAnswering.from_pretrained(path).eval()
    deformer = DeformerBertForQuestionAnswering.from_pretrained(path, num_decomposed_layers=0).eval()
    deformer.qa_outputs.load_state_dict(bert.qa_outputs.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(deformer(**inputs).start_logits, bert(**inputs).start_logits, atol=1e-5, rtol=0)


def test_fine_tune_and_answer_from_cache(data_dir, tmp_path, monkeypatch):
    import hf_readonce.recipes.deformer_qa as pipeline

    bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    evaluated = []
    original = pipeline.predict_pairs
    monkeypatch.setattr(pipeline, "predict_pairs", lambda model, *a, **k: evaluated.append(model) or original(
        model, *a, **k))
    metrics = run(
        ModelArguments(num_decomposed_layers=4, attention_probs_dropout_prob=0.0),
        DataArguments(train_file=str(data_dir / "quoref" / "train.jsonl"),
                      validation_file=str(data_dir / "quoref" / "validation.jsonl"), max_seq_length=160,
                      max_question_length=32, doc_stride=32, max_train_samples=16, max_eval_samples=12),
        TrainingArguments(output_dir=str(tmp_path), do_train=True, do_eval=True, max_steps=3,
                          per_device_train_batch_size=4, learning_rate=1e-4, use_cpu=True, report_to="none",
                          save_strategy="no", bf16=bf16),
    )
    # bf16 training must not leave accelerate's autocast wrapper on `forward`: evaluation runs in one precision
    model = evaluated[0]  # the FLOP count's pass, then one timed pass per round: the same model every time
    assert all(other is model for other in evaluated) and len(evaluated) == 1 + metrics["speed_rounds"]
    assert getattr(model.forward, "__func__", None) is DeformerBertForQuestionAnswering.forward
    assert metrics["num_decomposed_layers"] == 4 and metrics["train_features"] >= 16
    assert 0.0 <= metrics["cached_f1"] <= 100.0
    # the cache changes the cost, never the answers
    assert metrics["cached_f1"] == pytest.approx(metrics["eval_f1"], abs=1e-6)
    assert metrics["cached_exact_match"] == pytest.approx(metrics["eval_exact_match"], abs=1e-6)
    assert metrics["speedup_precomputed"] > 0
    # k = 4 of 6 layers read the question alone: fewer FLOPs than the pairs, more once every window is encoded too
    assert metrics["flop_ratio_precomputed"] > max(1.0, metrics["flop_ratio_including_encoding"])
    saved = DeformerBertForQuestionAnswering.from_pretrained(tmp_path)
    assert saved.config.num_decomposed_layers == 4
    assert saved.config.attention_probs_dropout_prob == 0.0  # the override reached the trained model


def test_extra_train_files_add_rows_but_not_calibration(data_dir, tmp_path):
    """`extra_train_files` (e.g. Quoref beside Disfl-QA) adds training rows; the calibration split comes from
    `train_file` alone; bad values are clear errors naming the option."""
    common = dict(train_file=str(data_dir / "disfl_qa" / "train.jsonl"),
                  validation_file=str(data_dir / "disfl_qa" / "validation.jsonl"), max_seq_length=128,
                  max_question_length=32, doc_stride=32, max_train_samples=40, max_eval_samples=4,
                  allow_no_answer=True, calibration_fraction=0.1, eval_paths="cached")

    def train(out, **data):
        return run(ModelArguments(num_decomposed_layers=4, attention_probs_dropout_prob=0.0),
                   DataArguments(**{**common, **data}),
                   TrainingArguments(output_dir=str(tmp_path / out), do_train=True, do_eval=True, max_steps=1,
                                     per_device_train_batch_size=2, use_cpu=True, report_to="none",
                                     save_strategy="no"))

    alone = train("alone")
    quoref = str(data_dir / "quoref" / "train.jsonl")
    both = train("both", extra_train_files=[quoref], extra_negative_window_fraction=1.0)
    fewer = train("fewer", extra_train_files=[quoref], extra_negative_window_fraction=0.0)
    assert both["train_features"] == alone["train_features"] + both["extra_train_features"][quoref]
    assert 0 < fewer["extra_train_features"][quoref] < both["extra_train_features"][quoref]
    assert both["calibration_questions"] == alone["calibration_questions"]
    with pytest.raises(ValueError, match="--extra_train_files: no such file"):
        train("missing", extra_train_files=[str(tmp_path / "nope.jsonl")])
    with pytest.raises(ValueError, match="--extra_negative_window_fraction"):
        train("bad", extra_train_files=[quoref], extra_negative_window_fraction=1.5)


def test_demo_answers_with_the_shipped_deformer(data_dir, tmp_path, capsys, monkeypatch):
    """The default demo: the shipped reference DeFormer (checksum-verified) answers from cached passage states, with
    the threshold its config records, beside the baselines (the teacher's recorded scores, of every question, are left
    out beside those of a subset), computing in float32
    on the CPU (the checkpoint is saved in fp16). Without --output_dir its temporary folder is removed at the end."""
    import tempfile

    from hf_readonce.recipes.demo import main
    from hf_readonce.weights import reference_deformer_path

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo's temporary folder goes
    recorded = DeformerBertForQuestionAnswering.from_pretrained(reference_deformer_path()).config
    metrics = main(["--data_dir", str(data_dir), "--max_eval_samples", "12", "--speed_eval_samples", "6"])
    out = capsys.readouterr().out
    assert f"DeFormer k={recorded.num_decomposed_layers} (shipped reference)" in out
    # the teacher's recorded scores are on all 1785 questions: not printed beside those of 12
    assert "full MiniLM (teacher, recorded)" not in out and "baseline: always-empty" in out
    assert "The teacher's recorded scores, on all 1785 validation questions, are left out: 12" in out
    assert "The shipped DeFormer was distilled in four consecutive distillation runs" in out
    assert "from cached passage states in float32" in out and metrics["compute_dtype"] == "float32"
    assert metrics["null_score_diff_threshold"] == round(recorded.null_score_diff_threshold, 4)
    assert "train_seconds" not in metrics  # nothing was trained
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    assert '"eval_questions"' not in out  # the summary, not the metrics dump
    again = main(["--data_dir", str(data_dir), "--max_eval_samples", "4", "--speed_eval_samples", "2", "--json"])
    captured = capsys.readouterr()
    # stdout is one JSON document (`hf-readonce demo --json | jq` works): the opening line goes to stderr
    assert json.loads(captured.out) == json.loads(json.dumps(again)) and "Verdict" not in captured.out
    assert "from cached passage states in float32" in captured.err
    # the FLOP ratios are scaled to the timed questions' own features and windows (not the first few alone)
    assert again["flop_ratio_precomputed"] > max(1.0, again["flop_ratio_including_encoding"])


def test_demo_command(data_dir, tmp_path, capsys):
    from hf_readonce.cli import main

    status = main(["demo", "--distill", "--data_dir", str(data_dir), "--max_steps", "2", "--batch_size", "4",
                   "--max_train_samples", "300", "--max_eval_samples", "12", "--speed_eval_samples", "6",
                   "--output_dir", str(tmp_path / "json"), "--no_bf16", "--json"])
    captured = capsys.readouterr()
    assert status == 0 and "train_loss" in json.loads(captured.out)  # stdout is the JSON document alone
    assert "train_runtime" in captured.err and "--distill" in captured.err  # Trainer's log lines and the opening
    status = main(["demo", "--distill", "--data_dir", str(data_dir), "--max_steps", "2", "--batch_size", "4",
                   "--max_train_samples", "300", "--max_eval_samples", "12", "--speed_eval_samples", "6",
                   "--output_dir", str(tmp_path / "text"), "--no_bf16"])
    out = capsys.readouterr().out
    assert status == 0
    assert "answered from cached passage states" in out and "Speed-up over the same model" in out
    assert "precomputed (FLOP ratio" in out and "once (FLOP ratio" in out
    assert "baseline: always-empty" in out and "baseline: first-span" in out and "HasAns" in out
    assert "full MiniLM (teacher, recorded)" not in out and "are left out: 12 were answered here" in out
    assert f"Model and results written to {tmp_path / 'text'}" in out
    # the publish command that line gives puts the run's scores on the card
    line = next(line for line in out.splitlines() if line.startswith("Model and results written to"))
    publish = shlex.split(re.search(r"`(hf-readonce publish [^`]*)`", line).group(1).replace("OWNER/NAME", "a/b"))
    assert main([*publish[1:], "--local-dir", str(tmp_path / "repo"), "--no-progress"]) == 0
    card = (tmp_path / "repo" / "README.md").read_text()
    assert "No evaluation was recorded" not in card and "name: Disfl-QA" in card, card
    assert (tmp_path / "text" / "eval_results.json").is_file()
    made = json.loads((tmp_path / "text" / "train_results.json").read_text())
    assert made["command"].startswith("hf-readonce demo --distill") and made["max_steps"] == 2
    # the checkpoint records what it was trained and evaluated with; the CLI's defaults come from there
    saved = DeformerBertForQuestionAnswering.from_pretrained(tmp_path / "text")
    assert (saved.config.max_question_length, saved.config.max_passage_length, saved.config.doc_stride) == (48, 208, 64)
    assert saved.config.allow_no_answer is True and isinstance(saved.config.null_score_diff_threshold, float)


def test_reference_checkpoint_answers_far_above_trivial_baselines(data_dir):
    """The shipped full MiniLM QA model extracts answers: on a slice of Quoref validation (80 questions, for time;
    26.5 F1 when measured) its F1 is well above the first-span and first-sentence heuristics (10.1 and 6.3 there).
    Fails on a model that collapsed to a position or to empty answers."""
    from hf_readonce.tasks.question_answering import (
        postprocess_qa_predictions,
        predict_pairs,
        score_qa,
        trivial_baselines,
    )
    from hf_readonce.weights import reference_qa_path

    path = reference_qa_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = BertForQuestionAnswering.from_pretrained(path, dtype=torch.float32).eval()
    rows = read_jsonl(data_dir / "quoref" / "validation.jsonl")[:80]
    features, windows, _ = build_features(rows, tokenizer, max_question_length=48, max_passage_length=208,
                                          doc_stride=64)
    predictions = postprocess_qa_predictions(rows, features, windows,
                                             predict_pairs(model, features, windows, batch_size=32))
    scores = score_qa(predictions, rows)
    best_baseline = max(b["f1"] for b in trivial_baselines(rows).values())
    assert scores["f1"] > best_baseline + 10.0, (scores, best_baseline)
    assert len({p for p in predictions.values()}) > len(rows) // 2  # not one answer for everything


def test_reference_checkpoint_checksum_is_verified(tmp_path):
    import shutil

    from hf_readonce.weights import reference_qa_path, verify_checksums

    source = reference_qa_path()
    copy = tmp_path / "ref"
    shutil.copytree(source, copy)
    verify_checksums(copy)  # intact
    config = copy / "config.json"
    config.write_text(config.read_text().replace('"hidden_act"', '"hidden_act" ', 1))
    with pytest.raises(ValueError, match="config.json has SHA-256"):
        verify_checksums(copy)
    (copy / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        verify_checksums(copy)


def test_a_question_length_that_leaves_no_passage_is_named_before_loading(tmp_path, monkeypatch):
    """`--max_question_length 300 --max_seq_length 256` named the derived `max_passage_length` -44."""
    import hf_readonce.recipes.deformer_qa as recipe

    monkeypatch.setattr(recipe.AutoTokenizer, "from_pretrained", lambda *a, **k: pytest.fail("loaded first"))
    with pytest.raises(ValueError, match="`max_question_length` 300 leaves no room for the passage in "
                                         "`max_seq_length` 256"):
        run(ModelArguments(), DataArguments(max_seq_length=256, max_question_length=300),
            TrainingArguments(output_dir=str(tmp_path), do_eval=True, use_cpu=True, report_to="none"))
