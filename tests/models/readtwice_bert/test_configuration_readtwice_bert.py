"""ReadTwiceBertConfig reads plain BERT checkpoints as its own type (no type-mismatch warning), and no other type."""

import os
import subprocess
import sys

from transformers import BertConfig, GPT2Config

from hf_readonce.models.readtwice_bert.configuration_readtwice_bert import ReadTwiceBertConfig

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37)


def test_bert_checkpoint_reads_as_readtwice(tmp_path):
    BertConfig(**TINY).save_pretrained(tmp_path / "bert")
    config_dict, _ = ReadTwiceBertConfig.get_config_dict(str(tmp_path / "bert"))
    assert config_dict["model_type"] == "readtwice_bert"
    config = ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", memory_type="cls")
    assert config.hidden_size == 32 and config.memory_type == "cls"
    GPT2Config(n_layer=2).save_pretrained(tmp_path / "gpt2")
    assert ReadTwiceBertConfig.get_config_dict(str(tmp_path / "gpt2"))[0]["model_type"] == "gpt2"  # left as is


def test_no_type_mismatch_warning(tmp_path):
    BertConfig(**TINY).save_pretrained(tmp_path)
    # a fresh process: transformers' log handler writes to the stderr it found at import time
    code = ("import sys; from hf_readonce.models.readtwice_bert.configuration_readtwice_bert import "
            "ReadTwiceBertConfig; print(ReadTwiceBertConfig.from_pretrained(sys.argv[1]).model_type)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "readtwice_bert"
    assert "to instantiate a model of type" not in done.stderr, done.stderr


def test_from_pretrained_fields_are_validated_and_derive_defaults(tmp_path):
    """`from_pretrained(bert, field=value)` (the documented way to build a ReadTwice model from a BERT checkpoint)
    builds the config with the given fields: a bad value raises the `__init__`'s ValueError naming the field instead
    of being set unchecked, and the segment overlap follows a given segment length as in `__init__`."""
    import pytest

    BertConfig(**TINY, max_position_embeddings=64).save_pretrained(tmp_path / "bert")
    for field, value in (("memory_type", "foo"), ("segment_length", 1024), ("question_in_first_read", "no"),
                         ("num_second_read_layers", 9)):
        with pytest.raises(ValueError, match=f"`{field}`"):
            ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", **{field: value})
    config = ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", segment_length=32)
    assert (config.segment_length, config.segment_overlap) == (32, 8)  # as ReadTwiceBertConfig(segment_length=32)
    config.save_pretrained(tmp_path / "readtwice")
    config = ReadTwiceBertConfig.from_pretrained(tmp_path / "readtwice", segment_length=48, memory_type="cls")
    assert (config.segment_length, config.segment_overlap, config.memory_type) == (48, 8, "cls")  # saved overlap kept
    with pytest.raises(ValueError, match="`segment_overlap`"):
        ReadTwiceBertConfig.from_pretrained(tmp_path / "readtwice", segment_length=8)
    config, unused = ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", return_unused_kwargs=True,
                                                         memory_type="cls", hidden_dropout_prob=0.0, foo=1)
    assert (config.memory_type, config.hidden_dropout_prob, unused) == ("cls", 0.0, {"foo": 1})


def test_from_pretrained_base_and_own_fields_are_validated_together(tmp_path):
    """BERT fields given beside ReadTwice's (`num_hidden_layers=8, num_second_read_layers=6`) build the config
    together: the own field is checked against the base field given, not the checkpoint's (it raised for a valid
    pair), a base field given alone re-derives the defaults that follow it and is checked with them."""
    import pytest

    BertConfig(**TINY, max_position_embeddings=64).save_pretrained(tmp_path / "bert")
    config = ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", num_hidden_layers=8, num_second_read_layers=6)
    assert (config.num_hidden_layers, config.num_second_read_layers) == (8, 6)
    config = ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", max_position_embeddings=128, segment_length=128)
    assert (config.max_position_embeddings, config.segment_length, config.segment_overlap) == (128, 128, 32)
    assert ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", max_position_embeddings=32).segment_length == 32
    with pytest.raises(ValueError, match="`num_second_read_layers`"):
        ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", num_hidden_layers=1)


def test_the_recorded_question_length_is_a_checked_field(tmp_path):
    """`max_question_length`, the question length a checkpoint was trained with (`run_readtwice_qa.py` records it), is
    a field of the config as of DeFormer's and ReadOnce's: `None` (unknown) by default, saved and loaded, checked (a
    `ValueError` naming it), also when given to `from_pretrained` as the example script gives it."""
    import pytest

    assert ReadTwiceBertConfig(**TINY).max_question_length is None
    config = ReadTwiceBertConfig(**TINY, max_question_length=48)
    config.save_pretrained(tmp_path / "saved")
    assert ReadTwiceBertConfig.from_pretrained(tmp_path / "saved").max_question_length == 48
    BertConfig(**TINY).save_pretrained(tmp_path / "bert")
    assert ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", max_question_length=20).max_question_length == 20
    for bad in (2, 0, "64", 64.0, True):
        with pytest.raises(ValueError, match="`max_question_length` must be None or an int >= 3"):
            ReadTwiceBertConfig(**TINY, max_question_length=bad)
        with pytest.raises(ValueError, match="`max_question_length`"):
            ReadTwiceBertConfig.from_pretrained(tmp_path / "bert", max_question_length=bad)


def test_an_infinite_loss_weight_is_refused(tmp_path):
    """An infinite coreference loss weight (an inf loss) was accepted; it is refused naming it, by `__init__`,
    `from_dict` and `from_pretrained`. A recorded question length the position table cannot hold still loads (the
    default of `hf-readonce answer` and of the pipeline, which refuse it when they use it)."""
    from functools import partial

    import pytest

    BertConfig(**TINY, max_position_embeddings=64).save_pretrained(tmp_path)
    for field, value, message in (("coref_loss_weight", float("inf"), "`coref_loss_weight` must be a finite float"),):
        bert = BertConfig(**TINY, max_position_embeddings=64).to_dict()
        for build in (partial(ReadTwiceBertConfig, **{**TINY, "max_position_embeddings": 64, field: value}),
                      partial(ReadTwiceBertConfig.from_dict, {**bert, field: value}),
                      partial(ReadTwiceBertConfig.from_pretrained, tmp_path, **{field: value})):
            with pytest.raises(ValueError, match=message):
                build()
    assert ReadTwiceBertConfig.from_pretrained(tmp_path, max_question_length=100).max_question_length == 100


def test_every_field_survives_the_round_trips(tmp_path):
    names = ("memory_type", "span_length", "num_second_read_layers", "max_relative_segment_distance", "memory_top_k",
             "single_segment", "segment_length", "segment_overlap", "question_in_first_read", "memory_output_init",
             "coref_loss_weight", "max_question_length")
    for fields in ({}, dict(memory_type="entity", span_length=8, num_second_read_layers=4,
                            max_relative_segment_distance=0, memory_top_k=3, single_segment=True, segment_length=32,
                            segment_overlap=0, question_in_first_read=False, memory_output_init="zero",
                            coref_loss_weight=0, max_question_length=20)):
        config = ReadTwiceBertConfig(**TINY, **fields)
        config.save_pretrained(tmp_path)
        (tmp_path / "diff.json").write_text(config.to_json_string(use_diff=True))
        expected = {name: getattr(config, name) for name in names}
        for loaded in (ReadTwiceBertConfig.from_dict(config.to_dict()), ReadTwiceBertConfig.from_pretrained(tmp_path),
                       ReadTwiceBertConfig.from_json_file(tmp_path / "diff.json")):
            got = {name: getattr(loaded, name) for name in names}
            assert got == expected and [type(v) for v in got.values()] == [type(v) for v in expected.values()]
