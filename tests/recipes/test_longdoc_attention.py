"""Effective attention of LongDoc BART's encoder layers (for heatmaps): the weights are the ones the layer applies,
checked by mixing the layer's own values with them and comparing with the layer's output."""

import pytest
import torch

from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration
from hf_readonce.recipes.longdoc_attention import effective_attention, save_attention_heatmap


def tiny(encoder_attention_type, attn_implementation="sdpa", **overrides):
    torch.manual_seed(0)
    config = LongDocBartConfig(**{**dict(
        vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
        encoder_attention_type=encoder_attention_type, neighborhood_radius=3, init_std=0.2, dropout=0.0,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2), **overrides})
    config._attn_implementation = attn_implementation
    return LongDocBartForConditionalGeneration(config).eval()


IDS = torch.randint(3, 99, (1, 20), generator=torch.Generator().manual_seed(1))


def layer_output_from_weights(model, weights, layer):
    """out_proj(W @ v) with the layer's own values: what the layer computes if W are its weights."""
    encoder = model.get_encoder()
    with torch.no_grad():
        hidden = encoder(input_ids=IDS, output_hidden_states=True).hidden_states[layer]
        attn = encoder.layers[layer].self_attn
        values = attn.v_proj(hidden).view(1, 20, -1, attn.head_dim).transpose(1, 2)[0]  # (heads, n, head_dim)
        mixed = (weights @ values).transpose(0, 1).reshape(1, 20, -1)
        mask = torch.ones(1, 1, 1, 20, dtype=torch.bool)
        return attn.out_proj(mixed), attn(hidden, attention_mask=mask)[0]


def test_full_attention_weights_are_the_eager_layers_own():
    model = tiny("full", attn_implementation="eager")
    with torch.no_grad():
        eager = model.get_encoder()(input_ids=IDS, output_attentions=True).attentions
    for layer in (0, 1):
        torch.testing.assert_close(effective_attention(model, IDS, layer=layer), eager[layer][0], atol=1e-6, rtol=0)


def test_neighborhood_weights_are_the_eager_layers_own():
    model = tiny("neighborhood", attn_implementation="eager")
    with torch.no_grad():
        eager = model.get_encoder()(input_ids=IDS, output_attentions=True).attentions
    for layer in (0, 1):
        torch.testing.assert_close(effective_attention(model, IDS, layer=layer), eager[layer][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("encoder_attention_type, kernel, stride", [
    ("neighborhood", 3, 3), ("convolutional", 3, 3), ("convolutional", 3, 2), ("convolutional_per_head", 3, 3),
    ("neighborhood_convolutional", 3, 3)])
def test_weights_reproduce_the_layers_output(encoder_attention_type, kernel, stride):
    # convolutional types: exact while the (de)convolutions are their initial window mean / spread (the default)
    model = tiny(encoder_attention_type, conv_kernel_size=kernel, conv_stride=stride)
    weights = effective_attention(model, IDS[0], layer=1)
    assert weights.shape == (2, 20, 20)
    from_weights, layer = layer_output_from_weights(model, weights, 1)
    torch.testing.assert_close(from_weights, layer, atol=1e-5, rtol=0)
    if encoder_attention_type == "neighborhood":
        position = torch.arange(20)
        outside = (position[:, None] - position[None, :]).abs() > 3
        assert torch.all(weights[:, outside] == 0) and torch.all(weights[:, ~outside] > 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 20), atol=1e-6, rtol=0)


def test_padding_gets_no_weight_and_bad_arguments_raise(tmp_path):
    model = tiny("neighborhood")
    mask = torch.ones(1, 20, dtype=torch.long)
    mask[0, 15:] = 0
    weights = effective_attention(model, IDS, attention_mask=mask)
    assert torch.all(weights[:, :, 15:] == 0)
    with pytest.raises(ValueError, match="layer"):
        effective_attention(model, IDS, layer=2)
    with pytest.raises(ValueError, match="input_ids"):
        effective_attention(model, IDS.repeat(2, 1))
    save_attention_heatmap(weights, tmp_path / "map.png", title="neighborhood r=3")
    assert (tmp_path / "map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="head"):
        save_attention_heatmap(weights, tmp_path / "x.png", head=2)
    with pytest.raises(ValueError, match="weights"):
        save_attention_heatmap(weights[0], tmp_path / "x.png")
