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
