"""`answer_from_store` as a Python user calls it: the checkpoint's recorded no-answer decision by default (as the
CLI), and bad arguments named before any work. A tiny random DeFormer with the real MiniLM tokenizer; real Disfl-QA
rows."""

import pytest

from hf_readonce.representations import DeformerBertAdapter, fill_store
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.question_answering_store import answer_from_store
from tests.conftest import tiny_model


@pytest.fixture()
def stored(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 32, 8
    rows = [{k: r[k] for k in ("id", "question", "context")} for r in qa_rows[:6]]
    store = RepresentationStore(tmp_path / "store")
    fill_store(DeformerBertAdapter(model, tokenizer), store, [r["context"] for r in rows])
    return model, store, rows


def test_the_recorded_no_answer_decision_is_the_default(stored, tokenizer):
    model, store, rows = stored
    spans = answer_from_store(model, tokenizer, store, rows)
    assert any(spans.values())  # nothing recorded: spans, as before
    model.config.allow_no_answer, model.config.null_score_diff_threshold = True, -1e6  # always "no answer"
    assert set(answer_from_store(model, tokenizer, store, rows).values()) == {""}
    assert answer_from_store(model, tokenizer, store, rows, allow_no_answer=False) == spans  # an argument wins


def test_bad_arguments_are_named(stored, tokenizer):
    model, store, rows = stored
    with pytest.raises(TypeError, match="`store` must be a RepresentationStore, got str"):
        answer_from_store(model, tokenizer, str(store.path), rows)
    with pytest.raises(TypeError, match="`model` must be a transformers model, got .*Tokenizer"):
        answer_from_store(tokenizer, model, store, rows)
    with pytest.raises(TypeError, match="'question' is of type list, not a string"):
        answer_from_store(model, tokenizer, store, [{**rows[0], "question": ["Who?"]}])
    with pytest.raises(ValueError, match="`store_dtype` must be one of"):
        answer_from_store(model, tokenizer, store, rows, store_dtype="int8")
    # `dtype` is the compute dtype: the storage dtype of `encode_missing` is `store_dtype`, and `dtype=` is refused
    with pytest.raises(TypeError, match=r"^answer_from_store\(\) takes the storage dtype as `store_dtype`, not "
                                        r"`dtype` \(got dtype='float32'\)"):
        answer_from_store(model, tokenizer, store, rows, encode_missing=True, dtype="float32")


def test_counts_the_questions_cut_to_max_question_length(stored, tokenizer):
    """A question longer than `max_question_length` is cut to it (its answer reads its first tokens only): `counts`
    says how many were, as `hf-readonce answer` notes; only the questions that reached the limit are tokenized again
    to tell."""
    model, store, rows = stored
    lengths = [len(tokenizer(r["question"]).input_ids) for r in rows]
    limit = sorted(lengths)[len(lengths) // 2]
    cut = sum(length > limit for length in lengths)
    assert 0 < cut < len(rows)
    counts = {}
    spans = answer_from_store(model, tokenizer, store, rows, max_question_length=limit, counts=counts)
    assert counts == {"questions": len(rows), "questions_cut": cut}
    assert answer_from_store(model, tokenizer, store, rows, max_question_length=limit) == spans  # counting only
    counts.clear()
    answer_from_store(model, tokenizer, store, rows, max_question_length=max(lengths), counts=counts)
    assert counts == {"questions": len(rows), "questions_cut": 0}


def test_a_window_encode_missing_takes_that_does_not_fit_names_where_it_came_from(tmp_path, tokenizer):
    """With nothing of the model stored, `encode_missing` windows the passages as `hf-readonce encode` would: a window
    it takes (the checkpoint's recorded one, else the defaults 256 / 64) that the model cannot read is refused before
    any work, saying where the value came from and the checkpoint's limit; the adapter's own error named the value as
    if the caller had passed it (`max_passage_length` ... got 256)."""
    rows = [{"id": "a", "question": "Who wrote Emma?", "context": "Emma is a novel by Jane Austen."}]
    store = RepresentationStore(tmp_path / "store")
    model = tiny_model()  # 128 positions, no window recorded
    with pytest.raises(ValueError, match=r"with windows of 256 tokens, the default \(the checkpoint records no "
                                         r"`max_passage_length`\), which do not fit this checkpoint's 128 passage "
                                         r"positions .*: pass `max_passage_length` \(--max-passage-length\) of at most "
                                         r"128\.$"):
        answer_from_store(model, tokenizer, store, rows, encode_missing=True)
    model.config.max_passage_length = 200  # recorded by hand beyond the positions
    with pytest.raises(ValueError, match=r"with windows of 200 tokens, the value the checkpoint records "
                                         r"\(`max_passage_length`\), which do not fit"):
        answer_from_store(model, tokenizer, store, rows, encode_missing=True)
    with pytest.raises(ValueError, match=r"with a stride of 64 tokens, the default \(the checkpoint records no "
                                         r"`doc_stride`\), which does not fit windows of 32 tokens .*of at most 30\."):
        answer_from_store(model, tokenizer, store, rows, encode_missing=True, max_passage_length=32)
    with pytest.raises(ValueError, match=r"^`max_passage_length` must be in \[2, 128\].*got 300\.$"):
        answer_from_store(model, tokenizer, store, rows, encode_missing=True, max_passage_length=300)  # given: named
    assert len(store) == 0
    assert answer_from_store(model, tokenizer, store, rows, encode_missing=True, max_passage_length=128).keys() == {"a"}


def test_a_given_window_the_model_cannot_read_is_named_before_the_stride_it_would_take(tmp_path, tokenizer):
    """A `max_passage_length` the caller gives that no window can have (below 2 tokens) is named as given, as the
    adapter names it, rather than refused for the default stride with a stride "of at most -1" to pass."""
    rows = [{"id": "a", "question": "Who wrote Emma?", "context": "Emma is a novel by Jane Austen."}]
    store = RepresentationStore(tmp_path / "store")
    for length in (1, 0):
        with pytest.raises(ValueError, match=rf"^`max_passage_length` must be in \[2, 128\].*got {length}\.$"):
            answer_from_store(tiny_model(), tokenizer, store, rows, encode_missing=True, max_passage_length=length)
    with pytest.raises(ValueError, match=r"with a stride of 64 tokens, .*of at most 0\.$"):  # the smallest window
        answer_from_store(tiny_model(), tokenizer, store, rows, encode_missing=True, max_passage_length=2)
    assert len(store) == 0


WORDS = "the quick brown fox jumps over a lazy dog near river".split()
ANIMALS = ["fox", "dog", "cat", "cow", "pig", "owl", "bee", "ant"]


def _alternating_rows(tokenizer):
    """8 rows, each with its own passage, long (18 words) and short (4 words) in turn; questions of one length."""
    rows = []
    for i, animal in enumerate(ANIMALS):
        words = WORDS[i % len(WORDS):] + WORDS[: i % len(WORDS)]
        context = " ".join((words * 2)[:18] if i % 2 == 0 else words[:3] + [animal])
        rows.append({"id": f"q{i}", "question": f"what did the {animal} do?", "context": context})
    assert len({len(tokenizer(r["question"]).input_ids) for r in rows}) == 1
    return rows


def _padding_per_call(model, monkeypatch):
    """Per model call: `(padded question tokens, padded passage rows)`, read from the masks the call gets."""
    calls = []
    forward = model.forward

    def counting(*args, **kwargs):
        questions, passages = kwargs["attention_mask"], kwargs["passage_states"].attention_mask
        calls.append((int((questions == 0).sum()), int((passages == 0).sum())))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    return calls


def test_features_of_similar_length_share_a_batch_and_answers_keep_the_input_order(tokenizer, tmp_path,
                                                                                   monkeypatch):
    """Passages long and short in turn, two features per batch: in input order every batch pads a short passage's
    states to a long one's; grouped by length (the default), no batch pads anything, and the answers are those of
    the input order, keyed in example order."""
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 32, 8
    rows = _alternating_rows(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    fill_store(DeformerBertAdapter(model, tokenizer), store, [r["context"] for r in rows], store_dtype="float32")
    calls = _padding_per_call(model, monkeypatch)
    in_order = answer_from_store(model, tokenizer, store, rows, batch_size=2, group_by_length=False)
    assert all(passages > 0 for _, passages in calls)  # a long and a short passage in each batch
    calls.clear()
    grouped = answer_from_store(model, tokenizer, store, rows, batch_size=2)
    assert len(calls) == len(rows) // 2 and calls == [(0, 0)] * len(calls)
    assert list(grouped) == [r["id"] for r in rows] and grouped == in_order and any(grouped.values())
    with pytest.raises(TypeError, match="`group_by_length` must be a bool, got str 'no'"):
        answer_from_store(model, tokenizer, store, rows, group_by_length="no")
