"""The fault and bad-input campaign of issue 33, kept as tests: the cases that were silent, lost data, showed a
traceback or were unclear, each re-run and checked to be *handled*: `verify` names the damage (manifest or shard,
and the field), `repair()` through the API, with no text to recompute from, keeps every document whose tensor bytes
are intact, every CLI error is one line naming the input and what to do, and no file outside the store is touched.

Each test id starts with its item of the issue (`item1-` ... `item7-`); the campaign table of the issue's closing
note counts them. Tiny random models (a DeFormer and a block-attention Llama with the MiniLM tokenizer) and stores of
a few documents keep the module well under a minute on 2 cores. New names (e.g. `current_fingerprint`) are imported
inside the tests, so the module also runs against an older hf-readonce (each test then fails on its own).
"""

import json
import logging
import os
import shutil
import stat
import threading
from contextlib import contextmanager

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.store import CorruptedShardError, RepresentationStore, content_hash
from tests.conftest import tiny_model, write_jsonl

FP = "e" * 64
SETTINGS = {"k": 2, "representation": "campaign/v1"}
MODEL_TYPE = "tiny_family"
N_DOCS = 6


def states(i, kv=False):
    generator = torch.Generator().manual_seed(i)
    if kv:  # a decoder's per-document cache: keys and values of the same shape
        return {"keys": torch.randn(2, 2, 4, 8, generator=generator), "values": torch.randn(2, 2, 4, 8, generator=generator),
                "input_ids": torch.arange(4, dtype=torch.int32) + i}
    return {"hidden_states": torch.randn(4, 8, generator=generator), "input_ids": torch.arange(4, dtype=torch.int32) + i}


def build(tmp_path, n=N_DOCS, kv=False):
    """A store of `n` documents in shards of two (fp32: reads compare exactly), with a model type in the header."""
    path = tmp_path / "s"
    store = RepresentationStore(path)
    hashes = [content_hash(f"campaign document {i}") for i in range(n)]
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=250 if not kv else 1000,
                      model_type=MODEL_TYPE) as writer:
        for i, h in enumerate(hashes):
            writer.add(h, states(i, kv), meta={"id": f"doc-{i}"})
    return path, hashes


def manifests(path):
    return sorted((path / "index").glob("*.json"))


def shards(path):
    return sorted((path / "shards").rglob("*.safetensors"))


def assert_all_present(path, hashes, kv=False):
    """0 lost documents: every document exactly once, readable, equal to what was written; verify passes."""
    store = RepresentationStore(path)
    assert len(store) == len(hashes) and store.info()["duplicates"] == 0
    listed = [h for m in manifests(path) for h in json.loads(m.read_text())["documents"]]
    assert sorted(listed) == sorted(hashes), "a document is indexed twice or not at all"
    for i, h in enumerate(hashes):
        torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i, kv))
    report = store.verify()
    assert report.ok, [c.describe() for c in report.corruptions]


def run_cli(capsys, *argv):
    """`hf-readonce ARGV` in process: (exit status, stdout, stderr). An uncaught exception fails the test (it would
    be a traceback for a user)."""
    status = cli_main([str(a) for a in argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return status, out.out, out.err


def one_error_line(err, command):
    """The stderr of a failed command holds exactly one error line (the rest may be progress or notes)."""
    lines = [line for line in err.splitlines() if line.startswith(f"hf-readonce {command}: error:")]
    assert len(lines) == 1, err
    return lines[0]


def flip_in_file(path, old: bytes, new: bytes, occurrence=0):
    data = path.read_bytes()
    at = -1
    for _ in range(occurrence + 1):
        at = data.index(old, at + 1)
    path.write_bytes(data[:at] + new + data[at + len(old):])


WATCHDOG = """
import os, sys, time
fifo, flag, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(seconds)
open(flag, "w").close()
while True:  # every later open of it too
    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError:
            pass
    time.sleep(0.2)
"""


@contextmanager
def unblocked_after(seconds, fifo, tmp_path):
    """Fail instead of hanging: a read that opens `fifo` blocks until a writer opens it (in native code that holds
    the GIL and retries on EINTR, so neither a thread nor a signal can end it); after `seconds` a watchdog process
    opens it for writing and closes it, the read ends, and the test fails."""
    import subprocess
    import sys

    flag = tmp_path / "watchdog-fired"
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(fifo), str(flag), str(seconds)])
    try:
        yield
    finally:
        watchdog.kill()
        watchdog.wait()
    assert not flag.exists(), f"reading the store blocked on the FIFO {fifo} for {seconds} s"


# ------------------------------------------------------------------------------ item 1: index damage, valid JSON
def _doc(manifest, i=0):
    return list(manifest["documents"].values())[i]


INDEX_DAMAGE = {  # each keeps the JSON valid and the manifest's whole-file checksum in agreement with its shard
    "item1-shape-digit": ("shape", lambda m: _doc(m)["tensors"]["hidden_states"].update(shape=[4, 9])),
    "item1-tensor-key-character": ("key", lambda m: _doc(m)["tensors"]["hidden_states"].update(
        key=_doc(m)["tensors"]["hidden_states"]["key"][:-1] + "z")),
    "item1-tensor-dtype": ("dtype", lambda m: _doc(m)["tensors"]["hidden_states"].update(dtype="float16")),
    "item1-document-hash-character": ("documents", lambda m: m.update(documents={
        (h[:-1] + ("0" if h[-1] != "0" else "1") if i == 0 else h): d
        for i, (h, d) in enumerate(m["documents"].items())})),
    "item1-documents-emptied": ("documents", lambda m: m.update(documents={})),
    "item1-meta-changed": ("meta", lambda m: _doc(m).update(meta={"id": "someone else"})),
}


@pytest.mark.parametrize("case", sorted(INDEX_DAMAGE))
def test_item1_index_damage_is_named_by_verify_and_rebuilt_by_repair(tmp_path, case, capsys):
    path, hashes = build(tmp_path)
    victim = manifests(path)[1]
    manifest = json.loads(victim.read_text())
    field, damage = INDEX_DAMAGE[case]
    damage(manifest)
    victim.write_text(json.dumps(manifest))
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and victim.name in out and field in out  # names the manifest and the field
    result = RepresentationStore(path).repair()  # the API, no text to recompute from
    assert not result["dropped"]
    assert_all_present(path, hashes)


def test_item1_kv_manifest_with_keys_and_values_swapped(tmp_path, capsys):
    path, hashes = build(tmp_path, n=4, kv=True)
    victim = manifests(path)[0]
    manifest = json.loads(victim.read_text())
    tensors = _doc(manifest)["tensors"]
    tensors["keys"]["key"], tensors["values"]["key"] = tensors["values"]["key"], tensors["keys"]["key"]
    victim.write_text(json.dumps(manifest))
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and victim.name in out and ".keys.key" in out
    assert not RepresentationStore(path).repair()["dropped"]
    assert_all_present(path, hashes, kv=True)


# ------------------------------------------------------------------------------ item 2: metadata-only damage
def _flip_hex(text):
    return ("1" if text[0] != "1" else "2") + text[1:]


def _damage_manifest_field(path, field):
    victim = manifests(path)[0]
    manifest = json.loads(victim.read_text())
    manifest[field] = _flip_hex(manifest[field]) if field == "file_sha256" else manifest[field] ^ 1
    victim.write_text(json.dumps(manifest))


def _swap_two_shards(path):
    a, b = shards(path)[:2]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


METADATA_DAMAGE = {  # every tensor byte stays intact: nothing may be dropped
    "item2-manifest-file-sha256": lambda path: _damage_manifest_field(path, "file_sha256"),
    "item2-manifest-file-size": lambda path: _damage_manifest_field(path, "file_size"),
    "item2-header-model-type": lambda path: flip_in_file(shards(path)[0], MODEL_TYPE.encode(), b"tiny_fbmily"),
    "item2-header-format-version": lambda path: flip_in_file(shards(path)[0], b'"format_version":"1"',
                                                             b'"format_version":"0"'),
    "item2-header-document-hash": lambda path: flip_in_file(
        shards(path)[0], content_hash("campaign document 0")[:12].encode(),
        _flip_hex(content_hash("campaign document 0")[:12]).encode()),
    "item2-two-shard-files-swapped": _swap_two_shards,
    "item2-header-json-garbled": lambda path: _garble_header(shards(path)[0]),
}


def _garble_header(shard):
    """Bytes 20-31 (inside the safetensors JSON header) overwritten: safetensors cannot open the file, every tensor
    byte is intact (the ranges are rebuilt from the manifest's records and checked against their checksums)."""
    data = bytearray(shard.read_bytes())
    data[20:32] = b"X" * 12
    shard.write_bytes(bytes(data))


@pytest.mark.parametrize("case", sorted(METADATA_DAMAGE))
def test_item2_repair_without_texts_keeps_every_intact_document(tmp_path, case, capsys):
    path, hashes = build(tmp_path)
    METADATA_DAMAGE[case](path)
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and "CORRUPTED" in out
    result = RepresentationStore(path).repair()  # the API, no text to recompute from
    assert result["dropped"] == [] and len(result["salvaged"]) in (2, 4)
    assert_all_present(path, hashes)


def test_item2_data_damage_still_drops_only_the_damaged_document(tmp_path):
    path, hashes = build(tmp_path)
    _damage_manifest_field(path, "file_sha256")  # metadata damage and ...
    victim = shards(path)[0]
    data = bytearray(victim.read_bytes())
    data[-10:] = bytes(b ^ 0xFF for b in data[-10:])  # ... the tensor bytes of the shard's second document
    victim.write_bytes(bytes(data))
    result = RepresentationStore(path).repair()
    assert result["dropped"] == [hashes[1]] and result["salvaged"] == [hashes[0]]
    store = RepresentationStore(path)
    assert len(store) == N_DOCS - 1 and store.verify().ok


# ------------------------------------------------------------------------------ item 3: in-place weight edits
def test_item3_fingerprint_sees_data_edits(tokenizer):
    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.representations import BlockAttentionLlamaAdapter, DeformerBertAdapter
    from hf_readonce.representations.base import current_fingerprint

    deformer = tiny_model(vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    llama = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)).eval()
    for adapter, weight in ((DeformerBertAdapter(deformer, tokenizer, max_passage_length=32, doc_stride=8),
                             lambda m: m.bert.encoder.layer[0].output.dense.weight),
                            (BlockAttentionLlamaAdapter(llama, tokenizer),
                             lambda m: m.model.layers[1].mlp.down_proj.weight)):
        model = adapter.model
        before = current_fingerprint(adapter)
        weight(model).data.add_(1e-3)  # bumps no version counter
        after = current_fingerprint(adapter)
        assert after != before and current_fingerprint(model) == after
        assert adapter.fingerprint() == after  # the model's cache follows
        weight(model).data.copy_(weight(model).data.flip(0))  # values only permuted, in place
        assert current_fingerprint(adapter) not in (before, after)


def test_item3_unchanged_weights_are_not_hashed_again(monkeypatch):
    import hashlib

    from hf_readonce.representations.base import current_fingerprint

    model = tiny_model(vocab_size=100)
    first = current_fingerprint(model)
    calls, real = [], hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    assert current_fingerprint(model) == first and calls == []  # only the cheap digest ran


def test_item3_answer_from_store_refuses_states_of_the_old_weights(tmp_path, tokenizer):
    from hf_readonce.representations import DeformerBertAdapter, fill_store
    from hf_readonce.store import RepresentationMismatchError
    from hf_readonce.tasks.question_answering_store import answer_from_store

    model = tiny_model(vocab_size=tokenizer.vocab_size)
    example = {"id": "q", "question": "Where did the cat sit?", "context": "The cat sat on the mat in the hall."}
    store = RepresentationStore(tmp_path / "s")
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8), store,
               [example["context"]], store_dtype="float32")
    kwargs = dict(max_passage_length=32, doc_stride=8, max_question_length=16)
    answer_from_store(model, tokenizer, store, [example], **kwargs)
    model.bert.embeddings.word_embeddings.weight.data.add_(1e-3)
    with pytest.raises(RepresentationMismatchError):
        answer_from_store(model, tokenizer, store, [example], **kwargs)
    answer_from_store(model, tokenizer, store, [example], encode_missing=True, **kwargs)  # re-encodes: new space
    assert len(store.spaces()) == 2


# ------------------------------------------------------------------------------ item 4: the umask
@contextmanager
def umask(mask):
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_item4_store_files_honour_the_umask(tmp_path, mask):
    with umask(mask):
        path, hashes = build(tmp_path)
        RepresentationStore(path).repair()
    wanted_file, wanted_dir = 0o666 & ~mask, 0o777 & ~mask
    for item in [path, *path.rglob("*")]:
        if item.name == ".lock":
            continue  # filelock's own mode
        mode = stat.S_IMODE(item.stat().st_mode)
        assert mode == (wanted_dir if item.is_dir() else wanted_file), (item, oct(mode))
    if mask == 0o022:
        assert all(p.stat().st_mode & stat.S_IRGRP and p.stat().st_mode & stat.S_IROTH for p in shards(path))


# ------------------------------------------------------------------------------ item 5: publish
@pytest.fixture(scope="module")
def publishable(tmp_path_factory, tokenizer):
    """A tiny DeFormer saved with its tokenizer and recorded windows, and a store of its passage states."""
    from hf_readonce.representations import DeformerBertAdapter, fill_store

    root = tmp_path_factory.mktemp("publishable")
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 24, 8
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=24, doc_stride=8),
               RepresentationStore(root / "store"), ["The cat sat on the mat.", "A dog ran in the park."],
               store_dtype="float16")
    return root


def test_item5_publish_refuses_a_non_empty_representations_folder(tmp_path, publishable, capsys):
    sibling = tmp_path / "repo-representations"
    sibling.mkdir()
    (sibling / "mine.txt").write_text("a user's file")
    status, _, err = run_cli(capsys, "publish", publishable / "model", "--repo-id", "me/tiny", "--local-dir",
                             tmp_path / "repo", "--store", publishable / "store")
    assert status == 2 and "repo-representations" in one_error_line(err, "publish")
    assert (sibling / "mine.txt").read_text() == "a user's file" and sorted(os.listdir(sibling)) == ["mine.txt"]
    assert not (tmp_path / "repo").exists()


def test_item5_publish_failing_on_a_corrupted_store_leaves_nothing(tmp_path, publishable, capsys):
    store = tmp_path / "store"
    shutil.copytree(publishable / "store", store)
    victim = shards(store)[0]
    data = bytearray(victim.read_bytes())
    data[-10:] = bytes(b ^ 0xFF for b in data[-10:])
    victim.write_bytes(bytes(data))
    out = tmp_path / "out"
    out.mkdir()
    status, _, err = run_cli(capsys, "publish", publishable / "model", "--repo-id", "me/tiny", "--local-dir",
                             out / "new" / "repo", "--store", store)
    assert status == 2 and "checksum" in one_error_line(err, "publish")
    assert os.listdir(out) == []  # no repo folder, no representations folder, no staging folder, no parent
    with umask(0o022):
        assert cli_main(["publish", str(publishable / "model"), "--repo-id", "me/tiny", "--local-dir",
                         str(out / "ok"), "--store", str(publishable / "store")]) == 0
    capsys.readouterr()
    assert sorted(os.listdir(out)) == ["ok", "ok-representations"]
    for folder in (out / "ok", out / "ok-representations"):  # renamed into place, readable by others
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755


# ------------------------------------------------------------------------------ item 6: no traceback reaches a user
@pytest.fixture(scope="module")
def broken_checkpoints(tmp_path_factory, checkpoint):
    root = tmp_path_factory.mktemp("broken")
    no_weights = root / "no-weights"
    shutil.copytree(checkpoint, no_weights)
    (no_weights / "model.safetensors").unlink()
    truncated = root / "truncated"
    shutil.copytree(checkpoint, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    no_tokenizer = root / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(checkpoint / name, no_tokenizer / name)
    return {"no-weights": no_weights, "truncated": truncated, "no-tokenizer": no_tokenizer}


def _encode(tmp_path, model, *extra):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "context": "The cat sat on the mat."}])
    return ["encode", model, "--store", tmp_path / "s", "--documents", docs, "--no-progress",
            "--max-passage-length", "32", "--doc-stride", "8", *extra]


@pytest.mark.parametrize("case,expected", [("no-weights", "model.safetensors"), ("truncated", "model.safetensors"),
                                           ("no-tokenizer", "tokenizer")])
def test_item6_encode_with_a_broken_checkpoint_is_one_line(tmp_path, broken_checkpoints, case, expected, capsys):
    status, _, err = run_cli(capsys, *_encode(tmp_path, broken_checkpoints[case]))
    line = one_error_line(err, "encode")
    assert status == 2 and str(broken_checkpoints[case]) in line and expected in line


@pytest.mark.parametrize("option,value", [("--device", "cuda"), ("--shard-size-mb", "inf"),
                                          ("--shard-size-mb", "nan")])
def test_item6_encode_bad_option_values_are_one_line(tmp_path, checkpoint, option, value, capsys):
    if value == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    status, _, err = run_cli(capsys, *_encode(tmp_path, checkpoint, option, value))
    line = one_error_line(err, "encode")
    assert status == 2 and option in line and (value in line or "cpu" in line)
    assert not (tmp_path / "s" / "index").exists() or not os.listdir(tmp_path / "s" / "index")


def test_item6_answer_encode_missing_on_a_store_that_cannot_be_written(tmp_path, checkpoint, monkeypatch, capsys):
    from hf_readonce.store import store as store_module

    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "question": "Where?", "context": "On the mat."}])
    RepresentationStore(tmp_path / "s")

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "s" / "tmp"))

    monkeypatch.setattr(store_module, "_make_temp", read_only)  # what a store of another user looks like
    status, _, err = run_cli(capsys, "answer", checkpoint, "--store", tmp_path / "s", "--questions", questions,
                             "--output", tmp_path / "p.jsonl", "--encode-missing", "--no-progress",
                             "--max-passage-length", "32", "--doc-stride", "8")
    line = one_error_line(err, "answer")
    assert status == 2 and "--encode-missing" in line and str(tmp_path / "s") in line


@pytest.mark.parametrize("case", ["offline", "metrics-list", "read-only-folder"])
def test_item6_publish_errors_are_one_line(tmp_path, publishable, case, capsys):
    model = publishable / "model"
    if case == "offline":
        assert os.environ.get("HF_HUB_OFFLINE") == "1"  # conftest: the upload cannot reach the Hub
        status, _, err = run_cli(capsys, "publish", model, "--repo-id", "me/tiny")
        assert status == 2 and "--local-dir" in one_error_line(err, "publish")
    elif case == "metrics-list":
        metrics = tmp_path / "metrics.json"
        metrics.write_text("[1, 2]")
        status, _, err = run_cli(capsys, "publish", model, "--repo-id", "me/tiny", "--local-dir", tmp_path / "r",
                                 "--metrics", metrics)
        assert status == 2 and "metrics.json" in one_error_line(err, "publish") and not (tmp_path / "r").exists()
    else:
        read_only = "/sys/hf-readonce-campaign"  # a read-only file system, even for root
        try:
            os.mkdir(read_only)
        except OSError:
            pass
        else:
            os.rmdir(read_only)
            pytest.skip("no read-only folder on this machine")
        status, _, err = run_cli(capsys, "publish", model, "--repo-id", "me/tiny", "--local-dir", read_only)
        assert status == 2 and read_only in one_error_line(err, "publish")


def test_item6_console_script_prints_no_traceback(tmp_path, broken_checkpoints):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "hf_readonce.cli", *map(str, _encode(
        tmp_path, broken_checkpoints["truncated"]))], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    one_error_line(result.stderr, "encode")


# ------------------------------------------------------------------------------ item 7: the lesser cases
def test_item7_symlinked_space_folder_is_refused_and_repair_writes_nothing_outside(tmp_path, capsys):
    path, hashes = build(tmp_path)
    space_dir = next((path / "shards").iterdir())
    outside = tmp_path / "outside"
    shutil.move(space_dir, outside)
    space_dir.symlink_to(outside)
    before = sorted(os.listdir(outside))
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and "symbolic link" in out
    with pytest.raises(CorruptedShardError, match="symbolic link"):
        RepresentationStore(path).get(FP, SETTINGS, hashes[0])
    result = RepresentationStore(path).repair()
    assert sorted(os.listdir(outside)) == before  # nothing written, moved or removed outside the store
    assert not space_dir.is_symlink() and str(space_dir.relative_to(path)) in result["quarantined"]
    store = RepresentationStore(path)
    assert store.verify().ok and len(store) == 0
    store.put(FP, SETTINGS, hashes[0], states(0))  # writes into the store's own folder again
    assert sorted(os.listdir(outside)) == before and len(RepresentationStore(path)) == 1


@pytest.mark.parametrize("kind", ["fifo", "manifest-fifo"])
def test_item7_fifo_in_the_store_never_blocks(tmp_path, kind, capsys):
    path, hashes = build(tmp_path)
    victim = shards(path)[0] if kind == "fifo" else manifests(path)[0]
    victim.unlink()
    os.mkfifo(victim)
    with unblocked_after(20, victim, tmp_path):
        store = RepresentationStore(path)
        if kind == "fifo":
            with pytest.raises(CorruptedShardError, match="FIFO"):
                store.get(FP, SETTINGS, hashes[0])
        status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
        assert status == 1 and victim.name in out and "FIFO" in out
        result = RepresentationStore(path).repair()
    assert str(victim.relative_to(path)) in result["quarantined"]
    if kind == "fifo":  # the shard's two documents are gone with it: dropped, to be recomputed
        assert len(result["dropped"]) == 2
        store = RepresentationStore(path)
        assert store.verify().ok and len(store) == N_DOCS - 2
    else:  # a manifest: its shard is re-indexed from its own header
        assert not result["dropped"]
        assert_all_present(path, hashes)


@pytest.mark.parametrize("kind", ["device", "link-out-of-the-store"])
def test_item7_device_or_link_in_place_of_a_shard_is_refused(tmp_path, kind, capsys):
    path, hashes = build(tmp_path)
    victim = shards(path)[0]
    victim.unlink()
    if kind == "device":
        try:
            os.mknod(victim, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
        except (PermissionError, OSError):
            pytest.skip("no permission to make a device node here")
    else:
        victim.symlink_to("/dev/zero")
    what = "character device" if kind == "device" else "symbolic link"
    with pytest.raises(CorruptedShardError, match=what):
        RepresentationStore(path).get(FP, SETTINGS, hashes[0])
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and victim.name in out and what in out
    result = RepresentationStore(path).repair()
    assert str(victim.relative_to(path)) in result["quarantined"] and len(result["dropped"]) == 2
    store = RepresentationStore(path)
    assert store.verify().ok and len(store) == N_DOCS - 2


@pytest.mark.parametrize("sub", ["index", "tmp"])
def test_item7_store_folder_replaced_by_a_file_is_named_and_repaired(tmp_path, sub, capsys):
    path, hashes = build(tmp_path)
    shutil.rmtree(path / sub)
    (path / sub).write_text("not a folder")
    with pytest.raises(PermissionError, match=f"{sub}/ is a regular file, not a folder"):
        RepresentationStore(path).put(FP, SETTINGS, content_hash("new"), states(9))
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 1 and f"{sub}/ is a regular file" in out
    RepresentationStore(path).repair()
    assert_all_present(path, hashes)  # index/ a file: the index is rebuilt from the shards' headers


def test_item7_deleted_store_json_has_a_cli_recovery(tmp_path, checkpoint, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "context": "The cat sat on the mat."}])
    args = ["encode", checkpoint, "--store", tmp_path / "s", "--documents", docs, "--no-progress",
            "--max-passage-length", "32", "--doc-stride", "8"]
    assert run_cli(capsys, *args)[0] == 0
    (tmp_path / "s" / "store.json").unlink()
    status, _, err = run_cli(capsys, "verify", "--store", tmp_path / "s")
    assert status == 2 and "--repair" in one_error_line(err, "verify")
    status, out, err = run_cli(capsys, *args, "--repair")
    assert status == 0 and "store.json" in err and "encoded 0 document(s)" in out
    assert RepresentationStore(tmp_path / "s").verify().ok and len(RepresentationStore(tmp_path / "s")) == 1


def test_a_garbled_store_json_or_index_file_has_a_cli_recovery(tmp_path, checkpoint, capsys):
    """`store.json` cut short or garbled, and `index/` replaced by a file: the errors name `encode --repair`, and it
    does repair them (the unreadable marker and the file are kept in quarantine/, no document is lost); a marker that
    is JSON (a newer format's store) is never replaced."""
    from hf_readonce.store import restore_store_marker

    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "context": "The cat sat on the mat."},
                                                 {"id": "d2", "context": "A dog ran in the park."}])
    args = ["encode", checkpoint, "--store", tmp_path / "s", "--documents", docs, "--no-progress",
            "--max-passage-length", "32", "--doc-stride", "8"]
    assert run_cli(capsys, *args)[0] == 0
    marker = tmp_path / "s" / "store.json"
    marker.write_text('{"format": "hf-re')  # cut short
    status, _, err = run_cli(capsys, "verify", "--store", tmp_path / "s")
    assert status == 2 and "--repair" in one_error_line(err, "verify") and "quarantine/" in err
    status, out, err = run_cli(capsys, *args, "--repair")
    assert status == 0 and "no readable store.json" in err and "encoded 0 document(s)" in out, err
    assert [p.read_text() for p in (tmp_path / "s" / "quarantine").glob("*/store.json")] == ['{"format": "hf-re']
    assert RepresentationStore(tmp_path / "s").verify().ok and len(RepresentationStore(tmp_path / "s")) == 2
    restored = marker.read_text()
    marker.write_text('{"format": "hf-readonce-representation-store", "format_version": 99}')  # a newer store's
    assert restore_store_marker(tmp_path / "s") is False and "99" in marker.read_text()  # never replaced
    marker.write_text("{}")  # JSON, but not a store's marker: never replaced, the message says what to do
    with pytest.raises(ValueError, match="move that file away and run `hf-readonce encode .* --repair`"):
        RepresentationStore(tmp_path / "s")
    marker.write_text(restored)

    index = tmp_path / "s" / "index"
    shutil.rmtree(index)
    index.write_text("x")
    status, out, err = run_cli(capsys, *args)
    assert status == 2 and "--repair" in one_error_line(err, "encode")
    status, out, err = run_cli(capsys, *args, "--repair")  # it used to refuse, naming itself as the fix
    assert status == 0 and "encoded 0 document(s)" in out, err
    assert RepresentationStore(tmp_path / "s").verify().ok and len(RepresentationStore(tmp_path / "s")) == 2


def test_a_marker_with_a_byte_order_mark_opens_and_one_out_of_reach_is_never_replaced(tmp_path, monkeypatch):
    """`store.json` saved with a UTF-8 byte-order mark (a Windows editor) is the same JSON: the store opens and
    `restore_store_marker` leaves it; one that cannot be read now (permissions, I/O) is not garbled: never moved."""
    from pathlib import Path

    from hf_readonce.store import restore_store_marker

    path, hashes = build(tmp_path)
    marker = path / "store.json"
    original = marker.read_bytes()
    marker.write_bytes(b"\xef\xbb\xbf" + original)
    assert len(RepresentationStore(path)) == len(hashes) and restore_store_marker(path) is False
    marker.write_bytes(original)
    read_bytes = Path.read_bytes

    def denied(self):
        if self.name == "store.json":
            raise PermissionError(13, "Permission denied")
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    assert restore_store_marker(path) is False
    with pytest.raises(ValueError, match="cannot be read .*check its permissions"):
        RepresentationStore(path)
    monkeypatch.undo()
    assert marker.read_bytes() == original and not (path / "quarantine").exists()


def test_verify_names_documents_listed_twice(tmp_path, capsys):
    """A shard and its manifest copied within the store under another id: every document is intact (verify passes)
    but listed twice; verify says so (a note, not a failure) and counts them in `--json`."""
    path, hashes = build(tmp_path)
    manifest = manifests(path)[0]
    record = json.loads(manifest.read_text())
    shard = path / record["shard"]
    copy = shard.with_name("copied" + shard.name)
    copy.write_bytes(shard.read_bytes())
    record["shard"] = str(copy.relative_to(path))
    (manifest.parent / f"{copy.stem}.json").write_text(json.dumps(record))
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress")
    assert status == 0 and "note: 2 document(s) are listed by two index files" in out, out
    status, out, _ = run_cli(capsys, "verify", "--store", path, "--no-progress", "--json")
    assert json.loads(out)["duplicates"] == 2
    status, out, _ = run_cli(capsys, "info", "--store", path)
    assert status == 0 and "documents listed by two index files: 2" in out


def test_item7_documents_without_tokens_are_set_aside_by_id(tmp_path, checkpoint, tokenizer, capsys):
    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.representations import fill_store, get_adapter

    rows = [{"id": "fine", "context": "The cat sat on the mat."}, {"id": "zero-width", "context": "\u200b\u200c\u200d"},
            {"id": "controls", "context": "\x01\x02\x07"}, {"id": "also fine", "context": "A dog ran."}]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    status, out, err = run_cli(capsys, "encode", checkpoint, "--store", tmp_path / "d", "--documents", docs,
                               "--no-progress", "--max-passage-length", "32", "--doc-stride", "8", "--strict")
    assert status == 1 and "zero-width" in err and "controls" in err and "no token" in err
    assert len(RepresentationStore(tmp_path / "d")) == 2  # the others are stored, no lone [SEP]
    torch.manual_seed(0)
    llama = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)).eval()
    stats = fill_store(get_adapter(llama, tokenizer), RepresentationStore(tmp_path / "l"),
                       [(r["id"], r["context"]) for r in rows])
    assert [doc_id for doc_id, _ in stats.rejected] == ["zero-width", "controls"] and stats.encoded == 2


def test_item7_fill_store_refuses_a_single_string(tmp_path, tokenizer):
    from hf_readonce.representations import DeformerBertAdapter, fill_store

    adapter = DeformerBertAdapter(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, max_passage_length=32,
                                  doc_stride=8)
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(TypeError, match="single str"):
        fill_store(adapter, store, "Emma")
    assert len(RepresentationStore(tmp_path / "s")) == 0


def test_item7_waiting_writer_says_so(tmp_path, caplog):
    from hf_readonce.store import store as store_module

    path, _ = build(tmp_path, n=1)
    holder = RepresentationStore(path)
    waiter = RepresentationStore(path, lock_timeout=1.5)
    if hasattr(store_module, "_StoreLock"):
        store_module._StoreLock.notice_after = 0.3
    held, release = threading.Event(), threading.Event()

    def hold():  # another writer (in another process, it is the same: one flock per open file)
        with holder.lock():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(TimeoutError):
            waiter.put(FP, SETTINGS, content_hash("waiting"), states(7))
    finally:
        release.set()
        thread.join()
        if hasattr(store_module, "_StoreLock"):
            store_module._StoreLock.notice_after = 5.0
    assert any("waiting for the write lock" in r.getMessage() and str(path) in r.getMessage()
               for r in caplog.records)


def test_item7_null_score_threshold_nan_is_refused(tmp_path, checkpoint, capsys):
    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "question": "Where?", "context": "On the mat."}])
    status, _, err = run_cli(capsys, "answer", checkpoint, "--store", tmp_path / "s", "--questions", questions,
                             "--output", tmp_path / "p.jsonl", "--encode-missing", "--no-progress",
                             "--max-passage-length", "32", "--doc-stride", "8", "--allow-no-answer",
                             "--null-score-diff-threshold", "nan")
    assert status == 2 and "--null-score-diff-threshold" in one_error_line(err, "answer")
    assert not (tmp_path / "p.jsonl").exists()


def test_item7_verify_recompute_takes_max_diff(tmp_path, checkpoint, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "context": "The cat sat on the mat."}])
    assert run_cli(capsys, "encode", checkpoint, "--store", tmp_path / "s", "--documents", docs, "--no-progress",
                   "--max-passage-length", "32", "--doc-stride", "8")[0] == 0
    verify = ["verify", "--store", tmp_path / "s", "--no-progress", "--recompute", "1", "--model", checkpoint,
              "--device", "cpu"]
    status, out, _ = run_cli(capsys, *verify, "--max-diff", "0")  # fp16 storage rounds: above 0
    assert status == 1 and "above --max-diff 0" in out
    assert run_cli(capsys, *verify, "--max-diff", "0.5")[0] == 0
