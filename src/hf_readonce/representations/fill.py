"""Filling a [`RepresentationStore`] with a model's representations of documents (Python iterables, JSONL rows,
`datasets.Dataset.map`). Model specifics stay in the adapters; [`fill_store`] is the only writer of model output
into a store."""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..dtypes import takes_store_dtype
from ..store import RepresentationStore, content_hash, rank_of
from ..store.keys import check_bool
from ..store.shards import DEFAULT_SHARD_SIZE_BYTES, resolve_dtype
from ..store.store import check_store_argument
from .base import DocumentError, check_positive_ints, current_fingerprint, documents_cut_each_of

# batches of documents read ahead and sorted by length when `fill_store` groups them (`group_by_length`), as the
# `mega_batch_mult` of transformers' `LengthGroupedSampler`
LENGTH_GROUPED_BATCHES = 50
# characters of the documents read ahead past which reading ahead stops at the next batch boundary, however few
# batches that is: long documents (books) are not held 50 batches at a time
LENGTH_GROUPED_CHARACTERS = 2 ** 24


@dataclass
class EncodeStats:
    """Counts of a [`fill_store`] run (this process only).

    Attributes: `seen` documents read; `encoded` computed with the model and written; `already_stored` skipped
    because stored (no model work); `other_rank` left to other processes; `duplicates` repeated texts in the input;
    `tokens` stored by this run; `seconds` wall time; `encoded_hashes` the content hashes written; `rejected`
    `(document id, reason)` of each document the adapter could not encode (e.g. no token after tokenization), set
    aside while the rest was stored; `truncated` documents encoded that were longer than the adapter reads (cut to its
    `max_document_length`; see `AdapterBase.documents_cut`).
    """

    seen: int = 0
    encoded: int = 0
    already_stored: int = 0
    other_rank: int = 0
    duplicates: int = 0
    tokens: int = 0
    seconds: float = 0.0
    encoded_hashes: list = field(default_factory=list, repr=False)
    rejected: list = field(default_factory=list)
    truncated: int = 0

    def as_dict(self) -> dict:
        """The counts as a JSON-ready dict (without the hash list)."""
        return {k: v for k, v in self.__dict__.items() if k != "encoded_hashes"}


@takes_store_dtype
def fill_store(adapter, store: RepresentationStore, documents: Iterable, *, store_dtype: str = "float16",
               shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES, documents_per_batch: int | None = None,
               rank: int = 0, num_processes: int = 1, progress: bool = False, total: int | None = None,
               on_batch: Callable[[EncodeStats], None] | None = None,
               fingerprint: str | None = None, model_name: str | None = None,
               group_by_length: bool = True) -> EncodeStats:
    """Encode the documents not yet stored and write them into `store`, in shards.

    Documents already stored for the adapter's (fingerprint, settings) are skipped without model work, so re-running
    an interrupted run finishes exactly the missing ones. With `num_processes > 1`, this process only encodes the
    documents with `rank_of(hash, num_processes) == rank`; all processes may write into the same store.

    Args:
        adapter: a representation adapter (e.g. [`DeformerBertAdapter`], or [`get_adapter`]).
        store ([`RepresentationStore`]): written into.
        documents (`Iterable[str]` or `Iterable[tuple[str, str]]`): texts, or `(doc_id, text)` pairs (the id is
            kept as metadata to name documents in reports).
        store_dtype (`str` or `torch.dtype`, defaults to `"float16"`): storage dtype of floating tensors (fp32, fp16,
            bf16); the model computes in its own dtype and its states are cast to this one when written.
        shard_size_bytes (`int`, defaults to 64 MiB): bytes buffered before a shard is committed.
        documents_per_batch (`int`, *optional*): documents per adapter call (defaults to the adapter's batch size).
        rank, num_processes (`int`): this process's share of the corpus.
        progress (`bool`): tqdm bar on stderr, counting distinct documents (one to encode once its batch is
            done). total (`int`, *optional*): expected
            number of distinct documents for it.
        on_batch (`callable`, *optional*): called with the running stats after each encoded batch and once at the
            end, also when an error or Ctrl-C stops the run (after what was computed is committed) (`encoded`:
            documents this call committed to the store so far, which a writer does shard by shard; `seconds` so
            far).
        fingerprint (`str`, *optional*): the fingerprint the caller expects the documents to be written under (a
            task that fills what is missing passes the one it looked the space up with); checked against
            [`current_fingerprint`], which this call computes whether or not it is given (the weights are digested
            once per task call within its [`one_weights_digest`] block, else on each call), so that one computed
            before the weights changed, even through `.data`, or another model's, never keys what is written.
        model_name (`str`, *optional*): the model's name or path, recorded with the shards written (what `hf-readonce
            info --store` shows of each space, to tell the spaces of two checkpoints of one family apart; the store
            keeps it as an opaque string). Defaults to the adapter's model's `config.name_or_path` (the folder or Hub
            id it was loaded from, a folder given relative to the working directory by its absolute path; nothing
            is recorded when that is empty, as for a model built from a config).
        group_by_length (`bool`, defaults to `True`): documents of similar length share an adapter call, so that
            less of each call is padding (transformers' `group_by_length`): the documents to encode are read
            `LENGTH_GROUPED_BATCHES` (50) batches ahead, or fewer whole batches once they hold
            `LENGTH_GROUPED_CHARACTERS` (2^24, about 16.8 million) characters, sorted by their number of characters
            (a proxy of their tokens that costs no second tokenization), longest first, and cut into batches of
            `documents_per_batch`. At most 50 × `documents_per_batch` texts are held, and fewer than 2^24 characters
            besides the last batch read; the documents, their keys, metadata and final counts are those of a run in
            input order (`on_batch` is called as often, its running `tokens` those of the documents encoded so far,
            longest first), and each document's tensors are the same within floating-point rounding (an adapter's
            output for a document does not depend on its batch companions). The first batch is encoded once the
            look-ahead is read: `False` (input order, one batch read at a time) suits documents that arrive slowly,
            e.g. from a pipe. No effect with one document per batch.

    Returns:
        [`EncodeStats`].

    Each document is stored with its metadata `{"id": ..., "num_tokens": ...}` (the tokens the adapter read), and,
    from an adapter that cuts documents to a `max_document_length`, `"cut"`: whether it was cut (its
    `documents_cut_each`, from the tokenization that encoded it), which [`stored_documents_cut`] reads instead of
    tokenizing it again. An adapter that overrides `documents_cut` (the count) without `documents_cut_each` gets no
    `"cut"` recorded, and `EncodeStats.truncated` is its own count
    ([`~hf_readonce.representations.base.documents_cut_each_of`]).

    An empty (or whitespace-only) document, and one the adapter cannot encode (a [`DocumentError`]: e.g. a text of
    only control or zero-width characters, which no token is left of), is set aside in `EncodeStats.rejected`, named
    by its id (`EncodeStats.rejected` lists them in input order); the others are stored. Whatever stops the run (an
    error, Ctrl-C), the documents already computed are committed before it propagates, so a re-run does no model work
    for them; documents read ahead (`group_by_length`) and not yet encoded are left to the re-run, except that bad
    input (a row that is no document, an error of the `documents` iterable) is raised once the full batches read
    before it are encoded and committed, as in input order.

    Raises:
        ReadOnlyStoreError: before any model work if the store cannot be written.
        TypeError: `documents` is a single str (it would be read as one document per character) or bytes, or a
            mapping such as `{id: text}` (its keys would be read as the documents: pass `.items()`); a document that
            is not a string (naming it); `rank`, `num_processes` or `documents_per_batch` not an int, or
            `group_by_length` not a bool; `store` not a
            [`RepresentationStore`], `adapter` not an adapter (e.g. the model itself); a `model_name` that is not a
            str; an `on_batch` that is not callable (before any model work); a `dtype=` keyword (the storage dtype is
            `store_dtype`, [`~hf_readonce.dtypes.takes_store_dtype`]).
        ValueError: `num_processes` < 1, `rank` outside [0, num_processes), `documents_per_batch` < 1, a
            `store_dtype` that is not fp32, fp16 or bf16 (before any model work); a tuple that is not `(id, text)`
            (naming its position); a `fingerprint` that is not the adapter's model's (stale, or another model's); an
            adapter whose `documents_cut_each` gives not one flag per document (the batch it was asked about is not
            stored).
    """
    from tqdm.auto import tqdm

    if isinstance(documents, (str, bytes)):
        raise TypeError("`documents` must be an iterable of texts or (id, text) pairs, not a single "
                        f"{type(documents).__name__} (it would be stored one character at a time); pass [text].")
    if isinstance(documents, Mapping):
        raise TypeError("`documents` must be an iterable of texts or (id, text) pairs, not a "
                        f"{type(documents).__name__} (iterating over it gives its keys, which would be stored as the "
                        "documents); pass `documents.items()` for {id: text}, or `documents.values()`.")
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"`rank` must be an int, got {type(rank).__name__} {rank!r}.")
    check_positive_ints({"num_processes": num_processes, "documents_per_batch": documents_per_batch},
                        optional=("documents_per_batch",))
    if not 0 <= rank < num_processes:
        raise ValueError(f"`rank` must be in [0, num_processes={num_processes}), got {rank}.")
    check_bool(group_by_length, "group_by_length")
    check_store_argument(store)
    resolve_dtype(store_dtype, "store_dtype")
    if on_batch is not None and not callable(on_batch):
        raise TypeError(f"`on_batch` must be a callable (it is called with the running `EncodeStats`) or None, got "
                        f"{type(on_batch).__name__}.")
    if not all(callable(getattr(adapter, name, None)) for name in ("encode", "settings", "num_tokens")):
        raise TypeError(f"`adapter` must be a representation adapter, got {type(adapter).__name__} (build one with "
                        "`hf_readonce.representations.get_adapter(model, tokenizer)`).")
    # the weights as they are now, digested here whatever the caller passes: the writer keys what it writes for good
    # (once per task call within its `one_weights_digest` block)
    current, settings = current_fingerprint(adapter), adapter.settings()
    if fingerprint is not None and fingerprint != current:
        raise _not_this_models(fingerprint, current)
    fingerprint = current
    per_batch = documents_per_batch or getattr(adapter, "batch_size", 32)
    # documents read before the first of them is encoded: several batches to sort by length, else one
    look_ahead = per_batch * LENGTH_GROUPED_BATCHES if group_by_length and per_batch > 1 else per_batch
    stats = EncodeStats()
    start = time.perf_counter()
    if model_name is None:  # what the model was loaded from, if anything
        model_name = getattr(getattr(getattr(adapter, "model", None), "config", None), "name_or_path", None)
        model_name = model_name if isinstance(model_name, str) and model_name else None
        if model_name is not None and not os.path.isabs(model_name) and os.path.isdir(model_name):
            # a folder named relative to this process's working directory (`from_pretrained` reads a local folder
            # before a Hub id): recorded by its absolute path, as `hf-readonce` reads a `../` name relative to the store
            model_name = os.path.abspath(model_name)
    writer = store.writer(fingerprint, settings, dtype=store_dtype, shard_size_bytes=shard_size_bytes,
                          model_type=adapter.model_type, model_name=model_name)  # raises ReadOnlyStoreError first
    store.refresh()
    space = writer.space.key
    seen: set[str] = set()
    tokens_of: dict[str, int] = {}  # per document buffered: counted in `tokens` once its shard is committed
    counted = [0]  # how many of `writer.committed` `stats.tokens` counts

    def count_committed_tokens():  # not the documents another process stored meanwhile (dropped from the shard)
        stats.tokens += sum(tokens_of.pop(h) for h in writer.committed[counted[0]:])
        counted[0] = len(writer.committed)

    # the flags recorded with each document; None for an adapter that overrides `documents_cut` alone (its own count)
    cut_each = documents_cut_each_of(adapter)
    # the documents read and not yet encoded (hash, id, text, input position), and those of the adapter call under way
    ahead: list[tuple[str, str, str, int]] = []
    pending: list[tuple[str, str, str, int]] = []
    held = [0]  # characters of the texts of `ahead`
    rejected_at: list[int] = []  # the input position of each of `stats.rejected`, which are kept in input order
    bar = tqdm(total=total, desc="encode", unit="doc", disable=not progress, dynamic_ncols=True)

    def reject(position: int, doc_id: str, reason: str):
        at = bisect.bisect_right(rejected_at, position)
        rejected_at.insert(at, position)
        stats.rejected.insert(at, (doc_id, reason))

    def run_ahead():  # the documents read ahead, longest first (`group_by_length`), one adapter call per batch
        if look_ahead > per_batch and len(ahead) > 1:
            ahead.sort(key=lambda entry: -len(entry[2]))  # stable: input order among equals
        held[0] = 0
        while ahead:
            pending[:] = ahead[:per_batch]
            del ahead[:per_batch]
            full = len(pending) == per_batch
            run_batch()
            if full:  # after each full batch (a last, shorter one is told by the final report)
                report()

    def run_batch():
        size = len(pending)
        try:
            encode_batch()  # empties `pending` once it is stored
        finally:  # the documents this batch is done with, encoded or set aside
            bar.update(size - len(pending))

    def encode_batch():
        while pending:
            try:
                encoded = adapter.encode([text for _, _, text, _ in pending])
                break
            except DocumentError as error:  # set that one document aside, encode the rest of the batch
                if not 0 <= error.index < len(pending):
                    raise
                _, doc_id, _, position = pending.pop(error.index)
                reject(position, doc_id, error.reason)
        else:
            return
        texts = [text for _, _, text, _ in pending]
        cut = [None] * len(pending)  # per document: whether it was cut to `max_document_length` (None: not told)
        if getattr(adapter, "max_document_length", None) is not None and cut_each is not None:
            cut = [bool(flag) for flag in cut_each(texts)]
            if len(cut) != len(pending):  # zip would store only the first len(cut) documents, and say nothing
                raise ValueError(f"`{type(adapter).__name__}.documents_cut_each` gave {len(cut)} flag(s) for "
                                 f"{len(pending)} documents; it must give one per document, in order.")
            stats.truncated += sum(cut)
        elif callable(getattr(adapter, "documents_cut", None)):
            stats.truncated += adapter.documents_cut(texts)
        for (doc_hash, doc_id, _, _), tensors, was_cut in zip(pending, encoded, cut):
            tokens = adapter.num_tokens(tensors)
            # recorded before `add`, which may commit the document's shard and then deliver a Ctrl-C held meanwhile
            tokens_of[doc_hash] = tokens
            meta = {"id": doc_id, "num_tokens": tokens, **({} if was_cut is None else {"cut": was_cut})}
            if not writer.add(doc_hash, tensors, meta=meta):
                del tokens_of[doc_hash]
        pending.clear()

    def report():  # the running stats: what is committed to the store so far
        if on_batch is not None:
            stats.encoded, stats.seconds = len(writer.committed), time.perf_counter() - start
            count_committed_tokens()
            on_batch(stats)

    def to_encode():  # the documents to encode (hash, id, text, input position), counting the others
        for item in documents:
            if isinstance(item, tuple) and len(item) != 2:
                raise ValueError(f"document {stats.seen}: a tuple must be (id, text), got {len(item)} items.")
            doc_id, text = item if isinstance(item, tuple) else (None, item)
            if not isinstance(text, str):
                raise TypeError(f"document {doc_id if doc_id is not None else stats.seen} is of "
                                f"type {type(text).__name__}, not a string.")
            position = stats.seen
            stats.seen += 1
            if not text.strip():
                reject(position, doc_id if doc_id is not None else f"document {position}", "the text is empty")
                continue
            doc_hash = content_hash(text)
            if doc_hash in seen:
                stats.duplicates += 1
                continue
            seen.add(doc_hash)
            if num_processes > 1 and rank_of(doc_hash, num_processes) != rank:
                bar.update(1)  # distinct documents, as in the summary line (those encoded: once their batch is)
                stats.other_rank += 1
                continue
            if store.has(space, doc_hash):
                bar.update(1)
                stats.already_stored += 1
                continue
            yield doc_hash, doc_id if doc_id is not None else doc_hash[:16], text, position

    try:
        entries = to_encode()
        while True:
            try:
                entry = next(entries)
            except StopIteration:
                break
            except Exception:
                # bad input (a row, the file): the full batches read before it are encoded, as a run that reads no
                # further ahead than one batch would have, before the error propagates
                del ahead[len(ahead) - len(ahead) % per_batch:]
                run_ahead()
                raise
            ahead.append(entry)
            held[0] += len(entry[2])
            # whole batches only, so the batches and reports are as many as in input order
            if len(ahead) >= look_ahead or (len(ahead) % per_batch == 0 and held[0] >= LENGTH_GROUPED_CHARACTERS):
                run_ahead()
        run_ahead()
        writer.flush()
        report()
    except BaseException:
        with contextlib.suppress(Exception):  # the run's own error is the one to report
            writer.flush()  # what was computed is complete and valid: keep it
        with contextlib.suppress(Exception):
            report()  # what this call committed before the stop (the store may hold other writers' work too)
        raise
    finally:
        bar.close()
        stats.encoded = len(writer.committed)
        count_committed_tokens()
        stats.already_stored += len(writer.skipped)  # stored meanwhile by another process
        stats.encoded_hashes = list(writer.committed)
        stats.seconds = time.perf_counter() - start
    return stats


class StoreEncodeFunction:
    """Callable for `datasets.Dataset.map(fn, batched=True)`: stores the representation of every row's text that
    is not stored yet, and returns, per row, its `content_hash`, `representation_space` (space key) and
    `num_tokens` (tokens stored for it).

    Each call commits its own shard, so choose `map`'s `batch_size` so that a batch holds enough documents (the
    default 1000 is fine). Identical texts are encoded once. Within a call the rows are encoded longest first
    ([`fill_store`]'s `group_by_length`); what is returned follows the rows' order.

    Args:
        adapter: a store adapter. store ([`RepresentationStore`]).
        text_column (`str`, defaults to `"context"`): column holding the document text.
        id_column (`str`, *optional*): column whose value names the document in reports.
        store_dtype (`str`, defaults to `"float16"`): storage dtype of floating tensors (fp32, fp16, bf16).

    Raises:
        TypeError: a `dtype=` keyword (the storage dtype is `store_dtype`, [`~hf_readonce.dtypes.takes_store_dtype`]).

    Raises (on call):
        ValueError: missing `text_column`, an empty / non-string text (naming its row in the batch), or rows the
            adapter cannot encode (naming them; raised after the batch's other rows are stored).
        TypeError: the column holds a single str instead of a list (a call without `batched=True`).
        ReadOnlyStoreError: if the store cannot be written.
    """

    @takes_store_dtype
    def __init__(self, adapter, store: RepresentationStore, text_column: str = "context", id_column: str | None = None,
                 store_dtype: str = "float16"):
        self.adapter = adapter
        self.store = store
        self.text_column = text_column
        self.id_column = id_column
        self.store_dtype = store_dtype

    def __call__(self, batch: Mapping[str, Sequence]) -> dict[str, list]:
        """Store one `Dataset.map` batch (see the class docstring).

        Raises:
            ValueError, TypeError, ReadOnlyStoreError: as the class docstring says.
        """
        if self.text_column not in batch:
            raise ValueError(f"text_column {self.text_column!r} not in the batch columns {sorted(batch)}.")
        if isinstance(batch[self.text_column], (str, bytes)):
            raise TypeError(f"batch column {self.text_column!r} must be a list of texts (what `Dataset.map(fn, "
                            f"batched=True)` passes), got a single {type(batch[self.text_column]).__name__}.")
        texts = list(batch[self.text_column])
        ids = list(batch[self.id_column]) if self.id_column else [None] * len(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"row {i} of the batch: column {self.text_column!r} is empty or not a string.")
        documents = [(str(doc_id) if doc_id is not None else None, text) for doc_id, text in zip(ids, texts)]
        documents = [(d if d is not None else content_hash(t)[:16], t) for d, t in documents]
        stats = fill_store(self.adapter, self.store, documents, store_dtype=self.store_dtype)
        if stats.rejected:
            rows = [i for i, d in enumerate(documents) if d[0] in {doc_id for doc_id, _ in stats.rejected}]
            raise ValueError(f"row(s) {rows[:10]} of the batch cannot be encoded: {stats.rejected[0][1]}")
        fingerprint, settings = self.adapter.fingerprint(), self.adapter.settings()
        hashes = [content_hash(text) for text in texts]
        entries = [self.store.entry(fingerprint, settings, h) for h in hashes]
        return {"content_hash": hashes, "representation_space": [e.space for e in entries],
                "num_tokens": [int(e.meta.get("num_tokens", -1)) for e in entries]}


def check_store_arguments(model, store, store_dtype=None) -> None:
    """The checks every store-reading task makes of its arguments before any work: `store` is a
    [`RepresentationStore`], `model` a transformers model (arguments given in another order are named), and
    `store_dtype` (the storage dtype of what `encode_missing` would write) a storage dtype, whether or not anything is
    encoded.

    Args:
        model: the task's model. store: the task's store. store_dtype (`str` or `torch.dtype`, *optional*): the
            storage dtype argument (`None`: not checked).

    Raises:
        TypeError: `store` or `model` of another type. ValueError: a `store_dtype` that is not fp32, fp16 or bf16.
    """
    check_store_argument(store)
    if getattr(getattr(model, "config", None), "model_type", None) is None:
        raise TypeError(f"`model` must be a transformers model, got {type(model).__name__} (the arguments are model, "
                        "tokenizer, store, ...).")
    if store_dtype is not None:
        resolve_dtype(store_dtype, "store_dtype")


def given_or_current_fingerprint(adapter, fingerprint: str | None = None) -> str:
    """The fingerprint of `adapter`'s model as its weights are now: [`current_fingerprint`] (which hashes the
    weights) when `fingerprint` is None, else `fingerprint` once checked. A caller that has just computed it passes it
    on to spare hashing the weights again; it is compared with `adapter.fingerprint()` (a model's
    `representation_fingerprint()` when `adapter` is the model itself), which the model caches while its weights are
    unchanged, so the check hashes nothing right after that `current_fingerprint` call. A stale fingerprint (the
    weights changed since) or another model's would find that model's space, and what it holds, read through this
    adapter, would pass as this model's.

    Raises:
        ValueError: a `fingerprint` that is not the model's, naming `fingerprint`, both fingerprints and the way out.
    """
    if fingerprint is None:
        return current_fingerprint(adapter)
    ask = getattr(adapter, "representation_fingerprint", None)  # a model's; an adapter's is `fingerprint()`
    own = ask() if callable(ask) else adapter.fingerprint()
    if fingerprint != own:
        raise _not_this_models(fingerprint, own)
    return fingerprint


def _not_this_models(fingerprint, own: str) -> ValueError:
    """The error of a given `fingerprint` that is not the model's `own`."""
    return ValueError(f"`fingerprint` {str(fingerprint)[:16]}... is not this model's fingerprint {own[:16]}... (the "
                      "weights changed since it was computed, or it is another model's): pass "
                      "`current_fingerprint(adapter)` as just computed, or leave it out.")


@takes_store_dtype
def ensure_stored(adapter, store: RepresentationStore, texts: Sequence[str], *, encode_missing: bool = False,
                  store_dtype: str = "float16", what: str = "documents",
                  name_of: Callable[[str], str] | None = None,
                  fingerprint: str | None = None) -> tuple[str, dict, dict[str, str]]:
    """Make sure every text of `texts` is stored in `adapter`'s representation space of `store` (its fingerprint of
    the weights as they are now, and its settings): those missing are encoded and stored ([`fill_store`]) with
    `encode_missing`, otherwise the call fails naming how many are missing, the first one, and the way out. What the
    tasks that read a store (answering, summarizing) run before reading it.

    Args:
        adapter: the family adapter (its model, tokenizer and settings).
        store ([`RepresentationStore`]).
        texts (`Sequence[str]`): the texts to find (duplicates allowed).
        encode_missing (`bool`, defaults to `False`), store_dtype (`str`, defaults to `"float16"`): encode what is
            missing, stored in `store_dtype`.
        what (`str`, defaults to `"documents"`): what the texts are, for the message (e.g. `"passages"`).
        name_of (`Callable[[str], str]`, *optional*): names the first missing text in the message (e.g. `"the passage
            of question id 'q7'"`); defaults to its index.
        fingerprint (`str`, *optional*): the adapter's [`current_fingerprint`] when the caller has just computed it
            (it hashes the weights: a task computes it once per call); computed here when omitted. Checked against
            the model's cached `fingerprint()` ([`given_or_current_fingerprint`]: no hashing while the weights are
            unchanged); what is missing is written under it only once [`fill_store`] has checked it against the
            weights as they are now.

    Returns:
        `(fingerprint, settings, hashes)`: the space read, and text -> [`content_hash`].

    Raises:
        MissingRepresentationError / RepresentationMismatchError: texts not stored for this space (counted, the first
            named; the latter when the store holds them for other models or settings, both named), with a note when
            the store holds shard files its index does not list.
        ValueError: a `fingerprint` that is not the adapter's model's (stale, or another model's); with
            `encode_missing`, texts the adapter cannot encode (counted, the first named with the reason, e.g. no
            token after tokenization; [`fill_store`] sets them aside and stores the others).
        TypeError: an `encode_missing` that is not a bool, before anything is looked up or written; a `dtype=`
            keyword (the storage dtype is `store_dtype`, [`~hf_readonce.dtypes.takes_store_dtype`]).
    """
    from ..store import MissingRepresentationError, RepresentationMismatchError
    from ..store.maintenance import unindexed_note

    check_bool(encode_missing, "encode_missing")  # a string such as "no" would read as true: the store written
    fingerprint = given_or_current_fingerprint(adapter, fingerprint)
    settings = adapter.settings()
    hashes = {text: content_hash(text) for text in texts}
    missing = store.missing(fingerprint, settings, list(hashes.values()))
    def named(text: str) -> str:
        return name_of(text) if name_of is not None else f"number {list(hashes).index(text)}"

    if missing and encode_missing:
        absent = set(missing)  # once: a set built per text made this quadratic (minutes for 100k passages)
        by_id = {h[:16]: text for text, h in hashes.items() if h in absent}
        # the fingerprint just looked up with, checked by the writer against the weights as they are now (not
        # digested again within the task's `one_weights_digest` block)
        rejected = fill_store(adapter, store, list(by_id.items()), store_dtype=store_dtype,
                              fingerprint=fingerprint).rejected
        if rejected:  # the others are stored; with nothing to read for these, the task cannot go on
            doc_id, reason = rejected[0]
            raise ValueError(f"{len(rejected)} of {len(hashes)} {what} cannot be encoded (first: {named(by_id[doc_id])}, "
                             f"which {reason.rstrip('.')}); the others are stored: "
                             + ("correct that one or leave it out." if len(rejected) == 1 else
                                "correct those or leave them out."))
    elif missing:
        first = next(text for text, h in hashes.items() if h == missing[0])
        name = named(first)
        try:
            store.entry(fingerprint, settings, missing[0])
            error_type, details = MissingRepresentationError, "stored meanwhile by another process; run again"
        except (MissingRepresentationError, RepresentationMismatchError) as error:
            error_type, details = type(error), str(error)
        raise error_type(
            f"{len(missing)} of {len(hashes)} {what} are not stored in {store.path} for this model and settings "
            f"(first: {name}); encode them first, or pass --encode-missing (`encode_missing=True`) to encode and "
            f"store them now. Details: {details}" + unindexed_note(store))
    return fingerprint, settings, hashes


def stored_documents_cut(adapter, store: RepresentationStore, fingerprint: str, settings: Mapping,
                         hashes: Mapping[str, str]) -> int:
    """How many of the stored documents `hashes` names hold more tokens than `adapter` reads (`max_document_length`):
    what `adapter.documents_cut(list(hashes))` counts (`AdapterBase.documents_cut`), without tokenizing the documents
    whose store metadata tells. [`fill_store`] records with each document the tokens its adapter read (`num_tokens`:
    `min(length, max_document_length)`) and, this release on, whether it was cut (`cut`, from the tokenization that
    encoded it), so a document stored with fewer than `max_document_length` tokens was not cut, and one stored with
    exactly `max_document_length` tokens and a `cut` says which it is; only those stored with exactly
    `max_document_length` tokens and no `cut` (written by an earlier release: cut, or exactly that long) or with no
    count (written by other means) are tokenized to tell. An adapter that overrides `documents_cut` without
    `documents_cut_each` counts those stored with `max_document_length` tokens itself, `cut` or not
    ([`~hf_readonce.representations.base.documents_cut_each_of`]), so the result is its own count. What the tasks
    that read a store count for their note on cut documents, after [`ensure_stored`].

    Args:
        adapter: the family adapter of the space read (its `max_document_length`; `None`: it reads every token).
        store ([`RepresentationStore`]).
        fingerprint (`str`), settings (`Mapping`): the space read, as [`ensure_stored`] returns them.
        hashes (`Mapping[str, str]`): text -> [`content_hash`] of the stored documents to count (as
            [`ensure_stored`] returns it).

    Returns:
        `int`: the number of documents of `hashes` longer than `max_document_length` tokens (0 for an adapter that
        reads every token).

    Raises:
        MissingRepresentationError / RepresentationMismatchError: a document of `hashes` not stored in this space.
    """
    limit = getattr(adapter, "max_document_length", None)
    if limit is None:
        return adapter.documents_cut(list(hashes))  # 0: an adapter that cuts nothing
    # an adapter counting its own way (`documents_cut` overridden alone) is asked, whatever flags are stored
    flags_agree = documents_cut_each_of(adapter) is not None
    cut, unsure = 0, []
    for text, document_hash in hashes.items():
        meta = store.entry(fingerprint, settings, document_hash).meta
        tokens, was_cut = meta.get("num_tokens"), meta.get("cut")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens < limit:
            continue  # read whole
        if tokens == limit and isinstance(tokens, int) and isinstance(was_cut, bool) and flags_agree:
            cut += was_cut
        else:
            unsure.append(text)
    return cut + adapter.documents_cut(unsure)


@takes_store_dtype
def make_encode_function(adapter, store: RepresentationStore, text_column: str = "context",
                         id_column: str | None = None, store_dtype: str = "float16") -> StoreEncodeFunction:
    """A [`StoreEncodeFunction`] for `Dataset.map(..., batched=True)` (the arguments are its own, `store_dtype` the
    storage dtype; a `dtype=` keyword raises `TypeError`, [`~hf_readonce.dtypes.takes_store_dtype`]).

    Example:

    ```python
    >>> fn = make_encode_function(get_adapter(model, tokenizer), RepresentationStore("reps"))
    >>> dataset = dataset.map(fn, batched=True, new_fingerprint="reps-v1")
    ```
    (`new_fingerprint` spares `datasets` from hashing the model to name its cache.)
    """
    return StoreEncodeFunction(adapter, store, text_column=text_column, id_column=id_column, store_dtype=store_dtype)


__all__ = ["LENGTH_GROUPED_BATCHES", "LENGTH_GROUPED_CHARACTERS", "EncodeStats", "StoreEncodeFunction",
           "ensure_stored", "fill_store", "make_encode_function", "stored_documents_cut"]
