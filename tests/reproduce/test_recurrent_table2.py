"""reproduce/recurrent_table2.py --smoke: pretrained, baseline and a recurrent model at overlap 0 from a tiny random
Llama, two CPU steps, the pretrained model's perplexity beside."""

from tests.reproduce.conftest import check_results, entry_point


def test_recurrent_table2_smoke(tmp_path, data_dir, tiny_llama):
    table2 = entry_point("recurrent_table2")
    out = tmp_path / "out"
    assert table2.main(["--smoke", "--warm_start", str(tiny_llama), "--overlaps", "0",
                        "--recurrence_learning_rates", "same", "--output_dir", str(out),
                        "--data_dir", str(data_dir)]) == 0
    results = check_results(out / "results.json", rows=2)
    baseline, recurrent = results["rows"]
    assert (baseline["run"], recurrent["run"]) == ("baseline", "recurrent_ov0") and recurrent["recurrent"]
    assert baseline["train_steps"] == recurrent["train_steps"] == 2
    assert recurrent["test_token_perplexity"] > 1 and recurrent["test_token_perplexity_recurrence_zeroed"] > 1
    assert results["baselines"]["pretrained"]["overlap0"]["test_token_perplexity"] > 1


def test_a_run_that_only_scores_uses_the_training_arguments_device(tmp_path, data_dir, tiny_llama, monkeypatch):
    """The pretrained row (`--do_eval` without `--do_train`) never builds a Trainer, which is what moves a model to
    the GPU: the script moves it to `TrainingArguments.device` itself (on an H100 the pretrained row was still
    scoring on the CPU when the device call ended). A device other than the CPU ("meta") shows where it is."""
    import importlib.util

    from transformers import TrainingArguments

    from hf_readonce.tasks.perplexity import PerplexityResult
    from tests.conftest import REPO_ROOT

    path = REPO_ROOT / "examples" / "language-modeling" / "run_recurrent_lm.py"
    spec = importlib.util.spec_from_file_location("run_recurrent_lm", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    seen = []

    def scored(model, tokens, *, window_size, window_overlap, num_words):
        seen.append(next(model.parameters()).device.type)
        return PerplexityResult(nll=1.0, num_tokens=2, num_words=num_words, num_windows=1, tokens_read=3,
                                window_size=window_size, window_overlap=window_overlap)

    monkeypatch.setattr(script, "evaluate_perplexity", scored)
    monkeypatch.setattr(TrainingArguments, "device", property(lambda self: __import__("torch").device("meta")))
    script.main(["--model_name_or_path", str(tiny_llama), "--data_dir", str(data_dir), "--window_size", "64",
                 "--max_eval_tokens", "128", "--do_eval", "--recurrent", "false", "--eval_overlaps", "0",
                 "--validation_overlaps", "0", "--report_to", "none", "--output_dir", str(tmp_path / "pretrained")])
    assert seen and set(seen) == {"meta"}
    assert sorted(p.name for p in (tmp_path / "pretrained").iterdir()) == ["lm_results.json"]  # no .tmp left


def test_rows_stopped_at_different_steps_are_flagged():
    """A time budget stops the baseline (windows in parallel) about 4x further than a recurrent model: the results
    and the card say the rows are not at equal training; rows within 10% of each other are not flagged."""
    table2 = entry_point("recurrent_table2")
    rows = [{"run": "baseline", "train_steps": 1782}, {"run": "recurrent_ov0", "train_steps": 468},
            {"run": "recurrent_ov0", "train_steps": None}]
    warning = table2.unequal_steps(rows)
    assert "baseline 1782, recurrent_ov0 468" in warning and "not a comparison at equal training" in warning
    assert table2.unequal_steps([{"run": "a", "train_steps": 2000}, {"run": "b", "train_steps": 1900}]) is None
    assert table2.unequal_steps([{"run": "baseline", "train_steps": 2}]) is None


def test_card_says_not_scored_for_a_row_stopped_before_its_test_book():
    """A recurrent run stopped while scoring (its lm_results.json holds validation only) is a row whose test cell
    reads 'not scored', not an empty '()'."""
    from types import SimpleNamespace

    table2 = entry_point("recurrent_table2")
    args = SimpleNamespace(overlaps=[0, 30], recurrence_learning_rates=["same"], smoke=False, window_size=128)
    rows = [{"run": "recurrent_ov0", "test_overlap": 0, "test_token_perplexity": 30.8,
             "test_token_perplexity_recurrence_zeroed": 31.0, "train_steps": 468},
            {"run": "recurrent_ov30", "test_overlap": 30, "test_token_perplexity": None,
             "test_token_perplexity_recurrence_zeroed": None, "train_steps": 457}]
    baseline = [{"run": "baseline", "test_overlap": o, "test_token_perplexity": None, "train_steps": 1782}
                for o in (0, 30)]
    pretrained = {"pretrained": {f"overlap{o}": {"test_token_perplexity": None} for o in (0, 30)}}
    card = table2.model_card_section(rows + baseline, pretrained, args)
    assert "| recurrent | 30.80 (31.00) | not scored | 468/457 |" in card and "()" not in card
    assert "| pretrained (no fine-tuning) | not scored | not scored | 0 |" in card
    assert "| baseline (fine-tuned, no recurrence) | not scored | not scored | 1782 |" in card


def test_lm_results_hold_null_for_nan(tmp_path):
    """A diverged loss (NaN) is written as null: strict JSON has no NaN (json.dump never passes a float to its
    `default`, so the former hook wrote `NaN`)."""
    import importlib.util
    import json

    from tests.conftest import REPO_ROOT

    path = REPO_ROOT / "examples" / "language-modeling" / "run_recurrent_lm.py"
    spec = importlib.util.spec_from_file_location("run_recurrent_lm", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write_metrics({"train_loss": float("nan"), "test": {"nll": float("nan"), "num_tokens": 3}}, str(tmp_path))
    text = (tmp_path / "lm_results.json").read_text()
    assert "NaN" not in text and json.loads(text) == {"train_loss": None, "test": {"nll": None, "num_tokens": 3}}
