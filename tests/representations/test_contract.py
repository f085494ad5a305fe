"""The contract every representation adapter keeps: documents encoded into a store, read back with the adapter's
read side and fed to the model give the same logits (and generated tokens) as the model reading the documents
itself, to 1e-5 in fp32.

The test runs over every registered adapter, each with the harness its family keeps in
`tests/models/<family>/cases.py` (`contract_harness(tokenizer) -> (model, settings, check)`); a family registered
with an adapter and no harness fails `test_every_registered_adapter_has_a_contract_harness`.
"""

import importlib

import pytest
import torch

from hf_readonce.representations import fill_store, get_adapter, registered_adapters, registered_families
from hf_readonce.store import RepresentationStore, content_hash
from tests.representations.contract import DOCUMENTS, QUESTION, counting_tokenizations  # noqa: F401  (DOCUMENTS: read by test_recompute)


def _harnesses() -> dict:
    """model type -> `contract_harness` of its family's test cases (None where the family has none: the test below
    then fails naming the file to write, instead of an import error at collection)."""
    found = {}
    for spec in registered_families().values():
        if spec.adapter is not None:
            try:
                cases = importlib.import_module(f"tests.models.{spec.name}.cases")
            except ModuleNotFoundError as error:  # the family's cases module itself, not an import inside it
                if error.name not in (f"tests.models.{spec.name}", f"tests.models.{spec.name}.cases"):
                    raise
                cases = None
            found[spec.adapter.model_type] = getattr(cases, "contract_harness", None)
    return found


HARNESSES = _harnesses()


def test_every_registered_adapter_has_a_contract_harness():
    assert set(registered_adapters()) == set(HARNESSES)
    missing = [model_type for model_type, harness in HARNESSES.items() if not callable(harness)]
    assert not missing, (f"families without a contract harness: {missing}; write tests/models/<family>/cases.py with "
                         "`contract_harness(tokenizer) -> (model, settings, check)` (docs/contributing.md)")


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_store_round_trip_gives_the_models_own_outputs(model_type, tokenizer, tmp_path):
    model, settings, check = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    assert type(adapter) is registered_adapters()[model_type]
    store = RepresentationStore(tmp_path / "store")
    stats = fill_store(adapter, store, DOCUMENTS, store_dtype="float32")
    assert stats.encoded == len(DOCUMENTS)
    reopened = RepresentationStore(tmp_path / "store", readonly=True)  # another process would see the same
    stored = reopened.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])
    read = adapter.read(stored)
    assert read.model_fingerprint == model.representation_fingerprint() == adapter.fingerprint()
    with torch.no_grad():
        check(adapter, read)



@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_a_documents_stored_tensors_do_not_depend_on_its_batch_companions(model_type, tokenizer):
    """`fill_store` groups documents of similar length into one model call, so which documents share a call must
    not show in what is stored: each document encoded alone and beside longer and shorter ones (one model call for
    all) gives tensors of the same names and shapes, integer tensors equal, floating ones within the fp32 tolerance
    of the recompute check (1e-5). Padding a batch needs must not reach a document's stored tensors."""
    model, settings, _ = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings, batch_size=len(DOCUMENTS))
    together = adapter.encode(DOCUMENTS)
    for text, batched in zip(DOCUMENTS, together, strict=True):
        (alone,) = adapter.encode([text])
        assert alone.keys() == batched.keys()
        for name, value in alone.items():
            assert value.shape == batched[name].shape and value.dtype == batched[name].dtype, name
            if value.is_floating_point():
                assert torch.allclose(value, batched[name], rtol=0, atol=1e-5), name
            else:
                assert torch.equal(value, batched[name]), name


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_reading_nothing_is_refused_naming_stored(model_type, tokenizer):
    """`adapter.read([])` is a `ValueError` naming `stored`, the argument given, in every family (DeFormer's,
    ReadOnce's and LongDoc's said "`rows` is empty", the name inside their padding helper)."""
    model, settings, _ = HARNESSES[model_type](tokenizer)
    with pytest.raises(ValueError, match="`stored` is empty"):
        get_adapter(model, tokenizer, **settings).read([])


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_questions_cut_are_counted_against_the_length_read(model_type, tokenizer, monkeypatch):
    """`questions_cut` counts the questions longer than a given length (an answering call's `max_question_length`),
    else than the tokens the adapter reads of a question with the stored representations (`max_prompt_length`; none
    for an adapter that cuts no question); where the adapter reads prompts itself (`generation_inputs`), exactly
    those come back cut."""
    model, settings, _ = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    questions = [QUESTION, QUESTION + " And" + " what happened after that, and why?" * 8]
    limit = len(tokenizer(QUESTION).input_ids)
    assert adapter.questions_cut(questions, limit) == 1 and adapter.questions_cut(questions, limit - 1) == 2
    # given the ids each was read as, only the questions that reached the limit are tokenized again
    read_as = [ids[:limit] for ids in tokenizer(questions).input_ids]
    tokenized = counting_tokenizations(tokenizer, questions, monkeypatch)
    assert adapter.questions_cut(questions, limit, token_ids=read_as) == 1 and tokenized == questions
    tokenized.clear()
    assert adapter.questions_cut(questions, limit + 1, token_ids=read_as) == 0 and tokenized == []
    own = adapter.max_prompt_length
    assert adapter.questions_cut(questions) == (0 if own is None else 1)
    if own is not None and hasattr(adapter, "generation_inputs"):
        assert len(tokenizer(questions[0]).input_ids) <= own < len(tokenizer(questions[1]).input_ids)
        read = adapter.read(adapter.encode(DOCUMENTS[:2]))
        lengths = adapter.generation_inputs(read, prompt=questions)["attention_mask"].sum(-1).tolist()
        assert lengths == [len(tokenizer(questions[0]).input_ids), own]


CUTTING = sorted(model_type for model_type, adapter_class in registered_adapters().items()
                 if "max_document_length" in adapter_class.cli_settings)


@pytest.mark.parametrize("model_type", CUTTING)
def test_documents_cut_are_counted_from_the_one_tokenization(model_type, tokenizer, tmp_path, monkeypatch):
    """An adapter that cuts documents to `max_document_length` counts the cut ones (`EncodeStats.truncated`) from the
    tokenization its `encode` made: `fill_store` tokenizes each document once (no second, untruncated pass), and the
    count is the one a fresh adapter computes by tokenizing (a document of exactly the length is not cut)."""
    model, settings, _ = HARNESSES[model_type](tokenizer)
    probe = get_adapter(model, tokenizer, **settings)
    special = getattr(probe, "add_special_tokens", True)
    limit = len(tokenizer(DOCUMENTS[0], add_special_tokens=special)["input_ids"])  # DOCUMENTS[0] fits exactly
    adapter = get_adapter(model, tokenizer, **{**settings, "max_document_length": limit}, batch_size=2)
    assert len(tokenizer(DOCUMENTS[1], add_special_tokens=special)["input_ids"]) > limit  # the long one is cut

    tokenized = counting_tokenizations(tokenizer, DOCUMENTS, monkeypatch)
    # 3 documents per encode call, 2 per model call: a batch tokenized in parts (LongDoc) is counted whole
    stats = fill_store(adapter, RepresentationStore(tmp_path / "store"), DOCUMENTS, store_dtype="float32",
                       documents_per_batch=3)
    assert stats.encoded == 3 and stats.truncated == 1
    assert sorted(tokenized) == sorted(DOCUMENTS)  # each document once
    assert adapter.documents_cut(DOCUMENTS) == 1 and len(tokenized) == len(DOCUMENTS)  # from the same notes
    fresh = get_adapter(model, tokenizer, **{**settings, "max_document_length": limit})
    assert fresh.documents_cut(DOCUMENTS) == 1 and fresh.documents_cut(DOCUMENTS[::2]) == 0  # tokenized here
    assert fresh.documents_cut_each(DOCUMENTS) == adapter.documents_cut_each(DOCUMENTS) == [False, True, False]


@pytest.mark.parametrize("model_type", CUTTING)
def test_documents_cut_are_counted_from_the_stored_token_counts(model_type, tokenizer, tmp_path, monkeypatch):
    """The tokens an adapter that cuts documents stores as read (`num_tokens` in the store's metadata of each document,
    what `fill_store` records) are `min(length, max_document_length)`, and `fill_store` records whether each was cut
    (`cut`, from the tokenization that encoded it), so `stored_documents_cut` tokenizes none of the documents it
    wrote; of a store written by an earlier release (no `cut`), only the documents stored with exactly
    `max_document_length` tokens (cut, or of exactly that length), and those stored without a count; and it counts
    what a fresh adapter counts by tokenizing them all (it tokenized every document on every call of a task that
    reads a store)."""
    from hf_readonce.representations.fill import stored_documents_cut

    model, settings, _ = HARNESSES[model_type](tokenizer)
    special = getattr(get_adapter(model, tokenizer, **settings), "add_special_tokens", True)
    lengths = [len(tokenizer(text, add_special_tokens=special)["input_ids"]) for text in DOCUMENTS]
    limit = lengths[0]  # DOCUMENTS[0] fits exactly, DOCUMENTS[1] is cut, DOCUMENTS[2] is read whole
    assert lengths[1] > limit > lengths[2]
    adapter = get_adapter(model, tokenizer, **{**settings, "max_document_length": limit})
    store = RepresentationStore(tmp_path / "store")
    fill_store(adapter, store, DOCUMENTS, store_dtype="float32")
    fingerprint, stored_settings = adapter.fingerprint(), adapter.settings()
    hashes = {text: content_hash(text) for text in DOCUMENTS}
    metas = [store.entry(fingerprint, stored_settings, h).meta for h in hashes.values()]
    assert [meta["num_tokens"] for meta in metas] == [min(length, limit) for length in lengths]
    assert [meta["cut"] for meta in metas] == [False, True, False]

    tokenized = counting_tokenizations(tokenizer, DOCUMENTS, monkeypatch)
    fresh = get_adapter(model, tokenizer, **{**settings, "max_document_length": limit})  # no notes of an encode
    assert stored_documents_cut(fresh, store, fingerprint, stored_settings, hashes) == 1 and tokenized == []
    encoded = adapter.encode(DOCUMENTS)
    # an earlier release's store (no `cut`), or a `cut` that is not a bool: those at the limit are tokenized
    for name, extra in [("earlier", {}), ("garbled", {"cut": "yes"})]:
        earlier = RepresentationStore(tmp_path / name)
        for text, tensors, meta in zip(DOCUMENTS, encoded, metas, strict=True):
            earlier.put(fingerprint, stored_settings, content_hash(text), tensors,
                        meta={"id": meta["id"], "num_tokens": meta["num_tokens"], **extra})
        tokenized.clear()
        assert stored_documents_cut(fresh, earlier, fingerprint, stored_settings, hashes) == 1
        assert sorted(tokenized) == sorted(DOCUMENTS[:2])  # not the one stored with fewer tokens than the limit
    # a document stored without a count (written by other means) is tokenized to tell
    other = RepresentationStore(tmp_path / "other")
    for text, tensors in zip(DOCUMENTS, encoded, strict=True):
        other.put(fingerprint, stored_settings, content_hash(text), tensors, meta={"id": text[:8]})
    tokenized.clear()
    assert stored_documents_cut(fresh, other, fingerprint, stored_settings, hashes) == 1
    assert sorted(tokenized) == sorted(DOCUMENTS)


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_config_return_dict_false_changes_nothing_stored_or_recomputed(model_type, tokenizer, tmp_path):
    """A user's `config.return_dict=False` (or `torchscript=True`) makes the models return tuples; the adapter asks
    for the output's fields, so it stores the same representations and recomputes the same output log-probs
    (`verify --recompute`) as with the default. Where the transformers class a family builds on reads its own
    submodule's output as a dataclass (BART's and Llama's forward do), the output side fails inside transformers
    exactly as that class does, and only the stored side is compared."""
    import traceback
    from pathlib import Path

    def run(return_dict):
        model, settings, _ = HARNESSES[model_type](tokenizer)
        model.config.return_dict = return_dict
        adapter = get_adapter(model, tokenizer, **settings)
        store = RepresentationStore(tmp_path / f"store_{return_dict}")
        fill_store(adapter, store, DOCUMENTS, store_dtype="float32")
        stored = store.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])
        encoded = adapter.encode([DOCUMENTS[0]])[0]
        with torch.no_grad():
            try:
                log_probs = adapter.output_log_probs(encoded)
            except AttributeError as error:
                inside = Path(traceback.extract_tb(error.__traceback__)[-1].filename)
                if "transformers" not in inside.parts or return_dict:
                    raise
                log_probs = "transformers"
        return stored, log_probs

    (stored, log_probs), (stored_false, log_probs_false) = run(True), run(False)
    assert len(stored) == len(stored_false) == len(DOCUMENTS)
    for a, b in zip(stored, stored_false, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key
    if log_probs_false != "transformers" and log_probs is not None:
        torch.testing.assert_close(log_probs_false, log_probs, atol=0, rtol=0)
