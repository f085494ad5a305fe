"""The store's exceptions. Each is also a builtin exception type (`ValueError`, `KeyError`, `PermissionError`), so
a caller may catch either the store's type or the builtin one."""

from __future__ import annotations

from collections.abc import Sequence


class StoreError(Exception):
    """Base class of the store's own errors."""


class RepresentationMismatchError(StoreError, ValueError):
    """A document is stored, but only for another model fingerprint or other settings than the ones asked for."""


class MissingRepresentationError(StoreError, KeyError):
    """A document is not stored at all (for any model)."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class CorruptedShardError(StoreError, ValueError):
    """A shard (or one document in it) failed its checksum, or could not be parsed.

    Attributes:
        shard (`str`): the shard's path relative to the store.
        documents (`list[str]`): content hashes of the affected documents.
    """

    def __init__(self, message: str, shard: str, documents: Sequence[str]):
        super().__init__(message)
        self.shard = shard
        self.documents = list(documents)


class CorruptedManifestError(StoreError, ValueError):
    """A manifest (`index/<shard id>.json`) that is not the object its schema describes: unreadable JSON, another
    JSON type, a missing or mistyped field, or a shard path outside `shards/`. Such a manifest is never followed;
    `verify` names it and `repair` quarantines it and rebuilds its shard's index entries from the shard's header.

    Attributes:
        manifest (`str`): the manifest's path relative to the store.
    """

    def __init__(self, message: str, manifest: str):
        super().__init__(message)
        self.manifest = manifest


class StoreNotFoundError(StoreError, ValueError):
    """No store exists at the path, and the store was opened with `create=False` or `readonly=True`; or a store's
    folder was moved or removed since it was opened, or a folder without `store.json` is at its path now (`verify`,
    `info`, a dry-run `prune`)."""


class ReadOnlyStoreError(StoreError, PermissionError):
    """A write was attempted on a store opened read-only or on a directory that cannot be written."""


__all__ = ["CorruptedManifestError", "CorruptedShardError", "MissingRepresentationError", "ReadOnlyStoreError", "RepresentationMismatchError",
           "StoreError", "StoreNotFoundError"]
