"""hf-readonce: read a document once, reuse it everywhere.

Importing the package imports every model family declared in `hf_readonce.representations` (one file per family,
ending in [`~hf_readonce.representations.register_family`]), which registers its configs and models with
transformers' Auto classes (`AutoConfig`, `AutoModel`, `AutoModelFor...`), so
`AutoModelForQuestionAnswering.from_pretrained(path)` works on a saved checkpoint without `trust_remote_code`. Saved
checkpoints also carry `auto_map` and the modeling files, so they load with `trust_remote_code=True` where
hf-readonce is not installed. Every family's configs, models and output classes are re-exported here (as the
registry lists them).

The families of other installed packages, declared as `hf_readonce.families` entry points, are imported next, once
this package's own names are set ([`~hf_readonce.representations.load_family_entry_points`]; one that fails is
warned about and left out, never stopping the import), and re-exported too; so is a family registered later (its
module imported by hand).

Only the models and their adapters are imported here. [`RepresentationStore`] and the names a family re-exports
lazily (e.g. `DeformerDistillationTrainer`) are imported on first access, so `import hf_readonce` pulls in no
`Trainer`, store or `datasets`.

One exception: when the process is the `hf-readonce` command (its console script, or `python -m hf_readonce.cli`),
registration (which imports torch and transformers' modeling code, several seconds) is deferred to the first access
of a model name or to [`register_models`], which the commands that load a model call. So `hf-readonce --help`,
`info --store` and `verify` start without importing any model, and a Ctrl-C while a command starts stops it with its
one line.
"""

import importlib
import importlib.util
import os
import sys

__version__ = "0.1.0"

# name -> module of the names re-exported here on first access: they pull in the store, `datasets` or `Trainer`
_LAZY = {"RepresentationStore": "hf_readonce.store"}
# every family's re-exported names (filled by `register_models`)
_MODEL_NAMES: dict[str, object] = {}

_registered = False


def register_models() -> None:
    """Import every model family (`hf_readonce.representations`, whose family files call `register_family`), which
    registers it with transformers' Auto classes, then the families of other installed packages (their
    `hf_readonce.families` entry points), and re-export the families' names here (idempotent). Runs on
    `import hf_readonce`, except in the `hf-readonce` console script, which calls it only for commands that load a
    model."""
    global _registered
    if _registered:
        return
    from .representations import load_family_entry_points
    from .representations.registry import _on_register

    _export_families()
    _registered = True  # before the entry points: their modules may import any name of this package
    _on_register.append(_export_families)  # a family registered from now on is re-exported at once
    load_family_entry_points()


def _export_families(*_) -> None:
    """Re-export every registered family's names here (and its lazy names) and list them in `__all__`; a name this
    package already binds to another object keeps it (`register_family` refuses a family that would clash)."""
    global __all__
    from .representations import registered_families

    for spec in registered_families().values():
        for name, value in spec.exported().items():
            if globals().get(name, value) is value:
                _MODEL_NAMES[name] = globals()[name] = value
        for name, module in spec.lazy_exports.items():
            _LAZY.setdefault(name, module)
    __all__ = sorted([*_MODEL_NAMES, *_LAZY, "__version__", "register_models"])


def _is_console_script() -> bool:
    """Whether this process is the `hf-readonce` command: its console script, or `python -m hf_readonce.cli` (as
    `torchrun` and `accelerate launch` start it), whose package is imported while `sys.argv[0]` is still `"-m"` and
    the module named in `sys.orig_argv` just before the command's own arguments is `hf_readonce.cli`."""
    if sys.argv and os.path.basename(sys.argv[0]) in ("hf-readonce", "hf-readonce.exe"):
        return True
    original = list(getattr(sys, "orig_argv", ()))
    if not sys.argv or sys.argv[0] != "-m" or len(original) < len(sys.argv) + 1:
        return False
    module = original[len(original) - len(sys.argv)]  # `-m hf_readonce.cli`, `-um hf_readonce.cli` or `-mhf_readonce.cli`
    return module == "hf_readonce.cli" or (module.startswith("-") and module.endswith("mhf_readonce.cli"))


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if not _registered and (name == "__all__" or not name.startswith("_")):
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule: the import system loads it
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        register_models()  # deferred by the console script: a family's name, or one of its lazy names
        if name in globals():
            return globals()[name]
        return __getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    register_models()
    return sorted(set(globals()) | set(_LAZY))


# last: a family module of another package (an entry point) imported from here finds every name above
if not _is_console_script():
    register_models()
