"""ReadOnceBartConfig: a LayerNorm epsilon that is not a finite positive number is refused when the config is built
(by `__init__`, `from_dict` and `from_pretrained(path, field=value)`), a recorded question length is kept, and every
field survives the round trips."""

import re

import pytest
import torch
from transformers import AutoConfig, BartConfig

from hf_readonce.models.readonce_bart.configuration_readonce_bart import ReadOnceBartConfig

TINY = dict(vocab_size=99, d_model=16, encoder_layers=4, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64)


def builds(tmp_path, fields):
    """The ways a user builds the config with `fields`, each a callable."""
    BartConfig(**TINY).save_pretrained(tmp_path)
    return (lambda: ReadOnceBartConfig(**TINY, **fields),
            lambda: ReadOnceBartConfig.from_dict({**BartConfig(**TINY).to_dict(), **fields}),
            lambda: ReadOnceBartConfig.from_pretrained(tmp_path, **fields))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_layer_norm_epsilon_that_is_not_finite_is_refused(tmp_path, value):
    # both were accepted (NaN passed `eps <= 0`) and the model ran without an error: NaN makes every LayerNorm output
    # NaN, inf makes it 0 whatever its input (then only the LayerNorm's bias)
    normalized = torch.nn.functional.layer_norm(torch.arange(4.0)[None], (4,), eps=value)
    assert normalized.isnan().all() or (normalized == 0).all()
    for build in builds(tmp_path, {"layer_norm_eps": value}):
        with pytest.raises(ValueError, match=f"`layer_norm_eps` must be a finite positive number, got {value}"):
            build()


def test_a_recorded_question_length_beyond_the_positions_still_loads(tmp_path):
    # the default of the pipelines, the store adapter and `hf-readonce answer`, which check the length they use
    assert all(build().max_question_length == 100 for build in builds(tmp_path, {"max_question_length": 100}))


@pytest.mark.parametrize("fields", [{}, dict(compression_ratio=4, window_size=6, aggregation="max", append_layer=0,
                                             fusion="attention", document_chunk_length=32, document_chunk_overlap=8,
                                             layer_norm_eps=1e-12, max_document_length=100, max_question_length=20),
                                    dict(compression_ratio=1, append_layer=4, aggregation="mean")])
def test_every_field_survives_the_round_trips(tmp_path, fields):
    config = ReadOnceBartConfig(**TINY, **fields)
    config.save_pretrained(tmp_path)
    (tmp_path / "diff.json").write_text(config.to_json_string(use_diff=True))
    names = ("compression_ratio", "window_size", "aggregation", "append_layer", "append_layer_convention", "fusion",
             "document_chunk_length", "document_chunk_overlap", "layer_norm_eps", "max_document_length",
             "max_question_length")
    expected = {name: getattr(config, name) for name in names}
    for loaded in (ReadOnceBartConfig.from_dict(config.to_dict()), ReadOnceBartConfig.from_pretrained(tmp_path),
                   ReadOnceBartConfig.from_json_file(tmp_path / "diff.json")):
        got = {name: getattr(loaded, name) for name in names}
        assert got == expected and [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_a_bart_attribute_name_given_to_from_pretrained_is_checked_with_the_fields(tmp_path):
    """`num_hidden_layers` names BART's `encoder_layers` (its `attribute_map`): given to `from_pretrained` or
    `AutoConfig`, it is checked against the recorded append layer as `encoder_layers=` is (it was set after the
    config was built, unchecked), and a valid one gives the same config as `encoder_layers=`."""
    ReadOnceBartConfig(**TINY, append_layer=3).save_pretrained(tmp_path)
    for load in (ReadOnceBartConfig.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(ValueError, match=re.escape("`append_layer` must be an int in [0, encoder_layers=2]")):
            load(tmp_path, num_hidden_layers=2)
    config = ReadOnceBartConfig.from_pretrained(tmp_path, num_hidden_layers=3)
    assert config.to_dict() == ReadOnceBartConfig.from_pretrained(tmp_path, encoder_layers=3).to_dict()
