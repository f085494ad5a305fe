"""Windowed perplexity (disjoint / overlapped / sliding execution) for plain and recurrent causal LMs."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from hf_readonce import RecurrentGPT2Config
from hf_readonce.models.recurrent.convert_to_recurrent import to_recurrent
from hf_readonce.tasks.language_modeling import stream_samples
from hf_readonce.tasks.perplexity import evaluate_perplexity, flops_per_token, recurrence_zeroed

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
    result = evaluate_perplexity(recurrent, x, window_size=10, window_overlap=3, allow_overlap_mismatch=True)
    assert (recurrent.config.window_size, recurrent.config.window_overlap) == (8, 0)  # restored
    with torch.no_grad():
        recurrent.config.window_size, recurrent.config.window_overlap = 10, 3
        expected = float(recurrent(x[None], labels=x[None], use_cache=False).loss) * 29
    assert result.nll == pytest.approx(expected, rel=1e-5)
    assert abs(result.nll - evaluate_perplexity(plain, x, window_size=10, window_overlap=3).nll) > 1e-3  # memory used


def test_recurrent_overlap_must_be_the_trained_one(plain):
    """§4.2 / §5: a recurrent model trained at one overlap is not evaluated at another (the recurrent vector would
    summarise the wrong tokens); the mismatch is an error unless explicitly allowed."""
    recurrent = to_recurrent(plain, window_size=8, window_overlap=0, recurrence_hidden_sizes=[16]).eval()
    x = doc(30)
    with pytest.raises(ValueError, match=r"window_overlap=3.*window_overlap=0|window_overlap=0.*window_overlap=3"):
        evaluate_perplexity(recurrent, x, window_size=8, window_overlap=3)
    matched = evaluate_perplexity(recurrent, x, window_size=8, window_overlap=0)
    assert matched.window_overlap == 0
    allowed = evaluate_perplexity(recurrent, x, window_size=8, window_overlap=3, allow_overlap_mismatch=True)
    assert allowed.window_overlap == 3 and recurrent.config.window_overlap == 0
    # a plain model has no trained overlap: any overlap is fine without the flag
    evaluate_perplexity(plain, x, window_size=8, window_overlap=3)


def test_bad_arguments(plain):
    with pytest.raises(ValueError, match="window_overlap"):
        evaluate_perplexity(plain, doc(10), window_size=8, window_overlap=8)
    with pytest.raises(ValueError, match="window_size"):
        evaluate_perplexity(plain, doc(10), window_size=64)
    with pytest.raises(ValueError, match="input_ids"):
        evaluate_perplexity(plain, doc(1), window_size=8)
    with pytest.raises(TypeError, match="input_ids"):
        evaluate_perplexity(plain, [1, 2, 3], window_size=8)
    # a zero batch was range()'s "arg 3 must not be zero"; a word count of 0 or below gave no or a meaningless word ppl
    with pytest.raises(ValueError, match="`batch_size` must be a positive int"):
        evaluate_perplexity(plain, doc(10), window_size=8, batch_size=0)
    for words in (0, -3, 2.5):
        with pytest.raises(ValueError, match="`num_words` must be a positive int"):
            evaluate_perplexity(plain, doc(10), window_size=8, num_words=words)
    for words in (True, torch.tensor(True)):
        with pytest.raises(ValueError, match="`num_words` must be a positive int"):
            evaluate_perplexity(plain, doc(10), window_size=8, num_words=words)
    # a word count counted with numpy or torch is the whole number it holds (it worked before the check)
    expected = evaluate_perplexity(plain, doc(10), window_size=8, num_words=5, batch_size=2).word_perplexity
    for words, batch in ((np.int64(5), np.int64(2)), (torch.tensor(5), torch.tensor(2))):
        result = evaluate_perplexity(plain, doc(10), window_size=8, num_words=words, batch_size=batch)
        assert result.word_perplexity == expected and type(result.num_words) is int
    with pytest.raises(TypeError, match="GPT2LMHeadModel or LlamaForCausalLM"):
        to_recurrent(torch.nn.Linear(2, 2))
    assert stream_samples(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_flops_per_token():
    config = GPT2Config()  # GPT-2 small
    disjoint = flops_per_token(config, 300, 0)
    assert flops_per_token(config, 300, 30) == pytest.approx(disjoint * 300 / 270)
    recurrent = RecurrentGPT2Config(window_size=300)
    assert 1.0 < flops_per_token(recurrent, 300, 0, recurrent=True) / disjoint < 1.01


def _run_recurrent_lm_script():
    """`examples/language-modeling/run_recurrent_lm.py`, imported as a module (the example is no package)."""
    import importlib.util

    from tests.conftest import REPO_ROOT

    path = REPO_ROOT / "examples" / "language-modeling" / "run_recurrent_lm.py"
    spec = importlib.util.spec_from_file_location("run_recurrent_lm", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_table2_script_trains_one_recurrent_model_per_overlap(tmp_path):
    """`run_recurrent_lm.py` refuses, before loading any model, to test a recurrent model at an overlap it was not
    trained with, and defaults a recurrent run's overlaps to its training overlap."""
    from tests.conftest import REPO_ROOT

    script = _run_recurrent_lm_script()
    with pytest.raises(ValueError, match=r"--train_window_overlap 0 .* \[5, 30\]"):
        script.main(["--recurrent", "true", "--eval_overlaps", "0,5,30", "--output_dir", str(tmp_path)])
    args = script.RecurrentLMArguments(recurrent=True, train_window_overlap=5)
    script.resolve_overlaps(args)
    assert (args.eval_overlaps, args.validation_overlaps) == ("5", "5")
    baseline = script.RecurrentLMArguments(recurrent=False)
    script.resolve_overlaps(baseline)
    assert (baseline.eval_overlaps, baseline.validation_overlaps) == ("0,5,30", "0")
    table = (REPO_ROOT / "examples" / "language-modeling" / "austen_table2.sh").read_text()
    assert "--train_window_overlap \"$overlap\"" in table
    # a data folder without the books is named before any model is loaded (the folder that holds austen/)
    with pytest.raises(FileNotFoundError, match=r"--data_dir .*: no austen/emma.txt \(the folder that holds austen/"):
        script.main(["--data_dir", str(tmp_path / "austen"), "--do_train", "--output_dir", str(tmp_path)])


def test_example_prints_the_plain_models_perplexity_beside_the_recurrent_ones(tmp_path, capsys):
    """`run_recurrent_lm.py --recurrent true --do_eval` prints and records, beside each perplexity, the baseline: the
    plain model with the same weights less the recurrence, on the same windows (it printed the recurrent figure
    alone)."""
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    script = _run_recurrent_lm_script()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(**{**TINY, "vocab_size": tokenizer.vocab_size})).save_pretrained(tmp_path / "gpt2")
    tokenizer.save_pretrained(tmp_path / "gpt2")
    (tmp_path / "data" / "austen").mkdir(parents=True)
    for name in ("northangerabbey", "persuasion"):
        (tmp_path / "data" / "austen" / f"{name}.txt").write_text(f"{name} said emma to harriet and knightley. " * 12)
    torch.manual_seed(1)
    metrics = script.main(["--model_name_or_path", str(tmp_path / "gpt2"), "--recurrent", "true", "--window_size", "16",
                           "--train_window_overlap", "4", "--do_eval", "--max_eval_tokens", "60", "--data_dir",
                           str(tmp_path / "data"), "--use_cpu", "--report_to", "none", "--output_dir",
                           str(tmp_path / "out")])
    printed = capsys.readouterr().out
    plain = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    for split, name in (("validation", "northangerabbey"), ("test", "persuasion")):
        row = metrics[f"{split}_{name}_overlap4"]
        tokens = torch.tensor(tokenizer(f"{name} said emma to harriet and knightley. " * 12,
                                        add_special_tokens=False)["input_ids"][:60])
        expected = evaluate_perplexity(plain, tokens, window_size=16, window_overlap=4)
        assert row["plain_token_perplexity"] == pytest.approx(expected.token_perplexity, rel=1e-5)
        assert row["plain_token_perplexity"] != pytest.approx(row["token_perplexity"])  # the recurrence is used
        assert f"{split} {name} overlap 4: token ppl {row['token_perplexity']:.3f}" in printed
        assert f"without the recurrence: token ppl {row['plain_token_perplexity']:.3f}" in printed


def test_example_gives_a_saved_recurrent_checkpoint_its_plain_baseline(tmp_path):
    """A recurrent checkpoint (what `--do_train --recurrent true` saves) scored with `--recurrent false --do_eval`
    gets its baseline, the plain model with its weights less the recurrence (the baseline was built from the loaded
    config's class, the recurrent one, and failed on the missing `recurrence.*` weights)."""
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    script = _run_recurrent_lm_script()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    plain = GPT2LMHeadModel(GPT2Config(**{**TINY, "vocab_size": tokenizer.vocab_size})).eval()
    to_recurrent(plain, window_size=16, window_overlap=4).save_pretrained(tmp_path / "recurrent")
    tokenizer.save_pretrained(tmp_path / "recurrent")
    (tmp_path / "data" / "austen").mkdir(parents=True)
    for name in ("northangerabbey", "persuasion"):
        (tmp_path / "data" / "austen" / f"{name}.txt").write_text(f"{name} said emma to harriet and knightley. " * 12)
    metrics = script.main(["--model_name_or_path", str(tmp_path / "recurrent"), "--recurrent", "false",
                           "--window_size", "16", "--eval_overlaps", "4", "--validation_overlaps", "4", "--do_eval",
                           "--max_eval_tokens", "60", "--data_dir", str(tmp_path / "data"), "--use_cpu",
                           "--report_to", "none", "--output_dir", str(tmp_path / "out")])
    tokens = torch.tensor(tokenizer("persuasion said emma to harriet and knightley. " * 12,
                                    add_special_tokens=False)["input_ids"][:60])
    expected = evaluate_perplexity(plain, tokens, window_size=16, window_overlap=4)
    row = metrics["test_persuasion_overlap4"]
    assert row["plain_token_perplexity"] == pytest.approx(expected.token_perplexity, rel=1e-5)
    assert row["plain_token_perplexity"] != pytest.approx(row["token_perplexity"])  # the recurrent model's own


def test_recurrent_evaluation_memory_does_not_grow_with_the_document():
    """Issue 11 (item 2): `evaluate_perplexity` streams a recurrent model window by window (no `(T, vocab)` logits
    nor `(T, hidden)` states for the whole document): the peak of evaluating 20 windows stays within 1.3x of one
    window's, and the NLL equals the one-head path's (the model with gradients enabled) to 1e-5."""
    from tests.models.recurrent.test_modeling_recurrent import LiveBytes

    torch.manual_seed(0)
    plain = GPT2LMHeadModel(GPT2Config(**{**TINY, "vocab_size": 8192})).eval()
    recurrent = to_recurrent(plain, window_size=32, window_overlap=4, recurrence_hidden_sizes=[16]).eval()
    with torch.no_grad():
        recurrent.recurrence.pooling.layer_logits.normal_()

    def peak(length):
        x = torch.randint(1, 8192, (length,), generator=torch.Generator().manual_seed(length))
        with LiveBytes() as tracker:
            result = evaluate_perplexity(recurrent, x, window_size=32, window_overlap=4)
        return x, result, tracker.peak

    _, _, one = peak(32)
    x, result, many = peak(32 + 19 * 28)
    assert result.num_windows == 20
    assert many <= 1.3 * one, (one, many)
    with torch.enable_grad():  # the old path: all windows' states, one LM head over the whole stream
        loss = recurrent(x[None], labels=x[None], use_cache=False).loss
    assert result.nll == pytest.approx(float(loss.detach()) * (len(x) - 1), rel=1e-5)


def test_recurrence_zeroed_equals_a_recurrence_whose_output_layer_is_zero(plain):
    torch.manual_seed(1)
    model = to_recurrent(GPT2LMHeadModel(GPT2Config(**TINY)), window_size=8, window_overlap=0,
                         recurrence_layer=1).eval()
    x = doc(40)
    with torch.no_grad():
        last = model.recurrence.ffn.layers[-1]
        last.weight.normal_(std=0.5)
        last.bias.normal_(std=0.5)
    used = evaluate_perplexity(model, x, window_size=8).nll
    with recurrence_zeroed(model):
        zeroed = evaluate_perplexity(model, x, window_size=8).nll
    after = evaluate_perplexity(model, x, window_size=8).nll  # the hook is gone on exit
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
    reference = evaluate_perplexity(model, x, window_size=8).nll
    assert zeroed == pytest.approx(reference, rel=1e-6)
    assert after == pytest.approx(used, rel=1e-6) and abs(used - zeroed) > 1e-3
    with pytest.raises(TypeError, match="`model` must be a recurrent model"):
        with recurrence_zeroed(plain):
            pass


def test_example_seeds_the_new_recurrence_weights(tmp_path):
    """`run_recurrent_lm.py --recurrent true` gives the same weights and loss for the same `--seed` whatever torch's
    state before: the recurrence weights `to_recurrent` adds are drawn when the model is built, before Trainer seeds
    anything."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from hf_readonce.tasks.language_modeling import AUSTEN_SPLITS
    from hf_readonce.weights import minilm_path

    script = _run_recurrent_lm_script()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(**{**TINY, "vocab_size": tokenizer.vocab_size})).save_pretrained(tmp_path / "gpt2")
    tokenizer.eos_token = tokenizer.sep_token  # the training stream ends each book with it
    tokenizer.save_pretrained(tmp_path / "gpt2")
    (tmp_path / "data" / "austen").mkdir(parents=True)
    for name in AUSTEN_SPLITS["train"]:
        (tmp_path / "data" / "austen" / f"{name}.txt").write_text(f"{name} said emma to harriet and knightley. " * 12)
    runs = []
    for state in (1, 2):
        torch.manual_seed(state)  # what ran before (another run, a notebook cell) must not matter
        out = tmp_path / f"out{state}"
        metrics = script.main(["--model_name_or_path", str(tmp_path / "gpt2"), "--recurrent", "true", "--window_size",
                               "16", "--windows_per_sample", "2", "--max_train_tokens", "200", "--do_train",
                               "--max_steps", "1", "--per_device_train_batch_size", "2", "--save_strategy", "no",
                               "--data_dir", str(tmp_path / "data"), "--use_cpu", "--report_to", "none", "--seed", "7",
                               "--output_dir", str(out)])
        runs.append((metrics["train_loss"], load_file(out / "model.safetensors")))
    (loss_a, weights_a), (loss_b, weights_b) = runs
    assert any(name.startswith("recurrence.") for name in weights_a)
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)
    assert loss_a == loss_b
