"""Reading JSONL inputs (`hf_readonce.tasks.jsonl`): each set-aside line says what is wrong with its field."""

import json

from hf_readonce.tasks.jsonl import field_problem, iter_documents, iter_jsonl


def test_field_problems_are_named_whatever_the_field_is_called(tmp_path):
    rows = [{"id": "ok", "blank_text": "A text."}, {"id": "absent"}, {"id": "null", "blank_text": None},
            {"id": "int", "blank_text": 5}, {"id": "blank", "blank_text": "  "}]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    problems = []
    assert list(iter_documents(path, text_field="blank_text", problems=problems)) == [("ok", "A text.")]
    assert [(p.line, p.reason) for p in problems] == [
        (2, "no 'blank_text' field"), (3, "'blank_text' is null"), (4, "'blank_text' is of type int, not a string"),
        (5, "empty document ('blank_text' is blank)")]
    assert field_problem({"question": "Who?"}, "question") is None


def test_a_byte_order_mark_opening_the_file_is_not_read_as_text(tmp_path):
    """A UTF-8 file saved with a byte order mark (as Windows editors write it) keeps its first row; a mark anywhere
    else is no JSON and its line is set aside."""
    rows = [{"id": "first", "context": "A text."}, {"id": "second", "context": "Another text."}]
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8"))
    problems = []
    assert list(iter_documents(path, problems=problems)) == [("first", "A text."), ("second", "Another text.")]
    assert problems == []
    path.write_bytes(b"".join(json.dumps(row).encode("utf-8") + b"\n" for row in rows[:1])
                     + b"\xef\xbb\xbf" + json.dumps(rows[1]).encode("utf-8") + b"\n")
    assert list(iter_documents(path, problems=problems)) == [("first", "A text.")]
    assert [p.line for p in problems] == [2]
    # a line that is not UTF-8 is reported at its byte in the file's line, the mark counted
    path.write_bytes(b"\xef\xbb\xbf" + b'{"id": "\xff"}\n' + b'{"id": "\xff"}\n')
    problems = []
    assert list(iter_jsonl(path, problems)) == []
    assert [str(p) for p in problems] == ["line 1: not valid UTF-8 (invalid start byte at byte 11)",
                                          "line 2: not valid UTF-8 (invalid start byte at byte 8)"]
