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


def ask_for_per_layer_outputs(model):
    """Switch every per-layer output on in the model's config and its generation config (as a config saved with
    them does: `GenerationConfig.from_model_config` copies them, and asks for a dict from `generate`)."""
    model.config.output_attentions = model.config.output_hidden_states = True
    model.generation_config.update(output_attentions=True, output_hidden_states=True, return_dict_in_generate=True)


def record_encoder_and_generate_calls(model):
    """Record, per call of the model's encoder, the output switches it was given and the per-layer fields its
    output holds, and the type of what each `generate` call returns; returns the two lists and a function undoing
    the recording."""
    encoder_calls, generated = [], []

    def hook(module, args, kwargs, output):
        encoder_calls.append(({name: kwargs.get(name) for name in ("output_attentions", "output_hidden_states")},
                              [name for name in PER_LAYER_FIELDS if getattr(output, name, None) is not None]))

    handle = model.get_encoder().register_forward_hook(hook, with_kwargs=True)
    generate = model.generate

    def recording_generate(*args, **kwargs):
        out = generate(*args, **kwargs)
        generated.append(type(out))
        return out

    model.generate = recording_generate

    def remove():
        handle.remove()
        del model.generate

    return encoder_calls, generated, remove


@pytest.mark.parametrize("fusion", ["append", "attention"])
def test_generation_computes_no_per_layer_outputs_the_config_asks_for(tokenizer, fusion):
    """The pipelines return the generated text only, but ran `generate` with the generation config's switches, so
    a model saved with `output_attentions=True` / `output_hidden_states=True` made `generate`'s text encoder compute
    and hold every layer's weights and states, and a generation config asking for a dict
    (`return_dict_in_generate`, which `GenerationConfig.from_model_config` sets with them) failed with an
    AttributeError. `generate` gets both switches False and returns the sequences (a tensor): its encoder computes
    no weights or states (its decoding steps read the model config's, as for any transformers model); the text is
    the same."""
    config = tiny_readonce().config
    torch.manual_seed(0)
    model = type(tiny_readonce())(type(config).from_dict({**config.to_dict(), "fusion": fusion})).eval()
    model.set_attn_implementation("eager")
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    summarize = ReadOnceSummarizationPipeline(model=model, tokenizer=tokenizer)
    expected = pipe(["Who wrote Emma?", "Who?"], document=DOCUMENTS[0], max_new_tokens=3, num_beams=2)
    expected_summary = summarize(DOCUMENTS, max_new_tokens=3)
    ask_for_per_layer_outputs(model)
    encoder_calls, generated, remove = record_encoder_and_generate_calls(model)
    try:
        got = pipe(["Who wrote Emma?", "Who?"], document=DOCUMENTS[0], max_new_tokens=3, num_beams=2)
        got_summary = summarize(DOCUMENTS, max_new_tokens=3)
    finally:
        remove()
    assert len(encoder_calls) == len(generated) == 2
    assert all(switches == {"output_attentions": False, "output_hidden_states": False} and not fields
               for switches, fields in encoder_calls), encoder_calls
    assert generated == [torch.Tensor] * 2
    assert got == expected and got_summary == expected_summary
