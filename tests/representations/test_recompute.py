"""`AdapterBase.check_recompute`, what `hf-readonce verify --recompute N` runs, for every registered family: stored
fp32 tensors recompute to themselves (difference ~0, KL ~0), an fp16 store shows only its rounding, a tampered
document shows its change in both figures, and families that keep no tokens ask for the text."""

import pytest
import torch

from hf_readonce.representations import AdapterBase, fill_store, get_adapter, registered_adapters
from hf_readonce.representations.base import RecomputeCheck, kl_divergence
from hf_readonce.store import RepresentationStore, canonical_settings, content_hash
from tests.representations.test_contract import DOCUMENTS, HARNESSES


def test_every_registered_adapter_has_the_recompute_side():
    for model_type, adapter_class in registered_adapters().items():
        assert issubclass(adapter_class, AdapterBase), model_type
        assert isinstance(adapter_class.recompute_needs_text, bool)


def stored_documents(adapter, path, dtype):
    store = RepresentationStore(path)
    fill_store(adapter, store, DOCUMENTS, store_dtype=dtype)
    return store.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_recompute_finds_nothing_in_an_fp32_store_and_the_change_in_a_tampered_one(model_type, tokenizer, tmp_path):
    model, settings, _ = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    # the settings of the stored space rebuild an adapter with the same settings (what the CLI does)
    rebuilt = type(adapter)(model, tokenizer, **type(adapter).settings_kwargs(adapter.settings()))
    assert canonical_settings(rebuilt.settings()) == canonical_settings(adapter.settings())
    stored = stored_documents(adapter, tmp_path / "fp32", "float32")
    has_distribution = adapter.output_distribution is not None
    clean_kl = 0.0
    for text, tensors in zip(DOCUMENTS, stored):
        check = adapter.check_recompute(tensors, text)
        clean_kl = max(clean_kl, abs(check.kl or 0.0))
        assert isinstance(check, RecomputeCheck) and check.ok and check.recomputed_from == "text"
        assert check.max_abs_diff < 1e-5, check
        if has_distribution:
            assert check.kl is not None and abs(check.kl) < 1e-6 and check.kl_kind == adapter.output_distribution
        if not adapter.recompute_needs_text:
            from_tokens = adapter.check_recompute(tensors)
            assert from_tokens.recomputed_from == "stored tokens" and from_tokens.ok
            assert from_tokens.max_abs_diff < 1e-5 and (from_tokens.kl is None or abs(from_tokens.kl) < 1e-6)
        else:
            with pytest.raises(ValueError, match="text"):
                adapter.check_recompute(tensors)
    # tamper with one stored floating tensor: the difference is found, and the output distribution moves
    tensors = dict(stored[0])
    name = next(n for n, t in tensors.items() if t.is_floating_point())
    signs = torch.randint(0, 2, tensors[name].shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
    tensors[name] = tensors[name] + 0.5 * signs.to(tensors[name].dtype)  # not a constant shift (softmax ignores those)
    check = adapter.check_recompute(tensors, DOCUMENTS[0])
    assert check.max_abs_diff == pytest.approx(0.5, abs=1e-4) and check.tensor_max_abs_diff[name] > 0.49
    if has_distribution:  # tiny random models have nearly flat outputs: the KL is small, but not rounding
        assert check.kl > max(1e-9, 10 * clean_kl), (check.kl, clean_kl)
    # other token ids (another tokenizer's reading) are a mismatch, not a number
    ids = next((n for n, t in stored[0].items() if n == "input_ids"), None)
    if ids is not None:
        tampered = dict(stored[0])
        tampered[ids] = tampered[ids].clone()
        tampered[ids].view(-1)[-1] += 1
        mismatch = adapter.check_recompute(tampered, DOCUMENTS[0])
        assert not mismatch.ok and ids in mismatch.mismatched and mismatch.kl is None


@pytest.mark.parametrize("model_type", ["block_attention_llama", "deformer_bert"])
def test_an_fp16_store_shows_its_rounding_only(model_type, tokenizer, tmp_path):
    model, settings, _ = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    stored = stored_documents(adapter, tmp_path / "fp16", "float16")
    check = adapter.check_recompute(stored[1], DOCUMENTS[1])
    assert check.ok and 0 < check.max_abs_diff < 1e-2
    assert 0 <= check.kl < 1e-3
    assert check.as_dict()["max_abs_diff"] == check.max_abs_diff


def test_kl_divergence():
    p = torch.tensor([[0.5, 0.5, 0.0]]).log()
    q = torch.tensor([[0.25, 0.75, 0.0]]).log()
    expected = 0.5 * torch.log(torch.tensor(2.0)) + 0.5 * torch.log(torch.tensor(2 / 3))
    torch.testing.assert_close(kl_divergence(p, q), expected.reshape(1).double())
    assert float(kl_divergence(p, p)) == 0.0
    assert float(kl_divergence(q, torch.tensor([[1.0, 0.0, 0.0]]).log())) == float("inf")
    with pytest.raises(ValueError, match="shapes"):
        kl_divergence(p, q[:, :2])


def test_a_model_the_adapter_refuses_reports_its_own_spaces_only(tokenizer, tmp_path):
    """`recompute_store` with a model no adapter can be built for (a block-attention Llama of dynamic RoPE, refused
    by the adapter): the spaces of other models are left out as when the adapter is built (they were reported as
    this model's and skipped, so `verify --recompute --model good --model dynamic` called the store damaged); a space
    of the model's own fingerprint is still reported, skipped with the adapter's reason."""
    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.representations import recompute_store
    from hf_readonce.representations.base import current_fingerprint

    model, settings, _ = HARNESSES["block_attention_llama"](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    store = RepresentationStore(tmp_path / "store")
    fill_store(adapter, store, DOCUMENTS, store_dtype="float32")
    dynamic = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**{
        **model.config.to_dict(), "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}))
    assert recompute_store(store, dynamic, tokenizer, 1) == []
    assert [report.skipped for report in recompute_store(store, model, tokenizer, 1)] == [None]
    # a space of the dynamic model's own fingerprint (written around the adapter): reported, not recomputed
    tensors = store.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(DOCUMENTS[0])])[0]
    store.put(current_fingerprint(dynamic), adapter.settings(), content_hash(DOCUMENTS[0]), tensors, dtype="float32")
    (report,) = recompute_store(store, dynamic, tokenizer, 1)
    assert report.fingerprint == current_fingerprint(dynamic) and "rope_type 'dynamic'" in report.skipped


def test_readtwice_entity_spans_padded_to_their_batch_still_recompute(tokenizer):
    """ReadTwice documents stored with `entity_spans` padded (-1) beyond their own most mentions, as a batch padded
    them before the adapter cut them to the document's own width, recompute to themselves from their tokens and
    from their text (no tensor named as mismatched)."""
    model, settings, _ = HARNESSES["readtwice_bert"](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    for text, tensors in zip(DOCUMENTS, adapter.encode(DOCUMENTS), strict=True):
        spans = tensors["entity_spans"]
        padded = {**tensors, "entity_spans": torch.nn.functional.pad(spans, (0, 0, 0, 3), value=-1)}
        assert torch.equal(adapter.comparable(padded)["entity_spans"], spans)
        for given in (text, None):
            check = adapter.check_recompute(padded, given)
            assert check.ok and not check.mismatched and check.max_abs_diff < 1e-5, check
