"""ReadTwice question-answering pipeline (models/readtwice_bert/pipeline_readtwice_bert.py): what it says about the
questions it cuts, in both layouts. The answers themselves, loading and remote code are tested in
tests/hub/test_pipeline_readtwice.py."""

import logging

import pytest
import torch

from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import (
    ReadTwiceQuestionAnsweringPipeline,
    segment_span_candidates,
)
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.question_answering import recorded_answer_settings
from hf_readonce.tasks.readtwice_qa_store import answer_from_readtwice_store
from tests.hub.test_pipeline_deformer import CONTEXTS
from tests.hub.test_pipeline_readtwice import DOCUMENT, tiny_readtwice
from tests.models.deformer_bert.test_pipeline_deformer_bert import AtenOps, tied_logits

QUESTION = "Who was handsome, clever and rich?"
LONG_QUESTION = "Who wrote the novel about youthful hubris that was published in December 1815 in London?"
LOGGER = "hf_readonce.models.readtwice_bert.pipeline_readtwice_bert"


def ask(pipe, caplog, questions, context, **kwargs):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        answers = pipe(question=questions, context=context, **kwargs)
    return answers, [record.getMessage() for record in caplog.records
                     if record.name == LOGGER and "question(s) held more than" in record.getMessage()]


@pytest.mark.parametrize("question_in_first_read", [False, True], ids=["read-once", "paper"])
def test_questions_cut_to_max_question_len_are_said_once_per_call(tokenizer, caplog, question_in_first_read):
    """A question longer than `max_question_len` was cut in silence: one warning per call counts the questions cut
    and names the limit and the argument that reads more, however many documents and model batches the call runs; a
    question of exactly `max_question_len` ids (read once: `[CLS]`/`[SEP]` included; paper layout: its tokens only)
    is read whole and says nothing."""
    pipe = ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(question_in_first_read), tokenizer=tokenizer)
    length = len(tokenizer(QUESTION, add_special_tokens=not question_in_first_read).input_ids)
    assert length > len(tokenizer("Who?", add_special_tokens=not question_in_first_read).input_ids)

    _, warnings = ask(pipe, caplog, QUESTION, DOCUMENT, max_question_len=length)  # exactly at the limit
    assert warnings == []
    room = 64 if not question_in_first_read else 24 - 6 - 4  # positions; a segment's room beside 6 overlap tokens
    _, warnings = ask(pipe, caplog, QUESTION, DOCUMENT, max_question_len=length - 1)
    assert warnings == [
        f"1 of 1 question(s) held more than the {length - 1} tokens read per question and were cut to them: their "
        f"answers come from those tokens only (`max_question_len` reads more, up to {room})."]

    # a batched call: two documents (two preprocess steps), several model batches, one warning counting all of them
    questions = [QUESTION, "Who?", QUESTION, QUESTION, "Who?"]
    contexts = [DOCUMENT, DOCUMENT, CONTEXTS[1], DOCUMENT, CONTEXTS[1]]
    answers, warnings = ask(pipe, caplog, questions, contexts, max_question_len=length - 1, batch_size=1)
    assert len(answers) == 5 and [w.split(":")[0] for w in warnings] == [
        f"3 of 5 question(s) held more than the {length - 1} tokens read per question and were cut to them"]
    assert ask(pipe, caplog, questions, contexts, max_question_len=length)[1] == []

    # cut where the model reads no more (its 64 positions; the paper layout's room in a segment)
    longest = LONG_QUESTION if question_in_first_read else "Who wrote " + "the very " * 40 + "novel?"
    _, warnings = ask(pipe, caplog, longest, DOCUMENT, max_question_len=room)
    assert [w.split(": ", 1)[1] for w in warnings] == [
        "their answers come from those tokens only (the model reads no more of a question)."]


def test_the_default_limit_and_the_count_are_those_of_hf_readonce_answer(tokenizer, tmp_path, caplog):
    """Without `max_question_len`, the read-once pipeline reads the checkpoint's recorded `max_question_length`
    (else 64), the length `hf-readonce answer` reads (`recorded_answer_settings`, `answer_from_readtwice_store`): both
    count the same questions cut to the same limit."""
    model = tiny_readtwice()
    model.config.max_question_length = len(tokenizer(QUESTION).input_ids) - 1
    rows = [{"id": str(i), "question": q, "context": c} for i, (q, c) in
            enumerate([(QUESTION, DOCUMENT), ("Who?", DOCUMENT), (f" {QUESTION} Or who? ", CONTEXTS[1])])]
    limit = recorded_answer_settings(model.config)["max_question_length"]  # what `hf-readonce answer` reads
    assert limit == model.config.max_question_length
    counts = {}
    answer_from_readtwice_store(model, tokenizer, RepresentationStore(tmp_path / "store"), rows, encode_missing=True,
                                counts=counts)
    assert counts == {"questions": 3, "questions_cut": 2}

    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    _, warnings = ask(pipe, caplog, [r["question"] for r in rows], [r["context"] for r in rows])
    assert [w.split(":")[0] for w in warnings] == [
        f"{counts['questions_cut']} of {counts['questions']} question(s) held more than the {limit} tokens read per "
        "question and were cut to them"]
    model.config.max_question_length = None  # nothing recorded: 64, read whole by both
    assert recorded_answer_settings(model.config)["max_question_length"] == 64
    counts.clear()
    answer_from_readtwice_store(model, tokenizer, RepresentationStore(tmp_path / "store"), rows, encode_missing=True,
                                counts=counts)
    assert counts["questions_cut"] == 0 and ask(pipe, caplog, QUESTION, DOCUMENT)[1] == []
    # and both cut a longer question at 64: the pipeline's own default (the remote code cannot import
    # `recorded_answer_settings`) is the same number
    from hf_readonce.models.readtwice_bert import pipeline_readtwice_bert

    assert pipeline_readtwice_bert._DEFAULT_MAX_QUESTION_LEN == 64
    longest = "Who wrote " + "the very " * 40 + "novel?"
    assert len(tokenizer(longest).input_ids) > 64
    counts.clear()
    answer_from_readtwice_store(model, tokenizer, RepresentationStore(tmp_path / "store"),
                                [{"id": "0", "question": longest, "context": DOCUMENT}], counts=counts)
    assert counts == {"questions": 1, "questions_cut": 1}
    assert [w.split(":")[0] for w in ask(pipe, caplog, longest, DOCUMENT)[1]] == [
        "1 of 1 question(s) held more than the 64 tokens read per question and were cut to them"]


@pytest.mark.parametrize("question_in_first_read", [False, True], ids=["read-once", "paper"])
def test_a_call_runs_the_model_without_autograd(tokenizer, question_in_first_read):
    """`__call__` runs preprocess, forward and postprocess itself (to count the questions cut over a call): the model
    work still goes through `Pipeline.forward`, so it runs without autograd, over one document or several."""
    pipe = ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(question_in_first_read), tokenizer=tokenizer)
    grad_enabled = []
    hook = pipe.model.register_forward_hook(lambda *_: grad_enabled.append(torch.is_grad_enabled()))
    try:
        pipe(question=[QUESTION, "Who?"], context=[DOCUMENT, CONTEXTS[1]], max_question_len=10)
    finally:
        hook.remove()
    assert grad_enabled and not any(grad_enabled)


@pytest.mark.parametrize("switch, field", [("output_attentions", "attentions"), ("output_hidden_states", "hidden_states")])
def test_the_first_read_computes_no_per_layer_outputs_the_config_asks_for(tokenizer, switch, field):
    """The read-once pipeline keeps the first read's states and memories only: a model whose config asks for
    attention weights (eager) or per-layer hidden states does not make `encode_documents` compute and hold BERT₁'s,
    and answers the same."""
    model = tiny_readtwice()
    model.set_attn_implementation("eager")
    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(question=[QUESTION, "Who?"], context=DOCUMENT)
    setattr(model.config, switch, True)
    seen, encode = [], model.encode_documents
    model.encode_documents = lambda *args, **kwargs: seen.append(encode(*args, **kwargs)) or seen[-1]
    got = pipe(question=[QUESTION, "Who?"], context=DOCUMENT)
    assert seen and all(getattr(out, field) is None for out in seen)
    assert got == expected


@pytest.mark.parametrize("question_in_first_read", [False, True], ids=["read-once", "paper"])
def test_answering_computes_no_per_layer_outputs_the_config_asks_for(tokenizer, question_in_first_read):
    """The pipeline reads the start and end logits only, but ran the model without the output switches, so a
    config saved with `output_attentions=True` / `output_hidden_states=True` made every read compute and hold the
    layers' weights, states and memory attentions, then dropped them. The model gets both False; the answers are the
    same."""
    model = tiny_readtwice(question_in_first_read)
    model.set_attn_implementation("eager")
    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(question=[QUESTION, "Who?"], context=[DOCUMENT, CONTEXTS[1]], max_question_len=10)
    model.config.output_attentions = model.config.output_hidden_states = True
    calls = []
    hook = model.register_forward_hook(lambda module, args, kwargs, out: calls.append(
        ({name: kwargs.get(name) for name in ("output_attentions", "output_hidden_states")},
         out.attentions, out.hidden_states, out.memory_attentions)), with_kwargs=True)
    try:
        got = pipe(question=[QUESTION, "Who?"], context=[DOCUMENT, CONTEXTS[1]], max_question_len=10)
    finally:
        hook.remove()
    assert calls and all(switches == {"output_attentions": False, "output_hidden_states": False}
                         and outputs == [None, None, None] for switches, *outputs in calls)
    assert got == expected


def spelled_out_segment_search(start_logits, end_logits, offsets, n_best_size, max_answer_len):
    """The segment span search written out: among the context tokens (non-`None` offsets), the `n_best_size` best
    starts and ends (ties in position order), every valid pair scored with its two logits read one at a time."""
    real = [i for i, o in enumerate(offsets) if o is not None]
    k = min(n_best_size, len(real))
    starts = sorted(real, key=lambda i: -float(start_logits[i]))[:k]
    ends = sorted(real, key=lambda i: -float(end_logits[i]))[:k]
    return [(float(start_logits[s]) + float(end_logits[e]), offsets[s][0], offsets[e][1]) for s in starts
            for e in ends if s <= e < s + max_answer_len]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_segment_span_candidates_are_the_spelled_out_search(dtype):
    """Candidates, scores (exactly) and their order are those of the search written out, ties included, in every
    logit dtype; positions that are not context tokens (`None` offsets: question, `[CLS]`, `[SEP]`) are never
    candidates, and a segment without context tokens has none."""
    length = 40
    offsets = [None] * 5 + [(3 * i, 3 * i + 2) for i in range(length - 6)] + [None]
    for seed in range(4):
        start, end = (logits.to(dtype) for logits in tied_logits(length, seed))
        for n_best_size, max_answer_len in ((20, 30), (5, 3), (60, 1)):
            got = segment_span_candidates(start, end, offsets, n_best_size, max_answer_len)
            assert got == spelled_out_segment_search(start, end, offsets, n_best_size, max_answer_len)
            assert got and all(type(score) is float for score, _, _ in got)
    assert segment_span_candidates(start, end, [None] * length, 20, 30) == []


def test_segment_span_candidates_read_each_logit_tensor_once():
    """The search reads the logits back to Python once per segment, not once per scored pair: the tensor ops it
    runs do not grow with `n_best_size` (400 pairs at 20), and none reads a single value."""
    start, end = tied_logits(64, seed=0)
    offsets = [(i, i + 1) for i in range(64)]
    counted = []
    for n_best_size in (2, 20):
        with AtenOps() as ops:
            candidates = segment_span_candidates(start, end, offsets, n_best_size, 64)
        counted.append(ops.ops)
    assert len(candidates) > 100
    assert counted[0] == counted[1]
    assert counted[1]["aten._local_scalar_dense.default"] == 0
