"""`RepresentationStore.prune` and `hf-readonce prune`: the only deletion of stored documents deletes exactly the
spaces named (and `quarantine/` when asked), never another space, a link's target or anything on bad input."""

import json
import os
import threading

import pytest
import torch

from hf_readonce.cli import main
from hf_readonce.store import ReadOnlyStoreError, RepresentationStore, space_key
from hf_readonce.store.maintenance import prune_store

OLD, NEW = "a" * 64, "b" * 64
SETTINGS = {"num_decomposed_layers": 2}


def _fill(path, fingerprint, hashes, seed=0):
    store = RepresentationStore(path)
    with store.writer(fingerprint, SETTINGS, dtype="fp32", model_type="toy") as writer:
        for i, doc in enumerate(hashes):
            writer.add(doc, {"hidden_states": torch.randn(3, 4, generator=torch.Generator().manual_seed(seed + i))})
    return store


def _files(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() or p.is_symlink())


@pytest.fixture
def two_spaces(tmp_path):
    path = tmp_path / "store"
    _fill(path, OLD, ["1" * 64, "2" * 64])
    _fill(path, OLD, ["3" * 64], seed=5)  # a second shard of the same space
    store = _fill(path, NEW, ["1" * 64], seed=9)
    return path, store


def test_prune_deletes_one_space_and_keeps_the_other_bit_for_bit(two_spaces):
    path, store = two_spaces
    old_key, new_key = space_key(OLD, SETTINGS), space_key(NEW, SETTINGS)
    kept = store.get(NEW, SETTINGS, "1" * 64)["hidden_states"].clone()
    before = {f for f in _files(path) if f.startswith(("index/", "shards/"))}
    result = store.prune(old_key[:16])
    assert result["spaces"] == [old_key] and result["documents"] == 3 and len(result["shards"]) == 2
    assert result["bytes"] > 0 and result["dry_run"] is False
    after = {f for f in _files(path) if f.startswith(("index/", "shards/"))}
    assert len(before - after) == 4 and len(after) == 2  # two shards and their two manifests
    assert [s.key for s in store.spaces()] == [new_key] and len(store) == 1
    reopened = RepresentationStore(path, readonly=True)
    assert torch.equal(reopened.get(NEW, SETTINGS, "1" * 64)["hidden_states"], kept)
    assert not reopened.contains(OLD, SETTINGS, "3" * 64)
    assert reopened.verify().ok
    assert not any(folder.name.startswith(old_key[:16]) for folder in (path / "shards").iterdir())


def test_dry_run_deletes_nothing_and_reports_the_same(two_spaces):
    path, store = two_spaces
    before = _files(path)
    dry = prune_store(RepresentationStore(path, readonly=True), [space_key(OLD, SETTINGS)], dry_run=True)
    assert _files(path) == before
    real = store.prune([space_key(OLD, SETTINGS)])
    assert {k: v for k, v in dry.items() if k != "dry_run"} == {k: v for k, v in real.items() if k != "dry_run"}


@pytest.mark.parametrize("spaces, error, words", [
    ((), ValueError, "nothing to prune"),
    ("zzzz", ValueError, "names no representation space"),
    ("ab", ValueError, "at least 4"),
    ([3], TypeError, "strings"),
    (7, TypeError, "space key"),
])
def test_bad_spaces_are_refused_by_name_and_nothing_is_deleted(two_spaces, spaces, error, words):
    path, store = two_spaces
    before = _files(path)
    with pytest.raises(error, match=words):
        store.prune(spaces)
    assert _files(path) == before


def test_an_ambiguous_prefix_is_refused(tmp_path):
    path = tmp_path / "store"
    store = None
    keys = []
    for i in range(20000):  # until two space keys share their first 4 characters (a few hundred, by the birthday bound)
        settings_ = {"num_decomposed_layers": i}
        keys.append(space_key(OLD, settings_))
        if len({k[:4] for k in keys}) < len(keys):
            break
    shared = [k for k in keys if sum(k[:4] == o[:4] for o in keys) > 1]
    assert len(shared) == 2
    for i, key in enumerate(keys):
        if key in shared:
            store = RepresentationStore(path)
            with store.writer(OLD, {"num_decomposed_layers": i}, dtype="fp32") as writer:
                writer.add("1" * 64, {"hidden_states": torch.zeros(2, 2)})
    before = _files(path)
    with pytest.raises(ValueError, match="names several"):
        store.prune(shared[0][:4])
    assert _files(path) == before


def test_read_only_store_is_refused(two_spaces):
    path, _ = two_spaces
    with pytest.raises(ReadOnlyStoreError):
        RepresentationStore(path, readonly=True).prune(space_key(OLD, SETTINGS))


def test_quarantine_is_deleted_only_when_asked_and_a_linked_one_only_as_a_link(two_spaces, tmp_path):
    path, store = two_spaces
    (path / "quarantine" / "x").mkdir(parents=True)
    (path / "quarantine" / "x" / "old.safetensors").write_bytes(b"0" * 1000)
    store.prune(space_key(OLD, SETTINGS))
    assert (path / "quarantine" / "x" / "old.safetensors").exists()
    result = store.prune(quarantine=True)
    assert result["quarantine_bytes"] == 1000 and not (path / "quarantine").exists()
    assert len(store) == 1
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    os.symlink(outside, path / "quarantine")
    store.prune(quarantine=True)
    assert not (path / "quarantine").is_symlink() and (outside / "keep.txt").read_text() == "mine"


def test_a_killed_prune_is_finished_by_running_it_again(two_spaces, monkeypatch):
    path, store = two_spaces
    old_key = space_key(OLD, SETTINGS)
    real_unlink = type(path).unlink
    calls = []

    def dying_unlink(self, *args, **kwargs):
        calls.append(self)
        if len(calls) == 2:  # after the first shard, before its manifest
            raise KeyboardInterrupt
        return real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(type(path), "unlink", dying_unlink)
    with pytest.raises(KeyboardInterrupt):
        store.prune(old_key)
    monkeypatch.undo()
    damaged = RepresentationStore(path)
    assert not damaged.verify().ok  # the index still lists the deleted shard: named, not hidden
    damaged.prune(old_key)
    assert [s.key for s in damaged.spaces()] == [space_key(NEW, SETTINGS)] and damaged.verify().ok


def test_cli_prune(two_spaces, capsys):
    path, _ = two_spaces
    old_key = space_key(OLD, SETTINGS)
    assert main(["prune", "--store", str(path)]) == 2
    assert "--space KEY" in capsys.readouterr().err
    assert main(["prune", "--store", str(path), "--space", "nope"]) == 2
    err = capsys.readouterr().err
    assert "names no representation space" in err and old_key[:16] in err and "Traceback" not in err
    assert main(["prune", "--store", str(path), "--space", old_key[:16], "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would delete space {old_key[:16]} (toy" in out and "3 indexed document(s), 2 shard file(s)" in out
    assert len(RepresentationStore(path)) == 4
    assert main(["prune", "--store", str(path), "--space", old_key[:16], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 3
    assert len(RepresentationStore(path)) == 1
    assert main(["prune", "--store", str(path / "missing"), "--space", old_key[:16]]) == 2
    assert "no store at" in capsys.readouterr().err
    assert main(["prune", "--store", str(path / "shards"), "--space", old_key[:16]]) == 2  # not a store's folder
    err = capsys.readouterr().err
    assert "not a hf-readonce store" in err and "give the folder of a store" in err and "pass an empty" not in err


def test_orphan_shards_of_a_pruned_space_go_too_so_repair_cannot_revive_it(two_spaces):
    path, store = two_spaces
    old_key = space_key(OLD, SETTINGS)
    manifest = next(m for m in sorted((path / "index").iterdir())
                    if json.loads(m.read_text())["space"] == old_key)
    manifest.unlink()  # one shard of the old space loses its manifest: an orphan
    store = RepresentationStore(path)
    result = store.prune(old_key[:16])
    assert len(result["shards"]) == 2 and result["skipped"] == []  # the indexed shard and the orphan
    repaired = RepresentationStore(path)
    repaired.repair()
    assert [s.key for s in repaired.spaces()] == [space_key(NEW, SETTINGS)] and len(repaired) == 1


def test_orphan_shards_of_one_space_are_those_in_its_folder(two_spaces):
    """`orphan_shards(store, space)`: the shard files no manifest lists in the folder the store writes that space's
    shards into (what `encode` notes before recomputing over a lost index), from a listing alone."""
    from hf_readonce.store.maintenance import orphan_shards

    path, _ = two_spaces
    old_key, new_key = space_key(OLD, SETTINGS), space_key(NEW, SETTINGS)
    assert orphan_shards(RepresentationStore(path, readonly=True), old_key) == []
    for manifest in (path / "index").glob("*.json"):
        manifest.unlink()
    store = RepresentationStore(path, readonly=True)
    old, new = orphan_shards(store, old_key), orphan_shards(store, new_key)
    assert len(old) == 2 and len(new) == 1 and sorted(old + new) == orphan_shards(store)
    assert all(rel.startswith(f"shards/{old_key[:24]}/") for rel in old)


def test_a_reader_of_a_pruned_space_is_told_it_was_deleted_not_damaged(two_spaces):
    from hf_readonce.store import MissingRepresentationError

    path, store = two_spaces
    reader = RepresentationStore(path, readonly=True)
    assert reader.contains(OLD, SETTINGS, "1" * 64)  # index loaded before the prune
    store.prune(space_key(OLD, SETTINGS))
    with pytest.raises(MissingRepresentationError, match="deleted while it was being read"):
        reader.get(OLD, SETTINGS, "1" * 64)


def test_a_space_whose_shards_sit_behind_a_link_is_reported_as_left_not_deleted(two_spaces, tmp_path, capsys):
    import shutil

    path, _ = two_spaces
    old_key = space_key(OLD, SETTINGS)
    folder = next(f for f in (path / "shards").iterdir() if old_key.startswith(f.name))
    outside = tmp_path / "outside"
    shutil.move(str(folder), outside)
    os.symlink(outside, folder)
    assert main(["prune", "--store", str(path), "--space", old_key[:16]]) == 1
    out = capsys.readouterr().out
    assert f"deleted part of space {old_key[:16]}" in out and "0 indexed document(s), 0 shard file(s)" in out
    assert "3 indexed document(s) left in 2 shard(s) behind a link" in out
    assert len(list(outside.iterdir())) == 2 and len(RepresentationStore(path)) == 4  # nothing of it deleted


def test_a_space_held_only_by_orphans_can_be_named_and_a_rerun_finishes(two_spaces):
    path, _ = two_spaces
    old_key = space_key(OLD, SETTINGS)
    for manifest in (path / "index").iterdir():
        if json.loads(manifest.read_text())["space"] == old_key:
            manifest.unlink()  # every shard of the old space is now an orphan: the index does not list the space
    store = RepresentationStore(path)
    assert [s.key for s in store.spaces()] == [space_key(NEW, SETTINGS)]
    result = store.prune(old_key[:16])
    assert result["spaces"] == [old_key] and result["shard_files"] == 2 and result["documents"] == 0
    repaired = RepresentationStore(path)
    repaired.repair()
    assert [s.key for s in repaired.spaces()] == [space_key(NEW, SETTINGS)]


def test_a_reader_is_sent_to_the_shard_a_repair_rewrote_its_document_into(two_spaces):
    path, store = two_spaces
    expected = RepresentationStore(path, readonly=True).get(OLD, SETTINGS, "3" * 64)["hidden_states"].clone()
    reader = RepresentationStore(path, readonly=True)  # its index loaded, no shard opened yet
    entry = reader.entry(OLD, SETTINGS, "3" * 64)
    with open(path / entry.shard, "ab") as handle:
        handle.write(b"0" * 16)  # the bytes of its documents intact: repair rewrites them into a new shard
    RepresentationStore(path).repair()
    assert torch.equal(reader.get(OLD, SETTINGS, "3" * 64)["hidden_states"], expected)


def test_info_leaves_out_a_written_time_it_cannot_read(two_spaces, capsys):
    path, _ = two_spaces
    manifest = next((path / "index").iterdir())
    data = json.loads(manifest.read_text())
    data["created"] = 1e300
    manifest.write_text(json.dumps(data))
    assert main(["info", "--store", str(path)]) == 0
    assert "written" in capsys.readouterr().out  # the other spaces' times still shown


def test_a_prune_of_a_store_moved_away_since_it_was_opened_says_it_no_longer_exists(two_spaces, monkeypatch):
    """A store removed or moved after it was opened is reported as gone, not as "not writable"; nothing is created at
    the path, and the moved store keeps every space. Also when it goes while the prune waits for its lock."""
    path, store = two_spaces
    moved = path.with_name("moved")
    path.rename(moved)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        prune_store(store, [space_key(OLD, SETTINGS)])
    assert not path.exists()
    assert len(RepresentationStore(moved, create=False).spaces()) == 2
    moved.rename(path)
    real_lock = RepresentationStore.lock

    def lock_after_a_move(self, *args, **kwargs):
        path.rename(moved)  # gone while this process waited
        return real_lock(self, *args, **kwargs)

    monkeypatch.setattr(RepresentationStore, "lock", lock_after_a_move)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        prune_store(store, [space_key(OLD, SETTINGS)])
    monkeypatch.undo()
    assert not (path / "store.json").exists()  # no store made there (at most the lock file the wait opened)
    assert len(RepresentationStore(moved, create=False).spaces()) == 2


@pytest.mark.parametrize("spaces, quarantine", [([], True), (["abcdef"], False)])
def test_a_prune_of_a_store_removed_empty_since_it_was_opened_creates_no_store(tmp_path, spaces, quarantine):
    """A store opened empty and then removed is said to no longer exist: prune deletes, it never creates a store where
    there is none (it created one anew, as a writer does, and then pruned nothing or refused the space)."""
    path = tmp_path / "store"
    store = RepresentationStore(path)
    path.rename(tmp_path / "gone")
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        prune_store(store, spaces, quarantine=quarantine)
    assert not path.exists()


def test_a_dry_run_prune_of_a_store_moved_away_says_it_no_longer_exists(two_spaces):
    """`dry_run=True` on a store moved since it was opened names it gone (it said the store was empty, that the space
    named no space of it)."""
    from hf_readonce.store import StoreNotFoundError

    path, store = two_spaces
    path.rename(path.with_name("moved"))
    with pytest.raises(StoreNotFoundError, match="any more"):
        prune_store(store, [space_key(OLD, SETTINGS)], dry_run=True)
    assert not path.exists()


def test_cli_prune_of_a_store_moved_away_meanwhile_is_one_line_without_a_permission_hint(two_spaces, capsys,
                                                                                        monkeypatch):
    """`hf-readonce prune` on a store moved between its open and the prune: one line saying it no longer exists and
    that nothing was deleted, not the advice to run as the store's owner, nor to open it with `create=True`."""
    path, _ = two_spaces
    real_prune = RepresentationStore.prune

    def prune_after_a_move(self, *args, **kwargs):
        path.rename(path.with_name("moved"))
        return real_prune(self, *args, **kwargs)

    monkeypatch.setattr(RepresentationStore, "prune", prune_after_a_move)
    assert main(["prune", "--store", str(path), "--space", space_key(OLD, SETTINGS)]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no longer exists" in err and "nothing is deleted" in err, err
    assert "owner" not in err and "create=True" not in err and "unexpected" not in err, err
    assert not path.exists()


def test_a_thread_sharing_the_store_reads_while_a_prune_deletes_shards_one_step_at_a_time(two_spaces, monkeypatch):
    """A prune holds the store's index lock for each shard it deletes (shard, manifest and index entries at once),
    not for the whole deletion: a thread reading the same store object, started while the first shard is deleted,
    is done before the prune goes on to remove the emptied folders, and every document it finds listed has its
    shard file."""
    from hf_readonce.store import maintenance

    path, store = two_spaces
    kept = store.get(NEW, SETTINGS, "1" * 64)["hidden_states"].clone()
    real_unlink, real_remove = type(path).unlink, maintenance._remove_empty_shard_folders
    done, seen = threading.Event(), []

    def read():
        seen.append(torch.equal(store.get(NEW, SETTINGS, "1" * 64)["hidden_states"], kept))
        with store._index_lock:  # (one state of the index: the prune goes on meanwhile)
            seen.append(all((path / entry.shard).is_file() for entry in store.entries()))
        done.set()

    reader = threading.Thread(target=read)

    def unlink(self, *args, **kwargs):
        if not reader.is_alive() and not done.is_set() and self.suffix == ".safetensors":
            reader.start()  # while the first shard is being deleted
        return real_unlink(self, *args, **kwargs)

    finished_first = []

    def remove_empty_shard_folders(store_):
        finished_first.append(done.wait(10))  # every shard deleted, the folders next
        return real_remove(store_)

    monkeypatch.setattr(type(path), "unlink", unlink)
    monkeypatch.setattr(maintenance, "_remove_empty_shard_folders", remove_empty_shard_folders)
    result = store.prune(space_key(OLD, SETTINGS))
    reader.join(60)
    assert result["documents"] == 3 and finished_first == [True] and seen == [True, True]
    assert [s.key for s in store.spaces()] == [space_key(NEW, SETTINGS)] and len(store) == 1 and store.verify().ok


@pytest.mark.parametrize("when", ["before its check", "while its file is read"])
def test_verify_in_a_thread_names_no_shard_a_prune_of_the_same_store_object_deletes_meanwhile(two_spaces,
                                                                                              monkeypatch, when):
    """`verify` reads the index, then checks each shard it lists without the index lock; a prune in another thread
    of the same store object deletes two of them meanwhile (before the first one's check, or once its bytes were
    hashed and its header is still to be read): neither is named missing or corrupted (nor raises), and the report
    counts only the shard still stored."""
    from hf_readonce.store import maintenance

    path, store = two_spaces
    old_key = space_key(OLD, SETTINGS)
    old_shards = {shard for shard, manifest in store._shards.items() if manifest["space"] == old_key}
    pruned = []

    def prune_now():
        thread = threading.Thread(target=lambda: pruned.append(store.prune(old_key)))
        thread.start()
        thread.join(60)

    if when == "before its check":
        real_check = maintenance._check_shard

        def check_shard(store_, shard, manifest):
            if shard in old_shards and not pruned:
                prune_now()
            return real_check(store_, shard, manifest)

        monkeypatch.setattr(maintenance, "_check_shard", check_shard)
    else:
        real_hash = maintenance._file_sha256

        def file_sha256(file):
            digest = real_hash(file)
            if str(file.relative_to(path)) in old_shards and not pruned:
                prune_now()
            return digest

        monkeypatch.setattr(maintenance, "_file_sha256", file_sha256)
    report = store.verify()
    assert [result["documents"] for result in pruned] == [3]
    assert report.ok and report.corruptions == [] and report.orphans == []
    assert report.shards_checked == 1 and report.documents_checked == 1


def _paused_prune(path, monkeypatch):
    """A prune of `OLD` through a store object of its own in a thread, paused once it has deleted its first shard
    file, before that shard's manifest (under the store's write lock), until the returned event `go` is set; returns
    the thread, `go` and the deleted shard's path relative to the store."""
    from hf_readonce.store import maintenance

    pruner = RepresentationStore(path)
    deleted, go, first = threading.Event(), threading.Event(), []
    real_own_file = maintenance._own_file

    def own_file(store_, rel):
        if store_ is pruner and rel.startswith("index/") and not deleted.is_set():
            first.append(next(s for s in pruner._shards if f"index/{os.path.basename(s)[:-12]}.json" == rel))
            deleted.set()
            go.wait(60)
        return real_own_file(store_, rel)

    monkeypatch.setattr(maintenance, "_own_file", own_file)
    thread = threading.Thread(target=pruner.prune, args=(space_key(OLD, SETTINGS),))
    thread.start()
    if not deleted.wait(60):
        go.set()
        pytest.fail("the prune did not reach its first manifest")
    assert not (path / first[0]).exists() and (path / "index" / f"{os.path.basename(first[0])[:-12]}.json").exists()
    return thread, go, first[0]


def _going_on_when_waited_for(monkeypatch, go, asked):
    """Let the paused prune go on once the store's write lock is waited for (`asked` records it)."""
    import fcntl
    import types

    from hf_readonce.store import maintenance

    def flock(fd, operation):
        asked.append(operation)
        go.set()
        return fcntl.flock(fd, operation)

    monkeypatch.setattr(maintenance, "fcntl", types.SimpleNamespace(LOCK_SH=fcntl.LOCK_SH, LOCK_NB=fcntl.LOCK_NB,
                                                                    flock=flock))


@pytest.mark.parametrize("look", ["verify", "get"])
def test_a_shard_another_writer_prunes_between_its_file_and_its_manifest_is_no_corruption(two_spaces, monkeypatch,
                                                                                          look):
    """Another writer's prune (here another store object's, in a thread) has deleted a shard file and not yet its
    manifest: `verify` and `get` of another store object find the file missing and its manifest listed, wait for
    the write lock the prune holds, and then find neither: `verify` names no corruption, `get` of a document of it
    raises `MissingRepresentationError` (a pruned document), never `CorruptedShardError`."""
    from hf_readonce.store import MissingRepresentationError

    path, _ = two_spaces
    thread, go, shard = _paused_prune(path, monkeypatch)
    asked = []
    try:
        reader = RepresentationStore(path, readonly=True, create=False)
        docs = list(reader._shards[shard]["documents"])  # its manifest read: the shard listed, its file gone
        _going_on_when_waited_for(monkeypatch, go, asked)
        if look == "verify":
            report = reader.verify()
            # the other two shards were checked (intact) before the wait: counted; the pruned one is not
            assert report.ok and report.corruptions == [] and report.orphans == [], report.corruptions
            assert report.shards_checked == 2 and report.documents_checked == 4 - len(docs)
        else:
            with pytest.raises(MissingRepresentationError, match="no longer in store"):
                reader.get(OLD, SETTINGS, docs[0])
    finally:
        go.set()
        thread.join(60)
    assert asked and not thread.is_alive()


def test_info_in_a_thread_waits_for_no_prune_of_the_same_store_object_that_deleted_a_listed_shard(two_spaces,
                                                                                                 monkeypatch):
    """`info` lists the shard files, then reads the index; a prune in another thread of the same store object
    deletes a shard and its manifest in between: the shard is neither an orphan nor a reason to wait for the write
    lock the prune holds (it would wait for the whole prune), and `info` counts what is stored at its look."""
    from hf_readonce.store import maintenance

    path, store = two_spaces
    real_listing, real_delete = maintenance._shard_files, maintenance._delete_shard
    paused, go, asked, pruned = threading.Event(), threading.Event(), [], []
    deleted = []

    def delete_shard(store_, shard):
        if deleted:  # the second shard: paused before it, the first one deleted with its manifest
            paused.set()
            go.wait(60)
        deleted.append(shard)
        return real_delete(store_, shard)

    pruner = threading.Thread(target=lambda: pruned.append(store.prune(space_key(OLD, SETTINGS))))

    def listing(store_):
        files = real_listing(store_)
        if not pruner.is_alive() and not pruned:
            pruner.start()
            if not paused.wait(60):
                go.set()
                pytest.fail("the prune did not reach its second shard")
        return files

    documents = {shard: len(manifest["documents"]) for shard, manifest in store._shards.items()}
    monkeypatch.setattr(maintenance, "_delete_shard", delete_shard)
    monkeypatch.setattr(maintenance, "_shard_files", listing)
    _going_on_when_waited_for(monkeypatch, go, asked)
    try:
        info = store.info()
    finally:
        go.set()
        pruner.join(60)
    assert asked == [] and [result["documents"] for result in pruned] == [3]
    assert info["orphans"] == [] and info["orphans_note"] is None
    assert info["shards"] == 2 and info["documents"] == 4 - documents[deleted[0]]


@pytest.mark.parametrize("when", ["before it is looked at", "while it is read"])
def test_a_manifest_another_writers_prune_deletes_between_the_index_listing_and_its_read_is_none(two_spaces,
                                                                                               monkeypatch, when):
    """`verify` of a store object reads the index anew: it lists `index/`, then reads each manifest it has not
    loaded yet; another writer's prune deletes one of those (its shard, then it) in between: the manifest is no
    missing or unreadable one, and the store is sound."""
    from pathlib import Path

    path, store = two_spaces
    reader = RepresentationStore(path, readonly=True, create=False)
    store.put(OLD, SETTINGS, "4" * 64, {"hidden_states": torch.randn(3, 4)})  # a manifest the reader has not read
    (manifest,) = [m for m in (path / "index").glob("*.json") if m.name not in reader.loaded_manifests]
    shard = path / json.loads(manifest.read_text())["shard"]
    real_listdir, real_read = os.listdir, Path.read_bytes

    def pruned():
        shard.unlink()
        manifest.unlink()

    def listdir(folder):
        names = real_listdir(folder)
        if when == "before it is looked at" and os.fspath(folder) == str(path / "index") and manifest.exists():
            pruned()
        return names

    def read_bytes(self):
        if when == "while it is read" and self == manifest and manifest.exists():
            pruned()
        return real_read(self)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    report = reader.verify()
    monkeypatch.undo()
    assert not manifest.exists() and report.ok and report.corruptions == [], report.corruptions
    assert manifest.name not in reader.loaded_manifests and not reader.contains(OLD, SETTINGS, "4" * 64)
