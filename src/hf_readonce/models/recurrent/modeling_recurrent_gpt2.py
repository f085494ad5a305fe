# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch recurrent GPT-2: GPT-2 over windows of text with a recurrent vector carried from window to window, for
unbounded context at the memory of one window.

Implements Yoshida, Ettinger & Gimpel (2020), "Adding Recurrence to Pretrained Transformers for Improved Efficiency
and Context Size": eq. 1 pooling, the feed-forward recurrence and its insertion at layer L as one extra key/value
(§3.1), window-level gradient checkpointing (§3.2) and overlapped execution (§4.2). The mechanism itself is shared
with the other families in `modeling_recurrence.py`.

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers and the
files next to it.
"""

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask
from transformers.models.gpt2.modeling_gpt2 import (
    GPT2Attention,
    GPT2Model,
    GPT2PreTrainedModel,
    eager_attention_forward,
)

from .configuration_recurrent_gpt2 import RecurrentGPT2Config
from .modeling_recurrence import (
    RecurrenceModule,
    RecurrentCausalLMMixin,
    RecurrentCausalLMOutputWithPast,
    masked_layer_sum,
    memory_attention_forward,
    memory_attention_implementation,
    memory_attention_mask,
)


class RecurrentGPT2Attention(GPT2Attention):
    r"""GPT-2 self-attention that can attend to one extra key/value: the recurrent vector (§3.1, Figure 2).

    Same parameters as [`~transformers.models.gpt2.modeling_gpt2.GPT2Attention`] (`c_attn`, `c_proj`), so GPT-2
    weights load unchanged. Without `memory_states` it is exactly GPT-2's attention. With `memory_states`
    (`(batch_size, 1, hidden_size)`, already normalized by the block's `ln_1`), the memory is projected by this
    layer's own `c_attn`; its key and value are prepended to the window's keys and values and its query is dropped:
    the window's `w` queries attend over `1 + w` keys and the layer still has `w` outputs. The memory's key/value are
    not written to the KV cache (they are recomputed at each call from the cached recurrent vector).
    """

    def forward(
        self,
        hidden_states: torch.Tensor,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = False,
        memory_states: torch.Tensor | None = None,
        **kwargs,
    ):
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, w, hidden_size)`): normalized window states.
            past_key_values (`Cache`, *optional*): KV cache of the current window.
            attention_mask (`torch.Tensor`): the usual causal mask, or with `memory_states` the mask of
                `modeling_recurrence.memory_attention_mask` (`(batch_size, 1, w, 1 + past + w)`).
            memory_states (`torch.FloatTensor` of shape `(batch_size, 1, hidden_size)`, *optional*): the recurrent
                vector after `ln_1`.

        Returns:
            `(attn_output (batch_size, w, hidden_size), attn_weights or None)`.
        """
        if memory_states is None:
            return super().forward(
                hidden_states,
                past_key_values=past_key_values,
                attention_mask=attention_mask,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                output_attentions=output_attentions,
                **kwargs,
            )
        if encoder_hidden_states is not None:
            raise ValueError("RecurrentGPT2Attention does not support cross-attention.")
        query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query_states = query_states.view(shape).transpose(1, 2)
        key_states = key_states.view(shape).transpose(1, 2)
        value_states = value_states.view(shape).transpose(1, 2)
        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
        # the memory's query (first third of c_attn's output) is discarded: the memory is never a query
        _, memory_key, memory_value = self.c_attn(memory_states).split(self.split_size, dim=2)
        memory_shape = (*memory_states.shape[:-1], -1, self.head_dim)
        memory_key = memory_key.view(memory_shape).transpose(1, 2)
        memory_value = memory_value.view(memory_shape).transpose(1, 2)
        attn_output, attn_weights = memory_attention_forward(
            self,
            query_states,
            key_states,
            value_states,
            memory_key,
            memory_value,
            attention_mask,
            eager_attention_forward,
            dropout=self.attn_dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        attn_output = self.resid_dropout(self.c_proj(attn_output))
        return attn_output, attn_weights


class RecurrentGPT2LMHeadModel(RecurrentCausalLMMixin, GPT2PreTrainedModel, GenerationMixin):
    r"""
    GPT-2 with a language-modeling head, run over windows of `config.window_size` tokens with a recurrent vector
    carried between windows (Yoshida et al. 2020, §3).

    Parameter names are those of [`~transformers.GPT2LMHeadModel`] (`transformer.*`, `lm_head`), plus the
    `recurrence.*` submodule ([`RecurrenceModule`]: eq. 1 pooling weights and the feed-forward network), so
    `RecurrentGPT2LMHeadModel.from_pretrained(<any GPT-2 checkpoint>)` loads GPT-2's weights and initializes only the
    recurrence. The first window has no extra key/value: it is numerically GPT-2.

    Execution (`forward(input_ids (batch, T))`, any T, also far beyond `n_positions`):

    - training, or `use_cache=False`: windows `[start_j, end_j)` with `start_j = end_{j-1} - window_overlap`, run in
      sequence; positions restart at 0 in every window; window j+1 receives at layer L the vector
      `recurrence(window j)`; gradients flow through it (backpropagation through time). With gradient checkpointing
      on, each window is checkpointed: only the recurrent vectors and the window boundaries are kept between windows
      (§3.2), and the loss is computed window by window inside the checkpoint.
    - eval with `use_cache=True` (default) or with `past_key_values`: the same windows, continued with a
      [`RecurrentCache`] (KV cache of the current window + recurrent state); this is what `generate()` uses, so a
      prompt longer than `n_positions` is consumed window by window and generation rolls into a new window when the
      current one is full.
    """

    config_class = RecurrentGPT2Config
    config: RecurrentGPT2Config
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: RecurrentGPT2Config):
        super().__init__(config)
        self.transformer = GPT2Model(config)
        block = config.recurrence_layer - 1
        self.transformer.h[block].attn = RecurrentGPT2Attention(config=config, layer_idx=block)
        self.recurrence = RecurrenceModule(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, new_embeddings):
        self.transformer.wte = new_embeddings

    def _window_hidden_states(self, input_ids, attention_mask, memory, past_key_values, use_cache):
        r"""Run GPT-2 on one window (or the next tokens of the current window when `past_key_values` is given),
        with `memory` inserted at layer L.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, w)`).
            attention_mask (`torch.Tensor` of shape `(batch_size, w)`, *optional*): 1 for tokens, 0 for padding
                (only without cache).
            memory (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): the recurrent vector.
            past_key_values (`Cache`, *optional*): KV cache of the current window; positions continue after it.
            use_cache (`bool`): write the new keys/values into `past_key_values`.

        Returns:
            `(last_hidden_state (batch_size, w, hidden_size) after ln_f, layer_sums (batch_size, n_layer,
            hidden_size), token_counts (batch_size,))` — the sums are over the non-padding positions of each block's
            output (eq. 1).
        """
        transformer = self.transformer
        batch_size, width = input_ids.shape
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = torch.arange(past_length, past_length + width, device=input_ids.device).unsqueeze(0)
        inputs_embeds = transformer.wte(input_ids)
        hidden_states = transformer.drop(inputs_embeds + transformer.wpe(position_ids).to(inputs_embeds.device))
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        memory_layer = self.config.recurrence_layer - 1
        memory_mask = None
        if memory is not None:
            memory_mask = memory_attention_mask(
                attention_mask, batch_size, width, past_length, hidden_states.dtype, hidden_states.device,
                memory_attention_implementation(self.config),
            )
        valid = attention_mask.to(hidden_states.dtype) if attention_mask is not None else None
        layer_sums = []
        for index, block in enumerate(transformer.h):
            if index == memory_layer and memory is not None:
                memory_states = block.ln_1(memory.to(hidden_states.dtype)[:, None, :])
                hidden_states = block(
                    hidden_states, past_key_values, memory_mask, None, use_cache=use_cache,
                    position_ids=position_ids, memory_states=memory_states,
                )
            else:
                hidden_states = block(
                    hidden_states, past_key_values, causal_mask, None, use_cache=use_cache, position_ids=position_ids
                )
            layer_sums.append(masked_layer_sum(hidden_states, valid))
        hidden_states = transformer.ln_f(hidden_states)
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
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, T)`): token ids, any `T >= 1` (may exceed
                `n_positions`). With `past_key_values`, only the tokens not consumed yet.
            attention_mask (`torch.Tensor` of shape `(batch_size, T)`, *optional*): 1 for tokens, 0 for padding.
                Padding is supported without cache (keys masked, padded positions left out of the eq. 1 mean); on
                the cached path it must be all ones.
            labels (`torch.LongTensor` of shape `(batch_size, T)`, *optional*): as in `GPT2LMHeadModel` (shifted
                inside: position t predicts `labels[:, t + 1]`; `-100` ignored). Each target is counted once across
                windows: overlap tokens are context only (§4.2).
            past_key_values ([`RecurrentCache`], *optional*): continue a stream (what `generate()` passes).
            use_cache (`bool`, *optional*, defaults to `config.use_cache`): in eval mode, run the cached path and
                return a [`RecurrentCache`]. Ignored in training mode (no cache is built) unless `past_key_values`
                is given.
            recurrent_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*): the vector to
                insert into the first window of this call (the `recurrent_state` returned by a previous call), to
                continue a stream. Without it the first window is plain GPT-2.
            logits_to_keep (`int` or `torch.Tensor`, *optional*, defaults to 0): as in `GPT2LMHeadModel`: 0 keeps
                the logits of all T positions, `k > 0` only the last k, a 1-D tensor the given positions. The loss
                never needs them: with `k = 1` no `(T, vocab)` tensor is held.
            return_dict (`bool`, *optional*): return a tuple when False.
            num_items_in_batch (`int` or `torch.Tensor`, *optional*, keyword): loss denominator (from `Trainer`).

        Returns:
            [`RecurrentCausalLMOutputWithPast`]: `loss` (mean nats per counted target) first, `logits`
            `(batch_size, kept, vocab_size)`, `past_key_values` (cached path), `recurrent_state`
            `(batch_size, hidden_size)`, `num_windows`.

        Raises:
            ValueError: for missing/empty/non-2-D `input_ids`, `labels` or `attention_mask` of the wrong shape,
                `inputs_embeds`, `position_ids`, `token_type_ids`, `output_attentions`/`output_hidden_states`, a
                `recurrent_state` of the wrong shape, a foreign non-empty cache, or padding on the cached path.
            TypeError: if `input_ids` is not an integer tensor or `logits_to_keep` not an int/tensor.
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


RecurrentGPT2Config.register_for_auto_class()
RecurrentGPT2LMHeadModel.register_for_auto_class("AutoModelForCausalLM")

__all__ = ["RecurrentGPT2Attention", "RecurrentGPT2LMHeadModel"]
