"""Effective attention of LongDoc BART's encoder layers for one short document, and a heatmap PNG of it (the
report's future work, §4: "look at attention heatmaps").

With `attn_implementation="eager"`, `output_attentions=True` returns each layer's weights as the layer holds them:
token to token for `"full"` and `"neighborhood"` (0 outside the band), over the compressed positions for the
convolutional types. [`effective_attention`] puts every type on the token grid, recomputing the weights densely from
the layer's own projections under any attention implementation: fine for a document of a few hundred tokens, O(n^2)
memory, never used by the model itself.
"""

from __future__ import annotations

import math

import torch

from ..models.longdoc_bart.modeling_longdoc_bart import LongDocBartForConditionalGeneration


def _windows(length: int, compressed: int, kernel: int, stride: int, device) -> torch.Tensor:
    """`(compressed, length)` 0/1 matrix: compressed position p covers tokens `[p*stride, p*stride + kernel)`."""
    tokens = torch.arange(length, device=device)
    starts = torch.arange(compressed, device=device)[:, None] * stride
    return ((tokens >= starts) & (tokens < starts + kernel)).float()


@torch.no_grad()
def effective_attention(model: LongDocBartForConditionalGeneration, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor | None = None, layer: int = 0) -> torch.Tensor:
    r"""Token-to-token attention weights of encoder layer `layer` for one document, whatever its attention type.

    - `"full"`, `"neighborhood"`: the softmax of the layer's scaled query-key scores, with BART's padding mask and,
      for neighborhood, the band `|i - j| <= r` (exactly the weights the layer applies; zero outside the band).
    - Convolutional types: the attention A `(m, m)` over the compressed positions (band `ceil(r / s)` for
      `"neighborhood_convolutional"`), put on the token grid through the windows: with C `(m, n)` the 0/1 matrix of
      which tokens each compressed position covers, `W = (s / k) C^T A C / k`. This is exactly how values are mixed
      while the (de)convolutions are their initial window mean and spread ([`LongDocConvolution`]); after training
      they mix channels too and W shows which windows attend to which. Rows sum to about 1.

    Args:
        model ([`LongDocBartForConditionalGeneration`]): any encoder attention type; evaluated without dropout.
        input_ids (`torch.LongTensor` of shape `(1, n)` or `(n,)`): one document.
        attention_mask (`torch.Tensor` of shape `(1, n)`, *optional*): 1 for real tokens.
        layer (`int`, defaults to 0): encoder layer index.

    Returns:
        `torch.FloatTensor` of shape `(heads, n, n)`: row i = query token i's weights over the n tokens.

    Raises:
        ValueError: more than one document, or `layer` out of range (naming it).
    """
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"`input_ids` must hold one document, got shape {tuple(input_ids.shape)}.")
    encoder = model.get_encoder()
    if not 0 <= layer < len(encoder.layers):
        raise ValueError(f"`layer` must be in [0, {len(encoder.layers)}), got {layer}.")
    was_training = encoder.training
    encoder.eval()
    try:
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask,
                         output_hidden_states=True).hidden_states[layer]
    finally:
        encoder.train(was_training)
    attn = encoder.layers[layer].self_attn
    n = input_ids.shape[1]
    valid = (torch.ones(1, n, dtype=torch.bool, device=input_ids.device) if attention_mask is None
             else attention_mask.bool())
    query, key = attn.q_proj(hidden), attn.k_proj(hidden)
    if attn.conv is not None:
        query, key = attn.conv.compress(torch.cat([query, key]), valid.repeat(2, 1)).chunk(2)
    length = query.shape[1]
    heads = query.view(1, length, -1, attn.head_dim).transpose(1, 2)[0]
    keys = key.view(1, length, -1, attn.head_dim).transpose(1, 2)[0]
    scores = heads @ keys.transpose(-1, -2) * attn.scaling  # (heads, length, length)
    if attn.conv is not None:
        stride, kernel = attn.conv.stride, attn.conv.kernel_size
        key_valid = (valid.float() @ _windows(n, length, kernel, stride, valid.device).T)[0] > 0
    else:
        key_valid = valid[0]
    allowed = key_valid[None, :].expand(length, length).clone()
    if attn.attention_type in ("neighborhood", "neighborhood_convolutional"):
        position = torch.arange(length, device=scores.device)
        allowed &= (position[:, None] - position[None, :]).abs() <= attn.radius
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
    if attn.conv is None:
        return weights
    windows = _windows(n, length, kernel, stride, weights.device)
    return (stride / kernel) * windows.T @ weights @ windows / kernel


def save_attention_heatmap(weights: torch.Tensor, path, title: str = "", head: int | None = None) -> None:
    r"""Write a heatmap PNG of [`effective_attention`]'s weights (matplotlib, Agg backend).

    Args:
        weights (`torch.Tensor` of shape `(heads, n, n)`): as returned by [`effective_attention`].
        path (`str` or `Path`): the PNG to write.
        title (`str`, *optional*): the figure's title (e.g. the attention type).
        head (`int`, *optional*): one head; default: the mean over heads.

    Raises:
        ValueError: `weights` not 3-D square, or `head` out of range.
    """
    if weights.dim() != 3 or weights.shape[1] != weights.shape[2]:
        raise ValueError(f"`weights` must be (heads, n, n), got {tuple(weights.shape)}.")
    if head is not None and not 0 <= head < weights.shape[0]:
        raise ValueError(f"`head` must be in [0, {weights.shape[0]}), got {head}.")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = weights.mean(0) if head is None else weights[head]
    size = max(4.0, min(10.0, math.sqrt(shown.shape[0]) / 2))
    figure, axis = plt.subplots(figsize=(size + 1, size))
    image = axis.imshow(shown.float().cpu().numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
    axis.set(xlabel="key token", ylabel="query token",
             title=(title + (f" (head {head})" if head is not None else " (mean over heads)")).strip())
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


__all__ = ["effective_attention", "save_attention_heatmap"]
