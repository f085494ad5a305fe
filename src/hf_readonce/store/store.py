"""Persistent, model-independent store of precomputed document representations.

Layout of a store directory (every file is written to a temporary name, fsync'ed, then renamed into place, so a
reader or a crash never sees half a file):

```
STORE/
  store.json                      # {"format": "hf-readonce-representation-store", "format_version": 1}
  .lock                           # filelock, held while a writer commits a shard or `repair` / `prune` runs
                                  # (`verify` / `info` wait for it, read-only, where a shard is listed by no manifest)
  shards/<space>/<shard>.safetensors   # the tensors of many documents (safetensors: no code is ever loaded)
  index/<shard>.json              # manifest of one shard: the commit point; the index is the union of manifests
  quarantine/<time>/...           # shards and manifests retired by `repair` (never deleted)
  tmp/                            # temporary files (.tmp-<hex><suffix>; on Linux .tmp-<hex>-p<pid>-<scope><suffix>,
                                  # naming the writer's process) of writes in progress and of the writability
                                  # probe (.tmp-<hex>.probe, made and removed without the lock)
```

A *representation space* is one (model fingerprint, settings) pair; its key is the SHA-256 of both (canonical
JSON). A document is keyed by the SHA-256 of its UTF-8 text. A stored representation is therefore keyed by
`(space key, content hash)`: the same text under another model or other settings is another entry, and asking for
a document that is only stored for another model raises [`RepresentationMismatchError`] naming both.

Every file is created with mode 0o666 less the process's umask (directories 0o777 less it), as `open()` and `mkdir`
create them: under the usual umask 022 a store written by one user or service account is readable by every other.
Nothing in a store is ever opened unless it is a regular file (or folder) reached without a symbolic link: a FIFO,
a device or a link (also a linked `shards/<space>/`, `index/` or `tmp/`) is named by `verify` and moved to
`quarantine/` by `repair`, its target untouched.

Each document carries two checksums of its tensors (names, dtypes, shapes and bytes), SHA-256 and xxh3-128, and each
shard the SHA-256 of the whole file; reads check the document's xxh3-128 (unless `verify_reads=False`; documents
written by earlier releases have only the SHA-256, which their reads check), `verify` checks everything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shlex
import signal
import stat
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from safetensors import safe_open
from safetensors.torch import save as safetensors_save

from .errors import (
    CorruptedManifestError,
    CorruptedShardError,
    MissingRepresentationError,
    ReadOnlyStoreError,
    RepresentationMismatchError,
    StoreNotFoundError,
)
from .keys import (
    DocumentEntry,
    RepresentationKey,
    RepresentationSpace,
    _check_fingerprint,
    canonical_settings,
    check_bool,
    check_document_hash,
    check_document_hashes,
    printable,
    space_key,
)
from .maintenance import VerifyReport, _wait_for_commits, prune_store, repair_store, store_info, verify_store
from .manifest import check_manifest, expected_shard_path, is_store_file, path_problem, strict_json_problem
from .shards import (
    _LAYOUT,
    _STORABLE,
    DEFAULT_SHARD_SIZE_BYTES,
    FORMAT_NAME,
    FORMAT_VERSION,
    _atomic_write,
    _being_created,
    _checksums_match,
    _dtype_name,
    _file_sha256,
    _make_temp,
    _no_store_reason,
    _some_entries,
    read_store_marker,
    resolve_dtype,
    tensors_checksum,
    tensors_read_checksum,
)

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _interrupts_held():
    """Hold SIGINT and SIGTERM until the block ends, then deliver them to the handlers that were in place (Ctrl-C's
    `KeyboardInterrupt`, the CLI's SIGTERM-as-interrupt, or the default action). Used around writing a shard and its
    manifest, so an interrupt never leaves a shard without its manifest (an orphan `verify` reports). Only in the
    main thread of the main interpreter, where Python runs signal handlers; elsewhere the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held, previous = [], {}
    for signum in (signal.SIGINT, getattr(signal, "SIGTERM", None)):
        if signum is None:
            continue
        try:
            previous[signum] = signal.signal(signum, lambda number, frame: held.append((number, frame)))
        except (ValueError, OSError):  # not settable here
            continue
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: not set from Python
        for signum, frame in dict(held).items():  # each signal once, in the order received
            handler = previous.get(signum)
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)

def _holds_lock_file(lock: FileLock, path: Path) -> bool:
    """Whether the lock file `lock` holds (the file its open descriptor locks) is the file at `path` now. False when
    the store's folder was renamed away or removed between `lock` opening its file and locking it (by
    [`hf_readonce.store.maintenance.remove_empty_store`], which holds the lock while it renames the folder): that
    lock guards no file of whatever store is at the path now. True where filelock keeps no descriptor this can read
    (then nothing is known against it)."""
    fd = _lock_descriptor(lock)
    if fd is None:
        return True
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def _lock_descriptor(lock: FileLock) -> int | None:
    """The open descriptor of the lock file `lock` holds (filelock's `_context.lock_file_fd`), or `None` where
    filelock keeps none this can read (a soft lock)."""
    context = getattr(lock, "_context", None)
    fd = getattr(context, "lock_file_fd", getattr(lock, "_lock_file_fd", None))
    return fd if isinstance(fd, int) and not isinstance(fd, bool) else None


class _FolderLook:
    """One look at the store folder `path` that a later look compares with ([`_FolderLook.replaced`]): the folder is
    held open (`O_PATH` where there is one), so that its inode cannot be taken by a folder made at the path after it
    was removed (`rm -r`), and the folder at the path then is known to be another one; where it cannot be opened, its
    device and inode are kept instead. `found` says whether anything was at the path. Use as a context manager (the
    descriptor is closed on leaving)."""

    def __init__(self, path: Path):
        self.path, self._fd, self._id = path, None, None
        self.found = os.path.lexists(path)
        try:
            self._fd = os.open(path, getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            with contextlib.suppress(OSError):
                found = os.stat(path)
                self._id = (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None

    def replaced(self) -> bool:
        """Whether a folder is at the path now that is not the one looked at (none was there, or another one)."""
        try:
            now = os.stat(self.path)
        except OSError:
            return False
        if not stat.S_ISDIR(now.st_mode):
            return False
        if self._fd is not None:
            return not os.path.samestat(os.fstat(self._fd), now)
        return self._id != (now.st_dev, now.st_ino)

    def __enter__(self) -> _FolderLook:
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _remove_lock_file_made(lock: FileLock, path: Path, made: tuple[bool, bool]) -> None:
    """Remove what taking the store's write lock `lock` made at the store folder `path`, where the caller writes
    nothing under it (no store is at the path). `made` says what taking it made, as [`_FolderLook`]s just before and
    just after it found: whether the folder at the path was made meanwhile where nothing was there before (filelock
    makes the lock file's folder: a store moved or removed by hand since the caller's check would leave its old path
    holding only `.lock`), and whether `.lock` was (it was not there before, or the folder is another one now). The
    `.lock` is removed when it was made so, provided it is the very file the lock holds, a regular file and empty;
    then a folder made meanwhile is removed if it is empty. A folder that replaced the one looked at (a store moved
    away and a folder made at its path, `mv` then `mkdir`, while the lock was waited for) is never removed: it may be
    the user's. Called while the lock is held; nothing else is ever removed (`rmdir` of a folder holding anything
    fails, and it is left so)."""
    folder_made, lock_made = made
    if not (folder_made or lock_made):
        return
    fd = _lock_descriptor(lock)
    lock_file = path / ".lock"
    try:
        here = os.lstat(lock_file)
        if fd is None or not stat.S_ISREG(here.st_mode) or here.st_size or not os.path.samestat(os.fstat(fd), here):
            return
        os.unlink(lock_file)
    except OSError:
        return
    if folder_made:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _folder_state(path: Path) -> tuple | None:
    """What one look at the store folder `path` finds, to tell whether it was renamed away or made anew between two
    looks ([`hf_readonce.store.maintenance.remove_empty_store`] renames it away, a creating process makes a new one):
    the folder's device, inode, modification and change times, and whether `store.json` is in it; `None` when
    nothing is at the path."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_mtime_ns, found.st_ctime_ns, os.path.lexists(path / "store.json")


def _holds_stored_data(path: Path) -> bool:
    """Whether the store folder `path` holds what no empty store's skeleton holds, though its index lists nothing: a
    file or link anywhere under `shards/` (a shard whose manifest was lost), an `index/` or `shards/` that is not a
    folder, or a `quarantine/` (an earlier repair's). Such a store is never what
    [`hf_readonce.store.maintenance.remove_empty_store`] removes, so its folder gone means it was removed or moved by
    hand: it is not created anew ([`RepresentationStore._recreate_if_removed`]). False when nothing is at the path;
    True when a folder of it cannot be listed (it may hold a shard)."""
    if os.path.lexists(path / "quarantine"):
        return True
    for sub in ("index", "shards"):
        problem = path_problem(path, sub, folder=True)
        if problem is not None and problem != "is missing":
            return True

    def unlisted(error: OSError) -> None:
        if not isinstance(error, (FileNotFoundError, NotADirectoryError)):
            raise error

    try:
        for root, folders, files in os.walk(path / "shards", onerror=unlisted):
            if files or any(os.path.islink(os.path.join(root, name)) for name in folders):
                return True
    except OSError:
        return True
    return False


def _probe(folder: Path) -> None:
    """Make and remove a temporary file in `folder` ([`_make_temp`], suffix `.probe`): the writability probe of
    [`RepresentationStore.check_writable`], made without the write lock. Both go through one descriptor of the folder
    (where the platform has `openat`/`unlinkat`), so the probe is removed also when the store's folder is renamed
    away in between ([`hf_readonce.store.maintenance.remove_empty_store`]): a probe left in it, a file of a process
    still running, would keep that empty store from being removed (kept hidden, with a warning). Without those calls
    (Windows), or where the folder cannot be opened for one (no `O_PATH`, as on macOS, and a folder that can be
    written but not listed), the probe is made and removed by its path.

    Raises:
        OSError: the folder cannot be written (as `os.open` raises it).
    """
    descriptor = None
    if os.open in os.supports_dir_fd and os.unlink in os.supports_dir_fd:
        # O_PATH where there is one: a folder that can be written but not listed (-wx) is probed as well
        with contextlib.suppress(PermissionError):  # without O_PATH, such a folder cannot be opened: by its path
            descriptor = os.open(folder, getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0))
    if descriptor is None:
        fd, probe = _make_temp(folder, ".probe")
        os.close(fd)
        os.unlink(probe)
        return
    try:
        fd, probe = _make_temp(folder, ".probe", dir_fd=descriptor)
        os.close(fd)
        os.unlink(os.path.basename(probe), dir_fd=descriptor)
    finally:
        os.close(descriptor)


# every store and writer of this process, for the `fork` hooks below (weakly: they do not keep one alive), under
# `_FORK_GUARD`, which a fork holds from before to after it (so that two threads forking at once take turns)
_FORKED_LOCKS: weakref.WeakSet = weakref.WeakSet()
_FORK_GUARD = threading.Lock()
_FORK_TAKEN: list = []  # what `_before_fork` took for the fork under way


def _register_for_fork(item) -> None:
    """Have the `fork` hooks give `item` (a store or writer) new locks in a child process."""
    with _FORK_GUARD:
        _FORKED_LOCKS.add(item)


def _before_fork() -> None:
    """Before `os.fork` (a `multiprocessing` or DataLoader worker started by fork): take, without waiting, the lock of
    every store and writer of this process, so that the child gets an index no thread was changing; one whose lock
    another thread holds (a refresh, a repair, a commit) is not waited for: a store's index is read anew by the child
    ([`RepresentationStore._after_fork`])."""
    _FORK_GUARD.acquire()
    _FORK_TAKEN[:] = [item for item in list(_FORKED_LOCKS) if item._fork_lock().acquire(blocking=False)]


def _after_fork_in_parent() -> None:
    """Release what [`_before_fork`] took."""
    for item in _FORK_TAKEN:
        item._fork_lock().release()
    _FORK_TAKEN.clear()
    _FORK_GUARD.release()


def _after_fork_in_child() -> None:
    """In the child of `os.fork`: new locks for every store and writer inherited from the parent (a lock held by
    another thread of the parent at the fork would stay held here for good: that thread does not exist in the
    child; filelock refuses a write lock inherited across fork)."""
    global _FORK_GUARD
    taken = {id(item) for item in _FORK_TAKEN}
    for item in list(_FORKED_LOCKS):
        item._after_fork(id(item) in taken)
    _FORK_TAKEN.clear()
    _FORK_GUARD = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


_RECREATE_ATTEMPTS = 5  # how often a writer creates anew a store removed again and again under it before giving up


class _StoreLock:
    """The store's write lock: a `filelock.FileLock` (re-entrant) that says once, as a `logging` warning, when it
    waits for another writer (another process, or another store object of this process) for more than
    `notice_after` seconds, instead of waiting in silence for up to `timeout` seconds. Used as `with store.lock(): ...`; `is_locked`, `acquire` and `release` are the FileLock's."""

    notice_after = 5.0

    def __init__(self, lock: FileLock, path: Path, timeout: float):
        self._inner, self._path, self._timeout = lock, path, timeout

    @property
    def is_locked(self) -> bool:
        return self._inner.is_locked

    def acquire(self, timeout: float | None = None):
        timeout = self._timeout if timeout is None else timeout
        first = min(self.notice_after, timeout) if timeout >= 0 else self.notice_after
        try:
            return self._inner.acquire(timeout=first)
        except Timeout:
            if 0 <= timeout <= first:
                raise
        logger.warning("hf-readonce: waiting for the write lock of store %s (%s), held by another writer "
                       "(an `encode`, a `repair` or a `prune` of another process, or a write through another store "
                       "object of this process); giving up after %s s in all.", self._path,
                       self._path / ".lock", f"{timeout:g}" if timeout >= 0 else "no limit")
        return self._inner.acquire(timeout=timeout - first if timeout >= 0 else -1)

    def release(self, force: bool = False) -> None:
        self._inner.release(force=force)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.release()


# ---------------------------------------------------------------------------------------------------------- store
class RepresentationStore:
    r"""A directory of precomputed document representations (named tensors per document), shared by processes,
    durable across restarts, keyed by `(model fingerprint, settings, content hash)`.

    Args:
        path (`str` or `os.PathLike`): store directory; created (with parents) when missing and `create=True`.
        create (`bool`, defaults to `True`): create the store if the directory does not exist or is empty.
        readonly (`bool`, defaults to `False`): refuse every write (also the default behaviour for a directory the
            process cannot write to: writes then raise [`ReadOnlyStoreError`]).
        verify_reads (`bool`, defaults to `True`): check each document's xxh3-128 checksum when it is read (about
            0.17 ms per MB on one core; SHA-256 for documents written by earlier releases, about 0.9 ms per MB).
        lock_timeout (`float`, defaults to 600): seconds to wait for the write lock before `TimeoutError` (after 5 s
            of waiting, a `logging` warning says which store's lock it waits for); negative or `math.inf`: no limit.
            `verify` and `info` wait at most the smaller of it and
            [`hf_readonce.store.maintenance.ORPHAN_LOCK_WAIT`] (30 s).

    One object may be shared by the threads of a process: reads, listings, `refresh`, `info`, `verify`, writes and
    `repair` / `prune` run side by side, each seeing the in-memory index as it was before or after another thread's
    change, never part of it. `repair` holds the index while it salvages and re-indexes (reads of the same object
    wait for it); `prune` while it reads the index at its start and end (as long as opening the store takes) and
    while it deletes each shard, not in between.

    Raises:
        ValueError: if `path` is a file, is a non-empty directory that is not a store, or holds a store of an
            unknown format version; if `lock_timeout` is not a number (or NaN).
        TypeError: `path` that is not a str or path; `create`, `readonly` or `verify_reads` that is not a bool (a
            string such as `"false"` would read as true).
        StoreNotFoundError: (a `ValueError`) if the store does not exist and `create=False` or `readonly=True`.
        ReadOnlyStoreError: if the store must be created but the directory cannot be written.

    Example:

    ```python
    >>> store = RepresentationStore("reps")
    >>> with store.writer(fingerprint, {"k": 4}, dtype="fp16") as writer:
    ...     writer.add(content_hash(text), {"hidden_states": states})
    >>> store.get(fingerprint, {"k": 4}, content_hash(text))["hidden_states"].shape
    ```
    """

    def __init__(self, path, *, create: bool = True, readonly: bool = False, verify_reads: bool = True,
                 lock_timeout: float = 600.0):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"`path` must be a str or path, got {type(path).__name__}.")
        for name, value in (("create", create), ("readonly", readonly), ("verify_reads", verify_reads)):
            check_bool(value, name)
        self.path = Path(path).expanduser().absolute()
        # the in-memory index (loaded manifests, entries, spaces, shard handles) is shared by every thread using this
        # object: each read or change of it holds this lock, never while waiting for the write lock (see `refresh`)
        self._index_lock = threading.RLock()
        self._committing: set[str] = set()  # shards this process is writing, their manifest not yet loaded
        _register_for_fork(self)
        self.readonly = readonly
        self.verify_reads = verify_reads
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) or math.isnan(lock_timeout):
            raise ValueError(f"`lock_timeout` must be a number of seconds (negative or `math.inf`: wait as long as it "
                             f"takes, as filelock's -1), got {lock_timeout!r}.")
        self.lock_timeout = float(lock_timeout)
        self._lock = None
        self._may_create = bool(create) and not self.readonly  # also anew, where the folder is removed while open
        # whether a manifest, a shard or a quarantine/ was ever seen at the path (`refresh`): a store holding
        # documents is never what `remove_empty_store` removes, so it is not created anew when its folder is gone
        # (removed or moved by hand: `_recreate_if_removed`)
        self._held_documents = False
        for attempt in range(_RECREATE_ATTEMPTS):
            before = _folder_state(self.path)
            try:
                self._open_or_create(create, readonly)
                break
            except StoreNotFoundError:
                raise
            except (ValueError, OSError):
                # where the folder is gone now, or is another one than at the start (renamed away by
                # `remove_empty_store` of a command that had created the store and failed before storing anything, or
                # made anew), what was looked at is no longer there: look again, to open, create or say missing what
                # is at the path now
                after = _folder_state(self.path)
                if attempt + 1 == _RECREATE_ATTEMPTS or (after is not None and after == before):
                    raise
        self._manifests_loaded: set[str] = set()
        self._entries: dict[RepresentationKey, DocumentEntry] = {}  # plain (space, hash) tuples hash the same
        self._spaces: dict[str, RepresentationSpace] = {}
        self._by_hash: dict[str, set[str]] = {}
        self._shards: dict[str, dict] = {}
        self._duplicates = 0
        self._shadowed: set[RepresentationKey] = set()  # keys a loaded shard holds beside the one that serves them
        self._bad_manifests: dict[str, str] = {}
        self._handles: OrderedDict[str, Any] = OrderedDict()
        self.refresh()

    # ----------------------------------------------------------------- processes
    def __getstate__(self) -> dict:
        """What `pickle` and `copy.deepcopy` keep of the store (`Dataset.map(..., num_proc=...)` sends a
        [`~hf_readonce.representations.StoreEncodeFunction`] and the store it holds to its workers; `datasets`
        fingerprints a map function by pickling it): its settings and its in-memory index as one thread sees it
        between changes, without the locks and open shard files, which belong to this process (the copy makes its
        own)."""
        with self._index_lock:
            state = dict(self.__dict__)
            state["_manifests_loaded"] = set(self._manifests_loaded)
            state["_entries"], state["_spaces"] = dict(self._entries), dict(self._spaces)
            state["_by_hash"] = {doc_hash: set(spaces) for doc_hash, spaces in self._by_hash.items()}
            state["_shards"], state["_bad_manifests"] = dict(self._shards), dict(self._bad_manifests)
            state["_shadowed"] = set(self._shadowed)
        for name in ("_index_lock", "_committing"):
            state.pop(name, None)
        state["_lock"], state["_handles"] = None, OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        """Rebuild a store from [`__getstate__`], with locks of its own."""
        self.__dict__.update(state)
        self._index_lock = threading.RLock()
        self._committing = set()
        _register_for_fork(self)

    def _fork_lock(self) -> threading.RLock:
        """The lock the `fork` hooks take before a fork (the index lock)."""
        return self._index_lock

    def _after_fork(self, held: bool) -> None:
        """In the child of `os.fork` ([`_after_fork_in_child`]): a new index lock; a new write lock on the next write
        (a `FileLock` opens its own descriptor of `.lock`, so that the child's commits wait for the parent's and the
        parent's for the child's); nothing being committed. `held`: whether the index lock was taken before the
        fork; if not, another thread may have been changing the index, which is then read anew."""
        self._index_lock = threading.RLock()
        self._lock = None
        self._committing = set()
        if not held:
            self._reset_index()

    # ----------------------------------------------------------------- creation
    def _open_or_create(self, create: bool, readonly: bool) -> None:
        """Look at `self.path` once: check the marker of the store there, create one where the path is missing or
        holds only an empty store's skeleton (with `create` and not `readonly`), or raise (see the class's Raises)."""
        try:
            found = os.stat(self.path)
        except OSError:
            found = None
        if found is not None and not stat.S_ISDIR(found.st_mode):
            raise ValueError(f"store path {self.path} is a file, not a directory; pass a directory.")
        marker = self.path / "store.json"
        if marker.is_file() or marker.is_symlink() or marker.exists():
            self._check_marker(marker)
        else:
            # a folder holding only the empty skeleton another process is creating right now counts as empty
            occupied = self.path.is_dir() and any(self.path.iterdir()) and not _being_created(self.path)
            if occupied and (marker.exists() or marker.is_symlink()):  # that process has just written its marker
                self._check_marker(marker)
            elif occupied:
                if (self.path / "index").is_dir() and (self.path / "shards").is_dir():
                    raise ValueError(
                        f"store path {self.path} has a store's index/ and shards/ folders but no store.json (deleted?); "
                        "recreate it with `hf-readonce encode MODEL --documents FILE.jsonl --store "
                        f"{shlex.quote(str(self.path))} --repair` (or "
                        f"`hf_readonce.store.restore_store_marker({str(self.path)!r})`), which also checks every "
                        "shard.")
                raise ValueError(
                    f"store path {self.path} is a non-empty directory that is not a hf-readonce store (no store.json; "
                    f"it holds {_some_entries(self.path)}); "
                    + ("pass an empty or new directory." if create and not readonly else "give the folder of a store.")
                )
            elif not create or readonly:
                raise StoreNotFoundError(f"no store at {self.path}: {_no_store_reason(self.path)} (and `create=False` "
                                         "or `readonly=True`).")
            else:
                self._create()

    def _check_marker(self, marker: Path) -> None:
        problem = path_problem(self.path, "store.json")
        if problem is not None:
            raise ValueError(f"{marker} {problem}; is {self.path} a hf-readonce store?")
        try:
            info = read_store_marker(marker)
        except OSError as error:
            raise ValueError(f"{marker} cannot be read ({error.strerror or error}); check its permissions.") from None
        except ValueError as error:
            raise ValueError(f"{marker} is unreadable ({error}); is {self.path} a hf-readonce store? If it is (it holds "
                             "index/ and shards/), `hf-readonce encode MODEL --documents FILE --store "
                             f"{shlex.quote(str(self.path))} --repair` (or `hf_readonce.store.restore_store_marker`) "
                             "moves the unreadable file to quarantine/ and writes a new one.") from None
        if not isinstance(info, dict) or info.get("format") != FORMAT_NAME:
            raise ValueError(f"{marker} does not describe a hf-readonce store (no \"format\": \"{FORMAT_NAME}\"); if "
                             f"{self.path} is a store whose store.json was overwritten (it holds index/ and shards/), "
                             "move that file away and run `hf-readonce encode MODEL --documents FILE --store "
                             f"{shlex.quote(str(self.path))} --repair`, which writes a new one.")
        if info.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"store {self.path} has format_version {info.get('format_version')}, this hf-readonce reads "
                f"version {FORMAT_VERSION}."
            )

    def _create(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            for sub in ("shards", "index", "tmp"):
                (self.path / sub).mkdir(exist_ok=True)
            data = json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                               "created": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2).encode()
            _atomic_write(self.path / "store.json", data, self.path / "tmp")
        except PermissionError as error:
            raise ReadOnlyStoreError(f"cannot create a store at {self.path}: {error}") from None
        except OSError as error:
            if os.path.islink(self.path) and not os.path.exists(self.path):
                raise ReadOnlyStoreError(f"cannot create a store at {self.path}: it is a symbolic link to "
                                         f"{os.readlink(self.path)}, which does not exist; create that folder, or "
                                         "give another path.") from None
            raise ReadOnlyStoreError(f"cannot create a store at {self.path}: {error}") from None

    def check_writable(self, *, layout: bool = True, recreate: bool = True) -> None:
        """Raise [`ReadOnlyStoreError`] unless this process can write to the store (opened read-only, or a probe
        file cannot be created in it). Called before any model work so that a run fails before it starts. The probe,
        `tmp/.tmp-<hex>.probe`, is made and removed without the write lock; `repair` leaves the store's own
        temporary files of the last five minutes in `tmp/` alone unless their writer has provably ended (its process
        id, in the name, names no process), so it never moves a probe away under a writer.

        A store whose folder was removed since this object opened it (by
        [`hf_readonce.store.maintenance.remove_empty_store`]: a command that had created the store beside this
        process failed before storing anything, and removed it, empty) is created anew at its path, as opening a new
        store creates it, under its write lock ([`_recreate_if_removed`]); so is one whose folder holds only an
        empty skeleton without `store.json`; not one this object saw holding documents (removed or moved by hand).
        Every write ([`commit_shard`]) makes this check first.

        Args:
            layout (`bool`, defaults to `True`): also refuse a store whose `index/`, `shards/` or `tmp/` is not a
                folder (a file, link or FIFO in its place: nothing is written into it). `False` before [`repair`],
                which moves such a path to `quarantine/`; the probe is then made in the store's own folder.
            recreate (`bool`, defaults to `True`): create anew a store removed since it was opened, as above. `False`
                for `prune`, which deletes and never creates: such a store is said to no longer exist.

        Raises:
            ReadOnlyStoreError: opened read-only; not writable; `index/`, `shards/` or `tmp/` damaged (with
                `layout=True`); or its `store.json` is gone and it cannot be created anew: opened with `create=False`,
                `recreate=False`, seen holding documents (removed or moved by hand), or its path now holds something
                else than an empty store (named; nothing in it is changed).
        """
        if self.readonly:
            raise ReadOnlyStoreError(f"store {self.path} was opened read-only.")
        for attempt in range(_RECREATE_ATTEMPTS):
            self._recreate_if_removed(recreate)
            damaged = False
            for sub in _LAYOUT:
                problem = path_problem(self.path, sub, folder=True)
                if problem is not None and problem != "is missing":
                    damaged = True
                    if layout:
                        raise ReadOnlyStoreError(
                            f"store {self.path} is damaged: {sub}/ {problem}; nothing is written into it. "
                            "`hf-readonce encode MODEL --documents FILE --store "
                            f"{shlex.quote(str(self.path))} --repair` (or `RepresentationStore.repair()`) moves it to "
                            "quarantine/ and rebuilds the index from the shards.")
            try:
                if damaged:  # left to repair: probe the store's own folder
                    _probe(self.path)
                    return
                for sub in _LAYOUT:
                    (self.path / sub).mkdir(exist_ok=True)
                _probe(self.path / "tmp")
                return
            except OSError as error:
                if attempt + 1 < _RECREATE_ATTEMPTS and not os.path.lexists(self.path / "store.json"):
                    continue  # removed again meanwhile: created anew by the next round
                raise ReadOnlyStoreError(f"store {self.path} is not writable ({error.strerror or error}): writing "
                                         "needs write permission on its folder and on index/, shards/ and tmp/; it "
                                         "can still be read (answer, summarize, verify, info), or encode into another "
                                         "store.") from None

    def _recreate_if_removed(self, recreate: bool = True) -> None:
        """Create the store anew at `self.path` when it has no `store.json` there and nothing else either: its folder
        is missing (removed or renamed away since this object opened it, e.g. by
        [`hf_readonce.store.maintenance.remove_empty_store`] of another command that had created the store and
        failed before storing anything) or holds only the empty skeleton a store's creation makes ([`_being_created`]:
        a process creating it at the same time, the lock file alone, or empty folders a writer's check made). It is
        created as opening a new store creates it, under the store's write lock, looked at again under it (another
        process may have created it meanwhile: then it is taken as it is); the in-memory index, of a folder that is
        gone, is emptied and a `logging` warning says what happened. Nothing is done while `store.json` is there (a
        store, as any process opened it). A store this object saw holding documents (a manifest in its index, read or
        written, or, its index listing nothing, a shard or a `quarantine/`: [`_holds_stored_data`]) is never made
        anew: `remove_empty_store` removes only a store holding nothing, so its folder was removed or moved by hand
        (`rm -r`, `mv`), and a second store at its path would hold only part of what was written.

        With `recreate=False` (a `prune`, which never creates a store) a store missing at the path is never made
        anew: it no longer exists.

        Raises:
            ReadOnlyStoreError: the store was opened with `create=False`, or `recreate=False`, or this object saw it
                holding documents (it is not made anew: it "no longer exists", nothing is created); the path is a
                file or a folder holding anything else (a user's files, or a store whose `store.json` was deleted:
                named, nothing in it is changed or written); the folder cannot be created; or it was removed again
                each time it was created anew.
        """
        marker = self.path / "store.json"
        if os.path.lexists(marker):
            return
        if not recreate:  # a prune: nothing to delete in a store that is not there, and none is made to delete from
            self._refuse_unless_empty()  # something else at the path is named as such
            raise ReadOnlyStoreError(f"store {self.path} no longer exists: its folder was removed or moved while this "
                                     "process had it open; nothing is deleted, and no store is created at its path.")
        if not self._may_create:
            raise ReadOnlyStoreError(
                f"store {self.path} no longer exists: its folder was removed or moved while this process had it open "
                "(e.g. by a failed `hf-readonce answer --encode-missing` that had created it and removed it again, "
                "empty), and it was opened with `create=False`; nothing is written. Open it again with `create=True` "
                "(or run the command again), which creates it anew.")
        if self._held_documents:  # removed or moved by hand: remove_empty_store removes only a store holding nothing
            self._refuse_unless_empty()  # something else at the path is named as such
            raise ReadOnlyStoreError(
                f"store {self.path} no longer exists: its folder was removed or moved while this process had it open, "
                "and it held documents (this process saw them), so it was not an empty store that a failed "
                "command removed; nothing is written, and no new store is started at its path. If it was moved, "
                "write into it where it is now; to start a new store at this path, open it again (or run the command "
                "again).")
        for _ in range(_RECREATE_ATTEMPTS):
            self._refuse_unless_empty()
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except (FileNotFoundError, FileExistsError):  # a parent removed between two of mkdir's steps, or the
                continue  # folder there when made and renamed away when looked at (FileExistsError): again
            except OSError as error:
                raise ReadOnlyStoreError(f"cannot create the store at {self.path} anew: {error}") from None
            taken = self._acquire_unless_gone()
            if taken is None:
                continue  # the folder was renamed away again while this process waited for its lock, or before
            lock, made = taken
            try:
                if not os.path.lexists(marker):  # else another process has just created it
                    self._refuse_unless_empty(lock_held=True)
                    self._create()
                    logger.warning("hf-readonce: store %s was removed or moved while this process had it open (as a "
                                   "command that created it and failed before storing anything removes it); created "
                                   "anew to write into.", self.path)
                self._reset_index()
            except BaseException:
                self._release_unused(lock, made)  # refused: the `.lock` it made is not left beside what is there
                raise
            lock.release()
            return
        raise self._removed_again()

    def _refuse_unless_empty(self, lock_held: bool = False) -> None:
        """Raise [`ReadOnlyStoreError`] unless `self.path` is missing or a folder holding only an empty store's
        skeleton without `store.json` ([`_being_created`], its folders in any order; with `lock_held`, its `.lock`
        may hold bytes: the soft lock this process holds): what [`_recreate_if_removed`] may create a store in.
        Without `lock_held`, a folder renamed away or made anew while it was looked at (a new store's skeleton that
        its creator's clean-up removes) is not refused: the caller looks at the path again under the lock."""
        before = _folder_state(self.path)
        refusal = self._refusal_unless_empty(lock_held)
        if refusal is not None and (lock_held or _folder_state(self.path) == before):
            raise refusal

    def _refusal_unless_empty(self, lock_held: bool) -> ReadOnlyStoreError | None:
        """The error [`_refuse_unless_empty`] raises for what is at `self.path` now, or `None`."""
        if not os.path.lexists(self.path):
            return None
        if not self.path.is_dir():
            return ReadOnlyStoreError(f"store {self.path} no longer exists: something that is not a folder (a file, "
                                      "or a link to nothing) is at its path now; nothing is written into it.")
        marker = self.path / "store.json"
        if os.path.lexists(marker) or _being_created(self.path, lock_held, any_order=True):
            return None
        if os.path.lexists(marker):  # written by its creator (without the lock) while the folder was listed
            return None
        if (self.path / "index").is_dir() and (self.path / "shards").is_dir():
            hint = (" If it is this store and its store.json was deleted, `hf-readonce encode MODEL --documents "
                    f"FILE.jsonl --store {shlex.quote(str(self.path))} --repair` (or "
                    f"`hf_readonce.store.restore_store_marker({str(self.path)!r})`) writes a new one, after checking "
                    "every shard.")
        else:
            hint = ""
        return ReadOnlyStoreError(f"store {self.path} has no store.json now and its folder holds "
                                  f"{_some_entries(self.path)}, not an empty store's skeleton; nothing is written "
                                  "into it." + hint)

    @contextlib.contextmanager
    def _write_lock(self, layout: bool = True, recreate: bool = True):
        """The write lock, held on the store that is at `self.path` now, for a commit or a `repair`:
        [`check_writable`] first (which creates anew a store removed since it was opened), then the lock, then under
        it a look that the lock file it holds is the one at the path and `store.json` is there. Where the store was
        removed (or removed and created anew) between the check and the lock, or while this process waited for the
        lock, the lock is released and all of it is done again, so nothing is ever written into a folder being
        removed.

        Args:
            layout (`bool`, defaults to `True`): passed to [`check_writable`]; `False` for `repair`, which moves a
                damaged `index/`, `shards/` or `tmp/` to `quarantine/`.
            recreate (`bool`, defaults to `True`): passed to [`check_writable`]; `False` for `prune`, which never
                creates a store (one removed since it was opened is said to no longer exist).

        Raises:
            ReadOnlyStoreError: as [`check_writable`]; also when the store was removed again each time.
        """
        for _ in range(_RECREATE_ATTEMPTS):
            self.check_writable(layout=layout, recreate=recreate)
            taken = self._acquire_unless_gone()
            if taken is None:
                continue  # renamed away while this process waited for its lock, or before it took it: looked at
                # again (and created anew) by the next round
            lock, made = taken
            if not os.path.lexists(self.path / "store.json"):
                # moved or removed after the check: the `.lock` (and the folder) taking the lock made go again, and
                # the next round creates the store anew or says that it no longer exists
                self._release_unused(lock, made)
                continue
            try:
                yield lock
                return
            finally:
                lock.release()
        raise self._removed_again()

    def _removed_again(self) -> ReadOnlyStoreError:
        """The error of a writer whose store was removed again each time it created it anew
        ([`_recreate_if_removed`], [`_write_lock`])."""
        return ReadOnlyStoreError(f"store {self.path} was removed again each of the {_RECREATE_ATTEMPTS} times this "
                                  "process created it anew to write into it; nothing is written.")

    def _acquire_unless_gone(self, timeout: float | None = None) -> tuple[_StoreLock, tuple[bool, bool]] | None:
        """Take the write lock ([`lock`], waiting up to `timeout` seconds, by default the store's `lock_timeout`,
        before `filelock.Timeout`) and return it with what taking it made, from a look just before and just
        after ([`_FolderLook`]): whether the store's folder was made meanwhile where nothing was (filelock makes the
        lock file's folder), and whether its `.lock` was (so that [`_release_unused`] removes them where the caller
        writes nothing); `None` where the store's folder is gone by the time a try opens the lock file (filelock makes the
        lock file's folder before its first try only, and raises `FileNotFoundError` on a later one: the folder was
        renamed away by [`hf_readonce.store.maintenance.remove_empty_store`], which held the lock, while this process
        waited), or while filelock makes that folder (`FileExistsError`: there when tried, gone when looked at), or
        where the lock file it holds is no longer the one at the path ([`_holds_lock_file`]: the folder was renamed
        away before the lock was taken; the lock is released)."""
        lock = self.lock()
        with _FolderLook(self.path) as before:
            lock_there = os.path.lexists(self.path / ".lock")
            try:
                lock.acquire(timeout)
            except (FileNotFoundError, FileExistsError):  # the caller looks again and creates the store anew, or
                return None  # refuses (a file at the path), a few times at most
            replaced = before.replaced()
        if not _holds_lock_file(lock._inner, self.path / ".lock"):
            lock.release()
            return None
        # a folder made where nothing was is filelock's (it makes the lock file's folder as it starts); one that took
        # the place of the folder looked at may be the user's (`mv`, then `mkdir`, while the lock was waited for)
        return lock, (replaced and not before.found, replaced or not lock_there)

    def _release_unused(self, lock: _StoreLock, made: tuple[bool, bool]) -> None:
        """Release the write lock `lock`, taken by [`_acquire_unless_gone`] (which says what taking it made: `made`),
        that the caller does not write under because no store is at the path (its `store.json` is missing):
        first, where it is the outermost hold, remove the `.lock` taking it made, and the folder where filelock made
        it for the lock file ([`_remove_lock_file_made`]), so that a store moved or removed by hand leaves nothing at
        its path and an empty folder's owner finds it as they left it."""
        try:
            if getattr(lock._inner, "lock_counter", 1) == 1 and not os.path.lexists(self.path / "store.json"):
                _remove_lock_file_made(lock._inner, self.path, made)
        finally:
            lock.release()

    def _release_looked(self, lock: _StoreLock, made: tuple[bool, bool]) -> None:
        """Release the write lock `lock`, taken by [`_acquire_unless_gone`] only to wait for another process's
        commit (`verify` and `info` where there is no `flock`: nothing is written under it), first removing, where
        it is the outermost hold, what taking it made ([`_remove_lock_file_made`]: a `.lock` removed just before and
        made anew by filelock), so that a look leaves nothing."""
        try:
            if getattr(lock._inner, "lock_counter", 1) == 1:
                _remove_lock_file_made(lock._inner, self.path, made)
        finally:
            lock.release()

    @staticmethod
    def _lock_file_held_here(found: os.stat_result) -> bool:
        """Whether the calling thread holds the write lock of a store on the lock file `found` (`os.lstat` of a
        store's `.lock`) through any [`RepresentationStore`] object of this process (each opens `.lock` anew: two
        objects of one folder are two locks of one file). Such a thread waiting for that file's lock would wait for
        itself. A method, so that `store.maintenance`, which imports nothing of this module, reaches it through a
        store."""
        with _FORK_GUARD:  # (the stores of this process, weakly held: `_FORKED_LOCKS`)
            items = [item for item in _FORKED_LOCKS if isinstance(item, RepresentationStore)]
        for item in items:
            lock = getattr(item, "_lock", None)  # (None until the object has made it)
            if lock is None or not lock.is_locked:  # (filelock keeps each thread's hold apart: this thread's)
                continue
            fd = _lock_descriptor(lock._inner)
            try:
                if fd is not None and os.path.samestat(os.fstat(fd), found):
                    return True
            except OSError:
                continue
        return False

    def lock(self) -> _StoreLock:
        """The store's write lock (`filelock.FileLock` on `STORE/.lock`, re-entrant within this object); writers
        hold it only while committing a shard, `repair` and `prune` while they run; `verify` and `info` wait until
        no other writer holds it (another process, or another store object of this folder in this process: each
        opens `.lock` anew; with a shared lock of `.lock`, opened read-only; never a thread that holds it itself,
        through any store object of this process) where a shard file is listed by no
        manifest (one being committed is none: [`hf_readonce.store.maintenance.confirmed_orphans`]). A writer that
        has waited 5 s for another writer's lock says so once (a `logging` warning of `hf_readonce.store.store`, on
        stderr by default), then waits up to `lock_timeout` seconds in all before `filelock.Timeout` (a
        `TimeoutError`)."""
        with self._index_lock:  # one lock object for every thread (filelock keeps each thread's hold apart)
            if self._lock is None:
                self._lock = _StoreLock(FileLock(str(self.path / ".lock"), timeout=self.lock_timeout), self.path,
                                        self.lock_timeout)
            return self._lock

    # ----------------------------------------------------------------- index
    def refresh(self) -> int:
        """Load manifests committed since the last refresh (by this or any other process). When a manifest this
        object had loaded is gone (`repair` moved it to `quarantine/`), the whole index is reloaded, so a
        long-lived reader follows a repair instead of reading a retired shard.

        Every manifest is checked against its schema ([`check_manifest`]) before it is used; one that fails is
        recorded as corrupted (see `verify`) and never followed. One listed and gone when it is read (deleted by
        another writer's `prune` meanwhile) is not there, as if it had not been listed.

        `index/` is listed on every refresh (one `os.listdir`, its names compared as a set), and only the manifests
        not loaded yet are read.

        Safe to call from several threads sharing this object, beside reads, writes, `verify` and `repair` in other
        threads: a refresh runs whole under the object's index lock, so another thread sees the index as it was
        before it or after it, never a manifest half loaded nor an index emptied for a reload.

        Returns:
            `int`: number of newly loaded manifests.
        """
        with self._index_lock:  # one refresh at a time: a manifest is marked loaded only with its entries
            index_dir = self.path / "index"
            try:  # a linked or non-folder index/ is never followed (`verify` names it, `repair` replaces it)
                if path_problem(self.path, "index", folder=True) is not None:
                    names = set()
                else:
                    names = {name for name in os.listdir(index_dir) if name.endswith(".json") and not name.startswith(".")}
            except (FileNotFoundError, NotADirectoryError):
                names = set()
            # a store whose index lists nothing may still hold shards (its manifests lost) or an earlier repair's
            # quarantine/: as much a store holding documents as one whose index lists them
            self._held_documents = self._held_documents or bool(names) or _holds_stored_data(self.path)
            if not self._manifests_loaded <= names:
                self._reset_index()
            new = 0
            for name in sorted(names - self._manifests_loaded):  # in name order, as the first listing loads them all
                self._manifests_loaded.add(name)
                problem = path_problem(self.path, f"index/{name}")
                if problem is not None and problem.startswith("is missing"):
                    self._manifests_loaded.discard(name)  # deleted since the listing (another writer's prune): none
                    continue
                if problem is not None:  # a FIFO would block the read forever; a link could lead outside the store
                    self._bad_manifests[name] = f"the manifest {problem}"
                    continue
                try:
                    manifest = json.loads((index_dir / name).read_bytes().decode("utf-8"))
                    self._load_manifest(manifest, name)
                    self._bad_manifests.pop(name, None)
                except FileNotFoundError:
                    self._manifests_loaded.discard(name)  # (as above)
                    continue
                except CorruptedManifestError as error:
                    self._bad_manifests[name] = str(error).split(": ", 1)[-1]
                    continue
                except (OSError, ValueError, RecursionError) as error:  # not UTF-8 / not JSON / unreadable file
                    self._bad_manifests[name] = f"unreadable manifest ({printable(error)})"
                    continue
                new += 1
            return new

    def _reset_index(self) -> None:
        """Empty the in-memory index (the next [`refresh`] reads every manifest); see [`_reload`]."""
        with self._index_lock:
            self._manifests_loaded = set()
            self._entries, self._spaces, self._by_hash, self._shards = {}, {}, {}, {}
            self._duplicates = 0
            self._shadowed = set()
            self._bad_manifests = {}
            self._handles.clear()

    def _reload(self) -> None:
        """Read the whole index again (`repair` and `prune`, after moving or deleting files), in one hold of the index
        lock: a thread reading meanwhile waits, and never finds the index empty."""
        with self._index_lock:
            self._reset_index()
            self.refresh()

    def _load_manifest(self, manifest: dict, name: str) -> None:
        check_manifest(manifest, name)
        space = RepresentationSpace(manifest["space"], manifest["fingerprint"], manifest["settings"],
                                    manifest.get("model_type"), manifest.get("model_name"))
        shard = manifest["shard"]
        self._spaces.setdefault(space.key, space)
        self._shards[shard] = manifest
        for doc_hash, doc in manifest["documents"].items():
            key = (space.key, doc_hash)
            if key in self._entries:
                self._duplicates += 1
                self._shadowed.add(key)
                continue
            self._entries[key] = DocumentEntry(space.key, doc_hash, shard, doc["tensors"], doc["sha256"],
                                               doc.get("meta") or {}, doc.get("xxh3_128", ""))
            self._by_hash.setdefault(doc_hash, set()).add(space.key)

    def _forget_manifest(self, name: str) -> None:
        """Drop the manifest `index/<name>` from the in-memory index, as if it had never been read (its shard's
        entries too): `repair` calls it for each manifest it moves to `quarantine/`. Without it, the next
        [`refresh`] (e.g. the one under the lock of [`commit_shard`], while `repair` salvages the next damaged shard)
        would take the move for another process's and reload the whole index from disk, bringing back the entries of
        the damaged shards `repair` had set aside: their intact documents would then count as stored and be
        dropped with the shard."""
        with self._index_lock:
            self._manifests_loaded.discard(name)
            self._bad_manifests.pop(name, None)
            # the one shard a manifest of that name may name, in the folder of its space (`check_manifest`): looked
            # up, not searched for among every shard of the index (once per manifest a repair retires)
            for space in list(self._spaces):
                self._forget_shard(expected_shard_path(space, name))

    def _forget_shard(self, shard: str) -> None:
        """Drop one shard from the in-memory index (`repair`, and `prune` for each shard it deletes); a document it
        shadowed in another loaded shard (a duplicate, e.g. left by a killed repair) is served from there again. The
        other shards are walked only where a document the shard served is held by another one too (a duplicate of
        another document, or of another space, costs no walk)."""
        with self._index_lock:
            manifest = self._shards.pop(shard, None)
            if manifest is None:
                return
            lost = set()
            for doc_hash in manifest["documents"]:
                key = (manifest["space"], doc_hash)
                entry = self._entries.get(key)
                if entry is not None and entry.shard == shard:
                    del self._entries[key]
                    lost.add(key)
                    spaces = self._by_hash.get(doc_hash, set())
                    spaces.discard(manifest["space"])
            self._handles.pop(shard, None)
            if not lost & self._shadowed:  # no other loaded shard holds a document it served: none was shadowed
                return
            for other_shard, other in self._shards.items():
                for doc_hash, doc in other["documents"].items():
                    key = (other["space"], doc_hash)
                    if key in lost and key not in self._entries:
                        self._entries[key] = DocumentEntry(other["space"], doc_hash, other_shard, doc["tensors"],
                                                           doc["sha256"], doc.get("meta") or {}, doc.get("xxh3_128", ""))
                        self._by_hash.setdefault(doc_hash, set()).add(other["space"])
                        self._duplicates -= 1

    def spaces(self) -> list[RepresentationSpace]:
        """Every representation space that has at least one committed shard."""
        with self._index_lock:
            return list(self._spaces.values())

    def __len__(self) -> int:
        with self._index_lock:
            return len(self._entries)

    def entries(self, fingerprint: str | None = None, settings: Mapping | None = None) -> Iterator[DocumentEntry]:
        """Iterate over stored documents, all of them or those of one (fingerprint, settings) space: the index as it
        was when iteration started (a shard committed meanwhile, by any thread, is not listed)."""
        wanted = space_key(fingerprint, settings) if fingerprint is not None else None
        with self._index_lock:
            listed = list(self._entries.items())
        for (space, _), entry in listed:
            if wanted is None or space == wanted:
                yield entry

    def contains(self, fingerprint: str, settings: Mapping, document_hash: str) -> bool:
        """Whether `document_hash` is stored for this (fingerprint, settings); refreshes the index on a miss.

        Raises:
            TypeError / ValueError: a `document_hash` that is not a [`content_hash`].
        """
        key = (space_key(fingerprint, settings), check_document_hash(document_hash))
        with self._index_lock:
            if key in self._entries:
                return True
            self.refresh()
            return key in self._entries

    def missing(self, fingerprint: str, settings: Mapping, document_hashes: Iterable[str]) -> list[str]:
        """The hashes among `document_hashes` (order kept, duplicates dropped) not stored for this space.

        Raises:
            TypeError / ValueError: `document_hashes` is a single string, or holds something that is not a
                [`content_hash`].
        """
        document_hashes = check_document_hashes(document_hashes)
        space = space_key(fingerprint, settings)
        seen, out = set(), []
        with self._index_lock:
            self.refresh()
            for doc_hash in document_hashes:
                if doc_hash not in seen and (space, doc_hash) not in self._entries:
                    out.append(doc_hash)
                seen.add(doc_hash)
        return out

    def entry(self, fingerprint: str, settings: Mapping, document_hash: str) -> DocumentEntry:
        """The [`DocumentEntry`] of a stored document.

        Raises:
            RepresentationMismatchError: if the document is stored only for other fingerprints/settings (the
                message names the requested and the stored ones).
            MissingRepresentationError: if it is not stored at all.
            TypeError / ValueError: a `document_hash` that is not a [`content_hash`] (e.g. the text itself).
        """
        space = space_key(fingerprint, settings)
        key = (space, check_document_hash(document_hash))
        with self._index_lock:
            if key not in self._entries:
                self.refresh()
            found = self._entries.get(key)
            if found is not None:
                return found
            others = [self._spaces[s] for s in sorted(self._by_hash.get(document_hash, ())) if s in self._spaces]
        requested = f"fingerprint {fingerprint[:16]}... settings {canonical_settings(settings)}"
        if others:
            stored = "; ".join(s.describe() for s in others)
            raise RepresentationMismatchError(
                f"document {document_hash[:16]} is stored in {self.path} only for {stored}, not for the requested "
                f"{requested}: representations of another model or setting are never returned; encode the "
                "document with this model."
            )
        raise MissingRepresentationError(f"document {document_hash[:16]} is not in store {self.path} ({requested}).")

    # ----------------------------------------------------------------- reads
    def _handle(self, shard: str):
        """`(safe_open handle, document hashes in the shard's header in commit order, header space)` of a shard,
        cached (64 most recent, each holding its file open).

        The handle reads each tensor with `pread` into memory of its own (safetensors' `backend="pread"`), not as a
        view of a memory map: a tensor read is the caller's to change (through a view of a cached map, a caller's
        in-place change would reach every later read of the document), a shard cut short while open is an error of the
        read instead of a SIGBUS that ends the process, and a read keeps nothing alive once its tensors are
        dropped (the memory-mapped `get_tensor` of safetensors 0.8 keeps two Python integers per tensor read)."""
        with self._index_lock:
            cached = self._handles.get(shard)
            if cached is not None:
                self._handles.move_to_end(shard)
                return cached
        if not is_store_file(shard) or not shard.startswith("shards/"):  # manifests are checked; never follow others
            raise ValueError(f"shard path {printable(shard)!r} is not inside the store's shards/ folder")
        problem = path_problem(self.path, shard)  # never open a FIFO, a device or a link (out of the store)
        if problem is not None:
            raise ValueError(f"the shard file {problem}")
        handle = safe_open(str(self.path / shard), framework="pt", backend="pread")
        metadata = handle.metadata() or {}
        try:
            order = list(json.loads(metadata["documents"]))
        except (KeyError, ValueError, TypeError, RecursionError):
            order = None
        cached = (handle, order, metadata.get("space"))
        with self._index_lock:
            self._handles[shard] = cached
            while len(self._handles) > 64:
                self._handles.popitem(last=False)
        return cached

    def _drop_handle(self, shard: str) -> None:
        """Forget the cached handle of `shard` ([`_handle`]), if any."""
        with self._index_lock:
            self._handles.pop(shard, None)

    def _read(self, entry: DocumentEntry, verify: bool | str, check_order: bool = True) -> dict[str, torch.Tensor]:
        # verify: False, True (the read checksum) or "strong" (SHA-256 too: verify and repair). `check_order=False`
        # (verify and repair only, always with "strong") skips the comparison with the shard header's document list,
        # so that a document whose tensor bytes are intact is kept when only that header was damaged.
        try:
            handle, order, header_space = self._handle(entry.shard)
            tensors = {name: handle.get_tensor(spec["key"]) for name, spec in entry.tensors.items()}
        except Exception as error:  # safetensors raises its own error type for truncated/garbled files
            self._drop_handle(entry.shard)
            if (path_problem(self.path, entry.shard) or "").startswith("is missing") and self._manifest_gone(entry):
                with self._index_lock:  # a repair may have rewritten the document into another shard: read it there
                    self.refresh()
                    moved = self._entries.get((entry.space, entry.content_hash))
                if moved is not None and moved.shard != entry.shard:
                    return self._read(moved, verify, check_order)
                raise MissingRepresentationError(  # shard and manifest both gone: deleted, not damaged
                    f"document {entry.name} is no longer in store {self.path}: its shard and manifest were deleted "
                    "while it was being read (a `prune` of its space, or a `repair`); run the command again.") from None
            raise CorruptedShardError(
                f"shard {printable(entry.shard)} of store {self.path} is unreadable ({printable(error)}) while "
                f"reading document {entry.name}; run `hf-readonce verify --store {shlex.quote(str(self.path))}` and "
                "`encode --repair`.",
                entry.shard, [entry.content_hash],
            ) from None
        # the shard's own header names the document at each position: even without checksums (verify_reads=False)
        # a shard swapped for another, or a manifest pointing at the wrong tensors, never serves another document
        index = next(iter(entry.tensors.values()))["key"].partition("/")[0]
        if check_order and (order is None or header_space != entry.space or not index.isdigit() or int(index) >= len(order) or \
                order[int(index)] != entry.content_hash):
            raise CorruptedShardError(
                f"shard {printable(entry.shard)} of store {self.path} holds another document at the place of "
                f"{entry.name} (its header disagrees with the index); run `hf-readonce verify` and `encode --repair`.",
                entry.shard, [entry.content_hash])
        for name, spec in entry.tensors.items():
            if list(tensors[name].shape) != list(spec["shape"]) or _dtype_name(tensors[name].dtype) != spec["dtype"]:
                raise CorruptedShardError(
                    f"document {entry.name} in shard {printable(entry.shard)}: tensor {printable(name)!r} has "
                    f"shape/dtype {list(tensors[name].shape)}/{_dtype_name(tensors[name].dtype)}, the index says "
                    f"{spec['shape']}/{spec['dtype']}.", entry.shard, [entry.content_hash])
        if verify and not _checksums_match(entry, tensors, strong=verify == "strong"):
            raise CorruptedShardError(
                f"checksum mismatch for document {entry.name} in shard {printable(entry.shard)} of store {self.path}: "
                "the shard is corrupted; run `hf-readonce verify` and `encode --repair`.", entry.shard,
                [entry.content_hash])
        return tensors

    def _manifest_gone(self, entry: DocumentEntry) -> bool:
        """Whether the manifest of `entry`'s shard, whose file is missing, is gone too (deleted or moved away: a
        `prune` or `repair`, not damage). Looked at under the index lock (a thread sharing this object deletes or
        moves a shard with its manifest in one hold of it); where it is still there, once more after no other writer
        holds the store's write lock (another writer deletes a shard before its manifest, under that lock; waited
        for as `verify` waits: [`hf_readonce.store.maintenance.confirmed_orphans`]; not at all by a thread that holds
        it)."""
        manifest = self.path / "index" / f"{Path(entry.shard).stem}.json"
        with self._index_lock:
            if not os.path.lexists(manifest):
                return True
        return _wait_for_commits(self)[0] and not os.path.lexists(manifest)

    def read_entry(self, entry: DocumentEntry, verify: bool = True) -> dict[str, torch.Tensor]:
        """Read the tensors of one [`DocumentEntry`] (as listed by [`entries`]), checking its checksum when
        `verify`.

        Raises:
            CorruptedShardError: if the shard is unreadable or the document's checksum or shapes do not match.
            TypeError: a `verify` that is not a bool.
        """
        return self._read(entry, check_bool(verify, "verify"))

    @property
    def loaded_manifests(self) -> list[str]:
        """Names of the index files loaded so far, sorted (they change whenever a shard is committed)."""
        with self._index_lock:
            return sorted(self._manifests_loaded)

    def get(self, fingerprint: str, settings: Mapping, document_hash: str, *, device=None,
            verify: bool | None = None) -> dict[str, torch.Tensor]:
        """Read one document's tensors (a copy of its bytes in the shard, checksum checked unless disabled).

        Args:
            fingerprint, settings: the representation space asked for.
            document_hash (`str`): [`content_hash`] of the document text.
            device (`torch.device` or `str`, *optional*): move the tensors there.
            verify (`bool`, *optional*): override `verify_reads`.

        Returns:
            `dict[str, torch.Tensor]`: the tensors as stored, each of the shape it was written with (the store keeps
            any shape; each family's adapter lists its names and shapes), floating tensors in the dtype chosen at
            write time.

        Raises:
            RepresentationMismatchError, MissingRepresentationError: see [`entry`]; `MissingRepresentationError` also
                where the document's shard and manifest were deleted (a `prune` of its space) while it was read.
                Where the shard file is gone and its manifest is still there, that is told once no other writer
                holds the store's write lock (another writer's `prune` deletes the shard first), waited for up to
                [`hf_readonce.store.maintenance.ORPHAN_LOCK_WAIT`] seconds as `verify` waits.
            CorruptedShardError: if the shard is unreadable or the document's checksum does not match.
            TypeError: a `verify` that is neither a bool nor None.
        """
        check_bool(verify, "verify", optional=True)
        entry = self.entry(fingerprint, settings, document_hash)
        tensors = self._read(entry, self.verify_reads if verify is None else verify)
        if device is not None:
            tensors = {name: t.to(device) for name, t in tensors.items()}
        return tensors

    def get_many(self, fingerprint: str, settings: Mapping, document_hashes: Sequence[str], *, device=None,
                 verify: bool | None = None) -> list[dict[str, torch.Tensor]]:
        """[`get`] for several documents (same order): one dict per hash, each tensor of the shape it was written
        with (documents are not padded to one another).

        Raises:
            As [`get`], on the first failing document.
            TypeError: a single string instead of a list (it would be read as one hash per character); a `verify`
                that is neither a bool nor None.
        """
        check_bool(verify, "verify", optional=True)
        document_hashes = check_document_hashes(document_hashes)
        return [self.get(fingerprint, settings, h, device=device, verify=verify) for h in document_hashes]

    def get_meta(self, fingerprint: str, settings: Mapping, document_hash: str) -> dict:
        """The small JSON metadata stored with a document (e.g. its `id`). Raises as [`entry`]."""
        return dict(self.entry(fingerprint, settings, document_hash).meta)

    # ----------------------------------------------------------------- writes
    def writer(self, fingerprint: str, settings: Mapping, *, dtype: str | torch.dtype = "float16",
               shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES, model_type: str | None = None,
               model_name: str | None = None) -> StoreWriter:
        """A [`StoreWriter`] that buffers documents and commits them in shards of about `shard_size_bytes`
        (`model_type` and `model_name`: recorded with each shard, see [`StoreWriter`]).

        Raises:
            ReadOnlyStoreError: if the store cannot be written.
            TypeError / ValueError: bad fingerprint, settings, dtype, shard size, model type or model name.
        """
        return StoreWriter(self, fingerprint, settings, dtype=dtype, shard_size_bytes=shard_size_bytes,
                           model_type=model_type, model_name=model_name)

    def put(self, fingerprint: str, settings: Mapping, document_hash: str, tensors: Mapping[str, torch.Tensor], *,
            meta: Mapping | None = None, dtype: str | torch.dtype = "float32", model_type: str | None = None,
            model_name: str | None = None) -> bool:
        """Store one document now (one shard). Prefer [`writer`] for many documents.

        Args:
            fingerprint (`str`), settings (`Mapping`): the representation space (as [`writer`]).
            document_hash (`str`): the document's [`content_hash`].
            tensors (`Mapping[str, torch.Tensor]`): its tensors; floating ones are cast to `dtype`.
            meta (`Mapping`, *optional*): small JSON metadata (e.g. `{"id": ...}`).
            dtype (`str` or `torch.dtype`, defaults to `"float32"`): storage dtype. Unlike [`writer`] and
                `fill_store` (float16, half the bytes), one document put by hand is kept exactly by default; pass
                `"float16"` to store it as they do.
            model_type (`str`, *optional*): recorded with the space (what `info` shows).
            model_name (`str`, *optional*): the model's name or path, recorded with the space (what `info` shows).

        Raises:
            ReadOnlyStoreError: the store cannot be written. ValueError / TypeError: as [`writer`] and
                [`StoreWriter.add`] (bad hash, tensor names or metadata, an fp16 overflow, non-tensors).

        Returns:
            `bool`: True if written, False if the document was already stored for this space (nothing changes).
        """
        with self.writer(fingerprint, settings, dtype=dtype, model_type=model_type, model_name=model_name) as writer:
            writer.add(document_hash, tensors, meta=meta)
        return bool(writer.committed)

    def has(self, space: str, document_hash: str) -> bool:
        """Whether `document_hash` is in the loaded index for the space key `space` (no refresh; see [`contains`]
        for a lookup by fingerprint and settings that refreshes)."""
        with self._index_lock:
            return (space, document_hash) in self._entries

    def commit_shard(self, space: RepresentationSpace, dtype: torch.dtype,
                     documents: list[tuple[str, dict, dict]], *, on_commit=None) -> list[str]:
        """Write one shard + manifest under the lock, skipping documents already stored: the commit point of
        [`StoreWriter.flush`] and of `repair`. Prefer [`writer`] or [`put`].

        Args:
            space ([`RepresentationSpace`]): the space written into.
            dtype (`torch.dtype`): the storage dtype recorded for the shard (tensors are already cast).
            documents (`list[tuple[str, dict, dict]]`): `(content_hash, tensors, meta)` per document.
            on_commit (`callable`, *optional*): called with the committed hashes right after the manifest is
                written, before a Ctrl-C / SIGTERM held during the write is delivered (so a caller's count of what
                it committed stays true when that interrupt then stops it).

        Returns:
            `list[str]`: the committed content hashes.

        Raises:
            ReadOnlyStoreError: if the store cannot be written.
        """
        with self._write_lock():
            with self._index_lock:
                self.refresh()
                todo, seen = [], set()
                for doc_hash, doc_tensors, meta in documents:  # a hash given twice is written once, as first given
                    if (space.key, doc_hash) not in self._entries and doc_hash not in seen:
                        todo.append((doc_hash, doc_tensors, meta))
                        seen.add(doc_hash)
            if not todo:
                return []
            shard_id = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            shard_rel = f"shards/{space.key[:24]}/{shard_id}.safetensors"
            tensors, docs = {}, {}
            for i, (doc_hash, doc_tensors, meta) in enumerate(todo):
                specs = {}
                for name, tensor in doc_tensors.items():
                    key = f"{i}/{name}"
                    tensors[key] = tensor
                    specs[name] = {"key": key, "dtype": _dtype_name(tensor.dtype), "shape": list(tensor.shape)}
                docs[doc_hash] = {"tensors": specs, "sha256": tensors_checksum(doc_tensors),
                                  "xxh3_128": tensors_read_checksum(doc_tensors), "meta": meta}
            header = {"format": FORMAT_NAME, "format_version": str(FORMAT_VERSION), "space": space.key,
                      "fingerprint": space.fingerprint, "settings": canonical_settings(space.settings),
                      "dtype": _dtype_name(dtype), "model_type": space.model_type or "",
                      **({"model_name": space.model_name} if space.model_name else {}),
                      "documents": json.dumps({h: {"sha256": d["sha256"], "xxh3_128": d["xxh3_128"], "meta": d["meta"]}
                                              for h, d in docs.items()})}
            data = safetensors_save(tensors, metadata=header)
            shard_path = self.path / shard_rel
            folder = str(Path(shard_rel).parent)
            problem = path_problem(self.path, folder, folder=True)
            if problem is not None and problem != "is missing":
                raise ReadOnlyStoreError(
                    f"store {self.path}: {folder}/ {problem}; no shard is written into it. `hf-readonce encode ... "
                    "--repair` (or `RepresentationStore.repair()`) moves it to quarantine/.")
            shard_path.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256(data).hexdigest()
            committed = [h for h, _, _ in todo]
            with self._index_lock:  # a `verify` in another thread takes it for no orphan until its manifest is loaded
                self._committing.add(shard_rel)
            try:
                with _interrupts_held():  # the shard and its manifest together: Ctrl-C / SIGTERM never splits them
                    _atomic_write(shard_path, data, self.path / "tmp")
                    try:
                        self._write_manifest(shard_rel, space, _dtype_name(dtype), len(data), digest, docs)
                    except BaseException:
                        # no manifest names the shard (e.g. the disk filled up between the two): nobody can read it,
                        # so it goes rather than stay an orphan that `verify` reports and that takes space
                        if not (self.path / "index" / f"{Path(shard_rel).stem}.json").exists():
                            with contextlib.suppress(OSError):
                                shard_path.unlink()
                        raise
                    if on_commit is not None:
                        on_commit(committed)
            finally:
                with self._index_lock:
                    self._committing.discard(shard_rel)
            return committed

    def _write_manifest(self, shard_rel: str, space: RepresentationSpace, dtype: str, file_size: int,
                        file_sha256: str, documents: dict) -> None:
        """Write and load `index/<shard id>.json` for the shard `shard_rel` (the commit point: a shard without its
        manifest is an orphan). Called under the write lock."""
        manifest = {"format_version": FORMAT_VERSION, "shard": shard_rel, "space": space.key,
                    "fingerprint": space.fingerprint, "settings": space.settings, "model_type": space.model_type,
                    **({"model_name": space.model_name} if space.model_name else {}),
                    "dtype": dtype, "file_size": file_size, "file_sha256": file_sha256, "created": time.time(),
                    "documents": documents}
        name = f"{Path(shard_rel).stem}.json"
        check_manifest(manifest, name)  # never write one that the next refresh would refuse
        _atomic_write(self.path / "index" / name, json.dumps(manifest, separators=(",", ":")).encode(),
                      self.path / "tmp")
        with self._index_lock:  # marked loaded together with its entries (a `refresh` in another thread waits)
            self._held_documents = True
            self._committing.discard(shard_rel)
            if name not in self._manifests_loaded:  # else a refresh of another thread has read it since it was written
                self._manifests_loaded.add(name)
                self._load_manifest(manifest, name)

    def index_shard(self, shard_rel: str, space: RepresentationSpace, dtype: str, entries: list) -> list[str]:
        """Write the manifest of a shard file already in the store whose index was lost (`repair`): the manifest
        records the file's size and SHA-256 and, per document, what the shard's own header lists (`entries`, from
        [`hf_readonce.store.manifest.read_shard_header`], every one checked intact by the caller). The shard is
        indexed where it lies, instead of being copied into a new shard.

        Args:
            shard_rel (`str`): the shard's path relative to the store (`shards/<space>/<id>.safetensors`).
            space ([`RepresentationSpace`]), dtype (`str`): as the shard's header records them.
            entries (`list[DocumentEntry]`): its documents.

        Returns:
            `list[str]`: the content hashes indexed.

        Raises:
            ReadOnlyStoreError: if the store cannot be written.
        """
        with self._write_lock():
            path = self.path / shard_rel
            self._write_manifest(shard_rel, space, dtype, path.stat().st_size, _file_sha256(path),
                                 {e.content_hash: {"tensors": e.tensors, "sha256": e.sha256, "meta": e.meta,
                                                   # a shard of an earlier release records no read checksum
                                                   **({"xxh3_128": e.xxh3_128} if e.xxh3_128 else {})}
                                  for e in entries})
            return [e.content_hash for e in entries]

    # ----------------------------------------------------------------- maintenance
    def info(self) -> dict:
        """Summary of the store; see [`hf_readonce.store.maintenance.store_info`].

        Raises:
            StoreNotFoundError: if no store is at the path any more (its folder moved or removed since it was opened,
                also where a folder without `store.json` is there now).
        """
        return store_info(self)

    def verify(self, progress: bool = False) -> VerifyReport:
        """Check every checksum, never modifying the store; see [`hf_readonce.store.maintenance.verify_store`].

        Returns:
            [`VerifyReport`].

        Raises:
            StoreNotFoundError: if the store's folder was moved or removed since it was opened (also where a folder
                without `store.json` is at its path now: an empty folder is not a store).
        """
        return verify_store(self, progress=progress)

    def repair(self, report: VerifyReport | None = None) -> dict:
        """Salvage intact documents and quarantine corrupted shards; see
        [`hf_readonce.store.maintenance.repair_store`] (a store removed, empty, since it was opened is created anew
        first, as by every write, and has nothing to repair).

        Raises:
            ReadOnlyStoreError: if the store cannot be written, or no longer exists and is not created anew (opened
                with `create=False`, or seen holding documents).
        """
        return repair_store(self, report)

    def prune(self, spaces=(), *, quarantine: bool = False, dry_run: bool = False) -> dict:
        """Delete every document of the given representation spaces (space keys as `info` prints them), and with
        `quarantine=True` the `quarantine/` folder; see [`hf_readonce.store.maintenance.prune_store`].

        Raises:
            ValueError: nothing to prune, or a space key that names no space (or several) of this store.
            ReadOnlyStoreError: if the store cannot be written (not with `dry_run=True`).
            TypeError: a `quarantine` or `dry_run` that is not a bool.
        """
        return prune_store(self, spaces, quarantine=quarantine, dry_run=dry_run)

    def __repr__(self) -> str:
        with self._index_lock:
            return f"RepresentationStore({str(self.path)!r}, documents={len(self._entries)}, spaces={len(self._spaces)})"


def _utf8_name(name: str | None) -> str | None:
    """`name` as UTF-8 can hold it (safetensors headers are UTF-8 JSON): a path's undecodable bytes (the lone
    surrogates `os.fsdecode` gives for them) written as `\\xNN`, any other lone surrogate as `\\udNNN`."""
    if name is None:
        return None
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


class StoreWriter:
    """Buffers documents of one representation space and commits them in shards (see
    [`RepresentationStore.writer`]). Use as a context manager: leaving the block commits what is buffered; an
    exception inside the block discards the buffer (committed shards stay).

    Args:
        store ([`RepresentationStore`]), fingerprint (`str`), settings (`Mapping`): the space written.
        dtype (`str` or `torch.dtype`, defaults to `"float16"`): storage dtype of floating tensors (fp32, fp16,
            bf16); integer and bool tensors keep their dtype.
        shard_size_bytes (`int`, defaults to 64 MiB): commit a shard once this many tensor bytes are buffered.
        model_type (`str`, *optional*): recorded in the index for `info`.
        model_name (`str`, *optional*): the model's name or path as the caller names it (`hf-readonce encode`: its
            MODEL argument), recorded in the index and each shard's header for `info`, so that spaces of several
            checkpoints of one family can be told apart; an opaque string (never read as a path). `None` or `""`:
            nothing recorded. Characters UTF-8 cannot hold (the undecodable bytes of a path, as `os.fsdecode` gives
            them) are recorded as backslash escapes (`"caf\\xe9"`), since shard headers are UTF-8 JSON.

    Attributes:
        committed (`list[str]`): hashes written by this writer; skipped (`list[str]`): already stored, not rewritten.

    Several threads may share one writer: `add`, `flush` and `discard` run one at a time, and a document added by
    two threads is stored once (committed by one, skipped by the other).

    Raises:
        ReadOnlyStoreError: at creation, if the store cannot be written.
        TypeError / ValueError: bad arguments (see each method); a `model_type` or `model_name` that is not a str.
    """

    def __init__(self, store: RepresentationStore, fingerprint: str, settings: Mapping, *,
                 dtype: str | torch.dtype = "float16", shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES,
                 model_type: str | None = None, model_name: str | None = None):
        _check_fingerprint(fingerprint)
        settings = json.loads(canonical_settings(settings))
        if (isinstance(shard_size_bytes, bool) or not isinstance(shard_size_bytes, (int, float))
                or not math.isfinite(shard_size_bytes) or shard_size_bytes <= 0):
            raise ValueError(f"`shard_size_bytes` must be a positive finite number, got {shard_size_bytes!r}.")
        if model_type is not None and not isinstance(model_type, str):
            raise TypeError(f"`model_type` must be a str or None, got {type(model_type).__name__}.")
        if model_name is not None and not isinstance(model_name, str):
            raise TypeError(f"`model_name` must be a str or None, got {type(model_name).__name__}.")
        self.store = store
        self.dtype = resolve_dtype(dtype)
        self.shard_size_bytes = shard_size_bytes
        self.space = RepresentationSpace(space_key(fingerprint, settings), fingerprint, settings, model_type,
                                         _utf8_name(model_name) or None)
        store.check_writable()
        self._lock = threading.RLock()  # `add`, `flush` and `discard` from several threads: one at a time
        _register_for_fork(self)
        self._buffer: list[tuple[str, dict, dict]] = []
        self._buffered_hashes: set[str] = set()
        self._buffered_bytes = 0
        self.committed: list[str] = []
        self.skipped: list[str] = []

    def _fork_lock(self) -> threading.RLock:
        """The lock the `fork` hooks take before a fork."""
        return self._lock

    def _after_fork(self, held: bool) -> None:
        """In the child of `os.fork`: a new lock (one another thread held at the fork would stay held for good)."""
        self._lock = threading.RLock()

    def _prepare(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if not isinstance(tensors, Mapping) or not tensors:
            raise TypeError("`tensors` must be a non-empty dict of name -> torch.Tensor.")
        out = {}
        for name, tensor in tensors.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"tensor names must be non-empty str without '/', got {name!r}.")
            if not torch.is_tensor(tensor):
                raise TypeError(f"tensor {name!r} is of type {type(tensor).__name__}, not a torch.Tensor.")
            if tensor.dtype not in _STORABLE:
                raise TypeError(f"tensor {name!r} has dtype {tensor.dtype}, which the store does not hold.")
            tensor = tensor.detach().to("cpu")
            if tensor.is_floating_point():
                converted = tensor.to(self.dtype)
                # finite values that overflow the storage dtype: rounding is monotonic, so the largest finite
                # magnitude overflows if any does. NaN and inf already in the input are stored as given, and do not
                # hide an overflow beside them. One reduction in the input's dtype (`isfinite` on a whole fp16 tensor
                # is slow on CPUs: only run when the input holds a NaN or inf).
                peak = tensor.abs().amax() if tensor.numel() else tensor.new_zeros(())
                if not bool(torch.isfinite(peak)):
                    finite = tensor[torch.isfinite(tensor)]
                    peak = finite.abs().amax() if finite.numel() else tensor.new_zeros(())
                if bool(torch.isinf(peak.to(self.dtype))):
                    raise ValueError(
                        f"tensor {name!r} overflows {_dtype_name(self.dtype)} (values up to "
                        f"{float(peak):.3g}); store it as "
                        f"{'bf16 or fp32' if self.dtype == torch.float16 else 'fp32'}.")
                tensor = converted
            out[name] = tensor.clone(memory_format=torch.contiguous_format)  # one copy: the caller keeps its own
        return out

    def add(self, document_hash: str, tensors: Mapping[str, torch.Tensor], meta: Mapping | None = None) -> bool:
        """Buffer one document; commits a shard when the buffer reaches `shard_size_bytes`.

        Args:
            document_hash (`str`): [`content_hash`] of the document text (64 hex characters).
            tensors (`dict[str, torch.Tensor]`): the representation, a non-empty dict of tensors of any shape (kept
                as given; a 0-d or empty tensor included); floating tensors are cast to `dtype`.
            meta (`dict`, *optional*): small JSON-serializable metadata (e.g. `{"id": ...}`).

        Returns:
            `bool`: False if the document is already stored or buffered (it is not written twice).

        Raises:
            ValueError: bad hash or tensor names, fp16 overflow. TypeError: non-tensors, unsupported dtypes,
            metadata that is not JSON (or whose keys collide as JSON strings, e.g. `1` and `"1"`).
        """
        if not isinstance(document_hash, str):
            raise ValueError(f"`document_hash` must be a 64-character lowercase hex SHA-256, got {document_hash!r}.")
        check_document_hash(document_hash)
        if meta is not None and not isinstance(meta, Mapping):
            raise TypeError(f"`meta` must be a dict (small JSON metadata, e.g. {{\"id\": ...}}) or None, got "
                            f"{type(meta).__name__}.")
        meta = dict(meta or {})
        try:
            written = json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(f"`meta` must be JSON-serializable: {error}") from None
        problem = strict_json_problem(written.encode())
        if problem is not None:  # e.g. {1: ..., "1": ...}: JSON keys are strings, so both become "1"
            raise TypeError(f"`meta` must be JSON-serializable as one unambiguous object: as JSON, {problem}.")
        meta = json.loads(written)  # as every reader gets it back (int keys as str, tuples as lists)
        with self._lock:
            if document_hash in self._buffered_hashes or self.store.has(self.space.key, document_hash):
                self.skipped.append(document_hash)
                return False
            prepared = self._prepare(tensors)
            self._buffer.append((document_hash, prepared, meta))
            self._buffered_hashes.add(document_hash)
            self._buffered_bytes += sum(t.numel() * t.element_size() for t in prepared.values())
            if self._buffered_bytes >= self.shard_size_bytes:
                self.flush()
            return True

    def flush(self) -> list[str]:
        """Commit the buffered documents as one shard (documents stored meanwhile by another process are dropped
        from it). Returns the committed hashes."""
        with self._lock:
            if not self._buffer:
                return []
            buffer, self._buffer = self._buffer, []
            self._buffered_hashes, self._buffered_bytes = set(), 0

            def record(committed: list[str]) -> None:  # before an interrupt held during the commit is delivered
                self.committed += committed
                done = set(committed)
                self.skipped += [h for h, _, _ in buffer if h not in done]

            committed = self.store.commit_shard(self.space, self.dtype, buffer, on_commit=record)
            if not committed:  # nothing written (all stored meanwhile): `record` was not called
                record(committed)
            return committed

    def discard(self) -> None:
        """Drop what is buffered and not yet committed."""
        with self._lock:
            self._buffer, self._buffered_hashes, self._buffered_bytes = [], set(), 0

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()
        else:
            self.discard()


def check_store_argument(store) -> None:
    """Raise unless `store` is a [`RepresentationStore`] (the check every function taking a store makes first: a path
    given instead would fail later as a bare `AttributeError`).

    Args:
        store: the argument to check.

    Raises:
        TypeError: naming what was given and how to open a store.
    """
    if not isinstance(store, RepresentationStore):
        raise TypeError(f"`store` must be a RepresentationStore, got {type(store).__name__} (open one with "
                        "`hf_readonce.store.RepresentationStore(path)`).")


__all__ = ["RepresentationStore", "StoreWriter", "check_store_argument"]
