"""Filling a store through the representation adapters (DeFormer; ReadOnce in `test_cli.py` and the contract
test): long documents, re-runs, answers equal to the in-memory path, `datasets` map/export/import.

A tiny random DeFormer (hidden 32, 4 layers, k=2) with the real MiniLM WordPiece tokenizer keeps the model work
cheap; the documents are real Disfl-QA passages.
"""

import os

import pytest
import torch

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
from hf_readonce.representations import DeformerBertAdapter, StoreEncodeFunction, fill_store, make_encode_function
from hf_readonce.representations.fill import ensure_stored
from hf_readonce.store import (
    RepresentationMismatchError,
    RepresentationStore,
    bytes_per_1000_tokens,
    content_hash,
    export_to_dataset,
    import_from_dataset,
    space_key,
)
from hf_readonce.tasks.question_answering import (
    build_features,
    encode_windows,
    postprocess_qa_predictions,
    predict_cached,
)
from hf_readonce.tasks.question_answering_store import answer_from_store
from tests.conftest import tiny_model


# ------------------------------------------------------------------------------------------------------ model
def test_adapter_long_documents_and_errors(tokenizer):
    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    long_text = " ".join(f"token{i}" for i in range(300))  # far beyond 128 positions
    (tensors,) = adapter.encode([long_text])
    lengths = tensors["window_lengths"].tolist()
    assert len(lengths) > 5 and max(lengths) <= 32 and sum(lengths) == tensors["hidden_states"].shape[0]
    assert tensors["hidden_states"].shape[1] == 32
    with pytest.raises(ValueError, match="document 1"):
        adapter.encode(["fine", "   "])
    with pytest.raises(ValueError, match="max_passage_length"):
        DeformerBertAdapter(model, tokenizer, max_passage_length=500)
    k0 = DeformerBertForQuestionAnswering(DeformerBertConfig(**{**model.config.to_dict(), "num_decomposed_layers": 0}))
    with pytest.raises(ValueError, match="num_decomposed_layers"):
        DeformerBertAdapter(k0, tokenizer)


def test_adapter_defaults_are_the_windows_the_checkpoint_records(tokenizer):
    from hf_readonce.representations import get_adapter

    model = tiny_model()  # 128 positions: the family default (256) does not fit
    with pytest.raises(ValueError, match="max_passage_length"):
        get_adapter(model, tokenizer)
    model.config.max_passage_length, model.config.doc_stride = 24, 0
    adapter = get_adapter(model, tokenizer)
    assert (adapter.max_passage_length, adapter.doc_stride) == (24, 0)
    assert adapter.settings()["max_passage_length"] == 24 and adapter.settings()["doc_stride"] == 0
    assert get_adapter(model, tokenizer, doc_stride=4).doc_stride == 4  # an explicit value wins


def test_encode_skips_stored_and_answers_equal_in_memory(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=64, doc_stride=16)
    calls = []
    original = adapter.encode
    adapter.encode = lambda texts: calls.append(len(texts)) or original(texts)
    store = RepresentationStore(tmp_path / "s")
    contexts = [r["context"] for r in qa_rows]
    first = fill_store(adapter, store, contexts, store_dtype="fp32")
    unique = len(set(contexts))
    assert first.encoded == unique and first.duplicates == len(contexts) - unique and sum(calls) == unique
    calls.clear()
    again = fill_store(adapter, store, contexts, store_dtype="fp32")
    assert again.encoded == 0 and again.already_stored == unique and calls == []  # no model work
    # answers from the store equal the in-memory cached path
    predictions = answer_from_store(model, tokenizer, RepresentationStore(tmp_path / "s"), qa_rows,
                                    max_question_length=24)
    features, windows, _ = build_features(qa_rows, tokenizer, max_question_length=24, max_passage_length=64,
                                          doc_stride=16)
    with torch.no_grad():
        logits = predict_cached(model, features, encode_windows(model, windows))
    assert predictions == postprocess_qa_predictions(qa_rows, features, windows, logits)
    # another model's states are never used
    with pytest.raises(RepresentationMismatchError, match="fingerprint"):
        answer_from_store(tiny_model(seed=1), tokenizer, store, qa_rows)


def test_datasets_map_export_import(tmp_path, tokenizer, qa_rows):
    from datasets import Dataset

    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=64, doc_stride=16)
    store = RepresentationStore(tmp_path / "s")
    dataset = Dataset.from_list(qa_rows[:30])
    mapped = dataset.map(make_encode_function(adapter, store, id_column="id"), batched=True, batch_size=16,
                         new_fingerprint="tiny-reps", load_from_cache_file=False)
    assert mapped["content_hash"] == [content_hash(c) for c in dataset["context"]]
    assert len(store) == len(set(dataset["context"])) and all(n > 0 for n in mapped["num_tokens"])
    exported = export_to_dataset(store, cache_dir=str(tmp_path / "cache"))
    assert store.info()["shards"] >= 2  # one row per document, however many shards hold them
    assert len(exported) == len(store) == len(set(exported["content_hash"]))
    exported.to_parquet(str(tmp_path / "reps.parquet"))
    restored_rows = Dataset.from_parquet(str(tmp_path / "reps.parquet"), cache_dir=str(tmp_path / "cache2"))
    target = RepresentationStore(tmp_path / "t")
    assert import_from_dataset(target, restored_rows) == len(store)
    for h in mapped["content_hash"]:
        a, b = store.get(adapter.fingerprint(), adapter.settings(), h), target.get(adapter.fingerprint(),
                                                                                   adapter.settings(), h)
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    assert bytes_per_1000_tokens(store, adapter.fingerprint(), adapter.settings()) > 0


def test_progress_bar_counts_distinct_documents(tmp_path, tokenizer, qa_rows, monkeypatch):
    """The `encode` bar counts distinct documents, as the summary line does (issue 16): duplicates do not advance it."""
    import tqdm.auto

    bars = []
    real_tqdm = tqdm.auto.tqdm

    def recording_tqdm(*args, **kwargs):
        bars.append(real_tqdm(*args, **kwargs))
        return bars[-1]

    monkeypatch.setattr(tqdm.auto, "tqdm", recording_tqdm)
    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=64, doc_stride=16)
    passages = list(dict.fromkeys(r["context"] for r in qa_rows))[:6]
    contexts = passages + passages[:3]  # several questions share a passage: the case that matters
    distinct = len(passages)
    stats = fill_store(adapter, RepresentationStore(tmp_path / "s"), contexts, store_dtype="fp32", progress=True,
                       total=distinct)
    (bar,) = bars
    assert bar.n == bar.total == distinct == stats.encoded == stats.seen - stats.duplicates


# ------------------------------------------------------------------------------------------------------ bad input
def test_fill_store_checks_its_arguments_and_keeps_finished_work(tmp_path, tokenizer):
    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    docs = [f"Passage number {i} about the river Ash and its mill." for i in range(6)]
    store = RepresentationStore(tmp_path / "s")
    for kwargs, error, words in [({"rank": 0.5, "num_processes": 2}, TypeError, "`rank` must be an int"),
                                 ({"num_processes": 0}, ValueError, "`num_processes` must be >= 1"),
                                 ({"rank": 2, "num_processes": 2}, ValueError, "`rank` must be in"),
                                 ({"documents_per_batch": 0}, ValueError, "`documents_per_batch` must be >= 1"),
                                 ({"documents_per_batch": 2.0}, TypeError, "`documents_per_batch` must be an int")]:
        with pytest.raises(error, match=words):
            fill_store(adapter, store, docs, **kwargs)
    assert len(store) == 0
    # an empty document is set aside by name, as an unencodable one is; the others are stored
    stats = fill_store(adapter, store, [(f"d{i}", t) for i, t in enumerate(docs[:4] + ["  "] + docs[4:])],
                       documents_per_batch=2, store_dtype="fp32")
    assert stats.rejected == [("d4", "the text is empty")] and stats.encoded == 6 and len(store) == 6
    # an error in the middle of a run keeps the documents computed before it
    fresh = RepresentationStore(tmp_path / "t")
    with pytest.raises(TypeError, match="document 4 is of type int"):
        fill_store(adapter, fresh, docs[:4] + [7] + docs[4:], documents_per_batch=2, store_dtype="fp32")
    with pytest.raises(ValueError, match=r"document 0: a tuple must be \(id, text\), got 3 items"):
        fill_store(adapter, RepresentationStore(tmp_path / "u"), [("a", docs[0], "text")], store_dtype="fp32")
    assert len(RepresentationStore(tmp_path / "t")) == 4


def test_the_storage_dtype_is_store_dtype_and_a_dtype_keyword_is_refused(tmp_path, tokenizer):
    """`dtype` is the compute dtype in hf-readonce, as in transformers: the functions that write a store take the
    storage dtype as `store_dtype`, and a `dtype=` given to one is refused with a `TypeError` naming `store_dtype`,
    before anything is written (not taken as the storage dtype, nor as a compute dtype)."""
    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "s")
    texts = ["The river Ash runs past the old mill at Hartley."]
    calls = {"fill_store": lambda: fill_store(adapter, store, texts, dtype="fp32"),
             "ensure_stored": lambda: ensure_stored(adapter, store, texts, encode_missing=True, dtype="fp32"),
             "make_encode_function": lambda: make_encode_function(adapter, store, dtype="fp32"),
             "StoreEncodeFunction": lambda: StoreEncodeFunction(adapter, store, dtype="fp32")}
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes the storage dtype as `store_dtype`, not `dtype` .*"
                                            r"pass store_dtype='fp32'"):
            call()
    assert len(RepresentationStore(tmp_path / "s")) == 0
    with pytest.raises(ValueError, match="`store_dtype` must be one of fp32, fp16, bf16"):
        fill_store(adapter, store, texts, store_dtype="int8")
    assert fill_store(adapter, store, texts, store_dtype="bf16").encoded == 1
    (space,) = store.info()["spaces"].values()
    assert space["dtypes"] == ["bfloat16"]


def test_fill_store_takes_the_fingerprint_its_caller_computed_checked(tmp_path, tokenizer):
    """`fingerprint=`: the caller's [`current_fingerprint`] (a task filling what its lookup found missing) keys what
    is written; another model's, or one computed before the weights changed, is refused before anything is written
    (what it keys would pass as this model's)."""
    from hf_readonce.representations.base import current_fingerprint

    model, other = tiny_model(), tiny_model(seed=1)
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(ValueError, match="`fingerprint` .* is not this model's fingerprint"):
        fill_store(adapter, store, ["A passage about the mill."], fingerprint=current_fingerprint(other))
    assert len(store) == 0
    fingerprint = current_fingerprint(adapter)
    assert fill_store(adapter, store, ["A passage about the mill."], fingerprint=fingerprint).encoded == 1
    assert [space.fingerprint for space in store.spaces()] == [fingerprint]


def test_fill_store_records_the_model_name_with_the_space(tmp_path, tokenizer):
    """What `hf-readonce info --store` shows of each space: the `model_name` given, else the model's
    `config.name_or_path` (the folder it was loaded from); nothing for a model built from a config."""
    from hf_readonce.representations import get_adapter

    folder = tmp_path / "runs" / "tiny"
    tiny_model().save_pretrained(folder)
    loaded = DeformerBertForQuestionAnswering.from_pretrained(folder).eval()
    store = RepresentationStore(tmp_path / "s")
    fill_store(get_adapter(loaded, tokenizer, max_passage_length=32, doc_stride=8), store, ["The mill."])
    fill_store(get_adapter(loaded, tokenizer, max_passage_length=32, doc_stride=8), store, ["The river."],
               model_name="tiny, by its name")
    fill_store(DeformerBertAdapter(tiny_model(seed=1), tokenizer, max_passage_length=32, doc_stride=8), store,
               ["The mill."])
    names = sorted(space["model_names"] for space in store.info()["spaces"].values())
    assert names == [[], [str(folder), "tiny, by its name"]], names
    with pytest.raises(TypeError, match="`model_name` must be a str or None"):
        fill_store(get_adapter(loaded, tokenizer, max_passage_length=32, doc_stride=8), store, ["New."],
                   model_name=folder)


def test_a_fingerprint_given_to_the_writer_from_before_a_data_edit_is_refused(tmp_path, tokenizer):
    """An edit through `.data` bumps no version counter, so the model's cached fingerprint stays the one computed
    before it: a `fingerprint=` from before such an edit, checked against that cache alone, keyed the new weights'
    representations under the old weights' fingerprint (in the store for good, read back as the old model's). The
    writer digests the weights itself ([`current_fingerprint`]) and refuses it, writing nothing; so does
    `ensure_stored` filling what is missing under it."""
    from hf_readonce.representations.base import current_fingerprint
    from hf_readonce.representations.fill import ensure_stored

    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    before = current_fingerprint(adapter)
    with torch.no_grad():
        next(model.parameters()).data.add_(1e-2)
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(ValueError, match="`fingerprint` .* is not this model's fingerprint"):
        fill_store(adapter, store, ["A passage about the mill."], fingerprint=before)
    with pytest.raises(ValueError, match="`fingerprint` .* is not this model's fingerprint"):
        ensure_stored(adapter, store, ["A passage about the mill."], encode_missing=True, fingerprint=before)
    assert len(store) == 0 and store.spaces() == []
    after = current_fingerprint(adapter)
    assert after != before
    assert fill_store(adapter, store, ["A passage about the mill."], fingerprint=after).encoded == 1
    assert [space.fingerprint for space in store.spaces()] == [after]


def test_answer_from_store_refuses_bad_decoding_arguments_by_name(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    store = RepresentationStore(tmp_path / "s")
    rows = qa_rows[:3]
    good = answer_from_store(model, tokenizer, store, rows, max_passage_length=32, doc_stride=8, encode_missing=True)
    assert len(good) == 3
    for kwargs, error, words in [({"n_best_size": 0}, ValueError, "`n_best_size` must be >= 1"),
                                 ({"n_best_size": -1}, ValueError, "`n_best_size` must be >= 1"),
                                 ({"n_best_size": 2.5}, TypeError, "`n_best_size` must be an int"),
                                 ({"max_answer_length": 0}, ValueError, "`max_answer_length` must be >= 1"),
                                 ({"passages_per_chunk": 0}, ValueError, "`passages_per_chunk` must be >= 1"),
                                 ({"null_score_diff_threshold": "x"}, TypeError, "`null_score_diff_threshold`"),
                                 ({"allow_no_answer": "no"}, TypeError, "`allow_no_answer` must be a bool")]:
        with pytest.raises(error, match=words):
            answer_from_store(model, tokenizer, store, rows, max_passage_length=32, doc_stride=8, **kwargs)
    with pytest.raises(ValueError, match="`examples` is empty"):
        answer_from_store(model, tokenizer, store, [], max_passage_length=32, doc_stride=8)
    twice = [rows[0], {**rows[1], "id": rows[0]["id"]}]
    with pytest.raises(ValueError, match="two examples have the id"):
        answer_from_store(model, tokenizer, store, twice, max_passage_length=32, doc_stride=8)
    with pytest.raises(ValueError, match="NaN"):
        answer_from_store(model, tokenizer, store, rows, max_passage_length=32, doc_stride=8,
                          null_score_diff_threshold=float("nan"))
    never_empty = answer_from_store(model, tokenizer, store, rows, max_passage_length=32, doc_stride=8,
                                    allow_no_answer=True, null_score_diff_threshold=float("inf"))
    assert never_empty == good  # +inf, what find_best_null_threshold tunes when no answer should be empty
    from datasets import Dataset

    assert answer_from_store(model, tokenizer, store, Dataset.from_list(rows), max_passage_length=32,
                             doc_stride=8) == good


def test_fill_store_names_bad_arguments_and_reports_running_stats(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "store")
    texts = list(dict.fromkeys(r["context"] for r in qa_rows[:5]))
    with pytest.raises(TypeError, match="`store` must be a RepresentationStore"):
        fill_store(adapter, str(tmp_path / "store"), texts)
    with pytest.raises(TypeError, match="`adapter` must be a representation adapter, got DeformerBert"):
        fill_store(model, store, texts)
    seen = []
    stats = fill_store(adapter, store, texts, documents_per_batch=2, shard_size_bytes=1,
                       on_batch=lambda s: seen.append((s.encoded, s.seconds)))
    # after each batch and at the end: documents committed so far (a shard per document here), time so far
    assert [encoded for encoded, _ in seen] == sorted(encoded for encoded, _ in seen) and seen[-1][0] == stats.encoded
    assert seen[0][0] == 2 and all(seconds > 0 for _, seconds in seen) and len(seen) == len(texts) // 2 + 1


def test_fill_store_stopped_reports_what_it_committed(tmp_path, tokenizer, qa_rows):
    """Ctrl-C mid-run: what was computed is committed, and `on_batch` is told how much before the stop propagates
    (what `hf-readonce encode` says it committed; the store's index may grow by other writers' work meanwhile)."""
    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "store")
    texts = list(dict.fromkeys(r["context"] for r in qa_rows[:8]))[:4]

    def three_then_stop():
        yield from texts[:3]
        raise KeyboardInterrupt

    seen = []
    with pytest.raises(KeyboardInterrupt):
        fill_store(adapter, store, three_then_stop(), documents_per_batch=1, on_batch=lambda s: seen.append(s.encoded))
    assert len(RepresentationStore(store.path)) == 3 and seen[-1] == 3


def test_import_from_dataset_names_what_it_was_given(tmp_path):
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(ValueError, match="`fingerprint` needs `settings`"):
        export_to_dataset(store, "e" * 64)
    with pytest.raises(ValueError, match="`settings` needs `fingerprint`"):
        export_to_dataset(store, settings={"k": 1})
    with pytest.raises(TypeError, match="`store` must be a RepresentationStore"):
        export_to_dataset(str(tmp_path / "store"))
    with pytest.raises(TypeError, match="got a path .*Dataset.from_parquet"):
        import_from_dataset(store, str(tmp_path / "export.parquet"))
    with pytest.raises(ValueError, match="row 0 lacks the columns"):
        import_from_dataset(store, [{"a": 1}])


def test_encode_function_names_a_call_without_batched(tmp_path, tokenizer):
    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    function = make_encode_function(adapter, RepresentationStore(tmp_path / "store"))
    with pytest.raises(TypeError, match="must be a list of texts .*batched=True.*got a single str"):
        function({"context": "A text."})


def test_ensure_stored_names_a_text_it_cannot_encode(tmp_path, tokenizer):
    """`encode_missing` sets aside a text the adapter cannot encode (`fill_store` stores the others): the call fails
    naming it and why, not with a content hash "not in store" when the task reads it."""
    from hf_readonce.representations.fill import ensure_stored
    from hf_readonce.store import RepresentationStore

    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "store")
    texts = ["Emma is a novel by Jane Austen.", "\u200b\u200b", "Persuasion was her last novel."]
    with pytest.raises(ValueError, match=r"1 of 3 passages cannot be encoded \(first: text 1, which has no token "
                                         r"after tokenization .*\); the others are stored: correct that one"):
        ensure_stored(adapter, store, texts, encode_missing=True, what="passages", name_of=lambda t: f"text "
                      f"{texts.index(t)}")
    assert len(store) == 2
    fingerprint, _, hashes = ensure_stored(adapter, store, texts[::2])  # the others: stored, nothing to encode
    assert len(hashes) == 2 and len(store) == 2


def test_ensure_stored_reads_the_missing_list_once_not_once_per_text(tmp_path, tokenizer, monkeypatch):
    """`encode_missing` picks the missing texts with one set of the missing hashes: a set built again for each text
    made the call quadratic (about 4 s for 8000 missing passages before any encoding, minutes for 100k)."""
    from hf_readonce.representations import fill
    from hf_readonce.representations.fill import EncodeStats, ensure_stored

    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "store")
    texts = [f"Passage number {i} of the collection." for i in range(40)]
    reads, asked = [], []

    class Missing(list):  # the store's answer, counting how often it is read in full
        def __iter__(self):
            reads.append(1)
            return super().__iter__()

    monkeypatch.setattr(store, "missing", lambda fingerprint, settings, hashes: Missing(hashes))
    monkeypatch.setattr(fill, "fill_store", lambda adapter, store, documents, **options: asked.extend(documents)
                        or EncodeStats())
    ensure_stored(adapter, store, texts, encode_missing=True)
    assert sorted(text for _, text in asked) == sorted(texts) and len(reads) <= 2


def test_tokens_count_only_the_documents_this_run_committed(tmp_path, tokenizer):
    """A document another process stores while this run holds it in its buffer is dropped from this run's shard:
    neither `encoded` nor `tokens` counts it (the `encode` summary line printed both)."""
    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    texts = ["The cat sat on the mat.", "A dog ran across the long green field to the river."]
    other = RepresentationStore(tmp_path / "s")

    def documents():
        yield texts[0]
        # another process stores the first document meanwhile (it sits in this run's writer, not yet committed)
        with other.writer(adapter.fingerprint(), adapter.settings(), dtype="fp32") as writer:
            writer.add(content_hash(texts[0]), adapter.encode([texts[0]])[0])
        yield texts[1]

    stats = fill_store(adapter, RepresentationStore(tmp_path / "s"), documents(), store_dtype="fp32",
                       documents_per_batch=1)
    second = adapter.num_tokens(adapter.encode([texts[1]])[0])
    assert stats.encoded_hashes == [content_hash(texts[1])] and stats.already_stored == 1
    assert stats.tokens == second


def test_ctrl_c_during_a_shard_an_add_commits_stops_the_run_as_an_interrupt(tmp_path, tokenizer, monkeypatch):
    """Ctrl-C while the shard that `writer.add` fills up is written is held until its manifest is written, then
    delivered from inside `add`: the run stops with the `KeyboardInterrupt` (the documents committed counted, their
    tokens too), not with a `KeyError` of the token count of the document that `add` had no time to record."""
    import os
    import signal

    from hf_readonce.store import store as store_module

    model = tiny_model()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    texts = ["The cat sat on the mat.", "A dog ran across the long green field to the river."]
    original = store_module._atomic_write

    def interrupted(path, data, tmp_dir):  # Ctrl-C arrives while the first shard is written
        if path.suffix == ".safetensors" and not list((tmp_path / "s" / "index").iterdir()):
            os.kill(os.getpid(), signal.SIGINT)
        return original(path, data, tmp_dir)

    monkeypatch.setattr(store_module, "_atomic_write", interrupted)
    seen = []
    with pytest.raises(KeyboardInterrupt):
        fill_store(adapter, RepresentationStore(tmp_path / "s"), texts, store_dtype="fp32", documents_per_batch=2,
                   shard_size_bytes=1, on_batch=lambda stats: seen.append((stats.encoded, stats.tokens)))
    reopened = RepresentationStore(tmp_path / "s")
    (committed,) = [t for t in texts if reopened.has(space_key(adapter.fingerprint(), adapter.settings()),
                                                     content_hash(t))]  # the longer one (`group_by_length`)
    assert len(reopened) == 1 and seen[-1] == (1, adapter.num_tokens(adapter.encode([committed])[0]))


def test_an_adapter_giving_not_one_cut_flag_per_document_is_named_not_obeyed(tmp_path):
    """`fill_store` stores each document with the flag `documents_cut_each` gives it: an adapter (a third party's)
    giving fewer flags than documents is named; the documents past the last flag were silently not stored (no error,
    nothing in `rejected`)."""

    class Toy:
        model_type, max_document_length, model = "toy", 4, torch.nn.Linear(1, 1)

        def fingerprint(self):
            return "a" * 64

        def settings(self):
            return {"representation": "toy/v1", "max_document_length": 4}

        def num_tokens(self, tensors):
            return int(tensors["x"].shape[0])

        def encode(self, texts):
            return [{"x": torch.zeros(min(len(text.split()), 4), 2)} for text in texts]

        def documents_cut_each(self, texts):
            return [len(text.split()) > 4 for text in texts][:1]

    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(ValueError, match=r"`Toy.documents_cut_each` gave 1 flag\(s\) for 3 documents"):
        fill_store(Toy(), store, ["one two", "three four five six seven", "eight"], progress=False)
    assert len(store) == 0  # the batch it was asked about is not stored, rather than stored in part
    Toy.documents_cut_each = lambda self, texts: [len(text.split()) > 4 for text in texts]
    texts = ["one two", "three four five six seven", "eight"]
    stats = fill_store(Toy(), store, texts, progress=False)
    assert stats.encoded == 3 and stats.truncated == 1 and len(store) == 3
    metas = [store.entry("a" * 64, Toy().settings(), content_hash(text)).meta for text in texts]
    assert [(meta["num_tokens"], meta["cut"]) for meta in metas] == [(2, False), (4, True), (1, False)]


def test_an_adapter_overriding_only_documents_cut_is_counted_by_it_when_storing_and_reading(tmp_path, tokenizer):
    """A new family's adapter (an `AdapterBase` subclass) that overrides the count `documents_cut` and not the flags
    `documents_cut_each` counts its own way: `fill_store` counts with it and records no `cut` flag, and
    `stored_documents_cut` agrees with it. The flags came from the inherited `documents_cut_each` (the tokenizer's
    count with [CLS] and [SEP]: it takes the 4-word text for cut), so `truncated` and `stored_documents_cut` said 2
    where the adapter says 1. An adapter overriding `documents_cut_each` has its flags recorded and read back."""
    from hf_readonce.representations.base import AdapterBase, documents_cut_each_of
    from hf_readonce.representations.fill import stored_documents_cut

    class Toy(AdapterBase):
        model_type, max_document_length, model = "toy", 4, torch.nn.Linear(1, 1)

        def __init__(self):
            self.tokenizer = tokenizer

        def fingerprint(self):
            return "a" * 64

        def settings(self):
            return {"representation": "toy/v1", "max_document_length": 4}

        def num_tokens(self, tensors):
            return int(tensors["x"].shape[0])

        def encode(self, texts):  # reads the first 4 words of each text
            return [{"x": torch.zeros(min(len(text.split()), 4), 2)} for text in texts]

    class CountsWords(Toy):
        def documents_cut(self, texts):  # cut: more than 4 words
            return sum(len(text.split()) > 4 for text in texts)

    class FlagsWords(Toy):
        def documents_cut_each(self, texts):
            return [len(text.split()) > 4 for text in texts]

    texts = ["one two", "three four five six", "seven eight nine ten eleven"]
    hashes = {text: content_hash(text) for text in texts}
    settings, fingerprint = Toy().settings(), "a" * 64
    assert CountsWords().documents_cut_each(texts) == [False, True, True]  # the inherited tokenizer count
    assert documents_cut_each_of(CountsWords()) is None and documents_cut_each_of(FlagsWords()) is not None
    assert documents_cut_each_of(Toy()) is not None

    store = RepresentationStore(tmp_path / "counts")
    stats = fill_store(CountsWords(), store, texts, progress=False)
    assert stats.encoded == 3 and stats.truncated == 1 == CountsWords().documents_cut(texts)
    metas = [store.entry(fingerprint, settings, hashes[text]).meta for text in texts]
    assert ["cut" in meta for meta in metas] == [False, False, False]
    assert stored_documents_cut(CountsWords(), store, fingerprint, settings, hashes) == 1

    store = RepresentationStore(tmp_path / "flags")
    stats = fill_store(FlagsWords(), store, texts, progress=False)
    assert stats.truncated == 1
    metas = [store.entry(fingerprint, settings, hashes[text]).meta for text in texts]
    assert [meta["cut"] for meta in metas] == [False, False, True]
    assert stored_documents_cut(FlagsWords(), store, fingerprint, settings, hashes) == 1

    # a store whose flags another adapter of the space recorded (here: all cut) is read by the one counting its own
    # way: its count, not the flags
    store = RepresentationStore(tmp_path / "all")
    fill_store(type("FlagsAll", (Toy,), {"documents_cut_each": lambda self, texts: [True] * len(texts)})(), store,
               texts, progress=False)
    assert stored_documents_cut(CountsWords(), store, fingerprint, settings, hashes) == 1


def test_fill_store_records_a_folder_loaded_by_a_relative_path_by_its_absolute_path(tmp_path, tokenizer, monkeypatch):
    """A model loaded from `../tiny` (relative to the working directory) is recorded as the absolute folder: a `../`
    name in a store is read relative to the store by `hf-readonce`, which would name another folder."""
    from hf_readonce.representations import get_adapter

    folder = tmp_path / "tiny"
    tiny_model().save_pretrained(folder)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    loaded = DeformerBertForQuestionAnswering.from_pretrained("../tiny").eval()
    assert loaded.config.name_or_path == "../tiny"
    store = RepresentationStore(tmp_path / "deep" / "er" / "s")
    fill_store(get_adapter(loaded, tokenizer, max_passage_length=32, doc_stride=8), store, ["The mill."])
    names = [space["model_names"] for space in store.info()["spaces"].values()]
    assert names == [[os.path.abspath("../tiny")]], names


def test_fill_store_refuses_a_mapping_of_documents(tmp_path, tokenizer):
    """`{id: text}` iterates over its ids: `fill_store` would store the ids as the documents; it names `.items()`
    instead, and nothing is written."""
    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    store = RepresentationStore(tmp_path / "s")
    documents = {"d0": "A passage about the river Ash and its mill.", "d1": "Another passage about the mill."}
    with pytest.raises(TypeError, match=r"`documents` .* not a dict .*documents\.items\(\)"):
        fill_store(adapter, store, documents, store_dtype="fp32")
    assert len(RepresentationStore(tmp_path / "s")) == 0
    stats = fill_store(adapter, store, documents.items(), store_dtype="fp32")  # what was meant: (id, text) pairs
    assert stats.encoded == 2
    fingerprint, settings = adapter.model.representation_fingerprint(), adapter.settings()
    assert [store.get_meta(fingerprint, settings, content_hash(text))["id"] for text in documents.values()] == \
        ["d0", "d1"]


def test_encode_missing_and_on_batch_of_the_wrong_type_are_refused_before_anything_is_written(tmp_path, tokenizer):
    """`encode_missing="no"` read as true, so a task wrote into the store it was told only to read; an `on_batch`
    that is not callable failed with Python's bare "object is not callable" once the first batch was encoded."""
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 32, 8
    store = RepresentationStore(tmp_path / "s")
    rows = [{"id": "q", "question": "What is by the river?", "context": "A mill stands by the river Ash."}]
    with pytest.raises(TypeError, match=r"`encode_missing` must be a bool, got str 'no'"):
        answer_from_store(model, tokenizer, store, rows, encode_missing="no", max_passage_length=32, doc_stride=8)
    with pytest.raises(TypeError, match=r"`on_batch` must be a callable .* got int"):
        fill_store(DeformerBertAdapter(model, tokenizer), store, [rows[0]["context"]], on_batch=5)
    assert len(RepresentationStore(tmp_path / "s")) == 0
