"""Extractive QA from a [`RepresentationStore`]: DeFormer-BERT answers questions from stored passage states, so only
the questions and the upper layers run."""

from __future__ import annotations

from collections.abc import Sequence

from ..dtypes import takes_store_dtype
from ..representations.base import (
    check_positive_ints,
    current_fingerprint_if_any,
    digests_weights_once,
    one_tokenizer_fingerprint,
    scoped_tokenizer_fingerprint,
)
from ..representations.deformer_bert import DeformerBertAdapter
from ..representations.fill import (
    check_store_arguments,
    ensure_stored,
    given_or_current_fingerprint,
)
from ..representations.spaces import default_settings, find_space
from ..store import MissingRepresentationError, RepresentationMismatchError, RepresentationStore
from ..store.keys import check_bool
from ..store.maintenance import unindexed_note
from .batching import length_grouped_order
from .question_answering import (
    PassageWindowCache,
    check_decoding_arguments,
    check_question_rows,
    postprocess_qa_predictions,
    predict_cached,
    question_of_context,
    recorded_answer_settings,
    tokenize_questions,
)


def find_deformer_space(store: RepresentationStore, model, tokenizer, *, max_passage_length: int | None = None,
                        doc_stride: int | None = None, fingerprint: str | None = None) -> dict:
    """The settings of the only DeFormer space in `store` made by this model (fingerprint, k) and tokenizer, among
    those with the given window length and stride (either may be given alone; the other is then the stored one):
    [`hf_readonce.representations.spaces.find_space`], with DeFormer's words when nothing is stored.

    `fingerprint` (*optional*): the model's [`current_fingerprint`] when the caller has just computed it (it hashes
    the weights); computed here when omitted, checked against the model's cached fingerprint when given
    ([`hf_readonce.representations.fill.given_or_current_fingerprint`]). The tokenizer is serialized for its fingerprint once per call
    ([`one_tokenizer_fingerprint`]).

    Raises:
        RepresentationMismatchError: if the store holds DeFormer states only for other fingerprints (names both).
        MissingRepresentationError: if the store holds no DeFormer states of this model (its k, and these windows
            when given); it names the DeFormer states it holds instead (another k, other windows), and says so when
            the store holds shard files its index does not list (a damaged index), rather than "empty".
        ValueError: if several window settings are stored for this model and none is the checkpoint's recorded
            (default) one (pass them explicitly); a `fingerprint` that is not this model's (stale, or another
            model's).
        TypeError: a `model` that is not a DeFormer ([`AdapterBase.check_model`]).
    """
    DeformerBertAdapter.check_model(model)
    wanted = {name: value for name, value in (("max_passage_length", max_passage_length), ("doc_stride", doc_stride))
              if value is not None}
    k = int(model.config.num_decomposed_layers)
    with one_tokenizer_fingerprint(tokenizer):  # the settings below, the default adapter's and each space's check
        settings = {"representation": DeformerBertAdapter.representation,
                    "tokenizer": scoped_tokenizer_fingerprint(tokenizer),
                    "num_decomposed_layers": k, **wanted}  # DeformerBertAdapter.settings(), the windows free
        # the weights as they are now (also after a `.data` edit)
        # a given one is checked: a stale one, or another model's, would find that model's space
        fingerprint = given_or_current_fingerprint(model, fingerprint)
        found = find_space(store, DeformerBertAdapter, fingerprint, settings, given=wanted,
                           prefer=default_settings(model, tokenizer, wanted))  # the windows the checkpoint records
        if found is not None:
            return found
        names = ("num_decomposed_layers", "max_passage_length", "doc_stride")
        others = sorted({", ".join(f"{name}={s.settings.get(name)}" for name in names)
                         + (" (this model's)" if s.fingerprint == fingerprint
                            else " (another fingerprint: other weights, k or compute dtype)")
                         for s in store.spaces() if DeformerBertAdapter.settings_match(s.settings, tokenizer)})
    held = sorted({s.model_type or "?" for s in store.spaces()})
    note = unindexed_note(store)
    this = ", ".join(f"{name}={value}" for name, value in {"num_decomposed_layers": k, **wanted}.items())
    if others:
        holds = (f"; it holds this tokenizer's DeFormer states with {'; '.join(others)}; `--num-decomposed-layers`, "
                 "`--max-passage-length` and `--doc-stride` pick among them.")
    elif held:
        holds = f"; it holds representations of {', '.join(held)} models only."
    else:
        holds = "; its index lists nothing." + note if note else "; it is empty."
    raise MissingRepresentationError(f"store {store.path} holds no DeFormer passage states of this model and "
                                     f"tokenizer ({this})" + holds)


def window_defaults(model) -> dict:
    """The passage windows `hf-readonce encode` reads with for `model`: `max_passage_length` and `doc_stride` as its
    config records them (the training windows), else [`DeformerBertAdapter`]'s defaults (256 / 64).

    Args:
        model: a DeFormer (or a BERT read as one); only its `config` is read.

    Returns:
        `dict`: `{"max_passage_length": int, "doc_stride": int}` (tokens).
    """
    out = {}
    for name, (_, default, _) in DeformerBertAdapter.cli_settings.items():
        recorded = getattr(model.config, name, None)
        out[name] = recorded if recorded is not None else default
    return out


def _check_window_taken(model, window: dict, given: dict) -> None:
    """Refuse, before any passage is encoded, a window `encode_missing` took rather than was given (the checkpoint's
    recorded one, else [`DeformerBertAdapter`]'s defaults, see [`window_defaults`]) that the model cannot read,
    naming where the value came from and the checkpoint's limit (the adapter's own error would name a value as if the
    caller had passed it). A window given by the caller is left to the adapter, which names it.

    Args:
        model: the DeFormer (only its `config` is read).
        window (`dict`): `max_passage_length` and `doc_stride` to encode with.
        given (`dict`): the same names, the caller's values (`None`: not given).

    Raises:
        ValueError: a taken `max_passage_length` above the model's passage positions, or a taken `doc_stride` not
            below `max_passage_length - 1` for a window the model reads; each names its option
            (`--max-passage-length`, `--doc-stride`).
    """
    config = model.config
    length, stride = window["max_passage_length"], window["doc_stride"]
    options = {name: option for name, (option, _, _) in DeformerBertAdapter.cli_settings.items()}

    def source(name):
        return (f"the value the checkpoint records (`{name}`)" if getattr(config, name, None) is not None
                else f"the default (the checkpoint records no `{name}`)")

    taken = ("nothing of this model is stored yet, so `encode_missing` windows the passages as `hf-readonce encode` "
             "would")
    offset = getattr(config, "passage_position_offset", 0) or 0
    positions = getattr(config, "max_position_embeddings", None)
    room = None if positions is None else positions - offset
    if given["max_passage_length"] is None and room is not None and length > room:
        raise ValueError(
            f"{taken}: with windows of {length} tokens, {source('max_passage_length')}, which do not fit this "
            f"checkpoint's {room} passage positions (max_position_embeddings={positions} - "
            f"passage_position_offset={offset}): pass `max_passage_length` ({options['max_passage_length']}) of at "
            f"most {room}.")
    # a given window the model cannot read is the adapter's to name (a stride fits no window below 2 tokens)
    readable = isinstance(length, int) and length >= 2 and (room is None or length <= room)
    if given["doc_stride"] is None and readable and not stride < length - 1:
        raise ValueError(
            f"{taken}: with a stride of {stride} tokens, {source('doc_stride')}, which does not fit windows of "
            f"{length} tokens (a stride is below {length - 1}): pass `doc_stride` ({options['doc_stride']}) of at "
            f"most {length - 2}.")


@takes_store_dtype
@digests_weights_once
def answer_from_store(model, tokenizer, store: RepresentationStore, examples: Sequence[dict], *,
                      max_passage_length: int | None = None, doc_stride: int | None = None,
                      max_question_length: int | None = None, batch_size: int = 32, n_best_size: int = 20,
                      max_answer_length: int = 30, allow_no_answer: bool | None = None,
                      null_score_diff_threshold: float | None = None, passages_per_chunk: int = 64,
                      encode_missing: bool = False, store_dtype: str = "float16", progress: bool = False,
                      settings_used: dict | None = None, counts: dict | None = None,
                      group_by_length: bool = True) -> dict[str, str]:
    """Answer extractive questions with a DeFormer model from passage states stored in `store`: only the questions
    and the upper layers run; the passage windows, offsets and lower-layer states come from the store.

    Args:
        model ([`DeformerBertForQuestionAnswering`]), tokenizer: the model that encoded the store (or a copy).
        store ([`RepresentationStore`]).
        examples (`Sequence[dict]`): SQuAD-style rows with `id`, `question`, `context` (a row without `id` is keyed
            by its index; ids are returned as str).
        max_passage_length, doc_stride (`int`, *optional*): window settings used at encode time; what is omitted is
            looked up in the store ([`find_deformer_space`]), or, with `encode_missing` and nothing of this model
            stored yet, taken as `hf-readonce encode` takes it ([`window_defaults`]: the checkpoint's recorded
            windows, else 256 / 64).
        max_question_length (`int`, *optional*), allow_no_answer (`bool`, *optional*), null_score_diff_threshold
            (`float`, *optional*): question tokens (`[CLS]`/`[SEP]` included) and the no-answer decision; by default
            what the checkpoint records in its config (what it was trained and tuned with, as `hf-readonce answer`
            reads them), else 64, `False` and 0.0.
        batch_size, n_best_size, max_answer_length: as in
            [`hf_readonce.tasks.question_answering.postprocess_qa_predictions`].
        passages_per_chunk (`int`, defaults to 64): passages whose states are held in memory at once.
        group_by_length (`bool`, defaults to `True`): the features (question, window) of each chunk of passages run
            sorted by window length, then question tokens, longest first, so that a batch pads its questions and
            passage states less (as `fill_store`'s `group_by_length`; at most `LENGTH_GROUPED_BATCHES` (50) batches
            sorted together); the answers are those of the input order (each feature's logits do not depend on its
            batch companions, within floating-point rounding) and come back in example order. `False`: the features
            run in example order.
        encode_missing (`bool`, defaults to `False`): encode and store passages that are missing instead of raising.
        store_dtype (`str`, defaults to `"float16"`): storage dtype of what `encode_missing` stores (fp32, fp16,
            bf16); the model computes in its own dtype.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr counting answered questions.
        settings_used (`dict`, *optional*): filled with the window read (`max_passage_length`, `doc_stride`), e.g.
            for a report of what was looked up in the store.
        counts (`dict`, *optional*): filled with `questions` (the rows) and `questions_cut` (how many questions hold
            more than `max_question_length` tokens, `[CLS]`/`[SEP]` included: they were cut to them, and their answers
            come from those tokens only; `adapter.questions_cut`). Passages are read whole, window by window.

    Returns:
        `dict[str, str]`: example id -> answer text, in example order.

    Raises:
        MissingRepresentationError / RepresentationMismatchError: passages not stored for this model and settings
            (the message counts them and names the first, and the fingerprints involved).
        ValueError: no examples, an example without a non-empty `question`/`context`, two examples with one id,
            a count < 1 (`batch_size`, `passages_per_chunk`, `max_question_length`, `n_best_size`,
            `max_answer_length`).
        TypeError: an argument of the wrong type (named); a `model` that is not a DeFormer; a `dtype=` keyword (the
            storage dtype is `store_dtype`); a `group_by_length` that is not a bool.
    """
    check_store_arguments(model, store, store_dtype)
    check_bool(group_by_length, "group_by_length")
    examples = check_question_rows(examples)
    recorded = recorded_answer_settings(model.config, max_question_length, allow_no_answer, null_score_diff_threshold)
    max_question_length, allow_no_answer = recorded["max_question_length"], recorded["allow_no_answer"]
    null_score_diff_threshold = recorded["null_score_diff_threshold"]
    check_positive_ints({"batch_size": batch_size, "passages_per_chunk": passages_per_chunk,
                         "max_question_length": max_question_length})
    check_decoding_arguments(n_best_size, max_answer_length, allow_no_answer, null_score_diff_threshold, examples)
    # the weights are hashed once per call, and the tokenizer serialized once: the same fingerprint and tokenizer
    # digest find the windows and read them (a model of another type gets None here and the adapter's error below)
    fingerprint = current_fingerprint_if_any(model)
    with one_tokenizer_fingerprint(tokenizer):
        if max_passage_length is None or doc_stride is None:
            try:
                found = find_deformer_space(store, model, tokenizer, max_passage_length=max_passage_length,
                                            doc_stride=doc_stride, fingerprint=fingerprint)
            except (MissingRepresentationError, RepresentationMismatchError):
                if not encode_missing:
                    raise
                # Nothing of this model stored yet: the window `hf-readonce encode` would take (what the checkpoint
                # records it was trained with, else the adapter's defaults), the given one kept.
                found = window_defaults(model)
                found.update({name: value for name, value in (("max_passage_length", max_passage_length),
                                                              ("doc_stride", doc_stride)) if value is not None})
                _check_window_taken(model, found, {"max_passage_length": max_passage_length,
                                                   "doc_stride": doc_stride})
            max_passage_length, doc_stride = found["max_passage_length"], found["doc_stride"]
        adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=max_passage_length, doc_stride=doc_stride,
                                       batch_size=batch_size)
    if settings_used is not None:
        settings_used.update(max_passage_length=max_passage_length, doc_stride=doc_stride)
    contexts: dict[str, int] = {}
    for example in examples:
        contexts.setdefault(example["context"], len(contexts))
    texts = list(contexts)
    fingerprint, settings, by_text = ensure_stored(adapter, store, texts, encode_missing=encode_missing,
                                                   store_dtype=store_dtype, what="passages",
                                                   name_of=question_of_context(examples, "the passage"),
                                                   fingerprint=fingerprint)
    hashes = [by_text[t] for t in texts]
    texts_read = [e["question"] for e in examples]
    questions = tokenize_questions(tokenizer, texts_read, max_question_length)
    if counts is not None:
        counts.update(questions=len(examples),
                      questions_cut=adapter.questions_cut(texts_read, max_question_length, token_ids=questions))
    by_passage: dict[int, list[int]] = {}
    for i, example in enumerate(examples):
        by_passage.setdefault(contexts[example["context"]], []).append(i)
    pad = tokenizer.pad_token_id or 0
    from tqdm.auto import tqdm

    bar = tqdm(total=len(examples), desc="answer", unit="question", disable=not progress, dynamic_ncols=True)
    predictions: dict[str, str] = {}
    for chunk_start in range(0, len(texts), passages_per_chunk):
        chunk = range(chunk_start, min(chunk_start + passages_per_chunk, len(texts)))
        stored = store.get_many(fingerprint, settings, [hashes[p] for p in chunk])
        windows = []
        cache = PassageWindowCache(model_fingerprint=fingerprint,
                                   num_decomposed_layers=settings["num_decomposed_layers"])
        chunk_examples, features = [], []
        for local, (p, tensors) in enumerate(zip(chunk, stored)):
            doc_windows, states = adapter.unpack(tensors, local)
            windows.append(doc_windows)
            for w, state in enumerate(states):
                cache[(local, w)] = state
            for i in by_passage[p]:
                for w in range(len(doc_windows)):
                    features.append({"example_index": len(chunk_examples), "passage_index": local,
                                     "window_index": w, "question_ids": questions[i]})
                chunk_examples.append({**examples[i], "id": str(examples[i].get("id", i))})
        # the features longest first (stored window rows, then question tokens), their logits put back in place
        order = length_grouped_order([(cache[(f["passage_index"], f["window_index"])].shape[0],
                                       len(f["question_ids"])) for f in features], batch_size, group_by_length)
        logits = [None] * len(features)
        for i, row in zip(order, predict_cached(model, [features[i] for i in order], cache, batch_size=batch_size,
                                                pad_token_id=pad), strict=True):
            logits[i] = row
        predictions.update(postprocess_qa_predictions(chunk_examples, features, windows, logits,
                                                      n_best_size=n_best_size, max_answer_length=max_answer_length,
                                                      allow_no_answer=allow_no_answer,
                                                      null_score_diff_threshold=null_score_diff_threshold))
        bar.update(len(chunk_examples))
    bar.close()
    return {str(e.get("id", i)): predictions[str(e.get("id", i))] for i, e in enumerate(examples)}


__all__ = ["answer_from_store", "find_deformer_space", "window_defaults"]
