"""Which stored representations a model reads: the one lookup every store-reading task shares.

A store keeps each family's representations in spaces keyed by the model's fingerprint and the adapter's settings
(`adapter.settings()`). A task that reads a store (answers, summaries) knows the model and the tokenizer, perhaps some
of the family's own settings (`cli_settings`: a window length, ReadOnce's k), and must find the one space they
point at: [`find_space`] does, and [`adapter_for_store`] returns the adapter that reads it (or, when nothing of the
model is stored and the caller will encode, the adapter that writes it). Family-independent: the adapter class comes
from the registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..store import MissingRepresentationError, RepresentationMismatchError, RepresentationStore
from ..store.maintenance import unindexed_note
from .base import one_tokenizer_fingerprint
from .fill import given_or_current_fingerprint
from .registry import get_adapter, get_adapter_class


def adapter_class_of(model) -> type:
    """The registered adapter class of `model`'s family (by `model.config.model_type`).

    Args:
        model: a transformers model (only its `config.model_type` is read).

    Returns:
        `type`: the family's adapter class (see [`hf_readonce.representations.registry.get_adapter_class`]).

    Raises:
        TypeError: `model` is not a transformers model (it has no `config.model_type`).
        ValueError: no registered family has an adapter for its model type (the known ones named).
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type is None:
        raise TypeError(f"`model` must be a transformers model, got {type(model).__name__}.")
    return get_adapter_class(model_type)


def own_settings(adapter_class: type, settings: Mapping | None) -> dict:
    """`settings` as a dict, checked to be the family's own (`adapter_class.cli_settings` names).

    Args:
        adapter_class (`type`): the family's adapter class. settings (`Mapping`, *optional*): setting -> value.

    Returns:
        `dict`: a copy of `settings` (`{}` for `None`).

    Raises:
        ValueError: a name that is not one of them (naming the family's).
    """
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(adapter_class.cli_settings))
    if unknown:
        raise ValueError(f"`settings` {unknown} are not settings of {adapter_class.model_type} representations; its "
                         f"settings: {sorted(adapter_class.cli_settings) or 'none'}.")
    return settings


def find_space(store: RepresentationStore, adapter_class: type, fingerprint: str, settings: Mapping,
               given: Iterable[str] = (), prefer: Mapping | None = None) -> dict | None:
    """The settings of the only space of `store` written with `fingerprint` and `settings`, except the family's own
    settings (`adapter_class.cli_settings`, e.g. a window length) not named in `given`, which may hold any stored
    value; where several spaces differ only in those, the one with the values of `prefer` (the model's defaults, e.g.
    the windows a checkpoint records: [`default_settings`]) is read. For an adapter built for the model:
    `find_space(store, type(adapter), current_fingerprint(adapter), adapter.settings(), given)`.

    Args:
        store ([`RepresentationStore`]): refreshed first (spaces another process wrote are seen).
        adapter_class (`type`): the family's adapter class (its `model_type` and `cli_settings` are read).
        fingerprint (`str`): the model's representation fingerprint, its weights as they are now
            ([`current_fingerprint`]).
        settings (`Mapping`): the settings a space must have (format, tokenizer fingerprint, ...; the family's own
            settings only where named in `given`).
        given (`Iterable[str]`, defaults to none): names of `cli_settings` whose value in `settings` must match; the
            others are free.
        prefer (`Mapping`, *optional*): values of the free settings that pick one of several matching spaces (the
            model's defaults); without it, or when no space has them, several matches are an error.

    Returns:
        `dict` or `None`: the space's settings; `None` when no space of the store has these settings (other
        fingerprints aside), so the caller says what is missing or encodes.

    Raises:
        RepresentationMismatchError: spaces with these settings exist only for other fingerprints (both named: other
            weights, or another compute dtype).
        ValueError: several spaces of this model match and `prefer` picks none (their settings and the options that
            pick one named), or a name in `given` that is not one of the family's `cli_settings`.
    """
    given = _check_given(adapter_class, given)
    store.refresh()
    return _choose_space(store, _spaces_with(store.spaces(), adapter_class, settings, given), adapter_class,
                         fingerprint, given, prefer)


def _check_given(adapter_class: type, given: Iterable[str]) -> set:
    """`given` as a set, checked to name only the family's own settings (the `ValueError` of [`find_space`])."""
    own, given = adapter_class.cli_settings, set(given)
    if given - set(own):
        raise ValueError(f"`given` {sorted(given - set(own))} are not settings of {adapter_class.model_type} "
                         f"representations; its settings: {sorted(own) or 'none'}.")
    return given


def _spaces_with(spaces: Iterable, adapter_class: type, settings: Mapping, given: set) -> list:
    """The spaces of `spaces` that have `settings`, except the family's own settings not in `given` (free)."""
    own = adapter_class.cli_settings
    fixed = {name: value for name, value in settings.items() if name not in own or name in given}
    return [s for s in spaces if all(s.settings.get(name) == value for name, value in fixed.items())]


def _choose_space(store: RepresentationStore, ours: list, adapter_class: type, fingerprint: str, given: set,
                  prefer: Mapping | None) -> dict | None:
    """What [`find_space`] returns or raises, given `ours`, the store's spaces with the settings asked for
    ([`_spaces_with`]): the settings of the one written with `fingerprint`, `None` when `ours` is empty."""
    own, model_type = adapter_class.cli_settings, adapter_class.model_type
    matching = [s for s in ours if s.fingerprint == fingerprint]
    if len(matching) > 1 and prefer:  # the model's defaults pick one (e.g. the windows the checkpoint records)
        preferred = [s for s in matching if all(s.settings.get(name) == value for name, value in prefer.items()
                                                if name in own and name not in given)]
        matching = preferred if len(preferred) == 1 else matching
    if len(matching) == 1:
        return dict(matching[0].settings)
    if len(matching) > 1:
        stored = "; ".join(", ".join(f"{name}={s.settings.get(name)}" for name in own) for s in matching)
        options = ", ".join(f"`{option}`" for option, _, _ in own.values())
        raise ValueError(f"store {store.path} holds this model's {model_type} representations with several "
                         f"settings ({stored}); pass the one to read ({', '.join(own)}; on the command line "
                         f"{options}).")
    if ours:
        stored = ", ".join(sorted({s.fingerprint[:16] + "..." for s in ours}))
        raise RepresentationMismatchError(
            f"store {store.path} holds {model_type} representations only for model fingerprint(s) {stored}, "
            f"not for this model's {fingerprint[:16]}... (other weights, compute dtype or config, e.g. a RoPE "
            "setting): encode the documents with this model first.")
    return None


def default_settings(model, tokenizer, settings: Mapping | None = None) -> dict | None:
    """The settings of the adapter the family builds for `model` by default (with `settings` where given): what
    [`find_space`] prefers among several stored spaces of the model (`prefer=`). `None` where the defaults do not fit
    the model (a window longer than its positions): then nothing is preferred.

    Args:
        model, tokenizer: the model (a registered family with an adapter) and its tokenizer.
        settings (`Mapping`, *optional*): the family's own settings to build with (`cli_settings` names).

    Returns:
        `dict` or `None`: `adapter.settings()` of that adapter.
    """
    try:
        return get_adapter(model, tokenizer, **dict(settings or {})).settings()
    except (ValueError, TypeError):
        return None


def probe_adapter(model, tokenizer, store: RepresentationStore, settings: Mapping | None = None):
    """An adapter of `model` whose `settings()` [`find_space`] can match against `store`: built with `settings` and the
    adapter's defaults for the family's other own settings, which `find_space` leaves free; where a default does not
    fit this model (a window longer than a small model's positions), with the free values of one of the store's
    spaces of this family instead.

    Args:
        model, tokenizer: the model (a registered family with an adapter) and its tokenizer.
        store ([`RepresentationStore`]): looked at only when a default does not fit.
        settings (`Mapping`, *optional*): the family's own settings to build with (`cli_settings` names).

    Returns:
        the family's adapter (its settings other than `settings` are not necessarily any stored space's).

    Raises:
        TypeError / ValueError: as [`adapter_class_of`]; the adapter's own errors when no stored space helps.
    """
    adapter_class = adapter_class_of(model)
    settings = dict(settings or {})
    try:
        return get_adapter(model, tokenizer, **settings)
    except ValueError:
        store.refresh()
        for space in store.spaces():
            if space.settings.get("representation") != adapter_class.representation:
                continue
            try:
                return get_adapter(model, tokenizer, **{**adapter_class.settings_kwargs(space.settings), **settings})
            except (ValueError, TypeError):
                continue
        raise


def adapter_for_store(model, tokenizer, store: RepresentationStore, *, settings: Mapping | None = None,
                      encode_missing: bool = False, batch_size: int = 8, fingerprint: str | None = None):
    """The adapter that reads `model`'s representations in `store`: with the settings of the store's only space of
    this model among those with `settings` ([`find_space`]), or, with `encode_missing` and nothing of this model
    stored yet, with `settings` (else the adapter's defaults), for what will be encoded.

    Args:
        model, tokenizer: the model (any registered family with an adapter) and its tokenizer.
        store ([`RepresentationStore`]).
        settings (`Mapping`, *optional*): the family's own settings to match (`cli_settings` names, e.g.
            `{"compression_ratio": 8}`); the others are read from the store.
        encode_missing (`bool`, defaults to `False`): whether the caller will encode what is missing.
        batch_size (`int`, defaults to 8): the adapter's encoding batch.
        fingerprint (`str`, *optional*): the adapter's [`current_fingerprint`] (its model's) when the caller has just
            computed it (it hashes the weights: a task computes it once per call); computed here when omitted, and
            checked against the model's cached fingerprint when given ([`given_or_current_fingerprint`]).

    Returns:
        the family's adapter (`adapter.settings()` are those of the space read or written). The tokenizer is
        serialized for its fingerprint once however many adapters are built to find the space
        ([`one_tokenizer_fingerprint`]).

    Raises:
        MissingRepresentationError: nothing of this family and tokenizer stored, without `encode_missing`.
        RepresentationMismatchError: only other models' representations, without `encode_missing`; or a stored space
            whose settings the adapter does not rebuild exactly.
        TypeError / ValueError: as [`adapter_class_of`] and [`find_space`]; `settings` not of the family's own; a
            `fingerprint` that is not this model's (stale, or another model's).
    """
    adapter_class = adapter_class_of(model)
    settings = own_settings(adapter_class, settings)
    with one_tokenizer_fingerprint(tokenizer):  # the probe, the default adapter and the one returned
        return _adapter_for_store(model, tokenizer, store, adapter_class, settings, encode_missing, batch_size,
                                  fingerprint)


def _adapter_for_store(model, tokenizer, store, adapter_class, settings, encode_missing, batch_size, fingerprint):
    """[`adapter_for_store`] once its arguments are checked."""
    try:
        probe = probe_adapter(model, tokenizer, store, settings)
        # a given one is checked: a stale one, or another model's, would find that model's space
        fingerprint = given_or_current_fingerprint(probe, fingerprint)
        found = find_space(store, adapter_class, fingerprint, probe.settings(), given=settings,
                           prefer=default_settings(model, tokenizer, settings))
    except RepresentationMismatchError:
        if not encode_missing:
            raise
        found = None  # only other models' representations: this model's are encoded into their own space
    if found is None:
        if not encode_missing:
            raise MissingRepresentationError(
                f"store {store.path} holds no {adapter_class.model_type} representations of this tokenizer"
                + (f" with settings {settings}" if settings else "")
                + "; encode the documents first (`hf-readonce encode`), or pass encode_missing=True "
                "(`--encode-missing`)." + unindexed_note(store))
        adapter_settings = settings
    else:
        adapter_settings = adapter_class.settings_kwargs(found)
    adapter = get_adapter(model, tokenizer, **adapter_settings, batch_size=batch_size)
    if found is not None and adapter.settings() != found:
        raise RepresentationMismatchError(f"the {adapter_class.model_type} adapter rebuilt from the stored settings "
                                          f"{found} has settings {adapter.settings()}: the store was written by another "
                                          "version of the adapter; encode the documents again.")
    return adapter


__all__ = ["adapter_class_of", "adapter_for_store", "default_settings", "find_space", "own_settings",
           "probe_adapter"]
