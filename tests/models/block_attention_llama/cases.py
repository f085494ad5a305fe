"""The block_attention_llama family's test cases, found through the family registry (`tests/models/<family>/cases.py`):
`CASES`, each published and loaded where hf-readonce is absent (`tests/hub/family_cases.py`), and
`contract_harness`, the adapter's store round trip (`tests/representations/test_contract.py`)."""

import torch

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
from tests.hub.family_cases import GENERATE, LLAMA_TINY, FamilyCase
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS
from tests.representations.contract import DOCUMENTS, QUESTION

LLAMA_PROMPT = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home"


def tiny_block_attention():
    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM

    torch.manual_seed(0)
    return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(max_position_embeddings=128, **LLAMA_TINY)).eval()


CASES = [
    FamilyCase("block_attention_llama", tiny_block_attention, "AutoModelForCausalLM", f"""
doc = tokenizer({CONTEXTS[1]!r}, return_tensors="pt").input_ids
question = tokenizer({QUESTIONS[1][0]!r}, add_special_tokens=False, return_tensors="pt").input_ids
outputs = {{"logits": model(torch.cat([doc, question], dim=1)).logits,
            "composed": model(question, document_caches=model.encode_documents(doc)).logits}}
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
# Trainer(label_smoothing_factor=...) shifts the labels by one only for the causal-LM class names listed there
assert type(model).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(), type(model).__name__
""", [("text-generation", [LLAMA_PROMPT], GENERATE)], "text-generation", "block-attention"),
]


def contract_harness(tokenizer):
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0,
        bos_token_id=101, eos_token_id=102)).eval()
    settings = {"max_document_length": 64}  # the long document is truncated

    def check(adapter, read):
        documents = [torch.tensor([ids]) for ids in adapter.tokenize(DOCUMENTS)]
        assert read.key_states.shape[0] == len(DOCUMENTS) and max(d.shape[1] for d in documents) == 64
        question = torch.tensor([tokenizer(QUESTION, add_special_tokens=False)["input_ids"]])
        # the model reading the documents itself: every document alone (block mask), then the question
        prompt = torch.cat([*documents, question], dim=1)
        block_ids = torch.tensor([[b for b, d in enumerate(documents) for _ in range(d.shape[1])]
                                  + [-1] * question.shape[1]])
        itself = model(prompt, block_ids=block_ids).logits[:, -question.shape[1]:]
        from_store = model(question, document_caches=read).logits
        torch.testing.assert_close(from_store, itself, atol=1e-5, rtol=0)
        generate = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
        stored_tokens = model.generate(question, document_caches=read, **generate)
        own = [model.encode_documents(d) for d in documents]
        assert torch.equal(stored_tokens, model.generate(question, document_caches=own, **generate))
        # one stored document before the question is the plain causal LM reading document + question
        single = model.generate(question, document_caches=read.split()[0], **generate)
        full = model.generate(torch.cat([documents[0], question], dim=1), **generate)
        assert torch.equal(single, full[:, documents[0].shape[1]:])

    return model, settings, check


# ----------------------------------------------------------------- the common model checks (test_modeling_common.py)
def common_config(model_type):
    """A tiny config of `model_type`, without dropout, for `tests/models/test_modeling_common.py`."""
    return BlockAttentionLlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2)


def common_base_class(model_class):
    """The plain transformers class whose checkpoints `model_class` loads."""
    from transformers import LlamaModel

    return LlamaModel


def common_inputs(model, seed=0):
    """`model`'s forward arguments: two document blocks, then a global question (`block_ids`), labels where the class
    computes a loss."""
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(seed))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "block_ids": torch.tensor([[0] * 4 + [1] * 4 + [-1] * 4] * 2)}
    if isinstance(model, BlockAttentionLlamaForCausalLM):
        inputs["labels"] = ids
    return inputs


def common_output_lengths(config, model_class):
    """Output field -> how many tensors it holds with `output_hidden_states=True`, `output_attentions=True`."""
    return {"hidden_states": config.num_hidden_layers + 1, "attentions": config.num_hidden_layers}
