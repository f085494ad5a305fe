"""Removing the store a failed `answer --encode-missing` created (`hf_readonce.cli._remove_empty_store`, through
`hf_readonce.store.maintenance.remove_empty_store`): only the skeleton of a store that holds nothing, never what a user
or another process stored, also when another process writes into it while it is being removed."""

import os
import pathlib

import pytest
import torch
from filelock import FileLock, Timeout

from hf_readonce import cli
from hf_readonce.store import RepresentationStore, content_hash
from hf_readonce.store.maintenance import remove_empty_store
from hf_readonce.store.shards import _process_scope
from tests.store.test_campaign import FP, SETTINGS

TEXT = "A document another process stores meanwhile."


class _Listing(list):
    """What `os.scandir` returns, listed already (a context manager, as the real one)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _on_looking_into_index(monkeypatch, path, look, act):
    """Call `act()` right after the `look`-th listing of `path / "index"` (1: the first) has been read, whether it is
    listed with `os.scandir` or `Path.glob`: a writer acting between a look into the store and what follows it."""
    index, looks = path / "index", [0]
    real_scandir, real_glob = os.scandir, pathlib.Path.glob

    def after(listing):
        looks[0] += 1
        if looks[0] == look:
            act()
        return listing

    def scandir(where="."):
        if os.fspath(where) == str(index):
            return after(_Listing(real_scandir(where)))
        return real_scandir(where)

    def glob(self, pattern, *args, **kwargs):
        if self == index:
            return iter(after(list(real_glob(self, pattern, *args, **kwargs))))
        return real_glob(self, pattern, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(pathlib.Path, "glob", glob)
    return looks


def _put(path, **kwargs):
    return RepresentationStore(path, **kwargs).put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)},
                                                    meta={"id": "theirs"})


def test_a_shard_committed_after_the_store_was_found_empty_keeps_the_store(tmp_path, monkeypatch):
    """Another process commits a shard into the store just after the removal looked and found it empty: the store is
    kept, opens and serves the document. The removal unlinked `store.json` and `.lock` after its look, leaving the
    shard in a folder that no longer opened as a store (and a second `.lock` for the next writer)."""
    top = tmp_path / "new"
    path = top / "store"
    RepresentationStore(path)  # as `answer --encode-missing` creates it
    looks = _on_looking_into_index(monkeypatch, path, 1, lambda: _put(path))
    cli._remove_empty_store(path, top)
    monkeypatch.undo()
    assert looks[0] >= 1
    store = RepresentationStore(path, create=False)
    assert store.get(FP, SETTINGS, content_hash(TEXT))["x"].tolist() == [1.0, 1.0, 1.0]
    assert (path / "store.json").is_file() and store.verify().ok


def test_a_writer_waits_for_the_removal_holding_the_stores_lock(tmp_path, monkeypatch):
    """Between its second look (under the store's write lock) and the removal, a writer cannot commit: its lock
    is held (a writer that does not wait is refused), and nothing is stored that the removal would take."""
    top = tmp_path / "new"
    path = top / "sub" / "store"
    RepresentationStore(path)
    refused = []

    def writer():
        with pytest.raises(Timeout):
            _put(path, lock_timeout=0)
        refused.append(True)

    _on_looking_into_index(monkeypatch, path, 2, writer)
    cli._remove_empty_store(path, top)
    monkeypatch.undo()
    assert refused == [True] and not top.exists()  # the folders this run created, up to `top`


def test_only_an_empty_skeleton_is_removed(tmp_path):
    """A store with an empty space folder (made before its first shard) and this process's leftover temporary file
    goes, with its lock file; a store whose lock another writer holds, a store holding a file put there by hand, a
    folder that is not a store, and a link stay untouched."""
    path = tmp_path / "s"
    RepresentationStore(path)
    (path / "shards" / ("0" * 24)).mkdir()
    (path / ".lock").touch()
    if _process_scope() is not None:
        (path / "tmp" / f".tmp-{'a' * 32}-p{os.getpid()}-{_process_scope()}.safetensors").write_bytes(b"half")
    assert remove_empty_store(path) and not path.exists()
    assert not [p for p in tmp_path.iterdir() if ".removing-" in p.name]

    RepresentationStore(path)
    with FileLock(str(path / ".lock")):  # another writer committing
        assert not remove_empty_store(path)
    assert (path / "store.json").is_file()

    (path / "tmp" / "notes.txt").write_text("mine")
    assert not remove_empty_store(path) and (path / "tmp" / "notes.txt").read_text() == "mine"
    (path / "tmp" / "notes.txt").unlink()
    (path / "index" / "x.json").write_text("{}")
    assert not remove_empty_store(path) and (path / "store.json").is_file()

    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("x")
    assert not remove_empty_store(other) and (other / "data.txt").exists() and not (other / ".lock").exists()
    empty = tmp_path / "empty-store"
    RepresentationStore(empty)
    link = tmp_path / "link"
    link.symlink_to(empty)
    assert not remove_empty_store(link) and link.is_symlink() and (empty / "store.json").is_file()
    assert not remove_empty_store(tmp_path / "missing")


def test_a_probe_of_another_running_process_keeps_the_store(tmp_path):
    """A writability probe (made without the lock) of another running process says it is starting to use the store:
    kept."""
    if _process_scope() is None:
        pytest.skip("needs /proc (Linux): a temporary file names its writer's process there")
    path = tmp_path / "s"
    RepresentationStore(path)
    probe = path / "tmp" / f".tmp-{'b' * 32}-p{os.getppid()}-{_process_scope()}.probe"
    probe.write_bytes(b"")
    assert not remove_empty_store(path) and probe.exists() and (path / "store.json").is_file()
