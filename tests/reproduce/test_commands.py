"""The GPU-scale child commands of the new entry points (never run on CPU) parse with their example's own argument
parser: a misspelt or removed option fails here, not on a GPU lease."""

import importlib.util
from pathlib import Path

import pytest
from transformers import HfArgumentParser, Seq2SeqTrainingArguments, TrainingArguments

from tests.conftest import REPO_ROOT
from tests.reproduce.conftest import entry_point


def _example(relative):
    spec = importlib.util.spec_from_file_location(Path(relative).stem, REPO_ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def bf16_gpu(monkeypatch):
    """TrainingArguments refuses bf16 without a GPU: pretend one, these commands are for a GPU."""
    import transformers.training_args

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)


def _parse(parser, command):
    assert Path(command[1]).is_file()
    return parser.parse_args_into_dataclasses(args=command[2:])


def test_readonce_commands_parse(tmp_path):
    from hf_readonce.recipes.readonce import ReadOnceArguments

    readonce = entry_point("readonce")
    args = readonce.parse_args(["--time_budget_s", "240", "--output_dir", str(tmp_path)])
    parser = HfArgumentParser((ReadOnceArguments, Seq2SeqTrainingArguments))
    qa = readonce.qa_commands(args, Path("data"), tmp_path, Path("minilm"), gpu=True)
    xsum = readonce.xsum_commands(args, Path("data"), tmp_path, gpu=True)
    assert list(qa) == ["qa_baseline", "qa_k2", "qa_k8"] and list(xsum) == ["xsum_baseline", "xsum_k2", "xsum_k8"]
    for name, command in {**qa, **xsum}.items():
        options, training = _parse(parser, command)
        assert options.train_time_budget_s == 240 and training.bf16 and training.per_device_train_batch_size == 32
        assert training.max_steps == (5000 if name.startswith("qa") else 1000)
    options, _ = _parse(parser, xsum["xsum_k8"])
    assert (options.stage1_steps, options.stage2_steps, options.model_name_or_path) == (0, 1000, str(tmp_path / "qa_k8"))
    with pytest.raises(SystemExit):
        readonce.parse_args(["--variants", "k3"])


def test_readtwice_commands_parse(tmp_path):
    example = _example("examples/question-answering/run_readtwice_qa.py")
    readtwice = entry_point("readtwice_quoref")
    args = readtwice.parse_args(["--time_budget_s", "360"])
    parser = HfArgumentParser((example.ModelArguments, example.DataArguments, TrainingArguments))
    commands = readtwice.commands(args, Path("data"), tmp_path, Path("minilm"), 1951, gpu=True)
    assert list(commands) == ["baseline", "cls", "sts", "e", "e_ss", "e_ro"]
    parsed = {name: _parse(parser, command) for name, command in commands.items()}
    assert parsed["baseline"][0].baseline and parsed["e_ss"][0].single_segment
    assert not parsed["e_ro"][0].question_in_first_read and parsed["cls"][0].memory_type == "cls"
    for _, data_args, training in parsed.values():
        assert training.max_steps == 1951 and training.warmup_steps == 195 and training.bf16
        assert data_args.train_time_budget_s == 360 and data_args.eval_batch_size == 64


def test_recurrent_commands_parse(tmp_path):
    example = _example("examples/language-modeling/run_recurrent_lm.py")
    table2 = entry_point("recurrent_table2")
    args = table2.parse_args(["--time_budget_s", "300"])
    parser = HfArgumentParser((example.RecurrentLMArguments, TrainingArguments))
    commands = table2.commands(args, "model.gguf", tmp_path, gpu=True)
    assert list(commands) == ["pretrained", "baseline", "recurrent_ov0", "recurrent_ov5", "recurrent_ov30",
                              "recurrent_lr2e-3_ov0", "recurrent_lr2e-3_ov5", "recurrent_lr2e-3_ov30"]
    for name, command in commands.items():
        options, training = _parse(parser, command)
        example.resolve_overlaps(options)  # the protocol check of §4.2 passes for every run
        assert options.model_name_or_path == "model.gguf" and options.max_eval_tokens is None
        if name != "pretrained":
            assert training.max_steps == 2000 and training.bf16 and options.train_time_budget_s == 300
    options, _ = _parse(parser, commands["recurrent_lr2e-3_ov30"])
    assert options.recurrence_learning_rate == 2e-3 and options.train_window_overlap == 30 and options.recurrent
    with pytest.raises(SystemExit):
        table2.parse_args(["--overlaps", "128"])
