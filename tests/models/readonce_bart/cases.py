"""The readonce_bart family's test cases, found through the family registry (`tests/models/<family>/cases.py`):
`CASES`, each published and loaded where hf-readonce is absent (`tests/hub/family_cases.py`), and
`contract_harness`, the adapter's store round trip (`tests/representations/test_contract.py`)."""

import torch

from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
from tests.hub.family_cases import FamilyCase
from tests.hub.test_pipeline_readonce import DOCUMENTS as PIPELINE_DOCUMENTS
from tests.hub.test_pipeline_readonce import TEXTS, tiny_readonce
from tests.representations.contract import DOCUMENTS, QUESTION

CASES = [
    FamilyCase("readonce_bart", tiny_readonce, "AutoModelForSeq2SeqLM", f"""
doc = tokenizer([{PIPELINE_DOCUMENTS[0]!r}], return_tensors="pt")
reps = model.encode_documents(doc.input_ids, doc.attention_mask)
q = tokenizer([{TEXTS[0]!r}], return_tensors="pt")
out = model(input_ids=q.input_ids, attention_mask=q.attention_mask, decoder_input_ids=torch.tensor([[101, 2040, 2626]]),
            document_representations=reps)
outputs = {{"representations": reps.representations, "logits": out.logits}}
""", [("text2text-generation", [TEXTS], {"document": PIPELINE_DOCUMENTS[0], "max_new_tokens": 5}),
      ("summarization", [PIPELINE_DOCUMENTS], {"max_new_tokens": 5})], "text2text-generation", "readonce"),
]


def contract_harness(tokenizer):
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None)).eval()
    settings = {"max_document_length": 64}

    def check(adapter, read):
        documents = tokenizer(DOCUMENTS, truncation=True, max_length=64, padding=True, return_tensors="pt")
        question = tokenizer([QUESTION] * len(DOCUMENTS), return_tensors="pt")
        labels = torch.randint(1000, 2000, (len(DOCUMENTS), 5), generator=torch.Generator().manual_seed(0))
        from_store = model(question.input_ids, attention_mask=question.attention_mask,
                           document_representations=read, document_attention_mask=read.attention_mask, labels=labels)
        itself = model(question.input_ids, attention_mask=question.attention_mask, labels=labels,
                       document_input_ids=documents.input_ids,
                       document_input_attention_mask=documents.attention_mask)
        torch.testing.assert_close(from_store.logits, itself.logits, atol=1e-5, rtol=0)
        generate = dict(attention_mask=question.attention_mask, max_new_tokens=4, min_new_tokens=4, do_sample=False)
        stored_tokens = model.generate(question.input_ids, document_representations=read,
                                       document_attention_mask=read.attention_mask, **generate)
        own = model.encode_documents(documents.input_ids, documents.attention_mask)
        own_tokens = model.generate(question.input_ids, document_representations=own,
                                    document_attention_mask=own.attention_mask, **generate)
        assert torch.equal(stored_tokens, own_tokens)

    return model, settings, check


# ----------------------------------------------------------------- the common model checks (test_modeling_common.py)
def common_config(model_type):
    """A tiny config of `model_type`, without dropout, for `tests/models/test_modeling_common.py`: the attention fusion
    (`Attn'` over the representations in the upper encoder layers and every decoder layer)."""
    from hf_readonce import ReadOnceBartConfig

    return ReadOnceBartConfig(
        vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, compression_ratio=4, fusion="attention", pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)


def common_base_class(model_class):
    """The plain transformers class whose checkpoints `model_class` loads."""
    from transformers import BartModel

    return BartModel


def common_inputs(model, seed=0):
    """`model`'s forward arguments: a question, its document (read by the document encoder of the full model, stored
    representations for the base model), decoder inputs (labels where the class computes a loss)."""
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    question = torch.randint(3, vocab, (2, 7), generator=generator)
    document = torch.randint(3, vocab, (2, 16), generator=generator)
    document_mask = torch.ones_like(document)
    document_mask[1, -4:] = 0
    targets = torch.randint(3, vocab, (2, 5), generator=generator)
    if isinstance(model, ReadOnceBartForConditionalGeneration):
        return {"input_ids": question, "attention_mask": torch.ones_like(question), "document_input_ids": document,
                "document_input_attention_mask": document_mask, "labels": targets}
    # the base model reads stored representations: four per document, the last of the second one padding
    representations = torch.randn(2, 4, model.config.d_model, generator=generator).to(model.dtype)
    return {"input_ids": question, "attention_mask": torch.ones_like(question), "decoder_input_ids": targets,
            "document_representations": representations, "document_attention_mask": torch.tensor([[1] * 4, [1] * 3 + [0]])}


def common_output_lengths(config, model_class):
    """Output field -> how many tensors it holds with `output_hidden_states=True`, `output_attentions=True`."""
    fused = config.encoder_layers - config.append_layer
    return {"encoder_hidden_states": config.encoder_layers + 1, "decoder_hidden_states": config.decoder_layers + 1,
            "encoder_attentions": config.encoder_layers, "decoder_attentions": config.decoder_layers,
            "cross_attentions": config.decoder_layers, "encoder_representation_attentions": fused,
            "decoder_representation_attentions": config.decoder_layers}
