"""Summaries from stored representations (`hf_readonce.tasks.summarization_store`): for every family registered with
`summarize=True`, what the store serves equals the model reading the documents itself; each distinct document is
read from the store once; what is missing, foreign or ambiguous is refused by name; ROUGE and lead-n baselines."""

import json

import pytest
import torch

from hf_readonce import (
    LongDocBartConfig,
    LongDocBartForConditionalGeneration,
    ReadOnceBartConfig,
    ReadOnceBartForConditionalGeneration,
)
from hf_readonce.representations import fill_store, get_adapter
from hf_readonce.store import MissingRepresentationError, RepresentationMismatchError, RepresentationStore
from hf_readonce.tasks.summarization import lead_baselines, lead_sentences, rouge_scores
from hf_readonce.tasks.summarization_store import (
    find_summarization_space,
    summarize_from_store,
    summarizing_model_types,
)

DOCUMENTS = [
    "The council approved the new budget on Tuesday after a long debate about school funding and road repairs.",
    "Rain is expected.",
    "A small museum in the north reopened its doors after three years of work on the roof and the old galleries. "
    * 3,
]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


def longdoc(tokenizer, seed=0):
    torch.manual_seed(seed)
    return LongDocBartForConditionalGeneration(LongDocBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=96,
        encoder_attention_type="neighborhood", neighborhood_radius=3, init_std=0.2, pad_token_id=0, bos_token_id=101,
        eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None)).eval()


def readonce(tokenizer, seed=0):
    torch.manual_seed(seed)
    return ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0, init_std=0.2, bos_token_id=101, eos_token_id=102,
        decoder_start_token_id=101, forced_eos_token_id=None)).eval()


def read_alone(model, tokenizer, texts, length, **kwargs):
    """The model reading the documents itself (no store): LongDoc's encoder, ReadOnce's document encoder with the
    prompt "summary"."""
    docs = tokenizer(texts, truncation=True, max_length=length, padding=True, return_tensors="pt")
    with torch.no_grad():
        if model.config.model_type == "longdoc_bart":
            out = model.generate(docs.input_ids, attention_mask=docs.attention_mask, **kwargs)
        else:
            prompt = tokenizer(["summary"] * len(texts), return_tensors="pt")
            out = model.generate(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                                 document_input_ids=docs.input_ids, document_input_attention_mask=docs.attention_mask,
                                 **kwargs)
    return [t.strip() for t in tokenizer.batch_decode(out, skip_special_tokens=True)]


def test_every_summarizing_family_is_tested():
    assert sorted(summarizing_model_types()) == ["longdoc_bart", "readonce_bart"]


@pytest.mark.parametrize("build", [longdoc, readonce], ids=["longdoc_bart", "readonce_bart"])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_summaries_from_the_store_equal_the_model_reading_the_documents(tokenizer, tmp_path, build, num_beams):
    model = build(tokenizer)
    adapter = get_adapter(model, tokenizer, max_document_length=48)
    store = RepresentationStore(tmp_path / "store")
    assert fill_store(adapter, store, DOCUMENTS, store_dtype="float32").encoded == 3
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, num_beams=num_beams)
    summaries = summarize_from_store(model, tokenizer, store, DOCUMENTS, batch_size=2, **kwargs)
    assert summaries == read_alone(model, tokenizer, DOCUMENTS, 48, do_sample=False, **kwargs)
    assert all(summaries)  # 6 new tokens each: a vacuous comparison of empty strings cannot pass


@pytest.mark.parametrize("build", [longdoc, readonce], ids=["longdoc_bart", "readonce_bart"])
def test_summaries_from_the_store_equal_the_family_pipeline(tokenizer, tmp_path, build):
    """What `summarize_from_store` serves from a float32 store equals the family's `summarization` pipeline reading
    each document itself (same document length, greedy)."""
    from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
    from hf_readonce.models.readonce_bart.pipeline_readonce_bart import ReadOnceSummarizationPipeline

    model = build(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=48), store, DOCUMENTS, store_dtype="float32")
    summaries = summarize_from_store(model, tokenizer, store, DOCUMENTS, max_new_tokens=6, min_new_tokens=6)
    family = ReadOnceSummarizationPipeline if model.config.model_type == "readonce_bart" else \
        LongDocSummarizationPipeline
    pipe = family(model=model, tokenizer=tokenizer)
    expected = [pipe(text, max_document_len=48, max_new_tokens=6, generate_kwargs={"min_new_tokens": 6})[0]
                ["summary_text"] for text in DOCUMENTS]
    assert summaries == expected and all(summaries)


def test_each_distinct_document_is_read_once_and_answers_keep_the_order(tokenizer, tmp_path, monkeypatch):
    model = longdoc(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=48), store, DOCUMENTS, store_dtype="float32")
    reads = []
    get_many = store.get_many
    monkeypatch.setattr(store, "get_many", lambda *a, **k: reads.extend(a[2]) or get_many(*a, **k))
    order = [DOCUMENTS[2], DOCUMENTS[0], DOCUMENTS[2], DOCUMENTS[1], DOCUMENTS[0]]
    summaries = summarize_from_store(model, tokenizer, store, order, max_new_tokens=5, min_new_tokens=5)
    assert len(reads) == len(set(reads)) == 3
    alone = dict(zip(DOCUMENTS, read_alone(model, tokenizer, DOCUMENTS, 48, max_new_tokens=5, min_new_tokens=5,
                                           do_sample=False)))
    assert summaries == [alone[text] for text in order]


def test_a_dtype_keyword_is_refused_not_passed_on_to_generate(tokenizer, tmp_path):
    """`summarize_from_store` passes its further keywords on to `generate()`: a `dtype=` (the compute dtype's name,
    not the storage dtype's, `store_dtype`) is refused naming `store_dtype` before anything is read or written."""
    model = longdoc(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(TypeError, match=r"^summarize_from_store\(\) takes the storage dtype as `store_dtype`"):
        summarize_from_store(model, tokenizer, store, DOCUMENTS, encode_missing=True, dtype="float32",
                             max_new_tokens=2)
    assert len(RepresentationStore(tmp_path / "store")) == 0
    summarize_from_store(model, tokenizer, store, DOCUMENTS[:1], encode_missing=True, store_dtype="float32",
                         max_new_tokens=2)
    (space,) = store.info()["spaces"].values()
    assert space["dtypes"] == ["float32"]


def test_missing_documents_are_named_or_encoded_on_request(tokenizer, tmp_path):
    model = longdoc(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(MissingRepresentationError, match="holds no longdoc_bart representations"):
        summarize_from_store(model, tokenizer, store, DOCUMENTS)
    fill_store(get_adapter(model, tokenizer, max_document_length=48), store, DOCUMENTS[:1])
    with pytest.raises(MissingRepresentationError, match=r"2 of 3 documents .* \(first: document 1\)"):
        summarize_from_store(model, tokenizer, store, DOCUMENTS)
    with pytest.raises(MissingRepresentationError, match=r"2 of 3 documents .* \(first: the row 'b'\)"):
        summarize_from_store(model, tokenizer, store, DOCUMENTS, document_names=["the row 'a'", "the row 'b'", "c"])
    summaries = summarize_from_store(model, tokenizer, store, DOCUMENTS, encode_missing=True, max_new_tokens=3)
    assert len(summaries) == 3 and len(store) == 3
    # encode_missing into an empty store takes the adapter's defaults (document length = the model's positions)
    empty = RepresentationStore(tmp_path / "empty")
    summarize_from_store(model, tokenizer, empty, DOCUMENTS[:1], encode_missing=True, max_new_tokens=2)
    assert [s.settings["max_document_length"] for s in empty.spaces()] == [96]


def test_another_models_store_is_refused_naming_both_fingerprints(tokenizer, tmp_path):
    writer, reader = longdoc(tokenizer, seed=0), longdoc(tokenizer, seed=1)
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(writer, tokenizer, max_document_length=48), store, DOCUMENTS)
    with pytest.raises(RepresentationMismatchError) as caught:
        summarize_from_store(reader, tokenizer, store, DOCUMENTS)
    message = str(caught.value)
    assert writer.representation_fingerprint()[:16] in message and reader.representation_fingerprint()[:16] in message
    assert len(store) == 3  # nothing touched
    # encode_missing writes the reader's own space beside the other model's (as answer --encode-missing does)
    summaries = summarize_from_store(reader, tokenizer, store, DOCUMENTS, encode_missing=True, max_new_tokens=2)
    assert len(summaries) == 3 and len(store.spaces()) == 2


def test_several_stored_settings_need_a_choice(tokenizer, tmp_path):
    model = longdoc(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    for length in (32, 48):
        fill_store(get_adapter(model, tokenizer, max_document_length=length), store, DOCUMENTS, store_dtype="float32")
    with pytest.raises(ValueError, match="max_document_length=32.*max_document_length=48"):
        summarize_from_store(model, tokenizer, store, DOCUMENTS)
    assert find_summarization_space(store, model, tokenizer, {"max_document_length": 32})["max_document_length"] == 32
    kwargs = dict(max_new_tokens=4, min_new_tokens=4)
    assert summarize_from_store(model, tokenizer, store, DOCUMENTS, settings={"max_document_length": 32},
                                **kwargs) == read_alone(model, tokenizer, DOCUMENTS, 32, do_sample=False, **kwargs)
    with pytest.raises(ValueError, match="compression_ratio"):
        find_summarization_space(store, model, tokenizer, {"compression_ratio": 2})


def test_readonce_reads_another_prompt_and_its_own_k(tokenizer, tmp_path):
    model = readonce(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    for k in (4, 8):
        fill_store(get_adapter(model, tokenizer, max_document_length=48, compression_ratio=k), store, DOCUMENTS,
                   store_dtype="float32")
    kwargs = dict(max_new_tokens=4, min_new_tokens=4)
    k8 = summarize_from_store(model, tokenizer, store, DOCUMENTS, settings={"compression_ratio": 8}, **kwargs)
    docs = tokenizer(DOCUMENTS, truncation=True, max_length=48, padding=True, return_tensors="pt")
    prompt = tokenizer(["summary"] * 3, return_tensors="pt")
    reps = model.encode_documents(docs.input_ids, docs.attention_mask, 8)
    out = model.generate(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                         document_representations=reps, do_sample=False, **kwargs)
    assert k8 == [t.strip() for t in tokenizer.batch_decode(out, skip_special_tokens=True)]
    title = summarize_from_store(model, tokenizer, store, DOCUMENTS, settings={"compression_ratio": 4},
                                 prompt="title", **kwargs)
    prompt = tokenizer(["title"] * 3, return_tensors="pt")
    out = model.generate(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                         document_input_ids=docs.input_ids, document_input_attention_mask=docs.attention_mask,
                         do_sample=False, **kwargs)
    assert title == [t.strip() for t in tokenizer.batch_decode(out, skip_special_tokens=True)]


@pytest.mark.parametrize("documents, kwargs, error, match", [
    ("one text", {}, TypeError, "documents"),
    ([], {}, ValueError, "documents"),
    (["fine", "  "], {}, ValueError, r"documents\[1\]"),
    (["fine", 3], {}, TypeError, r"documents\[1\]"),
    (DOCUMENTS, {"num_beams": 0}, ValueError, "num_beams"),
    (DOCUMENTS, {"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    (DOCUMENTS, {"num_return_sequences": 2}, ValueError, "num_return_sequences"),
    (DOCUMENTS, {"document_names": ["a", "b"]}, ValueError, r"`document_names` must hold one name per document \(3\)"),
    (DOCUMENTS, {"document_names": "abc"}, TypeError, "`document_names` must be a list of str, one per .*, got str"),
    (DOCUMENTS, {"document_names": (name for name in "abc")}, TypeError, "`document_names` must be a list of str"),
    (DOCUMENTS, {"document_names": ["a", 2, "c"]}, TypeError, r"`document_names\[1\]` must be a str, got int"),
    (DOCUMENTS, {"prompt": "title"}, ValueError, "prompt"),
    (DOCUMENTS, {"settings": {"max_passage_length": 8}}, ValueError, "max_passage_length"),
])
def test_bad_input_is_named(tokenizer, tmp_path, documents, kwargs, error, match):
    model = longdoc(tokenizer)
    store = RepresentationStore(tmp_path / "store")
    fill_store(get_adapter(model, tokenizer, max_document_length=48), store, DOCUMENTS)
    with pytest.raises(error, match=match):
        summarize_from_store(model, tokenizer, store, documents, encode_missing=True, **kwargs)
    assert len(store) == 3  # a failed call encodes nothing


def test_a_family_that_does_not_summarize_is_refused_naming_those_that_do(tokenizer, tmp_path):
    from tests.conftest import tiny_model

    with pytest.raises(ValueError, match="deformer_bert.*longdoc_bart, readonce_bart|longdoc_bart.*readonce_bart"):
        summarize_from_store(tiny_model(), tokenizer, RepresentationStore(tmp_path / "s"), DOCUMENTS)


# ------------------------------------------------------------------------------------------------ ROUGE and lead-n
def test_lead_sentences_and_rouge():
    text = "First one. Second? Third!  Fourth.\nFifth"
    assert lead_sentences(text, 3) == "First one. Second? Third!"
    assert lead_sentences(text, 9) == "First one. Second? Third! Fourth. Fifth"
    assert rouge_scores(["the cat sat"], ["the cat sat"]) == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}
    assert rouge_scores(["a b"], ["c d"]) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    half = rouge_scores(["the cat", "a dog"], ["the cat", "the bird"])
    assert half["rouge1"] == 50.0
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        rouge_scores(["a", "b"], ["a"])
    with pytest.raises(TypeError, match=r"references\[0\]"):
        rouge_scores(["a"], [None])
    for n in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`n` must be an int >= 1"):
            lead_sentences(text, n)
    with pytest.raises(ValueError, match="`n`"):
        lead_baselines([text], ["First one."], leads=(0,))


def test_lead_baselines_on_real_xsum_match_the_recorded_figures(data_dir):
    """The same scorer as the recipes' (`trivial_generation_baselines`): lead-3 on XSum validation as recorded in
    benchmarks/results/trivial_baselines.json."""
    from tests.conftest import REPO_ROOT

    rows = [json.loads(line) for line in open(data_dir / "xsum" / "validation.jsonl", encoding="utf-8")]
    scores = lead_baselines([r["document"] for r in rows], [r["summary"] for r in rows])
    recorded = json.loads((REPO_ROOT / "benchmarks" / "results" / "trivial_baselines.json").read_text())["xsum"]
    assert scores == {name: recorded[name] for name in ("lead_1", "lead_3")}
