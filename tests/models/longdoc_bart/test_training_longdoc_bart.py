"""LongDoc BART with the HF training stack: Seq2SeqTrainer with gradient checkpointing for every encoder attention
type, PEFT LoRA on q_proj/v_proj (only the adapters move), and batched beam search for every type."""

import dataclasses

import pytest
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from tests.models.longdoc_bart.test_modeling_longdoc_bart import longdoc, padded_batch, tokens

ENCODER_TYPES = ["full", "neighborhood", "convolutional", "convolutional_per_head", "neighborhood_convolutional"]


def rows(count=4, length=20):
    ids, mask = padded_batch(length)
    labels = tokens(2, 6, seed=9)
    return [{"input_ids": ids[i % 2], "attention_mask": mask[i % 2], "labels": labels[i % 2]} for i in range(count)]


def stack(features):
    return {key: torch.stack([f[key] for f in features]) for key in features[0]}


# transformers renamed the flag after 5.6 (the lower bound in pyproject.toml): use the one this version has
CHECKPOINTING = ("activation_checkpointing" if "activation_checkpointing" in
                 {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)} else "gradient_checkpointing")


@pytest.mark.parametrize("encoder_attention_type", ENCODER_TYPES)
def test_seq2seq_trainer_two_steps_with_gradient_checkpointing(encoder_attention_type, tmp_path):
    model = longdoc(encoder_attention_type=encoder_attention_type, neighborhood_radius=3,
                    decoder_attention_type="neighborhood" if encoder_attention_type == "neighborhood" else "full")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2,
                                    learning_rate=1e-2, use_cpu=True, report_to="none",
                                    save_strategy="no", remove_unused_columns=False, logging_steps=1,
                                    disable_tqdm=True, **{CHECKPOINTING: True})
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=rows(), data_collator=stack)
    result = trainer.train()
    assert trainer.state.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))
    assert getattr(model, "is_activation_checkpointing", getattr(model, "is_gradient_checkpointing", False))
    assert model.model.encoder.gradient_checkpointing
    moved = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
    assert any(name.startswith("model.encoder.layers.0.self_attn.q_proj") for name in moved), sorted(moved)[:5]
    if encoder_attention_type.startswith(("convolutional", "neighborhood_convolutional")):
        assert any(".self_attn.conv." in name for name in moved)


@pytest.mark.parametrize("encoder_attention_type", ["neighborhood", "convolutional_per_head"])
def test_peft_lora_on_q_and_v_moves_only_the_adapters(encoder_attention_type):
    from peft import LoraConfig, get_peft_model

    model = longdoc(encoder_attention_type=encoder_attention_type, neighborhood_radius=3)
    batch = stack(rows(2))
    with torch.no_grad():
        reference = model(**batch).logits
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            lora_dropout=0.0, task_type="SEQ_2_SEQ_LM"))
    trainable = {name for name, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    # every q_proj / v_proj is wrapped: encoder, decoder self- and cross-attention (2 + 2 * 2 attentions x 2 layers)
    assert len([n for n in trainable if "lora_A" in n]) == 2 * (2 + 2 * 2)
    with torch.no_grad():  # LoRA starts as the identity (B = 0)
        torch.testing.assert_close(lora(**batch).logits, reference, atol=1e-6, rtol=0)
    before = {name: p.detach().clone() for name, p in lora.named_parameters()}
    lora.train()
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    lora(**batch).loss.backward()
    optimizer.step()
    moved = {name for name, p in lora.named_parameters() if not torch.equal(p.detach(), before[name])}
    assert moved and moved <= trainable
    assert any("encoder.layers.0.self_attn.q_proj.lora_" in name for name in moved)
    lora.eval()
    with torch.no_grad():  # and the encoder's attention now computes something else
        assert not torch.allclose(lora(**batch).logits, reference, atol=1e-4)
        assert lora.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             max_new_tokens=3, do_sample=False).shape == (2, 4)


@pytest.mark.parametrize("encoder_attention_type", ENCODER_TYPES)
def test_batched_beam_search_decodes_each_row_as_alone(encoder_attention_type):
    model = longdoc(encoder_attention_type=encoder_attention_type, neighborhood_radius=3)
    ids, mask = padded_batch(20)
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=2)
    with torch.no_grad():
        batched = model.generate(ids, attention_mask=mask, **kwargs)
        alone = [model.generate(ids[i : i + 1, : int(mask[i].sum())], **kwargs)[0] for i in range(2)]
    assert batched.shape == (2, 7)
    assert all(torch.equal(batched[i], alone[i]) for i in range(2))


def test_lora_seq2seq_round_trip_generate_and_stored_encoder_outputs(tmp_path):
    """`task_type="SEQ_2_SEQ_LM"`: one `Seq2SeqTrainer` step through the wrapper, save, reload, merge and load with
    `trust_remote_code=True` keep the trained logits; `generate()` through the wrapper, from the document or from
    encoder outputs kept once, gives the merged model's tokens; with the adapter disabled the representation
    fingerprint (what a store keys encoder outputs by) is another one, so a store never mixes the two."""
    from peft import LoraConfig
    from transformers import AutoModelForSeq2SeqLM

    from tests.models.peft_checks import lora_round_trip

    inputs = stack(rows(2))
    config = LoraConfig(task_type="SEQ_2_SEQ_LM", target_modules=["q_proj", "v_proj"], r=4)
    peft_model, merged = lora_round_trip(lambda: longdoc(neighborhood_radius=3), config, inputs, rows(2),
                                         AutoModelForSeq2SeqLM, tmp_path, trainer_class=Seq2SeqTrainer,
                                         args_class=Seq2SeqTrainingArguments)
    document = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    greedy = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
    with torch.no_grad():
        expected = merged.generate(**document, **greedy)
        assert torch.equal(peft_model.generate(**document, **greedy), expected)
        encoded = peft_model.get_encoder()(**document)
        assert torch.equal(peft_model.generate(encoder_outputs=encoded, attention_mask=document["attention_mask"],
                                               **greedy), expected)
        with_adapter = peft_model.representation_fingerprint()
        with peft_model.disable_adapter():
            assert peft_model.representation_fingerprint() != with_adapter
        assert peft_model.representation_fingerprint() == with_adapter


def test_label_smoothing_without_decoder_inputs_is_refused_naming_the_setting(tmp_path):
    """`Trainer(label_smoothing_factor=...)` takes `labels` out of the batch: without `decoder_input_ids` the
    decoder read the shifted document and the label smoother failed on the shapes (a RuntimeError deep in
    transformers), or, where the widths agreed, scored the wrong logits."""
    from tests.models.loss_checks import assert_label_smoothing_needs_decoder_inputs

    model = longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3)
    with pytest.raises(ValueError, match="got `num_items_in_batch` .* but no `labels`, `decoder_input_ids`"):
        model(tokens(2, 20), num_items_in_batch=5)
    with pytest.raises(TypeError, match="label"):  # BART's own message for an argument it does not take
        model(tokens(2, 20), label=tokens(2, 5), num_items_in_batch=5)
    assert model(tokens(2, 20)).logits.shape == (2, 20, 99)  # a plain call keeps BART's default
    assert_label_smoothing_needs_decoder_inputs(
        lambda: longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3), rows(4), tmp_path)
