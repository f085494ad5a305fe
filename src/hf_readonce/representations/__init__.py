"""The bridge between models and the store: one file per model family says how the model turns documents into
stored tensors (its adapter), which fingerprint and settings key them, how stored tensors become the model's input
again, and declares the family itself ([`register_family`], on its last line).

Adding a family means adding one file here (and its `hf_readonce/models/<family>/` folder): every module of this
folder other than `base`, `registry`, `fill`, `recompute` and `spaces` is imported below, so the registry always holds every
family, and this package re-exports what each family file lists in its `__all__`. A family of another installed
package declares the module that registers it as an entry point of the group `hf_readonce.families`
([`ENTRY_POINT_GROUP`]); [`load_family_entry_points`] imports those modules, once, after this folder's families
(`import hf_readonce` calls it, once its own names are set, so such a module may import any name of hf-readonce;
one that fails is warned about and left out). [`fill_store`] fills a [`~hf_readonce.store.RepresentationStore`]
through any registered adapter; [`recompute_store`] recomputes stored
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
    FamilyEntryPointWarning,
    FamilySpec,
    family_entry_point_failures,
    family_of,
    get_adapter,
    get_adapter_class,
    register_family,
    registered_adapters,
    registered_cards,
    registered_families,
)

__all__ = [
    "ENTRY_POINT_GROUP", "NO_ENTRY_POINTS_ENV", "AdapterBase", "CardText", "FamilyEntryPointWarning", "FamilySpec",
    "RecomputeCheck", "RepresentationAdapter", "family_entry_point_failures", "family_of", "get_adapter",
    "get_adapter_class", "kl_divergence", "load_family_entry_points", "pad_batch", "pad_rows", "register_family",
    "registered_adapters", "registered_cards", "registered_families", "tokenizer_fingerprint",
]  # and the families' names (`_export_family_names`) and, at the end, the lazy ones

# the entry point group of the families other installed packages declare
ENTRY_POINT_GROUP = "hf_readonce.families"
# set to anything but "" or "0", no entry point of ENTRY_POINT_GROUP is loaded
NO_ENTRY_POINTS_ENV = "HF_READONCE_NO_ENTRY_POINTS"

_SHARED = {"base", "registry", "fill", "recompute", "spaces"}
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")  # the family file registers its family

_FAMILY_NAMES = {}


def _export_family_names() -> None:
    """Re-export what each registered family's module lists in its `__all__` (a family registered since the last call
    included, added to `__all__` too); a name this package already binds to another object keeps it."""
    global __all__
    for spec in registered_families().values():
        family_module = sys.modules.get(spec.module)
        for name in getattr(family_module, "__all__", ()):
            value = getattr(family_module, name, None)
            if value is not None and globals().get(name, value) is value:
                _FAMILY_NAMES[name] = globals()[name] = value
    __all__ += sorted(set(_FAMILY_NAMES) - set(__all__))


_export_family_names()
_entry_points_loaded = False


def load_family_entry_points() -> dict[str, str]:
    """Import the module of every `hf_readonce.families` entry point ([`ENTRY_POINT_GROUP`]) of the installed
    packages, once per process, sorted by entry point name: each registers its family ([`register_family`]).
    `import hf_readonce` calls it after its own families are registered and re-exported (in the `hf-readonce`
    command, the first command step that reads the registry does). None is loaded when the environment variable
    `HF_READONCE_NO_ENTRY_POINTS` is set to anything but `""` or `"0"`.

    An entry point whose module fails to import, or whose registration is refused, does not stop the others nor
    `import hf_readonce`: it is warned about ([`FamilyEntryPointWarning`], naming the entry point, its package and the
    error) and listed by [`family_entry_point_failures`].

    Returns:
        `dict[str, str]`: the failed entry points of this process, name -> reason (empty when all loaded).
    """
    global _entry_points_loaded
    import os
    import warnings
    from importlib.metadata import entry_points

    from .registry import _ENTRY_POINT_FAILURES

    if _entry_points_loaded:
        return family_entry_point_failures()
    _entry_points_loaded = True
    if os.environ.get(NO_ENTRY_POINTS_ENV, "") not in ("", "0"):
        return family_entry_point_failures()
    try:
        points = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: (point.name, point.value))
    except Exception as error:  # an installed package's unreadable entry_points.txt
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        _ENTRY_POINT_FAILURES["*"] = f"the installed packages' entry points cannot be read: {reason}"
        warnings.warn(f"no hf-readonce family of another package was loaded: the installed packages' entry points "
                      f"cannot be read ({reason})", FamilyEntryPointWarning, stacklevel=2)
        points = []
    for point in points:
        try:
            point.load()
        except Exception as error:
            dist = getattr(point, "dist", None)
            package = f" of the package {dist.name} {dist.version}" if dist is not None else ""
            reason = " ".join(f"{type(error).__name__}: {error}".split())
            _ENTRY_POINT_FAILURES[point.name] = f"{point.value}{package}: {reason}"
            warnings.warn(f"the hf-readonce family entry point {point.name!r} ({point.value}){package} was not "
                          f"loaded: {reason} (hf-readonce works without that family: fix or uninstall that package, "
                          f"or set {NO_ENTRY_POINTS_ENV}=1 to load no family of another package)",
                          FamilyEntryPointWarning, stacklevel=2)
    _export_family_names()
    return family_entry_point_failures()


# name -> module of this folder, imported on first access: they pull in the store
_LAZY = {"EncodeStats": "fill", "StoreEncodeFunction": "fill", "fill_store": "fill", "make_encode_function": "fill",
         "SpaceRecomputeReport": "recompute", "recompute_store": "recompute", "adapter_class_of": "spaces",
         "adapter_for_store": "spaces", "find_space": "spaces"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):  # perhaps a name of a family registered since (e.g. its module imported by hand)
        _export_family_names()
        if name in _FAMILY_NAMES:
            return _FAMILY_NAMES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    _export_family_names()
    return sorted(set(globals()) | set(_LAZY))


__all__ += sorted(set(_LAZY) - set(__all__))
