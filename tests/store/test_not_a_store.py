"""A folder without `store.json` is not a store: a store object whose folder was moved away and an empty folder made
at its path (`mv reps elsewhere; mkdir reps`), or whose marker was deleted, says so from `verify`, `info` and a
dry-run `prune` (`StoreNotFoundError`), instead of reporting a sound, empty store; opening such a folder to read says
what it holds."""

import os

import pytest
import torch

from hf_readonce.store import RepresentationStore, StoreNotFoundError, content_hash
from tests.store.test_campaign import FP, SETTINGS


def _store_with_a_document(path):
    store = RepresentationStore(path)
    assert store.put(FP, SETTINGS, content_hash("one"), {"x": torch.ones(3)})
    return store


@pytest.mark.parametrize("left", ["an empty folder", "an empty .lock", "the store's empty folders"])
def test_a_store_moved_away_and_a_folder_made_at_its_path_is_no_sound_empty_store(tmp_path, left):
    path = tmp_path / "reps"
    store = _store_with_a_document(path)
    os.rename(path, tmp_path / "elsewhere")
    path.mkdir()
    if left == "an empty .lock":
        (path / ".lock").touch()
    elif left == "the store's empty folders":
        for sub in ("shards", "index", "tmp"):
            (path / sub).mkdir()
    before = sorted(os.listdir(path))
    for check in (store.verify, store.info, lambda: store.prune(quarantine=True, dry_run=True)):
        with pytest.raises(StoreNotFoundError, match="no store at .* any more") as caught:
            check()
        assert "no store.json" in str(caught.value) and str(path) in str(caught.value)
    if left == "an empty folder":
        assert "it is an empty folder" in str(caught.value)
    assert sorted(os.listdir(path)) == before  # nothing is created or changed there
    moved = RepresentationStore(tmp_path / "elsewhere", create=False)
    assert len(moved) == 1 and moved.verify().ok and moved.info()["documents"] == 1
    with pytest.raises(StoreNotFoundError, match="no store.json"):
        RepresentationStore(path, readonly=True)


def test_a_deleted_marker_under_an_open_store_is_said_with_its_repair(tmp_path):
    """The marker of an open store is deleted: `verify` and `info` say that no store is at the path and name the way
    to write a new marker; the shards are untouched."""
    path = tmp_path / "reps"
    store = _store_with_a_document(path)
    (path / "store.json").unlink()
    for check in (store.verify, store.info):
        with pytest.raises(StoreNotFoundError, match="restore_store_marker") as caught:
            check()
        assert "--repair" in str(caught.value)
    assert len(list((path / "shards").rglob("*.safetensors"))) == 1
