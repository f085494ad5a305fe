"""Maintenance of a [`RepresentationStore`]: `info` (summary), `verify` (every checksum, and every manifest field
against its shard's own header; names each corrupted shard, manifest and document), `repair` (keep every
document whose tensor bytes pass their checksum, re-index what only lost its index, quarantine the rest; nothing is
deleted) and `prune` (delete the representation spaces, and the `quarantine/` folder, a user no longer needs: the
only operation that deletes stored documents; [`remove_empty_store`] removes only the skeleton of a store that holds
none). The store's `info()`, `verify()`, `repair()` and `prune()` methods call these
functions."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import math
import os
import shlex
import stat
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import CorruptedShardError, MissingRepresentationError, ReadOnlyStoreError, StoreNotFoundError
from .keys import DocumentEntry, RepresentationSpace, check_bool, printable
from .manifest import (
    is_store_file,
    manifest_header_differences,
    path_problem,
    read_shard_header,
    strict_json_problem,
)
from .shards import (
    _TEMP_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    _atomic_write,
    _being_created,
    _checksums_match,
    _file_sha256,
    _no_store_reason,
    _process_scope,
    _temp_writer_gone,
    read_store_marker,
    resolve_dtype,
)

try:  # `verify` and `info` wait for a writer's commit with a shared lock of their own (not on Windows)
    import fcntl
except ImportError:
    fcntl = None

logger = logging.getLogger(__name__)


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

    def describe(self, most: int = 10) -> str:
        """One line naming the shard, the reason and the affected documents (control characters escaped): the
        first `most` of them (default 10) and how many more, so a shard of thousands stays one readable line
        (`VerifyReport.corrupted_documents` and `verify --json` list them all)."""
        names = ", ".join(entry.name for entry in self.documents[:most]) or "-"
        if len(self.documents) > most:
            names += f" (and {len(self.documents) - most} more)"
        return f"CORRUPTED {printable(self.shard)}: {printable(self.reason)}; documents: {names}"


@dataclass
class VerifyReport:
    """Result of [`RepresentationStore.verify`]: `ok` is True when nothing is corrupted and `quarantine/` is in order.

    Attributes:
        shards_checked, documents_checked (`int`), corruptions (`list[Corruption]`), orphans (`list[str]`): shard
        files that no manifest references (left by a crash before commit, or whose manifest was lost). An orphan
        holding documents the index lacks is also a corruption; `repair` re-indexes it and moves it away. A shard
        another writer is committing (written, its manifest not yet: another process, or a thread of this one,
        through this store object or another) is none: see [`confirmed_orphans`].
        orphans_note (`str` or `None`): `None` when every orphan listed is one for sure; else why one may still be
        a shard another writer is committing, and what to do, also said in each orphan's corruption: the write lock
        held past [`ORPHAN_LOCK_WAIT`] (verify again once that writer is done), or a lock that cannot be waited for
        (e.g. a `.lock` this user cannot read: the note names who can verify instead, and stays on every verify
        until then).
        duplicates (`int`): documents listed by two index files (harmless: reads use the first; as `info` counts
        them).
        leftovers (`list[str]`): what lies in `tmp/` (a write killed midway, or a file or folder put there; not the
        store's own temporary files of the last five minutes, unless their writer has provably ended: see
        [`tmp_leftovers`]): harmless, never read; `repair` moves it to `quarantine/`.
        quarantine_problem (`str` or `None`): why the store's `quarantine/` cannot take what `repair` sets aside
        (e.g. "is a symbolic link"; see [`quarantine_problem`]), `None` when it is a folder or missing. Not a
        corruption (nothing of the store is damaged), but `repair` refuses to run until it is moved away.
    """

    shards_checked: int = 0
    documents_checked: int = 0
    corruptions: list = field(default_factory=list)
    orphans: list = field(default_factory=list)
    orphans_note: str | None = None
    duplicates: int = 0
    leftovers: list = field(default_factory=list)
    quarantine_problem: str | None = None

    @property
    def ok(self) -> bool:
        """True when `corruptions` is empty and `quarantine_problem` is `None` (orphans and leftovers alone do not
        make a store not ok)."""
        return not self.corruptions and self.quarantine_problem is None

    @property
    def corrupted_documents(self) -> list:
        """Every [`DocumentEntry`] that cannot be trusted, in the order of `corruptions` (their `documents`
        concatenated)."""
        return [entry for c in self.corruptions for entry in c.documents]


def model_names(store) -> dict[str, list[str]]:
    """Per space key (of the spaces whose shards record one), the distinct model names its loaded shards record, in
    the order they were first written (what `info` lists as `model_names`; a space's
    [`RepresentationSpace.model_name`] is that of one of its shards only)."""
    named: dict[str, list] = {}  # per space: (when written, model name) of each shard that records one
    with store._index_lock:
        manifests = list(store._shards.values())
    for manifest in manifests:
        if manifest.get("model_name"):
            when = manifest.get("created")
            when = when if isinstance(when, (int, float)) and not isinstance(when, bool) else math.inf
            named.setdefault(manifest["space"], []).append((when, manifest["model_name"]))
    return {space: list(dict.fromkeys(name for _, name in sorted(names))) for space, names in named.items()}


def store_info(store, *, confirm_orphans: bool = True) -> dict:
    """Summary: documents, shards, bytes on disk (`quarantine_bytes` / `quarantine_files` of them under
    `quarantine/`, where `repair` moved damaged files: kept for inspection, never read, safe to delete), and per space
    its fingerprint, settings, model type, `model_names` (the distinct model names its shards record, in the order
    they were first written; `[]` where none is recorded: shards written without one, or by earlier releases),
    dtypes, documents, bytes and `first_written` / `last_written` (Unix times of its first and last committed shard,
    `None` if unrecorded); `duplicates` (entries shadowed by an identical
    key, harmless), `orphans` (shard files without a manifest; a shard another writer is committing is none, see
    [`confirmed_orphans`]: where shard files are listed by no manifest, this may wait up to [`ORPHAN_LOCK_WAIT`]
    seconds for the store's write lock), `orphans_note` (`None`, or why an orphan listed may still be a shard
    another writer is committing, and what to do) and `bad_manifests`. The shard files are listed once and the
    index read once after them; only where some are listed by no manifest are both done once more, after the wait.

    Args:
        store ([`RepresentationStore`]): the store.
        confirm_orphans (`bool`, defaults to `True`): `False` waits for nothing: `orphans` are then the shard files
            no manifest lists at one look (a shard another writer is committing may be among them) and
            `orphans_note` is `None` (for a caller that shows no orphan: the summary line of `encode` and `prune`).

    Raises:
        StoreNotFoundError: if no store is at the store's path any more (its folder removed or moved since the store
            was opened, or a folder without `store.json` there now): an empty summary would describe a store that is
            not there.
        TypeError: a `confirm_orphans` that is not a bool.
    """
    check_bool(confirm_orphans, "confirm_orphans")
    _check_still_there(store, "describe")
    (spaces, manifests, entries, duplicates, bad_manifests, names_by_space), orphans = _summary_look(store)
    orphans_note = None
    if orphans and confirm_orphans:
        # a shard another writer is committing is none: once no other writer holds the store's write lock (waited
        # for never under the index lock), the summary is taken again, so that it counts such a shard's documents
        look_again, orphans_note = _wait_for_commits(store)
        if look_again:
            (spaces, manifests, entries, duplicates, bad_manifests, names_by_space), unindexed = _summary_look(store)
            unindexed = set(unindexed)  # (one repaired or pruned meanwhile is gone)
            orphans = [orphan for orphan in orphans if orphan in unindexed]
    orphans_note = orphans_note if orphans else None
    per_space = {}
    for key, space in spaces.items():
        per_space[key] = {"fingerprint": space.fingerprint, "settings": space.settings,
                          "model_type": space.model_type, "model_names": [], "documents": 0, "shards": 0, "bytes": 0,
                          "dtypes": [], "first_written": None, "last_written": None}
    for space, names in names_by_space.items():
        per_space[space]["model_names"] = names
    for manifest in manifests:
        s = per_space[manifest["space"]]
        s["shards"] += 1
        s["bytes"] += int(manifest.get("file_size", 0))
        created = manifest.get("created")  # a Unix time; anything else (garbled, out of range) is left out
        if isinstance(created, (int, float)) and not isinstance(created, bool) and 0 <= created < 2 ** 33:
            s["first_written"] = created if s["first_written"] is None else min(s["first_written"], created)
            s["last_written"] = created if s["last_written"] is None else max(s["last_written"], created)
        if manifest.get("dtype") not in s["dtypes"]:
            s["dtypes"].append(manifest.get("dtype"))
    for space, _ in entries:
        per_space[space]["documents"] += 1
    total, quarantined, quarantined_files = _disk_usage(store)
    return {"path": str(store.path), "format_version": FORMAT_VERSION, "documents": len(entries),
            "shards": len(manifests), "bytes_on_disk": total, "quarantine_bytes": quarantined,
            "quarantine_files": quarantined_files, "spaces": per_space,
            "duplicates": duplicates, "orphans": orphans, "orphans_note": orphans_note, "bad_manifests": bad_manifests}


def _summary_look(store) -> tuple[tuple, list[str]]:
    """One look for [`store_info`]: the shard files are listed, then the index is read (a shard whose manifest is
    written in between is indexed) and copied under the index lock, as one state of it whatever other threads sharing
    the store do meanwhile. Returns `((spaces, manifests, entries, duplicates, bad manifests, model names), unindexed)`
    where `unindexed` are the listed shard files no loaded manifest lists and no thread of this process is
    committing, and still there (one a `prune` deleted with its manifest after the listing is none: nothing to wait
    for), sorted."""
    files = _shard_files(store)
    with store._index_lock:
        store.refresh()
        summary = (dict(store._spaces), list(store._shards.values()), list(store._entries), store._duplicates,
                   sorted(store._bad_manifests), model_names(store))
        unindexed = [f for f in files if f not in store._shards and f not in store._committing]
    return summary, [f for f in unindexed if os.path.lexists(store.path / f)]


def _disk_usage(store) -> tuple[int, int, int]:
    """`(bytes, quarantine bytes, quarantine files)`: the size of the regular files under the store's folder (never
    through a linked folder), and of those under `quarantine/`, and how many these are."""
    total = quarantined = quarantined_files = 0
    quarantine = os.path.join(store.path, "quarantine")
    for folder, _, files in os.walk(store.path):  # never into a linked folder
        in_quarantine = os.path.commonpath([folder, quarantine]) == quarantine
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(folder, name))
                size = st.st_size if stat.S_ISREG(st.st_mode) else 0
                total += size
                if in_quarantine:
                    quarantined += size
                    quarantined_files += 1
    return total, quarantined, quarantined_files


def _shard_files(store) -> list[str]:
    """Every `shards/<dir>/<name>.safetensors` of the store (whatever its file type), relative and sorted; linked
    folders are never entered (`verify` names them)."""
    if path_problem(store.path, "shards", folder=True) is not None:
        return []
    found = []
    with os.scandir(store.path / "shards") as folders:
        for folder in folders:
            if not folder.is_dir(follow_symlinks=False):
                continue
            with os.scandir(folder.path) as files:
                found += [f"shards/{folder.name}/{f.name}" for f in files
                          if f.name.endswith(".safetensors") and not f.is_dir(follow_symlinks=False)]
    return sorted(found)


def unindexed_note(store) -> str:
    """A sentence for a "not stored" error when the store holds shard files its index does not list (a lost or
    damaged index): the documents may be there, and `encode --repair` re-indexes them; `""` otherwise."""
    orphans = orphan_shards(store)
    if not orphans:
        return ""
    return (f" The store holds {len(orphans)} shard file(s) its index does not list (a lost or damaged index): "
            f"`hf-readonce verify --store {shlex.quote(str(store.path))}` names them and `hf-readonce encode ... "
            "--repair` re-indexes them.")


def orphan_shards(store, space: str | None = None) -> list[str]:
    """Shard files (`shards/*/*.safetensors`, relative to the store) that no loaded manifest lists, sorted: a listing
    of the shard folders against the index, no file is opened. With `space` (a space key), only those in the folder
    the store writes that space's shards into (`shards/<key[:24]>/`; what a shard holds is only known from its header,
    [`read_orphan`]). A shard a thread of this process is committing (its manifest not written yet) is none."""
    with store._index_lock:
        known = set(store._shards) | store._committing
    folder = None if space is None else f"shards/{space[:24]}/"
    return [f for f in _shard_files(store) if f not in known and (folder is None or f.startswith(folder))]


ORPHAN_LOCK_WAIT = 30.0
"""How long (seconds) `verify` and `info` wait at most for the store's write lock when shard files stay listed by no
manifest after the index is read again ([`confirmed_orphans`]); less where the store's `lock_timeout` is less. A
writer holds the lock for one shard commit at a time (a shard and its manifest written and synced), `repair` and
`prune` for their whole run, which may take longer: past the wait the orphans are named with a note saying that
another writer held the lock, and verifying again once it is done tells."""


def confirmed_orphans(store, candidates: list[str]) -> tuple[list[str], str | None]:
    """Which of `candidates` (shard paths relative to the store that no manifest listed when they were looked at)
    are orphans for sure, and not shards being committed: the index is read again (a shard committed meanwhile
    has its manifest by now; one a thread of this process is committing through this store object is none), and
    where some are still listed by no manifest, once more after no other writer holds the store's write lock, which
    a writer committing a shard holds from before it writes the shard until its manifest is written: another
    process, or another thread of this one writing through another [`RepresentationStore`] object of the same
    folder (each object opens `.lock` anew, so its lock conflicts with the shared one waited with; where it stays
    held past the wait, the note says so as for another process's). That is waited for up to
    [`ORPHAN_LOCK_WAIT`] seconds (less where the store's `lock_timeout` is less; after 5 s a `logging` warning says
    which store's lock is waited for) with a shared `flock` of `STORE/.lock` opened read-only, taken and released at
    once: nothing is ever written, created or truncated (a store opened `readonly=True`, or one of another user that
    this user may only read, is looked at as any other), a `.lock` that is a link is never followed, nor one that
    is a FIFO read. Called by a thread that holds the write lock, through this store object (inside `repair`) or
    another one of this process on the same `.lock`, no other writer commits: nothing is waited for. Where the store has no `.lock`, no writer holds its lock (every
    writer makes it before it writes a shard) and nothing is waited for; where nothing was waited for, the index is
    not read a third time. Without `fcntl.flock` (Windows) the write lock itself is taken (a `.lock`
    made by taking it, where it was removed just before, is removed again).

    Args:
        store ([`RepresentationStore`]): the store.
        candidates (`list[str]`): shard paths, e.g. [`orphan_shards`] of the store.

    Returns:
        `tuple[list[str], str | None]`: the candidates still listed by no manifest and still there (order kept), and
        `None` when that is sure, or a note saying why one may still be a shard another writer is committing, and
        what to do: the write lock held by another writer past the wait (verify again once it is done), or not to be
        waited for (a `.lock` this process cannot read: verify as a user who can; one that is not a regular file:
        move it away while no writer runs; a file system without `flock`). Such a note comes again on every look
        until that is done, and says that where no `encode`, `repair` or `prune` runs, the orphans listed are
        orphans.
    """
    if not candidates:
        return [], None
    store.refresh()
    unindexed = set(orphan_shards(store))
    candidates = [f for f in candidates if f in unindexed]
    if not candidates:
        return [], None
    look_again, note = _wait_for_commits(store)
    if look_again:
        store.refresh()
        unindexed = set(orphan_shards(store))
        candidates = [f for f in candidates if f in unindexed]
    return candidates, note if candidates else None


def _wait_for_commits(store) -> tuple[bool, str | None]:
    """Wait until no other writer holds the store's write lock, as [`confirmed_orphans`] says (never under the index
    lock; not at all by a thread that holds it, through this store object or another one of this process on the same
    `.lock`). Also used where a shard file is found missing while its manifest is still listed (`verify`, and a read
    of one of its documents): another writer's `prune` deletes the shard before its manifest. Returns `(look_again, note)`: `look_again` is True where a writer may have committed while this was looked
    at (the index is then to be read again, and the shard files listed again); `note` is `None` when every shard
    listed by no manifest after that is an orphan for sure, else the `orphans_note` saying why one may be a shard
    being committed, and what to do."""
    held = store._lock
    if held is not None and held.is_locked:  # this thread holds the write lock: no other writer commits now
        return False, None
    lock_file = store.path / ".lock"
    wait = ORPHAN_LOCK_WAIT if store.lock_timeout < 0 else min(ORPHAN_LOCK_WAIT, store.lock_timeout)
    try:
        found = os.lstat(lock_file)
    except FileNotFoundError:
        return False, None  # no writer holds the lock: each makes `.lock` before it writes a shard
    except OSError as error:
        return False, _cannot_wait(f"the store's write lock {printable(lock_file)} cannot be looked at "
                                   f"({error.strerror or error})", _AS_A_READER.format(printable(lock_file)))
    if not stat.S_ISREG(found.st_mode):
        return False, _cannot_wait(f"the store's write lock {printable(lock_file)} is not a regular file",
                                   f"move {printable(lock_file)} away while no `encode`, `repair` or `prune` runs on "
                                   "the store (a writer makes a new one)")
    if store._lock_file_held_here(found):  # held by this thread through another store object: no other writer commits
        return False, None
    return True, _wait_for_writers(store, wait) if fcntl is not None else _wait_by_taking_the_lock(store, wait)


_MAY_BE_COMMITTING = "a shard listed as an orphan may be one another writer is committing"
_AS_A_READER = "verify as a user who may read {} (e.g. the store's owner)"
_UNTIL_DONE = "run verify again once no `encode`, `repair` or `prune` runs on the store"


def _cannot_wait(cause: str, remedy: str) -> str:
    """The note of [`confirmed_orphans`] where the store's write lock cannot be waited for at all: verifying again
    gives it again, so it says what makes it go (`remedy`), and that the orphans are orphans where no writer runs."""
    return (f"{cause}, so this process cannot wait for a writer's commit: {_MAY_BE_COMMITTING}; verifying again "
            f"gives this note again: {remedy}; while no `encode`, `repair` or `prune` runs on the store, the orphans "
            "listed are orphans")


def _held_too_long(wait: float) -> str:
    """The note of [`confirmed_orphans`] where the write lock stayed held for the whole wait."""
    return (f"another writer held the store's write lock for the {wait:g} s this process waited for it (an `encode`, "
            "`repair` or `prune` of another process, or a write through another `RepresentationStore` object of "
            f"this process): {_MAY_BE_COMMITTING}; {_UNTIL_DONE}")


def _wait_for_writers(store, wait: float) -> str | None:
    """Wait up to `wait` seconds until no writer holds the store's write lock ([`confirmed_orphans`]): a shared
    `flock` of `STORE/.lock` opened read-only (`O_NOFOLLOW`, `O_NONBLOCK`: a link is not followed, a FIFO does not
    block), conflicting with a writer's exclusive one (another process's, or one taken through another
    `RepresentationStore` object of this process: each opens `.lock` anew), released at once. `None` once it is
    taken on the `.lock` at the path, or where none is there; else the note saying why it was not (held past the
    wait, or not to be opened or locked) and what to do."""
    lock_file = store.path / ".lock"
    notice_after = store.lock().notice_after  # (the lock object only: nothing is opened)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    start = time.monotonic()
    noticed = False
    while True:  # again where `.lock` was replaced while waited for (writers lock the one at the path)
        try:
            fd = os.open(lock_file, flags)
        except FileNotFoundError:
            return None  # removed meanwhile: no writer holds it
        except OSError as error:
            return _cannot_wait(f"the store's write lock {printable(lock_file)} cannot be opened "
                                f"({error.strerror or error})", _AS_A_READER.format(printable(lock_file)))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return _cannot_wait(f"the store's write lock {printable(lock_file)} is not a regular file",
                                    f"move {printable(lock_file)} away while no `encode`, `repair` or `prune` runs "
                                    "on the store (a writer makes a new one)")
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError as error:
                    if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                        return _cannot_wait(f"the store's write lock {printable(lock_file)} cannot be waited for "
                                            f"({error.strerror or error})", "this file system offers no shared "
                                            "`flock` to wait with")
                waited = time.monotonic() - start
                if waited >= wait:
                    return _held_too_long(wait)
                if not noticed and waited >= notice_after:
                    noticed = True
                    logger.warning("hf-readonce: waiting for the write lock of store %s (%s), held by another writer "
                                   "(an `encode`, a `repair` or a `prune` of another process, or a write through "
                                   "another store object of this process), to tell a shard it commits from an "
                                   "orphan, or one it deletes from a missing one; giving up after %s s in all.",
                                   store.path, lock_file, f"{wait:g}")
                time.sleep(min(0.05, wait - waited))
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(lock_file))
            except OSError:
                same = False
            if same:
                return None
        finally:
            os.close(fd)  # (releases the shared lock)


def _wait_by_taking_the_lock(store, wait: float) -> str | None:
    """[`_wait_for_writers`] where there is no `fcntl.flock` (Windows): the write lock itself is taken (up to `wait`
    seconds) and released at once, first removing a `.lock` taking it made (`RepresentationStore._release_looked`)."""
    try:
        taken = store._acquire_unless_gone(timeout=wait)
    except Timeout:
        return _held_too_long(wait)
    except OSError as error:
        lock_file = printable(store.path / ".lock")
        return _cannot_wait(f"the store's write lock {lock_file} cannot be taken ({error.strerror or error})",
                            f"verify as a user who may write {lock_file} (e.g. the store's owner)")
    if taken is None:
        return (f"the store's folder was moved or removed while its write lock was waited for: {_MAY_BE_COMMITTING}; "
                f"{_UNTIL_DONE}")
    store._release_looked(*taken)
    return None


LIVE_TMP_SECONDS = 300
"""How long (seconds) a temporary file of the store's own in `tmp/` counts as belonging to work under way, unless its
writer has provably ended ([`hf_readonce.store.shards._temp_writer_gone`])."""


def _live_tmp(entry: os.DirEntry, now: float) -> bool:
    """Whether an entry of `tmp/` may belong to work under way: a regular file named as the store names its own
    temporary files (`.tmp-<hex><suffix>`: every write, and the writability probe `.tmp-<hex>.probe` that
    `check_writable` makes and removes without the write lock), modified less than [`LIVE_TMP_SECONDS`] ago (or in
    the future), whose writer has not provably ended: a name that records the writer's process id (on Linux, this
    release on) of a process of this machine and PID namespace that no longer runs (killed midway) is a leftover at
    once ([`_temp_writer_gone`]). An entry that vanishes while looked at is live too (its writer removed it)."""
    if not entry.name.startswith(".tmp-"):
        return False
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return True
    return stat.S_ISREG(st.st_mode) and st.st_mtime > now - LIVE_TMP_SECONDS and not _temp_writer_gone(entry.name)


def tmp_leftovers(store) -> list[str]:
    """What lies in the store's `tmp/` and belongs to no work under way (`tmp/<name>`, files, folders and links,
    sorted; nothing when `tmp/` is a link or not a folder): temporary files of a write killed midway, or whatever was
    put there by hand. The store's own temporary files modified in the last five minutes ([`LIVE_TMP_SECONDS`]) are
    left out (a write under the lock, or a writability probe made without the lock, may be using them), unless
    their name shows that their writer, a process of this machine and PID namespace, no longer runs (a killed
    `encode`'s: [`_temp_writer_gone`]): those are leftovers at once."""
    if path_problem(store.path, "tmp", folder=True) is not None:
        return []
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(store.path / "tmp") as entries:
        return sorted(f"tmp/{entry.name}" for entry in entries if not _live_tmp(entry, now))
    return []


def layout_problems(store) -> list[tuple[str, str]]:
    """`(path, problem)` for each of the store's own folders (`index/`, `shards/`, `tmp/`) that is a link or not a
    folder, and each entry of `shards/` that is not a folder of the store (a link, e.g. to a folder outside the
    store, or a file). Nothing is ever read or written through them; `repair` moves them to `quarantine/`."""
    problems = []
    for sub in ("index", "shards", "tmp"):
        problem = path_problem(store.path, sub, folder=True)
        if problem is not None and problem != "is missing":
            problems.append((sub, problem))
    if path_problem(store.path, "shards", folder=True) is None:
        with os.scandir(store.path / "shards") as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                problem = path_problem(store.path, f"shards/{entry.name}", folder=True)
                if problem is not None:
                    problems.append((f"shards/{entry.name}", problem))
    return problems


def quarantine_problem(path) -> str | None:
    """Why the store's `quarantine/` (at the store folder `path`) cannot take what `repair` sets aside: a link (it
    would move the store's files outside the store), a file, FIFO or device in its place; `None` when it is a folder
    or missing. `verify` reports it and `repair` refuses to run until it is moved away."""
    problem = path_problem(Path(path), "quarantine", folder=True)
    return None if problem in (None, "is missing") else problem


def _quarantine_refusal(path, problem: str) -> ReadOnlyStoreError:
    return ReadOnlyStoreError(
        f"store {path}: quarantine/ {problem}; repair moves damaged files into it, so it must be a folder of the "
        "store: move it away, then repair again (nothing was changed).")


def _layout_corruption(rel: str, problem: str) -> Corruption:
    return Corruption(rel, f"the store's folder {rel}/ {problem}; `repair` moves it to quarantine/ (nothing behind it "
                           "is read or written)", [])


def read_orphan(store, shard: str):
    """What a shard holds, from its own header: `(space, dtype, entries)` (see
    [`hf_readonce.store.manifest.read_shard_header`]). Never follows a symbolic link nor opens anything but a
    regular file.

    Raises:
        ValueError: the file is a link, a FIFO or device, is unreadable, or its header is not a hf-readonce shard's.
    """
    from safetensors import safe_open

    problem = path_problem(store.path, shard) if is_store_file(shard) else "is not a shard path of the store"
    if problem is not None:
        raise ValueError(f"shard file that {problem}")
    path = store.path / shard
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


def _manifest_entries(manifest: dict, shard: str) -> list[DocumentEntry]:
    """Every document a manifest lists, as [`DocumentEntry`]s of its shard (duplicates of other shards included)."""
    return [DocumentEntry(manifest["space"], doc_hash, shard, doc["tensors"], doc["sha256"], doc.get("meta") or {},
                          doc.get("xxh3_128", "")) for doc_hash, doc in manifest["documents"].items()]


def _indexable_in_place(store, shard: str, space: RepresentationSpace) -> bool:
    """Whether an orphan shard can get its manifest back where it lies: in its space's own folder, named as the
    store names shards, a regular file, with no manifest of that name left in the index."""
    path = Path(shard)
    return (len(path.parts) == 3 and path.parts[0] == "shards" and path.parts[1] == space.key[:24]
            and path.suffix == ".safetensors" and path_problem(store.path, shard) is None
            and not (store.path / "index" / f"{path.stem}.json").exists())


def _tensors_intact(store, entry: DocumentEntry, layout=None):
    """The document's tensors if their bytes pass both checksums its record holds (SHA-256 and xxh3-128), read by
    the record's tensor keys whatever the shard's header lists; else `None`. A shard safetensors will not open (a
    truncated file: its header promises bytes the file no longer has) is read byte range by byte range
    ([`_tensors_from_byte_ranges`]), so the documents whose bytes are all still there are kept; a shard whose header
    is unreadable (garbled JSON) is read at the byte ranges `layout()` gives ([`_rebuilt_layout`] of the documents its
    manifest lists), when given. The checksums decide in every case: a wrong guess of the ranges keeps nothing."""
    try:
        return store._read(entry, verify="strong", check_order=False)
    except CorruptedShardError:
        pass
    if path_problem(store.path, entry.shard) is not None:  # a link, FIFO or device on the way: never opened
        return None
    tensors = _tensors_from_byte_ranges(store.path / entry.shard, entry)
    if tensors is None and layout is not None:
        tensors = _tensors_from_byte_ranges(store.path / entry.shard, entry, layout())
    if tensors is None or not _checksums_match(entry, tensors, strong=True):
        return None
    return tensors


def _rebuilt_layout(entries) -> dict | None:
    """Where the tensor bytes of a shard holding exactly `entries` lie, counted back from the end of the file: the
    layout the store's writer (`safetensors.torch.save`) gives them, found by saving zeros of the same keys, dtypes
    and shapes (the data section ends the file, its order does not depend on the header's metadata). Returns `{key:
    (begin, end)}` with negative offsets from the end of the file, or `None` if a record cannot be laid out."""
    import torch
    from safetensors.torch import save as safetensors_save

    try:
        zeros = {spec["key"]: torch.zeros(spec["shape"], dtype=getattr(torch, spec["dtype"]))
                 for entry in entries for spec in entry.tensors.values()}
        data = safetensors_save(zeros)
    except (AttributeError, KeyError, TypeError, ValueError, RuntimeError):
        return None
    length = int.from_bytes(data[:8], "little")
    total = len(data) - 8 - length
    header = json.loads(data[8 : 8 + length])
    return {key: (info["data_offsets"][0] - total, info["data_offsets"][1] - total)
            for key, info in header.items() if key != "__metadata__"}


def _lazy_layout(entries):
    """`layout()` for [`_tensors_intact`]: [`_rebuilt_layout`] of `entries`, computed on first call only."""
    return functools.cache(functools.partial(_rebuilt_layout, entries))


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _tensors_from_byte_ranges(path: Path, entry: DocumentEntry, layout: dict | None = None):
    """The tensors of `entry` read straight from the byte ranges the shard's safetensors header gives them (8-byte
    little-endian header length, the JSON header, then the data), for a file too damaged for safetensors to open;
    `None` when the header is unreadable, a tensor's dtype or shape disagrees with the record, or its bytes lie
    beyond the end of the file. With `layout` (`{key: (begin, end)}` counted back from the end of the file, see
    [`_rebuilt_layout`]) the header is not read: the ranges are those. The caller checks the checksums."""
    import torch

    try:
        # a regular file only, never through a link, never blocking (a FIFO put in place of a shard)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            return None
        size = os.fstat(descriptor).st_size
        with os.fdopen(descriptor, "rb") as handle:
            ranges = _ranges_from_header(handle, size, entry) if layout is None else {
                name: (size + layout[spec["key"]][0], size + layout[spec["key"]][1])
                for name, spec in entry.tensors.items()}
            if ranges is None:
                return None
            tensors = {}
            for name, spec in entry.tensors.items():
                begin, end = ranges[name]
                if not 8 <= begin <= end <= size:
                    return None
                handle.seek(begin)
                data = bytearray(handle.read(end - begin))
                torch_dtype = getattr(torch, spec["dtype"])
                if len(data) != end - begin or len(data) != torch_dtype.itemsize * math.prod(spec["shape"]):
                    return None
                tensors[name] = torch.frombuffer(data, dtype=torch_dtype).reshape(spec["shape"]) if data \
                    else torch.empty(spec["shape"], dtype=torch_dtype)
            return tensors
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def _ranges_from_header(handle, size: int, entry: DocumentEntry) -> dict | None:
    """`{tensor name: (begin, end)}` absolute file offsets of `entry`'s tensors as the shard's own safetensors
    header gives them; `None` if the header's length is implausible or a tensor's dtype or shape disagrees with the
    record. Raises what reading or parsing the header raises (the caller treats it as unreadable)."""
    length = int.from_bytes(handle.read(8), "little")
    if not 0 < length <= min(size - 8, 100 << 20):
        return None
    header = json.loads(handle.read(length))
    ranges = {}
    for name, spec in entry.tensors.items():
        info = header.get(spec["key"])
        if _SAFETENSORS_DTYPES.get(info["dtype"]) != spec["dtype"] or list(info["shape"]) != list(spec["shape"]):
            return None
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end:
            return None
        ranges[name] = (8 + length + begin, 8 + length + end)
    return ranges


def _check_still_there(store, action: str) -> None:
    """Raise [`StoreNotFoundError`] when no store is at the store's path any more, before a read-only pass over it
    (`verify`, `info`, a dry-run `prune`): no folder is there (removed or moved since `store` was opened), or a folder
    without `store.json` (a folder made anew at the path of a store moved away, `mv` then `mkdir`; or the store's
    marker deleted). Its index, refreshed, would list nothing, and the empty report would read as a sound, empty
    store."""
    if not os.path.isdir(store.path):
        raise StoreNotFoundError(f"no store at {store.path} any more (removed or moved since it was opened): nothing "
                                 f"to {action}.")
    if os.path.lexists(store.path / "store.json"):
        return
    hint = ""
    if path_problem(store.path, "index", folder=True) is None and path_problem(store.path, "shards",
                                                                                  folder=True) is None:
        hint = (" If it is this store and its store.json was deleted, `hf-readonce encode MODEL --documents "
                f"FILE.jsonl --store {shlex.quote(str(store.path))} --repair` (or "
                f"`hf_readonce.store.restore_store_marker({str(store.path)!r})`) writes a new one, after checking "
                "every shard.")
    raise StoreNotFoundError(f"no store at {store.path} any more (moved or removed since it was opened): "
                             f"{_no_store_reason(store.path)}; nothing to {action}." + hint)


def verify_store(store, progress: bool = False) -> VerifyReport:
    """Check the whole store, never modifying it:

    - the store's folders: `index/`, `shards/`, `tmp/` and each `shards/<space>/` must be folders, not links (a
      link would lead reads and writes outside the store) nor files; a `quarantine` that is not a folder is named in
      `quarantine_problem` (not a corruption: it is to be moved away by hand, `repair` refuses to run until then);
    - every manifest against its schema (see [`hf_readonce.store.manifest.check_manifest`]; e.g. `null`, a list, a
      shard path outside the store), as one unambiguous JSON object (no key given twice, no NaN: see
      [`hf_readonce.store.manifest.strict_json_problem`]), and every file it reads must be a regular file (a FIFO
      would block a read forever);
    - every shard's whole-file SHA-256 against its manifest. When it agrees, every field of the manifest is checked
      against the shard's own header (space, fingerprint, settings, dtype, model type, the documents listed, each
      document's tensor keys, dtypes, shapes, checksums and meta; a disagreement is a corruption of the manifest,
      named with the field). When it differs, every document's tensor bytes are checked against its checksums: the
      documents that fail are corrupted; when none fails, only header or index bytes changed and the corruption
      lists no document (`repair` keeps them all);
    - orphan shards (no manifest lists them): one whose header lists documents the index lacks is a corruption too
      (the index lost them; `repair` re-indexes them from the shard); one whose documents are all stored elsewhere
      is harmless and only listed. A shard being committed is none: the index is read again after the files are
      listed, and where shards are still unlisted, once more under the store's write lock, waited for up to
      [`ORPHAN_LOCK_WAIT`] seconds (another writer's commit holds it until the shard's manifest is written: another
      process's, or one through another store object of this process; see [`confirmed_orphans`]; nothing is
      written, also where this user may only read the store). Where the lock stays held by another writer, or
      cannot be waited for (a `.lock` this user cannot read), the orphans are named all the same, each corruption's
      reason and `orphans_note` saying that one may be a shard being committed, and what to do.

    Args:
        progress (`bool`, defaults to `False`): show a tqdm bar over shards.

    Returns:
        [`VerifyReport`].

    Raises:
        StoreNotFoundError: if no store is at the store's path any more: no folder (removed or moved since the store
            was opened), or a folder without `store.json` (one made anew at the path, or the marker deleted): an empty
            report would read as a sound store.
    """
    from tqdm.auto import tqdm

    _check_still_there(store, "verify")
    report = VerifyReport(quarantine_problem=quarantine_problem(store.path))  # not a corruption: repair refuses it
    for rel, problem in layout_problems(store):
        report.corruptions.append(_layout_corruption(rel, problem))
    files = _shard_files(store)  # listed before the index is read: a shard committed meanwhile has its manifest
    with store._index_lock:  # one state of the index (another thread of this process may commit or refresh)
        store.refresh()
        bad_manifests, shards = sorted(store._bad_manifests.items()), sorted(store._shards.items())
        served = {shard: sum(1 for h in manifest["documents"]
                             if getattr(store._entries.get((manifest["space"], h)), "shard", None) == shard)
                  for shard, manifest in shards}
    for name, reason in bad_manifests:
        report.corruptions.append(Corruption(f"index/{name}", reason, []))
    found = {}  # shard -> the corruptions found of it and its manifest, looked at again below
    for shard, manifest in tqdm(shards, desc="verify", unit="shard", disable=not progress):
        try:
            corruption = _check_shard(store, shard, manifest)
        except (FileNotFoundError, MissingRepresentationError):  # deleted while it was read: looked at below
            corruption = Corruption(shard, "shard file is missing (deleted while it was read)",
                                    _manifest_entries(manifest, shard))
        ambiguous = _ambiguous_manifest(store, shard)
        if ambiguous is not None and corruption is not None and corruption.shard == ambiguous.shard:
            corruption.reason = f"{ambiguous.reason}; {corruption.reason}"
        elif ambiguous is not None:
            found[shard] = [ambiguous]
        if corruption is not None:
            found.setdefault(shard, []).append(corruption)
    # a shard deleted (`prune`) or moved away (`repair`) with its manifest by another thread or process while it was
    # checked is no corruption of the store: only those its manifest still lists are named
    gone = _unlisted_meanwhile(store, {shard: manifest for shard, manifest in shards if shard in found})
    for shard, _ in shards:
        if shard in gone:
            continue
        report.shards_checked += 1
        report.documents_checked += served[shard]
        report.corruptions += found.get(shard, [])
    # a shard being committed when the files were listed is looked at once more: indexed by now, or still being
    # committed by a thread of this process, it is none; one still unindexed then is looked at once more under the
    # store's write lock, which another writer committing it holds until its manifest is written
    indexed = dict(shards)
    report.orphans = [f for f in files if f not in indexed]
    if report.orphans:  # (outside the index lock: never held while the write lock is waited for)
        report.orphans, report.orphans_note = confirmed_orphans(store, report.orphans)
    with store._index_lock:
        report.duplicates = store._duplicates
    report.leftovers = tmp_leftovers(store)
    doubt = f"; {report.orphans_note}" if report.orphans_note else ""
    for orphan in list(report.orphans):
        try:
            _, _, entries = read_orphan(store, orphan)
        except ValueError as error:
            if not os.path.lexists(store.path / orphan):  # deleted since it was listed (a `prune` of its space)
                report.orphans.remove(orphan)
                continue
            report.corruptions.append(Corruption(orphan, f"orphan shard (no manifest lists it): {error}; its "
                                                         f"documents, if any, are not in the index{doubt}", []))
            continue
        lost = _unindexed(store, entries)
        if lost:
            report.corruptions.append(Corruption(
                orphan, f"orphan shard: no manifest lists it and {len(lost)} of its {len(entries)} document(s) are "
                        "stored nowhere else (index lost or damaged; `encode --repair` re-indexes them from the shard)"
                        + doubt, lost))
    return report


def _unlisted_meanwhile(store, checked: dict[str, dict]) -> set[str]:
    """Which of the shards `checked` (shard -> the manifest [`verify_store`] checked it against, found corrupted,
    missing or unreadable) that manifest no longer lists: deleted by a `prune` or moved away by a `repair` (another
    thread's, through this store object or another, or another process's) since the index was read. The index is read
    again under the index lock (a thread sharing this store object deletes a shard and its manifest in one hold of
    it); where a shard still listed has no file any more, once more after no other writer holds the store's write
    lock (another writer's `prune` deletes each shard before its manifest, under that lock), waited for as
    [`confirmed_orphans`] waits (up to [`ORPHAN_LOCK_WAIT`] seconds; a shard still listed then is named missing)."""
    if not checked:
        return set()

    def unlisted() -> set[str]:
        with store._index_lock:
            store.refresh()
            return {shard for shard, manifest in checked.items() if store._shards.get(shard) != manifest}

    gone = unlisted()
    if any(not os.path.lexists(store.path / shard) for shard in checked if shard not in gone):
        look_again, _ = _wait_for_commits(store)
        if look_again:
            gone = unlisted()
    return gone


def _ambiguous_manifest(store, shard: str) -> Corruption | None:
    """The corruption of a loaded manifest whose bytes are not one unambiguous JSON object (see
    [`hf_readonce.store.manifest.strict_json_problem`]: a key given twice, a NaN), else `None`. Its documents are
    read as the last values say, so none is listed: `repair` rebuilds the manifest from the shard's header."""
    name = f"index/{Path(shard).stem}.json"
    if path_problem(store.path, name) is not None:
        return None  # gone or replaced since it was loaded: the next refresh names it
    try:
        problem = strict_json_problem((store.path / name).read_bytes())
    except OSError:
        return None
    if problem is None:
        return None
    return Corruption(name, f"the manifest is not one unambiguous JSON object: {problem} (its reader keeps the last "
                            "value; `encode --repair` or `repair()` rebuilds it from the shard's header, keeping every "
                            "document)", [])


def _check_shard(store, shard: str, manifest: dict) -> Corruption | None:
    entries = _manifest_entries(manifest, shard)
    manifest_name = f"index/{Path(shard).stem}.json"
    problem = path_problem(store.path, shard)
    if problem is not None:
        return Corruption(shard, f"shard file {problem}", entries)
    path = store.path / shard
    size = path.stat().st_size
    intact = size == manifest.get("file_size") and _file_sha256(path) == manifest.get("file_sha256")
    try:
        header, header_error = read_orphan(store, shard), None
    except ValueError as error:
        header, header_error = None, str(error)
    if intact and header is not None:
        # The file is the one the manifest was written for, so its own header is the truth: every manifest field
        # must agree with it, or reads would fail (or, for an old manifest, pass) against the wrong record.
        differences, concerned = manifest_header_differences(manifest, *header)
        if not differences:
            return None
        listed = [e for e in entries if e.content_hash in concerned]
        unlisted = [e for e in header[2] if e.content_hash in concerned and e.content_hash not in manifest["documents"]]
        return Corruption(manifest_name, f"manifest disagrees with its intact shard {printable(shard)}'s header: "
                          + "; ".join(differences) + " (index damaged; `encode --repair` or `repair()` rebuilds it "
                          "from the shard's header, keeping every document)", listed + unlisted)
    if intact:
        reason = (f"the shard's header is not a hf-readonce shard's ({header_error}) although the file matches its "
                  "manifest's checksum")
    elif size == manifest.get("file_size"):
        reason = "file checksum mismatch"
    else:
        reason = f"file size {size} bytes, expected {manifest.get('file_size')} (truncated or extended)"
    store._drop_handle(shard)
    layout = _lazy_layout(entries) if header is None else None  # a garbled header: the ranges rebuilt
    bad = [entry for entry in entries if _tensors_intact(store, entry, layout) is None]
    store._drop_handle(shard)
    if header is None and not intact:
        reason += f"; its header is unreadable ({header_error})"
    elif header is not None:
        listed = set(manifest["documents"])
        others = [e for e in header[2] if e.content_hash not in listed or header[0].key != manifest["space"]]
        if others:
            reason += (f"; its header lists {len(others)} document(s) its manifest does not "
                       f"({', '.join(e.name for e in others[:5])}): a shard file moved, copied or swapped? `repair` "
                       "keeps those whose tensor bytes pass their checksums")
    if not bad:
        reason += ("; every document's tensor bytes pass their checksums (only header or index bytes changed): "
                   "`repair` rewrites them into a new shard and drops none")
    return Corruption(shard, reason, bad)


def _own_file(store, rel: str) -> Path | None:
    """The path of one shard (`shards/<dir>/<id>.safetensors`) or manifest (`index/<id>.json`) of this store that
    exists (a link counts, as the link itself), or None: never `store.json`, `.lock`, nor a file whose folder is a
    link to somewhere outside the store. What `repair` moves and `prune` deletes goes through this check."""
    source = store.path / rel
    if not is_store_file(rel) or not (source.exists() or source.is_symlink()):
        return None
    root = store.path.resolve()
    parent = source.parent.resolve()
    if parent != root / "index" and not parent.is_relative_to(root / "shards"):
        return None  # a folder linked to somewhere outside the store: never followed
    return source


def _remove_empty_shard_folders(store) -> None:
    """Remove every empty `shards/<dir>/` folder (never a link)."""
    if path_problem(store.path, "shards", folder=True) is not None:
        return
    for shard_dir in (store.path / "shards").iterdir():
        if shard_dir.is_dir() and not shard_dir.is_symlink() and not any(shard_dir.iterdir()):
            with contextlib.suppress(OSError):
                shard_dir.rmdir()


def _retire(store, rel: str, quarantine: Path, moved: list) -> None:
    """Move one shard or manifest into `quarantine/` (never deleted). Refuses anything but a shard
    (`shards/<dir>/<id>.safetensors`) or a manifest (`index/<id>.json`) of this store: never `store.json`, `.lock`,
    nor a file outside the store (those are skipped). A link is moved as a link, never followed."""
    source = _own_file(store, rel)
    if source is None:
        return
    target = quarantine / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    with store._index_lock:  # moved and forgotten at once: a refresh in another thread never sees only the move
        os.replace(source, target)
        moved.append(rel)
        if rel.startswith("index/"):  # the in-memory index follows, so a refresh does not reload it all
            store._forget_manifest(rel.removeprefix("index/"))


def _retire_layout(store, rel: str, quarantine: Path, moved: list) -> None:
    """Move one of the store's own folders that is a link or not a folder (`index`, `shards`, `tmp`,
    `shards/<name>`) into `quarantine/`: a link is moved as a link, its target is never touched."""
    parts = rel.split("/")
    if not (rel in ("index", "shards", "tmp") or (len(parts) == 2 and parts[0] == "shards"
                                                   and parts[1] not in ("", ".", ".."))):
        return
    source = store.path / rel
    if not (source.exists() or source.is_symlink()):
        return
    target = quarantine / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    moved.append(rel)


def _quarantine_folder(path: Path) -> Path:
    """A new `quarantine/<time>-<id>/` folder name under the store at `path` (not created): where one repair (or
    one restored `store.json`) sets aside the files it retires."""
    return path / "quarantine" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _storage_dtype(documents, fallback: str):
    """The floating dtype the salvaged tensors are stored in (what a shard records), else `fallback`."""
    for _, tensors, _ in documents:
        for tensor in tensors.values():
            if tensor.is_floating_point() and tensor.dtype in (resolve_dtype("fp32"), resolve_dtype("fp16"),
                                                               resolve_dtype("bf16")):
                return tensor.dtype
    return resolve_dtype(fallback) if fallback in ("float32", "float16", "bfloat16") else resolve_dtype("fp32")


def _unwritable_folder(path: Path) -> bool:
    """Whether a folder is at `path` that this process cannot write into (write and search permission). False when
    nothing is at the path (a store's folder renamed away by [`remove_empty_store`]: its caller looks again under
    the store's lock) or something that is not a folder is. The folder is opened once and judged through that
    descriptor, so a folder renamed away and made anew meanwhile is never taken for an unwritable one."""
    try:
        descriptor = os.open(path, getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:  # not even opened (no search permission on a parent folder): as the path says
        return os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK)
    try:
        if os.access in os.supports_dir_fd:
            return not os.access(".", os.W_OK | os.X_OK, dir_fd=descriptor)
        return os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK)
    finally:
        os.close(descriptor)


def repair_store(store, report: VerifyReport | None = None) -> dict:
    """Make the store consistent again after `verify` found problems, dropping only documents whose tensor bytes
    fail their checksums. Nothing is deleted, only moved to `quarantine/<time>/`, and nothing outside the store's
    shards, manifests and own folders is ever touched.

    Everything runs under the store's write lock, and the index is re-read under it, so a shard another process
    committed after `report` was made is never mistaken for an orphan (`report` is then only a hint: without it,
    `verify` runs under the same lock). The lock is the one of the store at the path when the repair starts: a store
    removed since it was opened, or while the repair waited for its lock, by the command that had created it and
    failed before storing anything ([`remove_empty_store`]), held nothing to repair; it is created anew, as every
    writer creates it ([`RepresentationStore.check_writable`]: a `logging` warning says so), and the repair finds
    nothing to do. Where it is not created anew (opened with `create=False`, or seen holding documents: removed or
    moved by hand), [`ReadOnlyStoreError`] says that it no longer exists.

    - A store folder that is a link or not a folder (`index/`, `tmp/`, `shards/`, `shards/<space>/`): moved to
      `quarantine/` (a link as a link: its target is never touched), and the folder made anew.
    - A shard whose file differs from its manifest: every document it can still vouch for is copied into a new
      shard, namely each document of its manifest whose tensor bytes pass the manifest's checksums, and each
      document of the file's own header (a swapped or moved shard file) whose bytes pass the header's checksums and
      that the index lacks. Only header or index bytes damaged (a flipped `file_sha256` or `file_size` in the
      manifest, a flipped `model_type` or `format_version` in the header, two shard files swapped): every document
      is kept. Then its manifest and the shard are moved to `quarantine/`.
    - A manifest that fails its schema, or disagrees with its intact shard's header: moved to `quarantine/`; its
      shard is then an orphan, handled below, so the index is rebuilt from the shard's own header.
    - An orphan shard (no manifest lists it: a lost or damaged manifest, a kill before a commit or during a repair):
      its header describes its documents; those the index lacks and whose checksums pass are re-indexed (copied
      into a new shard), the rest counted as dropped, and the orphan is moved to `quarantine/`.

    Each step leaves the store consistent, so a repair killed at any point is finished by the next one, without
    losing an intact document or storing one twice. The dropped documents are simply no longer stored, so the next
    `encode` of the same documents recomputes exactly them (`hf-readonce encode --repair` does both). What is
    left in `tmp/` (a write killed midway, or a file or folder put there by hand) is moved to
    `quarantine/<time>/tmp/` and listed in `quarantined`, never deleted; the store's own temporary files
    (`.tmp-*`) modified in the last five minutes are left where they are (a writability probe of an `encode`
    starting beside it, made without the lock, may be one), for a later repair, except those whose name shows that
    their writer, a process of this machine and PID namespace, no longer runs (a killed `encode`'s: moved at once;
    [`tmp_leftovers`]). Threads sharing the store object wait for the whole salvage (from the damaged shards to the
    re-indexed orphans and the index read again: the store's index lock is held throughout, since the damaged
    shards' documents are dropped from the index before they are salvaged); on a store of many damaged or orphan
    shards, that is seconds. A `quarantine` that is a link, file, FIFO or device is refused before
    anything is moved (a link would carry the store's files outside it).

    Args:
        report ([`VerifyReport`], *optional*): from [`verify`]; computed under the lock when omitted.

    Returns:
        `dict` with `salvaged` and `dropped` (content hashes), `dropped_by_space` (space key -> the content hashes
        dropped from it: a document stored in two spaces is dropped from each), `dropped_spaces` (space key ->
        [`RepresentationSpace`], where known: its fingerprint and settings, also of a space the repair emptied),
        `quarantined` (paths moved, relative to the store, e.g. `tmp/notes.txt`), `quarantine_folder` (where they
        went, `None` when nothing moved) and `report` (the [`VerifyReport`] acted on, naming the store folders moved).

    Raises:
        ReadOnlyStoreError: if the store cannot be written, or its `quarantine` is not a folder (then nothing changes);
            if it no longer exists and is not created anew (see above: nothing is written).
    """
    if store.readonly:
        raise ReadOnlyStoreError(f"store {store.path} was opened read-only.")
    if _unwritable_folder(store.path):  # a store removed meanwhile is no unwritable one: looked at under the lock
        raise ReadOnlyStoreError(f"store {store.path} is not writable (no write permission on the folder).")
    problem = quarantine_problem(store.path)
    if problem is not None:  # before the lock: not even `.lock` is written
        raise _quarantine_refusal(store.path, problem)
    # the lock of the store at the path now, `store.json` there: a store removed (empty) since it was opened, or while
    # this process waited for its lock, is created anew first as every writer creates it, or refused as gone
    with store._write_lock(layout=False):
        problem = quarantine_problem(store.path)  # again under the lock, before anything moves
        if problem is not None:
            raise _quarantine_refusal(store.path, problem)
        with store._index_lock:
            known = dict(store._spaces)  # the spaces as the index listed them, to name a space a repair empties
        quarantine = _quarantine_folder(store.path)
        salvaged, moved, candidates = [], [], set()
        layout = layout_problems(store)
        for rel, _ in layout:
            _retire_layout(store, rel, quarantine, moved)
        store.check_writable()  # makes index/, shards/ and tmp/ anew where they were moved away
        store._reload()
        if report is None:
            report = verify_store(store)
            # what was moved away above is no longer there to verify: named as verify named it before
            report.corruptions[:0] = [_layout_corruption(rel, problem) for rel, problem in layout if rel in moved]
        with store._index_lock:  # the index is in flux until the end: other threads using the store wait for it
            return _salvage(store, report, quarantine, known, salvaged, moved, candidates)


def _salvage(store, report: VerifyReport, quarantine: Path, known: dict, salvaged: list, moved: list,
             candidates: set) -> dict:
    """The part of [`repair_store`] that acts on `report`: salvages, re-indexes and retires (see there), under the
    store's write lock and its index lock; returns what [`repair_store`] returns."""
    # shards whose file differs from their manifest: forget them all first, so that a document indexed only by
    # one of them (e.g. in two swapped shard files) is salvaged from wherever its bytes are intact
    damaged = {c.shard: store._shards[c.shard] for c in report.corruptions
               if not c.shard.startswith("index/") and c.shard in store._shards}
    damaged_stems = {Path(shard).stem for shard in damaged}  # a set: one look-up per corruption, not a walk
    for corruption in report.corruptions:  # (a damaged shard's own manifest is retired with it, below)
        if corruption.shard.startswith("index/") and Path(corruption.shard).stem not in damaged_stems:
            _retire(store, corruption.shard, quarantine, moved)
    for shard in damaged:
        store._forget_shard(shard)
    for shard, manifest in damaged.items():
        space = RepresentationSpace(manifest["space"], manifest["fingerprint"], manifest["settings"],
                                    manifest.get("model_type"), manifest.get("model_name"))
        keep, vouched = [], set()  # vouched: tensor keys of the shard whose manifest record passed
        layout = _lazy_layout(_manifest_entries(manifest, shard))  # used only if the shard's header is garbled
        for entry in _manifest_entries(manifest, shard):
            candidates.add((space.key, entry.content_hash))
            if (space.key, entry.content_hash) in store._entries:
                continue  # stored intact elsewhere (e.g. by a repair killed before it retired this shard)
            tensors = _tensors_intact(store, entry, layout)
            if tensors is not None:
                keep.append((entry.content_hash, tensors, dict(entry.meta)))
                vouched.update(spec["key"] for spec in entry.tensors.values())
        if keep:
            salvaged += store.commit_shard(space, _storage_dtype(keep, manifest["dtype"]), keep)
        try:
            header_space, header_dtype, header_entries = read_orphan(store, shard)
        except ValueError:
            header_entries = []
        keep = []
        for entry in _unindexed(store, header_entries):
            if any(spec["key"] in vouched for spec in entry.tensors.values()):
                continue  # the manifest's record of these tensors passed: a conflicting header record is damage
            tensors = _tensors_intact(store, entry)
            if tensors is not None:
                keep.append((entry.content_hash, tensors, dict(entry.meta)))
        if keep:
            salvaged += store.commit_shard(header_space, _storage_dtype(keep, header_dtype), keep)
        store._drop_handle(shard)
        _retire(store, f"index/{Path(shard).stem}.json", quarantine, moved)
        _retire(store, shard, quarantine, moved)

    store._reload()
    for orphan in orphan_shards(store):
        try:
            space, dtype, entries = read_orphan(store, orphan)
        except ValueError:
            _retire(store, orphan, quarantine, moved)
            continue
        keep, unindexed = [], _unindexed(store, entries)
        for entry in unindexed:
            candidates.add((entry.space, entry.content_hash))
            tensors = _tensors_intact(store, entry)
            if tensors is not None:
                keep.append((entry.content_hash, tensors, dict(entry.meta)))
        store._drop_handle(orphan)
        if keep and len(keep) == len(unindexed) == len(entries) and _indexable_in_place(store, orphan, space):
            # an intact shard that only lost its manifest: indexed where it lies (no copy, no second disk)
            salvaged += store.index_shard(orphan, space, dtype, entries)
            continue
        if keep:
            salvaged += store.commit_shard(space, _storage_dtype(keep, dtype), keep)
        _retire(store, orphan, quarantine, moved)
    for corruption in report.corruptions:  # documents of links, FIFOs, missing shards: nothing to read them from
        if not corruption.shard.startswith("index/"):  # (a damaged manifest's records are rebuilt, not lost)
            candidates.update((e.space, e.content_hash) for e in corruption.documents)
    if "tmp" not in moved:  # (a tmp/ made just now: empty)
        # leftovers of tmp/ (a write killed midway, or what someone put there): set aside, never deleted. The
        # store's own temporary files modified in the last minutes are left alone: writes into tmp/ wait for the
        # lock held here, but a writability probe of another process (`check_writable`) does not
        for stale in tmp_leftovers(store):
            with contextlib.suppress(OSError):
                (quarantine / "tmp").mkdir(parents=True, exist_ok=True)
                os.replace(store.path / stale, quarantine / stale)  # a link as a link, a folder whole
                moved.append(stale)
    _remove_empty_shard_folders(store)
    store._reload()
    lost = sorted(key for key in candidates if key not in store._entries)
    dropped = sorted({h for _, h in lost})
    by_space: dict[str, list[str]] = {}
    for space, doc_hash in lost:
        by_space.setdefault(space, []).append(doc_hash)
    known.update(store._spaces)
    spaces = {key: known[key] for key in by_space if key in known}
    return {"salvaged": salvaged, "dropped": dropped, "dropped_by_space": by_space, "dropped_spaces": spaces,
            "quarantined": moved, "quarantine_folder": str(quarantine) if moved else None, "report": report}


def resolve_spaces(store, spaces, also: Iterable[str] = ()) -> list[str]:
    """The full keys of the representation spaces named by `spaces` (each a space key as `hf-readonce info` prints
    it, i.e. its first 16 characters, the whole key, or any prefix of at least 4 characters naming one space), among
    the store's indexed spaces and the keys `also` (e.g. spaces that only orphan shards still hold).

    Raises:
        TypeError: if `spaces` is not a string or an iterable of strings.
        ValueError: naming the entry, if one names no space of the store or several (the store's spaces listed).
    """
    if isinstance(spaces, str):
        spaces = [spaces]
    try:
        spaces = list(spaces)
    except TypeError:
        raise TypeError(f"`spaces` must be a space key or a list of them, got {type(spaces).__name__}.") from None
    keys = sorted(set(store._spaces) | set(also))
    listed = ", ".join(f"{k[:16]} ({store._spaces[k].model_type if k in store._spaces else 'orphan shards only'})"
                       for k in keys) or "none: the store is empty"
    found = []
    for name in spaces:
        if not isinstance(name, str):
            raise TypeError(f"`spaces` must hold strings, got {type(name).__name__}.")
        if len(name.strip()) < 4:
            raise ValueError(f"space {name!r} is too short: give at least 4 characters of a space key (its spaces: "
                             f"{listed}).")
        matches = [k for k in keys if k.startswith(name.strip().lower())]
        if len(matches) != 1:
            why = "names several" if matches else "names no"
            raise ValueError(f"space {name!r} {why} representation space of store {store.path} (its spaces: "
                             f"{listed}; `hf-readonce info --store {shlex.quote(str(store.path))}` prints them).")
        if matches[0] not in found:
            found.append(matches[0])
    return found


def prune_store(store, spaces=(), *, quarantine: bool = False, dry_run: bool = False) -> dict:
    """Delete what a store no longer needs: every document of the given representation spaces (all their shards and
    manifests; e.g. the states of a model version no longer served), and with `quarantine=True` the `quarantine/`
    folder `repair` filled. The only operation of the store that deletes; every other space's files, `store.json`
    and anything outside the store are never touched (a link is deleted as a link, never followed).

    Runs under the store's write lock, on the index re-read under it, so a shard another process commits meanwhile
    to a pruned space is deleted too, and so are the orphan shards whose own header names a pruned space (left by a
    writer killed before its manifest, or behind an unreadable one: `repair` would otherwise index them again); a
    reader that loaded the index before then finds the pruned documents missing. Each shard is deleted before its
    manifest: a prune killed midway leaves index entries whose shard is missing (`verify` names them), and pruning
    again the spaces `info` still lists finishes it. A shard in a folder linked outside the store is neither
    followed nor deleted, and its manifest is kept (listed in `skipped`). Threads sharing the store object wait for
    the index lock while the index is read at the start and the end (as long as opening the store takes) and while
    each shard is deleted with its manifest ([`_delete_shard`]), not for the whole prune; they find a shard's
    documents listed with their shard file, or not at all.

    Args:
        spaces (`str` or list of `str`, defaults to none): space keys, as [`resolve_spaces`] reads them.
        quarantine (`bool`, defaults to `False`): also delete `quarantine/`.
        dry_run (`bool`, defaults to `False`): only report what would be deleted.

    Returns:
        `dict` with `spaces` (full keys), `documents` (indexed documents deleted), `shards` (paths, relative to the
        store, orphans of those spaces included), `shard_files` (how many of them exist: a rerun of a killed prune
        finds some gone), `skipped` (shards left where they are: behind a link), `documents_left` (the indexed
        documents in them), `skipped_spaces` (the spaces they belong to), `bytes` (size on disk of what is
        deleted), `quarantine_bytes` (size of `quarantine/` deleted, 0 without `quarantine=True`) and `dry_run`.

    Raises:
        ValueError: if neither a space nor `quarantine=True` is given, or as [`resolve_spaces`].
        TypeError: as [`resolve_spaces`]; a `quarantine` or `dry_run` that is not a bool (a string such as `"no"`
            would read as true).
        ReadOnlyStoreError: if the store was opened read-only, cannot be written, or no longer exists (removed or
            moved since it was opened, also one that was empty: prune never creates a store; not with `dry_run`).
        StoreNotFoundError: with `dry_run`, if no store is at the store's path any more (its folder removed or moved
            since the store was opened, or a folder without `store.json` there now): it is not an empty store.
    """
    import shutil

    check_bool(quarantine, "quarantine")  # a string such as "no" would read as true: quarantine/ deleted
    check_bool(dry_run, "dry_run")
    if dry_run:
        _check_still_there(store, "prune")
    if not dry_run:
        if store.readonly:
            raise ReadOnlyStoreError(f"store {store.path} was opened read-only.")
        if _unwritable_folder(store.path):  # a store removed meanwhile is no unwritable one: looked at under the lock
            raise ReadOnlyStoreError(f"store {store.path} is not writable (no write permission on the folder).")
    # the lock of the store at the path now, as `repair` takes it: a store moved or removed since it was opened (by
    # hand, or empty by the command that created it) is said to no longer exist; prune deletes, it never creates one
    lock = contextlib.nullcontext() if dry_run else store._write_lock(layout=False, recreate=False)
    with lock:
        with store._index_lock:  # one state of the index for what is to be deleted (never a reload half done)
            store._reload()
            orphans = {}  # orphan shard -> the space its own header names (repair would index it again)
            for orphan in orphan_shards(store):
                try:
                    space = read_orphan(store, orphan)[0]
                except ValueError:
                    continue
                orphans[orphan] = getattr(space, "key", space)
            keys = resolve_spaces(store, spaces, also=orphans.values())
            if not keys and not quarantine:
                raise ValueError("nothing to prune: name at least one space (`spaces`) or pass `quarantine=True`.")
            # orphans first: a prune killed after them still lists the space, so running it again finishes it
            shards = sorted(o for o, key in orphans.items() if key in keys)
            shards += sorted(shard for shard, manifest in store._shards.items() if manifest["space"] in keys)
            skipped = [shard for shard in shards if _own_file(store, shard) is None
                       and ((store.path / shard).exists() or (store.path / shard).is_symlink())]
            shards = [shard for shard in shards if shard not in skipped]
            documents = sum(1 for entry in store._entries.values()
                            if entry.space in keys and entry.shard not in skipped)
            documents_left = sum(1 for entry in store._entries.values() if entry.shard in skipped)
            owner = {**orphans, **{shard: manifest["space"] for shard, manifest in store._shards.items()}}
            skipped_spaces = sorted({owner[shard] for shard in skipped})
        size = 0
        for shard in shards:
            with contextlib.suppress(OSError):
                size += os.lstat(store.path / shard).st_size
        files = sum(1 for shard in shards if (store.path / shard).exists() or (store.path / shard).is_symlink())
        quarantine_bytes = _disk_usage(store)[1] if quarantine else 0
        if not dry_run:
            for shard in shards:  # the shard first: a kill here leaves an index entry, which a rerun deletes
                _delete_shard(store, shard)
            _remove_empty_shard_folders(store)
            folder = store.path / "quarantine"
            if quarantine and folder.is_symlink():
                folder.unlink()  # the link only: its target is never touched
            elif quarantine and folder.is_dir():
                shutil.rmtree(folder)  # removes links inside it as links
            store._reload()
        return {"spaces": keys, "documents": documents, "shards": shards, "shard_files": files, "skipped": skipped,
                "documents_left": documents_left, "skipped_spaces": skipped_spaces, "bytes": size,
                "quarantine_bytes": quarantine_bytes, "dry_run": bool(dry_run)}


def _delete_shard(store, shard: str) -> None:
    """One step of [`prune_store`], under the store's write lock: delete the shard file `shard` (relative to the
    store; a link as a link), then its manifest where the index loaded one or found it unreadable, and drop both from
    the in-memory index, all in one hold of the index lock: a thread sharing the store finds the shard's documents
    listed with their shard file there, or not at all (a read of one it looked up before then raises
    `MissingRepresentationError`), and waits at most for this one step, never for the whole prune."""
    manifest_name = f"{Path(shard).stem}.json"
    with store._index_lock:
        path = _own_file(store, shard)
        if path is not None:
            path.unlink()
        # its manifest: a loaded one, or one `verify` calls unreadable (an orphan's garbled manifest)
        if shard in store._shards or manifest_name in store._bad_manifests:
            manifest = _own_file(store, f"index/{manifest_name}")
            if manifest is not None:
                manifest.unlink()
            store._forget_manifest(manifest_name)  # (so that the next refresh reloads nothing)


def restore_store_marker(path) -> bool:
    """Write a missing or unreadable `store.json` into a folder that has a store's `index/` and `shards/` folders (a
    deleted marker, or one cut short or garbled: not JSON), so that it opens again; an unreadable one is first moved to
    `quarantine/<time>/store.json` (never deleted). A marker that is JSON is never replaced (a newer format's store
    stays as it is). Run `repair` afterwards (`hf-readonce encode ... --repair` does both).

    Args:
        path (`str` or `os.PathLike`): the store's folder.

    Returns:
        `bool`: True if the marker was written; False (nothing is written or moved) if a readable one exists, the
        folder does not look like a store, or it holds only an empty store's skeleton (a store another process is
        creating right now, whose marker comes next, or an empty one, which opening creates anew).

    Raises:
        ReadOnlyStoreError: if the marker cannot be written (or the unreadable one moved: also when `quarantine` is a
            link, file, FIFO or device, then nothing changes).
    """
    path = Path(path).expanduser().absolute()
    marker = path / "store.json"
    if marker.is_symlink() or (marker.exists() and not marker.is_file()):
        return False
    if path_problem(path, "index", folder=True) is not None or path_problem(path, "shards", folder=True) is not None:
        return False
    unreadable = marker.exists()
    if not unreadable and _being_created(path, any_order=True):
        return False  # an empty store's skeleton: a store being created right now (its marker comes next), or one
        # holding nothing, which opening creates as a new store
    if unreadable:
        try:
            read_store_marker(marker)  # as the store reads it
            return False  # JSON: whatever it says is the store's own business
        except OSError:
            return False  # not garbled, only out of reach now: never replaced
        except ValueError:
            pass
        problem = quarantine_problem(path)
        if problem is not None:  # the unreadable marker would be moved through it
            raise _quarantine_refusal(path, problem)
    data = json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                       "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "restored": True}, indent=2).encode()
    try:
        if unreadable:
            quarantine = _quarantine_folder(path)
            quarantine.mkdir(parents=True)
            os.replace(marker, quarantine / "store.json")
        (path / "tmp").mkdir(exist_ok=True)
        _atomic_write(marker, data, path / "tmp")
    except OSError as error:
        raise ReadOnlyStoreError(f"cannot write {marker}: {error}") from None
    return True


def _own_temp(name: str) -> bool:
    """Whether the store's temporary file `name` was made by this very process (its name records this process's id
    and scope, [`hf_readonce.store.shards._make_temp`]; never on a platform without `/proc`)."""
    match = _TEMP_NAME.fullmatch(name)
    return match is not None and int(match.group(1)) == os.getpid() and match.group(2) == _process_scope()


def _walk_error(error: OSError):
    raise error


def _only_a_skeleton(path: Path, lock_held: bool = False) -> bool:
    """Whether the folder `path` holds nothing but the skeleton of a store with nothing stored: at most `store.json`
    (a regular file, a hf-readonce store's marker: [`hf_readonce.store.shards.read_store_marker`] gives its `format`)
    and `.lock` (a regular file; empty unless `lock_held`: a lock falling back to a soft lock, where the file system
    has no `flock`, writes its holder into it), `shards/` holding only empty folders (a space's, made before its first
    shard), an empty `index/`, and a `tmp/` holding only the store's own temporary files that no other process may be
    using (this process's, or leftovers: [`_live_tmp`]); none of them a link. Anything else (a shard, a manifest, a
    `quarantine/`, a file put there by hand, another program's `store.json` or `.lock`, a writability probe of
    another process starting to use the store) may be someone's: False; also when any of it cannot be listed or read
    (an unlisted folder may hold a shard)."""
    now = time.time()
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == "store.json":
                    if not entry.is_file(follow_symlinks=False):
                        return False
                    try:
                        marker = read_store_marker(Path(entry.path))
                    except ValueError:
                        return False
                    if not isinstance(marker, dict) or marker.get("format") != FORMAT_NAME:
                        return False
                elif entry.name == ".lock":
                    if not entry.is_file(follow_symlinks=False):
                        return False
                    if not lock_held and entry.stat(follow_symlinks=False).st_size:
                        return False
                elif entry.name == "shards" and entry.is_dir(follow_symlinks=False):
                    for root, folders, files in os.walk(entry.path, onerror=_walk_error):
                        if files or any(os.path.islink(os.path.join(root, name)) for name in folders):
                            return False
                elif entry.name == "index" and entry.is_dir(follow_symlinks=False):
                    with os.scandir(entry.path) as inside:
                        if any(True for _ in inside):
                            return False
                elif entry.name == "tmp" and entry.is_dir(follow_symlinks=False):
                    with os.scandir(entry.path) as inside:
                        for item in inside:
                            if not (item.name.startswith(".tmp-") and item.is_file(follow_symlinks=False)):
                                return False
                            if _live_tmp(item, now) and not _own_temp(item.name):
                                return False
                else:
                    return False
    except OSError:
        return False
    return True


def _put_back(hidden: Path, path: Path) -> None:
    """Rename the store's folder, renamed away to `hidden` by [`remove_empty_store`], back to `path`, where it holds
    something after all; where it cannot be (a new folder at `path`: another process created a store there
    meanwhile), it stays at `hidden` and a warning names it, so that what it holds is never hidden in silence."""
    try:
        os.rename(hidden, path)
    except OSError as error:
        logger.warning("hf-readonce: the empty store %s was renamed to %s to be removed, but something was put into "
                       "it meanwhile and it cannot be renamed back (%s); it is kept at %s: look into it and move "
                       "what it holds where it belongs.", path, hidden, error.strerror or error, hidden)


_SKELETON_FOLDERS = ("tmp", "index", "shards")


def _empty_skeleton_folders(folder: Path) -> None:
    """Remove what [`remove_empty_store`] found in the store's folders under `folder` (the store's own temporary
    files, empty space folders) and the folders themselves, bottom up; what cannot be removed stays (no error)."""
    for sub in _SKELETON_FOLDERS:
        top = folder / sub
        if top.is_dir() and not top.is_symlink():
            for root, folders, files in os.walk(top, topdown=False):
                for name in files:
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(root, name))
                for name in folders:
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(root, name))
            with contextlib.suppress(OSError):
                top.rmdir()


def _skeleton_folders_left(folder: Path) -> bool:
    """Whether any of the store's folders (`tmp/`, `index/`, `shards/`; a link or file of that name counts) is at
    `folder`."""
    return any(os.path.lexists(folder / sub) for sub in _SKELETON_FOLDERS)


def remove_empty_store(path) -> bool:
    """Remove the folder of a store that holds nothing stored, only the skeleton a [`RepresentationStore`] creates
    (`store.json`, an empty `.lock`, empty `shards/` space folders, `index/`, `tmp/` with no temporary file of a
    write under way): what a command undoes when it created a store and failed before storing anything
    (`hf-readonce answer --encode-missing`; `encode` of a model that cannot be loaded). Nothing a user or another
    process stored is ever removed:

    - a folder holding anything else (a shard, a manifest, a file put there by hand, a `store.json` that is not a
      hf-readonce store's marker, a `.lock` holding bytes, a folder that cannot be listed) is kept untouched;
    - the store's write lock (`STORE/.lock`, which every shard commit and `repair` holds) is taken without waiting:
      a process holding it may be committing, and the store is kept;
    - under it, the folder is checked, then renamed to a hidden sibling (`.<name>.removing-<hex>`, atomically: a
      process opening the store from then on finds no folder and creates a new store, never a half-removed one),
      checked again (a writability probe is made without the lock) and only then emptied; `store.json` goes last,
      once the store's folders are gone, and the folder is removed once the lock is released. Where the second
      check finds anything, or anything is left that cannot be removed, the folder is renamed back (where a new
      folder has taken its name meanwhile, it stays hidden and a `logging` warning names it); empty folders of the
      skeleton made again meanwhile (by a writer's check, made without the lock, that looked the path up just before
      the rename) are emptied again, a few times at most.

    A process that opened the store before (a second job started together with the failed one on the same new
    store) and writes after the removal creates the store anew at the same path, as opening a new store creates it,
    under its write lock, and commits into that: its job succeeds, and it never writes into the folder being removed
    ([`RepresentationStore.check_writable`]). On a network file system whose clients cache paths (NFS), a
    process on another machine may still reach the renamed folder by the old path for a while: what it writes there
    keeps the folder, renamed back. On Windows a folder holding an open file (the held `.lock`) can usually not be
    renamed: the store is then kept.

    Args:
        path (`str` or `os.PathLike`): the store's folder.

    Returns:
        `bool`: True if the folder was removed; False if it holds anything else, is missing, is a link, its lock is
        held, or it could not be renamed (then nothing is removed).
    """
    path = Path(path).expanduser().absolute()
    if path.is_symlink() or not path.is_dir() or not _only_a_skeleton(path):
        return False  # before the lock: no `.lock` is made in a folder that is not a store's skeleton
    lock = FileLock(str(path / ".lock"), timeout=0)
    try:
        lock.acquire()
    except (Timeout, OSError):  # held: a writer may be committing into it
        return False
    try:
        if not _only_a_skeleton(path, lock_held=True):  # a shard committed between the first look and the lock
            return False
        hidden = path.with_name(f".{path.name}.removing-{uuid.uuid4().hex[:16]}")
        try:
            os.rename(path, hidden)
        except OSError:
            return False
        if not _only_a_skeleton(hidden, lock_held=True):
            _put_back(hidden, path)
            return False
        for _ in range(3):  # again where only a skeleton's folders came back: a writer looked the path up just
            _empty_skeleton_folders(hidden)  # before the rename, and its check made them here without the lock
            if not _skeleton_folders_left(hidden) or not _only_a_skeleton(hidden, lock_held=True):
                break
        if _skeleton_folders_left(hidden):
            _put_back(hidden, path)  # something could not be removed: the store stays whole, marker included
            return False
        with contextlib.suppress(OSError):
            (hidden / "store.json").unlink()
    finally:
        with contextlib.suppress(Exception):
            lock.release()
    with contextlib.suppress(OSError):
        (hidden / ".lock").unlink()
    try:
        hidden.rmdir()
    except OSError:  # written into after all (by its old path, on a network file system): back in view
        _put_back(hidden, path)
        return False
    return True


def bytes_per_1000_tokens(store, fingerprint: str, settings: Mapping,
                          tokens_tensor: str = "input_ids") -> float:
    """Shard bytes on disk per 1,000 stored tokens of one space (tokens counted as the first dimension of
    `tokens_tensor`). Returns NaN when nothing is stored."""
    shards = {e.shard for e in store.entries(fingerprint, settings)}
    tokens = sum(e.tensors[tokens_tensor]["shape"][0] for e in store.entries(fingerprint, settings)
                 if tokens_tensor in e.tensors)
    size = sum((store.path / s).stat().st_size for s in shards)
    return size / tokens * 1000 if tokens else math.nan


__all__ = ["ORPHAN_LOCK_WAIT", "Corruption", "VerifyReport", "bytes_per_1000_tokens", "confirmed_orphans",
           "layout_problems", "model_names", "orphan_shards", "prune_store", "quarantine_problem", "read_orphan",
           "remove_empty_store", "repair_store", "resolve_spaces", "restore_store_marker", "store_info", "verify_store"]
