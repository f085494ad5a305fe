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

from torch import nn
from transformers.generation import GenerationMixin
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaModel,
    LlamaPreTrainedModel,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

from .configuration_recurrent_llama import RecurrentLlamaConfig
from .modeling_recurrence import MemoryAttentionMixin, RecurrenceModule, RecurrentCausalLMMixin


class RecurrentLlamaAttention(MemoryAttentionMixin, LlamaAttention):
    r"""Llama self-attention that can attend to one extra key/value: the recurrent vector (§3.1, Figure 2).

    Same parameters as `LlamaAttention` (`q_proj`, `k_proj`, `v_proj`, `o_proj`). Without `memory_states` it is
    exactly Llama's attention. With `memory_states` (`(batch_size, 1, hidden_size)`, already normalized by the
    layer's `input_layernorm`), the memory is projected by this layer's own `k_proj`/`v_proj` (no query is computed
    for it), its key is left unrotated (RoPE at position 0, i.e. the identity) and key/value are prepended to the
    window's (grouped-query heads included). The memory is not written to the KV cache. `forward` is
    [`MemoryAttentionMixin.forward`], whose arguments are `LlamaAttention`'s (plus `memory_states` and `cache`);
    Llama's projections are its hooks here.
    """

    _eager_attention = staticmethod(eager_attention_forward)

    # ------------------------------------------------------------------ projection hooks of MemoryAttentionMixin
    def _project_window(self, hidden_states, position_embeddings):
        r"""The window's query, key and value by `q_proj`/`k_proj`/`v_proj`, rotated by RoPE, as in
        `LlamaAttention.forward`.

        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, w, hidden_size)`): the window after
                `input_layernorm`.
            position_embeddings (`tuple(cos, sin)`): rotary embeddings of the window positions.

        Returns:
            `(query (batch_size, num_attention_heads, w, head_dim), key, value (batch_size, num_key_value_heads, w,
            head_dim))`.
        """
        # Adapted from transformers' LlamaAttention.forward
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return query_states, key_states, value_states

    def _project_memory(self, memory_states):
        r"""The recurrent vector's key and value by this layer's `k_proj`/`v_proj` (§3.1): no query is computed (the
        memory is never a query) and the key is not rotated (RoPE at position 0 is the identity).

        Args:
            memory_states (`torch.FloatTensor` of shape `(batch_size, 1, hidden_size)`): the vector after
                `input_layernorm`.

        Returns:
            `(memory_key, memory_value)`, each `(batch_size, num_key_value_heads, 1, head_dim)`.
        """
        memory_shape = (*memory_states.shape[:-1], -1, self.head_dim)
        memory_key = self.k_proj(memory_states).view(memory_shape).transpose(1, 2)
        memory_value = self.v_proj(memory_states).view(memory_shape).transpose(1, 2)
        return memory_key, memory_value

    def _project_output(self, attn_output):
        r"""`o_proj`, as in `LlamaAttention.forward` (§3.1: `w` outputs for `w` queries).

        Args:
            attn_output (`torch.FloatTensor` of shape `(batch_size, w, num_attention_heads * head_dim)`): the heads
                concatenated.

        Returns:
            `torch.FloatTensor` of shape `(batch_size, w, hidden_size)`.
        """
        return self.o_proj(attn_output)

    def _attention_dropout(self) -> float:
        """Llama's attention-weight dropout probability (`attention_dropout`, `config.attention_dropout`), used in
        training."""
        return self.attention_dropout


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
# Importing this file (from hf_readonce, or the copy saved next to a checkpoint and loaded with
# `trust_remote_code=True`) lists the class among transformers' causal LMs, `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`:
# `Trainer`'s label smoother (`label_smoothing_factor`) shifts the labels by one only for the class names listed
# there, and would otherwise score each position's logits against that position's own token. `setdefault` makes it
# idempotent (importing again, or another copy of this file, adds nothing) and keeps any name transformers lists for
# the type. The Auto classes pair these names only with the config types transformers ships
# (`CONFIG_MAPPING_NAMES`), so no `AutoModelForCausalLM` / `AutoConfig` lookup changes; the text-generation
# pipeline's supported-model check and `Trainer`'s model card read the class as a causal LM.
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(RecurrentLlamaConfig.model_type, RecurrentLlamaForCausalLM.__name__)

__all__ = ["RecurrentLlamaAttention", "RecurrentLlamaForCausalLM"]
