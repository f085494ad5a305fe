"""The store's lock file (`STORE/.lock`): which operations make one, and that none is left where no store is. A store
moved or removed by hand while a writer has it open, between the writer's check and its lock (filelock makes the lock
file's folder), leaves nothing at its old path: the store can be moved back with `mv`. A read-only open, `verify`
and `info` make no lock file; an empty `.lock` inside a store is its own and harmless, and `verify` is silent
about it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from hf_readonce.store import ReadOnlyStoreError, RepresentationStore, content_hash
from tests.store.test_campaign import FP, SETTINGS, run_cli


def _on_first_lock(monkeypatch, path, act):
    """Call `act()` when a lock on `path / ".lock"` is first taken, before filelock opens the lock file: after the
    writer's look at its folder, as while it waits for a lock another process holds."""
    real_acquire, done = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        if not done and os.fspath(self.lock_file) == str(path / ".lock"):
            done.append(True)
            act()
        return real_acquire(self, *args, **kwargs)

    monkeypatch.setattr(FileLock, "acquire", acquire)
    return done


def _before_the_lock(monkeypatch, act):
    """Call `act()` when a writer first asks for its store's write lock (`RepresentationStore.lock`), right after
    its check (a store moved or removed by hand between a writer's check and its lock)."""
    real_lock, done = RepresentationStore.lock, []

    def lock(self):
        if not done:
            done.append(True)
            act()
        return real_lock(self)

    monkeypatch.setattr(RepresentationStore, "lock", lock)
    return done


@pytest.mark.parametrize("operation", ["put", "repair", "prune"])
@pytest.mark.parametrize("how", ["moved", "removed"])
def test_a_store_moved_or_removed_before_the_writers_lock_leaves_nothing_at_its_path(tmp_path, monkeypatch, how,
                                                                                     operation):
    """The writer (a commit, `repair`, `prune`) is refused, saying the store no longer exists, and its path is left
    as the user left it: no folder holding only `.lock` is made there, so `mv` puts the moved store back where it was
    (into a folder at the path it would go inside it)."""
    path = tmp_path / "s"
    store = RepresentationStore(path)
    assert store.put(FP, SETTINGS, content_hash("first"), {"x": torch.ones(2)})
    space = store.spaces()[0].key

    def away():
        if how == "moved":
            os.rename(path, tmp_path / "moved")
        else:
            shutil.rmtree(path)

    done = _before_the_lock(monkeypatch, away)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        if operation == "put":
            store.put(FP, SETTINGS, content_hash("second"), {"x": torch.zeros(2)})
        elif operation == "repair":
            store.repair()
        else:
            store.prune([space])
    monkeypatch.undo()
    assert done == [True]
    assert not os.path.lexists(path), sorted(os.listdir(path))
    if how == "moved":
        os.rename(tmp_path / "moved", path)  # `mv moved s`
        back = RepresentationStore(path, create=False)
        assert len(back) == 1 and back.verify().ok and back.contains(FP, SETTINGS, content_hash("first"))


@pytest.mark.parametrize("operation", ["put", "repair"])
@pytest.mark.parametrize("when", ["before the write", "after the writer's check"])
def test_an_empty_folder_made_at_a_moved_stores_path_is_left_as_it_is(tmp_path, monkeypatch, when, operation):
    """The store is moved away and an empty folder made at its path (`mv s moved; mkdir s`) while a writer has it
    open, before its write or between the check its lock follows and the lock: the writer is refused and the folder
    stays empty, without a `.lock` of the writer's in it."""
    path = tmp_path / "s"
    store = RepresentationStore(path)
    assert store.put(FP, SETTINGS, content_hash("first"), {"x": torch.ones(2)})

    def away():
        os.rename(path, tmp_path / "moved")
        path.mkdir()

    if when == "before the write":
        away()
    else:  # the check right before the lock: a writer's second (its first is made when it is created), repair's first
        real_check, calls = RepresentationStore.check_writable, []

        def check_writable(self, *args, **kwargs):
            real_check(self, *args, **kwargs)
            calls.append(True)
            if len(calls) == {"put": 2, "repair": 1}[operation]:
                away()

        monkeypatch.setattr(RepresentationStore, "check_writable", check_writable)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        if operation == "put":
            store.put(FP, SETTINGS, content_hash("second"), {"x": torch.zeros(2)})
        else:
            store.repair()
    monkeypatch.undo()
    assert path.is_dir() and os.listdir(path) == []
    assert len(RepresentationStore(tmp_path / "moved", create=False)) == 1


@pytest.mark.parametrize("operation", ["put", "repair", "prune"])
@pytest.mark.parametrize("how", ["moved", "removed"])
def test_a_folder_made_at_the_stores_path_while_the_writer_waits_for_its_lock_is_kept(tmp_path, monkeypatch, how,
                                                                                      operation):
    """The store is moved away (or removed) and an empty folder made at its path (`mv s moved; mkdir s`) while the
    writer waits for its lock (another process holds it): the writer is refused, and the folder made by hand is kept,
    empty (the writer's `.lock` is not left in it), not removed as a folder made for the lock file."""
    path = tmp_path / "s"
    store = RepresentationStore(path)
    assert store.put(FP, SETTINGS, content_hash("first"), {"x": torch.ones(2)})
    space = store.spaces()[0].key

    def away():
        if how == "moved":
            os.rename(path, tmp_path / "moved")
        else:
            shutil.rmtree(path)
        path.mkdir()

    done = _on_first_lock(monkeypatch, path, away)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        if operation == "put":
            store.put(FP, SETTINGS, content_hash("second"), {"x": torch.zeros(2)})
        elif operation == "repair":
            store.repair()
        else:
            store.prune([space])
    monkeypatch.undo()
    assert done == [True]
    assert path.is_dir() and os.listdir(path) == []
    if how == "moved":
        assert len(RepresentationStore(tmp_path / "moved", create=False)) == 1


def test_reading_makes_no_lock_file_and_a_stores_own_is_harmless(tmp_path, capsys):
    """A read-only open, `verify` and `info` make no `.lock`; the empty `.lock` a writer leaves in its store is not
    named by `verify`, and a store without one (copied without dot files) is written and verified as well."""
    path = tmp_path / "s"
    RepresentationStore(path).put(FP, SETTINGS, content_hash("first"), {"x": torch.ones(2)})
    assert (path / ".lock").is_file() and (path / ".lock").stat().st_size == 0
    (path / ".lock").unlink()
    reader = RepresentationStore(path, readonly=True, create=False)
    assert reader.verify().ok and reader.info()["documents"] == 1
    for command in (["verify", "--store", path], ["info", "--store", path]):
        assert run_cli(capsys, *command)[0] == 0
    assert not os.path.lexists(path / ".lock")
    RepresentationStore(path).put(FP, SETTINGS, content_hash("second"), {"x": torch.zeros(2)})
    assert (path / ".lock").is_file()
    status, out, err = run_cli(capsys, "verify", "--store", path)
    assert status == 0 and ".lock" not in out + err and "OK: 2 shard(s), 2 document(s)" in out


# a process holding the store's lock (`sys.argv[1]`) that renames the store's folder away to `sys.argv[2]` while it
# holds it, a second after a line on stdin says that the writer is about to wait (its first tries fail meanwhile)
_HOLDER = """
import os, sys, time
from filelock import FileLock
with FileLock(os.path.join(sys.argv[1], ".lock")):
    print("held", flush=True)
    sys.stdin.readline()
    time.sleep(1.0)
    os.rename(sys.argv[1], sys.argv[2])
"""


def test_a_store_moved_away_while_a_writer_waits_for_another_processs_lock_leaves_nothing_at_its_path(tmp_path,
                                                                                                      monkeypatch):
    """Real processes: another process holds the store's lock, the writer waits for it, and the store is moved away
    meanwhile. The writer is refused (the store no longer exists) and nothing is left at the old path: a filelock
    that made the lock file's folder again at each try (before 4.2.1) left an empty folder there, which `mv`
    would then move the store into."""
    path, moved = tmp_path / "s", tmp_path / "moved"
    store = RepresentationStore(path)
    assert store.put(FP, SETTINGS, content_hash("first"), {"x": torch.ones(2)})
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(moved)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"

        def waiting():
            holder.stdin.write("waiting\n")
            holder.stdin.flush()

        done = _on_first_lock(monkeypatch, path, waiting)
        with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
            store.put(FP, SETTINGS, content_hash("second"), {"x": torch.zeros(2)})
        monkeypatch.undo()
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    assert done == [True]
    assert not os.path.lexists(path), sorted(os.listdir(path))
    assert len(RepresentationStore(moved, create=False)) == 1


def _filelock_specifier(python_version: str):
    """The filelock requirement of pyproject.toml that applies under `python_version` (its marker evaluated)."""
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    environment = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    applying = [requirement.specifier for requirement in map(Requirement, project["dependencies"])
                if requirement.name == "filelock"
                and (requirement.marker is None or requirement.marker.evaluate(environment))]
    assert len(applying) == 1, applying
    return applying[0]


def test_the_filelock_requirement_leaves_out_the_releases_that_make_a_waited_for_locks_folder_again():
    """The store's lock relies on filelock making the lock file's folder once, before its first try (4.2.1 on,
    checked with real processes above; 3.12 to 4.2.0 make it at every try): on the Pythons those releases support
    (3.11 on) the declared requirement admits no earlier release."""
    for python_version in ("3.11", "3.13"):
        specifier = _filelock_specifier(python_version)
        assert specifier.contains("4.2.1") and specifier.contains("4.3.1")
        assert not any(specifier.contains(version) for version in ("3.12.4", "3.32.7", "4.0.0", "4.2.0"))


def test_the_filelock_requirement_is_installable_on_the_oldest_python_the_package_supports():
    """filelock 4.2.0 on declare `Requires-Python >=3.11` (4.0.0 and 4.1 still take 3.10): on the oldest Python of
    `requires-python` the filelock requirement admits a release that installs there."""
    from packaging.specifiers import SpecifierSet

    tomllib = pytest.importorskip("tomllib")
    with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as handle:
        requires_python = SpecifierSet(tomllib.load(handle)["project"]["requires-python"])
    oldest = next(version for version in ("3.9", "3.10", "3.11") if requires_python.contains(f"{version}.0"))
    if oldest != "3.10":
        pytest.skip(f"the oldest Python supported is {oldest}")
    assert _filelock_specifier(oldest).contains("4.0.0")
