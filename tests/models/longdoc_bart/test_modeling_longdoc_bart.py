"""LongDoc BART (issue 13): neighborhood and convolutional attention on BART. Tiny random configs; the equivalences
of the docstrings (BART at radius >= length, locality, blocked kernel = dense banded reference, identity
convolutions = full attention), parameter counts, config validation, generate(), loading and remote code."""

import math
import os

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, BartConfig, BartForConditionalGeneration

from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration, LongDocBartModel
from hf_readonce.models.longdoc_bart.modeling_longdoc_bart import (
    compress_padding_mask,
    default_neighborhood_block_size,
    neighborhood_attention_forward,
)
from tests.conftest import refuses_unread_keyword, run_without_hf_readonce
from tests.models.bart_checks import one_token_table_state

# init_std 0.2 (BART's default is 0.02) so that attention changes the outputs enough for the comparisons to bite
TINY = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
            eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None, init_std=0.2)
CONV_TYPES = ["convolutional", "convolutional_per_head", "neighborhood_convolutional"]


def bart(seed=0, **overrides):
    torch.manual_seed(seed)
    return BartForConditionalGeneration(BartConfig(**{**TINY, **overrides})).eval()


def longdoc(seed=0, attn_implementation="sdpa", **overrides):
    torch.manual_seed(seed)
    config = LongDocBartConfig(**{**TINY, **overrides})
    config._attn_implementation = attn_implementation
    return LongDocBartForConditionalGeneration(config).eval()


def from_bart(reference, **overrides):
    """A LongDocBart with `reference`'s weights (the new convolutions keep their documented initialization)."""
    model = longdoc(**overrides)
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert all(".conv." in key for key in result.missing_keys), result.missing_keys
    return model


def tokens(batch, length, seed=1):
    return torch.randint(3, 99, (batch, length), generator=torch.Generator().manual_seed(seed))


def padded_batch(length=20, seed=1):
    ids = tokens(2, length, seed=seed)
    mask = torch.ones_like(ids)
    mask[1, length - 6:] = 0
    ids[1, length - 6:] = TINY["pad_token_id"]
    return ids, mask


# ------------------------------------------------------------------------------------------------------- config
def test_config_defaults_and_any_bart_config_loads():
    config = LongDocBartConfig()
    assert (config.model_type, config.encoder_attention_type, config.neighborhood_radius, config.conv_kernel_size,
            config.conv_stride, config.decoder_attention_type) == ("longdoc_bart", "neighborhood", 100, 3, 3, "full")
    loaded = LongDocBartConfig.from_dict(BartConfig(**TINY).to_dict())
    assert (loaded.d_model, loaded.encoder_attention_type) == (32, "neighborhood")
    # documents are read up to the recorded training length, else the whole position table
    assert loaded.default_document_length() == loaded.max_position_embeddings
    assert LongDocBartConfig(**TINY, max_document_length=40).default_document_length() == 40


@pytest.mark.parametrize("field, value", [
    ("encoder_attention_type", "sparse"), ("encoder_attention_type", None),
    ("decoder_attention_type", "convolutional"), ("neighborhood_radius", -1), ("neighborhood_radius", 2.5),
    ("neighborhood_radius", True), ("conv_kernel_size", 0), ("conv_kernel_size", "3"), ("conv_stride", 0),
    ("conv_stride", 4),  # > conv_kernel_size (3): tokens between windows would be skipped
])
def test_bad_config_values_raise_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        LongDocBartConfig(**{field: value})


# ------------------------------------------------------------------------------------------ equivalence with BART
@pytest.mark.parametrize("decoder_attention_type", ["full", "neighborhood"])
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_neighborhood_with_radius_covering_the_input_equals_bart(decoder_attention_type, attn_implementation):
    reference = bart()
    reference.config._attn_implementation = attn_implementation
    model = from_bart(reference, attn_implementation=attn_implementation, encoder_attention_type="neighborhood",
                      neighborhood_radius=20, decoder_attention_type=decoder_attention_type)
    ids, mask = padded_batch(20)
    decoder_ids = tokens(2, 9, seed=3)
    decoder_mask = torch.ones_like(decoder_ids)
    decoder_mask[1, :2] = 0  # left-padded decoder row
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                             decoder_attention_mask=decoder_mask).logits
        got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                    decoder_attention_mask=decoder_mask).logits
    valid = decoder_mask.bool()
    torch.testing.assert_close(got[valid], expected[valid], atol=1e-5, rtol=0)


def test_inputs_the_position_table_cannot_hold_are_named():
    """An input longer than `max_position_embeddings` or of the wrong rank is a `ValueError` naming the argument
    (BART's embedding lookup raised `IndexError: index out of range`); the longest input still runs."""
    model = longdoc(encoder_attention_type="neighborhood").eval()
    limit = model.config.max_position_embeddings
    assert model(tokens(1, limit), labels=tokens(1, 5)).loss is not None
    with pytest.raises(ValueError, match=f"`input_ids` holds {limit + 1} tokens, more than the model's {limit} "):
        model(tokens(1, limit + 1), labels=tokens(1, 5))
    with pytest.raises(ValueError, match=r"`input_ids` must be a non-empty .* got shape \(7,\)"):
        model(tokens(1, 7)[0], labels=tokens(1, 5))


def test_neighborhood_radius_changes_the_output():
    reference, ids = bart(), tokens(1, 24)
    model = from_bart(reference, neighborhood_radius=2)
    with torch.no_grad():
        assert not torch.allclose(model(input_ids=ids).logits, reference(input_ids=ids).logits, atol=1e-3)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_encoder_locality(attn_implementation):
    model = longdoc(encoder_layers=1, neighborhood_radius=3, attn_implementation=attn_implementation)
    ids, i = tokens(1, 24), 10
    with torch.no_grad():
        base = model.get_encoder()(input_ids=ids).last_hidden_state[0, i]
        for j, inside in [(14, False), (6, False), (20, False), (13, True), (7, True), (10, True)]:
            changed = ids.clone()
            changed[0, j] = 3 if ids[0, j] != 3 else 4
            out = model.get_encoder()(input_ids=changed).last_hidden_state[0, i]
            assert torch.allclose(out, base, atol=1e-6) != inside, (j, inside)


def test_decoder_locality_is_a_causal_band():
    model = longdoc(decoder_layers=1, decoder_attention_type="neighborhood", neighborhood_radius=2)
    ids, decoder_ids, t = tokens(1, 12), tokens(1, 10, seed=5), 6
    with torch.no_grad():
        base = model(input_ids=ids, decoder_input_ids=decoder_ids).logits[0, t]
        for j, inside in [(3, False), (0, False), (7, False), (4, True), (6, True)]:
            changed = decoder_ids.clone()
            changed[0, j] = 3 if decoder_ids[0, j] != 3 else 4
            out = model(input_ids=ids, decoder_input_ids=changed).logits[0, t]
            assert torch.allclose(out, base, atol=1e-6) != inside, (j, inside)


# ----------------------------------------------------------------------------------------- the blocked kernel
def dense_reference(query, key, value, padding, radius, causal, scaling):
    """softmax(QK^T * scale + band/padding mask) V with the full kv x kv matrix (queries are the last q keys)."""
    q_len, kv_len = query.shape[2], key.shape[2]
    positions = torch.arange(kv_len - q_len, kv_len)[:, None]
    keys = torch.arange(kv_len)[None, :]
    allowed = (keys - positions).abs() <= radius
    if causal:
        allowed &= keys <= positions
    allowed = allowed[None, None] & padding[:, None, None, :]
    scores = (query @ key.transpose(-1, -2)) * scaling
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return (scores.softmax(-1) @ value).transpose(1, 2)


@pytest.mark.parametrize("n, q, radius, block, causal", [
    (17, 17, 3, None, False), (17, 17, 3, 5, False), (40, 40, 7, 16, False), (16, 16, 4, 4, False),
    (9, 9, 0, None, False), (10, 10, 30, None, False), (23, 23, 5, 6, True), (23, 23, 5, None, True),
    (23, 1, 5, None, True), (23, 3, 4, 2, True), (30, 7, 3, 4, False),  # q < kv: after a KV cache
])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("use_sdpa", [True, False])
def test_blocked_equals_dense_banded_reference(n, q, radius, block, causal, padded, use_sdpa):
    generator = torch.Generator().manual_seed(n * 100 + radius)
    query = torch.randn(2, 3, q, 8, generator=generator)
    key, value = torch.randn(2, 2, 3, n, 8, generator=generator)
    padding = torch.ones(2, n, dtype=torch.bool)
    if padded:
        padding[1, n - 5:] = False
        padding[0, :2] = False
    got, weights = neighborhood_attention_forward(None, query, key, value, padding if padded else None,
                                                  scaling=0.35, radius=radius, causal=causal, block_size=block,
                                                  use_sdpa=use_sdpa)
    expected = dense_reference(query, key, value, padding, radius, causal, 0.35)
    assert weights is None and got.shape == (2, q, 3, 8)
    valid = padding[:, n - q:]  # rows of padding queries are not compared (no real key may be in their band)
    torch.testing.assert_close(got[valid], expected[valid], atol=1e-5, rtol=0)


@pytest.mark.parametrize("n, q, radius, block, causal", [
    (17, 17, 3, None, False), (17, 17, 3, 5, False), (9, 9, 0, None, False), (10, 10, 30, None, False),
    (23, 23, 5, 6, True), (23, 1, 5, None, True), (23, 3, 4, 2, True), (30, 7, 3, 4, False),
])
def test_blocked_eager_weights_are_the_dense_banded_softmax(n, q, radius, block, causal):
    """`output_attentions=True` with the eager kernel: the weights the blocks applied, on the `(q, kv)` grid (the
    dense banded softmax; 0 outside the band, on padding and on the keys of a KV cache no query reaches); they
    reproduce the output. Without the switch, or with SDPA, none (no q x kv matrix)."""
    generator = torch.Generator().manual_seed(n * 100 + radius)
    query = torch.randn(2, 3, q, 8, generator=generator)
    key, value = torch.randn(2, 2, 3, n, 8, generator=generator)
    padding = torch.ones(2, n, dtype=torch.bool)
    padding[1, n - 5:] = False
    padding[0, :2] = False
    got, weights = neighborhood_attention_forward(None, query, key, value, padding, scaling=0.35, radius=radius,
                                                  causal=causal, block_size=block, use_sdpa=False,
                                                  output_attentions=True)
    scores = (query @ key.transpose(-1, -2)) * 0.35
    position = torch.arange(n)[None, :] - torch.arange(n - q, n)[:, None]  # key position - query position
    allowed = (position >= -radius) & (position <= (0 if causal else radius)) & padding[:, None, None, :]
    expected = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min).softmax(-1) * allowed
    valid = padding[:, n - q:]  # rows of padding queries are not compared (no real key may be in their band)
    assert weights.shape == (2, 3, q, n)
    torch.testing.assert_close(weights.transpose(1, 2)[valid], expected.transpose(1, 2)[valid], atol=1e-6, rtol=0)
    assert torch.all(weights.masked_fill(allowed, 0).transpose(1, 2)[valid] == 0)
    torch.testing.assert_close(got[valid], (weights @ value).transpose(1, 2)[valid], atol=1e-5, rtol=0)
    for use_sdpa, asked in ((False, False), (True, True)):
        assert neighborhood_attention_forward(None, query, key, value, padding, radius=radius, causal=causal,
                                              use_sdpa=use_sdpa, output_attentions=asked)[1] is None


@pytest.mark.parametrize("decoder_attention_type", ["full", "neighborhood"])
def test_neighborhood_covering_the_input_returns_bart_s_attentions(decoder_attention_type):
    """The neighborhood layers returned no weights (`output_attentions=True` gave BART's full layers only, here none:
    an empty `encoder_attentions`); with eager they are BART's when the band covers the input, field by field."""
    reference = bart()
    reference.config._attn_implementation = "eager"
    model = from_bart(reference, attn_implementation="eager", encoder_attention_type="neighborhood",
                      neighborhood_radius=20, decoder_attention_type=decoder_attention_type)
    ids, mask = padded_batch(20)
    decoder_ids = tokens(2, 9, seed=3)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, output_attentions=True)
        got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, output_attentions=True)
        plain = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert len(getattr(got, name)) == 2, name
        for ours, theirs in zip(getattr(got, name), getattr(expected, name)):
            torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    assert torch.equal(got.logits, plain.logits)


def test_banded_attentions_follow_the_config_and_the_sdpa_kernel_says_it_has_none(monkeypatch):
    """A radius shorter than the input: every layer's `(batch, heads, n, n)` weights, 0 outside the band, also when
    the config asks for them; the convolutional types give the attention over their compressed positions."""
    from hf_readonce.models.longdoc_bart import modeling_longdoc_bart

    model = longdoc(attn_implementation="eager", encoder_attention_type="neighborhood", neighborhood_radius=3)
    ids, mask = padded_batch(20)
    model.config.output_attentions = True
    with torch.no_grad():
        weights = model.get_encoder()(input_ids=ids, attention_mask=mask).attentions
    position = torch.arange(20)
    outside = (position[:, None] - position[None, :]).abs() > 3
    assert len(weights) == 2 and all(w.shape == (2, 4, 20, 20) for w in weights)
    for w in weights:  # the rows of real queries (padding queries, whose band holds no real key, are not read)
        assert torch.all(w[0][:, outside] == 0) and torch.all(w[1, :, :14][:, outside[:14]] == 0)
        assert torch.all(w[1, :, :14, 14:] == 0)  # padding keys
    model.config.output_attentions = False
    convolutional = longdoc(attn_implementation="eager", encoder_attention_type="convolutional")
    with torch.no_grad():
        compressed = convolutional.get_encoder()(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert [tuple(w.shape) for w in compressed] == [(2, 4, 7, 7)] * 2  # m = ceil(20 / 3)
    said = []
    monkeypatch.setattr(modeling_longdoc_bart.logger, "warning_once", lambda message, *a, **k: said.append(message))
    model.config._attn_implementation = "sdpa"
    with torch.no_grad():
        assert model.get_encoder()(input_ids=ids, attention_mask=mask, output_attentions=True).attentions == ()
    assert said and "'eager'" in said[0]


def test_a_neighborhood_decoder_returns_its_banded_weights_when_the_config_asks():
    """`config.output_attentions=True` reaches the decoder's neighborhood layers too (BART's decoder records what the
    config asks, but the blocked kernel builds its weights only when `output_attentions` reaches it): every decoder
    layer's causal band, 0 before `t - r` and after `t`; and a cached decoding step's row, over the whole cache."""
    model = longdoc(attn_implementation="eager", encoder_attention_type="full", decoder_attention_type="neighborhood",
                    neighborhood_radius=2)
    ids, mask = padded_batch(12)
    decoder_ids = tokens(2, 9, seed=3)
    model.config.output_attentions = True
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)
        generated = model.generate(ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                                   output_attentions=True, return_dict_in_generate=True)
    position = torch.arange(9)
    outside = (position[:, None] - position[None, :] > 2) | (position[None, :] > position[:, None])
    assert len(out.decoder_attentions) == TINY["decoder_layers"]
    for weights in out.decoder_attentions:
        assert weights.shape == (2, 4, 9, 9) and torch.all(weights[..., outside] == 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9))
    last_step = generated.decoder_attentions[-1]
    assert [tuple(w.shape) for w in last_step] == [(2, 4, 1, 4)] * TINY["decoder_layers"]
    assert all(torch.all(w[..., 0] == 0) for w in last_step)  # key 0 is more than r = 2 before the query


def test_blocked_kernel_validates_its_arguments():
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="keys"):
        neighborhood_attention_forward(None, torch.randn(1, 1, 5, 8), x, x, None)
    with pytest.raises(ValueError, match="attention_mask"):
        neighborhood_attention_forward(None, x, x, x, torch.ones(1, 3))


def _flex_compiles():
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch, "compile")


@pytest.mark.skipif(os.environ.get("HF_READONCE_TEST_FLEX") != "1" or not _flex_compiles(),
                    reason="FlexAttention on CPU compiles for minutes on this machine; set HF_READONCE_TEST_FLEX=1")
def test_flex_attention_equals_blocked():
    model = longdoc(neighborhood_radius=3, decoder_attention_type="neighborhood")
    ids, mask = padded_batch(40)
    decoder_ids = tokens(2, 8, seed=3)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        model.set_attn_implementation("flex_attention")
        got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------ convolutional attention
@pytest.mark.parametrize("encoder_attention_type", CONV_TYPES)
def test_identity_convolutions_with_kernel_1_stride_1_equal_full_attention(encoder_attention_type):
    reference = bart()
    model = from_bart(reference, encoder_attention_type=encoder_attention_type, conv_kernel_size=1, conv_stride=1,
                      neighborhood_radius=20)
    ids, mask = padded_batch(20)
    decoder_ids = tokens(2, 7, seed=3)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kernel, stride", [(3, 3), (4, 2), (1, 1), (5, 3)])
def test_parameter_counts_shared_vs_per_head(kernel, stride):
    d, heads, layers = TINY["d_model"], TINY["encoder_attention_heads"], TINY["encoder_layers"]
    base = sum(p.numel() for p in longdoc(encoder_attention_type="neighborhood").parameters())
    counts = {kind: sum(p.numel() for p in longdoc(encoder_attention_type=kind, conv_kernel_size=kernel,
                                                     conv_stride=stride).parameters()) - base
              for kind in CONV_TYPES}
    assert counts["convolutional"] == layers * 2 * (kernel * d * d + d)
    assert counts["convolutional_per_head"] == layers * 2 * (kernel * d * d // heads + d)
    assert counts["neighborhood_convolutional"] == counts["convolutional"]


@pytest.mark.parametrize("encoder_attention_type", CONV_TYPES)
def test_convolutions_change_the_output_and_padding_does_not_leak(encoder_attention_type):
    model = longdoc(encoder_attention_type=encoder_attention_type, neighborhood_radius=4)
    with torch.no_grad():  # random (not window-mean) convolutions, so that any leak would show
        for name, parameter in model.named_parameters():
            if ".conv." in name:
                parameter.normal_(0, 0.3)
    ids = tokens(1, 14, seed=7)
    encoder = model.get_encoder()
    with torch.no_grad():
        alone = encoder(input_ids=ids).last_hidden_state
        padded_ids = torch.cat([ids, torch.full((1, 7), TINY["pad_token_id"])], dim=1)
        padded_mask = torch.cat([torch.ones(1, 14), torch.zeros(1, 7)], dim=1).long()
        in_batch = encoder(input_ids=torch.cat([padded_ids, tokens(1, 21, seed=8)]),
                           attention_mask=torch.cat([padded_mask, torch.ones(1, 21).long()])).last_hidden_state
        other_padding = padded_ids.clone()
        other_padding[0, 14:] = 50
        changed = encoder(input_ids=other_padding, attention_mask=padded_mask).last_hidden_state
        full = longdoc(encoder_attention_type="full").get_encoder()
        full.load_state_dict(encoder.state_dict(), strict=False)
        assert not torch.allclose(full(input_ids=ids).last_hidden_state, alone, atol=1e-3)
    torch.testing.assert_close(in_batch[0, :14], alone[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(changed[0, :14], alone[0], atol=1e-5, rtol=0)


def test_compress_padding_mask_marks_a_window_valid_if_any_token_is():
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0]])
    assert compress_padding_mask(mask, 3, 3).tolist() == [[True, True, False], [True, False, False]]
    assert compress_padding_mask(mask, 4, 2).tolist() == [[True, True, False, False],
                                                          [True, True, False, False]]
    assert compress_padding_mask(None, 3, 3) is None


@pytest.mark.parametrize("kernel, stride", [(3, 3), (4, 2), (5, 3), (2, 1), (1, 1)])
@pytest.mark.parametrize("groups", [1, 4])
def test_compress_and_expand_equal_the_conv_modules_and_are_contiguous(kernel, stride, groups):
    """`compress` / `expand` compute `nn.Conv1d` / `nn.ConvTranspose1d` (their own weights) as matrix products in the
    `(batch, length, channels)` layout: equal up to float rounding, contiguous (SDPA's fused kernels need a
    last-dimension stride of 1), gradients included."""
    from hf_readonce.models.longdoc_bart.modeling_longdoc_bart import LongDocConvolution

    config = LongDocBartConfig(**{**TINY, "conv_kernel_size": kernel, "conv_stride": stride})
    torch.manual_seed(0)
    convolution = LongDocConvolution(config, groups=groups)
    for parameter in convolution.parameters():  # not the documented (symmetric) initialization
        nn_init = torch.randn(parameter.shape, generator=torch.Generator().manual_seed(parameter.numel()))
        parameter.data.copy_(nn_init * 0.3)
    for n in (20, 21, 22):
        states = torch.randn(2, n, TINY["d_model"], requires_grad=True)
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[1, n - 5:] = False
        count = math.ceil(n / stride)
        padded = torch.nn.functional.pad(states * mask[..., None], (0, 0, 0, (count - 1) * stride + kernel - n))
        expected = convolution.conv(padded.transpose(1, 2)).transpose(1, 2)
        got = convolution.compress(states, mask)
        assert got.is_contiguous() and got.shape == expected.shape == (2, count, TINY["d_model"])
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        expected_grad, = torch.autograd.grad(expected.square().sum(), states)
        got_grad, = torch.autograd.grad(got.square().sum(), states)
        torch.testing.assert_close(got_grad, expected_grad, atol=1e-4, rtol=0)
        compressed = torch.randn(2, count, TINY["d_model"])
        expected = convolution.deconv(compressed.transpose(1, 2))[:, :, :n].transpose(1, 2)
        got = convolution.expand(compressed, n)
        assert got.is_contiguous() and got.shape == (2, n, TINY["d_model"])
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_default_conv_init_is_window_mean_and_spread():
    model = longdoc(encoder_attention_type="convolutional_per_head", conv_kernel_size=4, conv_stride=2)
    conv = model.model.encoder.layers[0].self_attn.conv
    d, per_head = TINY["d_model"], TINY["d_model"] // TINY["encoder_attention_heads"]
    assert conv.conv.weight.shape == (d, per_head, 4)
    expected = torch.zeros(d, per_head)
    expected[torch.arange(d), torch.arange(d) % per_head] = 1
    torch.testing.assert_close(conv.conv.weight, (expected / 4)[..., None].expand(-1, -1, 4))
    torch.testing.assert_close(conv.deconv.weight, (expected / 2)[..., None].expand(-1, -1, 4))
    assert not conv.conv.bias.any() and not conv.deconv.bias.any()


# ------------------------------------------------------------------------------------------------------ generate
@pytest.mark.parametrize("decoder_attention_type", ["full", "neighborhood"])
@pytest.mark.parametrize("num_beams", [1, 2])
def test_generate_batched_reused_encoder_outputs_and_cache(decoder_attention_type, num_beams):
    model = longdoc(neighborhood_radius=3, decoder_attention_type=decoder_attention_type)
    ids, mask = padded_batch(20)
    kwargs = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, num_beams=num_beams)
    with torch.no_grad():
        got = model.generate(ids, attention_mask=mask, **kwargs)
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        reused = model.generate(encoder_outputs=encoder_outputs, attention_mask=mask, **kwargs)
        uncached = model.generate(ids, attention_mask=mask, use_cache=False, **kwargs)
        alone = model.generate(ids[1:, :14], **kwargs)
    assert got.shape == (2, 9)
    assert torch.equal(reused, got) and torch.equal(uncached, got)
    assert torch.equal(alone[0], got[1])  # the padded row decodes as it does alone


def test_encoder_outputs_with_a_mask_of_other_rows_or_states_of_another_width_are_named():
    """A mask that is not the encoder outputs' `(batch_size, length)` (one row of a batch read with the whole batch's
    mask, or a mask of other length) was broadcast or ignored, decoding the wrong logits without a word; states of
    another width failed in a matrix product. Both are `ValueError`s naming the argument, in forward and generate."""
    from transformers.modeling_outputs import BaseModelOutput

    model = longdoc(neighborhood_radius=3).eval()
    ids, mask = padded_batch(20)
    with torch.no_grad():
        states = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        one = BaseModelOutput(last_hidden_state=states[1:2])
        start = torch.tensor([[model.config.decoder_start_token_id]])
        model(encoder_outputs=one, attention_mask=mask[1:2], decoder_input_ids=start)  # the row's own mask
        for bad in (mask, torch.ones(1, 3, dtype=torch.long)):
            with pytest.raises(ValueError, match=r"`attention_mask` of shape .* does not match `encoder_outputs`"):
                model(encoder_outputs=one, attention_mask=bad, decoder_input_ids=start)
            with pytest.raises(ValueError, match="`attention_mask` of shape"):
                model.generate(encoder_outputs=one, attention_mask=bad, max_new_tokens=2)
        with pytest.raises(TypeError, match="`input_ids` must be a torch.Tensor, got ndarray"):
            model.generate(ids.numpy(), attention_mask=mask, max_new_tokens=2)
        with pytest.raises(TypeError, match="`attention_mask` must be a torch.Tensor, got list"):
            model.generate(ids, attention_mask=mask.tolist(), max_new_tokens=2)
        with pytest.raises(ValueError, match=r"`input_ids` must be a non-empty .* got shape \(0, 20\)"):
            model.generate(ids[:0], max_new_tokens=2)
        narrow = BaseModelOutput(last_hidden_state=states[1:2, :, :8])
        with pytest.raises(ValueError, match="`encoder_outputs` hold states of width 8"):
            model(encoder_outputs=narrow, attention_mask=mask[1:2], decoder_input_ids=start)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_decoder_neighborhood_covering_the_summary_generates_as_full(num_beams):
    full = longdoc(neighborhood_radius=3)
    neighborhood = from_bart(full, neighborhood_radius=3, decoder_attention_type="neighborhood")
    neighborhood.config.neighborhood_radius = 10  # >= the 9 decoder positions
    for layer in neighborhood.model.decoder.layers:
        layer.self_attn.radius = 10
    ids, mask = padded_batch(20)
    kwargs = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, num_beams=num_beams)
    with torch.no_grad():
        assert torch.equal(neighborhood.generate(ids, attention_mask=mask, **kwargs),
                           full.generate(ids, attention_mask=mask, **kwargs))


# ---------------------------------------------------------------------------------------- loading and saving
def test_save_load_round_trip_and_auto_classes(tmp_path):
    model = longdoc(encoder_attention_type="convolutional_per_head", neighborhood_radius=5)
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["configuration_longdoc_bart.py",
                                                            "modeling_longdoc_bart.py"]
    assert AutoConfig.from_pretrained(tmp_path).encoder_attention_type == "convolutional_per_head"
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is LongDocBartForConditionalGeneration
    assert type(AutoModel.from_config(loaded.config)) is LongDocBartModel
    ids, mask = padded_batch(20)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask).logits,
                                   model(input_ids=ids, attention_mask=mask).logits, atol=0, rtol=0)


@pytest.mark.parametrize("encoder_attention_type", ["neighborhood", "convolutional"])
def test_plain_bart_checkpoint_loads_unchanged(tmp_path, encoder_attention_type):
    reference = bart()
    reference.save_pretrained(tmp_path)
    model, info = LongDocBartForConditionalGeneration.from_pretrained(
        tmp_path, encoder_attention_type=encoder_attention_type, neighborhood_radius=20, conv_kernel_size=1,
        conv_stride=1, output_loading_info=True)
    model.eval()
    new = {f"model.encoder.layers.{i}.self_attn.conv.{part}.{kind}" for i in range(TINY["encoder_layers"])
           for part in ("conv", "deconv") for kind in ("weight", "bias")}
    assert set(info["missing_keys"]) == (new if encoder_attention_type == "convolutional" else set())
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, mask = padded_batch(20)
    with torch.no_grad():  # radius 20 / identity convolutions: BART's function (the conv init survived loading)
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits,
                                   reference(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=0)


def untied_bart(seed=0):
    """A BART with `tie_word_embeddings=False` whose four token tables (`shared`, the encoder's, the decoder's, the LM
    head) all differ."""
    reference = bart(seed=seed, tie_word_embeddings=False)
    with torch.no_grad():
        for table in (reference.model.shared, reference.model.encoder.embed_tokens,
                      reference.model.decoder.embed_tokens, reference.lm_head):
            table.weight.normal_()
    return reference


@pytest.mark.parametrize("model_class", [LongDocBartModel, LongDocBartForConditionalGeneration])
def test_untied_bart_checkpoint_loads_as_bart(tmp_path, model_class):
    """`tie_word_embeddings=False` means what it means in BART: `shared`, the encoder's and the decoder's token tables
    are three parameters (and the LM head a fourth), each loaded from an untied BART checkpoint; full attention then
    computes BART's outputs (the encoder and decoder read `shared` whatever the flag said, 3.7 off BART's)."""
    reference = untied_bart()
    (reference.model if model_class is LongDocBartModel else reference).save_pretrained(tmp_path)
    model, info = model_class.from_pretrained(tmp_path, encoder_attention_type="full", output_loading_info=True)
    model.eval()
    assert not any(info.values()), info
    base = getattr(model, "model", model)
    assert model.config.tie_word_embeddings is False
    for part in ("encoder", "decoder"):
        table = getattr(base, part).embed_tokens.weight
        assert table is not base.shared.weight
        assert torch.equal(table, getattr(reference.model, part).embed_tokens.weight), part
    ids, mask = padded_batch(20)
    dec = tokens(2, 5, seed=3)
    with torch.no_grad():
        if model_class is LongDocBartModel:
            got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).last_hidden_state
            expected = reference.model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).last_hidden_state
        else:
            got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
            expected = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("tie", [True, False])
def test_a_checkpoint_with_one_token_table_loads_with_encoder_and_decoder_reading_it(tmp_path, tie):
    """A LongDoc checkpoint that holds one token table, `model.shared`, which its encoder and decoder read: tied (as
    every converted checkpoint; the LM head is that table too) or with `tie_word_embeddings=False` and an LM head of
    its own. It loads with nothing missing, the encoder and decoder reading that table, and computes what it
    computed: BART's outputs with full attention."""
    reference = bart(tie_word_embeddings=tie)
    state = one_token_table_state(reference, tie)  # BART reading one table
    assert {key for key in state if "shared" in key or "lm_head" in key} == (
        {"model.shared.weight"} | (set() if tie else {"lm_head.weight"}))
    LongDocBartConfig(**TINY, encoder_attention_type="full", tie_word_embeddings=tie).save_pretrained(tmp_path)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    model, info = LongDocBartForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    model.eval()
    assert not any(info.values()), info
    base = model.model
    assert (base.encoder.embed_tokens.weight is base.shared.weight) is tie
    for part in ("encoder", "decoder"):
        assert torch.equal(getattr(base, part).embed_tokens.weight, base.shared.weight), part
    ids, mask = padded_batch(20)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits,
                                   reference(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=0)


def test_a_checkpoint_with_one_token_table_and_shared_offloaded_to_disk_is_refused_clearly(tmp_path):
    """Untied, a checkpoint holding only `model.shared` gives its table to the encoder and the decoder while loading;
    with `device_map` offloading `shared` to disk that table cannot be read then: a `ValueError` says so and how to
    load it (not torch's "Cannot copy out of meta tensor"), and with `tie_word_embeddings=True` it loads, the encoder and
    the decoder reading `shared`."""
    reference = bart(tie_word_embeddings=False)
    # one table, the LM head's too (transformers 5.6 cannot compare two tables on disk)
    state = one_token_table_state(reference, tie=False, lm_head_too=True)
    LongDocBartConfig(**TINY, encoder_attention_type="full", tie_word_embeddings=False).save_pretrained(tmp_path)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    offload = dict(device_map="auto", max_memory={"cpu": "30KB"}, offload_folder=str(tmp_path / "offload"))
    with pytest.raises(ValueError, match=r"offloaded `shared` to disk.*`tie_word_embeddings=True`"):
        LongDocBartForConditionalGeneration.from_pretrained(tmp_path, **offload)
    model = LongDocBartForConditionalGeneration.from_pretrained(tmp_path, tie_word_embeddings=True, **offload).eval()
    assert model.model.shared.weight.device.type == "meta"  # on disk
    assert model.model.encoder.embed_tokens is model.model.shared
    assert model.model.decoder.embed_tokens is model.model.shared


def test_resize_token_embeddings_keeps_untied_tables_separate_and_their_rows(tmp_path):
    """With `tie_word_embeddings=False` each token table (`shared`, the encoder's, the decoder's, the LM head) is
    resized and keeps its own rows (BART's `set_input_embeddings` would give the encoder and decoder `shared`), and
    the resized checkpoint loads again with the same outputs."""
    model = longdoc(encoder_attention_type="full", tie_word_embeddings=False)
    with torch.no_grad():
        for table in (model.model.shared, model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            table.weight.normal_()
    tables = {"shared": lambda m: m.model.shared, "encoder": lambda m: m.model.encoder.embed_tokens,
              "decoder": lambda m: m.model.decoder.embed_tokens, "lm_head": lambda m: m.lm_head}
    old = {name: get(model).weight.detach().clone() for name, get in tables.items()}
    model.resize_token_embeddings(103)
    weights = {name: get(model).weight for name, get in tables.items()}
    assert len({id(weight) for weight in weights.values()}) == 4
    for name, weight in weights.items():
        assert weight.shape == (103, 32), name
        assert torch.equal(weight[:99], old[name]), name
    assert model.config.vocab_size == 103 and model.final_logits_bias.shape == (1, 103)
    ids = torch.cat([tokens(1, 10), torch.tensor([[102]])], dim=1)  # an added token
    with torch.no_grad():
        expected = model(input_ids=ids, decoder_input_ids=torch.tensor([[2, 102]])).logits
    model.save_pretrained(tmp_path)
    again = LongDocBartForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids, decoder_input_ids=torch.tensor([[2, 102]])).logits, expected,
                                   atol=0, rtol=0)


def test_remote_code_loads_where_hf_readonce_is_absent(tmp_path):
    model = longdoc(neighborhood_radius=3, decoder_attention_type="neighborhood")
    model.save_pretrained(tmp_path / "ckpt")
    ids, mask = padded_batch(20)
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    torch.save({"ids": ids, "mask": mask, "expected": expected}, tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path / 'ckpt')!r}, trust_remote_code=True).eval()
        assert "hf_readonce" not in type(model).__module__
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        with torch.no_grad():
            got = model.generate(d["ids"], attention_mask=d["mask"], max_new_tokens=5, min_new_tokens=5,
                                 do_sample=False)
        assert torch.equal(got, d["expected"]), (got, d["expected"])
        print("OK", type(model).__name__)
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK LongDocBartForConditionalGeneration" in result.stdout


# -------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("encoder_attention_type, decoder_attention_type", [
    ("neighborhood", "neighborhood"), ("convolutional_per_head", "full"), ("neighborhood_convolutional", "full")])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(encoder_attention_type, decoder_attention_type):
    ids, mask = padded_batch(20)
    labels = tokens(2, 6, seed=9)
    results = []
    for checkpointing in (False, True):
        model = longdoc(encoder_attention_type=encoder_attention_type, decoder_attention_type=decoder_attention_type,
                        neighborhood_radius=3).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, atol=1e-5, rtol=0)
    assert grads_a.keys() == grads_b.keys() and any(".conv." in n or "self_attn" in n for n in grads_a)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_neighborhood_builds_no_square_matrix(use_sdpa):
    """Every tensor an op creates in the blocked kernel (SDPA's internals included) is O(n * (b + 2r)), far below
    n x n: recorded with a TorchDispatchMode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor):
                    Largest.numel = max(Largest.numel, t.numel())
            return out

    n, radius = 2048, 8
    query = torch.randn(1, 1, n, 4)
    mask = torch.ones(1, n, dtype=torch.bool)
    with Largest():
        out, _ = neighborhood_attention_forward(None, query, query, query, mask, radius=radius, use_sdpa=use_sdpa)
    assert out.shape == (1, n, 1, 4)
    block = default_neighborhood_block_size(radius)
    assert Largest.numel <= math.ceil(n / block) * block * (block + 2 * radius) * 4 < n * n / 8


@pytest.mark.parametrize("encoder_attention_type", ["full", "neighborhood", *CONV_TYPES])
def test_every_type_runs_sdpa_fused_kernels(encoder_attention_type):
    """Every attention type gives SDPA inputs a fused kernel takes: restricted by `sdpa_kernel` to the fused backends
    (on CPU only FLASH_ATTENTION exists; EFFICIENT_ATTENTION is CUDA's), SDPA raises "No available kernel" instead of
    running its math path, e.g. on the strided (last-dimension stride m) views convolutional attention used to pass.
    The fused results equal the math path's; padded batch, unpadded input and a training backward included."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = longdoc(encoder_attention_type=encoder_attention_type, decoder_attention_type="neighborhood",
                    neighborhood_radius=4, conv_kernel_size=3, conv_stride=2)
    with torch.no_grad():  # random (not window-mean) convolutions
        for name, parameter in model.named_parameters():
            if ".conv." in name:
                parameter.normal_(0, 0.3)
    ids, mask = padded_batch(21)
    decoder_ids = tokens(2, 7, seed=3)
    def fused():
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])

    with torch.no_grad():
        with sdpa_kernel([SDPBackend.MATH]):
            expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
            expected_alone = model.get_encoder()(input_ids=ids[:1]).last_hidden_state
        with fused():
            got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
            got_alone = model.get_encoder()(input_ids=ids[:1]).last_hidden_state
    # fused and math kernels sum in another order (flash's online softmax): float rounding, relative to the largest
    # value (logits reach ~4.4 here; on an AVX-512 CPU convolutional attention differs by 1.9e-5 at a logit of 0.03)
    torch.testing.assert_close(got, expected, atol=1e-5 * float(expected.abs().max()), rtol=1e-4)
    torch.testing.assert_close(got_alone, expected_alone, atol=1e-5 * float(expected_alone.abs().max()), rtol=1e-4)
    model.train()
    with fused():
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, labels=decoder_ids).loss.backward()
    assert all(p.grad is not None for name, p in model.named_parameters() if ".conv." in name)


@pytest.mark.parametrize("encoder_attention_type", CONV_TYPES)
def test_convolutional_types_build_no_square_matrix(encoder_attention_type):
    """With SDPA's default kernel choice, no op of a convolutional layer creates a tensor of the size of the
    compressed scores `(heads, m, m)`: the largest is O(n * d_model) (recorded with a TorchDispatchMode, as for
    neighborhood attention). The math path, taken on strided inputs, creates `heads * m * m` values."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor):
                    Largest.numel = max(Largest.numel, t.numel())
            return out

    n, stride = 2048, 2
    model = longdoc(encoder_attention_type=encoder_attention_type, conv_kernel_size=2, conv_stride=stride,
                    neighborhood_radius=16, max_position_embeddings=n, encoder_layers=1)
    attention = model.get_encoder().layers[0].self_attn
    hidden = torch.randn(1, n, TINY["d_model"])
    with torch.no_grad(), Largest():
        out, _ = attention(hidden, attention_mask=torch.ones(1, 1, 1, n, dtype=torch.bool))
    assert out.shape == (1, n, TINY["d_model"])
    m = n // stride
    assert Largest.numel <= n * max(TINY["d_model"], 2 * 16 + 16) < TINY["encoder_attention_heads"] * m * m / 8


# ------------------------------------------------------------------------------------------ representation fingerprint
def test_representation_fingerprint_covers_the_encoder_only_and_follows_changes():
    model = longdoc(neighborhood_radius=3)
    first = model.representation_fingerprint()
    assert len(first) == 64 and int(first, 16) >= 0
    assert longdoc(neighborhood_radius=3).representation_fingerprint() == first  # same seed, same weights
    assert longdoc(seed=1, neighborhood_radius=3).representation_fingerprint() != first
    with torch.no_grad():  # the decoder and LM head are not part of the encoder outputs
        model.model.decoder.layers[0].fc1.weight.add_(1.0)
        model.final_logits_bias.add_(1.0)
    model.config.decoder_attention_type = "neighborhood"
    assert model.representation_fingerprint() == first
    with torch.no_grad():  # an in-place change of an encoder weight invalidates the cache
        model.model.encoder.layers[1].self_attn.q_proj.weight[0, 0] += 1e-3
    changed = model.representation_fingerprint()
    assert changed != first
    with torch.no_grad():  # the shared token embeddings are read by the encoder
        model.model.shared.weight[5, 0] += 1e-3
    assert model.representation_fingerprint() not in (first, changed)


@pytest.mark.parametrize("field, value", [("encoder_attention_type", "convolutional"), ("neighborhood_radius", 4),
                                          ("conv_stride", 2), ("activation_function", "relu")])
def test_representation_fingerprint_changes_with_encoder_config_fields(field, value):
    model = longdoc(neighborhood_radius=3)
    before = model.representation_fingerprint()
    setattr(model.config, field, value)
    assert model.representation_fingerprint() != before


@pytest.mark.parametrize("field, value", [("encoder_attention_type", "sparse"), ("neighborhood_radius", -1),
                                          ("conv_stride", 9)])
def test_from_pretrained_keyword_fields_are_validated_too(tmp_path, field, value):
    # the model's from_pretrained builds its config with the keyword fields, whose __init__ checks them
    longdoc(neighborhood_radius=3).save_pretrained(tmp_path)
    loaded = LongDocBartForConditionalGeneration.from_pretrained(tmp_path, neighborhood_radius=5)
    assert loaded.config.neighborhood_radius == 5
    with pytest.raises(ValueError, match=field):
        LongDocBartForConditionalGeneration.from_pretrained(tmp_path, **{field: value})


@pytest.mark.parametrize("attention_type", ["neighborhood", "convolutional"])
def test_mismatched_inputs_are_refused_by_name(attention_type):
    torch.manual_seed(0)
    model = LongDocBartForConditionalGeneration(LongDocBartConfig(**TINY, encoder_attention_type=attention_type)).eval()
    ids, labels = torch.randint(3, 99, (2, 20)), torch.randint(3, 99, (2, 5))
    for kwargs, error, words in [
            ({"labels": labels[:1]}, ValueError, "hold 1 rows for an encoder batch of 2"),
            ({"labels": torch.randint(3, 99, (3, 5))}, ValueError, "hold 3 rows"),
            ({"labels": labels.float()}, TypeError, "must hold integer token ids"),
            ({"attention_mask": torch.ones(2, 18)}, ValueError, r"`attention_mask` \(2, 18\) must have the shape"),
            ({"attention_mask": torch.ones(1, 20)}, ValueError, r"`attention_mask` \(1, 20\)")]:
        with pytest.raises(error, match=words):
            model(input_ids=ids, **kwargs)
    with pytest.raises(TypeError, match="`input_ids` must hold integer token ids"):
        model(input_ids=ids.float(), labels=labels)
    encoder_outputs = model.get_encoder()(input_ids=ids)
    with pytest.raises(ValueError, match="hold 1 rows"):
        model(encoder_outputs=encoder_outputs, labels=labels[:1])
    assert model(input_ids=ids, labels=labels).loss.isfinite()


def test_empty_input_and_targets_beyond_the_positions_are_refused_by_name():
    torch.manual_seed(0)
    model = LongDocBartForConditionalGeneration(LongDocBartConfig(**TINY)).eval()
    with pytest.raises(ValueError, match=r"`input_ids` must be a non-empty .* got shape \(1, 0\)"):
        model.get_encoder()(input_ids=torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"hold 80 tokens, more than the model's 64 positions"):
        model(input_ids=torch.randint(3, 99, (1, 20)), labels=torch.randint(3, 99, (1, 80)))


def test_1d_or_empty_inputs_labels_and_decoder_inputs_are_refused_by_name():
    """As ReadOnce BART: 1-D or empty `input_ids`, `labels`, `decoder_input_ids` / `decoder_inputs_embeds` are named
    in `forward` (with and without decoder inputs), the bare model, the encoder, the decoder and `generate` (BART's
    shift raised a bare `IndexError`, its shape unpacking a bare `ValueError`, an empty batch a reshape error, and
    1-D `decoder_inputs_embeds` were read as 3 rows); well-formed calls and a decoding step's `(batch, 1)` ids run."""
    model = longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3)
    ids, labels = tokens(2, 12), tokens(2, 4, seed=3)
    embeds = torch.zeros(2, 3, TINY["d_model"])
    states = torch.zeros(2, 12, TINY["d_model"])
    shape = r"must be a non-empty \(batch_size, text_length(, d_model)?\) tensor, got shape"
    for call, name, got in [
            (lambda: model(input_ids=ids[0]), "input_ids", r"\(12,\)"),
            (lambda: model(input_ids=ids[:, :0]), "input_ids", r"\(2, 0\)"),
            (lambda: model(input_ids=ids[:0]), "input_ids", r"\(0, 12\)"),
            (lambda: model(ids[0], decoder_input_ids=labels), "input_ids", r"\(12,\)"),
            (lambda: model(input_ids=ids, labels=labels[0]), "labels", r"\(4,\)"),
            (lambda: model(input_ids=ids, labels=labels[:, :0]), "labels", r"\(2, 0\)"),
            (lambda: model(input_ids=ids, decoder_input_ids=labels[0]), "decoder_input_ids", r"\(4,\)"),
            (lambda: model(ids, None, labels[:, :0]), "decoder_input_ids", r"\(2, 0\)"),
            (lambda: model(input_ids=ids, decoder_inputs_embeds=embeds[0]), "decoder_inputs_embeds", r"\(3, 32\)"),
            (lambda: model(input_ids=ids, decoder_inputs_embeds=embeds[:, :0]), "decoder_inputs_embeds",
             r"\(2, 0, 32\)"),
            (lambda: model.model(input_ids=ids[0]), "input_ids", r"\(12,\)"),
            (lambda: model.model(input_ids=ids, decoder_input_ids=labels[0]), "decoder_input_ids", r"\(4,\)"),
            (lambda: model.get_encoder()(input_ids=ids[:0]), "input_ids", r"\(0, 12\)"),
            (lambda: model.get_encoder()(inputs_embeds=embeds[0]), "inputs_embeds", r"\(3, 32\)"),
            (lambda: model.get_decoder()(input_ids=labels[0], encoder_hidden_states=states),
             "decoder_input_ids` / `labels", r"\(4,\)"),
            (lambda: model.get_decoder()(input_ids=labels[:, :0], encoder_hidden_states=states),
             "decoder_input_ids` / `labels", r"\(2, 0\)"),
            (lambda: model.generate(ids[0], max_new_tokens=2), "input_ids", r"\(12,\)"),
            (lambda: model.generate(ids, decoder_input_ids=labels[0], max_new_tokens=2), "decoder_input_ids",
             r"\(4,\)")]:
        with pytest.raises(ValueError, match=rf"`{name}` {shape} {got}"):
            call()
    assert model(input_ids=ids, labels=labels).loss.isfinite()
    assert model(input_ids=ids).logits.shape[:2] == (2, 12)  # the ids shifted into the decoder's, as BART
    assert model(input_ids=ids, decoder_inputs_embeds=embeds).logits.shape[:2] == (2, 3)
    assert model(input_ids=ids, decoder_input_ids=labels[:, :1]).logits.shape[:2] == (2, 1)
    assert model.generate(ids, decoder_input_ids=labels[:, :1], max_new_tokens=2, num_beams=2).shape[0] == 2


@pytest.mark.parametrize("encoder_attention_type", ["neighborhood", "full", "convolutional"])
def test_token_ids_outside_the_vocabulary_are_named_with_the_vocabulary_size(encoder_attention_type):
    """As ReadOnce BART does: an id outside `[0, vocab_size)` is named with the vocabulary size (was a bare
    `IndexError: index out of range in self` from the embedding lookup), in `forward`, the encoder and `generate`."""
    model = longdoc(encoder_attention_type=encoder_attention_type)
    ids = tokens(2, 12)
    ids[1, 4] = 99 + 7
    with pytest.raises(ValueError, match=r"`input_ids` holds token id 106, outside the vocabulary \[0, 99\)"):
        model.generate(input_ids=ids, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"`input_ids` holds token id -3, outside the vocabulary \[0, 99\)"):
        model.get_encoder()(input_ids=torch.tensor([[5, -3, 7]]))
    with pytest.raises(ValueError, match=r"`decoder_input_ids` / `labels` holds token id 120, outside the vocabulary "
                                         r"\[0, 99\)"):
        model(input_ids=tokens(1, 12), decoder_input_ids=torch.tensor([[2, 120]]))
    model(input_ids=tokens(1, 12), decoder_input_ids=torch.tensor([[2, 98]]))  # the last id is in the vocabulary


def test_a_misspelled_keyword_argument_is_a_type_error_naming_it():
    """BART's `forward` takes `**kwargs`: `encoder_output=` (for `encoder_outputs=`) re-read the input, or decoded
    from nothing, instead of the stored encoder outputs."""
    model = longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3)
    ids, mask = padded_batch(20)
    labels = tokens(2, 5, seed=5)
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    for call, message in [
            (lambda: model(attention_mask=mask, encoder_output=encoder_outputs, labels=labels),
             "LongDocBartForConditionalGeneration.forward() got an unexpected keyword argument 'encoder_output'. "
             "Did you mean 'encoder_outputs'?"),
            (lambda: model.model(ids, attention_masks=mask, decoder_input_ids=labels),
             "LongDocBartModel.forward() got an unexpected keyword argument 'attention_masks'. "
             "Did you mean 'attention_mask'?")]:
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == message
    # what transformers passes (`TransformersKwargs`, `return_dict`), BART's own arguments, the `token_type_ids` of a
    # BERT tokenizer (`model(**tokenizer(text))`, as the model cards write it) and a `None`
    expected = model(ids, attention_mask=mask, labels=labels)
    out = model(attention_mask=mask, encoder_outputs=encoder_outputs, labels=labels, return_dict=True,
                output_attentions=False, num_items_in_batch=torch.tensor(10), encoder_output=None)
    torch.testing.assert_close(out.logits, expected.logits)
    out = model(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=labels)
    torch.testing.assert_close(out.logits, expected.logits)
    with pytest.raises(ValueError, match="encoder_output"):  # generate(): transformers' own check names it
        model.generate(attention_mask=mask, encoder_output=encoder_outputs, max_new_tokens=2)


def test_the_decoder_refuses_a_misspelled_keyword_argument():
    """The decoder (`get_decoder()`, what a user runs over stored encoder states) took any name into BART's
    `**kwargs`: `encoder_attention_masks=` attended to the padding of the documents."""
    model = longdoc(encoder_attention_type="neighborhood", decoder_attention_type="neighborhood",
                    neighborhood_radius=3)
    ids, mask = padded_batch(20)
    states = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    decoder, labels = model.get_decoder(), tokens(2, 5, seed=5)
    with pytest.raises(TypeError) as error:
        decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_masks=mask)
    assert str(error.value) == ("LongDocBartDecoder.forward() got an unexpected keyword argument "
                                "'encoder_attention_masks'. Did you mean 'encoder_attention_mask'?")
    expected = decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_mask=mask).last_hidden_state
    # what transformers passes down through the model (`return_dict`, output switches, `TransformersKwargs` such as
    # `num_items_in_batch`), and a `None`
    out = decoder(input_ids=labels, encoder_hidden_states=states, encoder_attention_mask=mask, return_dict=True,
                  output_attentions=False, num_items_in_batch=torch.tensor(10), encoder_attention_masks=None)
    torch.testing.assert_close(out.last_hidden_state, expected)
    # the model hands its decoder what it takes: the loss (as Trainer computes it) and generate() run unchanged
    model.train()
    model(ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(10)).loss.backward()
    model.eval()
    for num_beams in (1, 2):
        assert model.generate(ids, attention_mask=mask, max_new_tokens=3, num_beams=num_beams).shape[0] == 2


def test_the_encoder_refuses_a_misspelled_keyword_argument():
    """The encoder (`get_encoder()`, what a user runs to encode documents once for the store) took any name into
    BART's `**kwargs`: `atention_mask=` read the padding as text."""
    model = longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3)
    ids, mask = padded_batch(20)
    encoder = model.get_encoder()
    with pytest.raises(TypeError) as error:
        encoder(input_ids=ids, atention_mask=mask)
    assert str(error.value) == ("LongDocBartEncoder.forward() got an unexpected keyword argument 'atention_mask'. "
                                "Did you mean 'attention_mask'?")
    expected = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    # what `generate()` hands to its encoder: `return_dict`, output switches, and every argument of the model's
    # `forward` it was given, e.g. the `labels` of `Seq2SeqTrainer(predict_with_generate=True)`
    out = encoder(input_ids=ids, attention_mask=mask, return_dict=True, output_attentions=False,
                  output_hidden_states=False, labels=tokens(2, 5, seed=5), atention_mask=None)
    torch.testing.assert_close(out.last_hidden_state, expected)
    greedy = dict(max_new_tokens=3, do_sample=False)
    torch.testing.assert_close(model.generate(ids, attention_mask=mask, labels=tokens(2, 5, seed=5), **greedy),
                               model.generate(ids, attention_mask=mask, **greedy))


def test_generate_takes_what_a_bert_tokenizer_returns():
    """`model.generate(**tokenizer(text, return_tensors="pt"))` with the BERT tokenizer the LongDoc recipe saves
    stopped in transformers ("The following `model_kwargs` are not used by the model: ['token_type_ids']") though
    `model(**tokenizer(text))` runs: generate drops the token types too, as `forward` ignores them."""
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = longdoc(vocab_size=tokenizer.vocab_size, encoder_attention_type="neighborhood", neighborhood_radius=3)
    encoded = tokenizer(["Emma is a novel by Jane Austen.", "Persuasion was published in 1817."], padding=True,
                        return_tensors="pt")
    assert "token_type_ids" in encoded
    greedy = dict(max_new_tokens=3, do_sample=False)
    torch.testing.assert_close(model.generate(**encoded, **greedy),
                               model.generate(input_ids=encoded.input_ids, attention_mask=encoded.attention_mask,
                                              **greedy))


# ----------------------------------------------------------------------------------------------- keywords not read
# keywords `TransformersKwargs` (or transformers' plumbing) lets through that BART's forward takes and that no layer of
# LongDoc reads (or only some do): each changed nothing, or the attention of some layers only
UNREAD = {"position_ids": torch.arange(2, 22)[None], "is_causal": True, "logits_to_keep": 1,
          "cu_seq_lens_q": torch.tensor([0, 10, 20], dtype=torch.int32),
          "cu_seq_lens_k": torch.tensor([0, 10, 20], dtype=torch.int32), "max_length_q": 10, "max_length_k": 10,
          "seq_idx": torch.zeros(1, 20, dtype=torch.int32), "output_router_logits": True}


@pytest.mark.parametrize("name", sorted(UNREAD))
def test_a_keyword_it_does_not_read_is_refused_naming_it(name):
    """`position_ids` went on to BART's layers, which do not read them (the same logits for other positions); flash
    attention's packing arguments, `logits_to_keep` and `output_router_logits` changed nothing; `is_causal` reached
    BART's encoder and decoder functions but not the neighborhood kernel. Each is refused, by the model and the bare
    model."""
    model = longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3)
    ids, mask = padded_batch(20)
    labels, value = tokens(2, 5, seed=5), {name: UNREAD[name]}
    for call, where in [(lambda: model(ids, attention_mask=mask, labels=labels, **value),
                         "LongDocBartForConditionalGeneration"),
                        (lambda: model.model(ids, attention_mask=mask, decoder_input_ids=labels, **value),
                         "LongDocBartModel")]:
        with refuses_unread_keyword(name, rf"^{where}\.forward\(\) got `{name}`, which it does not support"):
            call()
    if name == "is_causal":  # the decoder of a causal LM made bidirectional: refused too
        with pytest.raises(ValueError, match="got `is_causal`"):
            model(ids, attention_mask=mask, labels=labels, is_causal=False)


def test_token_types_of_a_second_text_are_refused_and_zeros_pass():
    """A BERT tokenizer's text pair gave `token_type_ids` that BART does not read: the pair was summarized as one
    text, without a word. One text's zeros pass, as before (`model(**tokenizer(text))`)."""
    model = longdoc()
    ids, mask = padded_batch(20)
    labels = tokens(2, 5, seed=5)
    pair = torch.zeros_like(ids)
    pair[:, 10:] = 1
    for call in (lambda: model(ids, attention_mask=mask, labels=labels, token_type_ids=pair),
                 lambda: model.model(ids, attention_mask=mask, decoder_input_ids=labels, token_type_ids=pair)):
        with pytest.raises(ValueError, match="`token_type_ids` marking a second segment, which it does not support"):
            call()
    expected = model(ids, attention_mask=mask, labels=labels)
    out = model(ids, attention_mask=mask, labels=labels, token_type_ids=torch.zeros_like(ids), logits_to_keep=0,
                output_router_logits=False)
    torch.testing.assert_close(out.logits, expected.logits)
    torch.testing.assert_close(out.loss, expected.loss)


def test_the_bare_model_refuses_num_items_in_batch():
    """The bare model computes no loss: `num_items_in_batch` changed nothing."""
    model = longdoc()
    ids, mask = padded_batch(20)
    with pytest.raises(ValueError, match=r"LongDocBartModel\.forward\(\) got `num_items_in_batch`"):
        model.model(ids, attention_mask=mask, decoder_input_ids=tokens(2, 5, seed=5), num_items_in_batch=10)


def test_num_items_in_batch_divides_the_summed_loss_and_gradient_accumulation_is_the_whole_batch_s(tmp_path):
    """`Trainer` passes `num_items_in_batch` (the targets of all the batches it accumulates) to a model whose forward
    takes `**kwargs`, and leaves the accumulated losses unscaled; BART's loss, a mean over each batch's targets, does
    not read it (as `BartForConditionalGeneration`'s, which trains so too): two half batches trained with about twice
    the whole batch's gradients. The loss is now the targets' summed cross-entropy divided by it; the signature
    `generate()` and `Trainer` read is still BART's."""
    import inspect

    from tests.models.loss_checks import assert_accumulation_equals_one_batch

    model = longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3)
    assert inspect.signature(model.forward).parameters.keys() == inspect.signature(
        BartForConditionalGeneration.forward).parameters.keys() - {"self"}
    ids, mask = padded_batch(20)
    labels = tokens(2, 5, seed=5)
    labels[0, 2:] = -100  # 5 + 2 targets
    mean = model(ids, attention_mask=mask, labels=labels).loss
    summed = model(ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(10))
    torch.testing.assert_close(summed.loss, mean * 7 / 10)
    as_tuple = model(ids, attention_mask=mask, labels=labels, num_items_in_batch=7, return_dict=False)
    torch.testing.assert_close(as_tuple[0], mean)
    torch.testing.assert_close(as_tuple[1], summed.logits)
    # positional labels (BART's order) are found too
    positional = model(ids, mask, None, None, None, None, None, None, labels, num_items_in_batch=14)
    torch.testing.assert_close(positional.loss, mean / 2)

    ids, targets = tokens(4, 20), tokens(4, 5, seed=5)
    targets[0, 1:] = -100  # uneven counts: 1 + 5 targets in one half batch, 10 in the other
    rows = [{"input_ids": ids[i], "labels": targets[i]} for i in range(4)]

    def build():
        return longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3).train()

    assert assert_accumulation_equals_one_batch(build, rows, tmp_path) is True
