"""utils/trainer_matrix.py (docs/contributing.md, "Checks to run"): a family or setting it does not know is refused by
name before any cell runs, instead of being printed as a CRASH of every family."""

import sys

import pytest

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
