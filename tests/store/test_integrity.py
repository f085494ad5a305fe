"""Store integrity: `repair` deletes nothing (leftovers of `tmp/` go to `quarantine/`, and are reported; a killed
writer's temporary file at once, a running one's never), never
moves a file through a `quarantine` that is a link or not a folder (verify names it, repair refuses before changing
anything), and `put` refuses an overflow hidden beside a NaN and a `meta` that is not a dict, naming it."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash
from hf_readonce.store.shards import _process_scope
from tests.conftest import write_jsonl
from tests.store.test_campaign import FP, N_DOCS, SETTINGS, assert_all_present, build, one_error_line, run_cli, shards


def _tree(path):
    """Every path under `path` (links listed, not followed) with its bytes (None for folders and links)."""
    found = {}
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(folder, name)
            found[os.path.relpath(p, path)] = (None if os.path.islink(p) or os.path.isdir(p)
                                               else open(p, "rb").read())
    return found


def test_repair_moves_leftovers_of_tmp_to_quarantine_and_says_so(tmp_path):
    path, hashes = build(tmp_path)
    (path / "tmp" / "notes.txt").write_text("important")
    report = RepresentationStore(path).verify()
    assert report.ok and report.leftovers == ["tmp/notes.txt"]
    result = RepresentationStore(path).repair()
    assert result["quarantined"] == ["tmp/notes.txt"] and not result["report"].corruptions
    kept = list((path / "quarantine").glob("*/tmp/notes.txt"))
    assert [p.read_text() for p in kept] == ["important"] and str(kept[0].parent.parent) == result["quarantine_folder"]
    assert not list((path / "tmp").iterdir())
    assert_all_present(path, hashes)


def test_repair_and_verify_leave_fresh_temporary_files_of_the_store_to_the_work_using_them(tmp_path):
    path, hashes = build(tmp_path)
    tmp = path / "tmp"
    probe = tmp / ".tmp-0123456789abcdef0123456789abcdef.probe"  # another process's check_writable, without the lock
    probe.write_bytes(b"")
    writing = tmp / ".tmp-fedcba9876543210fedcba9876543210.safetensors"  # a running encode's shard, half written
    writing.write_bytes(b"half")
    old = tmp / ".tmp-00000000000000000000000000000000.safetensors"  # a write killed long ago
    old.write_bytes(b"stale")
    stale = time.time() - 3600
    os.utime(old, (stale, stale))
    (tmp / "notes.txt").write_text("put there just now")  # not a name of the store's: moved whatever its age
    report = RepresentationStore(path).verify()
    assert report.ok and report.leftovers == [f"tmp/{old.name}", "tmp/notes.txt"], report.leftovers
    result = RepresentationStore(path).repair()
    assert result["quarantined"] == [f"tmp/{old.name}", "tmp/notes.txt"], result["quarantined"]
    assert probe.read_bytes() == b"" and writing.read_bytes() == b"half"  # left where they are
    moved = {p.name: p.read_bytes() for p in (path / "quarantine").glob("*/tmp/*")}
    assert moved == {old.name: b"stale", "notes.txt": b"put there just now"}
    os.utime(writing, (stale, stale))  # its writer is long gone: the next repair sets it aside too
    assert RepresentationStore(path).repair()["quarantined"] == [f"tmp/{writing.name}"]
    assert [p.read_bytes() for p in (path / "quarantine").glob(f"*/tmp/{writing.name}")] == [b"half"]
    assert probe.exists()
    assert_all_present(path, hashes)


_STALLED_WRITER = """
import os, sys, time
import torch
from hf_readonce.store import RepresentationStore, content_hash

def stall(*args, **kwargs):  # the temporary file is made; its rename (or removal) never comes
    print("stalled", flush=True)
    time.sleep(600)

store = RepresentationStore(sys.argv[1])
if sys.argv[2] == "shard":  # an encode committing a shard: under the lock
    os.replace = stall
    store.put("f" * 64, {"k": 2, "representation": "test/v1"}, content_hash("killed"), {"x": torch.zeros(4, 8)})
else:  # an encode's writability probe: without the lock
    os.unlink = stall
    store.check_writable()
"""


@pytest.mark.parametrize("write", ["shard", "probe"])
def test_a_killed_writers_temporary_file_is_a_leftover_at_once_and_a_running_ones_never(tmp_path, capsys, write):
    """A temporary file names its writer's process (`.tmp-<hex>-p<pid>-<scope><suffix>`): once that process is
    gone (SIGKILL midway), `verify` lists the file and `repair` moves it to quarantine/ at once, instead of after
    five minutes; while it runs, never. A name whose process id belongs to another machine or container (another
    scope) proves nothing: it waits for the five minutes."""
    if _process_scope() is None:
        pytest.skip("needs /proc (Linux): the boot id and the PID namespace that scope a process id")
    path, hashes = build(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", _STALLED_WRITER, str(path), write], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "stalled\n", writer.communicate()[1]
        (temp,) = (path / "tmp").iterdir()
        assert temp.name.startswith(".tmp-") and f"-p{writer.pid}-{_process_scope()}." in temp.name, temp.name
        assert RepresentationStore(path).verify().leftovers == []  # its writer runs
        if write == "probe":  # made without the lock: a repair runs beside it, and leaves it
            assert RepresentationStore(path).repair()["quarantined"] == [] and temp.exists()
    finally:
        writer.kill()
        writer.communicate(timeout=60)  # reaped: a zombie still holds its process id
    assert writer.returncode == -9
    written = temp.read_bytes()
    elsewhere = "0" * 16 if _process_scope() != "0" * 16 else "1" * 16
    foreign = path / "tmp" / f".tmp-{'a' * 32}-p{writer.pid}-{elsewhere}.safetensors"  # another container's
    foreign.write_bytes(b"half")
    report = RepresentationStore(path).verify()
    assert report.ok and report.leftovers == [f"tmp/{temp.name}"], report.leftovers
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 0 and "note: 1 file(s) left in tmp/" in out and temp.name in out, out
    result = RepresentationStore(path).repair()
    assert result["quarantined"] == [f"tmp/{temp.name}"], result["quarantined"]
    assert [p.read_bytes() for p in (path / "quarantine").glob(f"*/tmp/{temp.name}")] == [written]
    assert foreign.read_bytes() == b"half" and RepresentationStore(path).verify().leftovers == []
    assert_all_present(path, hashes)


def test_repair_of_a_healthy_store_with_foreign_files_reports_what_it_moved(tmp_path, checkpoint, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "context": "The cat sat on the mat."}])
    store = tmp_path / "s"
    args = ["encode", checkpoint, "--store", store, "--documents", docs, "--no-progress",
            "--max-passage-length", "32", "--doc-stride", "8"]
    assert run_cli(capsys, *args)[0] == 0
    (store / "tmp" / "z.txt").write_text("keep me")
    (store / "shards" / "photo.jpg").write_bytes(b"\xff\xd8 a photo")
    (store / "tmp" / "album").mkdir()
    (store / "tmp" / "album" / "a.txt").write_text("in a folder")
    status, out, _ = run_cli(capsys, "verify", "--store", store, "--no-progress")
    assert status == 1 and "shards/photo.jpg" in out and "tmp/z.txt" in out
    assert "note: 1 file(s) and 1 folder(s) left in tmp/" in out and "tmp/album, tmp/z.txt" in out, out
    status, _, err = run_cli(capsys, *args, "--repair")
    assert status == 0 and "nothing to repair" not in err, err
    assert "2 file(s) and 1 folder(s) moved to quarantine/" in err, err
    assert "shards/photo.jpg, tmp/album, tmp/z.txt" in err, err
    assert [p.read_text() for p in (store / "quarantine").glob("*/tmp/album/a.txt")] == ["in a folder"]
    assert [p.read_text() for p in (store / "quarantine").glob("*/tmp/z.txt")] == ["keep me"]
    assert [p.read_bytes() for p in (store / "quarantine").glob("*/shards/photo.jpg")] == [b"\xff\xd8 a photo"]
    status, _, err = run_cli(capsys, *args, "--repair")  # now nothing is left to move
    assert status == 0 and "nothing to repair" in err, err


def _store_with_a_quarantine_that_is_not_a_folder(tmp_path, kind: str):
    """A built store whose `quarantine` is a link to an empty folder `elsewhere` (`kind="link"`) or a regular file
    (`kind="file"`); returns `(store path, elsewhere)`."""
    path, _ = build(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if kind == "link":
        (path / "quarantine").symlink_to(elsewhere, target_is_directory=True)
    else:
        (path / "quarantine").write_text("a file, not a folder")
    return path, elsewhere


@pytest.mark.parametrize("kind", ["link", "file"])
def test_repair_refuses_a_quarantine_that_is_not_a_folder_and_changes_nothing(tmp_path, checkpoint, capsys, kind):
    path, elsewhere = _store_with_a_quarantine_that_is_not_a_folder(tmp_path, kind)
    victim = shards(path)[0]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 1  # a flipped byte: repair would move this shard and its manifest to quarantine/
    victim.write_bytes(bytes(data))
    (path / "tmp" / "notes.txt").write_text("important")
    before = _tree(path)
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and "PROBLEM quarantine: the store's folder quarantine/ is a" in out, out
    assert "CORRUPTED quarantine" not in out and "move quarantine/ away, then `hf-readonce encode" in out, out
    with pytest.raises(PermissionError, match="quarantine/ is a .*nothing was changed"):
        RepresentationStore(path).repair()
    assert _tree(path) == before and not list(elsewhere.iterdir())
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "context": "The cat sat on the mat."}])
    status, _, err = run_cli(capsys, "encode", checkpoint, "--store", path, "--documents", docs, "--no-progress",
                             "--max-passage-length", "32", "--doc-stride", "8", "--repair")
    line = one_error_line(err, "encode")
    assert status == 2 and "cannot repair" in line and str(path) in line and "quarantine/ is a" in line, err
    assert _tree(path) == before and not list(elsewhere.iterdir())
    marker = (path / "store.json").read_text()
    (path / "store.json").write_text("garbled")  # restoring the marker would move it to quarantine/ too
    before = _tree(path)
    status, _, err = run_cli(capsys, "encode", checkpoint, "--store", path, "--documents", docs, "--no-progress",
                             "--max-passage-length", "32", "--doc-stride", "8", "--repair")
    assert status == 2 and "quarantine/ is a" in one_error_line(err, "encode")
    assert _tree(path) == before and not list(elsewhere.iterdir())
    (path / "store.json").write_text(marker)
    (path / "quarantine").unlink()  # moved away: repair runs
    result = RepresentationStore(path).repair()
    assert str(victim.relative_to(path)) in result["quarantined"] and "tmp/notes.txt" in result["quarantined"]
    assert len(RepresentationStore(path)) >= N_DOCS - 2 and RepresentationStore(path).verify().ok


@pytest.mark.parametrize("kind", ["link", "file"])
def test_verify_of_a_quarantine_that_is_not_a_folder_says_move_it_away_and_never_repair(tmp_path, capsys, kind):
    path, _ = _store_with_a_quarantine_that_is_not_a_folder(tmp_path, kind)
    (path / "tmp").mkdir(exist_ok=True)
    (path / "tmp" / "notes.txt").write_text("left here")  # a leftover, which repair would move into quarantine/
    report = RepresentationStore(path).verify()
    assert not report.ok and not report.corruptions and report.quarantine_problem.startswith("is a")
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and "PROBLEM quarantine: the store's folder quarantine/ is a" in out, out
    assert "move quarantine/ away, then run verify again" in out and "move it away" in out, out
    tmp_note = "`encode --repair` moves them to quarantine/ once quarantine/ is a folder again"
    assert tmp_note in out, out
    # no advice to run repair as things are
    assert "repair" not in out.replace("repair moves damaged files into it", "").replace(tmp_note, ""), out
    assert "corrupted shard" not in out and "CORRUPTED" not in out, out
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress", "--json")
    result = json.loads(out)
    assert status == 1 and result["ok"] is False and result["corruptions"] == []
    assert result["quarantine_problem"].startswith("is a"), result


@pytest.mark.parametrize("special", [float("nan"), float("inf"), -float("inf")])
def test_fp16_overflow_beside_a_nan_or_inf_is_refused(tmp_path, special):
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(ValueError, match="overflows float16"):
        store.put(FP, SETTINGS, content_hash("a"), {"x": torch.tensor([special, 1e6])}, dtype="float16")
    assert len(store) == 0
    # NaN and inf already in the input are stored as given (beside values that fit)
    assert store.put(FP, SETTINGS, content_hash("b"), {"x": torch.tensor([special, 1.0])}, dtype="float16")
    got = store.get(FP, SETTINGS, content_hash("b"))["x"]
    assert got[1].item() == 1.0 and (got[0].isnan().item() if special != special else got[0].item() == special)


@pytest.mark.parametrize("kwargs, name", [({"meta": "abc"}, "meta"), ({"meta": [("id", 1)]}, "meta"),
                                          ({"meta": 5}, "meta"), ({"model_type": 5}, "model_type")])
def test_put_names_an_argument_of_the_wrong_type(tmp_path, kwargs, name):
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(TypeError, match=f"`{name}` must be"):
        store.put(FP, SETTINGS, content_hash("a"), {"x": torch.ones(2)}, **kwargs)
    assert len(store) == 0
