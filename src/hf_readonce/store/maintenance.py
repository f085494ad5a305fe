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
from .keys import DocumentEntry
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
        """One line naming the shard, the reason and the affected documents."""
        names = ", ".join(entry.name for entry in self.documents) or "-"
        return f"CORRUPTED {self.shard}: {self.reason}; documents: {names}"


@dataclass
class VerifyReport:
    """Result of [`RepresentationStore.verify`]: `ok` is True when nothing is corrupted.

    Attributes:
        shards_checked, documents_checked (`int`), corruptions (`list[Corruption]`), orphans (`list[str]`): shard
        files that no manifest references (left by a crash before commit; harmless, removed by `repair`).
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
    known = set(store._shards)
    shard_dir = store.path / "shards"
    if not shard_dir.is_dir():
        return []
    return sorted(str(p.relative_to(store.path)) for p in shard_dir.rglob("*.safetensors")
                  if str(p.relative_to(store.path)) not in known)

def verify_store(store, progress: bool = False) -> VerifyReport:
    """Check every shard: file checksum, then (when it differs or the file is unreadable) every document's
    checksum, so that each corrupted shard and document is named. Never modifies the store.

    Args:
        progress (`bool`, defaults to `False`): show a tqdm bar over shards.

    Returns:
        [`VerifyReport`].
    """
    from tqdm.auto import tqdm

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
    report.orphans = orphan_shards(store)
    return report

def _check_shard(store, shard: str, manifest: dict, entries: list[DocumentEntry]) -> Corruption | None:
    path = store.path / shard
    if not path.is_file():
        return Corruption(shard, "shard file is missing", entries)
    size = path.stat().st_size
    if size == manifest.get("file_size") and _file_sha256(path) == manifest.get("file_sha256"):
        return None
    reason = "file checksum mismatch" if size == manifest.get("file_size") else (
        f"file size {size} bytes, expected {manifest.get('file_size')} (truncated or extended)")
    store._handles.pop(shard, None)
    bad = []
    for entry in entries:
        try:
            store._read(entry, verify=True)
        except CorruptedShardError:
            bad.append(entry)
    store._handles.pop(shard, None)
    if not bad:  # the data of every document is intact: the header/metadata bytes changed
        reason += " (header or metadata bytes; tensor data intact)"
        bad = entries
    return Corruption(shard, reason, bad)

def repair_store(store, report: VerifyReport | None = None) -> dict:
    """Make the store consistent again after `verify` found problems; nothing is deleted, only moved.

    For each corrupted shard, the documents whose checksums still pass are copied into a new shard; the
    corrupted shard and its manifest are then moved to `quarantine/`. The lost documents are simply no longer
    stored, so the next `encode` of the same documents recomputes exactly them (`hf-readonce encode --repair`
    does both). Unreadable manifests and orphan shard files are quarantined too; stale temporary files are
    deleted.

    Args:
        report ([`VerifyReport`], *optional*): from [`verify`]; computed when omitted.

    Returns:
        `dict` with `salvaged` and `dropped` (content hashes) and `quarantined` (paths moved).

    Raises:
        ReadOnlyStoreError: if the store cannot be written.
    """
    store.check_writable()
    with store.lock():
        report = report if report is not None else verify_store(store)
        quarantine = store.path / "quarantine" / time.strftime("%Y%m%d-%H%M%S")
        salvaged, dropped, moved = [], [], []

        def retire(rel: str) -> None:
            source = store.path / rel
            if source.exists():
                target = quarantine / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
                moved.append(rel)

        for corruption in report.corruptions:
            if corruption.shard.startswith("index/"):
                retire(corruption.shard)
                store._bad_manifests.pop(corruption.shard.removeprefix("index/"), None)
                continue
            manifest = store._shards.get(corruption.shard)
            if manifest is None:
                continue
            bad = {e.content_hash for e in corruption.documents}
            space = store._spaces[manifest["space"]]
            keep = []
            for doc_hash in manifest["documents"]:
                entry = store._entries.get((space.key, doc_hash))
                if entry is None or entry.shard != corruption.shard:
                    continue
                if doc_hash in bad:
                    dropped.append(doc_hash)
                    continue
                try:
                    keep.append((doc_hash, store._read(entry, verify=True), dict(entry.meta)))
                except CorruptedShardError:
                    dropped.append(doc_hash)
            shard_id = Path(corruption.shard).stem
            store._forget_shard(corruption.shard)
            if keep:
                dtype = resolve_dtype(manifest.get("dtype") or "float32")
                salvaged += store.commit_shard(space, dtype, keep)
            retire(f"index/{shard_id}.json")
            retire(corruption.shard)
        for orphan in orphan_shards(store):
            retire(orphan)
        tmp = store.path / "tmp"
        if tmp.is_dir():
            for stale in tmp.iterdir():
                with contextlib.suppress(OSError):
                    stale.unlink()
        for shard_dir in (store.path / "shards").iterdir():
            if shard_dir.is_dir() and not any(shard_dir.iterdir()):
                with contextlib.suppress(OSError):
                    shard_dir.rmdir()
        return {"salvaged": salvaged, "dropped": dropped, "quarantined": moved}


def bytes_per_1000_tokens(store, fingerprint: str, settings: Mapping,
                          tokens_tensor: str = "input_ids") -> float:
    """Shard bytes on disk per 1,000 stored tokens of one space (tokens counted as the first dimension of
    `tokens_tensor`). Returns NaN when nothing is stored."""
    shards = {e.shard for e in store.entries(fingerprint, settings)}
    tokens = sum(e.tensors[tokens_tensor]["shape"][0] for e in store.entries(fingerprint, settings)
                 if tokens_tensor in e.tensors)
    size = sum((store.path / s).stat().st_size for s in shards)
    return size / tokens * 1000 if tokens else math.nan


__all__ = ["Corruption", "VerifyReport", "bytes_per_1000_tokens", "orphan_shards", "repair_store", "store_info",
           "verify_store"]
