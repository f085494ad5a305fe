"""`hf_readonce.tasks.document_cache_qa.answer_with_document_caches` beyond the CLI tests: the weights are hashed
once per call, and bad arguments are refused by name before any work."""

from types import MappingProxyType

import pytest
import torch

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
from hf_readonce.representations import base, fill_store, get_adapter
from hf_readonce.representations.fill import ensure_stored
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.document_cache_qa import (
    answer_with_document_caches,
    answer_with_full_prompt,
    find_document_cache_space,
)

PASSAGES = ["Emma is a novel by Jane Austen, published in December 1815.",
            "Persuasion was Austen's last completed novel, published at the end of 1817."]
ROWS = [{"id": "a", "question": "Who wrote Emma?", "context": PASSAGES[0]},
        {"id": "b", "question": "When was Persuasion published?", "contexts": PASSAGES}]


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()


@pytest.fixture
def store(model, tokenizer, tmp_path):
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=32), store, PASSAGES, store_dtype="float32")
    return store


@pytest.mark.parametrize("max_document_length", [None, 32])
def test_the_weights_are_hashed_once_per_call(model, tokenizer, store, monkeypatch, max_document_length):
    answer_with_document_caches(model, tokenizer, store, ROWS, max_new_tokens=2)  # the first fingerprint is cached
    calls = []
    digest = base.weights_digest
    monkeypatch.setattr(base, "weights_digest", lambda module: calls.append(module) or digest(module))
    answers = answer_with_document_caches(model, tokenizer, store, ROWS, max_new_tokens=2,
                                          max_document_length=max_document_length)
    assert list(answers) == ["a", "b"]
    assert calls == [model]


def test_encode_missing_hashes_the_weights_once(model, tokenizer, tmp_path, monkeypatch):
    calls = []
    digest = base.weights_digest
    monkeypatch.setattr(base, "weights_digest", lambda module: calls.append(module) or digest(module))
    empty = RepresentationStore(tmp_path / "empty")
    answer_with_document_caches(model, tokenizer, empty, ROWS, max_new_tokens=2, encode_missing=True,
                                store_dtype="float32", max_document_length=32)
    assert len(calls) == 1  # the lookup; `fill_store` writes the missing passages under the fingerprint it found
    assert len(empty.spaces()) == 1


def test_the_passages_read_whole_are_not_tokenized_to_count_those_cut(model, tokenizer, tmp_path, monkeypatch):
    """`counts`: the passages cut are counted from what `fill_store` stored with each (the tokens read, and whether it
    was cut): no passage is tokenized again (every distinct passage was, on every call; then each stored with
    `max_document_length` tokens)."""
    from tests.representations.contract import counting_tokenizations

    short, long = (len(tokenizer(text, add_special_tokens=False).input_ids) for text in PASSAGES)
    assert short < long
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=short + 1), store, PASSAGES, store_dtype="float32")
    tokenized = counting_tokenizations(tokenizer, PASSAGES, monkeypatch)
    counts = {}
    answer_with_document_caches(model, tokenizer, store, ROWS, max_new_tokens=2, counts=counts)
    assert counts == {"passages": 2, "passages_cut": 1} and tokenized == []


def test_the_adapters_checks_come_before_the_weights_are_hashed(model, tokenizer, store, monkeypatch):
    """A `max_document_length` past the model's positions and a model of dynamic RoPE are refused by the adapter's
    cheap checks, before any weight is hashed (the weights were hashed first)."""
    dynamic = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**{
        **model.config.to_dict(), "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}))
    calls = []
    monkeypatch.setattr(base, "weights_digest", lambda module: calls.append(module))
    with pytest.raises(ValueError, match="`max_document_length`"):
        answer_with_document_caches(model, tokenizer, store, ROWS, max_document_length=129)
    with pytest.raises(ValueError, match="rope_type 'dynamic'"):
        answer_with_document_caches(dynamic, tokenizer, store, ROWS, encode_missing=True)
    assert calls == []


@pytest.mark.parametrize("examples, match", [(ROWS[0], "`examples` must be an iterable of rows .* got dict"),
                                             (MappingProxyType(ROWS[0]), "`examples` must be an iterable .* got "
                                                                         "mappingproxy"),
                                             ("Who wrote Emma?", "`examples` must be an iterable of rows .* got str"),
                                             ([ROWS[0], "Who?"], "example 1 of `examples` must be a mapping")])
def test_examples_of_another_type_are_refused_by_name(model, tokenizer, store, examples, match):
    with pytest.raises(TypeError, match=match):
        answer_with_document_caches(model, tokenizer, store, examples, max_new_tokens=2)
    with pytest.raises(TypeError, match=match):
        answer_with_full_prompt(model, tokenizer, examples, max_document_length=32, max_new_tokens=2)


def test_examples_may_be_any_iterable_of_rows(model, tokenizer, store):
    answers = answer_with_document_caches(model, tokenizer, store, (row for row in ROWS), max_new_tokens=2)
    assert list(answers) == ["a", "b"]


def test_rows_may_be_any_mapping(model, tokenizer, store):
    """Rows that are mappings but not dicts (a read-only view here) answer as the dicts do (they were refused)."""
    rows = [MappingProxyType(row) for row in ROWS]
    assert (answer_with_document_caches(model, tokenizer, store, rows, max_new_tokens=2)
            == answer_with_document_caches(model, tokenizer, store, ROWS, max_new_tokens=2))
    assert (answer_with_full_prompt(model, tokenizer, rows, max_document_length=32, max_new_tokens=2)
            == answer_with_full_prompt(model, tokenizer, ROWS, max_document_length=32, max_new_tokens=2))


def test_a_stale_fingerprint_is_refused_not_served(tokenizer, tmp_path):
    """`fingerprint=` spares hashing the weights again, not checking them: a fingerprint computed before the weights
    changed (or another model's) would find the old weights' caches, which the adapter's `read` labels as this
    model's, so `generate` would compose them silently."""
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()
    store = RepresentationStore(tmp_path / "store")
    adapter = get_adapter(model, tokenizer, max_document_length=32)
    fill_store(adapter, store, PASSAGES, store_dtype="float32")
    stale = base.current_fingerprint(model)
    assert find_document_cache_space(store, model, tokenizer, 32, fingerprint=stale)["max_document_length"] == 32
    assert ensure_stored(adapter, store, PASSAGES, fingerprint=stale)[0] == stale  # the right one is accepted
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)  # the weights change after the fingerprint was taken
    with pytest.raises(ValueError, match=r"`fingerprint` .* is not this model's fingerprint"):
        find_document_cache_space(store, model, tokenizer, 32, fingerprint=stale)
    with pytest.raises(ValueError, match=r"`fingerprint` .* is not this model's fingerprint"):
        ensure_stored(adapter, store, PASSAGES, fingerprint=stale)
