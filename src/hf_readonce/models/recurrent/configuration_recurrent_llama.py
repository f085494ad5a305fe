# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""Recurrent Llama configuration: the recurrence of Yoshida, Ettinger & Gimpel (2020), "Adding Recurrence to
Pretrained Transformers for Improved Efficiency and Context Size", on Llama-family causal LMs (§6: the method is not
GPT-2 specific)."""

from transformers import LlamaConfig

from .configuration_recurrence import RecurrenceConfigMixin


class RecurrentLlamaConfig(RecurrenceConfigMixin, LlamaConfig):
    r"""
    Configuration of [`RecurrentLlamaForCausalLM`]: a Llama-family causal LM (Llama, SmolLM2, ...) run over windows
    of `window_size` tokens, each window receiving at layer L one extra key/value computed from the previous window
    (§3.1).

    All [`~transformers.LlamaConfig`] arguments are accepted unchanged, so any Llama checkpoint's `config.json` (or a
    GGUF file's metadata) loads into it. The extra arguments are:

    Args:
        window_size (`int`, *optional*):
            k, tokens per window. Defaults to 300, or `max_position_embeddings` if smaller. Positions (RoPE) restart
            at 0 in every window, so it must be `<= max_position_embeddings`.
        window_overlap (`int`, *optional*, defaults to 0):
            Tokens of each window repeated from the end of the previous one (§4.2); context only.
        recurrence_layer (`int`, *optional*, defaults to 2):
            L, the 1-based layer whose self-attention receives the recurrent vector as one extra key and value
            (`model.layers[L - 1]`). The memory key carries no rotary rotation (RoPE position 0).
        recurrence_hidden_sizes (`list[int]`, *optional*, defaults to `[200, 200, 200]`):
            Hidden widths of the feed-forward network after the eq. 1 pooling.
        recurrence_activation (`str`, *optional*, defaults to `"relu"`):
            Activation between the feed-forward layers (a key of `transformers.activations.ACT2FN`).

    Raises:
        ValueError: if `window_size` is not in `[1, max_position_embeddings]`, `window_overlap` not in
            `[0, window_size)`, `recurrence_layer` not in `[1, num_hidden_layers]`, a hidden size is not a positive
            int, or the activation is unknown.

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "path/to/recurrent-llama-checkpoint"
    >>> RecurrentLlamaConfig = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = RecurrentLlamaConfig(window_size=256, window_overlap=30)
    >>> (config.window_size, config.window_overlap, config.recurrence_layer)
    (256, 30, 2)
    ```
    """

    model_type = "recurrent_llama"
    max_positions_attribute = "max_position_embeddings"
    num_layers_attribute = "num_hidden_layers"
    backbone = "llama"
    # transformers turns config subclasses into dataclasses and would generate an `__init__` over the mixin's
    # unless the class defines one itself
    __init__ = RecurrenceConfigMixin.__init__


__all__ = ["RecurrentLlamaConfig"]
