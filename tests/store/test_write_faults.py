"""Faults while a store is written: a write that fails between a shard and its manifest leaves no orphan."""

import errno

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
