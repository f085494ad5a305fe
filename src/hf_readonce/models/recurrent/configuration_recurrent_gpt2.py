# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""Recurrent GPT-2 configuration (Yoshida, Ettinger & Gimpel 2020, "Adding Recurrence to Pretrained Transformers for
Improved Efficiency and Context Size")."""

from transformers import GPT2Config

from .configuration_recurrence import RecurrenceConfigMixin


class RecurrentGPT2Config(RecurrenceConfigMixin, GPT2Config):
    r"""
    Configuration of [`RecurrentGPT2LMHeadModel`]: GPT-2 run over windows of `window_size` tokens, each window
    receiving at layer L one extra key/value computed from the previous window (§3.1).

    All [`~transformers.GPT2Config`] arguments are accepted unchanged, so any GPT-2 checkpoint's `config.json` loads
    into it. The extra arguments are:

    Args:
        window_size (`int`, *optional*):
            k, tokens per window. Defaults to 300 (the paper's setting), or `n_positions` if the model has fewer
            positions. Positions restart at 0 in every window, so it must be `<= n_positions`.
        window_overlap (`int`, *optional*, defaults to 0):
            Tokens of each window repeated from the end of the previous one (§4.2). They are context only: their
            predictions are not counted again. The paper trains with the overlap it evaluates with (§5).
        recurrence_layer (`int`, *optional*, defaults to 2):
            L, the 1-based layer whose self-attention receives the recurrent vector as one extra key and value
            (block `transformer.h[L - 1]`; L - 1 blocks run before it). The paper fixes L = 2 (§5).
        recurrence_hidden_sizes (`list[int]`, *optional*, defaults to `[200, 200, 200]`):
            Hidden widths of the feed-forward network that maps the pooled window (eq. 1) to the recurrent vector
            (3 hidden layers of 200 in §5).
        recurrence_activation (`str`, *optional*, defaults to `"relu"`):
            Activation between the feed-forward layers (any key of `transformers.activations.ACT2FN`).

    Raises:
        ValueError: if `window_size` is not in `[1, n_positions]`, `window_overlap` not in `[0, window_size)`,
            `recurrence_layer` not in `[1, n_layer]`, a hidden size is not a positive int, or the activation is
            unknown.

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "path/to/recurrent-gpt2-checkpoint"
    >>> RecurrentGPT2Config = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = RecurrentGPT2Config(window_size=300, window_overlap=5)
    >>> (config.window_size, config.window_overlap, config.recurrence_layer, config.recurrence_hidden_sizes)
    (300, 5, 2, [200, 200, 200])
    ```
    """

    model_type = "recurrent_gpt2"
    max_positions_attribute = "n_positions"
    num_layers_attribute = "n_layer"
    backbone = "gpt2"
    # transformers turns config subclasses into dataclasses and would generate an `__init__` over the mixin's
    # unless the class defines one itself
    __init__ = RecurrenceConfigMixin.__init__


__all__ = ["RecurrentGPT2Config"]
