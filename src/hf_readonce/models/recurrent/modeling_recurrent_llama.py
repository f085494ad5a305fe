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
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaModel,
    LlamaPreTrainedModel,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

from .configuration_recurrent_llama import RecurrentLlamaConfig
from .modeling_recurrence import (
    RecurrenceModule,
    RecurrentCausalLMMixin,
    RecurrentCausalLMOutputWithPast,
    masked_layer_sum,
    memory_attention_forward,
    memory_attention_implementation,
    memory_attention_mask,
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
        **kwargs,
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

        Returns:
            `(attn_output (batch_size, w, hidden_size), attn_weights or None)`.
        """
        if memory_states is None:
            return super().forward(
                hidden_states,
                position_embeddings=position_embeddings,
                attention_mask=attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
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
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def _window_hidden_states(self, input_ids, attention_mask, memory, past_key_values, use_cache):
        r"""Run the decoder on one window (or the next tokens of the current window when `past_key_values` is
        given), with `memory` inserted at layer L.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, w)`).
            attention_mask (`torch.Tensor` of shape `(batch_size, w)`, *optional*): 1 for tokens, 0 for padding.
            memory (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): the recurrent vector.
            past_key_values (`Cache`, *optional*): KV cache of the current window; positions continue after it.
            use_cache (`bool`): write the new keys/values into `past_key_values`.

        Returns:
            `(last_hidden_state (batch_size, w, hidden_size) after the final norm, layer_sums (batch_size,
            num_hidden_layers, hidden_size), token_counts (batch_size,))`.
        """
        decoder = self.model
        batch_size, width = input_ids.shape
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = torch.arange(past_length, past_length + width, device=input_ids.device).unsqueeze(0)
        hidden_states = decoder.embed_tokens(input_ids)
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        position_embeddings = decoder.rotary_emb(hidden_states, position_ids=position_ids)
        memory_layer = self.config.recurrence_layer - 1
        memory_mask = None
        if memory is not None:
            memory_mask = memory_attention_mask(
                attention_mask, batch_size, width, past_length, hidden_states.dtype, hidden_states.device,
                memory_attention_implementation(self.config),
            )
        valid = attention_mask.to(hidden_states.dtype) if attention_mask is not None else None
        layer_sums = []
        for index, layer in enumerate(decoder.layers[: self.config.num_hidden_layers]):
            layer_kwargs = dict(
                attention_mask=causal_mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
            )
            if index == memory_layer and memory is not None:
                layer_kwargs["attention_mask"] = memory_mask
                layer_kwargs["memory_states"] = layer.input_layernorm(memory.to(hidden_states.dtype)[:, None, :])
            hidden_states = layer(hidden_states, **layer_kwargs)
            layer_sums.append(masked_layer_sum(hidden_states, valid))
        hidden_states = decoder.norm(hidden_states)
        if valid is None:
            token_counts = torch.full((batch_size,), width, device=input_ids.device, dtype=torch.long)
        else:
            token_counts = attention_mask.sum(dim=1)
        return hidden_states, torch.stack(layer_sums, dim=1), token_counts

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        recurrent_state: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_dict: bool | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> RecurrentCausalLMOutputWithPast | tuple:
        r"""
        Same contract as [`RecurrentGPT2LMHeadModel.forward`]:

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, T)`): any `T >= 1`, may exceed
                `max_position_embeddings`.
            attention_mask (`torch.Tensor` of shape `(batch_size, T)`, *optional*): 1 for tokens, 0 for padding
                (padding only without cache).
            labels (`torch.LongTensor` of shape `(batch_size, T)`, *optional*): shifted inside, `-100` ignored, each
                target counted once across windows (§4.2).
            past_key_values ([`RecurrentCache`], *optional*), use_cache (`bool`, *optional*): the cached path.
            recurrent_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): continue a
                stream.
            logits_to_keep (`int` or `torch.Tensor`, *optional*, defaults to 0): 0 = all positions, k = last k.
            return_dict (`bool`, *optional*).

        Returns:
            [`RecurrentCausalLMOutputWithPast`] (`loss` first, `logits`, `past_key_values`, `recurrent_state`,
            `num_windows`).

        Raises:
            ValueError / TypeError: as [`RecurrentGPT2LMHeadModel.forward`].
        """
        if input_ids is None and inputs_embeds is None:
            raise ValueError("`input_ids` is required.")
        return self._recurrent_forward(
            input_ids,
            attention_mask=attention_mask,
            labels=labels,
            past_key_values=past_key_values,
            use_cache=use_cache,
            recurrent_state=recurrent_state,
            logits_to_keep=logits_to_keep,
            return_dict=return_dict,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )


RecurrentLlamaConfig.register_for_auto_class()
RecurrentLlamaForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = ["RecurrentLlamaAttention", "RecurrentLlamaForCausalLM"]
