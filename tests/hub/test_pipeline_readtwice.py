"""The ReadTwice `question-answering` pipeline: long documents cut into the config's segments and read at once
(memories shared), answers equal to a by-hand argmax over the model's logits mapped through the offsets and to
hf-readonce's ReadTwice QA path, HF's output format and arguments, clear errors, and a published folder that loads
with `pipeline(..., trust_remote_code=True)` where hf_readonce cannot be imported."""

import json

import pytest
import torch

from hf_readonce import ReadTwiceBertConfig, ReadTwiceBertForQuestionAnswering
from hf_readonce.hub.publish import publish
from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import ReadTwiceQuestionAnsweringPipeline
from hf_readonce.tasks.readtwice_qa import (
    ReadTwiceQACollator,
    capitalized_mentions,
    postprocess_readtwice_qa,
    predict_readtwice_qa,
    prepare_readtwice_qa_features,
)
from tests.conftest import run_without_hf_readonce
from tests.hub.test_pipeline_deformer import CONTEXTS

DOCUMENT = " ".join(CONTEXTS)  # about 110 tokens: several 24-token segments
QUESTIONS = ["Who was handsome, clever and rich?", "When was Persuasion published?", "Who was her father?"]
MAX_QUESTION_LEN = 12


def tiny_readtwice(question_in_first_read=False, memory_type="sts", seed=0):
    torch.manual_seed(seed)
    config = ReadTwiceBertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, num_second_read_layers=1, memory_type=memory_type, span_length=4,
        memory_top_k=None, segment_length=24, segment_overlap=6, question_in_first_read=question_in_first_read,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return ReadTwiceBertForQuestionAnswering(config).eval()


@pytest.fixture(scope="module", params=[False, True], ids=["read-once", "paper"])
def qa(request, tokenizer):
    return ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(request.param), tokenizer=tokenizer,
                                              max_question_len=MAX_QUESTION_LEN)


@torch.no_grad()
def by_hand(model, tokenizer, question, context, max_answer_len):
    """Segments straight from the tokenizer, one model call over all of them, then the best (start, end) pair of
    context tokens over every segment (exhaustive), mapped to characters through the offsets."""
    length, overlap = model.config.segment_length, model.config.segment_overlap
    read_once = not model.config.question_in_first_read
    if read_once:
        enc = tokenizer(context, truncation=True, max_length=length, stride=overlap, return_overflowing_tokens=True,
                        return_offsets_mapping=True, padding=True, return_tensors="pt")
        q = tokenizer(question, truncation=True, max_length=MAX_QUESTION_LEN, return_tensors="pt")
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                    token_type_ids=torch.ones_like(enc["input_ids"]), question_input_ids=q["input_ids"])
        shift, context_id = q["input_ids"].shape[1], 0
    else:
        enc = tokenizer(question, context, truncation="only_second", max_length=length, stride=overlap,
                        return_overflowing_tokens=True, return_offsets_mapping=True, padding=True,
                        return_tensors="pt")
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                    token_type_ids=enc["token_type_ids"])
        shift, context_id = 0, 1
    assert enc["input_ids"].shape[0] > 2  # the document really is segmented
    best, span = -float("inf"), None
    for row in range(enc["input_ids"].shape[0]):
        seg = int(out.segment_index[row])
        sequence_ids = enc.sequence_ids(seg)
        real = [i for i, s in enumerate(sequence_ids) if s == context_id]
        start, end = out.start_logits[row, shift:], out.end_logits[row, shift:]
        for s in real:
            for e in real:
                if s <= e < s + max_answer_len and float(start[s] + end[e]) > best:
                    best = float(start[s] + end[e])
                    span = (int(enc["offset_mapping"][seg][s][0]), int(enc["offset_mapping"][seg][e][1]))
    return span


def test_answers_equal_by_hand_argmax_and_the_package_path(qa, tokenizer):
    model = qa.model
    got = qa(question=QUESTIONS, context=DOCUMENT, max_answer_len=5, n_best_size=1000)
    for question, answer in zip(QUESTIONS, got):
        assert set(answer) == {"score", "start", "end", "answer"} and 0.0 < answer["score"] <= 1.0
        assert (answer["start"], answer["end"]) == by_hand(model, tokenizer, question, DOCUMENT, 5)
        assert answer["answer"] == DOCUMENT[answer["start"]:answer["end"]]
    # the package's ReadTwice QA path (its n-best search, default 20 candidates) gives the same answers
    examples = [{"id": str(i), "question": q, "context": DOCUMENT} for i, q in enumerate(QUESTIONS)]
    features = prepare_readtwice_qa_features(tokenizer, examples, 24, 6, model.config.question_in_first_read,
                                             max_question_length=MAX_QUESTION_LEN)
    logits = predict_readtwice_qa(model, features, ReadTwiceQACollator(with_labels=False))
    expected = postprocess_readtwice_qa(examples, features, logits, max_answer_length=7)
    assert [a["answer"] for a in qa(question=QUESTIONS, context=DOCUMENT, max_answer_len=7)] == \
        [expected[str(i)] for i in range(len(QUESTIONS))]


def test_one_call_over_all_segments_and_one_first_read_per_document(tokenizer, monkeypatch):
    qa = ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(False), tokenizer=tokenizer)
    first_reads, calls = [], []
    encode, forward = qa.model.encode_documents, qa.model.forward
    monkeypatch.setattr(qa.model, "encode_documents",
                        lambda input_ids, **kw: first_reads.append(input_ids.shape[0]) or encode(input_ids, **kw))
    monkeypatch.setattr(qa.model, "forward", lambda **kw: calls.append(kw) or forward(**kw))
    segments = len(qa.preprocess({"context": DOCUMENT, "questions": ["q"]})["documents"][0]["input_ids"])
    out = qa(question=QUESTIONS, context=DOCUMENT)
    assert len(out) == 3 and first_reads == [segments] and len(calls) == 1  # all segments, all questions, once
    assert calls[0]["document_states"].memory_values.shape[0] > 0
    assert len(set(calls[0]["document_states"].document_ids.tolist())) == 1  # one document: memories shared
    # single question, dict forms, one context per question
    def same(a, b):  # questions padded to another width in a batch: the scores move in the last digits only
        return {**a, "score": pytest.approx(b["score"], rel=1e-5)} == b

    single = qa(question=QUESTIONS[1], context=DOCUMENT)
    assert same(single, out[1]) and qa({"question": QUESTIONS[1], "context": DOCUMENT}) == single
    assert same(qa(question=QUESTIONS[:2], context=[DOCUMENT, CONTEXTS[1]])[0], out[0])


def test_top_k_and_impossible_answer(qa):
    out = qa(question=QUESTIONS[0], context=DOCUMENT, top_k=4, max_answer_len=4)
    assert len(out) == 4 and len({(a["start"], a["end"]) for a in out}) == 4
    scores = [a["score"] for a in out]
    assert scores == sorted(scores, reverse=True)
    assert out[0] == qa(question=QUESTIONS[0], context=DOCUMENT, max_answer_len=4)
    assert all(len(qa.tokenizer(a["answer"], add_special_tokens=False)["input_ids"]) <= 4 for a in out)
    # with the empty answer allowed and every candidate asked for: exactly one empty answer, ranked by its score
    # among the same spans in the same order
    with_null = qa(question=QUESTIONS[0], context=DOCUMENT, top_k=1000, max_answer_len=4,
                   handle_impossible_answer=True)
    assert [a["answer"] for a in with_null].count("") == 1
    assert [a["score"] for a in with_null] == sorted((a["score"] for a in with_null), reverse=True)
    spans = [(a["start"], a["end"]) for a in with_null if a["answer"]]
    assert spans[: len(out)] == [(a["start"], a["end"]) for a in out]


def test_bad_input_raises_naming_the_argument(qa, tokenizer):
    with pytest.raises(ValueError, match="`question` 0 is empty"):
        qa(question="  ", context=DOCUMENT)
    with pytest.raises(ValueError, match="`context` 0 is empty"):
        qa(question="Who?", context="")
    with pytest.raises(ValueError, match="`question` 1 is empty"):
        qa(question=["Who?", ""], context=DOCUMENT)
    with pytest.raises(TypeError, match="`context` 0 must be a str"):
        qa(question=["Who?"], context=[3])
    with pytest.raises(ValueError, match="both `question` and `context`"):
        qa(context=DOCUMENT)
    with pytest.raises(ValueError, match="`top_k` must be >= 1"):
        qa(question="Who?", context=DOCUMENT, top_k=0)
    with pytest.raises(TypeError, match="`handle_impossible_answer` must be a bool"):
        qa(question="Who?", context=DOCUMENT, handle_impossible_answer=1)
    with pytest.raises(TypeError, match="unexpected argument"):
        qa(question="Who?", context=DOCUMENT, doc_stride=3)
    entity = ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(False, "entity"), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="pass `mention_fn`"):
        entity(question="Who?", context=DOCUMENT)
    assert entity(question="Who?", context=DOCUMENT, mention_fn=capitalized_mentions)["answer"]
    from hf_readonce.models.deformer_bert.modeling_deformer_bert import DeformerBertForQuestionAnswering
    from tests.conftest import tiny_model

    assert isinstance(tiny_model(), DeformerBertForQuestionAnswering)
    with pytest.raises(TypeError, match="needs a ReadTwice model"):
        ReadTwiceQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer)


def test_published_folder_loads_without_hf_readonce(tokenizer, tmp_path):
    model = tiny_readtwice(False)
    model.config.max_question_length = MAX_QUESTION_LEN
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    result = publish(tmp_path / "ckpt", "someone/tiny-readtwice", local_dir=tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["custom_pipelines"] == {"question-answering": {
        "impl": "pipeline_readtwice_bert.ReadTwiceQuestionAnsweringPipeline", "pt": ["AutoModelForQuestionAnswering"],
        "type": "text"}}
    assert "pipeline_readtwice_bert.py" in result.files
    expected = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)(
        question=QUESTIONS, context=DOCUMENT, top_k=2)
    run = run_without_hf_readonce(f"""
        import json
        try:
            import hf_readonce
            raise SystemExit("hf_readonce was importable")
        except ImportError:
            pass
        from transformers import pipeline
        qa = pipeline("question-answering", model={str(tmp_path / 'out')!r}, trust_remote_code=True)
        assert type(qa).__name__ == "ReadTwiceQuestionAnsweringPipeline", type(qa)
        assert "hf_readonce" not in type(qa).__module__ and "hf_readonce" not in type(qa.model).__module__
        print("ANSWERS", json.dumps(qa(question={QUESTIONS!r}, context={DOCUMENT!r}, top_k=2)))
        try:
            qa(question="", context="x")
        except ValueError as error:
            print("ERROR", error)
    """, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("ANSWERS "))
    got = json.loads(line[len("ANSWERS "):])
    assert [[(a["answer"], a["start"], a["end"]) for a in answers] for answers in got] == \
        [[(a["answer"], a["start"], a["end"]) for a in answers] for answers in expected]
    assert [a["score"] for answers in got for a in answers] == pytest.approx(
        [a["score"] for answers in expected for a in answers], rel=1e-4)
    assert "ERROR `question` 0 is empty." in run.stdout


def test_entity_checkpoint_recording_its_mention_finder_needs_no_mention_fn(tokenizer, tmp_path):
    """An entity-memory checkpoint that records its mention finder (`config.mentions`, as `run_readtwice_qa.py
    --entity_source capitalized` does; `encode`, `answer` and `publish` read it) answers the card's call, which passes
    no `mention_fn`, with that finder: in process and from the published folder where hf_readonce cannot be imported
    (it raised "pass `mention_fn`" there, and the pipeline file is all such a user has)."""
    model = tiny_readtwice(False, "entity")
    model.config.mentions = "capitalized_mentions"
    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(question=QUESTIONS, context=DOCUMENT, top_k=2, mention_fn=capitalized_mentions)
    assert pipe(question=QUESTIONS, context=DOCUMENT, top_k=2) == expected
    model.config.mentions = "spacy"  # a finder no file carries: still required, and the message says why
    with pytest.raises(ValueError, match=r"records no mention finder of \['capitalized_mentions'\] .*'spacy'"):
        pipe(question="Who?", context=DOCUMENT)
    model.config.mentions = ["capitalized_mentions"]  # hand-edited into no name: the same message, not a bare
    with pytest.raises(ValueError, match=r"records no mention finder"):  # TypeError 'unhashable type: list'
        pipe(question="Who?", context=DOCUMENT)
    model.config.mentions = "capitalized_mentions"
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    publish(tmp_path / "ckpt", "someone/tiny-readtwice-e", local_dir=tmp_path / "out")
    run = run_without_hf_readonce(f"""
        import json
        from transformers import pipeline
        qa = pipeline("question-answering", model={str(tmp_path / 'out')!r}, trust_remote_code=True)
        print("ANSWERS", json.dumps(qa(question={QUESTIONS!r}, context={DOCUMENT!r}, top_k=2)))
    """, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("ANSWERS "))[8:])
    assert [[(a["answer"], a["start"], a["end"]) for a in answers] for answers in got] == \
        [[(a["answer"], a["start"], a["end"]) for a in answers] for answers in expected]
