"""The order in which the extractive store readers (`answer_from_store`, `answer_from_readtwice_store`) run their
rows: rows of similar length share a model call, within a bounded look-ahead, as
[`~hf_readonce.representations.fill.fill_store`] groups the documents it encodes (`group_by_length`); the readers give
their results back in input order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..representations.fill import LENGTH_GROUPED_BATCHES


def length_grouped_order(lengths: Sequence, batch_size: int, group_by_length: bool = True,
                         look_ahead_batches: int = LENGTH_GROUPED_BATCHES) -> list[int]:
    """The order to run rows in: with `group_by_length`, each run of `look_ahead_batches × batch_size` consecutive
    rows (input order) sorted by length, longest first (equal lengths keep their input order), so that a batch cut
    from it holds rows of similar length and less padding; otherwise the input order. No effect with one row per
    batch.

    Args:
        lengths (`Sequence`): one sort key per row, e.g. its tokens (`int`) or `(stored rows, question tokens)`
            (tuples compare element by element).
        batch_size (`int`): rows per model call.
        group_by_length (`bool`, defaults to `True`): sort within the look-ahead (`False`: the input order).
        look_ahead_batches (`int`, defaults to `LENGTH_GROUPED_BATCHES`, 50): batches of rows sorted together.

    Returns:
        `list[int]`: a permutation of `range(len(lengths))`: the row indices in the order to run them.
    """
    order = list(range(len(lengths)))
    if not group_by_length or batch_size <= 1 or len(order) <= 1:
        return order
    window = batch_size * look_ahead_batches
    grouped: list[int] = []
    for start in range(0, len(order), window):
        # `sorted(reverse=True)` is stable: equal lengths stay in input order
        grouped += sorted(order[start : start + window], key=lambda i: lengths[i], reverse=True)
    return grouped


def batches_of(order: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Consecutive slices of `batch_size` row indices of `order` (the last one shorter), each a model call's rows."""
    for start in range(0, len(order), batch_size):
        yield list(order[start : start + batch_size])


__all__ = ["batches_of", "length_grouped_order"]
