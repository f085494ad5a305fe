"""Export a [`RepresentationStore`] as a `datasets.Dataset` (Arrow; `to_parquet` / `push_to_hub` to share it next to
the model) and import such a dataset back into a store. Tensors travel as raw bytes with their dtype and shape
(bf16 has no Arrow type), each row with the document checksum, which the import re-checks."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping

import torch

from .errors import CorruptedShardError
from .keys import canonical_settings
from .shards import DEFAULT_SHARD_SIZE_BYTES, FORMAT_VERSION, resolve_dtype, tensors_checksum
from .store import RepresentationStore, check_store_argument

COLUMNS = ("format_version", "space", "fingerprint", "settings", "model_type", "content_hash", "sha256", "meta",
           "tensor_names", "tensor_dtypes", "tensor_shapes", "tensor_bytes")


def _features():
    from datasets import Features, Sequence, Value

    return Features({
        "format_version": Value("int32"), "space": Value("string"), "fingerprint": Value("string"),
        "settings": Value("string"), "model_type": Value("string"), "content_hash": Value("string"),
        "sha256": Value("string"), "meta": Value("string"), "tensor_names": Sequence(Value("string")),
        "tensor_dtypes": Sequence(Value("string")), "tensor_shapes": Sequence(Sequence(Value("int64"))),
        "tensor_bytes": Sequence(Value("binary")),
    })


def iter_store_rows(path: str, fingerprint: str | None = None, settings_json: str | None = None) -> Iterator[dict]:
    """Rows of the export (one per document; see [`export_to_dataset`]); reads and checks every document."""
    store = RepresentationStore(path, create=False, readonly=True)
    settings = json.loads(settings_json) if settings_json is not None else None
    spaces = {s.key: s for s in store.spaces()}
    for entry in store.entries(fingerprint, settings):
        space = spaces[entry.space]
        tensors = store.read_entry(entry, verify=True)
        names = sorted(tensors)
        yield {
            "format_version": FORMAT_VERSION, "space": space.key, "fingerprint": space.fingerprint,
            "settings": json.dumps(space.settings, sort_keys=True), "model_type": space.model_type or "",
            "content_hash": entry.content_hash, "sha256": entry.sha256, "meta": json.dumps(entry.meta),
            "tensor_names": names, "tensor_dtypes": [str(tensors[n].dtype).removeprefix("torch.") for n in names],
            "tensor_shapes": [list(tensors[n].shape) for n in names],
            "tensor_bytes": [_to_bytes(tensors[n]) for n in names],
        }


def _to_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def _from_bytes(data: bytes, dtype: str, shape: list[int], where: str = "row") -> torch.Tensor:
    """One tensor of a row, after checking that its declared dtype and shape match the bytes present: a row from an
    untrusted dataset never makes the import allocate more than the bytes it carries.

    Raises:
        ValueError: naming `where`: an unknown dtype, a shape that is not a list of ints >= 0, or a byte count that
            is not shape x element size.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"{where}: unknown tensor dtype {dtype!r} (one of {', '.join(_DTYPES)}).")
    torch_dtype = getattr(torch, dtype)
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"{where}: shape {shape!r} is not a list of ints >= 0.")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"{where}: tensor bytes are of type {type(data).__name__}, not bytes.")
    expected = math.prod(shape) * torch_dtype.itemsize
    if len(data) != expected:
        raise ValueError(f"{where}: shape {list(shape)} of {dtype} needs {expected} bytes, the row holds "
                         f"{len(data)}; the row is damaged (nothing was allocated for it).")
    storage_dtype = torch.uint8 if torch_dtype == torch.bool else torch_dtype
    if not data:
        return torch.empty(list(shape), dtype=torch_dtype)
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(storage_dtype).reshape(list(shape))
    return tensor.to(torch.bool) if torch_dtype == torch.bool else tensor


def export_to_dataset(store: RepresentationStore, fingerprint: str | None = None, settings: Mapping | None = None,
                      *, cache_dir=None):
    """Export the documents of `store` (all spaces, or the one of `fingerprint`+`settings`) as a
    `datasets.Dataset`, one row per document, columns:

    `format_version`, `space`, `fingerprint`, `settings` (JSON), `model_type`, `content_hash`, `sha256`, `meta`
    (JSON), and per tensor (parallel lists) `tensor_names`, `tensor_dtypes`, `tensor_shapes`, `tensor_bytes`
    (raw little-endian bytes). Save with `dataset.to_parquet(...)` or share with `dataset.push_to_hub(...)`.

    Args:
        cache_dir (`str`, *optional*): where `datasets` writes the Arrow file (its default cache otherwise).

    Raises:
        CorruptedShardError: if a document fails its checksum (a corrupted store is never exported).
        ValueError: if `settings` is given without `fingerprint`, or `fingerprint` without `settings`.
        TypeError: `store` is not a [`RepresentationStore`].
    """
    from datasets import Dataset

    check_store_argument(store)
    if (settings is None) != (fingerprint is None):
        raise ValueError(f"`{'settings' if fingerprint is None else 'fingerprint'}` needs `"
                         f"{'fingerprint' if fingerprint is None else 'settings'}`: a space is a fingerprint and its "
                         "settings (`store.spaces()` lists them); give both, or neither for every space.")
    gen_kwargs = {"path": str(store.path), "fingerprint": fingerprint,
                  "settings_json": canonical_settings(settings) if fingerprint is not None else None}
    # the index state is part of the cache key, so a changed store is exported again; one string, not a list:
    # `datasets` splits list-valued gen_kwargs into one generator call per item, each of which would yield every row
    store.refresh()
    gen_kwargs["state"] = hashlib.sha256("\n".join(store.loaded_manifests).encode()).hexdigest()
    try:
        return Dataset.from_generator(_generate, gen_kwargs=gen_kwargs, features=_features(), cache_dir=cache_dir)
    except Exception as error:  # `datasets` wraps what the generator raised in its DatasetGenerationError
        cause, seen = error, 0
        while cause is not None and not isinstance(cause, CorruptedShardError) and seen < 20:
            cause, seen = cause.__cause__ or cause.__context__, seen + 1
        if not isinstance(cause, CorruptedShardError):
            raise
        raise CorruptedShardError(str(cause), cause.shard, cause.documents) from None


def _generate(path, fingerprint, settings_json, state):
    del state
    yield from iter_store_rows(path, fingerprint, settings_json)


def import_from_dataset(store: RepresentationStore, dataset, *,
                        shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES) -> int:
    """Write the rows of an exported dataset (see [`export_to_dataset`]) into `store`, checking each row's checksum.
    Documents already stored are skipped.

    Args:
        dataset (`datasets.Dataset` or an iterable of row dicts).

    Returns:
        `int`: documents written.

    Raises:
        TypeError: `dataset` is a path (load it first) or holds a row that is not a dict; `store` is not a store.
        ValueError: naming the row: a missing column, an unknown format version or dtype, parallel tensor lists of
            different lengths, or a declared shape that does not match the bytes present (checked before anything
            is allocated). CorruptedShardError: a row whose bytes do not match its `sha256` (naming the document).
            Rows before the failing one are kept.
    """
    if isinstance(dataset, (str, bytes, os.PathLike)):
        raise TypeError(f"`dataset` must be a `datasets.Dataset` or an iterable of row dicts, got a path "
                        f"{str(dataset)!r}: load it first, e.g. `datasets.Dataset.from_parquet(path)` or "
                        "`datasets.load_from_disk(path)`.")
    check_store_argument(store)
    column_names = getattr(dataset, "column_names", None)
    if column_names is not None:
        absent = [c for c in COLUMNS if c not in column_names]
        if absent:
            raise ValueError(f"`dataset` lacks the columns {absent}; was it made by export_to_dataset?")
    writers = {}
    written = 0
    try:
        for number, row in enumerate(dataset):
            if not isinstance(row, dict):
                raise TypeError(f"row {number} must be a dict (a row of export_to_dataset), got {type(row).__name__}.")
            absent = [c for c in COLUMNS if c not in row]
            if absent:
                raise ValueError(f"row {number} lacks the columns {absent}; was it made by export_to_dataset?")
            if row["format_version"] != FORMAT_VERSION:
                raise ValueError(f"row {number}: format_version {row['format_version']}, expected {FORMAT_VERSION}.")
            columns = [row["tensor_names"], row["tensor_dtypes"], row["tensor_shapes"], row["tensor_bytes"]]
            if not all(isinstance(c, (list, tuple)) for c in columns) or len({len(c) for c in columns}) != 1:
                raise ValueError(f"row {number}: tensor_names, tensor_dtypes, tensor_shapes and tensor_bytes must be "
                                 "lists of one length.")
            names = columns[0]
            if not names or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
                raise ValueError(f"row {number}: tensor_names must be distinct non-empty str, got {names!r}.")
            tensors = {name: _from_bytes(data, dtype, shape, f"row {number}, tensor {name!r}")
                       for name, dtype, shape, data in zip(*columns)}
            if tensors_checksum(tensors) != row["sha256"]:
                raise CorruptedShardError(
                    f"row {number} (document {row['content_hash'][:16]}): bytes do not match the row's sha256.",
                    "<dataset>", [row["content_hash"]])
            key = row["space"]
            if key not in writers:
                floats = [d for d in row["tensor_dtypes"] if d in ("float32", "float16", "bfloat16")]
                writers[key] = store.writer(row["fingerprint"], json.loads(row["settings"]),
                                            dtype=resolve_dtype(floats[0] if floats else "float32"),
                                            shard_size_bytes=shard_size_bytes, model_type=row["model_type"] or None)
                if writers[key].space.key != key:
                    raise ValueError(f"row {number}: space key does not match its fingerprint and settings.")
            written += writers[key].add(row["content_hash"], tensors, meta=json.loads(row["meta"] or "{}"))
    finally:
        for writer in writers.values():
            writer.flush()
    return written


__all__ = ["export_to_dataset", "import_from_dataset", "iter_store_rows"]
