"""`hf_readonce.tasks.trainers.DecoderInputsCollator`: the decoder inputs it adds are the model's own shift of the
labels, batches without labels or with decoder inputs pass unchanged, and a model without the shift is refused."""

import pytest
import torch

from hf_readonce.tasks.trainers import DecoderInputsCollator
from tests.models.longdoc_bart.test_modeling_longdoc_bart import longdoc, tokens


def test_decoder_inputs_are_the_models_shift_of_the_labels():
    model = longdoc()
    labels = tokens(2, 5)
    labels[0, 3:] = -100
    rows = [{"input_ids": tokens(1, 8, seed=i)[0], "labels": labels[i]} for i in range(2)]
    stack = lambda rows: {key: torch.stack([r[key] for r in rows]) for key in rows[0]}  # noqa: E731
    batch = DecoderInputsCollator(stack, model)(rows)
    assert torch.equal(batch["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(labels=labels))
    assert (batch["decoder_input_ids"] >= 0).all()  # -100 never reaches the embedding
    with torch.no_grad():  # the loss reads the same with them
        torch.testing.assert_close(model(**batch).loss, model(**stack(rows)).loss)
    unlabelled = [{"input_ids": r["input_ids"]} for r in rows]
    assert DecoderInputsCollator(stack, model)(unlabelled).keys() == {"input_ids"}
    given = [{**r, "decoder_input_ids": torch.zeros(5, dtype=torch.long)} for r in rows]
    assert (DecoderInputsCollator(stack, model)(given)["decoder_input_ids"] == 0).all()


def test_a_model_without_the_shift_is_refused_by_name():
    with pytest.raises(TypeError, match="model: Linear has no `prepare_decoder_input_ids_from_labels`"):
        DecoderInputsCollator(lambda rows: rows, torch.nn.Linear(2, 2))


def test_labels_that_are_not_a_2d_integer_tensor_are_refused_by_name():
    """A collator returning `labels` as lists, 1-D or float tensors: a `TypeError` naming `labels`, not an error
    inside BART's `shift_tokens_right`; `labels=None` (prediction batches) passes unchanged."""
    model = longdoc()
    for labels, got in [([[5, 6]], "list"), (torch.tensor([5, 6]), r"\(2,\) torch.int64"),
                        (torch.ones(1, 2), r"\(1, 2\) torch.float32")]:
        with pytest.raises(TypeError, match=rf"labels: .* 2-D integer tensor .*got {got}"):
            DecoderInputsCollator(lambda rows, labels=labels: {"input_ids": tokens(1, 8), "labels": labels}, model)([])
    batch = DecoderInputsCollator(lambda rows: {"input_ids": tokens(1, 8), "labels": None}, model)([])
    assert "decoder_input_ids" not in batch
