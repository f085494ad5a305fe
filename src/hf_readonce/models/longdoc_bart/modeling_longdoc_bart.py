# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch LongDoc BART: BART with the neighborhood and convolutional attention of Kosaraju, Ang and Nabulsi,
"Faster Transformers for Document Summarization" (CS224N report, §2.3 "Proposed Models", Fig. 1).

The model is BART written as its differences (as transformers' `modular_*.py` files are): only the encoder's
self-attention (and, optionally, the decoder's self-attention) changes; parameter names are BART's, so any BART
checkpoint loads unchanged, and the only new weights are the (de)convolutions of the convolutional types.

- **Neighborhood attention** (§2.3): token i attends to the tokens j with `|i - j| <= r` (decoder: `t - r <= j <= t`).
  Its cost is O(n·r) in time and memory; no n x n score matrix or mask is ever built. The kernel follows
  `config._attn_implementation`: `"flex_attention"` runs PyTorch's FlexAttention with a sparse `BlockMask` (made by
  transformers' `masking_utils` with the band as `and_mask_function`); `"sdpa"` and `"eager"` run
  [`neighborhood_attention_forward`], a blocked implementation (query blocks of b tokens against their b + 2r keys,
  through `torch.nn.functional.scaled_dot_product_attention` or an explicit softmax).
- **Convolutional attention** (§2.3, Fig. 1): a Conv1d shortens the projected queries, keys and values, full
  attention runs over the compressed positions, and a ConvTranspose1d restores the length (see
  [`LongDocBartAttention`]).

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers and the
file next to it.
"""

import copy
import difflib
import functools
import hashlib
import inspect
import json
import math
import sys
from collections.abc import Callable
from dataclasses import fields

import torch
import transformers
from torch import nn
from transformers import initialization as init
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    sliding_window_bidirectional_overlay,
    sliding_window_overlay,
)
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bart.modeling_bart import (
    BartAttention,
    BartDecoder,
    BartDecoderLayer,
    BartEncoder,
    BartEncoderLayer,
    BartForConditionalGeneration,
    BartModel,
    BartPreTrainedModel,
    eager_attention_forward,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, logging

from .configuration_longdoc_bart import LongDocBartConfig

logger = logging.get_logger(__name__)

try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import BlockMask
except ImportError:  # pragma: no cover - older torch: no FlexAttention, the blocked kernel is used
    BlockMask = ()

# Copied from hf_readonce.models.block_attention_llama.modeling_block_attention_llama.CACHE_NAME with CausalLMOutputWithPast->Seq2SeqLMOutput
# transformers 5.24 renamed `past_key_values` to `cache`: the field of every ModelOutput and the argument of `forward`,
# `generate`, the decoder layers, the attention modules and the mask functions (the old name stays accepted there,
# deprecated). Earlier 5.x releases know only `past_key_values`. This file accepts both names and passes on the one of
# the installed transformers.
CACHE_NAME = "cache" if "cache" in {f.name for f in fields(Seq2SeqLMOutput)} else "past_key_values"


# Copied from hf_readonce.models.block_attention_llama.modeling_block_attention_llama._either_cache
def _either_cache(past_key_values, cache):
    """The KV cache given as `past_key_values` or as `cache` (transformers >= 5.24's name); both: `ValueError`."""
    if past_key_values is not None and cache is not None and past_key_values is not cache:
        raise ValueError("Pass the cache as `cache` or as `past_key_values`, not both.")
    return past_key_values if past_key_values is not None else cache


CONVOLUTIONAL_TYPES = ("convolutional", "convolutional_per_head", "neighborhood_convolutional")

# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._FINGERPRINT_IGNORED_FIELDS
# The fingerprint policy of every family (one source: the other modeling files hold checked copies of these two
# definitions). Config fields that never change a representation, in any family: metadata, output switches, token ids
# (an embedding's padding index changes only gradients), the dtype (the weights are hashed as they are), initializer
# settings (the weights are hashed), task heads and labels, generation settings, and the question length a QA
# checkpoint records it was trained with (`max_question_length`, one name in every family: no stored representation
# holds a question, and a call reads questions at the length it is given). A family adds the fields its own
# representation never reads through its config class only (`fingerprint_ignored_fields` and
# `fingerprint_ignored_prefixes`, e.g. training losses or the decoder's fields). Every other field of
# `config.to_dict()` is part of the representation fingerprint, with the transformers major version.
_FINGERPRINT_IGNORED_FIELDS = frozenset({
    "transformers_version", "architectures", "_name_or_path", "auto_map", "id2label", "label2id", "num_labels",
    "problem_type", "finetuning_task", "task_specific_params", "dtype", "torch_dtype", "use_cache",
    "output_hidden_states", "output_attentions", "return_dict", "torchscript", "tokenizer_class", "prefix",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id",
    "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id", "initializer_range", "init_std",
    "initializer_factor", "tie_word_embeddings", "classifier_dropout", "max_length", "min_length", "num_beams",
    "no_repeat_ngram_size", "early_stopping", "length_penalty", "custom_pipelines", "max_question_length",
})


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._config_fingerprint
def _config_fingerprint(config, config_class) -> str:
    """Canonical JSON of the config fields that can change the representation and the transformers major version:
    hashed into the representation fingerprint, so any change to them (activation, layer-norm epsilon, attention
    heads, ...) is another key. The fields are `config.to_dict()` minus `_FINGERPRINT_IGNORED_FIELDS` and minus what
    the family's `config_class` declares in `fingerprint_ignored_fields` / `fingerprint_ignored_prefixes` (its own
    config class even when `config` is another one, e.g. a plain Llama config)."""
    ignored = _FINGERPRINT_IGNORED_FIELDS | frozenset(getattr(config_class, "fingerprint_ignored_fields", ()))
    prefixes = tuple(getattr(config_class, "fingerprint_ignored_prefixes", ()))
    fields = {key: value for key, value in config.to_dict().items()
              if key not in ignored and not (prefixes and key.startswith(prefixes))}
    return json.dumps({"transformers": transformers.__version__.split(".")[0], "config": fields}, sort_keys=True,
                      default=str)


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._peft_adapter_state
def _peft_adapter_state(owner, params) -> tuple:
    """What the peft layers among `owner`'s modules contribute to a representation beyond their weights, for those
    holding one of `params` (the `(name, parameter)` pairs a representation fingerprint hashes): for each (a tuner
    layer such as LoRA's, which wraps its `base_layer`, or a `modules_to_save` copy of its `original_module`), its path
    in `owner`, its active adapters, whether adapters are disabled, the merged ones and its scaling (LoRA's
    `alpha / r` per adapter, which `set_scale` changes). Every adapter's weights stay in the model whichever is
    active, so the weights alone cannot tell the representations of adapter `a` from those of adapter `b`
    (`set_adapter`) or of the model without adapters (`with peft_model.disable_adapter():`). Read through attributes
    (no peft import); `()` when no name of `params` runs through a peft layer (a model without adapters), at the cost
    of one scan of the names."""
    markers = (".base_layer.", ".original_module.", ".modules_to_save.")
    if not any(marker in name for name, _ in params for marker in markers):
        return ()
    hashed = {id(p) for _, p in params}
    state = []
    for path, layer in owner.named_modules():
        if ("base_layer" in layer._modules or "original_module" in layer._modules) and any(
                id(p) in hashed for p in layer.parameters()):
            scaling = getattr(layer, "scaling", None)
            state.append((path, tuple(getattr(layer, "active_adapters", ())),
                          bool(getattr(layer, "disable_adapters", False)), tuple(getattr(layer, "merged_adapters", ())),
                          tuple(sorted(scaling.items())) if isinstance(scaling, dict) else None))
    return tuple(state)


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._weights_fingerprint
def _weights_fingerprint(owner, tag: str, config_json: str, params, hash_dtypes: bool) -> str:
    """SHA-256 (64 hex characters) of `tag`, `config_json` (from [`_config_fingerprint`]) and each of `params` (the
    `(name, parameter)` pairs a representation depends on): its name, its dtype when `hash_dtypes`, and its values as
    float32; under peft, also the adapters' state ([`_peft_adapter_state`]: active, disabled, merged, scaling), so
    that switching or disabling an adapter is another fingerprint (a model without peft layers hashes as before).
    Cached on `owner._fingerprint_cache` and recomputed only when the config or the adapters' state changes or a
    parameter is replaced or modified in place (torch's version counters), so calling it per batch is cheap."""
    adapters = _peft_adapter_state(owner, params)
    state = (config_json, adapters, *((name, p.data_ptr(), p._version, p.dtype) for name, p in params))
    if owner._fingerprint_cache is not None and owner._fingerprint_cache[0] == state:
        return owner._fingerprint_cache[1]
    digest = hashlib.sha256(tag.encode() + config_json.encode())
    if adapters:
        digest.update(repr(adapters).encode())
    for name, p in params:
        digest.update(name.encode())
        if hash_dtypes:
            digest.update(str(p.dtype).encode())
        digest.update(p.detach().to("cpu", torch.float32).contiguous().numpy().data)  # no copy for fp32
    owner._fingerprint_cache = (state, digest.hexdigest())
    return owner._fingerprint_cache[1]


def _compute_dtype_tag(params) -> str:
    """The part of a representation fingerprint's tag that keys the compute dtype, for the families whose fingerprint
    hashed no dtype at first (LongDoc BART, ReadOnce BART): `""` when every one of `params` (`(name, parameter)`
    pairs) is float32, so that float32 compute keeps the fingerprint it always had (stores written before still
    read), else `"dtypes=<name>:<dtype>,...|"` naming each parameter that is not float32, so that the same weights
    computing in float16 or bfloat16 have a fingerprint of their own (their outputs differ by the rounding of the
    compute dtype, `hf_readonce.dtypes`)."""
    other = [f"{name}:{str(p.dtype).removeprefix('torch.')}" for name, p in params if p.dtype != torch.float32]
    return f"dtypes={','.join(other)}|" if other else ""


def default_neighborhood_block_size(radius: int) -> int:
    r"""Query block size b of [`neighborhood_attention_forward`] for radius r: 32 for r >= 32, else 16.

    Each block of b queries reads b + 2r keys, so each query scores b + 2r keys where it needs at most 2r + 1: a
    smaller b wastes fewer keys but runs more, smaller matrix products. Tuned on 2 CPU threads (PyTorch 2.13, SDPA's
    flash kernel, 12 heads of 64, one sequence, medians of 5 interleaved rounds of the kernel alone): at r = 100,
    b = 32 took 33 ms at 4,096 tokens against 40 ms for the former default b = r, and at 16,384 tokens b = 24-32
    took 171-178 ms against 220 ms; b = 16-32 was the fastest at r = 25, 50, 100 and 200, larger blocks slower.
    At r = 100 and 4,096 tokens the kernel computes 232 keys per query for the band's 201 (1.80x full attention's
    encoder-layer FLOPs, against 1.81x for an exact band); `benchmarks/bench_longdoc.py` prints this kernel bound
    beside the band's.

    Args:
        radius (`int`): r >= 0.

    Returns:
        `int`: 16 or 32.
    """
    return 32 if radius >= 32 else 16


def neighborhood_attention_forward(
    module: nn.Module | None,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    radius: int = 100,
    causal: bool = False,
    block_size: int | None = None,
    use_sdpa: bool = True,
    output_attentions: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""
    Blocked neighborhood attention (paper §2.3, "Neighborhood Attention": each token attends to the 2r + 1 tokens
    around it), in O(n·(b + 2r)) time and memory, with the signature of transformers' attention functions
    (`ALL_ATTENTION_FUNCTIONS`).

    The queries are the *last* q of the kv positions (`q_offset = kv - q`: the whole sequence in the encoder, the new
    tokens after the KV cache in the decoder). Query at absolute position p attends to keys j with
    `p - radius <= j <= p + radius` (`<= p` when `causal`) that are not padding. The q queries are cut into
    `ceil(q / b)` blocks of b; block i reads the `b + radius + (0 if causal else radius)` keys its band can reach
    (zero-padded at both ends), gathered with `Tensor.unfold`, and attends to them with a float mask of shape
    `(batch * blocks, 1, b, b + 2r)` (band and padding); the blocks go to the batch dimension so that SDPA runs its
    fused 4-D kernel, which never holds the scores (a 5-D call takes the math path). Keys no query can reach (more
    than r before the first query, e.g. the old KV cache of a decoder) are dropped first, so a decoding step costs
    O(r), not O(t).

    Why not registered in `AttentionInterface`: a registered function is selected by `config._attn_implementation`
    for *every* attention of the model (cross-attention, full layers) and needs a matching mask function in
    `AttentionMaskInterface`; the band is a property of a layer, not of the kernel. So the layer keeps selecting the
    kernel the transformers way (`"flex_attention"` -> FlexAttention with a `BlockMask`; `"sdpa"` -> this function
    with SDPA per block; `"eager"` -> this function with an explicit softmax) and calls this function itself.

    Args:
        module (`nn.Module` or `None`): the calling attention module (unused; for the interface's signature).
        query (`torch.Tensor` of shape `(batch, heads, q, head_dim)`).
        key, value (`torch.Tensor` of shape `(batch, heads, kv, head_dim)`), `kv >= q`.
        attention_mask (`torch.Tensor` of shape `(batch, kv)`, *optional*): padding mask, nonzero/True for real
            tokens. `None`: no padding.
        scaling (`float`, *optional*): score scale; defaults to `head_dim ** -0.5`.
        dropout (`float`, defaults to 0.0): attention dropout probability (applied only when > 0).
        radius (`int`, defaults to 100): r >= 0. Any r >= kv is the same as r = kv (full attention).
        causal (`bool`, defaults to `False`): attend only to keys at or before the query (decoder, `t - r .. t`).
        block_size (`int`, *optional*): b; defaults to [`default_neighborhood_block_size`]`(radius)`, capped at q.
        use_sdpa (`bool`, defaults to `True`): SDPA per block; `False` computes `softmax(QK^T * scale + mask) V`
            explicitly (the `"eager"` implementation).
        output_attentions (`bool`, defaults to `False`): with `use_sdpa=False`, also return the weights the blocks
            applied, put on the `(q, kv)` grid (built only when asked: O(q·kv) memory). Ignored with SDPA, which
            computes no weights.

    Returns:
        `(attn_output, attn_weights)`: `attn_output` of shape `(batch, q, heads, head_dim)` (transformers'
        convention); `attn_weights` `(batch, heads, q, kv)` (after dropout, as transformers' eager attention returns
        them), 0 outside each query's band and on padding keys, when `output_attentions` and not `use_sdpa`, else
        `None` (no q x kv matrix is built).

    Raises:
        ValueError: if `kv < q`, `radius < 0`, `block_size < 1`, or `attention_mask` is not `(batch, kv)`.
    """
    batch, heads, q_len, head_dim = query.shape
    kv_len = key.shape[2]
    if kv_len < q_len:
        raise ValueError(f"neighborhood attention needs at least as many keys as queries, got {kv_len} < {q_len}.")
    if radius < 0:
        raise ValueError(f"`radius` must be >= 0, got {radius}.")
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, kv_len):
        raise ValueError(f"`attention_mask` must be a (batch, kv) = ({batch}, {kv_len}) padding mask, got "
                         f"{tuple(attention_mask.shape)}.")
    scaling = head_dim**-0.5 if scaling is None else scaling
    radius = min(radius, kv_len)  # a larger radius reaches no further key
    q_offset = kv_len - q_len
    start = max(0, q_offset - radius)  # keys before `start` are out of every query's band
    if start:
        key, value = key[:, :, start:], value[:, :, start:]
        attention_mask = None if attention_mask is None else attention_mask[:, start:]
        q_offset, kv_len = q_offset - start, kv_len - start
    right_reach = 0 if causal else radius
    block = default_neighborhood_block_size(radius) if block_size is None else block_size
    if block < 1:
        raise ValueError(f"`block_size` must be >= 1, got {block}.")
    block = min(block, q_len)
    num_blocks = math.ceil(q_len / block)
    window = block + radius + right_reach
    # keys padded so that padded index = absolute position + radius; block i reads [q_offset + i*b, + window)
    pad_right = q_offset + num_blocks * block + right_reach - kv_len

    # Blocks go to the batch dimension, (batch * blocks, heads, ., head_dim), so that SDPA gets the 4-D inputs its
    # fused CPU/GPU kernels take (a 5-D call falls back to the math path, which materializes every score).
    def blocks_of(states):  # (batch, heads, kv, d) -> (batch * blocks, heads, window, d)
        padded = nn.functional.pad(states, (0, 0, radius, pad_right))[:, :, q_offset:]
        unfolded = padded.unfold(2, window, block)  # (batch, heads, blocks, d, window)
        return unfolded.permute(0, 2, 1, 4, 3).reshape(batch * num_blocks, heads, window, head_dim)

    queries = nn.functional.pad(query, (0, 0, 0, num_blocks * block - q_len))
    queries = queries.view(batch, heads, num_blocks, block, head_dim).transpose(1, 2)
    queries = queries.reshape(batch * num_blocks, heads, block, head_dim)
    keys, values = blocks_of(key), blocks_of(value)

    valid = torch.ones(batch, kv_len, dtype=torch.bool, device=query.device) if attention_mask is None else (
        attention_mask.to(device=query.device, dtype=torch.bool))
    valid = nn.functional.pad(valid, (radius, pad_right), value=False)[:, q_offset:].unfold(1, window, block)
    rows = torch.arange(block, device=query.device)[:, None]
    offsets = torch.arange(window, device=query.device)[None, :] - radius - rows  # key position - query position
    band = (offsets >= -radius) & (offsets <= right_reach)  # (block, window), the same for every block
    allowed = (band[None, None] & valid[:, :, None, :]).reshape(batch * num_blocks, 1, block, window)
    # A float mask (not bool) keeps rows with no allowed key (padding queries) finite instead of NaN.
    bias = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device)
    bias = bias.masked_fill(~allowed, torch.finfo(query.dtype).min)  # (batch * blocks, 1, block, window)

    if use_sdpa:
        output = nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=bias,
                                                            dropout_p=dropout, scale=scaling)
    else:
        weights = torch.matmul(queries, keys.transpose(-1, -2)) * scaling + bias
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
        if dropout > 0:
            weights = nn.functional.dropout(weights, p=dropout, training=True)
        output = torch.matmul(weights, values)
    output = output.view(batch, num_blocks, heads, block, head_dim).transpose(1, 2)
    output = output.reshape(batch, heads, num_blocks * block, head_dim)[:, :, :q_len]
    dense = None
    if output_attentions and not use_sdpa:
        # block i holds rows [i*b, i*b + b) over columns [i*b, i*b + window) of the padded keys sliced at q_offset,
        # where column c is key `c + q_offset - radius` (of the keys after `start`)
        blocked = weights.view(batch, num_blocks, heads, block, window)
        grid = weights.new_zeros(batch, heads, num_blocks * block, (num_blocks - 1) * block + window)
        for i in range(num_blocks):
            grid[:, :, i * block : (i + 1) * block, i * block : i * block + window] = blocked[:, i]
        first = radius - q_offset  # >= 0: keys out of every band were dropped above
        dense = nn.functional.pad(grid[:, :, :q_len, first : first + kv_len], (start, 0))
    return output.transpose(1, 2).contiguous(), dense


def compress_padding_mask(mask: torch.Tensor | None, kernel_size: int, stride: int) -> torch.Tensor | None:
    r"""The padding mask of the compressed sequence of convolutional attention: compressed position c (the window of
    tokens `[c*stride, c*stride + kernel_size)`) is valid if any token of its window is valid.

    Args:
        mask (`torch.Tensor` of shape `(batch, n)`, *optional*): True/nonzero for real tokens.
        kernel_size, stride (`int`): the convolution's, `stride <= kernel_size`.

    Returns:
        `torch.BoolTensor` of shape `(batch, ceil(n / stride))`, or `None` when `mask` is `None`.
    """
    if mask is None:
        return None
    length = mask.shape[-1]
    count = math.ceil(length / stride)
    padded = nn.functional.pad(mask.bool(), ((0, (count - 1) * stride + kernel_size - length)), value=False)
    return padded.unfold(1, kernel_size, stride).any(dim=-1)


class LongDocConvolution(nn.Module):
    r"""
    The convolution and deconvolution of convolutional attention (paper §2.3, "Convolutional Model", Fig. 1).

    `conv`: `nn.Conv1d(d_model, d_model, kernel_size, stride, groups)` shortens a `(batch, n, d_model)` sequence to
    `m = ceil(n / stride)` positions (zero-padded on the right to `(m - 1) * stride + kernel_size` tokens, so that
    every token is in a window). `deconv`: `nn.ConvTranspose1d(d_model, d_model, kernel_size, stride, groups)`
    restores `(m - 1) * stride + kernel_size >= n` positions, cut to n.

    `groups = 1` ("convolutional", one convolution shared by all heads: it mixes all `d_model` channels) or
    `groups = num_heads` ("convolutional_per_head": channel block h, head h's `head_dim` channels, has its own
    convolution). Parameters, d = `d_model`, k = `kernel_size`, H = heads:

        shared:   2 * (k * d * d + d)            (conv and deconv, weights and biases)
        per head: 2 * (k * d * d / H + d)

    Initialization ([`LongDocBartPreTrainedModel._init_weights`]): `conv` is the mean over the window (`I / k` on
    every tap, per channel), `deconv` spreads each compressed position back over its window (`I * stride / k` on
    every tap), biases are zero. With kernel 1 and stride 1 both are the identity, so the layer is exactly BART's
    full attention (tested).

    Args:
        config ([`LongDocBartConfig`]): `d_model`, `conv_kernel_size`, `conv_stride`.
        groups (`int`): 1 or the number of heads.
    """

    def __init__(self, config: LongDocBartConfig, groups: int = 1):
        super().__init__()
        self.kernel_size, self.stride, self.groups = config.conv_kernel_size, config.conv_stride, groups
        self.conv = nn.Conv1d(config.d_model, config.d_model, self.kernel_size, stride=self.stride, groups=groups)
        self.deconv = nn.ConvTranspose1d(config.d_model, config.d_model, self.kernel_size, stride=self.stride,
                                         groups=groups)
        # read by LongDocBartPreTrainedModel._init_weights: the window mean, and the spread back over the window
        self.conv.longdoc_init_scale = 1.0 / self.kernel_size
        self.deconv.longdoc_init_scale = self.stride / self.kernel_size

    def compress(self, states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        r"""`(batch, n, d_model)` -> `(batch, ceil(n / stride), d_model)`, contiguous: `self.conv` applied to the
        sequence. Padding tokens (`mask` False, shape `(batch, n)`) are zeroed first, so they never reach a
        compressed position.

        Computed as a matrix product over the windows, in the `(batch, length, channels)` layout the attention uses:
        `Tensor.unfold` gives the windows (a view; with `kernel_size == stride` their flattening is one too) and one
        `linear` (`groups = 1`) or one batched product over the heads (`groups = heads`) applies `self.conv`'s
        weight, so the output is contiguous and no channels-first transpose is copied. `Conv1d` itself returns
        `(batch, d_model, m)`, whose transpose has a last-dimension stride of m; `scaled_dot_product_attention`
        refuses every fused kernel for the heads' views of such a tensor ("All fused kernels require the last
        dimension of the input to have stride 1") and runs its math path, which materializes the `(batch, heads, m,
        m)` scores. Equal to `self.conv` up to float rounding (tested)."""
        batch, length, channels = states.shape
        kernel, stride, groups = self.kernel_size, self.stride, self.groups
        if mask is not None:
            states = states * mask[..., None].to(states.dtype)
        count = math.ceil(length / stride)
        missing = (count - 1) * stride + kernel - length
        if missing:
            states = nn.functional.pad(states, (0, 0, 0, missing))
        windows = states.unfold(1, kernel, stride).transpose(2, 3)  # (batch, m, kernel, channels), a view
        weight = self.conv.weight  # (channels, channels / groups, kernel)
        if groups == 1:
            weight = weight.permute(0, 2, 1).reshape(channels, kernel * channels)  # tap-major, as the windows
            return nn.functional.linear(windows.reshape(batch, count, kernel * channels), weight, self.conv.bias)
        per_group = channels // groups
        windows = windows.reshape(batch, count, kernel, groups, per_group)
        weight = weight.view(groups, per_group, per_group, kernel)  # (group, out, in, tap)
        output = torch.einsum("bmkgi,goik->bmgo", windows, weight).reshape(batch, count, channels)
        return output + self.conv.bias

    def expand(self, states: torch.Tensor, length: int) -> torch.Tensor:
        r"""`(batch, m, d_model)` -> `(batch, length, d_model)`, contiguous: `self.deconv` (the transposed
        convolution) applied to the compressed sequence and cut to `length <= (m - 1) * stride + kernel_size`.

        As [`~LongDocConvolution.compress`], a matrix product in the `(batch, length, channels)` layout: each
        compressed position c gives its `kernel_size` output rows (tap j goes to token `c * stride + j`); with
        `kernel_size == stride` the windows tile the sequence and the product is the output as it is, otherwise the
        taps are added at their strided positions. Equal to `self.deconv` up to float rounding (tested)."""
        batch, count, channels = states.shape
        kernel, stride, groups = self.kernel_size, self.stride, self.groups
        weight = self.deconv.weight  # (channels in, channels out / groups, kernel)
        if groups == 1:
            taps = states @ weight.permute(0, 2, 1).reshape(channels, kernel * channels)
        else:
            per_group = channels // groups
            taps = torch.einsum("bmgi,giok->bmkgo", states.view(batch, count, groups, per_group),
                                weight.view(groups, per_group, per_group, kernel))
        taps = taps.reshape(batch, count, kernel, channels)  # tap j of position c: token c * stride + j
        if kernel == stride:
            output = taps.reshape(batch, count * kernel, channels)
        else:
            output = taps.new_zeros(batch, (count - 1) * stride + kernel, channels)
            for tap in range(kernel):
                output[:, tap:tap + (count - 1) * stride + 1:stride] += taps[:, :, tap]
        return (output[:, :length] + self.deconv.bias).contiguous()


class LongDocBartAttention(BartAttention):
    r"""
    BART attention with the attention types of [`LongDocBartConfig`]. Parameter names are BART's (`q_proj`,
    `k_proj`, `v_proj`, `out_proj`); the convolutional types add `conv.conv` and `conv.deconv`
    ([`LongDocConvolution`]).

    - `"full"`, and every cross-attention: `BartAttention.forward` unchanged.
    - `"neighborhood"` (§2.3): queries, keys and values as BART's; a query attends to keys within `radius`
      (`causal`: the previous `radius` tokens and itself). With `config._attn_implementation == "flex_attention"`
      the layer expects a FlexAttention `BlockMask` (made by [`LongDocBartEncoder`] / [`LongDocBartDecoder`]) and
      calls transformers' flex attention; otherwise a `(batch, 1, 1, kv)` padding mask and
      [`neighborhood_attention_forward`].
    - `"convolutional"`, `"convolutional_per_head"` (§2.3, Fig. 1): the projected queries, keys and values
      `(batch, n, d_model)` are each shortened by the *same* convolution (kernel k, stride s) to `m = ceil(n / s)`
      positions, attention over the m positions is computed by `ALL_ATTENTION_FUNCTIONS` (any implementation), and
      the heads' concatenated output is restored to n positions by the transposed convolution before `out_proj`.
      **Queries are compressed too**: the paper shortens "the input to that layer" and restores the length with a
      deconvolution "afterwards", which is needed only when the queries are shortened (compressing keys and values
      alone, as Liu et al. 2018's memory-compressed attention, keeps n outputs). This is the simplest reading with
      both operations, and it costs O(m^2) = O(n^2 / s^2) attention. The convolution acts on the projected
      `d_model` channels, i.e. on all heads at once (`groups=1`, shared) or per head (`groups=H`), which is where
      the paper's "global" and "per head" variants differ (Fig. 1 left and middle).
    - `"neighborhood_convolutional"`: the shared convolution, then neighborhood attention over the m compressed
      positions with radius `ceil(radius / s)` (the same reach in tokens, rounded up), then the deconvolution.

    Padding: a compressed position is valid if any token of its window is valid ([`compress_padding_mask`]), and
    padding tokens are zeroed before the convolution, so they never leak into valid positions.

    Args:
        config ([`LongDocBartConfig`]): dimensions, dropout, radius, kernel, stride and attention implementation.
        num_heads (`int`): attention heads.
        attention_type (`str`, defaults to `"full"`): one of the types above.
        is_decoder, is_causal (`bool`, defaults to `False`): as `BartAttention`'s (the decoder's self-attention is
            causal; only `"full"` and `"neighborhood"` may be causal).
        layer_idx (`int`, *optional*): the layer's index, for the KV cache.

    Raises:
        ValueError: a convolutional type with `is_causal=True` (a convolution over future tokens is not causal), or
            `d_model` not divisible by `num_heads` (BART's check).
    """

    def __init__(self, config: LongDocBartConfig, num_heads: int, attention_type: str = "full",
                 is_decoder: bool = False, is_causal: bool = False, layer_idx: int | None = None):
        super().__init__(config.d_model, num_heads, dropout=config.attention_dropout, is_decoder=is_decoder,
                         is_causal=is_causal, config=config, layer_idx=layer_idx)
        if attention_type in CONVOLUTIONAL_TYPES and is_causal:
            raise ValueError(f"`attention_type` {attention_type!r} cannot be causal (decoder self-attention).")
        self.attention_type = attention_type
        self.radius = config.neighborhood_radius
        self.conv = None
        if attention_type in CONVOLUTIONAL_TYPES:
            groups = num_heads if attention_type == "convolutional_per_head" else 1
            self.conv = LongDocConvolution(config, groups=groups)
            if attention_type == "neighborhood_convolutional":
                self.radius = math.ceil(config.neighborhood_radius / config.conv_stride)

    def _project(self, hidden_states: torch.Tensor, past_key_values=None):
        # Adapted from transformers' BartAttention.forward (the self-attention path): projections and KV cache.
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if past_key_values is not None:
            cache = getattr(past_key_values, "self_attention_cache", past_key_values)
            key, value = cache.update(key, value, self.layer_idx)
        return query, key, value

    def _neighborhood(self, query, key, value, attention_mask, **kwargs):
        dropout = self.dropout if self.training else 0.0
        if isinstance(attention_mask, BlockMask):  # config._attn_implementation == "flex_attention"
            interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                        eager_attention_forward)
            return interface(self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling,
                             **kwargs)
        padding = _padding_from_mask(attention_mask)
        use_sdpa = self.config._attn_implementation != "eager"
        output_attentions = bool(kwargs.get("output_attentions"))
        if output_attentions and use_sdpa:
            logger.warning_once("LongDoc's neighborhood attention computes no attention weights under "
                                f"attn_implementation={self.config._attn_implementation!r}: set it to 'eager' for "
                                "`output_attentions=True`.")
        return neighborhood_attention_forward(
            self, query, key, value, padding, scaling=self.scaling, dropout=dropout, radius=self.radius,
            causal=self.is_causal, use_sdpa=use_sdpa, output_attentions=output_attentions)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        past_key_values=None,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch, length, d_model)`).
            key_value_states (`torch.FloatTensor` of shape `(batch, source_length, d_model)`, *optional*): encoder
                states for cross-attention (always BART's full attention).
            past_key_values (`Cache`, *optional*): the decoder's KV cache (`cache`: its name from transformers 5.24
                on, what `BartDecoderLayer` passes there; either name, not both: a `ValueError`).
            attention_mask: `"full"`: BART's mask. Neighborhood and convolutional types: a `(batch, 1, 1, kv)`
                padding mask (True for real tokens) or `None`; with FlexAttention, a `BlockMask` (neighborhood)
                or the same padding mask (convolutional types).

        Returns:
            `(attn_output (batch, length, d_model), attn_weights or None)`: with `"eager"` (what transformers records
            for `output_attentions=True`): `"full"`, BART's `(batch, heads, length, kv)`; `"neighborhood"`, the
            band's weights on the same grid, 0 outside `|i - j| <= radius` (and after `i` in the causal decoder),
            built only when `kwargs` hold `output_attentions=True`; the convolutional types, the attention over the
            `m = ceil(length / stride)` compressed positions, `(batch, heads, m, m)` (banded for
            `"neighborhood_convolutional"`). Other implementations:
            `None` (for the neighborhood kernels a warning when `output_attentions` is asked).
        """
        past_key_values = _either_cache(past_key_values, cache)
        if self.attention_type == "full" or key_value_states is not None:
            return super().forward(hidden_states, key_value_states=key_value_states, attention_mask=attention_mask,
                                   **{CACHE_NAME: past_key_values}, **kwargs)
        batch, length = hidden_states.shape[:2]
        if self.conv is None:  # neighborhood
            query, key, value = self._project(hidden_states, past_key_values)
            output, weights = self._neighborhood(query, key, value, attention_mask, **kwargs)
            return self.out_proj(output.reshape(batch, length, -1).contiguous()), weights

        padding = _padding_from_mask(attention_mask)
        if padding is not None:
            padding = padding.to(hidden_states.device, torch.bool)
        # One projection at a time, each compressed at once: only one `(batch, n, d_model)` projection is alive at a
        # time (a concatenation of the three would hold six), so the layer's peak stays under the feed-forward's.
        query, key, value = (self.conv.compress(projection(hidden_states), padding)
                             for projection in (self.q_proj, self.k_proj, self.v_proj))
        compressed = query.shape[1]
        mask = compress_padding_mask(padding, self.conv.kernel_size, self.conv.stride)
        heads_shape = (batch, compressed, -1, self.head_dim)
        query, key, value = (t.view(heads_shape).transpose(1, 2) for t in (query, key, value))
        if self.attention_type == "neighborhood_convolutional":
            if self.config._attn_implementation == "flex_attention":
                mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states[:, :compressed],
                                                 attention_mask=mask,
                                                 and_mask_function=sliding_window_bidirectional_overlay(self.radius))
            elif mask is not None:
                mask = mask[:, None, None, :]
            output, weights = self._neighborhood(query, key, value, mask, **kwargs)
        else:
            mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states[:, :compressed],
                                             attention_mask=mask)
            interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                        eager_attention_forward)
            output, weights = interface(self, query, key, value, mask,
                                        dropout=self.dropout if self.training else 0.0, scaling=self.scaling,
                                        **kwargs)
        output = self.conv.expand(output.reshape(batch, compressed, -1), length)
        return self.out_proj(output.contiguous()), weights


def _padding_from_mask(attention_mask) -> torch.Tensor | None:
    """`(batch, 1, 1, kv)` padding mask (or `(batch, kv)`) -> `(batch, kv)`; `None` stays `None`."""
    if attention_mask is None:
        return None
    if attention_mask.dim() == 4:
        if attention_mask.shape[1] != 1 or attention_mask.shape[2] != 1:
            raise ValueError("neighborhood and convolutional attention take a (batch, 1, 1, kv) padding mask, got "
                             f"{tuple(attention_mask.shape)}.")
        attention_mask = attention_mask[:, 0, 0]
    return attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0


class LongDocBartEncoderLayer(BartEncoderLayer):
    r"""`BartEncoderLayer` whose self-attention is [`LongDocBartAttention`] of `config.encoder_attention_type`."""

    def __init__(self, config: LongDocBartConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx=layer_idx)
        self.self_attn = LongDocBartAttention(config, config.encoder_attention_heads,
                                              attention_type=config.encoder_attention_type, layer_idx=layer_idx)


class LongDocBartDecoderLayer(BartDecoderLayer):
    r"""`BartDecoderLayer` whose self-attention is [`LongDocBartAttention`] of `config.decoder_attention_type`
    (causal); the cross-attention is BART's."""

    def __init__(self, config: LongDocBartConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx=layer_idx)
        self.self_attn = LongDocBartAttention(config, config.decoder_attention_heads,
                                              attention_type=config.decoder_attention_type, is_decoder=True,
                                              is_causal=True, layer_idx=layer_idx)


class LongDocBartPreTrainedModel(BartPreTrainedModel):
    r"""BART's pre-trained model base with [`LongDocBartConfig`]; initializes the convolutions of convolutional
    attention (Kosaraju, Ang and Nabulsi, §2.3 "Convolutional Model", Fig. 1) as documented in [`LongDocConvolution`]
    (window mean and spread back; identity at kernel 1, stride 1). The report does not say how its convolutions are
    initialized: this initialization is hf-readonce's, chosen so that a BART checkpoint starts from BART's attention.
    """

    config_class = LongDocBartConfig
    config: LongDocBartConfig
    _no_split_modules = [r"LongDocBartEncoderLayer", r"LongDocBartDecoderLayer"]

    # Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert.DeformerBertPreTrainedModel.save_pretrained
    def save_pretrained(self, save_directory, *args, **kwargs):
        r"""`PreTrainedModel.save_pretrained`, with every Auto class that a model class of this file is registered
        for (`register_for_auto_class`) in the saved config's `auto_map`, not only the saved class's own (all that
        transformers writes): the folder then loads through each of them (`AutoModel`, the task heads) with
        `trust_remote_code=True`, also where hf-readonce is not installed. Entries the config already has are
        kept; `auto_map` is not part of the representation fingerprint."""
        module = sys.modules[__name__]
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
                head = cls.__dict__.get("_auto_class")
                if head is not None:
                    auto_map.setdefault(head, f"{__name__.rsplit('.', 1)[-1]}.{cls.__name__}")
        if auto_map:
            self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)

    # Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart.ReadOnceBartPreTrainedModel.tie_weights
    def tie_weights(self, missing_keys: set[str] | None = None, recompute_mapping: bool = True):
        r"""[`~transformers.PreTrainedModel.tie_weights`]: with `tie_word_embeddings=True`, one token table
        (`shared`, the encoder's and decoder's `embed_tokens`, the LM head). With `False` the encoder's and the
        decoder's tables are parameters of their own, as in `BartModel`, loaded from the checkpoint's
        `encoder.embed_tokens` / `decoder.embed_tokens`; called by `from_pretrained` with `missing_keys` (the keys the
        checkpoint lacks), it gives a part whose table the checkpoint lacks `shared`'s weights, where the checkpoint
        holds `shared` (a checkpoint with one table, read by encoder and decoder), instead of random rows
        ([`_read_shared_where_missing`], which takes the filled keys out of `missing_keys`).

        Args:
            missing_keys (`set[str]`, *optional*), recompute_mapping (`bool`, defaults to `True`): as in transformers.

        Raises:
            ValueError: for such a checkpoint loaded with `shared` offloaded to disk ([`_read_shared_where_missing`]).
        """
        super().tie_weights(missing_keys=missing_keys, recompute_mapping=recompute_mapping)
        if missing_keys is not None:
            _read_shared_where_missing(self, missing_keys)

    # Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart.ReadOnceBartPreTrainedModel.resize_token_embeddings
    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        r"""[`~transformers.PreTrainedModel.resize_token_embeddings`] (BART's `final_logits_bias` with it). With
        `tie_word_embeddings=False` the encoder's and the decoder's own token tables ([`_separate_token_tables`]) are
        resized too, each keeping its rows, and stay separate: BART's `set_input_embeddings`, which the resize calls,
        would give both the resized `shared` table in their place.

        Args:
            new_num_tokens (`int`, *optional*), pad_to_multiple_of (`int`, *optional*), mean_resizing (`bool`,
                defaults to `True`): as in transformers (the added rows of each separate table are drawn from its
                own rows' mean and covariance, or as at initialization with `mean_resizing=False`).

        Returns:
            `torch.nn.Embedding`: the input embeddings (`shared`), `(vocab_size, d_model)` after the resize.
        """
        tables = _separate_token_tables(self)
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        bart = getattr(self, "model", self)
        for part, table in tables.items():
            getattr(bart, part).embed_tokens = self._get_resized_embeddings(table, embeddings.num_embeddings,
                                                                            mean_resizing=mean_resizing)
        return embeddings

    def _init_weights(self, module):
        super()._init_weights(module)
        # On the (de)convolutions themselves, not on `LongDocConvolution`: transformers skips, for remote code, a
        # module whose own parameters are all initialized, which a module without direct parameters always is.
        scale = getattr(module, "longdoc_init_scale", None)
        if scale is not None and isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
            channels, per_group = module.weight.shape[:2]
            eye = torch.zeros(channels, per_group, device=module.weight.device, dtype=module.weight.dtype)
            eye[torch.arange(channels), torch.arange(channels) % per_group] = scale
            init.copy_(module.weight, eye[..., None].expand_as(module.weight))
            init.zeros_(module.bias)


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_token_ids
def _check_token_ids(ids, bound: int, argument: str) -> None:
    """Raise a `ValueError` naming `argument` and the bound if a token id of `ids` is outside `[0, bound)` (called
    when the embedding lookup fails, so the normal path costs nothing)."""
    if torch.is_tensor(ids) and ids.numel() and not ids.is_floating_point():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise ValueError(f"`{argument}` holds token id {low if low < 0 else high}, outside the vocabulary "
                             f"[0, {bound}) of this model.") from None


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_tensor_arguments
def _check_tensor_arguments(ids: dict, masks: dict | None = None) -> None:
    """Raise a `TypeError` naming the argument for an input that is not a `torch.Tensor` (a list or a numpy array: the
    model would fail deep inside torch), or, among `ids` (token ids, token types), one that does not hold integers
    (a float or bool tensor the embedding lookup would refuse without saying which argument). `None` values are
    skipped; `masks` (attention masks: any dtype) are checked only for being tensors."""
    for name, value in {**ids, **(masks or {})}.items():
        if value is not None and not torch.is_tensor(value):
            raise TypeError(f"`{name}` must be a torch.Tensor, got {type(value).__name__} (convert it with "
                            "torch.as_tensor, or tokenize with return_tensors='pt').")
    for name, value in ids.items():
        if value is not None and (value.is_floating_point() or value.dtype == torch.bool):
            raise TypeError(f"`{name}` must hold integer token ids, got {value.dtype}.")


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._accepted_keywords
@functools.cache
def _accepted_keywords(model_class: type, method: str, passed_to: tuple = (), declared_only: bool = False) -> frozenset:
    """The keyword names `model_class.<method>` accepts into its `**kwargs` (see [`_check_keyword_arguments`]): the
    parameters that `method` declares in any class of `model_class.__mro__` (the override's and those of the
    transformers method it extends, e.g. `cache_position` of `LlamaForCausalLM.forward` in early 5.x releases), those
    of the functions in `passed_to` (where the method hands its `**kwargs` on, or, for an encoder, the forward of the
    model whose arguments `generate()` hands on to it), the keys of transformers'
    `TransformersKwargs` (read from the installed release, bases included), the keywords transformers itself passes
    to a model whatever its signature (`generate()`, `Trainer`, `@can_return_tuple`, the debugging options of its
    forward decorators), and `token_type_ids`, which a BERT tokenizer returns and `model(**tokenizer(text))` hands to
    a model without token types (BART's and Llama's `forward` ignore it). Computed once per class.

    With `declared_only=True`, only the names a user writes, those [`_check_keyword_arguments`] may suggest: the
    declared parameters and `return_dict`, `use_cache`, `output_attentions`, `output_hidden_states`; not the
    internals of `TransformersKwargs` and transformers' own plumbing (`max_length=` is no misspelling of flash
    attention's `max_length_q`)."""
    names = {"return_dict", "use_cache", "output_attentions", "output_hidden_states"}
    if not declared_only:
        names.update({"cache", "past_key_values", "cache_position", "position_ids", "logits_to_keep",
                      "num_items_in_batch", "debug_io", "debug_io_dir", "prune_layers", "token_type_ids"})
        for typed_dict in (TransformersKwargs, *getattr(TransformersKwargs, "__orig_bases__", ())):
            if isinstance(typed_dict, type):  # a TypedDict's keys include its bases'; `__annotations__` too
                names.update(getattr(typed_dict, "__required_keys__", ()),
                             getattr(typed_dict, "__optional_keys__", ()))
                try:
                    names.update(typed_dict.__annotations__)
                except Exception:  # an annotation that cannot be evaluated (Python >= 3.14 evaluates them lazily)
                    pass
    functions = [vars(klass)[method] for klass in model_class.__mro__ if method in vars(klass)]
    for function in (*functions, *passed_to):
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):  # not introspectable (a builtin): it adds no name
            continue
        names.update(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return frozenset(names)


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_keyword_arguments
def _check_keyword_arguments(model, kwargs: dict, method: str = "forward", passed_to: tuple = ()) -> None:
    """Raise a `TypeError` in Python's own words for a key of `kwargs` (what `model.<method>` received in its
    `**kwargs`) that nothing would read: a misspelled argument (`document_state=` for `document_states=`) would
    otherwise be swallowed by the layers below and the model would run without it, a silently different answer.
    Accepted: what [`_accepted_keywords`] lists (declared parameters, `TransformersKwargs`, what `generate()` and
    `Trainer` pass), and any key whose value is `None` (it changes nothing, and `generate()` forwards such keys
    unchecked, as its own `model_kwargs` check skips them). The message names the first unexpected key and, when one
    is close, the argument it probably meant (`difflib`, among the names a user writes: `_accepted_keywords(...,
    declared_only=True)`). Skipped while `torch.compile` traces (the signature look-up is no graph code), so a
    compiled model does not check."""
    if not kwargs or torch.compiler.is_compiling():
        return
    accepted = _accepted_keywords(type(model), method, tuple(passed_to))
    for name, value in kwargs.items():
        if value is not None and name not in accepted:
            meant = _accepted_keywords(type(model), method, tuple(passed_to), True)
            close = difflib.get_close_matches(name, sorted(meant), n=1)
            hint = f". Did you mean '{close[0]}'?" if close else ""
            raise TypeError(f"{type(model).__name__}.{method}() got an unexpected keyword argument '{name}'{hint}")


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._PACKED_SEQUENCES
# What no model of this project reads among the keywords [`_accepted_keywords`] lets through (`TransformersKwargs`,
# transformers' own plumbing), refused by [`_refuse_unread_keywords`] where a forward would swallow them: each name
# maps to `(neutral, why)`, `neutral` being the value that asks for what the model does anyway (`None`: none) and
# `why` the reason and what to use instead. Flash attention's packing arguments (what `DataCollatorWithFlattening`
# returns) and the router logits of mixture-of-experts models; a family adds its own.
_PACKED_SEQUENCES = (
    "it reads one sequence per row, so the packed sequences of a flattened batch (flash attention's "
    "`cu_seq_lens_q` / `cu_seq_lens_k` / `max_length_q` / `max_length_k`, `seq_idx`, as `DataCollatorWithFlattening` "
    "returns them) would be read as one sequence, each attending to the others. Pad the batch instead, one sequence "
    "per row (e.g. `DataCollatorWithPadding`)"
)
# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._UNREAD_KEYWORDS
_UNREAD_KEYWORDS = {
    **dict.fromkeys(("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"),
                    (None, _PACKED_SEQUENCES)),
    "output_router_logits": (False, "the model has no mixture-of-experts router, so there are no router logits to "
                                    "return; leave it out"),
}


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._refuse_unread_keywords
def _refuse_unread_keywords(model, kwargs: dict, unread: dict, method: str = "forward") -> None:
    """Raise a `ValueError` for a key of `kwargs` (what `model.<method>` received in its `**kwargs`) that `unread`
    lists: a name [`_check_keyword_arguments`] accepts (a key of `TransformersKwargs`, or what transformers passes to
    any model) but that this forward never reads, so that the model would run as without it, a different result
    without a word (e.g. packed sequences read as one, positions that are not the ones given). `unread` maps each
    name to `(neutral, why)`: `None` passes, and so does `neutral` when it is not `None` (the value that asks for what
    the model does anyway: `False` for a switch, `0` for `logits_to_keep`); any other value is refused, the message
    naming the argument and ending with `why` (the reason and what to use instead).

    Raises:
        ValueError: a value of an unread argument that is neither `None` nor its neutral value.
    """
    for name, (neutral, why) in unread.items():
        value = kwargs.get(name)
        if value is None or (neutral is not None and type(value) in (bool, int) and value == neutral):
            continue
        raise ValueError(f"{type(model).__name__}.{method}() got `{name}`, which it does not support: {why}.")


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._BART_UNREAD_KEYWORDS
# What a BART model of this project (ReadOnce, LongDoc; the bare models and the conditional generation heads) leaves
# unread besides [`_UNREAD_KEYWORDS`], for [`_refuse_unread_keywords`]. BART itself reads none of them: its encoder and
# decoder number their positions themselves, and its LM head scores every position.
_BART_UNREAD_KEYWORDS = {
    **_UNREAD_KEYWORDS,
    "position_ids": (None, "the model numbers positions itself, as BART does (learned positions from 0 for the text, "
                           "the decoder's following its cache); `BartModel` does not read `position_ids` either"),
    "is_causal": (None, "the encoder reads bidirectionally and the decoder causally, as in BART; `is_causal` would "
                        "turn only some of their attention layers the other way"),
    "logits_to_keep": (0, "the LM head scores every decoder position; slice `logits[:, -k:]` afterwards instead"),
}
# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._BART_MODEL_UNREAD_KEYWORDS
# a bare model (no LM head) computes no loss
_BART_MODEL_UNREAD_KEYWORDS = {
    **_BART_UNREAD_KEYWORDS,
    "num_items_in_batch": (None, "the bare model computes no loss to divide by it; the conditional generation model "
                                 "(with `labels`) reads it"),
}


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._check_loss_count_has_decoder_inputs
def _check_loss_count_has_decoder_inputs(model, num_items_in_batch, labels, decoder_input_ids,
                                         decoder_inputs_embeds) -> None:
    """Raise a `ValueError` when `num_items_in_batch` (`Trainer`'s count of the step's target tokens) comes without
    `labels`, `decoder_input_ids` or `decoder_inputs_embeds`: `Trainer` takes `labels` out of the batch before the
    forward for `label_smoothing_factor` (or a `compute_loss_func`) and scores the logits itself, and BART's decoder
    with neither labels nor decoder inputs reads the encoder input shifted right, so the loss would be over the wrong
    logits (or a shape error inside the label smoother). Without `num_items_in_batch` (a plain call) nothing is
    checked: BART's denoising default stays."""
    if num_items_in_batch is not None and labels is None and decoder_input_ids is None \
            and decoder_inputs_embeds is None:
        raise ValueError(
            f"{type(model).__name__}.forward() got `num_items_in_batch` (Trainer's count of target tokens) but no "
            "`labels`, `decoder_input_ids` or `decoder_inputs_embeds`: the decoder would read the encoder input "
            "shifted right, not the targets. Trainer takes `labels` out of the batch for `label_smoothing_factor` "
            "(or a `compute_loss_func`): give the batches `decoder_input_ids` made from the labels "
            "(`DataCollatorForSeq2Seq(tokenizer, model=model)` adds them).")


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._check_no_token_types
def _check_no_token_types(model, token_type_ids, instead: str, method: str = "forward") -> None:
    """Raise a `ValueError` when `token_type_ids` mark a second segment (a value other than 0): a BERT tokenizer
    returns them with the ids and BART's forward takes them without reading them (BART has no token-type embeddings),
    so a text pair (`tokenizer(question, document)`) would be read as one text without a word. All zeros (one text,
    `model(**tokenizer(text))`), `None` and anything that is not a tensor pass. `instead` ends the message: how this
    model reads a second text.

    Raises:
        ValueError: `token_type_ids` holding a value other than 0.
    """
    if torch.is_tensor(token_type_ids) and bool((token_type_ids != 0).any()):
        raise ValueError(f"{type(model).__name__}.{method}() got `token_type_ids` marking a second segment, which it "
                         f"does not support: BART has no token types, so a text pair would be read as one text. "
                         f"{instead}")


# How LongDoc reads a second text, for [`_check_no_token_types`]'s message.
_LONGDOC_SECOND_TEXT = "Tokenize the document alone (one text per row)."


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._check_text_inputs
def _check_text_inputs(input_ids, attention_mask, input_name: str = "input_ids",
                       mask_name: str = "attention_mask") -> None:
    """Raise a `TypeError` for token ids that are not integers and a `ValueError` for a 2-D padding mask whose shape
    differs from `(batch, length)` of the ids, naming both arguments (torch would fail later without naming them, or
    broadcast a one-row mask over the batch silently)."""
    if not torch.is_tensor(input_ids):
        return
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"`{input_name}` must hold integer token ids, got {input_ids.dtype}.")
    if torch.is_tensor(attention_mask) and attention_mask.dim() == 2 and input_ids.dim() == 2 and (
            tuple(attention_mask.shape) != tuple(input_ids.shape)):
        raise ValueError(f"`{mask_name}` {tuple(attention_mask.shape)} must have the shape of `{input_name}` "
                         f"{tuple(input_ids.shape)}.")


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._check_batch_of_texts
def _check_batch_of_texts(value, name: str, dims: int = 2) -> None:
    """Raise a `ValueError` naming `name` unless `value` (a tensor, or `None`) has `dims` dimensions and neither an
    empty batch nor an empty text: `(batch_size, text_length)` ids, `(batch_size, text_length, d_model)` embeddings
    (1-D ids of one text would otherwise fail as a bare `IndexError` in BART's shift or a reshape error)."""
    if torch.is_tensor(value) and (value.dim() != dims or value.shape[0] == 0 or value.shape[1] == 0):
        axes = "batch_size, text_length" + (", d_model" if dims == 3 else "")
        raise ValueError(f"`{name}` must be a non-empty ({axes}) tensor, got shape {tuple(value.shape)}.")


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._check_decoder_batch
def _check_decoder_batch(decoder_input_ids, decoder_inputs_embeds, encoder_hidden_states,
                         max_positions: int | None = None) -> None:
    """Raise a `ValueError` when the decoder rows (`labels` / `decoder_input_ids`) and the encoder's batch
    (`input_ids` / `encoder_outputs`) differ in size, or when the decoder ids are longer than `max_positions` (the
    position table; BART's lookup would raise a bare `IndexError`), and a `TypeError` for decoder ids that are not
    integers: BART would fail inside cross-attention without naming them, or attend every row to a one-row encoder
    silently."""
    _check_text_inputs(decoder_input_ids, None, "labels` / `decoder_input_ids")
    reference = decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
    name = "`labels` / `decoder_input_ids`" if decoder_input_ids is not None else "`decoder_inputs_embeds`"
    if torch.is_tensor(reference) and max_positions is not None and reference.dim() >= 2 and (
            reference.shape[1] > max_positions):
        raise ValueError(f"{name} hold {reference.shape[1]} tokens, more than the model's {max_positions} positions: "
                         "truncate the targets (`max_length` in the tokenizer).")
    if torch.is_tensor(reference) and torch.is_tensor(encoder_hidden_states) and reference.dim() >= 2 and (
            reference.shape[0] != encoder_hidden_states.shape[0]):
        raise ValueError(f"{name} hold {reference.shape[0]} rows for an encoder batch of "
                         f"{encoder_hidden_states.shape[0]} (`input_ids` / `encoder_outputs`): one target row per "
                         "input row.")


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._separate_token_tables
def _separate_token_tables(model) -> dict:
    """The token tables of their own that the encoder and the decoder of `model`'s BART (`model.model` of a
    conditional generation model, else `model` itself) read instead of `shared`: with `tie_word_embeddings=False`, as
    in `BartModel`, where `shared`, the encoder's `embed_tokens` and the decoder's `embed_tokens` are three parameters
    (each `(vocab_size, d_model)`).

    Returns:
        `dict`: `"encoder"` / `"decoder"` -> its `embed_tokens` module, for each part whose table is not `shared`'s
        weight; `{}` for a tied model (one table) and for a model without a BART (a document encoder, an encoder).
    """
    bart = getattr(model, "model", model)
    if not isinstance(bart, BartModel):
        return {}
    return {part: getattr(bart, part).embed_tokens for part in ("encoder", "decoder")
            if getattr(bart, part).embed_tokens.weight is not bart.shared.weight}


# Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart._read_shared_where_missing
def _read_shared_where_missing(model, missing_keys: set) -> None:
    """During `from_pretrained` (from [`tie_weights`], after transformers initialized the keys the checkpoint
    lacks): each separate encoder / decoder token table of `model` ([`_separate_token_tables`],
    `tie_word_embeddings=False`) that the checkpoint lacks, while it holds `shared`, is given `shared`'s weights
    (`(vocab_size, d_model)`) instead of the random rows drawn for it, and its key is taken out of `missing_keys`
    (in place). Such a checkpoint holds one table, which its encoder and decoder both read; BART's untied checkpoints
    hold all three and load as they are.

    Args:
        model: the model being loaded (a conditional generation model, or a bare `BartModel`-based one; anything
            else is left alone).
        missing_keys (`set[str]`): the loading info's missing keys, named from `model`.

    Raises:
        ValueError: if a table is to be given `shared`'s weights while `shared` has none here (on the meta device:
            offloaded to disk by a `device_map`), naming the ways to load such a checkpoint.
    """
    bart = getattr(model, "model", model)
    prefix = "" if bart is model else "model."
    if not isinstance(bart, BartModel) or f"{prefix}shared.weight" in missing_keys:
        return
    for part, table in _separate_token_tables(model).items():
        key = f"{prefix}{part}.embed_tokens.weight"
        if key in missing_keys and table.weight.shape == bart.shared.weight.shape:
            if bart.shared.weight.device.type == "meta":
                raise ValueError(
                    f"This checkpoint holds one token table, `{prefix}shared.weight`, and no `{key}`; with "
                    "`tie_word_embeddings=False` the table is copied into the model's own, but `device_map` offloaded "
                    "`shared` to disk, where it cannot be read while loading. Load it with a `device_map` that keeps "
                    f"the token tables (`{prefix}shared`, `{prefix}encoder.embed_tokens`, "
                    f"`{prefix}decoder.embed_tokens`) in memory, or with `tie_word_embeddings=True` (the encoder and "
                    "the decoder then read `shared`, as the checkpoint does).")
            with torch.no_grad():
                table.weight.copy_(bart.shared.weight)
            missing_keys.discard(key)


def _padding_mask_4d(attention_mask: torch.Tensor | None, batch: int, length: int,
                     device: torch.device) -> torch.Tensor:
    """A `(batch, 1, 1, length)` bool padding mask: transformers' mask helpers return a 4D mask as it is, so neither
    an n x n mask nor a band is ever built for the neighborhood and convolutional layers."""
    if attention_mask is None:
        return torch.ones(batch, 1, 1, length, dtype=torch.bool, device=device)
    return _padding_from_mask(attention_mask).to(device)[:, None, None, :]


def _pass_on_output_attentions(config, kwargs: dict) -> None:
    """`output_attentions=True` from the config made explicit in `kwargs` (when they do not name it), as BART's
    `capture_outputs` reads it: the layers receive it, and a neighborhood layer builds its weights only when asked
    ([`neighborhood_attention_forward`])."""
    if "output_attentions" not in kwargs and getattr(config, "output_attentions", False):
        kwargs["output_attentions"] = True


class LongDocBartEncoder(LongDocBartPreTrainedModel, BartEncoder):
    r"""
    BART's encoder with [`LongDocBartEncoderLayer`]s, whose self-attention is `config.encoder_attention_type` (the
    neighborhood or convolutional attention of Kosaraju, Ang and Nabulsi, §2.3, Fig. 1). For every type but `"full"`
    it prepares the mask once for all layers before BART's forward: with FlexAttention and `"neighborhood"`, a
    `BlockMask` from transformers' `create_bidirectional_mask(...,
    and_mask_function=sliding_window_bidirectional_overlay(r))` (O(n·r) blocks); otherwise a `(batch, 1, 1, n)`
    padding mask. `forward` takes and returns what `BartEncoder.forward` does.

    Args:
        config ([`LongDocBartConfig`]): the model configuration.

    Raises:
        ValueError: naming the field, if the config's LongDoc fields are invalid
            ([`LongDocBartConfig.validate_longdoc_settings`], checked again here for fields assigned on the config
            after its construction).
    """

    def __init__(self, config: LongDocBartConfig):
        config.validate_longdoc_settings()  # again: a field assigned after construction was never checked
        BartEncoder.__init__(self, config)
        self.layers = nn.ModuleList(LongDocBartEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers))
        self.post_init()

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, **kwargs: Unpack[TransformersKwargs]):
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, n)`, *optional*).
            attention_mask (`torch.Tensor` of shape `(batch, n)`, *optional*): 1 for real tokens.
            inputs_embeds (`torch.FloatTensor` of shape `(batch, n, d_model)`, *optional*).

        Returns:
            `BaseModelOutput` with `last_hidden_state` `(batch, n, d_model)`, as BART's.

        Raises:
            ValueError: an input longer than the position table (`n > max_position_embeddings`; BART's embedding
                lookup would fail with an `IndexError`), `input_ids` / `inputs_embeds` that are not 2-D / 3-D or
                hold an empty batch or text ([`_check_batch_of_texts`]), or a 2-D `attention_mask` of another shape
                than `input_ids`.
            ValueError: a token id outside `[0, vocab_size)`, naming it and the vocabulary size (checked when the
                embedding lookup fails).
            TypeError: `input_ids` that are not integer token ids; a keyword argument it does not take (a
                misspelling such as `atention_mask=`), named with the argument it probably meant, where BART's
                `**kwargs` would swallow it. Accepted besides its own: what [`_check_keyword_arguments`] accepts, and
                the arguments of `LongDocBartForConditionalGeneration.forward` (BART's), which `generate()` hands on
                to this encoder (e.g. the `labels` of `Seq2SeqTrainer`'s `predict_with_generate`).
        """
        _check_keyword_arguments(self, kwargs, passed_to=(LongDocBartForConditionalGeneration.forward,))
        try:
            return self._longdoc_forward(input_ids, attention_mask, inputs_embeds, **kwargs)
        except (IndexError, RuntimeError):
            _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
            raise

    def _longdoc_forward(self, input_ids, attention_mask, inputs_embeds, **kwargs):
        config = self.config
        _check_text_inputs(input_ids, attention_mask)
        _check_batch_of_texts(input_ids, "input_ids")
        _check_batch_of_texts(inputs_embeds, "inputs_embeds", dims=3)
        reference, name = (input_ids, "input_ids") if input_ids is not None else (inputs_embeds, "inputs_embeds")
        if torch.is_tensor(reference):
            if reference.shape[1] > config.max_position_embeddings:
                raise ValueError(f"`{name}` holds {reference.shape[1]} tokens, more than the model's "
                                 f"{config.max_position_embeddings} positions: truncate the documents "
                                 "(`truncation=True, max_length=...` in the tokenizer) or extend the position table "
                                 "first (hf-readonce's `extend_position_embeddings`).")
        if config.encoder_attention_type != "full" and not (
                isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4) and not isinstance(
                attention_mask, BlockMask):
            reference = input_ids if input_ids is not None else inputs_embeds
            batch, length = reference.shape[:2]
            if config.encoder_attention_type == "neighborhood" and config._attn_implementation == "flex_attention":
                embeds = inputs_embeds if inputs_embeds is not None else self.embed_tokens(input_ids)
                attention_mask = create_bidirectional_mask(
                    config=config, inputs_embeds=embeds, attention_mask=attention_mask,
                    and_mask_function=sliding_window_bidirectional_overlay(config.neighborhood_radius))
            else:
                attention_mask = _padding_mask_4d(attention_mask, batch, length, reference.device)
        _pass_on_output_attentions(config, kwargs)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                               **kwargs)


class LongDocBartDecoder(LongDocBartPreTrainedModel, BartDecoder):
    r"""
    BART's decoder with [`LongDocBartDecoderLayer`]s, whose self-attention is BART's or, with
    `decoder_attention_type="neighborhood"`, the causal form of the neighborhood attention of Kosaraju, Ang and
    Nabulsi (§2.3 "Neighborhood Attention"). With `decoder_attention_type="neighborhood"` it prepares the
    self-attention mask before BART's forward: with FlexAttention, a `BlockMask` from transformers'
    `create_causal_mask(..., and_mask_function=sliding_window_overlay(r + 1))` (keys `t - r .. t`, KV cache
    included); otherwise a `(batch, 1, 1, past + length)` padding mask, and each layer's
    [`neighborhood_attention_forward`] keeps only the last r + 1 cached keys a query can see. `forward` takes and
    returns what `BartDecoder.forward` does.

    Args:
        config ([`LongDocBartConfig`]): the model configuration.

    Raises:
        ValueError: naming the field, if the config's LongDoc fields are invalid
            ([`LongDocBartConfig.validate_longdoc_settings`]).
    """

    def __init__(self, config: LongDocBartConfig):
        config.validate_longdoc_settings()  # again: a field assigned after construction was never checked
        BartDecoder.__init__(self, config)
        self.layers = nn.ModuleList(LongDocBartDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers))
        self.post_init()

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                encoder_hidden_states: torch.Tensor | None = None, encoder_attention_mask=None,
                past_key_values=None, inputs_embeds: torch.Tensor | None = None, use_cache: bool | None = None,
                cache=None, **kwargs: Unpack[TransformersKwargs]):
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, length)`, *optional*): decoder tokens (the new ones when
                `past_key_values` holds earlier ones).
            attention_mask (`torch.Tensor` of shape `(batch, past + length)`, *optional*): decoder padding mask.
            encoder_hidden_states (`(batch, n, d_model)`), encoder_attention_mask (`(batch, n)`), past_key_values,
                inputs_embeds, use_cache: as `BartDecoder.forward`.
            cache: the name of `past_key_values` from transformers 5.24 on (what `BartModel` passes there); either
                name, not both.

        Returns:
            `BaseModelOutputWithPastAndCrossAttentions`, as BART's.

        Raises:
            ValueError: decoder ids (`input_ids`: `labels` / `decoder_input_ids`) that are not 2-D
                (`inputs_embeds` not 3-D) or hold an empty batch or text ([`_check_batch_of_texts`]); decoder rows and
                `encoder_hidden_states` of different batch sizes; a decoder token id outside `[0, vocab_size)`,
                naming it and the vocabulary size (checked when the embedding lookup fails); both `past_key_values`
                and `cache`.
            TypeError: decoder ids (`labels`) that are not integers; a keyword argument it does not take (a
                misspelling such as `encoder_attention_masks=`), named with the argument it probably meant, where
                BART's `**kwargs` would swallow it. Accepted besides its own: what [`_check_keyword_arguments`]
                accepts (`TransformersKwargs`, what `generate()` and `Trainer` pass down through the model).
        """
        _check_keyword_arguments(self, kwargs)
        try:
            return self._longdoc_forward(input_ids, attention_mask, encoder_hidden_states, encoder_attention_mask,
                                         _either_cache(past_key_values, cache), inputs_embeds, use_cache, **kwargs)
        except (IndexError, RuntimeError):
            _check_token_ids(input_ids, self.config.vocab_size, "decoder_input_ids` / `labels")
            raise

    def _longdoc_forward(self, input_ids, attention_mask, encoder_hidden_states, encoder_attention_mask,
                         past_key_values, inputs_embeds, use_cache, **kwargs):
        _check_batch_of_texts(input_ids, "decoder_input_ids` / `labels")  # BART would fail unpacking their shape
        _check_batch_of_texts(inputs_embeds, "decoder_inputs_embeds", dims=3)
        _check_decoder_batch(input_ids, inputs_embeds, encoder_hidden_states, self.config.max_position_embeddings)
        config = self.config
        if config.decoder_attention_type == "neighborhood" and not isinstance(attention_mask, BlockMask) and not (
                isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4):
            reference = input_ids if input_ids is not None else inputs_embeds
            batch, length = reference.shape[:2]
            past = past_key_values.get_seq_length() if past_key_values is not None else 0
            if config._attn_implementation == "flex_attention":
                embeds = inputs_embeds if inputs_embeds is not None else self.embed_tokens(input_ids)
                self_attention_cache = getattr(past_key_values, "self_attention_cache", past_key_values)
                attention_mask = create_causal_mask(
                    config=config, inputs_embeds=embeds, attention_mask=attention_mask,
                    and_mask_function=sliding_window_overlay(config.neighborhood_radius + 1),
                    **{CACHE_NAME: self_attention_cache})
            else:
                attention_mask = _padding_mask_4d(attention_mask, batch, past + length, reference.device)
        _pass_on_output_attentions(config, kwargs)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                               encoder_hidden_states=encoder_hidden_states,
                               encoder_attention_mask=encoder_attention_mask, inputs_embeds=inputs_embeds,
                               use_cache=use_cache, **{CACHE_NAME: past_key_values}, **kwargs)


class LongDocBartModel(LongDocBartPreTrainedModel, BartModel):
    r"""[`~transformers.BartModel`] with [`LongDocBartEncoder`] and [`LongDocBartDecoder`]: the encoder
    self-attention of Kosaraju, Ang and Nabulsi's §2.3 ("Proposed Models", Fig. 1; `config.encoder_attention_type`),
    the decoder's BART's or causal neighborhood attention (`config.decoder_attention_type`). `forward` is BART's
    (inputs `(batch, n)`, decoder inputs `(batch, target_length)`, output `(batch, target_length, d_model)`), except
    that a keyword argument it does not take raises a `TypeError` naming it ([`_keyword_arguments_hook`]) where
    BART's `**kwargs` would swallow it, and one it takes but does not read (`position_ids`, `is_causal`,
    `num_items_in_batch`: no loss here, ...) a `ValueError`, as do `input_ids` / `decoder_input_ids` that are not 2-D
    (`decoder_inputs_embeds` not 3-D) or hold an empty batch or text ([`_check_forward_batches`]).

    Token tables as in `BartModel`: with `config.tie_word_embeddings=True` (the default, and what the converters
    write) the encoder and the decoder read the one `shared` table, `(vocab_size, d_model)`; with `False`, `shared`,
    the encoder's and the decoder's `embed_tokens` are three parameters, each loaded from its checkpoint key (a
    checkpoint holding only `shared` gives it to both, [`LongDocBartPreTrainedModel.tie_weights`])."""

    def __init__(self, config: LongDocBartConfig):
        BartModel.__init__(self, config)
        self.encoder = LongDocBartEncoder(config)
        self.decoder = LongDocBartDecoder(config)
        if config.tie_word_embeddings:  # one embedding for both; untied, each keeps its own, as in `BartModel`
            self.encoder.embed_tokens = self.shared
            self.decoder.embed_tokens = self.shared
        self.post_init()
        self.register_forward_pre_hook(_keyword_arguments_hook, with_kwargs=True)


# where [`LongDocBartForConditionalGeneration.forward`] finds `labels` among BART's arguments, and
# [`_check_forward_batches`] the token inputs
_BART_FORWARD_SIGNATURE = inspect.signature(BartForConditionalGeneration.forward)
_BART_MODEL_SIGNATURE = inspect.signature(BartModel.forward)


def _checked_stored_outputs(model, encoder_outputs):
    """Stored encoder outputs (read back from a store, so they carry a `model_fingerprint`) checked once for `model`:
    they must come from its encoder (otherwise another model's states would be decoded as if they were its own), and
    their states are cast to its dtype (a store keeps them in fp16 by default).

    Returns:
        `encoder_outputs` itself when it carries no fingerprint; else a new output of the same type, its states in the
        model's dtype and without the fingerprint (checked: the decoding steps of one `generate` do not check or cast
        it again).

    Raises:
        ValueError: `encoder_outputs` made by another model's encoder (both fingerprints named).
    """
    stored = getattr(encoder_outputs, "model_fingerprint", None)
    if stored is None:
        return encoder_outputs
    mine = model.representation_fingerprint()
    if stored != mine:
        raise ValueError(f"`encoder_outputs` were made by encoder {stored[:16]}..., this model's is {mine[:16]}...: "
                         "re-encode the documents with this model.")
    fields = {key: value for key, value in encoder_outputs.items() if key != "model_fingerprint"}
    states = fields.get("last_hidden_state")
    if torch.is_tensor(states) and states.is_floating_point() and states.dtype != model.dtype:
        fields["last_hidden_state"] = states.to(model.dtype)
    return type(encoder_outputs)(**fields)


def _keyword_arguments_hook(model, args, kwargs):
    """Forward pre-hook of [`LongDocBartModel`] (and, through [`_stored_encoder_outputs_hook`], of
    [`LongDocBartForConditionalGeneration`]), whose `forward` is BART's: a keyword argument BART's `forward` does not
    take (a misspelling such as `encoder_output=`) would be swallowed by its `**kwargs` and the model would run
    without it; it raises a `TypeError` naming it instead ([`_check_keyword_arguments`]). A keyword it takes but does
    not read (`position_ids`, `is_causal`, flash attention's packing arguments, ...: [`_BART_UNREAD_KEYWORDS`], and
    `num_items_in_batch` for the bare model, which computes no loss) and `token_type_ids` marking a second segment
    raise a `ValueError` naming them ([`_refuse_unread_keywords`], [`_check_no_token_types`]); so do `input_ids`,
    `labels` or `decoder_input_ids` that are not 2-D (`decoder_inputs_embeds` not 3-D) or are empty
    ([`_check_forward_batches`])."""
    _check_keyword_arguments(model, kwargs)
    unread = _BART_MODEL_UNREAD_KEYWORDS if isinstance(model, LongDocBartModel) else _BART_UNREAD_KEYWORDS
    _refuse_unread_keywords(model, kwargs, unread)
    _check_no_token_types(model, kwargs.get("token_type_ids"), _LONGDOC_SECOND_TEXT)
    _check_forward_batches(model, args, kwargs)


def _check_forward_batches(model, args, kwargs) -> None:
    """The token inputs of BART's `forward` (by position or keyword) checked by name before it reads them: BART
    shifts `labels` (or, without decoder inputs and labels, `input_ids`) right into the decoder's inputs, which
    fails on 1-D or empty ids with a bare `IndexError`, and unpacks the decoder inputs' shape with a bare
    `ValueError` or a reshape error.

    Raises:
        ValueError: `labels`, `decoder_input_ids` or `input_ids` that are not `(batch_size, text_length)`, or
            `decoder_inputs_embeds` not `(batch_size, text_length, d_model)`, or any of them with an empty batch or
            text ([`_check_batch_of_texts`]).
    """
    if args:  # by position too: matched to BART's signature
        signature = _BART_FORWARD_SIGNATURE if isinstance(model, BartForConditionalGeneration) else _BART_MODEL_SIGNATURE
        try:
            arguments = signature.bind(model, *args, **kwargs).arguments
        except TypeError:  # BART's own call raises it, naming the argument
            return
    else:  # keywords only, as `generate` and the conditional model call it at every step: nothing to bind
        arguments = kwargs
    _check_batch_of_texts(arguments.get("labels"), "labels")
    _check_batch_of_texts(arguments.get("input_ids"), "input_ids")
    _check_batch_of_texts(arguments.get("decoder_input_ids"), "decoder_input_ids")
    _check_batch_of_texts(arguments.get("decoder_inputs_embeds"), "decoder_inputs_embeds", dims=3)


def _stored_encoder_outputs_hook(model, args, kwargs):
    """Forward pre-hook of [`LongDocBartForConditionalGeneration`]: a keyword argument BART's `forward` does not take
    raises a `TypeError` ([`_keyword_arguments_hook`]); `encoder_outputs` are checked and cast by
    [`_checked_stored_outputs`] (outputs without a fingerprint pass unchanged)."""
    _keyword_arguments_hook(model, args, kwargs)
    encoder_outputs = kwargs.get("encoder_outputs")
    if encoder_outputs is not None:
        _check_encoder_outputs_inputs(model, encoder_outputs, kwargs.get("attention_mask"))
    checked = _checked_stored_outputs(model, encoder_outputs) if encoder_outputs is not None else None
    if checked is encoder_outputs:
        return None
    return args, {**kwargs, "encoder_outputs": checked}


def _check_encoder_outputs_inputs(model, encoder_outputs, attention_mask) -> None:
    """Given `encoder_outputs`, the decoder reads their states under `attention_mask`: a mask of another shape than
    the states' `(batch_size, length)` would be broadcast or ignored and decode the wrong tokens (or another row's),
    and states of another width would fail deep in a matrix product; both are named.

    Raises:
        ValueError: `attention_mask` not of the states' `(batch_size, length)`, or states whose width is not
            `config.d_model`.
    """
    states = encoder_outputs[0] if isinstance(encoder_outputs, (tuple, list)) else getattr(
        encoder_outputs, "last_hidden_state", None)
    if not torch.is_tensor(states) or states.dim() != 3:
        return
    if states.shape[-1] != model.config.d_model:
        raise ValueError(f"`encoder_outputs` hold states of width {states.shape[-1]}, this model's d_model is "
                         f"{model.config.d_model}: they come from another model.")
    if torch.is_tensor(attention_mask) and tuple(attention_mask.shape) != tuple(states.shape[:2]):
        raise ValueError(f"`attention_mask` of shape {tuple(attention_mask.shape)} does not match `encoder_outputs` "
                         f"of (batch_size, length) {tuple(states.shape[:2])}: pass the mask the documents were "
                         "encoded with, row for row.")


class LongDocBartForConditionalGeneration(LongDocBartPreTrainedModel, BartForConditionalGeneration):
    r"""
    LongDoc BART for summarization (Kosaraju, Ang and Nabulsi, "Faster Transformers for Document Summarization",
    §2.3 "Proposed Models", Fig. 1): [`LongDocBartModel`] and BART's LM head. `forward` (with `@can_return_tuple`),
    `generate()` (greedy, beam, batched, `encoder_outputs` reused) and the loss are BART's (the loss reads
    `num_items_in_batch`, which BART's does not, see [`forward`]); parameter names are
    BART's, so `from_pretrained(<any BART checkpoint>)` loads every BART weight unchanged and reports only the new
    `conv.conv` / `conv.deconv` weights of convolutional types as missing (initialized as documented in
    [`LongDocConvolution`]). One difference: a keyword argument BART's `forward` does not take (a misspelling such as
    `encoder_output=`) raises a `TypeError` naming it, where BART's `**kwargs` would swallow it, and one it takes but
    does not read (`position_ids`, `is_causal`, `logits_to_keep` other than 0, flash attention's packing arguments,
    `output_router_logits=True`, `token_type_ids` marking a second segment) a `ValueError`
    ([`_stored_encoder_outputs_hook`]). `cache_position` is accepted and not read: the decoder's positions follow its
    cache, as in transformers' BART (which reads none from 5.24 on).

    Equivalences (tested): with `neighborhood_radius >= ` the input length, `"neighborhood"` (encoder and decoder)
    computes `BartForConditionalGeneration`'s logits; `"convolutional"` with kernel 1, stride 1 and the initial
    (identity) convolutions computes BART's full attention.

    Example:

    ```python
    >>> from transformers.dynamic_module_utils import get_class_from_dynamic_module
    >>> # this class, from a LongDoc checkpoint that carries this file (a Hub repo, or a folder `save_pretrained` wrote):
    >>> # nothing but transformers is needed
    >>> LongDocBartForConditionalGeneration = get_class_from_dynamic_module(
    ...     "modeling_longdoc_bart.LongDocBartForConditionalGeneration", "path/to/longdoc-checkpoint")  # doctest: +SKIP
    >>> model = LongDocBartForConditionalGeneration.from_pretrained(
    ...     "facebook/bart-base", encoder_attention_type="neighborhood", neighborhood_radius=100)  # doctest: +SKIP
    ```
    """

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: LongDocBartConfig):
        LongDocBartPreTrainedModel.__init__(self, config)
        self.model = LongDocBartModel(config)
        self.final_logits_bias = nn.Buffer(torch.zeros((1, self.model.shared.num_embeddings)))
        self.lm_head = nn.Linear(config.d_model, self.model.shared.num_embeddings, bias=False)
        self._fingerprint_cache = None
        self.post_init()
        self.register_forward_pre_hook(_stored_encoder_outputs_hook, with_kwargs=True)

    @torch.no_grad()
    def generate(self, *args, **kwargs):
        r"""`GenerationMixin.generate`. Stored encoder outputs (`encoder_outputs=`, e.g. `LongDocBartAdapter.read`
        of a store) are checked against this model's fingerprint and cast to its dtype once per call
        ([`_checked_stored_outputs`]), and are never modified: beam search expands a new object, so the same
        outputs can be passed again. `token_type_ids`, which a BERT tokenizer returns with the ids
        (`model.generate(**tokenizer(text, return_tensors="pt"))`), are dropped: BART has no token types, and `forward`
        ignores them too (`GenerationMixin` would refuse them as unused). `prefill_chunk_size` reads the decoder's
        prompt in one call (see [`_prefill`]).

        Raises:
            ValueError: `encoder_outputs` that carry another model's `model_fingerprint`, or whose states do not match
                `attention_mask` or `d_model` ([`_check_encoder_outputs_inputs`]); `input_ids` or `decoder_input_ids`
                that are not 2-D or hold an empty batch or text ([`_check_batch_of_texts`]); `assistant_model` with
                `encoder_outputs` (the assistant's encoder reads the text itself: pass `input_ids`).
            TypeError: `input_ids` or `attention_mask` that are not tensors (a list, a numpy array); `input_ids` that
                are not integers.
        """
        kwargs.pop("token_type_ids", None)
        input_ids = args[0] if args else kwargs.get("inputs", kwargs.get("input_ids"))
        _check_tensor_arguments({"input_ids": input_ids}, {"attention_mask": kwargs.get("attention_mask")})
        _check_batch_of_texts(input_ids, "input_ids")
        _check_batch_of_texts(kwargs.get("decoder_input_ids"), "decoder_input_ids")
        encoder_outputs = kwargs.get("encoder_outputs")
        if encoder_outputs is not None and kwargs.get("assistant_model") is not None:
            raise ValueError("`assistant_model` (assisted decoding) cannot be used with `encoder_outputs`: the "
                             "assistant runs its own encoder on the text, which stored encoder outputs do not carry. "
                             "Pass the document as `input_ids` (with `attention_mask`), or use "
                             "`prompt_lookup_num_tokens=` with the stored outputs.")
        if encoder_outputs is not None:
            _check_encoder_outputs_inputs(self, encoder_outputs, kwargs.get("attention_mask"))
            checked = _checked_stored_outputs(self, encoder_outputs)
            # a new object either way: generate expands it in place for beams
            kwargs["encoder_outputs"] = copy.copy(encoder_outputs) if checked is encoder_outputs else checked
        return super().generate(*args, **kwargs)

    # Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart.ReadOnceBartForConditionalGeneration.prepare_inputs_for_generation
    def prepare_inputs_for_generation(self, *args, tokenizer=None, **kwargs):
        r"""`GenerationMixin.prepare_inputs_for_generation` (the `forward` inputs of one `generate()` step), without
        `tokenizer`: `generate(stop_strings=..., tokenizer=...)` reads the tokenizer for the stop strings, and its
        greedy, sampling and beam search hand it on with the model's inputs. `forward` reads no tokenizer and refuses
        one, as any keyword it does not read, so it is dropped here, where generation builds the inputs.

        Args:
            *args, **kwargs: those of `GenerationMixin.prepare_inputs_for_generation`.
            tokenizer (`PreTrainedTokenizerBase`, *optional*): the tokenizer given to `generate()`; not used here.

        Returns:
            `dict`: the keyword arguments of the step's `forward` call, as `GenerationMixin` builds them.
        """
        return super().prepare_inputs_for_generation(*args, **kwargs)

    def _prefill(self, input_ids, generation_config, model_kwargs, *args, **kwargs):
        r"""`GenerationMixin._prefill` (the first decoder forward of `generate()`), with the decoder's prompt read in
        one call whatever `prefill_chunk_size` says: transformers' chunk loop cuts `attention_mask` to the decoder's
        chunk, and here `attention_mask` is the encoder's (the document's), which the cross-attention reads whole.
        The document itself is read by the encoder, before this step; the decoder's prompt is its start token (or
        the `decoder_input_ids` given), so the tokens are those of the unchunked call.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, decoder_length)`), generation_config, model_kwargs,
                *args, **kwargs: those of `GenerationMixin._prefill` (neither `generation_config` nor `model_kwargs`
                is modified).

        Returns:
            what `GenerationMixin._prefill` returns (the prefill's model output).
        """
        if getattr(generation_config, "prefill_chunk_size", None) is not None:
            generation_config = copy.copy(generation_config)
            generation_config.prefill_chunk_size = None
        return super()._prefill(input_ids, generation_config, model_kwargs, *args, **kwargs)

    # BART's signature (`inspect.signature` follows `__wrapped__`), as `generate()` and `Trainer` read it
    @functools.wraps(BartForConditionalGeneration.forward, assigned=(), updated=())
    def forward(self, *args, **kwargs):
        r"""`BartForConditionalGeneration.forward`: its arguments (by position or keyword), outputs and errors, with
        one difference in the loss. Given `labels` and `num_items_in_batch` (`int` or `torch.Tensor`, keyword: what
        `Trainer` passes, the number of targets of all the batches it accumulates for one step), the loss is the sum
        of the target tokens' cross-entropies divided by `num_items_in_batch`, as transformers' causal LMs take it,
        instead of their mean: BART's forward does not read it, so `Trainer`, which leaves the losses of the
        batches it accumulates unscaled for a model that takes it, trained with their gradients added (twice those
        of the whole batch at two accumulated batches). Without labels it changes nothing (no loss).

        Returns:
            `Seq2SeqLMOutput` (or BART's tuple with `return_dict=False`), the loss first when `labels` are given.

        Raises:
            As `BartForConditionalGeneration.forward`, and as the checks of [`_stored_encoder_outputs_hook`] (a
            keyword argument it does not take, one it takes but does not read, stored encoder outputs of another
            model); `ValueError` naming `input_ids`, `labels` or `decoder_input_ids` when they are not 2-D
            (`decoder_inputs_embeds` not 3-D) or hold an empty batch or text ([`_check_forward_batches`]), and
            naming `num_items_in_batch` when it comes without `labels`, `decoder_input_ids` or
            `decoder_inputs_embeds` ([`_check_loss_count_has_decoder_inputs`]).
        """
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if num_items_in_batch is not None:
            try:
                bound = _BART_FORWARD_SIGNATURE.bind(self, *args, **kwargs).arguments
            except TypeError:  # arguments BART does not take: its forward names them below
                bound = {"labels": True}
            _check_loss_count_has_decoder_inputs(self, num_items_in_batch, bound.get("labels"),
                                                 bound.get("decoder_input_ids"), bound.get("decoder_inputs_embeds"))
        outputs = super().forward(*args, **kwargs)
        if num_items_in_batch is None:
            return outputs
        labels = _BART_FORWARD_SIGNATURE.bind(self, *args, **kwargs).arguments.get("labels")
        if labels is None:
            return outputs
        logits = outputs[1] if isinstance(outputs, tuple) else outputs.logits
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                           labels.to(logits.device).reshape(-1), ignore_index=-100, reduction="sum")
        loss = loss / (num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch)
                       else num_items_in_batch)
        if isinstance(outputs, tuple):
            return (loss, *outputs[1:])
        outputs.loss = loss
        return outputs

    def representation_fingerprint(self) -> str:
        """SHA-256 hex of what the encoder's outputs depend on: the encoder's weights (`model.encoder.*`, the
        token table it reads included: `shared`, or its own with `tie_word_embeddings=False`), every config field
        that can change them (all of `config.to_dict()` except the metadata in `_FINGERPRINT_IGNORED_FIELDS` and the
        `decoder_*` fields: `encoder_attention_type`, `neighborhood_radius`, `conv_kernel_size`, `conv_stride`,
        dimensions, activation, ...), the transformers major version and the compute dtype (the dtype of each
        encoder weight that is not float32, [`_compute_dtype_tag`]: float32 weights hash as they did before dtypes
        were keyed, so a float16 checkpoint computing in float32 and in float16 has two fingerprints). The key under which stored encoder outputs (read
        once, §2.3's encoder run once per document) are found again; the decoder and LM head are not hashed, so
        fine-tuning only the decoder keeps the key.

        Computed only when asked (storing or checking encoder outputs; a training forward never hashes), and cached
        until the config changes or an encoder parameter is replaced or modified in place (torch's version
        counters), as `ReadOnceBartDocumentEncoder.representation_fingerprint`.

        Returns:
            `str`: 64 hex characters.
        """
        params = list(self.get_encoder().named_parameters())
        config_json = _config_fingerprint(self.config, LongDocBartConfig)
        tag = "longdoc_bart_encoder|" + _compute_dtype_tag(params)
        return _weights_fingerprint(self, tag, config_json, params, hash_dtypes=False)


LongDocBartConfig.register_for_auto_class()
LongDocBartModel.register_for_auto_class("AutoModel")
LongDocBartForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "LongDocBartAttention",
    "LongDocBartDecoder",
    "LongDocBartDecoderLayer",
    "LongDocBartEncoder",
    "LongDocBartEncoderLayer",
    "LongDocBartForConditionalGeneration",
    "LongDocBartModel",
    "LongDocBartPreTrainedModel",
    "LongDocConvolution",
    "compress_padding_mask",
    "default_neighborhood_block_size",
    "neighborhood_attention_forward",
]
