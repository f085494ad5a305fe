"""Backward compatibility: the import paths of hf-readonce 0.1.0.

Issue 10 moved most modules. Each 0.1.0 path still imports: a meta-path finder maps it to a deprecated shim in
this folder, which re-exports the new module and warns. The shims live here, not at the old paths, so that no
file is left at a moved file's old path (git then follows every move as a rename).
"""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

# 0.1.0 module path -> shim file in this folder
MOVED_MODULES = {
    "hf_readonce.models.configuration_deformer_bert": "models__configuration_deformer_bert",
    "hf_readonce.models.modeling_deformer_bert": "models__modeling_deformer_bert",
    "hf_readonce.models.configuration_readonce_bart": "models__configuration_readonce_bart",
    "hf_readonce.models.modeling_readonce_bart": "models__modeling_readonce_bart",
    "hf_readonce.models.configuration_recurrent_gpt2": "models__configuration_recurrent_gpt2",
    "hf_readonce.models.configuration_recurrent_llama": "models__configuration_recurrent_llama",
    "hf_readonce.models.modeling_recurrence": "models__modeling_recurrence",
    "hf_readonce.models.modeling_recurrent_gpt2": "models__modeling_recurrent_gpt2",
    "hf_readonce.models.modeling_recurrent_llama": "models__modeling_recurrent_llama",
    "hf_readonce.bert_to_bart": "bert_to_bart",
    "hf_readonce.qa": "qa",
    "hf_readonce.lm": "lm",
    "hf_readonce.perplexity": "perplexity",
    "hf_readonce.training": "training",
    "hf_readonce.deformer_qa": "deformer_qa",
    "hf_readonce.demo": "demo",
    "hf_readonce.readonce_tasks": "readonce_tasks",
    "hf_readonce.store.core": "store__core",
    "hf_readonce.store.adapters": "store__adapters",
    "hf_readonce.store.encode": "store__encode",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the 0.1.0 module paths of [`MOVED_MODULES`] (after every other finder has failed) and loads their shim
    under the old name."""

    def find_spec(self, fullname, path=None, target=None):
        shim = MOVED_MODULES.get(fullname)
        if shim is None:
            return None
        return importlib.util.spec_from_file_location(fullname, Path(__file__).with_name(f"{shim}.py"))


def install() -> None:
    """Append the finder to `sys.meta_path` once (called by `hf_readonce/__init__.py`)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
