"""benchmarks/bench_deformer.py: the FLOP formulas behind its bound equal torch's FLOP counter on the calls it times
(a tiny random BERT; no timing)."""


import pytest

from tests.conftest import load_benchmark


def bench():
    """`benchmarks/bench_deformer.py` as a module."""
    return load_benchmark("bench_deformer")


@pytest.mark.parametrize("k", [1, 3])
def test_path_flops_are_what_torch_counts(k):
    """`path_flops` (the bound's numerator and denominator) equals `harness.count_flops` exactly on the two timed
    calls, `BertForQuestionAnswering` on question + passage and the cached DeFormer on the question, per batch row;
    the passage encoding is k layers on the passage. Hidden 32, 4 heads, ffn 48, 4 layers, q 5, p 11, batch 2."""
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering

    module = bench()
    import harness

    common = dict(vocab_size=97, max_position_embeddings=64, hidden_size=32, num_hidden_layers=4,
                  num_attention_heads=4, intermediate_size=48)
    torch.manual_seed(0)
    bert = BertForQuestionAnswering(BertConfig(**common)).eval()
    deformer = DeformerBertForQuestionAnswering(DeformerBertConfig(num_decomposed_layers=k, **common)).eval()
    deformer.load_state_dict(bert.state_dict())
    question, passage, pair, types = module.make_inputs(2, 5, 11)
    question, passage, pair = question % 97, passage % 97, pair % 97
    with torch.no_grad():
        states = deformer.encode_passages(passage)
        counted_bert = harness.count_flops(lambda: bert(pair, token_type_ids=types))
        counted_cached = harness.count_flops(lambda: deformer(input_ids=question, passage_states=states))
        counted_encode = harness.count_flops(lambda: deformer.encode_passages(passage))
    full, cached = module.path_flops(5, 11, 32, 48, 4, k)
    assert (counted_bert, counted_cached) == (2 * full, 2 * cached)
    assert counted_encode == 2 * k * module.flops_per_layer(11, 32, 48)
    assert module.theoretical_ratio(5, 11, 32, 48, 4, k) == counted_bert / counted_cached
