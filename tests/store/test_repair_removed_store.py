"""`repair` of a store that the command which created it removes again, empty ([`remove_empty_store`]), while the
repair starts or waits for the store's lock: the repair finds nothing to repair (the store is created anew, as every
writer creates it) or says that the store no longer exists; never a bare `FileNotFoundError`, nor "not writable".
Nor is a store being created taken for one that lost its marker."""

import inspect
import os
import shutil

import pytest
import torch
from filelock import FileLock

from hf_readonce.store import ReadOnlyStoreError, RepresentationStore, content_hash
from hf_readonce.store.maintenance import remove_empty_store
from tests.store.test_campaign import FP, SETTINGS


def _nothing_done(result) -> bool:
    return not result["salvaged"] and not result["dropped"] and not result["quarantined"] and result["report"].ok


def test_a_repair_of_a_store_removed_empty_since_it_was_opened_finds_nothing_to_repair(tmp_path, caplog):
    """The store is removed, empty, after the repairing handle opened it: the repair creates it anew (a `logging`
    warning says so) and finds nothing to repair. It failed saying the store had no write permission."""
    path = tmp_path / "s"
    repairer = RepresentationStore(path)
    assert remove_empty_store(path) and not path.exists()
    with caplog.at_level("WARNING"):
        assert _nothing_done(repairer.repair())
    assert "created anew" in caplog.text
    assert RepresentationStore(path, create=False).verify().ok


@pytest.mark.parametrize("how", ["create=False", "held documents"])
def test_a_repair_of_a_store_that_is_not_made_anew_says_it_no_longer_exists(tmp_path, how):
    """A handle opened with `create=False`, or one that saw the store holding documents (then it was removed by hand,
    not as an empty store), is told that the store no longer exists; nothing is created at the path. It was told
    the store had no write permission."""
    path = tmp_path / "s"
    RepresentationStore(path)
    if how == "create=False":
        repairer = RepresentationStore(path, create=False)
        assert remove_empty_store(path)
    else:
        repairer = RepresentationStore(path)
        assert repairer.put(FP, SETTINGS, content_hash("kept"), {"x": torch.ones(2)})
        shutil.rmtree(path)
    with pytest.raises(ReadOnlyStoreError, match="no longer exists") as caught:
        repairer.repair()
    assert "permission" not in str(caught.value) and not path.exists()


def test_a_repair_waiting_for_the_lock_while_the_store_is_removed_finds_nothing_to_repair(tmp_path, monkeypatch):
    """The clean-up holds the store's lock while the repair waits for it, renames the folder away and lets the lock
    go: the repair's next try finds no folder at the path. It creates the store anew and finds nothing to repair;
    nothing is written into the folder renamed away. It failed with a bare `FileNotFoundError` naming `.lock`."""
    if "cancel_check" not in inspect.signature(FileLock.acquire).parameters:
        pytest.skip("this filelock's acquire takes no cancel_check, to act between two tries of a wait")
    path, away = tmp_path / "s", tmp_path / ".s.removing"
    repairer = RepresentationStore(path)
    removal = FileLock(str(path / ".lock"), thread_local=False)  # as remove_empty_store holds it
    removal.acquire()
    real_acquire, renamed = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        if renamed or self is removal or os.fspath(self.lock_file) != str(path / ".lock"):
            return real_acquire(self, *args, **kwargs)

        def between_two_tries():
            if not renamed:
                os.rename(path, away)
                renamed.append(True)
                removal.release()
            return False

        return real_acquire(self, *args, cancel_check=between_two_tries, **kwargs)

    monkeypatch.setattr(FileLock, "acquire", acquire)
    assert _nothing_done(repairer.repair())
    monkeypatch.undo()
    assert renamed == [True] and RepresentationStore(path, create=False).verify().ok
    assert sorted(p.name for p in away.iterdir()) == [".lock", "index", "shards", "store.json", "tmp"]


def test_a_repair_whose_lock_is_taken_on_the_folder_renamed_away_repairs_the_store_at_the_path(tmp_path,
                                                                                               monkeypatch):
    """The folder is renamed away between the repair opening its lock file and locking it: the lock it holds guards
    the folder being removed, not the path. The repair lets it go, creates the store anew and repairs that (here:
    nothing to repair); nothing is moved or made in the folder renamed away. It failed saying the store "was removed
    again each of the 5 times" it was created anew (its own stale lock fooled every look), leaving an empty folder."""
    path, away = tmp_path / "s", tmp_path / ".s.removing"
    repairer = RepresentationStore(path)
    real_acquire, renamed = FileLock.acquire, []

    def acquire(self, *args, **kwargs):
        held = real_acquire(self, *args, **kwargs)
        if not renamed and os.fspath(self.lock_file) == str(path / ".lock"):
            os.rename(path, away)  # its lock file goes with it
            renamed.append(True)
        return held

    monkeypatch.setattr(FileLock, "acquire", acquire)
    assert _nothing_done(repairer.repair())
    monkeypatch.undo()
    assert renamed == [True] and RepresentationStore(path, create=False).verify().ok
    assert sorted(p.name for p in away.iterdir()) == [".lock", "index", "shards", "store.json", "tmp"]



@pytest.mark.parametrize("made", [("shards", "index"), ("shards", "index", "tmp"), ("shards", "index", "tmp", ".lock")])
def test_no_marker_is_restored_into_a_store_being_created(tmp_path, made):
    """`encode --repair` first writes a missing `store.json` into a folder with a store's `index/` and `shards/`
    (`restore_store_marker`): a folder holding only the empty skeleton another process is creating right now (its
    marker comes next) is left to it, and `encode --repair` does not say the store had lost its marker. A
    "restored" marker was written, and the repair said the store "had a store's folders but no readable store.json"."""
    from hf_readonce.store import restore_store_marker

    path = tmp_path / "s"
    path.mkdir()
    for name in made:
        if name == ".lock":
            (path / name).touch()
        else:
            (path / name).mkdir()
    (path / "tmp").mkdir(exist_ok=True)
    (path / "tmp" / ".tmp-0123456789abcdef.json").write_text("{")  # the creator's marker being written
    assert restore_store_marker(path) is False and not (path / "store.json").exists()
    (path / "index" / "lost.json").write_text("{}")  # a store's folders holding something: its marker is restored
    assert restore_store_marker(path) is True and (path / "store.json").is_file()


@pytest.mark.parametrize("damage", ["manifests lost", "index is a file", "quarantine"])
def test_a_repair_of_a_damaged_store_moved_by_hand_says_it_no_longer_exists(tmp_path, damage):
    """A store whose index lists nothing, but which holds shards (its manifests deleted, or `index/` made a file), or
    a `quarantine/` of an earlier repair, is no empty store that a failed command removes: moved away by hand while
    `encode --repair` had it open, it is said to no longer exist, and no new store is started at its path. It was
    created anew, empty, and the repair said there was nothing to repair (the shards left behind, where it was moved)."""
    path, away = tmp_path / "s", tmp_path / "moved"
    RepresentationStore(path).put(FP, SETTINGS, content_hash("kept"), {"x": torch.ones(2)})
    if damage == "manifests lost":
        for manifest in (path / "index").iterdir():
            manifest.unlink()
    elif damage == "index is a file":
        shutil.rmtree(path / "index")
        (path / "index").write_text("not a folder")
    else:
        (path / "quarantine").mkdir()
        shutil.rmtree(path / "index")
        shutil.rmtree(path / "shards")
    repairer = RepresentationStore(path)
    os.rename(path, away)  # `mv` by hand, while the repair loads its model
    with pytest.raises(ReadOnlyStoreError, match="no longer exists"):
        repairer.repair()
    assert not path.exists()
