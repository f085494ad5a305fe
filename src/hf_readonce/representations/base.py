"""The adapter protocol: how one model family turns document texts into the tensors kept in a
[`~hf_readonce.store.RepresentationStore`], which fingerprint and settings key them, and how stored tensors become
the model's own input again. The store itself knows no model; adapters are the only bridge.

A family adds one file to this folder that defines its adapter and registers it on its last line
(`register_adapter("deformer_bert", DeformerBertAdapter)`, see [`hf_readonce.representations.registry`]).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch


@runtime_checkable
class RepresentationAdapter(Protocol):
    r"""What every adapter provides (a structural protocol: adapters do not inherit from it).

    Attributes:
        model_type (`str`): the `config.model_type` of the models it adapts (the registry key).
        representation (`str`): name and version of the stored tensor layout, part of the settings.
        checkpoint_model_types (`tuple[str, ...]`): checkpoint model types [`load_model`] accepts (e.g. a plain
            `bert` checkpoint loads as a DeFormer).
        cli_settings (`dict[str, tuple[str, Any, str]]`): per settings argument of `__init__`, its command-line
            option, default and help (the CLI builds its options for each family from these).
        batch_size (`int`): documents (or windows) per model call.
    """

    model_type: ClassVar[str]
    representation: ClassVar[str]
    checkpoint_model_types: ClassVar[tuple[str, ...]]
    cli_settings: ClassVar[dict[str, tuple[str, Any, str]]]
    batch_size: int

    @classmethod
    def load_model(cls, name_or_path: str, **overrides):
        """Load the model this adapter needs from a checkpoint whose `config.model_type` is in
        `checkpoint_model_types` (returns a `PreTrainedModel`)."""

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()`: 64 hex characters, the store key of the weights."""

    def settings(self) -> dict:
        """JSON-ready representation settings (the store key of everything else that changes the tensors)."""

    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """One dict of named tensors per text (what the store keeps)."""

    def num_tokens(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Tokens read for one stored document."""

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None, dtype=None) -> Any:
        """Stored tensors of several documents -> the model's own input dataclass (e.g.
        [`DeformerPassageOutput`], [`ReadOnceDocumentEncoderOutput`]), carrying the fingerprint and settings."""


def tokenizer_fingerprint(tokenizer) -> str:
    """SHA-256 hex of a fast tokenizer's serialization (vocabulary, normalizer, pre-tokenizer, model; not the
    per-call truncation/padding state): windows and offsets depend on it, so it is part of the settings of every
    text representation.

    Raises:
        TypeError: if the tokenizer is not a fast (Rust-backed) tokenizer.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(f"a fast tokenizer is needed (offsets, fingerprint), got {type(tokenizer).__name__}.")
    # truncation and padding are per-call state that `tokenizer(..., truncation=True)` leaves on the backend; they
    # do not change how a text is split, so they must not change the fingerprint
    serialized = json.loads(backend.to_str())
    serialized.pop("truncation", None)
    serialized.pop("padding", None)
    return hashlib.sha256(json.dumps(serialized, sort_keys=True).encode()).hexdigest()


def check_positive_ints(settings: Mapping[str, Any], optional: Sequence[str] = ()) -> None:
    """Check an adapter's integer settings: each value of `settings` must be an int >= 1 (a bool is not an int);
    the names in `optional` may also be `None` (the adapter then derives a default from the model).

    Args:
        settings (`Mapping[str, Any]`): setting name -> value, checked in order.
        optional (`Sequence[str]`, defaults to `()`): names whose value may be `None`.

    Raises:
        TypeError: a value that is not an int (naming the setting).
        ValueError: a value below 1 (naming the setting).
    """
    for name, value in settings.items():
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"`{name}` must be an int, got {value!r}.")
        if value < 1:
            raise ValueError(f"`{name}` must be >= 1, got {value}.")


def pad_rows(rows: Sequence[torch.Tensor], *, device=None, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad `(length_i, hidden)` tensors into `(len(rows), max length, hidden)` and a `(len(rows), max length)`
    long mask (1 for real rows). Keeps the rows' dtype unless `dtype` is given.

    Raises:
        ValueError: if `rows` is empty.
    """
    if not rows:
        raise ValueError("nothing to pad: `rows` is empty.")
    dtype = dtype or rows[0].dtype
    width = max(r.shape[0] for r in rows)
    padded = torch.zeros(len(rows), width, rows[0].shape[-1], dtype=dtype, device=device)
    mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        padded[i, : r.shape[0]] = r.to(device=device, dtype=dtype)
        mask[i, : r.shape[0]] = 1
    return padded, mask


__all__ = ["RepresentationAdapter", "check_positive_ints", "pad_rows", "tokenizer_fingerprint"]
