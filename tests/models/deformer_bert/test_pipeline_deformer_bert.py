"""DeFormer question-answering pipeline (models/deformer_bert/pipeline_deformer_bert.py): what it says about the
questions it cuts. The answers themselves, the store, loading and remote code are tested in
tests/hub/test_pipeline_deformer.py and tests/hub/test_pipeline_store.py."""

import logging
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_readonce.models.deformer_bert.pipeline_deformer_bert import (
    DeformerQuestionAnsweringPipeline,
    window_span_candidates,
)
from hf_readonce.representations import DeformerBertAdapter, fill_store
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.question_answering import recorded_answer_settings
from hf_readonce.tasks.question_answering_store import answer_from_store
from tests.conftest import tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS, WINDOWS
from tests.representations.test_tokenizer_lock import QUESTION, SENTENCE, race

LONG_QUESTION = "Who wrote the novel about youthful hubris that was published in December 1815 in London?"
LOGGER = "hf_readonce.models.deformer_bert.pipeline_deformer_bert"


def cut_warnings(caplog):
    return [record.getMessage() for record in caplog.records
            if record.name == LOGGER and "question(s) held more than" in record.getMessage()]


def ask(pipe, caplog, questions, context, **kwargs):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        answers = pipe(question=questions, context=context, max_passage_len=WINDOWS["max_passage_len"],
                       doc_stride=WINDOWS["doc_stride"], **kwargs)
    return answers, cut_warnings(caplog)


def test_questions_cut_to_max_question_len_are_said_once_per_call(tokenizer, caplog):
    """A question longer than `max_question_len` was cut in silence: one warning per call counts the questions cut
    and names the limit and the argument that reads more, however many contexts and model batches the call runs; a
    question of exactly `max_question_len` tokens (`[CLS]`/`[SEP]` included) is read whole and says nothing."""
    pipe = DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer)
    length = len(tokenizer(LONG_QUESTION).input_ids)
    assert length > len(tokenizer("Who wrote Emma?").input_ids)

    _, warnings = ask(pipe, caplog, LONG_QUESTION, CONTEXTS[0], max_question_len=length)  # exactly at the limit
    assert warnings == []
    _, warnings = ask(pipe, caplog, LONG_QUESTION, CONTEXTS[0], max_question_len=length - 1)
    assert warnings == [
        f"1 of 1 question(s) held more than the {length - 1} tokens read per question and were cut to them: their "
        "answers come from those tokens only (`max_question_len` reads more, up to 128)."]

    # a batched call: two contexts (two preprocess steps), several model batches, one warning counting all of them
    questions = [LONG_QUESTION, "Who wrote Emma?", LONG_QUESTION, LONG_QUESTION, "Who wrote Emma?"]
    contexts = [CONTEXTS[0], CONTEXTS[0], CONTEXTS[1], CONTEXTS[0], CONTEXTS[1]]
    answers, warnings = ask(pipe, caplog, questions, contexts, max_question_len=length - 1, batch_size=1)
    assert len(answers) == 5 and [w.split(":")[0] for w in warnings] == [
        f"3 of 5 question(s) held more than the {length - 1} tokens read per question and were cut to them"]
    _, warnings = ask(pipe, caplog, questions, contexts, max_question_len=length)
    assert warnings == []

    # cut at the model's 128 positions: nothing reads more
    longest = "Who wrote " + "the very " * 70 + "novel?"
    _, warnings = ask(pipe, caplog, longest, CONTEXTS[0], max_question_len=128)
    assert [w.split(": ", 1)[1] for w in warnings] == [
        "their answers come from those tokens only (the model reads no more of a question)."]


def test_the_default_limit_and_the_count_are_those_of_hf_readonce_answer(tokenizer, tmp_path, caplog):
    """Without `max_question_len`, the pipeline reads the checkpoint's recorded `max_question_length` (else 64), the
    length `hf-readonce answer` reads (`recorded_answer_settings`, `answer_from_store`): both count the same questions
    cut to the same limit."""
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = WINDOWS["max_passage_len"], WINDOWS["doc_stride"]
    model.config.max_question_length = len(tokenizer(LONG_QUESTION).input_ids) - 2
    rows = [{"id": str(i), "question": q, "context": CONTEXTS[i % 2]}
            for i, q in enumerate([LONG_QUESTION, "Who wrote Emma?", LONG_QUESTION + " Or who?"])]
    store = RepresentationStore(tmp_path / "store")
    fill_store(DeformerBertAdapter(model, tokenizer), store, CONTEXTS)
    limit = recorded_answer_settings(model.config)["max_question_length"]  # what `hf-readonce answer` reads
    assert limit == model.config.max_question_length
    counts = {}
    answer_from_store(model, tokenizer, store, rows, counts=counts)
    assert counts == {"questions": 3, "questions_cut": 2}

    pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    _, warnings = ask(pipe, caplog, [r["question"] for r in rows], [r["context"] for r in rows])
    assert [w.split(":")[0] for w in warnings] == [
        f"{counts['questions_cut']} of {counts['questions']} question(s) held more than the "
        f"{limit} tokens read per question and were cut to them"]
    model.config.max_question_length = None  # nothing recorded: 64, read whole by both
    assert recorded_answer_settings(model.config)["max_question_length"] == 64
    counts.clear()
    answer_from_store(model, tokenizer, store, rows, counts=counts)
    assert counts["questions_cut"] == 0 and ask(pipe, caplog, LONG_QUESTION, CONTEXTS[0])[1] == []
    # and both cut a longer question at 64: the pipeline's own default (the remote code cannot import
    # `recorded_answer_settings`) is the same number
    from hf_readonce.models.deformer_bert import pipeline_deformer_bert

    assert pipeline_deformer_bert._DEFAULT_MAX_QUESTION_LEN == 64
    longest = "Who wrote " + "the very " * 40 + "novel?"
    assert len(tokenizer(longest).input_ids) > 64
    counts.clear()
    answer_from_store(model, tokenizer, store, [{"id": "0", "question": longest, "context": CONTEXTS[0]}],
                      counts=counts)
    assert counts == {"questions": 1, "questions_cut": 1}
    assert [w.split(":")[0] for w in ask(pipe, caplog, longest, CONTEXTS[0])[1]] == [
        "1 of 1 question(s) held more than the 64 tokens read per question and were cut to them"]


def test_a_call_runs_the_model_without_autograd(tokenizer, monkeypatch):
    """`__call__` runs preprocess, forward and postprocess itself (to count the questions cut over a call): the model
    work still goes through `Pipeline.forward`, so passage encoding and every (question, window) read run without
    autograd, over one context or several."""
    pipe = DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer)
    grad_enabled, encode = [], pipe.model.encode_passages

    def encode_passages(*args, **kwargs):
        grad_enabled.append(("encode_passages", torch.is_grad_enabled()))
        return encode(*args, **kwargs)

    monkeypatch.setattr(pipe.model, "encode_passages", encode_passages)
    hook = pipe.model.register_forward_hook(lambda *_: grad_enabled.append(("forward", torch.is_grad_enabled())))
    try:
        pipe(question=["Who wrote Emma?", LONG_QUESTION], context=CONTEXTS, **WINDOWS)
    finally:
        hook.remove()
    assert {name for name, _ in grad_enabled} == {"encode_passages", "forward"}
    assert not any(enabled for _, enabled in grad_enabled)


@pytest.mark.parametrize("switch, field", [("output_attentions", "attentions"), ("output_hidden_states", "hidden_states")])
def test_passage_encoding_computes_no_per_layer_outputs_the_config_asks_for(tokenizer, monkeypatch, switch, field):
    """The pipeline keeps the passage states only: a model whose config asks for attention weights (eager) or
    per-layer hidden states does not make `encode_passages` compute and hold the k layers' (they followed the
    config), and answers the same."""
    model = tiny_model()
    model.set_attn_implementation("eager")
    pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(question=["Who wrote Emma?", LONG_QUESTION], context=CONTEXTS, **WINDOWS)
    setattr(model.config, switch, True)
    seen, encode = [], model.encode_passages
    monkeypatch.setattr(model, "encode_passages", lambda *args, **kwargs: seen.append(encode(*args, **kwargs))
                        or seen[-1])
    got = pipe(question=["Who wrote Emma?", LONG_QUESTION], context=CONTEXTS, **WINDOWS)
    assert seen and all(getattr(out, field) is None for out in seen)
    assert got == expected


def test_answering_computes_no_per_layer_outputs_the_config_asks_for(tokenizer):
    """The pipeline reads the start and end logits only, but ran the model without the output switches, so a
    config saved with `output_attentions=True` / `output_hidden_states=True` made every (question, window) read
    compute and hold all the layers' weights and states, then dropped them. The model gets both False; the answers
    are the same."""
    model = tiny_model()
    model.set_attn_implementation("eager")
    pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(question=["Who wrote Emma?", LONG_QUESTION], context=CONTEXTS, **WINDOWS)
    model.config.output_attentions = model.config.output_hidden_states = True
    calls = []
    hook = model.register_forward_hook(lambda module, args, kwargs, out: calls.append(
        ({name: kwargs.get(name) for name in ("output_attentions", "output_hidden_states")},
         out.attentions, out.hidden_states)), with_kwargs=True)
    try:
        got = pipe(question=["Who wrote Emma?", LONG_QUESTION], context=CONTEXTS, **WINDOWS)
    finally:
        hook.remove()
    assert calls and all(switches == {"output_attentions": False, "output_hidden_states": False}
                         and attentions is None and hidden_states is None
                         for switches, attentions, hidden_states in calls)
    assert got == expected


def test_every_answering_path_reads_the_output_whatever_config_return_dict_says(tokenizer, tmp_path):
    """A user's `config.return_dict=False` (or `torchscript=True`) makes the model return tuples; the pipeline, the
    store's answering, `predict_pairs` / `predict_cached` and the adapter's `output_log_probs` ask for the output's
    fields and give what they give with the default."""
    from hf_readonce.tasks.question_answering import build_features, encode_windows, predict_cached, predict_pairs

    def answers(return_dict):
        model = tiny_model()
        model.config.max_passage_length, model.config.doc_stride = WINDOWS["max_passage_len"], WINDOWS["doc_stride"]
        model.config.return_dict = return_dict
        with torch.no_grad():
            assert isinstance(model(**tokenizer("Who?", CONTEXTS[0], return_tensors="pt")), tuple) is not return_dict
        pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
        piped = pipe(question="Who wrote Emma?", context=CONTEXTS[0], max_passage_len=WINDOWS["max_passage_len"],
                     doc_stride=WINDOWS["doc_stride"])
        adapter = DeformerBertAdapter(model, tokenizer)
        store = RepresentationStore(tmp_path / f"store_{return_dict}")
        fill_store(adapter, store, CONTEXTS)
        rows = [{"id": "0", "question": "Who wrote Emma?", "context": CONTEXTS[0]}]
        stored = answer_from_store(model, tokenizer, store, rows)
        features, windows, _ = build_features(rows, tokenizer, max_question_length=16, max_passage_length=40,
                                              doc_stride=10)
        pairs = predict_pairs(model, features, windows)
        cached = predict_cached(model, features, encode_windows(model, windows))
        log_probs = adapter.output_log_probs(adapter.encode([CONTEXTS[0]])[0])
        return piped, stored, pairs, cached, log_probs

    expected, got = answers(True), answers(False)
    assert got[:2] == expected[:2]
    for got_logits, expected_logits in zip(got[2] + got[3], expected[2] + expected[3], strict=True):
        for a, b in zip(got_logits, expected_logits, strict=True):
            assert np.array_equal(a, b)
    torch.testing.assert_close(got[4], expected[4], atol=0, rtol=0)


def test_pipeline_and_adapter_threads_share_one_tokenizer(tokenizer):
    """The pipeline (its own copy of the tokenizer lock, as it travels to the Hub) answering in one thread with
    questions cut to 4 tokens, an adapter encoding whole documents in another, one tokenizer: neither reads with the
    other's truncation."""
    model = tiny_model()
    pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=100, doc_stride=16)
    documents = [f"Report {i}: " + SENTENCE * 6 for i in range(60)]
    whole = [sum(len(window.input_ids) for window in windows) for windows in adapter.windows(documents)]
    assert min(whole) > 80
    group = {"context": "The council approved it.", "questions": [QUESTION, QUESTION]}
    expected = pipe.preprocess(group, max_question_len=4, max_passage_len=24, doc_stride=8)
    assert [len(ids) for ids in expected["question_ids"]] == [4, 4]

    def ask():
        got = pipe.preprocess(group, max_question_len=4, max_passage_len=24, doc_stride=8)
        return got["question_ids"] == expected["question_ids"] and got["window_ids"] == expected["window_ids"]

    results, failures = race(len(documents), lambda i: adapter.num_tokens(adapter.encode([documents[i]])[0]), ask)
    assert results == whole
    assert failures == 0


class AtenOps(TorchDispatchMode):
    """Counts the aten ops run inside the mode, by name (`aten._local_scalar_dense.default` is one value read back
    to Python, e.g. `float(t[i])`)."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def tied_logits(length, seed):
    """`(start, end)` logits of one window with many ties (halves in [-3, 3))."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(-6, 6, (length,), generator=generator).float() / 2 for _ in range(2))


def spelled_out_span_search(start_logits, end_logits, offsets, n_best_size, max_answer_len):
    """The window span search written out: the `n_best_size` best starts and ends (ties in position order), every
    valid pair of passage tokens scored with its two logits read one at a time."""
    k = min(n_best_size, len(start_logits))
    starts = sorted(range(len(start_logits)), key=lambda i: -float(start_logits[i]))[:k]
    ends = sorted(range(len(end_logits)), key=lambda i: -float(end_logits[i]))[:k]
    return [(float(start_logits[s]) + float(end_logits[e]), offsets[s][0], offsets[e][1]) for s in starts
            for e in ends if offsets[s] is not None and offsets[e] is not None and s <= e < s + max_answer_len]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_window_span_candidates_are_the_spelled_out_search(dtype):
    """Candidates, scores (exactly) and their order are those of the search written out, ties included, in every
    logit dtype, with positions that are not passage tokens (`None` offsets) left out."""
    length = 40
    offsets = [None] + [(3 * i, 3 * i + 2) for i in range(length - 2)] + [None]
    for seed in range(4):
        start, end = (logits.to(dtype) for logits in tied_logits(length, seed))
        for n_best_size, max_answer_len in ((20, 30), (5, 3), (60, 1)):
            got = window_span_candidates(start, end, offsets, n_best_size, max_answer_len)
            assert got == spelled_out_span_search(start, end, offsets, n_best_size, max_answer_len)
            assert got and all(type(score) is float for score, _, _ in got)


def test_window_span_candidates_read_each_logit_tensor_once():
    """The search reads the logits back to Python once per window, not once per scored pair: the tensor ops it runs
    do not grow with `n_best_size` (400 pairs at 20), and none reads a single value."""
    start, end = tied_logits(64, seed=0)
    offsets = [(i, i + 1) for i in range(64)]
    counted = []
    for n_best_size in (2, 20):
        with AtenOps() as ops:
            candidates = window_span_candidates(start, end, offsets, n_best_size, 64)
        counted.append(ops.ops)
    assert len(candidates) > 100
    assert counted[0] == counted[1]
    assert counted[1]["aten._local_scalar_dense.default"] == 0
