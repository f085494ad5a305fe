"""benchmarks/bench_longdoc_reuse.py: summaries from stored encoder outputs equal those of re-encoding (every
summary kind, tiny dimensions, real XSum text and the packaged tokenizer), and its FLOP bounds are consistent
(no timing is asserted)."""

import json
import sys

import pytest

from tests.conftest import REPO_ROOT, load_benchmark

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import harness  # noqa: E402


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_longdoc_reuse")


def test_smoke_run_gives_identical_summaries(bench, tmp_path):
    doc = bench.main(["--documents", "1", "--document_tokens", "200", "--d_model", "32", "--heads", "2", "--ffn",
                      "48", "--layers", "1", "--radius", "8", "--store_dtype", "float32", "--repeats", "1", "--json",
                      str(tmp_path / "reuse.json")])
    assert json.loads((tmp_path / "reuse.json").read_text()) == doc and harness.validate(doc) == []
    assert doc["extra"]["identical_summaries"] == f"{len(bench.SUMMARIES)}/{len(bench.SUMMARIES)}"
    m = {entry["name"]: entry for entry in doc["measurements"]}
    # reusing saves S - 1 encoder passes of S: the bound lies between 1 and S, and counting the fill lowers it (at
    # these tiny dimensions the LM head dominates, so they nearly tie)
    with_fill = m["speed-up with the fill counted (re-encode / (fill + reuse))"]["bound"]["value"]
    summaries = m["speed-up of the summaries (re-encode / reuse)"]["bound"]["value"]
    assert 1 < with_fill <= summaries < len(bench.SUMMARIES) + 1
    assert doc["extra"]["store_bytes_per_document"] == 200 * 32 * 4


def test_too_little_text_raises_naming_the_flag(bench, tmp_path):
    data = tmp_path / "tiny.jsonl"
    data.write_text('{"document": "one short article"}\n')
    with pytest.raises(SystemExit, match="--data"):
        bench.main(["--data", str(data), "--documents", "1", "--document_tokens", "100", "--d_model", "16",
                    "--heads", "2", "--ffn", "16", "--layers", "1", "--radius", "4"])


def test_document_beyond_the_positions_exits_naming_the_flag(bench):
    with pytest.raises(SystemExit, match="--document_tokens"):
        bench.main(["--document_tokens", "20000"])


def test_flop_formulas_are_what_torch_counts(bench):
    """`encoder_flops` and `decoder_flops` (the bounds' terms) equal torch's FLOP counter (`harness.count_flops`)
    exactly, on the calls the benchmark times: the encoder forward that re-encoding runs inside `generate`, and
    `generate` of every summary kind of `SUMMARIES` (greedy, beam search, forced prompt) from stored encoder
    outputs. Tiny dimensions (d 32, 4 heads, ffn 48, 2 + 2 layers, r 5), 50 tokens (not a multiple of the
    kernel's 16-query blocks)."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration

    n = 50
    config = LongDocBartConfig(
        vocab_size=101, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=96,
        encoder_attention_type="neighborhood", neighborhood_radius=5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=0, forced_eos_token_id=None, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = LongDocBartForConditionalGeneration(config).eval()
    ids = torch.randint(3, 101, (1, n), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert harness.count_flops(lambda: model.get_encoder()(input_ids=ids, attention_mask=mask)) == \
            bench.encoder_flops(config, n)
        states = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    for summary in bench.SUMMARIES:
        kwargs = dict(max_new_tokens=summary["max_new_tokens"], min_new_tokens=summary["max_new_tokens"],
                      num_beams=summary["num_beams"], do_sample=False, early_stopping=False)
        if summary["prompt_tokens"]:
            kwargs["decoder_input_ids"] = torch.cat([torch.zeros(1, 1, dtype=torch.long),
                                                     torch.arange(summary["prompt_tokens"])[None] % 50 + 20], dim=1)
        with torch.no_grad():
            counted = harness.count_flops(lambda kwargs=kwargs: model.generate(
                encoder_outputs=BaseModelOutput(last_hidden_state=states.clone()), attention_mask=mask, **kwargs))
        assert counted == bench.decoder_flops(config, n, summary, 101), summary["name"]
