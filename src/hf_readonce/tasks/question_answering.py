"""Extractive-QA glue for cached-passage models: question-independent passage windows, pair features, span
labels, batched prediction with and without a passage cache, n-best post-processing, and SQuAD EM/F1.

Passage windows are cut from the passage alone (never from a question+passage pair), so the same windows, and the
same cached states, serve every question about a passage. A pair feature is `[CLS] question [SEP]` followed by one
window `passage tokens [SEP]`, exactly BERT's pair encoding.
"""

from __future__ import annotations

import hashlib
import math
import operator
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

# re-exported: the windows, their states and the padding are the DeFormer representation's
# (`hf_readonce.representations.deformer_bert`, below the tasks); the one JSONL reader lives in tasks/jsonl.py
from ..models.deformer_bert.pipeline_deformer_bert import window_span_candidates
from ..representations.base import check_positive_ints, pad_batch
from ..representations.deformer_bert import (
    PassageWindow,
    PassageWindowCache,
    encode_windows,
    split_passages,
    tokenize_questions,
)
from ..store.keys import check_bool
from .jsonl import field_problem, read_jsonl


def gold_answers(example: Mapping) -> tuple[list[str], list[int]]:
    """A SQuAD-style row's gold answer texts and their `answer_start`s as plain lists, whatever sequence holds them
    (lists, tuples, 1-d numpy arrays or tensors, as a `datasets` row in numpy or torch format has them): what every
    scorer and feature builder here reads, so that an unanswerable row is `texts == []` for all of them.

    Args:
        example (`Mapping`): a row with an optional `answers` dict (`{"text": [...], "answer_start": [...]}`).

    Returns:
        `(texts, starts)`: `([], [])` for a row without answers or with an empty `text`; `starts` is `[]` where the
        row gives the texts alone.

    Raises:
        ValueError: `answers` of another shape ([`answer_problem`] with `labels=False` says which), naming the row's
            `id`.
    """
    problem = answer_problem(example, labels=False)
    if problem is not None:
        raise ValueError(f"example {example.get('id', '?')!r}: {problem}.")
    answers = example.get("answers") or {}
    texts, starts = answers.get("text"), answers.get("answer_start")
    texts = [] if texts is None else [str(text) for text in texts]
    return texts, ([] if starts is None or not texts else [int(start) for start in starts])


def answer_problem(example: Mapping, labels: bool = True) -> str | None:
    """What is wrong with a SQuAD-style row's `answers` (`{"text": [...], "answer_start": [...]}`), or None when
    nothing is: absent or empty answers are an unanswerable question. With `labels` (default True: the answers become
    training labels) every text needs its `answer_start`; without, answers given as texts alone (enough to score
    predictions) pass, and only the shape is checked.

    A problem: `answers` not a dict, `text` / `answer_start` not sequences (lists, tuples, arrays) or of different
    lengths, a text that is not a string, a start that is not a whole number (numpy integers are), outside the
    context, or where the context does not hold the text (such a row would be trained as unanswerable, or on another
    span, without a word).
    """
    answers = example.get("answers")
    if answers is None or (isinstance(answers, Mapping) and not answers):
        return None
    if not isinstance(answers, Mapping):
        return f"'answers' is of type {type(answers).__name__}, not a dict"
    texts, starts = answers.get("text"), answers.get("answer_start")

    def sequence(value) -> bool:  # a list, tuple or 1-d array; not a string, set or 0-d array
        return (not isinstance(value, (str, bytes, set, frozenset)) and hasattr(value, "__len__")
                and hasattr(value, "__iter__") and getattr(value, "ndim", 1) == 1)

    if texts is not None and not sequence(texts):
        return "'answers' needs a sequence 'text'"
    if starts is None:
        return "training labels need 'answer_start' beside each answer 'text'" if labels and texts is not None \
            and len(texts) else None
    if not sequence(starts) or texts is None or len(texts) != len(starts):
        return "'answers' needs sequences 'text' and 'answer_start' of the same length"
    if not labels:
        return None
    context = example.get("context") if isinstance(example.get("context"), str) else ""
    for text, start in zip(texts, starts, strict=True):
        try:
            start = operator.index(start) if not isinstance(start, bool) else None
        except TypeError:
            start = None
        if not isinstance(text, str) or start is None:
            return f"answer {text!r}: a text needs a string and a whole-number 'answer_start'"
        if not 0 <= start <= len(context) - len(text):
            return f"answer {text!r} starts at {start}, outside its context of {len(context)} characters"
        if context[start:start + len(text)] != text:
            return f"answer {text!r} is not in the context at {start} ({context[start:start + len(text)]!r} is)"
    return None


def load_qa_examples(path: str | Path, limit: int | None = None,
                     check_answers: bool = False) -> tuple[list[dict], list[str]]:
    """Read SQuAD-style JSONL and set aside unusable rows instead of failing a long run on them.

    A row is unusable when its `question` or `context` is missing, not a string, or blank (real data has such rows:
    Disfl-QA validation has one empty question), and, with `check_answers` (default False; the training readers
    pass True), when its `answers` do not match its context ([`answer_problem`]: such a row would be trained as
    unanswerable or on another span). Evaluation compares answer texts only, so it keeps such rows.

    Args:
        path: JSONL file (see [`read_jsonl`]).
        limit (`int`, *optional*): keep only the first `limit` rows (before filtering); a whole number >= 1, or
            `None` (default) for every row.

    Returns:
        `(examples, skipped_ids)`: the usable rows, and the ids (or `line N`) of the rows set aside.

    Raises:
        ValueError: a `limit` below 1 (0 read every row and -5 dropped the last five); from [`read_jsonl`] on
            malformed JSON; or if no usable row remains.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a whole number >= 1 (or None for every row), got {limit!r}.")
    rows = read_jsonl(path)
    if limit is not None:
        rows = rows[:limit]
    examples, skipped = [], []
    for number, row in enumerate(rows, start=1):
        usable = all(field_problem(row, key) is None for key in ("question", "context"))
        usable = usable and answer_problem(row, labels=check_answers) is None
        (examples if usable else skipped).append(row if usable else str(row.get("id", f"line {number}")))
    if not examples:
        raise ValueError(f"{path}: no row has both a non-empty 'question' and 'context'"
                         + (" and answers that match the context." if check_answers else "."))
    return examples, skipped


def span_in_window(window: PassageWindow, answer_start: int, answer_text: str) -> tuple[int, int] | None:
    """Token span `(start, end)` (inclusive, window coordinates) covering the answer's characters, or `None` if the
    answer is not entirely inside the window."""
    answer_end = answer_start + len(answer_text)
    start = end = None
    for i, offset in enumerate(window.offsets):
        if offset is None:
            continue
        if start is None and offset[0] <= answer_start < max(offset[1], offset[0] + 1):
            start = i
        if offset[0] < answer_end <= offset[1]:
            end = i
    if start is None or end is None or end < start:
        return None
    return start, end


def build_features(
    examples: Sequence[dict], tokenizer, max_question_length: int = 64, max_passage_length: int = 320,
    doc_stride: int = 128, with_labels: bool = False,
) -> tuple[list[dict], list[list[PassageWindow]], list[str]]:
    """Pair features for every (question, window) of SQuAD-style `examples`.

    Returns:
        `(features, windows, passages)`: `features[i]` has `example_index`, `passage_index`, `window_index`,
        `question_ids`, and (with `with_labels`) `start_positions`/`end_positions` in pair coordinates (0, the
        `[CLS]`, when the answer is not in the window or the question is unanswerable); `windows[p]` are the windows
        of unique passage `p`; `passages` the unique passage texts.

    Raises:
        ValueError: from [`tokenize_questions`] / [`split_passages`], an example missing `context`/`question`, or
            (with `with_labels`) answers that do not match the context ([`answer_problem`], naming the example).
    """
    passages, passage_ids = [], {}
    for i, example in enumerate(examples):
        if "context" not in example or "question" not in example:
            raise ValueError(f"example {i} needs 'context' and 'question' fields.")
        problem = answer_problem(example) if with_labels else None
        if problem:
            raise ValueError(f"example {example.get('id', i)!r}: {problem}.")
        passage_ids.setdefault(example["context"], len(passages))
        if passage_ids[example["context"]] == len(passages):
            passages.append(example["context"])
    windows = split_passages(tokenizer, passages, max_passage_length, doc_stride)
    questions = tokenize_questions(tokenizer, [e["question"] for e in examples], max_question_length)
    features = []
    for i, example in enumerate(examples):
        p = passage_ids[example["context"]]
        for w, window in enumerate(windows[p]):
            feature = {"example_index": i, "passage_index": p, "window_index": w, "question_ids": questions[i]}
            if with_labels:
                start = end = 0
                texts, starts = gold_answers(example)
                if texts and starts:
                    span = span_in_window(window, starts[0], texts[0])
                    if span is not None:
                        start, end = (len(questions[i]) + span[0], len(questions[i]) + span[1])
                feature["start_positions"], feature["end_positions"] = start, end
            features.append(feature)
    return features, windows, passages


def pair_inputs(question_ids: list[int], window: PassageWindow) -> dict[str, list[int]]:
    """BERT pair encoding of one feature: `input_ids`, `token_type_ids` (0 question, 1 passage), `attention_mask`."""
    ids = question_ids + window.input_ids
    return {
        "input_ids": ids,
        "token_type_ids": [0] * len(question_ids) + [1] * len(window.input_ids),
        "attention_mask": [1] * len(ids),
    }


def _batches(n: int, size: int) -> Iterable[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


class _QuestionBar:
    """The `progress` bar of [`predict_pairs`] / [`predict_cached`]: a tqdm bar on stderr (labelled "answer")
    counting the distinct questions (`example_index`) of `features` whose features have been read; disabled, and
    no tqdm import, without `progress`."""

    def __init__(self, features, progress: bool):
        self.bar, self.seen = None, set()
        if progress:
            from tqdm.auto import tqdm

            total = len({feature.get("example_index") for feature in features})
            self.bar = tqdm(total=total, desc="answer", unit="question", dynamic_ncols=True)
        self.features = features

    def update(self, batch) -> None:
        if self.bar is not None:
            new = {self.features[i].get("example_index") for i in batch} - self.seen
            self.seen |= new
            self.bar.update(len(new))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@torch.no_grad()
def predict_pairs(model, features, windows, batch_size: int = 32, pad_token_id: int = 0, progress: bool = False):
    """Start/end logits over each feature's window, reading the full pair (no cache): the baseline path, valid for
    any QA model taking `input_ids, attention_mask, token_type_ids`. `progress` (defaults to `False`) shows a tqdm
    bar on stderr counting the questions (`example_index`) answered.

    Returns:
        `list[tuple[np.ndarray, np.ndarray, float]]`: per feature, start and end logits over the window's tokens
        (shape `(window_length,)`) and the no-answer score `start[CLS] + end[CLS]`.
    """
    model.eval()
    device = next(model.parameters()).device
    out = []
    bar = _QuestionBar(features, progress)
    for batch in _batches(len(features), batch_size):
        pairs = [pair_inputs(features[i]["question_ids"], windows[features[i]["passage_index"]][features[i]["window_index"]]) for i in batch]
        inputs = {key: pad_batch([p[key] for p in pairs], pad_token_id if key == "input_ids" else 0).to(device)
                  for key in ("input_ids", "token_type_ids", "attention_mask")}
        result = model(**inputs, return_dict=True)  # the output's fields, whatever `config.return_dict` says
        start, end = result.start_logits.float().cpu().numpy(), result.end_logits.float().cpu().numpy()
        for row, i in enumerate(batch):
            q = len(features[i]["question_ids"])
            n = len(windows[features[i]["passage_index"]][features[i]["window_index"]].input_ids)
            out.append((start[row, q : q + n], end[row, q : q + n], float(start[row, 0] + end[row, 0])))
        bar.update(batch)
    bar.close()
    return out


@torch.no_grad()
def predict_cached(model, features, cache, batch_size: int = 32, pad_token_id: int = 0, progress: bool = False):
    """Start/end logits over each feature's window, reading only the question and taking the passage's lower-layer
    states from `cache` (a [`PassageWindowCache`] from [`encode_windows`] or a store). Same layout and `progress`
    bar as [`predict_pairs`]."""
    from ..models.deformer_bert.modeling_deformer_bert import DeformerPassageOutput

    model.eval()
    device = next(model.parameters()).device
    meta = {"model_fingerprint": cache.model_fingerprint, "num_decomposed_layers": cache.num_decomposed_layers}
    out = []
    bar = _QuestionBar(features, progress)
    for batch in _batches(len(features), batch_size):
        questions = [features[i]["question_ids"] for i in batch]
        states = [cache[(features[i]["passage_index"], features[i]["window_index"])] for i in batch]
        width = max(s.shape[0] for s in states)
        hidden = states[0].new_zeros((len(states), width, states[0].shape[-1]))
        mask = torch.zeros((len(states), width), dtype=torch.long, device=device)
        for row, s in enumerate(states):
            hidden[row, : s.shape[0]] = s
            mask[row, : s.shape[0]] = 1
        q_ids = pad_batch(questions, pad_token_id).to(device)
        q_mask = pad_batch([[1] * len(q) for q in questions]).to(device)
        passage_states = DeformerPassageOutput(last_hidden_state=hidden.to(device), attention_mask=mask, **meta)
        result = model(input_ids=q_ids, attention_mask=q_mask, passage_states=passage_states, return_dict=True)
        start, end = result.start_logits.float().cpu().numpy(), result.end_logits.float().cpu().numpy()
        offset = q_ids.shape[1]
        for row, s in enumerate(states):
            n = s.shape[0]
            out.append((start[row, offset : offset + n], end[row, offset : offset + n],
                        float(start[row, 0] + end[row, 0])))
        bar.update(batch)
    bar.close()
    return out


def passages_of(example: dict) -> list[str]:
    """A question row's passages, in order (what generative families read; extractive rows have one `context`): its `contexts` (a list of str) if present, else its `context` (a str, or a
    list of str).

    Raises:
        ValueError: naming the row's id, when there is no passage or one is empty or not a string.
    """
    passages = example.get("contexts", example.get("context"))
    if isinstance(passages, str):
        passages = [passages]
    name = example.get("id", "?")
    if not isinstance(passages, (list, tuple)) or not passages:
        raise ValueError(f"question {name!r}: no passage ('context' str or 'contexts' list of str).")
    for i, passage in enumerate(passages):
        if not isinstance(passage, str) or not passage.strip():
            raise ValueError(f"question {name!r}: passage {i} is empty or not a string.")
    return list(passages)


def recorded_answer_settings(config, max_question_length: int | None = None, allow_no_answer: bool | None = None,
                             null_score_diff_threshold: float | None = None) -> dict:
    """The question length and no-answer decision to answer with: each value given, else what the checkpoint records
    in `config` (what it was trained and tuned with; `run_deformer_qa.py` and `hf-readonce demo` record them), else
    64 tokens, `False` and 0.0 (a recorded 0 or `None` counts as not recorded).

    Args:
        config (`PretrainedConfig`): the checkpoint's config (only the three attributes are read).
        max_question_length (`int`, *optional*): question tokens, `[CLS]` and `[SEP]` included.
        allow_no_answer (`bool`, *optional*), null_score_diff_threshold (`float`, *optional*, logits): as in
            [`postprocess_qa_predictions`].

    Returns:
        `dict`: `max_question_length`, `allow_no_answer`, `null_score_diff_threshold`.
    """
    if max_question_length is None:
        max_question_length = getattr(config, "max_question_length", None) or 64
    if allow_no_answer is None:
        allow_no_answer = bool(getattr(config, "allow_no_answer", None))
    if null_score_diff_threshold is None:
        null_score_diff_threshold = getattr(config, "null_score_diff_threshold", None) or 0.0
    return {"max_question_length": max_question_length, "allow_no_answer": allow_no_answer,
            "null_score_diff_threshold": null_score_diff_threshold}


def check_question_rows(examples, check=None) -> list[dict]:
    """The question rows a store-reading answer function takes, as a list, checked before any work.

    Args:
        examples (`Sequence[dict]` or `datasets.Dataset`): rows with `question` and `context` (and `id`).
        check (`Callable[[dict], None]`, *optional*): the family's rule for one row (raising `ValueError`), called
            with the row's index as `id` when it has none; defaults to a non-empty `question` and `context` str.

    Returns:
        `list[dict]`: the rows.

    Raises:
        TypeError: `examples` is a str, bytes, a single dict or not iterable; a row that is not a dict; a `question`
            or `context` that is not a str (e.g. a list).
        ValueError: no rows; a row the check refuses (naming its id and the field: absent, null or blank).
    """
    if isinstance(examples, (str, bytes, dict)) or not hasattr(examples, "__iter__"):
        raise TypeError(f"`examples` must be a list (or `datasets.Dataset`) of dicts, got {type(examples).__name__}.")
    examples = list(examples)
    if not examples:
        raise ValueError("`examples` is empty: nothing to answer.")
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            raise TypeError(f"example {i} must be a dict with `question` and `context`, got {type(example).__name__}.")
        if check is not None:
            check({"id": i, **example})
            continue
        for key in ("question", "context"):
            problem = field_problem(example, key)
            if problem is not None:  # a value of another type is a TypeError, a missing or blank one a ValueError
                error = TypeError if example.get(key) is not None and not isinstance(example[key], str) else ValueError
                raise error(f"example {example.get('id', i)}: {problem}.")
    return examples


def question_of_context(examples: Sequence[dict], what: str = "the context"):
    """For `hf_readonce.representations.fill.ensure_stored(name_of=...)`: names a missing context by the first
    question that reads it, e.g. `"the context of question id 'q7', title 'Normans'"`.

    Args:
        examples (`Sequence[dict]`): the question rows (`id`, `context`, optional `title`).
        what (`str`, defaults to `"the context"`): what the context is called (e.g. `"the passage"`).

    Returns:
        `Callable[[str], str]`: context text -> its name.
    """

    def name_of(text: str) -> str:
        first = next(e for e in examples if e["context"] == text)
        return f"{what} of question id {first.get('id')!r}" + (
            f", title {first['title']!r}" if first.get("title") else "")

    return name_of


def check_decoding_arguments(n_best_size=20, max_answer_length=30, allow_no_answer=False,
                             null_score_diff_threshold=0.0, examples=None) -> None:
    """Check the span-decoding arguments of [`postprocess_qa_predictions`] and [`answer_from_store`] before any
    work: a count of 0 would silently answer every question with the empty string.

    Args:
        n_best_size, max_answer_length (`int`): must be integers >= 1 (not bools).
        allow_no_answer (`bool`): must be a bool (a string such as `"no"` would read as True).
        null_score_diff_threshold (`float`): a real number (`+inf`: never answer empty), not NaN.
        examples (`Sequence[dict]`, *optional*): if given, their `id`s must be distinct (answers are keyed by id).

    Raises:
        TypeError: an argument of the wrong type, named.
        ValueError: a count < 1, a NaN threshold, or two examples with the same id (named).
    """
    check_positive_ints({"n_best_size": n_best_size, "max_answer_length": max_answer_length})
    check_bool(allow_no_answer, "allow_no_answer")
    if isinstance(null_score_diff_threshold, bool) or not isinstance(null_score_diff_threshold, (int, float)):
        raise TypeError(f"`null_score_diff_threshold` must be a number, got "
                        f"{type(null_score_diff_threshold).__name__} {null_score_diff_threshold!r}.")
    if math.isnan(null_score_diff_threshold):  # +inf ("never answer empty") is what find_best_null_threshold may tune
        raise ValueError("`null_score_diff_threshold` must be a number, got NaN.")
    if examples is not None:
        seen: set[str] = set()
        for i, example in enumerate(examples):
            key = str(example.get("id", i))
            if key in seen:
                raise ValueError(f"two examples have the id {key!r}: answers are returned by id, so ids must be "
                                 "distinct.")
            seen.add(key)


def postprocess_qa_predictions(examples, features, windows, logits, n_best_size: int = 20,
                               max_answer_length: int = 30, allow_no_answer: bool = False,
                               null_score_diff_threshold: float = 0.0, return_score_diffs: bool = False):
    """n-best span decoding: for each example, the highest `start + end` logit span over all its windows with
    `start <= end < start + max_answer_length`, mapped back to passage characters through the offsets (the span
    search of the DeFormer pipeline, `window_span_candidates`, one implementation for both; the first span in its
    search order wins a tie).

    With `allow_no_answer` (SQuAD 2.0 style, as in HF's `postprocess_qa_predictions`), the empty answer wins when
    `score_diff = null_score - best_span_score > null_score_diff_threshold`, where `null_score` is the smallest
    no-answer score `start[CLS] + end[CLS]` over the example's windows. Threshold 0 means "[CLS] beats every span";
    tune it on held-out data with [`find_best_null_threshold`].

    Args:
        logits: per feature `(start, end, null_score)` as returned by [`predict_pairs`] / [`predict_cached`]: start
            and end logits of shape `(window_length,)` and a float.
        n_best_size (`int`, defaults to 20): start and end candidates tried per window.
        max_answer_length (`int`, defaults to 30): longest answer, in tokens.
        allow_no_answer (`bool`, defaults to `False`): allow the empty answer.
        null_score_diff_threshold (`float`, defaults to 0.0): logit margin by which the no-answer score must beat
            the best span.
        return_score_diffs (`bool`, defaults to `False`): also return the best span of every example (even where
            the empty answer won) and its `score_diff`, the inputs of [`find_best_null_threshold`].

    Returns:
        `dict[str, str]`: example id (or index as str) -> predicted answer text; with `return_score_diffs`,
        `(predictions, best_spans, score_diffs)` with the same keys.

    Raises:
        ValueError: if `logits` and `features` differ in length, or as [`check_decoding_arguments`].
        TypeError: as [`check_decoding_arguments`].
    """
    check_decoding_arguments(n_best_size, max_answer_length, allow_no_answer, null_score_diff_threshold, examples)
    if len(features) != len(logits):
        raise ValueError(f"`logits` has {len(logits)} entries for {len(features)} features.")
    best: dict[int, tuple[float, str]] = {}
    null: dict[int, float] = {}
    for feature, (start_logits, end_logits, null_score) in zip(features, logits):
        window = windows[feature["passage_index"]][feature["window_index"]]
        i = feature["example_index"]
        context = examples[i]["context"]
        null[i] = min(null.get(i, math.inf), null_score)
        for score, char_start, char_end in window_span_candidates(
                torch.as_tensor(start_logits), torch.as_tensor(end_logits), window.offsets, n_best_size,
                max_answer_length):
            if i not in best or score > best[i][0]:
                best[i] = (score, context[char_start:char_end])
    predictions, spans, diffs = {}, {}, {}
    for i, example in enumerate(examples):
        key = str(example.get("id", i))
        score, text = best.get(i, (-math.inf, ""))
        diffs[key] = null.get(i, -math.inf) - score
        spans[key] = text
        if allow_no_answer and diffs[key] > null_score_diff_threshold:
            text = ""
        predictions[key] = text
    if return_score_diffs:
        return predictions, spans, diffs
    return predictions


def find_best_null_threshold(best_spans: dict[str, str], score_diffs: dict[str, float],
                             examples: Sequence[dict]) -> tuple[float, float]:
    """The `null_score_diff_threshold` that maximizes F1 on `examples` (SQuAD 2.0's `find_best_thresh`): the empty
    answer is predicted where `score_diff > threshold`, the best span elsewhere. Tune it on held-out *training*
    data, never on the evaluation set.

    Args:
        best_spans, score_diffs: from [`postprocess_qa_predictions`] with `return_score_diffs=True`, keyed by
            example id.
        examples: the SQuAD-style rows scored (`answers.text` empty for unanswerable questions).

    Returns:
        `(threshold, f1)`: the threshold (a logit margin; `+inf` = never answer empty) and the F1 (percent) it
        reaches on `examples`.

    Raises:
        ValueError: if `examples` is empty or an example has no entry in `score_diffs`.
    """
    if not examples:
        raise ValueError("`examples` is empty: nothing to calibrate the no-answer threshold on.")
    keys = [str(e.get("id", i)) for i, e in enumerate(examples)]
    missing = [k for k in keys if k not in score_diffs]
    if missing:
        raise ValueError(f"no score_diff for example id(s) {missing[:5]}.")
    # each best span scored alone by the same scorer as the reported metrics ([`squad_em_f1`]), as a fraction
    span_f1 = np.array([squad_em_f1({k: best_spans[k]}, [{**e, "id": k}])["f1"] / 100 for k, e in zip(keys, examples)])
    null_f1 = np.array([float(not gold_answers(e)[0]) for e in examples])
    diffs = np.array([score_diffs[k] for k in keys], dtype=np.float64)
    order = np.argsort(-diffs)  # thresholds just below each diff: the first j examples become empty answers
    gains = np.concatenate([[0.0], np.cumsum(null_f1[order] - span_f1[order])])
    totals = span_f1.sum() + gains
    j = int(np.argmax(totals))
    if j == 0:
        threshold = math.inf if not np.isfinite(diffs.max()) else float(diffs.max())
    elif j == len(diffs):
        threshold = float(diffs[order[-1]]) - 1.0
    else:
        threshold = float((diffs[order[j - 1]] + diffs[order[j]]) / 2)
    return threshold, float(100 * totals[j] / len(diffs))


CALIBRATION_FRACTION = 0.1


def is_calibration_passage(context: str, fraction: float = CALIBRATION_FRACTION) -> bool:
    """True for the passages held out of training for threshold calibration: the first byte of the SHA-256 of the
    passage text, scaled to [0, 1), is below `fraction` (deterministic, independent of row order)."""
    return hashlib.sha256(context.encode("utf-8")).digest()[0] / 256 < fraction


def split_calibration(examples: list[dict], fraction: float = CALIBRATION_FRACTION) -> tuple[list[dict], list[dict]]:
    """Split train examples by passage into `(train, calibration)` with [`is_calibration_passage`]."""
    train, calibration = [], []
    for example in examples:
        (calibration if is_calibration_passage(example["context"], fraction) else train).append(example)
    return train, calibration


def training_rows(examples, tokenizer, max_question_length=48, max_passage_length=208, doc_stride=64,
                  negative_window_fraction=1.0, seed=42) -> list[dict]:
    """Pair-encoded training rows with start/end labels (0 = `[CLS]`, no answer in this window).

    `negative_window_fraction` keeps that fraction of the windows of *answerable* questions that do not contain the
    answer (HF's QA examples keep them all; long Quoref passages make most windows such negatives, so sampling them
    spends the budget on windows that teach spans). Windows of unanswerable questions are always kept.

    Raises:
        ValueError: as [`build_features`] (a row without `context` / `question`, answers that do not match the
            context, naming the example).
    """
    features, windows, _ = build_features(examples, tokenizer, max_question_length=max_question_length,
                                          max_passage_length=max_passage_length, doc_stride=doc_stride,
                                          with_labels=True)
    rng = random.Random(seed)
    rows = []
    for f in features:
        answerable = bool(gold_answers(examples[f["example_index"]])[0])
        if answerable and f["start_positions"] == 0 and rng.random() >= negative_window_fraction:
            continue
        row = pair_inputs(f["question_ids"], windows[f["passage_index"]][f["window_index"]])
        row["start_positions"], row["end_positions"] = f["start_positions"], f["end_positions"]
        rows.append(row)
    return rows



def always_empty_predictions(examples: Sequence[dict]) -> dict[str, str]:
    """Trivial baseline: answer "" to every question (the score of a model that collapsed to no-answer)."""
    return {str(e.get("id", i)): "" for i, e in enumerate(examples)}


def first_span_predictions(examples: Sequence[dict], num_words: int = 3) -> dict[str, str]:
    """Trivial baseline: the first `num_words` (default 3) whitespace-separated words of each passage, a stand-in
    for a model that learned position instead of reading (e.g. one that always answers the passage's start)."""
    return {str(e.get("id", i)): " ".join(e["context"].split()[:num_words]) for i, e in enumerate(examples)}


def first_sentence_predictions(examples: Sequence[dict]) -> dict[str, str]:
    """Trivial baseline: each passage's first sentence (up to the first `.`, `?` or `!` followed by a space)."""
    out = {}
    for i, e in enumerate(examples):
        match = re.search(r"[.?!](\s|$)", e["context"])
        out[str(e.get("id", i))] = e["context"][: match.end()].strip() if match else e["context"]
    return out


def score_qa(predictions: dict[str, str], examples: Sequence[dict]) -> dict[str, float]:
    """SQuAD 2.0-style scores (percent): overall `exact_match`/`f1`, and the same on answerable (`HasAns_*`) and
    unanswerable (`NoAns_*`) questions with their counts (`HasAns_total`, `NoAns_total`; the subset keys are
    absent when a subset is empty). Uses [`squad_em_f1`] on each subset.

    Raises:
        KeyError: if an example id has no prediction.
        TypeError / ValueError: as [`squad_em_f1`] (a prediction that is not a string, answers of another shape).
    """
    scores = squad_em_f1(predictions, examples)
    has = [e for e in examples if gold_answers(e)[0]]
    no = [e for e in examples if not gold_answers(e)[0]]
    for name, subset in (("HasAns", has), ("NoAns", no)):
        scores[f"{name}_total"] = len(subset)
        if subset:
            sub = squad_em_f1(predictions, subset)
            scores[f"{name}_exact"], scores[f"{name}_f1"] = sub["exact_match"], sub["f1"]
    return scores


def trivial_baselines(examples: Sequence[dict]) -> dict[str, dict[str, float]]:
    """[`score_qa`] of the trivial baselines on `examples`: `always_empty` (only when some question is
    unanswerable), `first_span` (first 3 words) and `first_sentence`. Print them beside every model score.

    Raises:
        ValueError: a row whose `answers` are not of the SQuAD shape ([`gold_answers`], naming its `id`).
    """
    out = {}
    if any(not gold_answers(e)[0] for e in examples):
        out["always_empty"] = score_qa(always_empty_predictions(examples), examples)
    out["first_span"] = score_qa(first_span_predictions(examples), examples)
    out["first_sentence"] = score_qa(first_sentence_predictions(examples), examples)
    return out


def format_scores(name: str, scores: dict[str, float]) -> str:
    """One line: `name: EM x / F1 y (HasAns F1 h over n, NoAns EM z over m)`, for reports beside baselines."""
    line = f"{name:<28} EM {scores['exact_match']:6.2f}  F1 {scores['f1']:6.2f}"
    if scores.get("HasAns_total"):
        line += f"  | HasAns EM {scores['HasAns_exact']:6.2f} F1 {scores['HasAns_f1']:6.2f} (n={scores['HasAns_total']})"
    if scores.get("NoAns_total"):
        line += f"  | NoAns EM {scores['NoAns_exact']:6.2f} (n={scores['NoAns_total']})"
    return line


def squad_em_f1(predictions: dict[str, str], examples: Sequence[dict]) -> dict[str, float]:
    """SQuAD exact match and F1 (percent) with torchmetrics' `SQuAD` (the official normalization). Unanswerable
    gold (empty `answers.text`) counts as the single gold answer "". Answers may be held in lists, tuples or 1-d
    arrays ([`gold_answers`]).

    Raises:
        KeyError: if an example id has no prediction.
        ValueError: a row whose `answers` are not of the SQuAD shape (named by its `id`).
        TypeError: a prediction that is not a string (named by its id).
    """
    from torchmetrics.text import SQuAD

    preds, target = [], []
    for i, example in enumerate(examples):
        key = str(example.get("id", i))
        texts, starts = gold_answers(example)
        texts = texts or [""]
        starts = starts or [0] * len(texts)
        if not isinstance(predictions[key], str):
            raise TypeError(f"the prediction of example {key!r} is of type {type(predictions[key]).__name__}, not a "
                            "string (the answer text; \"\" for no answer).")
        preds.append({"prediction_text": predictions[key], "id": key})
        target.append({"answers": {"answer_start": starts, "text": texts}, "id": key})
    scores = SQuAD()(preds, target)
    return {"exact_match": float(scores["exact_match"]), "f1": float(scores["f1"])}


__all__ = [
    "CALIBRATION_FRACTION",
    "PassageWindow",
    "PassageWindowCache",
    "always_empty_predictions",
    "build_features",
    "check_decoding_arguments",
    "check_question_rows",
    "recorded_answer_settings",
    "find_best_null_threshold",
    "first_sentence_predictions",
    "first_span_predictions",
    "format_scores",
    "gold_answers",
    "is_calibration_passage",
    "passages_of",
    "encode_windows",
    "answer_problem",
    "load_qa_examples",
    "pad_batch",
    "pair_inputs",
    "question_of_context",
    "postprocess_qa_predictions",
    "predict_cached",
    "predict_pairs",
    "read_jsonl",
    "score_qa",
    "span_in_window",
    "split_calibration",
    "split_passages",
    "squad_em_f1",
    "tokenize_questions",
    "training_rows",
    "trivial_baselines",
]
