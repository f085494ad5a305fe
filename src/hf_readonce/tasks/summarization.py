"""Summarization metrics and the baselines printed beside them: ROUGE-1/2/L F-measure (torchmetrics) and lead-n, the
first n sentences of the document. A score is never printed without lead-3 beside it."""

from __future__ import annotations

import re
from collections.abc import Sequence

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


def rouge_scores(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measure, in percent (0-100, rounded to 2 decimals), averaged over the pairs,
    with torchmetrics' `ROUGEScore` (its default tokenizer: lower-cased, non-alphanumerics removed, no stemming).

    Args:
        predictions (`Sequence[str]`): one summary per document.
        references (`Sequence[str]`): the gold summary of each document, in the same order.

    Returns:
        `dict[str, float]`: `{"rouge1": ..., "rouge2": ..., "rougeL": ...}`.

    Raises:
        ValueError: the two sequences differ in length, or are empty.
        TypeError: an element is not a str (naming its index).
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references: give one each.")
    if not predictions:
        raise ValueError("no predictions to score.")
    for name, values in (("predictions", predictions), ("references", references)):
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise TypeError(f"`{name}[{i}]` must be a str, got {type(value).__name__}.")
    from torchmetrics.text import ROUGEScore

    scores = ROUGEScore(rouge_keys=ROUGE_KEYS)(list(predictions), list(references))
    return {key: round(100 * float(scores[f"{key}_fmeasure"]), 2) for key in ROUGE_KEYS}


def lead_sentences(document: str, n: int) -> str:
    """The first `n` sentences of `document`: the lead-n summarization baseline (lead-3: See et al. 2017's extractive
    baseline).

    Args:
        document (`str`): the text; sentences end after `.`, `?` or `!` followed by white space, or at line breaks.
        n (`int`): sentences kept (>= 1; all of them when the document has fewer).

    Returns:
        `str`: the sentences joined by one space.

    Raises:
        TypeError: `document` is not a str. ValueError: `n` is not an int >= 1.
    """
    if not isinstance(document, str):
        raise TypeError(f"`document` must be a str, got {type(document).__name__}.")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be an int >= 1 (sentences kept), got {n!r}.")
    sentences = [s.strip() for s in re.split(r"(?<=[.?!])\s+|\n+", document) if s.strip()]
    return " ".join(sentences[:n])


def lead_baselines(documents: Sequence[str], references: Sequence[str], leads: Sequence[int] = (1, 3)) -> dict:
    """ROUGE of the lead-n baselines ([`lead_sentences`]), scored as [`rouge_scores`] scores a model.

    Args:
        documents (`Sequence[str]`): the documents.
        references (`Sequence[str]`): their gold summaries, in the same order.
        leads (`Sequence[int]`, defaults to `(1, 3)`): the n of each baseline.

    Returns:
        `dict`: `{"lead_1": {"rouge1": ..., ...}, "lead_3": {...}}` (one entry per n in `leads`).

    Raises:
        ValueError, TypeError: as [`rouge_scores`] and [`lead_sentences`] (an n < 1).
    """
    return {f"lead_{n}": rouge_scores([lead_sentences(d, n) for d in documents], references) for n in leads}


def format_rouge(name: str, scores: dict) -> str:
    """One line of a score table: `name` then ROUGE-1/2/L, e.g. `model      ROUGE-1  31.20  ROUGE-2   9.81  ROUGE-L
    24.02`.

    Args:
        name (`str`): the row's label (padded to 18 characters).
        scores (`dict`): [`rouge_scores`]' output.

    Returns:
        `str`: the line, without a newline.

    Raises:
        KeyError: `scores` lacks one of `rouge1`, `rouge2`, `rougeL`.
    """
    return f"{name:18s} " + "  ".join(f"ROUGE-{key[5:]} {scores[key]:6.2f}" for key in ROUGE_KEYS)


__all__ = ["ROUGE_KEYS", "format_rouge", "lead_baselines", "lead_sentences", "rouge_scores"]
