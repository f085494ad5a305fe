"""Answering from a store of mean_qa passage states: the `answer_function` of the family (what `hf-readonce answer`
calls)."""

import torch

from hf_readonce.representations.base import digests_weights_once, one_tokenizer_fingerprint, tokenizer_lock
from hf_readonce.representations.fill import ensure_stored, stored_documents_cut
from hf_readonce.representations.spaces import adapter_for_store

from .models.mean_qa.pipeline_mean_qa import best_span


@digests_weights_once
def answer_from_store(model, tokenizer, store, examples, *, max_question_length: int = 64, batch_size: int = 32,
                      n_best_size: int = 20, max_answer_length: int = 30, encode_missing: bool = False,
                      progress: bool = False, max_passage_length: int | None = None, store_dtype: str = "float16",
                      counts: dict | None = None) -> dict[str, str]:
    """Answer SQuAD-style questions from the passage states `store` holds for `model`.

    Args:
        model ([`MeanQaBertForQuestionAnswering`]), tokenizer: the checkpoint and its fast tokenizer.
        store ([`~hf_readonce.store.RepresentationStore`]).
        examples (`Sequence[dict]`): rows with `id`, `question` and `context`.
        max_question_length (`int`, defaults to 64): question tokens read (`[CLS]` and `[SEP]` included).
        batch_size (`int`, defaults to 32): questions per model call.
        n_best_size (`int`, defaults to 20), progress (`bool`, defaults to `False`): taken as `hf-readonce answer`
            passes them; this family searches every span and shows no progress bar.
        max_answer_length (`int`, defaults to 30): the most tokens an answer holds.
        encode_missing (`bool`, defaults to `False`): encode and store the passages the store lacks.
        max_passage_length (`int`, *optional*): the stored passage length to read (the family's own setting);
            by default the store's only space for this model.
        store_dtype (`str`, defaults to `"float16"`): the storage dtype of what `encode_missing` stores.
        counts (`dict`, *optional*): filled with `passages`, `passages_cut`, `questions` and `questions_cut`.

    Returns:
        `dict[str, str]`: question id -> answer text.

    Raises:
        MissingRepresentationError / RepresentationMismatchError: passages not stored for this model (without
            `encode_missing`), naming the first.
    """
    settings = {} if max_passage_length is None else {"max_passage_length": max_passage_length}
    with one_tokenizer_fingerprint(tokenizer):
        adapter = adapter_for_store(model, tokenizer, store, settings=settings, encode_missing=encode_missing)
        contexts = [example["context"] for example in examples]
        fingerprint, space, hashes = ensure_stored(adapter, store, contexts, encode_missing=encode_missing,
                                                   store_dtype=store_dtype, what="passages")
    unique = list(dict.fromkeys(hashes.values()))
    stored = dict(zip(unique, store.get_many(fingerprint, space, unique), strict=True))
    answers, questions_cut = {}, 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        rows = [stored[hashes[example["context"]]] for example in chunk]
        with tokenizer_lock(tokenizer):
            questions = tokenizer([example["question"] for example in chunk], truncation=True, padding=True,
                                  max_length=max_question_length, return_tensors="pt")
        questions_cut += adapter.questions_cut([example["question"] for example in chunk], max_question_length,
                                               token_ids=[ids[mask.bool()].tolist() for ids, mask in
                                                          zip(questions["input_ids"], questions["attention_mask"],
                                                              strict=True)])
        with torch.no_grad():
            output = model(input_ids=questions["input_ids"].to(model.device),
                           attention_mask=questions["attention_mask"].to(model.device),
                           passage_states=adapter.read(rows, device=model.device, dtype=model.dtype))
        for i, (example, row) in enumerate(zip(chunk, rows, strict=True)):
            first, last, _ = best_span(output.start_logits[i].cpu(), output.end_logits[i].cpu(),
                                       row["offsets"].long(), max_answer_length)
            answers[example["id"]] = example["context"][first:last]
    if counts is not None:
        counts.update(passages=len(hashes), passages_cut=stored_documents_cut(adapter, store, fingerprint, space, hashes),
                      questions=len(examples), questions_cut=questions_cut)
    return answers
