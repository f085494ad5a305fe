"""Each task entry point that reads a store digests the model's weights once per call and serializes the tokenizer
once for its fingerprint (both cost tens of milliseconds on a real model: `weights_digest` reads every parameter,
`tokenizer_fingerprint` serializes the whole vocabulary), however many adapters it builds to find the stored space;
and it still finds the stores written before (the same keys: fingerprint and settings)."""

import pytest
import torch

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
from hf_readonce.representations import DeformerBertAdapter, ReadTwiceBertAdapter, base, fill_store, get_adapter
from hf_readonce.representations.recompute import recompute_store
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks import generative_qa_store, question_answering_store, summarization_store
from hf_readonce.tasks.document_cache_qa import answer_with_document_caches, find_document_cache_space
from hf_readonce.tasks.generative_qa_store import answer_from_representations
from hf_readonce.tasks.question_answering_store import answer_from_store, find_deformer_space
from hf_readonce.tasks.readtwice_qa_store import answer_from_readtwice_store
from hf_readonce.tasks.summarization_store import find_summarization_space, summarize_from_store
from tests.conftest import tiny_model
from tests.hub.test_pipeline_readtwice import DOCUMENT, QUESTIONS, tiny_readtwice
from tests.tasks.test_summarization_store import DOCUMENTS, longdoc, readonce

ROWS = [{"id": f"q{i}", "question": "Who approved the budget?", "context": text} for i, text in enumerate(DOCUMENTS)]


@pytest.fixture
def calls(monkeypatch):
    """Counts of `weights_digest` calls and of tokenizer serializations fingerprinted (`tokenizer_fingerprint` keys
    each serialization once, `_tokenizer_cache_key`)."""
    counted = {"weights": 0, "tokenizer": 0}
    digest, key = base.weights_digest, base._tokenizer_cache_key

    def counting(name, function):
        def wrapper(argument):
            counted[name] += 1
            return function(argument)
        return wrapper

    monkeypatch.setattr(base, "weights_digest", counting("weights", digest))
    monkeypatch.setattr(base, "_tokenizer_cache_key", counting("tokenizer", key))
    return counted


def once(calls, run, weights=1):
    """`run()` twice (the first computes what a model caches), the second counted: its result."""
    run()
    calls.update(weights=0, tokenizer=0)
    result = run()
    assert calls == {"weights": weights, "tokenizer": 1}
    return result


def deformer_store(tokenizer, path):
    """A tiny DeFormer and a store it filled (outside any task: the keys a store written before carries)."""
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 32, 8
    store = RepresentationStore(path)
    fill_store(DeformerBertAdapter(model, tokenizer), store, DOCUMENTS)
    return model, store


def test_answer_from_store(tokenizer, tmp_path, calls):
    model, store = deformer_store(tokenizer, tmp_path / "store")
    assert once(calls, lambda: find_deformer_space(store, model, tokenizer)) == DeformerBertAdapter(
        model, tokenizer).settings()
    answers = once(calls, lambda: answer_from_store(model, tokenizer, store, ROWS))
    assert list(answers) == [row["id"] for row in ROWS]
    once(calls, lambda: answer_from_store(model, tokenizer, store, ROWS, max_passage_length=32, doc_stride=8))


def encoding_what_is_missing(calls, tmp_path, run, fill):
    """`run(store)` (a task with `encode_missing=True`) counted on a store holding none of `DOCUMENTS` and on one
    holding the first (`fill(store, documents)`, outside the count), after a first call on a store of its own (what a
    model caches): the weights are digested once either way (the lookup's fingerprint is the one `fill_store` writes
    the missing documents under; it digested them again), and every document is stored after."""
    run(RepresentationStore(tmp_path / "warm"))
    for stored in (0, 1):
        store = RepresentationStore(tmp_path / f"holding-{stored}")
        if stored:
            fill(store, DOCUMENTS[:stored])
        calls.update(weights=0, tokenizer=0)
        run(store)
        assert calls == {"weights": 1, "tokenizer": 1}, f"{stored} of {len(DOCUMENTS)} stored before"
        assert len(store) == len(DOCUMENTS)


def test_answer_from_store_encoding_what_is_missing(tokenizer, tmp_path, calls):
    model, _ = deformer_store(tokenizer, tmp_path / "store")
    encoding_what_is_missing(calls, tmp_path, lambda store: answer_from_store(model, tokenizer, store, ROWS,
                                                                              encode_missing=True),
                             lambda store, documents: fill_store(DeformerBertAdapter(model, tokenizer), store,
                                                                 documents))


def test_answer_from_readtwice_store_with_the_stored_mention_finder(tokenizer, tmp_path, calls):
    model = tiny_readtwice(memory_type="entity")  # no recorded mention finder: looked up in the store by fingerprint
    store = RepresentationStore(tmp_path / "store")
    fill_store(ReadTwiceBertAdapter(model, tokenizer, mentions="capitalized_mentions"), store, [DOCUMENT])
    rows = [{"id": f"a{i}", "question": question, "context": DOCUMENT} for i, question in enumerate(QUESTIONS)]
    answers = once(calls, lambda: answer_from_readtwice_store(model, tokenizer, store, rows, max_question_length=12))
    assert list(answers) == [row["id"] for row in rows]


@pytest.mark.parametrize("build", [longdoc, readonce], ids=["longdoc_bart", "readonce_bart"])
def test_summarize_from_store(tokenizer, tmp_path, calls, build):
    model = build(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    written = get_adapter(model, tokenizer, max_document_length=48)  # not the adapter's default length
    fill_store(written, store, DOCUMENTS)
    assert once(calls, lambda: find_summarization_space(store, model, tokenizer)) == written.settings()
    counts = {}
    summaries = once(calls, lambda: summarize_from_store(model, tokenizer, store, DOCUMENTS, max_new_tokens=2,
                                                         counts=counts))
    assert len(summaries) == len(DOCUMENTS) and counts["documents"] == len(DOCUMENTS)
    if build is readonce:
        answers = once(calls, lambda: answer_from_representations(model, tokenizer, store, ROWS, max_new_tokens=2))
        assert list(answers) == [row["id"] for row in ROWS]


@pytest.mark.parametrize("build", [longdoc, readonce], ids=["longdoc_bart", "readonce_bart"])
def test_summarize_from_store_encoding_what_is_missing(tokenizer, tmp_path, calls, build):
    model = build(tokenizer)

    def fill(store, documents):
        fill_store(get_adapter(model, tokenizer), store, documents)

    encoding_what_is_missing(calls, tmp_path / "summarize", lambda store: summarize_from_store(
        model, tokenizer, store, DOCUMENTS, max_new_tokens=2, encode_missing=True), fill)
    if build is readonce:  # `hf-readonce answer` for this family
        encoding_what_is_missing(calls, tmp_path / "answer", lambda store: answer_from_representations(
            model, tokenizer, store, ROWS, max_new_tokens=2, encode_missing=True), fill)


def test_answer_with_document_caches_encoding_what_is_missing(tokenizer, tmp_path, calls):
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()
    encoding_what_is_missing(calls, tmp_path, lambda store: answer_with_document_caches(
        model, tokenizer, store, ROWS, max_document_length=32, max_new_tokens=2, encode_missing=True),
        lambda store, documents: fill_store(get_adapter(model, tokenizer, max_document_length=32), store, documents))


def test_answer_with_document_caches_serializes_the_tokenizer_once(tokenizer, tmp_path, calls):
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=32), store, DOCUMENTS[:2], store_dtype="float32")
    rows = [{"id": "a", "question": "Who approved it?", "context": DOCUMENTS[0]}]
    assert once(calls, lambda: find_document_cache_space(store, model, tokenizer))["max_document_length"] == 32
    assert list(once(calls, lambda: answer_with_document_caches(model, tokenizer, store, rows,
                                                                max_new_tokens=2))) == ["a"]


def test_recompute_store_over_several_spaces(tokenizer, tmp_path, calls):
    model, store = deformer_store(tokenizer, tmp_path / "store")
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=24, doc_stride=4), store, DOCUMENTS[:1])
    other = tiny_model(seed=1)  # another model's space of the family: its adapter is built, its fingerprint compared
    fill_store(DeformerBertAdapter(other, tokenizer, max_passage_length=32, doc_stride=8), store, DOCUMENTS[:1])
    reports = once(calls, lambda: recompute_store(store, model, tokenizer, 1))
    assert len(reports) == 2 and not any(report.mismatched or report.skipped for report in reports)


def test_recompute_store_beside_a_space_whose_settings_this_model_refuses(tokenizer, tmp_path, calls):
    """A space this model's adapter refuses (another model's, of a document length past this model's positions)
    listed after one of its own: the weights are still digested once (the refused space was compared with a second
    digest, `current_fingerprint(model)`, when it came after a space whose adapter was built)."""
    def llama(positions, seed):
        torch.manual_seed(seed)
        return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions, pad_token_id=0)).eval()

    model, other = llama(128, 0), llama(256, 1)
    store = RepresentationStore(tmp_path / "store")
    for length in (16, 24, 32):
        fill_store(get_adapter(model, tokenizer, max_document_length=length), store, DOCUMENTS[:1],
                   store_dtype="float32")
    fill_store(get_adapter(other, tokenizer, max_document_length=230), store, DOCUMENTS[:1], store_dtype="float32")
    order = [s.settings["max_document_length"] for s in sorted(store.spaces(), key=lambda s: s.key)]
    assert order.index(230) > 0  # one of this model's spaces (its adapter built) comes first
    reports = once(calls, lambda: recompute_store(store, model, tokenizer, 1))
    assert sorted(report.settings["max_document_length"] for report in reports) == [16, 24, 32]
    assert not any(report.mismatched or report.skipped for report in reports)


def test_a_given_fingerprint_that_is_not_the_models_is_refused(tokenizer, tmp_path):
    """`fingerprint=` spares hashing the weights, not checking them: another model's fingerprint, or one computed
    before the weights changed, found that model's space, whose settings were returned as this model's (as
    `find_document_cache_space` and `ensure_stored` refuse it)."""
    from hf_readonce.representations.base import current_fingerprint
    from hf_readonce.representations.spaces import adapter_for_store

    model, store = deformer_store(tokenizer, tmp_path / "deformer")
    other = tiny_model(seed=1)
    with pytest.raises(ValueError, match="`fingerprint` .* is not this model's fingerprint"):
        find_deformer_space(store, other, tokenizer, fingerprint=current_fingerprint(model))
    before = current_fingerprint(model)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.add_(1e-3)  # in place: the model's cache is refreshed
    with pytest.raises(ValueError, match="`fingerprint` .* is not this model's fingerprint"):
        find_deformer_space(store, model, tokenizer, fingerprint=before)
    written, reader = longdoc(tokenizer), longdoc(tokenizer, seed=1)
    summaries = RepresentationStore(tmp_path / "longdoc")
    fill_store(get_adapter(written, tokenizer, max_document_length=48), summaries, DOCUMENTS)
    for find in (find_summarization_space, lambda store, model, tokenizer, fingerprint:
                 adapter_for_store(model, tokenizer, store, fingerprint=fingerprint)):
        with pytest.raises(ValueError, match="`fingerprint` .* is not this model's fingerprint"):
            find(summaries, reader, tokenizer, fingerprint=current_fingerprint(written))
        assert find(summaries, written, tokenizer, fingerprint=current_fingerprint(written)) is not None


def test_the_tasks_that_take_any_model_fingerprint_it_with_one_helper():
    """`current_fingerprint_if_any`: a model's [`current_fingerprint`], `None` for an object without
    `representation_fingerprint()` (the task's adapter then names what it expects); the three tasks that compute
    their once-per-call fingerprint this way (DeFormer answering, summarizing, generative answering) share it."""
    model = tiny_model()
    assert base.current_fingerprint_if_any(model) == base.current_fingerprint(model)
    assert base.current_fingerprint_if_any(torch.nn.Linear(2, 2)) is None
    for module in (question_answering_store, summarization_store, generative_qa_store):
        assert module.current_fingerprint_if_any is base.current_fingerprint_if_any, module.__name__


def test_the_weights_are_digested_once_within_a_task_call_and_on_each_call_outside(tokenizer, calls):
    """`one_weights_digest`: within the block (a task's call, `digests_weights_once`) `current_fingerprint` of the
    model or of an adapter of it digests the weights on its first call only; outside it, on every call, so that an
    edit through `.data` between two calls (which bumps no version counter) is seen; another model is digested as
    outside."""
    model, other = tiny_model(), tiny_model(seed=1)
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    with base.one_weights_digest(model):
        first = base.current_fingerprint(model)
        assert base.current_fingerprint(adapter) == first and calls["weights"] == 1
        base.current_fingerprint(other)
        base.current_fingerprint(other)
        assert calls["weights"] == 3
        with base.one_weights_digest(model):  # nested: the same digest
            assert base.current_fingerprint(model) == first and calls["weights"] == 3
    with torch.no_grad():
        next(model.parameters()).data.add_(1e-2)
    assert base.current_fingerprint(adapter) != first and calls["weights"] == 4

    @base.digests_weights_once
    def task(model, times):
        return {base.current_fingerprint(model) for _ in range(times)}

    calls.update(weights=0)
    assert len(task(model, 3)) == 1 and len(task(model=model, times=2)) == 1 and calls["weights"] == 2
