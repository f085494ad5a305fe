"""One tokenizer shared by threads (representations/base.py `tokenizer_lock`): a fast tokenizer keeps its truncation
and padding settings on its backend between calls, so every tokenizer call of hf-readonce holds the tokenizer's
lock; a document one thread encodes is never cut by the `max_length` another thread tokenizes with."""

import copy
import gc
import sys
import threading

from hf_readonce.representations import get_adapter
from hf_readonce.representations.deformer_bert import tokenize_questions
from tests.tasks.test_summarization_store import longdoc

SENTENCE = "The council approved the new budget on Tuesday after a long debate. "
QUESTION = "Who approved the new budget on Tuesday after the long debate?"


def race(rounds, encode, other):
    """Run `encode(i)` for `i` in `range(rounds)` in one thread while another thread calls `other()` over and over
    until the first is done, the interpreter switching threads every 10 µs (so that one thread's tokenizer call
    often runs between the setting and the encoding of the other's). Returns `(results, failures)`: what `encode`
    returned in each round, and how many of `other()`'s calls returned False. An exception of either thread is
    raised here."""
    barrier, done, errors, results, failures = threading.Barrier(2), threading.Event(), [], [], []

    def first():
        barrier.wait()
        try:
            for i in range(rounds):
                results.append(encode(i))
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)
        finally:
            done.set()

    def second():
        barrier.wait()
        try:
            while not done.is_set():
                if not other():
                    failures.append(1)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    return results, len(failures)


def test_the_lock_is_reentrant_per_tokenizer_and_shared_by_the_pipeline_copies(tokenizer):
    from hf_readonce.models.deformer_bert import pipeline_deformer_bert
    from hf_readonce.models.readtwice_bert import pipeline_readtwice_bert
    from hf_readonce.representations.base import _TOKENIZER_LOCKS, tokenizer_lock

    lock = tokenizer_lock(tokenizer)
    assert tokenizer_lock(tokenizer) is lock
    # the same lock for every copy of the code (the pipelines carry one) and for a shallow copy (the same backend)
    assert pipeline_deformer_bert.tokenizer_lock(tokenizer) is lock
    assert pipeline_readtwice_bert.tokenizer_lock(tokenizer) is lock
    assert tokenizer_lock(copy.copy(tokenizer)) is lock
    own = copy.deepcopy(tokenizer)  # another backend: another lock, so its thread never waits for this one's
    assert tokenizer_lock(own) is not lock

    taken = []

    def try_both():
        taken.append((lock.acquire(blocking=False), tokenizer_lock(own).acquire(blocking=False)))
        tokenizer_lock(own).release()

    with lock, tokenizer_lock(tokenizer):  # re-entrant: a helper called while it is held takes it again
        with tokenizer_lock(tokenizer):
            thread = threading.Thread(target=try_both)
            thread.start()
            thread.join()
        assert lock._is_owned()
    assert taken == [(False, True)]  # held here: another thread waits for it, not for the other tokenizer's
    assert not lock._is_owned() and lock.acquire(blocking=False)
    lock.release()

    # a tokenizer that cannot be weakly referenced shares its class's lock; the registry lets a lock go with its key
    assert tokenizer_lock(None) is tokenizer_lock(None)
    assert tokenizer_lock([1]) is tokenizer_lock([2]) is not tokenizer_lock(None)
    other = copy.deepcopy(tokenizer)
    tokenizer_lock(other)
    assert other.backend_tokenizer in _TOKENIZER_LOCKS
    count = len(_TOKENIZER_LOCKS)
    del other
    gc.collect()
    assert len(_TOKENIZER_LOCKS) == count - 1


def test_documents_encoded_whole_while_another_thread_tokenizes_questions_with_a_tiny_max_length(tokenizer):
    """An adapter's documents (LongDoc BART, read up to 96 tokens) and DeFormer's questions (cut to 4 tokens),
    tokenized by two threads with one tokenizer: each gets its own truncation, every round."""
    adapter = get_adapter(longdoc(tokenizer), tokenizer, max_document_length=96)
    documents = [f"Report {i}: " + SENTENCE * 6 for i in range(60)]
    whole = [len(ids) for ids in tokenizer(documents)["input_ids"]]
    assert min(whole) > 80 and max(whole) <= 96

    results, failures = race(len(documents), lambda i: adapter.num_tokens(adapter.encode([documents[i]])[0]),
                             lambda: [len(ids) for ids in tokenize_questions(tokenizer, [QUESTION], 4)] == [4])
    assert results == whole
    assert failures == 0
