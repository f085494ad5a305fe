"""Reading JSONL inputs (`hf_readonce.tasks.jsonl`): each set-aside line says what is wrong with its field."""

import json

from hf_readonce.tasks.jsonl import field_problem, iter_documents


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
