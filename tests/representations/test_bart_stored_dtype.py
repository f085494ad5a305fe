"""LongDoc and ReadOnce BART states stored in float16, also under the key those families had before they keyed the
compute dtype (a float16 checkpoint computing in float16 had its float32 key): the store returns them in the dtype
its index records for them (float16), as it returns a fresh store's; `read` gives the model's input in the dtype
asked for (LongDoc: the model's own by default; ReadOnce: the stored one), so nothing is silently another dtype than
recorded or asked."""

import copy

import pytest
import torch

from hf_readonce.representations import fill_store, get_adapter
from hf_readonce.representations.base import current_fingerprint
from hf_readonce.store import RepresentationStore, content_hash
from tests.representations.test_fingerprint_policy import _tiny, fingerprint_before_compute_dtypes

DOCUMENTS = ["Paris is the capital of France.", "Berlin is the capital of Germany."]
STORED = {"longdoc_bart": "hidden_states", "readonce_bart": "representations"}


@pytest.mark.parametrize("family", sorted(STORED))
def test_float16_states_of_an_old_key_read_back_as_recorded(family, tmp_path):
    model, tokenizer = _tiny(family)
    half = copy.deepcopy(model).half()  # a float16 checkpoint computing in float16
    on_cpu = copy.deepcopy(half).float()  # the same checkpoint computing in float32
    hashes = [content_hash(text) for text in DOCUMENTS]
    half_adapter, cpu_adapter = get_adapter(half, tokenizer), get_adapter(on_cpu, tokenizer)
    settings = cpu_adapter.settings()
    assert settings == half_adapter.settings()
    computed = RepresentationStore(tmp_path / "computed")
    fill_store(half_adapter, computed, DOCUMENTS, store_dtype="fp16")
    old_key = fingerprint_before_compute_dtypes(half, family)
    assert old_key == current_fingerprint(cpu_adapter) != current_fingerprint(half_adapter)
    old = RepresentationStore(tmp_path / "old")  # as the code before wrote float16 compute's states
    with old.writer(old_key, settings, dtype="fp16", model_type=family) as writer:
        for doc_hash in hashes:
            writer.add(doc_hash, computed.get(current_fingerprint(half_adapter), settings, doc_hash))
    fresh = RepresentationStore(tmp_path / "fresh")
    fill_store(cpu_adapter, fresh, DOCUMENTS, store_dtype="fp16")
    for store in (old, fresh):
        (space,) = store.info()["spaces"].values()
        assert space["dtypes"] == ["float16"]
        assert all(entry.tensors[STORED[family]]["dtype"] == "float16" for entry in store.entries())
        stored = store.get_many(current_fingerprint(cpu_adapter), settings, hashes)
        assert [t[STORED[family]].dtype for t in stored] == [torch.float16] * 2
        assert [t["num_tokens"].dtype for t in stored] == [torch.int32] * 2
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            read = cpu_adapter.read(stored, dtype=dtype)
            assert (read.last_hidden_state if family == "longdoc_bart" else read.representations).dtype == dtype
        read = cpu_adapter.read(stored)
        states = read.last_hidden_state if family == "longdoc_bart" else read.representations
        assert states.dtype == (on_cpu.dtype if family == "longdoc_bart" else torch.float16)
        rows = [t[STORED[family]] for t in stored]
        assert all(torch.equal(states[i, : len(row)].to(torch.float16), row) for i, row in enumerate(rows))
