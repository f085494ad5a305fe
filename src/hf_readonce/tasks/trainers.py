"""Training glue: a `transformers.Trainer` that feeds a teacher's outputs to DeFormer's auxiliary losses,
[`DecoderInputsCollator`] (seq2seq batches with the decoder inputs made from their labels), [`TimeBudgetCallback`]
(stop after a wall-time budget) and [`trained_model`], the plain model back from any Trainer."""

import time

import torch
from transformers import Trainer, TrainerCallback


def trained_model(trainer: Trainer) -> torch.nn.Module:
    """The model a `Trainer` trained, as a plain model again: out of accelerate's containers and without its
    mixed-precision (`--bf16`/`--fp16`) autocast wrapper on `forward`, so that evaluation runs in the precision the
    caller chooses and `forward` is the class's own (with its decorators, e.g. `@can_return_tuple`).

    `accelerator.unwrap_model(..., keep_fp32_wrapper=False)` alone re-binds on the instance a `forward` unwrapped
    through every `__wrapped__`, past the class's own decorators (accelerate 1.15); the instance attribute is
    dropped here so the class's `forward` applies again.

    Args:
        trainer (`transformers.Trainer`): after `train()`.

    Returns:
        `torch.nn.Module`: the trained model (the same object the Trainer was given, for a single process).
    """
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    model.__dict__.pop("forward", None)
    model.__dict__.pop("_original_forward", None)
    return model


class DecoderInputsCollator:
    """Wraps a seq2seq collator whose batches hold `labels` `(batch, target_length)` (-100 where ignored) and adds
    the `decoder_input_ids` `(batch, target_length)` the model makes from them
    (`model.prepare_decoder_input_ids_from_labels`: the labels shifted right after the decoder start token, -100
    replaced by the padding id), as `DataCollatorForSeq2Seq(model=...)` does for tokenized features. The loss is the
    same with or without them; with `label_smoothing_factor` the Trainer takes `labels` out of the batch before the
    forward, and without `decoder_input_ids` a BART decoder would read the shifted encoder input instead.

    A batch that already holds `decoder_input_ids`, or holds no `labels` (prediction), is returned unchanged. The
    collator keeps a reference to `model` (pickled with it for dataloader workers started by spawn, as
    `DataCollatorForSeq2Seq` is).

    Args:
        collator (`Callable[[list], Mapping]`): the wrapped collator; its batches are dicts (or `BatchEncoding`s).
        model: a model with `prepare_decoder_input_ids_from_labels` (a BART family).

    Raises:
        TypeError: `model` has no `prepare_decoder_input_ids_from_labels` (at construction); a batch whose `labels`
            are not a 2-D integer tensor (when called).
    """

    def __init__(self, collator, model):
        if not callable(getattr(model, "prepare_decoder_input_ids_from_labels", None)):
            raise TypeError(f"model: {type(model).__name__} has no `prepare_decoder_input_ids_from_labels`.")
        self.collator, self.model = collator, model

    def __call__(self, rows: list) -> dict:
        """The wrapped collator's batch for `rows`, with `decoder_input_ids` `(batch, target_length)` (int64) added
        when it holds `labels` and no `decoder_input_ids`."""
        features = self.collator(rows)
        labels = features.get("labels")
        if labels is not None and "decoder_input_ids" not in features:
            if not (torch.is_tensor(labels) and labels.dim() == 2 and not labels.is_floating_point()):
                got = f"{tuple(labels.shape)} {labels.dtype}" if torch.is_tensor(labels) else type(labels).__name__
                raise TypeError(f"labels: DecoderInputsCollator needs the wrapped collator's `labels` as a 2-D "
                                f"integer tensor (batch, target_length), got {got}.")
            features["decoder_input_ids"] = self.model.prepare_decoder_input_ids_from_labels(labels=labels)
        return features


class TimeBudgetCallback(TrainerCallback):
    """Stop training once `seconds` of wall time have passed since training began (checked after every optimizer
    step), asking the trainer to save; evaluation after training runs as usual. The step reached is the trainer's
    `state.global_step` (report it: the learning-rate schedule did not reach its end).

    Args:
        seconds (`float`): the budget, > 0.

    Raises:
        ValueError: `seconds` not positive.
    """

    def __init__(self, seconds: float):
        if not seconds > 0:
            raise ValueError(f"seconds: the time budget must be > 0, got {seconds!r}.")
        self.seconds = float(seconds)
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        """Start the clock (`TrainerCallback` hook)."""
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        """Stop training (and save) once the budget is spent (`TrainerCallback` hook)."""
        if self.start is not None and time.perf_counter() - self.start > self.seconds:
            control.should_training_stop = True
            control.should_save = True
        return control


class DeformerDistillationTrainer(Trainer):
    r"""
    `Trainer` for [`DeformerBertForQuestionAnswering`] with the DeFormer paper's auxiliary supervision: before
    each training step the frozen `teacher_model` (usually the fully fine-tuned BERT QA model the DeFormer was
    initialized from) reads the same pair-encoded batch, and its start/end logits (for L_kd) and hidden states
    (for L_lrs) are passed to the student's `forward`. Loss weights and temperature come from the student's config
    (`kd_loss_weight`, `lrs_loss_weight`, `distillation_temperature`; paper defaults 1, 1, 2).

    Args:
        teacher_model (`PreTrainedModel`): any QA model returning `start_logits`, `end_logits` and, with
            `output_hidden_states=True`, `hidden_states` of the student's depth and width (e.g.
            `BertForQuestionAnswering`). It is put in eval mode, moved to the training device and never updated.
        *args, **kwargs: as for `transformers.Trainer`.

    Raises:
        TypeError: if `teacher_model` is None or not a `torch.nn.Module` (e.g. a checkpoint path).
    """

    def __init__(self, *args, teacher_model=None, **kwargs):
        if teacher_model is None:
            raise TypeError("DeformerDistillationTrainer needs `teacher_model`; use transformers.Trainer without it.")
        if not isinstance(teacher_model, torch.nn.Module):
            raise TypeError(f"`teacher_model` must be a model (a torch.nn.Module such as BertForQuestionAnswering), got "
                            f"{type(teacher_model).__name__}: load a checkpoint path first, e.g. with "
                            "AutoModelForQuestionAnswering.from_pretrained(path).")
        super().__init__(*args, **kwargs)
        self.teacher_model = teacher_model.to(self.args.device).eval()
        for parameter in self.teacher_model.parameters():
            parameter.requires_grad_(False)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Run the teacher on `inputs` (no gradient), then the student with the teacher's outputs (loss first)."""
        if model.training:
            student_config = self.accelerator.unwrap_model(model).config
            # the teacher reads in the training precision (accelerate's autocast under --bf16, else a no-op)
            with torch.no_grad(), self.accelerator.autocast():
                teacher_out = self.teacher_model(
                    input_ids=inputs["input_ids"],
                    attention_mask=inputs.get("attention_mask"),
                    token_type_ids=inputs.get("token_type_ids"),
                    output_hidden_states=student_config.lrs_loss_weight > 0,
                )
            inputs = dict(inputs)
            if student_config.kd_loss_weight > 0:
                inputs["teacher_start_logits"] = teacher_out.start_logits
                inputs["teacher_end_logits"] = teacher_out.end_logits
            if student_config.lrs_loss_weight > 0:
                inputs["teacher_hidden_states"] = teacher_out.hidden_states
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)


__all__ = ["DecoderInputsCollator", "DeformerDistillationTrainer", "TimeBudgetCallback", "trained_model"]
