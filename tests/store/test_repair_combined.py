"""`repair` on stores with several faults at once: every document whose tensor bytes pass their checksums is kept,
whatever else is damaged beside it (several damaged shards, a damaged shard beside an unreadable manifest), and a
store written before the read checksum existed is re-indexed from its shards' headers."""

import hashlib
import json

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_save

from hf_readonce.store import RepresentationStore, content_hash

FP = "f" * 64
SETTINGS = {"k": 2, "representation": "test/v1"}


def states(i):
    return {"hidden_states": torch.randn(4, 8, generator=torch.Generator().manual_seed(i)),
            "input_ids": torch.arange(4, dtype=torch.int32) + i}


def build(tmp_path, n):
    """A store of `n` documents in shards of two documents, in commit order (fp32: reads compare exactly)."""
    path = tmp_path / "s"
    store = RepresentationStore(path)
    hashes = [content_hash(f"document {i}") for i in range(n)]
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=250) as writer:
        for i, h in enumerate(hashes):
            writer.add(h, states(i), meta={"id": f"doc-{i}"})
    return path, hashes


def manifest_of(path, shard_rel):
    return path / "index" / (shard_rel.rsplit("/", 1)[-1].removesuffix(".safetensors") + ".json")


def shards_in_order(path):
    """The shard paths (relative), with the content hashes each holds, in commit order."""
    out = []
    for manifest in sorted((path / "index").glob("*.json")):
        data = json.loads(manifest.read_text())
        out.append((data["shard"], list(data["documents"])))
    return out


def flip_last_document(path, shard_rel):
    """Flip bytes at the end of the shard: the tensor bytes of its last document (the data section ends the file)."""
    shard = path / shard_rel
    data = bytearray(shard.read_bytes())
    data[-4:] = bytes(b ^ 0xFF for b in data[-4:])
    shard.write_bytes(bytes(data))


def assert_kept(path, hashes, dropped):
    store = RepresentationStore(path)
    assert store.verify().ok
    for i, h in enumerate(hashes):
        if h in dropped:
            continue
        torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i))


def test_repair_keeps_the_intact_documents_of_every_damaged_shard(tmp_path):
    path, hashes = build(tmp_path, 6)
    layout = shards_in_order(path)
    assert [len(docs) for _, docs in layout] == [2, 2, 2]
    flip_last_document(path, layout[0][0])
    flip_last_document(path, layout[1][0])
    store = RepresentationStore(path)
    report = store.verify()
    damaged = {e.content_hash for e in report.corrupted_documents}
    assert damaged == {layout[0][1][-1], layout[1][1][-1]}  # one document of each shard
    result = store.repair()
    assert set(result["dropped"]) == damaged  # the intact first document of each shard is kept
    assert sorted(result["salvaged"]) == sorted({layout[0][1][0], layout[1][1][0]})
    assert_kept(path, hashes, damaged)


def test_repair_keeps_a_damaged_shards_intact_documents_beside_an_unreadable_manifest(tmp_path):
    path, hashes = build(tmp_path, 6)
    layout = shards_in_order(path)
    manifest_of(path, layout[0][0]).write_text("{cut short")  # its shard is intact: re-indexed from its header
    flip_last_document(path, layout[2][0])
    result = RepresentationStore(path).repair()
    assert result["dropped"] == [layout[2][1][-1]]
    assert_kept(path, hashes, {layout[2][1][-1]})


def test_repair_reindexes_a_shard_written_before_the_read_checksum_existed(tmp_path):
    """A shard of an earlier release (no `xxh3_128` in its header nor its manifest) whose manifest is lost: repair
    indexes it where it lies with a manifest that passes its schema (no empty `xxh3_128`), keeping every document."""
    path, hashes = build(tmp_path, 2)
    (shard_rel, _), = shards_in_order(path)
    shard = path / shard_rel
    with safe_open(str(shard), framework="pt") as handle:
        metadata, tensors = handle.metadata(), {key: handle.get_tensor(key) for key in handle.keys()}
    documents = json.loads(metadata["documents"])
    for record in documents.values():
        del record["xxh3_128"]
    metadata["documents"] = json.dumps(documents)
    shard.write_bytes(safetensors_save(tensors, metadata=metadata))
    manifest_of(path, shard_rel).unlink()
    store = RepresentationStore(path)
    assert not store.verify().ok  # an orphan holding documents the index lacks
    result = store.repair()
    assert result["dropped"] == [] and sorted(result["salvaged"]) == sorted(hashes)
    store = RepresentationStore(path)
    assert store._bad_manifests == {} and store.verify().ok
    assert_kept(path, hashes, set())
    record = json.loads(next((path / "index").glob("*.json")).read_text())
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == record["file_sha256"]  # indexed in place
