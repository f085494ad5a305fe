"""`one_tokenizer_fingerprint`: within a task call the tokenizer is serialized once for its fingerprint, however many
adapters the call builds, and the digest is `tokenizer_fingerprint`'s (the keys of the stores written before)."""

import threading

import pytest
from transformers import AutoTokenizer

from hf_readonce.representations import DeformerBertAdapter, base
from hf_readonce.representations.base import (
    one_tokenizer_fingerprint,
    scoped_tokenizer_fingerprint,
    tokenizer_fingerprint,
)
from hf_readonce.weights import minilm_path
from tests.conftest import tiny_model

MINILM_TOKENIZER_FINGERPRINT = "66854eac0051205f3bc495b01f6e3db009bf68ae4357305b44d34019134e42f7"  # 0.1 stores


@pytest.fixture
def serialized(monkeypatch):
    """The tokenizer serializations fingerprinted (each call of `tokenizer_fingerprint` keys one)."""
    seen = []
    key = base._tokenizer_cache_key
    monkeypatch.setattr(base, "_tokenizer_cache_key", lambda raw: seen.append(len(raw)) or key(raw))
    return seen


def test_one_serialization_per_block_and_the_same_digest(tokenizer, serialized):
    assert tokenizer_fingerprint(tokenizer) == MINILM_TOKENIZER_FINGERPRINT  # what stores were written with
    serialized.clear()
    with one_tokenizer_fingerprint(tokenizer):
        assert not serialized  # nothing computed on entering
        adapters = [DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=length, doc_stride=4)
                    for length in (16, 24, 32)]
        with one_tokenizer_fingerprint(tokenizer):  # a nested block of the same tokenizer shares the digest
            assert scoped_tokenizer_fingerprint(tokenizer) == MINILM_TOKENIZER_FINGERPRINT
    assert len(serialized) == 1
    assert {adapter.settings()["tokenizer"] for adapter in adapters} == {MINILM_TOKENIZER_FINGERPRINT}
    scoped_tokenizer_fingerprint(tokenizer)  # outside a block: computed on each call, as `tokenizer_fingerprint`
    scoped_tokenizer_fingerprint(tokenizer)
    assert len(serialized) == 3


def test_another_tokenizer_in_a_block_is_fingerprinted_as_itself(tokenizer, serialized):
    other = AutoTokenizer.from_pretrained(minilm_path())
    other.add_tokens(["<passage>"])
    with one_tokenizer_fingerprint(tokenizer):
        assert scoped_tokenizer_fingerprint(other) == tokenizer_fingerprint(other) != MINILM_TOKENIZER_FINGERPRINT
        with one_tokenizer_fingerprint(other):  # an inner block of another tokenizer: its own digest
            assert scoped_tokenizer_fingerprint(other) == tokenizer_fingerprint(other)
            assert scoped_tokenizer_fingerprint(tokenizer) == MINILM_TOKENIZER_FINGERPRINT
        assert scoped_tokenizer_fingerprint(tokenizer) == MINILM_TOKENIZER_FINGERPRINT


def test_a_block_holds_in_its_own_thread_only(tokenizer, serialized):
    with one_tokenizer_fingerprint(tokenizer):
        scoped_tokenizer_fingerprint(tokenizer)
        thread = threading.Thread(target=scoped_tokenizer_fingerprint, args=(tokenizer,))
        thread.start()
        thread.join()
        scoped_tokenizer_fingerprint(tokenizer)
    assert len(serialized) == 2  # the block's one, and the other thread's own


def test_entering_a_block_refuses_nothing():
    not_a_tokenizer = object()
    with one_tokenizer_fingerprint(not_a_tokenizer):  # nothing computed on entering: refused where it is asked for
        with pytest.raises(TypeError, match="a fast tokenizer is needed"):
            scoped_tokenizer_fingerprint(not_a_tokenizer)


def test_a_token_added_within_a_block_is_seen():
    """The block's digest is computed again when the vocabulary grew inside it (`add_tokens`, which a caller must
    not do there, but which would otherwise have left adapters recording the digest of the tokenizer before)."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())  # its own copy: tokens are added to it
    with one_tokenizer_fingerprint(tokenizer):
        before = scoped_tokenizer_fingerprint(tokenizer)
        tokenizer.add_tokens(["<passage>"])
        after = scoped_tokenizer_fingerprint(tokenizer)
    assert before == MINILM_TOKENIZER_FINGERPRINT
    assert after == tokenizer_fingerprint(tokenizer) != before
