"""A store read by one long-running process (a server answering from it for days): what reads leave behind in
memory and open files, what a caller may do with what it read, and a shard cut short under an open store."""

import contextlib
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import hf_readonce
from hf_readonce.store import RepresentationStore, content_hash

FP = "f" * 64
SETTINGS = {"num_decomposed_layers": 2, "max_passage_length": 64}
WHOLE = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)  # stored as given


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
    """Reads keep nothing once their tensors are dropped, over as many reads as a server makes: far fewer Python
    memory blocks than one per ten tensor reads (safetensors' memory-mapped reader keeps two integers alive for good
    per tensor read; its pread reader's own caches settle at a few hundred blocks)."""
    store, hashes = _filled(tmp_path / "store")
    for _ in range(300):  # shards opened and cached, the caches of torch and safetensors filled
        store.get_many(FP, SETTINGS, hashes)
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(600):
        tensors = store.get_many(FP, SETTINGS, hashes)
    del tensors
    gc.collect()
    grown, reads = sys.getallocatedblocks() - before, 600 * 3 * len(hashes)
    assert grown < reads // 10, f"{grown} Python memory blocks left behind by {reads} tensor reads"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_open_shards_are_bounded_and_closed_with_the_store(tmp_path):
    """A store holds at most its 64 cached shards open, maps none of its files into memory, and closes them when it
    goes."""
    store, hashes = _filled(tmp_path / "store", documents=140, per_shard=2)  # 70 shards
    root = str(tmp_path / "store")

    def opened() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the descriptor of the listing itself is gone by now
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(root)
        return count

    def mapped() -> int:
        with open("/proc/self/maps") as listing:
            return sum(root in line for line in listing)

    for _ in range(2):
        tensors = store.get_many(FP, SETTINGS, hashes)
    del tensors
    gc.collect()
    assert 0 < opened() <= 64 and mapped() == 0
    del store
    gc.collect()
    assert opened() == 0


def test_a_tensor_read_is_the_callers_to_change(tmp_path):
    """Changing a tensor a read returned (in place, as a caller scaling its states does) changes neither the file
    nor any later read of the document, checked or not (through a view of a cached memory map the change would reach
    every later read: the changed values without checksums, a false corruption with them)."""
    store, hashes = _filled(tmp_path / "store")
    expected = _document(3)["hidden_states"].half()
    read = store.get(FP, SETTINGS, hashes[3])
    read["hidden_states"].mul_(7)
    read["input_ids"].fill_(0)
    for verify in (False, True):
        again = store.get(FP, SETTINGS, hashes[3], verify=verify)
        assert torch.equal(again["hidden_states"], expected), verify
        assert torch.equal(again["input_ids"], torch.arange(8, dtype=torch.int32)), verify
    assert torch.equal(RepresentationStore(tmp_path / "store").get(FP, SETTINGS, hashes[3])["hidden_states"], expected)


def test_a_read_tensor_outlives_its_store(tmp_path):
    """A tensor read from the store stays valid after the store is gone."""
    store, hashes = _filled(tmp_path / "store")
    read = store.get(FP, SETTINGS, hashes[3])["hidden_states"].clone()
    kept = store.get(FP, SETTINGS, hashes[3])["hidden_states"]
    del store
    gc.collect()
    assert torch.equal(kept, read) and kept.dtype == torch.float16


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_stored_dtype_reads_back_exactly(tmp_path, dtype):
    """Every dtype a store holds reads back with its dtype, shape and values, empty tensors beside them included."""
    store = RepresentationStore(tmp_path / "store")
    generator = torch.Generator().manual_seed(0)
    written = {"float": torch.randn(3, 5, generator=generator), "empty_float": torch.zeros(0, 4),
               "empty_whole": torch.zeros(2, 0, dtype=torch.int8)}
    written |= {str(d).removeprefix("torch."): (torch.arange(-7, 14) % 5).reshape(3, 7).to(d) for d in WHOLE}
    with store.writer(FP, SETTINGS, dtype=dtype) as writer:
        writer.add(content_hash("all dtypes"), written)
    read = RepresentationStore(tmp_path / "store").get(FP, SETTINGS, content_hash("all dtypes"))
    assert set(read) == set(written)
    for name, tensor in written.items():
        expected = tensor.to(getattr(torch, dtype)) if tensor.is_floating_point() else tensor
        got = read[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected), name


CUT_SHORT = """
import os, sys, torch
from hf_readonce.store import CorruptedShardError, RepresentationStore, content_hash
store = RepresentationStore(sys.argv[1])
fp, settings = "f" * 64, {"num_decomposed_layers": 2, "max_passage_length": 64}
with store.writer(fp, settings, dtype="float32") as writer:
    writer.add(content_hash("a"), {"hidden_states": torch.ones(1024, 256)})
    writer.add(content_hash("b"), {"hidden_states": torch.ones(1024, 256)})
store.get(fp, settings, content_hash("a"))  # the shard is open
shard = store.path / store.entry(fp, settings, content_hash("b")).shard
with open(shard, "r+b") as other:  # another program cuts the file short
    other.truncate(os.path.getsize(shard) // 2)
for verify in (False, True):
    try:
        read = store.get(fp, settings, content_hash("b"), verify=verify)
        print("read", float(read["hidden_states"].sum()))  # touches every byte the read returned
    except CorruptedShardError as error:
        print("CorruptedShardError", error)
"""


def test_a_shard_cut_short_while_open_is_an_error_not_a_crash(tmp_path):
    """A shard file cut short by another program while the store holds it open makes the read raise
    `CorruptedShardError`; the process lives on (a read through a memory map of the file ends it with SIGBUS)."""
    source = str(Path(hf_readonce.__file__).parents[1])
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(CUT_SHORT), str(tmp_path / "store")],
                            capture_output=True, text=True, env=environment, timeout=300)
    assert result.returncode == 0, f"the reading process ended with status {result.returncode}: {result.stderr[-500:]}"
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("CorruptedShardError") and "unreadable" in line for line in lines), \
        result.stdout
