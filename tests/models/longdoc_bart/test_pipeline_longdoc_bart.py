"""The LongDoc BART `summarization` pipeline (models/longdoc_bart/pipeline_longdoc_bart.py): what it asks of the
model. The summaries themselves, loading and remote code are tested in tests/hub/test_pipeline_longdoc.py."""

import torch

from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
from tests.models.longdoc_bart.cases import LONG_DOCUMENTS, tiny_longdoc
from tests.models.readonce_bart.test_pipeline_readonce_bart import (
    ask_for_per_layer_outputs,
    record_encoder_and_generate_calls,
)


def test_summarizing_computes_no_per_layer_outputs_the_config_asks_for(tokenizer):
    """The pipeline returns the summaries only, but ran the encoder without the output switches and `generate` with
    the generation config's, so a model saved with `output_attentions=True` / `output_hidden_states=True` made the
    encoder compute and hold every layer's weights and states, and a generation config asking for a dict
    (`return_dict_in_generate`, which `GenerationConfig.from_model_config` sets with them) failed with an
    AttributeError. The encoder and `generate` get both switches False and `generate` returns the sequences (a
    tensor; the decoding steps read the model config's switches, as for any transformers model); the summaries are
    the same."""
    model = tiny_longdoc()
    model.set_attn_implementation("eager")
    summarize = LongDocSummarizationPipeline(model=model, tokenizer=tokenizer)
    documents = [LONG_DOCUMENTS[0], LONG_DOCUMENTS[1]]
    expected = summarize(documents, max_new_tokens=3, generate_kwargs={"num_beams": 2})
    ask_for_per_layer_outputs(model)
    encoder_calls, generated, remove = record_encoder_and_generate_calls(model)
    try:
        got = summarize(documents, max_new_tokens=3, generate_kwargs={"num_beams": 2})
    finally:
        remove()
    assert len(encoder_calls) >= 1 and len(generated) >= 1
    assert all(switches == {"output_attentions": False, "output_hidden_states": False} and not fields
               for switches, fields in encoder_calls), encoder_calls
    assert generated == [torch.Tensor] * len(generated)
    assert got == expected
