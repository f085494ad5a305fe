"""The LongDoc BART `summarization` pipeline: each distinct document of a call encoded once, summaries equal to
`model.generate(input_ids=<the document alone>)`, beams and several returned sequences from the same encoder
outputs, HF's output format, and clear errors for bad input. (Loading a published folder where hf_readonce cannot be
imported: `tests/hub/test_publish_families.py`.)"""

import pytest
import torch

from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
from tests.models.longdoc_bart.cases import LONG_DOCUMENTS, tiny_longdoc


@pytest.fixture(scope="module")
def summarize(tokenizer):
    return LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer)


def by_hand(model, tokenizer, document, max_length=None, **generate):
    """The document alone, through `generate` with its input ids (the encoder runs inside `generate`)."""
    enc = tokenizer(document, truncation=max_length is not None, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, do_sample=False, **generate)
    return [tokenizer.decode(row, skip_special_tokens=True).strip() for row in out]


def test_summaries_equal_by_hand_and_each_document_encoded_once(summarize, tokenizer, monkeypatch):
    model = summarize.model
    assert model.config.neighborhood_radius < len(tokenizer(LONG_DOCUMENTS[0]).input_ids)  # local attention at work
    documents = [LONG_DOCUMENTS[0], LONG_DOCUMENTS[1], LONG_DOCUMENTS[0]]
    encoder = model.get_encoder()
    rows, forward = [], encoder.forward
    monkeypatch.setattr(encoder, "forward", lambda input_ids=None, **kw: rows.append(input_ids.shape[0])
                        or forward(input_ids=input_ids, **kw))
    got = summarize(documents, max_new_tokens=6)
    assert rows == [2]  # one encoder call over the two distinct documents; generate did not run the encoder again
    expected = [by_hand(model, tokenizer, d, max_new_tokens=6) for d in documents]
    assert got == [{"summary_text": text[0]} for text in expected]  # flat, as transformers' pipelines
    assert all(text[0] for text in expected) and expected[0] != expected[1]
    rows.clear()
    assert summarize(documents, max_new_tokens=6, batch_size=1) == got and rows == [1, 1]
    assert summarize(LONG_DOCUMENTS[1], max_new_tokens=6) == [got[1]]  # one document: a list of its sequences


def test_beams_and_several_sequences(summarize, tokenizer):
    generate = {"max_new_tokens": 5, "num_beams": 3, "num_return_sequences": 2}
    got = summarize(LONG_DOCUMENTS, max_new_tokens=5, num_beams=3, generate_kwargs={"num_return_sequences": 2})
    assert [[item["summary_text"] for item in per_doc] for per_doc in got] == \
        [by_hand(summarize.model, tokenizer, d, **generate) for d in LONG_DOCUMENTS]
    assert all(len(per_doc) == 2 for per_doc in got)


def test_max_document_len_truncates(summarize, tokenizer):
    got = summarize(LONG_DOCUMENTS[0], max_new_tokens=6, max_document_len=20)
    assert got == [{"summary_text": by_hand(summarize.model, tokenizer, LONG_DOCUMENTS[0], 20, max_new_tokens=6)[0]}]


def test_bad_input_raises_naming_the_argument(summarize, tokenizer):
    with pytest.raises(ValueError, match="`documents` 1 is empty"):
        summarize(["A document.", "  "])
    with pytest.raises(TypeError, match="`documents` 0 must be a str"):
        summarize([3])
    with pytest.raises(TypeError, match="`documents` must be a str, a list of str or an iterable of str"):
        summarize(7)
    with pytest.raises(ValueError, match="`documents` is empty"):
        summarize([])
    with pytest.raises(ValueError, match="`documents` is required"):
        summarize()
    with pytest.raises(ValueError, match="`max_new_tokens` must be >= 1"):
        summarize("A document.", max_new_tokens=0)
    with pytest.raises(TypeError, match="`num_beams` must be an int"):
        summarize("A document.", num_beams=1.5)
    with pytest.raises(ValueError, match=r"`max_document_len` must be <= config.max_position_embeddings = 128"):
        summarize("A document.", max_document_len=129)
    with pytest.raises(ValueError, match=r"must not set \['encoder_outputs'\]"):
        summarize("A document.", generate_kwargs={"encoder_outputs": None})
    with pytest.raises(TypeError, match="unexpected argument"):
        summarize("A document.", top_k=2)
    from tests.conftest import tiny_model

    with pytest.raises(TypeError, match="needs an encoder-decoder model"):
        LongDocSummarizationPipeline(model=tiny_model(), tokenizer=tokenizer)


def test_a_left_padding_tokenizer_gives_each_document_its_summary_alone(summarize, tokenizer):
    """BART's learned positions count from the first column: documents are padded on the right whatever the
    tokenizer's `padding_side`, so a batch summarizes each document as it does alone."""
    from transformers import AutoTokenizer

    left = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    left.padding_side = "left"
    pipe = LongDocSummarizationPipeline(model=summarize.model, tokenizer=left)
    documents = [LONG_DOCUMENTS[0], "A short document about Emma."]
    alone = [pipe(document, max_new_tokens=6)[0] for document in documents]
    assert pipe(documents, max_new_tokens=6) == alone
    assert alone == [summarize(document, max_new_tokens=6)[0] for document in documents]
    assert left.padding_side == "left"  # the tokenizer itself is left as it was


def test_documents_cut_to_max_document_len_are_said(summarize, caplog):
    """A document longer than the tokens read is cut (its summary comes from its first tokens): the pipeline says
    how many on its logger, as `hf-readonce encode` / `summarize` do; documents read whole give no warning."""
    import logging

    with caplog.at_level(logging.WARNING):
        summarize([LONG_DOCUMENTS[0], "A short one."], max_new_tokens=2, max_document_len=20)
    assert "1 of 2 document(s) held more than the 20 tokens read per document" in caplog.text
    assert "`max_document_len` reads more, up to 128" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # at the position table: nothing more to read
        summarize(LONG_DOCUMENTS[0] * 4, max_new_tokens=2)
    assert "1 of 1 document(s) held more than the 128 tokens" in caplog.text
    assert "the model reads no more: 128 positions" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summarize(LONG_DOCUMENTS, max_new_tokens=2)
    assert "held more than" not in caplog.text
