"""Faults while a store is written: a write that fails between a shard and its manifest leaves no orphan, and several
processes may create the same store at once."""

import errno
import multiprocessing

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash
from hf_readonce.store import store as store_module

FP = "f" * 64
SETTINGS = {"k": 2, "representation": "test/v1"}


def states(i):
    return {"hidden_states": torch.randn(4, 8, generator=torch.Generator().manual_seed(i))}


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "interrupt"])
def test_a_manifest_that_cannot_be_written_leaves_no_orphan_shard(tmp_path, monkeypatch, error):
    store = RepresentationStore(tmp_path / "s")
    first = content_hash("kept")
    store.put(FP, SETTINGS, first, states(0))
    real = store_module._atomic_write

    def failing(path, data, tmp_dir):
        if path.parent.name == "index":
            raise error
        return real(path, data, tmp_dir)

    monkeypatch.setattr(store_module, "_atomic_write", failing)
    with pytest.raises(type(error)):
        store.put(FP, SETTINGS, content_hash("lost"), states(1))
    monkeypatch.undo()
    store = RepresentationStore(tmp_path / "s")
    report = store.verify()
    assert report.ok and report.orphans == [] and report.leftovers == []
    assert len(list((tmp_path / "s" / "shards").rglob("*.safetensors"))) == 1
    torch.testing.assert_close(store.get(FP, SETTINGS, first), states(0))
    assert store.put(FP, SETTINGS, content_hash("lost"), states(1))  # a re-run stores it


def _open(path, barrier, results):
    barrier.wait()
    try:
        RepresentationStore(path)
        results.put("ok")
    except Exception as error:  # noqa: BLE001 - reported to the parent
        results.put(f"{type(error).__name__}: {error}")


def test_a_folder_holding_the_empty_skeleton_of_a_store_being_created_opens(tmp_path):
    """What another process creating the store leaves for a moment (its folders, the marker's temporary file, not
    yet the marker): opened as a new store, not refused as a store whose store.json was deleted."""
    path = tmp_path / "s"
    for sub in ("index", "shards", "tmp"):
        (path / sub).mkdir(parents=True)
    (path / "tmp" / ".tmp-0123456789abcdef.json").write_bytes(b"{")
    with pytest.raises(ValueError, match="no store"):
        RepresentationStore(path, readonly=True)
    store = RepresentationStore(path)
    store.put(FP, SETTINGS, content_hash("a"), states(0))
    assert RepresentationStore(path).verify().ok
    (path / "store.json").unlink()  # a store that holds documents is still never taken for a new one
    with pytest.raises(ValueError, match="no store.json"):
        RepresentationStore(path)


@pytest.mark.parametrize("made", ["shards", "shards+index", "lock", "lock+shards+index+tmp"])
def test_each_skeleton_a_store_being_created_or_emptied_leaves_opens(tmp_path, made):
    """The folders `_create` makes, in its order, and the empty `.lock` the lock leaves (`rm -r STORE/*` keeps it)."""
    path = tmp_path / "s"
    path.mkdir()
    for part in made.split("+"):
        if part == "lock":
            (path / ".lock").touch()
        else:
            (path / part).mkdir()
    store = RepresentationStore(path)
    assert store.put(FP, SETTINGS, content_hash("a"), states(0)) and RepresentationStore(path).verify().ok


@pytest.mark.parametrize("made", ["lock with bytes", "tmp", "tmp with a file", "index", "index+tmp",
                                  "lock with bytes+shards+index+tmp"])
def test_a_folder_no_store_creation_leaves_is_refused_and_kept_as_it_is(tmp_path, made):
    """A `.lock` holding bytes (the lock never writes into it), or a `tmp/` or `index/` without the folders a store
    makes before it, is no store's making: the folder may be a user's, and is refused, not taken over. The refusal
    names what the folder holds: a `.lock` alone (left by `rm -r STORE/*` after a killed writer whose lock wrote into
    it, on a file system without `flock`) is a folder that `ls` shows empty."""
    path = tmp_path / "s"
    path.mkdir()
    for part in made.split("+"):
        if part == "lock with bytes":
            (path / ".lock").write_text("my notes")
        else:
            (path / part.split()[0]).mkdir()
            if part == "tmp with a file":
                (path / "tmp" / ".tmp-mine.json").write_text("{}")
    before = sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
    with pytest.raises(ValueError, match="no store.json") as refused:
        RepresentationStore(path)
    if "shards" not in made:  # (a folder with index/ and shards/ is named as a store that lost its store.json)
        held = sorted(".lock" if part.startswith("lock") else part.split()[0] + "/" for part in made.split("+"))
        assert f"it holds {', '.join(held)})" in str(refused.value), str(refused.value)
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) == before
    if "lock" in made:
        assert (path / ".lock").read_text() == "my notes"


def test_processes_creating_the_same_store_at_once_all_open_it(tmp_path):
    """Jobs started together on a new store (a job array, two terminals): none is told the store lost its
    store.json, or is not a store, because another was half-way through creating it."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs fork (spawned processes take too long to start for the race to show)")
    context = multiprocessing.get_context("fork")
    for attempt in range(4):
        path = tmp_path / f"s{attempt}"
        barrier, results = context.Barrier(4), context.Queue()
        processes = [context.Process(target=_open, args=(str(path), barrier, results)) for _ in range(4)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        outcomes = [results.get(timeout=10) for _ in processes]
        assert outcomes == ["ok"] * 4, outcomes
        assert RepresentationStore(path).verify().ok


# ------------------------------------------------------------------------------------------ --encode-missing
def _disk_full_on_shard_writes(monkeypatch):
    real = store_module._atomic_write

    def full(path, data, tmp_dir):
        if path.suffix == ".safetensors":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data, tmp_dir)

    monkeypatch.setattr(store_module, "_atomic_write", full)


def _cli(capsys, *argv):
    from hf_readonce.cli import main as cli_main

    status = cli_main([str(a) for a in argv])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error:" in line]
    assert "Traceback" not in err and len(errors) == 1, err
    return status, errors[0]


def test_answer_encode_missing_on_a_full_disk_is_a_store_error(tmp_path, checkpoint, monkeypatch, capsys):
    """A disk that fills up while `answer --encode-missing` stores the passages: one line naming the store and
    the cause, as `encode` says it (not the line of an unexpected error), and what was stored before is kept."""
    from tests.conftest import write_jsonl

    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "question": "Where?", "context": "On the mat."}])
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, content_hash("stored before"), states(0))
    _disk_full_on_shard_writes(monkeypatch)
    status, line = _cli(capsys, "answer", checkpoint, "--store", tmp_path / "s", "--questions", questions,
                        "--output", tmp_path / "p.jsonl", "--encode-missing", "--no-progress",
                        "--max-passage-length", "32", "--doc-stride", "8")
    assert status == 2 and line.startswith("hf-readonce answer: error:")
    assert "No space left on device" in line and str(tmp_path / "s") in line and "unexpected" not in line
    monkeypatch.undo()
    store = RepresentationStore(tmp_path / "s")
    assert len(store) == 1 and store.verify().ok and not (tmp_path / "p.jsonl").exists()


def test_summarize_encode_missing_on_a_full_disk_is_a_store_error(tmp_path, tokenizer, monkeypatch, capsys):
    from tests.conftest import write_jsonl
    from tests.tasks.test_summarization_store import longdoc

    model = tmp_path / "longdoc"
    longdoc(tokenizer).save_pretrained(model)
    tokenizer.save_pretrained(model)
    docs = write_jsonl(tmp_path / "d.jsonl", [{"id": "d", "document": "The cat sat on the mat in the hall."}])
    _disk_full_on_shard_writes(monkeypatch)
    status, line = _cli(capsys, "summarize", model, "--store", tmp_path / "s", "--documents", docs,
                        "--output", tmp_path / "out.jsonl", "--encode-missing", "--max-new-tokens", "2",
                        "--no-progress")
    assert status == 2 and line.startswith("hf-readonce summarize: error:")
    assert "No space left on device" in line and str(tmp_path / "s") in line and "unexpected" not in line
    assert not (tmp_path / "s").exists()  # the store this run created held nothing: removed
