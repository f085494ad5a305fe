"""The store at the scale of many shards: counts of the work its index does per repair step (never timings), on
stores of a few hundred shards."""

from pathlib import Path

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash

FP = "f" * 64
SETTINGS = {"k": 1}
SHARDS = 200


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """A store of SHARDS shards of one document each (as a pipeline that stores each new context writes it)."""
    path = tmp_path_factory.mktemp("scale") / "store"
    store = RepresentationStore(path)
    with store.writer(FP, SETTINGS, dtype="float32", shard_size_bytes=1) as writer:  # a shard per document
        for i in range(SHARDS):
            writer.add(content_hash(f"doc {i}"), {"x": torch.full((4,), float(i))}, meta={"id": str(i)})
    assert len(store.loaded_manifests) == SHARDS
    return path


def test_a_reader_sees_another_writers_commit_at_its_next_lookup(tmp_path):
    # refresh loads only the manifests it has not loaded yet: one committed since the last lookup is among them
    reader = RepresentationStore(tmp_path / "s")
    writer = RepresentationStore(tmp_path / "s")
    writer.put(FP, SETTINGS, content_hash("a"), {"x": torch.ones(2)})
    reader.refresh()
    assert not reader.contains(FP, SETTINGS, content_hash("b"))
    writer.put(FP, SETTINGS, content_hash("b"), {"x": torch.ones(2)})
    assert reader.contains(FP, SETTINGS, content_hash("b"))
    assert torch.equal(reader.get(FP, SETTINGS, content_hash("b"))["x"], torch.ones(2))


class _CountingDict(dict):
    """A dict that counts the walks over it (iteration, `items`, `keys`, `values`)."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()

    def items(self):
        type(self).walks += 1
        return super().items()

    def keys(self):
        type(self).walks += 1
        return super().keys()

    def values(self):
        type(self).walks += 1
        return super().values()


def test_forgetting_manifests_walks_no_other_shard(many_shards, monkeypatch):
    # repair forgets each manifest it retires: a look-up, not a walk over every shard of the index per manifest
    store = RepresentationStore(many_shards, create=False, readonly=True)
    names = store.loaded_manifests[:50]
    monkeypatch.setattr(_CountingDict, "walks", 0)
    store._shards = _CountingDict(store._shards)
    for name in names:
        store._forget_manifest(name)
    assert _CountingDict.walks == 0
    assert len(store) == SHARDS - 50 and len(store._shards) == SHARDS - 50
    assert all(name not in store.loaded_manifests for name in names)


def test_forgetting_a_shard_brings_back_the_copy_it_shadowed(tmp_path):
    # a document listed by two manifests: forgetting the shard that serves it serves it from the other one
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, content_hash("a"), {"x": torch.ones(2)})
    (first,) = store.loaded_manifests
    index = tmp_path / "s" / "index"
    shard = next((tmp_path / "s" / "shards").rglob("*.safetensors"))
    copy = "99999999999999999999-copy"
    (shard.parent / f"{copy}.safetensors").write_bytes(shard.read_bytes())
    manifest = (index / first).read_text().replace(shard.stem, copy)
    (index / f"{copy}.json").write_text(manifest)
    store = RepresentationStore(tmp_path / "s")
    assert store.info()["duplicates"] == 1
    store._forget_manifest(first)
    assert store.entry(FP, SETTINGS, content_hash("a")).shard.endswith(f"{copy}.safetensors")
    assert torch.equal(store.get(FP, SETTINGS, content_hash("a"))["x"], torch.ones(2))


def test_forgetting_manifests_walks_no_other_shard_while_another_space_holds_a_duplicate(many_shards, tmp_path,
                                                                                          monkeypatch):
    # a prune forgets each shard it deletes: a duplicate of another space (a shard and manifest copied there) is no
    # reason to walk every shard of the index per shard forgotten (a walk each: quadratic in the shards pruned)
    import json
    import shutil

    path = tmp_path / "store"
    shutil.copytree(many_shards, path)
    other = RepresentationStore(path)
    other.put("e" * 64, SETTINGS, content_hash("kept"), {"x": torch.ones(2)})
    kept = f"{Path(other.entry('e' * 64, SETTINGS, content_hash('kept')).shard).stem}.json"
    manifest = json.loads((path / "index" / kept).read_text())
    shard = path / manifest["shard"]
    copy = "00000000000000000000-copy"  # listed first: it serves the document, the original shadowed
    (shard.parent / f"{copy}.safetensors").write_bytes(shard.read_bytes())
    (path / "index" / f"{copy}.json").write_text(json.dumps({**manifest, "shard": manifest["shard"].replace(
        shard.stem, copy)}))
    store = RepresentationStore(path)
    assert store._duplicates == 1
    names = [name for name in store.loaded_manifests if name not in (kept, f"{copy}.json")][:50]
    monkeypatch.setattr(_CountingDict, "walks", 0)
    store._shards = _CountingDict(store._shards)
    for name in names:
        store._forget_manifest(name)
    assert _CountingDict.walks == 0
    assert len(store) == SHARDS + 1 - 50
    store._forget_manifest(f"{copy}.json")  # the copy that serves it: the original serves it again
    assert store.entry("e" * 64, SETTINGS, content_hash("kept")).shard == manifest["shard"]
