"""`hf-readonce` on a store's path where the store was moved away and an empty folder made (`mv reps elsewhere;
mkdir reps`): `verify`, `info --store` and `answer` say in one line that the folder is not a store (no store.json)
and change nothing; `encode` into it starts a new store there, as into any empty folder; the moved store is whole."""

import os

import pytest

from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore
from tests.conftest import write_jsonl

ROWS = [{"id": "q1", "title": "Paris", "question": "Where is Paris?", "context": "Paris is the capital of France, a "
         "country in western Europe with many rivers and old towns.",
         "answers": {"text": ["France"], "answer_start": [24]}}]


def _run(capsys, *argv):
    status = cli_main([str(a) for a in argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return status, out.out, out.err


def _error_line(err, command):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"hf-readonce {command}: error: "), err
    return lines[0]


@pytest.fixture
def moved(tmp_path, checkpoint, capsys):
    """A store encoded at `reps`, moved to `elsewhere`, and an empty folder made at `reps`."""
    documents = write_jsonl(tmp_path / "docs.jsonl", ROWS)
    encode = ["encode", checkpoint, "--documents", documents, "--text-field", "context", "--store", tmp_path / "reps",
              "--no-progress", "--max-passage-length", "32", "--doc-stride", "8"]
    assert _run(capsys, *encode)[0] == 0
    os.rename(tmp_path / "reps", tmp_path / "elsewhere")
    (tmp_path / "reps").mkdir()
    return tmp_path / "reps", encode


def test_verify_info_and_answer_say_an_empty_folder_is_not_a_store(tmp_path, checkpoint, capsys, moved):
    path, _ = moved
    questions = write_jsonl(tmp_path / "questions.jsonl", ROWS)
    for command, argv in (("verify", ["verify", "--store", path, "--no-progress"]),
                          ("verify", ["verify", "--store", path, "--json"]),
                          ("info", ["info", "--store", path]),
                          ("info", ["info", checkpoint, "--store", path]),
                          ("answer", ["answer", checkpoint, "--store", path, "--questions", questions, "--output",
                                      tmp_path / "preds.jsonl", "--no-progress"])):
        status, out, err = _run(capsys, *argv)
        line = _error_line(err, command)
        assert status == 2 and "OK" not in out and f"no store at {path}: it is an empty folder" in line, line
        assert "no store.json" in line and "if the store was moved, give the folder it is in now" in line
    assert os.listdir(path) == [] and not (tmp_path / "preds.jsonl").exists()
    status, out, _ = _run(capsys, "verify", "--store", tmp_path / "elsewhere", "--no-progress")
    assert status == 0 and "OK: 1 shard(s), 1 document(s) verified" in out


def test_verify_of_a_store_moved_and_replaced_by_an_empty_folder_after_it_was_opened(tmp_path, capsys, moved,
                                                                                    monkeypatch):
    """The move and the `mkdir` happen between the command's open and its verify: one line saying no store is
    there any more, exit 2, not "OK: 0 shard(s)"."""
    path, _ = moved
    os.rmdir(path)
    os.rename(tmp_path / "elsewhere", path)
    real_verify = RepresentationStore.verify

    def verify_after_a_move(self, *args, **kwargs):
        os.rename(path, tmp_path / "elsewhere")
        path.mkdir()
        return real_verify(self, *args, **kwargs)

    monkeypatch.setattr(RepresentationStore, "verify", verify_after_a_move)
    status, out, err = _run(capsys, "verify", "--store", path, "--no-progress")
    line = _error_line(err, "verify")
    assert status == 2 and "OK" not in out and "any more" in line and "it is an empty folder" in line, line


def test_encode_into_the_empty_folder_starts_a_new_store(tmp_path, capsys, moved):
    path, encode = moved
    status, out, _ = _run(capsys, *encode)
    assert status == 0 and "encoded 1 document(s)" in out, out
    assert len(RepresentationStore(path, create=False)) == 1
    assert len(RepresentationStore(tmp_path / "elsewhere", create=False)) == 1
