"""Removing the store a failed `answer --encode-missing` created (`hf_readonce.cli._remove_empty_store`, through
`hf_readonce.store.maintenance.remove_empty_store`): only the skeleton of a store that holds nothing, never what a user
or another process stored, also when another process writes into it while it is being removed; a process opening it
meanwhile opens, creates or misses the store that is at the path then."""

import inspect
import json
import os
import pathlib
import shutil

import pytest
import torch
from filelock import FileLock, SoftFileLock, Timeout

import hf_readonce.store.maintenance as maintenance
import hf_readonce.store.store as store_module
from hf_readonce import cli
from hf_readonce.store import ReadOnlyStoreError, RepresentationStore, StoreNotFoundError, content_hash
from hf_readonce.store.maintenance import remove_empty_store
from hf_readonce.store.shards import FORMAT_NAME, FORMAT_VERSION, _process_scope
from hf_readonce.store.store import _holds_lock_file
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


def _on_renaming(monkeypatch, path, before=None, after=None):
    """Call `before()` right before the removal renames `path` away (after its look under the lock) and `after(hidden)`
    right after: what another process does between the two."""
    real_rename = os.rename

    def rename(src, dst, *args, **kwargs):
        if os.fspath(src) == str(path) and ".removing-" in os.fspath(dst):
            if before is not None:
                before()
            real_rename(src, dst, *args, **kwargs)
            if after is not None:
                after(pathlib.Path(dst))
            return None
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)


def _hidden(folder):
    return [p.name for p in folder.iterdir() if ".removing-" in p.name]


def test_a_file_put_in_the_store_just_before_it_is_renamed_away_keeps_it(tmp_path, monkeypatch):
    """A file put into the store after the look under the lock, before the rename (a writability probe, made without
    the lock, or a file put there by hand), is found by the look after the rename: the store is renamed back, the
    file kept. Without that look the removal emptied `tmp/` of it."""
    path = tmp_path / "s"
    RepresentationStore(path)
    _on_renaming(monkeypatch, path, before=lambda: (path / "tmp" / "notes.txt").write_text("mine"))
    assert not remove_empty_store(path)
    monkeypatch.undo()
    assert (path / "tmp" / "notes.txt").read_text() == "mine" and (path / "store.json").is_file()
    assert not _hidden(tmp_path)


def test_a_store_that_cannot_be_renamed_back_is_named(tmp_path, monkeypatch, caplog):
    """When the folder renamed away holds something after all and cannot be renamed back (another process created a
    new store at the path meanwhile), it stays where it is and a warning names it: never hidden in silence."""
    path = tmp_path / "s"
    RepresentationStore(path)
    _on_renaming(monkeypatch, path, before=lambda: (path / "tmp" / "notes.txt").write_text("mine"),
                 after=lambda hidden: RepresentationStore(path))
    with caplog.at_level("WARNING", logger="hf_readonce.store.maintenance"):
        assert not remove_empty_store(path)
    monkeypatch.undo()
    [hidden] = _hidden(tmp_path)
    assert (tmp_path / hidden / "tmp" / "notes.txt").read_text() == "mine"
    assert hidden in caplog.text and str(path) in caplog.text
    assert RepresentationStore(path, create=False).verify().ok  # the other process's store


def test_something_written_into_the_renamed_folder_is_put_back(tmp_path, monkeypatch):
    """A process that still reaches the renamed folder by its old path (a network file system's client caching the
    path for a while) writes into it after the lock is released: the folder is not removed but renamed back, in
    view (it no longer holds `store.json`: opening it says so), never left hidden."""
    import hf_readonce.store.maintenance as maintenance

    path = tmp_path / "s"
    RepresentationStore(path)
    hidden = []
    _on_renaming(monkeypatch, path, after=hidden.append)

    class Lock(FileLock):
        def release(self, *args, **kwargs):
            super().release(*args, **kwargs)
            (hidden[0] / "theirs.txt").write_text("theirs")

    monkeypatch.setattr(maintenance, "FileLock", Lock)
    assert not remove_empty_store(path)
    monkeypatch.undo()
    assert (path / "theirs.txt").read_text() == "theirs" and not _hidden(tmp_path)


def test_a_folder_that_cannot_be_listed_keeps_the_store(tmp_path, monkeypatch):
    """A space folder under `shards/` that cannot be listed (another account's, say) may hold a shard: the store is
    kept as it is, marker included. `os.walk` skipped the folder in silence, so it looked empty; the store was
    renamed away, its `store.json` deleted and the folder left hidden, holding the shard."""
    path = tmp_path / "s"
    RepresentationStore(path)
    space = path / "shards" / ("0" * 24)
    space.mkdir()
    (space / "theirs.safetensors").write_bytes(b"shard")
    real_scandir = os.scandir

    def scandir(where="."):
        if os.path.basename(os.fspath(where)) == space.name:
            raise PermissionError(13, "Permission denied", os.fspath(where))
        return real_scandir(where)

    monkeypatch.setattr(os, "scandir", scandir)
    assert not remove_empty_store(path)
    monkeypatch.undo()
    assert (space / "theirs.safetensors").read_bytes() == b"shard" and (path / "store.json").is_file()
    assert not _hidden(tmp_path)


def test_a_folder_whose_store_json_or_lock_is_not_a_stores_is_kept(tmp_path):
    """`store.json` that is not a hf-readonce store's marker, or a `.lock` holding bytes (a store's lock file is
    empty), is someone else's file: the folder is kept. Both were removed as a store's skeleton."""
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "store.json").write_text('{"my": "settings"}')
    assert not remove_empty_store(mine) and (mine / "store.json").read_text() == '{"my": "settings"}'
    (mine / "store.json").write_text("not json")
    assert not remove_empty_store(mine) and (mine / "store.json").read_text() == "not json"
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / ".lock").write_text("pid 12")
    assert not remove_empty_store(locked) and (locked / ".lock").read_text() == "pid 12"
    # a store's own marker (also of another format version) and an empty lock file go
    store = tmp_path / "s"
    RepresentationStore(store)
    (store / ".lock").touch()
    assert remove_empty_store(store) and not store.exists()


def test_a_store_whose_skeleton_cannot_be_emptied_stays_whole(tmp_path, monkeypatch):
    """A leftover temporary file that cannot be deleted (a read-only mount, another account's file) keeps the store
    where it was, its `store.json` included: it still opens. The marker was deleted anyway and the folder left
    hidden."""
    path = tmp_path / "s"
    RepresentationStore(path)
    leftover = path / "tmp" / f".tmp-{'c' * 32}.safetensors"
    leftover.write_bytes(b"half")
    os.utime(leftover, (0, 0))  # long ago: a killed writer's
    real_unlink = os.unlink

    def unlink(where, *args, **kwargs):
        if os.path.basename(os.fspath(where)) == leftover.name:
            raise PermissionError(13, "Permission denied", os.fspath(where))
        return real_unlink(where, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert not remove_empty_store(path)
    monkeypatch.undo()
    assert leftover.exists() and RepresentationStore(path, create=False).verify().ok and not _hidden(tmp_path)



def test_an_empty_folder_a_writer_makes_in_the_renamed_folder_is_removed_with_it(tmp_path, monkeypatch, caplog):
    """A writer about to write looked the store's path up just before the removal renamed it away; its writability
    check (made without the lock) then makes `index/` in the renamed folder, after the removal emptied it, and the
    writer creates the store anew at the path. What was made is an empty folder of a store's skeleton, as the
    removal takes away: the renamed folder is emptied again and removed, and the new store is left as it is. It was
    left hidden beside the store, with a warning to look into it and move what it holds."""
    path = tmp_path / "s"
    RepresentationStore(path)
    writer = RepresentationStore(path)
    real_rmdir, made = os.rmdir, []

    def rmdir(where, *args, **kwargs):
        real_rmdir(where, *args, **kwargs)
        where = pathlib.Path(os.fspath(where))
        if not made and where.name == "shards" and ".removing-" in where.parent.name:
            (where.parent / "index").mkdir()
            made.append(writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)}))

    monkeypatch.setattr(os, "rmdir", rmdir)
    with caplog.at_level("WARNING", logger="hf_readonce.store.maintenance"):
        assert remove_empty_store(path)
    monkeypatch.undo()
    assert made == [True] and not _hidden(tmp_path) and "cannot be renamed back" not in caplog.text
    reopened = RepresentationStore(path, create=False)
    assert len(reopened) == 1 and reopened.verify().ok

@pytest.mark.parametrize("removed", ["before the writer", "before the commit"])
def test_a_second_job_on_the_removed_store_creates_it_anew_and_commits(tmp_path, caplog, removed):
    """Two jobs open one new store; the first fails before storing anything and its clean-up removes the store (and
    the folders it created above it); the second, which opened the store before, writes afterwards: the store is
    created anew at the same path, as opening it creates a new one, and its documents read back, `verify` clean. A
    third handle, also opened before, then commits into that store as it is. The writer failed with "the store no
    longer exists"."""
    top = tmp_path / "new"
    path = top / "sub" / "store"
    RepresentationStore(path)  # the failed job's handle
    second, third = RepresentationStore(path), RepresentationStore(path)
    states = {"x": torch.arange(3.0)}
    with caplog.at_level("WARNING", logger="hf_readonce.store.store"):
        if removed == "before the writer":
            cli._remove_empty_store(path, top)
            assert not top.exists()
        with second.writer(FP, SETTINGS, dtype="fp32") as writer:
            writer.add(content_hash(TEXT), states, meta={"id": "second"})
            if removed == "before the commit":
                cli._remove_empty_store(path, top)
                assert not top.exists()
    assert writer.committed == [content_hash(TEXT)] and str(path) in caplog.text and "created anew" in caplog.text
    assert third.put(FP, SETTINGS, content_hash("third"), {"x": torch.ones(2)})
    for store in (second, third, RepresentationStore(path, create=False)):
        assert store.get(FP, SETTINGS, content_hash(TEXT))["x"].tolist() == [0.0, 1.0, 2.0]
        assert store.get_meta(FP, SETTINGS, content_hash(TEXT)) == {"id": "second"}
    report = RepresentationStore(path, create=False).verify()
    assert report.ok and not report.orphans and len(RepresentationStore(path, create=False)) == 2
    assert sorted(p.name for p in path.iterdir()) == [".lock", "index", "shards", "store.json", "tmp"]
    assert not _hidden(path.parent) and not list((path / "tmp").iterdir())


def test_a_store_removed_between_the_check_and_the_lock_is_written_only_under_its_new_lock(tmp_path, monkeypatch):
    """The store is renamed away and created anew by another process just after the writer opened its lock file and
    before it locked it: the writer holds the lock of the folder renamed away, which guards nothing at the path. It
    lets it go and takes the lock of the store at the path, here held by that other process (the writer, not
    waiting, gives up): nothing is written into either folder. The writer committed without the lock."""
    path = tmp_path / "s"
    mine = RepresentationStore(path, lock_timeout=0)
    moved = tmp_path / ".s.moved"
    others = []
    real_acquire = FileLock.acquire

    def acquire(self, *args, **kwargs):
        held = real_acquire(self, *args, **kwargs)
        if not others and os.fspath(self.lock_file) == str(path / ".lock"):
            os.rename(path, moved)
            RepresentationStore(path)
            others.append(FileLock(str(path / ".lock"), timeout=0))
            real_acquire(others[0])
        return held

    monkeypatch.setattr(FileLock, "acquire", acquire)
    with pytest.raises(Timeout):
        mine.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    others[0].release()
    for folder in (path, moved):
        assert not list((folder / "shards").rglob("*.safetensors")) and not list((folder / "index").iterdir())
    assert mine.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})  # the lock free: into the store at path
    assert RepresentationStore(path, create=False).verify().ok and len(RepresentationStore(path)) == 1
    assert not list((moved / "shards").rglob("*.safetensors"))



def test_a_writer_waiting_for_the_lock_while_the_store_is_renamed_away_creates_it_anew(tmp_path, monkeypatch):
    """The failed job's clean-up holds the store's lock while a writer that opened the store wants it (the writer
    waits, trying again and again) and renames the folder away meanwhile: the writer's next try finds no folder at
    the path. It creates the store anew and commits, as when the store was gone before it looked. It failed with a
    bare `FileNotFoundError` (filelock does not make the lock file's folder again during a wait)."""
    if "cancel_check" not in inspect.signature(FileLock.acquire).parameters:
        pytest.skip("this filelock's acquire takes no cancel_check, to act between two tries of a wait")
    path = tmp_path / "s"
    RepresentationStore(path)  # the failed job's handle
    writer = RepresentationStore(path)
    removal = FileLock(str(path / ".lock"), thread_local=False)  # as remove_empty_store holds it
    removal.acquire()
    real_acquire, renamed = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        if renamed or self is removal or os.fspath(self.lock_file) != str(path / ".lock"):
            return real_acquire(self, *args, **kwargs)

        def between_two_tries():  # the clean-up renames the folder away under its lock, then lets the lock go
            if not renamed:
                os.rename(path, tmp_path / ".s.removing")
                renamed.append(True)
                removal.release()
            return False

        return real_acquire(self, *args, cancel_check=between_two_tries, **kwargs)

    monkeypatch.setattr(FileLock, "acquire", acquire)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    assert renamed == [True]
    reopened = RepresentationStore(path, create=False)
    assert reopened.get(FP, SETTINGS, content_hash(TEXT))["x"].tolist() == [1.0, 1.0, 1.0] and reopened.verify().ok
    assert not list((tmp_path / ".s.removing" / "shards").rglob("*.safetensors"))



def test_a_store_renamed_away_while_filelock_makes_its_folder_is_created_anew(tmp_path, monkeypatch):
    """filelock makes the lock file's folder before it takes the lock (`mkdir(parents=True, exist_ok=True)`): the
    store's folder is there when it tries, and renamed away (by the failed job's clean-up) before it looks whether
    what is there is a folder, so filelock raises `FileExistsError`. The writer creates the store anew and commits
    (it failed with that bare error)."""
    path = tmp_path / "s"
    RepresentationStore(path)
    writer = RepresentationStore(path)
    real_mkdir, renamed = os.mkdir, []

    def mkdir(where, *args, **kwargs):
        if not renamed and os.fspath(where) == str(path):  # there when tried, gone when looked at
            os.rename(path, tmp_path / ".s.removing")
            renamed.append(True)
            raise FileExistsError(17, "File exists", os.fspath(where))
        return real_mkdir(where, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert renamed == [True] and len(reopened) == 1 and reopened.verify().ok


@pytest.mark.parametrize("left", [("tmp",), ("index", "tmp"), ("tmp", "lock")])
def test_a_skeletons_folders_made_out_of_order_at_the_path_are_taken_for_an_empty_store(tmp_path, left):
    """A writer's check makes `shards/`, `index/` and `tmp/` one after the other without the lock: when the store is
    renamed away between two of them and a new folder is at the path by then (filelock makes it for a writer taking
    the lock), the later ones land there, e.g. `tmp/` alone. Such folders, empty, are an empty store's as much as
    those of a creation under way: the writers create the store there and commit. They were refused ("not an empty
    store's skeleton") and the path stayed unusable."""
    path = tmp_path / "s"
    RepresentationStore(path)
    writer, other = RepresentationStore(path), RepresentationStore(path)
    assert remove_empty_store(path)
    path.mkdir()
    for name in left:
        if name == "lock":
            (path / ".lock").touch()
        else:
            (path / name).mkdir()
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    assert other.put(FP, SETTINGS, content_hash("other"), {"x": torch.ones(2)})
    reopened = RepresentationStore(path, create=False)
    assert len(reopened) == 2 and reopened.verify().ok

def test_a_store_removed_under_a_soft_lock_is_created_anew(tmp_path, monkeypatch):
    """Where the file system has no `flock`, filelock falls back to a soft lock, which writes its holder into `.lock`
    (`SoftFileLock` here): the writer creating a removed store anew holds such a `.lock`, its own, and takes the
    folder for an empty store's skeleton, as `remove_empty_store` does with the lock held. It refused it ("its
    folder holds .lock"), leaving an empty folder at the path."""
    monkeypatch.setattr(store_module, "FileLock", SoftFileLock)
    monkeypatch.setattr(maintenance, "FileLock", SoftFileLock)
    path = tmp_path / "s"
    RepresentationStore(path)
    writer = RepresentationStore(path)
    assert remove_empty_store(path) and not path.exists()
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert reopened.get(FP, SETTINGS, content_hash(TEXT))["x"].tolist() == [1.0, 1.0, 1.0] and reopened.verify().ok


@pytest.mark.parametrize("how", ["removed", "moved"])
def test_a_store_known_to_hold_documents_is_not_started_anew(tmp_path, how):
    """A store that held documents when its folder was removed (`rm -r`) or moved (`mv`) while writers had it open
    was not removed by `remove_empty_store` (which removes a store holding nothing): the writer that committed into
    it, and one that only read its index, are refused at their next write, saying it no longer exists, instead of
    starting a second, new store at the old path (a run then ended as if all it committed were there); nothing is
    created at the path, and the moved store is as it was. A handle that never saw a manifest still creates it anew."""
    path = tmp_path / "s"
    writer = RepresentationStore(path)
    unaware = RepresentationStore(path)  # opened before the first commit, and has not looked since
    assert writer.put(FP, SETTINGS, content_hash("first"), {"x": torch.ones(2)})
    reader = RepresentationStore(path)
    if how == "removed":
        shutil.rmtree(path)
    else:
        os.rename(path, tmp_path / "moved")
    for store in (writer, reader):
        with pytest.raises(ReadOnlyStoreError, match="no longer exists: its folder was removed or moved") as caught:
            store.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
        assert "held documents" in str(caught.value) and not path.exists()
        with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
            store.writer(FP, SETTINGS)
    assert not path.exists()
    if how == "moved":
        moved = RepresentationStore(tmp_path / "moved", create=False)
        assert len(moved) == 1 and moved.verify().ok
    assert unaware.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})  # as a second job's, before its first
    assert len(RepresentationStore(path, create=False)) == 1


def test_a_store_renamed_away_just_before_the_writer_takes_its_lock_is_written_only_when_made_anew(tmp_path,
                                                                                                   monkeypatch):
    """The store is renamed away after the writer's check and before it takes the lock: filelock makes the folder
    and a new `.lock` in it, so the lock the writer holds is the file at the path, but no store is there. The writer
    lets it go, creates the store anew and commits into that; nothing is written into the folder renamed away."""
    path = tmp_path / "s"
    RepresentationStore(path)
    writer = RepresentationStore(path)
    real_acquire, renamed = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        if not renamed and os.fspath(self.lock_file) == str(path / ".lock"):
            os.rename(path, tmp_path / ".s.removing")
            renamed.append(True)
        return real_acquire(self, *args, **kwargs)

    monkeypatch.setattr(FileLock, "acquire", acquire)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert renamed == [True] and len(reopened) == 1 and reopened.verify().ok
    assert not list((tmp_path / ".s.removing").rglob("*.safetensors")) and not list(
        (tmp_path / ".s.removing" / "index").iterdir())


def test_a_store_removed_between_the_writers_check_and_its_probe_is_created_anew(tmp_path, monkeypatch):
    """The failed job's clean-up removes the store after the writer found its `store.json` and before the writer's
    writability probe: the probe fails for want of a folder, not of a permission, and the writer creates the store
    anew and commits (not "not writable ... write permission")."""
    path = tmp_path / "s"
    RepresentationStore(path)
    writer = RepresentationStore(path)
    real_make_temp, removed = store_module._make_temp, []

    def make_temp(folder, suffix="", **kwargs):
        if not removed and suffix == ".probe":
            removed.append(remove_empty_store(path))
        return real_make_temp(folder, suffix, **kwargs)

    monkeypatch.setattr(store_module, "_make_temp", make_temp)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert removed == [True] and len(reopened) == 1 and reopened.verify().ok


def test_a_file_put_at_the_path_before_the_store_is_made_anew_under_the_lock_is_never_taken_over(tmp_path,
                                                                                                 monkeypatch):
    """Something is put into the folder the writer has just made to create the removed store anew in, before the
    writer holds its lock: the look under the lock finds it, and the writer is refused naming it; no `store.json` is
    written beside it, the `.lock` the writer made is not left there, and the file is untouched."""
    path = tmp_path / "s"
    writer = RepresentationStore(path)
    assert remove_empty_store(path)
    real_acquire, put = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        if not put and os.fspath(self.lock_file) == str(path / ".lock"):
            (path / "mine.txt").write_text("mine")
            put.append(True)
        return real_acquire(self, *args, **kwargs)

    monkeypatch.setattr(FileLock, "acquire", acquire)
    with pytest.raises(ReadOnlyStoreError, match="mine.txt"):
        writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    assert put == [True] and (path / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in path.iterdir()) == ["mine.txt"]  # the writer's `.lock` is not left beside it


def test_the_lock_file_a_held_lock_locks_is_known(tmp_path):
    """`_holds_lock_file` reads the descriptor filelock keeps for a held lock (`_context.lock_file_fd`, not public;
    where it cannot, it answers True and a writer could commit holding the lock of a folder renamed away): this
    fails when a filelock release moves or renames it."""
    lock = FileLock(str(tmp_path / ".lock"))
    with lock:
        assert _holds_lock_file(lock, tmp_path / ".lock")
        os.rename(tmp_path / ".lock", tmp_path / ".lock.away")
        assert not _holds_lock_file(lock, tmp_path / ".lock"), "filelock no longer keeps _context.lock_file_fd"
        (tmp_path / ".lock").touch()
        assert not _holds_lock_file(lock, tmp_path / ".lock")

def test_what_was_put_at_the_removed_stores_path_is_never_written_into(tmp_path):
    """After the removal, a folder holding anything else than an empty store's skeleton is at the path (a user's
    files; a store's folders whose store.json is missing), or a file: the writer that had the store open is refused
    naming the path and what it holds, and nothing there is changed. Before, the layout folders were made in the
    folder and the shard written there."""
    path = tmp_path / "s"
    theirs = RepresentationStore(path)
    assert remove_empty_store(path)
    path.mkdir()
    (path / "mine.txt").write_text("mine")
    with pytest.raises(ReadOnlyStoreError, match="has no store.json now and its folder holds mine.txt") as caught:
        theirs.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    assert str(path) in str(caught.value) and sorted(p.name for p in path.iterdir()) == ["mine.txt"]
    (path / "mine.txt").unlink()
    path.rmdir()
    path.write_text("a file")
    with pytest.raises(ReadOnlyStoreError, match="something that is not a folder"):
        theirs.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    assert path.read_text() == "a file"
    path.unlink()
    other = RepresentationStore(path)
    other.put(FP, SETTINGS, content_hash("other"), {"x": torch.ones(3)})
    (path / "store.json").unlink()  # a store's folders holding a shard, without its marker
    before = sorted(str(p.relative_to(path)) for p in path.rglob("*"))
    with pytest.raises(ReadOnlyStoreError, match="restore_store_marker"):
        theirs.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    assert sorted(str(p.relative_to(path)) for p in path.rglob("*")) == before


def test_a_store_opened_with_create_false_is_not_made_anew(tmp_path):
    """A handle opened with `create=False` (the store must exist) is refused when the store was removed since, saying
    that it no longer exists (not that it lacks write permission); nothing is created."""
    path = tmp_path / "s"
    RepresentationStore(path)
    theirs = RepresentationStore(path, create=False)
    assert remove_empty_store(path)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists: its folder was removed or moved") as caught:
        theirs.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    assert "create=False" in str(caught.value) and "permission" not in str(caught.value) and not path.exists()


@pytest.mark.parametrize("create", [True, False])
def test_a_store_removed_while_it_is_opened_is_opened_as_it_is_now(tmp_path, monkeypatch, create):
    """The store is renamed away (by the clean-up of the command that created it) between the opening's look at its
    `store.json` and the read of it: the opening looks again and creates the store anew (`create=True`) or says
    there is no store (`create=False`). It said "store.json cannot be read (No such file or directory); check its
    permissions", as if the store were damaged."""
    path = tmp_path / "s"
    RepresentationStore(path)
    real_read, renamed = store_module.read_store_marker, []

    def read_store_marker(marker):
        if not renamed:
            os.rename(path, tmp_path / ".s.removing")
            renamed.append(True)
        return real_read(marker)

    monkeypatch.setattr(store_module, "read_store_marker", read_store_marker)
    if create:
        assert len(RepresentationStore(path)) == 0
        monkeypatch.undo()
        assert RepresentationStore(path, create=False).verify().ok
    else:
        with pytest.raises(StoreNotFoundError, match="no store at"):
            RepresentationStore(path, create=False)
        assert not path.exists()
    assert renamed == [True]


def test_a_store_renamed_away_between_two_looks_at_its_path_is_not_called_a_file(tmp_path, monkeypatch):
    """The store is renamed away between the opening's look whether something is at its path and whether it is a
    folder: the store is created anew, never refused as "a file, not a directory"."""
    path = tmp_path / "s"
    RepresentationStore(path)
    real_is_dir, renamed = pathlib.Path.is_dir, []

    def is_dir(self, *args, **kwargs):
        if not renamed and self == path:
            os.rename(path, tmp_path / ".s.removing")
            renamed.append(True)
        return real_is_dir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "is_dir", is_dir)
    RepresentationStore(path)
    monkeypatch.undo()
    assert RepresentationStore(path, create=False).verify().ok


def test_a_store_folder_renamed_away_while_the_writer_makes_it_anew_is_made_again(tmp_path, monkeypatch):
    """The writer making the removed store's folder anew finds one there (another process made it) that is renamed
    away before `mkdir` looks whether it is a folder (`FileExistsError`): the writer tries again, creates the store
    and commits. It failed with "cannot create the store at ... anew: [Errno 17] File exists"."""
    path = tmp_path / "s"
    writer = RepresentationStore(path)
    assert remove_empty_store(path)
    real_mkdir, raced = os.mkdir, []

    def mkdir(where, *args, **kwargs):
        if not raced and os.fspath(where) == str(path):  # there when made, gone when looked at
            raced.append(True)
            raise FileExistsError(17, "File exists", os.fspath(where))
        return real_mkdir(where, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert raced == [True] and len(reopened) == 1 and reopened.verify().ok


def test_a_skeleton_renamed_away_while_the_writer_looks_into_it_is_not_refused(tmp_path, monkeypatch):
    """The writer whose store was removed finds at the path the skeleton of a store another process is creating,
    which that process's clean-up renames away while the writer lists it: the writer is not refused for a folder
    "holding nothing readable"; it creates the store anew and commits, and nothing is written into the folder renamed
    away."""
    path, away = tmp_path / "s", tmp_path / ".s.removing"
    writer = RepresentationStore(path)
    assert remove_empty_store(path)
    (path / "shards").mkdir(parents=True)
    real_being_created, renamed = store_module._being_created, []

    def being_created(where, *args, **kwargs):
        if not renamed and pathlib.Path(where) == path:
            os.rename(path, away)  # while it is listed: the listing fails, and nothing is found empty
            renamed.append(True)
        return real_being_created(where, *args, **kwargs)

    monkeypatch.setattr(store_module, "_being_created", being_created)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert renamed == [True] and len(reopened) == 1 and reopened.verify().ok
    assert sorted(p.name for p in away.iterdir()) == ["shards"] and not list((away / "shards").iterdir())


@pytest.mark.skipif(os.open not in os.supports_dir_fd or os.unlink not in os.supports_dir_fd,
                    reason="the probe is made and removed through a descriptor of its folder only where the "
                    "platform has openat/unlinkat; elsewhere by its path")
def test_a_writability_probe_is_removed_from_the_folder_renamed_away_under_it(tmp_path, monkeypatch):
    """The store is renamed away (by the clean-up of the command that created it) between the writer making its
    writability probe and removing it: the probe is removed where the folder went, so the clean-up finds nothing of
    a running process in it. The probe was left there (its path was gone), and the clean-up kept the folder, hidden,
    warning that something had been put into it."""
    path, away = tmp_path / "s", tmp_path / ".s.removing"
    RepresentationStore(path)
    writer = RepresentationStore(path)
    real_make_temp, renamed = store_module._make_temp, []

    def make_temp(folder, suffix="", **kwargs):
        made = real_make_temp(folder, suffix, **kwargs)
        if not renamed and suffix == ".probe":
            os.rename(path, away)
            renamed.append(True)
        return made

    monkeypatch.setattr(store_module, "_make_temp", make_temp)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    assert renamed == [True] and len(RepresentationStore(path, create=False)) == 1
    assert not list((away / "tmp").iterdir())


def test_a_marker_its_creator_writes_while_the_writer_looks_under_the_lock_is_taken_as_a_store(tmp_path,
                                                                                                monkeypatch):
    """The writer whose store was removed looks, under the store's lock, into the skeleton another process is
    creating at the path (without the lock), which writes its `store.json` while the writer lists the folder: the
    writer takes it for the store it is, and commits. It was refused: "has no store.json now and its folder holds
    .lock, shards/, store.json"."""
    path = tmp_path / "s"
    writer = RepresentationStore(path)
    assert remove_empty_store(path)
    (path / "shards").mkdir(parents=True)  # the other process's creation, under way
    real_being_created, written = store_module._being_created, []

    def being_created(where, lock_held=False, *args, **kwargs):
        if lock_held and not written:
            (path / "store.json").write_text(json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION}))
            written.append(True)
        return real_being_created(where, lock_held, *args, **kwargs)

    monkeypatch.setattr(store_module, "_being_created", being_created)
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    reopened = RepresentationStore(path, create=False)
    assert written == [True] and len(reopened) == 1 and reopened.verify().ok


def test_the_writability_probe_of_a_folder_that_cannot_be_listed_falls_back_to_its_path(tmp_path, monkeypatch):
    """Where the platform has no `O_PATH` (macOS), the probe's folder descriptor is opened for reading, which a folder
    that can be written but not listed (`chmod 300`) refuses: the probe is then made and removed by its path, as
    before, and the write goes through. It was refused as "not writable" (simulated here: the tests may run as
    root, whom no permission stops)."""
    path = tmp_path / "s"
    writer = RepresentationStore(path)
    monkeypatch.delattr(os, "O_PATH", raising=False)
    real_open = os.open

    def open_(where, flags, *args, **kwargs):
        if flags & getattr(os, "O_DIRECTORY", 0) and pathlib.Path(where) in (path, path / "tmp"):
            raise PermissionError(13, "Permission denied", os.fspath(where))  # no read permission on the folder
        return real_open(where, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "supports_dir_fd", os.supports_dir_fd | {open_})  # as the platform's own `open`
    assert writer.put(FP, SETTINGS, content_hash(TEXT), {"x": torch.ones(3)})
    monkeypatch.undo()
    assert len(RepresentationStore(path, create=False)) == 1 and not list((path / "tmp").iterdir())
