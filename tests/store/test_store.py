"""RepresentationStore: keying, shards, dtypes, durability, corruption and repair, datasets, CLI, several processes.

A tiny random DeFormer (hidden 32, 4 layers, k=2) with the real MiniLM WordPiece tokenizer keeps the model work
cheap; the documents are real Disfl-QA / Wikipedia passages where the test needs text.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
from hf_readonce.cli import main as cli_main
from hf_readonce.qa import build_features, encode_windows, postprocess, predict_cached
from hf_readonce.store import (
    CorruptedShardError,
    DeformerStoreAdapter,
    MissingRepresentationError,
    ReadOnlyStoreError,
    RepresentationMismatchError,
    RepresentationStore,
    answer_from_store,
    bytes_per_1000_tokens,
    content_hash,
    encode_documents,
    export_to_dataset,
    import_from_dataset,
    make_encode_function,
    rank_of,
    representation_key,
    space_key,
)
from hf_readonce.weights import minilm_path

from .conftest import DATA_DIR, REPO_ROOT

FP = "f" * 64
SETTINGS = {"num_decomposed_layers": 2, "max_passage_length": 64}


def rand_states(n, d=8, seed=0):
    return {"hidden_states": torch.randn(n, d, generator=torch.Generator().manual_seed(seed))}


def tiny_model(seed=0, vocab_size=30522):
    torch.manual_seed(seed)
    config = DeformerBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=128, num_decomposed_layers=2,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return DeformerBertForQuestionAnswering(config).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(minilm_path())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer):
    """A saved tiny DeFormer with the MiniLM tokenizer (what the CLI loads)."""
    path = tmp_path_factory.mktemp("tiny_deformer")
    tiny_model().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def qa_rows():
    path = DATA_DIR / "disfl_qa" / "validation.jsonl"
    if not path.is_file():
        pytest.skip(f"real data not found under {DATA_DIR}")
    rows = [json.loads(line) for line in path.open()][:120]
    return [r for r in rows if r["question"].strip() and r["context"].strip()]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


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


# ------------------------------------------------------------------------------------------------------ model
def test_adapter_long_documents_and_errors(tokenizer):
    model = tiny_model()
    adapter = DeformerStoreAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    long_text = " ".join(f"token{i}" for i in range(300))  # far beyond 128 positions
    (tensors,) = adapter.encode([long_text])
    lengths = tensors["window_lengths"].tolist()
    assert len(lengths) > 5 and max(lengths) <= 32 and sum(lengths) == tensors["hidden_states"].shape[0]
    assert tensors["hidden_states"].shape[1] == 32
    with pytest.raises(ValueError, match="document 1"):
        adapter.encode(["fine", "   "])
    with pytest.raises(ValueError, match="max_passage_length"):
        DeformerStoreAdapter(model, tokenizer, max_passage_length=500)
    k0 = DeformerBertForQuestionAnswering(DeformerBertConfig(**{**model.config.to_dict(), "num_decomposed_layers": 0}))
    with pytest.raises(ValueError, match="num_decomposed_layers"):
        DeformerStoreAdapter(k0, tokenizer)


def test_encode_skips_stored_and_answers_equal_in_memory(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    adapter = DeformerStoreAdapter(model, tokenizer, max_passage_length=64, doc_stride=16)
    calls = []
    original = adapter.encode
    adapter.encode = lambda texts: calls.append(len(texts)) or original(texts)
    store = RepresentationStore(tmp_path / "s")
    contexts = [r["context"] for r in qa_rows]
    first = encode_documents(adapter, store, contexts, dtype="fp32")
    unique = len(set(contexts))
    assert first.encoded == unique and first.duplicates == len(contexts) - unique and sum(calls) == unique
    calls.clear()
    again = encode_documents(adapter, store, contexts, dtype="fp32")
    assert again.encoded == 0 and again.already_stored == unique and calls == []  # no model work
    # answers from the store equal the in-memory cached path
    predictions = answer_from_store(model, tokenizer, RepresentationStore(tmp_path / "s"), qa_rows,
                                    max_question_length=24)
    features, windows, _ = build_features(qa_rows, tokenizer, max_question_length=24, max_passage_length=64,
                                          doc_stride=16)
    with torch.no_grad():
        logits = predict_cached(model, features, encode_windows(model, windows))
    assert predictions == postprocess(qa_rows, features, windows, logits)
    # another model's states are never used
    with pytest.raises(RepresentationMismatchError, match="fingerprint"):
        answer_from_store(tiny_model(seed=1), tokenizer, store, qa_rows)


def test_datasets_map_export_import(tmp_path, tokenizer, qa_rows):
    from datasets import Dataset

    model = tiny_model()
    adapter = DeformerStoreAdapter(model, tokenizer, max_passage_length=64, doc_stride=16)
    store = RepresentationStore(tmp_path / "s")
    dataset = Dataset.from_list(qa_rows[:30])
    mapped = dataset.map(make_encode_function(adapter, store, id_column="id"), batched=True, batch_size=16,
                         new_fingerprint="tiny-reps", load_from_cache_file=False)
    assert mapped["content_hash"] == [content_hash(c) for c in dataset["context"]]
    assert len(store) == len(set(dataset["context"])) and all(n > 0 for n in mapped["num_tokens"])
    exported = export_to_dataset(store, cache_dir=str(tmp_path / "cache"))
    exported.to_parquet(str(tmp_path / "reps.parquet"))
    restored_rows = Dataset.from_parquet(str(tmp_path / "reps.parquet"), cache_dir=str(tmp_path / "cache2"))
    target = RepresentationStore(tmp_path / "t")
    assert import_from_dataset(target, restored_rows) == len(store)
    for h in mapped["content_hash"]:
        a, b = store.get(adapter.fingerprint(), adapter.settings(), h), target.get(adapter.fingerprint(),
                                                                                   adapter.settings(), h)
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    assert bytes_per_1000_tokens(store, adapter.fingerprint(), adapter.settings()) > 0


# ------------------------------------------------------------------------------------------------------ CLI
def test_cli_encode_bad_lines_info_verify_repair_answer(tmp_path, checkpoint, qa_rows, capsys):
    docs = tmp_path / "docs.jsonl"
    lines = [json.dumps(r).encode() for r in qa_rows[:20]]
    lines.insert(3, b"{not json")
    lines.insert(7, b'{"id": "latin1", "context": "caf\xe9"}')
    lines.insert(9, json.dumps({"id": "empty", "context": "  "}).encode())
    docs.write_bytes(b"\n".join(lines) + b"\n")
    store_dir = tmp_path / "store"
    common = [str(checkpoint), "--store", str(store_dir), "--no-progress", "--max-passage-length", "64",
              "--doc-stride", "16"]
    assert cli_main(["encode", *common, "--documents", str(docs), "--shard-size-mb", "0.05"]) == 0
    err = capsys.readouterr().err
    assert "line 4: not valid JSON" in err and "line 8: not valid UTF-8" in err and "line 10: empty document" in err
    unique = len({r["context"] for r in qa_rows[:20]})
    assert len(RepresentationStore(store_dir)) == unique
    assert cli_main(["encode", *common, "--documents", str(docs), "--strict"]) == 1  # bad lines -> exit 1
    assert f"already stored {unique}" in capsys.readouterr().out
    assert cli_main(["info", "--store", str(store_dir)]) == 0
    assert f"documents: {unique}" in capsys.readouterr().out
    assert cli_main(["verify", "--store", str(store_dir), "--no-progress"]) == 0
    capsys.readouterr()
    victim = sorted((store_dir / "shards").rglob("*.safetensors"))[-1]
    data = bytearray(victim.read_bytes())
    data[-4:] = b"\x00\xff\x00\xff"
    victim.write_bytes(bytes(data))
    assert cli_main(["verify", "--store", str(store_dir), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "CORRUPTED shards/" in out and victim.name in out
    assert cli_main(["encode", *common, "--documents", str(docs), "--repair"]) == 0
    assert "repair:" in capsys.readouterr().err
    assert cli_main(["verify", "--store", str(store_dir), "--no-progress"]) == 0
    assert len(RepresentationStore(store_dir)) == unique
    questions = write_jsonl(tmp_path / "q.jsonl", qa_rows[:20])
    preds = tmp_path / "preds.jsonl"
    assert cli_main(["answer", str(checkpoint), "--store", str(store_dir), "--questions", str(questions),
                     "--output", str(preds), "--no-progress", "--max-question-length", "24"]) == 0
    assert "EM " in capsys.readouterr().out
    assert [json.loads(line)["id"] for line in preds.open()] == [r["id"] for r in qa_rows[:20]]
    # bad input: a store path that is a file, a missing documents file, questions not stored
    assert cli_main(["encode", *common[:1], "--store", str(docs), "--documents", str(docs)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert cli_main(["encode", *common, "--documents", str(tmp_path / "absent.jsonl")]) == 2
    other = write_jsonl(tmp_path / "other.jsonl", [{**qa_rows[0], "context": "A passage that was never encoded."}])
    assert cli_main(["answer", str(checkpoint), "--store", str(store_dir), "--questions", str(other),
                     "--output", str(tmp_path / "p2.jsonl"), "--no-progress"]) == 2
    assert "not stored" in capsys.readouterr().err
    assert not (tmp_path / "p2.jsonl").exists()


def _cli(*args, **kwargs):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "hf_readonce.cli", *args], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _enwiki_docs(tmp_path, n):
    path = DATA_DIR / "enwiki" / "train.jsonl"
    if not path.is_file():
        pytest.skip("enwiki data not found")
    rows = []
    with path.open() as handle:
        for line in handle:
            row = json.loads(line)
            text = row.get("text") or row.get("context") or ""
            if text.strip():
                rows.append({"id": str(len(rows)), "text": text[:3000]})
            if len(rows) == n:
                break
    return write_jsonl(tmp_path / "docs.jsonl", rows), rows


def test_killed_encode_resumes_without_loss_or_duplicates(tmp_path, checkpoint):
    docs, rows = _enwiki_docs(tmp_path, 300)
    store_dir = tmp_path / "store"
    args = ["encode", str(checkpoint), "--documents", str(docs), "--text-field", "text", "--store", str(store_dir),
            "--no-progress", "--batch-size", "2", "--shard-size-mb", "0.01", "--max-passage-length", "64",
            "--doc-stride", "8"]
    proc = _cli(*args)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        index = store_dir / "index"
        if index.is_dir() and len(list(index.glob("*.json"))) >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "encode finished before it could be killed: make the corpus larger"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    partial = len(RepresentationStore(store_dir))
    assert 0 < partial < len(rows)
    proc = _cli(*args)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"already stored {partial}" in out
    store = RepresentationStore(store_dir)
    info = store.info()
    assert len(store) == len({r["text"] for r in rows}) and info["duplicates"] == 0 and store.verify().ok


def test_two_processes_equal_one_process(tmp_path, checkpoint):
    docs, rows = _enwiki_docs(tmp_path, 40)
    common = ["--documents", str(docs), "--text-field", "text", "--no-progress", "--max-passage-length", "64",
              "--doc-stride", "8", "--dtype", "fp32"]
    single = _cli("encode", str(checkpoint), "--store", str(tmp_path / "one"), *common)
    out, err = single.communicate(timeout=300)
    assert single.returncode == 0, err
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    launch = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
         "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "hf_readonce.cli", "encode",
         str(checkpoint), "--store", str(tmp_path / "two"), *common],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "[rank 0/2]" in launch.stdout and "[rank 1/2]" in launch.stdout
    one, two = RepresentationStore(tmp_path / "one"), RepresentationStore(tmp_path / "two")
    assert len(one) == len(two) == len({r["text"] for r in rows}) and two.verify().ok
    a = {(e.space, e.content_hash) for e in one.entries()}
    assert a == {(e.space, e.content_hash) for e in two.entries()}
    for space, h in a:
        (entry,) = [e for e in one.entries() if e.content_hash == h]
        fingerprint = one._spaces[space].fingerprint
        settings_ = one._spaces[space].settings
        x, y = one.get(fingerprint, settings_, h), two.get(fingerprint, settings_, h)
        assert x.keys() == y.keys()
        for name in x:
            torch.testing.assert_close(x[name], y[name], rtol=1e-4, atol=1e-5)


def test_cli_encode_readonce_representations(tmp_path, tokenizer, qa_rows):
    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.store import ReadOnceStoreAdapter

    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0)).eval()
    model.save_pretrained(tmp_path / "ro")
    tokenizer.save_pretrained(tmp_path / "ro")
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:10])
    assert cli_main(["encode", str(tmp_path / "ro"), "--documents", str(docs), "--store", str(tmp_path / "s"),
                     "--no-progress", "--max-passage-length", "64"]) == 0
    store = RepresentationStore(tmp_path / "s")
    adapter = ReadOnceStoreAdapter(model, tokenizer, max_document_length=64)
    text = qa_rows[0]["context"]
    stored = store.get(adapter.fingerprint(), adapter.settings(), content_hash(text))
    (expected,) = adapter.encode([text])
    assert stored["representations"].shape == expected["representations"].shape == (16, 32)  # 64 tokens / k=4
    torch.testing.assert_close(stored["representations"].float(), expected["representations"], atol=1e-2, rtol=0)
    with pytest.raises(RepresentationMismatchError):  # another k is another representation
        store.get(adapter.fingerprint(), ReadOnceStoreAdapter(model, tokenizer, 64, compression_ratio=8).settings(),
                  content_hash(text))
