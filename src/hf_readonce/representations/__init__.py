"""The bridge between models and the store: one file per model family says how the model turns documents into
stored tensors (its adapter), which fingerprint and settings key them, how stored tensors become the model's input
again, and declares the family itself ([`register_family`], on its last line).

Adding a family means adding one file here (and its `hf_readonce/models/<family>/` folder): every module of this
folder other than `base`, `registry`, `fill`, `recompute` and `spaces` is imported below, so the registry always holds every
family, and this package re-exports what each family file lists in its `__all__`. [`fill_store`] fills a
[`~hf_readonce.store.RepresentationStore`] through any registered adapter; [`recompute_store`] recomputes stored
documents with their model and compares ([`AdapterBase.check_recompute`]); [`find_space`] and [`adapter_for_store`]
find the space of a store a model reads. They are imported on first access, so
importing this package (what `import hf_readonce` does to register the families) pulls in no store.
"""

import importlib
import pkgutil
import sys

from .base import (
    AdapterBase,
    RecomputeCheck,
    RepresentationAdapter,
    kl_divergence,
    pad_batch,
    pad_rows,
    tokenizer_fingerprint,
)
from .registry import (
    CardText,
    FamilySpec,
    family_of,
    get_adapter,
    get_adapter_class,
    register_family,
    registered_adapters,
    registered_cards,
    registered_families,
)

_SHARED = {"base", "registry", "fill", "recompute", "spaces"}
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")  # the family file registers its family

_FAMILY_NAMES = {}
for _spec in registered_families().values():
    _family_module = sys.modules.get(_spec.module)
    for _name in getattr(_family_module, "__all__", ()):
        _FAMILY_NAMES[_name] = getattr(_family_module, _name)
globals().update(_FAMILY_NAMES)

# name -> module of this folder, imported on first access: they pull in the store
_LAZY = {"EncodeStats": "fill", "StoreEncodeFunction": "fill", "fill_store": "fill", "make_encode_function": "fill",
         "SpaceRecomputeReport": "recompute", "recompute_store": "recompute", "adapter_class_of": "spaces",
         "adapter_for_store": "spaces", "find_space": "spaces"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AdapterBase", "CardText", "FamilySpec", "RecomputeCheck", "RepresentationAdapter", "family_of", "get_adapter",
    "get_adapter_class", "kl_divergence", "pad_batch", "pad_rows", "register_family", "registered_adapters",
    "registered_cards", "registered_families", "tokenizer_fingerprint",
]
__all__ += sorted([*_LAZY, *_FAMILY_NAMES])
