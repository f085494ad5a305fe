"""DeformerBertConfig: numbers that are not finite are refused when the config is built (by `__init__`, `from_dict`
and `from_pretrained(path, field=value)`), the tuned `+inf` threshold and recorded lengths are kept, and every field
survives the round trips."""


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


@pytest.mark.parametrize("name", ["max_question_length", "max_passage_length"])
def test_a_recorded_length_beyond_the_positions_still_loads(tmp_path, name):
    """A recorded length is a default of the tools that read the checkpoint (the pipeline, the store adapter,
    `hf-readonce answer` / `encode`), each of which refuses one the position table cannot hold when it uses it, naming
    it, and takes another (tests/test_cli_messages.py): the config is not the place that refuses it, or the CLI could
    not load such a checkpoint to read it with `--max-passage-length`."""
    for build in builds(tmp_path, {name: 100}):
        assert getattr(build(), name) == 100
