"""Extractive-QA fine-tuning and evaluation pipeline for DeFormer-BERT, shared by
`examples/question-answering/run_deformer_qa.py` and `hf-readonce demo`.

`run()` fine-tunes with `transformers.Trainer` (or [`DeformerDistillationTrainer`] when a teacher is given), then
answers the validation questions by reading every question+passage pair and/or from passage states encoded once per
window, and reports SQuAD EM/F1 and the measured speed-up.
"""

import json
import logging
import os
import time
from dataclasses import dataclass, field

import torch
from datasets import Dataset
from transformers import (
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

from ..models.deformer_bert.modeling_deformer_bert import DeformerBertForQuestionAnswering
from ..tasks.question_answering import (
    build_features,
    encode_windows,
    load_qa_examples,
    pair_inputs,
    postprocess_qa_predictions,
    predict_cached,
    predict_pairs,
    squad_em_f1,
)
from ..tasks.trainers import DeformerDistillationTrainer
from ..weights import minilm_path

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """Model options of [`run`]: which checkpoint, k (`num_decomposed_layers`; `None` = the config's default, 3/4 of
    the depth; 0 = plain BERT), and the optional teacher and weights of the auxiliary losses (paper defaults)."""

    model_name_or_path: str = field(
        default=None, metadata={"help": "BERT or DeFormer checkpoint; defaults to the packaged all-MiniLM-L6-v2."}
    )
    num_decomposed_layers: int = field(default=None, metadata={"help": "k: lower layers reading q and p apart."})
    teacher_model_name_or_path: str = field(
        default=None, metadata={"help": "Fine-tuned full QA model for KD+LRS (paper's auxiliary supervision)."}
    )
    kd_loss_weight: float = field(default=1.0)
    lrs_loss_weight: float = field(default=1.0)
    distillation_temperature: float = field(default=2.0)


@dataclass
class DataArguments:
    """Data options of [`run`]: SQuAD-style JSONL files, the question/window lengths in tokens, the window overlap
    (`doc_stride`), sample limits, n-best decoding limits and which evaluation paths to run."""

    train_file: str = field(default=None, metadata={"help": "SQuAD-style JSONL for training."})
    validation_file: str = field(default=None, metadata={"help": "SQuAD-style JSONL for evaluation."})
    max_seq_length: int = field(default=384, metadata={"help": "Question + passage window length in tokens."})
    max_question_length: int = field(default=64, metadata={"help": "Questions are truncated to this many tokens."})
    doc_stride: int = field(default=128, metadata={"help": "Tokens shared by consecutive passage windows."})
    max_train_samples: int = field(default=None)
    max_eval_samples: int = field(default=None)
    allow_no_answer: bool = field(
        default=False, metadata={"help": "SQuAD 2.0 style: predict '' when the [CLS] score beats every span."}
    )
    n_best_size: int = field(default=20)
    max_answer_length: int = field(default=30)
    eval_batch_size: int = field(default=64)
    eval_paths: str = field(
        default="both", metadata={"help": "'both' (time pairs vs cache), 'pairs' or 'cached' (accuracy runs)."}
    )
    eval_bf16: bool = field(
        default=False,
        metadata={"help": "Evaluate under bf16 autocast on CPU (faster, but it moves the no-answer decision: on "
                          "Disfl-QA it cost about 8 EM points). Training precision is --bf16."},
    )


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune (with `training_args.do_train`) and evaluate (with `do_eval`) a DeFormer QA model.

    Returns:
        `dict` of metrics (also written to `output_dir/eval_results.json`): `eval_exact_match`/`eval_f1` (pairs
        path), `cached_exact_match`/`cached_f1` (passage cache), timings in seconds and speed-up ratios.

    Raises:
        ValueError: missing train/validation files, an unknown `eval_paths`, or `cached` with k = 0.
    """
    set_seed(training_args.seed)
    path = model_args.model_name_or_path or str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    extra = {}
    if model_args.num_decomposed_layers is not None:
        extra["num_decomposed_layers"] = model_args.num_decomposed_layers
    model = DeformerBertForQuestionAnswering.from_pretrained(
        path,
        kd_loss_weight=model_args.kd_loss_weight,
        lrs_loss_weight=model_args.lrs_loss_weight,
        distillation_temperature=model_args.distillation_temperature,
        **extra,
    )
    k = model.config.num_decomposed_layers
    max_passage_length = data_args.max_seq_length - data_args.max_question_length
    feature_kwargs = dict(
        max_question_length=data_args.max_question_length,
        max_passage_length=max_passage_length,
        doc_stride=data_args.doc_stride,
    )
    metrics = {"num_decomposed_layers": k, "model": path}

    # Read and check both files before any training, so bad data fails (or is set aside) in seconds, not after.
    if training_args.do_train and not data_args.train_file:
        raise ValueError("--do_train needs --train_file.")
    if training_args.do_eval and not data_args.validation_file:
        raise ValueError("--do_eval needs --validation_file.")
    for name, file, limit in (("train", data_args.train_file if training_args.do_train else None,
                                data_args.max_train_samples),
                              ("eval", data_args.validation_file if training_args.do_eval else None,
                               data_args.max_eval_samples)):
        if file:
            loaded, skipped = load_qa_examples(file, limit)
            if skipped:
                logger.warning("%s: set aside %d rows with an empty question or context: %s", file, len(skipped),
                               ", ".join(skipped[:10]))
            metrics[f"{name}_skipped_rows"] = len(skipped)
            if name == "train":
                train_examples = loaded
            else:
                examples = loaded

    if training_args.do_train:
        features, windows, _ = build_features(train_examples, tokenizer, with_labels=True, **feature_kwargs)
        rows = []
        for f in features:
            row = pair_inputs(f["question_ids"], windows[f["passage_index"]][f["window_index"]])
            row["start_positions"], row["end_positions"] = f["start_positions"], f["end_positions"]
            rows.append(row)
        train_dataset = Dataset.from_list(rows)
        logger.info("%d training examples -> %d features", len(train_examples), len(rows))
        trainer_kwargs = dict(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            data_collator=DataCollatorWithPadding(tokenizer),
            processing_class=tokenizer,
        )
        if model_args.teacher_model_name_or_path:
            teacher = AutoModelForQuestionAnswering.from_pretrained(model_args.teacher_model_name_or_path)
            trainer = DeformerDistillationTrainer(teacher_model=teacher, **trainer_kwargs)
        else:
            trainer = Trainer(**trainer_kwargs)
        start = time.perf_counter()
        train_result = trainer.train()
        metrics["train_seconds"] = round(time.perf_counter() - start, 1)
        metrics["train_loss"] = round(train_result.training_loss, 4)
        metrics["train_features"] = len(rows)
        # Under --bf16, accelerate wraps `model.forward` in autocast; evaluation precision is --eval_bf16 instead,
        # and the same model object must run `forward` and `encode_passages` in one precision.
        model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
        trainer.save_model(training_args.output_dir)
        tokenizer.save_pretrained(training_args.output_dir)

    if training_args.do_eval:
        features, windows, passages = build_features(examples, tokenizer, **feature_kwargs)
        model.to(training_args.device).eval()
        bs = data_args.eval_batch_size
        post = dict(n_best_size=data_args.n_best_size, max_answer_length=data_args.max_answer_length,
                    allow_no_answer=data_args.allow_no_answer)

        if data_args.eval_paths not in ("both", "pairs", "cached"):
            raise ValueError(f"--eval_paths must be both, pairs or cached, got {data_args.eval_paths!r}.")
        if data_args.eval_paths == "cached" and k == 0:
            raise ValueError("--eval_paths cached needs --num_decomposed_layers > 0.")
        metrics["eval_questions"], metrics["eval_passages"], metrics["eval_features"] = (
            len(examples), len(passages), len(features))
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=data_args.eval_bf16 and not torch.cuda.is_available())
        if data_args.eval_paths in ("both", "pairs"):
            start = time.perf_counter()
            with autocast:
                logits = predict_pairs(model, features, windows, batch_size=bs)
            uncached_seconds = time.perf_counter() - start
            scores = squad_em_f1(postprocess_qa_predictions(examples, features, windows, logits, **post), examples)
            metrics.update({"eval_exact_match": round(scores["exact_match"], 2), "eval_f1": round(scores["f1"], 2),
                            "uncached_seconds": round(uncached_seconds, 2)})
        if k > 0 and data_args.eval_paths in ("both", "cached"):
            start = time.perf_counter()
            with autocast:
                cache = encode_windows(model, windows, batch_size=bs)
            encode_seconds = time.perf_counter() - start
            start = time.perf_counter()
            with autocast:
                cached_logits = predict_cached(model, features, cache, batch_size=bs)
            cached_seconds = time.perf_counter() - start
            cached_scores = squad_em_f1(postprocess_qa_predictions(examples, features, windows, cached_logits, **post), examples)
            metrics.update({
                "cached_exact_match": round(cached_scores["exact_match"], 2),
                "cached_f1": round(cached_scores["f1"], 2),
                "passage_encode_seconds": round(encode_seconds, 2),
                "cached_answer_seconds": round(cached_seconds, 2),
            })
            if "uncached_seconds" in metrics:
                metrics["speedup_precomputed"] = round(metrics["uncached_seconds"] / cached_seconds, 2)
                metrics["speedup_including_encoding"] = round(
                    metrics["uncached_seconds"] / (cached_seconds + encode_seconds), 2)
        os.makedirs(training_args.output_dir, exist_ok=True)
        with open(os.path.join(training_args.output_dir, "eval_results.json"), "w") as handle:
            json.dump(metrics, handle, indent=2)
    return metrics


__all__ = ["DataArguments", "ModelArguments", "run"]
