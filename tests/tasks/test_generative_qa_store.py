"""Generative answers from stored ReadOnce representations (`hf_readonce.tasks.generative_qa_store`) equal the
ReadOnce text-to-text pipeline reading the documents itself; `hf-readonce answer` serves them with EM/F1 beside the
baselines; what does not apply is refused by name."""

import json

import pytest

from hf_readonce.models.readonce_bart.pipeline_readonce_bart import ReadOnceText2TextGenerationPipeline
from hf_readonce.representations import fill_store, get_adapter
from hf_readonce.store import MissingRepresentationError, RepresentationStore
from hf_readonce.tasks.generative_qa_store import answer_from_representations
from tests.representations.contract import counting_tokenizations
from tests.tasks.test_summarization_store import DOCUMENTS, longdoc, readonce

ROWS = [{"id": "a", "question": "Who approved the budget?", "context": DOCUMENTS[0]},
        {"id": "b", "question": "What is expected?", "context": DOCUMENTS[1]},
        {"id": "c", "question": "When did the museum reopen its doors?", "context": DOCUMENTS[2]},
        {"id": "d", "question": "What was repaired?", "context": DOCUMENTS[0]}]


def test_answers_from_the_store_equal_the_pipeline_reading_the_documents(tokenizer, tmp_path):
    model = readonce(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=48), store, DOCUMENTS, store_dtype="float32")
    used, timings = {}, {}
    answers = answer_from_representations(model, tokenizer, store, ROWS, batch_size=3, max_new_tokens=5,
                                          settings_used=used, timings=timings)
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    expected = {row["id"]: pipe(text=row["question"], document=row["context"], max_new_tokens=5,
                                max_document_len=48)[0]["generated_text"] for row in ROWS}
    assert answers == expected and all(answers.values())
    assert used["max_document_length"] == 48 and used["compression_ratio"] == 4
    assert timings["read_seconds"] > 0 and timings["generate_seconds"] > 0


def test_counts_the_documents_cut_to_the_length_read(tokenizer, tmp_path):
    model = readonce(tokenizer)
    lengths = [len(tokenizer(text).input_ids) for text in DOCUMENTS]
    store = RepresentationStore(tmp_path / "store")
    counts = {}
    answer_from_representations(model, tokenizer, store, ROWS, max_new_tokens=2, encode_missing=True,
                                settings={"max_document_length": 24}, counts=counts)
    assert counts == {"passages": 3, "passages_cut": sum(length > 24 for length in lengths), "questions": 4,
                      "questions_cut": 0}
    assert 0 < counts["passages_cut"] < 3
    counts.clear()
    answer_from_representations(model, tokenizer, store, ROWS[1:2], max_new_tokens=2, counts=counts)
    assert counts == {"passages": 1, "passages_cut": 0, "questions": 1, "questions_cut": 0}


LONG_QUESTION = ("Which of the members of the council who spoke during the long debate about school funding and "
                 "road repairs on Tuesday voted against the new budget, and why did they do so?")


def test_counts_the_questions_cut_to_the_tokens_read(tokenizer, tmp_path):
    """The model reads at most `max_prompt_length` (32) tokens of a question with a document (as the pipeline's
    `max_question_len`): a longer question was cut without a word; `counts` now says how many, and
    `settings_used` the length."""
    model = readonce(tokenizer)
    assert len(tokenizer(LONG_QUESTION).input_ids) > 32 >= max(len(tokenizer(r["question"]).input_ids) for r in ROWS)
    store = RepresentationStore(tmp_path / "store")
    rows = [*ROWS, {"id": "e", "question": LONG_QUESTION, "context": DOCUMENTS[0]}]
    counts, used = {}, {}
    answers = answer_from_representations(model, tokenizer, store, rows, max_new_tokens=2, encode_missing=True,
                                          counts=counts, settings_used=used)
    assert counts["questions"] == 5 and counts["questions_cut"] == 1 and used["max_question_length"] == 32
    # cut, not refused: the answer is the one of its first 32 tokens
    first = tokenizer.decode(tokenizer(LONG_QUESTION, truncation=True, max_length=32,
                                       add_special_tokens=False).input_ids[:30])
    assert answers["e"] == answer_from_representations(model, tokenizer, store, [{**rows[-1], "question": first}],
                                                       max_new_tokens=2)["e"]


def test_the_documents_read_whole_are_not_tokenized_to_count_those_cut(tokenizer, tmp_path, monkeypatch):
    """The count of documents cut comes from what `fill_store` stored with each (the tokens read, and whether it was
    cut): no document is tokenized to tell (every distinct document was tokenized on every call: seconds per
    thousands of passages; then each stored with `max_document_length` tokens), for answers and summaries alike."""
    from hf_readonce.tasks.summarization_store import summarize_from_store

    model = readonce(tokenizer)
    lengths = {text: len(tokenizer(text).input_ids) for text in DOCUMENTS}
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=24), store, DOCUMENTS, store_dtype="float32")
    cut = sum(length > 24 for length in lengths.values())
    assert any(length < 24 for length in lengths.values()) and cut
    tokenized = counting_tokenizations(tokenizer, DOCUMENTS, monkeypatch)
    counts = {}
    answer_from_representations(model, tokenizer, store, ROWS, max_new_tokens=2, counts=counts)
    assert counts == {"passages": 3, "passages_cut": cut, "questions": 4, "questions_cut": 0} and tokenized == []
    counts = {}
    summarize_from_store(model, tokenizer, store, DOCUMENTS, max_new_tokens=2, counts=counts)
    assert counts == {"documents": 3, "documents_cut": cut} and tokenized == []


def test_missing_and_bad_rows_are_named(tokenizer, tmp_path):
    model = readonce(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(MissingRepresentationError, match="holds no readonce_bart representations"):
        answer_from_representations(model, tokenizer, store, ROWS)
    assert len(answer_from_representations(model, tokenizer, store, ROWS, encode_missing=True,
                                           max_new_tokens=2)) == 4
    assert len(store) == 3
    with pytest.raises(ValueError, match="one document per question"):
        answer_from_representations(model, tokenizer, store, [{**ROWS[0], "context": DOCUMENTS[:2]}])
    with pytest.raises(ValueError, match="two examples have the id"):
        answer_from_representations(model, tokenizer, store, [ROWS[0], ROWS[0]])
    with pytest.raises(ValueError, match="read no question"):  # LongDoc summarizes from the document alone
        answer_from_representations(longdoc(tokenizer), tokenizer, store, ROWS)


def test_cli_answers_from_readonce_stores(tokenizer, tmp_path, capsys):
    from hf_readonce.cli import main as cli_main
    from tests.conftest import write_jsonl

    folder = tmp_path / "readonce"
    model = readonce(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rows = [{**row, "answers": {"text": [row["context"].split()[0]], "answer_start": [0]}} for row in ROWS]
    questions = write_jsonl(tmp_path / "q.jsonl", rows)
    store, output = tmp_path / "store", tmp_path / "p.jsonl"
    for k in ("4", "8"):
        assert cli_main(["encode", str(folder), "--documents", str(questions), "--store", str(store), "--dtype",
                         "fp32", "--max-document-length", "48", "--compression-ratio", k, "--no-progress"]) == 0
    capsys.readouterr()
    common = ["answer", str(folder), "--store", str(store), "--questions", str(questions), "--output", str(output),
              "--max-answer-length", "4", "--no-progress"]
    assert cli_main(common) == 2  # two k stored: which one
    assert "compression_ratio=4" in capsys.readouterr().err
    assert cli_main(common + ["--compression-ratio", "8"]) == 0
    out = capsys.readouterr().out
    got = {r["id"]: r["prediction_text"] for r in map(json.loads, output.read_text().splitlines())}
    assert got == answer_from_representations(model, tokenizer, RepresentationStore(store), ROWS, max_new_tokens=4,
                                              settings={"compression_ratio": 8})
    assert "compression_ratio 8" in out and "baseline: first-span" in out and out.count("EM") >= 2
    # a row this family cannot read (several passages) is set aside by line; the others are answered
    lines = [json.dumps(row) for row in rows] + [json.dumps({**rows[0], "id": "x", "contexts": DOCUMENTS[:2]})]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(lines) + "\n")
    assert cli_main(common[:5] + [str(mixed)] + common[6:] + ["--compression-ratio", "8"]) == 0
    captured = capsys.readouterr()
    assert "line 5: example x: this model reads one document per question" in captured.err
    assert len(output.read_text().splitlines()) == 4
    # the same weights computing in another dtype: their stored vectors are another model's, and the option is named
    assert cli_main(common + ["--compression-ratio", "8", "--compute-dtype", "bfloat16"]) == 2
    assert "pass --compute-dtype float32 to read them" in capsys.readouterr().err
    for option, words in ((["--recompute-ratio", "0.5"], "--recompute-ratio does not apply to readonce_bart"),
                          (["--doc-stride", "8"], "--doc-stride does not apply to readonce_bart"),
                          (["--n-best-size", "3"], "--n-best-size does not apply to generative models")):
        assert cli_main(common + ["--compression-ratio", "8", *option]) == 2
        assert words in capsys.readouterr().err


def test_cli_notes_the_questions_cut_to_the_tokens_read(tokenizer, tmp_path, capsys):
    """`hf-readonce answer` said nothing when a question was cut to the 32 tokens the model reads with a document;
    now a note counts them, in the words of the note about passages cut, and the settings line gives the length."""
    from hf_readonce.cli import main as cli_main
    from tests.conftest import write_jsonl

    folder = tmp_path / "readonce"
    readonce(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rows = [*ROWS, {"id": "e", "question": LONG_QUESTION, "context": DOCUMENTS[0]}]
    common = ["answer", str(folder), "--store", str(tmp_path / "store"), "--output", str(tmp_path / "p.jsonl"),
              "--max-answer-length", "2", "--encode-missing", "--no-progress", "--questions"]
    assert cli_main(common + [str(write_jsonl(tmp_path / "q.jsonl", rows))]) == 0
    captured = capsys.readouterr()
    assert ("hf-readonce answer: note: 1 of the 5 question(s) held more than the 32 tokens read per question: they "
            "were cut to them, and the answers come from those tokens only (readonce_bart models read no more of a "
            "question)") in captured.err
    assert "max_question_length 32" in captured.out and "Traceback" not in captured.err
    assert cli_main(common + [str(write_jsonl(tmp_path / "short.jsonl", ROWS))]) == 0  # none cut: no note
    assert "question(s) held more" not in capsys.readouterr().err


def test_the_question_length_the_checkpoint_records_is_read_everywhere(tokenizer, tmp_path, capsys):
    """A ReadOnce checkpoint records the question length it was trained with (`config.max_question_length`, as the
    ReadOnce recipe writes it; the 32 tokens were a constant of the adapter): the store path, the pipeline, `hf-readonce
    answer` and `summarize_from_store` read questions (prompts) at that length, and the representations stored by the
    same weights before the length was recorded are read, not encoded again (the fingerprint ignores the field)."""
    from hf_readonce import ReadOnceBartForConditionalGeneration
    from hf_readonce.cli import main as cli_main
    from hf_readonce.tasks.summarization_store import summarize_from_store
    from tests.conftest import write_jsonl

    old, new = tmp_path / "old", tmp_path / "new"
    model = readonce(tokenizer)
    model.save_pretrained(old)
    model.config.max_question_length = 6
    model.save_pretrained(new)
    for folder in (old, new):
        tokenizer.save_pretrained(folder)
    assert "max_question_length" not in json.loads((old / "config.json").read_text()) or \
        json.loads((old / "config.json").read_text())["max_question_length"] is None
    store = RepresentationStore(tmp_path / "store")
    before = ReadOnceBartForConditionalGeneration.from_pretrained(old).eval()
    stored = fill_store(get_adapter(before, tokenizer), store, DOCUMENTS, store_dtype="float32")
    assert stored.encoded == len(DOCUMENTS)
    recorded = ReadOnceBartForConditionalGeneration.from_pretrained(new).eval()
    assert get_adapter(recorded, tokenizer).max_prompt_length == 6 and get_adapter(before, tokenizer).max_prompt_length == 32
    lengths = [len(tokenizer(row["question"]).input_ids) for row in ROWS]
    assert 0 < sum(length > 6 for length in lengths) < len(ROWS)
    counts, used = {}, {}
    answers = answer_from_representations(recorded, tokenizer, store, ROWS, max_new_tokens=3, counts=counts,
                                          settings_used=used)  # no encode_missing: the stored ones are read
    assert used["max_question_length"] == 6 and counts["questions_cut"] == sum(length > 6 for length in lengths)
    pipe = ReadOnceText2TextGenerationPipeline(model=recorded, tokenizer=tokenizer)
    assert answers == {row["id"]: pipe(text=row["question"], document=row["context"], max_new_tokens=3)[0][
        "generated_text"] for row in ROWS}
    # the CLI reads the same store and says which length it read, and why no more
    assert cli_main(["answer", str(new), "--store", str(tmp_path / "store"), "--questions",
                     str(write_jsonl(tmp_path / "q.jsonl", ROWS)), "--output", str(tmp_path / "p.jsonl"),
                     "--max-answer-length", "3", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "max_question_length 6" in captured.out
    assert "(the checkpoint was trained reading no more of a question, its max_question_length)" in captured.err
    with pytest.raises(ValueError, match="reads at most 6 with each document"):
        summarize_from_store(recorded, tokenizer, store, DOCUMENTS[:1], prompt="a prompt of more than six tokens")
    assert len(store) == len(DOCUMENTS)  # nothing encoded again
