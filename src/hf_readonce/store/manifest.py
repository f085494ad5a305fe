"""What the store reads from disk, checked before it is trusted: the schema of a manifest (`index/<shard id>.json`),
the paths it names (always `shards/<space[:24]>/<shard id>.safetensors`, inside the store), and the self-describing
header of a shard, from which a lost manifest is rebuilt. Nothing read here is ever used as a path unchecked."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import CorruptedManifestError
from .keys import DocumentEntry, RepresentationSpace, printable, space_key
from .shards import FORMAT_NAME, FORMAT_VERSION

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_DTYPES = {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}


def expected_shard_path(space: str, manifest_name: str) -> str:
    """The one shard path a manifest named `<shard id>.json` of space `space` may name:
    `shards/<space[:24]>/<shard id>.safetensors`."""
    return f"shards/{space[:24]}/{manifest_name.removesuffix('.json')}.safetensors"


def is_store_file(rel: str) -> bool:
    """Whether `rel` (a path relative to the store) is a shard (`shards/.../<name>.safetensors`) or a manifest
    (`index/<name>.json`): the only files `repair` ever moves. Anything else, `store.json`, `.lock`, `tmp/`,
    `quarantine/`, paths with `.` or `..` components, absolute paths, is refused."""
    if not isinstance(rel, str) or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return False
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    if parts[0] == "index":
        return len(parts) == 2 and parts[1].endswith(".json")
    return parts[0] == "shards" and len(parts) >= 3 and parts[-1].endswith(".safetensors")


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def path_problem(root: Path, rel: str, *, folder: bool = False) -> str | None:
    """Why the store's file (or, with `folder`, folder) `rel` must not be opened, or `None` when it is a regular
    file (folder) reached without any symbolic link. Checked with `lstat` on every component below `root`, so
    nothing is ever opened: a FIFO would block a read forever, a device would be read as data, and a link (the
    file itself or a folder on the way, e.g. a linked `shards/<space>/`) would lead reads and writes outside the
    store.

    Args:
        root (`Path`): the store's folder (itself may be a link: it is the user's choice).
        rel (`str`): a path relative to `root`, `/`-separated.
        folder (`bool`, defaults to `False`): expect a folder instead of a regular file.

    Returns:
        `str` or `None`: a phrase to follow the path's name, e.g. `"is a FIFO (named pipe), not a regular file"`.
    """
    parts = [part for part in rel.split("/") if part]
    path = Path(root)
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return "is missing" if i == len(parts) - 1 else f"is missing ({'/'.join(parts[:i + 1])} does not exist)"
        except OSError as error:
            return f"cannot be examined ({error.strerror or error})"
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            where = "is a symbolic link" if i == len(parts) - 1 else f"is inside {'/'.join(parts[:i + 1])}, a symbolic link"
            return f"{where} (to {printable(target)}): links are never followed, so nothing outside the store is read or written"
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            return f"is below {'/'.join(parts[:i + 1])}, which is {_kind(mode)}, not a folder"
    if folder and not stat.S_ISDIR(mode):
        return f"is {_kind(mode) if not stat.S_ISREG(mode) else 'a regular file'}, not a folder"
    if not folder and not stat.S_ISREG(mode):
        return f"is {_kind(mode)}, not a regular file: never opened"
    return None


def _fail(name: str, reason: str):
    raise CorruptedManifestError(f"manifest index/{printable(name)}: {reason}", f"index/{name}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_tensor_specs(tensors, where: str) -> None:
    """Check a document's `tensors` record: a non-empty dict of name -> {key (str), dtype (known), shape (list of
    ints >= 0)}.

    Raises:
        ValueError: naming `where` and what is wrong.
    """
    if not isinstance(tensors, dict) or not tensors:
        raise ValueError(f"{where}: `tensors` must be a non-empty object, got {type(tensors).__name__}")
    for tensor_name, spec in tensors.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("key"), str) or spec.get("dtype") not in _DTYPES:
            raise ValueError(f"{where}: tensor {printable(tensor_name)!r} needs a str `key` and a known `dtype`")
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise ValueError(f"{where}: tensor {printable(tensor_name)!r} has shape {printable(shape)!r}, not a list of "
                             "ints >= 0")


def check_manifest(manifest, name: str) -> dict:
    """Validate a manifest read from `index/<name>` against its schema (format version 1): an object with `space`
    (64 hex), `fingerprint` (non-empty str), `settings` (object; `space` must be their space key), `model_type` (str
    or null), `model_name` (str or null, optional: absent in stores of earlier releases), `dtype`, `file_size` (int
    >= 0), `file_sha256` (64 hex), `shard` (exactly `shards/<space[:24]>/<shard id>.safetensors`: never a path
    outside the store) and `documents` (object: 64-hex content hash -> {tensors, sha256 (64 hex), xxh3_128 (32 hex, optional: absent in stores of earlier releases), meta (object,
    optional)}).

    Returns:
        `dict`: the manifest.

    Raises:
        CorruptedManifestError: (a `ValueError`) naming the manifest and the first thing wrong.
    """
    if not isinstance(manifest, dict):
        _fail(name, f"a JSON {type(manifest).__name__}, not an object")
    if manifest.get("format_version") != FORMAT_VERSION or isinstance(manifest.get("format_version"), bool):
        _fail(name, f"format_version {printable(repr(manifest.get('format_version')))}, expected {FORMAT_VERSION}")
    space, fingerprint, settings = manifest.get("space"), manifest.get("fingerprint"), manifest.get("settings")
    if not isinstance(space, str) or not _HEX64.fullmatch(space):
        _fail(name, "`space` is not a 64-character hex key")
    if not isinstance(fingerprint, str) or not fingerprint or not isinstance(settings, dict):
        _fail(name, "`fingerprint` must be a non-empty str and `settings` an object")
    try:
        if space_key(fingerprint, settings) != space:
            _fail(name, "`space` does not match its fingerprint and settings")
    except (TypeError, ValueError) as error:
        if isinstance(error, CorruptedManifestError):
            raise
        _fail(name, f"bad settings ({printable(error)})")
    if manifest.get("model_type") is not None and not isinstance(manifest.get("model_type"), str):
        _fail(name, "`model_type` must be a str or null")
    if manifest.get("model_name") is not None and not isinstance(manifest.get("model_name"), str):
        _fail(name, "`model_name` must be a str or null")
    if manifest.get("dtype") not in _DTYPES:
        _fail(name, f"unknown dtype {printable(repr(manifest.get('dtype')))}")
    if not _is_int(manifest.get("file_size")) or manifest["file_size"] < 0:
        _fail(name, "`file_size` must be an int >= 0")
    if not isinstance(manifest.get("file_sha256"), str) or not _HEX64.fullmatch(manifest["file_sha256"]):
        _fail(name, "`file_sha256` is not a 64-character hex digest")
    shard = manifest.get("shard")
    if not isinstance(shard, str):
        _fail(name, "`shard` is missing or not a str")
    if shard != expected_shard_path(space, name):
        where = ("outside the store's shards/ folder" if (".." in shard.split("/") or shard.startswith("/")
                 or not shard.startswith("shards/") or Path(shard).is_absolute()) else "not this manifest's shard")
        _fail(name, f"shard path {printable(shard)!r} is {where} (expected {expected_shard_path(space, name)}; a "
                    "path outside the store is never followed)")
    documents = manifest.get("documents")
    if not isinstance(documents, dict):
        _fail(name, f"`documents` is a JSON {type(documents).__name__}, not an object")
    for doc_hash, doc in documents.items():
        where = f"document {printable(doc_hash)[:70]}"
        if not _HEX64.fullmatch(doc_hash):
            _fail(name, f"{where}: key is not a 64-character hex content hash")
        if not isinstance(doc, dict):
            _fail(name, f"{where}: a JSON {type(doc).__name__}, not an object")
        if not isinstance(doc.get("sha256"), str) or not _HEX64.fullmatch(doc["sha256"]):
            _fail(name, f"{where}: `sha256` is missing or not a 64-character hex digest")
        if "xxh3_128" in doc and (not isinstance(doc["xxh3_128"], str) or not _HEX32.fullmatch(doc["xxh3_128"])):
            _fail(name, f"{where}: `xxh3_128` is not a 32-character hex digest")
        if doc.get("meta") is not None and not isinstance(doc.get("meta"), dict):
            _fail(name, f"{where}: `meta` must be an object")
        try:
            check_tensor_specs(doc.get("tensors"), where)
        except ValueError as error:
            _fail(name, str(error))
    return manifest


def strict_json_problem(data: bytes) -> str | None:
    """Why the bytes of a manifest that Python's JSON reader parses are still not one unambiguous JSON object: a key
    given twice in one object (the reader keeps the last value, another reader may keep the first, and a hand edit
    may have meant either) or a `NaN` / `Infinity` (not JSON). The store never writes either; `verify` names such a
    manifest and `repair` rebuilds it from its shard's header.

    Args:
        data (`bytes`): the manifest file's bytes.

    Returns:
        `str` or `None`: the first such problem as a phrase (e.g. "the key 'documents' is given twice in one
        object"), `None` when there is none or when the bytes are not JSON at all (the index reader names those).
    """
    found = []

    def pairs(items):
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys) and not found:
            twice = next(key for i, key in enumerate(keys) if key in keys[:i])
            found.append(f"the key {printable(twice)[:70]!r} is given twice in one object")
        return dict(items)

    def constant(name):
        found.append(f"it holds {name}, which JSON does not have")

    try:
        json.loads(data.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError):
        return None
    return found[0] if found else None


def read_shard_header(metadata: Mapping[str, str] | None, tensor_specs: Mapping[str, dict], shard: str):
    """Rebuild what a shard's manifest said from the shard itself: its safetensors metadata (format, space,
    fingerprint, settings, dtype, model type, model name if recorded, and per document in commit order its content
    hash, sha256 and meta) and its tensors (`"<i>/<name>"` -> dtype and shape; `i` is the document's position).

    Args:
        metadata (`dict[str, str]`): `safe_open(...).metadata()`.
        tensor_specs (`dict[str, dict]`): per tensor key, `{"dtype": str, "shape": list[int]}`.
        shard (`str`): the shard's path relative to the store (recorded in the entries).

    Returns:
        `(RepresentationSpace, str, list[DocumentEntry])`: the space, the storage dtype and the documents.

    Raises:
        ValueError: a header that is not a hf-readonce shard's, or that disagrees with its tensors.
    """
    if not isinstance(metadata, Mapping) or metadata.get("format") != FORMAT_NAME:
        raise ValueError("not a hf-readonce shard (no store metadata in its header)")
    if metadata.get("format_version") != str(FORMAT_VERSION):
        raise ValueError(f"shard format_version {printable(metadata.get('format_version'))!r}")
    try:
        settings = json.loads(metadata["settings"])
        documents = json.loads(metadata["documents"])
        fingerprint, space = metadata["fingerprint"], metadata["space"]
    except (KeyError, ValueError, TypeError, RecursionError) as error:
        raise ValueError(f"unreadable shard metadata ({printable(error)})") from None
    if not isinstance(settings, dict) or not isinstance(documents, dict) or not isinstance(fingerprint, str) or \
            not fingerprint or space_key(fingerprint, settings) != space:
        raise ValueError("shard metadata: space, fingerprint and settings disagree")
    dtype = metadata.get("dtype")
    if dtype not in _DTYPES:
        raise ValueError(f"shard metadata: unknown dtype {printable(dtype)!r}")
    model_type = metadata.get("model_type") or None
    model_name = metadata.get("model_name") or None  # (absent in shards of earlier releases)
    per_doc: dict[int, dict] = {}
    for key, spec in tensor_specs.items():
        index, _, tensor_name = key.partition("/")
        if not index.isdigit() or not tensor_name:
            raise ValueError(f"shard tensor {printable(key)!r} is not named <document index>/<name>")
        per_doc.setdefault(int(index), {})[tensor_name] = {"key": key, **spec}
    if sorted(per_doc) != list(range(len(documents))):
        raise ValueError(f"shard holds tensors of {len(per_doc)} document(s), its header lists {len(documents)}")
    entries = []
    for i, (doc_hash, doc) in enumerate(documents.items()):
        if not _HEX64.fullmatch(doc_hash) or not isinstance(doc, dict) or not isinstance(doc.get("sha256"), str):
            raise ValueError(f"shard header: bad record for document {i}")
        read_checksum = doc.get("xxh3_128", "")
        if read_checksum and not (isinstance(read_checksum, str) and _HEX32.fullmatch(read_checksum)):
            raise ValueError(f"shard header: bad `xxh3_128` for document {i}")
        meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
        entries.append(DocumentEntry(space, doc_hash, shard, per_doc[i], doc["sha256"], meta, read_checksum))
    return RepresentationSpace(space, fingerprint, settings, model_type, model_name), dtype, entries


def manifest_header_differences(manifest: Mapping, space: RepresentationSpace, dtype: str,
                                entries: list[DocumentEntry]) -> tuple[list[str], set[str]]:
    """Every field of a manifest that disagrees with its shard's own header (see [`read_shard_header`]): `space`,
    `fingerprint`, `settings`, `dtype`, `model_type`, `model_name`, the documents listed, and per document its tensors (names,
    keys, dtypes, shapes), checksums and `meta`. A manifest whose whole-file checksum agrees with its shard is
    checked this way, so index damage that keeps the JSON valid (a flipped shape digit, a swapped tensor key, an
    emptied document list) is found by `verify` instead of failing every later read.

    Args:
        manifest (`Mapping`): a manifest that passed [`check_manifest`].
        space, dtype, entries: what [`read_shard_header`] returned for its shard.

    Returns:
        `(list[str], set[str])`: one line per disagreeing field, naming it (at most 12, then a count), and the
        content hashes of the documents concerned.
    """
    problems, concerned = [], set()
    for name, wanted, found in (("space", space.key, manifest.get("space")),
                                ("fingerprint", space.fingerprint, manifest.get("fingerprint")),
                                ("settings", json.dumps(space.settings, sort_keys=True),
                                 json.dumps(manifest.get("settings"), sort_keys=True)),
                                ("dtype", dtype, manifest.get("dtype")),
                                ("model_type", space.model_type or None, manifest.get("model_type") or None),
                                ("model_name", space.model_name or None, manifest.get("model_name") or None)):
        if name == "model_type" and wanted is None:
            continue  # informative only, and not in the headers of stores written by 0.1.0
        if name == "model_name" and found is None:
            continue  # absent from a manifest an earlier release rewrote (a header without one has none to lose)
        if wanted != found:
            said = "records none" if wanted is None else f"says {printable(wanted)!r}"
            problems.append(f"`{name}` is {printable(found)!r}, the shard's header {said}")
    documents = manifest.get("documents") or {}
    header = {entry.content_hash: entry for entry in entries}
    unlisted = [h for h in header if h not in documents]
    foreign = [h for h in documents if h not in header]
    if unlisted:
        problems.append(f"`documents` lacks {len(unlisted)} of the shard's {len(header)} document(s) "
                        f"({', '.join(header[h].name for h in unlisted[:5])})")
        concerned.update(unlisted)
    if foreign:
        problems.append(f"`documents` lists {len(foreign)} document(s) the shard does not hold "
                        f"({', '.join(printable(h)[:16] for h in foreign[:5])})")
        concerned.update(foreign)
    for doc_hash, doc in documents.items():
        entry = header.get(doc_hash)
        if entry is None:
            continue
        where = f"`documents[{doc_hash[:16]}]`"
        before = len(problems)
        recorded = doc.get("tensors") or {}
        if set(recorded) != set(entry.tensors):
            problems.append(f"{where} names tensors {sorted(map(printable, recorded))}, the shard holds "
                            f"{sorted(entry.tensors)}")
        for tensor_name in sorted(set(recorded) & set(entry.tensors)):
            for field_name in ("key", "dtype", "shape"):
                if recorded[tensor_name].get(field_name) != entry.tensors[tensor_name].get(field_name):
                    problems.append(f"{where}.tensors.{printable(tensor_name)}.{field_name} is "
                                    f"{printable(recorded[tensor_name].get(field_name))!r}, the shard's header says "
                                    f"{printable(entry.tensors[tensor_name].get(field_name))!r}")
        if doc.get("sha256") != entry.sha256:
            problems.append(f"{where}.sha256 disagrees with the shard's header")
        if doc.get("xxh3_128") and entry.xxh3_128 and doc["xxh3_128"] != entry.xxh3_128:
            problems.append(f"{where}.xxh3_128 disagrees with the shard's header")
        elif entry.xxh3_128 and not doc.get("xxh3_128"):  # (a shard of an earlier release records none)
            problems.append(f"{where}.xxh3_128 is missing, the shard's header records one")
        if (doc.get("meta") or {}) != (entry.meta or {}):
            problems.append(f"{where}.meta disagrees with the shard's header")
        if len(problems) > before:
            concerned.add(doc_hash)
    if len(problems) > 12:
        problems = problems[:12] + [f"... and {len(problems) - 12} more"]
    return problems, concerned


__all__ = ["check_manifest", "check_tensor_specs", "expected_shard_path", "is_store_file",
           "manifest_header_differences", "path_problem", "printable", "read_shard_header", "strict_json_problem"]
