"""DeformerBertConfig: numbers that are not finite and recorded lengths beyond the position table are refused when
the config is built (by `__init__`, `from_dict` and `from_pretrained(path, field=value)`), the tuned `+inf`
threshold is kept, and every field survives the round trips."""

import json
import re

import pytest
from transformers import BertConfig

from hf_readonce.models.deformer_bert.configuration_deformer_bert import DeformerBertConfig

TINY = dict(vocab_size=99, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=24,
            max_position_embeddings=64)
INF = float("inf")


def builds(tmp_path, fields):
    """The ways a user builds the config with `fields`, each a callable."""
    BertConfig(**TINY).save_pretrained(tmp_path)
    return (lambda: DeformerBertConfig(**TINY, **fields),
            lambda: DeformerBertConfig.from_dict({**BertConfig(**TINY).to_dict(), **fields}),
            lambda: DeformerBertConfig.from_pretrained(tmp_path, **fields))


@pytest.mark.parametrize("field, value", [("distillation_temperature", INF), ("kd_loss_weight", INF),
                                          ("lrs_loss_weight", INF), ("kd_loss_weight", -INF)])
def test_an_infinite_number_is_refused_naming_the_field(tmp_path, field, value):
    # T = inf made the KD loss NaN (T^2 * KL of two uniform distributions: inf * 0), an infinite weight an inf loss
    for build in builds(tmp_path, {field: value}):
        with pytest.raises(ValueError, match=f"`{field}` must be a finite number, got -?inf"):
            build()


def test_the_never_answer_empty_threshold_is_kept():
    # +inf is what the no-answer calibration tunes when no margin helps ("never answer empty"); NaN is refused
    assert DeformerBertConfig(**TINY, null_score_diff_threshold=INF).null_score_diff_threshold == INF
    with pytest.raises(ValueError, match="`null_score_diff_threshold` must be a number, got nan"):
        DeformerBertConfig(**TINY, null_score_diff_threshold=float("nan"))


@pytest.mark.parametrize("fields, message, longest", [
    (dict(max_question_length=65), "`max_question_length` must be <= max_position_embeddings=64", 64),
    (dict(max_passage_length=65), "`max_passage_length` must be <= max_position_embeddings - passage_position_offset"
                                  " = 64", 64),
    (dict(max_passage_length=35, passage_position_offset=30), "= 34 .*got 35", 34),
])
def test_a_recorded_length_beyond_the_positions_is_refused(tmp_path, fields, message, longest):
    """A recorded length is the default of `hf-readonce answer` / `encode`: one the position table cannot hold was
    accepted, and a long question then failed inside the embeddings. The longest that fits is accepted."""
    for build in builds(tmp_path, fields):
        with pytest.raises(ValueError, match=message):
            build()
    name = next(name for name in fields if name.startswith("max_"))
    for build in builds(tmp_path, {**fields, name: longest}):
        assert getattr(build(), name) == longest


def test_a_base_field_given_with_the_recorded_length_is_checked_against_it(tmp_path):
    DeformerBertConfig(**TINY, max_question_length=64).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="`max_question_length` must be <= max_position_embeddings=32"):
        DeformerBertConfig.from_pretrained(tmp_path, max_position_embeddings=32)


@pytest.mark.parametrize("fields", [{}, dict(num_decomposed_layers=0, passage_position_offset=5,
                                             distillation_temperature=3, kd_loss_weight=0, lrs_loss_weight=2.5,
                                             max_question_length=20, max_passage_length=40, doc_stride=10,
                                             allow_no_answer=False, null_score_diff_threshold=-1.5),
                                    dict(allow_no_answer=True, null_score_diff_threshold=INF)])
def test_every_field_survives_the_round_trips(tmp_path, fields):
    config = DeformerBertConfig(**TINY, **fields)
    config.save_pretrained(tmp_path)
    (tmp_path / "diff.json").write_text(config.to_json_string(use_diff=True))
    names = ("num_decomposed_layers", "passage_position_offset", "distillation_temperature", "kd_loss_weight",
             "lrs_loss_weight", "max_question_length", "max_passage_length", "doc_stride", "allow_no_answer",
             "null_score_diff_threshold")
    expected = {name: getattr(config, name) for name in names}
    for loaded in (DeformerBertConfig.from_dict(config.to_dict()), DeformerBertConfig.from_pretrained(tmp_path),
                   DeformerBertConfig.from_json_file(tmp_path / "diff.json")):
        got = {name: getattr(loaded, name) for name in names}
        assert got == expected and [type(v) for v in got.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("name, longest", [("max_question_length", 64), ("max_passage_length", 64)])
def test_a_checkpoint_recording_a_length_beyond_the_positions_says_how_to_load_it(tmp_path, name, longest):
    """A config.json written before the bound (by hand) fails to load: the message names the keyword argument that
    loads it, and that argument does."""
    config = DeformerBertConfig(**TINY).to_dict()
    (tmp_path / "config.json").write_text(json.dumps({**config, name: 100}))
    with pytest.raises(ValueError, match=re.escape(f"`from_pretrained(checkpoint, {name}={longest})`")):
        DeformerBertConfig.from_pretrained(tmp_path)
    assert getattr(DeformerBertConfig.from_pretrained(tmp_path, **{name: longest}), name) == longest
