"""transformers' pipeline parameters on every family's pipeline: `batch_size` (the call's or the pipeline's) checked
and named as the user passed it, generation lengths set through `generate_kwargs` honoured, the inputs a pipeline
passes to `generate` refused when `generate_kwargs` sets them, and question-answering settings or contexts the
model cannot read refused with the argument named."""

import pytest

from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
from hf_readonce.models.readonce_bart.pipeline_readonce_bart import (
    ReadOnceSummarizationPipeline,
    ReadOnceText2TextGenerationPipeline,
)
from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import ReadTwiceQuestionAnsweringPipeline
from tests.conftest import tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS
from tests.hub.test_pipeline_readonce import DOCUMENTS, tiny_readonce
from tests.hub.test_pipeline_readtwice import tiny_readtwice
from tests.models.longdoc_bart.cases import LONG_DOCUMENTS, tiny_longdoc

QA = {"question": "Who was handsome, clever and rich?", "context": CONTEXTS[0]}


def _build(family, tokenizer, **kwargs):
    if family == "deformer_bert":
        return DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer, **kwargs), (QA,)
    if family == "readtwice_bert":
        return ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(), tokenizer=tokenizer, **kwargs), (QA,)
    if family == "readonce_bart":
        return ReadOnceSummarizationPipeline(model=tiny_readonce(), tokenizer=tokenizer, **kwargs), (DOCUMENTS[0],)
    return LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer, **kwargs), (LONG_DOCUMENTS[0],)


FAMILIES = ["deformer_bert", "readtwice_bert", "readonce_bart", "longdoc_bart"]


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_size_is_checked_and_named_batch_size(family, tokenizer):
    pipe, args = _build(family, tokenizer)
    generation = {} if family.endswith("bert") else {"max_new_tokens": 2}
    with pytest.raises(ValueError, match=r"^`batch_size` must be >= 1, got 0\.$"):
        pipe(*args, batch_size=0, **generation)
    with pytest.raises(TypeError, match=r"^`batch_size` must be an int, got str"):
        pipe(*args, batch_size="2", **generation)
    built, args = _build(family, tokenizer, batch_size=0)  # the pipeline's own batch size, checked at the call
    with pytest.raises(ValueError, match=r"^`batch_size` must be >= 1, got 0\.$"):
        built(*args, **generation)
    assert pipe(*args, batch_size=1, **generation) == pipe(*args, batch_size=2, **generation)


@pytest.mark.parametrize("cls", [ReadOnceSummarizationPipeline, ReadOnceText2TextGenerationPipeline])
def test_readonce_generation_length_from_generate_kwargs(cls, tokenizer):
    pipe = cls(model=tiny_readonce(), tokenizer=tokenizer)
    args = (DOCUMENTS[0],) if cls is ReadOnceSummarizationPipeline else ("Who wrote Emma?", DOCUMENTS[0])
    three = pipe(*args, max_new_tokens=3)
    default = pipe(*args)
    assert len(tokenizer(three[0][pipe.output_key], add_special_tokens=False).input_ids) == 3
    assert default != three  # 32 new tokens by default
    # `max_length` counts the decoder's start token: 4 is 3 new tokens
    assert pipe(*args, generate_kwargs={"max_length": 4}) == three
    assert pipe(*args, generate_kwargs={"max_new_tokens": 3}) == three
    assert cls(model=pipe.model, tokenizer=tokenizer, generate_kwargs={"max_length": 4})(*args) == three


@pytest.mark.parametrize("name", ["input_ids", "attention_mask", "document_representations", "encoder_outputs"])
def test_readonce_generate_kwargs_may_not_set_the_pipeline_inputs(name, tokenizer):
    pipe = ReadOnceSummarizationPipeline(model=tiny_readonce(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match=rf"`generate_kwargs` must not set \['{name}'\]"):
        pipe(DOCUMENTS[0], max_new_tokens=2, generate_kwargs={name: None})


def test_readtwice_question_length_beyond_positions_is_refused_naming_max_question_len(tokenizer):
    pipe = ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(), tokenizer=tokenizer)  # 64 positions
    with pytest.raises(ValueError, match=r"`max_question_len` must be <= max_position_embeddings=64.*got 65"):
        pipe(question="Who? " * 80, context=CONTEXTS[0], max_question_len=65)
    assert pipe(question="Who? " * 80, context=CONTEXTS[0], max_question_len=64)["answer"]


@pytest.mark.parametrize("build", [lambda: tiny_model(), lambda: tiny_readtwice(False), lambda: tiny_readtwice(True)],
                         ids=["deformer", "readtwice-read-once", "readtwice-paper"])
def test_context_without_a_token_is_refused(build, tokenizer):
    model = build()
    cls = DeformerQuestionAnsweringPipeline if model.config.model_type == "deformer_bert" else \
        ReadTwiceQuestionAnsweringPipeline
    pipe = cls(model=model, tokenizer=tokenizer)
    assert tokenizer("\u200b\u200b", add_special_tokens=False).input_ids == []  # characters the tokenizer drops
    with pytest.raises(ValueError, match="`context` 0 has no token"):
        pipe(question="Who?", context="\u200b\u200b")


def test_readonce_call_arguments_win_over_generate_kwargs_and_the_checkpoint_length_is_kept(tokenizer):
    model = tiny_readonce()
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    args = ("Who wrote Emma?", DOCUMENTS[0])
    three = pipe(*args, max_new_tokens=3)
    assert pipe(*args, max_new_tokens=3, generate_kwargs={"max_new_tokens": 6}) == three
    assert pipe(*args, max_new_tokens=3, generate_kwargs={"max_length": None}) == three
    assert pipe(*args, max_new_tokens=3, num_beams=2, generate_kwargs={"num_beams": 1, "num_return_sequences": 2}) \
        == pipe(*args, max_new_tokens=3, generate_kwargs={"num_beams": 2, "num_return_sequences": 2})
    model.generation_config.max_new_tokens = 3  # a length the checkpoint's generation config records
    assert pipe(*args) == three
    model.generation_config.max_new_tokens, model.generation_config.max_length = None, 4
    assert pipe(*args) == three


@pytest.mark.parametrize("family", ["readonce_bart", "longdoc_bart"])
def test_generate_kwargs_of_the_call_merge_with_the_pipeline_ones(family, tokenizer):
    three, args = _build(family, tokenizer, max_new_tokens=3)
    expected = three(*args)
    assert three(*args, generate_kwargs={"do_sample": False}) == expected  # the pipeline's length is kept
    built, args = _build(family, tokenizer, generate_kwargs={"max_new_tokens": 3})
    assert built(*args) == expected
    assert built(*args, generate_kwargs={"do_sample": False}) == expected


def test_readonce_decodes_as_the_checkpoints_generation_config_says(tokenizer):
    """Beams (or sampling) recorded in the model's `generation_config`, or in a `generation_config` given through
    `generate_kwargs`, are the pipeline's decoding, as `generate` reads them (the pipeline forced greedy decoding
    with one beam over both); `num_beams` of the call still wins."""
    from transformers import GenerationConfig

    model = tiny_readonce()
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    args = ("Who wrote Emma?", DOCUMENTS[0])
    beams = pipe(*args, max_new_tokens=6, num_beams=3, generate_kwargs={"num_return_sequences": 3})
    greedy = pipe(*args, max_new_tokens=6, generate_kwargs={"num_return_sequences": 1})
    assert pipe(*args, max_new_tokens=6, generate_kwargs={
        "generation_config": GenerationConfig(num_beams=3, num_return_sequences=3)}) == beams
    model.generation_config.num_beams, model.generation_config.num_return_sequences = 3, 3
    assert pipe(*args, max_new_tokens=6) == beams
    assert pipe(*args, max_new_tokens=6, num_beams=1, generate_kwargs={"num_return_sequences": 1}) == greedy


@pytest.mark.parametrize("family", ["readonce_bart", "longdoc_bart"])
def test_options_of_transformers_pipelines_not_taken_are_named_as_not_taken(family, tokenizer):
    """transformers' options these pipelines do not take (`truncation`, `return_type`) are not sent to
    `generate_kwargs` (where they would fail again): the message says this pipeline does not take them; a generation
    setting given beside them is still sent there."""
    pipe, args = _build(family, tokenizer, max_new_tokens=3)
    with pytest.raises(TypeError, match=r"\['return_type', 'truncation'\] are not parameters of this pipeline") as info:
        pipe(*args, return_type=1, truncation=True, do_sample=False)
    assert "such as ['do_sample'] in `generate_kwargs`" in str(info.value)
    assert "'truncation'] in `generate_kwargs`" not in str(info.value)


SPELLINGS = {
    "deformer_bert": {"max_answer_length": "max_answer_len", "max_question_length": "max_question_len",
                      "max_passage_length": "max_passage_len", "max_seq_length": "max_seq_len"},
    "readtwice_bert": {"max_answer_length": "max_answer_len", "max_question_length": "max_question_len"},
    "readonce_bart": {"max_document_length": "max_document_len", "max_question_length": "max_question_len"},
    "longdoc_bart": {"max_document_length": "max_document_len"},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_api_spelling_of_a_length_names_the_pipeline_spelling(family, tokenizer):
    # the Python API, the CLI and config fields say `max_answer_length`; the pipelines, as transformers', `_len`
    pipe, args = _build(family, tokenizer)
    for given, spelled in SPELLINGS[family].items():
        with pytest.raises(TypeError, match=rf"spells `{given}` as `{spelled}`") as raised:
            pipe(*args, **{given: 16})
        assert f"'{given}'" in str(raised.value)
        value = 100 if spelled == "max_seq_len" else 16  # room for the question's 64 tokens
        assert pipe(*args, **{spelled: value}) is not None  # the pipeline's own spelling is a parameter


def test_deformer_pipeline_call_dtype_names_store_dtype(tokenizer):
    pipe, args = _build("deformer_bert", tokenizer)
    with pytest.raises(TypeError, match=r"`dtype` is the compute dtype, given when the pipeline is built.*"
                                        r"storage dtype of `store=` is `store_dtype`"):
        pipe(*args, dtype="float16")
    with pytest.raises(TypeError, match=r"not parameters of this pipeline") as raised:  # no hint where none applies
        _build("longdoc_bart", tokenizer)[0](LONG_DOCUMENTS[0], dtype="float16")
    assert "store_dtype" not in str(raised.value)
