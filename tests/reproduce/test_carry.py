"""reproduce/carry.py: the carry folder of a table (offline: no wheels): the data tar and the MiniLM warm start
rounded to fp16, which must reproduce the committed reproduce/checksums/all-MiniLM-L6-v2-fp16.json."""

import json
import tarfile

from tests.reproduce.conftest import entry_point


def test_carry_builds_data_and_checked_minilm(tmp_path, data_dir, capsys):
    carry = entry_point("carry")
    common = entry_point("_common")
    out = tmp_path / "carry"
    assert carry.main(["--output_dir", str(out), "--tables", "readtwice_quoref", "--no_wheels", "--data_dir",
                       str(data_dir), "--parts"]) == 0
    with tarfile.open(out / "data.tar.gz") as tar:
        assert {"data/quoref/train.jsonl", "data/quoref/validation.jsonl"} <= set(tar.getnames())
    minilm = out / "weights" / "all-MiniLM-L6-v2"
    assert json.loads((minilm / "parts.json").read_text())["part_bytes"] == 16 * 1024 * 1024
    assert not (minilm / "model.safetensors").exists()  # parts only; the entry point reassembles and checks them
    restored = common.carried_folder("all-MiniLM-L6-v2", minilm, common.MINILM_CHECKSUMS, "test")
    listing = json.loads(common.MINILM_CHECKSUMS.read_text())["files"]
    assert {name: common.sha256_file(restored / name) for name in listing} == listing
    assert "MiB" in capsys.readouterr().out
