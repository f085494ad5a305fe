"""`verify` checks the index as strictly as the data: a manifest that only reads as intended because the JSON reader
keeps the last of two values under one key (or accepts NaN, which JSON does not have), or that lost the read
checksum its shard's header records, is named; `repair` rebuilds it from the shard's header and keeps every
document."""

import json

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash

FP = "f" * 64
SETTINGS = {"k": 2, "representation": "test/v1"}


def states(i):
    return {"hidden_states": torch.randn(4, 8, generator=torch.Generator().manual_seed(i))}


def _duplicate_document(text, manifest):
    """The first document listed twice: a wrong record (another shape) first, the right one last."""
    doc_hash, record = next(iter(manifest["documents"].items()))
    wrong = json.loads(json.dumps(record))
    wrong["tensors"]["hidden_states"]["shape"] = [5, 8]
    listed = json.dumps(manifest["documents"], separators=(",", ":"))  # as the store writes it
    assert listed in text
    return text.replace(listed, "{" + json.dumps(doc_hash) + ":" + json.dumps(wrong) + "," + listed[1:])


EDITS = {
    "duplicate-document-key": _duplicate_document,
    "duplicate-top-level-key": lambda text, manifest: '{"documents": {}, ' + text[1:],
    "duplicate-file-sha256": lambda text, manifest: '{"file_sha256": "' + "0" * 64 + '", ' + text[1:],
    "nan": lambda text, manifest: text[:-1] + ', "created": NaN}',
    "read-checksum-stripped": lambda text, manifest: json.dumps(
        {**manifest, "documents": {h: {k: v for k, v in d.items() if k != "xxh3_128"}
                                   for h, d in manifest["documents"].items()}}),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_verify_names_index_damage_the_json_reader_passes_over_and_repair_keeps_every_document(tmp_path, case):
    path = tmp_path / "s"
    store = RepresentationStore(path)
    hashes = [content_hash(f"document {i}") for i in range(3)]
    with store.writer(FP, SETTINGS, dtype="fp32") as writer:
        for i, h in enumerate(hashes):
            writer.add(h, states(i), meta={"id": f"doc-{i}"})
    manifest_path = next((path / "index").glob("*.json"))
    text = manifest_path.read_text()
    edited = EDITS[case](text, json.loads(text))
    assert edited != text
    manifest_path.write_text(edited)
    store = RepresentationStore(path)
    for i, h in enumerate(hashes):  # reads are served as before: the last value is the one written
        torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i))
    report = store.verify()
    assert not report.ok and [c.shard for c in report.corruptions] == [f"index/{manifest_path.name}"]
    result = store.repair()
    assert result["dropped"] == [] and sorted(result["salvaged"]) == sorted(hashes)
    store = RepresentationStore(path)
    assert store.verify().ok
    for i, h in enumerate(hashes):
        torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i))


def test_an_ambiguous_manifest_of_a_damaged_shard_is_one_corruption_and_repair_keeps_the_intact_documents(tmp_path):
    path = tmp_path / "s"
    store = RepresentationStore(path)
    hashes = [content_hash(f"document {i}") for i in range(3)]
    with store.writer(FP, SETTINGS, dtype="fp32") as writer:
        for i, h in enumerate(hashes):
            writer.add(h, states(i))
    manifest_path = next((path / "index").glob("*.json"))
    manifest_path.write_text('{"format_version": 1, ' + manifest_path.read_text()[1:])
    shard = next((path / "shards").rglob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-4:] = bytes(b ^ 0xFF for b in data[-4:])  # the last document's tensor bytes
    shard.write_bytes(bytes(data))
    store = RepresentationStore(path)
    report = store.verify()
    assert {c.shard for c in report.corruptions} == {f"index/{manifest_path.name}", str(shard.relative_to(path))}
    result = store.repair()
    assert result["dropped"] == [hashes[-1]]
    store = RepresentationStore(path)
    assert store.verify().ok and len(store) == 2
    for i, h in enumerate(hashes[:-1]):
        torch.testing.assert_close(store.get(FP, SETTINGS, h), states(i))


@pytest.mark.parametrize("meta", [{1: "a", "1": "b"}, {"id": "x", "extra": {True: 1, "true": 2}}, {None: 0, "null": 1}])
def test_metadata_whose_keys_collide_as_json_is_refused_not_written_as_a_manifest_verify_calls_corrupted(tmp_path,
                                                                                                          meta):
    """JSON keys are strings: `1` and `"1"` would both be written as `"1"`, a manifest (and shard header) with one
    key given twice, which `verify` names as corrupted. `add` refuses such metadata before anything is written."""
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(TypeError, match="`meta`.*given twice"):
        store.put(FP, SETTINGS, content_hash("document"), states(0), meta=meta)
    store.put(FP, SETTINGS, content_hash("document"), states(0), meta={1: "a", "2": "b"})  # distinct as JSON: kept
    assert store.verify().ok and store.get_meta(FP, SETTINGS, content_hash("document")) == {"1": "a", "2": "b"}


def test_metadata_is_kept_as_json_gives_it_back_so_the_writing_process_verifies_its_own_manifest(tmp_path):
    """Metadata with an int key or a tuple is indexed as JSON gives it back (`"1"`, a list) in the process that wrote
    it too: `verify` there found its in-memory manifest disagreeing with the shard's header."""
    store = RepresentationStore(tmp_path / "s")
    store.put(FP, SETTINGS, content_hash("document"), states(0), meta={1: "a", "span": (3, 7)})
    assert store.verify().ok
    expected = {"1": "a", "span": [3, 7]}
    assert store.get_meta(FP, SETTINGS, content_hash("document")) == expected
    assert RepresentationStore(tmp_path / "s").get_meta(FP, SETTINGS, content_hash("document")) == expected


def test_verify_of_a_store_moved_away_since_it_was_opened_is_no_sound_report(tmp_path):
    """`verify_store` (and `RepresentationStore.verify`) on a store whose folder was moved or removed after it was
    opened raises `StoreNotFoundError`: it reported an empty store as sound (`ok=True`)."""
    from hf_readonce.store import StoreNotFoundError
    from hf_readonce.store.maintenance import verify_store

    store = RepresentationStore(tmp_path / "store")
    with store.writer("a" * 64, {"k": 1}, dtype="fp32", model_type="toy") as writer:
        writer.add(content_hash("one"), {"h": torch.randn(2, 3)})
    assert verify_store(store).ok
    (tmp_path / "store").rename(tmp_path / "moved")
    with pytest.raises(StoreNotFoundError, match="any more"):
        verify_store(store)
    assert RepresentationStore(tmp_path / "moved", create=False).verify().ok


def test_cli_verify_of_a_store_moved_away_since_it_was_opened_is_one_line(tmp_path, capsys, monkeypatch):
    """`hf-readonce verify` on a store moved between its open and the verify: one line saying it is gone, not an
    "unexpected here, please report it" error."""
    from hf_readonce.cli import main

    path = tmp_path / "store"
    store = RepresentationStore(path)
    with store.writer("a" * 64, {"k": 1}, dtype="fp32", model_type="toy") as writer:
        writer.add(content_hash("one"), {"h": torch.randn(2, 3)})
    real_verify = RepresentationStore.verify

    def verify_after_a_move(self, *args, **kwargs):
        path.rename(tmp_path / "moved")
        return real_verify(self, *args, **kwargs)

    monkeypatch.setattr(RepresentationStore, "verify", verify_after_a_move)
    assert main(["verify", "--store", str(path), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "any more" in err and "unexpected" not in err, err
