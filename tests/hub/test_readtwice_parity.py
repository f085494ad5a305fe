"""The ReadTwice pipeline file travels to the Hub, so it keeps its own copies of logic that also lives elsewhere in
the package: input normalization (`_normalize`, a checked copy of the DeFormer pipeline's) and segmenting with offsets
(`hf_readonce.tasks.readtwice_qa.prepare_readtwice_qa_features`). The entity spans and the span search have one
implementation, in the pipeline file, which the tasks import (`entity_spans_for_segment`,
`segment_span_candidates`). These tests assert that the two paths give identical results on real Disfl-QA and Quoref
rows, so that neither can drift alone."""

import json

import pytest
import torch

from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
from hf_readonce.models.readtwice_bert import pipeline_readtwice_bert
from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import ReadTwiceQuestionAnsweringPipeline
from hf_readonce.tasks.readtwice_qa import (
    ReadTwiceQACollator,
    capitalized_mentions,
    entity_spans_for_segment,
    postprocess_readtwice_qa,
    predict_readtwice_qa,
    prepare_readtwice_qa_features,
    truncate_question,
)
from tests.conftest import DATA_DIR
from tests.hub.test_pipeline_readtwice import tiny_readtwice

MAX_QUESTION_LEN = 12


@pytest.fixture(scope="module")
def rows():
    """The first 24 rows of Disfl-QA and of Quoref validation with a non-empty question and context."""
    out = {}
    for name in ("disfl_qa", "quoref"):
        path = DATA_DIR / name / "validation.jsonl"
        if not path.is_file():
            pytest.skip(f"real data not found under {DATA_DIR}")
        with path.open() as f:
            out[name] = [row for row in (json.loads(next(f)) for _ in range(24))
                         if row["question"].strip() and row["context"].strip()]
    return out


def _by_context(rows):
    groups = {}
    for row in rows:
        groups.setdefault(row["context"], []).append(row)
    return groups


def _outcome(function, *args):
    try:
        return ("ok", function(*args))
    except (TypeError, ValueError) as error:
        return (type(error).__name__, str(error))


@pytest.mark.parametrize("dataset", ["disfl_qa", "quoref"])
def test_normalize_copies_agree(rows, dataset):
    readtwice, deformer = ReadTwiceQuestionAnsweringPipeline._normalize, DeformerQuestionAnsweringPipeline._normalize
    data = rows[dataset]
    questions, contexts = [r["question"] for r in data], [r["context"] for r in data]
    calls = [(None, questions[0], contexts[0]), (None, questions, contexts[0]), (None, questions, contexts),
             ({"question": questions[1], "context": contexts[1]}, None, None),
             ([{"question": q, "context": c} for q, c in zip(questions, contexts)], None, None),
             # bad input: the same exception, word for word
             (None, questions, contexts[:-1]), (None, questions + [" "], contexts[0]), (None, [3], contexts[0]),
             (None, questions[0], None), ({"question": questions[0]}, None, None), ("text", None, None),
             ({"question": questions[0], "context": contexts[0]}, questions[0], None), (None, [], contexts[0]),
             (None, questions[0], 7)]
    for call in calls:
        ours, theirs = _outcome(readtwice, *call), _outcome(deformer, *call)
        assert ours == theirs, call
    assert _outcome(readtwice, None, questions, contexts) == ("ok", list(zip(questions, contexts)))


@pytest.mark.parametrize("layout", ["read-once", "paper"])
@pytest.mark.parametrize("dataset", ["disfl_qa", "quoref"])
def test_segments_offsets_and_entity_spans_agree(rows, tokenizer, dataset, layout):
    """`preprocess` of the pipeline and `prepare_readtwice_qa_features` cut every real context into the same
    segments (ids, token types, character offsets), with the same entity spans and question ids."""
    paper = layout == "paper"
    model = tiny_readtwice(paper, memory_type="entity")
    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    config = model.config
    segments = 0
    for context, group in _by_context(rows[dataset]).items():
        got = pipe.preprocess({"context": context, "questions": [r["question"] for r in group]},
                              max_question_len=MAX_QUESTION_LEN, mention_fn=capitalized_mentions)
        features = prepare_readtwice_qa_features(
            tokenizer, group, config.segment_length, config.segment_overlap, paper,
            max_question_length=MAX_QUESTION_LEN, mention_fn=capitalized_mentions)
        assert got["read_once"] is not paper and len(got["documents"]) == (len(group) if paper else 1)
        for i, feature in enumerate(features):
            document = got["documents"][i if paper else 0]
            assert document["input_ids"] == feature.input_ids
            assert document["token_type_ids"] == feature.token_type_ids
            assert document["offsets"] == feature.offsets
            assert document["entity_spans"] == feature.entity_spans
            if not paper:
                assert document["question_ids"][i] == feature.question_ids
            segments += feature.num_segments
    assert segments > 2 * len(rows[dataset])  # real contexts: several segments each, boundaries crossed


@pytest.mark.parametrize("dataset", ["disfl_qa", "quoref"])
def test_truncated_questions_keep_their_ids_and_case(rows, tokenizer, dataset):
    """A question cut at its last kept token's end (both copies do this) tokenizes to the kept ids and keeps its
    capitals, so the capitalization heuristic still finds its mentions (the pipeline used to run it on the
    lowercased `decode` of the ids and lost them: the parity test below found it)."""
    cut_any = False
    for row in rows[dataset]:
        question = row["question"].strip()
        ids, cut = truncate_question(tokenizer, question, MAX_QUESTION_LEN)
        assert ids == tokenizer(question, add_special_tokens=False)["input_ids"][:MAX_QUESTION_LEN]
        assert tokenizer(cut, add_special_tokens=False)["input_ids"] == ids and question.startswith(cut)
        cut_any |= cut != question
    assert cut_any


@pytest.mark.parametrize("dataset", ["disfl_qa", "quoref"])
def test_entity_spans_have_one_implementation(rows, tokenizer, dataset):
    from hf_readonce.tasks import readtwice_qa

    assert readtwice_qa.entity_spans_for_segment is pipeline_readtwice_bert.entity_spans_for_segment
    assert readtwice_qa.segment_span_candidates is pipeline_readtwice_bert.segment_span_candidates
    for row in rows[dataset][:8]:
        context = row["context"]
        mentions = capitalized_mentions(context)
        encoded = tokenizer(context, truncation=True, max_length=24, stride=6, return_overflowing_tokens=True,
                            return_offsets_mapping=True)
        for seg in range(len(encoded["input_ids"])):
            offsets = [tuple(o) if s == 0 else None
                       for o, s in zip(encoded["offset_mapping"][seg], encoded.sequence_ids(seg))]
            for start, end in entity_spans_for_segment(offsets, mentions):  # inclusive spans of context tokens
                assert 0 <= start <= end < len(offsets) and offsets[start] is not None and offsets[end] is not None
        assert mentions


@pytest.mark.parametrize("paper", [False, True], ids=["read-once", "paper"])
def test_span_search_copies_agree(rows, tokenizer, paper):
    """On real Quoref rows (long contexts, many segments), the pipeline's best answer is the package path's: one
    question per call on both sides, so the logits are computed on the same unpadded inputs."""
    model = tiny_readtwice(paper)
    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, max_question_len=MAX_QUESTION_LEN)
    examples = rows["quoref"][:4]
    features = prepare_readtwice_qa_features(tokenizer, examples, 24, 6, paper, max_question_length=MAX_QUESTION_LEN)
    with torch.no_grad():
        logits = predict_readtwice_qa(model, features, ReadTwiceQACollator(with_labels=False), batch_size=1)
    expected = postprocess_readtwice_qa(examples, features, logits, max_answer_length=10)
    got = [pipe(question=row["question"], context=row["context"], max_answer_len=10)["answer"] for row in examples]
    assert got == [expected[row["id"]] for row in examples]
    assert all(got) and min(f.num_segments for f in features) > 5
