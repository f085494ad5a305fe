"""Maintenance of a [`RepresentationStore`]: `info` (summary), `verify` (every checksum; names each corrupted shard
and document) and `repair` (salvage intact documents, quarantine the rest; nothing is deleted). The store's
`info()`, `verify()` and `repair()` methods call these functions."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CorruptedShardError
from .keys import DocumentEntry, printable
from .manifest import is_store_file, read_shard_header
from .shards import FORMAT_VERSION, _file_sha256, resolve_dtype


@dataclass
class Corruption:
    """One problem found by [`RepresentationStore.verify`].

    Attributes:
        shard (`str`): shard (or manifest) path relative to the store. reason (`str`): what failed.
        documents (`list[DocumentEntry]`): the documents that cannot be trusted (all of the shard's when its header
        is unreadable), empty for an unreadable manifest.
    """

    shard: str
    reason: str
    documents: list = field(default_factory=list)

    def describe(self) -> str:
        """One line naming the shard, the reason and the affected documents (control characters escaped)."""
        names = ", ".join(entry.name for entry in self.documents) or "-"
        return f"CORRUPTED {printable(self.shard)}: {printable(self.reason)}; documents: {names}"


@dataclass
class VerifyReport:
    """Result of [`RepresentationStore.verify`]: `ok` is True when nothing is corrupted.

    Attributes:
        shards_checked, documents_checked (`int`), corruptions (`list[Corruption]`), orphans (`list[str]`): shard
        files that no manifest references (left by a crash before commit, or whose manifest was lost). An orphan
        holding documents the index lacks is also a corruption; `repair` re-indexes it and moves it away.
    """

    shards_checked: int = 0
    documents_checked: int = 0
    corruptions: list = field(default_factory=list)
    orphans: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.corruptions

    @property
    def corrupted_documents(self) -> list:
        return [entry for c in self.corruptions for entry in c.documents]


def store_info(store) -> dict:
    """Summary: documents, shards, bytes on disk, and per space its fingerprint, settings, model type, dtypes,
    documents and bytes; `duplicates` (entries shadowed by an identical key, harmless), `orphans` (shard files
    without a manifest) and `bad_manifests`."""
    store.refresh()
    per_space = {}
    for key, space in store._spaces.items():
        per_space[key] = {"fingerprint": space.fingerprint, "settings": space.settings,
                          "model_type": space.model_type, "documents": 0, "shards": 0, "bytes": 0, "dtypes": []}
    for manifest in store._shards.values():
        s = per_space[manifest["space"]]
        s["shards"] += 1
        s["bytes"] += int(manifest.get("file_size", 0))
        if manifest.get("dtype") not in s["dtypes"]:
            s["dtypes"].append(manifest.get("dtype"))
    for space, _ in store._entries:
        per_space[space]["documents"] += 1
    total = sum(p.stat().st_size for p in store.path.rglob("*") if p.is_file())
    return {"path": str(store.path), "format_version": FORMAT_VERSION, "documents": len(store._entries),
            "shards": len(store._shards), "bytes_on_disk": total, "spaces": per_space,
            "duplicates": store._duplicates, "orphans": orphan_shards(store),
            "bad_manifests": sorted(store._bad_manifests)}

def orphan_shards(store) -> list[str]:
    """Shard files (`shards/*/*.safetensors`, relative to the store) that no loaded manifest lists, sorted."""
    known = set(store._shards)
    shard_dir = store.path / "shards"
    if not shard_dir.is_dir():
        return []
    return sorted(str(p.relative_to(store.path)) for p in shard_dir.rglob("*.safetensors")
                  if str(p.relative_to(store.path)) not in known)


def _shard_files(store) -> list[str]:
    shard_dir = store.path / "shards"
    return sorted(str(p.relative_to(store.path)) for p in shard_dir.rglob("*.safetensors")) if shard_dir.is_dir() else []


def read_orphan(store, shard: str):
    """What an orphan shard holds, from its own header: `(space, dtype, entries)` (see
    [`hf_readonce.store.manifest.read_shard_header`]). Never follows a symbolic link.

    Raises:
        ValueError: the file is a link, is unreadable, or its header is not a hf-readonce shard's.
    """
    from safetensors import safe_open

    path = store.path / shard
    if not is_store_file(shard) or path.is_symlink() or not path.is_file():
        raise ValueError("not a regular shard file inside the store (links are never followed)")
    try:
        handle = safe_open(str(path), framework="pt")
        metadata = handle.metadata()
        specs = {}
        for key in handle.keys():
            sliced = handle.get_slice(key)
            specs[key] = {"dtype": _SAFETENSORS_DTYPES.get(sliced.get_dtype(), sliced.get_dtype()),
                          "shape": list(sliced.get_shape())}
    except Exception as error:  # safetensors' own error types for garbled files
        raise ValueError(f"unreadable header ({printable(error)})") from None
    return read_shard_header(metadata, specs, shard)


_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _unindexed(store, entries) -> list:
    return [e for e in entries if (e.space, e.content_hash) not in store._entries]


def verify_store(store, progress: bool = False) -> VerifyReport:
    """Check every shard: file checksum, then (when it differs or the file is unreadable) every document's
    checksum, so that each corrupted shard and document is named. Never modifies the store.

    Manifests that fail their schema (see [`hf_readonce.store.manifest.check_manifest`]; e.g. `null`, a list, a
    shard path outside the store) are corruptions named by their file. An orphan shard (no manifest lists it)
    whose header lists documents the index lacks is a corruption too (the index lost them; `repair` re-indexes
    them from the shard); an orphan whose documents are all stored elsewhere is harmless and only listed.

    Args:
        progress (`bool`, defaults to `False`): show a tqdm bar over shards.

    Returns:
        [`VerifyReport`].
    """
    from tqdm.auto import tqdm

    files = _shard_files(store)  # listed before the index is read: a shard committed meanwhile has its manifest
    store.refresh()
    report = VerifyReport()
    for name, reason in sorted(store._bad_manifests.items()):
        report.corruptions.append(Corruption(f"index/{name}", reason, []))
    for shard, manifest in tqdm(sorted(store._shards.items()), desc="verify", unit="shard", disable=not progress):
        report.shards_checked += 1
        entries = [store._entries[(manifest["space"], h)] for h in manifest["documents"]
                   if store._entries.get((manifest["space"], h)) is not None
                   and store._entries[(manifest["space"], h)].shard == shard]
        report.documents_checked += len(entries)
        corruption = _check_shard(store, shard, manifest, entries)
        if corruption is not None:
            report.corruptions.append(corruption)
    report.orphans = [f for f in files if f not in store._shards]
    for orphan in report.orphans:
        try:
            _, _, entries = read_orphan(store, orphan)
        except ValueError as error:
            report.corruptions.append(Corruption(orphan, f"orphan shard (no manifest lists it) with an {error}; "
                                                         "its documents, if any, are not in the index", []))
            continue
        lost = _unindexed(store, entries)
        if lost:
            report.corruptions.append(Corruption(
                orphan, f"orphan shard: no manifest lists it and {len(lost)} of its {len(entries)} document(s) are "
                        "stored nowhere else (index lost or damaged; `encode --repair` re-indexes them from the shard)",
                lost))
    return report


def _check_shard(store, shard: str, manifest: dict, entries: list[DocumentEntry]) -> Corruption | None:
    path = store.path / shard
    if path.is_symlink() or not path.is_file():
        return Corruption(shard, "shard file is missing" if not path.is_symlink() else "shard file is a link "
                          "(never followed)", entries)
    size = path.stat().st_size
    if size == manifest.get("file_size") and _file_sha256(path) == manifest.get("file_sha256"):
        # The file is intact, so its own header is the truth: a manifest whose per-document checksums disagree
        # with it would make reads fail (or, for an old manifest, pass) against the wrong record.
        try:
            _, _, recorded = read_orphan(store, shard)
        except ValueError:
            return None  # a header that does not parse while the whole-file checksum matches: left to reads
        recorded = {e.content_hash: e for e in recorded}
        # (a manifest without `xxh3_128`, as earlier releases wrote, is not a disagreement)
        wrong = [e for e in entries if e.content_hash in recorded and (
            recorded[e.content_hash].sha256 != e.sha256
            or (e.xxh3_128 and recorded[e.content_hash].xxh3_128 != e.xxh3_128))]
        if wrong:
            return Corruption(f"index/{Path(shard).stem}.json", f"manifest's document checksums disagree with the "
                              f"intact shard {printable(shard)}'s header (index damaged; `encode --repair` "
                              "re-indexes the shard from its header)", wrong)
        return None
    reason = "file checksum mismatch" if size == manifest.get("file_size") else (
        f"file size {size} bytes, expected {manifest.get('file_size')} (truncated or extended)")
    store._handles.pop(shard, None)
    bad = []
    for entry in entries:
        try:
            store._read(entry, verify="strong")
        except CorruptedShardError:
            bad.append(entry)
    store._handles.pop(shard, None)
    if not bad:  # the data of every document is intact: the header/metadata bytes changed
        reason += " (header or metadata bytes; tensor data intact)"
        bad = entries
    return Corruption(shard, reason, bad)


def _retire(store, rel: str, quarantine: Path, moved: list) -> None:
    """Move one shard or manifest into `quarantine/` (never deleted). Refuses anything but a shard
    (`shards/<dir>/<id>.safetensors`) or a manifest (`index/<id>.json`) of this store: never `store.json`, `.lock`,
    nor a file outside the store (those are skipped). A link is moved as a link, never followed."""
    source = store.path / rel
    root = store.path.resolve()
    if not is_store_file(rel) or not (source.exists() or source.is_symlink()):
        return
    parent = source.parent.resolve()
    if parent != root / "index" and not parent.is_relative_to(root / "shards"):
        return  # a folder linked to somewhere outside the store: never followed
    target = quarantine / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    moved.append(rel)


def repair_store(store, report: VerifyReport | None = None) -> dict:
    """Make the store consistent again after `verify` found problems; nothing is deleted, only moved, and nothing
    outside the store's shards and manifests is ever touched.

    Everything runs under the store's write lock, and the index is re-read under it, so a shard another process
    committed after `report` was made is never mistaken for an orphan (`report` is then only a hint: without it,
    `verify` runs under the same lock).

    - A corrupted shard: the documents whose checksums still pass (and that no other manifest lists) are copied
      into a new shard first; then its manifest and the shard are moved to `quarantine/`.
    - A corrupted manifest (bad JSON or schema, a path outside the store): moved to `quarantine/`; its shard is then
      an orphan, handled below.
    - An orphan shard (no manifest lists it: a lost manifest, a kill before a commit or during a repair): its header
      describes its documents; those the index lacks and whose checksums pass are re-indexed (copied into a new
      shard), the rest counted as dropped, and the orphan is moved to `quarantine/`.

    Each step leaves the store consistent, so a repair killed at any point is finished by the next one, without
    losing an intact document or storing one twice. The lost documents are simply no longer stored, so the next
    `encode` of the same documents recomputes exactly them (`hf-readonce encode --repair` does both). Stale
    temporary files are deleted.

    Args:
        report ([`VerifyReport`], *optional*): from [`verify`]; computed under the lock when omitted.

    Returns:
        `dict` with `salvaged` and `dropped` (content hashes), `quarantined` (paths moved) and `report` (the
        [`VerifyReport`] acted on).

    Raises:
        ReadOnlyStoreError: if the store cannot be written.
    """
    store.check_writable()
    with store.lock():
        store.refresh()
        report = verify_store(store) if report is None else report
        quarantine = store.path / "quarantine" / time.strftime("%Y%m%d-%H%M%S")
        salvaged, dropped, moved = [], [], []

        for corruption in report.corruptions:
            if corruption.shard.startswith("index/"):
                _retire(store, corruption.shard, quarantine, moved)
                continue
            manifest = store._shards.get(corruption.shard)
            if manifest is None:
                continue  # an orphan: handled below, from the index as it is now
            bad = {e.content_hash for e in corruption.documents}
            space = store._spaces[manifest["space"]]
            elsewhere = {h for shard, other in store._shards.items() if shard != corruption.shard
                         and other["space"] == space.key for h in other["documents"]}
            keep = []
            for doc_hash, doc in manifest["documents"].items():
                if doc_hash in elsewhere:
                    continue  # stored in another shard (e.g. by a repair killed before it retired this one)
                if doc_hash in bad:
                    dropped.append(doc_hash)
                    continue
                entry = DocumentEntry(space.key, doc_hash, corruption.shard, doc["tensors"], doc["sha256"],
                                      doc.get("meta") or {}, doc.get("xxh3_128", ""))
                try:
                    keep.append((doc_hash, store._read(entry, verify="strong"), dict(entry.meta)))
                except CorruptedShardError:
                    dropped.append(doc_hash)
            store._forget_shard(corruption.shard)
            if keep:
                salvaged += store.commit_shard(space, resolve_dtype(manifest["dtype"]), keep)
            _retire(store, f"index/{Path(corruption.shard).stem}.json", quarantine, moved)
            _retire(store, corruption.shard, quarantine, moved)

        store._reset_index()
        store.refresh()
        for orphan in orphan_shards(store):
            try:
                space, dtype, entries = read_orphan(store, orphan)
            except ValueError:
                _retire(store, orphan, quarantine, moved)
                continue
            keep = []
            for entry in _unindexed(store, entries):
                try:
                    keep.append((entry.content_hash, store._read(entry, verify=True), dict(entry.meta)))
                except CorruptedShardError:
                    dropped.append(entry.content_hash)
            store._handles.pop(orphan, None)
            if keep:
                salvaged += store.commit_shard(space, resolve_dtype(dtype), keep)
            _retire(store, orphan, quarantine, moved)
        tmp = store.path / "tmp"
        if tmp.is_dir():
            for stale in tmp.iterdir():
                with contextlib.suppress(OSError):
                    stale.unlink()
        for shard_dir in (store.path / "shards").iterdir():
            if shard_dir.is_dir() and not shard_dir.is_symlink() and not any(shard_dir.iterdir()):
                with contextlib.suppress(OSError):
                    shard_dir.rmdir()
        store._reset_index()
        store.refresh()
        return {"salvaged": salvaged, "dropped": sorted(set(dropped)), "quarantined": moved, "report": report}


def bytes_per_1000_tokens(store, fingerprint: str, settings: Mapping,
                          tokens_tensor: str = "input_ids") -> float:
    """Shard bytes on disk per 1,000 stored tokens of one space (tokens counted as the first dimension of
    `tokens_tensor`). Returns NaN when nothing is stored."""
    shards = {e.shard for e in store.entries(fingerprint, settings)}
    tokens = sum(e.tensors[tokens_tensor]["shape"][0] for e in store.entries(fingerprint, settings)
                 if tokens_tensor in e.tensors)
    size = sum((store.path / s).stat().st_size for s in shards)
    return size / tokens * 1000 if tokens else math.nan


__all__ = ["Corruption", "VerifyReport", "bytes_per_1000_tokens", "orphan_shards", "read_orphan", "repair_store",
           "store_info", "verify_store"]
