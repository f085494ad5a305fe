"""The demo Space's logic without a browser (`spaces/readonce-qa/app.py`): input errors become messages, answers
from cached passage states equal one call per question, the packaged examples are intact. Gradio is not needed."""

import importlib.util
import json

import pytest

from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
from tests.conftest import DATA_DIR, REPO_ROOT, tiny_model

SPACE = REPO_ROOT / "spaces" / "readonce-qa"


@pytest.fixture(scope="module")
def app():
    spec = importlib.util.spec_from_file_location("readonce_qa_app", SPACE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pipe(tokenizer):
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride, model.config.max_question_length = 24, 8, 16
    return DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)


def test_input_errors_are_messages_not_tracebacks(app, pipe):
    document = app.EXAMPLES[0]["context"]
    cases = [("", "Who?", "The document is empty"), ("   \n ", "Who?", "The document is empty"),
             (document, "", "Type at least one question"), (document, " \n\n ", "Type at least one question"),
             ("word " * (app.MAX_DOCUMENT_TOKENS + 1), "Who?", f"at most {app.MAX_DOCUMENT_TOKENS:,}"),
             (document, "\n".join(["Who?"] * (app.MAX_QUESTIONS + 1)), f"at most {app.MAX_QUESTIONS} at once"),
             (document, "x" * (app.MAX_QUESTION_CHARS + 1), f"at most {app.MAX_QUESTION_CHARS}"),
             (None, None, "Type at least one question")]
    for doc, questions, message in cases:
        status, answers, timing = app.run(doc, questions, pipe)
        assert message in status and status.startswith("⚠️") and (answers, timing) == ("", ""), (doc, questions)
        assert "Traceback" not in status


def test_unexpected_errors_are_one_line(app):
    class Broken:
        @staticmethod
        def tokenizer(text, **kwargs):
            return {"input_ids": [1, 2]}

        def __call__(self, **kwargs):
            raise RuntimeError("boom")

    status, answers, _ = app.run("A document.", "Who?", Broken())
    assert status == "⚠️ Something went wrong: RuntimeError: boom" and answers == ""


def test_cached_answers_equal_one_call_per_question(app, pipe):
    example = app.EXAMPLES[1]
    questions = "\n".join(example["questions"]) + "\n\n"
    result = app.answer(example["context"], questions, pipe)
    assert result["questions"] == example["questions"] and result["same"]
    assert [a["answer"] for a in result["answers"]] == [
        pipe(question=[q], context=example["context"].strip())[0]["answer"] for q in example["questions"]]
    assert result["gold"] == example["answers"] and result["cached_seconds"] > 0 and result["pairs_seconds"] > 0
    status, table, timing = app.run(example["context"], questions, pipe)
    assert status == "" and table.count("\n") == 1 + len(example["questions"]) and "question(s)" in timing
    assert all(answer in table for answer in example["answers"])  # the data set's answers shown beside


def test_packaged_examples_are_the_data_sets(app):
    path = DATA_DIR / "disfl_qa" / "validation.jsonl"
    assert "CC BY 4.0" in json.loads((SPACE / "examples.json").read_text())["source"]
    if not path.is_file():
        pytest.skip(f"Disfl-QA not found under {DATA_DIR}")
    rows = {row["id"]: row for row in map(json.loads, path.open())}
    assert len(app.EXAMPLES) == 3
    for example in app.EXAMPLES:
        for qid, question, answer in zip(example["ids"], example["questions"], example["answers"]):
            assert rows[qid]["context"] == example["context"] and rows[qid]["question"] == question
            assert rows[qid]["answers"]["text"][0] == answer


def test_typing_a_passage_sets_the_example_choice_to_paste(app, monkeypatch):
    """After the user types in the document box, the dropdown no longer names the previous example (issue 38): the
    document's `.input` event sets it to the paste option (or back to an example whose passage is typed again), and
    choosing an example fills the boxes on the dropdown's own `.input` (a value set by code does not refill them).
    Checked on the event wiring of `build_demo()`, with a stand-in for gradio that records it."""
    import sys
    import types

    events = []

    class Component:
        def __init__(self, *args, elem_id=None, **kwargs):
            self.elem_id = elem_id

        def __getattr__(self, event):  # change, input, click, select...
            return lambda fn, inputs=None, outputs=None, **kwargs: events.append((self.elem_id, event, fn, inputs,
                                                                                   outputs))

    class Blocks(Component):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    fake = types.SimpleNamespace(Blocks=Blocks, Markdown=Component, Dropdown=Component, Textbox=Component,
                                 Button=Component)
    monkeypatch.setitem(sys.modules, "gradio", fake)
    app.build_demo()
    wiring = {(elem_id, event): (fn, outputs) for elem_id, event, fn, _, outputs in events}
    fn, outputs = wiring[("document", "input")]
    assert fn is app.document_edited and outputs.elem_id == "example"
    assert ("example", "change") not in wiring  # would refill (empty) the boxes when the choice is set by code
    fn, outputs = wiring[("example", "input")]
    assert fn is app.pick_example and [o.elem_id for o in outputs] == ["document", "questions"]
    assert app.document_edited("A passage of my own.") == app.PASTE
    assert app.document_edited(app.EXAMPLES[1]["context"]) == app.EXAMPLES[1]["name"]
    assert app.pick_example(app.PASTE) == ("", "")
