"""`fill_store(group_by_length=True)`: documents read ahead, sorted by length and cut into batches, store exactly
what a run in input order stores (documents, keys, metadata, counts, reports), each document's tensors within the
fp32 tolerance of the recompute check; only the batches the adapter is called with change. Tiny random models of
every family with an adapter (the contract harnesses), the real MiniLM tokenizer."""

import pytest
import torch

from hf_readonce.representations import fill as fill_module
from hf_readonce.representations import fill_store, get_adapter, registered_adapters
from hf_readonce.store import RepresentationStore, content_hash
from tests.representations.contract import DOCUMENTS
from tests.representations.test_contract import HARNESSES

# lengths that differ, a duplicate, an empty text and one with no token (set aside), as (id, text) pairs
TEXTS = [DOCUMENTS[2], "\u200b\u200b", DOCUMENTS[0], DOCUMENTS[1], "   ", DOCUMENTS[0], "Paris.",
         "Jane Austen wrote six novels. " * 4, "Bath is a city in Somerset.", DOCUMENTS[1][:90]]
ROWS = [(f"d{i}", text) for i, text in enumerate(TEXTS)]


def _calls(adapter) -> list:
    """The texts of each `adapter.encode` call, recorded."""
    calls, encode = [], adapter.encode

    def recording(texts):
        calls.append(list(texts))
        return encode(texts)

    adapter.encode = recording
    return calls


def _fill(adapter, path, **kwargs):
    reports = []
    stats = fill_store(adapter, RepresentationStore(path), ROWS, store_dtype="float32", documents_per_batch=3,
                       on_batch=lambda s: reports.append((s.encoded, s.tokens)), **kwargs)
    return stats, reports


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_grouped_batches_store_what_input_order_stores(model_type, tokenizer, tmp_path):
    model, settings, _ = HARNESSES[model_type](tokenizer)
    if "max_document_length" in type(get_adapter(model, tokenizer, **settings)).cli_settings:
        settings = {**settings, "max_document_length": 24}  # some documents are cut: `truncated` and `cut` too
    adapter = get_adapter(model, tokenizer, **settings)
    calls = _calls(adapter)
    plain, plain_reports = _fill(adapter, tmp_path / "plain", group_by_length=False)
    plain_calls = list(calls)
    calls.clear()
    grouped, grouped_reports = _fill(adapter, tmp_path / "grouped")  # the default
    # the same counts and reports, the same documents set aside in input order
    assert {**plain.as_dict(), "seconds": 0} == {**grouped.as_dict(), "seconds": 0}
    # (the zero-width text is rejected where no special token is added to it)
    assert grouped.rejected[-1] == ("d4", "the text is empty") and [d for d, _ in grouped.rejected] in (["d4"],
                                                                                                        ["d1", "d4"])
    assert grouped.truncated > 0 if "max_document_length" in settings else grouped.truncated == 0
    assert grouped_reports == plain_reports and sorted(grouped.encoded_hashes) == sorted(plain.encoded_hashes)
    # the adapter was called with the documents longest first (those read ahead), as many calls as in input order
    lengths = [len(text) for call in calls for text in call if text.strip("\u200b")]
    assert lengths == sorted(lengths, reverse=True) and len(calls) == len(plain_calls)
    assert [len(t) for call in plain_calls for t in call if t.strip("\u200b")] != lengths  # the input is not sorted
    # the same metadata and tensors for every document
    fingerprint, space_settings = adapter.fingerprint(), adapter.settings()
    a, b = RepresentationStore(tmp_path / "plain"), RepresentationStore(tmp_path / "grouped")
    for text in dict.fromkeys(t for t in TEXTS if t.strip() and t.strip("\u200b")):
        first, second = (s.entry(fingerprint, space_settings, content_hash(text)) for s in (a, b))
        assert first.meta == second.meta
        x, y = (s.get(fingerprint, space_settings, content_hash(text)) for s in (a, b))
        assert x.keys() == y.keys()
        for name in x:
            assert x[name].shape == y[name].shape, name
            if x[name].is_floating_point():
                assert torch.allclose(x[name], y[name], rtol=0, atol=1e-5), name
            else:
                assert torch.equal(x[name], y[name]), name


def test_grouping_reads_a_bounded_look_ahead_and_each_rank_its_share(tokenizer, tmp_path, monkeypatch):
    """At most `LENGTH_GROUPED_BATCHES` batches are read before they are encoded (the input streams); with several
    processes each stores its own share, as in input order; one document per batch reads no further ahead."""
    from tests.conftest import tiny_model

    monkeypatch.setattr(fill_module, "LENGTH_GROUPED_BATCHES", 2)
    adapter = get_adapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    texts = [f"Passage {i}: " + "the river Ash and its mill " * (1 + i % 4) for i in range(11)]
    read = []

    def streamed():
        for text in texts:
            read.append(text)
            yield text

    encode, first_call = adapter.encode, []
    adapter.encode = lambda batch: (first_call.append(len(read)) if not first_call else None, encode(batch))[1]
    stats = fill_store(adapter, RepresentationStore(tmp_path / "s"), streamed(), documents_per_batch=2)
    assert stats.encoded == len(texts) and first_call == [4]  # 2 batches of 2 read ahead, then encoded
    shares = [fill_store(adapter, RepresentationStore(tmp_path / f"r{group}"), texts, documents_per_batch=2,
                         rank=rank, num_processes=2, group_by_length=group).encoded_hashes
              for group in (False, True) for rank in (0, 1)]
    assert sorted(shares[0]) == sorted(shares[2]) and sorted(shares[1]) == sorted(shares[3])
    first_call.clear(), read.clear()
    fill_store(adapter, RepresentationStore(tmp_path / "one"), streamed(), documents_per_batch=1)
    assert first_call == [1]
    with pytest.raises(TypeError, match="`group_by_length` must be a bool"):
        fill_store(adapter, RepresentationStore(tmp_path / "s"), texts, group_by_length="no")


def test_long_documents_are_read_ahead_by_characters_not_fifty_batches(tokenizer, tmp_path, monkeypatch):
    """Reading ahead stops at the first batch boundary past `LENGTH_GROUPED_CHARACTERS`, so the texts held do not
    grow with the documents' size times 50 batches (books); the documents stored and the adapter calls are those of
    input order."""
    from tests.conftest import tiny_model

    monkeypatch.setattr(fill_module, "LENGTH_GROUPED_CHARACTERS", 250, raising=False)
    adapter = get_adapter(tiny_model(), tokenizer, max_passage_length=32, doc_stride=8)
    texts = [f"Chapter {i}. " + "The mill on the river Ash turned. " * (1 + i % 3) for i in range(12)]
    # each batch of 2 holds fewer than 250 characters, each 2 batches 250 or more
    assert all(len(a) + len(b) < 250 <= len(a) + len(b) + len(c) + len(d)
               for a, b, c, d in zip(texts[::4], texts[1::4], texts[2::4], texts[3::4], strict=True))
    read, first_call, calls = [], [], []

    def streamed():
        for text in texts:
            read.append(text)
            yield text

    encode = adapter.encode

    def recording(batch):
        first_call.append(len(read)) if not first_call else None
        calls.append(len(batch))
        return encode(batch)

    adapter.encode = recording
    stats = fill_store(adapter, RepresentationStore(tmp_path / "s"), streamed(), documents_per_batch=2)
    assert first_call == [4] and calls == [2] * 6  # 2 whole batches read ahead, not 50
    assert stats.encoded == len(texts) and sorted(stats.encoded_hashes) == sorted(content_hash(t) for t in texts)
