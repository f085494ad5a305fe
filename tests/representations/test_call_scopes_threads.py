"""The per-call scopes and caches of `hf_readonce.representations.base` under threads: a task call's
`one_weights_digest` block holds in its own thread only (another thread's call digests the weights itself), and the
cache of tokenizer fingerprints, shared by every thread, stays usable while another thread adds to it."""

import threading

import pytest

from hf_readonce.models.deformer_bert import pipeline_deformer_bert
from hf_readonce.representations import base
from hf_readonce.representations.base import current_fingerprint, one_weights_digest
from tests.conftest import tiny_model


def test_a_weights_block_holds_in_its_own_thread_only(monkeypatch):
    model = tiny_model()
    digests = []
    digest = base.weights_digest
    monkeypatch.setattr(base, "weights_digest", lambda m: digests.append(threading.get_ident()) or digest(m))
    with one_weights_digest(model):
        first = current_fingerprint(model)
        other = []
        thread = threading.Thread(target=lambda: other.extend(current_fingerprint(model) for _ in range(2)))
        thread.start()
        thread.join()
        assert current_fingerprint(model) == first
    here = threading.get_ident()
    assert digests.count(here) == 1  # the block's one digest
    assert len(digests) == 3 and other == [first, first]  # the other thread, outside any block, digests each call


@pytest.mark.parametrize("module", [base, pipeline_deformer_bert], ids=["adapters", "pipeline"])
def test_the_fingerprint_cache_is_trimmed_while_another_thread_adds_to_it(tokenizer, monkeypatch, module):
    # the cache is full, and another thread adds an entry while this one trims it (forced at the start of any
    # iteration over the cache itself, where an interleaving would put it)
    cache = {("filler", i): "0" * 64 for i in range(8)}
    monkeypatch.setattr(module, "_TOKENIZER_FINGERPRINTS", cache)

    def racing_iter(iterable):
        iterator = iter(iterable)
        if iterable is cache:
            cache[("another thread", len(cache))] = "1" * 64
        return iterator

    monkeypatch.setattr(module, "iter", racing_iter, raising=False)
    fingerprint = module.tokenizer_fingerprint(tokenizer)
    assert fingerprint == base.tokenizer_fingerprint(tokenizer) and fingerprint in cache.values()
    assert len(cache) <= 9
