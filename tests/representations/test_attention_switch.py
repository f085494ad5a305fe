"""The store adapters keep the passage / document states only: a model whose config asks for attention weights
(`output_attentions=True`, eager attention) or per-layer hidden states (`output_hidden_states=True`) does not make
them compute and hold every layer's outputs per batch; what they store and the fingerprint do not change."""

import pytest
import torch

from hf_readonce import (
    ReadOnceBartConfig,
    ReadOnceBartForConditionalGeneration,
    ReadTwiceBertConfig,
    ReadTwiceBertForQuestionAnswering,
)
from hf_readonce.representations import DeformerBertAdapter, ReadOnceBartAdapter, ReadTwiceBertAdapter
from tests.conftest import tiny_model

TEXTS = ["The river flows north past the old mill.", "A short one."]
# each config switch, with the output field it fills
SWITCHES = pytest.mark.parametrize("switch, field", [("output_attentions", "attentions"),
                                                     ("output_hidden_states", "hidden_states")])


def _spy(model, method):
    """Wrap `model.<method>` and return the list its outputs are appended to."""
    seen, original = [], getattr(model, method)

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out)
        return out

    setattr(model, method, spy)
    return seen


@SWITCHES
def test_deformer_adapter_does_not_compute_the_outputs_the_config_asks_for(tokenizer, switch, field):
    model = tiny_model()
    model.set_attn_implementation("eager")
    expected = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8).encode(TEXTS)
    setattr(model.config, switch, True)
    seen = _spy(model, "encode_passages")
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    got = adapter.encode(TEXTS)
    assert seen and all(getattr(out, field) is None for out in seen)
    assert adapter.fingerprint() == DeformerBertAdapter(model, tokenizer, max_passage_length=32,
                                                        doc_stride=8).fingerprint()
    for a, b in zip(got, expected):
        assert torch.equal(a["hidden_states"], b["hidden_states"])


@SWITCHES
def test_readonce_adapter_does_not_compute_the_outputs_the_config_asks_for(tokenizer, switch, field):
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0)).eval()
    model.set_attn_implementation("eager")
    expected = ReadOnceBartAdapter(model, tokenizer, max_document_length=64).encode(TEXTS)
    setattr(model.config, switch, True)
    seen = _spy(model, "encode_documents")
    got = ReadOnceBartAdapter(model, tokenizer, max_document_length=64).encode(TEXTS)
    assert seen and all(getattr(out, field) is None for out in seen)
    for a, b in zip(got, expected):
        assert torch.equal(a["representations"], b["representations"])


@SWITCHES
def test_readtwice_adapter_does_not_compute_the_outputs_the_config_asks_for(tokenizer, switch, field):
    torch.manual_seed(0)
    model = ReadTwiceBertForQuestionAnswering(ReadTwiceBertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, num_second_read_layers=1, memory_type="sts", span_length=4, memory_top_k=None,
        segment_length=8, segment_overlap=2, question_in_first_read=False)).eval()
    model.set_attn_implementation("eager")
    expected = ReadTwiceBertAdapter(model, tokenizer).encode(TEXTS)
    setattr(model.config, switch, True)
    seen = _spy(model.bert, "encode_documents")
    adapter = ReadTwiceBertAdapter(model, tokenizer)
    got = adapter.encode(TEXTS)
    again = adapter.recompute_from_stored(got[0])
    assert len(seen) == 2 and all(getattr(out, field) is None for out in seen)
    assert adapter.fingerprint() == ReadTwiceBertAdapter(model, tokenizer).fingerprint()
    for a, b in zip([*got, again], [*expected, expected[0]]):
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), name
