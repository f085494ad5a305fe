"""Filling a [`RepresentationStore`] from documents (JSONL files, Python iterables, `datasets.Dataset.map`) and
answering questions from it. Model specifics stay in the adapters ([`hf_readonce.store.adapters`])."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..qa import postprocess, predict_cached, tokenize_questions
from .adapters import DeformerStoreAdapter
from .core import (
    DEFAULT_SHARD_SIZE_BYTES,
    MissingRepresentationError,
    RepresentationMismatchError,
    RepresentationStore,
    content_hash,
    rank_of,
)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------- input
@dataclass
class BadLine:
    """A JSONL line that was set aside: `line` (1-based number) and `reason`."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def iter_jsonl(path, problems: list | None = None) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, row)` for every JSON-object line of a JSONL file, reading line by line (FIFOs and huge
    files work). Lines that are not UTF-8, not JSON or not an object are appended to `problems` as [`BadLine`]
    (with their line number) and skipped; blank lines are ignored.

    Raises:
        FileNotFoundError: if `path` does not exist. IsADirectoryError: if it is a directory.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, expected a JSONL file.")
    problems = problems if problems is not None else []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                problems.append(BadLine(number, f"not valid UTF-8 ({error.reason} at byte {error.start})"))
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                problems.append(BadLine(number, f"not valid JSON ({error.msg}, column {error.colno})"))
                continue
            if not isinstance(row, dict):
                problems.append(BadLine(number, f"a JSON {type(row).__name__}, not an object"))
                continue
            yield number, row


def iter_documents(path, text_field: str = "context", id_field: str | None = "id",
                   problems: list | None = None) -> Iterator[tuple[str, str]]:
    """Yield `(doc_id, text)` from a JSONL file; `doc_id` is the row's `id_field` (as str) or `line N`. Rows whose
    `text_field` is missing, not a string or blank are reported in `problems` (with the line number) and skipped,
    as are malformed lines (see [`iter_jsonl`])."""
    problems = problems if problems is not None else []
    for number, row in iter_jsonl(path, problems):
        text = row.get(text_field)
        if text is None:
            problems.append(BadLine(number, f"no {text_field!r} field"))
        elif not isinstance(text, str):
            problems.append(BadLine(number, f"field {text_field!r} is a {type(text).__name__}, not a string"))
        elif not text.strip():
            problems.append(BadLine(number, f"empty document (field {text_field!r} is blank)"))
        else:
            doc_id = row.get(id_field) if id_field else None
            yield (str(doc_id) if doc_id is not None else f"line {number}"), text


# ---------------------------------------------------------------------------------------------------------- encode
@dataclass
class EncodeStats:
    """Counts of an [`encode_documents`] run (this process only).

    Attributes: `seen` documents read; `encoded` computed with the model and written; `already_stored` skipped
    because stored (no model work); `other_rank` left to other processes; `duplicates` repeated texts in the input;
    `tokens` stored by this run; `seconds` wall time; `encoded_hashes` the content hashes written.
    """

    seen: int = 0
    encoded: int = 0
    already_stored: int = 0
    other_rank: int = 0
    duplicates: int = 0
    tokens: int = 0
    seconds: float = 0.0
    encoded_hashes: list = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        """The counts as a JSON-ready dict (without the hash list)."""
        return {k: v for k, v in self.__dict__.items() if k != "encoded_hashes"}


def encode_documents(adapter, store: RepresentationStore, documents: Iterable, *, dtype: str = "float16",
                     shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES, documents_per_batch: int | None = None,
                     rank: int = 0, num_processes: int = 1, progress: bool = False, total: int | None = None,
                     on_batch: Callable[[EncodeStats], None] | None = None) -> EncodeStats:
    """Encode the documents not yet stored and write them into `store`, in shards.

    Documents already stored for the adapter's (fingerprint, settings) are skipped without model work, so re-running
    an interrupted run finishes exactly the missing ones. With `num_processes > 1`, this process only encodes the
    documents with `rank_of(hash, num_processes) == rank`; all processes may write into the same store.

    Args:
        adapter: a store adapter (e.g. [`DeformerStoreAdapter`]).
        store ([`RepresentationStore`]): written into.
        documents (`Iterable[str]` or `Iterable[tuple[str, str]]`): texts, or `(doc_id, text)` pairs (the id is
            kept as metadata to name documents in reports).
        dtype (`str`, defaults to `"float16"`): storage dtype of floating tensors (fp32, fp16, bf16).
        shard_size_bytes (`int`, defaults to 64 MiB): bytes buffered before a shard is committed.
        documents_per_batch (`int`, *optional*): documents per adapter call (defaults to the adapter's batch size).
        rank, num_processes (`int`): this process's share of the corpus.
        progress (`bool`): tqdm bar on stderr, counting distinct documents. total (`int`, *optional*): expected
            number of distinct documents for it.
        on_batch (`callable`, *optional*): called with the running stats after each committed batch.

    Returns:
        [`EncodeStats`].

    Raises:
        ReadOnlyStoreError: before any model work if the store cannot be written.
        ValueError: an empty document (naming its id), bad rank/num_processes, bad dtype.
    """
    from tqdm.auto import tqdm

    if not 0 <= rank < num_processes:
        raise ValueError(f"`rank` must be in [0, num_processes={num_processes}), got {rank}.")
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    per_batch = documents_per_batch or getattr(adapter, "batch_size", 32)
    stats = EncodeStats()
    start = time.perf_counter()
    writer = store.writer(fingerprint, settings, dtype=dtype, shard_size_bytes=shard_size_bytes,
                          model_type=adapter.model_type)  # raises ReadOnlyStoreError before any model work
    store.refresh()
    space = writer.space.key
    seen: set[str] = set()
    pending: list[tuple[str, str, str]] = []
    bar = tqdm(total=total, desc="encode", unit="doc", disable=not progress, dynamic_ncols=True)

    def run_batch():
        encoded = adapter.encode([text for _, _, text in pending])
        for (doc_hash, doc_id, _), tensors in zip(pending, encoded):
            tokens = adapter.num_tokens(tensors)
            if writer.add(doc_hash, tensors, meta={"id": doc_id, "num_tokens": tokens}):
                stats.tokens += tokens
        pending.clear()

    try:
        for item in documents:
            doc_id, text = item if isinstance(item, tuple) else (None, item)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"document {doc_id if doc_id is not None else stats.seen} is empty or not a string.")
            doc_hash = content_hash(text)
            stats.seen += 1
            if doc_hash in seen:
                stats.duplicates += 1
                continue
            seen.add(doc_hash)
            bar.update(1)  # distinct documents, as in the summary line
            if num_processes > 1 and rank_of(doc_hash, num_processes) != rank:
                stats.other_rank += 1
                continue
            if (space, doc_hash) in store._entries:
                stats.already_stored += 1
                continue
            pending.append((doc_hash, doc_id if doc_id is not None else doc_hash[:16], text))
            if len(pending) >= per_batch:
                run_batch()
                if on_batch is not None:
                    on_batch(stats)
        if pending:
            run_batch()
        writer.flush()
    except KeyboardInterrupt:
        writer.flush()  # what was computed is complete and valid: keep it
        raise
    finally:
        bar.close()
        stats.encoded = len(writer.committed)
        stats.already_stored += len(writer.skipped)  # stored meanwhile by another process
        stats.encoded_hashes = list(writer.committed)
        stats.seconds = time.perf_counter() - start
    return stats


class StoreEncodeFunction:
    """Callable for `datasets.Dataset.map(fn, batched=True)`: stores the representation of every row's text that
    is not stored yet, and returns, per row, its `content_hash`, `representation_space` (space key) and
    `num_tokens` (tokens stored for it).

    Each call commits its own shard, so choose `map`'s `batch_size` so that a batch holds enough documents (the
    default 1000 is fine). Identical texts are encoded once.

    Args:
        adapter: a store adapter. store ([`RepresentationStore`]).
        text_column (`str`, defaults to `"context"`): column holding the document text.
        id_column (`str`, *optional*): column whose value names the document in reports.
        dtype (`str`, defaults to `"float16"`): storage dtype.

    Raises (on call):
        ValueError: missing `text_column`, or an empty / non-string text (naming its row in the batch).
        ReadOnlyStoreError: if the store cannot be written.
    """

    def __init__(self, adapter, store: RepresentationStore, text_column: str = "context", id_column: str | None = None,
                 dtype: str = "float16"):
        self.adapter = adapter
        self.store = store
        self.text_column = text_column
        self.id_column = id_column
        self.dtype = dtype

    def __call__(self, batch: Mapping[str, Sequence]) -> dict[str, list]:
        if self.text_column not in batch:
            raise ValueError(f"text_column {self.text_column!r} not in the batch columns {sorted(batch)}.")
        texts = list(batch[self.text_column])
        ids = list(batch[self.id_column]) if self.id_column else [None] * len(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"row {i} of the batch: column {self.text_column!r} is empty or not a string.")
        documents = [(str(doc_id) if doc_id is not None else None, text) for doc_id, text in zip(ids, texts)]
        documents = [(d if d is not None else content_hash(t)[:16], t) for d, t in documents]
        encode_documents(self.adapter, self.store, documents, dtype=self.dtype)
        fingerprint, settings = self.adapter.fingerprint(), self.adapter.settings()
        hashes = [content_hash(text) for text in texts]
        entries = [self.store.entry(fingerprint, settings, h) for h in hashes]
        return {"content_hash": hashes, "representation_space": [e.space for e in entries],
                "num_tokens": [int(e.meta.get("num_tokens", -1)) for e in entries]}


def make_encode_function(adapter, store: RepresentationStore, text_column: str = "context",
                         id_column: str | None = None, dtype: str = "float16") -> StoreEncodeFunction:
    """A [`StoreEncodeFunction`] for `Dataset.map(..., batched=True)`.

    Example:

    ```python
    >>> fn = make_encode_function(DeformerStoreAdapter(model, tokenizer), RepresentationStore("reps"))
    >>> dataset = dataset.map(fn, batched=True, new_fingerprint="reps-v1")
    ```
    (`new_fingerprint` spares `datasets` from hashing the model to name its cache.)
    """
    return StoreEncodeFunction(adapter, store, text_column=text_column, id_column=id_column, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------- answer
def find_deformer_space(store: RepresentationStore, model, tokenizer) -> dict:
    """The settings of the only DeFormer space in `store` made by this model (fingerprint) and tokenizer.

    Raises:
        RepresentationMismatchError: if the store holds DeFormer states only for other fingerprints (names both).
        MissingRepresentationError: if the store holds no DeFormer states.
        ValueError: if several window settings are stored for this model (pass them explicitly).
    """
    encoder = model.bert if hasattr(model, "bert") else model
    fingerprint = encoder.passage_encoder_fingerprint()
    store.refresh()
    ours = [s for s in store.spaces() if DeformerStoreAdapter.settings_match(s.settings, tokenizer)]
    matching = [s for s in ours if s.fingerprint == fingerprint]
    if len(matching) == 1:
        return dict(matching[0].settings)
    if len(matching) > 1:
        options = "; ".join(f"max_passage_length={s.settings['max_passage_length']} doc_stride="
                            f"{s.settings['doc_stride']}" for s in matching)
        raise ValueError(f"store {store.path} holds several window settings for this model ({options}); pass "
                         "max_passage_length and doc_stride.")
    if ours:
        stored = ", ".join(sorted({s.fingerprint[:16] + "..." for s in ours}))
        raise RepresentationMismatchError(
            f"store {store.path} holds DeFormer passage states only for model fingerprint(s) {stored}, not for this "
            f"model's {fingerprint[:16]}...: encode the documents with this model first.")
    raise MissingRepresentationError(f"store {store.path} holds no DeFormer passage states for this tokenizer.")


def answer_from_store(model, tokenizer, store: RepresentationStore, examples: Sequence[dict], *,
                      max_passage_length: int | None = None, doc_stride: int | None = None,
                      max_question_length: int = 64, batch_size: int = 32, n_best_size: int = 20,
                      max_answer_length: int = 30, allow_no_answer: bool = False,
                      null_score_diff_threshold: float = 0.0, passages_per_chunk: int = 64,
                      encode_missing: bool = False, dtype: str = "float16", progress: bool = False,
                      n_best: int | None = None) -> dict[str, str]:
    """Answer extractive questions with a DeFormer model from passage states stored in `store`: only the questions
    and the upper layers run; the passage windows, offsets and lower-layer states come from the store.

    Args:
        model ([`DeformerBertForQuestionAnswering`]), tokenizer: the model that encoded the store (or a copy).
        store ([`RepresentationStore`]).
        examples (`Sequence[dict]`): SQuAD-style rows with `id`, `question`, `context`.
        max_passage_length, doc_stride (`int`, *optional*): window settings used at encode time; looked up in the
            store when both are omitted ([`find_deformer_space`]).
        max_question_length, batch_size, n_best_size, max_answer_length, allow_no_answer,
            null_score_diff_threshold: as in [`hf_readonce.qa.postprocess`] (`n_best` is the old name of
            `n_best_size`, still accepted).
        passages_per_chunk (`int`, defaults to 64): passages whose states are held in memory at once.
        encode_missing (`bool`, defaults to `False`): encode and store passages that are missing instead of raising.
        dtype (`str`): storage dtype for `encode_missing`.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr counting answered questions.

    Returns:
        `dict[str, str]`: example id -> answer text, in example order.

    Raises:
        MissingRepresentationError / RepresentationMismatchError: passages not stored for this model and settings
            (the message counts them and names the first, and the fingerprints involved).
        ValueError: an example without a non-empty `question`/`context`.
    """
    for i, example in enumerate(examples):
        for key in ("question", "context"):
            if not isinstance(example.get(key), str) or not example[key].strip():
                raise ValueError(f"example {example.get('id', i)}: {key!r} is missing or empty.")
    if (max_passage_length is None) != (doc_stride is None):
        raise ValueError("pass both `max_passage_length` and `doc_stride`, or neither (read from the store).")
    if max_passage_length is None:
        found = find_deformer_space(store, model, tokenizer)
        max_passage_length, doc_stride = found["max_passage_length"], found["doc_stride"]
    adapter = DeformerStoreAdapter(model, tokenizer, max_passage_length=max_passage_length, doc_stride=doc_stride,
                                   batch_size=batch_size)
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    contexts: dict[str, int] = {}
    for example in examples:
        contexts.setdefault(example["context"], len(contexts))
    texts = list(contexts)
    hashes = [content_hash(t) for t in texts]
    missing = store.missing(fingerprint, settings, hashes)
    if missing and encode_missing:
        by_hash = dict(zip(hashes, texts))
        encode_documents(adapter, store, [(h[:16], by_hash[h]) for h in missing], dtype=dtype)
    elif missing:
        first = next(e for e in examples if content_hash(e["context"]) == missing[0])
        name = f"id {first.get('id')!r}" + (f", title {first['title']!r}" if first.get("title") else "")
        try:
            store.entry(fingerprint, settings, missing[0])
        except (MissingRepresentationError, RepresentationMismatchError) as error:
            raise type(error)(
                f"{len(missing)} of {len(hashes)} passages are not stored in {store.path} for this model and window "
                f"settings (first: the passage of question {name}); encode them first, or pass --encode-missing "
                f"(`encode_missing=True`) to encode and store them now. Details: {error}") from None
    questions = tokenize_questions(tokenizer, [e["question"] for e in examples], max_question_length)
    by_passage: dict[int, list[int]] = {}
    for i, example in enumerate(examples):
        by_passage.setdefault(contexts[example["context"]], []).append(i)
    meta = {"model_fingerprint": fingerprint, "num_decomposed_layers": settings["num_decomposed_layers"]}
    pad = tokenizer.pad_token_id or 0
    if n_best is not None:
        n_best_size = n_best
    from tqdm.auto import tqdm

    bar = tqdm(total=len(examples), desc="answer", unit="question", disable=not progress, dynamic_ncols=True)
    predictions: dict[str, str] = {}
    for chunk_start in range(0, len(texts), passages_per_chunk):
        chunk = range(chunk_start, min(chunk_start + passages_per_chunk, len(texts)))
        stored = store.get_many(fingerprint, settings, [hashes[p] for p in chunk])
        windows, cache = [], {"__meta__": meta}
        chunk_examples, features = [], []
        for local, (p, tensors) in enumerate(zip(chunk, stored)):
            doc_windows, states = adapter.unpack(tensors, local)
            windows.append(doc_windows)
            for w, state in enumerate(states):
                cache[(local, w)] = state
            for i in by_passage[p]:
                for w in range(len(doc_windows)):
                    features.append({"example_index": len(chunk_examples), "passage_index": local,
                                     "window_index": w, "question_ids": questions[i]})
                chunk_examples.append({**examples[i], "id": str(examples[i].get("id", i))})
        logits = predict_cached(model, features, cache, batch_size=batch_size, pad_token_id=pad)
        predictions.update(postprocess(chunk_examples, features, windows, logits, n_best=n_best_size,
                                       max_answer_length=max_answer_length, allow_no_answer=allow_no_answer,
                                       null_score_diff_threshold=null_score_diff_threshold))
        bar.update(len(chunk_examples))
    bar.close()
    return {str(e.get("id", i)): predictions[str(e.get("id", i))] for i, e in enumerate(examples)}


__all__ = [
    "BadLine",
    "EncodeStats",
    "StoreEncodeFunction",
    "answer_from_store",
    "encode_documents",
    "find_deformer_space",
    "iter_documents",
    "iter_jsonl",
    "make_encode_function",
]
