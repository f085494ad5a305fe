"""LongDoc BART summarization recipe (issue 13): position tables extended by copying, the MiniLM -> BART -> LongDoc
warm start, the collator, and the example end to end on real XSum rows (tiny budget)."""

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from transformers import BertModel, Seq2SeqTrainingArguments

from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration
from hf_readonce.recipes.longdoc_summarization import (
    LongDocSummarizationCollator,
    extend_position_embeddings,
    longdoc_bart_from_bert,
    teacher_forced_loss,
)
from hf_readonce.weights import minilm_path
from tests.conftest import REPO_ROOT


def tiny(**overrides):
    torch.manual_seed(0)
    return LongDocBartForConditionalGeneration(LongDocBartConfig(**{**dict(
        vocab_size=99, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=16,
        neighborhood_radius=3, init_std=0.2, dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, forced_eos_token_id=None), **overrides})).eval()


def test_extend_position_embeddings_copies_rows_and_keeps_short_documents_unchanged(tmp_path):
    model = tiny()
    ids = torch.randint(3, 99, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model.get_encoder()(input_ids=ids).last_hidden_state
    sides = (model.model.encoder, model.model.decoder)
    old = [side.embed_positions.weight.detach().clone() for side in sides]
    assert not torch.equal(old[0], old[1])
    assert extend_position_embeddings(model, 40) == 24
    assert model.config.max_position_embeddings == 40
    for side, old_table in zip(sides, old):
        table = side.embed_positions.weight
        assert table.shape == (42, 16)  # BART's offset of 2 rows
        assert torch.equal(table[:2], old_table[:2])
        for position in (0, 15, 16, 31, 39):
            assert torch.equal(table[2 + position], old_table[2 + position % 16])
    with torch.no_grad():
        torch.testing.assert_close(model.get_encoder()(input_ids=ids).last_hidden_state, before, atol=0, rtol=0)
        long_ids = torch.randint(3, 99, (1, 40), generator=torch.Generator().manual_seed(2))
        assert model.get_encoder()(input_ids=long_ids).last_hidden_state.shape == (1, 40, 16)
    with pytest.raises(ValueError, match="41 tokens, more than the model.s 40 positions"):  # the table ends at 40
        model.get_encoder()(input_ids=torch.randint(3, 99, (1, 41)))
    model.save_pretrained(tmp_path)  # the saved checkpoint loads with its grown tables
    loaded = LongDocBartForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.get_encoder()(input_ids=long_ids).last_hidden_state,
                                   model.get_encoder()(input_ids=long_ids).last_hidden_state, atol=1e-6, rtol=0)
    assert extend_position_embeddings(model, 40) == 0 and extend_position_embeddings(model, 8) == 0


@pytest.mark.parametrize("length, error", [(0, ValueError), (2.5, TypeError), (True, TypeError)])
def test_extend_position_embeddings_rejects_bad_lengths(length, error):
    with pytest.raises(error, match="length"):
        extend_position_embeddings(tiny(), length)


@pytest.fixture(scope="module")
def minilm():
    return BertModel.from_pretrained(minilm_path(), add_pooling_layer=False).eval()


@pytest.mark.parametrize("encoder_attention_type", ["full", "neighborhood", "convolutional_per_head"])
def test_minilm_warm_start(minilm, tokenizer, encoder_attention_type):
    model = longdoc_bart_from_bert(minilm, encoder_attention_type=encoder_attention_type,
                                   neighborhood_radius=100).eval()
    assert model.config.encoder_attention_type == encoder_attention_type
    assert model.config.max_position_embeddings == 512 and model.config.d_model == 384
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()
    batch = tokenizer(["The council approved the budget on Tuesday after a long debate."], return_tensors="pt")
    with torch.no_grad():
        bert = minilm(**batch).last_hidden_state
        ours = model.get_encoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    if encoder_attention_type == "convolutional_per_head":  # new (de)convolutions: another encoder
        assert not torch.allclose(ours, bert, atol=1e-2)
    else:  # r = 100 >= the 14 tokens: BERT's encoder (LayerNorm eps 1e-5 instead of BERT's 1e-12)
        torch.testing.assert_close(ours, bert, atol=1e-3, rtol=0)


def test_collator_labels_end_with_eos_and_documents_are_truncated(tokenizer):
    rows = [{"document": "word " * 300, "targets": ["a short summary"]},
            {"document": "A tiny one.", "targets": ["x " * 50]}]
    features = LongDocSummarizationCollator(tokenizer, 64, 8, eos_token_id=102)(rows)
    assert features["input_ids"].shape == (2, 64) and features["attention_mask"][1].sum() < 64
    labels = features["labels"]
    assert labels.shape == (2, 8) and labels[1, -1] == 102  # 7 target tokens + the end
    real = labels[0][labels[0] != -100].tolist()
    assert real[-1] == 102 and tokenizer.decode(real[:-1]) == "a short summary"
    assert "labels" not in LongDocSummarizationCollator(tokenizer, 64, 8, 102)([{**rows[0], "train": False}])
    with pytest.raises(ValueError, match="max_target_length"):
        LongDocSummarizationCollator(tokenizer, 64, 1, 102)


def test_teacher_forced_loss_is_the_token_mean_cross_entropy():
    model = tiny()

    class Ids:  # a "tokenizer" over whitespace-separated ids
        def __call__(self, texts, add_special_tokens=True, truncation=True, max_length=None, padding=False,
                     padding_side="right", return_tensors=None):
            ids = [[int(t) for t in text.split()][:max_length] for text in texts]
            if not padding:
                return {"input_ids": ids}
            width = max(len(i) for i in ids)
            from transformers import BatchEncoding
            return BatchEncoding({"input_ids": torch.tensor([i + [1] * (width - len(i)) for i in ids]),
                                  "attention_mask": torch.tensor([[1] * len(i) + [0] * (width - len(i))
                                                                  for i in ids])})

    rows = [{"document": "5 6 7 8", "targets": ["9 10"]}, {"document": "11 12", "targets": ["13 14 15"]}]
    collator = LongDocSummarizationCollator(Ids(), 16, 8, eos_token_id=2)
    per_row = []
    for row in rows:
        features = collator([row])
        with torch.no_grad():
            per_row.append((float(model(**features).loss), int((features["labels"] != -100).sum())))
    expected = sum(loss * n for loss, n in per_row) / sum(n for _, n in per_row)  # 3 and 4 tokens
    assert teacher_forced_loss(model, collator, rows, batch_size=2) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="rows"):
        teacher_forced_loss(model, collator, [])


# the flag's name in current transformers; releases up to at least 5.6 (the lower bound) call it gradient_checkpointing
CHECKPOINTING = ("activation_checkpointing" if "activation_checkpointing" in
                 {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)} else "gradient_checkpointing")


def test_example_end_to_end_on_real_xsum(data_dir, tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "examples" / "summarization"))
    try:
        from run_longdoc_summarization import main
    finally:
        sys.path.pop(0)
    metrics = main([
        "--train_file", str(data_dir / "xsum" / "train.jsonl"),
        "--validation_file", str(data_dir / "xsum" / "validation.jsonl"),
        "--encoder_attention_type", "neighborhood", "--neighborhood_radius", "16",
        "--max_document_length", "520", "--max_target_length", "16", "--generation_max_tokens", "4",
        "--max_train_samples", "8", "--max_eval_samples", "3", "--attention_heatmap_tokens", "48", "--do_train",
        "--do_eval", "--max_steps", "2",
        "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "3", "--learning_rate", "1e-4",
        f"--{CHECKPOINTING}", "--use_cpu", "--report_to", "none", "--save_strategy", "no",
        "--output_dir", str(tmp_path)])
    assert metrics["positions_added_by_copying"] == 8  # MiniLM's 512 positions -> 520
    assert metrics["train_steps"] == 2 and metrics["train_document_tokens_per_second"] > 0
    assert metrics["eval_examples"] == 3 and all(0 <= metrics[f"eval_{k}"] <= 100 for k in ("rouge1", "rouge2",
                                                                                               "rougeL"))
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]), rel=1e-3)
    assert metrics["eval_perplexity"] > 1 and set(metrics["eval_baselines"]) == {"lead_1", "lead_3"}
    assert json.loads((Path(tmp_path) / "longdoc_results.json").read_text())["eval_loss"] == metrics["eval_loss"]
    assert (Path(tmp_path) / "attention_neighborhood.png").read_bytes()[:4] == b"\x89PNG"
    saved = LongDocBartForConditionalGeneration.from_pretrained(tmp_path)
    assert (saved.config.max_position_embeddings, saved.config.encoder_attention_type,
            saved.config.neighborhood_radius) == (520, "neighborhood", 16)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path).model_max_length == 520  # follows the extended table


def test_load_model_from_bart_and_longdoc_checkpoints(tokenizer, tmp_path):
    from transformers import BartConfig, BartForConditionalGeneration

    from hf_readonce.recipes.longdoc_summarization import LongDocSummarizationArguments, load_model

    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=32))
    bart.save_pretrained(tmp_path / "bart")
    tokenizer.save_pretrained(tmp_path / "bart")
    model, _, added = load_model(LongDocSummarizationArguments(
        model_name_or_path=str(tmp_path / "bart"), encoder_attention_type="convolutional", max_document_length=48))
    assert type(model) is LongDocBartForConditionalGeneration and added == 16
    assert (model.config.encoder_attention_type, model.config.neighborhood_radius) == ("convolutional", 100)
    torch.testing.assert_close(model.model.encoder.layers[0].fc1.weight, bart.model.encoder.layers[0].fc1.weight)
    model.save_pretrained(tmp_path / "longdoc")
    tokenizer.save_pretrained(tmp_path / "longdoc")
    # a longdoc_bart checkpoint keeps its own settings unless given
    again, _, added = load_model(LongDocSummarizationArguments(model_name_or_path=str(tmp_path / "longdoc"),
                                                               max_document_length=48))
    assert (again.config.encoder_attention_type, added) == ("convolutional", 0)
    radius, _, _ = load_model(LongDocSummarizationArguments(model_name_or_path=str(tmp_path / "longdoc"),
                                                            neighborhood_radius=7, max_document_length=48))
    assert radius.config.neighborhood_radius == 7
    with pytest.raises(ValueError, match="encoder_attention_type"):
        load_model(LongDocSummarizationArguments(model_name_or_path=str(tmp_path / "bart"),
                                                 encoder_attention_type="sparse", max_document_length=48))


def test_saved_model_records_the_document_length_it_trained_with(tokenizer, tmp_path):
    """The recipe writes `config.max_document_length`; the pipeline, the store adapter (`hf-readonce encode` /
    `summarize`) then read that many tokens, not the whole position table."""
    from transformers import BartConfig, BartForConditionalGeneration

    from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
    from hf_readonce.recipes.longdoc_summarization import LongDocSummarizationArguments, run
    from hf_readonce.representations import get_adapter

    torch.manual_seed(0)
    BartForConditionalGeneration(BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
    )).save_pretrained(tmp_path / "bart")
    tokenizer.save_pretrained(tmp_path / "bart")
    document = " ".join(f"Sentence {i} of a long story about Anne Elliot." for i in range(10))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": str(i), "document": document, "summary": "Anne."}) + "\n"
                            for i in range(2)))
    args = LongDocSummarizationArguments(model_name_or_path=str(tmp_path / "bart"), train_file=str(rows),
                                         max_document_length=24, max_target_length=8, neighborhood_radius=4)
    run(args, Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), do_train=True, max_steps=1,
                                       per_device_train_batch_size=2, use_cpu=True, report_to="none",
                                       save_strategy="no"))
    saved = LongDocBartForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    assert (saved.config.max_document_length, saved.config.max_position_embeddings) == (24, 64)
    assert get_adapter(saved, tokenizer).max_document_length == 24
    pipe = LongDocSummarizationPipeline(model=saved, tokenizer=tokenizer)
    assert pipe.preprocess({"documents": [document], "document_index": [0]})["input_ids"].shape == (1, 24)
    assert pipe(document, max_new_tokens=3) == pipe(document, max_new_tokens=3, max_document_len=24)
    # not part of the representation fingerprint: a store written before the length was recorded stays valid
    unrecorded = LongDocBartForConditionalGeneration.from_pretrained(tmp_path / "out", max_document_length=None)
    assert unrecorded.representation_fingerprint() == saved.representation_fingerprint()
    assert get_adapter(unrecorded, tokenizer).max_document_length == 64
    with pytest.raises(ValueError, match="`max_document_length` must be None or a positive int, got 0"):
        LongDocBartConfig(max_document_length=0)
    for bad in (0, -5):  # set on the loaded config after __init__: checked when the model is built
        with pytest.raises(ValueError, match=f"`max_document_length` must be None or a positive int, got {bad}"):
            LongDocBartForConditionalGeneration.from_pretrained(tmp_path / "out", max_document_length=bad)


def test_evaluation_shows_its_progress_unless_disabled(tokenizer, tmp_path, capsys):
    """The recipe scored every validation row (205 XSum articles by default) twice and generated their summaries
    with no sign of life between Trainer's bar and the results: the loss and the generation have their own bars on
    stderr, which `--disable_tqdm` hides with Trainer's."""
    from transformers import BartConfig, BartForConditionalGeneration

    from hf_readonce.recipes.longdoc_summarization import LongDocSummarizationArguments, run

    torch.manual_seed(0)
    BartForConditionalGeneration(BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
    )).save_pretrained(tmp_path / "bart")
    tokenizer.save_pretrained(tmp_path / "bart")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": str(i), "document": f"Anne Elliot walks to Lyme, day {i}.",
                                        "summary": "Anne."}) + "\n" for i in range(3)))
    args = LongDocSummarizationArguments(model_name_or_path=str(tmp_path / "bart"), train_file=str(rows),
                                         validation_file=str(rows), max_document_length=24, max_target_length=8,
                                         generation_max_tokens=2, neighborhood_radius=4)
    for disable in (False, True):
        run(args, Seq2SeqTrainingArguments(output_dir=str(tmp_path / f"out{disable}"), do_train=True, do_eval=True,
                                           max_steps=1, per_device_train_batch_size=2, per_device_eval_batch_size=2,
                                           use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=disable))
        err = capsys.readouterr().err
        for desc in ("eval loss", "generate"):
            assert (f"{desc}: 100%" in err) is not disable, (disable, desc, err)
        if not disable:
            assert err.count("eval loss: 100%") >= 2  # before and after training


def test_label_smoothing_trains_on_the_summary(tokenizer, tmp_path):
    """`label_smoothing_factor`: the Trainer takes `labels` out of the batch before the forward; the collator's
    batches held no `decoder_input_ids`, so the decoder read the shifted document instead of the summary (a shape
    error in the smoother, or where the widths agreed, a loss over the wrong logits). The step's loss is the
    label-smoothed cross-entropy of the summary's teacher-forced logits."""
    from transformers import BartConfig, BartForConditionalGeneration

    from hf_readonce.recipes.longdoc_summarization import LongDocSummarizationArguments, run

    torch.manual_seed(0)
    BartForConditionalGeneration(BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )).save_pretrained(tmp_path / "bart")
    tokenizer.save_pretrained(tmp_path / "bart")
    document = " ".join(f"Sentence {i} of a long story about Anne Elliot." for i in range(10))
    rows = [{"id": str(i), "document": document, "summary": "Anne Elliot marries."} for i in range(2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = LongDocSummarizationArguments(model_name_or_path=str(tmp_path / "bart"), train_file=str(tmp_path / "rows.jsonl"),
                                         max_document_length=24, max_target_length=8, neighborhood_radius=4)
    metrics = run(args, Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), do_train=True, max_steps=1,
                                                 per_device_train_batch_size=2, use_cpu=True, report_to="none",
                                                 save_strategy="no", learning_rate=1e-30, label_smoothing_factor=0.1))
    model = LongDocBartForConditionalGeneration.from_pretrained(tmp_path / "out").eval()  # as before the step
    features = LongDocSummarizationCollator(tokenizer, 24, 8, model.config.eos_token_id)(
        [{"document": document, "targets": ["Anne Elliot marries."]}] * 2)
    with torch.no_grad():
        log_probs = torch.log_softmax(model(**features).logits, dim=-1)
    labels = features["labels"]
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].mean()
    expected = 0.9 * nll - 0.1 * log_probs.mean(-1)[keep].mean()
    assert metrics["train_loss"] == pytest.approx(float(expected), abs=2e-4)
