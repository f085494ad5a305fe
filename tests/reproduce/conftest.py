"""Shared pieces of the `reproduce/` tests: the entry points loaded as modules, tiny random models with the MiniLM
tokenizer (so that a smoke run trains in seconds), and the checks every results.json must pass."""

import importlib.util
import json
import sys

import pytest
import torch

from tests.conftest import REPO_ROOT

REPRODUCE = REPO_ROOT / "reproduce"
SCHEMA_FIELDS = {"schema", "table", "command", "hardware", "date", "wall_seconds", "rows", "baselines"}


def entry_point(name: str):
    """`reproduce/<name>.py` as a module (its folder on sys.path, as when run as a script)."""
    if str(REPRODUCE) not in sys.path:
        sys.path.insert(0, str(REPRODUCE))
    spec = importlib.util.spec_from_file_location(f"reproduce_{name}", REPRODUCE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_results(path, rows: int) -> dict:
    """The benchmark schema's fields, `rows` rows each with its training seconds, and baselines beside."""
    results = json.loads(path.read_text())
    assert SCHEMA_FIELDS <= set(results), set(results)
    assert results["schema"] == "hf-readonce-results/1" and results["smoke"] is True
    assert not results.get("failed", results.get("failed_ks")), "a row failed: see its log"
    assert len(results["rows"]) == rows and all("train_seconds" in row for row in results["rows"])
    # the whole command's seconds cover every row's training (rows may run side by side, so not their sum)
    assert results["wall_seconds"] >= max(row["train_seconds"] or 0 for row in results["rows"])
    assert results["baselines"] and results["hardware"]["torch"] == torch.__version__
    assert (path.parent / "model_card.md").read_text().startswith("## Reproduction")
    return results


@pytest.fixture(scope="session")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


def _tiny_bert_config(tokenizer):
    from transformers import BertConfig

    return BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory, minilm_tokenizer):
    """A tiny random BertModel with the MiniLM tokenizer: the warm start of LongDoc, ReadOnce and ReadTwice."""
    from transformers import BertModel

    path = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    BertModel(_tiny_bert_config(minilm_tokenizer), add_pooling_layer=False).save_pretrained(path)
    minilm_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory, minilm_tokenizer):
    """A tiny random BertForQuestionAnswering with the MiniLM tokenizer: a DeFormer teacher."""
    from transformers import BertForQuestionAnswering

    path = tmp_path_factory.mktemp("tiny_teacher")
    torch.manual_seed(0)
    BertForQuestionAnswering(_tiny_bert_config(minilm_tokenizer)).save_pretrained(path)
    minilm_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory, minilm_tokenizer):
    """A tiny random Llama with the MiniLM tokenizer ([SEP] as its end of text): stands in for SmolLM2."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=minilm_tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=512)).save_pretrained(path)
    tokenizer = minilm_tokenizer.__class__.from_pretrained(minilm_tokenizer.name_or_path)
    tokenizer.eos_token = "[SEP]"
    tokenizer.save_pretrained(path)
    return path
