"""The fault and bad-input campaign of issue 17, kept as tests: every case damages a store, feeds bad input to the
CLI or the models, and checks that it is *handled*: named (a clear error or a `verify` line), nothing silently wrong,
no traceback, no document lost or stored twice, no file outside the store touched.

Each test id starts with its category (the README's reliability table counts them):
`traversal-`, `manifest-`, `orphan-`, `race-`, `reader-`, `damage-`, `input-`, `output-`, `import-`, `args-`,
`fingerprint-`. Tiny random models and a handful of short documents keep the file under a minute on 2 cores.
"""

import errno
import hashlib
import json
import os
import shutil

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.store import CorruptedShardError, RepresentationStore, content_hash, maintenance
from tests.conftest import tiny_model, write_jsonl

FP = "f" * 64
SETTINGS = {"k": 2, "representation": "test/v1"}
N_DOCS = 6


def states(i):
    return {"hidden_states": torch.randn(4, 8, generator=torch.Generator().manual_seed(i)),
            "input_ids": torch.arange(4, dtype=torch.int32) + i}


def build(tmp_path, n=N_DOCS, ids=None):
    """A store of `n` documents in shards of two documents (fp32, so reads compare exactly)."""
    path = tmp_path / "s"
    store = RepresentationStore(path)
    hashes = [content_hash(f"document {i}") for i in range(n)]
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=250) as writer:
        for i, h in enumerate(hashes):
            writer.add(h, states(i), meta={"id": ids[i] if ids else f"doc-{i}"})
    return path, hashes


def manifests(path):
    return sorted((path / "index").glob("*.json"))


def shards(path):
    return sorted((path / "shards").rglob("*.safetensors"))


def assert_all_present(path, hashes, check_values=True):
    """Every document exactly once, readable, equal to what was written; verify passes."""
    store = RepresentationStore(path)
    assert len(store) == len(hashes)
    assert store.info()["duplicates"] == 0
    listed = [h for m in manifests(path) for h in json.loads(m.read_text())["documents"]]
    assert sorted(listed) == sorted(hashes), "a document is indexed twice or not at all"
    if check_values:
        for i, h in enumerate(hashes):
            torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i))
    report = store.verify()
    assert report.ok, [c.describe() for c in report.corruptions]


def cli_verify(path, capsys):
    status = cli_main(["verify", "--store", str(path), "--no-progress"])
    out = capsys.readouterr()
    return status, out.out + out.err


# ------------------------------------------------------------------------------------------ 1. path traversal
TRAVERSALS = {
    "traversal-parent": lambda path, outside: "../outside.safetensors",
    "traversal-absolute": lambda path, outside: str(outside),
    "traversal-store-json": lambda path, outside: "store.json",
    "traversal-dotdot-store-json": lambda path, outside: "shards/../store.json",
    "traversal-lock": lambda path, outside: ".lock",
    "traversal-deep-parent": lambda path, outside: "shards/x/../../../outside.safetensors",
}


@pytest.mark.parametrize("case", sorted(TRAVERSALS))
def test_traversal_manifest_paths_are_never_followed(tmp_path, case, capsys):
    path, hashes = build(tmp_path)
    victim = manifests(path)[0]
    manifest = json.loads(victim.read_text())
    outside = tmp_path / "outside.safetensors"
    shutil.copy(path / manifest["shard"], outside)  # a valid shard outside the store: reading it would "work"
    outside_bytes = outside.read_bytes()
    store_json = (path / "store.json").read_bytes()
    manifest["shard"] = TRAVERSALS[case](path, outside)
    victim.write_text(json.dumps(manifest))
    status, out = cli_verify(path, capsys)
    assert status == 1 and victim.name in out and "outside the store" in out
    result = RepresentationStore(path).repair()
    assert outside.read_bytes() == outside_bytes  # never moved, never read as the store's
    assert (path / "store.json").read_bytes() == store_json
    assert all(".." not in q and not os.path.isabs(q) for q in result["quarantined"])
    assert_all_present(path, hashes)  # the real shard is re-indexed from its own header


# ------------------------------------------------------------------------------------------ 4. manifest schema
def _first_doc(manifest):
    return next(iter(manifest["documents"].values()))


MANIFEST_DAMAGE = {
    "manifest-null": lambda m, raw: b"null",
    "manifest-list": lambda m, raw: b"[]",
    "manifest-string": lambda m, raw: b'"documents"',
    "manifest-number": lambda m, raw: b"42",
    "manifest-empty-file": lambda m, raw: b"",
    "manifest-truncated": lambda m, raw: raw[: len(raw) // 2],
    "manifest-not-utf8": lambda m, raw: b"\xff\xfe\x00",
    "manifest-documents-list": lambda m, raw: json.dumps({**m, "documents": []}).encode(),
    "manifest-documents-null": lambda m, raw: json.dumps({**m, "documents": None}).encode(),
    "manifest-document-not-object": lambda m, raw: json.dumps(
        {**m, "documents": {h: [] for h in m["documents"]}}).encode(),
    "manifest-missing-sha256": lambda m, raw: json.dumps(
        (_first_doc(m).pop("sha256"), m)[1]).encode(),
    "manifest-bad-xxh3": lambda m, raw: json.dumps((_first_doc(m).update(xxh3_128="xyz"), m)[1]).encode(),
    "manifest-tensors-list": lambda m, raw: json.dumps((_first_doc(m).update(tensors=[]), m)[1]).encode(),
    "manifest-shape-string": lambda m, raw: json.dumps(
        (_first_doc(m)["tensors"]["hidden_states"].update(shape="big"), m)[1]).encode(),
    "manifest-format-version-string": lambda m, raw: json.dumps({**m, "format_version": "1"}).encode(),
    "manifest-space-mismatch": lambda m, raw: json.dumps({**m, "space": "0" * 64}).encode(),
    "manifest-missing-shard": lambda m, raw: json.dumps({k: v for k, v in m.items() if k != "shard"}).encode(),
    "manifest-settings-list": lambda m, raw: json.dumps({**m, "settings": [1, 2]}).encode(),
    "manifest-bad-document-key": lambda m, raw: json.dumps(
        {**m, "documents": {"../" + h: d for h, d in m["documents"].items()}}).encode(),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_DAMAGE))
def test_manifest_bad_schema_is_a_named_corruption_and_repair_rebuilds_it(tmp_path, case, capsys):
    path, hashes = build(tmp_path)
    victim = manifests(path)[1]
    raw = victim.read_bytes()
    victim.write_bytes(MANIFEST_DAMAGE[case](json.loads(raw), raw))
    store = RepresentationStore(path)  # opens
    assert len(store) == len(hashes) - 2  # the damaged manifest's two documents are not served from it
    status, out = cli_verify(path, capsys)
    assert status == 1 and victim.name in out and "Traceback" not in out
    assert cli_main(["info", "--store", str(path)]) == 0
    capsys.readouterr()
    result = store.repair()
    assert len(result["salvaged"]) == 2 and not result["dropped"]  # what repair says is what the store holds
    assert_all_present(path, hashes)


def test_manifest_deleted_verify_exits_1_and_repair_rebuilds_the_index(tmp_path, capsys):
    path, hashes = build(tmp_path)
    manifests(path)[0].unlink()
    status, out = cli_verify(path, capsys)
    assert status == 1 and "orphan" in out and "doc-0" in out  # the orphan's documents are named
    shards_before = {p.name: p.read_bytes() for p in shards(path)}
    result = RepresentationStore(path).repair()
    assert sorted(result["salvaged"]) == sorted(hashes[:2])
    assert_all_present(path, hashes)
    # the intact shard got its manifest back where it lies: nothing copied, nothing moved to quarantine/
    assert {p.name: p.read_bytes() for p in shards(path)} == shards_before and result["quarantined"] == []


def test_a_lost_index_is_rebuilt_without_copying_a_shard(tmp_path, capsys):
    """`index/` deleted: every intact shard is indexed where it lies, so the store does not grow (a rebuild that
    copied every shard needed twice the disk)."""
    path, hashes = build(tmp_path)
    size = RepresentationStore(path).info()["bytes_on_disk"]
    shutil.rmtree(path / "index")
    result = RepresentationStore(path).repair()
    assert sorted(result["salvaged"]) == sorted(hashes) and result["quarantined"] == []
    assert_all_present(path, hashes)
    assert RepresentationStore(path).info()["bytes_on_disk"] <= size * 1.05  # manifests written again, no shard


# ------------------------------------------------------------------------------------------ 5. orphans, kills
def test_orphan_with_every_document_stored_elsewhere_is_harmless(tmp_path, capsys):
    path, hashes = build(tmp_path)
    first = shards(path)[0]
    shutil.copy(first, first.with_name("00000000000000000000-1-copy.safetensors"))
    status, out = cli_verify(path, capsys)
    assert status == 0 and "orphan" in out
    result = RepresentationStore(path).repair()
    assert not result["salvaged"] and len(result["quarantined"]) == 1
    assert_all_present(path, hashes)


def test_orphan_with_unreadable_header_is_reported_and_quarantined(tmp_path, capsys):
    path, hashes = build(tmp_path)
    manifests(path)[0].unlink()
    victim = shards(path)[0]
    victim.write_bytes(b"\x00" * 64)
    status, out = cli_verify(path, capsys)
    assert status == 1 and victim.name in out
    result = RepresentationStore(path).repair()
    assert not result["salvaged"] and str(victim.relative_to(path)) in result["quarantined"]
    store = RepresentationStore(path)
    assert len(store) == N_DOCS - 2 and store.verify().ok


@pytest.mark.parametrize("case", ["kill-after-salvage", "kill-after-first-retire"])
def test_orphan_kill_during_repair_then_repair_again_stores_each_document_once(tmp_path, monkeypatch, case):
    path, hashes = build(tmp_path)
    victim = shards(path)[0]
    data = bytearray(victim.read_bytes())
    data[-10:] = bytes(b ^ 0xFF for b in data[-10:])  # the second document of the shard
    victim.write_bytes(bytes(data))
    real_replace, calls = os.replace, []

    def killed(src, dst, *args, **kwargs):
        if "quarantine" in str(dst):
            calls.append(dst)
            if case == "kill-after-salvage" or len(calls) > 1:
                raise KeyboardInterrupt("kill -9")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        RepresentationStore(path).repair()
    monkeypatch.setattr(os, "replace", real_replace)
    RepresentationStore(path).repair()
    RepresentationStore(path).repair()  # idempotent
    store = RepresentationStore(path)
    assert len(store) == N_DOCS - 1 and store.info()["duplicates"] == 0 and store.verify().ok
    listed = [h for m in manifests(path) for h in json.loads(m.read_text())["documents"]]
    assert len(listed) == len(set(listed)) == N_DOCS - 1


# ------------------------------------------------------------------------------------------ 2. repair races
def test_race_repair_keeps_a_shard_committed_after_verify(tmp_path):
    path, hashes = build(tmp_path)
    victim = shards(path)[0]
    victim.write_bytes(victim.read_bytes()[:100])
    store = RepresentationStore(path)
    report = store.verify()
    late = content_hash("committed between verify and repair")
    RepresentationStore(path).put(FP, SETTINGS, late, states(99))  # another process's writer
    store.repair(report)
    fresh = RepresentationStore(path)
    torch.testing.assert_close(fresh.get(FP, SETTINGS, late), states(99))
    assert fresh.verify().ok


def test_race_cli_repair_verifies_under_the_lock(tmp_path, checkpoint, monkeypatch, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": f"d{i}", "context": f"Passage number {i} about cats."}
                                                 for i in range(3)])
    common = [str(checkpoint), "--store", str(tmp_path / "s"), "--documents", str(docs), "--no-progress",
              "--max-passage-length", "32", "--doc-stride", "8"]
    assert cli_main(["encode", *common]) == 0
    real, held = maintenance.verify_store, []

    def spy(store, progress=False):
        held.append(store.lock().is_locked)
        return real(store, progress=progress)

    monkeypatch.setattr(maintenance, "verify_store", spy)
    monkeypatch.setattr("hf_readonce.store.store.verify_store", spy)
    assert cli_main(["encode", *common, "--repair"]) == 0
    capsys.readouterr()
    assert held and all(held)


# ------------------------------------------------------------------------------------------ 9. readers
def test_reader_verify_reads_false_still_checks_the_document_key(tmp_path):
    path, hashes = build(tmp_path)
    a, b = shards(path)[:2]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    for verify in (False, True):
        store = RepresentationStore(path, verify_reads=verify)
        with pytest.raises(CorruptedShardError, match="another document|checksum|index says"):
            store.get(FP, SETTINGS, hashes[0])


def test_reader_recovers_on_refresh_after_a_repair(tmp_path):
    path, hashes = build(tmp_path)
    reader = RepresentationStore(path)  # long-lived: index loaded before the repair
    victim = shards(path)[0]
    data = bytearray(victim.read_bytes())
    data[-10:] = bytes(b ^ 0xFF for b in data[-10:])  # second document of the shard; the first stays intact
    victim.write_bytes(bytes(data))
    result = RepresentationStore(path).repair()
    assert result["salvaged"] == [hashes[0]]
    reader.refresh()
    torch.testing.assert_close(reader.get(FP, SETTINGS, hashes[0]), states(0))
    assert not reader.contains(FP, SETTINGS, hashes[1])  # dropped: to be recomputed
    assert len(reader) == N_DOCS - 1


def test_reader_verify_escapes_control_characters_in_ids(tmp_path, capsys):
    path, _ = build(tmp_path, ids=["plain", "evil\nOK: 999 shard(s), 999 document(s) verified", "a",
                                   "\x1b[2Jclear", "c", "d\r"])
    for victim in shards(path)[:3]:
        data = bytearray(victim.read_bytes())
        data[-10:] = bytes(b ^ 0xFF for b in data[-10:])
        victim.write_bytes(bytes(data))
    status, out = cli_verify(path, capsys)
    assert status == 1
    assert not any(line.startswith("OK:") for line in out.splitlines())
    assert "\x1b" not in out and "\\n" in out


# ------------------------------------------------------------------------------------------ fundamentals kept
@pytest.mark.parametrize("case", ["damage-bit-flip", "damage-truncate", "damage-extend", "damage-delete-shard",
                                  "damage-zero-header"])
def test_damage_is_named_and_repair_keeps_intact_documents(tmp_path, case, capsys):
    path, hashes = build(tmp_path)
    victim = shards(path)[0]
    data = victim.read_bytes()
    if case == "damage-bit-flip":
        data = data[:-10] + bytes(b ^ 0xFF for b in data[-10:])
    elif case == "damage-truncate":
        data = data[: len(data) // 2]
    elif case == "damage-extend":
        data = data + b"\x00" * 16
    elif case == "damage-zero-header":
        data = b"\x00" * 16 + data[16:]
    if case == "damage-delete-shard":
        victim.unlink()
    else:
        victim.write_bytes(data)
    status, out = cli_verify(path, capsys)
    assert status == 1 and victim.name in out
    result = RepresentationStore(path).repair()
    store = RepresentationStore(path)
    assert len(store) == N_DOCS - len(result["dropped"]) and store.verify().ok
    assert len(result["salvaged"]) + len(result["dropped"]) == 2


# ------------------------------------------------------------------------------------------ 8. dataset import
def _rows(tmp_path):
    from hf_readonce.store.datasets_io import iter_store_rows

    path, _ = build(tmp_path, n=2)
    return list(iter_store_rows(str(path)))


IMPORT_DAMAGE = {
    "import-huge-shape": lambda row: row["tensor_shapes"].__setitem__(0, [1 << 20, 1 << 18]),
    "import-huge-shape-no-bytes": lambda row: (row["tensor_shapes"].__setitem__(0, [1 << 20, 1 << 18]),
                                               row["tensor_bytes"].__setitem__(0, b"")),
    "import-negative-dim": lambda row: row["tensor_shapes"].__setitem__(0, [-1, 8]),
    "import-shape-not-list": lambda row: row["tensor_shapes"].__setitem__(0, "4x8"),
    "import-bytes-too-long": lambda row: row["tensor_bytes"].__setitem__(0, row["tensor_bytes"][0] + b"\x00" * 4),
    "import-lists-disagree": lambda row: row["tensor_dtypes"].pop(),
    "import-unknown-dtype": lambda row: row["tensor_dtypes"].__setitem__(0, "complex_thing"),
}


@pytest.mark.parametrize("case", sorted(IMPORT_DAMAGE))
def test_import_checks_declared_shapes_against_the_bytes_before_allocating(tmp_path, case):
    from hf_readonce.store import import_from_dataset

    rows = _rows(tmp_path)
    IMPORT_DAMAGE[case](rows[1])
    target = RepresentationStore(tmp_path / "target")
    with pytest.raises(ValueError, match="row 1"):
        import_from_dataset(target, rows)
    assert len(RepresentationStore(tmp_path / "target")) == 1  # the row before it is kept


# ------------------------------------------------------------------------------------------ 7. bad input lines
def _encode_args(checkpoint, tmp_path, docs):
    return ["encode", str(checkpoint), "--store", str(tmp_path / "s"), "--documents", str(docs), "--no-progress",
            "--max-passage-length", "32", "--doc-stride", "8"]


@pytest.mark.parametrize("case", ["input-lone-surrogate", "input-deep-nesting", "input-surrogate-in-id"])
def test_input_one_bad_line_never_aborts_a_run(tmp_path, checkpoint, case, capsys):
    lines = [json.dumps({"id": f"d{i}", "context": f"Passage {i}: the cat sat on mat {i}."}) for i in range(5)]
    bad = {"input-lone-surrogate": '{"id": "x", "context": "bad \\ud800 text"}',
           "input-deep-nesting": '{"id": "deep", "context": ' + "[" * 200_000 + "]" * 200_000 + "}",
           "input-surrogate-in-id": '{"id": "\\udfff", "context": "another fine passage"}'}[case]
    lines.insert(2, bad)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(lines) + "\n")
    assert cli_main(_encode_args(checkpoint, tmp_path, docs)) == 0
    err = capsys.readouterr().err
    assert "line 3:" in err and "Traceback" not in err
    assert len(RepresentationStore(tmp_path / "s")) == 5


def test_input_disk_full_during_encode_is_one_line(tmp_path, checkpoint, monkeypatch, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d", "context": "A passage about dogs."}])
    from hf_readonce.store import store as store_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    RepresentationStore(tmp_path / "s")
    monkeypatch.setattr(store_module, "_atomic_write", full)
    assert cli_main(_encode_args(checkpoint, tmp_path, docs)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("hf-readonce encode: error")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in err
    assert not list((tmp_path / "s" / "tmp").iterdir())


# ------------------------------------------------------------------------------------------ 6. outputs
QUESTIONS = [{"id": "q1", "question": "Where did the cat sit?", "context": "The cat sat on the mat in the hall."},
             {"id": "q2", "question": "What sat?", "context": "The cat sat on the mat in the hall."}]


@pytest.fixture(scope="module")
def answer_store(tmp_path_factory, checkpoint):
    path = tmp_path_factory.mktemp("answer")
    docs = write_jsonl(path / "q.jsonl", QUESTIONS)
    assert cli_main(["encode", str(checkpoint), "--store", str(path / "s"), "--documents", str(docs),
                     "--no-progress", "--max-passage-length", "32", "--doc-stride", "8"]) == 0
    return path / "s"


def _answer(checkpoint, store, questions, output, *extra):
    return cli_main(["answer", str(checkpoint), "--store", str(store), "--questions", str(questions), "--output",
                     str(output), "--no-progress", "--max-question-length", "16", "--max-passage-length", "32",
                     "--doc-stride", "8", *extra])


@pytest.mark.parametrize("case", ["output-duplicate-int-and-str", "output-duplicate-str"])
def test_output_duplicate_question_ids_are_refused_with_line_numbers(tmp_path, checkpoint, answer_store, case,
                                                                    capsys):
    first = 1 if case == "output-duplicate-int-and-str" else "same"
    second = "1" if case == "output-duplicate-int-and-str" else "same"
    questions = write_jsonl(tmp_path / "q.jsonl", [{**QUESTIONS[0], "id": first}, {**QUESTIONS[1], "id": second}])
    output = tmp_path / "preds.jsonl"
    assert _answer(checkpoint, answer_store, questions, output) == 2
    err = capsys.readouterr().err
    assert "duplicate" in err and "lines 1 and 2" in err
    assert not output.exists()


@pytest.mark.parametrize("case", ["output-is-a-directory", "output-disk-full", "output-parent-is-a-file"])
def test_output_failing_write_is_one_line_and_leaves_no_temporary_file(tmp_path, checkpoint, answer_store,
                                                                       monkeypatch, case, capsys):
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    output = out_dir / "preds.jsonl"
    if case == "output-is-a-directory":
        output.mkdir()
    elif case == "output-parent-is-a-file":
        (out_dir / "file").write_text("x")
        output = out_dir / "file" / "preds.jsonl"
    else:
        real = os.replace

        def full(src, dst, *args, **kwargs):
            if str(dst) == str(output):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", full)
    assert _answer(checkpoint, answer_store, questions, output) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("hf-readonce answer: error")]
    assert "Traceback" not in err
    assert not [p for p in out_dir.rglob("*") if ".tmp-" in p.name]


def test_output_encode_missing_on_an_empty_store_leaves_nothing_behind(tmp_path, checkpoint, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"id": "q", "question": "", "context": ""}\n')
    store = tmp_path / "new" / "store"
    # no usable question: exit 1 (an input file that holds no questions, as the CLI's exit-status rule says)
    assert _answer(checkpoint, store, questions, tmp_path / "p.jsonl", "--encode-missing") == 1
    assert not store.exists() and not (tmp_path / "new").exists()
    assert _answer(tmp_path / "no-model", store, write_jsonl(tmp_path / "q2.jsonl", QUESTIONS),
                   tmp_path / "p.jsonl", "--encode-missing") == 2
    assert not store.exists() and not (tmp_path / "new").exists()
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ 9. arguments
def test_args_num_decomposed_layers_beyond_the_depth_fail_at_load(tmp_path, checkpoint, capsys):
    from hf_readonce import DeformerBertForQuestionAnswering

    with pytest.raises(ValueError, match="num_decomposed_layers"):
        DeformerBertForQuestionAnswering.from_pretrained(checkpoint, num_decomposed_layers=9)
    docs = write_jsonl(tmp_path / "docs.jsonl", QUESTIONS)
    assert cli_main([*_encode_args(checkpoint, tmp_path, docs), "--num-decomposed-layers", "9"]) == 2
    err = capsys.readouterr().err
    assert "--num-decomposed-layers must be between 0 and" in err and "Traceback" not in err  # the option typed


@pytest.mark.parametrize("override", [{"window_overlap": 40}, {"recurrence_layer": 9}])
def test_args_recurrent_overrides_fail_at_load(tmp_path, override):
    from hf_readonce import RecurrentGPT2Config, RecurrentGPT2LMHeadModel

    config = RecurrentGPT2Config(n_positions=32, n_embd=16, n_layer=2, n_head=2, vocab_size=50, window_size=16,
                                 window_overlap=2, recurrence_layer=2)
    RecurrentGPT2LMHeadModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=next(iter(override))):
        RecurrentGPT2LMHeadModel.from_pretrained(tmp_path, **override)


@pytest.mark.parametrize("bad_id", [-1, 10**6])
def test_args_out_of_vocabulary_token_ids_name_the_argument_and_bound(bad_id):
    model = tiny_model(vocab_size=100)
    ids = torch.tensor([[1, 2, bad_id, 3]])
    with pytest.raises(ValueError, match=r"input_ids.*\[0, 100\)"):
        model(input_ids=ids, token_type_ids=torch.zeros_like(ids))
    with pytest.raises(ValueError, match=r"input_ids.*\[0, 100\)"):
        model.encode_passages(ids)


def _tiny_readonce(**overrides):
    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration

    torch.manual_seed(0)
    fields = dict(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                  compression_ratio=4)
    config = ReadOnceBartConfig(**{**fields, **overrides})
    return ReadOnceBartForConditionalGeneration(config)


def test_args_readonce_out_of_vocabulary_ids():
    with pytest.raises(ValueError, match=r"input_ids.*\[0, 99\)"):
        _tiny_readonce().encode_documents(torch.tensor([[5, 6, 120]]))


@pytest.mark.parametrize("argument", ["compression_ratio", "max_document_length", "batch_size"])
def test_args_readonce_adapter_rejects_zero(tokenizer, argument):
    from hf_readonce.representations.readonce_bart import ReadOnceBartAdapter

    with pytest.raises(ValueError, match=argument):
        ReadOnceBartAdapter(_tiny_readonce(), tokenizer, **{argument: 0})


# ------------------------------------------------------------------------------------------ 3. fingerprints
def _same_weights(model_class, config):
    torch.manual_seed(0)
    return model_class(config).eval()


@pytest.mark.parametrize("field,value", [("hidden_act", "relu"), ("hidden_act", "gelu_new"),
                                         ("layer_norm_eps", 1e-5), ("num_attention_heads", 2),
                                         ("num_attention_heads", 8)])
def test_fingerprint_deformer_changes_with_every_computation_field(field, value):
    from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering

    base = tiny_model(vocab_size=100)
    config = DeformerBertConfig.from_dict({**base.config.to_dict(), field: value})
    other = DeformerBertForQuestionAnswering(config).eval()
    other.load_state_dict(base.state_dict())
    assert other.representation_fingerprint() != base.representation_fingerprint()


def test_fingerprint_ignores_metadata_and_follows_weights_and_transformers_major(monkeypatch):
    base = tiny_model(vocab_size=100)
    fingerprint = base.representation_fingerprint()
    same = tiny_model(vocab_size=100)
    same.config.id2label, same.config.label2id = {0: "A", 1: "B"}, {"A": 0, "B": 1}
    same.config._name_or_path, same.config.architectures = "/somewhere/else", ["Other"]
    same.config.null_score_diff_threshold, same.config.max_question_length = 1.5, 20
    assert same.representation_fingerprint() == fingerprint
    with torch.no_grad():
        same.bert.encoder.layer[0].output.dense.weight.add_(1e-3)
    assert same.representation_fingerprint() != fingerprint
    from hf_readonce.models.deformer_bert import modeling_deformer_bert

    monkeypatch.setattr(modeling_deformer_bert.transformers, "__version__", "99.0.0")  # another major version
    assert tiny_model(vocab_size=100).representation_fingerprint() != fingerprint


@pytest.mark.parametrize("field,value", [("activation_function", "relu"), ("encoder_attention_heads", 4),
                                         ("scale_embedding", True)])
def test_fingerprint_readonce_changes_with_computation_fields(field, value):
    base = _tiny_readonce()
    other = _tiny_readonce(**{field: value})
    other.load_state_dict(base.state_dict())
    assert other.representation_fingerprint() != base.representation_fingerprint()


def test_fingerprint_readonce_stage1_forward_hashes_nothing_until_asked(monkeypatch):
    model = _tiny_readonce().train()
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    ids = torch.randint(3, 99, (2, 12))
    out = model(input_ids=ids[:, :5], document_input_ids=ids, labels=ids[:, :3])
    out.loss.backward()
    assert calls == []
    monkeypatch.setattr(hashlib, "sha256", real)
    first = model.representation_fingerprint()
    with torch.no_grad():
        next(model.document_encoder.parameters()).add_(1.0)
    assert model.representation_fingerprint() != first
    assert model.encode_documents(ids).model_fingerprint == model.representation_fingerprint()


def test_fingerprint_readtwice_sees_config_fields():
    from hf_readonce import ReadTwiceBertConfig, ReadTwiceBertModel

    def make(**overrides):
        config = ReadTwiceBertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64, **overrides)
        return _same_weights(ReadTwiceBertModel, config)

    base = make()
    assert len(base.representation_fingerprint()) == 64
    other = make(hidden_act="relu")
    other.load_state_dict(base.state_dict())
    assert other.representation_fingerprint() != base.representation_fingerprint()


def test_a_truncated_shard_keeps_every_document_whose_bytes_are_all_there(tmp_path, capsys):
    """A shard cut short (a copy or a write that stopped): safetensors refuses the whole file, but the documents
    whose byte ranges end before the cut pass their checksums and are salvaged by `repair`; only those beyond it are
    dropped, and `verify` names only those."""
    import struct

    path = tmp_path / "s"
    store = RepresentationStore(path)
    hashes = [content_hash(f"document {i}") for i in range(N_DOCS)]
    with store.writer(FP, SETTINGS, dtype="fp32", shard_size_bytes=1 << 20) as writer:  # one shard of six
        for i, h in enumerate(hashes):
            writer.add(h, states(i), meta={"id": f"doc-{i}"})
    (victim,) = shards(path)
    data = victim.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    ends = sorted(spec["data_offsets"][1] for key, spec in header.items() if key != "__metadata__")
    cut = 8 + length + ends[len(ends) // 2] + 1  # half the tensors end before the cut
    victim.write_bytes(data[:cut])
    intact = [h for i, h in enumerate(hashes)
              if all(8 + length + header[f"{i}/{name}"]["data_offsets"][1] <= cut for name in states(i))]
    assert 0 < len(intact) < N_DOCS
    report = RepresentationStore(path).verify()
    assert sorted(e.content_hash for e in report.corrupted_documents) == sorted(set(hashes) - set(intact))
    result = RepresentationStore(path).repair()
    assert sorted(result["salvaged"]) == sorted(intact) and sorted(result["dropped"]) == sorted(set(hashes) - set(intact))
    store = RepresentationStore(path)
    assert len(store) == len(intact) and store.verify().ok
    for i, h in enumerate(hashes):
        if h in intact:
            torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i))


def test_a_corruption_of_many_documents_is_still_one_readable_line():
    """`describe()` names the first ten documents and counts the rest; the report keeps them all."""
    from hf_readonce.store.keys import DocumentEntry
    from hf_readonce.store.maintenance import Corruption

    entries = [DocumentEntry(space="s", content_hash=f"{i:064x}", shard="shards/s/x.safetensors", tensors={},
                             sha256="", meta={"id": f"doc-{i}"}) for i in range(150)]
    line = Corruption("shards/s/x.safetensors", "the shard file is missing", entries).describe()
    assert "\n" not in line and line.endswith("(and 140 more)") and len(line) < 600
    assert "doc-0 (" in line and "doc-9 (" in line and "doc-10 (" not in line
