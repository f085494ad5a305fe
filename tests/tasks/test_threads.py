"""Task calls from several threads on one model and one store (a server's thread pool), beside a thread encoding
what the store lacks: each call answers as it does alone, whether the threads share one tokenizer or each has its
own (a fast tokenizer keeps its truncation and padding on the object between calls; hf-readonce's tokenizer calls
hold the tokenizer's lock); the model and the store are shared."""

import copy
import sys
import threading

import pytest

from hf_readonce.representations import DeformerBertAdapter, fill_store, get_adapter
from hf_readonce.store import RepresentationStore, content_hash
from hf_readonce.tasks.question_answering_store import answer_from_store
from hf_readonce.tasks.readtwice_qa import truncate_question
from hf_readonce.tasks.summarization_store import summarize_from_store
from tests.conftest import tiny_model
from tests.representations.test_tokenizer_lock import QUESTION, SENTENCE, race
from tests.tasks.test_summarization_store import DOCUMENTS, longdoc

ROWS = [{"id": f"q{i}", "question": "Who approved the budget on Tuesday?", "context": text}
        for i, text in enumerate(DOCUMENTS)]


@pytest.fixture
def racy():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def test_answers_and_summaries_from_threads_beside_an_encoding_thread(tokenizer, tmp_path, racy):
    model, summarizer = tiny_model(), longdoc(tokenizer)
    model.config.max_passage_length, model.config.doc_stride = 32, 8
    store = RepresentationStore(tmp_path / "store")
    fill_store(DeformerBertAdapter(model, tokenizer), store, DOCUMENTS)
    fill_store(get_adapter(summarizer, tokenizer), store, DOCUMENTS)
    answers = answer_from_store(model, tokenizer, store, ROWS)
    summaries = summarize_from_store(summarizer, tokenizer, store, DOCUMENTS, max_new_tokens=4)
    barrier, errors, results = threading.Barrier(4), [], []

    def run(work):
        own = copy.deepcopy(tokenizer)
        barrier.wait()
        try:
            for round_ in range(3):
                results.append(work(own, round_))
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    def answer(own, _):
        return answer_from_store(model, own, store, ROWS) == answers

    def summarize(own, _):
        return summarize_from_store(summarizer, own, store, DOCUMENTS, max_new_tokens=4) == summaries

    def encode(own, round_):
        rows = [{"id": "new", "question": "What?", "context": f"A new report number {round_} on the harbour works."}]
        return list(answer_from_store(model, own, store, rows, encode_missing=True)) == ["new"]

    threads = [threading.Thread(target=run, args=(work,)) for work in (answer, answer, summarize, encode)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    assert results == [True] * 12
    assert store.verify().ok and len(store) == 2 * len(DOCUMENTS) + 3


def test_documents_stored_whole_while_a_task_tokenizes_with_the_same_tokenizer(tokenizer, tmp_path):
    """A thread filling the store (each document read whole, in windows) and a request thread cutting questions to
    4 tokens (`truncate_question`, ReadTwice's question reading) share one tokenizer: every document is stored with
    all its tokens, under its full text's hash, and every question is cut to 4 tokens."""
    adapter = DeformerBertAdapter(tiny_model(), tokenizer, max_passage_length=100, doc_stride=16)
    documents = [f"Report {i}: " + SENTENCE * 6 for i in range(60)]
    whole = {content_hash(text): sum(len(window.input_ids) for window in windows)
             for text, windows in zip(documents, adapter.windows(documents), strict=True)}
    assert min(whole.values()) > 80
    store = RepresentationStore(tmp_path / "store")

    _, failures = race(1, lambda _: fill_store(adapter, store, documents, documents_per_batch=1),
                       lambda: len(truncate_question(tokenizer, QUESTION, 4)[0]) == 4)
    stored = {entry.content_hash: entry.tensors["input_ids"]["shape"][0] for entry in store.entries()}
    assert stored == whole
    assert failures == 0
