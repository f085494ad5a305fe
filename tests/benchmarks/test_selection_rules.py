"""benchmarks/selection_rules.py: its `base` rule is the library's selection (same caches as `selective_recompute`
on a tiny random Llama), every rule's schedule recomputes the same mean fraction, and a bad ratio exits 2."""

import math

import pytest
import torch

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
from hf_readonce.models.block_attention_llama import modeling_block_attention_llama as bam
from tests.conftest import load_benchmark

TINY = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def rules():
    """`benchmarks/selection_rules.py` as a module."""
    return load_benchmark("selection_rules")


def _caches(model):
    generator = torch.Generator().manual_seed(3)
    docs = [torch.randint(3, TINY["vocab_size"], (1, n), generator=generator) for n in (9, 30, 17)]
    with torch.no_grad():
        return [model.encode_documents(d) for d in docs]


@pytest.mark.parametrize("ratio", [0.0, 0.15, 0.5, 1.0])
def test_base_rule_is_the_library(monkeypatch, ratio):
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**TINY)).eval()
    caches = _caches(model)
    library = bam.selective_recompute(model, caches, ratio)
    monkeypatch.setattr(bam, "_blend_layers", rules().make_blend(rules().RULES["base"], None))
    driver = bam.selective_recompute(model, caches, ratio)
    for layer in range(TINY["num_hidden_layers"]):
        assert torch.equal(library.layers[layer].keys, driver.layers[layer].keys)
        assert torch.equal(library.layers[layer].values, driver.layers[layer].values)


@pytest.mark.parametrize("rule", ["base", "flat", "steep"])
def test_every_schedule_spends_the_same_mean_fraction(rule):
    layers, tokens, ratio = 30, 560, 0.15
    schedule = rules().schedule_of(rules().RULES[rule], ratio, layers, tokens)
    middle = [queries for _, queries in schedule[1:layers - 1]]
    assert len(schedule) == layers and schedule[0] == (tokens, tokens) and schedule[-1][1] == 0
    assert sum(middle) / len(middle) / tokens == pytest.approx(ratio, abs=0.002)
    assert math.ceil(ratio * tokens) in middle or rule != "flat"


def test_bad_ratio_exits_naming_the_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        rules().main(["--ratio", "1.5", "--jsonl", "unused.jsonl"])
    assert exit_info.value.code == 2 and "--ratio" in capsys.readouterr().err
