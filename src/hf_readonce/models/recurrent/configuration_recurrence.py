# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""Recurrence settings shared by every recurrent configuration (Yoshida, Ettinger & Gimpel 2020, "Adding Recurrence
to Pretrained Transformers for Improved Efficiency and Context Size"): their validation ([`set_recurrence_config`])
and [`RecurrenceConfigMixin`], the `__init__` that [`RecurrentGPT2Config`] and [`RecurrentLlamaConfig`] share.

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only transformers and the standard
library.
"""

import inspect

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

DEFAULT_WINDOW_SIZE = 300
DEFAULT_RECURRENCE_HIDDEN_SIZES = (200, 200, 200)
# the backbone family of the checkpoint model types the recurrent configs know: a GPT-2 checkpoint read into the
# Llama config (or the reverse) would build a model of the other family's defaults (a 7B Llama from a GPT-2
# config.json, killed for memory) with none of its weights, behind only transformers' warning
BACKBONE_OF_MODEL_TYPE = {"gpt2": "gpt2", "recurrent_gpt2": "gpt2", "llama": "llama", "recurrent_llama": "llama"}


# ----------------------------------------------------------------------------------------------------- config
def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _WindowBeyondPositionsError(ValueError):
    """The `ValueError` of [`set_recurrence_config`] for a `window_size` larger than the position table, which
    `from_dict` completes with where the window comes from."""


# Copied from hf_readonce.models.readtwice_bert.configuration_readtwice_bert._pop_init_fields
def _pop_init_fields(config_class, kwargs: dict) -> dict:
    """Remove from `kwargs` and return the keyword arguments that are fields of `config_class` or of the transformers
    config it extends (the arguments of their `__init__`, and the names its `attribute_map` gives them, such as
    GPT-2's `max_position_embeddings` for `n_positions`, which `__init__` also takes; not `PreTrainedConfig`'s own,
    which transformers handles): what a config's `from_dict` builds the config with, so that `__init__` validates
    them together and derives its defaults from them, instead of transformers setting them unchecked after
    `__init__`."""
    own = {name for klass in config_class.__mro__[:config_class.__mro__.index(PretrainedConfig)]
           if "__init__" in vars(klass) for name in inspect.signature(klass.__init__).parameters}
    own -= {"self", "args", "kwargs", *inspect.signature(PretrainedConfig.__init__).parameters}
    own |= {alias for alias, name in getattr(config_class, "attribute_map", {}).items() if name in own}
    return {key: kwargs.pop(key) for key in list(kwargs) if key in own}


def set_recurrence_config(
    config,
    *,
    max_positions: int,
    num_layers: int,
    window_size: int | None,
    window_overlap: int,
    recurrence_layer: int,
    recurrence_hidden_sizes,
    recurrence_activation: str,
) -> None:
    r"""Validate the recurrence arguments and set them on `config` (used by every recurrent config class).

    Args:
        config: the configuration object to set `window_size`, `window_overlap`, `recurrence_layer`,
            `recurrence_hidden_sizes` and `recurrence_activation` on.
        max_positions (`int`): the model's position table size (`n_positions` / `max_position_embeddings`).
        num_layers (`int`): N, the number of transformer layers.
        window_size (`int` or `None`): k, tokens per window; `None` means `min(300, max_positions)`.
        window_overlap (`int`): tokens of each window repeated from the previous one (§4.2).
        recurrence_layer (`int`): L, 1-based layer that receives the extra key/value (§3.1).
        recurrence_hidden_sizes (sequence of `int`): hidden widths of the feed-forward network.
        recurrence_activation (`str`): a key of `transformers.activations.ACT2FN`.

    Raises:
        ValueError: if `window_size` is not an int in `[1, max_positions]`, `window_overlap` not an int in
            `[0, window_size)`, `recurrence_layer` not an int in `[1, num_layers]`, a hidden size not a positive int,
            or the activation unknown.
    """
    if window_size is None:
        window_size = min(DEFAULT_WINDOW_SIZE, max_positions)
    # The range checks below follow the idiom of ReadOnceBartConfig's: each family folder travels to the Hub on its
    # own, so families do not share a validation helper.
    if not _is_int(window_size) or window_size < 1:
        raise ValueError(f"`window_size` must be a positive int, got {window_size!r}.")
    if window_size > max_positions:
        raise _WindowBeyondPositionsError(
            f"`window_size`={window_size} exceeds the model's {max_positions} position embeddings "
            "(positions restart in every window, so a window must fit in the position table)."
        )
    if not _is_int(window_overlap) or not 0 <= window_overlap < window_size:
        raise ValueError(
            f"`window_overlap` must be an int in [0, window_size={window_size}), got {window_overlap!r} "
            "(a window must bring at least one new token)."
        )
    if not _is_int(recurrence_layer) or not 1 <= recurrence_layer <= num_layers:
        raise ValueError(
            f"`recurrence_layer` (L, 1-based) must be an int in [1, num_layers={num_layers}], got {recurrence_layer!r}."
        )
    if recurrence_hidden_sizes is None:
        recurrence_hidden_sizes = list(DEFAULT_RECURRENCE_HIDDEN_SIZES)
    if isinstance(recurrence_hidden_sizes, (str, bytes)) or not hasattr(recurrence_hidden_sizes, "__iter__"):
        raise ValueError(f"`recurrence_hidden_sizes` must be a list of ints, got {recurrence_hidden_sizes!r}.")
    recurrence_hidden_sizes = list(recurrence_hidden_sizes)
    if not all(_is_int(size) and size > 0 for size in recurrence_hidden_sizes):
        raise ValueError(f"`recurrence_hidden_sizes` must hold positive ints, got {recurrence_hidden_sizes!r}.")
    if not isinstance(recurrence_activation, str) or recurrence_activation not in ACT2FN:
        raise ValueError(
            f"`recurrence_activation`={recurrence_activation!r} is not a transformers activation "
            f"(one of {sorted(ACT2FN)})."
        )
    config.window_size = window_size
    config.window_overlap = window_overlap
    config.recurrence_layer = recurrence_layer
    config.recurrence_hidden_sizes = recurrence_hidden_sizes
    config.recurrence_activation = recurrence_activation


class RecurrenceConfigMixin:
    r"""The recurrence arguments of a recurrent configuration, put before a transformers config class in the bases
    (`class RecurrentGPT2Config(RecurrenceConfigMixin, GPT2Config)`). A subclass names the attributes holding its
    position table size and depth in `max_positions_attribute` and `num_layers_attribute`.

    Args:
        window_size, window_overlap, recurrence_layer, recurrence_hidden_sizes, recurrence_activation: the
            recurrence arguments, documented with their defaults in [`RecurrentGPT2Config`] and
            [`RecurrentLlamaConfig`] (transformers documents each configuration's arguments on the class itself).
        **kwargs: the arguments of the transformers config class, unchanged.

    Raises:
        ValueError: as [`set_recurrence_config`].
    """

    max_positions_attribute: str = "max_position_embeddings"
    num_layers_attribute: str = "num_hidden_layers"
    backbone: str = ""  # the key of BACKBONE_OF_MODEL_TYPE this config reads ("gpt2", "llama")
    # the cache output is `past_key_values` before transformers 5.24, `cache` from 5.24 on
    keys_to_ignore_at_inference = ["past_key_values", "cache", "recurrent_state", "num_windows"]

    def __init__(
        self,
        window_size: int | None = None,
        window_overlap: int = 0,
        recurrence_layer: int = 2,
        recurrence_hidden_sizes: list[int] | None = None,
        recurrence_activation: str = "relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        set_recurrence_config(
            self,
            max_positions=getattr(self, self.max_positions_attribute),
            num_layers=getattr(self, self.num_layers_attribute),
            window_size=window_size,
            window_overlap=window_overlap,
            recurrence_layer=recurrence_layer,
            recurrence_hidden_sizes=recurrence_hidden_sizes,
            recurrence_activation=recurrence_activation,
        )

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        r"""`PreTrainedConfig.from_dict` (what `from_pretrained` calls with a checkpoint's `config.json` or GGUF
        metadata), refusing a checkpoint of the other backbone family.

        The keyword arguments that are fields of this class or of the transformers config it extends (the arguments
        of their `__init__`, as `from_pretrained(checkpoint, window_overlap=30)` passes them; not
        `PreTrainedConfig`'s own, which transformers handles) build the config with the saved values instead of being
        set on it afterwards (what transformers does with the others): they are validated together as in `__init__`
        ([`set_recurrence_config`]; `n_positions=128, window_size=128` is checked against the 128 given), and
        `window_size`, where the checkpoint does not record it, follows a given position table size.

        Raises:
            ValueError: `config_dict["model_type"]` is a GPT-2 type for a Llama config or the reverse, naming the
                class that reads it; or a field given or saved is invalid ([`set_recurrence_config`]), naming it (a
                recorded `window_size` that exceeds a smaller position table given says to give a `window_size`).
        """
        model_type = config_dict.get("model_type") if isinstance(config_dict, dict) else None
        backbone = BACKBONE_OF_MODEL_TYPE.get(model_type)
        if backbone is not None and cls.backbone and backbone != cls.backbone:
            right = {"gpt2": "RecurrentGPT2Config / RecurrentGPT2LMHeadModel",
                     "llama": "RecurrentLlamaConfig / RecurrentLlamaForCausalLM"}[backbone]
            raise ValueError(
                f"{cls.__name__} cannot read a checkpoint of model_type {model_type!r} (a {backbone} model, whose "
                f"fields and weights it does not have): load it with {right}."
            )
        given = _pop_init_fields(cls, kwargs)
        try:
            return super().from_dict({**config_dict, **given}, **kwargs)
        except ValueError as error:
            saved = config_dict.get("window_size") if isinstance(config_dict, dict) else None
            # the recorded window no longer fits the position table given with it: say where it comes from
            if type(error) is not _WindowBeyondPositionsError or saved is None or "window_size" in given:
                raise
            positions = cls.max_positions_attribute
            raise ValueError(f"{error} The config read records window_size={saved}: give a `window_size` that fits "
                             f"with the position table size (`from_pretrained(checkpoint, {positions}=..., "
                             f"window_size=...)`).") from None


__all__ = ["RecurrenceConfigMixin", "set_recurrence_config"]
