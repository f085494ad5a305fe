"""`verify` and `info` beside another process committing a shard: the shard is written before its manifest, both
under the store's write lock, so a shard no manifest lists after a second look is looked at once more under that
lock (waited for up to `ORPHAN_LOCK_WAIT` seconds, with a shared lock of `.lock` opened read-only: also on a store
this user may only read) before it is called an orphan. Past the wait, or where the lock cannot be waited for (a
`.lock` this user cannot read), orphans are named as before, with a note saying that one may be a shard being
committed; nothing is ever written or created in the store, and `verify` inside `repair` (which holds the lock) does
not wait."""

import collections
import errno
import fcntl
import json
import multiprocessing
import os
import stat
import threading
import time
import types

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash, maintenance
from hf_readonce.store.store import _StoreLock
from tests.store.test_campaign import FP, SETTINGS, run_cli


# an `encode` of another process paused inside its commit, between the shard file and its manifest (under the
# store's write lock): it sets `written` there, and goes on once the file `go` exists (60 s at most). Forked, so
# that it starts at once (a fresh interpreter would import torch again: seconds on a loaded machine)
def _write_paused(path, go, written, committed):
    store = RepresentationStore(path)
    write_manifest = store._write_manifest

    def paused(*args, **kwargs):
        written.set()
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
        return write_manifest(*args, **kwargs)

    store._write_manifest = paused
    store.put(FP, {"k": 2, "representation": "campaign/v1"}, content_hash("in flight"), {"x": torch.ones(3)})
    committed.set()


def _files(path):
    """Every path under the store's folder, with its size (a file made or changed shows)."""
    return sorted((str(p.relative_to(path)), p.lstat().st_size) for p in path.rglob("*"))


def _store(tmp_path):
    path = tmp_path / "s"
    RepresentationStore(path).put(FP, SETTINGS, content_hash("stored"), {"x": torch.zeros(3)})
    return path


def _paused_writer(path, go):
    """Start [`_write_paused`] on the store `path` in a forked process and wait until its shard is written, its
    manifest not yet: returns the process, the event it sets once committed, and the shard's path relative to the
    store."""
    context = multiprocessing.get_context("fork")
    written, committed = context.Event(), context.Event()
    writer = context.Process(target=_write_paused, args=(str(path), str(go), written, committed))
    writer.start()
    if not written.wait(60):
        writer.kill()
        writer.join(10)
        pytest.fail(f"the writer did not reach its commit (exit code {writer.exitcode})")
    known = {json.loads(m.read_text())["shard"] for m in (path / "index").glob("*.json")}
    (shard,) = [str(p.relative_to(path)) for p in (path / "shards").rglob("*.safetensors")
                if str(p.relative_to(path)) not in known]
    return writer, committed, shard


def _orphan_store(tmp_path):
    """A store holding one orphan shard (its manifest deleted: a lost index), its document stored nowhere else."""
    path = _store(tmp_path)
    (manifest,) = (path / "index").glob("*.json")
    shard = json.loads(manifest.read_text())["shard"]
    manifest.unlink()
    return path, shard


def _flock_shim(flock):
    """What `maintenance` uses of `fcntl`, with `flock` in place of `fcntl.flock` (filelock keeps the real one)."""
    return types.SimpleNamespace(LOCK_SH=fcntl.LOCK_SH, LOCK_NB=fcntl.LOCK_NB, flock=flock)


@pytest.mark.parametrize(("look", "lock"), [("verify", "flock"), ("info", "flock"), ("cli verify", "flock"),
                                            ("cli info", "flock"), ("verify", "not writable"),
                                            ("verify", "no flock")])
def test_a_shard_another_process_is_committing_is_no_orphan_once_its_manifest_lands(tmp_path, monkeypatch, capsys,
                                                                                    look, lock):
    """The writer goes on only once `verify` / `info` asks for the store's write lock, the shard still without its
    manifest: it waits for the lock, which the writer releases once the manifest is written, and reports the store
    sound (no orphan, no corruption, exit 0). Also where this user may not open `.lock` for writing (a store of
    another user: the shared lock needs reading only), and without `fcntl.flock` (Windows: the write lock is
    taken)."""
    path, go = _store(tmp_path), tmp_path / "go"
    writer, committed, shard = _paused_writer(path, go)
    asked = []

    def ask():
        asked.append(os.path.exists(path / "index" / f"{os.path.basename(shard)[:-12]}.json"))
        go.touch()  # the writer writes its manifest and releases the lock: meanwhile this process waits for it

    if lock == "no flock":
        real_acquire = _StoreLock.acquire

        def acquire(self, timeout=None):
            ask()
            return real_acquire(self, timeout)

        monkeypatch.setattr(_StoreLock, "acquire", acquire)
        monkeypatch.setattr(maintenance, "fcntl", None)
    else:
        if lock == "not writable":  # (as root, a `.lock` of mode 0444 would open for writing all the same)
            def refused(self, timeout=None):
                raise PermissionError(errno.EACCES, "Permission denied", str(path / ".lock"))

            monkeypatch.setattr(_StoreLock, "acquire", refused)

        def flock(fd, operation):
            if not asked:
                ask()
            return fcntl.flock(fd, operation)

        monkeypatch.setattr(maintenance, "fcntl", _flock_shim(flock))
    try:
        if look == "verify":
            report = RepresentationStore(path, readonly=True, create=False).verify()
            assert report.ok and report.orphans == [] and report.orphans_note is None, \
                [c.describe() for c in report.corruptions]
        elif look == "info":
            info = RepresentationStore(path, readonly=True, create=False).info()
            assert info["orphans"] == [] and info["orphans_note"] is None and info["documents"] == 2
        elif look == "cli verify":
            status, out, err = run_cli(capsys, "verify", "--store", path, "--no-progress")
            assert status == 0 and "CORRUPTED" not in out and "orphan" not in out + err, out + err
        else:
            status, out, err = run_cli(capsys, "info", "--store", path)
            assert status == 0 and "orphan" not in out + err, out + err
    finally:
        go.touch()
        writer.join(120)
    assert asked == [False]  # asked once, while the shard had no manifest yet
    assert writer.exitcode == 0 and committed.is_set(), writer.exitcode
    monkeypatch.undo()
    assert RepresentationStore(path).verify().ok


def test_an_orphan_is_named_with_a_note_while_another_process_holds_the_lock_past_the_wait(tmp_path, monkeypatch,
                                                                                          capsys):
    """A writer that holds the lock longer than `ORPHAN_LOCK_WAIT` (here 0.3 s; a `repair` runs under it whole):
    the shard is named as an orphan, as before, and its reason, `orphans_note`, `info` and the CLI say that another
    process held the lock, so that it may be a shard being committed. Once that process is gone (killed before its
    manifest), the orphan is named without the note."""
    monkeypatch.setattr(maintenance, "ORPHAN_LOCK_WAIT", 0.3)
    path, go = _store(tmp_path), tmp_path / "go"
    writer, committed, shard = _paused_writer(path, go)
    try:
        report = RepresentationStore(path, readonly=True, create=False).verify()
        info = RepresentationStore(path, readonly=True, create=False).info()
        status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
        assert RepresentationStore(path, lock_timeout=0).verify().orphans_note.startswith(
            "another writer held the store's write lock for the 0 s")  # the store's own shorter timeout
    finally:
        writer.kill()
        writer.join(60)
    assert not report.ok and report.orphans == [shard]
    assert report.orphans_note.startswith("another writer held the store's write lock for the 0.3 s this process "
                                          "waited for it"), report.orphans_note
    (corruption,) = report.corruptions
    assert corruption.shard == shard and corruption.reason.endswith(report.orphans_note), corruption.reason
    assert "stored nowhere else" in corruption.reason
    assert info["orphans"] == [shard] and info["orphans_note"] == report.orphans_note
    assert status == 1 and f"CORRUPTED {shard}" in out and "another writer held the store's write lock" in out
    assert not go.exists()
    # the writer killed between its shard and its manifest: an orphan for sure, and said so without a doubt
    report = RepresentationStore(path, readonly=True, create=False).verify()
    assert report.orphans == [shard] and report.orphans_note is None
    assert "another writer" not in report.corruptions[0].reason


def test_verify_of_a_store_without_a_lock_file_makes_none_and_names_its_orphan(tmp_path):
    """No `.lock` (a store copied without dot files): no process holds its lock, nothing is waited for, and none is
    made; the orphan is one for sure."""
    path, shard = _orphan_store(tmp_path)
    (path / ".lock").unlink()
    before = _files(path)
    report = RepresentationStore(path, readonly=True, create=False).verify()
    info = RepresentationStore(path, readonly=True, create=False).info()
    assert report.orphans == [shard] and report.orphans_note is None and not report.ok
    assert info["orphans"] == [shard] and info["orphans_note"] is None
    assert _files(path) == before and not os.path.lexists(path / ".lock")


def test_a_lock_file_removed_just_before_verify_takes_the_lock_is_not_left_made(tmp_path, monkeypatch):
    """Without `fcntl.flock` (Windows), `.lock` removed between verify's look at it and its lock (filelock then makes
    it anew): the one made is removed again, so a read-only pass leaves the store as it found it."""
    monkeypatch.setattr(maintenance, "fcntl", None)
    path, shard = _orphan_store(tmp_path)
    store = RepresentationStore(path, readonly=True, create=False)
    real, calls = store._acquire_unless_gone, []

    def acquire_unless_gone(*args, **kwargs):
        calls.append(True)
        (path / ".lock").unlink()
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "_acquire_unless_gone", acquire_unless_gone)
    report = store.verify()
    assert calls == [True] and report.orphans == [shard] and report.orphans_note is None
    assert not os.path.lexists(path / ".lock")


@pytest.mark.parametrize("lock", ["flock", "no flock"])
def test_verify_of_a_store_whose_lock_cannot_be_waited_for_names_its_orphans_with_a_note(tmp_path, monkeypatch,
                                                                                        lock):
    """A lock that cannot be waited for (`flock` refused: e.g. a file system without locks; without `flock`, a
    `.lock` this process cannot open for writing): the orphan is named as before, its reason saying that a writer may
    be committing it; no exception, nothing written."""
    path, shard = _orphan_store(tmp_path)

    def refused(*args, **kwargs):
        if lock == "flock":
            raise OSError(errno.ENOLCK, "No locks available")
        raise PermissionError(errno.EACCES, "Permission denied", str(path / ".lock"))

    if lock == "flock":
        monkeypatch.setattr(maintenance, "fcntl", _flock_shim(refused))
        said = "cannot be waited for (No locks available)"
    else:
        monkeypatch.setattr(maintenance, "fcntl", None)
        monkeypatch.setattr(_StoreLock, "acquire", refused)
        said = "cannot be taken (Permission denied)"
    before = _files(path)
    report = RepresentationStore(path, readonly=True, create=False).verify()
    assert report.orphans == [shard] and not report.ok
    assert report.orphans_note.startswith(f"the store's write lock {path / '.lock'} {said}, so this process cannot "
                                          "wait for a writer's commit: a shard listed as an orphan may be one "
                                          "another writer is committing; verifying again gives this note again"), \
        report.orphans_note
    assert report.corruptions[0].reason.endswith(report.orphans_note)
    assert _files(path) == before


def test_verify_waits_on_the_lock_file_at_the_path_where_it_is_replaced_meanwhile(tmp_path, monkeypatch):
    """`.lock` removed and made anew (a writer holding the new one) while verify opened the old one: the shared lock
    of the old file guards nothing, so verify waits on the one at the path (here past the wait: the note)."""
    monkeypatch.setattr(maintenance, "ORPHAN_LOCK_WAIT", 0.3)
    path, shard = _orphan_store(tmp_path)
    holders = []

    def flock(fd, operation):
        if not holders:
            (path / ".lock").unlink()
            holders.append(RepresentationStore(path).lock())
            holders[0].acquire()  # (makes `.lock` anew)
        return fcntl.flock(fd, operation)

    monkeypatch.setattr(maintenance, "fcntl", _flock_shim(flock))
    try:
        report = RepresentationStore(path, readonly=True, create=False).verify()
    finally:
        holders[0].release()
    assert report.orphans == [shard]
    assert report.orphans_note.startswith("another writer held the store's write lock for the 0.3 s"), \
        report.orphans_note


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write whatever the modes say")
@pytest.mark.parametrize("lock_file", ["readable", "unreadable", "none"])
def test_verify_of_a_read_only_store_names_its_orphans_and_writes_nothing(tmp_path, lock_file):
    """A store whose files and folders are read-only (a `.lock` that cannot be opened for writing, one that cannot
    be read either, or none): no exception, no file made, the orphan named, for sure where `.lock` can be read
    (its shared lock is taken) or is not there, with the note where it cannot be read."""
    path, shard = _orphan_store(tmp_path)
    if lock_file == "none":
        (path / ".lock").unlink()
    modes = {}
    for item in [path, *path.rglob("*")]:
        modes[item] = item.stat().st_mode
        item.chmod(stat.S_IMODE(modes[item]) & ~(0o666 if item.name == ".lock" and lock_file == "unreadable" else
                                                  0o222))
    try:
        before = _files(path)
        report = RepresentationStore(path, readonly=True, create=False).verify()
        assert _files(path) == before
    finally:
        for item, mode in modes.items():
            item.chmod(stat.S_IMODE(mode))
    assert report.orphans == [shard] and not report.ok
    if lock_file == "unreadable":
        assert "cannot be opened (Permission denied)" in report.orphans_note
        assert report.corruptions[0].reason.endswith(report.orphans_note)
    else:
        assert report.orphans_note is None


def test_verify_inside_repair_takes_the_lock_repair_holds_without_waiting(tmp_path, monkeypatch):
    """`repair` without a report runs `verify` under the write lock it holds: the lock is taken again at once (it is
    re-entrant), the orphan is one for sure and is re-indexed."""
    monkeypatch.setattr(maintenance, "ORPHAN_LOCK_WAIT", 0.2)
    path, shard = _orphan_store(tmp_path)
    store = RepresentationStore(path)
    result = store.repair()
    assert result["report"].orphans == [shard] and result["report"].orphans_note is None
    assert result["salvaged"] == [content_hash("stored")] and store.verify().ok


def test_verify_recompute_looks_for_in_flight_shards_once_and_encode_and_prune_summaries_never(
        tmp_path, checkpoint, qa_rows, capsys, monkeypatch):
    """Only what names orphans looks at them under the write lock (and may wait for it): `verify --recompute` once
    (its recompute reads the spaces' dtypes only), the summary line after `encode` and `prune` never, though the
    store holds an orphan then (every wait, of `verify` and of `info`, goes through `_wait_for_commits`)."""
    from hf_readonce.cli import main as cli_main
    from tests.conftest import write_jsonl

    looks = []
    real = maintenance._wait_for_commits

    def counted(store):
        looks.append(maintenance.orphan_shards(store))  # the orphans when the lock is asked for
        return real(store)

    monkeypatch.setattr(maintenance, "_wait_for_commits", counted)
    store = tmp_path / "store"
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": r["id"], "document": r["context"]} for r in qa_rows[:2]])
    encode = ["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--dtype", "fp32",
              "--max-passage-length", "64", "--doc-stride", "8", "--no-progress"]
    assert cli_main(encode) == 0
    (manifest,) = (store / "index").glob("*.json")
    shard = json.loads(manifest.read_text())["shard"]
    manifest.unlink()  # an orphan, and its documents to encode again
    assert cli_main(encode) == 0 and looks == []
    assert f"store {store}: 2 document(s), 1 shard(s)" in capsys.readouterr().out
    assert cli_main(["verify", "--store", str(store), "--no-progress", "--recompute", "1", "--model",
                     str(checkpoint), "--documents", str(docs)]) == 0
    assert looks == [[shard]]  # verify's look; its orphan's documents are stored again: no corruption
    assert "recomputed from" in capsys.readouterr().out
    key = next(iter(RepresentationStore(store, readonly=True).info()["spaces"]))
    junk = store / "shards" / "other" / "junk.safetensors"  # an orphan no prune deletes (no shard header)
    junk.parent.mkdir()
    junk.write_bytes(b"not a shard")
    looks.clear()
    assert cli_main(["prune", "--store", str(store), "--space", key[:16]]) == 0
    assert looks == [] and f"store {store}: 0 document(s), 0 shard(s)" in capsys.readouterr().out
    assert maintenance.orphan_shards(RepresentationStore(store, readonly=True)) == ["shards/other/junk.safetensors"]


def test_store_info_without_confirming_lists_orphans_at_one_look_and_refuses_a_non_bool(tmp_path, monkeypatch):
    """`store_info(confirm_orphans=False)` (the summary lines of `encode` and `prune`) names the orphans as one look
    finds them, waiting for no lock (here held by another process's stand-in for good); a string is refused."""
    monkeypatch.setattr(maintenance, "ORPHAN_LOCK_WAIT", 0.2)
    path, shard = _orphan_store(tmp_path)
    store = RepresentationStore(path, readonly=True, create=False)
    holder = RepresentationStore(path).lock()
    holder.acquire()
    try:
        quick = maintenance.store_info(store, confirm_orphans=False)
        waited = store.info()
    finally:
        holder.release()
    assert quick["orphans"] == [shard] and quick["orphans_note"] is None
    assert waited["orphans"] == [shard] and waited["orphans_note"].startswith("another writer held")
    with pytest.raises(TypeError, match="`confirm_orphans` must be a bool"):
        maintenance.store_info(store, confirm_orphans="no")


def _paused_thread_writer(path):
    """A thread of this process writing into the store `path` through a store object of its own, paused between its
    shard file and its manifest (under the store's write lock) until the returned event is set: returns the thread
    and that event."""
    store = RepresentationStore(path)
    written, go = threading.Event(), threading.Event()
    write_manifest = store._write_manifest

    def paused(*args, **kwargs):
        written.set()
        go.wait(60)
        return write_manifest(*args, **kwargs)

    store._write_manifest = paused
    thread = threading.Thread(target=store.put, args=(FP, SETTINGS, content_hash("in flight"), {"x": torch.ones(3)}))
    thread.start()
    if not written.wait(60):
        go.set()
        pytest.fail("the writer thread did not reach its commit")
    return thread, go


@pytest.mark.parametrize("look", ["verify", "info"])
def test_a_shard_another_store_object_of_this_process_is_committing_is_waited_for(tmp_path, monkeypatch, look):
    """Two store objects of one folder in one process, a thread committing through one: `verify` / `info` of the
    other waits for that commit on the shared lock (each object opens `.lock` anew, so their locks conflict) and
    reports the store sound, the shard's documents counted."""
    path = _store(tmp_path)
    thread, go = _paused_thread_writer(path)
    asked = []

    def flock(fd, operation):
        if not asked:
            asked.append(True)
            go.set()  # the writer goes on only once the lock is asked for
        return fcntl.flock(fd, operation)

    monkeypatch.setattr(maintenance, "fcntl", _flock_shim(flock))
    other = RepresentationStore(path, readonly=True, create=False)
    try:
        if look == "verify":
            report = other.verify()
            assert report.ok and report.orphans == [] and report.orphans_note is None
        else:
            info = other.info()
            assert info["orphans"] == [] and info["orphans_note"] is None and info["documents"] == 2
    finally:
        go.set()
        thread.join(60)
    assert asked == [True]


def test_a_write_lock_held_past_the_wait_through_another_store_object_of_this_process_is_said_so(tmp_path,
                                                                                                 monkeypatch):
    """The lock held past the wait by a thread writing through another store object of this very process: the note
    says that a writer held it (another process's, or one of this process through another store object), never that
    it was another process."""
    monkeypatch.setattr(maintenance, "ORPHAN_LOCK_WAIT", 0.3)
    path = _store(tmp_path)
    thread, go = _paused_thread_writer(path)
    try:
        report = RepresentationStore(path, readonly=True, create=False).verify()
    finally:
        go.set()
        thread.join(60)
    assert len(report.orphans) == 1 and not report.ok
    assert report.orphans_note.startswith("another writer held the store's write lock for the 0.3 s"), \
        report.orphans_note
    assert "through another `RepresentationStore` object of this process" in report.orphans_note
    assert "another process held" not in report.orphans_note
    assert RepresentationStore(path, readonly=True, create=False).verify().ok  # committed once let go


def test_the_note_of_a_lock_file_this_user_cannot_read_says_what_to_do_and_goes_once_it_can_be_read(
        tmp_path, monkeypatch, capsys):
    """`.lock` that this process may not open (a store of another user, its `.lock` not readable: refused here,
    since root opens any file): the note says that verifying again gives it again, who can verify instead, and
    that the orphans are orphans where no writer runs. Once `.lock` can be read, `verify` and `info` name the
    orphan with no note (nothing is kept from the earlier look)."""
    path, shard = _orphan_store(tmp_path)
    lock_file = str(path / ".lock")
    real_open = os.open

    def refusing(file, flags, *args, **kwargs):
        if os.fspath(file) == lock_file:
            raise PermissionError(errno.EACCES, "Permission denied", lock_file)
        return real_open(file, flags, *args, **kwargs)

    store = RepresentationStore(path, readonly=True, create=False)
    monkeypatch.setattr(os, "open", refusing)
    report, info = store.verify(), store.info()
    status, out, _ = run_cli(capsys, "info", "--store", path)
    monkeypatch.undo()
    note = report.orphans_note
    assert note.startswith(f"the store's write lock {lock_file} cannot be opened (Permission denied), so this "
                           "process cannot wait for a writer's commit"), note
    assert f"verifying again gives this note again: verify as a user who may read {lock_file}" in note
    assert note.endswith("while no `encode`, `repair` or `prune` runs on the store, the orphans listed are orphans")
    assert "run verify again once" not in note  # (it would give the note again)
    assert info["orphans"] == [shard] and info["orphans_note"] == note
    assert status == 0 and f"note: {note}" in out
    again, info = store.verify(), store.info()
    assert again.orphans == [shard] and again.orphans_note is None
    assert info["orphans"] == [shard] and info["orphans_note"] is None


@pytest.mark.parametrize("orphan", [False, True])
def test_info_lists_the_shard_files_and_reads_the_index_once_per_look(tmp_path, monkeypatch, orphan):
    """`info` lists the shard folders once and reads the index once, after the listing (a shard whose manifest is
    written in between is indexed); only where a shard file is listed by no manifest, once more each after waiting
    for the store's write lock (free here)."""
    if orphan:
        path, shard = _orphan_store(tmp_path)
    else:
        path, shard = _store(tmp_path), None
    store = RepresentationStore(path, readonly=True, create=False)
    calls = collections.Counter()
    shard_files, refresh = maintenance._shard_files, RepresentationStore.refresh

    def listing(*args):
        calls["listings"] += 1
        return shard_files(*args)

    def reading(*args):
        calls["index reads"] += 1
        return refresh(*args)

    monkeypatch.setattr(maintenance, "_shard_files", listing)
    monkeypatch.setattr(RepresentationStore, "refresh", reading)
    info = store.info()
    looks = 2 if orphan else 1
    assert calls == {"listings": looks, "index reads": looks}
    assert info["orphans"] == ([shard] if orphan else []) and info["orphans_note"] is None
    assert info["documents"] == (0 if orphan else 1)


def test_an_orphan_deleted_once_it_was_confirmed_is_not_named(tmp_path, monkeypatch):
    """An orphan shard confirmed as one and then deleted before `verify` reads its header (a prune of its space in
    another thread or process): it is no orphan and no corruption of the store, which is sound."""
    path, shard = _orphan_store(tmp_path)
    real = maintenance.confirmed_orphans

    def confirmed_then_deleted(store, candidates):
        found = real(store, candidates)
        (path / shard).unlink()
        return found

    monkeypatch.setattr(maintenance, "confirmed_orphans", confirmed_then_deleted)
    report = RepresentationStore(path, readonly=True, create=False).verify()
    assert report.ok and report.orphans == [] and report.corruptions == [], report.corruptions


@pytest.mark.parametrize("look", ["verify", "info"])
def test_a_thread_holding_the_write_lock_through_another_store_object_does_not_wait_for_itself(tmp_path, monkeypatch,
                                                                                               look):
    """A thread holding the store's write lock through one store object, looking through another object of the same
    folder: no other writer can commit meanwhile, so it does not wait for its own lock and names the orphan for
    sure; another thread looking meanwhile still waits for it (and, past the wait, says so)."""
    monkeypatch.setattr(maintenance, "ORPHAN_LOCK_WAIT", 0.3)
    path, shard = _orphan_store(tmp_path)
    holder = RepresentationStore(path)
    other = RepresentationStore(path, readonly=True, create=False)

    def looked():
        if look == "verify":
            report = other.verify()
            return report.orphans, report.orphans_note
        info = other.info()
        return info["orphans"], info["orphans_note"]

    elsewhere = []
    with holder.lock():
        own = looked()
        thread = threading.Thread(target=lambda: elsewhere.append(looked()))
        thread.start()
        thread.join(60)
    assert own == ([shard], None)
    ((orphans, note),) = elsewhere
    assert orphans == [shard] and note.startswith("another writer held the store's write lock for the 0.3 s"), note
