"""The order the store-reading tasks run their rows in (`hf_readonce.tasks.batching`): longest first within a bounded
look-ahead, stable among equal lengths, the input order when not grouping."""

import pytest

from hf_readonce.tasks.batching import batches_of, length_grouped_order


def test_rows_are_sorted_longest_first_within_each_look_ahead_only():
    lengths = [3, 9, 1, 9, 5, 7, 2, 8, 4, 6]
    order = length_grouped_order(lengths, batch_size=2, look_ahead_batches=2)  # 4 rows sorted together
    assert sorted(order) == list(range(len(lengths)))
    assert order[:4] == [1, 3, 0, 2]  # 9, 9 (input order among equals), 3, 1
    assert order[4:8] == [7, 5, 4, 6]  # 8, 7, 5, 2: rows 4..7 only
    assert order[8:] == [9, 8]


def test_tuples_compare_element_by_element():
    lengths = [(10, 2), (5, 9), (10, 7), (5, 1)]
    assert length_grouped_order(lengths, batch_size=2) == [2, 0, 1, 3]


@pytest.mark.parametrize("kwargs", [{"group_by_length": False}, {"batch_size": 1}])
def test_the_input_order_when_not_grouping_or_one_row_per_batch(kwargs):
    lengths = [1, 5, 3, 4]
    assert length_grouped_order(lengths, **{"batch_size": 2, **kwargs}) == [0, 1, 2, 3]


def test_batches_of_cut_the_order_into_consecutive_slices():
    assert list(batches_of([4, 2, 0, 1, 3], 2)) == [[4, 2], [0, 1], [3]]
    assert list(batches_of([], 3)) == []
