"""LongDoc BART's representation adapter beyond the shared contract (tests/representations/test_contract.py): every
encoder attention type stores what the encoder computes for the document alone, settings are validated, the
encoder's mode is restored, and one stored read serves summaries of several lengths."""

import pytest
import torch

from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration
from hf_readonce.representations import LongDocBartAdapter, LongDocEncoderOutput, fill_store, get_adapter
from hf_readonce.store import RepresentationStore, content_hash

DOCUMENTS = [
    "The council approved the new budget on Tuesday after a long debate about school funding and road repairs.",
    "Rain is expected.",
    "A small museum in the north reopened its doors after three years of work on the roof and the old galleries. "
    * 3,
]


def tiny(tokenizer, encoder_attention_type="neighborhood", **overrides):
    torch.manual_seed(0)
    return LongDocBartForConditionalGeneration(LongDocBartConfig(**{**dict(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=96,
        encoder_attention_type=encoder_attention_type, neighborhood_radius=3, init_std=0.2, pad_token_id=0,
        bos_token_id=101, eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None), **overrides}))


@pytest.mark.parametrize("encoder_attention_type", ["full", "neighborhood", "convolutional", "convolutional_per_head",
                                                    "neighborhood_convolutional"])
def test_stored_outputs_are_the_encoders_own_for_each_document_alone(tokenizer, encoder_attention_type):
    model = tiny(tokenizer, encoder_attention_type).eval()
    adapter = get_adapter(model, tokenizer, max_document_length=48, batch_size=2)  # 2 batches, padding in each
    stored = adapter.encode(DOCUMENTS)
    for text, tensors in zip(DOCUMENTS, stored):
        ids = tokenizer(text, truncation=True, max_length=48, return_tensors="pt").input_ids
        with torch.no_grad():
            alone = model.get_encoder()(input_ids=ids).last_hidden_state[0]
        assert tensors["hidden_states"].shape == (ids.shape[1], 16) == (adapter.num_tokens(tensors), 16)
        torch.testing.assert_close(tensors["hidden_states"], alone, atol=1e-5, rtol=0)
    assert [adapter.num_tokens(t) for t in stored][2] == 48  # the long document is truncated


def test_one_stored_read_serves_summaries_of_several_lengths(tokenizer, tmp_path):
    model = tiny(tokenizer).eval()
    adapter = LongDocBartAdapter(model, tokenizer, max_document_length=48)
    store = RepresentationStore(tmp_path / "store")
    first = fill_store(adapter, store, DOCUMENTS, store_dtype="float32")
    assert first.encoded == 3 and first.truncated == 1  # the long document was cut to 48 tokens, and counted
    assert adapter.documents_cut(DOCUMENTS) == 1 and adapter.documents_cut(DOCUMENTS[:2]) == 0
    assert LongDocBartAdapter(model, tokenizer, max_document_length=96).documents_cut(DOCUMENTS) == 0
    again = fill_store(adapter, store, DOCUMENTS, store_dtype="float32")
    assert again.already_stored == 3 and again.truncated == 0  # read once; nothing encoded, nothing cut
    batch = adapter.tokenize(DOCUMENTS)
    for length in (3, 7):
        read = adapter.read(store.get_many(adapter.fingerprint(), adapter.settings(),
                                           [content_hash(d) for d in DOCUMENTS]))
        assert isinstance(read, LongDocEncoderOutput) and read.model_fingerprint == model.representation_fingerprint()
        kwargs = dict(max_new_tokens=length, min_new_tokens=length, do_sample=False)
        with torch.no_grad():
            assert torch.equal(model.generate(encoder_outputs=read, attention_mask=read.attention_mask, **kwargs),
                               model.generate(batch.input_ids, attention_mask=batch.attention_mask, **kwargs))


def test_encode_runs_the_encoder_without_dropout_and_restores_the_mode(tokenizer):
    model = tiny(tokenizer, dropout=0.5, attention_dropout=0.5).train()
    adapter = LongDocBartAdapter(model, tokenizer, max_document_length=48)
    first, second = adapter.encode(DOCUMENTS[:1]), adapter.encode(DOCUMENTS[:1])
    torch.testing.assert_close(first[0]["hidden_states"], second[0]["hidden_states"], atol=0, rtol=0)
    assert model.training and model.get_encoder().training


def test_settings_and_fingerprint(tokenizer):
    model = tiny(tokenizer)
    adapter = LongDocBartAdapter(model, tokenizer)
    assert adapter.max_document_length == 96  # the model's positions
    assert adapter.settings()["max_document_length"] == 96 and len(adapter.settings()["tokenizer"]) == 64
    assert adapter.fingerprint() == model.representation_fingerprint()
    assert LongDocBartAdapter(model, tokenizer, 32).settings() != adapter.settings()


@pytest.mark.parametrize("kwargs, error, name", [
    ({"max_document_length": 97}, ValueError, "max_document_length"),
    ({"max_document_length": 0}, ValueError, "max_document_length"),
    ({"max_document_length": 8.0}, TypeError, "max_document_length"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": True}, TypeError, "batch_size"),
])
def test_bad_settings_raise_naming_them(tokenizer, kwargs, error, name):
    with pytest.raises(error, match=name):
        LongDocBartAdapter(tiny(tokenizer), tokenizer, **kwargs)


def test_bad_texts_raise(tokenizer):
    adapter = LongDocBartAdapter(tiny(tokenizer), tokenizer)
    with pytest.raises(ValueError, match="document 1"):
        adapter.encode(["fine", "  "])
    with pytest.raises(TypeError, match="texts"):
        adapter.encode("a single string")
    with pytest.raises(ValueError, match="`stored` is empty"):
        adapter.read([])


def test_stored_outputs_of_an_fp16_store_are_checked_cast_and_never_modified(tokenizer, tmp_path):
    model = tiny(tokenizer).eval()
    adapter = LongDocBartAdapter(model, tokenizer, max_document_length=48)
    store = RepresentationStore(tmp_path / "store")
    fill_store(adapter, store, DOCUMENTS[:2])  # fp16, as `hf-readonce encode` stores by default
    stored = store.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS[:2]])
    kwargs = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=3)
    read = adapter.read(stored)
    assert read.last_hidden_state.dtype == model.dtype  # the model's dtype by default
    as_stored = adapter.read(stored, dtype=torch.float16)
    with torch.no_grad():
        first = model.generate(encoder_outputs=as_stored, attention_mask=as_stored.attention_mask, **kwargs)
        again = model.generate(encoder_outputs=as_stored, attention_mask=as_stored.attention_mask, **kwargs)
        loss = model(encoder_outputs=as_stored, attention_mask=as_stored.attention_mask, labels=first[:, 1:].contiguous()).loss
    assert first.shape[0] == 2 and torch.equal(first, again)  # beam search did not expand the caller's object
    calls, real = [], model.representation_fingerprint
    model.representation_fingerprint = lambda: calls.append(1) or real()
    with torch.no_grad():
        model.generate(encoder_outputs=as_stored, attention_mask=as_stored.attention_mask, **kwargs)
    del model.representation_fingerprint
    assert len(calls) == 1  # checked (and cast) once per generate, not at every decoding step
    assert as_stored.last_hidden_state.shape[0] == 2 and as_stored.last_hidden_state.dtype == torch.float16
    assert loss.isfinite()
    other = tiny(tokenizer, init_std=0.3).eval()  # same config, other weights
    for call in (lambda: other.generate(encoder_outputs=read, attention_mask=read.attention_mask, max_new_tokens=2),
                 lambda: other(encoder_outputs=read, attention_mask=read.attention_mask, labels=first[:, 1:].contiguous())):
        with pytest.raises(ValueError, match="were made by encoder"):
            call()
