"""ReadOnce examples end to end on real MiniLM weights (converted to BART) and real data, tiny budget."""

import json

import pytest
import torch
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
                  max_eval_samples=4, max_document_length=64, generation_max_tokens=4, max_question_length=24)
    metrics = run(ReadOnceArguments(task="qa", compression_ratio=8, stage2_steps=1, eval_compression_ratios="4",
                                    **common), _args(tmp_path / "ro"))
    assert metrics["eval_loss"] > 0 and metrics["eval_examples"] == 4 and 0 <= metrics["eval_f1"] <= 100 and "eval_k4" in metrics
    assert metrics["stage1_seconds_per_batch"] > 0 and metrics["stage2_seconds_per_batch"] > 0
    store = RepresentationStore(tmp_path / "ro" / "store", create=False)
    assert len(store) == metrics["store_documents"] > 0 and store.verify().ok
    saved = json.loads((tmp_path / "ro" / "config.json").read_text())
    assert saved["model_type"] == "readonce_bart" and saved["compression_ratio"] == 8
    # the lengths read at training, recorded: the defaults of the adapter, the pipelines and `hf-readonce answer`
    assert (saved["max_document_length"], saved["max_question_length"]) == (64, 24)
    baseline = run(ReadOnceArguments(task="summarization", variant="baseline",
                                     train_file=str(data_dir / "xsum" / "train.jsonl"),
                                     validation_file=str(data_dir / "xsum" / "validation.jsonl"), max_train_samples=8,
                                     max_eval_samples=2, max_document_length=64, generation_max_tokens=4),
                   _args(tmp_path / "base", max_steps=1))
    assert 0 <= baseline["eval_rougeL"] <= 100
    # the baseline reads question and document as one text (the question never cut): it records neither length
    saved = json.loads((tmp_path / "base" / "config.json").read_text())
    assert saved.get("max_question_length") is None and saved.get("max_document_length") is None
    # downstream from the QA-trained checkpoint (§3.4): no stage 1, document encoder frozen, stored representations;
    # two validation files are scored separately
    from hf_readonce import ReadOnceBartForConditionalGeneration

    downstream = run(ReadOnceArguments(task="qa", model_name_or_path=str(tmp_path / "ro"), stage1_steps=0,
                                       stage2_steps=1, compression_ratio=4, **{**common, "validation_file": common["validation_file"] + ","
                                                          + str(data_dir / "quoref" / "validation.jsonl")}),
                     _args(tmp_path / "down"))
    assert "stage1_train_loss" not in downstream and downstream["stage2_seconds_per_batch"] > 0
    assert downstream["eval_disfl_qa_examples"] == downstream["eval_quoref_examples"] == 4
    # §5.2: fine-tuned at k = 4 from the k = 8 checkpoint; the window keeps its overlap (none)
    saved = json.loads((tmp_path / "down" / "config.json").read_text())
    assert downstream["compression_ratio"] == saved["compression_ratio"] == saved["window_size"] == 4
    before = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "ro").document_encoder.state_dict()
    after = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "down").document_encoder.state_dict()
    assert all(torch.equal(before[key], after[key]) for key in before)  # frozen: the stored representations hold


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _squad_rows(prefix, n):
    return [{"id": f"{prefix}{i}", "question": f"q{i}?", "context": f"{prefix} context {i}.",
             "answers": {"text": [f"{prefix}"], "answer_start": [0]}} for i in range(n)]


def test_load_rows_balances_sources(tmp_path):
    """§3.3: as many questions from each source, the smaller one repeated (datasets.interleave_datasets)."""
    small = _write_jsonl(tmp_path / "small.jsonl", _squad_rows("small", 2))
    large = _write_jsonl(tmp_path / "large.jsonl", _squad_rows("large", 5))
    concatenated = load_rows("qa", f"{small},{large}")
    assert [r["id"][:5] for r in concatenated].count("small") == 2 and len(concatenated) == 7
    balanced = load_rows("qa", f"{small},{large}", balance=True)
    sources = [r["id"][:5] for r in balanced]
    assert sources.count("small") == sources.count("large") == 5  # every large row once, small ones repeated
    assert {r["id"] for r in balanced} == {r["id"] for r in concatenated}
    assert [r["id"][:5] for r in load_rows("qa", f"{small},{large}", limit=4, balance=True)] == ["small", "large"] * 2
    assert load_rows("qa", large, balance=True) == load_rows("qa", large)  # one source: nothing to balance
    empty = _write_jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(ValueError, match="empty.jsonl"):
        load_rows("qa", f"{small},{empty}", balance=True)


def test_learning_rates_follow_section_4_1():
    from hf_readonce.recipes.readonce import learning_rates

    training = Seq2SeqTrainingArguments(output_dir="unused", learning_rate=1e-5, report_to="none")
    assert learning_rates(ReadOnceArguments(), training) == (1e-5, pytest.approx(1e-4))
    assert learning_rates(ReadOnceArguments(bart_learning_rate=2e-5, new_learning_rate=3e-3), training) == (2e-5, 3e-3)
    with pytest.raises(ValueError, match="new_learning_rate"):
        learning_rates(ReadOnceArguments(new_learning_rate=0.0), training)


def test_training_uses_the_models_parameter_groups(tmp_path):
    """The Trainer's optimizer is `optimizer_parameter_groups()`: with a vanishing learning rate for the pretrained
    weights only the aggregation (the new weights) moves."""
    from transformers import AutoTokenizer

    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.recipes.readonce import ReadOnceCollator, _train
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    rows = [{"id": str(i), "question": "who?", "document": "Emma was written by Jane Austen in 1815.",
             "targets": ["Jane Austen"]} for i in range(4)]
    args = ReadOnceArguments(max_document_length=32)
    model, stats = _train(model, rows, ReadOnceCollator(tokenizer, args), _args(tmp_path, weight_decay=0.0,
                                                                              max_steps=2), 2, (1e-30, 1e-2))
    change = {name: float((p.detach() - before[name]).abs().max()) for name, p in model.named_parameters()}
    new = {name for name in change if name.startswith("document_encoder.aggregation.")}
    assert new and max(change[name] for name in new) > 1e-3  # lr 1e-2
    assert max(delta for name, delta in change.items() if name not in new) < 1e-20  # lr 1e-30
    assert stats["train_loss"] > 0


def test_files_without_usable_rows_raise_naming_the_argument_and_fields(tmp_path):
    """A JSONL whose fields are not the task's (e.g. `id, text, ref`) is named with the fields expected, before a
    model is loaded (was a ZeroDivisionError in the evaluation loss, or Trainer's `num_samples=0`); rows without an
    `id` or with a non-string document are read or set aside, not a KeyError / AttributeError."""
    from hf_readonce.recipes.readonce import evaluation_loss

    wrong = _write_jsonl(tmp_path / "wrong.jsonl", [{"id": str(i), "text": f"Doc {i}.", "ref": "S."} for i in range(3)])
    good = _write_jsonl(tmp_path / "good.jsonl", [{"document": "Emma is a novel.", "summary": "A novel."},
                                                  {"id": "x", "document": 7, "summary": "Not a document."},
                                                  {"id": "y", "document": "Persuasion.", "summary": ["a list"]},
                                                  {"id": 12, "document": "Mansfield Park.", "summary": "Fanny."}])
    rows = load_rows("summarization", good)
    assert [r["id"] for r in rows] == [f"{good}:1", "12"] and [r["targets"] for r in rows] == [["A novel."],
                                                                                                  ["Fanny."]]
    qa = _write_jsonl(tmp_path / "qa.jsonl", [{"question": "Who?", "context": "Emma.", "answers": {"text": ["Emma"]}},
                                              {"id": "n", "question": "Who?", "context": "Emma.",
                                               "answers": {"text": [3]}}])
    assert [r["id"] for r in load_rows("qa", qa)] == [f"{qa}:1"]
    summarization = dict(task="summarization", max_document_length=32)
    with pytest.raises(ValueError, match=r"`train_file` .*wrong.jsonl holds no row with a document and a summary: "
                                         r"expected XSum-style string `document` and `summary`"):
        run(ReadOnceArguments(train_file=wrong, **summarization), _args(tmp_path, do_eval=False))
    with pytest.raises(ValueError, match=r"`validation_file` .*wrong.jsonl holds no row with a document and a summary"):
        run(ReadOnceArguments(validation_file=wrong, **summarization), _args(tmp_path, do_train=False))
    with pytest.raises(ValueError, match=r"`train_file` .*wrong.jsonl holds no row with an answerable question"):
        run(ReadOnceArguments(task="qa", train_file=wrong, max_document_length=32), _args(tmp_path, do_eval=False))
    with pytest.raises(ValueError, match="`rows` is empty"):
        evaluation_loss(None, None, [], ReadOnceArguments())


@pytest.mark.parametrize("argv, words", [
    (["--max_document_length", "0"], "`max_document_length` must be >= 1, got 0"),
    (["--max_target_length", "1"], "`max_target_length` must be >= 2"),
    (["--train_file", "MISSING"], "`train_file` 'MISSING' is not a file"),
    (["--train_file", "GOOD", "--validation_file", "GOOD,MISSING"], "`validation_file` 'MISSING' is not a file"),
    ([], "`train_file` is needed with do_train"),
])
def test_example_reports_a_bad_argument_as_a_usage_error(tmp_path, capsys, argv, words):
    """`run_readonce_summarization.py` names the argument in a usage message (exit 2), before loading a model."""
    import importlib.util

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location(
        "run_readonce_summarization", REPO_ROOT / "examples" / "readonce" / "run_readonce_summarization.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    good = _write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "document": "Emma is a novel.", "summary": "A novel."}])
    argv = [a.replace("GOOD", good).replace("MISSING", str(tmp_path / "missing.jsonl")) for a in argv]
    if "--train_file" not in argv and "needed" not in words:
        argv += ["--train_file", good]
    if "--validation_file" not in argv:
        argv += ["--validation_file", good]
    with pytest.raises(SystemExit) as exit_:
        script.main(argv + ["--do_train", "--do_eval", "--output_dir", str(tmp_path / "out"), "--use_cpu",
                            "--report_to", "none"])
    assert exit_.value.code == 2
    message = capsys.readouterr().err.replace(str(tmp_path / "missing.jsonl"), "MISSING")
    assert words in message, message


@pytest.mark.parametrize("switch, field", [("output_attentions", "attentions"), ("output_hidden_states", "hidden_states")])
def test_evaluation_encodes_the_documents_without_per_layer_outputs_the_config_asks_for(switch, field):
    """`evaluate` keeps the representations only: a model whose config asks for attention weights (eager) or
    per-layer hidden states does not make `encode_documents` compute and hold the document encoder's (they followed
    the config), and generates the same."""
    from transformers import AutoTokenizer

    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.recipes.readonce import evaluate
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101)).eval()
    model.set_attn_implementation("eager")
    rows = [{"id": str(i), "question": "who?", "document": document, "targets": ["Jane Austen"]}
            for i, document in enumerate(["Emma was written by Jane Austen in 1815.", "A short one."])]
    args = ReadOnceArguments(max_document_length=32, generation_max_tokens=3)

    def predictions():
        metrics = evaluate(model, tokenizer, rows, args, batch_size=1)
        return {key: value for key, value in metrics.items() if key != "seconds"}

    expected = predictions()
    setattr(model.config, switch, True)
    seen, encode = [], model.encode_documents
    model.encode_documents = lambda *a, **k: seen.append(encode(*a, **k)) or seen[-1]
    assert predictions() == expected
    assert len(seen) == 2 and all(getattr(out, field) is None for out in seen)


def test_label_smoothing_trains_on_the_targets(tmp_path):
    """`label_smoothing_factor`: the Trainer takes `labels` out of the batch before the forward; the collator's
    batches held no `decoder_input_ids`, so the decoder read the shifted question instead of the targets (a shape
    error in the smoother, or where the widths agreed, a loss over the wrong logits). The step's loss is the
    label-smoothed cross-entropy of the targets' teacher-forced logits."""
    from transformers import AutoTokenizer

    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.recipes.readonce import ReadOnceCollator, _train
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))
    rows = [{"id": str(i), "question": "who wrote it?", "document": "Emma was written by Jane Austen in 1815.",
             "targets": ["Jane Austen wrote Emma"]} for i in range(4)]
    args = ReadOnceArguments(max_document_length=32)
    collator = ReadOnceCollator(tokenizer, args)
    features = collator(rows)
    with torch.no_grad():
        logits = model(**features).logits
    labels = features["labels"]
    log_probs = torch.log_softmax(logits, dim=-1)
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].mean()
    expected = 0.9 * nll - 0.1 * log_probs.mean(-1)[keep].mean()
    _, stats = _train(model, rows, collator, _args(tmp_path, max_steps=1, label_smoothing_factor=0.1), 1,
                      (1e-30, 1e-30))
    assert stats["train_loss"] == pytest.approx(float(expected), rel=1e-3)


def test_baseline_trains_with_the_document_encoder_frozen(data_dir, tmp_path, monkeypatch):
    """The baseline reads no document: its document encoder is frozen, so that `DistributedDataParallel` with
    Trainer's defaults under gradient checkpointing (`find_unused_parameters=False`) finds no trainable parameter
    without a gradient ("Expected to have finished reduction in the prior iteration")."""
    import hf_readonce.recipes.readonce as recipe

    seen = []

    def spy(model, *args, **kwargs):
        seen.append(sorted({name.split(".")[0] for name, p in model.named_parameters() if p.requires_grad}))
        return model, {}

    monkeypatch.setattr(recipe, "_train", spy)
    run(ReadOnceArguments(task="summarization", variant="baseline", train_file=str(data_dir / "xsum" / "train.jsonl"),
                          validation_file=str(data_dir / "xsum" / "validation.jsonl"), max_train_samples=2,
                          max_eval_samples=1, max_document_length=32, generation_max_tokens=2),
        _args(tmp_path, max_steps=1))
    assert seen == [["model"]]  # the representation+text model (its LM head tied to its embeddings)

