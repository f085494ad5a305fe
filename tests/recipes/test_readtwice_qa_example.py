"""examples/question-answering/run_readtwice_qa.py records in the checkpoint it saves the question length it trained
with, as run_deformer_qa.py does, and gives the same weights and loss for the same --seed (one training step of a
tiny BERT warm start on a few synthetic rows)."""

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForQuestionAnswering, BertModel, TrainingArguments

from tests.conftest import REPO_ROOT, write_jsonl

ROWS = [{"id": f"r{i}", "question": f"Who is the person number {i} in the long list of the club?",
         "context": f"The club list says that Ann Smith is number {i}. " * 6,
         "answers": {"text": ["Ann Smith"], "answer_start": [len("The club list says that ")]}} for i in range(4)]


@pytest.fixture(scope="module")
def example():
    path = REPO_ROOT / "examples" / "question-answering" / "run_readtwice_qa.py"
    spec = importlib.util.spec_from_file_location("run_readtwice_qa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    BertForQuestionAnswering(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=37,
                                        max_position_embeddings=64)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def bare_warm_start(tmp_path_factory, tokenizer):
    # a BERT without a QA head, as the packaged MiniLM: the baseline's head is new too
    path = tmp_path_factory.mktemp("tiny_bare_bert")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37, max_position_embeddings=64)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("layout", [["--question_in_first_read", "False"], [], ["--baseline"]],
                         ids=["read-once", "paper", "baseline"])
def test_the_question_length_trained_with_is_recorded(example, warm_start, tmp_path, layout):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    out = tmp_path / "out"
    model_args, data_args, training_args = example.HfArgumentParser(
        (example.ModelArguments, example.DataArguments, TrainingArguments)).parse_args_into_dataclasses(args=[
            "--model_name_or_path", str(warm_start), "--train_file", str(train), "--output_dir", str(out),
            "--do_train", "--max_steps", "1", "--per_device_train_batch_size", "2", "--use_cpu", "--report_to", "none",
            "--save_strategy", "no", "--segment_length", "32", "--segment_overlap", "8", "--max_question_length", "12",
            "--memory_type", "sts", "--span_length", "4", "--num_second_read_layers", "1", *layout])
    example.run(model_args, data_args, training_args)
    saved = json.loads((out / "config.json").read_text())
    if layout == ["--baseline"]:  # a plain BERT, read by hf-readonce as a DeFormer, whose questions hold [CLS]/[SEP]
        assert saved["model_type"] == "bert" and "max_question_length" not in saved
    else:
        assert saved["model_type"] == "readtwice_bert" and saved["max_question_length"] == 12
        assert saved["question_in_first_read"] == (layout == [])


@pytest.mark.parametrize("layout", [["--question_in_first_read", "False"], ["--baseline"]], ids=["read-once", "baseline"])
def test_the_seed_fixes_the_new_weights_and_the_loss(example, bare_warm_start, tmp_path, layout):
    # the weights the warm start lacks (ReadTwice's second read and memory layers, the baseline's QA head) are drawn
    # when the model is built, before Trainer seeds anything: --seed must seed them, whatever torch's state before
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    runs = []
    for state in (1, 2):
        out = tmp_path / f"out{state}"
        model_args, data_args, training_args = example.HfArgumentParser(
            (example.ModelArguments, example.DataArguments, TrainingArguments)).parse_args_into_dataclasses(args=[
                "--model_name_or_path", str(bare_warm_start), "--train_file", str(train), "--output_dir", str(out),
                "--do_train", "--max_steps", "1", "--per_device_train_batch_size", "2", "--use_cpu", "--seed", "7",
                "--report_to", "none", "--save_strategy", "no", "--segment_length", "32", "--segment_overlap", "8",
                "--max_question_length", "12", "--memory_type", "sts", "--span_length", "4",
                "--num_second_read_layers", "1", *layout])
        torch.manual_seed(state)  # what ran before (another run, a notebook cell) must not matter
        metrics = example.run(model_args, data_args, training_args)
        runs.append((metrics["train_loss"], load_file(out / "model.safetensors")))
    (loss_a, weights_a), (loss_b, weights_b) = runs
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)
    assert loss_a == loss_b
