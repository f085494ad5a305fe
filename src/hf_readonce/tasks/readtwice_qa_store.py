"""Extractive QA from a [`RepresentationStore`] with ReadTwice-BERT: each document's first read (BERT₁ states and
memory table, stored by [`ReadTwiceBertAdapter`] in the read-once layout, `question_in_first_read=False`) is read
from the store, and only the questions and the second read (BERT₂ with MemoryAttention, §2.1) run. What
`hf-readonce answer` runs for ReadTwice checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dtypes import takes_store_dtype
from ..models.readtwice_bert.pipeline_readtwice_bert import segment_span_candidates
from ..representations.base import (
    check_positive_ints,
    current_fingerprint,
    digests_weights_once,
    pad_batch,
    tokenizer_lock,
)
from ..representations.fill import check_store_arguments, ensure_stored
from ..representations.readtwice_bert import MENTION_FUNCTIONS, ReadTwiceBertAdapter
from ..store import RepresentationStore
from ..store.keys import check_bool
from .batching import batches_of, length_grouped_order
from .question_answering import (
    check_decoding_arguments,
    check_question_rows,
    question_of_context,
    recorded_answer_settings,
)


def _adapter(model, tokenizer, store: RepresentationStore, mention_fn, batch_size: int,
             mentions: str | None = None) -> tuple[ReadTwiceBertAdapter, str | None]:
    """`(adapter, fingerprint)`: the adapter that reads this model's stored first reads; for entity memories without
    `mention_fn` or `mentions`, the mention finder the checkpoint records (`config.mentions`), else the one (of
    [`MENTION_FUNCTIONS`], by name) the store's first reads of this model were made with, looked up by the model's
    [`current_fingerprint`], which is returned for reading them (`None` when it was not needed here)."""
    ReadTwiceBertAdapter.check_model(model)  # before its config's ReadTwice settings are read
    recorded = fingerprint = None
    if mentions is None and mention_fn is None and model.config.memory_type == "entity":
        recorded = mentions = getattr(model.config, "mentions", None)  # what the checkpoint records, as `encode`
        if mentions is None:
            # the adapter's fingerprint (its `model`'s weights digested, as `ensure_stored` would: read it once)
            fingerprint = current_fingerprint(model)
            mentions = next((s.settings["mentions"] for s in store.spaces() if s.fingerprint == fingerprint
                             and s.settings.get("mentions") in MENTION_FUNCTIONS), None)
    try:
        adapter = ReadTwiceBertAdapter(model, tokenizer, mention_fn=mention_fn, batch_size=batch_size,
                                       mentions=mentions)
        return adapter, fingerprint
    except ValueError as error:
        if recorded is None:
            raise
        raise ValueError(f"{error} (the checkpoint's config records mentions={recorded!r}: pass `mentions=` "
                         "(--mentions) to read with another, or correct the config)") from None


@takes_store_dtype
@digests_weights_once
def answer_from_readtwice_store(model, tokenizer, store: RepresentationStore, examples: Sequence[dict], *,
                                max_question_length: int | None = None, batch_size: int = 8, n_best_size: int = 20,
                                max_answer_length: int = 30, documents_per_chunk: int = 16,
                                encode_missing: bool = False, store_dtype: str = "float16", mention_fn=None,
                                mentions: str | None = None, progress: bool = False,
                                settings_used: dict | None = None, counts: dict | None = None,
                                group_by_length: bool = True) -> dict[str, str]:
    """Answer extractive questions with a read-once ReadTwice model from the first reads stored in `store`: only the
    questions and the second read run. Each row pairs a question with a segment of its document; the answer is the
    best span over all segments (App. C.1: "the most confident prediction amongst all the segments"), found by the
    search of the ReadTwice pipeline (`segment_span_candidates`) and mapped to context characters through the stored
    offsets; with a float32 store the answers equal the pipeline's reading the documents itself (tested).

    Args:
        model ([`ReadTwiceBertForQuestionAnswering`]): with `question_in_first_read=False`, the model that encoded
            the store (or a copy: same fingerprint).
        tokenizer: its fast tokenizer.
        store ([`RepresentationStore`]).
        examples (`Sequence[dict]`): SQuAD-style rows with `id`, `question`, `context`.
        max_question_length (`int`, *optional*): question tokens, `[CLS]` and `[SEP]` included; defaults to the
            checkpoint's `max_question_length`, else 64 (as the pipeline).
        batch_size (`int`, defaults to 8): questions per model call (each call reads every segment of their
            documents).
        n_best_size (`int`, defaults to 20), max_answer_length (`int`, defaults to 30): the span search (start and end
            candidates per segment; longest answer in tokens).
        documents_per_chunk (`int`, defaults to 16): documents whose first reads are held in memory at once. A
            model call reads the first reads of its questions' documents only, their segments padded to the
            longest of them.
        group_by_length (`bool`, defaults to `True`): the questions of each chunk of documents run sorted by their
            document's stored segment width, then its segments, then question tokens, longest first, so that a
            batch pads its questions and segments less (as `fill_store`'s `group_by_length`; at most
            `LENGTH_GROUPED_BATCHES` (50) batches sorted together); the answers are those of the input order (a
            question's logits do not depend on its batch companions, within floating-point rounding) and come back
            in example order. `False`: the questions run in example order.
        encode_missing (`bool`, defaults to `False`): encode and store documents that are missing instead of raising.
        store_dtype (`str`, defaults to `"float16"`): storage dtype of what `encode_missing` stores (fp32, fp16,
            bf16); the model computes in its own dtype.
        mention_fn (`Callable[[str], list[tuple[int, int]]]`, *optional*): the entity mention function of
            `memory_type="entity"` checkpoints (default: `capitalized_mentions` when the store's first reads were
            made with it).
        mentions (`str`, *optional*): the mention finder by name instead (`"capitalized_mentions"`; what
            `--mentions` passes), e.g. to encode entity memories with `encode_missing`.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr counting answered questions.
        settings_used (`dict`, *optional*): filled with the stored segmentation read (`segment_length`,
            `segment_overlap`, `memory_type`).
        counts (`dict`, *optional*): filled with `questions` (the rows) and `questions_cut` (how many questions hold
            more than `max_question_length` tokens, `[CLS]`/`[SEP]` included: they were cut to them, and their answers
            come from those tokens only; `adapter.questions_cut`). Documents are read whole, segment by segment.

    Returns:
        `dict[str, str]`: example id -> answer text, in example order (`""` when a document has no context token).

    Raises:
        MissingRepresentationError / RepresentationMismatchError: documents not stored for this model (counted, the
            first named by its question's id).
        ValueError: the model reads the question in its first read (nothing document-only is stored); no examples;
            an example without a non-empty `question`/`context`; two examples with one id; a count < 1; entity
            memories without a mention function.
        TypeError: `examples` is not a list of dicts; an argument of the wrong type (named); a `model` that is not
            a ReadTwice model; a `dtype=` keyword (the storage dtype is `store_dtype`); a `group_by_length` that is
            not a bool.
    """
    check_store_arguments(model, store, store_dtype)
    check_bool(group_by_length, "group_by_length")
    examples = check_question_rows(examples)
    max_question_length = recorded_answer_settings(model.config, max_question_length)["max_question_length"]
    check_positive_ints({"batch_size": batch_size, "documents_per_chunk": documents_per_chunk,
                         "max_question_length": max_question_length})
    check_decoding_arguments(n_best_size, max_answer_length, examples=examples)
    adapter, fingerprint = _adapter(model, tokenizer, store, mention_fn, batch_size, mentions)
    if settings_used is not None:
        settings_used.update({name: adapter.settings()[name]
                              for name in ("segment_length", "segment_overlap", "memory_type")})
    contexts: dict[str, int] = {}
    for example in examples:
        contexts.setdefault(example["context"], len(contexts))
    texts = list(contexts)
    fingerprint, settings, by_text = ensure_stored(adapter, store, texts, encode_missing=encode_missing,
                                                   store_dtype=store_dtype, name_of=question_of_context(examples),
                                                   fingerprint=fingerprint)
    hashes = [by_text[t] for t in texts]
    texts_read = [e["question"].strip() for e in examples]
    with tokenizer_lock(tokenizer):
        questions = [list(ids) for ids in
                     tokenizer(texts_read, truncation=True, max_length=max_question_length)["input_ids"]]
    if counts is not None:
        counts.update(questions=len(examples),
                      questions_cut=adapter.questions_cut(texts_read, max_question_length, token_ids=questions))
    by_context: dict[int, list[int]] = {}
    for i, example in enumerate(examples):
        by_context.setdefault(contexts[example["context"]], []).append(i)
    pad = tokenizer.pad_token_id or 0
    device = next(model.parameters()).device
    from tqdm.auto import tqdm

    bar = tqdm(total=len(examples), desc="answer", unit="question", disable=not progress, dynamic_ncols=True)
    answers: dict[int, str] = {}
    with torch.no_grad():
        for chunk_start in range(0, len(texts), documents_per_chunk):
            chunk = list(range(chunk_start, min(chunk_start + documents_per_chunk, len(texts))))
            stored = store.get_many(fingerprint, settings, [hashes[c] for c in chunk])
            offsets = []  # per local document, per segment its offsets
            for tensors in stored:
                lengths = tensors["attention_mask"].sum(dim=1).tolist()
                spans = tensors["offsets"].tolist()
                offsets.append([[tuple(o) if o[0] >= 0 else None for o in spans[s][:n]]
                                for s, n in enumerate(lengths)])
            pending = [(local, i) for local, c in enumerate(chunk) for i in by_context[c]]
            # longest first: the document's stored segment width, its segments, the question's tokens
            order = length_grouped_order([(*stored[local]["attention_mask"].shape[::-1], len(questions[i]))
                                          for local, i in pending], batch_size, group_by_length)
            for rows in batches_of(order, batch_size):
                batch = [pending[r] for r in rows]
                # the first reads of this batch's documents only: segments padded to the longest of them
                documents = list(dict.fromkeys(local for local, _ in batch))
                read = adapter.read([stored[local] for local in documents], device=device, dtype=model.dtype)
                first_segment, row = {}, 0  # per local document: its first row in `read`
                for local in documents:
                    first_segment[local] = row
                    row += stored[local]["attention_mask"].shape[0]
                ids = pad_batch([questions[i] for _, i in batch], pad).to(device)
                mask = pad_batch([[1] * len(questions[i]) for _, i in batch], 0).to(device)
                document_ids = [documents.index(local) for local, _ in batch]
                out = model(document_states=read, question_input_ids=ids, question_attention_mask=mask,
                            question_token_type_ids=torch.zeros_like(ids),
                            question_document_ids=torch.tensor(document_ids, device=device),
                            return_dict=True)
                start, end = out.start_logits.float().cpu(), out.end_logits.float().cpu()
                shift = int(out.question_length or 0)
                best: dict[int, tuple[float, str]] = {}
                for r, (q, segment) in enumerate(zip(out.question_index.tolist(), out.segment_index.tolist())):
                    local, i = batch[q]
                    segment_offsets = offsets[local][segment - first_segment[local]]
                    n = len(segment_offsets)
                    context = examples[i]["context"]
                    for score, char_start, char_end in segment_span_candidates(
                            start[r, shift : shift + n], end[r, shift : shift + n], segment_offsets, n_best_size,
                            max_answer_length):
                        if score > best.get(i, (-float("inf"), ""))[0]:
                            best[i] = (score, context[char_start:char_end])
                for _, i in batch:
                    answers[i] = best.get(i, (0.0, ""))[1]
                bar.update(len(batch))
    bar.close()
    return {str(e.get("id", i)): answers[i] for i, e in enumerate(examples)}


__all__ = ["answer_from_readtwice_store"]
