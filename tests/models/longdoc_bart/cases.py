"""The longdoc_bart family's test cases, found through the family registry (`tests/models/<family>/cases.py`):
`CASES`, each published and loaded where hf-readonce is absent (`tests/hub/family_cases.py`), and
`contract_harness`, the adapter's store round trip (`tests/representations/test_contract.py`)."""

import torch

from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration
from tests.hub.family_cases import FamilyCase
from tests.hub.test_pipeline_deformer import CONTEXTS
from tests.representations.contract import DOCUMENTS

LONG_DOCUMENTS = [CONTEXTS[0] + " " + CONTEXTS[1], CONTEXTS[1]]


def tiny_longdoc():
    from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration

    torch.manual_seed(0)
    # neighborhood attention with r = 4, shorter than the documents; init_std 0.5 so that the summaries depend on
    # the document (at 0.2 this tiny model writes the same words for every document)
    return LongDocBartForConditionalGeneration(LongDocBartConfig(
        vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=128,
        encoder_attention_type="neighborhood", neighborhood_radius=4, init_std=0.5, pad_token_id=0, bos_token_id=101,
        eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None)).eval()


CASES = [
    FamilyCase("longdoc_bart", tiny_longdoc, "AutoModelForSeq2SeqLM", f"""
enc = tokenizer({LONG_DOCUMENTS[0]!r}, return_tensors="pt")
out = model(**enc, decoder_input_ids=torch.tensor([[101, 2040, 2626]]))
outputs = {{"encoder": out.encoder_last_hidden_state, "logits": out.logits}}
""", [("summarization", [LONG_DOCUMENTS + LONG_DOCUMENTS[:1]], {"max_new_tokens": 6}),
      ("summarization", [LONG_DOCUMENTS[1]], {"max_new_tokens": 4, "num_beams": 2,
                                              "generate_kwargs": {"num_return_sequences": 2}})],
        "summarization", "longdoc"),
]


def contract_harness(tokenizer):
    torch.manual_seed(0)
    # neighborhood attention with r = 4 < the documents' lengths, so the stored outputs are the local ones; init_std
    # 0.2 so that the encoder outputs move the logits enough for the comparison to bite
    model = LongDocBartForConditionalGeneration(LongDocBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        encoder_attention_type="neighborhood", neighborhood_radius=4, init_std=0.2, pad_token_id=0,
        bos_token_id=101, eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None)).eval()
    settings = {"max_document_length": 64}

    def check(adapter, read):
        documents = tokenizer(DOCUMENTS, truncation=True, max_length=64, padding=True, return_tensors="pt")
        assert read.last_hidden_state.shape == (len(DOCUMENTS), documents.input_ids.shape[1], 32)
        assert torch.equal(read.attention_mask, documents.attention_mask)
        labels = torch.randint(1000, 2000, (len(DOCUMENTS), 5), generator=torch.Generator().manual_seed(0))
        from_store = model(encoder_outputs=read, attention_mask=read.attention_mask, labels=labels)
        itself = model(input_ids=documents.input_ids, attention_mask=documents.attention_mask, labels=labels)
        torch.testing.assert_close(from_store.logits, itself.logits, atol=1e-5, rtol=0)
        for num_beams in (1, 2):  # beam search expands `encoder_outputs` in place: a fresh read per call
            generate = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=num_beams)
            fresh = adapter.read([{"hidden_states": read.last_hidden_state[i][read.attention_mask[i].bool()]}
                                  for i in range(len(DOCUMENTS))])
            stored_tokens = model.generate(encoder_outputs=fresh, attention_mask=fresh.attention_mask, **generate)
            own_tokens = model.generate(documents.input_ids, attention_mask=documents.attention_mask, **generate)
            assert stored_tokens.shape == (len(DOCUMENTS), 7) and torch.equal(stored_tokens, own_tokens)

    return model, settings, check


# ----------------------------------------------------------------- the common model checks (test_modeling_common.py)
def common_config(model_type):
    """A tiny config of `model_type`, without dropout, for `tests/models/test_modeling_common.py`: neighborhood
    attention (radius 4, shorter than the inputs) with the convolution's parameters."""
    return LongDocBartConfig(
        vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, encoder_attention_type="neighborhood_convolutional",
        neighborhood_radius=4, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=None)


def common_base_class(model_class):
    """The plain transformers class whose checkpoints `model_class` loads."""
    from transformers import BartModel

    return BartModel


def common_inputs(model, seed=0):
    """`model`'s forward arguments: a padded batch of two documents, decoder inputs (labels where the class computes
    a loss)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (2, 18), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -5:] = 0
    targets = torch.randint(3, model.config.vocab_size, (2, 5), generator=generator)
    if isinstance(model, LongDocBartForConditionalGeneration):
        return {"input_ids": ids, "attention_mask": mask, "labels": targets}
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": targets}


def common_output_lengths(config, model_class):
    """Output field -> how many tensors it holds with `output_hidden_states=True`, `output_attentions=True`."""
    return {"encoder_hidden_states": config.encoder_layers + 1, "decoder_hidden_states": config.decoder_layers + 1,
            "encoder_attentions": config.encoder_layers, "decoder_attentions": config.decoder_layers,
            "cross_attentions": config.decoder_layers}
