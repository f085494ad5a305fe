"""The adapter registry (as peft's mapping of PEFT types): each family file of this folder registers its adapter
on its last line, and the CLI, [`fill_store`] and the tasks find adapters here by `config.model_type` only."""

from __future__ import annotations

_ADAPTERS: dict[str, type] = {}


def register_adapter(model_type: str, adapter_class: type) -> None:
    """Make [`get_adapter`] build `adapter_class(model, tokenizer, **settings)` for models whose
    `config.model_type == model_type` (same signature as 0.1.0's `hf_readonce.store.register_adapter`)."""
    _ADAPTERS[model_type] = adapter_class


def registered_adapters() -> dict[str, type]:
    """A copy of the registry: model type -> adapter class, for every family registered."""
    return dict(_ADAPTERS)


def get_adapter_class(model_type: str | None) -> type:
    """The adapter class registered for `model_type`, or for a checkpoint type one of them loads (e.g. `bert`,
    loaded as a DeFormer).

    Raises:
        ValueError: if no adapter is registered for that model type (the message lists the known ones).
    """
    if model_type in _ADAPTERS:
        return _ADAPTERS[model_type]
    for adapter_class in _ADAPTERS.values():
        if model_type in getattr(adapter_class, "checkpoint_model_types", ()):
            return adapter_class
    raise ValueError(
        f"no representation adapter for model_type {model_type!r}; known: {sorted(_ADAPTERS)}. (A plain BERT "
        "checkpoint can be loaded as DeformerBertForQuestionAnswering.)"
    )


def get_adapter(model, tokenizer, **settings):
    """The adapter for `model` (chosen by `model.config.model_type`), built with `settings`.

    Raises:
        ValueError: if no adapter is registered for that model type; bad settings (from the adapter).
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in _ADAPTERS:
        get_adapter_class(None if model_type is None else f"{model_type} (model)")  # raises, naming the known ones
    return _ADAPTERS[model_type](model, tokenizer, **settings)


__all__ = ["get_adapter", "get_adapter_class", "register_adapter", "registered_adapters"]
