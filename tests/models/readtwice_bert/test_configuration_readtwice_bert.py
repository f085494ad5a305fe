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
