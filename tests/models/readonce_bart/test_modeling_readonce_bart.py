"""ReadOnceBartForConditionalGeneration (Lin et al. 2021) on tiny random BART configs."""

import json
import math

import pytest
import torch
from safetensors.torch import save_file
from transformers import BartConfig, BartForConditionalGeneration

from hf_readonce import (
    ReadOnceBartConfig,
    ReadOnceBartForConditionalGeneration,
    ReadOnceBartModel,
    ReadOnceDocumentEncoderOutput,
)
from tests.conftest import refuses_unread_keyword, run_without_hf_readonce
from tests.models.bart_checks import one_token_table_state

TINY = dict(vocab_size=99, d_model=32, encoder_layers=4, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
            eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)


def tiny(seed=0, **overrides):
    torch.manual_seed(seed)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(**{**TINY, "compression_ratio": 4, **overrides}))
    with torch.no_grad():  # a non-uniform aggregation so that "linear" differs from "mean" in the tests
        if model.document_encoder.aggregation.score is not None:
            model.document_encoder.aggregation.score.weight.normal_()
    return model.eval()


def tokens(batch, length, seed=1):
    return torch.randint(3, 99, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_config_validation_and_defaults():
    config = ReadOnceBartConfig(**TINY)
    assert (config.compression_ratio, config.window_size, config.aggregation, config.append_layer, config.fusion) == (
        8, 8, "linear", 2, "append")
    assert ReadOnceBartConfig(**TINY, fusion="attention").fusion == "attention"
    assert config.document_chunk_length == 64
    for bad, match in [(dict(compression_ratio=0), "compression_ratio"), (dict(window_size=2), "window_size"),
                       (dict(aggregation="sum"), "aggregation"), (dict(append_layer=5), "append_layer"),
                       (dict(append_layer=-1), "append_layer"), (dict(fusion="cross"), "fusion"),
                       (dict(append_layer=0, append_layer_convention="before"), "append_layer"),
                       (dict(append_layer_convention="inside"), "append_layer_convention"),
                       (dict(document_chunk_length=65), "document_chunk_length"),
                       (dict(document_chunk_length=32, document_chunk_overlap=32), "document_chunk_overlap"),
                       (dict(document_chunk_length=32, document_chunk_overlap=3), "multiple")]:
        with pytest.raises(ValueError, match=match):
            ReadOnceBartConfig(**{**TINY, "compression_ratio": 8, **bad})


def test_from_pretrained_fields_are_validated_and_derive_defaults(tmp_path):
    """`from_pretrained(bart, field=value)` (the documented way to build ReadOnce from a BART checkpoint) builds the
    config with the given fields: a bad value raises the `__init__`'s ValueError naming the field instead of being
    set unchecked, and the window follows a given k (`w = k` from BART, the saved overlap `w - k` from a ReadOnce
    checkpoint) instead of staying at the default k's window, where tokens of every window went unaggregated."""
    BartConfig(**TINY).save_pretrained(tmp_path / "bart")
    for bad, match in [(dict(compression_ratio=0), "compression_ratio"), (dict(aggregation="sum"), "aggregation"),
                       (dict(append_layer=5), "append_layer"), (dict(fusion="cross"), "fusion"),
                       (dict(compression_ratio=16, window_size=8), "window_size")]:
        with pytest.raises(ValueError, match=match):
            ReadOnceBartConfig.from_pretrained(tmp_path / "bart", **bad)
    config = ReadOnceBartConfig.from_pretrained(tmp_path / "bart", compression_ratio=16, append_layer=3)
    assert (config.compression_ratio, config.window_size, config.append_layer) == (16, 16, 3)
    # BART fields given beside are checked together: append_layer=5 of encoder_layers=6 given (the checkpoint has 4)
    config = ReadOnceBartConfig.from_pretrained(tmp_path / "bart", encoder_layers=6, append_layer=5)
    assert (config.encoder_layers, config.append_layer) == (6, 5)
    assert ReadOnceBartConfig.from_pretrained(tmp_path / "bart", encoder_layers=6).append_layer == 3  # half of them
    ReadOnceBartConfig.from_pretrained(tmp_path / "bart", compression_ratio=4, window_size=6).save_pretrained(
        tmp_path / "readonce")
    config = ReadOnceBartConfig.from_pretrained(tmp_path / "readonce", compression_ratio=8)
    assert (config.compression_ratio, config.window_size) == (8, 10)  # the saved overlap w - k = 2 kept
    legacy = json.loads((tmp_path / "readonce" / "config.json").read_text())
    legacy.pop("append_layer_convention")  # 0.1.x: `append_layer` counted in the "before" convention
    (tmp_path / "readonce" / "config.json").write_text(json.dumps(legacy))
    assert ReadOnceBartConfig.from_pretrained(tmp_path / "readonce").append_layer == 1
    assert ReadOnceBartConfig.from_pretrained(tmp_path / "readonce", append_layer=2).append_layer == 2  # given: now

@pytest.mark.parametrize("aggregation", ["linear", "mean", "max"])
@pytest.mark.parametrize("length,k", [(3, 4), (17, 4), (16, 4), (30, 8), (9, 1)])
def test_representation_shapes_masks_and_values(aggregation, length, k):
    model = tiny(aggregation=aggregation, compression_ratio=k)
    ids = tokens(2, length)
    mask = torch.ones_like(ids)
    mask[1, max(1, length // 2):] = 0
    with torch.no_grad():
        reps = model.encode_documents(ids, mask)
        states = model.document_encoder.encoder(input_ids=ids[:1]).last_hidden_state[0]
    count = math.ceil(length / k)
    assert reps.representations.shape == (2, count, 32) and reps.compression_ratio == k
    assert reps.attention_mask[0].tolist() == [1] * count
    assert reps.attention_mask[1].tolist() == [int(j * k < max(1, length // 2)) for j in range(count)]
    window = states[:k]  # first window of the unpadded document
    expected = {"mean": window.mean(0), "max": window.max(0).values}.get(aggregation)
    if aggregation == "linear":
        scores = model.document_encoder.aggregation.score(window).squeeze(-1)
        expected = (torch.softmax(scores, 0)[:, None] * window).sum(0)
    torch.testing.assert_close(reps.representations[0, 0], expected, atol=1e-5, rtol=1e-5)
    assert torch.all(reps.representations[1][reps.attention_mask[1] == 0] == 0)


@pytest.mark.parametrize("aggregation", ["linear", "mean", "max"])
def test_left_and_right_padding_give_the_same_representations(aggregation):
    """Issue 11 (item 8): a window is present by the attention mask, and padding may be on either side: left- and
    right-padded batches give the representations of each document encoded alone."""
    model = tiny(aggregation=aggregation, compression_ratio=4, window_size=6)
    lengths = [17, 9, 3]
    docs = [tokens(1, n, seed=n)[0] for n in lengths]
    width = max(lengths)
    right, left = torch.ones(3, width, dtype=torch.long), torch.ones(3, width, dtype=torch.long)
    right_mask, left_mask = torch.zeros_like(right), torch.zeros_like(left)
    for row, doc in enumerate(docs):
        right[row, : len(doc)], right_mask[row, : len(doc)] = doc, 1
        left[row, width - len(doc) :], left_mask[row, width - len(doc) :] = doc, 1
    with torch.no_grad():
        from_right = model.encode_documents(right, right_mask)
        from_left = model.encode_documents(left, left_mask)
        alone = [model.encode_documents(doc[None]) for doc in docs]
    assert torch.equal(from_left.attention_mask, from_right.attention_mask)
    torch.testing.assert_close(from_left.representations, from_right.representations, atol=1e-5, rtol=0)
    for row, single in enumerate(alone):
        m = math.ceil(lengths[row] / 4)
        assert from_left.attention_mask[row].tolist() == [1] * m + [0] * (from_left.attention_mask.shape[1] - m)
        torch.testing.assert_close(from_left.representations[row, :m], single.representations[0], atol=1e-5, rtol=0)


def test_overlapping_windows_and_k_at_inference():
    model = tiny(compression_ratio=4, window_size=6, aggregation="mean")
    ids = tokens(1, 20)
    with torch.no_grad():
        states = model.document_encoder.encoder(input_ids=ids).last_hidden_state[0]
        reps = model.encode_documents(ids)
        torch.testing.assert_close(reps.representations[0, 1], states[4:10].mean(0), atol=1e-5, rtol=0)
        other = model.encode_documents(ids, compression_ratio=2)  # §5.2: train at one k, use another
    assert other.representations.shape == (1, 10, 32) and other.compression_ratio == 2
    torch.testing.assert_close(other.representations[0, 1], states[2:6].mean(0), atol=1e-5, rtol=0)  # w - k kept


def test_long_documents_are_chunked():
    model = tiny(compression_ratio=4, document_chunk_length=16, document_chunk_overlap=4, aggregation="mean")
    ids = tokens(1, 40)  # beyond 16 tokens: chunks [0,16), [12,28), [24,40)
    with torch.no_grad():
        reps = model.encode_documents(ids)
        second = model.document_encoder.encoder(input_ids=ids[:, 12:28]).last_hidden_state[0]
    assert reps.representations.shape == (1, 4 + 3 + 3, 32)
    torch.testing.assert_close(reps.representations[0, 4], second[4:8].mean(0), atol=1e-5, rtol=0)
    long_ids = tokens(1, 200)  # far beyond the 64 positions
    assert model.encode_documents(long_ids).representations.shape[1] == 200 // 4  # each token in one window


def test_without_representations_equals_bart_and_from_pretrained(tmp_path):
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(**TINY)).eval()
    bart.save_pretrained(tmp_path / "bart")
    model, info = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "bart", output_loading_info=True,
                                                                       compression_ratio=4)
    model.eval()
    assert all(k.startswith("document_encoder.aggregation") for k in info["missing_keys"]), info
    q, dec = tokens(2, 7), tokens(2, 5, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(model(q, decoder_input_ids=dec).logits, bart(q, decoder_input_ids=dec).logits,
                                   atol=1e-5, rtol=0)
        # the document encoder starts as a copy of BART's encoder (separate weights)
        torch.testing.assert_close(model.document_encoder.encoder(input_ids=q).last_hidden_state,
                                   bart.model.encoder(input_ids=q).last_hidden_state, atol=1e-5, rtol=0)
    assert model.document_encoder.encoder.embed_tokens.weight.data_ptr() != model.model.shared.weight.data_ptr()
    # the text encoder takes BartEncoder's arguments at BartEncoder's positions (input_ids, attention_mask,
    # inputs_embeds): a positional call written for BART's encoder gives BART's encoder output
    mask = torch.ones_like(q)
    mask[1, -2:] = 0
    with torch.no_grad():
        embeds = bart.model.encoder.embed_tokens(q)
        torch.testing.assert_close(model.get_encoder()(None, mask, model.get_encoder().embed_tokens(q)).last_hidden_state,
                                   bart.model.encoder(None, mask, embeds).last_hidden_state, atol=1e-5, rtol=0)


def test_representations_appended_at_layer_L():
    model = tiny()
    q, doc = tokens(2, 6), tokens(2, 24, seed=5)
    with torch.no_grad():
        reps = model.encode_documents(doc)
        out = model.get_encoder()(input_ids=q, document_representations=reps)
        plain = model.get_encoder()(input_ids=q)
    assert out.last_hidden_state.shape == (2, 6 + 6, 32) and out.attention_mask.shape == (2, 12)
    # layers 1..L read the question alone: with L = 3 of 4 the question states entering layer 4 are unchanged
    late = tiny(append_layer=3)
    with torch.no_grad():
        seen = {}
        for name, m in (("plain", None), ("reps", reps)):
            hook = late.model.encoder.layers[3].register_forward_pre_hook(
                lambda mod, args, name=name: seen.__setitem__(name, args[0]))
            late.get_encoder()(input_ids=q, document_representations=m)
            hook.remove()
    torch.testing.assert_close(seen["reps"][:, :6], seen["plain"], atol=1e-6, rtol=0)
    assert seen["reps"].shape[1] == 12
    assert not torch.allclose(out.last_hidden_state[:, :6], plain.last_hidden_state, atol=1e-4)


def test_append_layer_follows_fig3_question_alone_for_L_layers():
    """Issue 11 (item 6): Fig. 3 / App. C.3: the question runs alone through L layers, then R is appended (2 + 2 of 4
    at the default L = N // 2, as 6 + 6 of 12); L = N appends after the last layer; 0.1.x configs ("before layer L")
    load converted, so they compute what they computed."""
    q, doc = tokens(2, 6), tokens(2, 24, seed=5)
    lengths = {}
    model = tiny()  # L = 2 of 4
    hooks = [layer.register_forward_pre_hook(lambda mod, args, i=i: lengths.__setitem__(i, args[0].shape[1]))
             for i, layer in enumerate(model.model.encoder.layers)]
    with torch.no_grad():
        reps = model.encode_documents(doc)
        model.get_encoder()(input_ids=q, document_representations=reps)
    for hook in hooks:
        hook.remove()
    assert model.config.append_layer == 2 and lengths == {0: 6, 1: 6, 2: 12, 3: 12}
    last = tiny(append_layer=4)  # after the last encoder layer: the question's states are BART's, R unchanged
    with torch.no_grad():
        out = last.get_encoder()(input_ids=q, document_representations=reps)
        plain = last.get_encoder()(input_ids=q)
    torch.testing.assert_close(out.last_hidden_state[:, :6], plain.last_hidden_state, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.last_hidden_state[:, 6:], reps.representations, atol=0, rtol=0)
    assert out.attention_mask.shape == (2, 12)
    # a 0.1.x config.json (no append_layer_convention) means "before layer L": read as L - 1
    old = ReadOnceBartConfig.from_dict({**TINY, "compression_ratio": 4, "append_layer": 3})
    assert (old.append_layer, old.append_layer_convention) == (2, "after")
    again = ReadOnceBartConfig.from_dict(old.to_dict())
    assert again.append_layer == 2
    assert ReadOnceBartConfig(**TINY, append_layer=0).append_layer == 0


def test_generate_cached_equals_recomputed_greedy_beam_batch():
    model = tiny()
    q, doc = tokens(3, 6), tokens(3, 20, seed=4)
    doc_mask = torch.ones_like(doc)
    doc_mask[2, 9:] = 0
    q_mask = torch.ones_like(q)
    q_mask[1, 4:] = 0
    with torch.no_grad():
        reps = model.encode_documents(doc, doc_mask)
        kwargs = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False)
        for beams in (1, 3):
            cached = model.generate(q, attention_mask=q_mask, document_representations=reps.representations,
                                    document_attention_mask=reps.attention_mask, num_beams=beams, **kwargs)
            recomputed = model.generate(q, attention_mask=q_mask, document_representations=model.encode_documents(
                doc, doc_mask), num_beams=beams, **kwargs)
            assert torch.equal(cached, recomputed)
            for row in range(3):  # batched == one by one
                single = model.generate(q[row : row + 1, : int(q_mask[row].sum())],
                                        document_representations=reps.representations[row : row + 1, : int(
                                            reps.attention_mask[row].sum())], num_beams=beams, **kwargs)
                assert torch.equal(single[0], cached[row]), (beams, row)
        blind = model.generate(q, attention_mask=q_mask, **kwargs)
    assert not torch.equal(blind, cached)  # the representations reached the encoder


def _strengthen_representation_attention(model, seed=3):
    """Random `Attn'` weights, so that the representations change the tiny model's outputs visibly."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".representation_attn." in name and name.endswith("weight"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
    return model


def test_attention_fusion_is_eq4_and_bart_without_representations(tmp_path):
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(**TINY)).eval()
    bart.save_pretrained(tmp_path / "bart")
    model, info = ReadOnceBartForConditionalGeneration.from_pretrained(
        tmp_path / "bart", output_loading_info=True, compression_ratio=4, fusion="attention", append_layer=2)
    model.eval()
    assert all(k.startswith("document_encoder.aggregation") for k in info["missing_keys"]), info
    fused = [name for name, m in model.named_modules() if type(m).__name__ == "ReadOnceBartFusedAttention"]
    assert fused == ["model.encoder.layers.2.self_attn", "model.encoder.layers.3.self_attn",
                     "model.decoder.layers.0.self_attn", "model.decoder.layers.1.self_attn"]  # layers L+1..N, decoder
    for name in fused:  # App. A.1: Attn' starts as a copy of Attn
        module = model.get_submodule(name)
        torch.testing.assert_close(module.representation_attn.q_proj.weight, module.q_proj.weight, atol=0, rtol=0)
        torch.testing.assert_close(module.representation_attn.out_proj.bias, module.out_proj.bias, atol=0, rtol=0)
    q, dec, doc = tokens(2, 7), tokens(2, 5, seed=2), tokens(2, 20, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(model(q, decoder_input_ids=dec).logits, bart(q, decoder_input_ids=dec).logits,
                                   atol=1e-5, rtol=0)
    _strengthen_representation_attention(model)
    doc_mask = torch.ones_like(doc)
    doc_mask[1, 10:] = 0
    with torch.no_grad():
        reps = model.encode_documents(doc, doc_mask)
        out = model.get_encoder()(input_ids=q, document_representations=reps)
        assert out.last_hidden_state.shape == (2, 7, 32) and out.attention_mask.shape == (2, 7)  # never appended
        # eq. 4 on the first fused encoder layer: (Attn(H, H, H) + Attn'(H, R, R)) / 2, padded R masked out
        seen = {}
        layer = model.model.encoder.layers[2]
        hook = layer.register_forward_pre_hook(lambda mod, args: seen.__setitem__("h", args[0]))
        model.get_encoder()(input_ids=q, document_representations=reps)
        hook.remove()
        attention = layer.self_attn
        h, r = seen["h"], reps.representations
        for row in range(2):
            m = int(reps.attention_mask[row].sum())
            own = BartAttentionForward(attention, h[row : row + 1])
            other = BartAttentionForward(attention.representation_attn, h[row : row + 1], r[row : row + 1, :m])
            got = attention(h[row : row + 1], document_representations=r[row : row + 1],
                            document_attention_mask=reps.attention_mask[row : row + 1])[0]
            torch.testing.assert_close(got, (own + other) / 2, atol=1e-4, rtol=1e-4)
        # layers 1..L-1 read the text alone: their output ignores the representations
        early = {}
        for key, value in (("plain", None), ("reps", reps)):
            hook = model.model.encoder.layers[1].register_forward_hook(
                lambda mod, args, output, key=key: early.__setitem__(key, output))
            model.get_encoder()(input_ids=q, document_representations=value)
            hook.remove()
        torch.testing.assert_close(early["reps"], early["plain"], atol=0, rtol=0)
        with_reps = model(q, decoder_input_ids=dec, document_representations=reps).logits
        assert not torch.allclose(with_reps, model(q, decoder_input_ids=dec).logits, atol=1e-3)
        # the decoder attends to R too: same encoder states, decoder with and without R differ
        calls = []
        hook = model.model.decoder.layers[1].self_attn.representation_attn.register_forward_hook(
            lambda *args: calls.append(1))
        model(q, decoder_input_ids=dec, document_representations=reps)
        hook.remove()
        assert calls == [1]


def BartAttentionForward(module, hidden, key_value=None):
    from transformers.models.bart.modeling_bart import BartAttention

    return BartAttention.forward(module, hidden, key_value_states=key_value)[0]


def test_attention_fusion_generate_cached_beam_batch_and_training():
    model = _strengthen_representation_attention(tiny(fusion="attention"))
    q, doc = tokens(3, 6), tokens(3, 20, seed=4)
    doc_mask = torch.ones_like(doc)
    doc_mask[2, 9:] = 0
    kwargs = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False)
    with torch.no_grad():
        reps = model.encode_documents(doc, doc_mask)
        for beams in (1, 3):
            cached = model.generate(q, document_representations=reps.representations,
                                    document_attention_mask=reps.attention_mask, num_beams=beams, **kwargs)
            recomputed = model.generate(q, document_representations=model.encode_documents(doc, doc_mask),
                                        num_beams=beams, **kwargs)
            assert torch.equal(cached, recomputed)
            for row in range(3):
                m = int(reps.attention_mask[row].sum())
                single = model.generate(q[row : row + 1], document_representations=reps.representations[
                    row : row + 1, :m], num_beams=beams, **kwargs)
                assert torch.equal(single[0], cached[row]), (beams, row)
            # the KV-cached decoding equals teacher forcing over the generated tokens
            logits = model(q, document_representations=reps, decoder_input_ids=cached[:, :-1]).logits
            if beams == 1:
                assert torch.equal(logits.argmax(-1), cached[:, 1:])
        assert not torch.equal(model.generate(q, **kwargs), model.generate(q, document_representations=reps,
                                                                               **kwargs))
    model.train()
    model.gradient_checkpointing_enable()
    loss = model(tokens(2, 6), document_input_ids=tokens(2, 16), labels=tokens(2, 4)).loss
    loss.backward()
    for name in ("model.encoder.layers.3.self_attn.representation_attn.q_proj.weight",
                 "model.decoder.layers.0.self_attn.representation_attn.v_proj.weight",
                 "document_encoder.encoder.layers.0.fc1.weight", "document_encoder.aggregation.score.weight"):
        grad = model.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name



@pytest.mark.parametrize("fusion", ["append", "attention"])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_gradient_checkpointing_gives_the_gradients_of_the_plain_backward(fusion, use_reentrant):
    # with use_reentrant=True (PEFT's default) only tensors passed positionally to a checkpointed layer get their
    # gradients: the fused layers took the representations as keyword arguments, and the backward pass ran through
    # the document encoder's graph a second time (RuntimeError)
    model = _strengthen_representation_attention(tiny(fusion=fusion)) if fusion == "attention" else tiny()
    model.train()
    inputs = dict(input_ids=tokens(2, 6), document_input_ids=tokens(2, 16, seed=4), labels=tokens(2, 4, seed=5))
    model(**inputs).loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    model(**inputs).loss.backward()
    got = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    assert "document_encoder.encoder.layers.0.fc1.weight" in got
    if fusion == "attention":
        assert "model.decoder.layers.0.self_attn.representation_attn.v_proj.weight" in got
        assert "model.encoder.layers.3.self_attn.representation_attn.q_proj.weight" in got
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_representations_given_as_encoder_outputs_are_refused_by_name(fusion):
    """`encode_documents` returns the documents' representations, not the encoder's output: given as
    `encoder_outputs`, they were read as the encoder's states (the question never read: other tokens, without a
    word). And once `encoder_outputs` are given, `document_representations` (or document tokens) can no longer reach
    the encoder: they were ignored, the answer closed-book."""
    model = _strengthen_representation_attention(tiny(fusion=fusion)) if fusion == "attention" else tiny()
    q, doc = tokens(2, 6), tokens(2, 20, seed=4)
    settings = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False)
    with torch.no_grad():
        reps = model.encode_documents(doc)
        encoded = model.get_encoder()(input_ids=q, document_representations=reps)
        expected = model.generate(q, document_representations=reps, **settings)
        assert torch.equal(model.generate(encoder_outputs=encoded, **settings), expected)
        for call in (lambda: model(q, encoder_outputs=reps, decoder_input_ids=q),
                     lambda: model.model(q, encoder_outputs=reps, decoder_input_ids=q),
                     lambda: model.generate(q, encoder_outputs=reps, **settings),
                     lambda: model.generate(encoder_outputs=reps, num_beams=2, **settings)):
            with pytest.raises(TypeError, match=r"`encoder_outputs` must be the encoder's output .*, got a "
                                                r"ReadOnceDocumentEncoderOutput: .* `document_representations=`"):
                call()
        for documents in (dict(document_representations=reps), dict(document_input_ids=doc)):
            with pytest.raises(ValueError, match="Pass the documents with the text .* or `encoder_outputs`"):
                model.generate(encoder_outputs=model.get_encoder()(input_ids=q), **documents, **settings)


def test_errors():
    model = tiny()
    q = tokens(2, 5)
    with pytest.raises(ValueError, match="hidden size"):
        model(q, document_representations=torch.zeros(2, 3, 16), decoder_input_ids=q)
    with pytest.raises(ValueError, match="documents for a batch"):
        model(q, document_representations=torch.zeros(3, 3, 32), decoder_input_ids=q)
    with pytest.raises(ValueError, match="document_attention_mask"):
        model(q, document_attention_mask=torch.ones(2, 3), decoder_input_ids=q)
    with pytest.raises(ValueError, match="empty"):
        model.encode_documents(tokens(2, 5), torch.tensor([[1] * 5, [0] * 5]))
    with pytest.raises(ValueError, match="non-empty"):
        model.encode_documents(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="compression_ratio"):
        model.encode_documents(tokens(1, 5), compression_ratio=0)
    other = tiny(seed=1).encode_documents(tokens(2, 8))
    with pytest.raises(ValueError, match="re-encode"):
        model(q, document_representations=other, decoder_input_ids=q)


def test_training_step_joint_and_frozen_lora_and_groups(tmp_path):
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = tiny().train()
    rows = [{"input_ids": tokens(1, 6, seed=s)[0].tolist(), "document_input_ids": tokens(1, 16, seed=s + 50)[0].tolist(),
             "labels": tokens(1, 4, seed=s + 99)[0].tolist()} for s in range(8)]
    before = model.document_encoder.aggregation.score.weight.detach().clone()
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4,
                                    use_cpu=True, report_to="none", save_strategy="no", learning_rate=1e-2,
                                    remove_unused_columns=False)
    result = Seq2SeqTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows)).train()
    assert result.training_loss > 0
    assert not torch.equal(before, model.document_encoder.aggregation.score.weight)  # joint training reaches it
    groups = model.optimizer_parameter_groups()
    assert [g["lr"] for g in groups] == [1e-5, 1e-4] and len(groups[1]["params"]) == 2
    model.freeze_document_encoder()
    assert not any(p.requires_grad for p in model.document_encoder.parameters())
    model.gradient_checkpointing_enable()
    reps = model.encode_documents(tokens(2, 16))
    model(tokens(2, 6), document_representations=reps, labels=tokens(2, 4)).loss.backward()
    lora = get_peft_model(tiny(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    lora(input_ids=tokens(2, 6), document_representations=lora.encode_documents(tokens(2, 16)),
         labels=tokens(2, 4)).loss.backward()


def test_lora_seq2seq_round_trip_generate_and_stored_representations(tmp_path):
    """`task_type="SEQ_2_SEQ_LM"` (peft's `PeftModelForSeq2SeqLM`) hands ReadOnce's own arguments on: the wrapper
    trains one `Seq2SeqTrainer` step on `document_input_ids`, saves, reloads, merges and loads with
    `trust_remote_code=True` with the trained logits; representations encoded through the wrapper answer and generate
    as the merged model does, and those of the same weights with the adapter disabled are refused (the fingerprint
    holds the adapters' state, not only their weights)."""
    from peft import LoraConfig
    from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

    from tests.models.peft_checks import lora_round_trip

    question, document, labels = tokens(2, 6), tokens(2, 20, seed=4), tokens(2, 4, seed=5)
    inputs = dict(input_ids=question, document_input_ids=document, labels=labels)
    rows = [{key: value[i] for key, value in inputs.items()} for i in range(2)]
    config = LoraConfig(task_type="SEQ_2_SEQ_LM", target_modules=["q_proj", "v_proj"], r=4)
    peft_model, merged = lora_round_trip(tiny, config, inputs, rows, AutoModelForSeq2SeqLM, tmp_path,
                                         trainer_class=Seq2SeqTrainer, args_class=Seq2SeqTrainingArguments)
    greedy = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
    with torch.no_grad():
        reps = peft_model.encode_documents(document)
        torch.testing.assert_close(peft_model(input_ids=question, document_representations=reps, labels=labels).logits,
                                   peft_model(**inputs).logits, atol=1e-5, rtol=0)
        expected = merged.generate(question, document_representations=merged.encode_documents(document), **greedy)
        assert torch.equal(peft_model.generate(input_ids=question, document_representations=reps, **greedy), expected)
        assert torch.equal(peft_model.generate(input_ids=question, document_input_ids=document, **greedy), expected)
        with peft_model.disable_adapter():
            without = peft_model.encode_documents(document)
        assert not torch.allclose(without.representations, reps.representations)
        with pytest.raises(ValueError, match="re-encode the documents"):
            peft_model(input_ids=question, document_representations=without, labels=labels)


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_save_and_remote_code_round_trip(tmp_path, fusion):
    model = tiny(fusion=fusion)
    model.save_pretrained(tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.py")) == [
        "configuration_readonce_bart.py", "modeling_readonce_bart.py"]
    q, doc = tokens(2, 6), tokens(2, 20, seed=4)
    with torch.no_grad():
        expected = model.generate(q, document_representations=model.encode_documents(doc), max_new_tokens=4,
                                  min_new_tokens=4, do_sample=False)
    torch.save({"q": q, "doc": doc, "expected": expected}, tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path / 'ckpt')!r}, trust_remote_code=True).eval()
        assert "hf_readonce" not in type(model).__module__
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        with torch.no_grad():
            got = model.generate(d["q"], document_representations=model.encode_documents(d["doc"]), max_new_tokens=4,
                                 min_new_tokens=4, do_sample=False)
        assert torch.equal(got, d["expected"]), (got, d["expected"])
        print("OK", type(model).__name__)
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK ReadOnceBartForConditionalGeneration" in result.stdout
    assert isinstance(model.encode_documents(doc), ReadOnceDocumentEncoderOutput)



def test_auto_model_loads_the_bare_model_of_a_saved_checkpoint_without_hf_readonce(tmp_path):
    """`AutoModel` on a saved ReadOnce checkpoint gives `ReadOnceBartModel` with the checkpoint's `model.*` weights, as
    `AutoModel` gives a `BartModel` for a `BartForConditionalGeneration` checkpoint, also from the folder's own code
    where hf-readonce is absent (`save_pretrained` writes `AutoModel` into `auto_map`); its outputs are the full
    model's `model` outputs (both fusions, a `layer_norm_eps` other than BART's hard-coded default)."""
    from transformers import AutoModel

    from hf_readonce.models.readonce_bart.modeling_readonce_bart import ReadOnceBartModel

    q, doc, labels = tokens(2, 6), tokens(2, 20, seed=4), tokens(2, 5, seed=5)
    expected, inputs = {}, {"q": q, "labels": labels}
    for fusion in ("append", "attention"):
        model = tiny(fusion=fusion, layer_norm_eps=1e-3)
        folder = tmp_path / fusion
        model.save_pretrained(folder)
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        assert auto_map["AutoModel"] == "modeling_readonce_bart.ReadOnceBartModel"
        with torch.no_grad():
            reps = model.encode_documents(doc)
            full = model(q, document_representations=reps, decoder_input_ids=labels)
            base = model.model(q, document_representations=reps, decoder_input_ids=labels)
        # the full model's logits are its LM head over these states
        torch.testing.assert_close(model.lm_head(base.last_hidden_state) + model.final_logits_bias, full.logits,
                                   atol=0, rtol=0)
        bare, info = AutoModel.from_pretrained(folder, output_loading_info=True)
        assert type(bare) is ReadOnceBartModel and bare.config.fusion == fusion
        assert not any(info.values()), info  # nothing missing; the document encoder and the head are left quietly
        with torch.no_grad():
            got = bare.eval()(q, document_representations=reps.representations,
                              document_attention_mask=reps.attention_mask, decoder_input_ids=labels)
        assert torch.equal(got.last_hidden_state, base.last_hidden_state)
        assert torch.equal(got.encoder_last_hidden_state, base.encoder_last_hidden_state)
        inputs[fusion] = (reps.representations, reps.attention_mask)
        expected[fusion] = base
    torch.save(inputs, tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import json, torch
        from transformers import AutoModel
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        for fusion in ("append", "attention"):
            model = AutoModel.from_pretrained({str(tmp_path)!r} + "/" + fusion, trust_remote_code=True).eval()
            reps, mask = d[fusion]
            with torch.no_grad():
                out = model(d["q"], document_representations=reps, document_attention_mask=mask,
                            decoder_input_ids=d["labels"])
            print("BARE", fusion, type(model).__module__.split(".")[0], type(model).__name__,
                  json.dumps([out.last_hidden_state.flatten().tolist(), out.encoder_last_hidden_state.flatten().tolist()]))
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for line in (line for line in result.stdout.splitlines() if line.startswith("BARE ")):
        _, fusion, package, name, values = line.split(" ", 4)
        assert (package, name) == ("transformers_modules", "ReadOnceBartModel")
        states, encoder_states = json.loads(values)
        assert torch.equal(torch.tensor(states), expected.pop(fusion).last_hidden_state.flatten())
        assert len(encoder_states) == 2 * 6 * 32 + (2 * 5 * 32 if fusion == "append" else 0)  # the reps appended
    assert not expected  # both fusions came back


def test_the_bare_model_returns_barts_output_and_defaults_the_decoder_inputs_as_bart():
    """`ReadOnceBartModel.forward` returns BART's `Seq2SeqModelOutput` (a subclass whose added fields, `Attn'`'s
    weights, come last; a tuple with `return_dict=False`), and without decoder inputs reads `input_ids` shifted
    right, as `BartModel` does."""
    from transformers.modeling_outputs import Seq2SeqModelOutput
    from transformers.models.bart.modeling_bart import shift_tokens_right

    model = tiny()
    q, doc = tokens(2, 6), tokens(2, 20, seed=4)
    with torch.no_grad():
        reps = model.encode_documents(doc)
        out = model.model(q, document_representations=reps)
        shifted = model.model(q, document_representations=reps,
                              decoder_input_ids=shift_tokens_right(q, TINY["pad_token_id"],
                                                                   TINY["decoder_start_token_id"]))
        as_tuple = model.model(q, document_representations=reps, return_dict=False)
    assert isinstance(out, Seq2SeqModelOutput) and out.last_hidden_state.shape == (2, 6, 32)
    assert torch.equal(out.last_hidden_state, shifted.last_hidden_state)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.last_hidden_state)
    with pytest.raises(ValueError, match="`decoder_input_ids` or `decoder_inputs_embeds`, or `input_ids`"):
        model.model(inputs_embeds=model.model.shared(q), document_representations=reps)

def test_bert_to_bart_converter_is_exact_on_minilm(tmp_path):
    from transformers import AutoTokenizer, BertModel

    from hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart import readonce_bart_from_bert
    from hf_readonce.weights import minilm_path

    bert = BertModel.from_pretrained(minilm_path(), add_pooling_layer=False).eval()
    model = readonce_bart_from_bert(bert, compression_ratio=8).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    batch = tokenizer(["Jane Austen wrote Emma in 1815.", "Persuasion was her last novel, published in 1817."],
                      padding=True, return_tensors="pt")
    real = batch.attention_mask.bool()
    with torch.no_grad():
        expected = bert(**batch).last_hidden_state
        for encoder in (model.model.encoder, model.document_encoder.encoder):
            got = encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
            torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)
    assert model.config.decoder_start_token_id == tokenizer.cls_token_id
    assert model.config.eos_token_id == tokenizer.sep_token_id and model.config.layer_norm_eps == 1e-12
    model.save_pretrained(tmp_path / "converted")
    reloaded = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "converted").eval()
    with torch.no_grad():
        got = reloaded.model.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)
    with torch.no_grad():  # the warm-started model generates (new cross-attention: content is not yet meaningful)
        out = reloaded.generate(batch.input_ids, attention_mask=batch.attention_mask,
                                document_representations=reloaded.encode_documents(batch.input_ids,
                                                                                   batch.attention_mask),
                                max_new_tokens=3)
    assert out.shape[0] == 2


def test_return_dict_false_gives_a_tuple():
    """`@can_return_tuple`, as `BartForConditionalGeneration`."""
    model = tiny()
    q, doc = tokens(2, 6), tokens(2, 20, seed=4)
    reps = model.encode_documents(doc)
    with torch.no_grad():
        full = model(q, document_representations=reps, labels=tokens(2, 4))
        loss, logits = model(q, document_representations=reps, labels=tokens(2, 4), return_dict=False)[:2]
    assert torch.equal(loss, full.loss) and torch.equal(logits, full.logits)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"labels": "rows1"}, ValueError, r"hold 1 rows for an encoder batch of 2"),
    ({"labels": "rows3"}, ValueError, r"hold 3 rows for an encoder batch of 2"),
    ({"labels": "float"}, TypeError, r"`labels` must hold integer token ids"),
    ({"decoder_input_ids": "rows1"}, ValueError, r"hold 1 rows"),
    ({"attention_mask": (1, 6)}, ValueError, r"`attention_mask` \(1, 6\) must have the shape of `input_ids` \(2, 6\)"),
    ({"attention_mask": (2, 4)}, ValueError, r"`attention_mask` \(2, 4\) must have the shape"),
    ({"document_attention_mask": (2, 20)}, ValueError, r"the mask of `document_input_ids` is "
                                                        r"`document_input_attention_mask`"),
    ({"document_input_attention_mask": (1, 20)}, ValueError, r"`document_input_attention_mask` \(1, 20\)"),
    ({"input_ids": "float"}, TypeError, r"`input_ids` must hold integer token ids"),
])
def test_mismatched_inputs_are_refused_by_name(kwargs, error, words):
    model, q, doc, labels = tiny(), tokens(2, 6), tokens(2, 20, seed=3), tokens(2, 5, seed=4)
    values = {"rows1": labels[:1], "rows3": tokens(3, 5), "float": None}
    call = {"input_ids": q, "document_input_ids": doc}
    for name, value in kwargs.items():
        if isinstance(value, tuple):
            call[name] = torch.ones(value, dtype=torch.long)
        elif value == "float":
            call[name] = (q if name == "input_ids" else labels).float()
        else:
            call[name] = values[value]
    with pytest.raises(error, match=words):
        model(**call)
    assert model(input_ids=q, document_input_ids=doc, labels=labels).loss.isfinite()



@pytest.mark.parametrize("convert", ["numpy", "list"])
@pytest.mark.parametrize("entry, argument", [
    ("encode_documents", "input_ids"), ("encode_documents", "attention_mask"),
    *[(entry, argument) for entry in ("forward", "generate") for argument in (
        "input_ids", "attention_mask", "document_representations", "document_attention_mask", "document_input_ids",
        "document_input_attention_mask", "decoder_input_ids", "decoder_attention_mask")],
    ("forward", "labels"), ("encoder", "input_ids"), ("encoder", "attention_mask"),
])
def test_arrays_and_lists_are_refused_naming_the_argument(entry, argument, convert):
    """A numpy array or a list for a tensor argument of a public entry point: a TypeError naming that argument
    (torch failed deep inside, or named `input_ids` for `document_input_ids`)."""
    model, q, doc, labels = tiny(), tokens(2, 6), tokens(2, 20, seed=3), tokens(2, 5, seed=4)
    with torch.no_grad():
        reps = model.encode_documents(doc)
    tensors = {"input_ids": q, "attention_mask": torch.ones(2, 6, dtype=torch.long),
               "document_representations": reps.representations, "document_attention_mask": reps.attention_mask,
               "document_input_ids": doc, "document_input_attention_mask": torch.ones(2, 20, dtype=torch.long),
               "decoder_input_ids": labels, "decoder_attention_mask": torch.ones(2, 5, dtype=torch.long),
               "labels": labels}
    call = {"input_ids": doc if entry == "encode_documents" else q}
    if argument.startswith("document_input"):
        call["document_input_ids"] = doc
    elif argument.startswith("document_"):
        call["document_representations"] = reps.representations
    if argument == "decoder_attention_mask":
        call["decoder_input_ids"] = labels
    value = tensors[argument] if entry != "encode_documents" or argument != "attention_mask" else tensors[
        "document_input_attention_mask"]
    call[argument] = value.numpy() if convert == "numpy" else value.tolist()
    function = {"encode_documents": model.encode_documents, "encoder": model.get_encoder(),
                "generate": model.generate}.get(entry, model)
    if entry == "generate":
        call["max_new_tokens"] = 1
    got = "ndarray" if convert == "numpy" else "list"
    with torch.no_grad(), pytest.raises(TypeError, match=rf"^`{argument}` must be a .*torch.Tensor.*, got {got}"):
        function(**call)

def test_generate_with_raw_document_tokens_reads_the_document():
    """`generate(document_input_ids=...)` encodes the documents once before decoding; it used to decode without
    them (generation runs the encoder once, and the raw tokens never reached it)."""
    model, q, doc = tiny(init_std=0.3), tokens(2, 6), tokens(2, 20, seed=3)
    kwargs = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, output_scores=True,
                  return_dict_in_generate=True)
    raw = model.generate(q, document_input_ids=doc, **kwargs)
    stored = model.generate(q, document_representations=model.encode_documents(doc), **kwargs)
    alone = model.generate(q, **kwargs)
    assert torch.equal(raw.sequences, stored.sequences)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(raw.scores, stored.scores))
    assert not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(raw.scores, alone.scores))
    with pytest.raises(ValueError, match="not both"):
        model.generate(q, document_input_ids=doc, document_representations=model.encode_documents(doc))
    with pytest.raises(ValueError, match="without `document_input_ids`"):
        model.generate(q, document_input_attention_mask=torch.ones(2, 20))


def test_recorded_document_and_question_lengths_are_the_adapter_defaults_and_not_in_the_fingerprint(tmp_path):
    from transformers import AutoTokenizer

    from hf_readonce.representations import get_adapter
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = tiny(vocab_size=tokenizer.vocab_size)
    before = model.representation_fingerprint()
    assert get_adapter(model, tokenizer).max_document_length == model.config.document_chunk_length * 4
    model.config.max_document_length = 40  # what the ReadOnce recipe records before saving
    model.save_pretrained(tmp_path)
    loaded = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path)
    assert loaded.config.max_document_length == 40 and loaded.representation_fingerprint() == before
    assert get_adapter(loaded, tokenizer).max_document_length == 40
    assert get_adapter(loaded, tokenizer, max_document_length=16).max_document_length == 16
    # the config's own default is the adapter's (and the pipeline's): recorded, else T * k with the k read at
    assert loaded.config.default_document_length() == loaded.config.default_document_length(2) == 40
    fresh = tiny(vocab_size=tokenizer.vocab_size)  # nothing recorded
    chunk = fresh.config.document_chunk_length
    assert (fresh.config.default_document_length(), fresh.config.default_document_length(2)) == (chunk * 4, chunk * 2)
    assert get_adapter(fresh, tokenizer, compression_ratio=2).max_document_length == chunk * 2
    with pytest.raises(ValueError, match="max_document_length"):
        ReadOnceBartConfig(**TINY, max_document_length=0)
    # the question length is recorded the same way (`max_question_length`, the name of every QA family's config)
    assert loaded.config.max_question_length is None and get_adapter(loaded, tokenizer).max_prompt_length == 32
    loaded.config.max_question_length = 12
    loaded.save_pretrained(tmp_path / "recorded")
    recorded = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "recorded")
    assert recorded.config.max_question_length == 12 and recorded.representation_fingerprint() == before
    assert get_adapter(recorded, tokenizer).max_prompt_length == 12
    for bad in (0, "32", 3.0, True):
        with pytest.raises(ValueError, match="`max_question_length` must be None or a positive int"):
            ReadOnceBartConfig(**TINY, max_question_length=bad)


def test_texts_and_targets_beyond_the_position_table_are_refused_by_name():
    model, doc = tiny(), tokens(1, 20, seed=3)  # 64 positions
    with pytest.raises(ValueError, match=r"`input_ids` hold 70 tokens, more than the model's 64 positions"):
        model(input_ids=tokens(1, 70), document_input_ids=doc)
    with pytest.raises(ValueError, match=r"`labels` / `decoder_input_ids` hold 80 tokens"):
        model(input_ids=tokens(1, 6), document_input_ids=doc, labels=tokens(1, 80))
    assert model(input_ids=tokens(1, 6), document_input_ids=tokens(1, 300), labels=tokens(1, 5)).loss.isfinite()


def test_an_encoder_output_without_representations_is_named():
    """A `ReadOnceDocumentEncoderOutput` that holds a mask but no `representations` tensor is a ValueError naming
    `document_representations`, through `forward` and `generate` (an AttributeError on None before)."""
    model = tiny()
    q = tokens(1, 6)
    empty = ReadOnceDocumentEncoderOutput(attention_mask=torch.ones(1, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="document_representations"):
        model(input_ids=q, document_representations=empty, decoder_input_ids=q)
    with pytest.raises(ValueError, match="document_representations"):
        model.generate(input_ids=q, document_representations=empty, max_new_tokens=2)


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_a_misspelled_keyword_argument_is_a_type_error_naming_it(fusion):
    """`**kwargs` took any name: `document_representation=` (for `document_representations=`) answered without the
    document, `encoder_output=` re-read the question alone."""
    model, q, doc = tiny(fusion=fusion), tokens(2, 6), tokens(2, 20, seed=3)
    reps = model.encode_documents(doc)
    encoder_outputs = model.get_encoder()(q, document_representations=reps)
    labels = tokens(2, 5, seed=5)
    for call, message in [
            (lambda: model(q, document_representation=reps, labels=labels),
             "ReadOnceBartForConditionalGeneration.forward() got an unexpected keyword argument "
             "'document_representation'. Did you mean 'document_representations'?"),
            (lambda: model(q, encoder_output=encoder_outputs, labels=labels),
             "ReadOnceBartForConditionalGeneration.forward() got an unexpected keyword argument "
             "'encoder_output'. Did you mean 'encoder_outputs'?"),
            (lambda: model.model(q, document_attention_masks=reps.attention_mask, decoder_input_ids=labels),
             "ReadOnceBartModel.forward() got an unexpected keyword argument 'document_attention_masks'. "
             "Did you mean 'document_attention_mask'?")]:
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == message
    # what transformers passes (`TransformersKwargs`, BART's own arguments, `return_dict`, a BERT tokenizer's
    # `token_type_ids`) and a `None`
    expected = model(q, document_representations=reps, labels=labels)
    out = model(q, document_representations=reps, labels=labels, return_dict=True, output_attentions=False,
                num_items_in_batch=torch.tensor(10), token_type_ids=torch.zeros_like(q), document_representation=None)
    torch.testing.assert_close(out.logits, expected.logits)
    # generate() hands its keyword arguments to forward after transformers' own check, which names a misspelling
    with pytest.raises(ValueError, match="document_representation"):
        model.generate(q, document_representation=reps, max_new_tokens=2)


def test_the_attention_decoder_refuses_a_misspelled_keyword_argument():
    """The decoder of `fusion="attention"` (`get_decoder()`, what a user runs over stored encoder states) took any
    name into BART's `**kwargs`: `document_representation=` decoded without the document's vectors (eq. 4's second
    attention skipped), `encoder_attention_masks=` attended to the padding of the question."""
    model, q, doc = _strengthen_representation_attention(tiny(fusion="attention")), tokens(2, 6), tokens(2, 20, seed=3)
    mask = torch.ones_like(q)
    mask[1, 4:] = 0
    encoded = model.get_encoder()(q, mask, document_representations=model.encode_documents(doc))
    states, cross_mask = encoded.last_hidden_state, encoded.attention_mask
    reps, reps_mask = encoded.document_representations, encoded.document_attention_mask
    decoder, labels = model.get_decoder(), tokens(2, 5, seed=5)
    for call, message in [
            (lambda: decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_mask=cross_mask,
                             document_representation=reps),
             "ReadOnceBartDecoder.forward() got an unexpected keyword argument 'document_representation'. "
             "Did you mean 'document_representations'?"),
            (lambda: decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_masks=cross_mask,
                             document_representations=reps, document_attention_mask=reps_mask),
             "ReadOnceBartDecoder.forward() got an unexpected keyword argument 'encoder_attention_masks'. "
             "Did you mean 'encoder_attention_mask'?")]:
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == message
    expected = decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_mask=cross_mask,
                       document_representations=reps, document_attention_mask=reps_mask).last_hidden_state
    without = decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_mask=cross_mask)
    assert not torch.allclose(without.last_hidden_state, expected)  # the vectors count: leaving them out is no no-op
    # the model's decoder output is this one
    decoded = model.model(q, mask, document_representations=model.encode_documents(doc), decoder_input_ids=labels)
    torch.testing.assert_close(decoded.last_hidden_state, expected)
    # what transformers passes down through the model (`return_dict`, output switches, `TransformersKwargs` such as
    # `num_items_in_batch`), and a `None`
    out = decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_mask=cross_mask,
                  document_representations=reps, document_attention_mask=reps_mask, return_dict=True,
                  output_attentions=False, num_items_in_batch=torch.tensor(10), document_representation=None)
    torch.testing.assert_close(out.last_hidden_state, expected)
    # the model hands its decoder what it takes: the loss (as Trainer computes it) and generate() run unchanged
    model.train()
    model(q, attention_mask=mask, document_input_ids=doc, labels=labels,
          num_items_in_batch=torch.tensor(10)).loss.backward()
    assert model.get_parameter("model.decoder.layers.0.self_attn.representation_attn.v_proj.weight").grad.abs().sum() > 0
    model.eval()
    reps = model.encode_documents(doc)
    for num_beams in (1, 2):
        out = model.generate(q, attention_mask=mask, document_representations=reps, max_new_tokens=3,
                             num_beams=num_beams, do_sample=False)
        assert out.shape[0] == 2


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_the_encoder_refuses_a_misspelled_keyword_argument(fusion):
    """The encoder (`get_encoder()`, what a user runs to encode a question with its documents once) took any name
    into `**kwargs`: `atention_mask=` read the padding as text, `document_representation=` read the question
    without its document."""
    model, q, doc = tiny(fusion=fusion), tokens(2, 6), tokens(2, 20, seed=3)
    mask = torch.ones_like(q)
    mask[1, 4:] = 0
    reps = model.encode_documents(doc)
    encoder = model.get_encoder()
    for call, message in [
            (lambda: encoder(input_ids=q, atention_mask=mask, document_representations=reps),
             "ReadOnceBartEncoder.forward() got an unexpected keyword argument 'atention_mask'. "
             "Did you mean 'attention_mask'?"),
            (lambda: encoder(q, mask, document_representation=reps),
             "ReadOnceBartEncoder.forward() got an unexpected keyword argument 'document_representation'. "
             "Did you mean 'document_representations'?")]:
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == message
    expected = encoder(q, mask, document_representations=reps).last_hidden_state
    # what `generate()` hands to its encoder: `return_dict`, output switches, and every argument of the model's
    # `forward` it was given, e.g. the `labels` of `Seq2SeqTrainer(predict_with_generate=True)`
    out = encoder(q, mask, document_representations=reps, return_dict=True, output_attentions=False,
                  output_hidden_states=False, labels=tokens(2, 5, seed=5), document_representation=None)
    torch.testing.assert_close(out.last_hidden_state, expected)
    labels = tokens(2, 5, seed=5)
    greedy = dict(max_new_tokens=3, do_sample=False)
    torch.testing.assert_close(model.generate(q, attention_mask=mask, document_representations=reps, labels=labels,
                                              **greedy),
                               model.generate(q, attention_mask=mask, document_representations=reps, **greedy))


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_inputs_embeds_are_read_by_the_encoder_and_a_none_is_harmless(fusion):
    """`inputs_embeds` is an argument of BART's `forward`, so the keyword check accepts it, but the model handed it
    on to its decoder beside the decoder's own: `TypeError: BartDecoder(...) got multiple values for keyword argument
    'inputs_embeds'`, `inputs_embeds=None` included, which `peft`'s `PeftModelForSeq2SeqLM.forward` passes on every
    call (a LoRA-wrapped ReadOnce could not run). It is read as BART reads it: the text's embeddings for
    `input_ids`."""
    model, q, doc = tiny(fusion=fusion), tokens(2, 6), tokens(2, 20, seed=3)
    reps = model.encode_documents(doc)
    labels = tokens(2, 5, seed=5)
    expected = model(q, document_representations=reps, labels=labels)
    # the keyword arguments `PeftModelForSeq2SeqLM.forward` passes to the model it wraps
    out = model(input_ids=q, attention_mask=None, inputs_embeds=None, decoder_input_ids=None,
                decoder_attention_mask=None, decoder_inputs_embeds=None, labels=labels, output_attentions=None,
                output_hidden_states=None, return_dict=True, document_representations=reps)
    torch.testing.assert_close(out.logits, expected.logits)
    embeds = model.get_encoder().embed_tokens(q)
    out = model(inputs_embeds=embeds, document_representations=reps, labels=labels)
    torch.testing.assert_close(out.logits, expected.logits)
    torch.testing.assert_close(out.loss, expected.loss)
    decoder_out = model.model(inputs_embeds=embeds, document_representations=reps, decoder_input_ids=labels)
    decoder_expected = model.model(q, document_representations=reps, decoder_input_ids=labels)
    torch.testing.assert_close(decoder_out.last_hidden_state, decoder_expected.last_hidden_state)
    with pytest.raises(ValueError, match="exactly one of `input_ids` or `inputs_embeds`"):
        model(q, inputs_embeds=embeds, document_representations=reps, labels=labels)


@pytest.mark.parametrize("pad_to_multiple_of", [None, 8])
def test_resize_token_embeddings_resizes_the_document_encoder_and_the_checkpoint_loads(tmp_path, pad_to_multiple_of):
    # the document encoder keeps its own token table: resizing only BART's left it at the old size, so documents
    # with an added token failed and the saved checkpoint (the config's new vocab_size) no longer loaded
    model = tiny()
    old = model.document_encoder.encoder.embed_tokens.weight.detach().clone()
    model.resize_token_embeddings(103, pad_to_multiple_of=pad_to_multiple_of)
    size = 103 if pad_to_multiple_of is None else 104
    assert model.config.vocab_size == size and model.lm_head.weight.shape[0] == size
    assert model.document_encoder.encoder.embed_tokens.weight.shape == (size, 32)
    assert torch.equal(model.document_encoder.encoder.embed_tokens.weight[:99], old)  # the old rows kept
    doc = torch.cat([tokens(1, 10), torch.tensor([[size - 1]])], dim=1)  # an added token in the document
    q = tokens(1, 5)
    with torch.no_grad():
        expected = model(q, document_input_ids=doc, decoder_input_ids=tokens(1, 3)).logits
    assert expected.shape[-1] == size
    model.save_pretrained(tmp_path)
    again = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(q, document_input_ids=doc, decoder_input_ids=tokens(1, 3)).logits, expected)


def untied_bart(seed=0):
    """A BART with `tie_word_embeddings=False` whose four token tables (`shared`, the encoder's, the decoder's, the LM
    head) all differ."""
    torch.manual_seed(seed)
    reference = BartForConditionalGeneration(BartConfig(**TINY, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for table in (reference.model.shared, reference.model.encoder.embed_tokens,
                      reference.model.decoder.embed_tokens, reference.lm_head):
            table.weight.normal_()
    return reference


@pytest.mark.parametrize("fusion", ["append", "attention"])
@pytest.mark.parametrize("bare", [False, True])
def test_untied_bart_checkpoint_loads_as_bart(tmp_path, fusion, bare):
    """`tie_word_embeddings=False` means what it means in BART: `shared`, the encoder's and the decoder's token tables
    are three parameters (the LM head a fourth), each loaded from an untied BART checkpoint, whatever the fusion;
    without representations the model then computes BART's outputs, and the document encoder starts from BART's
    encoder, its token table included."""
    reference = untied_bart()
    (reference.model if bare else reference).save_pretrained(tmp_path)
    model_class = ReadOnceBartModel if bare else ReadOnceBartForConditionalGeneration
    model, info = model_class.from_pretrained(tmp_path, compression_ratio=4, fusion=fusion, output_loading_info=True)
    model.eval()
    assert all(key.startswith("document_encoder.aggregation") for key in info["missing_keys"]), info
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    base = model if bare else model.model
    assert model.config.tie_word_embeddings is False
    for part in ("encoder", "decoder"):
        table = getattr(base, part).embed_tokens.weight
        assert table is not base.shared.weight
        assert torch.equal(table, getattr(reference.model, part).embed_tokens.weight), part
    q, dec = tokens(2, 7), tokens(2, 5, seed=2)
    with torch.no_grad():
        if bare:
            torch.testing.assert_close(model(q, decoder_input_ids=dec).last_hidden_state,
                                       reference.model(q, decoder_input_ids=dec).last_hidden_state, atol=1e-5, rtol=0)
        else:
            torch.testing.assert_close(model(q, decoder_input_ids=dec).logits,
                                       reference(q, decoder_input_ids=dec).logits, atol=1e-5, rtol=0)
            torch.testing.assert_close(model.document_encoder.encoder(input_ids=q).last_hidden_state,
                                       reference.model.encoder(input_ids=q).last_hidden_state, atol=1e-5, rtol=0)


@pytest.mark.parametrize("tie", [True, False])
def test_a_checkpoint_with_one_token_table_loads_with_encoder_and_decoder_reading_it(tmp_path, tie):
    """A ReadOnce checkpoint that holds one token table of BART, `model.shared`, which its encoder and decoder read
    (and the document encoder's own): tied (as every converted checkpoint) or with `tie_word_embeddings=False` and an
    LM head of its own. It loads with nothing missing, and computes what it computed."""
    torch.manual_seed(0)
    reference = BartForConditionalGeneration(BartConfig(**TINY, tie_word_embeddings=tie)).eval()
    state = one_token_table_state(reference, tie)  # BART reading one table
    state.update({f"document_encoder.encoder.{key}": tensor.clone()
                  for key, tensor in reference.model.encoder.state_dict().items()})
    ReadOnceBartConfig(**TINY, compression_ratio=4, aggregation="mean", tie_word_embeddings=tie).save_pretrained(
        tmp_path)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    model, info = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    model.eval()
    assert not any(info.values()), info
    assert (model.model.encoder.embed_tokens.weight is model.model.shared.weight) is tie
    for part in ("encoder", "decoder"):
        assert torch.equal(getattr(model.model, part).embed_tokens.weight, model.model.shared.weight), part
    q, dec, doc = tokens(2, 7), tokens(2, 5, seed=2), tokens(2, 16, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(model(q, decoder_input_ids=dec).logits, reference(q, decoder_input_ids=dec).logits,
                                   atol=1e-5, rtol=0)
        states = reference.model.encoder(input_ids=doc).last_hidden_state  # mean of windows of 4: the representations
        torch.testing.assert_close(model.encode_documents(doc).representations,
                                   states.view(2, 4, 4, -1).mean(2), atol=1e-5, rtol=0)


def test_a_checkpoint_with_one_token_table_and_shared_offloaded_to_disk_is_refused_clearly(tmp_path):
    """Untied, a checkpoint holding only `model.shared` gives its table to the encoder and the decoder while loading;
    with `device_map` offloading `shared` to disk that table cannot be read then: a `ValueError` says so and how to
    load it (not torch's "Cannot copy out of meta tensor"), and with `tie_word_embeddings=True` it loads, the encoder and
    the decoder reading `shared`."""
    torch.manual_seed(0)
    reference = BartForConditionalGeneration(BartConfig(**TINY, tie_word_embeddings=False)).eval()
    # one table, the LM head's too (transformers 5.6 cannot compare two tables on disk)
    state = one_token_table_state(reference, tie=False, lm_head_too=True)
    state.update({f"document_encoder.encoder.{key}": tensor.clone()
                  for key, tensor in reference.model.encoder.state_dict().items()})
    ReadOnceBartConfig(**TINY, compression_ratio=4, aggregation="mean", tie_word_embeddings=False).save_pretrained(
        tmp_path)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    offload = dict(device_map="auto", max_memory={"cpu": "30KB"}, offload_folder=str(tmp_path / "offload"))
    with pytest.raises(ValueError, match=r"offloaded `shared` to disk.*`tie_word_embeddings=True`"):
        ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path, **offload)
    model = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path, tie_word_embeddings=True, **offload).eval()
    assert model.model.shared.weight.device.type == "meta"  # on disk
    assert model.model.encoder.embed_tokens is model.model.shared
    assert model.model.decoder.embed_tokens.weight is model.model.shared.weight


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_tied_token_modules_and_the_lora_adapters_on_embed_tokens_they_give(fusion):
    """Tied (the default): with `fusion="append"` the decoder is BART's and keeps its own `embed_tokens` module,
    whose weight transformers ties to `shared`'s; with `"attention"` [`ReadOnceBartDecoder`] reads the `shared` module
    itself, as the encoder does. So `target_modules=["embed_tokens"]` adapts the modules it adapts in a saved LoRA
    adapter (the decoder's and the document encoder's, or the document encoder's), which therefore loads as it was."""
    from peft import LoraConfig, get_peft_model

    model = tiny(fusion=fusion)
    base = model.model
    assert base.encoder.embed_tokens is base.shared
    assert (base.decoder.embed_tokens is base.shared) is (fusion == "attention")
    assert base.decoder.embed_tokens.weight is base.shared.weight and model.lm_head.weight is base.shared.weight
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["embed_tokens"]))
    adapted = {name.removeprefix("base_model.model.") for name, module in lora.named_modules()
               if hasattr(module, "lora_embedding_A")}
    assert adapted == {"document_encoder.encoder.embed_tokens"} | (
        set() if fusion == "attention" else {"model.decoder.embed_tokens"})


def test_resize_token_embeddings_keeps_untied_tables_separate_and_their_rows(tmp_path):
    """With `tie_word_embeddings=False` each token table (`shared`, the encoder's, the decoder's, the LM head, the
    document encoder's) is resized and keeps its own rows (BART's `set_input_embeddings` would give the encoder and
    decoder `shared`), and the resized checkpoint loads again with the same outputs."""
    model = tiny(tie_word_embeddings=False, fusion="attention")
    with torch.no_grad():
        for table in (model.model.shared, model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            table.weight.normal_()
    tables = {"shared": lambda m: m.model.shared, "encoder": lambda m: m.model.encoder.embed_tokens,
              "decoder": lambda m: m.model.decoder.embed_tokens, "lm_head": lambda m: m.lm_head,
              "document": lambda m: m.document_encoder.encoder.embed_tokens}
    old = {name: get(model).weight.detach().clone() for name, get in tables.items()}
    model.resize_token_embeddings(103)
    weights = {name: get(model).weight for name, get in tables.items()}
    assert len({id(weight) for weight in weights.values()}) == 5
    for name, weight in weights.items():
        assert weight.shape == (103, 32), name
        assert torch.equal(weight[:99], old[name]), name
    q, doc = torch.cat([tokens(1, 5), torch.tensor([[102]])], dim=1), tokens(1, 12)  # an added token
    with torch.no_grad():
        expected = model(q, document_input_ids=doc, decoder_input_ids=torch.tensor([[2, 102]])).logits
    model.save_pretrained(tmp_path)
    again = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(q, document_input_ids=doc, decoder_input_ids=torch.tensor([[2, 102]])).logits,
                                   expected, atol=0, rtol=0)


def eager(model):
    model.set_attn_implementation("eager")
    return model


OUTPUT_FIELDS = ("encoder_attentions", "decoder_attentions", "cross_attentions", "encoder_hidden_states",
                 "decoder_hidden_states")


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_without_representations_attentions_and_hidden_states_are_bart_s(tmp_path, fusion):
    """`output_attentions` / `output_hidden_states` were ignored with a warning (`None` everywhere); without
    representations the model is BART, and so are they, field by field."""
    torch.manual_seed(0)
    bart = eager(BartForConditionalGeneration(BartConfig(**TINY)).eval())
    bart.save_pretrained(tmp_path / "bart")
    model = eager(ReadOnceBartForConditionalGeneration.from_pretrained(
        tmp_path / "bart", compression_ratio=4, fusion=fusion, append_layer=2).eval())
    q, dec = tokens(2, 7), tokens(2, 5, seed=2)
    mask = torch.ones_like(q)
    mask[1, -2:] = 0
    with torch.no_grad():
        expected = bart(q, attention_mask=mask, decoder_input_ids=dec, output_attentions=True, output_hidden_states=True)
        got = model(q, attention_mask=mask, decoder_input_ids=dec, output_attentions=True, output_hidden_states=True)
        plain = model(q, attention_mask=mask, decoder_input_ids=dec)
    for name in OUTPUT_FIELDS:
        ours, theirs = getattr(got, name), getattr(expected, name)
        assert len(ours) == len(theirs) > 0 and getattr(plain, name) is None, name
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert [tuple(a.shape) for a in got.encoder_attentions] == [(2, 4, 7, 7)] * 4
    assert torch.equal(got.logits, plain.logits)


def test_appended_representations_enter_the_attentions_after_layer_L():
    """`fusion="append"` (Fig. 3): layers 1..L attend over the text alone (as BART would), layers L+1..N over
    `[text; R]`; the decoder cross-attends to both; the logits do not depend on the switch."""
    model = eager(tiny(append_layer=2))
    q, doc, dec = tokens(2, 6), tokens(2, 20, seed=5), tokens(2, 3, seed=2)
    with torch.no_grad():
        reps = model.encode_documents(doc)
        plain = model(q, document_representations=reps, decoder_input_ids=dec)
        out = model(q, document_representations=reps, decoder_input_ids=dec, output_attentions=True,
                    output_hidden_states=True, return_dict=True)
        alone = model(q, decoder_input_ids=dec, output_attentions=True)
    m = reps.representations.shape[1]
    assert [tuple(a.shape) for a in out.encoder_attentions] == [(2, 4, 6, 6)] * 2 + [(2, 4, 6 + m, 6 + m)] * 2
    assert [tuple(h.shape) for h in out.encoder_hidden_states] == [(2, 6, 32)] * 3 + [(2, 6 + m, 32)] * 2
    for layer in range(2):
        torch.testing.assert_close(out.encoder_attentions[layer], alone.encoder_attentions[layer], atol=1e-6, rtol=0)
    assert [tuple(a.shape) for a in out.cross_attentions] == [(2, 4, 3, 6 + m)] * 2
    assert [tuple(a.shape) for a in out.decoder_attentions] == [(2, 4, 3, 3)] * 2
    assert torch.all(out.encoder_attentions[2][..., :6, 6:] > 0)  # the text attends to R
    assert torch.equal(out.logits, plain.logits)


def test_fused_layers_return_the_weights_of_their_self_attention():
    """`fusion="attention"` (App. A.1, eq. 4): every layer keeps the text's length; a fused layer's weights are
    those of `Attn` (over the text), one tensor per layer: not `Attn'`'s over R. generate() returns them too."""
    model = eager(tiny(fusion="attention", append_layer=2))
    q, doc, dec = tokens(2, 6), tokens(2, 20, seed=5), tokens(2, 3, seed=2)
    with torch.no_grad():
        reps = model.encode_documents(doc)
        out = model(q, document_representations=reps, decoder_input_ids=dec, output_attentions=True)
        plain = model(q, document_representations=reps, decoder_input_ids=dec)
        generated = model.generate(q, document_representations=reps, max_new_tokens=3, do_sample=False,
                                   output_attentions=True, return_dict_in_generate=True)
    assert [tuple(a.shape) for a in out.encoder_attentions] == [(2, 4, 6, 6)] * 4
    assert [tuple(a.shape) for a in out.decoder_attentions] == [(2, 4, 3, 3)] * 2
    assert [tuple(a.shape) for a in out.cross_attentions] == [(2, 4, 3, 6)] * 2
    for weights in out.encoder_attentions + out.decoder_attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    assert torch.all(out.decoder_attentions[0].triu(1) == 0)  # causal
    assert torch.equal(out.logits, plain.logits)
    steps = generated.sequences.shape[1] - 1
    assert len(generated.encoder_attentions) == 4 and len(generated.decoder_attentions) == steps >= 1
    assert [tuple(a.shape) for a in generated.cross_attentions[-1]] == [(2, 4, 1, 6)] * 2


def _attn_prime_by_hand(attention, states, representations, mask):
    """The weights of `Attn'` (eq. 4) computed by hand: per head, softmax over R of `q(h) . k(r) / sqrt(head_dim)`,
    padding representations (`mask` 0) excluded; `(batch, heads, length, m)`."""
    batch, length, d_model = states.shape
    heads = attention.num_heads
    head_dim = d_model // heads
    query = attention.q_proj(states).view(batch, length, heads, head_dim).transpose(1, 2)
    key = attention.k_proj(representations).view(batch, -1, heads, head_dim).transpose(1, 2)
    scores = query @ key.transpose(-1, -2) / math.sqrt(head_dim)
    return scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf")).softmax(-1)


def _fused_with_padded_representations():
    """A tiny `fusion="attention"` model (L = 2: encoder layers 3, 4 fused) with `Attn'` moved away from `Attn`, and
    two documents of different lengths (the second's representations padded)."""
    model = eager(tiny(fusion="attention", append_layer=2))
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".representation_attn." in name:
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    doc, doc_mask = tokens(2, 20, seed=5), torch.ones(2, 20, dtype=torch.long)
    doc_mask[1, 9:] = 0
    with torch.no_grad():
        reps = model.encode_documents(doc, doc_mask)
    assert reps.attention_mask[1].tolist() == [1, 1, 1, 0, 0]
    return model, reps


def test_fused_layers_return_the_weights_of_attn_prime_over_the_representations():
    """`fusion="attention"` with `output_attentions=True` returned only `Attn`'s weights; those of `Attn'` over R
    (eq. 4) were computed and dropped. They are the last two fields, one tensor per fused encoder layer and per decoder
    layer, equal to the softmax computed by hand, rows summing to 1 over the real representations, 0 on padding."""
    model, reps = _fused_with_padded_representations()
    q, dec = tokens(2, 6), tokens(2, 3, seed=2)
    q_mask = torch.ones_like(q)
    q_mask[1, -2:] = 0
    inputs = dict(attention_mask=q_mask, document_representations=reps, decoder_input_ids=dec)
    with torch.no_grad():
        out = model(q, **inputs, output_attentions=True, output_hidden_states=True)
        plain = model(q, **inputs)
        as_tuple = model(q, **inputs, output_attentions=True, return_dict=False)
        encoder = model.get_encoder()(q, attention_mask=q_mask, document_representations=reps,
                                      output_attentions=True)
        bare = model.model(q, **inputs, output_attentions=True)
    m = reps.representations.shape[1]
    assert [tuple(a.shape) for a in out.encoder_representation_attentions] == [(2, 4, 6, m)] * 2
    assert [tuple(a.shape) for a in out.decoder_representation_attentions] == [(2, 4, 3, m)] * 2
    encoder_layers, decoder_layers = model.model.encoder.layers, model.model.decoder.layers
    with torch.no_grad():
        expected = [_attn_prime_by_hand(encoder_layers[i].self_attn.representation_attn, out.encoder_hidden_states[i],
                                        reps.representations, reps.attention_mask) for i in (2, 3)]
        expected += [_attn_prime_by_hand(decoder_layers[i].self_attn.representation_attn,
                                         out.decoder_hidden_states[i], reps.representations, reps.attention_mask)
                     for i in (0, 1)]
    got = out.encoder_representation_attentions + out.decoder_representation_attentions
    for weights, by_hand in zip(got, expected, strict=True):
        torch.testing.assert_close(weights, by_hand, atol=1e-6, rtol=0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6, rtol=0)
        assert torch.all(weights[1, ..., 3:] == 0) and torch.all(weights[1, ..., :3] > 0)
        assert not torch.allclose(weights[0], weights[0, :1, :1].expand_as(weights[0]))  # not uniform
    # the same weights through the encoder and the bare model; nothing else depends on the switch
    for ours, theirs in zip(out.encoder_representation_attentions, encoder.representation_attentions, strict=True):
        assert torch.equal(ours, theirs)
    for name in ("encoder_representation_attentions", "decoder_representation_attentions"):
        assert all(torch.equal(a, b) for a, b in zip(getattr(out, name), getattr(bare, name), strict=True))
        assert getattr(plain, name) is None
    assert torch.equal(out.logits, plain.logits)
    # last in the tuple: BART's fields keep their positions
    # (logits, cache, decoder_attentions, cross_attentions, encoder_last_hidden_state, encoder_attentions, +2)
    assert len(as_tuple) == 8
    assert all(torch.equal(a, b) for a, b in zip(as_tuple[5], out.encoder_attentions, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(as_tuple[-2], out.encoder_representation_attentions, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(as_tuple[-1], out.decoder_representation_attentions, strict=True))
    assert torch.equal(as_tuple[0], out.logits)


def test_attn_prime_weights_follow_the_attention_switch():
    """The weights of `Attn'` come with those of `Attn`: from the config, `False` overriding it; `None` with
    `fusion="append"` (no `Attn'`), and an empty tuple without representations (no `Attn'` runs)."""
    model, reps = _fused_with_padded_representations()
    q, dec = tokens(2, 6), tokens(2, 3, seed=2)
    model.config.output_attentions = True
    with torch.no_grad():
        from_config = model(q, document_representations=reps, decoder_input_ids=dec)
        off = model(q, document_representations=reps, decoder_input_ids=dec, output_attentions=False)
        closed_book = model(q, decoder_input_ids=dec)
    assert len(from_config.encoder_representation_attentions) == len(from_config.decoder_representation_attentions) == 2
    assert off.encoder_representation_attentions is None and off.decoder_representation_attentions is None
    assert off.encoder_attentions is None
    assert closed_book.encoder_representation_attentions == closed_book.decoder_representation_attentions == ()
    model.config.output_attentions = False
    with pytest.raises(TypeError, match="output_representation_attentions"):
        model.get_encoder()(q, document_representations=reps, output_representation_attentions=True)
    appended = eager(tiny(append_layer=2))
    with torch.no_grad():
        out = appended(q, document_representations=appended.encode_documents(tokens(2, 20, seed=5)),
                       decoder_input_ids=dec, output_attentions=True)
    assert len(out.encoder_attentions) == 4
    assert out.encoder_representation_attentions is None and out.decoder_representation_attentions is None


def test_the_config_switches_attentions_on_and_sdpa_warns_as_for_bart(monkeypatch):
    from transformers.integrations import sdpa_attention

    model = eager(tiny())
    inputs = dict(input_ids=tokens(1, 6), document_input_ids=tokens(1, 16), decoder_input_ids=tokens(1, 3))
    model.config.output_attentions = True
    with torch.no_grad():
        out = model(**inputs)
    assert len(out.encoder_attentions) == 4 and len(out.decoder_attentions) == len(out.cross_attentions) == 2
    model.config.output_attentions = False
    model.set_attn_implementation("sdpa")
    said = []
    monkeypatch.setattr(sdpa_attention.logger, "warning_once", lambda message, *a, **k: said.append(message))
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    assert out.encoder_attentions == out.decoder_attentions == ()
    assert said and "output_attentions" in said[0]


def test_hidden_states_are_the_layers_outputs_when_R_is_appended_after_the_last_layer():
    """At L = N (R appended after layer N) `last_hidden_state` is `[H^N; R]`, but the last hidden state is layer N's
    output, over the text: transformers' default would replace it by `last_hidden_state` (R included)."""
    model = eager(tiny(append_layer=4))
    q, doc = tokens(2, 6), tokens(2, 20, seed=5)
    with torch.no_grad():
        reps = model.encode_documents(doc)
        out = model.get_encoder()(q, document_representations=reps, output_hidden_states=True, output_attentions=True)
        alone = model.get_encoder()(q, output_hidden_states=True)
    m = reps.representations.shape[1]
    assert tuple(out.last_hidden_state.shape) == (2, 6 + m, 32)
    assert [tuple(h.shape) for h in out.hidden_states] == [(2, 6, 32)] * 5
    assert [tuple(a.shape) for a in out.attentions] == [(2, 4, 6, 6)] * 4
    for ours, text_only in zip(out.hidden_states, alone.hidden_states):
        assert torch.equal(ours, text_only)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state[:, :6])


@pytest.mark.parametrize("fusion", ["append", "attention"])
@pytest.mark.parametrize("asked", [False, True])
def test_the_encoder_s_tuple_output_feeds_the_decoder_as_its_output_object_does(fusion, asked):
    """`return_dict=False` makes the encoder return a tuple (as BART's): fed back as `encoder_outputs`, it gave an
    opaque size error (`fusion="append"`: the combined cross-attention mask was lost) or, with `fusion="attention"`,
    other logits without a word (R, which every decoder layer attends to, was lost)."""
    model = eager(tiny(fusion=fusion, append_layer=2))
    q, doc, dec = tokens(2, 6), tokens(2, 20, seed=5), tokens(2, 3, seed=2)
    mask = torch.ones_like(q)
    mask[1, -2:] = 0
    switches = dict(output_attentions=True, output_hidden_states=True) if asked else {}
    with torch.no_grad():
        reps = model.encode_documents(doc)
        expected = model(q, attention_mask=mask, document_representations=reps, decoder_input_ids=dec, **switches)
        encoded = model.get_encoder()(q, attention_mask=mask, document_representations=reps, return_dict=False,
                                      **switches)
        assert isinstance(encoded, tuple)
        got = model(attention_mask=mask, encoder_outputs=encoded, decoder_input_ids=dec, **switches)
        as_list = model(attention_mask=mask, encoder_outputs=list(encoded), decoder_input_ids=dec)
    assert torch.equal(got.logits, expected.logits) and torch.equal(as_list.logits, expected.logits)
    for name in ("encoder_hidden_states", "encoder_attentions"):
        ours, theirs = getattr(got, name), getattr(expected, name)
        assert (ours is None) == (theirs is None) == (not asked), name
        assert asked is False or all(torch.equal(a, b) for a, b in zip(ours, theirs))
    # `Attn'`'s weights (fusion="attention") come back from the tuple too, after `attentions`
    ours, theirs = got.encoder_representation_attentions, expected.encoder_representation_attentions
    assert (ours is None) == (theirs is None) == (not asked or fusion == "append")
    assert ours is None or (len(ours) == 2 and all(torch.equal(a, b) for a, b in zip(ours, theirs)))


def test_a_bart_style_encoder_tuple_is_read_as_before():
    """BART's `(last_hidden_state,)` without representations: the text's own mask is the cross-attention mask."""
    model = tiny()
    q, dec = tokens(2, 6), tokens(2, 3, seed=2)
    mask = torch.ones_like(q)
    mask[0, -1] = 0
    with torch.no_grad():
        expected = model(q, attention_mask=mask, decoder_input_ids=dec)
        hidden = model.get_encoder()(q, attention_mask=mask).last_hidden_state
        got = model(attention_mask=mask, encoder_outputs=(hidden,), decoder_input_ids=dec)
    assert torch.equal(got.logits, expected.logits)


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_device_map_keeps_every_layer_on_one_device(fusion):
    # `device_map="auto"` splits a model between modules, except inside the classes of `_no_split_modules` (matched
    # by name): the fused layers of `fusion="attention"` were not listed, so a layer's self-attention and its
    # feed-forward (and the residual added across them) could be placed on two GPUs
    from transformers.integrations.accelerate import infer_auto_device_map

    model = tiny(fusion=fusion)
    layers = {name: module for name, module in model.named_modules() if name.endswith(tuple(
        f"layers.{index}" for index in range(len(model.model.encoder.layers))))}
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for share in range(3, 38):  # device 0 holds 3/40 .. 37/40 of the model, device 1 and the CPU the rest
        device_map = infer_auto_device_map(model, max_memory={0: total * share // 40, 1: total, "cpu": 4 * total},
                                           no_split_module_classes=model._no_split_modules)
        for name in layers:
            devices = {device for key, device in device_map.items()
                       if key.startswith(name + ".") or name == key or name.startswith(key + ".")}
            assert len(devices) == 1, (share, name, devices)
    assert {type(layer).__name__ for layer in layers.values()} <= set(model._no_split_modules)


def test_generate_takes_what_a_bert_tokenizer_returns():
    """`model.generate(**tokenizer(question, return_tensors="pt"), document_representations=...)` with a BERT
    tokenizer stopped in transformers ("The following `model_kwargs` are not used by the model: ['token_type_ids']")
    though `forward` takes them: generate drops the token types too, as `forward` ignores them."""
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = tiny(vocab_size=tokenizer.vocab_size, init_std=0.3)
    document = tokenizer(["Emma is a novel by Jane Austen, published in December 1815."], return_tensors="pt")
    with torch.no_grad():
        representations = model.encode_documents(document.input_ids, document.attention_mask)
    question = tokenizer(["Who wrote Emma?"], return_tensors="pt")
    assert "token_type_ids" in question
    greedy = dict(max_new_tokens=3, do_sample=False, document_representations=representations)
    torch.testing.assert_close(model.generate(**question, **greedy),
                               model.generate(input_ids=question.input_ids, attention_mask=question.attention_mask,
                                              **greedy))


def test_documents_are_read_with_return_dict_false_in_the_config():
    """With `config.return_dict=False` (or the output switches set in the config), the document encoder's BART
    encoder followed the config and returned a tuple, so `encode_documents` and `forward(document_input_ids=...)`
    raised `AttributeError: 'tuple' object has no attribute 'last_hidden_state'`; the representations are those of
    the default config."""
    model = tiny().eval()
    docs = torch.randint(5, 50, (2, 16))
    text = torch.randint(5, 50, (2, 7))
    with torch.no_grad():
        expected = model.encode_documents(docs)
        logits = model(input_ids=text, decoder_input_ids=text[:, :3], document_input_ids=docs).logits
        model.config.return_dict = False
        model.config.output_hidden_states = True
        got = model.encode_documents(docs)
        assert torch.equal(got.representations, expected.representations)
        out = model(input_ids=text, decoder_input_ids=text[:, :3], document_input_ids=docs, return_dict=True)
        assert torch.equal(out.logits, logits)


def test_compiled_forward_with_document_input_ids_is_one_graph_that_still_checks_them():
    """`torch.compile(fullgraph=True)` of a forward that reads its documents (`document_input_ids`): one graph (a
    Python branch on a tensor value, e.g. the empty-document check, would split it and fail here), eager's logits, and
    an empty document still refused (as a graph op: a `RuntimeError` with the eager `ValueError`'s message)."""
    model = tiny()
    questions, documents, labels = tokens(2, 6), tokens(2, 20, seed=3), tokens(2, 5, seed=4)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        eager, got = (m(questions, document_input_ids=documents, labels=labels) for m in (model, compiled))
        torch.testing.assert_close(got.logits, eager.logits, atol=1e-6, rtol=0)
        torch.testing.assert_close(got.loss, eager.loss, atol=1e-6, rtol=0)
        empty = torch.ones_like(documents)
        empty[1] = 0
        with pytest.raises(RuntimeError, match="empty: nothing to encode"):
            compiled(questions, document_input_ids=documents, document_input_attention_mask=empty, labels=labels)


# ----------------------------------------------------------------------------------------------- keywords not read
# keywords `TransformersKwargs` (or transformers' plumbing) lets through that neither ReadOnce model reads: each
# changed nothing, whatever its value
UNREAD = {"position_ids": torch.arange(2, 8)[None], "is_causal": True, "logits_to_keep": 1,
          "cu_seq_lens_q": torch.tensor([0, 3, 6], dtype=torch.int32),
          "cu_seq_lens_k": torch.tensor([0, 3, 6], dtype=torch.int32), "max_length_q": 3, "max_length_k": 3,
          "seq_idx": torch.zeros(1, 6, dtype=torch.int32), "output_router_logits": True}


@pytest.mark.parametrize("fusion", ["append", "attention"])
@pytest.mark.parametrize("name", sorted(UNREAD))
def test_a_keyword_it_does_not_read_is_refused_naming_it(name, fusion):
    """`position_ids` went on to BART's layers, which do not read them (the text's positions are BART's own: the same
    logits); `is_causal` reached the decoder only (`False` made it read its targets bidirectionally, `True` left the
    encoder as it was); flash attention's packing arguments, `logits_to_keep` and `output_router_logits` changed
    nothing. Each is refused by the model and the bare model."""
    model, q, doc = tiny(fusion=fusion), tokens(2, 6), tokens(2, 20, seed=3)
    reps, labels, value = model.encode_documents(doc), tokens(2, 5, seed=4), {name: UNREAD[name]}
    for call, where in [(lambda: model(q, document_representations=reps, labels=labels, **value),
                         "ReadOnceBartForConditionalGeneration"),
                        (lambda: model.model(q, document_representations=reps, decoder_input_ids=labels, **value),
                         "ReadOnceBartModel")]:
        with refuses_unread_keyword(name, rf"^{where}\.forward\(\) got `{name}`, which it does not support"):
            call()
    if name == "is_causal":
        with pytest.raises(ValueError, match="got `is_causal`"):
            model(q, document_representations=reps, labels=labels, is_causal=False)


def test_token_types_of_a_second_text_are_refused_and_zeros_pass():
    """A BERT tokenizer's text pair (`tokenizer(question, document)`) gave `token_type_ids` that BART does not read:
    the pair was read as one question, without a word. One text's zeros pass, as before."""
    model, q, doc = tiny(), tokens(2, 6), tokens(2, 20, seed=3)
    reps, labels = model.encode_documents(doc), tokens(2, 5, seed=4)
    pair = torch.zeros_like(q)
    pair[:, 3:] = 1
    for call in (lambda: model(q, document_representations=reps, labels=labels, token_type_ids=pair),
                 lambda: model.model(q, document_representations=reps, decoder_input_ids=labels, token_type_ids=pair)):
        with pytest.raises(ValueError, match="`token_type_ids` marking a second segment, which it does not support"):
            call()
    expected = model(q, document_representations=reps, labels=labels)
    out = model(q, document_representations=reps, labels=labels, token_type_ids=torch.zeros_like(q), is_causal=None,
                logits_to_keep=0, output_router_logits=False)
    torch.testing.assert_close(out.logits, expected.logits)
    torch.testing.assert_close(out.loss, expected.loss)


def test_the_bare_model_refuses_num_items_in_batch():
    """The bare model computes no loss: `num_items_in_batch` changed nothing."""
    model, q, labels = tiny(), tokens(2, 6), tokens(2, 5, seed=4)
    with pytest.raises(ValueError, match=r"ReadOnceBartModel\.forward\(\) got `num_items_in_batch`"):
        model.model(q, decoder_input_ids=labels, num_items_in_batch=torch.tensor(10))


def test_num_items_in_batch_divides_the_summed_loss_and_gradient_accumulation_is_the_whole_batch_s(tmp_path):
    """`Trainer` passes `num_items_in_batch` (the targets of all the batches it accumulates) to a model whose forward
    takes `**kwargs` and leaves the accumulated losses unscaled; the loss was the mean over each batch's targets
    whatever it was given, as `BartForConditionalGeneration`'s: two half batches trained with about twice the whole
    batch's gradients. The loss is now the targets' summed cross-entropy divided by it."""
    from tests.models.loss_checks import assert_accumulation_equals_one_batch

    model, q, doc = tiny(), tokens(2, 6), tokens(2, 20, seed=3)
    labels = tokens(2, 5, seed=4)
    labels[0, 2:] = -100  # 5 + 2 targets
    mean = model(q, document_input_ids=doc, labels=labels).loss
    summed = model(q, document_input_ids=doc, labels=labels, num_items_in_batch=torch.tensor(10)).loss
    torch.testing.assert_close(summed, mean * 7 / 10)
    torch.testing.assert_close(model(q, document_input_ids=doc, labels=labels, num_items_in_batch=7).loss, mean)

    ids, docs, targets = tokens(4, 6), tokens(4, 20, seed=3), tokens(4, 5, seed=4)
    targets[0, 1:] = -100  # uneven counts: 1 + 5 targets in one half batch, 10 in the other
    rows = [{"input_ids": ids[i], "document_input_ids": docs[i], "labels": targets[i]} for i in range(4)]
    assert assert_accumulation_equals_one_batch(lambda: tiny(dropout=0.0).train(), rows, tmp_path) is True


def test_labels_with_decoder_inputs_embeds_read_the_embeddings():
    """With `labels`, decoder inputs shifted from them were added to the given `decoder_inputs_embeds` (BART's
    default applies only when neither is given): `You must specify exactly one of decoder_input_ids or
    decoder_inputs_embeds`."""
    model, q, doc = tiny(), tokens(2, 6), tokens(2, 20, seed=3)
    reps, labels, decoder_ids = model.encode_documents(doc), tokens(2, 5, seed=4), tokens(2, 5, seed=5)
    expected = model(q, document_representations=reps, decoder_input_ids=decoder_ids, labels=labels)
    embeds = model.get_input_embeddings()(decoder_ids)
    out = model(q, document_representations=reps, decoder_inputs_embeds=embeds, labels=labels)
    torch.testing.assert_close(out.logits, expected.logits)
    torch.testing.assert_close(out.loss, expected.loss)


def _bart_encoder_of(model):
    """transformers' own `BartEncoder` with the document encoder's weights."""
    from transformers.models.bart.modeling_bart import BartEncoder

    encoder = BartEncoder(BartConfig(**TINY))
    encoder.load_state_dict(model.document_encoder.encoder.state_dict())
    encoder.config._attn_implementation = "eager"
    return encoder.eval()


def test_document_encoder_attentions_are_bart_encoder_s_on_the_document():
    """`encode_documents` / the document encoder took no `output_attentions` (a TypeError) and ignored
    `config.output_attentions` (it asked BART's encoder for none): now one `(batch, 1, heads, n, n)` tensor per layer
    for documents that fit one chunk, `BartEncoder`'s weights on the documents; the representations and the
    fingerprint do not depend on the switch, and such an output still serves `document_representations`."""
    model = eager(tiny())
    docs = tokens(2, 12)
    mask = torch.ones_like(docs)
    mask[1, 8:] = 0
    docs[1, 8:] = 1
    with torch.no_grad():
        plain = model.encode_documents(docs, mask)
        out = model.encode_documents(docs, mask, output_attentions=True)
        expected = _bart_encoder_of(model)(docs, attention_mask=mask, output_attentions=True).attentions
        q, dec = tokens(2, 5, seed=2), tokens(2, 3, seed=3)
        with_attentions = model(q, document_representations=out, decoder_input_ids=dec).logits
        without = model(q, document_representations=plain, decoder_input_ids=dec).logits
    assert plain.attentions is None
    assert len(out.attentions) == TINY["encoder_layers"]
    for ours, theirs in zip(out.attentions, expected):
        assert ours.shape == (2, 1, 4, 12, 12)
        torch.testing.assert_close(ours[:, 0], theirs, atol=1e-6, rtol=0)
        assert torch.all(ours[1, 0, :, :, 8:] == 0)  # padding keys
    assert torch.equal(out.representations, plain.representations)
    assert out.model_fingerprint == plain.model_fingerprint
    assert torch.equal(with_attentions, without)


def test_document_encoder_attentions_are_given_chunk_by_chunk():
    """Documents longer than `document_chunk_length`: chunk c's weights are `BartEncoder`'s on that chunk's tokens
    alone (overlapping chunks included), a shorter last chunk is zero-padded, a chunk past a shorter document is
    zeros in its row, and a left-padded batch gives the weights of the right-padded one (reading order)."""
    model = eager(tiny(document_chunk_length=8, document_chunk_overlap=4))
    docs = tokens(2, 18)
    mask = torch.ones_like(docs)
    mask[1, 6:] = 0
    docs[1, 6:] = 1
    left_docs, left_mask = torch.ones_like(docs), torch.zeros_like(mask)
    left_docs[0], left_mask[0] = docs[0], 1
    left_docs[1, 12:], left_mask[1, 12:] = docs[1, :6], 1
    encoder = _bart_encoder_of(model)
    with torch.no_grad():
        out = model.document_encoder(docs, mask, output_attentions=True)
        left = model.document_encoder(left_docs, left_mask, output_attentions=True)
        chunks = [(docs[:, start : start + 8], mask[:, start : start + 8]) for start in (0, 4, 8, 12)]
        expected = [encoder(ids, attention_mask=m, output_attentions=True).attentions for ids, m in chunks]
    assert [tuple(a.shape) for a in out.attentions] == [(2, 4, 4, 8, 8)] * TINY["encoder_layers"]
    for layer, weights in enumerate(out.attentions):
        for c, (ids, _) in enumerate(chunks):
            n = ids.shape[1]  # 6 for the last chunk
            torch.testing.assert_close(weights[0, c, :, :n, :n], expected[c][layer][0], atol=1e-6, rtol=0)
            assert torch.all(weights[:, c, :, n:] == 0) and torch.all(weights[:, c, :, :, n:] == 0)
        torch.testing.assert_close(weights[1, :2], torch.stack([expected[0][layer][1], expected[1][layer][1]]),
                                   atol=1e-6, rtol=0)  # the second document ends in the second chunk
        assert torch.all(weights[1, 2:] == 0)
        torch.testing.assert_close(left.attentions[layer], weights, atol=1e-6, rtol=0)


def test_document_encoder_attentions_follow_the_config_and_sdpa_warns_as_for_bart(monkeypatch):
    from transformers.integrations import sdpa_attention

    model = eager(tiny())
    docs = tokens(1, 16)
    model.config.output_attentions = True
    with torch.no_grad():
        assert len(model.encode_documents(docs).attentions) == TINY["encoder_layers"]
        assert len(model.document_encoder(docs).attentions) == TINY["encoder_layers"]
        assert model.encode_documents(docs, output_attentions=False).attentions is None
        # `forward(document_input_ids=...)` returns the text model's attentions, not the document encoder's
        out = model(tokens(1, 6), document_input_ids=docs, decoder_input_ids=tokens(1, 3))
    assert [a.dim() for a in out.encoder_attentions] == [4] * TINY["encoder_layers"]
    model.config.output_attentions = False
    with pytest.raises(TypeError, match="`output_attentions` must be a bool"):
        model.encode_documents(docs, output_attentions=1)
    model.set_attn_implementation("sdpa")
    said = []
    monkeypatch.setattr(sdpa_attention.logger, "warning_once", lambda message, *a, **k: said.append(message))
    with torch.no_grad():
        assert model.encode_documents(docs, output_attentions=True).attentions == ()
    assert said and "output_attentions" in said[0]


def test_document_encoder_hidden_states_are_bart_encoder_s_on_the_document():
    """`encode_documents` / the document encoder took no `output_hidden_states` (a TypeError) and overrode
    `config.output_hidden_states` with False: now `encoder_layers + 1` tensors `(batch, 1, n, d_model)` for documents
    that fit one chunk, `BartEncoder`'s `hidden_states` on the documents, in a new last field; the representations
    and the fingerprint do not depend on the switch, and such an output still serves `document_representations`."""
    model = tiny()
    docs = tokens(2, 12)
    mask = torch.ones_like(docs)
    mask[1, 8:] = 0
    docs[1, 8:] = 1
    with torch.no_grad():
        plain = model.encode_documents(docs, mask)
        out = model.encode_documents(docs, mask, output_hidden_states=True)
        expected = _bart_encoder_of(model)(docs, attention_mask=mask, output_hidden_states=True).hidden_states
        q, dec = tokens(2, 5, seed=2), tokens(2, 3, seed=3)
        with_states = model(q, document_representations=out, decoder_input_ids=dec).logits
        without = model(q, document_representations=plain, decoder_input_ids=dec).logits
    assert plain.hidden_states is None and out.attentions is None
    assert len(out.hidden_states) == TINY["encoder_layers"] + 1
    for ours, theirs in zip(out.hidden_states, expected):
        assert ours.shape == (2, 1, 12, TINY["d_model"])
        torch.testing.assert_close(ours[:, 0], theirs, atol=1e-5, rtol=0)
    # a new last field: the fields before it, and so every tuple position, are those of the output without it
    assert list(out.keys()) == [*plain.keys(), "hidden_states"]
    assert torch.equal(out.representations, plain.representations)
    assert out.model_fingerprint == plain.model_fingerprint
    assert torch.equal(with_states, without)


def test_document_encoder_hidden_states_are_given_chunk_by_chunk():
    """Documents longer than `document_chunk_length`: chunk c's states are `BartEncoder`'s on that chunk's tokens
    alone (overlapping chunks included), a shorter last chunk is zero-padded, a chunk past a shorter document is
    zeros in its row, a left-padded batch gives the states of the right-padded one (reading order), and the
    attentions come alongside, chunked the same way."""
    model = eager(tiny(document_chunk_length=8, document_chunk_overlap=4))
    docs = tokens(2, 18)
    mask = torch.ones_like(docs)
    mask[1, 6:] = 0
    docs[1, 6:] = 1
    left_docs, left_mask = torch.ones_like(docs), torch.zeros_like(mask)
    left_docs[0], left_mask[0] = docs[0], 1
    left_docs[1, 12:], left_mask[1, 12:] = docs[1, :6], 1
    encoder = _bart_encoder_of(model)
    with torch.no_grad():
        out = model.document_encoder(docs, mask, output_hidden_states=True, output_attentions=True)
        left = model.document_encoder(left_docs, left_mask, output_hidden_states=True)
        plain = model.document_encoder(docs, mask)
        chunks = [(docs[:, start : start + 8], mask[:, start : start + 8]) for start in (0, 4, 8, 12)]
        expected = [encoder(ids, attention_mask=m, output_hidden_states=True).hidden_states for ids, m in chunks]
    d = TINY["d_model"]
    assert [tuple(h.shape) for h in out.hidden_states] == [(2, 4, 8, d)] * (TINY["encoder_layers"] + 1)
    assert [tuple(a.shape) for a in out.attentions] == [(2, 4, 4, 8, 8)] * TINY["encoder_layers"]
    for layer, states in enumerate(out.hidden_states):
        for c, (ids, _) in enumerate(chunks):
            n = ids.shape[1]  # 6 for the last chunk
            torch.testing.assert_close(states[0, c, :n], expected[c][layer][0], atol=1e-5, rtol=0)
            assert torch.all(states[:, c, n:] == 0)
        torch.testing.assert_close(states[1, :2], torch.stack([expected[0][layer][1], expected[1][layer][1]]),
                                   atol=1e-5, rtol=0)  # the second document ends in the second chunk
        assert torch.all(states[1, 2:] == 0)
        torch.testing.assert_close(left.hidden_states[layer], states, atol=1e-5, rtol=0)
    assert torch.equal(out.representations, plain.representations)


def test_document_encoder_hidden_states_follow_the_config_and_not_forward():
    model = tiny()
    docs = tokens(1, 16)
    with torch.no_grad():
        plain = model.encode_documents(docs)
        model.config.output_hidden_states = True
        assert len(model.encode_documents(docs).hidden_states) == TINY["encoder_layers"] + 1
        assert len(model.document_encoder(docs).hidden_states) == TINY["encoder_layers"] + 1
        assert torch.equal(model.encode_documents(docs).representations, plain.representations)
        assert model.encode_documents(docs, output_hidden_states=False).hidden_states is None
        # `forward(document_input_ids=...)` returns the text model's states, not the document encoder's
        seen = []
        hook = model.document_encoder.register_forward_hook(lambda module, args, output: seen.append(output))
        try:
            out = model(tokens(1, 6), document_input_ids=docs, decoder_input_ids=tokens(1, 3))
        finally:
            hook.remove()
    assert len(out.encoder_hidden_states) == TINY["encoder_layers"] + 1
    assert seen and all(output.hidden_states is None for output in seen)
    model.config.output_hidden_states = False
    for value in (1, "False"):
        with pytest.raises(TypeError, match="`output_hidden_states` must be a bool"):
            model.encode_documents(docs, output_hidden_states=value)


@pytest.mark.parametrize("family", ["readonce", "longdoc"])
def test_prepare_inputs_for_generation_leaves_the_output_switches_to_the_caller_as_bart(family):
    """The inputs of a decoding step (`prepare_inputs_for_generation`) hold the output switches only when the caller
    passes them, as BART's: a decoding loop that adds its own (`model(**inputs, output_hidden_states=True)`, as
    transformers' contrastive search and DoLa do) works, and without them the step follows the config."""
    from tests.models.longdoc_bart.cases import tiny_longdoc

    model = eager(tiny(fusion="attention") if family == "readonce" else tiny_longdoc())
    q = tokens(2, 6)
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(q)
        step = model.prepare_inputs_for_generation(torch.full((2, 1), model.config.decoder_start_token_id),
                                                   encoder_outputs=encoder_outputs, use_cache=False)
        assert "output_attentions" not in step and "output_hidden_states" not in step
        out = model(**step, output_hidden_states=True, output_attentions=False)
        assert len(out.decoder_hidden_states) == model.config.decoder_layers + 1 and out.decoder_attentions is None
        model.config.output_attentions = True
        assert len(model(**step).decoder_attentions) == model.config.decoder_layers
        asked = model.prepare_inputs_for_generation(step["decoder_input_ids"], encoder_outputs=encoder_outputs,
                                                    output_attentions=False)
        assert asked["output_attentions"] is False and model(**asked).decoder_attentions is None


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_question_and_decoder_ids_outside_the_vocabulary_or_not_2d_are_refused_by_name(fusion):
    """The question / task text and the decoder ids, as the documents already are: an id outside `[0, vocab_size)`
    is named with the vocabulary size (not torch's bare `IndexError` from the embedding lookup), in `forward` and
    `generate`; 1-D or empty question ids are named too."""
    model = tiny(fusion=fusion)
    docs = model.encode_documents(tokens(2, 16))
    question = tokens(2, 5, seed=2)
    question[1, 3] = 99 + 4
    with pytest.raises(ValueError, match=r"`input_ids` holds token id 103, outside the vocabulary \[0, 99\)"):
        model(question, document_representations=docs, decoder_input_ids=tokens(2, 3))
    with pytest.raises(ValueError, match=r"`input_ids` holds token id 103, outside the vocabulary \[0, 99\)"):
        model.generate(question, document_representations=docs, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"`decoder_input_ids` / `labels` holds token id 120, outside the "
                                         r"vocabulary \[0, 99\)"):
        model(tokens(2, 5), document_representations=docs, decoder_input_ids=torch.tensor([[2, 120], [2, 5]]))
    with pytest.raises(ValueError, match=r"`decoder_input_ids` / `labels` holds token id -100"):
        model(tokens(2, 5), document_representations=docs, decoder_input_ids=torch.tensor([[2, -100], [2, 5]]))
    with pytest.raises(ValueError, match=r"`input_ids` must be a non-empty \(batch_size, text_length\) tensor, got "
                                         r"shape \(5,\)"):
        model.generate(tokens(2, 5)[0], document_representations=docs, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"`input_ids` must be a non-empty .* got shape \(2, 0\)"):
        model(tokens(2, 5)[:, :0], document_representations=docs, decoder_input_ids=tokens(2, 3))
    model(tokens(2, 5), document_representations=docs, decoder_input_ids=torch.tensor([[2, 98], [2, 0]]))  # in range


def test_one_text_of_1d_ids_is_refused_by_name_without_decoder_inputs():
    """`forward` without decoder inputs shifts the question ids (or the labels) into the decoder's, as BART: 1-D or
    empty ids are named there too (BART's shift raised a bare `IndexError`), as `generate` and the encoder name
    them."""
    model = tiny()
    docs = model.encode_documents(tokens(2, 16))
    question = tokens(2, 5, seed=2)
    shape = r"must be a non-empty \(batch_size, text_length\) tensor, got shape"
    for call, name, got in ((lambda: model(question[0], document_representations=docs), "input_ids", r"\(5,\)"),
                            (lambda: model.model(question[:, :0], document_representations=docs), "input_ids",
                             r"\(2, 0\)"),
                            (lambda: model(question, document_representations=docs, labels=tokens(2, 3)[0]),
                             "labels", r"\(3,\)"),
                            (lambda: model(question, document_representations=docs, labels=tokens(2, 3)[:, :0]),
                             "labels", r"\(2, 0\)")):
        with pytest.raises(ValueError, match=rf"`{name}` {shape} {got}"):
            call()
    assert model(question, document_representations=docs, labels=tokens(2, 3)).loss is not None


def test_1d_or_empty_decoder_inputs_are_refused_by_name():
    """1-D or empty `decoder_input_ids` / `decoder_inputs_embeds` are named (BART raised a bare `ValueError` while
    unpacking their shape, or a reshape error); a decoding step's `(batch, 1)` ids still run."""
    model = tiny()
    docs = model.encode_documents(tokens(2, 16))
    question = tokens(2, 5, seed=2)
    shape = r"must be a non-empty \(batch_size, text_length(, d_model)?\) tensor, got shape"
    embeds = torch.zeros(2, 3, TINY["d_model"])
    for kwargs, name, got in (({"decoder_input_ids": tokens(2, 3)[0]}, "decoder_input_ids", r"\(3,\)"),
                              ({"decoder_input_ids": tokens(2, 3)[:, :0]}, "decoder_input_ids", r"\(2, 0\)"),
                              ({"decoder_inputs_embeds": embeds[0]}, "decoder_inputs_embeds", r"\(3, \d+\)"),
                              ({"decoder_inputs_embeds": embeds[:, :0]}, "decoder_inputs_embeds", r"\(2, 0, \d+\)")):
        with pytest.raises(ValueError, match=rf"`{name}` {shape} {got}"):
            model(question, document_representations=docs, **kwargs)
    assert model(question, document_representations=docs, decoder_input_ids=tokens(2, 1)).logits.shape[:2] == (2, 1)


def test_label_smoothing_without_decoder_inputs_is_refused_naming_the_setting(tmp_path):
    """`Trainer(label_smoothing_factor=...)` takes `labels` out of the batch: without `decoder_input_ids` the decoder
    read the shifted question and the label smoother failed on the shapes (a RuntimeError deep in transformers), or,
    where the widths agreed, scored the wrong logits."""
    from tests.models.loss_checks import assert_label_smoothing_needs_decoder_inputs

    model = tiny()
    with pytest.raises(ValueError, match="got `num_items_in_batch` .* but no `labels`, `decoder_input_ids`"):
        model(tokens(2, 6), num_items_in_batch=5)
    assert model(tokens(2, 6)).logits.shape == (2, 6, 99)  # a plain call keeps BART's default
    ids, docs, targets = tokens(4, 6), tokens(4, 20, seed=3), tokens(4, 5, seed=4)
    rows = [{"input_ids": ids[i], "document_input_ids": docs[i], "labels": targets[i]} for i in range(4)]
    assert_label_smoothing_needs_decoder_inputs(lambda: tiny(dropout=0.0), rows, tmp_path)


@pytest.mark.parametrize("source", ["config", "bart_checkpoint"])
def test_linear_aggregation_begins_as_the_mean(source, tmp_path):
    """`aggregation="linear"` starts with a zero score (uniform weights: eq. 1's weighted sum begins as the mean of
    the window), whether the model is built from its config or loaded from a plain BART checkpoint that lacks the
    score; a score a checkpoint holds is loaded as saved. BART's initialization of the `score` Linear drew over the
    zeros set from its parent module (std 0.02 weights)."""
    config = ReadOnceBartConfig(**{**TINY, "compression_ratio": 4, "aggregation": "linear"})
    torch.manual_seed(0)
    if source == "config":
        model = ReadOnceBartForConditionalGeneration(config)
    else:
        BartForConditionalGeneration(BartConfig(**TINY)).save_pretrained(tmp_path / "bart")
        model = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "bart", config=config)
    score = model.document_encoder.aggregation.score
    assert torch.count_nonzero(score.weight) == 0 and torch.count_nonzero(score.bias) == 0
    ids = tokens(2, 16)
    mean = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(**{**TINY, "compression_ratio": 4,
                                                                      "aggregation": "mean"}))
    mean.load_state_dict(model.state_dict(), strict=False)  # the same weights, without a score
    with torch.no_grad():
        linear = model.eval().encode_documents(ids).representations
        averaged = mean.eval().encode_documents(ids).representations
    torch.testing.assert_close(linear, averaged)

    with torch.no_grad():
        score.weight.normal_()
    model.save_pretrained(tmp_path / "trained")
    loaded = ReadOnceBartForConditionalGeneration.from_pretrained(tmp_path / "trained")
    assert torch.equal(loaded.document_encoder.aggregation.score.weight, score.weight)
