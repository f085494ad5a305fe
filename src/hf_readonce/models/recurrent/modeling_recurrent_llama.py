# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch recurrent Llama: a Llama-family causal LM (Llama, SmolLM2, ...) over windows of text with a recurrent
vector carried from window to window.

The recurrence of Yoshida, Ettinger & Gimpel (2020), "Adding Recurrence to Pretrained Transformers for Improved
Efficiency and Context Size" (eq. 1 pooling, feed-forward recurrence inserted at layer L as one extra key/value,
§3.1; window-level checkpointing, §3.2; overlapped execution, §4.2), applied beyond GPT-2 as §6 suggests. The
mechanism is shared with the GPT-2 variant in `modeling_recurrence.py`; only the block wiring is here.

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers and the
files next to it.
"""

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaModel,
    LlamaPreTrainedModel,
    apply_rotary_pos_emb,
    eager_attention_forward,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .configuration_recurrent_llama import RecurrentLlamaConfig
from .modeling_recurrence import (
    CACHE_NAME,
    RecurrenceModule,
    RecurrentCausalLMMixin,
    either_cache,
    memory_attention_forward,
)


class RecurrentLlamaAttention(LlamaAttention):
    r"""Llama self-attention that can attend to one extra key/value: the recurrent vector (§3.1, Figure 2).

    Same parameters as `LlamaAttention` (`q_proj`, `k_proj`, `v_proj`, `o_proj`). Without `memory_states` it is
    exactly Llama's attention. With `memory_states` (`(batch_size, 1, hidden_size)`, already normalized by the
    layer's `input_layernorm`), the memory is projected by this layer's own `k_proj`/`v_proj` (no query is computed
    for it), its key is left unrotated (RoPE at position 0, i.e. the identity) and key/value are prepended to the
    window's (grouped-query heads included). The memory is not written to the KV cache.
    """

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
            position_embeddings (`tuple(cos, sin)`): rotary embeddings of the window positions.
            attention_mask (`torch.Tensor`): the usual causal mask, or with `memory_states` the mask of
                `modeling_recurrence.memory_attention_mask` (`(batch_size, 1, w, 1 + past + w)`).
            past_key_values (`Cache`, *optional*): KV cache of the current window.
            memory_states (`torch.FloatTensor` of shape `(batch_size, 1, hidden_size)`, *optional*): the recurrent
                vector after `input_layernorm`.
            cache (`Cache`, *optional*): the name of `past_key_values` from transformers 5.24 on (what
                `LlamaDecoderLayer` passes there); either name is accepted, not both (a `ValueError`).

        Returns:
            `(attn_output (batch_size, w, hidden_size), attn_weights or None)`.
        """
        # Arguments, docs and the memory_attention_forward call look like those of RecurrentGPT2Attention on purpose:
        # each family projects the memory with its own weights (c_attn / k_proj, v_proj) and RoPE rules, and what
        # they share (the attention over [memory; keys]) is memory_attention_forward.
        past_key_values = either_cache(past_key_values, cache)
        if memory_states is None:
            return super().forward(
                hidden_states,
                position_embeddings=position_embeddings,
                attention_mask=attention_mask,
                **{CACHE_NAME: past_key_values},
                **kwargs,
            )
        # Adapted from transformers' LlamaAttention.forward, plus the memory's key/value (unrotated)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
        memory_shape = (*memory_states.shape[:-1], -1, self.head_dim)
        memory_key = self.k_proj(memory_states).view(memory_shape).transpose(1, 2)
        memory_value = self.v_proj(memory_states).view(memory_shape).transpose(1, 2)
        attn_output, attn_weights = memory_attention_forward(
            self,
            query_states,
            key_states,
            value_states,
            memory_key,
            memory_value,
            attention_mask,
            eager_attention_forward,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class RecurrentLlamaForCausalLM(RecurrentCausalLMMixin, LlamaPreTrainedModel, GenerationMixin):
    r"""
    A Llama-family causal LM run over windows of `config.window_size` tokens with a recurrent vector carried
    between windows (Yoshida et al. 2020, §3; same mechanism as [`RecurrentGPT2LMHeadModel`]).

    Parameter names are those of [`~transformers.LlamaForCausalLM`] (`model.*`, `lm_head`) plus `recurrence.*`, so
    `RecurrentLlamaForCausalLM.from_pretrained(<Llama checkpoint>)` (also `gguf_file=...`, e.g. SmolLM2-135M) loads
    the pretrained weights and initializes only the recurrence. The first window is numerically the plain model.
    Positions (RoPE) restart at 0 in every window. See [`RecurrentGPT2LMHeadModel`] for the execution paths
    (windowed training with backpropagation through time and window-level checkpointing; cached path for
    `generate()`).
    """

    config_class = RecurrentLlamaConfig
    config: RecurrentLlamaConfig
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: RecurrentLlamaConfig):
        super().__init__(config)
        self.model = LlamaModel(config)
        layer = config.recurrence_layer - 1
        self.model.layers[layer].self_attn = RecurrentLlamaAttention(config=config, layer_idx=layer)
        self.recurrence = RecurrenceModule(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        """Llama's token embeddings (`model.embed_tokens`)."""
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        """Replace Llama's token embeddings (`resize_token_embeddings`)."""
        self.model.embed_tokens = value

    # ------------------------------------------------------------------ backbone hooks of RecurrentCausalLMMixin
    def _decoder_layers(self):
        return self.model.layers[: self.config.num_hidden_layers]

    def _embed(self, input_ids, position_ids):
        return self.model.embed_tokens(input_ids)

    def _position_embeddings(self, hidden_states, position_ids):
        return self.model.rotary_emb(hidden_states, position_ids=position_ids)

    def _memory_norm(self, layer):
        return layer.input_layernorm

    def _run_layer(self, layer, hidden_states, **layer_kwargs):
        return layer(hidden_states, **layer_kwargs)

    def _final_norm(self, hidden_states):
        return self.model.norm(hidden_states)


RecurrentLlamaConfig.register_for_auto_class()
RecurrentLlamaForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = ["RecurrentLlamaAttention", "RecurrentLlamaForCausalLM"]
