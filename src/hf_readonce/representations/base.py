"""Model adapters: how one model family turns document texts into the tensors kept in a [`RepresentationStore`],
and which fingerprint + settings key them. The store itself knows nothing about models.

An adapter has `model_type` (`str`), `fingerprint()` (`str`), `settings()` (JSON `dict`), `encode(texts)`
(`list[dict[str, torch.Tensor]]`, one dict per text) and `num_tokens(tensors)` (`int`). Register new model families
with [`register_adapter`] (ReadOnce, ReadTwice and recurrent models will add theirs).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import torch

from ..qa import PassageWindow, encode_windows, split_passages

_ADAPTERS: dict[str, type] = {}


def register_adapter(model_type: str, adapter_class: type) -> None:
    """Make [`get_adapter`] build `adapter_class(model, tokenizer, **settings)` for models whose
    `config.model_type == model_type`."""
    _ADAPTERS[model_type] = adapter_class


def get_adapter(model, tokenizer, **settings):
    """The adapter for `model` (chosen by `model.config.model_type`).

    Raises:
        ValueError: if no adapter is registered for that model type.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in _ADAPTERS:
        raise ValueError(
            f"no store adapter for model_type {model_type!r}; known: {sorted(_ADAPTERS)}. (A plain BERT checkpoint "
            "can be loaded as DeformerBertForQuestionAnswering.)"
        )
    return _ADAPTERS[model_type](model, tokenizer, **settings)


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


class DeformerStoreAdapter:
    r"""Stores DeFormer-BERT passage states (output of layers 1..k) for whole documents.

    A document is tokenized without special tokens (offsets kept) and cut into windows of `max_passage_length - 1`
    tokens + `[SEP]`, consecutive windows sharing `doc_stride` tokens ([`hf_readonce.qa.split_passages`], the
    windowing of the model's own QA path), so documents longer than the model's positions are covered. Each window
    is encoded by `model.encode_passages`. The stored tensors of a document with `W` windows and `T` window tokens
    in all (`[SEP]`s included) are:

    - `hidden_states`: `(T, hidden_size)` floating, the windows' states concatenated (no padding);
    - `input_ids`: `(T,)` int32; `offsets`: `(T, 2)` int32 character spans in the text, `(-1, -1)` for `[SEP]`;
    - `window_lengths`: `(W,)` int32, summing to `T`.

    Args:
        model ([`DeformerBertForQuestionAnswering`] or [`DeformerBertModel`]): with `num_decomposed_layers > 0`.
        tokenizer: the model's fast tokenizer.
        max_passage_length (`int`, defaults to 256): window length in tokens, `[SEP]` included.
        doc_stride (`int`, defaults to 64): tokens shared by consecutive windows.
        batch_size (`int`, defaults to 32): windows per `encode_passages` call.

    Raises:
        ValueError: if k = 0, if windows would exceed `max_position_embeddings - passage_position_offset`, or for
            window settings [`split_passages`] rejects.
        TypeError: if the tokenizer is not fast.
    """

    model_type = "deformer_bert"
    representation = "deformer_passage_states/v1"

    def __init__(self, model, tokenizer, max_passage_length: int = 256, doc_stride: int = 64, batch_size: int = 32):
        config = model.config
        if getattr(config, "num_decomposed_layers", 0) <= 0:
            raise ValueError("`model` must have num_decomposed_layers > 0 to cache passage states.")
        for name, value in (("max_passage_length", max_passage_length), ("doc_stride", doc_stride),
                            ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"`{name}` must be an int, got {value!r}.")
        room = config.max_position_embeddings - config.passage_position_offset
        if not 2 <= max_passage_length <= room:
            raise ValueError(
                f"`max_passage_length` must be in [2, {room}] (max_position_embeddings="
                f"{config.max_position_embeddings} - passage_position_offset={config.passage_position_offset}), "
                f"got {max_passage_length}."
            )
        if not 0 <= doc_stride < max_passage_length - 1:
            raise ValueError(f"`doc_stride` must be in [0, {max_passage_length - 1}), got {doc_stride}.")
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        self.model = model
        self.tokenizer = tokenizer
        self.max_passage_length = max_passage_length
        self.doc_stride = doc_stride
        self.batch_size = batch_size
        self._tokenizer_hash = tokenizer_fingerprint(tokenizer)

    @property
    def _encoder(self):
        return self.model.bert if hasattr(self.model, "bert") else self.model

    def fingerprint(self) -> str:
        """The model's `passage_encoder_fingerprint()` (weights of the embeddings and layers 1..k, k, position
        offset, hidden size)."""
        return self._encoder.passage_encoder_fingerprint()

    def settings(self) -> dict:
        """Representation settings: format, k, window length, stride and the tokenizer's fingerprint."""
        return {"representation": self.representation,
                "num_decomposed_layers": int(self.model.config.num_decomposed_layers),
                "max_passage_length": self.max_passage_length, "doc_stride": self.doc_stride,
                "tokenizer": self._tokenizer_hash}

    @classmethod
    def settings_match(cls, settings: dict, tokenizer) -> bool:
        """Whether stored `settings` were made by this adapter type with this tokenizer (used to find the space of
        a store when the window settings are not given)."""
        return settings.get("representation") == cls.representation and settings.get(
            "tokenizer") == tokenizer_fingerprint(tokenizer)

    def num_tokens(self, tensors: dict) -> int:
        """Tokens stored for one document (window tokens, `[SEP]`s included)."""
        return int(tensors["input_ids"].shape[0])

    def windows(self, texts: Sequence[str]) -> list[list[PassageWindow]]:
        """The windows of each text ([`split_passages`]).

        Raises:
            ValueError: naming the index of an empty or non-string text.
        """
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"document {i} is empty or not a string: nothing to encode.")
        return split_passages(self.tokenizer, list(texts), self.max_passage_length, self.doc_stride)

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """Encode documents; returns one tensor dict per text (see the class docstring for names and shapes).

        Raises:
            ValueError: naming an empty or non-string text; errors of `encode_passages`.
        """
        if isinstance(texts, str):
            raise TypeError("`texts` must be a sequence of str, not a single str.")
        windows = self.windows(texts)
        pad = self.tokenizer.pad_token_id or 0
        cache = encode_windows(self.model, windows, batch_size=self.batch_size, pad_token_id=pad)
        out = []
        for p, doc_windows in enumerate(windows):
            states = torch.cat([cache[(p, w)].float().cpu() for w in range(len(doc_windows))])
            ids = [i for window in doc_windows for i in window.input_ids]
            offsets = [o if o is not None else (-1, -1) for window in doc_windows for o in window.offsets]
            out.append({
                "hidden_states": states,
                "input_ids": torch.tensor(ids, dtype=torch.int32),
                "offsets": torch.tensor(offsets, dtype=torch.int32).reshape(-1, 2),
                "window_lengths": torch.tensor([len(w.input_ids) for w in doc_windows], dtype=torch.int32),
            })
        return out

    @staticmethod
    def unpack(tensors: dict, passage_index: int = 0) -> tuple[list[PassageWindow], list[torch.Tensor]]:
        """Inverse of [`encode`] for one document: its windows (ids, offsets as [`PassageWindow`]) and each
        window's states `(window_length, hidden_size)` (views into `hidden_states`)."""
        ids = tensors["input_ids"].tolist()
        offsets = tensors["offsets"].tolist()
        windows, states, start = [], [], 0
        for length in tensors["window_lengths"].tolist():
            end = start + length
            window_offsets = [tuple(o) if o[0] >= 0 else None for o in offsets[start:end]]
            windows.append(PassageWindow(passage_index, ids[start:end], window_offsets))
            states.append(tensors["hidden_states"][start:end])
            start = end
        return windows, states


register_adapter("deformer_bert", DeformerStoreAdapter)


class ReadOnceStoreAdapter:
    r"""Stores ReadOnce representations (Lin et al. 2021) of whole documents: `representations` `(m, d_model)`
    (m = ceil(n / k)) and `num_tokens` `(1,)` int32 per document. Documents are truncated to
    `max_document_length` tokens; longer ones are split into chunks by the model itself when
    `config.document_chunk_length` is smaller.

    Args:
        model ([`ReadOnceBartForConditionalGeneration`]), tokenizer: the model and its tokenizer.
        max_document_length (`int`, defaults to 256): tokens read per document.
        compression_ratio (`int`, *optional*): k (defaults to the model's); part of the settings, so
            representations of another k are never returned for this one.
        batch_size (`int`, defaults to 32): documents per `encode_documents` call.
    """

    model_type = "readonce_bart"
    representation = "readonce_representations/v1"

    def __init__(self, model, tokenizer, max_document_length: int = 256, compression_ratio: int | None = None,
                 batch_size: int = 32):
        self.model, self.tokenizer = model, tokenizer
        self.max_document_length, self.batch_size = max_document_length, batch_size
        self.compression_ratio = compression_ratio or model.config.compression_ratio
        self._tokenizer_hash = tokenizer_fingerprint(tokenizer)

    def fingerprint(self) -> str:
        """The document encoder's fingerprint (weights, aggregation, window and chunk settings)."""
        return self.model.document_encoder.fingerprint()

    def settings(self) -> dict:
        """Representation settings: format, k, document length and the tokenizer's fingerprint."""
        return {"representation": self.representation, "compression_ratio": self.compression_ratio,
                "max_document_length": self.max_document_length, "tokenizer": self._tokenizer_hash}

    def num_tokens(self, tensors: dict) -> int:
        """Document tokens read for one stored document."""
        return int(tensors["num_tokens"][0])

    @torch.no_grad()
    def encode(self, texts):
        """Encode documents (`Sequence[str]`) -> one tensor dict per text (see the class docstring).

        Raises:
            ValueError: an empty document (from the model).
        """
        batch = self.tokenizer(list(texts), truncation=True, max_length=self.max_document_length, padding=True,
                               return_tensors="pt").to(self.model.device)
        reps = self.model.encode_documents(batch.input_ids, batch.attention_mask, self.compression_ratio)
        out = []
        for row in range(len(texts)):
            m = int(reps.attention_mask[row].sum())
            out.append({"representations": reps.representations[row, :m].float().cpu(),
                        "num_tokens": batch.attention_mask[row].sum().to(torch.int32).reshape(1).cpu()})
        return out


register_adapter("readonce_bart", ReadOnceStoreAdapter)

__all__ = ["DeformerStoreAdapter", "ReadOnceStoreAdapter", "get_adapter", "register_adapter", "tokenizer_fingerprint"]
