"""Generative QA from stored document representations, for families whose model reads a question (a prompt) with a
document's stored representations and generates the answer (ReadOnce Transformers §3.4: the representation+text
model; registered with `summarize=True` and an adapter whose `summary_prompt` is not `None`). Each question's document
is read from the store, never encoded again. What `hf-readonce answer` runs for such checkpoints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..dtypes import takes_store_dtype
from ..representations.base import check_positive_ints, current_fingerprint_if_any, digests_weights_once
from ..representations.fill import check_store_arguments, ensure_stored, stored_documents_cut
from ..representations.spaces import adapter_class_of, adapter_for_store
from ..store import RepresentationStore
from .jsonl import field_problem
from .question_answering import check_decoding_arguments, check_question_rows, question_of_context
from .summarization_store import generate_from_store


def check_example(example: dict) -> None:
    """What [`answer_from_representations`] reads of a row: a non-empty `question` and one document, a non-empty
    `context` string (not a list, no `contexts`). `hf-readonce answer` sets aside the lines it refuses.

    Raises:
        ValueError: naming what the row lacks.
    """
    name = example.get("id", "?")
    problem = field_problem(example, "question")
    if problem is not None:
        raise ValueError(f"example {name}: {problem}.")
    if "contexts" in example or not isinstance(example.get("context"), str) or not example["context"].strip():
        raise ValueError(f"example {name}: this model reads one document per question: give it as a non-empty "
                         "'context' string (not a list, not 'contexts').")


@takes_store_dtype
@digests_weights_once
def answer_from_representations(model, tokenizer, store: RepresentationStore, examples: Sequence[dict], *,
                                settings: Mapping | None = None, batch_size: int = 8, max_new_tokens: int = 30,
                                encode_missing: bool = False, store_dtype: str = "float16", progress: bool = False,
                                timings: dict | None = None, settings_used: dict | None = None,
                                counts: dict | None = None) -> dict[str, str]:
    """Answer questions from the stored representations of their documents: per row, the question is the prompt the
    model reads with its document's representations (`adapter.generation_inputs(read, prompt=questions)`), and the
    answer is generated greedily. With a float32 store the answers equal the family's text-to-text pipeline reading
    the documents itself (tested).

    Args:
        model: a model whose family generates from stored representations with a prompt (its adapter's
            `summary_prompt` is not `None`), the one that encoded the store (same fingerprint).
        tokenizer: its tokenizer.
        store ([`RepresentationStore`]).
        examples (`Sequence[dict]`): rows with `id`, `question` and `context` (one document, a str).
        settings (`Mapping`, *optional*): adapter settings to read (e.g. `{"compression_ratio": 8}`); by default the
            store's only space of this model.
        batch_size (`int`, defaults to 8): questions per `generate()` call.
        max_new_tokens (`int`, defaults to 30): answer tokens generated at most.
        encode_missing (`bool`, defaults to `False`), store_dtype (`str`, defaults to `"float16"`): encode and store
            the documents that are missing (in the storage dtype `store_dtype`: fp32, fp16 or bf16) instead of
            raising.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr.
        timings (`dict`, *optional*): accumulates `read_seconds` and `generate_seconds`.
        settings_used (`dict`, *optional*): filled with the stored settings read, the decoding used and
            `max_question_length`, the question tokens read with a document (the adapter's `max_prompt_length`: the
            length the checkpoint records it was trained with, else the family's default).
        counts (`dict`, *optional*): filled with `passages` (distinct documents read) and `passages_cut` (how many of
            them hold more tokens than the representations read, `max_document_length`: they were cut to it when
            encoded, and the answers come from their first tokens only; counted from the token counts and cut flags
            stored with them, tokenizing only those they cannot tell about (stored with `max_document_length` tokens and
            no flag, by an earlier release, or without a count),
            [`hf_readonce.representations.fill.stored_documents_cut`]), and `questions` (the rows) and
            `questions_cut` (how many questions hold more tokens than the model reads with a document, the adapter's
            `max_prompt_length`, as above: their answers come from their first tokens only; `adapter.questions_cut`).

    Returns:
        `dict[str, str]`: example id -> answer (stripped), in example order.

    Raises:
        MissingRepresentationError / RepresentationMismatchError: documents not stored for this model (counted, the
            first named by its question's id).
        ValueError: no examples, a row without a non-empty `question` or with other than one `context` str, two rows
            with one id, a count < 1, a family that reads no prompt, several stored spaces.
        TypeError: `examples` is not a list of dicts; a `dtype=` keyword (the storage dtype is `store_dtype`).
    """
    check_store_arguments(model, store, store_dtype)
    examples = check_question_rows(examples, check_example)
    check_positive_ints({"batch_size": batch_size, "max_new_tokens": max_new_tokens})
    check_decoding_arguments(examples=examples)
    adapter_class = adapter_class_of(model)
    if getattr(adapter_class, "summary_prompt", None) is None:
        raise ValueError(f"{adapter_class.model_type} models read no question with a document's representations: "
                         "they cannot answer from the store.")
    # the weights are hashed once per call: the same fingerprint finds the space and reads it
    fingerprint = current_fingerprint_if_any(model)
    adapter = adapter_for_store(model, tokenizer, store, settings=settings, encode_missing=encode_missing,
                                batch_size=batch_size, fingerprint=fingerprint)
    texts = list(dict.fromkeys(e["context"] for e in examples))
    fingerprint, stored_settings, by_text = ensure_stored(adapter, store, texts, encode_missing=encode_missing,
                                                          store_dtype=store_dtype,
                                                          name_of=question_of_context(examples),
                                                          fingerprint=fingerprint)
    questions = [e["question"].strip() for e in examples]
    # an adapter outside `AdapterBase` (the protocol does not require it) cuts no question, as far as it says
    question_length = getattr(adapter, "max_prompt_length", None)
    if settings_used is not None:
        settings_used.update({name: stored_settings.get(name) for name in adapter_class.cli_settings})
        settings_used.update(decoding="greedy", prompt="the question")
        if question_length is not None:
            settings_used["max_question_length"] = question_length
    if counts is not None:
        counts.update({"passages": len(texts),
                       "passages_cut": stored_documents_cut(adapter, store, fingerprint, stored_settings, by_text),
                       "questions": len(questions),
                       "questions_cut": adapter.questions_cut(questions) if question_length is not None else 0})
    answers = generate_from_store(model, tokenizer, store, adapter, fingerprint,
                                  [by_text[e["context"]] for e in examples], questions, batch_size=batch_size,
                                  progress=progress, desc="answer", timings=timings, max_new_tokens=max_new_tokens,
                                  num_beams=1, do_sample=False)
    return {str(e.get("id", i)): answer for i, (e, answer) in enumerate(zip(examples, answers))}


answer_from_representations.check_example = check_example  # the row rule `hf-readonce answer` applies per line

__all__ = ["answer_from_representations", "check_example"]
