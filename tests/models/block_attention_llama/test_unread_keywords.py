"""Block-attention Llama: the keywords of `TransformersKwargs` that nothing would read in a call are refused by name:
flash attention's packing arguments without flash attention or under the mask the model builds for `block_ids` or
`document_caches`, `seq_idx`, and `is_causal=False` under that mask; the rest is Llama's forward, read as Llama reads
it."""

import pytest
import torch

from tests.conftest import refuses_unread_keyword
from tests.models.block_attention_llama.test_modeling_block_attention_llama import ids, plain, tiny

PACKING = {"cu_seq_lens_q": torch.tensor([0, 5, 12], dtype=torch.int32),
           "cu_seq_lens_k": torch.tensor([0, 5, 12], dtype=torch.int32), "max_length_q": 7, "max_length_k": 7,
           "seq_idx": torch.tensor([[0] * 5 + [1] * 7], dtype=torch.int32)}


@pytest.mark.parametrize("name", sorted(PACKING))
def test_packing_arguments_nothing_reads_are_refused(name):
    """Under SDPA (or eager) no layer reads flash attention's packing arguments, nor, whatever the implementation,
    `seq_idx`: a flattened batch of two sequences was read as one, the second attending to the first, without a
    word. Refused with or without `block_ids` / `document_caches`."""
    model, tokens, value = tiny(), ids(12, seed=1), {name: PACKING[name]}
    block_ids = torch.tensor([[0] * 5 + [1] * 4 + [-1] * 3])
    caches = model.encode_documents(ids(7, seed=2))
    for call, where in [(lambda: model(tokens, **value), "BlockAttentionLlamaForCausalLM"),
                        (lambda: model.model(tokens, **value), "BlockAttentionLlamaModel"),
                        (lambda: model(tokens, block_ids=block_ids, **value), "BlockAttentionLlamaForCausalLM"),
                        (lambda: model.model(tokens, block_ids=block_ids, **value), "BlockAttentionLlamaModel"),
                        (lambda: model(tokens, document_caches=caches, **value), "BlockAttentionLlamaForCausalLM")]:
        with refuses_unread_keyword(name, rf"^{where}\.forward\(\) got `{name}`, which it does not support"):
            call()


def test_flash_attention_reads_the_packing_arguments_without_the_model_s_own_mask():
    """With flash attention, Llama's forward reads `cu_seq_lens_*` / `max_length_*` (its varlen kernel): passed on,
    as by `LlamaForCausalLM`; with `block_ids` or `document_caches` the model's mask would not, and they are refused."""
    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import (
        _block_attention_unread_keywords,
    )

    config = tiny().config
    config._attn_implementation = "flash_attention_2"
    names = {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"}
    assert not names & _block_attention_unread_keywords(config, None, None).keys()
    assert names <= _block_attention_unread_keywords(config, torch.zeros(1, 3), None).keys()
    assert names <= _block_attention_unread_keywords(config, None, object()).keys()


def test_a_continuous_batching_step_reads_the_packing_arguments_without_the_model_s_own_mask():
    """In a step of continuous batching (a paged cache: `paged=True`) Llama's paged cache and attention read the
    packed batch's `cu_seq_lens_*` / `max_length_*` whatever the attention implementation: passed on, as by
    `LlamaForCausalLM`; with `block_ids` or `document_caches` still refused (the forward refuses a paged cache there
    first, `test_continuous_batching.py`)."""
    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import (
        _block_attention_unread_keywords,
    )

    config = tiny().config
    names = {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"}
    assert names <= _block_attention_unread_keywords(config, None, None).keys()
    assert not names & _block_attention_unread_keywords(config, None, None, paged=True).keys()
    assert names <= _block_attention_unread_keywords(config, torch.zeros(1, 3), None, paged=True).keys()
    assert names <= _block_attention_unread_keywords(config, None, object(), paged=True).keys()
    assert "seq_idx" in _block_attention_unread_keywords(config, None, None, paged=True)


def test_is_causal_false_under_the_model_s_own_mask_is_refused():
    """With `block_ids` the model's mask made `is_causal=False` a no-op; after `document_caches` it read the question
    bidirectionally. `is_causal=True`, what the mask does, passes."""
    model, tokens = tiny(), ids(12, seed=1)
    block_ids = torch.tensor([[0] * 5 + [1] * 4 + [-1] * 3])
    caches = model.encode_documents(ids(7, seed=2))
    for call in (lambda: model(tokens, block_ids=block_ids, is_causal=False),
                 lambda: model.model(tokens, block_ids=block_ids, is_causal=False),
                 lambda: model(tokens, document_caches=caches, is_causal=False)):
        with pytest.raises(ValueError, match=r"\.forward\(\) got `is_causal`, which it does not support"):
            call()
    expected = model(tokens, block_ids=block_ids).logits
    torch.testing.assert_close(model(tokens, block_ids=block_ids, is_causal=True).logits, expected)


def test_without_them_the_forward_reads_position_ids_and_is_causal_as_llama():
    """No block mask, no document caches: `LlamaForCausalLM`'s forward. Packed sequences given by `position_ids` only
    (`DataCollatorWithFlattening`'s default) are read apart as Llama reads them (only without a cache: transformers
    looks for them when it makes none), and `is_causal=False` reads bidirectionally, as Llama."""
    model = tiny()
    llama = plain(model)
    first, second = ids(5, seed=1), ids(7, seed=2)
    packed = torch.cat([first, second], dim=1)
    positions = torch.cat([torch.arange(5), torch.arange(7)])[None]
    out = model(packed, position_ids=positions, use_cache=False).logits
    torch.testing.assert_close(out, llama(packed, position_ids=positions, use_cache=False).logits)
    torch.testing.assert_close(out[:, 5:], model(second).logits, atol=1e-5, rtol=1e-5)  # not attending to `first`
    torch.testing.assert_close(model(packed, is_causal=False).logits, llama(packed, is_causal=False).logits)
