"""QA glue: question-independent windows, span labels, n-best decoding, EM/F1, JSONL errors."""

import numpy as np
import pytest
from transformers import AutoTokenizer

from hf_readonce.tasks.question_answering import (
    build_features,
    pair_inputs,
    postprocess_qa_predictions,
    read_jsonl,
    span_in_window,
    split_passages,
    squad_em_f1,
    tokenize_questions,
)
from hf_readonce.weights import minilm_path


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(minilm_path())


PASSAGE = " ".join(f"word{i}" for i in range(60)) + " The answer is Paris France today ."


def test_windows_cover_passage_with_overlap(tokenizer):
    (windows,) = split_passages(tokenizer, [PASSAGE], max_passage_length=40, doc_stride=10)
    assert len(windows) > 2
    body = tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
    assert all(len(w.input_ids) <= 40 and w.input_ids[-1] == tokenizer.sep_token_id for w in windows)
    for a, b in zip(windows, windows[1:]):
        assert a.input_ids[-11:-1] == b.input_ids[:10]  # consecutive windows share doc_stride tokens
    rebuilt = windows[0].input_ids[:-1] + [t for w in windows[1:] for t in w.input_ids[10:-1]]
    assert rebuilt == body
    with pytest.raises(ValueError, match="doc_stride"):
        split_passages(tokenizer, [PASSAGE], max_passage_length=40, doc_stride=39)
    with pytest.raises(ValueError, match="passage 0"):
        split_passages(tokenizer, ["  "])


def test_windows_do_not_depend_on_question(tokenizer):
    examples = [{"context": PASSAGE, "question": "Where?"}, {"context": PASSAGE, "question": "A much longer question " * 4}]
    features, windows, passages = build_features(examples, tokenizer, max_question_length=32, max_passage_length=40,
                                                 doc_stride=10)
    assert len(passages) == 1
    per_question = {}
    for f in features:
        per_question.setdefault(f["example_index"], []).append(f["window_index"])
    assert per_question[0] == per_question[1]


def test_span_labels_point_at_answer(tokenizer):
    start = PASSAGE.index("Paris")
    example = {"context": PASSAGE, "question": "Which city?",
               "answers": {"text": ["Paris France"], "answer_start": [start]}}
    features, windows, _ = build_features([example], tokenizer, max_question_length=16, max_passage_length=40,
                                          doc_stride=10, with_labels=True)
    positive = [f for f in features if f["start_positions"] > 0]
    assert positive
    for f in positive:
        window = windows[0][f["window_index"]]
        q = len(f["question_ids"])
        s, e = window.offsets[f["start_positions"] - q][0], window.offsets[f["end_positions"] - q][1]
        assert PASSAGE[s:e] == "Paris France"
        assert pair_inputs(f["question_ids"], window)["token_type_ids"][q] == 1
    assert any(f["start_positions"] == 0 for f in features)  # windows without the answer point at [CLS]
    assert span_in_window(windows[0][0], start, "Paris France") is None


def test_postprocess_and_metrics(tokenizer):
    start = PASSAGE.index("Paris")
    examples = [{"id": "a", "context": PASSAGE, "question": "Which city?",
                 "answers": {"text": ["Paris"], "answer_start": [start]}},
                {"id": "b", "context": PASSAGE, "question": "Unanswerable?", "answers": {"text": [], "answer_start": []}}]
    features, windows, _ = build_features(examples, tokenizer, max_question_length=16, max_passage_length=40,
                                          doc_stride=10)
    logits = []
    for f in features:
        window = windows[0][f["window_index"]]
        s, e = np.zeros(len(window.input_ids)), np.zeros(len(window.input_ids))
        span = span_in_window(window, start, "Paris France")
        if span is not None and f["example_index"] == 0:
            s[span[0]], e[span[0]] = 5.0, 5.0
        logits.append((s, e, 20.0 if f["example_index"] == 1 else -20.0))
    predictions = postprocess_qa_predictions(examples, features, windows, logits, allow_no_answer=True)
    assert predictions == {"a": "Paris", "b": ""}
    assert squad_em_f1(predictions, examples) == {"exact_match": 100.0, "f1": 100.0}
    half = squad_em_f1({"a": "Paris France", "b": "x"}, examples)
    assert half["exact_match"] == 0.0 and half["f1"] == pytest.approx(100 * (2 / 3) / 2)


def test_read_jsonl_reports_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\n{oops\n')
    with pytest.raises(ValueError, match="line 3"):
        read_jsonl(path)
    with pytest.raises(ValueError, match="question 0"):
        tokenize_questions(None, [""])


def test_answers_outside_or_unlike_their_context_are_set_aside_or_named(tmp_path, tokenizer):
    """An answer whose start lies outside the context, or where the context holds other text, or answers lists of
    different lengths: set aside by `load_qa_examples` (the training scripts' reader), named by `build_features`
    and `prepare_readtwice_qa_features` with labels (it was trained as unanswerable, or on another span)."""
    import json

    from hf_readonce.tasks.question_answering import answer_problem, load_qa_examples
    from hf_readonce.tasks.readtwice_qa import prepare_readtwice_qa_features

    context = "Emma is a novel by Jane Austen."
    good = {"id": "ok", "question": "Who?", "context": context, "answers": {"text": ["Jane Austen"],
                                                                            "answer_start": [19]}}
    bad = {"far": {"text": ["zzz"], "answer_start": [100000]}, "negative": {"text": ["Emma"], "answer_start": [-5]},
           "elsewhere": {"text": ["Jane Austen"], "answer_start": [10]}, "lists": {"text": ["a"], "answer_start": []},
           "type": {"text": ["Emma"], "answer_start": ["0"]}}
    rows = [good, {"id": "none", "question": "Who?", "context": context, "answers": {"text": [], "answer_start": []}}]
    rows += [{"id": name, "question": "Who?", "context": context, "answers": answers} for name, answers in bad.items()]
    assert answer_problem(good) is None and answer_problem(rows[1]) is None
    assert "outside its context of 31 characters" in answer_problem(rows[2])
    assert "not in the context at 10 ('novel by Ja' is)" in answer_problem(rows[4])
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    examples, skipped = load_qa_examples(path, check_answers=True)  # a training file
    assert [e["id"] for e in examples] == ["ok", "none"] and skipped == list(bad)
    # evaluation scores answer texts only: every row kept but the one whose lists do not pair up
    assert load_qa_examples(path) == ([row for row in rows if row["id"] != "lists"], ["lists"])
    for row in rows[2:]:
        with pytest.raises(ValueError, match=f"example '{row['id']}'"):
            build_features([good, row], tokenizer, with_labels=True)
        with pytest.raises(ValueError, match=f"example '{row['id']}'"):
            prepare_readtwice_qa_features(tokenizer, [good, row], segment_length=64, segment_overlap=16)
    build_features(rows[2:], tokenizer)  # without labels the answers are not read
    scored_only = [row for row in rows[2:] if row["id"] != "lists"]  # lists that do not pair up stay refused
    prepare_readtwice_qa_features(tokenizer, scored_only, segment_length=64, segment_overlap=16, check_answers=False)
    # what datasets, numpy and pandas hand over is a SQuAD row too: tuples, numpy integers and arrays
    np = pytest.importorskip("numpy")
    labelled = build_features([good], tokenizer, with_labels=True)[0][0]
    for answers in ({"text": ("Jane Austen",), "answer_start": (19,)},
                    {"text": ["Jane Austen"], "answer_start": [np.int64(19)]},
                    {"text": np.array(["Jane Austen", "Jane Austen"]), "answer_start": np.array([19, 19])}):
        row = {**good, "answers": answers}
        assert answer_problem(row) is None
        got = build_features([row], tokenizer, with_labels=True)[0][0]
        assert (got["start_positions"], got["end_positions"]) == (labelled["start_positions"],
                                                                   labelled["end_positions"])
        assert any(prepare_readtwice_qa_features(tokenizer, [row], segment_length=64, segment_overlap=16)[0]
                   .start_positions)
    text_only = {**good, "answers": {"text": ["Jane Austen"]}}  # enough to score, not to train
    assert answer_problem(text_only, labels=False) is None and "need 'answer_start'" in answer_problem(text_only)
    prepare_readtwice_qa_features(tokenizer, [text_only], segment_length=64, segment_overlap=16, check_answers=False)
    for make in (lambda: build_features([text_only], tokenizer, with_labels=True),
                 lambda: prepare_readtwice_qa_features(tokenizer, [text_only], segment_length=64, segment_overlap=16)):
        with pytest.raises(ValueError, match="need 'answer_start'"):  # it would be trained as unanswerable
            make()
    # SQuAD v1's list of answer dicts and a 0-d array are no `answers` dict: set aside when reading for evaluation too
    odd = [{**good, "id": "dicts", "answers": [{"text": "Jane Austen", "answer_start": 19}]},
           {**good, "id": "zero-d", "answers": {"text": np.array("Jane Austen"), "answer_start": np.array(19)}}]
    assert all(answer_problem(row, labels=False) for row in odd)
    path.write_text(json.dumps(good) + "\n" + json.dumps(odd[0]) + "\n" + json.dumps(text_only) + "\n")
    assert [e["id"] for e in load_qa_examples(path)[0]] == ["ok", "ok"] and load_qa_examples(path)[1] == ["dicts"]
    assert load_qa_examples(path, check_answers=True)[1] == ["dicts", "ok"]  # the text-only row: no labels


def test_load_qa_examples_sets_aside_empty_rows(tmp_path):
    from hf_readonce.tasks.question_answering import load_qa_examples

    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "question": "Q?", "context": "C."}\n{"id": "b", "question": " ", "context": "C."}\n'
                    '{"question": "Q?"}\n')
    examples, skipped = load_qa_examples(path)
    assert [e["id"] for e in examples] == ["a"] and skipped == ["b", "line 3"]
    assert load_qa_examples(path, limit=1) == (examples, [])
    path.write_text('{"id": "b", "question": "", "context": "C."}\n')
    with pytest.raises(ValueError, match="no row"):
        load_qa_examples(path)


# ------------------------------------------------------------------------------------ no-answer threshold, baselines
def _rows():
    return [
        {"id": "a", "context": "Paris is in France . It is big .", "answers": {"text": ["Paris"], "answer_start": [0]}},
        {"id": "b", "context": "Paris is in France . It is big .", "answers": {"text": [], "answer_start": []}},
        {"id": "c", "context": "The dog barked .", "answers": {"text": ["the dog"], "answer_start": [0]}},
        {"id": "d", "context": "The dog barked .", "answers": {"text": [], "answer_start": []}},
    ]


def test_find_best_null_threshold_maximizes_f1():
    from hf_readonce.tasks.question_answering import find_best_null_threshold

    rows = _rows()
    spans = {"a": "Paris", "b": "France", "c": "cat", "d": "dog"}
    # b and d are unanswerable and have the largest no-answer margins: the best threshold empties exactly those
    diffs = {"a": -5.0, "b": 3.0, "c": -1.0, "d": 1.0}
    threshold, f1 = find_best_null_threshold(spans, diffs, rows)
    assert -1.0 < threshold < 1.0 and f1 == pytest.approx(75.0)
    # with every span right and no unanswerable question, never answering empty is best
    answerable = [rows[0], rows[2]]
    threshold, f1 = find_best_null_threshold({"a": "Paris", "c": "the dog"}, {"a": 2.0, "c": 1.0}, answerable)
    assert threshold >= 2.0 and f1 == pytest.approx(100.0)
    with pytest.raises(ValueError, match="empty"):
        find_best_null_threshold({}, {}, [])
    with pytest.raises(ValueError, match="score_diff"):
        find_best_null_threshold(spans, {"a": 0.0}, rows)


def test_postprocess_threshold_moves_the_no_answer_decision(tokenizer):
    examples = [{"id": "q", "question": "Where?", "context": PASSAGE, "answers": {"text": ["Paris"],
                                                                                  "answer_start": [0]}}]
    features, windows, _ = build_features(examples, tokenizer, max_question_length=16, max_passage_length=200)
    n = len(windows[0][0].input_ids)
    start, end = np.zeros(n), np.zeros(n)
    start[3], end[4] = 2.0, 2.0                       # best span score 4.0
    logits = [(start, end, 5.0)]                      # no-answer score 5.0: score_diff = 1.0
    assert postprocess_qa_predictions(examples, features, windows, logits, allow_no_answer=True) == {"q": ""}
    kept = postprocess_qa_predictions(examples, features, windows, logits, allow_no_answer=True, null_score_diff_threshold=1.5)
    assert kept["q"] != ""
    preds, spans, diffs = postprocess_qa_predictions(examples, features, windows, logits, allow_no_answer=True,
                                      return_score_diffs=True)
    assert preds == {"q": ""} and spans["q"] == kept["q"] and diffs["q"] == pytest.approx(1.0)


def test_scores_split_answerable_and_unanswerable_with_baselines():
    from hf_readonce.tasks.question_answering import format_scores, score_qa, trivial_baselines

    rows = _rows()
    scores = score_qa({"a": "Paris", "b": "", "c": "a dog", "d": "dog"}, rows)
    assert (scores["HasAns_total"], scores["NoAns_total"]) == (2, 2)
    assert scores["HasAns_f1"] == pytest.approx(100.0) and scores["NoAns_exact"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(75.0)
    baselines = trivial_baselines(rows)
    assert baselines["always_empty"]["exact_match"] == pytest.approx(50.0)
    assert baselines["always_empty"]["HasAns_f1"] == 0.0
    assert baselines["first_span"]["HasAns_exact"] == 0.0  # "Paris is in" / "The dog barked"
    assert baselines["first_sentence"]["HasAns_f1"] > 0
    assert "always_empty" not in trivial_baselines([rows[0], rows[2]])  # no unanswerable question
    assert "NoAns" in format_scores("x", scores) and "HasAns" in format_scores("x", scores)


def _as_arrays(rows, array):
    """The rows with their answers held as `array(...)` (a `datasets` row in numpy / torch format)."""
    return [{**row, "answers": {"text": np.array(row["answers"]["text"], dtype=object),
                                "answer_start": array(row["answers"]["answer_start"])}} for row in rows]


@pytest.mark.parametrize("array", [lambda v: np.array(v, dtype=np.int64), tuple], ids=["numpy", "tuple"])
def test_answers_held_in_arrays_score_and_label_as_lists(tokenizer, array):
    """Scores, baselines, the null threshold and the training rows read answers held in arrays or tuples as the same
    answers in lists (an empty array is an unanswerable question, not an error); `answers` of another shape is a
    ValueError naming the row."""
    from hf_readonce.tasks.question_answering import (
        find_best_null_threshold,
        gold_answers,
        score_qa,
        training_rows,
        trivial_baselines,
    )

    rows, held = _rows(), _as_arrays(_rows(), array)
    predictions = {"a": "Paris", "b": "", "c": "dog", "d": "it"}
    assert score_qa(predictions, held) == score_qa(predictions, rows)
    assert trivial_baselines(held) == trivial_baselines(rows)
    assert gold_answers(held[0]) == (["Paris"], [0]) and gold_answers(held[1]) == ([], [])
    diffs = {"a": -1.0, "b": 2.0, "c": -0.5, "d": 0.5}
    best = {"a": "Paris", "b": "Paris", "c": "the dog", "d": "dog"}
    assert find_best_null_threshold(best, diffs, held) == find_best_null_threshold(best, diffs, rows)
    start = PASSAGE.index("Paris")
    example = {"id": "p", "context": PASSAGE, "question": "Which city?",
               "answers": {"text": ["Paris France"], "answer_start": [start]}}
    arrays = {**example, "answers": {"text": np.array(["Paris France"]), "answer_start": array([start])}}
    kwargs = {"max_question_length": 16, "max_passage_length": 40, "doc_stride": 10}
    assert training_rows([arrays], tokenizer, **kwargs) == training_rows([example], tokenizer, **kwargs)
    assert any(row["start_positions"] > 0 for row in training_rows([arrays], tokenizer, **kwargs))
    with pytest.raises(TypeError, match="the prediction of example 'a' is of type int"):
        score_qa({**predictions, "a": 7}, rows)
    with pytest.raises(ValueError, match="example 'x'.*sequence 'text'"):
        score_qa({"x": "Paris"}, [{"id": "x", "context": "Paris", "answers": {"text": "Paris", "answer_start": [0]}}])


def test_load_qa_examples_refuses_a_limit_below_one(tmp_path):
    """`limit` keeps the first rows: 0 used to read every row (`if limit:`) and -5 to drop the last five."""
    import json

    from hf_readonce.tasks.question_answering import load_qa_examples

    rows = [{"id": str(i), "question": "Who?", "context": "Emma is a novel."} for i in range(8)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert [e["id"] for e in load_qa_examples(path, 3)[0]] == ["0", "1", "2"]
    assert len(load_qa_examples(path)[0]) == 8
    for limit in (0, -5):
        with pytest.raises(ValueError, match=f"limit must be a whole number >= 1 .*got {limit}"):
            load_qa_examples(path, limit)


def test_progress_bars_count_windows_and_questions(tokenizer, capsys):
    """`progress=True` shows a bar on stderr: `encode_windows` counts windows, `predict_pairs` / `predict_cached`
    count questions (not their question+window features); the default shows nothing, and the logits are the same."""
    import re

    from hf_readonce.tasks.question_answering import encode_windows, predict_cached, predict_pairs
    from tests.conftest import tiny_model

    model = tiny_model()
    examples = [{"id": str(i), "question": f"What is word{i}?", "context": PASSAGE if i < 3 else "Short text here ."}
                for i in range(4)]
    features, windows, _ = build_features(examples, tokenizer, max_question_length=16, max_passage_length=40,
                                          doc_stride=10)
    n_windows = sum(map(len, windows))
    assert len(features) > len(examples)  # several windows per question: a count of features would differ
    quiet = predict_cached(model, features, encode_windows(model, windows, batch_size=2), batch_size=3)
    pairs = predict_pairs(model, features, windows, batch_size=3)
    assert capsys.readouterr().err == ""
    cache = encode_windows(model, windows, batch_size=2, progress=True)
    shown = predict_cached(model, features, cache, batch_size=3, progress=True)
    assert predict_pairs(model, features, windows, batch_size=3, progress=True)[0][2] == pairs[0][2]
    err = capsys.readouterr().err
    assert re.search(rf"encode: 100%.*{n_windows}/{n_windows} ", err), err
    assert len(re.findall(r"answer: 100%.*4/4 ", err)) == 2, err
    assert all(a[2] == b[2] for a, b in zip(quiet, shown))
