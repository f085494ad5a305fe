"""The on-disk format of a store (format version 1, unchanged since 0.1.0): format constants, storable dtypes,
tensor checksums, atomic, fsync'ed file writes, and the skeleton a store's creation makes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path

import torch
import xxhash

FORMAT_NAME = "hf-readonce-representation-store"
FORMAT_VERSION = 1
DEFAULT_SHARD_SIZE_BYTES = 64 * 1024 * 1024

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}
_STORABLE = {
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool,
}


def resolve_dtype(dtype: str | torch.dtype, name: str = "dtype") -> torch.dtype:
    """Storage dtype of floating tensors from `"fp32"/"float32"`, `"fp16"/"float16"`, `"bf16"/"bfloat16"` or a
    `torch.dtype` among those three.

    Args:
        dtype (`str` or `torch.dtype`): the storage dtype asked for.
        name (`str`, defaults to `"dtype"`): the argument the error names (`"store_dtype"` for the functions that
            take the storage dtype beside a compute dtype, e.g. [`~hf_readonce.representations.fill_store`]).

    Raises:
        ValueError: for any other value, naming `name`.
    """
    if isinstance(dtype, torch.dtype):
        if dtype in (torch.float32, torch.float16, torch.bfloat16):
            return dtype
    elif isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ValueError(f"`{name}` must be one of fp32, fp16, bf16 (or float32/float16/bfloat16), got {dtype!r}.")


def read_store_marker(path: Path):
    """The parsed JSON of a store's `store.json` (UTF-8, a byte-order mark allowed), whatever it holds: the one
    reader of the store's marker (opening a store, `restore_store_marker`).

    Args:
        path (`Path`): the `store.json` file.

    Returns:
        the JSON value (a store's is a dict with `format` and `format_version`).

    Raises:
        OSError: the file cannot be read (permissions, I/O). ValueError: it is not UTF-8 JSON (cut short, garbled).
    """
    return json.loads(Path(path).read_bytes().decode("utf-8-sig"))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensors_checksum(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 hex (64 digits) over every tensor's name, dtype, shape and raw bytes, in name order: the strong
    checksum recorded for each stored document, checked by `verify` and `repair` and on reads of documents written
    before [`tensors_read_checksum`] existed (also recomputable from an exported dataset row)."""
    return _tensors_digest(hashlib.sha256(), tensors)


def tensors_read_checksum(tensors: Mapping[str, torch.Tensor]) -> str:
    """xxh3-128 hex (32 digits) over the same bytes as [`tensors_checksum`]: the checksum every read checks
    (`verify_reads`). It finds the same accidental corruption (a flipped bit, a truncated or swapped file) at about
    6 GB/s on one core against SHA-256's 1.2 GB/s with SHA-NI, which kept checked reads of decoder KV caches (tens of
    MiB per request) above a tenth of the time to first token. Like SHA-256 here it guards
    against accidents, not against someone who can rewrite the manifest.

    Args:
        tensors (`Mapping[str, torch.Tensor]`): tensors of any shape, dtype and device (each is hashed with its
            name, dtype and shape, so a reshaped tensor has another checksum).
    """
    return _tensors_digest(xxhash.xxh3_128(), tensors)


def _tensors_digest(digest, tensors: Mapping[str, torch.Tensor]) -> str:
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}|{_dtype_name(tensor.dtype)}|{list(tensor.shape)}|".encode())
        digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return memoryview(flat.view(torch.uint8).numpy())


# ---------------------------------------------------------------------------------------------------------- files
def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_PROCESS_SCOPE: tuple[int | None, str | None] = (None, None)  # (the pid it was read in, the scope)
_TEMP_NAME = re.compile(r"\.tmp-[0-9a-f]{32}-p([1-9][0-9]{0,9})-([0-9a-f]{16})(?:\.[0-9A-Za-z]+)?")


def _process_scope() -> str | None:
    """16 hex digits naming where this process's id names one process: this boot of this machine
    (`/proc/sys/kernel/random/boot_id`) and this process's PID namespace (`/proc/self/ns/pid`: a container has its
    own). `None` where either cannot be read (not Linux, `/proc` not mounted or not this namespace's)."""
    global _PROCESS_SCOPE
    pid = os.getpid()
    if _PROCESS_SCOPE[0] != pid:  # read again in a forked child (it may be in another namespace)
        try:
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
            namespace = os.readlink("/proc/self/ns/pid")
            scope = hashlib.sha256(f"{boot}\0{namespace}".encode()).hexdigest()[:16] if boot and namespace else None
        except (OSError, UnicodeDecodeError):
            scope = None
        _PROCESS_SCOPE = (pid, scope)
    return _PROCESS_SCOPE[1]


def _temp_writer_gone(name: str) -> bool:
    """Whether the process that made the store's temporary file `name` has provably ended: the name records its
    process id and where that id applies (`.tmp-<hex>-p<pid>-<scope><suffix>`, [`_make_temp`]), the scope is this
    process's (same boot, same PID namespace) and no process has that id (`os.kill(pid, 0)` fails with
    `ProcessLookupError`; a zombie not yet reaped still has it). False whenever that cannot be proved: a name of an
    earlier release or of another machine or container, an id taken by another process since (a writer is never
    taken for dead; its file is then judged by its age), or a platform without `/proc`.

    Args:
        name (`str`): a file name in the store's `tmp/`.

    Returns:
        `bool`: True only when the file's writer is certainly not running.
    """
    match = _TEMP_NAME.fullmatch(name)
    if match is None or match.group(2) != _process_scope():  # (never reached without /proc: Windows' os.kill kills)
        return False
    pid = int(match.group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError, ValueError):  # PermissionError: it runs, as another user
        return False
    return False


def _make_temp(directory: Path, suffix: str, dir_fd: int | None = None) -> tuple[int, str]:
    """Create a new temporary file in `directory` (same file system as the destination, so the rename is atomic),
    named `.tmp-<32 hex><suffix>`, or on Linux `.tmp-<32 hex>-p<pid>-<scope><suffix>`: the writer's process id and
    where it applies ([`_process_scope`]), so that `verify` and `repair` tell a file whose writer was killed from one
    being written ([`_temp_writer_gone`]).

    It is created with mode 0o666 less the process's umask, as `open()` creates files (unlike `tempfile.mkstemp`,
    whose 0o600 would keep a store written by one user or service account unreadable to every other): under the
    usual umask 022 a store's files are readable by group and others, under 077 by their owner only.

    Args:
        directory (`Path`): the folder. suffix (`str`): the name's end (e.g. `.json`, `.probe`).
        dir_fd (`int`, *optional*): an open descriptor of `directory`: the file is created through it (in that
            folder, also if it was renamed meanwhile); the path returned is then the name joined to `directory`.

    Returns:
        `(int, str)`: an open file descriptor (write-only) and the file's path.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    scope = _process_scope()
    writer = "" if scope is None else f"-p{os.getpid()}-{scope}"
    for _ in range(100):
        path = os.path.join(directory, f".tmp-{uuid.uuid4().hex}{writer}{suffix}")
        try:
            return os.open(path if dir_fd is None else os.path.basename(path), flags, 0o666, dir_fd=dir_fd), path
        except FileExistsError:  # pragma: no cover - 122 random bits
            continue
    raise FileExistsError(f"no free temporary file name in {directory}")


def _atomic_write(path: Path, data: bytes, tmp_dir: Path) -> None:
    """Write `data` to `path` atomically: temporary file, fsync, rename, fsync of the folder."""
    fd, tmp = _make_temp(tmp_dir, path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksums_match(entry, tensors: Mapping[str, torch.Tensor], strong: bool) -> bool:
    """Whether `tensors` are the bytes `entry` recorded: its xxh3-128 read checksum where it has one (documents
    written by this release on), else its SHA-256; `strong` (verify, repair) checks the SHA-256 as well."""
    if entry.xxh3_128 and tensors_read_checksum(tensors) != entry.xxh3_128:
        return False
    if strong or not entry.xxh3_128:
        return tensors_checksum(tensors) == entry.sha256
    return True


_LAYOUT = ("shards", "index", "tmp")


def _some_entries(path: Path, shown: int = 5) -> str:
    """The names in the folder `path`, sorted, for an error message: at most `shown` of them, then how many more
    (dot files too, e.g. a `.lock` that `ls` does not show, which alone makes a folder look empty); "nothing readable"
    when it cannot be listed."""
    try:
        names = sorted(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else "")
                       for entry in os.scandir(path))
    except OSError:
        return "nothing readable"
    if not names:
        return "nothing now"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _no_store_reason(path: Path) -> str:
    """What is at `path`, which holds no store, for a message saying so: nothing, something that is not a folder, an
    empty folder, or a folder holding no `store.json` (naming what it holds, [`_some_entries`]). A folder without
    `store.json` is not a store, also an empty one made where a store was (a store moved away and `mkdir` run at its
    old path)."""
    if not os.path.lexists(path):
        return "nothing is there"
    if not os.path.isdir(path):
        return "it is not a folder"
    held = _some_entries(path)
    if held == "nothing now":
        return "it is an empty folder, with no store.json, and a folder without one is not a store"
    return f"its folder holds no store.json, only {held}, and a folder without one is not a store"


def _being_created(path: Path, lock_held: bool = False, any_order: bool = False) -> bool:
    """Whether the folder `path` (which has no `store.json`) holds nothing but the empty skeleton of a store that
    another process is creating right now: the folders `RepresentationStore._create` makes, in the order it makes
    them (`shards/`, then `index/`, then `tmp/`, so only `shards/`; `shards/` and `index/`; or all three), not
    links, the first two empty, `tmp/` holding only the store's own temporary files (`.tmp-*`, the marker being
    written), and perhaps `.lock` when it is an empty file (the lock never writes into it; `rm -r STORE/*` of a
    store leaves it, as a dot file), or any regular file with `lock_held` (this process holds the lock on it: a soft
    lock, which filelock falls back to where the file system has no `flock`, writes its holder into it).
    Such a folder is created again (the marker written by whichever process gets there first or last: they are alike)
    instead of being taken for a store whose marker was deleted: nothing is stored in it. A `.lock` holding bytes
    (without `lock_held`), or a `tmp/` or `index/` without the folders made before it, is no store's making and may
    be a user's: such a folder is refused, never taken over. With `any_order`, the store's folders, empty, are taken
    in any number and order (a writer's check, made without the lock, makes them one by one: when the store is
    renamed away between two of them, the later ones land in the folder that is at the path by then)."""
    found = set()
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == ".lock":
                    lock = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(lock.st_mode) and (lock_held or lock.st_size == 0):
                        continue
                    return False
                if entry.name not in _LAYOUT or not entry.is_dir(follow_symlinks=False):
                    return False
                with os.scandir(entry.path) as inside:
                    if any(entry.name != "tmp" or not item.name.startswith(".tmp-")
                           or not item.is_file(follow_symlinks=False) for item in inside):
                        return False
                found.add(entry.name)
    except OSError:
        return False
    return any_order or tuple(sorted(found, key=_LAYOUT.index)) == _LAYOUT[: len(found)]


__all__ = ["DEFAULT_SHARD_SIZE_BYTES", "FORMAT_NAME", "FORMAT_VERSION", "resolve_dtype", "tensors_checksum",
           "tensors_read_checksum"]
