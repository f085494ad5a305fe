"""A store read by one long-running process (a server answering from it for days): what reads leave behind in
memory, open files and memory maps."""

import gc
import os
import sys

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash

FP = "f" * 64
SETTINGS = {"num_decomposed_layers": 2, "max_passage_length": 64}
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool)


def _document(i: int) -> dict:
    generator = torch.Generator().manual_seed(i)
    return {"hidden_states": torch.randn(5 + i, 8, generator=generator),
            "input_ids": torch.arange(5 + i, dtype=torch.int32), "mask": torch.arange(3 + i) % 2 == 0}


def _filled(path, documents: int = 6, per_shard: int = 2) -> tuple[RepresentationStore, list[str]]:
    store = RepresentationStore(path)
    hashes = [content_hash(f"document {i}") for i in range(documents)]
    for first in range(0, documents, per_shard):
        with store.writer(FP, SETTINGS, dtype="float16") as writer:
            for i in range(first, min(first + per_shard, documents)):
                writer.add(hashes[i], _document(i))
    return store, hashes


def test_repeated_reads_leave_no_python_object_behind(tmp_path):
    """Every read of a stored document slices the shard's map and keeps nothing once its tensors are dropped, over
    as many reads as a server makes (safetensors' own torch reader keeps two integers alive for good per tensor
    read: 3 tensors x 6 documents x 2 per round)."""
    store, hashes = _filled(tmp_path / "store")
    for _ in range(20):  # shard maps opened and cached, every lazy first-use allocation made
        store.get_many(FP, SETTINGS, hashes)
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(300):
        tensors = store.get_many(FP, SETTINGS, hashes)
    del tensors
    gc.collect()
    grown = sys.getallocatedblocks() - before
    assert grown < 300, f"{grown} Python memory blocks left behind by 300 rounds of reads"


def test_reads_open_no_file_and_maps_are_bounded_and_released(tmp_path):
    """Reads keep no file descriptor open; the shard maps a store holds are at most its 64 cached ones, and go
    with the store."""
    store, hashes = _filled(tmp_path / "store", documents=140, per_shard=2)  # 70 shards
    descriptors = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None

    def maps() -> int:
        with open("/proc/self/maps") as listing:
            return sum(str(tmp_path) in line for line in listing)

    for _ in range(2):
        tensors = store.get_many(FP, SETTINGS, hashes)
    del tensors
    gc.collect()
    if descriptors is not None:
        assert len(os.listdir("/proc/self/fd")) == descriptors
    if os.path.exists("/proc/self/maps"):
        assert 0 < maps() <= 64
        del store
        gc.collect()
        assert maps() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mapped_shard_reads_what_safetensors_reads(tmp_path, dtype):
    """`MappedShard` gives every tensor of a shard exactly as safetensors' reader does (dtype, shape, values),
    odd sizes and empty tensors beside it included (a tensor whose bytes do not start at a multiple of its size is
    copied)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from hf_readonce.store.shards import MappedShard

    tensors = {"a": (torch.arange(7 * 3) % 5).reshape(7, 3).to(dtype), "b": torch.ones(3, dtype=torch.uint8),
               "c": torch.zeros(0, 4, dtype=dtype), "d": torch.arange(5, dtype=torch.float64)}
    path = str(tmp_path / "shard.safetensors")
    save_file(tensors, path, metadata={"documents": "[]"})
    mapped, reference = MappedShard(path), safe_open(path, framework="pt")
    assert mapped.metadata == reference.metadata()
    for key in reference.keys():
        got, expected = mapped.get_tensor(key), reference.get_tensor(key)
        assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected), key
    with pytest.raises(KeyError, match="no tensor 'e'"):
        mapped.get_tensor("e")


def test_a_read_tensor_outlives_its_store(tmp_path):
    """A tensor read from the store keeps its shard's map alive after the store is gone."""
    store, hashes = _filled(tmp_path / "store")
    read = store.get(FP, SETTINGS, hashes[3])["hidden_states"].clone()
    kept = store.get(FP, SETTINGS, hashes[3])["hidden_states"]
    del store
    gc.collect()
    assert torch.equal(kept, read) and kept.dtype == torch.float16


def test_mapped_shard_refuses_only_the_tensor_no_store_writes(tmp_path):
    """A tensor of a dtype no store writes (float8) is refused by name, with its header record; the shard's other
    tensors read as before."""
    from safetensors.torch import save_file

    from hf_readonce.store.shards import MappedShard

    path = str(tmp_path / "shard.safetensors")
    save_file({"kept": torch.arange(4.0), "odd": torch.zeros(2, dtype=torch.float8_e4m3fn)}, path)
    mapped = MappedShard(path)
    assert torch.equal(mapped.get_tensor("kept"), torch.arange(4.0))
    with pytest.raises(ValueError, match="tensor 'odd' of the shard has a dtype, shape or byte range no store writes"):
        mapped.get_tensor("odd")
