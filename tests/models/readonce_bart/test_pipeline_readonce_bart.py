"""ReadOnce BART pipelines (models/readonce_bart/pipeline_readonce_bart.py): what they say about inputs they cut. The
generations themselves, loading and remote code are tested in tests/hub/test_pipeline_readonce.py."""

import logging

import pytest
import torch

from hf_readonce.models.readonce_bart.pipeline_readonce_bart import (
    ReadOnceSummarizationPipeline,
    ReadOnceText2TextGenerationPipeline,
)
from tests.hub.test_pipeline_readonce import DOCUMENTS, tiny_readonce

LONG_QUESTION = "Who wrote the novel about youthful hubris that was published in December 1815 in London?"
LOGGER = "hf_readonce.models.readonce_bart.pipeline_readonce_bart"


def cut_warnings(caplog, noun):
    return [record.getMessage() for record in caplog.records
            if record.name == LOGGER and f"{noun}(s) held more than" in record.getMessage()]


def test_questions_and_prompts_cut_to_max_question_len_are_said_once_per_call(tokenizer, caplog):
    """A question longer than `max_question_len` was cut silently (documents cut to `max_document_len` were
    said): one warning per call counts the questions (the summarization pipeline's prompts) cut and names the limit,
    however many `generate` batches the call runs; texts read whole give none."""
    model = tiny_readonce()
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    assert len(tokenizer(LONG_QUESTION).input_ids) > 8 >= len(tokenizer("Who wrote Emma?").input_ids)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        pipe([LONG_QUESTION, "Who wrote Emma?", LONG_QUESTION], document=DOCUMENTS[0], max_new_tokens=2,
             max_question_len=8, batch_size=1)
    assert cut_warnings(caplog, "question") == [
        "2 of 3 question(s) held more than the 8 tokens read per question and were cut to them: what is generated "
        "for them reads those tokens only (`max_question_len` reads more)."]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        pipe([LONG_QUESTION, "Who wrote Emma?"], document=DOCUMENTS[0], max_new_tokens=2)  # 32 tokens: read whole
    assert cut_warnings(caplog, "question") == []

    summarize = ReadOnceSummarizationPipeline(model=model, tokenizer=tokenizer)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        summarize(DOCUMENTS, prompt=LONG_QUESTION, max_new_tokens=2, max_question_len=8)
    assert [message.split(":")[0] for message in cut_warnings(caplog, "prompt")] == [
        "2 of 2 prompt(s) held more than the 8 tokens read per prompt and were cut to them"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        summarize(DOCUMENTS, max_new_tokens=2)  # the default prompt "summary"
    assert cut_warnings(caplog, "prompt") == []


def test_the_question_length_defaults_to_the_checkpoints(tokenizer, caplog):
    """Without `max_question_len`, the pipelines read the question length the checkpoint records it was trained with
    (`config.max_question_length`, as the ReadOnce recipe writes it), else 32; a given one still wins."""
    model = tiny_readonce()
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    model.config.max_question_length = 8
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        recorded = pipe([LONG_QUESTION, "Who wrote Emma?"], document=DOCUMENTS[0], max_new_tokens=2)
    assert [message.split(":")[0] for message in cut_warnings(caplog, "question")] == [
        "1 of 2 question(s) held more than the 8 tokens read per question and were cut to them"]
    assert recorded == pipe([LONG_QUESTION, "Who wrote Emma?"], document=DOCUMENTS[0], max_new_tokens=2,
                            max_question_len=8)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        pipe([LONG_QUESTION], document=DOCUMENTS[0], max_new_tokens=2, max_question_len=32)  # given: read whole
        ReadOnceSummarizationPipeline(model=model, tokenizer=tokenizer)(DOCUMENTS[0], prompt=LONG_QUESTION,
                                                                        max_new_tokens=2)
    assert cut_warnings(caplog, "question") == []
    assert [message.split(":")[0] for message in cut_warnings(caplog, "prompt")] == [
        "1 of 1 prompt(s) held more than the 8 tokens read per prompt and were cut to them"]
    model.config.max_question_length = None  # nothing recorded: 32, the adapter's default as well
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        pipe([LONG_QUESTION], document=DOCUMENTS[0], max_new_tokens=2)
    assert cut_warnings(caplog, "question") == []
    from hf_readonce.models.readonce_bart import pipeline_readonce_bart
    from hf_readonce.representations import ReadOnceBartAdapter

    assert pipeline_readonce_bart._DEFAULT_MAX_QUESTION_LEN == ReadOnceBartAdapter.max_prompt_length == 32


@pytest.mark.parametrize("switch, field", [("output_attentions", "attentions"), ("output_hidden_states", "hidden_states")])
def test_document_encoding_computes_no_per_layer_outputs_the_config_asks_for(tokenizer, switch, field):
    """The pipelines keep the representations only: a model whose config asks for attention weights (eager) or
    per-layer hidden states does not make `encode_documents` compute and hold the document encoder's (they followed
    the config), and generates the same."""
    model = tiny_readonce()
    model.set_attn_implementation("eager")
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    summarize = ReadOnceSummarizationPipeline(model=model, tokenizer=tokenizer)
    expected = (pipe(["Who wrote Emma?", LONG_QUESTION], document=DOCUMENTS[0], max_new_tokens=3),
                summarize(DOCUMENTS, max_new_tokens=3))
    setattr(model.config, switch, True)
    seen, encode = [], model.encode_documents
    model.encode_documents = lambda *args, **kwargs: seen.append(encode(*args, **kwargs)) or seen[-1]
    got = (pipe(["Who wrote Emma?", LONG_QUESTION], document=DOCUMENTS[0], max_new_tokens=3),
           summarize(DOCUMENTS, max_new_tokens=3))
    assert len(seen) == 2 and all(getattr(out, field) is None for out in seen)
    assert got == expected


PER_LAYER_FIELDS = ("attentions", "hidden_states", "encoder_attentions", "encoder_hidden_states", "decoder_attentions",
                    "decoder_hidden_states", "cross_attentions", "encoder_representation_attentions",
                    "decoder_representation_attentions")


def record_model_calls(*modules):
    """Forward hooks on `modules` recording, per call, the output switches it was given and the per-layer fields
    its output holds; returns the list they fill and a function removing the hooks."""
    calls = []

    def hook(module, args, kwargs, output):
        calls.append(({name: kwargs.get(name) for name in ("output_attentions", "output_hidden_states")},
                      [name for name in PER_LAYER_FIELDS if getattr(output, name, None) is not None]))

    handles = [module.register_forward_hook(hook, with_kwargs=True) for module in modules]
    return calls, lambda: [handle.remove() for handle in handles]


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_generation_computes_no_per_layer_outputs_the_config_asks_for(tokenizer, fusion):
    """The pipelines return the generated text only, but `generate` passes the output switches on only when its
    generation config asks for them, so a model config saved with `output_attentions=True` /
    `output_hidden_states=True` made every decoding step compute and hold the weights and states (the encoder's too),
    then dropped them. Every call now gets both switches False, and the text is the same."""
    config = tiny_readonce().config
    torch.manual_seed(0)
    model = type(tiny_readonce())(type(config).from_dict({**config.to_dict(), "fusion": fusion})).eval()
    model.set_attn_implementation("eager")
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    summarize = ReadOnceSummarizationPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(["Who wrote Emma?", "Who?"], document=DOCUMENTS[0], max_new_tokens=3, num_beams=2)
    expected_summary = summarize(DOCUMENTS, max_new_tokens=3)
    model.config.output_attentions = model.config.output_hidden_states = True
    calls, remove = record_model_calls(model, model.get_encoder())
    try:
        got = pipe(["Who wrote Emma?", "Who?"], document=DOCUMENTS[0], max_new_tokens=3, num_beams=2)
        got_summary = summarize(DOCUMENTS, max_new_tokens=3)
    finally:
        remove()
    assert len(calls) > 2
    assert all(switches == {"output_attentions": False, "output_hidden_states": False} and not fields
               for switches, fields in calls), calls
    assert got == expected and got_summary == expected_summary
