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
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.models.gpt2.modeling_gpt2 import (
    GPT2Attention,
    GPT2Model,
    GPT2PreTrainedModel,
    eager_attention_forward,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .configuration_recurrent_gpt2 import RecurrentGPT2Config
from .modeling_recurrence import MemoryAttentionMixin, RecurrenceModule, RecurrentCausalLMMixin


class RecurrentGPT2Attention(MemoryAttentionMixin, GPT2Attention):
    r"""GPT-2 self-attention that can attend to one extra key/value: the recurrent vector (§3.1, Figure 2).

    Same parameters as [`~transformers.models.gpt2.modeling_gpt2.GPT2Attention`] (`c_attn`, `c_proj`), so GPT-2
    weights load unchanged. Without `memory_states` it is exactly GPT-2's attention. With `memory_states`
    (`(batch_size, 1, hidden_size)`, already normalized by the block's `ln_1`), the memory is projected by this
    layer's own `c_attn`; its key and value are prepended to the window's keys and values and its query is dropped:
    the window's `w` queries attend over `1 + w` keys and the layer still has `w` outputs. The memory's key/value are
    not written to the KV cache (they are recomputed at each call from the cached recurrent vector). The algorithm is
    [`MemoryAttentionMixin`]'s; GPT-2's projections are its hooks here.
    """

    _eager_attention = staticmethod(eager_attention_forward)

    def forward(
        self,
        hidden_states: torch.Tensor,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = False,
        memory_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""[`MemoryAttentionMixin.forward`] with `GPT2Attention`'s arguments, in its order (the cache second).

        Args:
            encoder_hidden_states, encoder_attention_mask, output_attentions: `GPT2Attention`'s, used only without
                `memory_states` (GPT-2's own attention then runs, cross-attention included).
            hidden_states, past_key_values, attention_mask, memory_states, cache, kwargs: see
                [`MemoryAttentionMixin.forward`] (`memory_states` is the recurrent vector after `ln_1`).

        Returns:
            `(attn_output (batch_size, w, hidden_size), attn_weights or None)`.

        Raises:
            ValueError: `encoder_hidden_states` with `memory_states` (no cross-attention over the recurrent vector),
                or both `past_key_values` and `cache`.
        """
        if memory_states is None:
            kwargs.update(encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask,
                          output_attentions=output_attentions)
        elif encoder_hidden_states is not None:
            raise ValueError("RecurrentGPT2Attention does not support cross-attention.")
        return super().forward(hidden_states, attention_mask=attention_mask, past_key_values=past_key_values,
                               memory_states=memory_states, cache=cache, **kwargs)

    # ------------------------------------------------------------------ projection hooks of MemoryAttentionMixin
    def _project_window(self, hidden_states, position_embeddings):
        r"""The window's query, key and value by `c_attn`, as in `GPT2Attention.forward` (absolute positions:
        `position_embeddings` is unused).

        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, w, hidden_size)`): the window after `ln_1`.
            position_embeddings: ignored (`None` from `GPT2Block`).

        Returns:
            `(query, key, value)`, each `(batch_size, num_heads, w, head_dim)`.
        """
        # Adapted from transformers' GPT2Attention.forward (self-attention branch)
        query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        return tuple(states.view(shape).transpose(1, 2) for states in (query_states, key_states, value_states))

    def _project_memory(self, memory_states):
        r"""The recurrent vector's key and value by this layer's `c_attn` (§3.1); the query third of `c_attn`'s
        output is discarded: the memory is never a query.

        Args:
            memory_states (`torch.FloatTensor` of shape `(batch_size, 1, hidden_size)`): the vector after `ln_1`.

        Returns:
            `(memory_key, memory_value)`, each `(batch_size, num_heads, 1, head_dim)`.
        """
        _, memory_key, memory_value = self.c_attn(memory_states).split(self.split_size, dim=2)
        shape = (*memory_states.shape[:-1], -1, self.head_dim)
        return memory_key.view(shape).transpose(1, 2), memory_value.view(shape).transpose(1, 2)

    def _project_output(self, attn_output):
        r"""`c_proj` and the residual dropout, as in `GPT2Attention.forward` (§3.1: `w` outputs for `w` queries).

        Args:
            attn_output (`torch.FloatTensor` of shape `(batch_size, w, hidden_size)`): the heads concatenated.

        Returns:
            `torch.FloatTensor` of shape `(batch_size, w, hidden_size)`.
        """
        return self.resid_dropout(self.c_proj(attn_output))

    def _attention_dropout(self) -> float:
        """GPT-2's attention-weight dropout probability (`attn_dropout.p`, `config.attn_pdrop`), used in training."""
        return self.attn_dropout.p


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
        """GPT-2's token embeddings (`transformer.wte`)."""
        return self.transformer.wte

    def set_input_embeddings(self, new_embeddings):
        """Replace GPT-2's token embeddings (`resize_token_embeddings`)."""
        self.transformer.wte = new_embeddings

    # ------------------------------------------------------------------ backbone hooks of RecurrentCausalLMMixin
    def _decoder_layers(self):
        return self.transformer.h

    def _embed(self, input_ids, position_ids):
        transformer = self.transformer
        inputs_embeds = transformer.wte(input_ids)
        return transformer.drop(inputs_embeds + transformer.wpe(position_ids).to(inputs_embeds.device))

    def _position_embeddings(self, hidden_states, position_ids):
        return None  # absolute positions, added in `_embed`

    def _memory_norm(self, layer):
        return layer.ln_1

    def _run_layer(self, layer, hidden_states, *, position_embeddings=None, **layer_kwargs):
        return layer(hidden_states, **layer_kwargs)  # absolute positions: no position_embeddings

    def _final_norm(self, hidden_states):
        return self.transformer.ln_f(hidden_states)


RecurrentGPT2Config.register_for_auto_class()
RecurrentGPT2LMHeadModel.register_for_auto_class("AutoModelForCausalLM")
# Importing this file (from hf_readonce, or the copy saved next to a checkpoint and loaded with
# `trust_remote_code=True`) lists the class among transformers' causal LMs, `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`:
# `Trainer`'s label smoother (`label_smoothing_factor`) shifts the labels by one only for the class names listed
# there, and would otherwise score each position's logits against that position's own token. `setdefault` makes it
# idempotent (importing again, or another copy of this file, adds nothing) and keeps any name transformers lists for
# the type. The Auto classes pair these names only with the config types transformers ships
# (`CONFIG_MAPPING_NAMES`), so no `AutoModelForCausalLM` / `AutoConfig` lookup changes; the text-generation
# pipeline's supported-model check and `Trainer`'s model card read the class as a causal LM.
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(RecurrentGPT2Config.model_type, RecurrentGPT2LMHeadModel.__name__)

__all__ = ["RecurrentGPT2Attention", "RecurrentGPT2LMHeadModel"]
