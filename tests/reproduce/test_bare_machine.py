"""reproduce/bare_machine.sh end to end on CPU: a checkout whose reference checkpoint lacks its weight file, a carry
folder holding that file as 16 MiB-style parts and a data tar of a few rows; the DeFormer entry point restores the
weights, checks their SHA-256, trains a few steps, packs its results; a corrupt part stops it with one line."""

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from hf_readonce.weights import write_checksums
from tests.conftest import REPO_ROOT
from tests.reproduce.conftest import check_results, entry_point

common = entry_point("_common")


def _head(source, target, lines):
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source) as handle:
        target.write_text("".join(line for _, line in zip(range(lines), handle)))


@pytest.fixture
def bare(tmp_path, data_dir, tiny_teacher):
    """`(checkpoints, carry, env)`: checkpoints/minilm-qa-reference/ without model.safetensors (listed in its
    checksums.json), carry/weights/minilm-qa-reference/ with its parts, carry/data.tar.gz with a few rows."""
    checkpoints = tmp_path / "checkpoints"
    reference = checkpoints / "minilm-qa-reference"
    shutil.copytree(tiny_teacher, reference)
    write_checksums(reference)
    common.pack([reference / "model.safetensors"], tmp_path / "carry" / "weights" / "minilm-qa-reference",
                 part_bytes=1 << 20)
    (reference / "model.safetensors").unlink()
    rows = tmp_path / "rows" / "data"
    for folder, name, lines in (("disfl_qa", "train", 120), ("disfl_qa", "validation", 30), ("quoref", "train", 30)):
        _head(data_dir / folder / f"{name}.jsonl", rows / folder / f"{name}.jsonl", lines)
    with tarfile.open(tmp_path / "carry" / "data.tar.gz", "w:gz") as tar:
        tar.add(rows, arcname="data")
    env = dict(os.environ, HF_READONCE_CHECKPOINTS=str(checkpoints), REPRO_DATA=str(tmp_path / "machine" / "data"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return reference, tmp_path / "carry", env


def _run(carry, env, out, pack=None):
    command = ["bash", "reproduce/bare_machine.sh", str(carry), sys.executable, "reproduce/deformer.py", "--smoke",
               "--ks", "1", "--pack_k", "1", "--output_dir", str(out)]
    if pack:
        command += ["--pack_dir", str(pack)]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_bare_machine_restores_checks_trains_and_packs(bare, tmp_path):
    reference, carry, env = bare
    listed = json.loads((reference / "checksums.json").read_text())["files"]["model.safetensors"]
    done = _run(carry, env, tmp_path / "out", tmp_path / "pack")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert common.sha256_file(reference / "model.safetensors") == listed  # restored from the parts, verified
    assert (tmp_path / "machine" / "data" / "disfl_qa" / "train.jsonl").is_file()  # the data tar, unpacked
    results = check_results(tmp_path / "out" / "results.json", rows=1)
    assert str(tmp_path / "machine" / "data") in results["command"] and "--weights_from" in results["command"]
    back = subprocess.run([sys.executable, "reproduce/unpack.py", str(tmp_path / "pack"), "--output_dir",
                           str(tmp_path / "back")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    assert json.loads((tmp_path / "back" / "results.json").read_text())["rows"] == results["rows"]


def test_bare_machine_stops_on_a_corrupt_part(bare, tmp_path):
    reference, carry, env = bare
    part = carry / "weights" / "minilm-qa-reference" / "bundle.tar.part-001"
    data = bytearray(part.read_bytes())
    data[-1] ^= 0xFF
    part.write_bytes(bytes(data))
    done = _run(carry, env, tmp_path / "out")
    assert done.returncode == 2 and "bundle.tar.part-001" in done.stderr and "Traceback" not in done.stderr
    assert not (reference / "model.safetensors").exists() and not (tmp_path / "out" / "results.json").exists()


def test_data_unpacks_into_repro_data_whatever_its_name(tmp_path):
    """The data tar holds `data/<folder>/...`; its folders land in `$REPRO_DATA` itself, the `--data_dir` the entry
    point is given, also when that folder is not named `data`."""
    rows = tmp_path / "rows" / "data" / "quoref"
    rows.mkdir(parents=True)
    (rows / "train.jsonl").write_text('{"id": "q1"}\n')
    carry = tmp_path / "carry"
    carry.mkdir()
    with tarfile.open(carry / "data.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "rows" / "data", arcname="data")
    env = dict(os.environ, REPRO_DATA=str(tmp_path / "machine" / "shared_rows"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    show = "import sys, os; d = sys.argv[sys.argv.index('--data_dir') + 1]; print('DATA', d, sorted(os.listdir(d)))"
    done = subprocess.run(["bash", "reproduce/bare_machine.sh", str(carry), sys.executable, "-c", show],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"DATA {tmp_path / 'machine' / 'shared_rows'} ['quoref']" in done.stdout
    assert (tmp_path / "machine" / "shared_rows" / "quoref" / "train.jsonl").read_text() == '{"id": "q1"}\n'
    assert not (tmp_path / "machine" / "data").exists()
