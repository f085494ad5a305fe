"""ReadTwice's representation adapter beyond the shared contract (tests/representations/test_contract.py): `read`
lays the stored first reads of several documents out as the model takes them, cast to the dtype asked for, and
copies the states once."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_readonce.representations import ReadTwiceBertAdapter
from tests.hub.test_pipeline_readtwice import DOCUMENT, tiny_readtwice

SHORT = "Anne Elliot read Persuasion in Bath."  # one segment, narrower than DOCUMENT's 24-token segments


def adapter_of(tokenizer, memory_type):
    mentions = {"mentions": "capitalized_mentions"} if memory_type == "entity" else {}
    return ReadTwiceBertAdapter(tiny_readtwice(memory_type=memory_type), tokenizer, **mentions)


def as_float16(stored):
    """What a float16 store gives back: floating tensors in float16, the rest as written."""
    return [{name: t.half() if t.is_floating_point() else t for name, t in tensors.items()} for tensors in stored]


class CopiedStates(TorchDispatchMode):
    """Elements of 3-d floating tensors written by the copying ops run inside the mode (`_to_copy`, `copy_`,
    `constant_pad_nd`, `cat`): how many times the first-read states are copied, in elements."""

    COPYING = ("aten._to_copy.", "aten.copy_.", "aten.constant_pad_nd.", "aten.cat.")

    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func).startswith(self.COPYING) and out.is_floating_point() and out.dim() == 3:
            self.elements += out.numel()
        return out


@pytest.mark.parametrize("memory_type", ["sts", "entity"])
def test_read_right_pads_each_documents_segments_in_order_in_the_dtype_asked_for(tokenizer, memory_type):
    """Segments of the documents in order, each right-padded with zeros (mask 0) to the widest segment of any
    document, states cast to the dtype asked for; the memories and ids of each document follow its segments."""
    adapter = adapter_of(tokenizer, memory_type)
    stored = as_float16(adapter.encode([SHORT, DOCUMENT]))
    widths = [t["attention_mask"].shape[1] for t in stored]
    assert widths[0] < widths[1] and stored[0]["attention_mask"].shape[0] < stored[1]["attention_mask"].shape[0]
    read = adapter.read(stored, dtype=torch.float32)
    rows = [t["attention_mask"].shape[0] for t in stored]
    assert read.first_read_hidden_state.shape == (sum(rows), max(widths), 32)
    assert read.first_read_hidden_state.dtype == torch.float32 and read.attention_mask.dtype == torch.long
    first = 0
    for d, tensors in enumerate(stored):
        rows_of = slice(first, first + rows[d])
        states, mask = read.first_read_hidden_state[rows_of], read.attention_mask[rows_of]
        assert torch.equal(states[:, : widths[d]], tensors["first_read_hidden_state"].float())
        assert torch.equal(mask[:, : widths[d]], tensors["attention_mask"].long())
        assert not states[:, widths[d]:].any() and not mask[:, widths[d]:].any()
        if memory_type == "entity":
            entity = read.entity_token_mask[rows_of]
            assert entity.dtype == torch.bool and torch.equal(entity[:, : widths[d]], tensors["entity_token_mask"].bool())
            assert not entity[:, widths[d]:].any()
        assert read.document_ids[rows_of].tolist() == [d] * rows[d]
        assert read.segment_positions[rows_of].tolist() == list(range(rows[d]))
        first += rows[d]
    assert (read.entity_token_mask is None) == (memory_type == "sts")
    assert torch.equal(read.memory_values, torch.cat([t["memory_values"].float() for t in stored]))
    # in the dtype stored when none is asked for
    assert adapter.read(stored).first_read_hidden_state.dtype == torch.float16


def test_read_copies_the_stored_first_read_states_once(tokenizer):
    """`read` (what `answer_from_readtwice_store` runs for every batch of questions) writes each stored first-read
    state once into the padded batch, cast on the way: not a cast, then a padded copy, then a concatenation."""
    adapter = adapter_of(tokenizer, "sts")
    stored = as_float16(adapter.encode([SHORT, DOCUMENT]))
    copies = CopiedStates()
    with copies:
        read = adapter.read(stored, dtype=torch.float32)
    assert read.first_read_hidden_state.dtype == torch.float32
    assert copies.elements == sum(t["first_read_hidden_state"].numel() for t in stored)
