"""The LongDoc BART `summarization` pipeline (models/longdoc_bart/pipeline_longdoc_bart.py): what it asks of the
model. The summaries themselves, loading and remote code are tested in tests/hub/test_pipeline_longdoc.py."""

from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
from tests.models.longdoc_bart.cases import LONG_DOCUMENTS, tiny_longdoc
from tests.models.readonce_bart.test_pipeline_readonce_bart import record_model_calls


def test_summarizing_computes_no_per_layer_outputs_the_config_asks_for(tokenizer):
    """The pipeline returns the summaries only, but ran the encoder and `generate` without the output switches (and
    `generate` passes them on only when its generation config asks for them), so a config saved with
    `output_attentions=True` / `output_hidden_states=True` made the encoder and every decoding step compute and hold
    the weights and states, then dropped them. Every call gets both False; the summaries are the same."""
    model = tiny_longdoc()
    model.set_attn_implementation("eager")
    summarize = LongDocSummarizationPipeline(model=model, tokenizer=tokenizer)
    documents = [LONG_DOCUMENTS[0], LONG_DOCUMENTS[1]]
    expected = summarize(documents, max_new_tokens=3, generate_kwargs={"num_beams": 2})
    model.config.output_attentions = model.config.output_hidden_states = True
    calls, remove = record_model_calls(model, model.get_encoder())
    try:
        got = summarize(documents, max_new_tokens=3, generate_kwargs={"num_beams": 2})
    finally:
        remove()
    assert len(calls) > 2
    assert all(switches == {"output_attentions": False, "output_hidden_states": False} and not fields
               for switches, fields in calls), calls
    assert got == expected
