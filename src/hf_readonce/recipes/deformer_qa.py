"""Extractive-QA fine-tuning and evaluation pipeline for DeFormer-BERT, shared by
`examples/question-answering/run_deformer_qa.py` and `hf-readonce demo`.

`run()` fine-tunes with `transformers.Trainer` (or [`DeformerDistillationTrainer`] when a teacher is given), then
answers the validation questions by reading every question+passage pair and/or from passage states encoded once per
window, and reports SQuAD EM/F1 and the measured speed-up.
"""

import json
import logging
import os
import statistics
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
    find_best_null_threshold,
    load_qa_examples,
    postprocess_qa_predictions,
    predict_cached,
    predict_pairs,
    score_qa,
    split_calibration,
    training_rows,
    trivial_baselines,
)
from ..tasks.trainers import DeformerDistillationTrainer, trained_model
from ..timing import busy_machine_note, machine_load
from ..weights import load_quietly, minilm_path

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
    attention_probs_dropout_prob: float = field(
        default=None,
        metadata={"help": "Override the checkpoint's attention dropout (BERT: 0.1). 0 lets SDPA run its fused CPU "
                          "kernel instead of the math path (about 2x faster training steps on CPU)."},
    )
    compute_dtype: str = field(
        default="auto",
        metadata={"help": "dtype evaluation computes in (hf_readonce.dtypes): auto = float32 on a CPU, the "
                          "checkpoint's saved dtype on CUDA (float32 after training here); float32, bfloat16, "
                          "float16. Training always keeps float32 weights (--bf16 autocasts)."},
    )


@dataclass
class DataArguments:
    """Data options of [`run`]: SQuAD-style JSONL files, the question/window lengths in tokens, the window overlap
    (`doc_stride`), sample limits, n-best decoding limits and which evaluation paths to run."""

    train_file: str = field(default=None, metadata={"help": "SQuAD-style JSONL for training."})
    extra_train_files: list[str] = field(
        default_factory=list,
        metadata={"help": "More SQuAD-style JSONL files trained on beside --train_file (for example Quoref: with a "
                          "teacher, distillation then sees more passages). The calibration split is taken from "
                          "--train_file only, so the no-answer threshold is tuned on the evaluation task's data. "
                          "--max_train_samples limits each file."},
    )
    extra_negative_window_fraction: float = field(
        default=0.3,
        metadata={"help": "Fraction of the --extra_train_files windows kept that do not hold the answer of an "
                          "answerable question (long passages make most windows such negatives; the reference "
                          "recipe's default). Windows of --train_file are all kept."},
    )
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
    calibration_fraction: float = field(
        default=0.0,
        metadata={"help": "Hold out this fraction of the train passages (chosen by a hash of the passage text, the "
                          "same split as the reference checkpoints) and tune null_score_diff_threshold on them "
                          "(needs --allow_no_answer; without --do_train the train file is read for this only). "
                          "Validation data is never used for it."},
    )
    null_score_diff_threshold: float = field(
        default=None,
        metadata={"help": "SQuAD 2.0 no-answer margin; default: tuned on the calibration split, else the "
                          "checkpoint's recorded value, else 0."},
    )
    speed_eval_samples: int = field(
        default=None,
        metadata={"help": "Time the pairs path against the cache on the first N validation questions only (the "
                          "accuracy is always measured on every question from the cache). Default: all."},
    )
    speed_rounds: int = field(
        default=3,
        metadata={"help": "With --eval_paths both: the timed questions are split, by passage, into this many rounds, "
                          "each timed on both paths (their order alternating from round to round); the speed-ups "
                          "are the median of the per-round ratios, with their range."},
    )


def _record_qa_settings(config, data_args: DataArguments, threshold: float | None) -> None:
    """Write the windowing and no-answer settings a checkpoint was trained/evaluated with into its config, so that
    `hf-readonce encode/answer` default to them."""
    config.max_question_length = data_args.max_question_length
    config.max_passage_length = data_args.max_seq_length - data_args.max_question_length
    config.doc_stride = data_args.doc_stride
    config.allow_no_answer = bool(data_args.allow_no_answer)
    if threshold is not None:
        config.null_score_diff_threshold = float(threshold)


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments,
        callbacks: list | None = None) -> dict:
    """Fine-tune (with `training_args.do_train`) and evaluate (with `do_eval`) a DeFormer QA model.

    Evaluation reports, beside the model, the trivial baselines of the same questions (always-empty where some
    questions are unanswerable, first span, first sentence) and SQuAD 2.0's HasAns / NoAns breakdown. With
    `calibration_fraction > 0` and `allow_no_answer`, the no-answer threshold is tuned on the held-out train
    passages and recorded in the saved checkpoint's config, with the windowing settings. `callbacks` (a list of
    `transformers.TrainerCallback`, default none) are handed to the trainer (e.g. a wall-time budget).

    Returns:
        `dict` of metrics (also written to `output_dir/eval_results.json`): `eval_exact_match`/`eval_f1` (pairs
        path), `cached_exact_match`/`cached_f1` (passage cache) and `cached_HasAns_f1`..., `baselines`,
        `null_score_diff_threshold`, timings in seconds and speed-up ratios. With `eval_paths="both"` and k > 0 the
        speed-ups (`speedup_precomputed`, `speedup_including_encoding`) are the medians of `speed_rounds`
        interleaved rounds ([`interleaved_rounds`]), with their `_range` (`[min, max]` of the rounds' ratios), the
        FLOP ratios beside them, and the machine's 1-minute load average after the timing (`speed_load_average`,
        where the OS reports one) with its usable CPUs (`speed_cpus`): [`busy_machine_note`] reads them.

    Raises:
        ValueError: missing train/validation files, an unknown `eval_paths`, `cached` with k = 0, `speed_rounds`
            below 1, `calibration_fraction` outside [0, 1), or a `max_question_length` that leaves `max_seq_length`
            fewer than 2 passage tokens (naming both).
    """
    if data_args.max_seq_length - data_args.max_question_length < 2:
        raise ValueError(f"`max_question_length` {data_args.max_question_length} leaves no room for the passage in "
                         f"`max_seq_length` {data_args.max_seq_length}: a window holds max_seq_length - "
                         "max_question_length tokens of the passage (at least 2).")
    set_seed(training_args.seed)
    path = model_args.model_name_or_path or str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    extra = {}
    if model_args.num_decomposed_layers is not None:
        extra["num_decomposed_layers"] = model_args.num_decomposed_layers
    if model_args.attention_probs_dropout_prob is not None:
        extra["attention_probs_dropout_prob"] = model_args.attention_probs_dropout_prob
    model = load_quietly(
        DeformerBertForQuestionAnswering.from_pretrained,
        path,
        kd_loss_weight=model_args.kd_loss_weight,
        lrs_loss_weight=model_args.lrs_loss_weight,
        distillation_temperature=model_args.distillation_temperature,
        dtype=torch.float32,
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
    if not 0.0 <= data_args.calibration_fraction < 1.0:
        raise ValueError(f"--calibration_fraction must be in [0, 1), got {data_args.calibration_fraction}.")
    if not 0.0 <= data_args.extra_negative_window_fraction <= 1.0:
        raise ValueError("--extra_negative_window_fraction must be in [0, 1], got "
                         f"{data_args.extra_negative_window_fraction}.")
    if not isinstance(data_args.speed_rounds, int) or isinstance(data_args.speed_rounds, bool) \
            or data_args.speed_rounds < 1:
        raise ValueError(f"--speed_rounds must be a whole number >= 1, got {data_args.speed_rounds!r}.")
    if data_args.extra_train_files and not training_args.do_train:
        raise ValueError("--extra_train_files needs --do_train.")
    missing = [f for f in data_args.extra_train_files if not os.path.isfile(f)]
    if missing:
        raise ValueError(f"--extra_train_files: no such file: {', '.join(missing)}")

    # Read and check both files before any training, so bad data fails (or is set aside) in seconds, not after.
    if training_args.do_train and not data_args.train_file:
        raise ValueError("--do_train needs --train_file.")
    if training_args.do_eval and not data_args.validation_file:
        raise ValueError("--do_eval needs --validation_file.")
    calibration = []
    read_train = training_args.do_train or (data_args.calibration_fraction > 0 and training_args.do_eval)
    for name, file, limit in (("train", data_args.train_file if read_train else None,
                                data_args.max_train_samples),
                              ("eval", data_args.validation_file if training_args.do_eval else None,
                               data_args.max_eval_samples)):
        if file:
            loaded, skipped = load_qa_examples(file, limit, check_answers=name == "train")  # labels: train only
            if skipped:
                logger.warning("%s: set aside %d row(s) with an empty question or context, or answers not in it: %s",
                               file, len(skipped), ", ".join(skipped[:10]))
            metrics[f"{name}_skipped_rows"] = len(skipped)
            if name == "train":
                train_examples = loaded
                if data_args.calibration_fraction > 0:
                    train_examples, calibration = split_calibration(loaded, data_args.calibration_fraction)
                    metrics["calibration_questions"] = len(calibration)
            else:
                examples = loaded

    if training_args.do_train:
        rows = training_rows(train_examples, tokenizer, **feature_kwargs)
        for extra_file in data_args.extra_train_files:
            extra, skipped = load_qa_examples(extra_file, data_args.max_train_samples, check_answers=True)
            if skipped:
                logger.warning("%s: set aside %d row(s) with an empty question or context, or answers not in it",
                               extra_file, len(skipped))
            extra_rows = training_rows(extra, tokenizer, negative_window_fraction=data_args.extra_negative_window_fraction,
                                       seed=training_args.seed, **feature_kwargs)
            logger.info("%s: %d examples -> %d features", extra_file, len(extra), len(extra_rows))
            metrics.setdefault("extra_train_features", {})[extra_file] = len(extra_rows)
            rows.extend(extra_rows)
        train_dataset = Dataset.from_list(rows)
        logger.info("%d training examples -> %d features", len(train_examples), len(rows))
        trainer_kwargs = dict(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            data_collator=DataCollatorWithPadding(tokenizer),
            processing_class=tokenizer,
            callbacks=callbacks,
        )
        if model_args.teacher_model_name_or_path:
            teacher = load_quietly(AutoModelForQuestionAnswering.from_pretrained,
                                    model_args.teacher_model_name_or_path, dtype=torch.float32)
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
        model = trained_model(trainer)
        _record_qa_settings(model.config, data_args, None)
        trainer.save_model(training_args.output_dir)
        tokenizer.save_pretrained(training_args.output_dir)

    if training_args.do_eval:
        from transformers import PretrainedConfig

        from ..dtypes import checkpoint_dtype, resolve_compute_dtype

        saved = torch.float32 if training_args.do_train else checkpoint_dtype(PretrainedConfig.get_config_dict(path)[0])
        compute = resolve_compute_dtype(model_args.compute_dtype, training_args.device, saved)
        model.to(training_args.device, dtype=compute).eval()
        metrics["compute_dtype"] = str(compute).removeprefix("torch.")
        bs = data_args.eval_batch_size
        if data_args.eval_paths not in ("both", "pairs", "cached"):
            raise ValueError(f"--eval_paths must be both, pairs or cached, got {data_args.eval_paths!r}.")
        if data_args.eval_paths == "cached" and k == 0:
            raise ValueError("--eval_paths cached needs --num_decomposed_layers > 0.")
        autocast = torch.autocast("cpu", dtype=torch.bfloat16,
                                  enabled=data_args.eval_bf16 and not torch.cuda.is_available())
        use_cache = k > 0 and data_args.eval_paths in ("both", "cached")

        progress = not training_args.disable_tqdm  # (Trainer's own bars follow the same setting)

        def logits_of(subset, cached: bool):
            feats, wins, passages = build_features(subset, tokenizer, **feature_kwargs)
            timings = {}
            with autocast:
                if cached:
                    start = time.perf_counter()
                    cache = encode_windows(model, wins, batch_size=bs, progress=progress)
                    timings["encode"] = time.perf_counter() - start
                    start = time.perf_counter()
                    out = predict_cached(model, feats, cache, batch_size=bs, progress=progress)
                    timings["answer"] = time.perf_counter() - start
                else:
                    start = time.perf_counter()
                    out = predict_pairs(model, feats, wins, batch_size=bs, progress=progress)
                    timings["answer"] = time.perf_counter() - start
            return feats, wins, passages, out, timings

        # The no-answer threshold: explicit, else tuned on the held-out train passages, else the checkpoint's.
        threshold = data_args.null_score_diff_threshold
        if threshold is None and calibration and data_args.allow_no_answer:
            feats, wins, _, out, _ = logits_of(calibration, use_cache)
            _, spans, diffs = postprocess_qa_predictions(calibration, feats, wins, out, n_best_size=data_args.n_best_size,
                                          max_answer_length=data_args.max_answer_length, allow_no_answer=True,
                                          return_score_diffs=True)
            threshold, calibration_f1 = find_best_null_threshold(spans, diffs, calibration)
            metrics["calibration_f1"] = round(calibration_f1, 2)
        if threshold is None:
            threshold = getattr(model.config, "null_score_diff_threshold", None)
        threshold = 0.0 if threshold is None else float(threshold)
        if data_args.allow_no_answer:
            metrics["null_score_diff_threshold"] = round(threshold, 4)
        post = dict(n_best_size=data_args.n_best_size, max_answer_length=data_args.max_answer_length,
                    allow_no_answer=data_args.allow_no_answer, null_score_diff_threshold=threshold)

        def scored(prefix, subset, feats, wins, out):
            scores = score_qa(postprocess_qa_predictions(subset, feats, wins, out, **post), subset)
            return {f"{prefix}_{key}": round(value, 2) if isinstance(value, float) else value
                    for key, value in scores.items()}

        metrics["eval_questions"] = len(examples)
        metrics["eval_passages"] = len({e["context"] for e in examples})
        metrics["baselines"] = {name: {key: round(v, 2) if isinstance(v, float) else v for key, v in b.items()}
                                for name, b in trivial_baselines(examples).items()}
        speed_subset = examples
        if data_args.speed_eval_samples and data_args.speed_eval_samples < len(examples):
            speed_subset = examples[: data_args.speed_eval_samples]
        metrics["speed_questions"] = len(speed_subset)
        # both paths on the same model: the speed-up, timed in interleaved rounds after the accuracy run
        timed_rounds = use_cache and data_args.eval_paths == "both"

        if use_cache and not (timed_rounds and speed_subset is examples):  # (else the rounds read every question)
            feats, wins, _, out, timings = logits_of(examples, cached=True)
            metrics.update(scored("cached", examples, feats, wins, out))
            metrics["eval_features"] = len(feats)
            if not timed_rounds:  # (the cache alone: its seconds over every question)
                metrics["passage_encode_seconds"] = round(timings["encode"], 2)
                metrics["cached_answer_seconds"] = round(timings["answer"], 2)
        if data_args.eval_paths in ("both", "pairs") and not timed_rounds:
            pair_set = examples if data_args.eval_paths == "pairs" or speed_subset is examples else speed_subset
            feats, wins, _, out, timings = logits_of(pair_set, cached=False)
            if pair_set is examples:
                metrics.update(scored("eval", examples, feats, wins, out))
            metrics["uncached_seconds"] = round(timings["answer"], 2)
        if timed_rounds:
            feats, wins, _ = build_features(speed_subset, tokenizer, **feature_kwargs)
            # counted first: it also runs both paths once before anything is timed
            flops = speedup_flop_ratios(model, speed_subset, tokenizer, feature_kwargs, bs, autocast,
                                        timed=(len(feats), sum(map(len, wins))))
            outputs, cached_outputs = [None] * len(feats), [None] * len(feats)

            def run_pairs(group):
                for i, logits in zip(group, predict_pairs(model, [feats[i] for i in group], wins, batch_size=bs)):
                    outputs[i] = logits

            def encode(group):
                passages = {feats[i]["passage_index"] for i in group}
                return encode_windows(model, [ws if p in passages else [] for p, ws in enumerate(wins)],
                                      batch_size=bs)

            def answer(group, cache):
                for i, logits in zip(group, predict_cached(model, [feats[i] for i in group], cache, batch_size=bs)):
                    cached_outputs[i] = logits

            with autocast:
                rounds = interleaved_rounds(speed_round_groups(feats, data_args.speed_rounds), run_pairs, encode,
                                            answer, progress=progress)
            if speed_subset is examples:  # both paths read every question: their accuracy too
                metrics.update(scored("eval", examples, feats, wins, outputs))
                metrics.update(scored("cached", examples, feats, wins, cached_outputs))
                metrics["eval_features"] = len(feats)
            metrics.update(summarize_speed_rounds(rounds))
            metrics.update(flops)
            metrics.update(machine_load())
        os.makedirs(training_args.output_dir, exist_ok=True)
        _record_qa_settings(model.config, data_args, threshold if data_args.allow_no_answer else None)
        if training_args.do_train:
            model.config.save_pretrained(training_args.output_dir)
        with open(os.path.join(training_args.output_dir, "eval_results.json"), "w") as handle:
            json.dump(metrics, handle, indent=2)
    return metrics


def speed_round_groups(features: list[dict], rounds: int) -> list[list[int]]:
    """Split the timed features into `rounds` groups of about equal feature counts, each passage's features in one
    group (so that encoding each passage once, per group, encodes every passage once in all).

    Args:
        features (`list[dict]`): pair features from [`build_features`] (`passage_index` is read).
        rounds (`int`): groups wanted (>= 1); fewer come back when there are fewer passages.

    Returns:
        `list[list[int]]`: per group, the indices in `features` of its features, in their order; no group is empty.

    Raises:
        ValueError: `rounds` below 1.
    """
    if rounds < 1:
        raise ValueError(f"`rounds` must be >= 1, got {rounds}.")
    by_passage = {}
    for i, feature in enumerate(features):
        by_passage.setdefault(feature["passage_index"], []).append(i)
    passages = list(by_passage.values())  # in order of first appearance
    rounds = min(rounds, len(passages))
    groups, done = [[] for _ in range(rounds)], 0
    for indices in passages:
        # the group whose share of the features this passage's middle falls in
        groups[min(rounds - 1, int((done + len(indices) / 2) * rounds / len(features)))].extend(indices)
        done += len(indices)
    groups = [sorted(group) for group in groups if group]
    return groups


def interleaved_rounds(groups, run_pairs, encode, answer, clock=time.perf_counter, progress: bool = False) -> list[dict]:
    """Time both answering paths on each group in turn, the order of the paths alternating from round to round
    (pairs then cache in rounds 0, 2, ...; cache then pairs in rounds 1, 3, ...), so that a change of the machine's
    load falls on both paths rather than on one.

    Args:
        groups (`list`): one item per round (e.g. from [`speed_round_groups`]), handed to the callables.
        run_pairs (`callable`): `run_pairs(group)` reads every question+passage pair of the group.
        encode (`callable`): `encode(group)` encodes the group's passages once and returns the cache.
        answer (`callable`): `answer(group, cache)` answers the group's questions from that cache.
        clock (`callable`, defaults to `time.perf_counter`): seconds, read around each call.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr counting rounds, showing the last round's
            speed-up with passages precomputed.

    Returns:
        `list[dict]`: per round, `{"pairs", "encode", "answer"}` seconds and `"order"` (`"pairs,cached"` or
        `"cached,pairs"`).
    """
    from tqdm.auto import tqdm

    def timed(fn, *args):
        start = clock()
        result = fn(*args)
        return clock() - start, result

    rounds = []
    bar = tqdm(total=len(groups), desc="time both paths", unit="round", disable=not progress, dynamic_ncols=True)
    for r, group in enumerate(groups):
        seconds = {"order": "pairs,cached" if r % 2 == 0 else "cached,pairs"}
        for path in seconds["order"].split(","):
            if path == "pairs":
                seconds["pairs"], _ = timed(run_pairs, group)
            else:
                seconds["encode"], cache = timed(encode, group)
                seconds["answer"], _ = timed(answer, group, cache)
                del cache
        rounds.append(seconds)
        if seconds["answer"] > 0:
            bar.set_postfix_str(f"{seconds['pairs'] / seconds['answer']:.2f}x")
        bar.update(1)
    bar.close()
    return rounds


def summarize_speed_rounds(rounds: list[dict]) -> dict:
    """The speed-ups of [`interleaved_rounds`]'s timings: the median of the per-round ratios and their range.

    Args:
        rounds (`list[dict]`): per round, `{"pairs", "encode", "answer"}` seconds (positive).

    Returns:
        `dict`: `speedup_precomputed` (median over the rounds of pairs / answer) and `speedup_precomputed_range`
        (`[min, max]`), `speedup_including_encoding` (pairs / (answer + encode)) and its `_range`, rounded to 2
        decimals; `speed_rounds` (the count), and the summed seconds `uncached_seconds`, `passage_encode_seconds`,
        `cached_answer_seconds`.

    Raises:
        ValueError: no rounds, or a round whose cached time is not positive.
    """
    if not rounds:
        raise ValueError("`rounds` is empty: no timing round to summarize.")
    if any(r["answer"] <= 0 or r["encode"] < 0 or r["pairs"] < 0 for r in rounds):
        raise ValueError(f"timings must be positive seconds, got {rounds}.")
    ratios = {"precomputed": [r["pairs"] / r["answer"] for r in rounds],
              "including_encoding": [r["pairs"] / (r["answer"] + r["encode"]) for r in rounds]}
    out = {"speed_rounds": len(rounds)}
    for name, values in ratios.items():
        out[f"speedup_{name}"] = round(statistics.median(values), 2)
        out[f"speedup_{name}_range"] = [round(min(values), 2), round(max(values), 2)]
    for key, name in (("uncached_seconds", "pairs"), ("passage_encode_seconds", "encode"),
                      ("cached_answer_seconds", "answer")):
        out[key] = round(sum(r[name] for r in rounds), 2)
    return out


def speedup_flop_ratios(model, examples, tokenizer, feature_kwargs: dict, batch_size: int, autocast,
                        sample: int = 32, timed: tuple[int, int] | None = None) -> dict:
    """The FLOP ratios beside the demo's two speed-ups (DeFormer §3: the lower `num_decomposed_layers` read the
    question alone once the passage windows are cached). `torch.utils.flop_counter.FlopCounterMode` counts, on the
    first `sample` (default 32) of the timed `examples` with the timed paths' batching and padding, the FLOPs per
    question+window feature of each answering path and per window of the encoding; they are scaled by the timed set's
    own numbers of features and windows (how many questions share a passage decides what encoding costs per
    question, and a few questions of a file in no passage order share almost none).

    Args:
        model: the DeFormer being evaluated (`num_decomposed_layers > 0`).
        examples: SQuAD-style rows, the timed subset; `feature_kwargs`: `build_features`'s windowing arguments.
        batch_size: the timed paths' batch size; `autocast`: the context the timed paths ran in.
        timed (`tuple[int, int]`, *optional*): the timed set's numbers of features and windows, where the caller
            built them already (default: built here from `examples`).

    Returns:
        `{"flop_ratio_precomputed", "flop_ratio_including_encoding"}`: FLOPs of reading every question+passage
        pair over FLOPs of answering from cached windows (without / with encoding each window once), rounded to 2
        decimals. They are the speed-ups' expected values rather than ceilings: padding and memory traffic, which
        the count leaves out, weigh more on the longer pair inputs.
    """
    from torch.utils.flop_counter import FlopCounterMode

    examples = list(examples)
    if timed is None:
        all_features, all_windows, _ = build_features(examples, tokenizer, **feature_kwargs)
        timed = (len(all_features), sum(map(len, all_windows)))
    feats, wins, _ = build_features(examples[:sample], tokenizer, **feature_kwargs)

    def count(fn):
        with autocast, FlopCounterMode(display=False) as counter:
            result = fn()
        return counter.get_total_flops(), result

    pairs, _ = count(lambda: predict_pairs(model, feats, wins, batch_size=batch_size))
    encode, cache = count(lambda: encode_windows(model, wins, batch_size=batch_size))
    answer, _ = count(lambda: predict_cached(model, feats, cache, batch_size=batch_size))
    per_feature = timed[0] / len(feats)
    per_window = timed[1] / sum(map(len, wins))
    pairs, answer, encode = pairs * per_feature, answer * per_feature, encode * per_window
    return {"flop_ratio_precomputed": round(pairs / answer, 2),
            "flop_ratio_including_encoding": round(pairs / (answer + encode), 2)}


__all__ = ["DataArguments", "ModelArguments", "busy_machine_note", "interleaved_rounds", "run", "speed_round_groups",
           "summarize_speed_rounds"]
