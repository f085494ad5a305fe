# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""Convert a pretrained causal LM (GPT-2, Llama family) into its recurrent version (Yoshida et al. 2020, §3.1):
the pretrained weights unchanged, the recurrence newly initialized."""

from transformers import GPT2LMHeadModel, LlamaForCausalLM

from .configuration_recurrent_gpt2 import RecurrentGPT2Config
from .configuration_recurrent_llama import RecurrentLlamaConfig
from .modeling_recurrent_gpt2 import RecurrentGPT2LMHeadModel
from .modeling_recurrent_llama import RecurrentLlamaForCausalLM

RECURRENCE_SETTINGS = ("window_size", "window_overlap", "recurrence_layer", "recurrence_hidden_sizes",
                       "recurrence_activation")


def to_recurrent(model, **recurrence):
    r"""The recurrent version of a pretrained causal LM, with its weights unchanged and the recurrence (eq. 1 pooling
    weights, feed-forward network) newly initialized (§3.1) from torch's random generator: seed it beforehand
    (`transformers.set_seed`) for a reproducible model. Until the recurrence is trained, text after the first window
    depends on that draw; the first window is the pretrained model's exactly.

    Args:
        model (`GPT2LMHeadModel` or `LlamaForCausalLM`): the pretrained model (any Llama-family checkpoint).
        **recurrence: `window_size`, `window_overlap`, `recurrence_layer`, `recurrence_hidden_sizes`,
            `recurrence_activation` (see the recurrent configs).

    Returns:
        [`RecurrentGPT2LMHeadModel`] or [`RecurrentLlamaForCausalLM`] in the model's dtype, on its device.

    Raises:
        TypeError: for another model class, or a keyword that is not one of the five recurrence settings (a typo
            such as `recurrence_layers` would otherwise build the model with the default silently).
        ValueError: invalid recurrence settings (from the config).
    """
    unknown = sorted(set(recurrence) - set(RECURRENCE_SETTINGS))
    if unknown:
        raise TypeError(f"to_recurrent() got unknown recurrence setting(s) {', '.join(map(repr, unknown))}; it takes "
                        f"{', '.join(RECURRENCE_SETTINGS)} (the rest of the config comes from `model`).")
    if isinstance(model, GPT2LMHeadModel):
        config_class, model_class = RecurrentGPT2Config, RecurrentGPT2LMHeadModel
    elif isinstance(model, LlamaForCausalLM):
        config_class, model_class = RecurrentLlamaConfig, RecurrentLlamaForCausalLM
    else:
        raise TypeError(f"`model` must be a GPT2LMHeadModel or LlamaForCausalLM, got {type(model).__name__}.")
    settings = model.config.to_dict()
    for key in ("model_type", "architectures", "auto_map", "transformers_version"):
        settings.pop(key, None)
    config = config_class(**settings, **recurrence)
    recurrent = model_class(config).to(dtype=model.dtype, device=model.device)
    result = recurrent.load_state_dict(model.state_dict(), strict=False)
    if result.unexpected_keys or any(not k.startswith("recurrence.") for k in result.missing_keys):
        raise ValueError(f"weights did not map onto {model_class.__name__}: {result}")
    return recurrent


__all__ = ["to_recurrent"]
