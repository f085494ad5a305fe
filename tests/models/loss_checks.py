"""Gradient accumulation as `Trainer` runs it (used by the families' loss tests): the gradients of one optimizer step
over the same rows read as one batch, or as two half batches accumulated. `Trainer` either passes the step's count of
target tokens (`num_items_in_batch`) to a model that takes loss keywords (its `**kwargs`, unless the class sets
`accepts_loss_kwargs = False`) and leaves the sum of the half batches' losses as it is, or divides each half batch's
loss by the number of accumulated batches itself: a model that takes the count but does not read it trained with the
gradients of the two half batches added, about twice those of the whole batch."""

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments


class _Gradients(TrainerCallback):
    """Keeps the gradients `Trainer` holds just before its optimizer step (after accumulation, no clipping)."""

    def __init__(self):
        self.gradients = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.gradients = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def trainer_gradients(model, rows: list, batch_size: int, accumulation: int, output_dir, data_collator=None):
    """`(trainer.model_accepts_loss_kwargs, gradients)` of one `Trainer` optimizer step over `rows` (dicts of
    tensors, one per example) read `batch_size` at a time, `accumulation` batches accumulated (learning rate 0, no
    gradient clipping, so nothing but the accumulation changes them)."""
    args = TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=batch_size,
                             gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=0.0,
                             max_grad_norm=0.0, use_cpu=True, report_to="none", save_strategy="no",
                             remove_unused_columns=False)
    record = _Gradients()
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=data_collator, callbacks=[record])
    trainer.train()
    return trainer.model_accepts_loss_kwargs, record.gradients


def assert_accumulation_equals_one_batch(build, rows: list, tmp_path, data_collator=None, atol=1e-6):
    """The gradients of `rows` read as one batch equal those of two half batches accumulated; `build()` gives the
    same model every call (seeded, no dropout). Returns `trainer.model_accepts_loss_kwargs`."""
    _, whole = trainer_gradients(build(), rows, len(rows), 1, tmp_path / "whole", data_collator)
    accepts, halves = trainer_gradients(build(), rows, len(rows) // 2, 2, tmp_path / "halves", data_collator)
    assert whole.keys() == halves.keys() and whole
    for name, gradient in whole.items():
        torch.testing.assert_close(halves[name], gradient, atol=atol, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    return accepts


def assert_label_smoothing_scores_the_next_token(model, rows: list, output_dir, epsilon: float = 0.1):
    """`Trainer(label_smoothing_factor=epsilon)` scores a causal LM's logits at position t against `labels[t + 1]`:
    its evaluation loss over `rows` (one batch) is the label-smoothed cross-entropy of the shifted labels,
    `(1 - epsilon) * nll + epsilon * mean(-log p)`, both means over the targets."""
    args = TrainingArguments(output_dir=str(output_dir), per_device_eval_batch_size=len(rows), use_cpu=True,
                             report_to="none", label_smoothing_factor=epsilon, remove_unused_columns=False)
    loss = Trainer(model=model, args=args).evaluate(rows)["eval_loss"]
    batch = {key: torch.stack([row[key] for row in rows]) for key in rows[0]}
    with torch.no_grad():
        log_probs = torch.log_softmax(model(**batch).logits[:, :-1].float(), dim=-1)
    labels = batch["labels"][:, 1:]
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].mean()
    expected = (1 - epsilon) * nll - epsilon * log_probs.mean(-1)[keep].mean()
    torch.testing.assert_close(torch.tensor(loss), expected, atol=1e-5, rtol=1e-5)


def assert_label_smoothing_needs_decoder_inputs(build, rows: list, output_dir):
    """`Trainer(label_smoothing_factor=0.1)` takes `labels` out of the batch before the forward: a seq2seq model
    given rows without `decoder_input_ids` refuses the training step with a `ValueError` naming the setting (its
    decoder would read the shifted encoder input); with `decoder_input_ids` made from the labels (as
    `DataCollatorForSeq2Seq(model=...)` adds them) the step's loss is the label-smoothed cross-entropy of the
    targets' logits. `build()` gives the same model every call (seeded, no dropout)."""
    import pytest

    args = TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=len(rows), max_steps=1,
                             learning_rate=0.0, use_cpu=True, report_to="none", save_strategy="no",
                             label_smoothing_factor=0.1, remove_unused_columns=False, logging_steps=1)
    with pytest.raises(ValueError, match="label_smoothing_factor.*decoder_input_ids"):
        Trainer(model=build(), args=args, train_dataset=rows).train()
    model = build()
    rows = [{**row, "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels=row["labels"][None])[0]}
            for row in rows]
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    trainer.train()
    batch = {key: torch.stack([row[key] for row in rows]) for key in rows[0]}
    model.eval()
    with torch.no_grad():
        log_probs = torch.log_softmax(model(**batch).logits.float(), dim=-1)
    keep = batch["labels"] != -100
    nll = -log_probs.gather(-1, batch["labels"].clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].mean()
    expected = 0.9 * nll - 0.1 * log_probs.mean(-1)[keep].mean()
    loss = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry][0]
    torch.testing.assert_close(torch.tensor(loss), expected, atol=1e-4, rtol=1e-4)
