# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""`question-answering` pipeline for DeFormer-BERT: every context is read once, and its passage states (the output
of the decomposed layers 1..k) serve every question asked about it in the call.

transformers 5 removed its own question-answering pipeline; this one takes the arguments HF users know from it
(`question`, `context`, `top_k`, `doc_stride`, `max_answer_len`, `max_question_len`, `handle_impossible_answer`)
and returns the same `{"score", "start", "end", "answer"}` dictionaries. It reproduces the answers of hf-readonce's
own QA path (`hf_readonce.tasks.question_answering`: question-independent passage windows, n-best span search,
SQuAD 2.0 no-answer rule with the checkpoint's tuned `null_score_diff_threshold`).

This file travels with saved checkpoints (`custom_pipelines` in `config.json`), so that
`pipeline("question-answering", model=path, trust_remote_code=True)` works where hf-readonce is not installed: it
imports only torch, transformers and the standard library.

Passage states can also be read from and written to a `hf_readonce.store.RepresentationStore` (`store=`), in exactly
the entries `hf-readonce encode` writes and `hf-readonce answer` reads; the store is duck-typed (see
`DeformerQuestionAnsweringPipeline`), so this file still never imports hf-readonce.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import math
import sys
import threading
import types
import weakref
import zlib
from collections.abc import Iterable, Mapping

import torch
from transformers import AutoModelForQuestionAnswering
from transformers.pipelines import PIPELINE_REGISTRY, Pipeline
from transformers.utils import logging

logger = logging.get_logger(__name__)

_DEFAULT_MAX_QUESTION_LEN = 64
_DEFAULT_MAX_PASSAGE_LEN = 320
_DEFAULT_DOC_STRIDE = 128
# the stored layout of hf-readonce's DeFormer adapter (`hf_readonce.representations.deformer_bert`): its
# `representation` name, and the store methods this pipeline calls (the duck-typed store protocol)
_REPRESENTATION = "deformer_passage_states/v1"
_STORE_METHODS = ("spaces", "missing", "get", "writer")
_STORE_DTYPES = ("float32", "float16", "bfloat16")


# Copied from hf_readonce.dtypes.resolve_compute_dtype
def resolve_compute_dtype(requested, device, checkpoint_dtype):
    """The dtype to compute in: `requested` when it names one; for `None` or `"auto"`, float32 on a CPU and
    `checkpoint_dtype` on any other device (hf-readonce's one rule, `hf_readonce.dtypes`).

    Args:
        requested (`str`, `torch.dtype` or `None`): `"auto"`, `"float32"`, `"bfloat16"`, `"float16"` or a dtype.
        device (`str` or `torch.device`): where the model computes (`"cpu"`, `"cuda:0"`, ...).
        checkpoint_dtype (`torch.dtype` or `None`): the dtype the checkpoint is saved in (`None`: float32).

    Returns:
        `torch.dtype`: a floating dtype.

    Raises:
        ValueError: if `requested` names no floating dtype.
    """
    if requested is None or requested == "auto":
        return torch.float32 if torch.device(device).type == "cpu" or checkpoint_dtype is None else checkpoint_dtype
    dtype = getattr(torch, requested, None) if isinstance(requested, str) else requested
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"compute dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {requested!r}.")
    return dtype


# Copied from hf_readonce.store.keys.content_hash
def content_hash(text: str) -> str:
    """Key of a document: SHA-256 hex digest (64 characters) of its UTF-8 text. Only the content counts: the same
    text from two files, or under two ids, is one document.

    Raises:
        TypeError: if `text` is not a `str`.
    """
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


# Copied from hf_readonce.representations.base._TOKENIZER_FINGERPRINTS
# the fingerprints of the last tokenizer serializations seen (a few entries, keyed by `_tokenizer_cache_key`, which
# leaves out the per-call truncation/padding state and holds no megabyte string): parsing and re-serializing a
# vocabulary-sized JSON costs tens of milliseconds, reading the serialization about one
_TOKENIZER_FINGERPRINTS: dict = {}


# Copied from hf_readonce.representations.base._tokenizer_cache_key
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


# Copied from hf_readonce.representations.base.tokenizer_fingerprint
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


# Copied from hf_readonce.representations.base._TOKENIZER_LOCKS
# the re-entrant lock of each tokenizer backend ([`tokenizer_lock`]), dropped with it; the registry is one object of
# the process, kept on a module registered in `sys.modules`, so that every copy of this code (each pipeline file
# carries one, and a pipeline loaded from the Hub is a module of its own) takes the same lock for a tokenizer
_TOKENIZER_LOCKS: weakref.WeakKeyDictionary = vars(sys.modules.setdefault(
    "_hf_readonce_tokenizer_locks", types.ModuleType("_hf_readonce_tokenizer_locks"))).setdefault(
    "locks", weakref.WeakKeyDictionary())


# Copied from hf_readonce.representations.base.tokenizer_lock
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


_INT_VIEWS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# Copied from hf_readonce.representations.base.device_checksum
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


def _weights_digest(model) -> tuple:
    """A cheap digest of a model's parameters as they are now (names, dtypes, shapes, data pointers and contents):
    what the pipeline compares before the model rehashes its weights. CPU parameters: the standard library's CRC-32
    of their raw bytes (a few times faster than the SHA-256 fingerprint; hf-readonce's `weights_digest` uses xxh3,
    which this file may not import). Parameters on an accelerator are digested where they are, without a copy to
    the host: a position-dependent checksum of each ([`device_checksum`]), so a changed value always shows, and
    values moved within a parameter (two rows swapped) show except with a chance of about 2^-64."""
    crc, sums = 0, []
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            crc = zlib.crc32(f"{name}|{parameter.dtype}|{tuple(parameter.shape)}|{parameter.data_ptr()}|".encode(), crc)
            flat = parameter.detach().reshape(-1)
            if flat.numel() == 0 or flat.device.type == "meta":  # no values to read (an offloaded parameter)
                continue
            if flat.device.type == "cpu":
                crc = zlib.crc32(memoryview(flat.contiguous().view(torch.uint8).numpy()), crc)
            else:
                sums.append(device_checksum(flat))
    return crc, tuple(torch.stack(sums).tolist()) if sums else ()  # one synchronization


# a keyword given to a pipeline call -> the pipeline's parameter it stands for: a length as the Python API, the CLI and
# config fields spell it -> as the pipelines spell it (transformers' pipeline names: `max_answer_len`,
# `max_question_len`, `max_seq_len`, and `_len` for the lengths of their own); `dtype`, which is the compute dtype
# (given when a pipeline is built) -> `store_dtype`, the storage dtype of `store=`, so named in the Python API too
_PIPELINE_SPELLINGS = {
    "max_answer_length": "max_answer_len", "max_question_length": "max_question_len",
    "max_seq_length": "max_seq_len", "max_passage_length": "max_passage_len",
    "max_document_length": "max_document_len", "dtype": "store_dtype",
}


def _spelling_hints(names, parameters) -> list[str]:
    """For the unexpected keyword arguments `names` of a pipeline call, a hint for each one that stands for a
    parameter of the call (`parameters`, the pipeline's call parameters hold it): a length the Python API, the CLI
    or a config field spells otherwise (`max_answer_length` -> `max_answer_len`), and `dtype` where the call takes
    `store_dtype` (`dtype` is the compute dtype, given when the pipeline is built; the storage dtype of `store=` is
    `store_dtype`, as in the Python API). One phrase per name, for the `TypeError` that names them. Returns `[]`
    when none stands for a parameter."""
    hints = []
    for name in sorted(names):
        spelled = _PIPELINE_SPELLINGS.get(name)
        if spelled is None or spelled not in parameters:
            continue
        if name == "dtype":
            hints.append("`dtype` is the compute dtype, given when the pipeline is built (`pipeline(..., "
                         "dtype=...)`); the storage dtype of `store=` is `store_dtype`")
        else:
            hints.append(f"this pipeline spells `{name}` as `{spelled}`, as transformers' pipelines do")
    return hints


def _call_parameters(pipeline, batch_size, kwargs: dict) -> tuple[dict, dict, dict]:
    """The preprocess, forward and postprocess parameters of one call: the call's `kwargs` (checked by the
    pipeline's `_sanitize_parameters`, with `batch_size`, else the pipeline's own, as `model_batch_size`) over those
    the pipeline was built with; `generate_kwargs` key by key, as transformers' pipelines merge generate arguments.

    Raises:
        TypeError / ValueError: a `batch_size` (the call's or the pipeline's) that is not an int >= 1, named
            `batch_size` (the argument the user passed).
    """
    batch_size = batch_size if batch_size is not None else pipeline._batch_size
    if batch_size is not None:
        kwargs["model_batch_size"] = _check_int("batch_size", batch_size, 1)
    preprocess, forward, postprocess = pipeline._sanitize_parameters(**kwargs)
    built = pipeline._forward_params
    if "generate_kwargs" in forward and "generate_kwargs" in built:
        forward["generate_kwargs"] = _merge_generate_kwargs(built["generate_kwargs"], forward["generate_kwargs"])
    return ({**pipeline._preprocess_params, **preprocess}, {**built, **forward},
            {**pipeline._postprocess_params, **postprocess})


def _merge_generate_kwargs(base: dict, over: dict) -> dict:
    """`generate` arguments: `over`'s on top of `base`'s, key by key (transformers' rule for a call's arguments over
    a pipeline's), except that a length counts as one setting: when `over` sets `max_new_tokens` or `max_length`
    (`min_new_tokens` or `min_length`), `base`'s keys of that pair are dropped, so a call's `max_length` is not
    overruled by a `max_new_tokens` the pipeline was built with (`generate` reads `max_new_tokens` first). A length
    of `None` in `over` sets nothing.

    Args:
        base (`dict`): the arguments overridden (the pipeline's, or `generate_kwargs` under a call's own
            `max_new_tokens`). over (`dict`): the arguments that win.

    Returns:
        `dict`: a new dict (neither argument is changed).
    """
    pairs = (("max_new_tokens", "max_length"), ("min_new_tokens", "min_length"))
    lengths = {name for pair in pairs for name in pair}
    over = {name: value for name, value in over.items() if not (name in lengths and value is None)}
    merged = dict(base)
    for pair in pairs:
        if any(name in over for name in pair):
            for name in pair:
                merged.pop(name, None)
    merged.update(over)
    return merged


def _stream(inputs, name: str = "inputs"):
    """An iterator over `inputs` when a call reads them lazily, else `None`: a generator or any other iterable that is
    not a `str`, `bytes`, mapping (a `dict`, `UserDict`: one input, never its keys), `list` or `tuple` (a
    `datasets.Dataset`, transformers' `KeyDataset`, a `torch.utils.data.Dataset`). A map-style torch dataset (with
    `__len__`) is read by index, `0 .. len - 1`; nothing is read before the iterator is advanced.

    Args:
        inputs: the call's input. name (`str`, defaults to `"inputs"`): its argument's name, said in the error.

    Returns:
        `Iterator` or `None`.

    Raises:
        TypeError: `inputs` is a `set` or `frozenset`: it has no order, so results could not be matched to inputs;
            or a table with columns (a pandas `DataFrame`): iterating it gives its column names, not its rows.
    """
    if inputs is None or isinstance(inputs, (str, bytes, Mapping, list, tuple)):
        return None
    if isinstance(inputs, (set, frozenset)):
        raise TypeError(f"`{name}` is a {type(inputs).__name__}, which has no order: the results could not be "
                        "matched to the inputs. Pass a list or another ordered iterable.")
    if hasattr(inputs, "columns") and hasattr(inputs, "iloc"):
        raise TypeError(f"`{name}` is a {type(inputs).__name__}, a table: iterating it gives its column names, not "
                        "its rows. Pass one column (`table[\"article\"]`) or its rows as dicts "
                        "(`table.to_dict(\"records\")`).")
    dataset = torch.utils.data.Dataset
    if isinstance(inputs, dataset) and not isinstance(inputs, torch.utils.data.IterableDataset) \
            and hasattr(inputs, "__len__"):
        return (inputs[index] for index in range(len(inputs)))
    if isinstance(inputs, Iterable):
        return iter(inputs)
    return None


def _groups(items, size: int):
    """The items of an iterator in groups of `size` (the last one shorter), each pulled only when the one before it
    has been used: `(start, group)`, `start` the position of the group's first item in the whole input.

    Args:
        items (`Iterator`): the inputs. size (`int`): items per group (>= 1).
    """
    start = 0
    while True:
        group = list(itertools.islice(items, size))
        if not group:
            return
        yield start, group
        start += len(group)


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} ({value!r}).")
    if value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value}.")
    return value


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {value!r}.")
    return value


def _no_token_message(group: dict) -> str:
    """The error for a context without a token (only characters the tokenizer drops), naming the input it came from:
    `group["positions"]`, the positions of the inputs that share the context, when the group has them."""
    positions = group.get("positions") or []
    where = f" {positions[0]}" if positions else ""
    also = f" (the context of inputs {positions})" if len(positions) > 1 else ""
    return f"`context`{where}{also} has no token: it holds only characters the tokenizer drops."


def _questions_cut(batch) -> int:
    """How many questions of a tokenized `batch` were cut to the `max_length` they were tokenized with: those whose
    encoding holds `overflowing` tokens. Read from the tokenization the pipeline does anyway, so no question is
    tokenized again; a batch without encodings (not from a fast tokenizer) counts none.

    Args:
        batch (`BatchEncoding`): questions tokenized with `truncation=True, max_length=...` (one or several).

    Returns:
        `int`: the number of questions cut.
    """
    return sum(1 for encoding in getattr(batch, "encodings", None) or [] if encoding.overflowing)


def _note_questions_cut(cut: int, total: int, max_length: int, limit: int | None = None) -> None:
    """Say in one warning on this module's logger that `cut` of the `total` questions of a call held more than the
    `max_length` tokens read per question and were cut to them: their answers come from those tokens only (what
    `hf-readonce answer` notes for the same questions). Nothing is said when `cut` is 0.

    Args:
        cut (`int`): the questions cut. total (`int`): the questions of the call.
        max_length (`int`): the tokens read per question (the call's `max_question_len`).
        limit (`int`, *optional*): the largest `max_question_len` the model reads (e.g. its positions); `None`: no
            bound.
    """
    if not cut:
        return
    more = ("the model reads no more of a question" if limit is not None and max_length >= limit
            else "`max_question_len` reads more" + (f", up to {limit}" if limit is not None else ""))
    logger.warning(f"{cut} of {total} question(s) held more than the {max_length} tokens read per question and were "
                   f"cut to them: their answers come from those tokens only ({more}).")


def passage_windows(input_ids: list[int], offsets: list, max_passage_len: int, doc_stride: int,
                    sep_token_id: int) -> tuple[list[list[int]], list[list]]:
    """Cut a passage's tokens (no special tokens) into windows of `max_passage_len - 1` tokens + `[SEP]`,
    consecutive windows sharing `doc_stride` tokens (HF's `stride`): the windows of every DeFormer path (this
    pipeline, `hf_readonce.representations.deformer_bert.split_passages`, hence the store's entries).

    Returns:
        `(window_ids, window_offsets)`: per window its ids (`[SEP]` last) and the character span of each token
        (`None` for `[SEP]`).
    """
    body = max_passage_len - 1
    window_ids, window_offsets, start = [], [], 0
    while True:
        end = min(start + body, len(input_ids))
        window_ids.append(list(input_ids[start:end]) + [sep_token_id])
        window_offsets.append([tuple(o) for o in offsets[start:end]] + [None])
        if end >= len(input_ids):
            return window_ids, window_offsets
        start = end - doc_stride


def window_span_candidates(start_logits: torch.Tensor, end_logits: torch.Tensor, offsets: list, n_best_size: int,
                           max_answer_len: int) -> list[tuple[float, int, int]]:
    """The answer spans of one window: its `n_best_size` best start and end positions (stable order on ties), every
    pair with `start <= end < start + max_answer_len` whose tokens are passage tokens (non-`None` offsets), scored
    `start_logit + end_logit`; the search of every DeFormer QA path (this pipeline,
    `hf_readonce.tasks.question_answering.postprocess_qa_predictions`).

    Args:
        start_logits, end_logits (`torch.Tensor` of shape `(window_length,)`): the window's logits.
        offsets (`list`): per window token, its `(start, end)` character span or `None`.

    Returns:
        `list[tuple[float, int, int]]`: `(score, char start, char end)` in search order; each score is the sum of
        the two logits as Python floats (each logit tensor is read once, into a list).
    """
    k = min(n_best_size, start_logits.shape[0])
    starts = torch.sort(start_logits, descending=True, stable=True).indices[:k].tolist()
    ends = torch.sort(end_logits, descending=True, stable=True).indices[:k].tolist()
    start_values, end_values = start_logits.tolist(), end_logits.tolist()
    return [(start_values[s] + end_values[e], offsets[s][0], offsets[e][1]) for s in starts
            for e in ends if offsets[s] is not None and offsets[e] is not None and s <= e < s + max_answer_len]


def _best_answers(context: str, candidates, start_pool, end_pool, null_logit: float, handle_impossible_answer: bool,
                  top_k: int):
    """The `top_k` best answers to one question, from its span candidates over every window (segment) of the context.

    Args:
        context (`str`): the text the character spans index.
        candidates (`list[tuple[float, int, int]]`): `(start logit + end logit, char start, char end)` in search
            order (ties keep it).
        start_pool, end_pool (`list[torch.Tensor]`): per window, the start and end logits of its context tokens: the
            softmax of every window's tokens (and the no-answer slot) gives the scores, for start and end separately.
        null_logit (`float`): the no-answer logit score (its half joins each softmax); a candidate with
            `handle_impossible_answer`, ranked before every span it beats.
        top_k (`int`): answers kept; identical character spans (from overlapping windows) count once.

    Returns:
        `{"score", "start", "end", "answer"}` with `top_k=1`, else a list of them (the empty answer with score 0 when
        no valid span exists).
    """
    start_all = torch.cat(start_pool) if start_pool else torch.zeros(0)
    end_all = torch.cat(end_pool) if end_pool else torch.zeros(0)
    if handle_impossible_answer:
        half = torch.tensor([null_logit / 2])
        start_all, end_all = torch.cat([start_all, half]), torch.cat([end_all, half])
    log_z = float(torch.logsumexp(start_all, 0)) + float(torch.logsumexp(end_all, 0)) if start_all.numel() else 0.0
    order = sorted(range(len(candidates)), key=lambda i: -candidates[i][0])  # stable: search order on ties
    answers, seen = [], set()
    for i in order:
        score, char_start, char_end = candidates[i]
        if (char_start, char_end) in seen:
            continue
        seen.add((char_start, char_end))
        answers.append((score, {"score": math.exp(score - log_z), "start": char_start, "end": char_end,
                                "answer": context[char_start:char_end]}))
    if handle_impossible_answer:
        empty = {"score": math.exp(null_logit - log_z), "start": 0, "end": 0, "answer": ""}
        position = next((j for j, (score, _) in enumerate(answers) if null_logit > score), len(answers))
        answers.insert(position, (null_logit, empty))
    answers = [answer for _, answer in answers[:top_k]]
    if not answers:  # no valid span (e.g. max_answer_len shorter than every candidate): the empty answer
        answers = [{"score": 0.0, "start": 0, "end": 0, "answer": ""}]
    return answers[0] if top_k == 1 else answers


class _TokenizerPipeline(Pipeline):
    r"""What every hf-readonce pipeline shares: it loads a tokenizer and nothing else (no processor, image or video
    processor, feature extractor), and it computes in the `dtype` that `pipeline(..., dtype=...)` asks for
    (`"auto"` by default: on a CPU, float32 whatever the checkpoint's dtype; see `resolve_compute_dtype`).

    Args:
        *args, **kwargs: those of [`~transformers.Pipeline`]; `dtype` (`str` or `torch.dtype`, *optional*) is also
            applied to the model after loading. A pipeline built directly from a model object keeps the model's dtype.

    Raises:
        ValueError: an unknown `dtype` (from `resolve_compute_dtype`).
    """

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        # `pipeline(...)` passes its `dtype` on ("auto" by default): on a CPU, "auto" computes in float32 whatever
        # the checkpoint's dtype. A pipeline built directly from a model object keeps the model's dtype.
        requested = kwargs.get("dtype")
        super().__init__(*args, **kwargs)
        if requested is not None:
            self.model.to(resolve_compute_dtype(requested, self.device, self.model.dtype))

    def save_pretrained(self, save_directory, **kwargs):
        r"""[`~transformers.Pipeline.save_pretrained`], keeping the other pipelines of this file that the model's
        config declares. transformers writes `custom_pipelines` with this class's task alone (and sets that on the
        model's config), so saving one pipeline of a checkpoint that declares two (ReadOnce BART's `summarization`
        and `text2text-generation`) dropped the other from the saved folder and from the model. The tasks whose
        class is in this file, whose code the saved folder holds, are kept in both.

        Args:
            save_directory (`str` or `os.PathLike`), **kwargs: as for [`~transformers.Pipeline.save_pretrained`].
        """
        declared = dict(getattr(self.model.config, "custom_pipelines", None) or {})
        super().save_pretrained(save_directory, **kwargs)
        written = getattr(self.model.config, "custom_pipelines", None) or {}
        module = type(self).__module__.rsplit(".", 1)[-1]
        kept = {task: info for task, info in declared.items() if task not in written and isinstance(info, dict)
                and str(info.get("impl", "")).split(".")[0] == module}
        if kept:  # (a `save_directory` that is a file: transformers wrote nothing and changed nothing)
            self.model.config.custom_pipelines = {**kept, **written}
            self.model.config.save_pretrained(save_directory)


class DeformerQuestionAnsweringPipeline(_TokenizerPipeline):
    r"""
    Extractive question answering with a DeFormer: `pipe(question=[...], context=...)`.

    Each distinct context of a call is tokenized once (no special tokens, offsets kept) and cut into windows of
    `max_passage_len - 1` tokens + `[SEP]`, consecutive windows sharing `doc_stride` tokens; the windows depend only on
    the context, so their passage states are computed once (`model.encode_passages`) and paired with every question
    of the call. Each question is read alone (`[CLS] question [SEP]`, at most `max_question_len` tokens) through the
    lower layers, and the upper layers read it jointly with each window's cached states.

    Span search is that of hf-readonce's QA path: per window, the `n_best_size` best starts and ends, with
    `start <= end < start + max_answer_len` inside the passage; the span score is `start_logit + end_logit`, compared
    across windows. With `handle_impossible_answer`, the empty answer (`{"answer": "", "start": 0, "end": 0}`) is a
    candidate whose logit score is `null_score - null_score_diff_threshold`, where `null_score` is the smallest
    `start[CLS] + end[CLS]` over the windows (SQuAD 2.0's rule). `score` is the probability of the span under a
    softmax over every window's passage tokens (and the no-answer slot), for start and end separately
    (`p_start * p_end`), so scores rank as the logits do.

    Call arguments (all optional except `question` and `context`; keyword arguments may also be given to
    `pipeline(...)` to set defaults):

    Args:
        question (`str` or `list[str]`): the question(s).
        context (`str` or `list[str]`): one context for every question, or one per question (equal lengths).
            Instead of `question`/`context`, a dict `{"question": ..., "context": ...}`, a list of them, or an
            iterable of them (a generator, a `datasets.Dataset` of such rows, a `torch.utils.data.Dataset`) may be
            passed as the first argument; an iterable is read lazily, `batch_size` inputs at a time (see
            `batch_size`), and the call returns an iterator.
        top_k (`int`, defaults to 1): answers per question; with `top_k=1` each question gets one dict, otherwise a
            list (fewer when fewer distinct spans exist). Identical character spans from overlapping windows count
            once.
        max_answer_len (`int`, defaults to 15): longest answer in tokens.
        max_question_len (`int`, *optional*): question length in tokens, `[CLS]` and `[SEP]` included (longer
            questions are truncated; one warning per call counts them). Defaults to the checkpoint's
            `max_question_length`, else 64 (as `hf-readonce answer`).
        max_passage_len (`int`, *optional*): window length in tokens, `[SEP]` included. Defaults to the checkpoint's
            `max_passage_length`, else `max_seq_len - max_question_len` when `max_seq_len` is given, else 320 (at
            most `max_position_embeddings - passage_position_offset`).
        max_seq_len (`int`, *optional*): HF's name for the pair length; used only to derive `max_passage_len`.
        doc_stride (`int`, *optional*): tokens shared by consecutive windows. Defaults to the checkpoint's
            `doc_stride`, else 128 (halved until it fits a window).
        handle_impossible_answer (`bool`, *optional*): allow the empty answer. Defaults to the checkpoint's
            `allow_no_answer` (recorded by hf-readonce's training), else `False`.
        null_score_diff_threshold (`float`, *optional*): the no-answer margin in logits; defaults to the
            checkpoint's tuned value, else 0.
        n_best_size (`int`, defaults to 20): start and end candidates per window.
        batch_size (`int`, defaults to 32): windows or (question, window) pairs per model call. With an iterable
            input, also the inputs pulled at a time: each group is answered as one list call (a context repeated
            within it is read once; one warning per group counts its questions cut), and the next group is pulled
            when the answers of this one have been taken.
        store (`hf_readonce.store.RepresentationStore`, *optional*): read each context's passage states from this
            store instead of computing them, and write those it lacks. Entries are keyed as `hf-readonce encode`
            keys them: the model's `representation_fingerprint()`, the settings `{"representation":
            "deformer_passage_states/v1", "num_decomposed_layers", "max_passage_length", "doc_stride", "tokenizer"}`
            and the SHA-256 of the context; tensors `hidden_states` `(T, hidden_size)`, `input_ids` `(T,)`,
            `offsets` `(T, 2)` and `window_lengths` `(W,)` for `W` windows of `T` tokens in all. So a store filled
            by `hf-readonce encode` is read without recomputation, and what the pipeline writes is read by
            `hf-readonce answer`. Without explicit `max_passage_len`/`max_seq_len`/`doc_stride`, the window settings
            are those of the store's only space for this model and tokenizer (if there is one). Any object with the
            methods `spaces()` (records with `fingerprint` and `settings`), `missing(fingerprint, settings,
            hashes)`, `get(fingerprint, settings, hash)` and `writer(fingerprint, settings, dtype=, model_type=)`
            (a context manager with `add(hash, tensors, meta=)`) works; the store decides nothing else. With an
            iterable input, each group of `batch_size` inputs reads and writes the store as a call does.
        update_store (`bool`, *optional*): write the passage states of contexts the store lacks. Defaults to
            `True` unless the store was opened read-only (`store.readonly`); with `False` they are computed for
            this call only. Existing entries are never rewritten.
        store_dtype (`str`, defaults to `"float32"`): dtype of the floating tensors written (`"float32"`,
            `"float16"`, `"bfloat16"`; `hf-readonce encode` writes float16 by default).

    Returns:
        For one question, a dict `{"score": float, "start": int, "end": int, "answer": str}` (`start`/`end` are
        character offsets in the context, `answer == context[start:end]`), or a list of `top_k` of them; for several
        questions, a list with one such result per question, in order; for an iterable, an iterator yielding one
        such result per input, in order (the results of the list call).

    Raises:
        ValueError: an empty question or context (naming its position), `question` and `context` lists of different
            lengths, a setting out of range (naming it), a context without a token (only characters the tokenizer
            drops; naming its position), or a model whose `num_decomposed_layers` is 0 (nothing can be cached); a
            `store` that holds DeFormer passage states only for other models or tokenizers (fingerprints differ:
            raised before anything is computed or written), several window settings for this model with none
            given, or an entry whose windows are not this tokenizer's.
        TypeError: a question or context that is not a string, an input that is not a dict (naming its position),
            or a setting of the wrong type; a `store` without the methods above.
        PermissionError: `update_store=True` with a store that cannot be written (before any model work).
        With an iterable input, a bad setting is raised by the call, a bad input when the iterator reaches its group.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> qa = pipeline("question-answering", model="path/or/repo", trust_remote_code=True)
    >>> qa(question=["Who wrote Emma?", "When was it published?"], context="Emma is a novel by Jane Austen, 1815.")
    [{'score': ..., 'start': ..., 'end': ..., 'answer': ...}, {...}]
    ```
    """

    default_batch_size = 32  # `batch_size` when neither the call nor the pipeline sets it

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = self.model.config
        if getattr(config, "num_decomposed_layers", 0) <= 0:
            raise ValueError("DeformerQuestionAnsweringPipeline needs a model with num_decomposed_layers > 0: with 0 "
                             "the model is plain BERT and passage states cannot be cached.")
        if self.tokenizer is None or not getattr(self.tokenizer, "is_fast", False):
            raise TypeError("DeformerQuestionAnsweringPipeline needs a fast tokenizer (character offsets).")

    # ------------------------------------------------------------------ parameters
    def _sanitize_parameters(self, top_k=None, max_answer_len=None, max_question_len=None, max_passage_len=None,
                             max_seq_len=None, doc_stride=None, handle_impossible_answer=None,
                             null_score_diff_threshold=None, n_best_size=None, model_batch_size=None, store=None,
                             update_store=None, store_dtype=None, **kwargs):
        if kwargs:
            hints = _spelling_hints(kwargs, inspect.signature(self._sanitize_parameters).parameters)
            raise TypeError("; ".join([f"unexpected argument(s) {sorted(kwargs)} for the question-answering pipeline",
                                       *hints]) + ".")
        preprocess, forward, postprocess = {}, {}, {}
        if store is not None:
            lacking = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
            if lacking:
                raise TypeError(f"`store` must be a hf_readonce RepresentationStore (or provide {', '.join(_STORE_METHODS)}"
                                f"), got {type(store).__name__} without {', '.join(lacking)}.")
            forward["store"] = store
        if update_store is not None:
            forward["update_store"] = _check_bool("update_store", update_store)
        if store_dtype is not None:
            if store_dtype not in _STORE_DTYPES:
                raise ValueError(f"`store_dtype` must be one of {_STORE_DTYPES}, got {store_dtype!r}.")
            forward["store_dtype"] = store_dtype
        for name, value, low, target in (
            ("max_question_len", max_question_len, 3, preprocess), ("max_passage_len", max_passage_len, 2, preprocess),
            ("max_seq_len", max_seq_len, 5, preprocess), ("doc_stride", doc_stride, 0, preprocess),
            ("top_k", top_k, 1, postprocess), ("max_answer_len", max_answer_len, 1, postprocess),
            ("n_best_size", n_best_size, 1, postprocess), ("model_batch_size", model_batch_size, 1, forward),
        ):
            if value is not None:
                target[name] = _check_int(name, value, low)
        if handle_impossible_answer is not None:
            postprocess["handle_impossible_answer"] = _check_bool("handle_impossible_answer", handle_impossible_answer)
        if null_score_diff_threshold is not None:
            if isinstance(null_score_diff_threshold, bool) or not isinstance(null_score_diff_threshold, (int, float)):
                raise TypeError(f"`null_score_diff_threshold` must be a number, got {null_score_diff_threshold!r}.")
            if not math.isfinite(null_score_diff_threshold):
                raise ValueError(f"`null_score_diff_threshold` must be finite, got {null_score_diff_threshold}.")
            postprocess["null_score_diff_threshold"] = float(null_score_diff_threshold)
        return preprocess, forward, postprocess

    def _window_settings(self, max_question_len=None, max_passage_len=None, max_seq_len=None, doc_stride=None):
        """`(max_question_len, max_passage_len, doc_stride)`: the given values, else the checkpoint's, else the
        defaults (see the class docstring).

        Raises:
            ValueError: if a value does not fit the model's positions or the window.
        """
        config = self.model.config
        room = config.max_position_embeddings - config.passage_position_offset
        if max_question_len is None:
            max_question_len = getattr(config, "max_question_length", None) or _DEFAULT_MAX_QUESTION_LEN
        if max_question_len > config.max_position_embeddings:
            raise ValueError(f"`max_question_len` must be <= max_position_embeddings={config.max_position_embeddings}"
                             f", got {max_question_len}.")
        explicit_window = max_passage_len is not None
        if max_passage_len is None and max_seq_len is not None:
            max_passage_len, explicit_window = max_seq_len - max_question_len, True
            if max_passage_len < 2:
                raise ValueError(f"`max_seq_len`={max_seq_len} leaves no room for a passage after "
                                 f"max_question_len={max_question_len}.")
        if max_passage_len is None:
            max_passage_len = getattr(config, "max_passage_length", None) or min(_DEFAULT_MAX_PASSAGE_LEN, room)
        if not 2 <= max_passage_len <= room:
            raise ValueError(f"`max_passage_len` must be in [2, {room}] (max_position_embeddings - "
                             f"passage_position_offset), got {max_passage_len}.")
        if doc_stride is None:
            doc_stride = getattr(config, "doc_stride", None)
            if doc_stride is None or doc_stride >= max_passage_len - 1:
                doc_stride = _DEFAULT_DOC_STRIDE
                while doc_stride >= max_passage_len - 1 and doc_stride > 0:
                    doc_stride //= 2
        elif doc_stride >= max_passage_len - 1:
            raise ValueError(f"`doc_stride` must be < max_passage_len - 1 = {max_passage_len - 1}"
                             f"{'' if explicit_window else ' (the window length in use)'}, got {doc_stride}.")
        return max_question_len, max_passage_len, doc_stride

    # ------------------------------------------------------------------ inputs
    @staticmethod
    def _normalize(inputs, question, context, start: int = 0) -> list[tuple[str, str]]:
        """`[(question, context), ...]` from the accepted call forms; errors name an input by its position, counted
        from `start` (the position of `inputs[0]` in an iterable the call reads in groups).

        Raises:
            ValueError / TypeError: see the class docstring.
        """
        if inputs is not None:
            if question is not None or context is not None:
                raise ValueError("pass either a dict (or list of dicts) or `question=`/`context=`, not both.")
            items = [inputs] if isinstance(inputs, dict) else inputs
            if not isinstance(items, (list, tuple)):
                raise TypeError("the first argument must be a dict {'question': ..., 'context': ...}, a list of "
                                f"them or an iterable of them (a generator, a dataset), got {type(inputs).__name__}.")
            pairs = []
            for i, item in enumerate(items, start):
                if not isinstance(item, dict):
                    raise TypeError(f"input {i} must be a dict {{'question': ..., 'context': ...}}, got "
                                    f"{type(item).__name__}.")
                if "question" not in item or "context" not in item:
                    raise ValueError(f"input {i} needs 'question' and 'context' keys, got {sorted(item)}.")
                pairs.append((item["question"], item["context"]))
        else:
            if question is None or context is None:
                raise ValueError("both `question` and `context` are required.")
            questions = [question] if isinstance(question, str) else question
            if not isinstance(questions, (list, tuple)):
                raise TypeError(f"`question` must be a str or a list of str, got {type(question).__name__} (an "
                                "iterable of {'question': ..., 'context': ...} dicts is the first argument).")
            if isinstance(context, str):
                contexts = [context] * len(questions)
            elif isinstance(context, (list, tuple)):
                contexts = list(context)
                if len(contexts) != len(questions):
                    raise ValueError(f"`question` has {len(questions)} entries but `context` has {len(contexts)}; "
                                     "pass one context for all questions or one per question.")
            else:
                raise TypeError(f"`context` must be a str or a list of str, got {type(context).__name__}.")
            pairs = list(zip(questions, contexts))
        if not pairs:
            raise ValueError("`question` is empty: nothing to answer.")
        for i, (q, c) in enumerate(pairs, start):
            for name, value in (("question", q), ("context", c)):
                if not isinstance(value, str):
                    raise TypeError(f"`{name}` {i} must be a str, got {type(value).__name__}.")
                if not value.strip():
                    raise ValueError(f"`{name}` {i} is empty.")
        return pairs

    def __call__(self, *args, question=None, context=None, batch_size=None, **kwargs):
        """Answer questions about contexts (documents), each context read once; the class docstring has the arguments,
        returns and paper section.

        Raises:
            ValueError / TypeError: as the class docstring lists (missing or empty question or context, a setting out
                of range or of the wrong type, named).
        """
        if len(args) > 1:
            if question is not None or context is not None:
                raise ValueError("pass `question` and `context` either by position or by keyword, not both.")
            question, context, args = args[0], args[1], args[2:]
            if args:
                raise TypeError("at most two positional arguments (question, context).")
        inputs = args[0] if args else kwargs.pop("inputs", None)
        items = _stream(inputs)
        if items is not None:
            if question is not None or context is not None:
                raise ValueError("pass either an iterable of {'question': ..., 'context': ...} dicts or "
                                 "`question=`/`context=`, not both.")
            _call_parameters(self, batch_size, dict(kwargs))  # settings are checked now, before any input is read
            return self._answer_stream(items, batch_size, kwargs)
        pairs = self._normalize(inputs, question, context)
        results = self._answer(pairs, batch_size, kwargs)
        single = inputs is None and isinstance(question, str) or isinstance(inputs, dict)
        return results[0] if single else results

    def _answer_stream(self, items, batch_size, kwargs: dict):
        """The answers to an iterable of `{"question", "context"}` dicts, one per input, in order: the inputs are
        pulled `batch_size` at a time (the call's, else the pipeline's, else `default_batch_size`) and each group is
        answered as one list call, its contexts read once."""
        size = batch_size if batch_size is not None else self._batch_size or self.default_batch_size
        for start, group in _groups(items, size):
            yield from self._answer(self._normalize(group, None, None, start), batch_size, dict(kwargs), start)

    def _answer(self, pairs, batch_size, kwargs: dict, start: int = 0) -> list:
        """The answer to each `(question, context)` pair, in order, each distinct context read once; `start` is the
        position of the first pair in the call's input (errors name an input by it)."""
        preprocess_params, forward_params, postprocess_params = _call_parameters(self, batch_size, kwargs)
        groups: dict[str, list[int]] = {}
        for index, (_, c) in enumerate(pairs):
            groups.setdefault(c, []).append(index)
        self._prepare(list(groups), preprocess_params, forward_params)
        results: list = [None] * len(pairs)
        cut = 0  # questions cut to max_question_len, over every context: one warning per call
        for c, indices in groups.items():
            group = {"context": c, "questions": [pairs[i][0] for i in indices],
                     "positions": [start + i for i in indices]}
            model_inputs = self.preprocess(group, **preprocess_params)
            cut += model_inputs["questions_cut"]
            answers = self.postprocess(self.forward(model_inputs, **forward_params), **postprocess_params)
            for i, answer in zip(indices, answers):
                results[i] = answer
        _note_questions_cut(cut, len(pairs), model_inputs["max_question_len"], model_inputs["question_limit"])
        return results

    def _prepare(self, contexts: list[str], preprocess_params: dict, forward_params: dict) -> None:
        """What a call resolves before any model work: the store space, when a `store` is given
        ([`_prepare_store`])."""
        if forward_params.get("store") is not None:
            self._prepare_store(contexts, preprocess_params, forward_params)

    # ------------------------------------------------------------------ the representation store
    def store_settings(self, max_passage_len: int, doc_stride: int) -> tuple[str, dict]:
        """`(fingerprint, settings)`: the store space of this model's passage states with these windows, exactly as
        hf-readonce's DeFormer adapter keys them (`DeformerBertAdapter.fingerprint()`, `.settings()`).

        Raises:
            TypeError: if the pipeline's tokenizer is not a fast (Rust-backed) tokenizer (no fingerprint).
        """
        return self.model.representation_fingerprint(), self._settings(max_passage_len, doc_stride,
                                                                       tokenizer_fingerprint(self.tokenizer))

    def _settings(self, max_passage_len: int, doc_stride: int, tokenizer_hash: str) -> dict:
        return {"representation": _REPRESENTATION,
                "num_decomposed_layers": int(self.model.config.num_decomposed_layers),
                "max_passage_length": int(max_passage_len), "doc_stride": int(doc_stride),
                "tokenizer": tokenizer_hash}

    def _current_fingerprint(self) -> str:
        """The model's `representation_fingerprint()` for its weights as they are now. The model caches it by torch's
        version counters, which an edit through `.data` (`weight.data.add_(1e-3)`) does not bump; so each call
        compares a cheap digest of the weights ([`_weights_digest`]) with the one it saw last for this model and,
        when they differ (or on its first call for the model), marks every parameter as modified (no byte written)
        and the model hashes its weights again. Unchanged weights cost the digest only, not the SHA-256 rehash."""
        model = self.model
        digest = _weights_digest(model)
        if model.__dict__.get("_hf_readonce_pipeline_weights_digest") != digest:
            increment = getattr(torch.autograd.graph, "increment_version", None)
            try:
                for parameter in model.parameters():
                    increment(parameter)
            except (TypeError, RuntimeError):  # torch < 2.1 (no increment_version) or an inference tensor
                for module in model.modules():  # forget the fingerprint caches the model keeps
                    if getattr(module, "_fingerprint_cache", None) is not None:
                        module._fingerprint_cache = None
            model.__dict__["_hf_readonce_pipeline_weights_digest"] = digest  # a plain attribute, not a submodule
        return model.representation_fingerprint()

    def _prepare_store(self, contexts: list[str], preprocess_params: dict, forward_params: dict) -> None:
        """Resolve the store space of this call (in place: the window settings into `preprocess_params`, the space
        and whether to write into `forward_params`), before any model work.

        Raises:
            ValueError: the store holds DeFormer passage states only for other models/tokenizers, or several window
                settings for this model and none were given.
            PermissionError: `update_store=True` and the store cannot be written while contexts are missing.
        """
        store = forward_params["store"]
        if callable(getattr(store, "refresh", None)):
            store.refresh()
        fingerprint = self._current_fingerprint()
        tokenizer_hash = tokenizer_fingerprint(self.tokenizer)
        where = f" {getattr(store, 'path', '')}" if getattr(store, "path", None) is not None else ""
        deformer = [space for space in store.spaces()
                    if isinstance(space.settings, dict) and space.settings.get("representation") == _REPRESENTATION]
        ours = [space for space in deformer
                if space.fingerprint == fingerprint and space.settings.get("tokenizer") == tokenizer_hash]
        if deformer and not ours:
            same_model = [space for space in deformer if space.fingerprint == fingerprint]
            stored = ", ".join(sorted({space.fingerprint[:16] + "..." for space in deformer}))
            raise ValueError(
                f"`store`{where} holds DeFormer passage states only for "
                + ("another tokenizer" if same_model else f"other model(s) (fingerprint {stored})")
                + f", not for this model (fingerprint {fingerprint[:16]}...) and tokenizer: they are never used "
                "for another model. Use a store made for this model (or a new, empty one).")
        explicit = any(preprocess_params.get(name) is not None
                       for name in ("max_passage_len", "max_seq_len", "doc_stride"))
        if not explicit and ours:
            defaults = self._window_settings(preprocess_params.get("max_question_len"))[1:]
            windows = sorted({(space.settings["max_passage_length"], space.settings["doc_stride"]) for space in ours})
            if len(windows) > 1 and defaults not in windows:
                options = "; ".join(f"max_passage_len={m} doc_stride={d}" for m, d in windows)
                raise ValueError(f"`store`{where} holds several window settings for this model ({options}); pass "
                                 "`max_passage_len` and `doc_stride`.")
            if len(windows) == 1:
                preprocess_params["max_passage_len"], preprocess_params["doc_stride"] = windows[0]
        _, max_passage_len, doc_stride = self._window_settings(
            preprocess_params.get("max_question_len"), preprocess_params.get("max_passage_len"),
            preprocess_params.pop("max_seq_len", None), preprocess_params.get("doc_stride"))
        preprocess_params["max_passage_len"], preprocess_params["doc_stride"] = max_passage_len, doc_stride
        settings = self._settings(max_passage_len, doc_stride, tokenizer_hash)
        update = forward_params.get("update_store")
        if update is None:
            update = not getattr(store, "readonly", False)
        forward_params["update_store"] = update
        forward_params["store_space"] = (fingerprint, settings)
        if update and store.missing(fingerprint, settings, [content_hash(c) for c in contexts]) \
                and callable(getattr(store, "check_writable", None)):
            store.check_writable()

    # ------------------------------------------------------------------ the three steps
    def preprocess(self, group, max_question_len=None, max_passage_len=None, max_seq_len=None, doc_stride=None):
        """Tokenize one context into windows and its questions. Returns a dict with `window_ids` (list of id lists,
        `[SEP]` last), `window_offsets` (per window `(start, end)` character spans, `None` for `[SEP]`),
        `question_ids`, `context`, `questions_cut` (how many questions held more than `max_question_len` tokens and
        were cut to them), `max_question_len` (the length used) and `question_limit` (the largest the model reads,
        `max_position_embeddings`); `__call__` says in one warning how many questions of the call were cut.

        Raises:
            `ValueError`: the context has no token (empty or only characters the tokenizer drops), naming the input."""
        max_question_len, max_passage_len, doc_stride = self._window_settings(
            max_question_len, max_passage_len, max_seq_len, doc_stride)
        tokenizer = self.tokenizer
        if hasattr(tokenizer, "deprecation_warnings"):  # whole contexts are tokenized on purpose (windowed below)
            tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
        with tokenizer_lock(tokenizer):
            encoded = tokenizer(group["context"], add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]]
        if not ids:
            raise ValueError(_no_token_message(group))
        window_ids, window_offsets = passage_windows(ids, offsets, max_passage_len, doc_stride, tokenizer.sep_token_id)
        with tokenizer_lock(tokenizer):
            questions = tokenizer(group["questions"], truncation=True, max_length=max_question_len)
        return {"context": group["context"], "window_ids": window_ids, "window_offsets": window_offsets,
                "question_ids": [list(q) for q in questions["input_ids"]], "questions_cut": _questions_cut(questions),
                "max_question_len": max_question_len,
                "question_limit": int(self.model.config.max_position_embeddings)}

    @staticmethod
    def _pad(rows, value=0) -> torch.Tensor:
        out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def _encode_windows(self, windows, model_batch_size):
        """`model.encode_passages` over the windows in batches: each window's states `(window_length, hidden)`."""
        model, pad = self.model, self.tokenizer.pad_token_id or 0
        device = next(model.parameters()).device
        states = [None] * len(windows)
        for begin in range(0, len(windows), model_batch_size):
            chunk = windows[begin : begin + model_batch_size]
            ids = self._pad(chunk, pad).to(device)
            mask = self._pad([[1] * len(w) for w in chunk]).to(device)
            # the states only: no attention weights or per-layer states, whatever the config's output switches ask for
            encoded = model.encode_passages(ids, attention_mask=mask, output_attentions=False,
                                            output_hidden_states=False)
            for row, window in enumerate(chunk):
                states[begin + row] = encoded.last_hidden_state[row, : len(window)]
        return states

    def _stored_states(self, inputs, store, fingerprint, settings, model_batch_size, update_store, store_dtype):
        """The windows' states from `store` (checked against this call's windows), or computed and, with
        `update_store`, written in the layout of hf-readonce's DeFormer adapter.

        Raises:
            ValueError: if the stored entry's token ids or windows differ from this tokenizer's windows.
        """
        windows, key = inputs["window_ids"], content_hash(inputs["context"])
        if not store.missing(fingerprint, settings, [key]):
            tensors = store.get(fingerprint, settings, key)
            lengths = [int(n) for n in tensors["window_lengths"].tolist()]
            if lengths != [len(w) for w in windows] or \
                    tensors["input_ids"].tolist() != [i for window in windows for i in window]:
                raise ValueError(f"the `store` entry of context {key[:16]} does not hold this tokenizer's windows "
                                 "(corrupted or written by other code); it was not used.")
            device = next(self.model.parameters()).device
            dtype = next(self.model.parameters()).dtype
            hidden = tensors["hidden_states"].to(device=device, dtype=dtype)
            return list(torch.split(hidden, lengths))
        states = self._encode_windows(windows, model_batch_size)
        if update_store:
            offsets = [o if o is not None else (-1, -1) for window in inputs["window_offsets"] for o in window]
            tensors = {
                "hidden_states": torch.cat([state.float().cpu() for state in states]),
                "input_ids": torch.tensor([i for window in windows for i in window], dtype=torch.int32),
                "offsets": torch.tensor(offsets, dtype=torch.int32).reshape(-1, 2),
                "window_lengths": torch.tensor([len(w) for w in windows], dtype=torch.int32),
            }
            with store.writer(fingerprint, settings, dtype=store_dtype, model_type="deformer_bert") as writer:
                writer.add(key, tensors, meta={"id": key[:16], "num_tokens": int(tensors["input_ids"].shape[0])})
        return states

    def _forward(self, inputs, model_batch_size=32, store=None, store_space=None, update_store=None,
                 store_dtype="float32"):
        """Encode every window once (or read the states from `store`), then read every (question, window) pair
        from those states. Returns the inputs plus `logits`: per question, per window, `(start, end)` logits over
        the window's tokens and the no-answer score `start[CLS] + end[CLS]`."""
        model, pad = self.model, self.tokenizer.pad_token_id or 0
        device = next(model.parameters()).device
        windows = inputs["window_ids"]
        if store is not None:
            if store_space is None:
                raise ValueError("`store` is resolved by calling the pipeline (`pipe(question=..., context=..., "
                                 "store=...)`), not by `_forward` alone.")
            states = self._stored_states(inputs, store, *store_space, model_batch_size, update_store, store_dtype)
        else:
            states = self._encode_windows(windows, model_batch_size)
        meta = {"num_decomposed_layers": int(model.config.num_decomposed_layers),
                "model_fingerprint": model.representation_fingerprint()}
        pairs = [(q, w) for q in range(len(inputs["question_ids"])) for w in range(len(windows))]
        logits = [[None] * len(windows) for _ in inputs["question_ids"]]
        for begin in range(0, len(pairs), model_batch_size):
            chunk = pairs[begin : begin + model_batch_size]
            questions = [inputs["question_ids"][q] for q, _ in chunk]
            rows = [states[w] for _, w in chunk]
            width = max(r.shape[0] for r in rows)
            hidden = rows[0].new_zeros((len(rows), width, rows[0].shape[-1]))
            passage_mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
            for i, r in enumerate(rows):
                hidden[i, : r.shape[0]] = r
                passage_mask[i, : r.shape[0]] = 1
            passage_states = {"last_hidden_state": hidden, "attention_mask": passage_mask, **meta}
            q_ids = self._pad(questions, pad).to(device)
            q_mask = self._pad([[1] * len(q) for q in questions]).to(device)
            # the logits only: no attention weights or per-layer states, whatever the config's switches ask for;
            # the output's fields whatever `config.return_dict` says
            out = model(input_ids=q_ids, attention_mask=q_mask, passage_states=passage_states,
                        output_attentions=False, output_hidden_states=False, return_dict=True)
            start, end, offset = out.start_logits.float().cpu(), out.end_logits.float().cpu(), q_ids.shape[1]
            for i, (q, w) in enumerate(chunk):
                n = len(windows[w])
                logits[q][w] = (start[i, offset : offset + n], end[i, offset : offset + n],
                                float(start[i, 0] + end[i, 0]))
        return {**inputs, "logits": logits}

    def postprocess(self, outputs, top_k=1, max_answer_len=15, handle_impossible_answer=None,
                    null_score_diff_threshold=None, n_best_size=20):
        """Per question, the `top_k` best answers (see the class docstring for the search and the scores)."""
        config = self.model.config
        if handle_impossible_answer is None:
            handle_impossible_answer = bool(getattr(config, "allow_no_answer", None) or False)
        if null_score_diff_threshold is None:
            null_score_diff_threshold = float(getattr(config, "null_score_diff_threshold", None) or 0.0)
        context, offsets = outputs["context"], outputs["window_offsets"]
        results = []
        for per_window in outputs["logits"]:
            candidates = []  # (logit score, char start, char end), in search order
            start_pool, end_pool, null = [], [], math.inf
            for w, (start_logits, end_logits, null_score) in enumerate(per_window):
                window_offsets = offsets[w]
                real = [i for i, o in enumerate(window_offsets) if o is not None]
                start_pool.append(start_logits[real])
                end_pool.append(end_logits[real])
                null = min(null, null_score)
                candidates += window_span_candidates(start_logits, end_logits, window_offsets, n_best_size,
                                                     max_answer_len)
            results.append(_best_answers(context, candidates, start_pool, end_pool, null - null_score_diff_threshold,
                                         handle_impossible_answer, top_k))
        return results


def _register_pipeline(task: str, pipeline_class, pt_model) -> None:
    """Register `pipeline_class` for `task` in transformers' `PIPELINE_REGISTRY` unless a class already owns the task.
    transformers keeps one class per task, and several hf-readonce families share a task (question-answering,
    summarization); the first pipeline file imported in a process owns it, and a second copy of a file (a checkpoint's,
    loaded with remote code beside hf-readonce's) re-registers nothing. A class that does not own its task still
    knows it, so `save_pretrained` writes `custom_pipelines`, and `pipeline(..., trust_remote_code=True)` loads each
    family's class from its checkpoint's config."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(task)
    if registered is None:
        PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=pipeline_class, pt_model=pt_model, type="text")
    else:
        pipeline_class._registered_impl = {task: {**registered, "impl": pipeline_class}}


_register_pipeline("question-answering", DeformerQuestionAnsweringPipeline, AutoModelForQuestionAnswering)

__all__ = ["DeformerQuestionAnsweringPipeline", "passage_windows", "window_span_candidates"]
