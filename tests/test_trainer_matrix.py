"""utils/trainer_matrix.py (docs/contributing.md, "Checks to run"): a family or setting it does not know is refused by
name before any cell runs, instead of being printed as a CRASH of every family; `--ddp` past its timeout stops
torchrun's workers."""

import functools
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def matrix():
    sys.path.insert(0, str(REPO_ROOT / "utils"))
    try:
        import trainer_matrix
    finally:
        sys.path.remove(str(REPO_ROOT / "utils"))
    return trainer_matrix


@pytest.mark.parametrize("argv, option, name", [(["--settings", "accum,acum"], "--settings", "acum"),
                                                (["--families", "deformr", "--settings", "accum"], "--families",
                                                 "deformr")])
def test_unknown_names_are_refused_before_any_cell_runs(matrix, argv, option, name, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(matrix, "run_cell", lambda family, setting: ran.append((family, setting)) or ("ok", ""))
    with pytest.raises(SystemExit) as error:
        matrix.main(argv)
    assert error.value.code == 2 and not ran
    message = capsys.readouterr().err
    assert f"{option}: unknown {name}; known: " in message and "Traceback" not in message


def test_known_names_run_their_cells(matrix, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(matrix, "run_cell", lambda family, setting: ran.append((family, setting)) or ("ok", "x"))
    matrix.main(["--families", "deformer,longdoc", "--settings", "gc,accum"])
    assert ran == [("deformer", "gc"), ("deformer", "accum"), ("longdoc", "gc"), ("longdoc", "accum")]
    assert capsys.readouterr().out.count(" ok ") == 4


def _processes_naming(text: str) -> list[int]:
    """Ids of the running processes whose command line contains `text` (Linux `/proc`)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:  # the process ended meanwhile
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="lists processes through Linux /proc")
@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    reason="torch.distributed with the gloo backend is not available in this torch build")
def test_ddp_run_over_its_timeout_stops_the_workers(matrix, tmp_path, monkeypatch):
    """torchrun starts its workers in sessions of their own: past `--ddp`'s timeout the workers stop with torchrun,
    not left running (and training) after the matrix reported the cells."""
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    monkeypatch.setattr(tempfile, "TemporaryDirectory", functools.partial(tempfile.TemporaryDirectory, dir=run_dir))
    table = matrix.run_ddp(["recurrent_gpt2", "readtwice_mlm"], ["ddp", "ddp_gc"], timeout=4)
    assert ("CRASH", "not run (torchrun over 4 s)") in table.values()  # the cells left when the time was up
    left = _processes_naming(str(run_dir))
    for pid in left:  # stop them before failing
        os.kill(pid, signal.SIGKILL)
    assert left == []
