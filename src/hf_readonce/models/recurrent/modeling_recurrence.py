# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""The recurrence of Yoshida, Ettinger & Gimpel (2020), "Adding Recurrence to Pretrained Transformers for Improved
Efficiency and Context Size", shared by every model family of hf-readonce (GPT-2, Llama, ...).

A long input is cut into windows of `window_size` tokens (consecutive windows share `window_overlap` tokens,
§4.2). Each window's hidden states are pooled (eq. 1), passed through a small feed-forward network, and the resulting
vector is inserted at layer L of the *next* window as one extra key and value that every position may attend to,
never as a query (§3.1, Figure 2). The first window has no extra entry, so it is exactly the pretrained model.

What lives here (no family specifics):

- [`RecurrencePooling`] (eq. 1), [`RecurrenceFeedForward`], [`RecurrenceModule`] (the `recurrence` submodule of every
  recurrent model: all new parameters);
- [`memory_attention_mask`] and [`memory_attention_forward`]: attention of one layer over `[memory; keys]`;
  [`MemoryAttentionMixin`]: the memory-aware attention of layer L, over a family's own projections;
- [`RecurrentCache`]: the KV cache of the current window plus the recurrent state, for `generate()`;
- [`RecurrentCausalLMMixin`]: windowing, loss (each target counted once), backpropagation through time, window-level
  gradient checkpointing (§3.2), the cached streaming path and `generate()` support. A family only provides
  the backbone hooks of [`RecurrentCausalLMMixin`] and the projection hooks of [`MemoryAttentionMixin`].

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch and transformers.
"""

import copy
import difflib
import functools
import inspect
from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, logging

from .configuration_recurrence import _is_int, set_recurrence_config

logger = logging.get_logger(__name__)

# why `output_attentions` / `output_hidden_states` have nothing to return here (said by the refusal and the warning)
_NO_PER_LAYER_OUTPUTS = ("a stream is read window by window (positions restart in each, and layer L attends to the "
                         "recurrent vector as one more key, §3), so it has no one (sequence, sequence) attention "
                         "matrix or hidden state per layer")

IGNORE_INDEX = -100

# Copied from hf_readonce.models.block_attention_llama.modeling_block_attention_llama.CACHE_NAME
# transformers 5.24 renamed `past_key_values` to `cache`: the field of every ModelOutput and the argument of `forward`,
# `generate`, the decoder layers, the attention modules and the mask functions (the old name stays accepted there,
# deprecated). Earlier 5.x releases know only `past_key_values`. This file accepts both names and passes on the one of
# the installed transformers.
CACHE_NAME = "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"


# Copied from hf_readonce.models.block_attention_llama.modeling_block_attention_llama._either_cache with _either_cache->either_cache
def either_cache(past_key_values, cache):
    """The KV cache given as `past_key_values` or as `cache` (transformers >= 5.24's name); both: `ValueError`."""
    if past_key_values is not None and cache is not None and past_key_values is not cache:
        raise ValueError("Pass the cache as `cache` or as `past_key_values`, not both.")
    return past_key_values if past_key_values is not None else cache


def _check_prefill_chunk_size(chunk) -> None:
    """Raise a `ValueError` unless `prefill_chunk_size` is None or an int >= 1 (a bool is refused)."""
    if chunk is not None and (isinstance(chunk, bool) or not _is_int(chunk) or chunk < 1):
        raise ValueError(f"`prefill_chunk_size` must be an int >= 1 (or None), got {chunk!r}.")


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_token_ids
def _check_token_ids(ids, bound: int, argument: str) -> None:
    """Raise a `ValueError` naming `argument` and the bound if a token id of `ids` is outside `[0, bound)` (called
    when the embedding lookup fails, so the normal path costs nothing)."""
    if torch.is_tensor(ids) and ids.numel() and not ids.is_floating_point():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise ValueError(f"`{argument}` holds token id {low if low < 0 else high}, outside the vocabulary "
                             f"[0, {bound}) of this model.") from None


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
# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._DEBUG_IO
# transformers' I/O debugger, which its own forwards run when asked (`debug_io=True`); a forward of this project that
# calls none of them refuses it
_DEBUG_IO = ("transformers' I/O debugger does not run inside this forward: wrap the call in `with "
             "transformers.model_addition_debugger_context(model, debug_path):` instead")
# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._UNREAD_DEBUG_KEYWORDS
_UNREAD_DEBUG_KEYWORDS = {"debug_io": (False, _DEBUG_IO), "debug_io_dir": (None, _DEBUG_IO),
                          "prune_layers": (None, _DEBUG_IO)}


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


# What the recurrent models' forward leaves unread besides [`_UNREAD_KEYWORDS`] and transformers' I/O debugger options,
# for [`_refuse_unread_keywords`] (`position_ids`, `token_type_ids` and `inputs_embeds` are refused on their own).
_RECURRENT_UNREAD_KEYWORDS = {
    **_UNREAD_KEYWORDS,
    **_UNREAD_DEBUG_KEYWORDS,
    "is_causal": (True, "a stream is read causally, window by window (§3); `is_causal=False` would not make it "
                        "bidirectional"),
    "cache_position": (None, "a stream counts its own positions, which restart in every window (§3): continue a "
                             "stream with its `past_key_values` (the `RecurrentCache`) or its `recurrent_state`"),
}


# ----------------------------------------------------------------------------------------------------- modules
class RecurrencePooling(nn.Module):
    r"""Eq. 1: mean over the positions of a window, weighted sum over the layers.

    `h = sum_{l=1..N} w_l * (1/k) * sum_{i=1..k} h_i^l`, with `w = softmax(alpha)` and `alpha` (`layer_logits`,
    shape `(N,)`) learned, initialized to zeros (uniform weights). `h_i^l` is the output of layer l (1-based,
    before any final norm) at position i of the window.
    """

    def __init__(self, num_layers: int):
        super().__init__()
        self.layer_logits = nn.Parameter(torch.zeros(num_layers))

    def layer_weights(self) -> torch.Tensor:
        """`w = softmax(alpha)`, shape `(N,)`, float32."""
        return torch.softmax(self.layer_logits.float(), dim=0)

    def forward(self, layer_sums: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
        r"""
        Args:
            layer_sums (`torch.FloatTensor` of shape `(batch_size, N, hidden_size)`): per layer, the sum of the
                hidden states over the window's (non-padding) positions (float32 from [`masked_layer_sum`]; any
                dtype is accepted).
            token_counts (`torch.Tensor` of shape `(batch_size,)`): k, the number of positions summed (0 is treated
                as 1, giving a zero vector).

        Returns:
            `torch.FloatTensor` of shape `(batch_size, hidden_size)`, float32: the pooled window representation.
            The mean and the layer mixture are computed in float32 whatever the model dtype (bf16/fp16 models
            included), so the training and generation paths pool the same sums identically.
        """
        counts = token_counts.to(torch.float32).clamp(min=1)
        means = layer_sums.float() / counts[:, None, None]
        return torch.einsum("l,blh->bh", self.layer_weights(), means)


class RecurrenceFeedForward(nn.Module):
    r"""The feed-forward network of §3.1 (3 hidden layers of 200 in §5): `hidden_size -> sizes... -> hidden_size`,
    with `activation` after every layer but the last. With no hidden sizes it is a single linear map."""

    def __init__(self, hidden_size: int, hidden_sizes, activation: str):
        super().__init__()
        widths = [hidden_size, *hidden_sizes, hidden_size]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.act = ACT2FN[activation]

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """`(batch_size, hidden_size)` -> `(batch_size, hidden_size)`."""
        x = pooled
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = self.act(x)
        return x


class RecurrenceModule(nn.Module):
    r"""All parameters the recurrence adds to a pretrained model (the `recurrence` submodule): pooling (eq. 1) and
    the feed-forward network producing the vector inserted in the next window (§3.1).

    Args:
        config: a recurrent config (`hidden_size`, `num_hidden_layers`, `recurrence_hidden_sizes`,
            `recurrence_activation`).
    """

    def __init__(self, config):
        super().__init__()
        self.pooling = RecurrencePooling(config.num_hidden_layers)
        self.ffn = RecurrenceFeedForward(
            config.hidden_size, config.recurrence_hidden_sizes, config.recurrence_activation
        )

    def forward(self, layer_sums: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
        r"""
        Args:
            layer_sums (`torch.FloatTensor` of shape `(batch_size, N, hidden_size)`): see [`RecurrencePooling`].
            token_counts (`torch.Tensor` of shape `(batch_size,)`).

        Returns:
            `torch.FloatTensor` of shape `(batch_size, hidden_size)` in the dtype of the feed-forward network's
            weights: the recurrent vector for the next window. Pooling runs in float32 (see [`RecurrencePooling`]);
            its result is cast back to the network's dtype.
        """
        pooled = self.pooling(layer_sums, token_counts)
        return self.ffn(pooled.to(self.ffn.layers[0].weight.dtype))


# ----------------------------------------------------------------------------------------------------- attention
def memory_attention_implementation(config) -> str:
    """Attention implementation used at the memory layer: the model's own (`config._attn_implementation`) when it
    is `"eager"` or `"sdpa"`; any other backend (flash, flex, kernels) falls back to sdpa for this one layer, which
    needs an explicit 4-D mask over `[memory; keys]`."""
    return config._attn_implementation if config._attn_implementation in ("eager", "sdpa") else "sdpa"


def memory_attention_mask(
    attention_mask: torch.Tensor | None,
    batch_size: int,
    query_length: int,
    past_length: int,
    dtype: torch.dtype,
    device: torch.device,
    implementation: str,
) -> torch.Tensor:
    r"""4-D mask for layer L's attention over `[memory; past keys; new keys]` (§3.1, Figure 2).

    Key 0 is the recurrent vector: every query may attend to it. The other keys follow the usual causal rule (query
    at window position `past_length + i` sees window positions `<= past_length + i`) and the key padding mask.

    Args:
        attention_mask (`torch.Tensor` of shape `(batch_size, >= past_length + query_length)`, *optional*):
            1 for tokens, 0 for padding; its last `past_length + query_length` columns are used.
        batch_size, query_length, past_length (`int`): shapes of the current call (window positions).
        dtype, device: dtype of the additive mask (eager) and device.
        implementation (`str`): `"eager"` (additive float mask, 0 or dtype min) or `"sdpa"` (bool, True = attend).

    Returns:
        `torch.Tensor` of shape `(batch_size, 1, query_length, 1 + past_length + query_length)`.
    """
    kv_length = past_length + query_length
    query_positions = torch.arange(past_length, kv_length, device=device)
    allowed = torch.arange(kv_length, device=device)[None, :] <= query_positions[:, None]
    allowed = allowed[None, None].expand(batch_size, 1, query_length, kv_length)
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, None, -kv_length:].to(device=device, dtype=torch.bool)
    memory_column = torch.ones(batch_size, 1, query_length, 1, dtype=torch.bool, device=device)
    allowed = torch.cat([memory_column, allowed], dim=-1)
    if implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    return allowed


def memory_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    memory_key: torch.Tensor,
    memory_value: torch.Tensor,
    attention_mask: torch.Tensor,
    eager_attention: callable,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    r"""Attention of the window's queries over `[memory; keys]`: the recurrent vector is one extra key and value,
    never a query (§3.1: "for a window size of 300 tokens, there are 301 inputs to layer L, but still only 300
    outputs").

    Args:
        module (`nn.Module`): the attention module (its `config._attn_implementation` picks the attention function
            through `ALL_ATTENTION_FUNCTIONS.get_interface`, see [`memory_attention_implementation`]).
        query (`torch.Tensor` of shape `(batch_size, num_heads, query_length, head_dim)`).
        key, value (`torch.Tensor` of shape `(batch_size, num_kv_heads, kv_length, head_dim)`): window keys/values
            (cached ones included).
        memory_key, memory_value (`torch.Tensor` of shape `(batch_size, num_kv_heads, 1, head_dim)`): the recurrent
            vector projected by this layer's own key/value projections.
        attention_mask (`torch.Tensor`): from [`memory_attention_mask`], `(batch_size, 1, query_length,
            1 + kv_length)`.
        eager_attention (`callable`): the family's eager attention function (the interface's default).
        dropout (`float`), scaling (`float`): as in transformers' attention interface.

    Returns:
        `(attn_output (batch_size, query_length, num_heads, head_dim), attn_weights or None)`.
    """
    key = torch.cat([memory_key.to(key.dtype), key], dim=2)
    value = torch.cat([memory_value.to(value.dtype), value], dim=2)
    # Adapted from transformers' LlamaAttention.forward: the attention function comes from the attention interface
    attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
        memory_attention_implementation(module.config), eager_attention
    )
    return attention_interface(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


class MemoryAttentionMixin:
    r"""The attention of layer L over `[memory; keys]` (§3.1, Figure 2), the same algorithm for every family: mixed
    in before a family's transformers attention class (`class RecurrentLlamaAttention(MemoryAttentionMixin,
    LlamaAttention)`), whose parameters it reuses, so pretrained weights load unchanged.

    Without `memory_states` `forward` is the family's own attention, unchanged (the first window is the pretrained
    model). With `memory_states` (the recurrent vector after the block's pre-attention norm), the window's queries,
    keys and values are projected as the family does, the keys/values go through the KV cache, the recurrent vector
    is projected by the layer's own key/value weights into one extra key and value (never a query, never cached:
    it is recomputed at each call from the cached recurrent vector), [`memory_attention_forward`] attends the `w`
    queries over the `1 + past + w` keys, and the `w` outputs are projected back: 301 inputs to layer L for a
    300-token window, still 300 outputs.

    A family provides its projections as hooks:

    - `_project_window(hidden_states, position_embeddings)` -> `(query, key, value)` of the window;
    - `_project_memory(memory_states)` -> `(memory_key, memory_value)`;
    - `_project_output(attn_output)` -> the layer's output;
    - `_attention_dropout()` -> the dropout probability of the attention weights in training;
    - `_eager_attention`: the family's eager attention function (class attribute, a `staticmethod`).

    `forward` takes its arguments in the order of transformers' `LlamaAttention` (`hidden_states`,
    `position_embeddings`, `attention_mask`, cache, then `memory_states`, `cache`); a family whose transformers
    attention orders them otherwise keeps that order in a thin `forward` of its own that calls this one (GPT-2: the
    cache second, and the cross-attention arguments). A hook left undefined raises `NotImplementedError`.
    """

    _eager_attention = None

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        memory_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, w, hidden_size)`): normalized window states.
            position_embeddings (`tuple(cos, sin)`, *optional*): rotary embeddings of the window positions, for the
                families that use them (`None` for absolute positions).
            attention_mask (`torch.Tensor`): the usual causal mask, or with `memory_states` the mask of
                [`memory_attention_mask`] (`(batch_size, 1, w, 1 + past + w)`).
            past_key_values (`Cache`, *optional*): KV cache of the current window.
            memory_states (`torch.FloatTensor` of shape `(batch_size, 1, hidden_size)`, *optional*): the recurrent
                vector after the block's pre-attention norm.
            cache (`Cache`, *optional*): the name of `past_key_values` from transformers 5.24 on (what the decoder
                blocks pass there); either name is accepted, not both.
            kwargs: passed on to the attention function (and, without `memory_states`, to the family's attention).

        Returns:
            `(attn_output (batch_size, w, hidden_size), attn_weights or None)`.

        Raises:
            ValueError: both `past_key_values` and `cache`.
            NotImplementedError: with `memory_states`, a projection hook or `_eager_attention` the family left
                undefined.
        """
        past_key_values = either_cache(past_key_values, cache)
        if memory_states is None:
            if position_embeddings is not None:
                kwargs["position_embeddings"] = position_embeddings
            return super().forward(hidden_states, attention_mask=attention_mask, **{CACHE_NAME: past_key_values},
                                   **kwargs)
        if self._eager_attention is None:  # the interface's default: needed in eager mode, checked in every mode
            raise NotImplementedError(f"{type(self).__name__} must define `_eager_attention` (the family's eager "
                                      "attention function, a staticmethod).")
        query, key, value = self._project_window(hidden_states, position_embeddings)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        memory_key, memory_value = self._project_memory(memory_states)
        attn_output, attn_weights = memory_attention_forward(
            self,
            query,
            key,
            value,
            memory_key,
            memory_value,
            attention_mask,
            self._eager_attention,
            dropout=self._attention_dropout() if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        return self._project_output(attn_output), attn_weights

    def _project_window(self, hidden_states, position_embeddings):
        r"""The window's query, key and value, as the family's attention computes them (rotary embeddings applied
        where the family uses them), before the KV cache.

        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, w, hidden_size)`).
            position_embeddings (`tuple(cos, sin)` or `None`).

        Returns:
            `(query (batch_size, num_heads, w, head_dim), key, value (batch_size, num_kv_heads, w, head_dim))`.
        """
        raise NotImplementedError(f"{type(self).__name__} must define `_project_window`.")

    def _project_memory(self, memory_states):
        r"""The recurrent vector as one extra key and value of this layer (§3.1), by the layer's own key/value
        weights; no query (the memory is never a query) and no rotation (it has no position in the window).

        Args:
            memory_states (`torch.FloatTensor` of shape `(batch_size, 1, hidden_size)`).

        Returns:
            `(memory_key, memory_value)`, each `(batch_size, num_kv_heads, 1, head_dim)`.
        """
        raise NotImplementedError(f"{type(self).__name__} must define `_project_memory`.")

    def _project_output(self, attn_output):
        r"""The output projection of the attended values (§3.1: one output per window position).

        Args:
            attn_output (`torch.FloatTensor` of shape `(batch_size, w, num_heads * head_dim)`).

        Returns:
            `torch.FloatTensor` of shape `(batch_size, w, hidden_size)`.
        """
        raise NotImplementedError(f"{type(self).__name__} must define `_project_output`.")

    def _attention_dropout(self) -> float:
        """The dropout probability of the attention weights in training (0 is used in eval)."""
        raise NotImplementedError(f"{type(self).__name__} must define `_attention_dropout`.")


def masked_layer_sum(hidden_states: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Sum of `hidden_states` `(batch, length, hidden)` over the positions where `valid` `(batch, length)` is 1
    (the numerator of eq. 1).

    Returns:
        `torch.FloatTensor` of shape `(batch, hidden)`, always float32: the sum is accumulated in float32 whatever
        the dtype of `hidden_states`, so a bf16 model's window sum does not depend on how the window was cut into
        calls (training path: one call per window; generation path: many), and an fp16 sum of large activations over
        a long window cannot overflow (65504).
    """
    hidden_states = hidden_states.float()
    if valid is None:
        return hidden_states.sum(dim=1)
    return (hidden_states * valid[:, :, None].to(torch.float32)).sum(dim=1)


# ----------------------------------------------------------------------------------------------------- cache
def _check_recurrent_state(state, batch_size: int | None, hidden_size: int | None,
                           name: str = "`recurrent_state`") -> None:
    """Raise a `ValueError` naming `name` (and the expected `(batch_size, hidden_size)`) for a recurrent state that is
    not a 2-D floating-point tensor of that shape (a `None` size is not checked). The state is cast to the model's
    dtype where it is inserted: an integer or bool tensor (`torch.zeros(1, 32, dtype=torch.long)`) would otherwise be
    read as a vector silently, and a tensor of another shape would fail deep inside the attention or be broadcast."""
    expected = ", ".join(str(size) if size is not None else "_" for size in (batch_size, hidden_size))
    wanted = f"{name} must be a floating-point tensor of shape (batch_size, hidden_size) = ({expected})"
    if not torch.is_tensor(state):
        raise ValueError(f"{wanted}, got {type(state).__name__}.")
    if not state.is_floating_point():
        raise ValueError(f"{wanted} (the recurrent_state a previous call returned), got dtype {state.dtype}.")
    if state.dim() != 2 or any(size is not None and size != got for size, got in zip((batch_size, hidden_size),
                                                                                      state.shape)):
        raise ValueError(f"{name} must have shape (batch_size, hidden_size) = ({expected}), got "
                         f"{tuple(state.shape)}.")


class RecurrentCache(DynamicCache):
    r"""KV cache of the *current* window plus the recurrent state, so that `generate()` can run past the position
    table: the prompt is consumed window by window, generation continues in the current window with this cache, and
    when the window is full the model rolls into a new one (the KV entries are dropped, the new window receives the
    recurrent vector pooled from the full window, and starts with its last `window_overlap` tokens).

    Attributes:
        recurrent_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)` or `None`): vector inserted at
            layer L in the current window (`None` in the first window); the `recurrent_state` of `forward`'s
            arguments and outputs.
        window_ids (`torch.LongTensor` of shape `(batch_size, window_length)` or `None`): tokens of the current window.
        layer_sums (`torch.FloatTensor` of shape `(batch_size, N, hidden_size)` or `None`): per-layer sums of the
            current window's hidden states (eq. 1 numerator).
        token_counts (`torch.Tensor` of shape `(batch_size,)` or `None`): positions summed in `layer_sums`.
        tokens_seen (`int`): tokens of the stream consumed so far (all windows); for a padded batch, columns of
            `input_ids` (padding included).
        num_windows (`int`): windows started so far.
        rows (`list[RecurrentCache]` or `None`): for a padded batch, one cache per row, each holding that row's own
            stream (its real tokens only); `None` for an unpadded batch, whose rows share this cache's windows.

    Padded batches (e.g. left-padded prompts in `generate()`): a row's windows are cut after its own W real tokens,
    so rows whose prompts differ in length roll into a new window at different steps, and one KV cache whose windows
    are cut at the same column for every row cannot hold them. The first call that meets padding therefore gives
    every row its own cache (`rows`) and runs the rows one at a time on their real tokens: positions, windows and
    the recurrent vector of each row are then exactly those of the row generated alone (tested), at the cost of
    running the rows one after another. Unpadded batches keep the batched path.

    Args:
        config (`PretrainedConfig`, *optional*): passed to `DynamicCache`.
        recurrent_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): the vector inserted
            at layer L in the current window (see `Attributes`; `None` in a stream's first window).

    Raises:
        ValueError: if the state is not a floating-point tensor of shape `(batch_size, hidden_size)` (`hidden_size`
            checked when `config` has one; the batch size is checked when the stream starts).
    """

    def __init__(self, config=None, recurrent_state: torch.Tensor | None = None):
        super().__init__(config=config)
        self.recurrent_state = recurrent_state
        if self.recurrent_state is not None:
            _check_recurrent_state(self.recurrent_state, None, getattr(config, "hidden_size", None),
                                   "`recurrent_state`")
        self.window_ids = None
        self.layer_sums = None
        self.token_counts = None
        self.tokens_seen = 0
        self.num_windows = 1
        self.rows = None

    @property
    def window_length(self) -> int:
        """Tokens in the current window."""
        return 0 if self.window_ids is None else self.window_ids.shape[1]

    def add_tokens(self, input_ids: torch.Tensor, layer_sums: torch.Tensor, token_counts: torch.Tensor) -> None:
        """Record `input_ids` `(batch, n)` as part of the current window, with their per-layer sums `(batch, N,
        hidden)` and counts `(batch,)`. The running sums are kept in float32 whatever the model dtype (eq. 1 summed
        token by token in bf16 drifts from the one-shot sum of the training path)."""
        layer_sums = layer_sums.float()
        self.window_ids = input_ids if self.window_ids is None else torch.cat([self.window_ids, input_ids], dim=1)
        if self.layer_sums is None:
            self.layer_sums, self.token_counts = layer_sums, token_counts
        else:
            self.layer_sums = self.layer_sums + layer_sums
            self.token_counts = self.token_counts + token_counts

    def drop_key_values(self) -> None:
        """Drop every layer's cached keys and values (the cache length becomes 0), keeping the layer objects.

        Done by hand rather than with `DynamicCache.reset()`, whose meaning changed within transformers 5.x: early
        5.x releases zero the keys and keep their length (the next window would then attend to a window of zero
        keys at shifted positions), later ones drop them. Setting each layer back to its lazily-initialized state
        (`keys = values = None`, `is_initialized = False`, the sliding layers' `cumulative_length = 0`) behaves the
        same in every 5.x release.
        """
        for layer in self.layers:
            layer.keys = layer.values = None
            layer.is_initialized = False
            if hasattr(layer, "cumulative_length"):
                layer.cumulative_length = 0

    def roll(self, recurrent_state: torch.Tensor) -> None:
        """Start a new window that receives `recurrent_state` `(batch, hidden)`: drop the KV entries (see
        [`drop_key_values`]) and the pooling sums."""
        self.drop_key_values()
        self.recurrent_state = recurrent_state
        self.window_ids = self.layer_sums = self.token_counts = None
        self.num_windows += 1

    def reset(self) -> None:
        """Forget everything (KV entries and recurrent state): the next call starts a new stream."""
        self.drop_key_values()
        self.recurrent_state = self.window_ids = self.layer_sums = self.token_counts = None
        self.tokens_seen = 0
        self.num_windows = 1
        self.rows = None

    def _map_state(self, fn) -> None:
        for name in ("recurrent_state", "window_ids", "layer_sums", "token_counts"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, fn(value))

    def _select_rows(self, indices) -> None:
        """Per-row caches `indices` (a row picked twice, as beam search does, gets its own copy: caches are updated
        in place)."""
        picked, rows = set(), []
        for index in (int(i) for i in indices):
            rows.append(copy.deepcopy(self.rows[index]) if index in picked else self.rows[index])
            picked.add(index)
        self.rows = rows

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the rows `beam_idx` (`(batch_size * num_beams,)`) of the KV cache and of the recurrent state, in that
        order (beam search); a padded batch's per-row caches are picked the same way."""
        if self.rows is not None:
            return self._select_rows(beam_idx.tolist())
        super().reorder_cache(beam_idx)
        self._map_state(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row `repeats` times, adjacent (beams, returned sequences), state included."""
        if self.rows is not None:
            return self._select_rows(i for i in range(len(self.rows)) for _ in range(repeats))
        super().batch_repeat_interleave(repeats)
        self._map_state(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices` (contrastive search), state included."""
        if self.rows is not None:
            return self._select_rows(torch.arange(len(self.rows))[indices.cpu()].tolist())
        super().batch_select_indices(indices)
        self._map_state(lambda t: t[indices])

    def crop(self, tokens_to_remove: int) -> None:
        """Not supported: the pooled state of the window cannot be un-added. transformers crops the cache in assisted
        decoding (`assistant_model=`, `prompt_lookup_num_tokens=`); a recurrent model refuses those as the model
        (`_is_stateful`) before the first step, and as another model's `assistant_model` it raises here, after the
        first round of candidate tokens and before `generate` returns anything.

        Raises:
            NotImplementedError: always, naming assisted decoding as the cause.
        """
        raise NotImplementedError(
            "RecurrentCache cannot be cropped: a recurrent model cannot take part in assisted decoding, neither as the "
            "model nor as another model's `assistant_model` (its pooled window state cannot be rolled back to fewer "
            "tokens). Generate without `assistant_model` / `prompt_lookup_num_tokens`.")


# ----------------------------------------------------------------------------------------------------- outputs
@dataclass
class RecurrentCausalLMOutputWithPast(CausalLMOutputWithPast):
    r"""
    Output of the recurrent causal LMs: `CausalLMOutputWithPast` (loss first) plus the recurrent state.

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` is provided):
            Mean next-token cross-entropy (nats) over the stream; each target counted once (overlap tokens are
            context only, §4.2).
        logits (`torch.FloatTensor` of shape `(batch_size, kept_positions, vocab_size)`):
            Logits of the kept positions (`logits_to_keep`), each from the window in which its token is new.
        past_key_values ([`RecurrentCache`], *optional*): returned on the cached path (`use_cache=True`, eval).
            Named `cache` under transformers >= 5.24, as in every ModelOutput there (where `past_key_values` still
            reads it, deprecated).
        recurrent_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
            The vector the next window would receive (pooled from the last, possibly partial, window and passed
            through the feed-forward network). Pass it as `recurrent_state=` to a later call to continue the stream.
        num_windows (`int`): windows run in this call.
    """

    recurrent_state: torch.FloatTensor | None = None
    num_windows: int | None = None


def _several_processes() -> bool:
    """Whether `torch.distributed` runs a process group of more than one process (`torchrun`, `accelerate launch`),
    where the model's gradients are synchronized by hooks that expect each parameter's gradient once per backward."""
    return (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1)


def _targets_of_real_tokens(labels: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """`(batch, T)` targets of a padded batch: at each real column (`real`, bool `(batch, T)`) the label of the next
    real column of its row (a hole of padding skipped), `-100` after the row's last real token and at padding."""
    batch_size, length = labels.shape
    columns = torch.arange(length, device=labels.device).expand(batch_size, length)
    own = torch.where(real, columns, torch.full_like(columns, length))  # each real column's index, else past the end
    after = torch.cat([own[:, 1:], own.new_full((batch_size, 1), length)], dim=1)
    following = after.flip(1).cummin(dim=1).values.flip(1)  # the first real column after each column
    padded = torch.cat([labels, labels.new_full((batch_size, 1), IGNORE_INDEX)], dim=1)
    return padded.gather(1, following).masked_fill(~real, IGNORE_INDEX)


def _leading_padding(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """`(batch,)` count of padding columns before each row's first token, or None when no row starts with padding."""
    real = attention_mask.bool()
    if bool(real[:, 0].all()):
        return None
    # a row of padding only keeps its place (nothing to realign)
    return torch.where(real.any(dim=1), real.long().argmax(dim=1), torch.zeros_like(real[:, 0], dtype=torch.long))


def _roll_rows(tensor: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Each row of `tensor` (`(batch, T, ...)`) rolled along dim 1 by its own `shifts[row]` (torch.roll's sign)."""
    length = tensor.shape[1]
    index = (torch.arange(length, device=tensor.device)[None, :] - shifts[:, None].to(tensor.device)) % length
    index = index.view(*index.shape, *([1] * (tensor.dim() - 2))).expand_as(tensor)
    return tensor.gather(1, index)


def window_spans(length: int, window_size: int, overlap: int,
                 max_positions: int | None = None) -> list[tuple[int, int, int]]:
    r"""Windows of a stream of `length` tokens (§4.2): window j covers `[start, end)`, `start_0 = 0`,
    `start_j = end_{j-1} - overlap`, `end_j = min(start_j + window_size, length)`; `new_from` is the first
    window position whose token is new (0 for the first window, `overlap` after). The last window may be short.

    Args:
        length (`int`), window_size (`int`), overlap (`int`): the stream and its windows.
        max_positions (`int`, *optional*): the model's position table; a window must fit in it (positions restart
            in every window).

    Returns:
        `list[tuple[int, int, int]]`: `(start, end, new_from)` per window.

    Raises:
        ValueError: if `length < 1`, the window/overlap are invalid, or the window exceeds `max_positions`.
    """
    if length < 1:
        raise ValueError(f"a stream needs at least one token, got length {length}.")
    if window_size < 1 or not 0 <= overlap < window_size:
        raise ValueError(f"invalid window_size={window_size} / overlap={overlap}.")
    if max_positions is not None and window_size > max_positions:
        raise ValueError(f"`window_size`={window_size} exceeds the model's {max_positions} position embeddings "
                         "(positions restart in every window, so a window must fit in the position table).")
    spans = [(0, min(window_size, length), 0)]
    while spans[-1][1] < length:
        start = spans[-1][1] - overlap
        spans.append((start, min(start + window_size, length), overlap))
    return spans


# ----------------------------------------------------------------------------------------------------- mixin
class RecurrentCausalLMMixin:
    r"""The base every recurrent causal LM shares (§3): windowing, the window pass with the memory at layer L,
    `forward`, loss (each target counted once), backpropagation through time, window-level gradient checkpointing
    (§3.2), the cached streaming path and `generate()` support. Mixed into a family's `PreTrainedModel` subclass,
    which defines `self.recurrence` ([`RecurrenceModule`]), an LM head (`get_output_embeddings()`), a memory-aware
    attention at layer L ([`MemoryAttentionMixin`]), and these hooks over its transformers backbone:

    - `_decoder_layers()`: the blocks, in order;
    - `_embed(input_ids, position_ids)`: `(batch, w, hidden)` input states (token + absolute position embeddings);
    - `_position_embeddings(hidden_states, position_ids)`: what each block needs for relative positions (RoPE
      `(cos, sin)`), or `None`;
    - `_memory_norm(layer)`: the block's pre-attention norm, applied to the recurrent vector;
    - `_run_layer(layer, hidden_states, **layer_kwargs)`: one block call, returning its hidden states (`layer_kwargs`
      are a transformers block's keyword arguments, the KV cache under [`CACHE_NAME`], plus `memory_states` at
      layer L);
    - `_final_norm(hidden_states)`.

    `generate()` raises a `ValueError` for assisted decoding (`assistant_model`, `prompt_lookup_num_tokens`), before
    the first step: a [`RecurrentCache`] cannot drop the candidate tokens the model rejects (`_is_stateful`).

    Gradient checkpointing (§3.2): `gradient_checkpointing_enable()` checkpoints whole windows, so between windows
    only the recurrent vectors (and the window boundaries) are kept and each window is recomputed during backward;
    the blocks inside a window are not checkpointed a second time. The window checkpoint is reentrant by default
    (`reentrant_window_checkpointing = True`): each window's backward runs as its own autograd pass, so its parameter
    gradients are added into `.grad` as soon as that window is done. A non-reentrant checkpoint puts every window's
    parameter uses into one graph, and autograd then sums the windows' contributions to each parameter in a buffer
    of its own until the last window is back-propagated: one extra copy of all parameter gradients (540 MB for
    SmolLM2-135M in fp32) held beside `.grad` during backward. With the reentrant checkpoint the parameters are not
    in the graph of the returned loss, so `torch.autograd.grad(loss, parameters)` and `loss.backward(inputs=...)` do
    not work (torch raises: the tensors "appear to not have been used in the graph"); set
    `model.reentrant_window_checkpointing = False` for the non-reentrant checkpoint there: same losses and
    gradients, one more copy of the gradients during backward. While `torch.distributed` runs more than one process
    (`torchrun`, `accelerate launch`: `DistributedDataParallel`, which all-reduces each parameter's gradient once,
    when autograd first hands it over) the non-reentrant checkpoint is used whatever the flag says: a reentrant one
    hands each parameter over once per window, and DDP would average the last window's gradients across processes
    and add the other windows' unsynchronized (the processes' parameters then drift apart).
    """

    supports_gradient_checkpointing = True
    reentrant_window_checkpointing = True
    _can_compile_fullgraph = False
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False
    # the recurrent vector and the window a RecurrentCache holds cannot be rolled back to drop rejected tokens:
    # transformers refuses assisted decoding (`assistant_model`, `prompt_lookup_num_tokens`) with a `ValueError`
    # before the first step
    _is_stateful = True

    def __init__(self, config, *args, **kwargs):
        expected = getattr(type(self), "config_class", None)
        if expected is not None and getattr(config, "backbone", None) != expected.backbone:
            # a plain GPT2Config / LlamaConfig, or the other family's recurrent config, has not the fields read below
            raise TypeError(
                f"`config` of {type(self).__name__} must be a {expected.__name__}, got {type(config).__name__} "
                f"(model_type {getattr(config, 'model_type', None)!r}); a plain model converts with "
                "`to_recurrent(model, ...)`."
            )
        # a field assigned on the config after its construction (`config.recurrence_layer = 9`) was never validated:
        # validate again at load, before layer L is looked up (a ValueError naming the field, not an IndexError)
        set_recurrence_config(
            config, max_positions=getattr(config, config.max_positions_attribute),
            num_layers=getattr(config, config.num_layers_attribute), window_size=config.window_size,
            window_overlap=config.window_overlap, recurrence_layer=config.recurrence_layer,
            recurrence_hidden_sizes=config.recurrence_hidden_sizes, recurrence_activation=config.recurrence_activation,
        )
        super().__init__(config, *args, **kwargs)
        # Trainer counts `num_items_in_batch` after the shift for a causal-LM loss type; transformers derives the type
        # from the class name, which `RecurrentGPT2LMHeadModel` does not match (it counted one label per row too many)
        self.loss_type = "ForCausalLM"

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, plus: weights read from a GGUF file (`gguf_file=...`) come back as the
        plain float model they are. transformers dequantizes GGUF tensors to float on load but leaves the model marked
        as quantized, so `Trainer` would refuse to fine-tune it and `save_pretrained` to save it; the marks (its
        quantizer and `config.quantization_config`) are dropped here. Other quantizations are left as loaded.

        Raises:
            whatever `PreTrainedModel.from_pretrained` raises (a missing file, a config field out of range, ...).
        """
        model = super().from_pretrained(*args, **kwargs)
        if str(getattr(model, "quantization_method", None) or "").lower().endswith("gguf"):
            model.hf_quantizer = None
            model.is_quantized = False
            model.quantization_method = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
        return model

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, RecurrencePooling):
            init.zeros_(module.layer_logits)

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=checkpoint,
                                    every_n_layers: int = 1):
        # Window-level checkpointing only (§3.2); the per-block flags of the wrapped transformer stay off.
        self.gradient_checkpointing = enable

    # ------------------------------------------------------------------ one window
    def _window_hidden_states(self, input_ids, attention_mask, memory, past_key_values, use_cache):
        r"""Run the backbone on one window (or the next tokens of the current window when `past_key_values` is
        given), with `memory` inserted at layer L as one extra key and value.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, w)`).
            attention_mask (`torch.Tensor` of shape `(batch_size, w)`, *optional*): 1 for tokens, 0 for padding
                (only without cache).
            memory (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): the recurrent vector.
            past_key_values (`Cache`, *optional*): KV cache of the current window; positions continue after it.
            use_cache (`bool`): write the new keys/values into `past_key_values`.

        Returns:
            `(last_hidden_state (batch_size, w, hidden_size) after the final norm, layer_sums (batch_size,
            num_layers, hidden_size), token_counts (batch_size,))`: the sums are over the non-padding positions of
            each block's output (eq. 1).
        """
        batch_size, width = input_ids.shape
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = torch.arange(past_length, past_length + width, device=input_ids.device).unsqueeze(0)
        hidden_states = self._embed(input_ids, position_ids)
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{CACHE_NAME: past_key_values},
        )
        position_embeddings = self._position_embeddings(hidden_states, position_ids)
        memory_layer = self.config.recurrence_layer - 1
        memory_mask = None
        if memory is not None:
            memory_mask = memory_attention_mask(
                attention_mask, batch_size, width, past_length, hidden_states.dtype, hidden_states.device,
                memory_attention_implementation(self.config),
            )
        valid = attention_mask.to(hidden_states.dtype) if attention_mask is not None else None
        layer_sums = []
        for index, layer in enumerate(self._decoder_layers()):
            layer_kwargs = dict(attention_mask=causal_mask, position_ids=position_ids,
                                position_embeddings=position_embeddings, use_cache=use_cache,
                                **{CACHE_NAME: past_key_values})
            if index == memory_layer and memory is not None:
                layer_kwargs["attention_mask"] = memory_mask
                layer_kwargs["memory_states"] = self._memory_norm(layer)(memory.to(hidden_states.dtype)[:, None, :])
            hidden_states = self._run_layer(layer, hidden_states, **layer_kwargs)
            layer_sums.append(masked_layer_sum(hidden_states, valid))
        hidden_states = self._final_norm(hidden_states)
        if valid is None:
            token_counts = torch.full((batch_size,), width, device=input_ids.device, dtype=torch.long)
        else:
            token_counts = attention_mask.sum(dim=1)
        return hidden_states, torch.stack(layer_sums, dim=1), token_counts

    # ------------------------------------------------------------------ forward
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        recurrent_state: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        inputs_embeds: torch.Tensor | None = None,
        cache: Cache | None = None,
        prefill_chunk_size: int | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> RecurrentCausalLMOutputWithPast:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, T)`): token ids, any `T >= 1` (may exceed the
                position table). With `past_key_values`, only the tokens not consumed yet.
            attention_mask (`torch.Tensor` of shape `(batch_size, T)`, *optional*): 1 for tokens, 0 for padding.
                Padding is supported without cache (keys masked, padded positions left out of the eq. 1 mean; a
                left-padded row is run right-aligned and its logits shifted back, so it gets what it gets alone). On
                the cached path (`generate()`), a padded batch (left-padded prompts, as `generate()` takes them) runs
                each row on its own real tokens with a cache of its own (see [`RecurrentCache`]): each row gets the
                positions, windows and tokens it gets alone. There the mask may also cover the cached columns,
                `(batch_size, tokens_seen + T)`, as `generate()` passes it.
            labels (`torch.LongTensor` of shape `(batch_size, T)`, *optional*): as in `GPT2LMHeadModel` /
                `LlamaForCausalLM` (shifted inside: position t predicts `labels[:, t + 1]`; `-100` ignored; with
                `attention_mask`, a real token predicts the next real token's label and a padding position
                nothing, as for each row alone). Each target is counted once across windows: overlap tokens are
                context only (§4.2). With `Trainer`, whose `num_items_in_batch` counts `labels[:, 1:] != -100`
                (transformers 5.24; 5.6 counts `labels != -100`, one more per row, as for `LlamaForCausalLM`)
                and is the loss's denominator, give padding the label -100 and pad on the right (a left-padded
                row's first token is predicted by nothing), so that its count is the targets scored here.
            past_key_values ([`RecurrentCache`], *optional*): continue a stream (what `generate()` passes).
            use_cache (`bool`, *optional*, defaults to `config.use_cache`): in eval mode, run the cached path and
                return a [`RecurrentCache`]. Ignored in training mode (no cache is built) unless `past_key_values`
                is given.
            recurrent_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): the vector to
                insert into the first window of this call (the `recurrent_state` returned by a previous call), to
                continue a stream. Without it the first window is the plain pretrained model.
            logits_to_keep (`int` or `torch.Tensor`, *optional*, defaults to 0): 0 keeps the logits of all T
                positions, `k > 0` only the last k, a 1-D tensor the given positions (an empty one: none). The loss
                never needs them: with `k = 1` no `(T, vocab)` tensor is held. One exception keeps training memory
                bounded by the window (§3.2): with `labels`, in training mode with gradient checkpointing and without
                cache, `0` (Trainer's default) keeps *no* logits (`logits` is `None`); each window's loss is
                computed inside its checkpointed segment. Pass `logits_to_keep=T` to get all T positions there.
            inputs_embeds: not supported (raises); accepted for the `generate()` signature.
            cache ([`RecurrentCache`], *optional*): the name of `past_key_values` from transformers 5.24 on (what
                `generate()` passes there); either name is accepted with every supported transformers, not both.
            prefill_chunk_size (`int`, *optional*): on the cached path, the most new tokens of `input_ids` one
                backbone call reads (plus the `window_overlap` tokens re-read when a window rolls); `None` (default):
                the rest of the current window. Bounds the activations of a long prompt; the logits equal the
                unchunked ones up to rounding. `generate()` passes its `prefill_chunk_size` here for the prompt.
            return_dict (`bool`, *optional*, keyword): return a tuple when False (`@can_return_tuple`).
            num_items_in_batch (`int` or `torch.Tensor`, *optional*, keyword): loss denominator (from `Trainer`).

        Returns:
            [`RecurrentCausalLMOutputWithPast`]: `loss` (mean nats per counted target) first, `logits`
            `(batch_size, kept, vocab_size)` or `None` when no position is kept, `past_key_values` (cached path;
            `cache` from transformers 5.24), `recurrent_state` `(batch_size, hidden_size)`, `num_windows`.

        Raises:
            ValueError: for missing/empty/non-2-D `input_ids`, `labels` or `attention_mask` of the wrong shape,
                `inputs_embeds`, `position_ids`, `token_type_ids`, `prefill_chunk_size` not an int >= 1 or given without the cached path,
                `output_attentions`/`output_hidden_states` given as
                True (a stream has no one attention matrix or hidden state per layer; set in the config only, they
                are ignored with a warning), a
                `recurrent_state` (given, or held by the [`RecurrentCache`] a stream starts from) that is not a
                floating-point tensor of shape `(batch_size, hidden_size)`, a foreign non-empty cache, padding on the
                cached path of a stream begun without padding, or both `past_key_values` and `cache`; a keyword of
                `TransformersKwargs` it does not read ([`_RECURRENT_UNREAD_KEYWORDS`]): `cache_position` (a stream
                counts its own positions), `is_causal=False`, flash attention's packed-sequence arguments
                (`cu_seq_lens_q`, ..., `seq_idx`), `output_router_logits=True`, transformers' `debug_io` options.
            ValueError: a token id of `input_ids` outside `[0, vocab_size)`, naming it and the vocabulary size
                (checked when the embedding lookup fails).
            TypeError: if `input_ids` / `labels` are not torch.long or torch.int32 tensors, or `logits_to_keep` not
                an int/tensor; a keyword argument it does not take (a misspelling such as `recurrent_states=`), named
                with the argument it probably meant.
        """
        past_key_values = either_cache(past_key_values, cache)
        if input_ids is None and inputs_embeds is None:
            raise ValueError("`input_ids` is required.")
        self._check_stream_inputs(input_ids, labels, attention_mask, recurrent_state, inputs_embeds, kwargs)
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _RECURRENT_UNREAD_KEYWORDS)
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        batch_size, length = input_ids.shape
        device = input_ids.device
        keep = self._keep_indices(length, logits_to_keep, device)
        cached = past_key_values is not None or (use_cache and not self.training)
        _check_prefill_chunk_size(prefill_chunk_size)
        if prefill_chunk_size is not None and not cached:
            raise ValueError("`prefill_chunk_size` is read on the cached path only (`use_cache=True` in eval mode, or "
                             "`past_key_values`): without a cache every window is read whole.")
        targets = None
        if labels is not None:
            # as for each row alone (what the cached path scores): a real token predicts the next *real* token's
            # label, a padding position predicts nothing (without padding: position t predicts `labels[:, t + 1]`),
            # so the loss and its denominator count the same targets on every path
            masked = attention_mask is not None and attention_mask.shape[1] >= length
            real = attention_mask[:, -length:].to(device) != 0 if masked else torch.ones_like(input_ids, dtype=torch.bool)
            targets = _targets_of_real_tokens(labels.to(device).long(), real)
        shifts = None
        if not cached and attention_mask is not None:
            # the windows are cut at the same columns for every row, so a left-padded row would have its windows,
            # positions and recurrent vectors shifted: run it right-padded (exact, as the row alone) and shift back
            shifts = _leading_padding(attention_mask.to(device))
            if shifts is not None:
                input_ids, attention_mask = _roll_rows(input_ids, -shifts), _roll_rows(attention_mask.to(device), -shifts)
                targets = _roll_rows(targets, -shifts) if targets is not None else None
                wanted, keep = keep, torch.ones_like(keep)  # kept columns differ per row once shifted
        if (labels is not None and not cached and _is_int(logits_to_keep) and logits_to_keep == 0
                and self._checkpointing_windows()):
            # Trainer's default `logits_to_keep=0` with labels: each window's loss is computed inside its
            # checkpointed segment and no `(T, vocab)` logits are assembled, so memory stays bounded by the window
            keep = torch.zeros_like(keep)
        try:
            if cached:
                loss_sum, logits, cache, state, num_windows = self._cached_stream(
                    input_ids, attention_mask, targets, keep, past_key_values, recurrent_state, prefill_chunk_size
                )
            else:
                loss_sum, logits, state, num_windows = self._windowed_stream(
                    input_ids, attention_mask, targets, keep, recurrent_state
                )
                cache = None
        except (IndexError, RuntimeError):  # torch's "index out of range": name the argument and the bound
            _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
            raise
        if not cached and shifts is not None and logits is not None:
            logits = _roll_rows(logits, shifts)[:, wanted] if bool(wanted.any()) else None
        loss = None
        if labels is not None:
            if num_items_in_batch is not None:
                denominator = torch.as_tensor(num_items_in_batch, device=loss_sum.device, dtype=torch.float32)
            else:
                denominator = (targets != IGNORE_INDEX).sum().clamp(min=1).to(loss_sum.device, torch.float32)
            loss = loss_sum / denominator
        return RecurrentCausalLMOutputWithPast(
            loss=loss, logits=logits, recurrent_state=state, num_windows=num_windows, **{CACHE_NAME: cache}
        )

    # ------------------------------------------------------------------ validation
    def _check_stream_inputs(self, input_ids, labels, attention_mask, recurrent_state, inputs_embeds, kwargs):
        if inputs_embeds is not None:
            raise ValueError("`inputs_embeds` is not supported by the recurrent models: pass `input_ids`.")
        for name in ("position_ids", "token_type_ids"):
            if kwargs.get(name) is not None:
                raise ValueError(f"`{name}` is not supported: positions restart in every window (§3).")
        for name in ("output_attentions", "output_hidden_states"):
            if kwargs.get(name):
                raise ValueError(f"`{name}` is not supported by the windowed models: {_NO_PER_LAYER_OUTPUTS}; pass "
                                 f"`{name}=False`.")
            if name not in kwargs and getattr(self.config, name, False):
                # only the config asks (a checkpoint saved with it on, or `generate`, which leaves a False flag out):
                # say so once and return none, as transformers does where an attention implementation has no weights
                logger.warning_once(f"`config.{name}` is ignored by the windowed models ({_NO_PER_LAYER_OUTPUTS}): "
                                    f"no {name[7:]} are returned.")
        if not torch.is_tensor(input_ids):
            raise TypeError(f"`input_ids` must be a torch.LongTensor, got {type(input_ids).__name__}.")
        if input_ids.dim() != 2 or input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError(f"`input_ids` must be a non-empty (batch, length) tensor, got shape {tuple(input_ids.shape)}.")
        if input_ids.dtype not in (torch.long, torch.int):
            raise TypeError(f"`input_ids` must hold token ids as torch.long (or torch.int32), got dtype "
                            f"{input_ids.dtype}.")
        if labels is not None:
            if not torch.is_tensor(labels) or tuple(labels.shape) != tuple(input_ids.shape):
                shape = tuple(labels.shape) if torch.is_tensor(labels) else type(labels).__name__
                raise ValueError(f"`labels` must have the shape of `input_ids` {tuple(input_ids.shape)}, got {shape}.")
            if labels.dtype not in (torch.long, torch.int):
                raise TypeError(f"`labels` must hold token ids as torch.long (or torch.int32), got dtype {labels.dtype}.")
        if attention_mask is not None and (not torch.is_tensor(attention_mask) or attention_mask.dim() != 2
                                           or attention_mask.shape[0] != input_ids.shape[0]):
            raise ValueError("`attention_mask` must be a 2-D (batch, length) tensor of 0/1.")
        if recurrent_state is not None:
            _check_recurrent_state(recurrent_state, input_ids.shape[0], self.config.hidden_size)

    @staticmethod
    def _keep_indices(length: int, logits_to_keep, device) -> torch.Tensor:
        if isinstance(logits_to_keep, bool) or not (_is_int(logits_to_keep) or torch.is_tensor(logits_to_keep)):
            raise TypeError(f"`logits_to_keep` must be an int or a 1-D tensor of positions, got {logits_to_keep!r}.")
        if torch.is_tensor(logits_to_keep):
            if logits_to_keep.dim() != 1:
                raise ValueError("`logits_to_keep` as a tensor must be 1-D (sequence positions).")
            if logits_to_keep.is_floating_point() or logits_to_keep.dtype == torch.bool:
                raise TypeError(f"`logits_to_keep` as a tensor must hold integer positions, got {logits_to_keep.dtype}.")
            positions = logits_to_keep.to(device).long()
            if positions.numel() and not bool(((positions >= -length) & (positions < length)).all()):
                raise ValueError(f"`logits_to_keep` holds positions outside the sequence of {length} tokens "
                                 f"({logits_to_keep.tolist()}).")
            keep = torch.zeros(length, dtype=torch.bool, device=device)
            keep[positions] = True
            return keep
        if logits_to_keep < 0:
            raise ValueError(f"`logits_to_keep` must be >= 0, got {logits_to_keep}.")
        keep = torch.zeros(length, dtype=torch.bool, device=device)
        # as transformers' `slice(-logits_to_keep, None)`: more than the sequence keeps all of it
        keep[max(length - logits_to_keep, 0) if logits_to_keep else 0:] = True
        return keep

    # ------------------------------------------------------------------ per-chunk head
    def _head(self, hidden: torch.Tensor, targets: torch.Tensor | None, keep: torch.Tensor):
        """LM head on the new positions of a chunk: summed cross-entropy on `targets` (`-100` ignored) and the logits
        of the positions flagged in `keep` (`(length,)` bool). Returns `(loss_sum float32 scalar, logits or None)`."""
        lm_head = self.get_output_embeddings()
        loss_sum = hidden.new_zeros((), dtype=torch.float32)
        kept = None
        has_targets = targets is not None and bool((targets != IGNORE_INDEX).any())
        if has_targets:
            logits = lm_head(hidden)
            loss_sum = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device),
                ignore_index=IGNORE_INDEX, reduction="sum",
            )
            if bool(keep.all()):
                kept = logits
            elif bool(keep.any()):
                kept = logits[:, keep]
        elif bool(keep.any()):
            kept = lm_head(hidden if bool(keep.all()) else hidden[:, keep])
        return loss_sum, kept

    def _window_states(self, input_ids, attention_mask, memory, new_from: int):
        """One window without KV cache: `(hidden states of its new positions (batch, w - new_from, hidden),
        next recurrent vector (batch, hidden))`."""
        hidden, layer_sums, token_counts = self._window_hidden_states(input_ids, attention_mask, memory, None, False)
        next_memory = self.recurrence(layer_sums, token_counts)
        if memory is not None and attention_mask is not None:
            # a row with no real token in this window (padding only) keeps its state
            next_memory = torch.where((token_counts > 0)[:, None], next_memory, memory.to(next_memory.dtype))
        return hidden[:, new_from:], next_memory

    def _window_step(self, input_ids, attention_mask, memory, targets, keep, new_from: int):
        """One window and its LM head (the unit checkpointed in §3.2, so no `(w, vocab)` tensor outlives it):
        returns `(loss_sum, next_memory, logits)`."""
        hidden, next_memory = self._window_states(input_ids, attention_mask, memory, new_from)
        loss_sum, logits = self._head(hidden, targets, keep)
        return loss_sum, next_memory, logits

    def _anchored_window_step(self, anchor, *arguments):
        """[`_window_step`] with an unused first argument that requires grad (see [`_windowed_stream`])."""
        return self._window_step(*arguments)

    def _checkpointing_windows(self) -> bool:
        """Whether this call checkpoints whole windows (§3.2): gradient checkpointing on, training, grad enabled."""
        return bool(getattr(self, "gradient_checkpointing", False)) and self.training and torch.is_grad_enabled()

    def _windowed_stream(self, input_ids, attention_mask, targets, keep, memory):
        """No KV cache: windows in sequence, each run in full, the recurrent vector carried (training path).

        Memory: with gradient checkpointing each window (its LM head and loss included) is one checkpointed segment
        (reentrant by default on one process, so each window's parameter gradients go into `.grad` when its backward
        ends; non-reentrant in a `torch.distributed` group of several processes; see the class docstring);
        without gradients (evaluation) each window's head and loss are computed and freed before the next window,
        so neither holds a `(T, vocab)` or `(T, hidden)` tensor for the whole stream (only the kept logits). Without
        checkpointing but with gradients, every window's activations are kept for backward anyway, and one LM head
        runs over the whole stream, as in the plain model."""
        config = self.config
        spans = window_spans(input_ids.shape[1], config.window_size, config.window_overlap,
                             getattr(config, config.max_positions_attribute))
        use_checkpoint = self._checkpointing_windows()
        reentrant = use_checkpoint and self.reentrant_window_checkpointing and not _several_processes()
        if attention_mask is not None and attention_mask.shape[1] != input_ids.shape[1]:
            raise ValueError(
                f"`attention_mask` has {attention_mask.shape[1]} columns for {input_ids.shape[1]} tokens."
            )
        if not use_checkpoint and torch.is_grad_enabled():
            # the new positions of consecutive windows tile the stream exactly once: one LM head over all of them
            # (as the plain model) instead of concatenating per-window `(w, vocab)` logits
            hiddens = []
            for start, end, new_from in spans:
                window_mask = attention_mask[:, start:end] if attention_mask is not None else None
                hidden, memory = self._window_states(input_ids[:, start:end], window_mask, memory, new_from)
                hiddens.append(hidden)
            loss_sum, logits = self._head(torch.cat(hiddens, dim=1) if len(hiddens) > 1 else hiddens[0], targets,
                                          keep)
            return loss_sum, logits, memory, len(spans)
        loss_sum = torch.zeros((), dtype=torch.float32, device=input_ids.device)
        pieces = []
        for start, end, new_from in spans:
            window_mask = attention_mask[:, start:end] if attention_mask is not None else None
            window_targets = targets[:, start + new_from : end] if targets is not None else None
            arguments = (input_ids[:, start:end], window_mask, memory, window_targets, keep[start + new_from : end],
                         new_from)
            if use_checkpoint and reentrant:
                # the anchor requires grad so that the first window (no recurrent vector, integer inputs only) is
                # back-propagated too; a reentrant checkpoint passes gradients only through inputs that require grad
                anchor = torch.empty(0, device=input_ids.device, requires_grad=True)
                step_loss, memory, logits = checkpoint(self._anchored_window_step, anchor, *arguments,
                                                       use_reentrant=True)
            elif use_checkpoint:
                step_loss, memory, logits = checkpoint(self._window_step, *arguments, use_reentrant=False)
            else:  # no gradients: one window at a time, its head and loss freed before the next
                step_loss, memory, logits = self._window_step(*arguments)
            loss_sum = loss_sum + step_loss
            if logits is not None:
                pieces.append(logits)
        logits = torch.cat(pieces, dim=1) if len(pieces) > 1 else (pieces[0] if pieces else None)
        return loss_sum, logits, memory, len(spans)

    def _cached_stream(self, input_ids, attention_mask, targets, keep, cache, recurrent_state, chunk_size=None):
        """With a [`RecurrentCache`]: continue the current window with the KV cache, roll into a new window (carrying
        the recurrent vector, re-reading the last `window_overlap` tokens) whenever it is full (generation path);
        at most `chunk_size` new tokens per backbone call when given (`forward`'s `prefill_chunk_size`)."""
        config = self.config
        window, overlap = config.window_size, config.window_overlap
        # the config may have been edited since it was built: same check as uncached
        window_spans(1, window, overlap, getattr(config, config.max_positions_attribute))
        if not isinstance(cache, RecurrentCache):
            if cache is not None and (not isinstance(cache, Cache) or cache.get_seq_length() > 0):
                raise ValueError(
                    "`past_key_values` must be the RecurrentCache returned by a previous call (or an empty Cache), got "
                    f"a non-empty {type(cache).__name__}."
                )
            cache = RecurrentCache(config=config)
        if recurrent_state is not None and cache.tokens_seen > 0:
            raise ValueError("`recurrent_state` can only start a stream: the cache already holds one.")
        if recurrent_state is None and cache.tokens_seen == 0 and cache.recurrent_state is not None:
            # a stream started from a `RecurrentCache(recurrent_state=...)`: its state is checked for this batch and
            # starts every row (a padded batch's per-row caches below included)
            recurrent_state, name = cache.recurrent_state, "The `recurrent_state` of `past_key_values`"
            batch_size = input_ids.shape[0]
            _check_recurrent_state(recurrent_state, None, config.hidden_size, name)
            rows = recurrent_state.shape[0]
            if 0 < rows < batch_size and batch_size % rows == 0:
                # generate() repeats `input_ids` (and a `recurrent_state=` argument) for beams and returned
                # sequences, not a cache passed in
                raise ValueError(
                    f"{name} must have shape (batch_size, hidden_size) = "
                    f"({batch_size}, {config.hidden_size}), got {tuple(recurrent_state.shape)}: where `generate()` "
                    f"repeated each row {batch_size // rows} times (`num_beams` / `num_return_sequences`), it does "
                    "not repeat a cache passed in; pass the state as `recurrent_state=` (which it repeats), or a "
                    f"cache holding `state.repeat_interleave({batch_size // rows}, dim=0)`.")
            _check_recurrent_state(recurrent_state, batch_size, config.hidden_size, name)
        cached_rows = (len(cache.rows) if cache.rows is not None
                       else cache.window_ids.shape[0] if cache.window_ids is not None else None)
        if cached_rows is not None and cached_rows != input_ids.shape[0]:
            raise ValueError(f"`past_key_values` holds a stream of {cached_rows} row(s), `input_ids` has "
                             f"{input_ids.shape[0]}: continue a stream with the same batch.")
        length = input_ids.shape[1]
        if attention_mask is not None:
            if attention_mask.shape[1] not in (length, cache.tokens_seen + length):
                raise ValueError(
                    f"`attention_mask` has {attention_mask.shape[1]} columns: expected the {length} new tokens or the "
                    f"{cache.tokens_seen} cached and {length} new ones."
                )
            attention_mask = attention_mask[:, -length:]
            if cache.rows is None and not bool(attention_mask.bool().all()):
                if cache.tokens_seen > 0:
                    raise ValueError(
                        "Padding (`attention_mask` with zeros) in a stream that began without it: pass the padded "
                        "batch from its start (rows of a padded batch get caches of their own, see RecurrentCache)."
                    )
                cache.rows = [RecurrentCache(config=config) for _ in range(input_ids.shape[0])]
        if cache.rows is not None:
            return self._cached_rows(input_ids, attention_mask, targets, keep, cache, recurrent_state, chunk_size)
        if recurrent_state is not None:
            cache.recurrent_state = recurrent_state
        loss_sum = torch.zeros((), dtype=torch.float32, device=input_ids.device)
        pieces = []
        position = 0
        start_windows = cache.num_windows
        while position < length:
            context = None
            if cache.window_length >= window:
                next_memory = self.recurrence(cache.layer_sums, cache.token_counts)
                if overlap:
                    context = cache.window_ids[:, window - overlap :]
                cache.roll(next_memory)
                take = window - overlap
            else:
                take = window - cache.window_length
            if chunk_size is not None:
                take = min(take, chunk_size)
            new_ids = input_ids[:, position : position + take]
            take = new_ids.shape[1]
            chunk = new_ids if context is None else torch.cat([context, new_ids], dim=1)
            hidden, layer_sums, token_counts = self._window_hidden_states(chunk, None, cache.recurrent_state, cache, True)
            cache.add_tokens(chunk, layer_sums, token_counts)
            n_context = 0 if context is None else context.shape[1]
            chunk_targets = targets[:, position : position + take] if targets is not None else None
            step_loss, logits = self._head(hidden[:, n_context:], chunk_targets, keep[position : position + take])
            loss_sum = loss_sum + step_loss
            if logits is not None:
                pieces.append(logits)
            position += take
        cache.tokens_seen += length
        state = self.recurrence(cache.layer_sums, cache.token_counts)
        logits = torch.cat(pieces, dim=1) if pieces else None
        return loss_sum, logits, cache, state, cache.num_windows - start_windows + 1

    def _cached_rows(self, input_ids, attention_mask, targets, keep, cache, recurrent_state, chunk_size=None):
        """[`_cached_stream`] of a padded batch: each row on its own real tokens (`attention_mask` of the new tokens,
        `(batch, T)`, or `None`: all real), with its own cache in `cache.rows`. Kept logits at padded columns are
        zeros; the loss sums every row's targets at its real columns."""
        batch_size, length = input_ids.shape
        if len(cache.rows) != batch_size:
            raise ValueError(f"The cache holds {len(cache.rows)} rows, `input_ids` has {batch_size}.")
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        kept_columns = keep.nonzero().flatten()
        logits = None
        loss_sum = torch.zeros((), dtype=torch.float32, device=input_ids.device)
        states, windows = [], []
        for row, row_cache in enumerate(cache.rows):
            columns = real[row].nonzero().flatten()
            row_state = None if recurrent_state is None else recurrent_state[row : row + 1]
            if columns.numel() == 0:  # nothing new for this row (all padding)
                states.append(row_state if row_cache.layer_sums is None else
                              self.recurrence(row_cache.layer_sums, row_cache.token_counts))
                windows.append(row_cache.num_windows)
                continue
            row_targets = None if targets is None else targets[row : row + 1, columns]
            step_loss, row_logits, _, state, _ = self._cached_stream(
                input_ids[row : row + 1, columns], None, row_targets, keep[columns], row_cache, row_state, chunk_size)
            loss_sum = loss_sum + step_loss
            states.append(state)
            windows.append(row_cache.num_windows)
            if row_logits is not None:
                if logits is None:
                    logits = row_logits.new_zeros(batch_size, kept_columns.numel(), row_logits.shape[-1])
                # the kept columns of this row that are real, as positions among all kept columns
                slots = torch.isin(kept_columns, columns).nonzero().flatten()
                logits[row, slots] = row_logits[0]
        cache.tokens_seen += length
        if any(state is None for state in states):
            state = None if all(state is None for state in states) else torch.cat([
                torch.zeros(1, self.config.hidden_size, device=input_ids.device) if state is None else state.float()
                for state in states])
        else:
            state = torch.cat(states)
        return loss_sum, logits, cache, state, max(windows)

    # ------------------------------------------------------------------ generation
    def _prefill(self, input_ids, generation_config, model_kwargs, *args, **kwargs):
        r"""`GenerationMixin._prefill` (the first forward of `generate()`), with chunked prefill
        (`prefill_chunk_size` of the resolved generation config: a `generate()` keyword, a `GenerationConfig` field,
        or `model.generation_config`) done by the model itself: the prompt goes to `forward` in one call with
        `prefill_chunk_size`, and the cached path reads it in pieces of at most that many new tokens per backbone
        call (see `forward`). Each row of a left-padded batch is read on its own real tokens (see
        [`RecurrentCache`]), so padding wider than a chunk is skipped as without chunking; the greedy tokens are
        those of the unchunked prefill and the logits equal them up to rounding. transformers' own chunk loop is
        not used: it hands each chunk to `prepare_inputs_for_generation` with the mask up to the chunk's end, so a
        left-padded row's first chunks look right-padded, and a chunk cannot be told from the whole sequence of a
        stream that continues a cache. The setting travels with this call's inputs only: nothing is stored on the
        model, so concurrent `generate()` calls on one model do not see each other's setting.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, T)`), generation_config, model_kwargs, *args,
                **kwargs: those of `GenerationMixin._prefill` (`model_kwargs` is not modified).

        Returns:
            what `GenerationMixin._prefill` returns (the prefill's model output).

        Raises:
            ValueError: `prefill_chunk_size` that is not an int >= 1 (a bool is refused too); without a cache
                (`use_cache=False`), transformers' "Cannot use prefill chunking without a cache".
        """
        chunk = getattr(generation_config, "prefill_chunk_size", None)
        if chunk is None or either_cache(model_kwargs.get("past_key_values"), model_kwargs.get("cache")) is None:
            return super()._prefill(input_ids, generation_config, model_kwargs, *args, **kwargs)
        _check_prefill_chunk_size(chunk)
        unchunked = copy.copy(generation_config)
        unchunked.prefill_chunk_size = None
        return super()._prefill(input_ids, unchunked, {**model_kwargs, "prefill_chunk_size": chunk}, *args, **kwargs)

    def _get_stopping_criteria(self, *args, **kwargs):
        """transformers' stopping criteria, without the "exceeded the model's predefined maximum length" warning of
        `MaxLengthCriteria`: these models read any length in windows (§3), the position table bounds a window, not
        the stream."""
        criteria = super()._get_stopping_criteria(*args, **kwargs)
        for criterion in criteria:
            if hasattr(criterion, "max_position_embeddings"):
                criterion.max_position_embeddings = None
        return criteria

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        next_sequence_length: int | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        is_first_iteration: bool | None = False,
        cache: Cache | None = None,
        **kwargs,
    ):
        r"""Inputs of one `generate()` step: only the tokens the [`RecurrentCache`] has not consumed yet (the whole
        prompt at the first step, whatever its length), the cache, the attention mask when it holds padding
        (left-padded prompts: each row then runs on its own tokens, with the positions, windows and tokens it gets
        alone; see [`RecurrentCache`]), and `use_cache` / `logits_to_keep` / `recurrent_state` (the latter only at
        the start of a stream). `generate()` passes the cache as `past_key_values`, or as `cache` from transformers
        5.24 on; it goes on under the same name. With `prefill_chunk_size` the prompt comes here whole (see
        [`_prefill`]) and the setting goes on to `forward`, which reads the prompt in chunks on the cached path.

        Raises:
            ValueError: for `inputs_embeds`, or an `attention_mask` whose shape does not match the prompt (an
                all-ones mask is otherwise dropped, so a wrong one would pass unnoticed), or that pads a row on the
                right (its last column 0: the row would continue from zero logits, i.e. with token 0), or holds
                a row of padding only; checked on the prompt (the first step, or a stream's first tokens), not at
                each decoding step.
        """
        past_key_values = either_cache(past_key_values, cache)
        if inputs_embeds is not None:
            raise ValueError("`inputs_embeds` is not supported by the recurrent models: pass `input_ids`.")
        seen = past_key_values.tokens_seen if isinstance(past_key_values, RecurrentCache) else 0
        total = input_ids.shape[1]  # generate() passes the whole sequence so far, and its mask
        if attention_mask is not None and (attention_mask.dim() != 2 or attention_mask.shape[0] != input_ids.shape[0]
                                           or attention_mask.shape[1] != total):
            raise ValueError(f"`attention_mask` {tuple(attention_mask.shape)} does not match `input_ids` "
                             f"{tuple(input_ids.shape)}: one column per token.")
        if attention_mask is not None and (not seen or is_first_iteration) and not bool(attention_mask[:, -1].all()):
            # the next token of each row is read from its last column: a padded one has no logits (zeros), so the
            # row would continue with token 0 whatever its text. Checked on the prompt only (later steps append
            # real columns), so that no decoding step waits on the device for it
            rows = (attention_mask[:, -1] == 0).nonzero().flatten().tolist()
            raise ValueError(f"`attention_mask` pads row(s) {rows} on the right: `generate` continues every row after "
                             "its last column; pad the prompts on the left (`tokenizer.padding_side = 'left'`) and give "
                             "every row a token at least.")
        if seen:
            input_ids = input_ids[:, seen:]
        elif next_sequence_length is not None:
            input_ids = input_ids[:, -next_sequence_length:]
        model_inputs = {"input_ids": input_ids.clone(memory_format=torch.contiguous_format)}
        rows = isinstance(past_key_values, RecurrentCache) and past_key_values.rows is not None
        if attention_mask is not None and (rows or not bool(attention_mask.bool().all())):
            model_inputs["attention_mask"] = attention_mask
        if past_key_values is not None:
            model_inputs[CACHE_NAME] = past_key_values
        for key in ("use_cache", "logits_to_keep", "prefill_chunk_size"):
            if key in kwargs:
                model_inputs[key] = kwargs[key]
        if kwargs.get("recurrent_state") is not None and not seen:
            model_inputs["recurrent_state"] = kwargs["recurrent_state"]
        return model_inputs


__all__ = [
    "MemoryAttentionMixin",
    "RecurrenceFeedForward",
    "RecurrenceModule",
    "RecurrencePooling",
    "RecurrentCache",
    "RecurrentCausalLMMixin",
    "RecurrentCausalLMOutputWithPast",
    "memory_attention_forward",
    "memory_attention_mask",
    "window_spans",
]
