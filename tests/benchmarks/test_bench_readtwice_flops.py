"""benchmarks/bench_readtwice.py: the FLOP figure beside its time ratios is torch's FLOP count of the timed forward
calls, not the parameter ratio (a tiny random BERT and ReadTwice-E at the script's --quick dimensions; no timing)."""


import pytest

from tests.conftest import load_benchmark


def bench():
    """`benchmarks/bench_readtwice.py` as a module."""
    return load_benchmark("bench_readtwice")


def test_forward_flops_against_the_parameter_ratio():
    """`forward_flops` at the --quick dimensions (hidden 64, 4 heads, ffn 128, 4 layers and 2 second-read layers, 3
    segments of 64 tokens, a mention every 12 tokens: the script's --quick run): BERT's count is exactly its layers (the formula of
    `bench_deformer.flops_per_layer`, checked there) and its span head; ReadTwice's is that plus its 2 second-read
    layers and its memory, so the FLOP ratio, 1.57x, is above the parameter ratio, 1.41x, that the benchmark used
    as its bound (the word embeddings count as parameters but do no FLOPs)."""
    import torch

    module = bench()
    deformer = load_benchmark("bench_deformer")
    dims, segments, length = module.QUICK, 3, 64
    bert, readtwice = module.build(dims, "entity", True, 100)
    ids = torch.randint(5, dims["vocab_size"], (segments, length), generator=torch.Generator().manual_seed(1))
    common = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    extra = dict(document_ids=torch.zeros(segments, dtype=torch.long),
                 entity_spans=module.synthetic_mentions(segments, length, 12))
    flops_bert, flops_readtwice = module.forward_flops(bert, readtwice, common, extra)
    hidden, ffn, layers = dims["hidden_size"], dims["intermediate_size"], dims["num_hidden_layers"]
    layer = segments * deformer.flops_per_layer(length, hidden, ffn)
    assert flops_bert == layers * layer + segments * deformer.span_head_flops(length, hidden)
    assert flops_readtwice > flops_bert + readtwice.config.num_second_read_layers * layer
    params = sum(p.numel() for p in readtwice.parameters()) / sum(p.numel() for p in bert.parameters())
    assert (round(flops_readtwice / flops_bert, 2), round(params, 2)) == (1.57, 1.41)


def test_read_once_bound_is_the_flop_ratio_of_the_timed_calls():
    """The read-once ratio (first read recomputed per question / encoded once and stored) gets a FLOP bound counted
    on its two timed calls (at --quick dimensions, 2 rounds): recomputing reads the document once per question."""
    import argparse

    import torch

    module = bench()
    args = argparse.Namespace(segments=3, segment_length=64, question_length=8, questions=4, mention_every=12,
                              memory_type="entity", top_k=100, repeats=2)
    once = module.read_once(args, module.QUICK, torch.device("cpu"))
    assert once["flop_bound"] == pytest.approx(once["gflops_recomputed"] / once["gflops_stored"])
    assert 1.5 < once["flop_bound"] < args.questions  # the questions' own second reads are paid on both sides
