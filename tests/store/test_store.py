"""RepresentationStore without any model: keying, shards, dtypes, durability, corruption and repair, concurrent
writers."""

import json
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_readonce.store import (
    CorruptedShardError,
    MissingRepresentationError,
    ReadOnlyStoreError,
    RepresentationMismatchError,
    RepresentationStore,
    content_hash,
    rank_of,
    representation_key,
    space_key,
)

FP = "f" * 64
SETTINGS = {"num_decomposed_layers": 2, "max_passage_length": 64}


def rand_states(n, d=8, seed=0):
    return {"hidden_states": torch.randn(n, d, generator=torch.Generator().manual_seed(seed))}


# ------------------------------------------------------------------------------------------------------ keying
@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1), fingerprint=st.text(alphabet="0123456789abcdef", min_size=1, max_size=64),
       k=st.integers(0, 24), length=st.integers(2, 512))
def test_keys_same_content_same_key_any_change_other_key(text, fingerprint, k, length):
    settings_ = {"num_decomposed_layers": k, "max_passage_length": length}
    key = representation_key(fingerprint, settings_, text)
    assert key == representation_key(fingerprint, dict(reversed(list(settings_.items()))), text)  # order-free
    assert key == representation_key(fingerprint, settings_, content_hash(text), is_hash=True)
    assert representation_key(fingerprint + "0", settings_, text)[0] != key[0]
    assert representation_key(fingerprint, {**settings_, "num_decomposed_layers": k + 1}, text)[0] != key[0]
    assert representation_key(fingerprint, {**settings_, "max_passage_length": length + 1}, text)[0] != key[0]
    assert representation_key(fingerprint, settings_, text + " ")[1] != key[1]
    assert 0 <= rank_of(key[1], 3) < 3 and rank_of(key[1], 3) == rank_of(content_hash(text), 3)


@settings(max_examples=30, deadline=None)
@given(hashes=st.lists(st.binary(min_size=1, max_size=16), min_size=1, max_size=50, unique=True),
       n=st.integers(1, 5))
def test_rank_sharding_is_a_partition(hashes, n):
    import hashlib

    hashes = [hashlib.sha256(h).hexdigest() for h in hashes]
    shares = [[h for h in hashes if rank_of(h, n) == r] for r in range(n)]
    assert sorted(h for share in shares for h in share) == sorted(hashes)


def test_key_argument_errors():
    with pytest.raises(TypeError, match="text"):
        content_hash(b"bytes")
    with pytest.raises(TypeError, match="fingerprint"):
        space_key("", {})
    with pytest.raises(TypeError, match="settings"):
        space_key(FP, [("k", 1)])
    with pytest.raises(ValueError, match="NaN"):
        space_key(FP, {"x": float("nan")})
    with pytest.raises(ValueError, match="num_processes"):
        rank_of(FP, 0)


# ------------------------------------------------------------------------------------------------------ storage
@pytest.mark.parametrize("dtype,torch_dtype", [("fp32", torch.float32), ("fp16", torch.float16),
                                               ("bf16", torch.bfloat16)])
def test_put_get_dtypes_and_restart(tmp_path, dtype, torch_dtype):
    store = RepresentationStore(tmp_path / "s")
    docs = {content_hash(f"doc {i}"): rand_states(5 + i, seed=i) for i in range(10)}
    with store.writer(FP, SETTINGS, dtype=dtype) as writer:
        for h, tensors in docs.items():
            writer.add(h, {**tensors, "input_ids": torch.arange(5)})
    reopened = RepresentationStore(tmp_path / "s")  # the index survives a restart
    assert len(reopened) == 10 and len(list((tmp_path / "s" / "shards").rglob("*.safetensors"))) == 1
    for h, tensors in docs.items():
        got = reopened.get(FP, SETTINGS, h)
        assert got["hidden_states"].dtype == torch_dtype and got["input_ids"].dtype == torch.int64
        torch.testing.assert_close(got["hidden_states"], tensors["hidden_states"].to(torch_dtype), rtol=0, atol=0)
    space = reopened.info()["spaces"][space_key(FP, SETTINGS)]
    assert space["dtypes"] == [str(torch_dtype).removeprefix("torch.")] and space["documents"] == 10
    # metadata of the shard: format version, fingerprint, dtype, checksums
    from safetensors import safe_open

    shard = next((tmp_path / "s" / "shards").rglob("*.safetensors"))
    with safe_open(str(shard), framework="pt") as handle:
        meta = handle.metadata()
    assert meta["format_version"] == "1" and meta["fingerprint"] == FP and meta["dtype"] == space["dtypes"][0]
    assert len(json.loads(meta["documents"])) == 10


@pytest.mark.parametrize("dtype,limit", [("fp16", 65504.0), ("bf16", 3.39e38)])
def test_finite_values_that_overflow_the_storage_dtype_are_refused(tmp_path, dtype, limit):
    store = RepresentationStore(tmp_path / "s")
    big = torch.zeros(3, 4, dtype=torch.float64)
    big[1, 2] = -limit * 1.01
    with store.writer(FP, SETTINGS, dtype=dtype) as writer:
        with pytest.raises(ValueError, match="tensor .hidden_states. overflows (float16|bfloat16)"):
            writer.add(content_hash("big"), {"hidden_states": big})
        # at the limit, and the NaN of a tensor that is already non-finite, are stored as given; a NaN does not
        # hide a finite value that overflows beside it
        at_limit = torch.full((2, 2), limit if dtype == "fp16" else 1e38)
        writer.add(content_hash("at limit"), {"hidden_states": at_limit})
        with pytest.raises(ValueError, match="overflows"):
            writer.add(content_hash("nan big"), {"hidden_states": torch.tensor([[float("nan"), -limit * 1.01]],
                                                                               dtype=torch.float64)})
        writer.add(content_hash("nan"), {"hidden_states": torch.tensor([[float("nan"), 1.0]])})
    assert len(store) == 2
    assert torch.isfinite(store.get(FP, SETTINGS, content_hash("at limit"))["hidden_states"]).all()


def test_shards_are_batched_by_size(tmp_path):
    store = RepresentationStore(tmp_path / "s")
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=4000) as writer:
        for i in range(20):
            writer.add(content_hash(str(i)), rand_states(25, seed=i))  # 800 bytes each
    shards = list((tmp_path / "s" / "shards").rglob("*.safetensors"))
    assert 3 <= len(shards) <= 6 and len(store) == 20


def test_mismatch_names_both_and_missing(tmp_path):
    store = RepresentationStore(tmp_path / "s")
    h = content_hash("a document")
    assert store.put(FP, SETTINGS, h, rand_states(3))
    assert not store.put(FP, SETTINGS, h, rand_states(3, seed=1))  # already stored: nothing changes
    torch.testing.assert_close(store.get(FP, SETTINGS, h)["hidden_states"], rand_states(3)["hidden_states"])
    other = "e" * 64
    with pytest.raises(RepresentationMismatchError) as error:
        store.get(other, SETTINGS, h)
    assert FP[:16] in str(error.value) and other[:16] in str(error.value)
    with pytest.raises(RepresentationMismatchError, match='"num_decomposed_layers":3'):
        store.get(FP, {**SETTINGS, "num_decomposed_layers": 3}, h)
    with pytest.raises(MissingRepresentationError, match="not in store"):
        store.get(FP, SETTINGS, content_hash("never stored"))


def test_bad_paths_and_read_only(tmp_path):
    file_path = tmp_path / "file"
    file_path.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        RepresentationStore(file_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "mine.txt").write_text("user data")
    with pytest.raises(ValueError, match="not a hf-readonce store"):
        RepresentationStore(tmp_path / "other")
    assert (tmp_path / "other" / "mine.txt").read_text() == "user data"
    with pytest.raises(ValueError, match="no store"):
        RepresentationStore(tmp_path / "absent", create=False)
    RepresentationStore(tmp_path / "s").put(FP, SETTINGS, content_hash("x"), rand_states(2))
    readonly = RepresentationStore(tmp_path / "s", readonly=True)
    before = sorted(p.name for p in (tmp_path / "s" / "index").iterdir())
    with pytest.raises(ReadOnlyStoreError):
        readonly.put(FP, SETTINGS, content_hash("y"), rand_states(2))
    assert sorted(p.name for p in (tmp_path / "s" / "index").iterdir()) == before
    with pytest.raises(ValueError, match="dtype"):
        RepresentationStore(tmp_path / "s").writer(FP, SETTINGS, dtype="int8")
    with pytest.raises(ValueError, match="document_hash"):
        RepresentationStore(tmp_path / "s").put(FP, SETTINGS, "not-a-hash", rand_states(2))


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corruption_detected_named_and_repaired(tmp_path, damage):
    store = RepresentationStore(tmp_path / "s")
    hashes = [content_hash(f"document {i}") for i in range(6)]
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=500) as writer:
        for i, h in enumerate(hashes):
            writer.add(h, rand_states(4, seed=i), meta={"id": f"doc-{i}"})
    shards = sorted((tmp_path / "s" / "shards").rglob("*.safetensors"))
    victim = shards[0]
    data = bytearray(victim.read_bytes())
    if damage == "flip":
        data[-10:] = bytes(b ^ 0xFF for b in data[-10:])  # inside the last document's tensor bytes
    else:
        data = data[: len(data) // 2]
    victim.write_bytes(bytes(data))
    report = RepresentationStore(tmp_path / "s").verify()
    assert not report.ok and len(report.corruptions) == 1
    line = report.corruptions[0].describe()
    assert victim.name in line and "doc-" in line
    bad = {entry.content_hash for entry in report.corrupted_documents}
    fresh = RepresentationStore(tmp_path / "s")
    with pytest.raises(CorruptedShardError) as error:
        for h in hashes:
            fresh.get(FP, SETTINGS, h)
    assert victim.name in str(error.value) and error.value.documents[0] in bad
    result = fresh.repair(report)
    assert set(result["dropped"]) <= bad and result["quarantined"]
    assert fresh.verify().ok
    for h in hashes:  # intact documents are kept, dropped ones are missing (to be recomputed)
        if h in result["dropped"]:
            assert not fresh.contains(FP, SETTINGS, h)
        else:
            torch.testing.assert_close(fresh.get(FP, SETTINGS, h)["hidden_states"],
                                       rand_states(4, seed=hashes.index(h))["hidden_states"])
    assert list((tmp_path / "s" / "quarantine").rglob("*"))  # never deleted


def _manifest_paths(root):
    return sorted((root / "index").rglob("*.json"))


def test_reads_check_the_fast_checksum_verify_checks_both(tmp_path, monkeypatch):
    """Every document records xxh3-128 beside SHA-256 (manifest and shard header); reads check only the fast one,
    `verify` both, and a wrong xxh3-128 is a named corruption on read."""
    import hf_readonce.store.store as store_module
    from hf_readonce.store import tensors_checksum, tensors_read_checksum

    store = RepresentationStore(tmp_path / "s")
    h = content_hash("document")
    store.put(FP, SETTINGS, h, rand_states(4))
    manifest = json.loads(_manifest_paths(tmp_path / "s")[0].read_text())
    doc = manifest["documents"][h]
    assert doc["xxh3_128"] == tensors_read_checksum(rand_states(4)) and len(doc["xxh3_128"]) == 32
    assert doc["sha256"] == tensors_checksum(rand_states(4))
    from safetensors import safe_open
    shard = next((tmp_path / "s" / "shards").rglob("*.safetensors"))
    with safe_open(str(shard), "pt") as handle:
        assert json.loads(handle.metadata()["documents"])[h]["xxh3_128"] == doc["xxh3_128"]

    calls = {"sha256": 0}
    real = store_module.tensors_checksum

    def counting(tensors):
        calls["sha256"] += 1
        return real(tensors)

    monkeypatch.setattr(store_module, "tensors_checksum", counting)
    fresh = RepresentationStore(tmp_path / "s")
    torch.testing.assert_close(fresh.get(FP, SETTINGS, h)["hidden_states"], rand_states(4)["hidden_states"])
    assert calls["sha256"] == 0  # the read checked xxh3-128 only
    assert fresh.verify().ok

    doc["xxh3_128"] = "0" * 32  # a recorded read checksum that does not match the bytes
    _manifest_paths(tmp_path / "s")[0].write_text(json.dumps(manifest))
    damaged = RepresentationStore(tmp_path / "s")
    with pytest.raises(CorruptedShardError, match="checksum mismatch"):
        damaged.get(FP, SETTINGS, h)
    report = damaged.verify()  # the shard is intact, its manifest is not: verify says so, repair re-indexes
    assert not report.ok and "disagree" in report.corruptions[0].describe()
    result = damaged.repair(report)
    assert result["salvaged"] == [h] and not result["dropped"]
    torch.testing.assert_close(RepresentationStore(tmp_path / "s").get(FP, SETTINGS, h)["hidden_states"],
                               rand_states(4)["hidden_states"])


def test_stores_of_earlier_releases_without_xxh3_are_checked_by_sha256(tmp_path):
    """A shard and manifest written before `xxh3_128` existed (neither records it): reads still succeed, and flipped
    bytes are still found on read."""
    import hashlib

    from safetensors import safe_open
    from safetensors.torch import save as safetensors_save

    store = RepresentationStore(tmp_path / "s")
    h = content_hash("old document")
    store.put(FP, SETTINGS, h, rand_states(6))
    shard = next((tmp_path / "s" / "shards").rglob("*.safetensors"))
    with safe_open(str(shard), framework="pt") as handle:
        metadata, tensors = handle.metadata(), {key: handle.get_tensor(key) for key in handle.keys()}
    documents = json.loads(metadata["documents"])
    del documents[h]["xxh3_128"]
    shard.write_bytes(safetensors_save(tensors, metadata={**metadata, "documents": json.dumps(documents)}))
    manifest_path = _manifest_paths(tmp_path / "s")[0]
    manifest = json.loads(manifest_path.read_text())
    del manifest["documents"][h]["xxh3_128"]
    manifest.update(file_size=shard.stat().st_size, file_sha256=hashlib.sha256(shard.read_bytes()).hexdigest())
    manifest_path.write_text(json.dumps(manifest))
    old = RepresentationStore(tmp_path / "s")
    torch.testing.assert_close(old.get(FP, SETTINGS, h)["hidden_states"], rand_states(6)["hidden_states"])
    assert old.verify().ok
    data = bytearray(shard.read_bytes())
    data[-8:] = bytes(b ^ 0xFF for b in data[-8:])
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptedShardError, match="checksum mismatch"):
        RepresentationStore(tmp_path / "s").get(FP, SETTINGS, h)


def test_concurrent_writers_do_not_corrupt_the_index(tmp_path):
    code = (
        "import sys, torch\n"
        "from hf_readonce.store import RepresentationStore, content_hash\n"
        "store = RepresentationStore(sys.argv[1])\n"
        "for i in range(40):\n"
        "    store.put('f' * 64, {'k': 1}, content_hash(f'{sys.argv[2]} {i % 30}'), {'x': torch.ones(3) * i})\n"
    )
    RepresentationStore(tmp_path / "s")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "s"), name]) for name in ("a", "b", "a")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    store = RepresentationStore(tmp_path / "s")
    assert len(store) == 60 and store.verify().ok  # 30 + 30 unique documents, none twice


def test_reads_refuse_what_is_not_a_content_hash_by_name(tmp_path):
    store = RepresentationStore(tmp_path / "s")
    text = "a stored document"
    store.put(FP, SETTINGS, content_hash(text), rand_states(2))
    doc = content_hash(text)
    for call in (lambda h: store.get(FP, SETTINGS, h), lambda h: store.contains(FP, SETTINGS, h),
                 lambda h: store.entry(FP, SETTINGS, h), lambda h: store.get_meta(FP, SETTINGS, h)):
        with pytest.raises(TypeError, match="`document_hash` must be a content hash"):
            call(None)
        for wrong in (text, doc.upper(), doc[:16]):  # the text itself, an uppercase or a truncated hash
            with pytest.raises(ValueError, match="64-character lowercase hex"):
                call(wrong)
    for call in (lambda h: store.missing(FP, SETTINGS, h), lambda h: store.get_many(FP, SETTINGS, h)):
        with pytest.raises(TypeError, match="not a single str"):
            call(doc)  # one string would be read as 64 one-character hashes
        with pytest.raises(ValueError, match=r"`document_hashes\[1\]`"):
            call([doc, "x"])
    assert store.missing(FP, SETTINGS, [doc, content_hash("other")]) == [content_hash("other")]
    assert len(store.get_many(FP, SETTINGS, (h for h in [doc]))) == 1


def test_lock_timeout_and_shard_size_are_checked_by_name(tmp_path):
    for bad in ("x", float("nan"), True):
        with pytest.raises(ValueError, match="`lock_timeout`"):
            RepresentationStore(tmp_path / "s", lock_timeout=bad)
    assert RepresentationStore(tmp_path / "s", lock_timeout=-1).lock_timeout == -1  # filelock's "no limit"
    store = RepresentationStore(tmp_path / "s", lock_timeout=float("inf"))
    for bad in (float("nan"), float("inf"), 0, "1"):
        with pytest.raises(ValueError, match="`shard_size_bytes`"):
            store.writer(FP, SETTINGS, shard_size_bytes=bad)


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_an_interrupt_while_committing_lands_after_the_manifest(tmp_path, monkeypatch, signum):
    """Ctrl-C or SIGTERM arriving between a shard's bytes and its manifest is held until both are written, then
    delivered: the store never keeps a shard without its manifest (an orphan `verify` would report)."""
    import os
    import signal

    from hf_readonce.store import store as store_module

    number = getattr(signal, signum)
    previous = signal.signal(number, signal.default_int_handler)  # as the CLI does for SIGTERM: raise
    try:
        real = store_module._atomic_write

        def write_then_interrupt(path, data, tmp):
            real(path, data, tmp)
            if str(path).endswith(".safetensors"):
                os.kill(os.getpid(), number)  # arrives after the shard, before its manifest

        monkeypatch.setattr(store_module, "_atomic_write", write_then_interrupt)
        store = RepresentationStore(tmp_path / "s")
        with pytest.raises(KeyboardInterrupt):
            store.put(FP, SETTINGS, content_hash("doc"), rand_states(2))
        reopened = RepresentationStore(tmp_path / "s")
        assert reopened.contains(FP, SETTINGS, content_hash("doc")) and reopened.verify().ok
        assert reopened.info()["orphans"] == []
    finally:
        signal.signal(number, previous)


def test_a_writer_stopped_by_an_interrupt_held_during_its_commit_counts_that_shard(tmp_path, monkeypatch):
    """The interrupt held while a shard and its manifest are written is delivered as `commit_shard` ends; the
    writer's `committed` already lists that shard's documents (a stopped `encode` reports them as committed)."""
    import os
    import signal

    from hf_readonce.store import store as store_module

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        real = store_module._atomic_write

        def write_then_interrupt(path, data, tmp):
            real(path, data, tmp)
            if str(path).endswith(".safetensors"):
                os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(store_module, "_atomic_write", write_then_interrupt)
        store = RepresentationStore(tmp_path / "s")
        writer = store.writer(FP, SETTINGS)
        hashes = [content_hash("a"), content_hash("b")]
        for doc in hashes:
            writer.add(doc, rand_states(2))
        with pytest.raises(KeyboardInterrupt):
            writer.flush()
        assert sorted(writer.committed) == sorted(hashes) and writer.skipped == []
        assert len(RepresentationStore(tmp_path / "s")) == 2
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_model_name_a_writer_gives_is_recorded_per_space_and_checked(tmp_path):
    """Two checkpoints of one family write two spaces that `info` told apart by fingerprint only: the name a writer
    gives (`model_name`, an opaque string) is recorded in each shard's manifest and header, listed per space by
    `info` (distinct names, first written first), compared by `verify`, and kept when `repair` re-indexes a shard
    whose manifest was lost. A store written without names (earlier releases) still reads, with no name listed."""
    root = tmp_path / "s"
    store = RepresentationStore(root)
    other = "e" * 64
    h1, h2, h3 = (content_hash(t) for t in ("one", "two", "three"))
    store.put(FP, SETTINGS, h1, rand_states(2), model_type="deformer_bert", model_name="runs/a")
    store.put(FP, SETTINGS, h2, rand_states(2), model_name="/copies/a")  # the same weights, copied elsewhere
    store.put(other, SETTINGS, h1, rand_states(2), model_type="deformer_bert", model_name="runs/b")
    store.put(other, SETTINGS, h3, rand_states(2))  # no name given: nothing recorded for this shard
    spaces = RepresentationStore(root).info()["spaces"]
    assert spaces[space_key(FP, SETTINGS)]["model_names"] == ["runs/a", "/copies/a"]
    assert spaces[space_key(other, SETTINGS)]["model_names"] == ["runs/b"]
    assert {s.key: s.model_name for s in RepresentationStore(root).spaces()}[space_key(other, SETTINGS)] == "runs/b"
    with pytest.raises(TypeError, match="`model_name` must be a str or None"):
        store.writer(FP, SETTINGS, model_name=3)
    assert RepresentationStore(root).verify().ok
    # a manifest whose name disagrees with its shard's header is named by verify
    manifests = _manifest_paths(root)
    named = next(p for p in manifests if json.loads(p.read_text()).get("model_name") == "runs/b")
    manifest = json.loads(named.read_text())
    named.write_text(json.dumps({**manifest, "model_name": "runs/c"}))
    report = RepresentationStore(root).verify()
    assert not report.ok and "`model_name` is 'runs/c', the shard's header says 'runs/b'" in report.corruptions[0].reason
    named.write_text(json.dumps({**manifest, "model_name": 7}))  # and one of the wrong type, by the schema
    damaged = RepresentationStore(root).verify()
    assert any("`model_name` must be a str or null" in c.reason for c in damaged.corruptions), damaged.corruptions
    # a lost manifest is rebuilt from the shard's header, name included
    named.unlink()
    RepresentationStore(root).repair()
    assert RepresentationStore(root).info()["spaces"][space_key(other, SETTINGS)]["model_names"] == ["runs/b"]
    # a manifest an earlier release rewrote (it records no name; the header still does): read and verified as before
    for path in _manifest_paths(root):
        manifest = json.loads(path.read_text())
        manifest.pop("model_name", None)
        path.write_text(json.dumps(manifest))
    rewritten = RepresentationStore(root)
    assert all(space["model_names"] == [] for space in rewritten.info()["spaces"].values())
    assert rewritten.get(FP, SETTINGS, h1)["hidden_states"].shape == (2, 8) and rewritten.verify().ok


def test_a_store_of_an_earlier_release_lists_no_model_name(tmp_path):
    """The 0.1.0 store (tests/fixtures/v0_1_0: no `model_name` in any manifest or shard header) reads and verifies,
    and `info` lists no name for its spaces; a document added now records its name beside them."""
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "v0_1_0" / "store", tmp_path / "s")
    store = RepresentationStore(tmp_path / "s")
    assert store.verify().ok and [s["model_names"] for s in store.info()["spaces"].values()] == [[], []]
    store.put(FP, SETTINGS, content_hash("new"), rand_states(2), model_name="runs/new")
    spaces = RepresentationStore(tmp_path / "s").info()["spaces"]
    assert spaces[space_key(FP, SETTINGS)]["model_names"] == ["runs/new"] and RepresentationStore(tmp_path / "s").verify().ok


def test_a_model_name_utf8_cannot_hold_is_recorded_escaped(tmp_path):
    """A local folder under a directory whose name is not UTF-8 (`os.fsdecode` gives its bytes as lone surrogates)
    made the first shard's commit fail after the model work (safetensors headers are UTF-8 JSON), where the same
    `encode` wrote before names were recorded: the name is recorded with those bytes escaped."""
    root = tmp_path / "s"
    RepresentationStore(root).put(FP, SETTINGS, content_hash("one"), rand_states(2), model_name="/home/caf\udce9/a")
    RepresentationStore(root).put(FP, SETTINGS, content_hash("two"), rand_states(2), model_name="b\ud800")
    store = RepresentationStore(root)
    assert store.info()["spaces"][space_key(FP, SETTINGS)]["model_names"] == ["/home/caf\\xe9/a", "b\\ud800"]
    assert store.verify().ok and len(store) == 2


def test_verify_names_a_manifest_that_records_a_model_name_its_shard_does_not(tmp_path):
    """A manifest is written from its shard's header, so a `model_name` only the manifest records is index damage
    (it would name a model that wrote nothing there): `verify` names it, as it does a name the two disagree on."""
    root = tmp_path / "s"
    RepresentationStore(root).put(FP, SETTINGS, content_hash("one"), rand_states(2))
    (path,) = _manifest_paths(root)
    path.write_text(json.dumps({**json.loads(path.read_text()), "model_name": "runs/never"}))
    report = RepresentationStore(root).verify()
    assert not report.ok and "`model_name` is 'runs/never', the shard's header records none" in \
        report.corruptions[0].reason, report.corruptions


def test_repair_keeps_the_model_name_of_the_documents_it_salvages(tmp_path):
    """`repair` rewrites the intact documents of a damaged shard into a new one: the new shard's manifest and header
    record the model name of the one it replaces."""
    root = tmp_path / "s"
    store = RepresentationStore(root)
    with store.writer(FP, SETTINGS, dtype="fp32", model_name="runs/a") as writer:
        for i in range(3):
            writer.add(content_hash(f"document {i}"), rand_states(4, seed=i))
    (victim,) = (root / "shards").rglob("*.safetensors")
    data = bytearray(victim.read_bytes())
    data[-10:] = bytes(b ^ 0xFF for b in data[-10:])  # inside the last document's tensor bytes
    victim.write_bytes(bytes(data))
    result = RepresentationStore(root).repair()
    assert len(result["dropped"]) == 1 and len(result["salvaged"]) == 2, result
    (manifest,) = [json.loads(p.read_text()) for p in _manifest_paths(root)]
    assert manifest["model_name"] == "runs/a"
    from safetensors import safe_open

    with safe_open(root / manifest["shard"], "pt") as shard:
        assert shard.metadata()["model_name"] == "runs/a"
    assert RepresentationStore(root).info()["spaces"][space_key(FP, SETTINGS)]["model_names"] == ["runs/a"]


def test_a_store_path_that_is_a_link_to_a_missing_folder_is_named_as_such(tmp_path):
    """`RepresentationStore(path)` where `path` is a symbolic link whose target does not exist: the error says so and
    names the target (it was mkdir's bare "[Errno 17] File exists"); nothing is created, the link is left as it is."""
    link = tmp_path / "store"
    link.symlink_to(tmp_path / "elsewhere" / "store")
    with pytest.raises(ReadOnlyStoreError, match="symbolic link to .*elsewhere/store, which does not exist"):
        RepresentationStore(link)
    assert link.is_symlink() and not (tmp_path / "elsewhere").exists()


def test_switches_given_as_strings_or_numbers_are_refused_by_name(tmp_path):
    """`create="no"`, `readonly="false"`, `prune(quarantine="no")`: a string reads as true, so a store was created
    where the caller said not to, opened read-only where it said writable, and `quarantine/` deleted where it said
    no; each switch is a bool, or a `TypeError` naming it, and nothing is created or deleted."""
    path = tmp_path / "store"
    with pytest.raises(TypeError, match=r"`create` must be a bool, got str 'no'"):
        RepresentationStore(path, create="no")
    assert not path.exists()
    store = RepresentationStore(path)
    store.put(FP, SETTINGS, content_hash("a"), {"x": torch.ones(2)})
    for name, value in (("readonly", "false"), ("verify_reads", 0), ("create", None)):
        with pytest.raises(TypeError, match=rf"`{name}` must be a bool, got"):
            RepresentationStore(path, **{name: value})
    assert RepresentationStore(path, readonly=False, verify_reads=False).readonly is False
    with pytest.raises(TypeError, match=r"`verify` must be a bool or None, got str 'no'"):
        store.get(FP, SETTINGS, content_hash("a"), verify="no")
    with pytest.raises(TypeError, match=r"`verify` must be a bool or None"):
        store.get_many(FP, SETTINGS, [content_hash("a")], verify=1)
    with pytest.raises(TypeError, match=r"`verify` must be a bool, got NoneType"):
        store.read_entry(next(store.entries()), verify=None)
    (path / "quarantine").mkdir()
    (path / "quarantine" / "kept.bin").write_bytes(b"aside")
    for name, value in (("quarantine", "no"), ("dry_run", "False")):
        with pytest.raises(TypeError, match=rf"`{name}` must be a bool, got str"):
            store.prune(**{"quarantine": True, name: value})
    assert (path / "quarantine" / "kept.bin").read_bytes() == b"aside"
    assert store.get(FP, SETTINGS, content_hash("a"), verify=False)["x"].tolist() == [1.0, 1.0]
