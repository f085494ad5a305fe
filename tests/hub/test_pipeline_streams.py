"""Every document pipeline over iterables (a generator, a `datasets.Dataset`, transformers' `KeyDataset`, a
`torch.utils.data.Dataset`): an iterator with the list call's results, in order, that pulls `batch_size` inputs at a
time and names a bad input by its position; transformers' output options (`return_tensors`, `return_text`,
`clean_up_tokenization_spaces`) on the generating pipelines; generate arguments of the call over the pipeline's."""

import pytest
import torch
from transformers import GenerationConfig

from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
from hf_readonce.models.readonce_bart.pipeline_readonce_bart import (
    ReadOnceSummarizationPipeline,
    ReadOnceText2TextGenerationPipeline,
)
from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import ReadTwiceQuestionAnsweringPipeline
from tests.conftest import tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS
from tests.hub.test_pipeline_readonce import DOCUMENTS, tiny_readonce
from tests.hub.test_pipeline_readtwice import tiny_readtwice
from tests.models.longdoc_bart.cases import LONG_DOCUMENTS, tiny_longdoc

# a context repeated within a group of 2 and across groups
ROWS = [{"question": q, "context": c} for c, questions in zip(CONTEXTS, QUESTIONS) for q in questions] + \
    [{"question": "Who was her father?", "context": CONTEXTS[0]}]
TEXTS = ["Who wrote Emma?", "When was Emma published?", "What is it about?", "Who is Emma?", "Who wrote it?"]


class Counted:
    """A generator of `items` that counts how many were pulled."""

    def __init__(self, items):
        self.items, self.pulled = list(items), 0

    def __iter__(self):
        for item in self.items:
            self.pulled += 1
            yield item


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = list(items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def _qa(family, tokenizer):
    if family == "deformer_bert":
        return DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer)
    return ReadTwiceQuestionAnsweringPipeline(model=tiny_readtwice(), tokenizer=tokenizer)


def _same_answers(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert (a["answer"], a["start"], a["end"]) == (b["answer"], b["start"], b["end"])
        assert a["score"] == pytest.approx(b["score"], rel=1e-4, abs=1e-7)


def _laziness(pipe, items, size, *args, **kwargs):
    """The results of `pipe` over a counted generator of `items`, checking that the first result pulls one group."""
    source = Counted(items)
    iterator = pipe(iter(source), *args, batch_size=size, **kwargs)
    assert source.pulled == 0  # nothing is read before the iterator is advanced
    first = next(iterator)
    assert source.pulled == size
    return [first, *iterator]


@pytest.mark.parametrize("family", ["deformer_bert", "readtwice_bert"])
def test_question_answering_over_iterables(family, tokenizer):
    import datasets

    pipe = _qa(family, tokenizer)
    expected = pipe(ROWS, batch_size=2)
    _same_answers(_laziness(pipe, ROWS, 2), expected)
    _same_answers(list(pipe(datasets.Dataset.from_list(ROWS), batch_size=2)), expected)  # rows are dicts
    _same_answers(list(pipe(ListDataset(ROWS), batch_size=4)), expected)
    _same_answers(list(pipe(inputs=(row for row in ROWS))), expected)  # the pipeline's default batch size
    assert list(pipe(iter([]))) == []


@pytest.mark.parametrize("family", ["deformer_bert", "readtwice_bert"])
def test_question_answering_names_a_bad_input_of_an_iterable_by_position(family, tokenizer):
    pipe = _qa(family, tokenizer)
    rows = ROWS[:3]
    answers = pipe(iter(rows + ["Who?"]), batch_size=2)
    assert len([next(answers), next(answers)]) == 2  # the first group is answered before the bad input is pulled
    with pytest.raises(TypeError, match=r"^input 3 must be a dict \{'question': \.\.\., 'context': \.\.\.\}, got str"):
        next(answers)
    with pytest.raises(ValueError, match=r"^`context` 3 is empty"):
        list(pipe(iter(rows + [{"question": "Who?", "context": " "}]), batch_size=2))
    with pytest.raises(ValueError, match=r"^input 2 needs 'question' and 'context' keys"):
        list(pipe(iter(rows[:2] + [{"question": "Who?"}]), batch_size=2))
    with pytest.raises(ValueError, match=r"^`top_k` must be >= 1"):  # a bad setting: at the call
        pipe(iter(rows), top_k=0)
    with pytest.raises(ValueError, match="not both"):
        pipe(iter(rows), question="Who?")


@pytest.mark.parametrize("family", ["deformer_bert", "readtwice_bert"])
def test_context_without_a_token_is_named_by_position(family, tokenizer):
    pipe = _qa(family, tokenizer)
    rows = [ROWS[0], {"question": "Who?", "context": "\u200b\u200b"}]
    with pytest.raises(ValueError, match=r"^`context` 1 has no token"):
        pipe(rows)
    with pytest.raises(ValueError, match=r"^`context` 3 has no token"):
        list(pipe(iter(ROWS[:2] + rows), batch_size=2))


def test_deformer_store_with_an_iterable_reads_and_writes_per_group(tokenizer, tmp_path):
    from hf_readonce.store import RepresentationStore, content_hash

    pipe = _qa("deformer_bert", tokenizer)
    expected = pipe(ROWS, batch_size=2)
    store = RepresentationStore(tmp_path / "store")
    _same_answers(list(pipe(iter(ROWS), batch_size=2, store=store)), expected)
    fingerprint, settings = pipe.store_settings(*pipe._window_settings()[1:])
    assert store.missing(fingerprint, settings, [content_hash(c) for c in CONTEXTS]) == []
    calls = []
    original = pipe.model.encode_passages
    pipe.model.encode_passages = lambda *a, **k: calls.append(1) or original(*a, **k)
    _same_answers(list(pipe(iter(ROWS), batch_size=2, store=store)), expected)
    assert calls == []  # every context read from the store


def test_readonce_over_iterables(tokenizer):
    import datasets
    from transformers.pipelines.pt_utils import KeyDataset

    pipe = ReadOnceText2TextGenerationPipeline(model=tiny_readonce(), tokenizer=tokenizer)
    documents = [DOCUMENTS[i % 2] for i in range(len(TEXTS))]
    expected = pipe(TEXTS, document=documents, max_new_tokens=4, batch_size=2)
    assert _laziness(pipe, TEXTS, 2, document=iter(documents), max_new_tokens=4) == expected
    assert list(pipe(iter(TEXTS), document=documents, max_new_tokens=4, batch_size=2)) == expected
    column = KeyDataset(datasets.Dataset.from_dict({"question": TEXTS}), "question")
    assert list(pipe(column, document=DOCUMENTS[0], max_new_tokens=4)) == \
        pipe(TEXTS, document=DOCUMENTS[0], max_new_tokens=4)
    several = dict(max_new_tokens=3, num_beams=2, generate_kwargs={"num_return_sequences": 2})
    assert list(pipe(iter(TEXTS[:3]), document=DOCUMENTS[0], batch_size=2, **several)) == \
        pipe(TEXTS[:3], document=DOCUMENTS[0], **several)
    with pytest.raises(ValueError, match=r"^`text` 3 is empty"):
        list(pipe(iter(TEXTS[:3] + [" "]), document=DOCUMENTS[0], batch_size=2))
    with pytest.raises(ValueError, match=r"^`document` has 2 entries but `text` has more"):
        list(pipe(iter(TEXTS), document=iter(DOCUMENTS), max_new_tokens=2))
    with pytest.raises(TypeError, match=r"^`document` must be a str, a list of str or an iterable"):
        pipe(iter(TEXTS), document=3)

    summarize = ReadOnceSummarizationPipeline(model=pipe.model, tokenizer=tokenizer)
    docs = DOCUMENTS * 2
    expected = summarize(docs, max_new_tokens=4, batch_size=3)
    assert _laziness(summarize, docs, 3, max_new_tokens=4) == expected
    assert list(summarize(ListDataset(docs), max_new_tokens=4, batch_size=3)) == expected
    assert list(summarize(DOCUMENTS[0], prompt=iter(["summary", "title"]), max_new_tokens=4)) == \
        summarize(DOCUMENTS[0], prompt=["summary", "title"], max_new_tokens=4)
    with pytest.raises(TypeError, match=r"^`documents` 1 must be a str, got int"):
        list(summarize(iter([DOCUMENTS[0], 7]), max_new_tokens=2))


def test_longdoc_over_iterables(tokenizer):
    import datasets
    from transformers.pipelines.pt_utils import KeyDataset

    pipe = LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer)
    docs = LONG_DOCUMENTS + LONG_DOCUMENTS[::-1] + LONG_DOCUMENTS[:1]
    expected = pipe(docs, max_new_tokens=4, batch_size=2)
    assert _laziness(pipe, docs, 2, max_new_tokens=4) == expected
    column = KeyDataset(datasets.Dataset.from_dict({"article": docs}), "article")
    assert list(pipe(column, max_new_tokens=4, batch_size=3)) == expected
    assert list(pipe(inputs=iter(docs), max_new_tokens=4)) == expected
    with pytest.raises(ValueError, match=r"^`documents` 2 is empty"):
        list(pipe(iter(docs[:2] + [""]), max_new_tokens=2, batch_size=2))
    with pytest.raises(TypeError, match=r"^`max_new_tokens` must be an int"):  # a bad setting: at the call
        pipe(iter(docs), max_new_tokens="4")


def _generating(family, tokenizer, **kwargs):
    if family == "readonce_bart":
        return ReadOnceSummarizationPipeline(model=tiny_readonce(), tokenizer=tokenizer, **kwargs), DOCUMENTS
    return LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer, **kwargs), LONG_DOCUMENTS


@pytest.mark.parametrize("family", ["readonce_bart", "longdoc_bart"])
def test_return_tensors_and_text_as_transformers(family, tokenizer):
    pipe, docs = _generating(family, tokenizer, max_new_tokens=4)
    texts = pipe(docs)
    ids = pipe(docs, return_tensors=True)
    assert [set(record) for record in ids] == [{"summary_token_ids"}] * len(docs)
    for record, text in zip(ids, texts):
        assert record["summary_token_ids"].dtype == torch.long and record["summary_token_ids"].dim() == 1
        assert tokenizer.decode(record["summary_token_ids"], skip_special_tokens=True).strip() == text["summary_text"]
    both = pipe(docs, return_tensors=True, return_text=True)
    assert [record["summary_text"] for record in both] == [record["summary_text"] for record in texts]
    assert pipe(docs, return_text=True) == texts
    for clean in (False, True):
        got = pipe(docs, clean_up_tokenization_spaces=clean)
        assert [record["summary_text"] for record in got] == [
            tokenizer.decode(record["summary_token_ids"], skip_special_tokens=True,
                             clean_up_tokenization_spaces=clean).strip() for record in ids]
    with pytest.raises(ValueError, match=r"^`return_text=False` without `return_tensors=True`"):
        pipe(docs, return_text=False)
    with pytest.raises(TypeError, match=r"^`return_tensors` must be a bool"):
        pipe(docs, return_tensors="yes")
    built, _ = _generating(family, tokenizer, max_new_tokens=4, return_tensors=True)
    assert all(torch.equal(a["summary_token_ids"], b["summary_token_ids"]) for a, b in zip(built(docs), ids))


def test_token_ids_do_not_depend_on_the_batch(tokenizer):
    """A summary that ends before the others of its batch is returned without the padding `generate` adds."""
    pipe = LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer)
    alone = [pipe(doc, max_new_tokens=4, return_tensors=True)[0]["summary_token_ids"] for doc in LONG_DOCUMENTS]
    end = next(int(t) for t in alone[0][1:] if int(t) not in alone[1].tolist())  # ends the first summary only
    short = pipe(LONG_DOCUMENTS[0], max_new_tokens=4, return_tensors=True,
                 generate_kwargs={"eos_token_id": end})[0]["summary_token_ids"]
    assert short.shape[0] < alone[0].shape[0]
    batched = pipe(LONG_DOCUMENTS, max_new_tokens=4, return_tensors=True, batch_size=2,
                   generate_kwargs={"eos_token_id": end})
    assert torch.equal(batched[0]["summary_token_ids"], short)
    assert torch.equal(batched[1]["summary_token_ids"], alone[1])



def test_token_ids_end_at_the_models_end_token_under_a_generation_config(tokenizer):
    """A `generation_config` that leaves `eos_token_id` unset ends sequences at the model's end token (`generate`
    fills unset fields from the model's config): the ids stop there too, without the batch's padding (ReadOnce's
    pipeline shares this code, a copy; its tiny model gives every document the same tokens, so no row ends first)."""
    pipe, docs = _generating("longdoc_bart", tokenizer)
    alone = [pipe(doc, max_new_tokens=4, return_tensors=True)[0]["summary_token_ids"] for doc in docs[:2]]
    end = next(int(t) for t in alone[0][1:] if int(t) not in alone[1].tolist())  # ends the first summary only
    pipe.model.generation_config.eos_token_id = end
    config = GenerationConfig(max_new_tokens=4)
    assert config.eos_token_id is None
    short = pipe(docs[0], return_tensors=True, generate_kwargs={"generation_config": config})[0]["summary_token_ids"]
    assert short.shape[0] < alone[0].shape[0] and int(short[-1]) == end
    batched = pipe(docs[:2], return_tensors=True, batch_size=2, generate_kwargs={"generation_config": config})
    assert torch.equal(batched[0]["summary_token_ids"], short)
    assert torch.equal(batched[1]["summary_token_ids"], alone[1])

def test_text2text_returns_generated_token_ids(tokenizer):
    pipe = ReadOnceText2TextGenerationPipeline(model=tiny_readonce(), tokenizer=tokenizer)
    got = pipe(TEXTS[:2], document=DOCUMENTS[0], max_new_tokens=3, return_tensors=True)
    assert [set(record) for record in got] == [{"generated_token_ids"}] * 2


@pytest.mark.parametrize("family", ["readonce_bart", "longdoc_bart"])
def test_a_length_of_the_call_replaces_the_pipelines(family, tokenizer):
    """transformers' rule: the call's generate arguments override the pipeline's key by key, so a call's
    `generate_kwargs` keeps a `max_new_tokens` the pipeline was built with unless it sets a length itself."""
    built, docs = _generating(family, tokenizer, max_new_tokens=3)
    plain, _ = _generating(family, tokenizer)
    doc = docs[1]
    assert built(doc, generate_kwargs={"do_sample": False}) == plain(doc, max_new_tokens=3)
    assert built(doc, generate_kwargs={"max_new_tokens": 6}) == plain(doc, max_new_tokens=6)
    # `max_length` counts the decoder's start token: 6 is 5 new tokens
    assert built(doc, generate_kwargs={"max_length": 6}) == plain(doc, max_new_tokens=5)
    assert built(doc, max_new_tokens=5, generate_kwargs={"max_new_tokens": 6}) == plain(doc, max_new_tokens=5)


@pytest.mark.parametrize("family", ["readonce_bart", "longdoc_bart"])
def test_a_generation_config_in_generate_kwargs_draws_no_deprecation_warning(family, tokenizer, monkeypatch):
    import transformers.generation.utils as generation_utils

    warned = []
    monkeypatch.setattr(generation_utils.logger, "warning_once", lambda message, *a, **k: warned.append(message))
    pipe, docs = _generating(family, tokenizer)
    config = GenerationConfig(max_new_tokens=4, num_beams=2, num_return_sequences=2)
    before = config.to_dict()
    got = pipe(docs, generate_kwargs={"generation_config": config})
    assert not [message for message in warned if "generation_config" in message]
    assert got == pipe(docs, max_new_tokens=4, num_beams=2, generate_kwargs={"num_return_sequences": 2})
    assert [len(sequences) for sequences in got] == [2, 2]  # grouped by the config's count
    assert config.to_dict() == before  # the pipeline's settings went into a copy
    with pytest.raises(TypeError, match=r"must be a transformers GenerationConfig, got dict"):
        pipe(docs, generate_kwargs={"generation_config": {"max_new_tokens": 2}})


def test_a_published_pipeline_streams_a_dataset_column(tmp_path, tokenizer):
    """Loaded from a published folder with `trust_remote_code`, as a Hub user runs it."""
    import datasets
    from transformers import pipeline
    from transformers.pipelines.pt_utils import KeyDataset

    from hf_readonce.hub.publish import publish

    source = tmp_path / "source"
    tiny_longdoc().save_pretrained(source)
    tokenizer.save_pretrained(source)
    folder = publish(source, "someone/tiny-longdoc", local_dir=tmp_path / "repo").folder
    summarize = pipeline("summarization", model=str(folder), trust_remote_code=True)
    column = KeyDataset(datasets.Dataset.from_dict({"article": LONG_DOCUMENTS}), "article")
    assert list(summarize(column, max_new_tokens=3, batch_size=1)) == summarize(LONG_DOCUMENTS, max_new_tokens=3)


def test_a_table_is_refused_not_read_as_its_column_names(tokenizer):
    """Iterating a pandas `DataFrame` gives its column names: summarizing those would be a silent wrong answer, so a
    table is refused at the call, naming the argument and pointing to a column or its rows."""
    pandas = pytest.importorskip("pandas")
    table = pandas.DataFrame({"article": LONG_DOCUMENTS})
    summarize = LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer)
    with pytest.raises(TypeError, match=r"^`documents` is a DataFrame, a table: iterating it gives its column names"):
        summarize(table, max_new_tokens=2)
    qa = _qa("deformer_bert", tokenizer)
    with pytest.raises(TypeError, match=r"^`inputs` is a DataFrame, a table.*to_dict"):
        qa(pandas.DataFrame(ROWS[:2]), batch_size=2)
    assert [out["summary_text"] for out in summarize(table["article"], max_new_tokens=2)] == \
        [out["summary_text"] for out in summarize(list(LONG_DOCUMENTS), max_new_tokens=2)]


def test_unordered_or_mapping_inputs_are_not_read_as_iterables(tokenizer):
    """A set has no order (its results could not be matched to its inputs): refused at the call, naming the argument.
    A mapping that is not a dict is one input, not an iterable of its keys: refused at the call as a list call would.
    A whole `datasets.Dataset` yields rows (dicts): the error points to `KeyDataset`."""
    import collections

    import datasets

    qa = _qa("deformer_bert", tokenizer)
    with pytest.raises(TypeError, match=r"^`inputs` is a set, which has no order"):
        qa(set(), batch_size=2)
    with pytest.raises(TypeError, match=r"^the first argument must be a dict .*got UserDict"):
        qa(collections.UserDict(ROWS[0]))
    summarize = LongDocSummarizationPipeline(model=tiny_longdoc(), tokenizer=tokenizer)
    with pytest.raises(TypeError, match=r"^`documents` is a frozenset, which has no order"):
        summarize(frozenset(LONG_DOCUMENTS), max_new_tokens=2)
    with pytest.raises(TypeError, match=r"^`documents` 0 must be a str, got dict \(a dataset's row: .*KeyDataset"):
        list(summarize(datasets.Dataset.from_dict({"article": LONG_DOCUMENTS}), max_new_tokens=2))
    generate = ReadOnceText2TextGenerationPipeline(model=tiny_readonce(), tokenizer=tokenizer)
    with pytest.raises(TypeError, match=r"^`document` is a set, which has no order"):
        generate(TEXTS[0], document=set(DOCUMENTS))
    with pytest.raises(TypeError, match=r"^`prompt` is a set, which has no order"):
        ReadOnceSummarizationPipeline(model=generate.model, tokenizer=tokenizer)(DOCUMENTS[0], prompt={"summary"})
