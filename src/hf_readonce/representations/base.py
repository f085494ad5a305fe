"""The adapter protocol: how one model family turns document texts into the tensors kept in a
[`~hf_readonce.store.RepresentationStore`], which fingerprint and settings key them, and how stored tensors become
the model's own input again. The store itself knows no model; adapters are the only bridge.

A family adds one file to this folder that defines its adapter and declares the family on its last line
(`register_family(name=..., adapter=MyAdapter, ...)`, see [`hf_readonce.representations.registry`]).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import math
import sys
import threading
import types
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
        """One dict of named tensors per text (what the store keeps), in the order of `texts`. The names, shapes and
        dtypes are the family's, listed in its adapter's class docstring (e.g. LongDoc BART's `hidden_states` of
        shape `(n, d_model)` and `num_tokens` of shape `(1,)` for a document of n tokens)."""

    def num_tokens(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Tokens read for one stored document (`tensors`: one dict as [`encode`] writes it, the family's names and
        shapes)."""

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None, dtype=None) -> Any:
        """Stored tensors of several documents (dicts as [`encode`] writes them) -> the model's own input dataclass
        (e.g. [`DeformerPassageOutput`], [`ReadOnceDocumentEncoderOutput`]), carrying the fingerprint and settings.
        Its tensors are the documents' right-padded to the longest and stacked: first dimension `len(stored)`, or
        one row per window (DeFormer) or segment (ReadTwice) of every document; each adapter's `read` gives the
        shapes."""


# the re-entrant lock of each tokenizer backend ([`tokenizer_lock`]), dropped with it; the registry is one object of
# the process, kept on a module registered in `sys.modules`, so that every copy of this code (each pipeline file
# carries one, and a pipeline loaded from the Hub is a module of its own) takes the same lock for a tokenizer
_TOKENIZER_LOCKS: weakref.WeakKeyDictionary = vars(sys.modules.setdefault(
    "_hf_readonce_tokenizer_locks", types.ModuleType("_hf_readonce_tokenizer_locks"))).setdefault(
    "locks", weakref.WeakKeyDictionary())


def tokenizer_lock(tokenizer):
    """The re-entrant lock that serialises calls of `tokenizer`; every tokenizer call of hf-readonce (adapters,
    tasks, pipelines) is made holding it, across the whole call and never across model work:
    `with tokenizer_lock(tokenizer): batch = tokenizer(texts, truncation=True, max_length=n)`.

    A fast tokenizer keeps its truncation and padding settings on its Rust backend between calls: a call sets them,
    then encodes with the GIL released, so two threads calling one tokenizer with different `truncation`,
    `max_length` or `padding` can each encode with the other's settings (a document silently cut short). Calls made
    holding this lock never mix settings. There is one lock per backend (`tokenizer.backend_tokenizer`, which a
    shallow copy shares; a tokenizer without one is its own key), in a weak-keyed registry that every copy of this
    function in the process shares (each pipeline file carries one) and that lets the lock go with the tokenizer; an
    object that cannot be weakly referenced shares one lock with the other objects of its class. Decoding uses no
    per-call state and is not serialised. A tokenizer call made without the lock (a user's own, in another thread) is
    not covered: hold the lock around it, or give that thread its own `copy.deepcopy(tokenizer)`.

    Args:
        tokenizer: any tokenizer object (a transformers fast or slow tokenizer, or one of another kind).

    Returns:
        the lock (a `threading.RLock`), the same object on every call with this tokenizer: re-entrant, so a helper
        called while it is held takes it again without blocking. Nothing is raised.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    key = tokenizer if backend is None else backend
    try:
        lock = _TOKENIZER_LOCKS.get(key)
    except TypeError:  # cannot be weakly referenced (or hashed): one lock for the objects of its class
        key = type(key)
        lock = _TOKENIZER_LOCKS.get(key)
    if lock is None:  # an atomic insert: two threads asking at once get the same lock
        lock = _TOKENIZER_LOCKS.setdefault(key, threading.RLock())
    return lock


# the fingerprints of the last tokenizer serializations seen (a few entries, keyed by `_tokenizer_cache_key`, which
# leaves out the per-call truncation/padding state and holds no megabyte string): parsing and re-serializing a
# vocabulary-sized JSON costs tens of milliseconds, reading the serialization about one
_TOKENIZER_FINGERPRINTS: dict = {}


def _tokenizer_cache_key(raw: str) -> tuple:
    """The cache key of a tokenizer serialization (`backend.to_str()`) without its truncation and padding state.
    The tokenizers JSON starts with `{"version":...,"truncation":...,"padding":...,"added_tokens":...`: the small
    object before `"added_tokens"` is parsed, truncation and padding dropped from it, and the rest is keyed by its
    BLAKE2b digest, so two serializations that differ in anything else never share a key. A serialization laid out
    otherwise is keyed by the BLAKE2b digest of all of it (truncation and padding then count)."""
    cut = raw.find(',"added_tokens":')
    if raw.startswith("{") and cut > 0:
        try:
            head = json.loads(raw[:cut] + "}")  # parses only if the key is at the top level
        except ValueError:
            head = None
        if isinstance(head, dict):
            head.pop("truncation", None)
            head.pop("padding", None)
            return "head", json.dumps(head, sort_keys=True), hashlib.blake2b(raw[cut:].encode()).hexdigest()
    return "whole", hashlib.blake2b(raw.encode()).hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """SHA-256 hex of a fast tokenizer's serialization (vocabulary, normalizer, pre-tokenizer, model; not the
    per-call truncation/padding state): windows and offsets depend on it, so it is part of the settings of every
    text representation. The digest is cached by the serialization (`backend.to_str()`) less its truncation and
    padding state ([`_tokenizer_cache_key`]), so a tokenizer changed in any other way (an added token, another
    normalizer) is hashed again, while a repeated call, after any truncation or padding, costs one serialization
    and a BLAKE2b of it.

    Raises:
        TypeError: if the tokenizer is not a fast (Rust-backed) tokenizer.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(f"a fast tokenizer is needed (offsets, fingerprint), got {type(tokenizer).__name__}.")
    raw = backend.to_str()
    key = _tokenizer_cache_key(raw)
    digest = _TOKENIZER_FINGERPRINTS.get(key)
    if digest is None:
        # truncation and padding are per-call state that `tokenizer(..., truncation=True)` leaves on the backend;
        # they do not change how a text is split, so they must not change the fingerprint
        serialized = json.loads(raw)
        serialized.pop("truncation", None)
        serialized.pop("padding", None)
        digest = hashlib.sha256(json.dumps(serialized, sort_keys=True).encode()).hexdigest()
        # the oldest first (insertion order), from one copy of the keys: another thread may add or drop one
        # meanwhile (an iterator over the cache itself would then raise)
        for oldest in list(_TOKENIZER_FINGERPRINTS)[: max(len(_TOKENIZER_FINGERPRINTS) - 7, 0)]:
            _TOKENIZER_FINGERPRINTS.pop(oldest, None)
        _TOKENIZER_FINGERPRINTS[key] = digest
    return digest


@contextlib.contextmanager
def _call_scope(variable: contextvars.ContextVar, owner, initial):
    """Hold `[owner, initial]` in `variable` for the block (the state a task call keeps of one object, e.g. its
    tokenizer's fingerprint once computed), restored on leaving; within a block already open for the same `owner`
    (by identity) the open one's state is shared."""
    held = variable.get()
    if held is not None and held[0] is owner:
        yield
        return
    token = variable.set([owner, initial])
    try:
        yield
    finally:
        variable.reset(token)


# the tokenizer of the task call under way and its fingerprint, once computed ([`one_tokenizer_fingerprint`])
_CALL_TOKENIZER: contextvars.ContextVar = contextvars.ContextVar("hf_readonce_call_tokenizer", default=None)


@contextlib.contextmanager
def one_tokenizer_fingerprint(tokenizer):
    """Within the block, [`scoped_tokenizer_fingerprint`] of `tokenizer` (this object) is computed once, the first
    time it is asked for, and then returned as it is: what a task entry point wraps its work in, since it builds
    several adapters of one tokenizer (one that finds the stored space, the default one it prefers, the one that
    reads it), each of which serialized the whole tokenizer to hash it (about 0.05 s for SmolLM2's). The value is
    [`tokenizer_fingerprint`]'s, so the same stores are found. The tokenizer must not be changed within the block
    (another normalizer); an added token is caught all the same (the vocabulary's size is compared on each use, and
    the digest computed again when it changed). The truncation and padding state that tokenizing leaves never
    counts. A block nested in one of the same tokenizer shares its digest.

    Args:
        tokenizer: the call's tokenizer (nothing is computed on entering: a tokenizer of the wrong type is refused
            where an adapter is built, as without the block).
    """
    with _call_scope(_CALL_TOKENIZER, tokenizer, None):
        yield


def scoped_tokenizer_fingerprint(tokenizer) -> str:
    """[`tokenizer_fingerprint`], computed once per [`one_tokenizer_fingerprint`] block of this tokenizer (what the
    adapters record in their settings); outside such a block, computed on each call.

    Raises:
        TypeError: if the tokenizer is not a fast (Rust-backed) tokenizer.
    """
    held = _CALL_TOKENIZER.get()
    if held is None or held[0] is not tokenizer:
        return tokenizer_fingerprint(tokenizer)
    # computed again after a token was added within the block (which it must not see)
    if held[1] is None or held[1][1] != len(tokenizer):
        held[1] = (tokenizer_fingerprint(tokenizer), len(tokenizer))
    return held[1][0]


class DocumentError(ValueError):
    """One document of a batch cannot be encoded (empty, not a string, or no token left after tokenization, e.g. a
    text of only control or zero-width characters). [`fill_store`] sets such a document aside, naming it by its id,
    and encodes the rest of the batch.

    Attributes:
        index (`int`): the document's position in the texts given to `encode`.
        reason (`str`): what is wrong with it, without its position.
    """

    def __init__(self, index: int, reason: str):
        super().__init__(f"document {index} {reason}")
        self.index = index
        self.reason = reason


_INT_VIEWS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def device_checksum(flat: torch.Tensor) -> torch.Tensor:
    """A position-dependent checksum of a 1-d tensor's values, computed where the tensor is (no copy to the host, no
    synchronization): each value, read as an integer of its width, is mixed with its position (splitmix64's odd
    constants and an xor-shift, modulo 2^64) and the mixed values are summed modulo 2^64. The mix is one-to-one in
    the value for each position, so a change of a single value always changes the sum, and a value moved to another
    position (two rows swapped) is mixed differently, so a permutation changes it too except with a chance of about
    2^-64. Chunks of 2^22 elements bound the memory it takes.

    Args:
        flat (`torch.Tensor`): a 1-d tensor of any dtype of 1, 2, 4 or 8 bytes, on any device (the CPU included).

    Returns:
        `torch.Tensor`: a 0-d int64 tensor on `flat`'s device.
    """
    ints = flat.contiguous().view(_INT_VIEWS[flat.element_size()])
    total = torch.zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, ints.numel(), 1 << 22):
        values = ints[start:start + (1 << 22)].to(torch.int64)
        positions = torch.arange(start, start + values.numel(), dtype=torch.int64, device=flat.device)
        mixed = (values + positions * -7046029254386353131) * -4658895280553007687  # wraps around modulo 2^64
        # a logical shift (torch's `>>` on int64 is arithmetic, which made the xor-shift two-to-one)
        mixed = torch.bitwise_xor(mixed, (mixed >> 31) & ((1 << 33) - 1)) * -7723592293110705685
        total += mixed.sum(dtype=torch.int64)
    return total


def weights_digest(model: torch.nn.Module) -> str:
    """A cheap digest of a model's parameters as they are now (names, dtypes, shapes, data pointers and contents): the
    key [`current_fingerprint`] compares before it rehashes anything.

    CPU parameters: xxh3-128 of their raw bytes (every byte read once: about 0.1 s for all 109M parameters of a
    bert-base-sized model on one shared core, against about 0.55 s for the SHA-256 fingerprint of its embeddings
    and 4 layers). Parameters on an accelerator are digested where they are, without a copy to the host: a
    position-dependent checksum of each ([`device_checksum`]), so a changed value always shows, and values moved
    within a parameter (two rows swapped) show except with a chance of about 2^-64.

    Args:
        model (`torch.nn.Module`): any module.

    Returns:
        `str`: 32 hex characters.
    """
    import xxhash

    digest, sums = xxhash.xxh3_128(), []
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            digest.update(f"{name}|{parameter.dtype}|{tuple(parameter.shape)}|{parameter.data_ptr()}|".encode())
            flat = parameter.detach().reshape(-1)
            if flat.numel() == 0 or flat.device.type == "meta":  # no values to read (an offloaded parameter)
                continue
            if flat.device.type == "cpu":
                digest.update(memoryview(flat.contiguous().view(torch.uint8).numpy()))
            else:
                sums.append(device_checksum(flat))
    if sums:
        digest.update(str(torch.stack(sums).tolist()).encode())  # one synchronization
    return digest.hexdigest()


# the model of the task call under way, and whether its weights were digested in it ([`one_weights_digest`])
_CALL_WEIGHTS: contextvars.ContextVar = contextvars.ContextVar("hf_readonce_call_weights", default=None)


@contextlib.contextmanager
def one_weights_digest(model):
    """Within the block, [`current_fingerprint`] of `model` (this object, or an adapter of it) digests its weights
    once, the first time it is asked for, and then returns the model's cached fingerprint: what a task entry point
    that reads a store wraps its work in, since the steps it runs (finding the space, filling what is missing with
    [`hf_readonce.representations.fill.fill_store`], reading) each take the weights as they are now. The weights must
    not be changed within the block (the task's own code runs in it, no caller's); outside it, every call digests
    them. A block nested in one of the same model shares its digest.

    Args:
        model: the call's model (nothing is computed on entering; any object).
    """
    with _call_scope(_CALL_WEIGHTS, model, False):
        yield


def digests_weights_once(task):
    """Decorator of a task entry point `task(model, ...)` that reads a store: its whole call runs within a
    [`one_weights_digest`] block of its `model` (the first argument, or `model=`), so that the steps it runs digest
    the weights once between them ([`hf_readonce.representations.fill.fill_store`] included, which checks the
    fingerprint it is given against the weights as they are now)."""

    @functools.wraps(task)
    def call(*args, **kwargs):
        with one_weights_digest(args[0] if args else kwargs.get("model")):
            return task(*args, **kwargs)

    return call


def current_fingerprint(adapter_or_model) -> str:
    """The representation fingerprint of the model's weights as they are *now*: what keys a store lookup or write.

    Every model caches its `representation_fingerprint()` and recomputes it when the config changes or a parameter
    is replaced or modified in place, which it learns from torch's version counters. An edit through `.data`
    (`weight.data.add_(1e-3)`, `weight.data.copy_(...)`) bumps no counter, so the cached fingerprint would stay
    the old one and a store would serve the old weights' representations under it. This function compares a cheap
    digest of the weights ([`weights_digest`]) with the one it saw last for this model; when they differ (or on its
    first call for the model) it marks every parameter as modified (`torch.autograd.graph.increment_version`: no
    byte is written), so the model hashes its weights again. The store's entry points ([`fill_store`],
    `answer_from_store`, `answer_with_document_caches`, `recompute_store`) call it once per call; a model's own
    checks in between use the refreshed cache. Within a [`one_weights_digest`] block of the model (a task's call)
    only its first call digests the weights.

    Cost, measured on a bert-base-sized DeFormer (fp32, one shared CPU core; `benchmarks/results/
    current_fingerprint_cost.json`): about 0.1 s per call with the weights unchanged (the digest), 0.66 s (k=4) to
    1.0 s (k=9) on a first call or after an edit (digest and rehash).

    Don't call it between a forward pass and its `backward()` after the weights changed (autograd would see the
    parameters as modified).

    Args:
        adapter_or_model: a representation adapter (its `model` is checked, then its `fingerprint()` returned) or a
            model with `representation_fingerprint()`.

    Returns:
        `str`: 64 hex characters.

    Raises:
        TypeError: if it is neither.
    """
    if isinstance(adapter_or_model, torch.nn.Module):
        model, ask = adapter_or_model, getattr(adapter_or_model, "representation_fingerprint", None)
    else:
        model, ask = getattr(adapter_or_model, "model", None), getattr(adapter_or_model, "fingerprint", None)
    if not callable(ask) or not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a representation adapter or a model with `representation_fingerprint()`, got "
                        f"{type(adapter_or_model).__name__}.")
    held = _CALL_WEIGHTS.get()
    scoped = held is not None and held[0] is model
    if scoped and held[1]:  # digested in this task call, whose weights do not change
        return ask()
    digest = weights_digest(model)
    if scoped:
        held[1] = True
    if model.__dict__.get("_hf_readonce_weights_digest") != digest:
        increment = getattr(torch.autograd.graph, "increment_version", None)
        try:
            for parameter in model.parameters():
                increment(parameter)
        except (TypeError, RuntimeError):  # torch < 2.1 (no increment_version) or an inference tensor
            for module in model.modules():  # forget the caches the models of this package keep
                if getattr(module, "_fingerprint_cache", None) is not None:
                    module._fingerprint_cache = None
                module.__dict__.pop("_document_cache_fingerprint", None)
        model.__dict__["_hf_readonce_weights_digest"] = digest  # not a submodule nor a parameter: plain attribute
    return ask()


def current_fingerprint_if_any(model) -> str | None:
    """[`current_fingerprint`] of `model` when it has `representation_fingerprint()` (every model of a registered
    family), else `None`. What a store-reading task computes once at its start and passes on as `fingerprint=` to
    the steps that find, fill and read its space, so that the weights are digested once per call; a model of another
    type gets `None`, and the task's own check of the model (its family adapter) then names what it expects.

    Args:
        model: the task's model (any object).

    Returns:
        `str` or `None`: 64 hex characters, or `None` for an object without `representation_fingerprint`.

    Raises:
        TypeError: as [`current_fingerprint`], for an object with `representation_fingerprint` that is not a
            `torch.nn.Module`.
    """
    return current_fingerprint(model) if hasattr(model, "representation_fingerprint") else None


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


def pad_batch(rows: Sequence[Sequence[int]], pad_value: int = 0) -> torch.Tensor:
    """Right-pad lists of ints into a `(len(rows), max_len)` LongTensor."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def kl_divergence(reference_log_probs: torch.Tensor, other_log_probs: torch.Tensor) -> torch.Tensor:
    """KL(reference ‖ other) in nats, per row: `sum_i p_i (log p_i - log q_i)` over the last dimension, with
    `p = exp(reference_log_probs)`; classes where `p == 0` (e.g. masked positions, `-inf`) add nothing.

    Args:
        reference_log_probs, other_log_probs (`torch.Tensor` of shape `(..., num_classes)`): log-probabilities
            (each row sums to 1 in probability), renormalized and summed in fp64 (in fp32 the KL of two nearly equal
            distributions over a large vocabulary rounds to small negative values).

    Returns:
        `torch.Tensor` of shape `(...)`, fp64: `inf` where `other` gives probability 0 to a class `reference` does
        not.

    Raises:
        ValueError: if the shapes differ.
    """
    if reference_log_probs.shape != other_log_probs.shape:
        raise ValueError(f"log-probabilities of different shapes: {tuple(reference_log_probs.shape)} and "
                         f"{tuple(other_log_probs.shape)}.")
    # renormalized in fp64: log-probabilities from an fp32 log_softmax sum to 1 only to ~1e-7
    reference = reference_log_probs.double().log_softmax(-1)
    other = other_log_probs.double().to(reference_log_probs.device).log_softmax(-1)
    p = reference.exp()
    terms = torch.where(p > 0, p * (reference - other), torch.zeros_like(p))
    return terms.sum(-1)


def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`log_softmax` over the last dimension of `logits` restricted to `mask` (1 = a real class): masked classes get
    `-inf` (probability 0). Computed in fp32.

    Args:
        logits (`torch.Tensor` of shape `(rows, classes)`), mask (`torch.Tensor` of the same shape).
    """
    return logits.float().masked_fill(~mask.bool().to(logits.device), float("-inf")).log_softmax(-1)


@dataclass
class RecomputeCheck:
    r"""What recomputing one stored document with the model found (see [`AdapterBase.check_recompute`]).

    Attributes:
        max_abs_diff (`float`): the largest `|stored - fresh|` over every floating tensor of the document, compared in
            fp32 (the stored side in its storage dtype, so an fp16 store shows its rounding, about 1e-3 of the values'
            size). `inf` if a tensor's shape differs.
        tensor_max_abs_diff (`dict[str, float]`): the same, per floating tensor name.
        kl (`float`, *optional*): the largest KL(fresh ‖ stored), in nats, between the model's output distribution
            computed from the fresh tensors and from the stored ones (`kl_kind` says which); `None` where the family
            has no output distribution to compare (then `max_abs_diff` is the only figure).
        kl_kind (`str`, *optional*): which distribution `kl` compares, e.g. "next-token distribution after a probe
            prompt".
        mismatched (`list[str]`): tensors whose shape differs or whose integer values (token ids, offsets, windows)
            differ: the document was not read the same way (another tokenizer or settings).
        recomputed_from (`str`): `"text"` (the document's text, the whole encode path) or `"stored tokens"` (the
            token ids kept in the store).
    """

    max_abs_diff: float
    tensor_max_abs_diff: dict = field(default_factory=dict)
    kl: float | None = None
    kl_kind: str | None = None
    mismatched: list = field(default_factory=list)
    recomputed_from: str = "text"

    @property
    def ok(self) -> bool:
        """No tensor of another shape or other integer values (the numbers are for the user to judge)."""
        return not self.mismatched

    def as_dict(self) -> dict:
        """JSON-ready (an infinite difference is written as the string "inf")."""
        def number(x):
            return None if x is None else (x if math.isfinite(x) else str(x))

        return {"max_abs_diff": number(self.max_abs_diff),
                "tensor_max_abs_diff": {k: number(v) for k, v in self.tensor_max_abs_diff.items()},
                "kl": number(self.kl), "kl_kind": self.kl_kind, "mismatched": list(self.mismatched),
                "recomputed_from": self.recomputed_from}


def texts_cut(tokenizer, texts: Sequence[str], max_length: int, *, add_special_tokens: bool = True) -> int:
    """How many of `texts` hold more than `max_length` tokens, i.e. are cut by
    `tokenizer(texts, truncation=True, max_length=max_length, add_special_tokens=add_special_tokens)`. Tokenized
    without truncation, 256 texts at a time (a large set is not held as token lists at once), each call holding
    [`tokenizer_lock`]; the tokenizer's warning about sequences longer than the model's maximum is not shown (those
    lengths are what is asked for).

    Args:
        tokenizer: a transformers tokenizer.
        texts (`Sequence[str]`): documents, questions or prompts.
        max_length (`int`): tokens read per text, special tokens included.
        add_special_tokens (`bool`, defaults to `True`): as the text is read.

    Returns:
        `int`: the number of texts longer than `max_length` tokens.
    """
    return sum(_texts_cut_each(tokenizer, texts, max_length, add_special_tokens=add_special_tokens))


def _texts_cut_each(tokenizer, texts: Sequence[str], max_length: int, *, add_special_tokens: bool = True
                    ) -> list[bool]:
    """[`texts_cut`] per text: whether each of `texts` holds more than `max_length` tokens, in order."""
    texts = list(texts)
    if not texts:
        return []
    if hasattr(tokenizer, "deprecation_warnings"):
        tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
    cut = []
    for start in range(0, len(texts), 256):
        with tokenizer_lock(tokenizer):
            lengths = tokenizer(texts[start : start + 256], add_special_tokens=add_special_tokens,
                                return_length=True)["length"]
        cut += [length > max_length for length in lengths]
    return cut


def _defined_at(obj, name: str) -> int:
    """Where `obj` takes its attribute `name` from: -1 for its own (instance) attribute, else the index in its type's
    MRO of the first class that defines it (the MRO's length where none does)."""
    if name in getattr(obj, "__dict__", {}):
        return -1
    mro = type(obj).__mro__
    return next((index for index, klass in enumerate(mro) if name in vars(klass)), len(mro))


def documents_cut_each_of(adapter):
    """The method giving `adapter`'s per-document cut flags (its `documents_cut_each`), where they are the
    per-document form of its own count (`documents_cut`); what [`hf_readonce.representations.fill_store`] records as
    `cut` with each document and [`~fill.stored_documents_cut`] reads back.

    `documents_cut_each` is the one hook an adapter overrides to say which documents it cuts ([`AdapterBase`] derives
    `documents_cut` from it). An adapter whose `documents_cut` is defined below the class that gives its
    `documents_cut_each` (an [`AdapterBase`] subclass overriding the count alone, as adapters did before the flags
    existed) counts in its own way, which the inherited flags would contradict: it gets `None`, and then no flag is
    recorded and its `documents_cut` counts.

    Args:
        adapter: a representation adapter (any object).

    Returns:
        the bound `documents_cut_each`, or `None`: the adapter has none (not callable), or it overrides
        `documents_cut` without it.
    """
    each = getattr(adapter, "documents_cut_each", None)
    if not callable(each):
        return None
    if callable(getattr(adapter, "documents_cut", None)) and (
            _defined_at(adapter, "documents_cut") < _defined_at(adapter, "documents_cut_each")):
        return None
    return each


class AdapterBase:
    r"""Behaviour shared by the adapters of this folder (they inherit it; the [`RepresentationAdapter`] protocol
    does not require it): rebuilding an adapter from a stored space's settings, and recomputing a stored document to
    check it ([`check_recompute`], what `hf-readonce verify --recompute N` runs).

    A family adapter provides, besides the protocol:

    - `recompute_needs_text` (`bool`): whether its stored tensors lack the tokens they were read from (then only the
      document's text can recompute them); otherwise it implements [`recompute_from_stored`];
    - [`output_log_probs`] and `output_distribution` (a description) when its model has an output distribution that
      stored tensors feed (next-token, answer-span start/end, first decoder step);
    - `generation_inputs(read, prompt=None)` when its family is registered with `summarize=True`: the `generate()`
      arguments of what [`read`] returns ([`hf_readonce.tasks.summarization_store.summarize_from_store`]), and
      `summary_prompt`, the default text read with each document (`None`: the family takes no prompt);
    - `max_prompt_length` (`int`) where it reads a question or a prompt with the stored representations and cuts it
      to a number of tokens: the family's default as a class attribute, and on an adapter the checkpoint's own
      ([`prompt_length_of`]: the `max_question_length` its config records, else the default); what
      [`questions_cut`] counts by default;
    - [`stores_representations`] where some models of its family have nothing to store;
    - [`documents_cut_each`] where it tells otherwise which documents it cuts (by default: those its tokenizer makes
      longer than `max_document_length` tokens): the one hook, which [`documents_cut`] sums and
      [`hf_readonce.representations.fill_store`] records with each document. An adapter that overrides
      [`documents_cut`] alone (the count, without the flags) keeps its count: `fill_store` then records no `cut` flag
      and counts with it, and [`~fill.stored_documents_cut`] asks it ([`documents_cut_each_of`]).
    """

    recompute_needs_text: ClassVar[bool] = True
    summary_prompt: ClassVar[str | None] = None
    max_document_length: int | None = None  # tokens read per document, where an adapter cuts longer ones
    # tokens read of a question or prompt with the stored representations, where the adapter cuts longer ones
    max_prompt_length: ClassVar[int | None] = None
    output_distribution: ClassVar[str | None] = None
    # fixed probe text read with the stored states where the output distribution needs a question or a prompt
    probe_question: ClassVar[str] = "What is this document about?"

    @classmethod
    def prompt_length_of(cls, config) -> int | None:
        """Tokens read of a question or prompt with the stored representations for a checkpoint of this family: the
        question length its config records it was trained with (`config.max_question_length`, the one name of every
        family), else the family's default `max_prompt_length`.

        Args:
            config (`PretrainedConfig`): the checkpoint's config (only `max_question_length` is read).

        Returns:
            `int` or `None`: `None` where the family reads no question with the stored representations (whatever the
            config records).
        """
        if cls.max_prompt_length is None:
            return None
        recorded = getattr(config, "max_question_length", None)
        return recorded if recorded is not None else cls.max_prompt_length

    @classmethod
    def check_model(cls, model) -> None:
        """Raise unless `model` is a model of this adapter's family (`model.config.model_type == cls.model_type`),
        before its constructor reads a setting of that family's config.

        Args:
            model: the model given to the adapter's constructor.

        Raises:
            TypeError: a model of another family (e.g. a ReadOnce model given to the DeFormer adapter), or an object
                without a transformers config, naming its class and model type.
        """
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type != cls.model_type:
            raise TypeError(f"`model` must be a {cls.model_type} model for {cls.__name__}, got {type(model).__name__} "
                            f"(model_type {model_type!r}); `hf_readonce.representations.get_adapter(model, tokenizer)` "
                            "builds the adapter of a model's own family.")

    @classmethod
    def stores_representations(cls, model) -> bool:
        """Whether `model` computes document representations that can be stored (`True` here): an adapter returns
        `False` for the models of its family whose document part depends on the question, which
        [`hf_readonce.hub.publish.publish`] then publishes without a `representation_format.json`.

        Args:
            model: a model of the adapter's family.
        """
        return True

    def documents_cut(self, texts: Sequence[str]) -> int:
        """How many of `texts` hold more tokens than the adapter reads (`max_document_length`, with the special tokens
        it adds), i.e. were cut to it when encoded: what [`hf_readonce.representations.fill_store`] counts in
        `EncodeStats.truncated` and `hf-readonce encode` reports. 0 for an adapter that reads every token (windows).
        The sum of [`documents_cut_each`], which is what an adapter overrides to cut otherwise. An adapter that
        overrides this count alone is still obeyed: `fill_store` counts with it and records no `cut` flag (the flags
        of the inherited [`documents_cut_each`] could contradict it), and [`~fill.stored_documents_cut`] counts with
        it the documents stored with `max_document_length` tokens.

        Args:
            texts (`Sequence[str]`): the documents as given to `encode`.

        Returns:
            `int`: the number of documents longer than `max_document_length` tokens.
        """
        return sum(self.documents_cut_each(texts))

    def documents_cut_each(self, texts: Sequence[str]) -> list[bool]:
        """Whether each of `texts` holds more tokens than the adapter reads (`max_document_length`), in order:
        [`documents_cut`] per document, what [`hf_readonce.representations.fill_store`] records with each document it
        stores (`cut` in the store's metadata of the document) so that [`~fill.stored_documents_cut`] need not
        tokenize it again. All False for an adapter that reads every token (windows). The hook to override where an
        adapter cuts documents otherwise ([`documents_cut`] sums it); not used where a subclass overrides
        [`documents_cut`] without it ([`documents_cut_each_of`]).

        Texts of the adapter's last `encode` call are not tokenized again: that call's tokenization noted which it
        cut (`_tokenize_documents`); any other text is tokenized here, without truncation, to count its tokens, 256
        texts at a time.

        Args:
            texts (`Sequence[str]`): the documents as given to `encode`.

        Returns:
            `list[bool]`: one per text, True where it is longer than `max_document_length` tokens.
        """
        texts = list(texts)
        if self.max_document_length is None:
            return [False] * len(texts)
        special = getattr(self, "add_special_tokens", True)
        key, noted = self.__dict__.get("_documents_cut_noted", (None, {}))
        if key != (self.max_document_length, special, id(self.tokenizer)):
            noted = {}
        rest = [text for text in texts if text not in noted]
        found = dict(zip(rest, _texts_cut_each(self.tokenizer, rest, self.max_document_length,
                                               add_special_tokens=special), strict=True))
        return [bool(noted[text]) if text in noted else found[text] for text in texts]

    def questions_cut(self, questions: Sequence[str], max_length: int | None = None,
                      token_ids: Sequence[Sequence[int]] | None = None) -> int:
        """How many of `questions` (the questions or prompts read with stored representations) hold more tokens than
        are read of each, with the special tokens the tokenizer adds, i.e. were cut to them: what the answering
        functions count in `counts["questions_cut"]` and `hf-readonce answer` notes. Each question is tokenized
        ([`texts_cut`]), or, given `token_ids`, only those that reached the limit.

        Args:
            questions (`Sequence[str]`): the texts as they are tokenized (stripped where the caller strips them).
            max_length (`int`, *optional*): tokens read per question (an answering call's `max_question_length`);
                defaults to the adapter's `max_prompt_length`.
            token_ids (`Sequence[Sequence[int]]`, *optional*): the ids each question was read as (truncated to the
                limit), one sequence per question in order: a question read with fewer ids than the limit was read
                whole, so only those that reached it are tokenized again.

        Returns:
            `int`: the number of questions cut; 0 where no length is given and the adapter has no
            `max_prompt_length` (it cuts no question).
        """
        limit = max_length if max_length is not None else self.max_prompt_length
        if limit is None:
            return 0
        if token_ids is not None:
            questions = [text for text, ids in zip(questions, token_ids, strict=True) if len(ids) >= limit]
        return texts_cut(self.tokenizer, questions, limit)

    def _tokenize_documents(self, texts: list[str], *, new_call: bool = True, **kwargs):
        """`self.tokenizer(texts, truncation=True, max_length=self.max_document_length, **kwargs)`, the one
        tokenization of documents in `encode`, noting which of `texts` it cut (a fast tokenizer keeps the tokens past
        `max_length` in the `overflowing` list of a truncated encoding) so that [`documents_cut`] need not tokenize
        them again. `new_call=False` adds to the notes of the same `encode` call (a batch tokenized in parts); the
        notes of an earlier call are dropped. The call holds [`tokenizer_lock`]."""
        with tokenizer_lock(self.tokenizer):
            batch = self.tokenizer(texts, truncation=True, max_length=self.max_document_length, **kwargs)
        key = (self.max_document_length, kwargs.get("add_special_tokens", True), id(self.tokenizer))
        held_key, noted = self.__dict__.get("_documents_cut_noted", (None, {}))
        if new_call or held_key != key:
            noted = {}
        encodings = getattr(batch, "encodings", None)  # None for a slow tokenizer: documents_cut tokenizes then
        if encodings is not None and len(encodings) == len(texts):
            noted.update(zip(texts, (bool(encoding.overflowing) for encoding in encodings)))
        self.__dict__["_documents_cut_noted"] = (key, noted)
        return batch

    @classmethod
    def load_for_compute(cls, name_or_path, *, device="cpu", compute_dtype="auto", config=None, **kwargs):
        """[`load_model`] in the compute dtype of hf-readonce's one rule ([`hf_readonce.dtypes.resolve_compute_dtype`]:
        `"auto"` is float32 on a CPU, the checkpoint's dtype elsewhere), the weights cast while loading, then moved
        to `device` in eval mode.

        Args:
            name_or_path (`str` or `os.PathLike`): checkpoint folder or Hub id.
            device (`str` or `torch.device`, defaults to `"cpu"`).
            compute_dtype (`str` or `torch.dtype`, defaults to `"auto"`): `"auto"`, `"float32"`, `"bfloat16"`,
                `"float16"` or a dtype.
            config (`PretrainedConfig`, *optional*): the checkpoint's config if already read (for its dtype).
            **kwargs: passed to [`load_model`] (e.g. `output_loading_info=True`, then a `(model, info)` pair is
                returned).

        Raises:
            ValueError: a `compute_dtype` that names no floating dtype.
        """
        from ..dtypes import load_dtype

        if config is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(name_or_path)
        loaded = cls.load_model(name_or_path, dtype=load_dtype(compute_dtype, device, config), **kwargs)
        model, info = loaded if isinstance(loaded, tuple) else (loaded, None)
        model = model.to(device).eval()
        return model if info is None else (model, info)

    @classmethod
    def settings_kwargs(cls, settings: Mapping[str, Any]) -> dict:
        """Constructor arguments (besides model and tokenizer) that rebuild the adapter whose [`settings`] are
        `settings` (those of a stored space): by default its command-line settings found in them. Whether the
        rebuilt adapter really has these settings (same tokenizer, k, dtype...) is for the caller to compare."""
        return {name: settings[name] for name in getattr(cls, "cli_settings", {}) if name in settings}

    def recompute_from_stored(self, stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recompute one document's tensors from the token ids stored with it (families whose
        `recompute_needs_text` is False override this). `stored` and the result are one document's dict as `encode`
        writes it (same names and shapes).

        Raises:
            ValueError: the family keeps no tokens: recomputing needs the document's text.
        """
        raise ValueError(f"{getattr(self, 'model_type', type(self).__name__)} representations do not keep the tokens "
                         "they were read from: recomputing one needs the document's text.")

    def recompute(self, stored: Mapping[str, torch.Tensor], text: str | None = None) -> dict[str, torch.Tensor]:
        """Fresh tensors for one stored document: from `text` through the whole `encode` path when given, else from
        the stored token ids ([`recompute_from_stored`]). `stored` and the result are one document's dict as
        `encode` writes it (same names and shapes).

        Raises:
            ValueError: no `text` for a family that keeps no tokens; errors of `encode`.
        """
        if text is not None:
            return self.encode([text])[0]
        return self.recompute_from_stored(stored)

    def comparable(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One document's tensors as [`check_recompute`] compares them: by default as they are (a copy of the dict,
        same names and shapes); a family whose tensors carry padding that depends on the batch they were encoded in
        removes it here (a shorter padded dimension)."""
        return dict(tensors)

    def output_log_probs(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """Log-probabilities `(rows, classes)` of the model's output distribution computed from one document's
        tensors (stored or fresh; see `output_distribution`), or `None` where the family has none."""
        return None

    @torch.no_grad()
    def check_recompute(self, stored: Mapping[str, torch.Tensor], text: str | None = None) -> RecomputeCheck:
        """Recompute one stored document with the model and compare: the largest absolute difference of every
        floating tensor, integer tensors (tokens, offsets, windows) for equality, and, where the family has an output
        distribution, KL(fresh ‖ stored) of it (the largest over its rows). The model runs in eval mode (restored
        afterwards).

        Args:
            stored (`Mapping[str, torch.Tensor]`): the document's tensors as read from the store.
            text (`str`, *optional*): the document's text (required when `recompute_needs_text`).

        Returns:
            [`RecomputeCheck`].

        Raises:
            ValueError: no `text` for a family that keeps no tokens.
        """
        model = self.model
        was_training = model.training
        model.eval()
        try:
            fresh = self.comparable(self.recompute(stored, text))
            diffs, mismatched = {}, []
            for name, value in self.comparable(stored).items():
                other = fresh.get(name)
                if other is None or tuple(other.shape) != tuple(value.shape):
                    mismatched.append(name)
                    if value.is_floating_point():
                        diffs[name] = math.inf
                    continue
                if value.is_floating_point():
                    difference = (value.float() - other.float().to(value.device)).abs()
                    diffs[name] = float(difference.max()) if difference.numel() else 0.0
                elif not torch.equal(value.long(), other.long().to(value.device)):
                    mismatched.append(name)
            kl = None
            if not mismatched:
                reference = self.output_log_probs(fresh)
                if reference is not None:
                    kl = float(kl_divergence(reference, self.output_log_probs(stored)).max())
        finally:
            model.train(was_training)
        return RecomputeCheck(max_abs_diff=max(diffs.values(), default=0.0), tensor_max_abs_diff=diffs, kl=kl,
                              kl_kind=self.output_distribution if kl is not None else None, mismatched=mismatched,
                              recomputed_from="text" if text is not None else "stored tokens")


__all__ = ["AdapterBase", "DocumentError", "RecomputeCheck", "RepresentationAdapter", "check_positive_ints",
           "current_fingerprint", "current_fingerprint_if_any", "digests_weights_once", "documents_cut_each_of",
           "kl_divergence", "masked_log_softmax", "one_tokenizer_fingerprint", "one_weights_digest", "pad_batch",
           "pad_rows", "scoped_tokenizer_fingerprint", "texts_cut", "tokenizer_fingerprint", "weights_digest"]
