"""The bridge between models and the store: one file per model family says how the model turns documents into
stored tensors (its adapter), which fingerprint and settings key them, how stored tensors become the model's input
again, and declares the family itself ([`register_family`], on its last line).

Adding a family means adding one file here (and its `hf_readonce/models/<family>/` folder): every module of this
folder other than `base`, `registry`, `fill`, `recompute` and `spaces` is imported below, so the registry always holds every
family, and this package re-exports what each family file lists in its `__all__`. A family of another installed
package declares the module that registers it as an entry point of the group `hf_readonce.families`
([`ENTRY_POINT_GROUP`]); those modules are imported next, after this folder's families, by entry point name
(none with the environment variable `HF_READONCE_NO_ENTRY_POINTS=1`). [`fill_store`] fills a
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

# the entry point group of the families other installed packages declare
ENTRY_POINT_GROUP = "hf_readonce.families"

_SHARED = {"base", "registry", "fill", "recompute", "spaces"}
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")  # the family file registers its family

_FAMILY_NAMES = {}


def _export_family_names() -> None:
    """Re-export what each registered family's module lists in its `__all__`."""
    for spec in registered_families().values():
        family_module = sys.modules.get(spec.module)
        for name in getattr(family_module, "__all__", ()):
            _FAMILY_NAMES[name] = getattr(family_module, name)
    globals().update(_FAMILY_NAMES)


def _load_family_entry_points() -> None:
    """Import the module of every `hf_readonce.families` entry point of the installed packages, sorted by entry point
    name (each calls [`register_family`] when imported); none when the environment variable
    `HF_READONCE_NO_ENTRY_POINTS` is `1`.

    Raises:
        ImportError: an entry point whose module fails to import or whose registration is refused, naming the entry
            point, its package and the error (fix or uninstall that package).
    """
    import os
    from importlib.metadata import entry_points

    if os.environ.get("HF_READONCE_NO_ENTRY_POINTS") == "1":
        return
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: (point.name, point.value)):
        try:
            point.load()
        except Exception as error:
            dist = getattr(point, "dist", None)
            package = f" of the package {dist.name} {dist.version}" if dist is not None else ""
            raise ImportError(f"the hf-readonce family entry point {point.name!r} ({point.value}){package} cannot be "
                              f"loaded: {type(error).__name__}: {error} (fix or uninstall that package; "
                              "HF_READONCE_NO_ENTRY_POINTS=1 loads no family of another package)") from error


_export_family_names()  # before the entry points: a family module may import this folder's families' names
_load_family_entry_points()
_export_family_names()

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
    "ENTRY_POINT_GROUP", "AdapterBase", "CardText", "FamilySpec", "RecomputeCheck", "RepresentationAdapter", "family_of",
    "get_adapter", "get_adapter_class", "kl_divergence", "pad_batch", "pad_rows", "register_family", "registered_adapters",
    "registered_cards", "registered_families", "tokenizer_fingerprint",
]
__all__ += sorted([*_LAZY, *_FAMILY_NAMES])
