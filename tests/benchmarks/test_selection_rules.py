"""benchmarks/selection_rules.py: its `base` rule is the library's selection (same caches as `selective_recompute`
on a tiny random Llama), every rule's schedule recomputes the same mean fraction, the query-aware rules read the
question's attention as the full prompt has it, the oracle patches in the full prompt's numbers at the scheduled
number of tokens, `--summarize --json` writes the agreement table, and a bad ratio exits 2."""

import json
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


def _fresh_layers(model, caches):
    """The plain composition of `caches` once, and a `compose_layer(i)` for a blend that hands out fresh copies of
    layer i's keys and values (a blend writes into what it is given)."""
    with torch.no_grad():
        keys, values = bam._compose_row(model, model.model, caches, 0.0, "caches")
    return (keys, values), lambda i: (keys[i].clone(), values[i].clone())


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


def test_query_rules_read_the_questions_attention_as_the_full_prompt_has_it():
    """`qmass` / `qmass_dev` carry the question through the blend layers: at ratio 1 (every token exact) the mass
    the question puts on each document token at each layer is the full prompt's attention (eager attention
    weights of the question's rows, summed over heads and question tokens), and the cache is the library's."""
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**TINY)).eval()
    model.set_attn_implementation("eager")
    caches = _caches(model)
    ids = bam._document_ids(caches, "x")
    question = torch.randint(3, TINY["vocab_size"], (5,), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        attentions = model(torch.cat([ids, question])[None], output_attentions=True).attentions
        library = bam.selective_recompute(model, caches, 1.0)
    _, compose_layer = _fresh_layers(model, caches)
    for name in ("qmass", "qmass_dev"):
        trace = []
        blend = rules().make_blend(rules().RULES[name], None, question, trace=trace)
        with torch.no_grad():
            layers = list(blend(model.model, compose_layer, TINY["num_hidden_layers"], ids.numel(), ids, 1.0))
        assert len(trace) == TINY["num_hidden_layers"] - 1  # every layer with queries
        for index, mass in enumerate(trace):
            expected = attentions[index][0, :, ids.numel():, :ids.numel()].sum(dim=(0, 1))
            torch.testing.assert_close(mass, expected, rtol=1e-4, atol=1e-5)
        for index, (keys, values) in enumerate(layers):
            torch.testing.assert_close(keys, library.layers[index].keys[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(values, library.layers[index].values[0], rtol=1e-5, atol=1e-5)


def test_oracle_patches_the_full_prompts_numbers():
    """`oracle`: at ratio 1 the full prompt's cache; at ratio 0 the plain composition; in between every layer the
    library recomputes at holds the full prompt's keys/values at exactly as many tokens as it recomputes there."""
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**TINY)).eval()
    caches = _caches(model)
    ids = bam._document_ids(caches, "x")[None]
    tokens = ids.shape[1]
    with torch.no_grad():
        reference = model(ids, use_cache=True).past_key_values
    composed, compose_layer = _fresh_layers(model, caches)
    for ratio in (0.0, 0.3, 1.0):
        patched = rules().make_oracle(rules().RULES["oracle"], reference)
        with torch.no_grad():
            layers = list(patched(model.model, compose_layer, TINY["num_hidden_layers"], tokens, None, ratio))
        schedule = bam.recompute_schedule(ratio, TINY["num_hidden_layers"], tokens)
        for index, (keys, values) in enumerate(layers):
            exact = (values == reference.layers[index].values[0]).all(dim=(0, 2))
            changed = (values != composed[1][index]).any(dim=(0, 2))
            assert int(changed.sum()) <= schedule[index][0] <= int(exact.sum())
            if ratio == 1.0:
                assert torch.equal(keys, reference.layers[index].keys[0])
            if ratio == 0.0:
                assert torch.equal(values, composed[1][index])


def test_summarize_writes_agreement_per_rule_and_dataset(tmp_path):
    rows = [{"dataset": "disfl_qa", "id": "a", "answers": {"full": "the red house", "oracle": "the red house"},
             "flop_fraction": {"oracle": 0.2}},
            {"dataset": "disfl_qa", "id": "b", "answers": {"full": "Paris", "oracle": "London"},
             "flop_fraction": {"oracle": 0.4}}]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rules().summarize(str(source), str(tmp_path / "out.json"))
    written = json.loads((tmp_path / "out.json").read_text())
    entry = written["rules"]["oracle"]["disfl_qa"]
    assert entry["questions"] == 2 and entry["agreement_em"] == 50.0 and entry["agreement_f1"] == 50.0
    assert entry["flop_fraction_mean"] == pytest.approx(0.3) and "quoref" not in written["rules"]["oracle"]
