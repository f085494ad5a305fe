"""LongDocBartConfig: a bad LongDoc field is refused when the config is built, by `__init__`, `from_dict`,
`from_pretrained(path, field=value)` and `AutoConfig` (with the remote code a saved folder carries), and every field
survives the round trips."""

import os
import subprocess
import sys

import pytest
from transformers import AutoConfig, BartConfig

from hf_readonce.models.longdoc_bart.configuration_longdoc_bart import LongDocBartConfig

TINY = dict(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64)
BAD = [("encoder_attention_type", "sparse"), ("encoder_attention_type", None), ("decoder_attention_type", "conv"),
       ("neighborhood_radius", -1), ("neighborhood_radius", 4.0), ("neighborhood_radius", True),
       ("conv_kernel_size", 0), ("conv_kernel_size", "3"), ("conv_stride", 4), ("conv_stride", False),
       ("max_document_length", 0), ("max_document_length", 64.0)]


@pytest.mark.parametrize("field, value", BAD)
def test_a_bad_field_is_refused_at_construction_by_every_path(tmp_path, field, value):
    """`from_pretrained(path, field=value)` builds the config with the field, so the config itself refuses it (it was
    set on the loaded config unchecked, and only building a model refused it); `from_dict` and `__init__` too."""
    LongDocBartConfig(**TINY).save_pretrained(tmp_path)
    for build in (lambda: LongDocBartConfig(**TINY, **{field: value}),
                  lambda: LongDocBartConfig.from_dict({**LongDocBartConfig(**TINY).to_dict(), field: value}),
                  lambda: LongDocBartConfig.from_pretrained(tmp_path, **{field: value}),
                  lambda: AutoConfig.from_pretrained(tmp_path, **{field: value})):
        with pytest.raises(ValueError, match=f"`{field}`.*{value!r}"):
            build()


def test_from_pretrained_fields_are_checked_together_and_the_rest_passes_through(tmp_path):
    """A field given to `from_pretrained` is checked with the other fields given and saved: a kernel given below the
    saved stride is refused naming the stride (it was accepted, and the model refused it only when built), the pair
    given together is accepted; a plain BART checkpoint takes LongDoc fields; unknown keywords come back unused."""
    LongDocBartConfig(**TINY, encoder_attention_type="convolutional").save_pretrained(tmp_path / "longdoc")
    with pytest.raises(ValueError, match="`conv_stride` must be an int in \\[1, conv_kernel_size=2\\]"):
        LongDocBartConfig.from_pretrained(tmp_path / "longdoc", conv_kernel_size=2)
    config = LongDocBartConfig.from_pretrained(tmp_path / "longdoc", conv_kernel_size=2, conv_stride=2)
    assert (config.conv_kernel_size, config.conv_stride, config.encoder_attention_type) == (2, 2, "convolutional")
    BartConfig(**TINY).save_pretrained(tmp_path / "bart")
    config, unused = LongDocBartConfig.from_pretrained(tmp_path / "bart", neighborhood_radius=4, dropout=0.0, foo=1,
                                                       return_unused_kwargs=True)
    assert (config.neighborhood_radius, config.dropout, unused) == (4, 0.0, {"foo": 1})


def test_the_remote_code_a_saved_folder_carries_refuses_a_bad_field(tmp_path):
    """`AutoConfig.from_pretrained(folder, trust_remote_code=True, field=value)` where hf-readonce is not imported
    (the copy of configuration_longdoc_bart.py in the folder builds the config)."""
    LongDocBartConfig(**TINY).save_pretrained(tmp_path / "saved")
    code = ("import sys; from transformers import AutoConfig\n"
            "try:\n    AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True, neighborhood_radius=-1)\n"
            "except ValueError as error:\n    print(type(error).__module__, error)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "saved")], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1",
                                                HF_MODULES_CACHE=str(tmp_path / "modules")))
    assert done.returncode == 0, done.stderr
    assert "`neighborhood_radius` must be an int >= 0, got -1." in done.stdout, done.stdout


@pytest.mark.parametrize("fields", [{}, dict(encoder_attention_type="convolutional_per_head", neighborhood_radius=0,
                                             conv_kernel_size=5, conv_stride=2, decoder_attention_type="neighborhood",
                                             max_document_length=50)])
def test_every_field_survives_the_round_trips(tmp_path, fields):
    config = LongDocBartConfig(**TINY, **fields)
    config.save_pretrained(tmp_path)
    (tmp_path / "diff.json").write_text(config.to_json_string(use_diff=True))
    names = ("encoder_attention_type", "neighborhood_radius", "conv_kernel_size", "conv_stride",
             "decoder_attention_type", "max_document_length")
    expected = {name: getattr(config, name) for name in names}
    for loaded in (LongDocBartConfig.from_dict(config.to_dict()), LongDocBartConfig.from_pretrained(tmp_path),
                   LongDocBartConfig.from_json_file(tmp_path / "diff.json")):
        got = {name: getattr(loaded, name) for name in names}
        assert got == expected and [type(v) for v in got.values()] == [type(v) for v in expected.values()]
