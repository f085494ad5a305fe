"""`python -m hf_readonce.recipes.reference_qa average`: checkpoint averaging (uniform or weighted), on tiny random
DeFormers and their BERT teacher."""

import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForQuestionAnswering

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
from hf_readonce.recipes.reference_qa import main
from hf_readonce.weights import minilm_path


def _save(path, k, seed):
    """A tiny random DeFormer with k decomposed layers, or with k=None its plain BERT QA teacher (same tensors)."""
    torch.manual_seed(seed)
    dims = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64)
    if k is None:
        model = BertForQuestionAnswering(BertConfig(**dims))
    else:
        model = DeformerBertForQuestionAnswering(DeformerBertConfig(**dims, num_decomposed_layers=k))
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(path)
    return model


def test_average_is_the_uniform_mean_of_the_weights(tmp_path):
    models = [_save(tmp_path / f"m{i}", k=2, seed=i) for i in range(3)]
    out = main(["average", "--model_dirs", *(str(tmp_path / f"m{i}") for i in range(3)),
                "--output_dir", str(tmp_path / "avg")]) or tmp_path / "avg"
    averaged = DeformerBertForQuestionAnswering.from_pretrained(out)
    assert averaged.config.num_decomposed_layers == 2
    for name, tensor in averaged.state_dict().items():
        expected = torch.stack([m.state_dict()[name].float() for m in models]).mean(0)
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-6)
    assert not torch.equal(averaged.qa_outputs.weight, models[0].qa_outputs.weight)
    record = json.loads((tmp_path / "avg" / "average.json").read_text())
    assert record["model_dirs"] == [str(tmp_path / f"m{i}") for i in range(3)]


def test_average_refuses_one_checkpoint_or_different_k(tmp_path):
    _save(tmp_path / "a", k=2, seed=0)
    _save(tmp_path / "b", k=3, seed=1)
    with pytest.raises(ValueError, match="at least two"):
        main(["average", "--model_dirs", str(tmp_path / "a"), "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="num_decomposed_layers"):
        main(["average", "--model_dirs", str(tmp_path / "a"), str(tmp_path / "b"), "--output_dir",
              str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_weighted_average_extrapolates_a_deformer_from_its_bert_teacher(tmp_path):
    deformer = _save(tmp_path / "d", k=2, seed=0)
    teacher = _save(tmp_path / "t", k=None, seed=1)
    out = main(["average", "--model_dirs", str(tmp_path / "d"), str(tmp_path / "t"), "--weights", "1.2", "-0.2",
                "--output_dir", str(tmp_path / "x")]) or tmp_path / "x"
    mixed = DeformerBertForQuestionAnswering.from_pretrained(out)
    assert mixed.config.num_decomposed_layers == 2  # the first checkpoint's config
    t_state = teacher.state_dict()
    for name, tensor in mixed.state_dict().items():
        base = t_state[name].float()
        expected = base + 1.2 * (deformer.state_dict()[name].float() - base)
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-5)
    assert json.loads((tmp_path / "x" / "average.json").read_text())["weights"] == [1.2, -0.2]


@pytest.mark.parametrize("weights, match", [(["0.5"], "one weight per"), (["0.7", "0.7"], "sum to 1"),
                                            (["nan", "1"], "finite")])
def test_average_refuses_bad_weights_and_writes_nothing(tmp_path, weights, match):
    _save(tmp_path / "a", k=2, seed=0)
    _save(tmp_path / "b", k=None, seed=1)
    with pytest.raises(ValueError, match=match):
        main(["average", "--model_dirs", str(tmp_path / "a"), str(tmp_path / "b"), "--weights", *weights,
              "--output_dir", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_train_records_the_question_length_it_trained_with(tmp_path):
    """`train` records `max_question_length` in the checkpoint's config, as the DeFormer recipe does: `hf-readonce
    answer` reads this plain BERT as a DeFormer and reads questions at the length it was trained with (one step of a
    tiny random BERT on a few synthetic rows)."""
    from tests.conftest import write_jsonl

    _save(tmp_path / "bert", None, seed=0)
    rows = [{"id": f"r{i}", "question": f"Who is number {i}?", "context": f"The list says that Ann is number {i}.",
             "answers": {"text": ["Ann"], "answer_start": [len("The list says that ")]}} for i in range(24)]
    (tmp_path / "data" / "tiny").mkdir(parents=True)
    write_jsonl(tmp_path / "data" / "tiny" / "train.jsonl", rows)
    main(["train", "--output_dir", str(tmp_path / "out"), "--data_dir", str(tmp_path / "data"), "--datasets", "tiny",
          "--model_name_or_path", str(tmp_path / "bert"), "--max_steps", "1", "--batch_size", "2",
          "--max_seq_length", "64", "--max_question_length", "20", "--doc_stride", "16", "--warmup_steps", "0"])
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["model_type"] == "bert" and saved["max_question_length"] == 20
    from hf_readonce.tasks.question_answering import recorded_answer_settings

    assert recorded_answer_settings(DeformerBertConfig.from_pretrained(tmp_path / "out"))["max_question_length"] == 20
