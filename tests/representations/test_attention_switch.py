"""The store adapters keep the passage / document states only: a model whose config asks for attention weights
(`output_attentions=True`, eager attention) does not make them compute and hold every layer's weights per batch."""

import torch

from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
from hf_readonce.representations import DeformerBertAdapter, ReadOnceBartAdapter
from tests.conftest import tiny_model

TEXTS = ["The river flows north past the old mill.", "A short one."]


def _spy(model, method):
    """Wrap `model.<method>` and return the list its outputs are appended to."""
    seen, original = [], getattr(model, method)

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out)
        return out

    setattr(model, method, spy)
    return seen


def test_deformer_adapter_does_not_compute_attentions_the_config_asks_for(tokenizer):
    model = tiny_model()
    model.set_attn_implementation("eager")
    expected = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8).encode(TEXTS)
    model.config.output_attentions = True
    seen = _spy(model, "encode_passages")
    got = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8).encode(TEXTS)
    assert seen and all(out.attentions is None for out in seen)
    for a, b in zip(got, expected):
        assert torch.equal(a["hidden_states"], b["hidden_states"])


def test_readonce_adapter_does_not_compute_attentions_the_config_asks_for(tokenizer):
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0)).eval()
    model.set_attn_implementation("eager")
    expected = ReadOnceBartAdapter(model, tokenizer, max_document_length=64).encode(TEXTS)
    model.config.output_attentions = True
    seen = _spy(model, "encode_documents")
    got = ReadOnceBartAdapter(model, tokenizer, max_document_length=64).encode(TEXTS)
    assert seen and all(out.attentions is None for out in seen)
    for a, b in zip(got, expected):
        assert torch.equal(a["representations"], b["representations"])
