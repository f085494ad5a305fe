"""The recurrent family's test cases, found through the family registry (`tests/models/<family>/cases.py`):
`CASES`, each published and loaded where hf-readonce is absent (`tests/hub/family_cases.py`)."""

import torch

from tests.hub.family_cases import GENERATE, LLAMA_TINY, FamilyCase

# about 60 MiniLM tokens: beyond the recurrent models' 32 positions, read in 16-token windows
RECURRENT_PROMPT = " ".join(["emma", "knightley", "harriet"] * 20)


def tiny_recurrent(family: str):
    from hf_readonce import (
        RecurrentGPT2Config,
        RecurrentGPT2LMHeadModel,
        RecurrentLlamaConfig,
        RecurrentLlamaForCausalLM,
    )

    torch.manual_seed(0)
    recurrence = dict(window_size=16, window_overlap=4, recurrence_layer=1)
    if family == "gpt2":
        model = RecurrentGPT2LMHeadModel(RecurrentGPT2Config(
            n_positions=32, n_embd=16, n_layer=2, n_head=2, vocab_size=30522, bos_token_id=101, eos_token_id=102,
            pad_token_id=0, **recurrence))
    else:
        model = RecurrentLlamaForCausalLM(RecurrentLlamaConfig(max_position_embeddings=32, **LLAMA_TINY, **recurrence))
    with torch.no_grad():  # non-zero pooling weights: the memory reaches the next window
        model.recurrence.pooling.layer_logits.normal_()
    return model.eval()


CASES = [
    FamilyCase("recurrent_gpt2", lambda: tiny_recurrent("gpt2"), "AutoModelForCausalLM", f"""
ids = tokenizer({RECURRENT_PROMPT!r}, return_tensors="pt").input_ids
assert ids.shape[1] > 32  # beyond n_positions
outputs = {{"logits": model(input_ids=ids).logits, "generated": model.generate(ids, max_new_tokens=6, do_sample=False)}}
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
# Trainer(label_smoothing_factor=...) shifts the labels by one only for the causal-LM class names listed there
assert type(model).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(), type(model).__name__
""", [("text-generation", [RECURRENT_PROMPT], GENERATE)], "text-generation", "recurrent-transformer"),
    FamilyCase("recurrent_llama", lambda: tiny_recurrent("llama"), "AutoModelForCausalLM", f"""
ids = tokenizer({RECURRENT_PROMPT!r}, return_tensors="pt").input_ids
assert ids.shape[1] > 32  # beyond max_position_embeddings
outputs = {{"logits": model(input_ids=ids).logits, "generated": model.generate(ids, max_new_tokens=6, do_sample=False)}}
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
# Trainer(label_smoothing_factor=...) shifts the labels by one only for the causal-LM class names listed there
assert type(model).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(), type(model).__name__
""", [("text-generation", [RECURRENT_PROMPT], GENERATE)], "text-generation", "recurrent-transformer"),
]


# ----------------------------------------------------------------- the common model checks (test_modeling_common.py)
def common_config(model_type):
    """A tiny config of `model_type`, without dropout, for `tests/models/test_modeling_common.py`: 16-token windows
    overlapping by 4, the memory entering at layer 1."""
    from hf_readonce import RecurrentGPT2Config, RecurrentLlamaConfig

    recurrence = dict(window_size=16, window_overlap=4, recurrence_layer=1)
    if model_type == RecurrentGPT2Config.model_type:
        return RecurrentGPT2Config(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                   embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **recurrence)
    return RecurrentLlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                bos_token_id=0, eos_token_id=0, pad_token_id=0, **recurrence)


def common_base_class(model_class):
    """The plain transformers class whose checkpoints `model_class` loads."""
    from transformers import GPT2Model, LlamaModel

    from hf_readonce import RecurrentGPT2Config

    return GPT2Model if model_class.config_class is RecurrentGPT2Config else LlamaModel


def common_inputs(model, seed=0):
    """`model`'s forward arguments: 30 tokens, three windows (the memory reaching the later ones), labels."""
    ids = torch.randint(3, model.config.vocab_size, (2, 30), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "labels": ids}


def common_output_lengths(config, model_class):
    """`None`: the windowed models refuse `output_hidden_states=True` and `output_attentions=True` (a `ValueError`: a
    stream read window by window has no one hidden state or attention matrix per layer)."""
    return None
