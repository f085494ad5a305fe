"""Windowed perplexity (disjoint / overlapped / sliding execution) for plain and recurrent causal LMs."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from hf_readonce import RecurrentGPT2Config
from hf_readonce.models.recurrent.convert_to_recurrent import to_recurrent
from hf_readonce.tasks.language_modeling import stream_samples
from hf_readonce.tasks.perplexity import evaluate_perplexity, flops_per_token

TINY = dict(vocab_size=99, n_positions=32, n_embd=32, n_layer=3, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)


@pytest.fixture(scope="module")
def plain():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(**TINY)).eval()


def doc(length, seed=3):
    return torch.randint(1, 99, (length,), generator=torch.Generator().manual_seed(seed))


def test_one_window_equals_the_models_own_loss(plain):
    x = doc(20)
    result = evaluate_perplexity(plain, x, window_size=32, num_words=10)
    with torch.no_grad():
        loss = plain(x[None], labels=x[None]).loss
    assert result.num_tokens == 19 and result.num_windows == 1 and result.tokens_read == 20
    assert result.token_perplexity == pytest.approx(math.exp(float(loss)), rel=1e-5)
    assert result.word_perplexity == pytest.approx(math.exp(float(loss) * 19 / 10), rel=1e-5)


@pytest.mark.parametrize("overlap", [0, 3, 7])
def test_windows_score_every_token_once(plain, overlap):
    x, w = doc(29), 8
    result = evaluate_perplexity(plain, x, window_size=w, window_overlap=overlap, batch_size=3)
    nll, start, first = 0.0, 0, True
    with torch.no_grad():
        while True:  # reference: one window at a time; position p predicts token start + p + 1
            end = min(start + w, len(x))
            logits = plain(x[None, start:end]).logits[0]
            new_from = 0 if first else overlap
            stop = min(end + 1, len(x))
            nll += float(F.cross_entropy(logits[new_from : stop - start - 1], x[start + new_from + 1 : stop],
                                         reduction="sum"))
            if end >= len(x):
                break
            start, first = end - overlap, False
    assert result.num_tokens == 28
    assert result.nll == pytest.approx(nll, rel=1e-5)
    assert result.tokens_read == 29 + overlap * (result.num_windows - 1)


def test_recurrent_model_and_its_settings(plain):
    recurrent = to_recurrent(plain, window_size=8, window_overlap=0, recurrence_hidden_sizes=[16]).eval()
    x = doc(30)
    # within one window the recurrent model is the plain model
    assert evaluate_perplexity(recurrent, x[:8], window_size=8).nll == pytest.approx(
        evaluate_perplexity(plain, x[:8], window_size=8).nll, rel=1e-5)
    with torch.no_grad():
        recurrent.recurrence.pooling.layer_logits.normal_()
    result = evaluate_perplexity(recurrent, x, window_size=10, window_overlap=3)
    assert (recurrent.config.window_size, recurrent.config.window_overlap) == (8, 0)  # restored
    with torch.no_grad():
        recurrent.config.window_size, recurrent.config.window_overlap = 10, 3
        expected = float(recurrent(x[None], labels=x[None], use_cache=False).loss) * 29
    assert result.nll == pytest.approx(expected, rel=1e-5)
    assert abs(result.nll - evaluate_perplexity(plain, x, window_size=10, window_overlap=3).nll) > 1e-3  # memory used


def test_bad_arguments(plain):
    with pytest.raises(ValueError, match="window_overlap"):
        evaluate_perplexity(plain, doc(10), window_size=8, window_overlap=8)
    with pytest.raises(ValueError, match="window_size"):
        evaluate_perplexity(plain, doc(10), window_size=64)
    with pytest.raises(ValueError, match="input_ids"):
        evaluate_perplexity(plain, doc(1), window_size=8)
    with pytest.raises(TypeError, match="input_ids"):
        evaluate_perplexity(plain, [1, 2, 3], window_size=8)
    with pytest.raises(TypeError, match="GPT2LMHeadModel or LlamaForCausalLM"):
        to_recurrent(torch.nn.Linear(2, 2))
    assert stream_samples(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_flops_per_token():
    config = GPT2Config()  # GPT-2 small
    disjoint = flops_per_token(config, 300, 0)
    assert flops_per_token(config, 300, 30) == pytest.approx(disjoint * 300 / 270)
    recurrent = RecurrentGPT2Config(window_size=300)
    assert 1.0 < flops_per_token(recurrent, 300, 0, recurrent=True) / disjoint < 1.01
