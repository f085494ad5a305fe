"""One `RepresentationStore` object shared by several threads of a process (a server answering from a thread pool
while another thread encodes): reads, `refresh`, listings, `info`, `verify` and `repair` beside a writer never see a
stored document as missing, an index half loaded, a shard being committed as an orphan, or a dictionary changing
under them; a `StoreWriter` shared by threads stores each document once. The races are forced where they can be
(a thread held at the critical point by an `Event`); the stress tests run the whole mix with a tiny switch
interval."""

import os
import sys
import threading

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash, space_key
from hf_readonce.store.keys import RepresentationSpace

FP = "f" * 64
SETTINGS = {"k": 2}
OTHER = {"k": 3}
SPACE = space_key(FP, SETTINGS)
HASHES = [content_hash(f"document {i}") for i in range(40)]


def value(i):
    return {"x": torch.full((3,), float(i))}


def run_threads(*targets):
    """Run each target in its own thread; re-raise the first exception any of them raised."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.fixture
def racy():
    """Switch threads as often as the interpreter allows, so that interleavings the GIL would hide happen."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def test_a_refresh_beside_another_threads_commit_keeps_the_committed_document(tmp_path, monkeypatch):
    # a refresh that listed index/ just before another thread committed a shard must not take the new manifest for
    # one that disappeared (a full reload from its stale listing would drop the document just committed)
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    listed, committed = threading.Event(), threading.Event()
    reader = threading.Thread(target=store.refresh)
    listdir = os.listdir

    def listing(path):
        names = listdir(path)
        if threading.current_thread() is reader and not listed.is_set():
            listed.set()
            committed.wait(timeout=1)  # the writer commits now, unless it must wait for this refresh
        return names

    monkeypatch.setattr(os, "listdir", listing)

    def write():
        store.put(FP, SETTINGS, HASHES[1], value(1))
        committed.set()

    writer = threading.Thread(target=write)
    reader.start()
    assert listed.wait(timeout=10)
    writer.start()
    reader.join()
    writer.join()
    assert store.has(SPACE, HASHES[1]) and len(store) == 2  # no refresh in between: the index as it is
    assert torch.equal(store.get(FP, SETTINGS, HASHES[1])["x"], value(1)["x"])


def test_a_read_during_another_threads_reload_finds_every_stored_document(tmp_path, monkeypatch):
    # another process prunes a space: this process's next refresh reloads the whole index. A read in a second thread
    # meanwhile must wait for it, not skip the manifests the reload has marked loaded but not read yet
    store = RepresentationStore(tmp_path / "s")
    for i in range(3):
        store.put(FP, SETTINGS, HASHES[i], value(i))
    store.put(FP, OTHER, HASHES[9], value(9))
    RepresentationStore(tmp_path / "s").prune([space_key(FP, OTHER)])
    holding, read = threading.Event(), threading.Event()
    load = store._load_manifest

    def loading(manifest, name):
        if not holding.is_set():
            holding.set()
            read.wait(timeout=1)  # the other thread reads now, unless it must wait for this reload
        return load(manifest, name)

    monkeypatch.setattr(store, "_load_manifest", loading)
    got = {}

    def get_all():
        assert holding.wait(timeout=10)
        try:
            got.update({h: store.get(FP, SETTINGS, h)["x"] for h in HASHES[:3]})
        finally:
            read.set()

    run_threads(store.refresh, get_all)
    assert all(torch.equal(got[h], value(i)["x"]) for i, h in enumerate(HASHES[:3]))
    assert len(store) == 3


def test_verify_beside_another_threads_commit_reports_no_orphan(tmp_path, monkeypatch):
    # a shard written, its manifest not yet: the commit of another thread of this process, not an orphan
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    written, go = threading.Event(), threading.Event()
    write_manifest = store._write_manifest

    def slow(*args, **kwargs):
        written.set()
        go.wait(timeout=10)
        return write_manifest(*args, **kwargs)

    monkeypatch.setattr(store, "_write_manifest", slow)
    writer = threading.Thread(target=store.put, args=(FP, SETTINGS, HASHES[1], value(1)))
    writer.start()
    try:
        assert written.wait(timeout=10)
        report = store.verify()
        info = store.info()
    finally:
        go.set()
        writer.join()
    assert report.ok and report.orphans == [], report.corruptions
    assert info["orphans"] == []
    assert store.verify().ok and len(store) == 2


def test_a_document_given_twice_to_one_commit_is_stored_once_and_reads(tmp_path):
    store = RepresentationStore(tmp_path / "s")
    space = RepresentationSpace(SPACE, FP, SETTINGS)
    committed = store.commit_shard(space, torch.float32, [(HASHES[0], value(0), {}), (HASHES[0], value(5), {}),
                                                          (HASHES[1], value(1), {})])
    assert committed == HASHES[:2]
    assert torch.equal(store.get(FP, SETTINGS, HASHES[0])["x"], value(0)["x"])  # the first given
    assert torch.equal(store.get(FP, SETTINGS, HASHES[1])["x"], value(1)["x"])
    assert store.verify().ok


def test_one_writer_shared_by_threads_stores_each_document_once(tmp_path, racy):
    store = RepresentationStore(tmp_path / "s")
    barrier = threading.Barrier(4)
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=40) as writer:

        def add_all():
            barrier.wait()
            for i, h in enumerate(HASHES):
                writer.add(h, value(i))

        run_threads(*[add_all] * 4)
    assert sorted(writer.committed) == sorted(HASHES)
    assert len(writer.committed) + len(writer.skipped) == 4 * len(HASHES)
    assert store.verify().ok
    for i, h in enumerate(HASHES):
        assert torch.equal(store.get(FP, SETTINGS, h)["x"], value(i)["x"])


def test_readers_listings_info_verify_and_repair_beside_a_writer(tmp_path, racy):
    store = RepresentationStore(tmp_path / "s")
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=1) as writer:  # a shard per document
        for i, h in enumerate(HASHES[:8]):
            writer.add(h, value(i))
    new = [content_hash(f"new {j}") for j in range(60)]
    done = threading.Event()
    barrier = threading.Barrier(5)

    def write():
        barrier.wait()
        try:
            for j, h in enumerate(new):
                store.put(FP, SETTINGS, h, value(100 + j))
        finally:
            done.set()

    def read():
        barrier.wait()
        n = 0
        while not done.is_set() or n < 50:
            i = n % 8
            assert torch.equal(store.get(FP, SETTINGS, HASHES[i])["x"], value(i)["x"])
            assert store.contains(FP, SETTINGS, HASHES[i]) and not store.missing(FP, SETTINGS, HASHES[:8])
            assert len(list(store.entries(FP, SETTINGS))) >= 8 and len(store) >= 8 and store.spaces()
            n += 1

    def describe():
        barrier.wait()
        while not done.is_set():
            info = store.info()
            assert info["documents"] >= 8 and not info["orphans"] and not info["duplicates"]

    def check():
        barrier.wait()
        while not done.is_set():
            report = store.verify()
            assert report.ok and not report.orphans, report.corruptions
            result = store.repair()
            assert not result["dropped"] and not result["quarantined"], result

    run_threads(write, read, read, describe, check)
    assert len(store) == 8 + len(new) and store.verify().ok
    for j, h in enumerate(new):
        assert torch.equal(store.get(FP, SETTINGS, h)["x"], value(100 + j)["x"])


def test_a_refresh_of_another_thread_between_a_manifest_and_its_loading_counts_no_duplicate(tmp_path, monkeypatch):
    # the manifest is on disk before the committing thread loads it: a refresh of another thread may read it first
    from hf_readonce.store import store as store_module

    store = RepresentationStore(tmp_path / "s")
    atomic_write = store_module._atomic_write

    def writing(path, data, tmp):
        atomic_write(path, data, tmp)
        if path.parent.name == "index":
            run_threads(store.refresh)

    monkeypatch.setattr(store_module, "_atomic_write", writing)
    store.put(FP, SETTINGS, HASHES[0], value(0))
    assert store.info()["duplicates"] == 0 and len(store) == 1
    assert torch.equal(store.get(FP, SETTINGS, HASHES[0])["x"], value(0)["x"])


# ------------------------------------------------------------------------------------------ processes and copies
def _forked(target, *args):
    """Run `target(*args)` in a child made by `fork`; returns what it put on the queue, or "hung" where the child has
    not finished within 60 s (killed then)."""
    import multiprocessing
    import queue as queue_module

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=target, args=(results, *args))
    child.start()
    try:
        return results.get(timeout=60)
    except queue_module.Empty:
        return "hung"
    finally:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join()


def _child_reads_and_writes(results, store):
    try:
        found = store.contains(FP, SETTINGS, HASHES[0])
        store.put(FP, SETTINGS, HASHES[1], value(1))
        results.put((found, torch.equal(store.get(FP, SETTINGS, HASHES[1])["x"], value(1)["x"])))
    except BaseException as error:  # noqa: BLE001 - handed to the parent
        results.put(f"{type(error).__name__}: {error}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_child_forked_while_another_thread_holds_the_index_reads_and_writes(tmp_path, monkeypatch):
    # a DataLoader or multiprocessing worker started by fork while a thread of the parent is inside a refresh: the
    # index lock that thread holds would be held in the child for good (the thread does not exist there)
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    inside, go = threading.Event(), threading.Event()
    listdir = os.listdir
    refresher = threading.Thread(target=store.refresh)

    def listing(path):
        if threading.current_thread() is refresher:
            inside.set()
            go.wait(timeout=60)
        return listdir(path)

    monkeypatch.setattr(os, "listdir", listing)
    refresher.start()
    try:
        assert inside.wait(timeout=10)
        got = _forked(_child_reads_and_writes, store)
    finally:
        go.set()
        refresher.join()
    assert got == (True, True)
    assert store.contains(FP, SETTINGS, HASHES[1]) and store.verify().ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_child_forked_after_a_write_writes_through_the_inherited_store(tmp_path):
    # the parent's write lock (a filelock, made on its first write) is refused by filelock in a child of a fork
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    assert _forked(_child_reads_and_writes, store) == (True, True)
    assert store.contains(FP, SETTINGS, HASHES[1]) and store.verify().ok
    store.put(FP, SETTINGS, HASHES[2], value(2))  # the parent's own lock still works
    assert len(store) == 3


def test_a_store_that_wrote_and_read_pickles_and_deepcopies(tmp_path):
    # `Dataset.map(..., num_proc=...)` and `copy.deepcopy` copy a store; its locks and open shards are its own
    import copy
    import pickle

    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    store.get(FP, SETTINGS, HASHES[0])  # an open shard handle in its cache
    for duplicate in (pickle.loads(pickle.dumps(store)), copy.deepcopy(store)):
        assert duplicate.path == store.path and len(duplicate) == 1
        assert torch.equal(duplicate.get(FP, SETTINGS, HASHES[0])["x"], value(0)["x"])
        duplicate.put(FP, SETTINGS, content_hash(f"copy {id(duplicate)}"), value(7))
        assert duplicate.verify().ok
    assert len(store) == 1  # the copies' indexes are their own
    store.refresh()
    assert len(store) == 3 and store.verify().ok


def test_datasets_fingerprints_a_store_that_wrote_as_one_opened_on_the_same_documents(tmp_path):
    # `Dataset.map(make_encode_function(adapter, store))` hashes the function and the store it holds (`datasets`
    # pickles them): a store that has written and read hashes, and as a store just opened on the same folder
    fingerprint = pytest.importorskip("datasets.fingerprint")
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    store.get(FP, SETTINGS, HASHES[0])
    assert fingerprint.Hasher.hash(store) == fingerprint.Hasher.hash(RepresentationStore(tmp_path / "s"))
    store.put(FP, SETTINGS, HASHES[1], value(1))
    assert fingerprint.Hasher.hash(store) != fingerprint.Hasher.hash(RepresentationStore(tmp_path / "t"))


def _child_puts(results, store):
    try:
        store.put(FP, SETTINGS, HASHES[1], value(1))
        results.put("written")
    except BaseException as error:  # noqa: BLE001 - handed to the parent
        results.put(type(error).__name__)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_forked_childs_commit_waits_for_the_parents_write_lock(tmp_path):
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, HASHES[0], value(0))
    store.lock_timeout = 0.2  # the child's write lock is made anew, with this timeout
    with store.lock():
        assert _forked(_child_puts, store) == "Timeout"
    assert not store.contains(FP, SETTINGS, HASHES[1])
    assert _forked(_child_puts, store) == "written"
    assert store.contains(FP, SETTINGS, HASHES[1])
