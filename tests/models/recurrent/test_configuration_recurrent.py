"""RecurrentGPT2Config and RecurrentLlamaConfig: a bad recurrence field is refused when the config is built, by
`__init__`, `from_dict`, `from_pretrained(path, field=value)` and `AutoConfig` (with the remote code a saved folder
carries), and every field survives the round trips."""

import os
import re
import subprocess
import sys

import pytest
from transformers import AutoConfig, GPT2Config, LlamaConfig

from hf_readonce.models.recurrent.configuration_recurrent_gpt2 import RecurrentGPT2Config
from hf_readonce.models.recurrent.configuration_recurrent_llama import RecurrentLlamaConfig

GPT2_TINY = dict(vocab_size=99, n_positions=32, n_embd=16, n_layer=3, n_head=2)
LLAMA_TINY = dict(vocab_size=99, hidden_size=16, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
                  max_position_embeddings=32)
FAMILIES = {"gpt2": (RecurrentGPT2Config, GPT2Config, GPT2_TINY), "llama": (RecurrentLlamaConfig, LlamaConfig,
                                                                            LLAMA_TINY)}
BAD = [("window_size", 33), ("window_size", 16.0), ("window_size", True), ("window_overlap", 32),
       ("window_overlap", -1), ("window_overlap", "4"), ("recurrence_layer", 0), ("recurrence_layer", 4),
       ("recurrence_layer", False), ("recurrence_hidden_sizes", [0]), ("recurrence_hidden_sizes", "200"),
       ("recurrence_activation", "nope")]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("field, value", BAD)
def test_a_bad_field_is_refused_at_construction_by_every_path(tmp_path, family, field, value):
    """`from_pretrained(path, field=value)` builds the config with the field, so the config itself refuses it (it was
    set on the loaded config unchecked, and only building a model refused it); `from_dict` and `__init__` too."""
    config_class, _, tiny = FAMILIES[family]
    config_class(**tiny).save_pretrained(tmp_path)
    for build in (lambda: config_class(**tiny, **{field: value}),
                  lambda: config_class.from_dict({**config_class(**tiny).to_dict(), field: value}),
                  lambda: config_class.from_pretrained(tmp_path, **{field: value}),
                  lambda: AutoConfig.from_pretrained(tmp_path, **{field: value})):
        with pytest.raises(ValueError, match=f"`{field}`"):
            build()


@pytest.mark.parametrize("family", FAMILIES)
def test_an_activation_that_is_not_a_string_is_a_value_error_naming_the_field(family):
    # a list reached `value in ACT2FN` and raised "TypeError: unhashable type: 'list'"
    config_class, _, tiny = FAMILIES[family]
    with pytest.raises(ValueError, match="`recurrence_activation`=\\['relu'\\] is not a transformers activation"):
        config_class(**tiny, recurrence_activation=["relu"])


@pytest.mark.parametrize("family", FAMILIES)
def test_from_pretrained_fields_are_checked_together_and_the_rest_passes_through(tmp_path, family):
    """A field given to `from_pretrained` is checked with the other fields given and saved: a depth below the saved
    recurrence layer is refused naming the layer, a wider window given with a larger position table is accepted, a
    plain checkpoint of the backbone takes recurrence fields, and unknown keywords come back unused."""
    config_class, plain_class, tiny = FAMILIES[family]
    config_class(**tiny, recurrence_layer=3).save_pretrained(tmp_path / "recurrent")
    layers, positions = config_class.num_layers_attribute, config_class.max_positions_attribute
    with pytest.raises(ValueError, match="`recurrence_layer`.*num_layers=2"):
        config_class.from_pretrained(tmp_path / "recurrent", **{layers: 2})
    config = config_class.from_pretrained(tmp_path / "recurrent", **{positions: 64}, window_size=64)
    assert (getattr(config, positions), config.window_size, config.recurrence_layer) == (64, 64, 3)
    plain_class(**tiny).save_pretrained(tmp_path / "plain")
    config, unused = config_class.from_pretrained(tmp_path / "plain", window_size=16, window_overlap=4, foo=1,
                                                  return_unused_kwargs=True)
    assert (config.window_size, config.window_overlap, config.recurrence_layer, unused) == (16, 4, 2, {"foo": 1})
    assert config_class.from_pretrained(tmp_path / "plain", **{positions: 16}).window_size == 16  # follows the table


def test_the_remote_code_a_saved_folder_carries_refuses_a_bad_field(tmp_path):
    """`AutoConfig.from_pretrained(folder, trust_remote_code=True, field=value)` where hf-readonce is not imported
    (the copies of configuration_recurrent_gpt2.py and configuration_recurrence.py in the folder build the config)."""
    RecurrentGPT2Config(**GPT2_TINY).save_pretrained(tmp_path / "saved")
    code = ("import sys; from transformers import AutoConfig\n"
            "try:\n    AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True, window_overlap=32)\n"
            "except ValueError as error:\n    print(error)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "saved")], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1",
                                                HF_MODULES_CACHE=str(tmp_path / "modules")))
    assert done.returncode == 0, done.stderr
    assert "`window_overlap` must be an int in [0, window_size=32), got 32" in done.stdout, done.stdout


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("fields", [{}, dict(window_size=16, window_overlap=4, recurrence_layer=3,
                                             recurrence_hidden_sizes=(7, 5), recurrence_activation="gelu"),
                                    dict(recurrence_hidden_sizes=[])])
def test_every_field_survives_the_round_trips(tmp_path, family, fields):
    config_class, _, tiny = FAMILIES[family]
    config = config_class(**tiny, **fields)
    config.save_pretrained(tmp_path)
    (tmp_path / "diff.json").write_text(config.to_json_string(use_diff=True))
    names = ("window_size", "window_overlap", "recurrence_layer", "recurrence_hidden_sizes", "recurrence_activation")
    expected = {name: getattr(config, name) for name in names}
    for loaded in (config_class.from_dict(config.to_dict()), config_class.from_pretrained(tmp_path),
                   config_class.from_json_file(tmp_path / "diff.json")):
        got = {name: getattr(loaded, name) for name in names}
        assert got == expected and [type(v) for v in got.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_recorded_window_beyond_a_smaller_table_given_says_to_give_a_window(tmp_path, family):
    """A saved config records its window (the default, the position table size here): a smaller table given to
    `from_pretrained` is refused naming the recorded window and saying to give one with it, which loads."""
    config_class, _, tiny = FAMILIES[family]
    config_class(**tiny).save_pretrained(tmp_path)
    positions = config_class.max_positions_attribute
    for load in (config_class.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(ValueError, match=re.escape(
                "`window_size`=32 exceeds the model's 16 position embeddings (positions restart in every window, so "
                "a window must fit in the position table). The config read records window_size=32: give a "
                f"`window_size` that fits with the position table size (`from_pretrained(checkpoint, {positions}=..., "
                "window_size=...)`).")):
            load(tmp_path, **{positions: 16})
        assert load(tmp_path, **{positions: 16}, window_size=16).window_size == 16
    with pytest.raises(ValueError, match="`window_size`=33 exceeds the model's 32 position embeddings[^:]*$"):
        config_class.from_pretrained(tmp_path, window_size=33)  # the window given: no word of a recorded one


@pytest.mark.parametrize("alias, value, message", [
    ("max_position_embeddings", 16, "`window_size`=32 exceeds the model's 16 position embeddings"),
    ("num_hidden_layers", 2, "`recurrence_layer` \\(L, 1-based\\) must be an int in \\[1, num_layers=2\\], got 3"),
])
def test_a_gpt2_attribute_name_given_to_from_pretrained_is_checked_with_the_fields(tmp_path, alias, value, message):
    """GPT-2 names `n_positions` and `n_layer` `max_position_embeddings` and `num_hidden_layers` too (its
    `attribute_map`): given to `from_pretrained` or `AutoConfig` they are checked with the recorded recurrence fields
    as `n_positions=` / `n_layer=` are (they were set after the config was built, unchecked), and a plain GPT-2
    config's window follows the table given so."""
    RecurrentGPT2Config(**GPT2_TINY, recurrence_layer=3).save_pretrained(tmp_path / "recurrent")
    for load in (RecurrentGPT2Config.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(ValueError, match=message):
            load(tmp_path / "recurrent", **{alias: value})
    GPT2Config(**GPT2_TINY).save_pretrained(tmp_path / "plain")
    config = RecurrentGPT2Config.from_pretrained(tmp_path / "plain", max_position_embeddings=16)
    assert (config.n_positions, config.window_size) == (16, 16)
