"""The reference extractive-QA checkpoints: a full MiniLM QA model fine-tuned once on Quoref + Disfl-QA train, the
teacher from which every DeFormer here is distilled (DeFormer §3: "initialized from a fine-tuned BERT").

`python -m hf_readonce.recipes.reference_qa train --output_dir runs/reference_full` trains it (`transformers.Trainer`, plain
`BertForQuestionAnswering`, so the checkpoint loads anywhere). The calibration split (10% of Disfl-QA *train*
passages, chosen by a hash of the passage text) is held out of training; it is where the no-answer threshold
(`null_score_diff_threshold`, SQuAD 2.0) is tuned, so validation files are never used for any choice.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

from ..tasks.question_answering import (
    CALIBRATION_FRACTION,
    load_qa_examples,
    split_calibration,
    training_rows,
)

logger = logging.getLogger(__name__)

def hardware_description() -> str:
    """What a run's `train_results.json` records as its hardware: the CUDA device's name, else "N CPU cores" with the
    CPU's model name (Linux) and whether it has native bf16 (AVX-512 BF16 or AMX), e.g. "2 CPU cores (AMD EPYC,
    native bf16)"."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    details = []
    try:
        with open("/proc/cpuinfo") as handle:
            details += [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")][:1]
    except OSError:
        pass
    try:
        details.append("native bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "no native bf16")
    except (AttributeError, RuntimeError):
        pass
    threads = torch.get_num_threads()
    return f"{os.cpu_count()} CPU cores" + (f" ({', '.join(details)})" if details else "") + \
        (f", {threads} torch threads" if threads != os.cpu_count() else "")


def train(args) -> dict:
    """Fine-tune plain `BertForQuestionAnswering` from the packaged MiniLM on the configured train files."""
    import torch
    from datasets import Dataset
    from transformers import (
        AutoTokenizer,
        BertForQuestionAnswering,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from ..weights import minilm_path

    set_seed(args.seed)
    path = args.model_name_or_path or str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    overrides = {} if args.attention_probs_dropout_prob is None else {
        "attention_probs_dropout_prob": args.attention_probs_dropout_prob}
    # fp32 master weights, also when continuing from the fp16 export
    model = BertForQuestionAnswering.from_pretrained(path, dtype=torch.float32, **overrides)
    # recorded, as the DeFormer recipe records it: `hf-readonce answer` and the pipelines read questions at this length
    model.config.max_question_length = args.max_question_length
    data_dir = Path(args.data_dir)
    rows, counts = [], {}
    for name in args.datasets:
        examples, _ = load_qa_examples(data_dir / name / "train.jsonl", check_answers=True)
        examples, calibration = split_calibration(examples)
        negatives = 1.0 if name == "disfl_qa" else args.negative_window_fraction
        part = training_rows(examples, tokenizer, args.max_question_length,
                             args.max_seq_length - args.max_question_length, args.doc_stride, negatives, args.seed)
        counts[name] = {"questions": len(examples), "calibration_questions_held_out": len(calibration),
                        "features": len(part)}
        rows.extend(part)
    logger.info("training features: %s", counts)
    dataset = Dataset.from_list(rows).shuffle(seed=args.seed)
    training_args = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, num_train_epochs=args.num_train_epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        weight_decay=0.01, lr_scheduler_type="linear", logging_steps=20, save_strategy="steps", save_steps=100,
        save_total_limit=2, report_to="none", seed=args.seed, use_cpu=not torch.cuda.is_available(),
        bf16=args.bf16, dataloader_num_workers=0, train_sampling_strategy="group_by_length",
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset,
                      data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer)
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    info = {
        "command": "python -m hf_readonce.recipes.reference_qa train " + " ".join(args.argv),
        "train_seconds": round(seconds, 1), "train_loss": round(result.training_loss, 4),
        "global_step": result.global_step, "features": counts, "max_seq_length": args.max_seq_length,
        "max_question_length": args.max_question_length, "doc_stride": args.doc_stride,
        "batch_size": args.batch_size, "learning_rate": args.learning_rate, "bf16": args.bf16,
        "attention_probs_dropout_prob": model.config.attention_probs_dropout_prob, "torch_threads": torch.get_num_threads(),
        "hardware": hardware_description(),
    }
    with open(Path(args.output_dir) / "train_results.json", "w") as handle:
        json.dump(info, handle, indent=2)
    return info


def evaluate(args) -> dict:
    """Score a full (k = 0) QA checkpoint on each dataset's validation file, from the pairs path, beside the trivial
    baselines; on datasets with unanswerable questions the no-answer threshold is tuned on the held-out calibration
    passages of that dataset's *train* file. Writes `metrics.json` into the checkpoint folder (and refreshes its
    `checksums.json` if it has one, i.e. for an exported checkpoint).

    Raises:
        FileNotFoundError: if a data file is missing.
    """
    import torch
    from transformers import TrainingArguments

    from .deformer_qa import DataArguments, ModelArguments, run

    results = {}
    for name in args.datasets:
        train_file = Path(args.data_dir) / name / "train.jsonl"
        validation_file = Path(args.data_dir) / name / "validation.jsonl"
        for file in (train_file, validation_file):
            if not file.is_file():
                raise FileNotFoundError(f"{file} not found; pass --data_dir.")
        has_unanswerable = any(not (e.get("answers") or {}).get("text")
                               for e in load_qa_examples(validation_file)[0])
        data_args = DataArguments(train_file=str(train_file), validation_file=str(validation_file),
                                  max_seq_length=args.max_seq_length, max_question_length=args.max_question_length,
                                  doc_stride=args.doc_stride, allow_no_answer=has_unanswerable,
                                  calibration_fraction=CALIBRATION_FRACTION if has_unanswerable else 0.0,
                                  eval_paths="pairs")
        out_dir = Path(tempfile.mkdtemp(prefix=f"reference-eval-{name}-"))  # nothing extra beside the weights
        training_args = TrainingArguments(output_dir=str(out_dir), do_train=False, do_eval=True, report_to="none",
                                          use_cpu=not torch.cuda.is_available())
        start = time.perf_counter()
        metrics = run(ModelArguments(model_name_or_path=args.model_dir, num_decomposed_layers=0), data_args,
                      training_args)
        metrics["eval_seconds"] = round(time.perf_counter() - start, 1)
        results[name] = metrics
    train_info = Path(args.model_dir) / "train_results.json"
    metrics_file = Path(args.model_dir) / "metrics.json"
    previous = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
    command = "python -m hf_readonce.recipes.reference_qa evaluate " + " ".join(args.argv)
    summary = {"train": json.loads(train_info.read_text(encoding="utf-8")) if train_info.is_file() else None,
               "validation": {**previous.get("validation", {}), **results},  # datasets scored earlier are kept
               "commands": {**previous.get("commands", {}), **{name: command for name in results}}}
    with open(Path(args.model_dir) / "metrics.json", "w") as handle:
        json.dump(summary, handle, indent=2)
    from ..weights import CHECKSUMS_FILE, write_checksums

    if (Path(args.model_dir) / CHECKSUMS_FILE).is_file():  # an exported checkpoint: its listing covers the metrics
        write_checksums(Path(args.model_dir))
    return summary


def export(args) -> Path:
    """Write a trained checkpoint as fp16 safetensors with its tokenizer, `train_results.json`, `metrics.json` (or a
    DeFormer run's `eval_results.json`) and a `checksums.json` (SHA-256 of every file, verified by
    [`hf_readonce.weights.reference_qa_path`] / [`hf_readonce.weights.reference_deformer_path`]) into
    `args.export_dir`. A plain BERT QA checkpoint is saved as `BertForQuestionAnswering`; a DeFormer
    (`model_type = "deformer_bert"`) as `DeformerBertForQuestionAnswering` with its model code, so the folder loads
    with `trust_remote_code=True` where hf-readonce is absent.

    Raises:
        ValueError: if the checkpoint is neither a BERT nor a DeFormer QA model.
    """
    import shutil

    import torch
    from transformers import AutoConfig, AutoTokenizer, BertForQuestionAnswering

    from .. import DeformerBertForQuestionAnswering, register_models
    from ..weights import write_checksums

    register_models()
    model_type = AutoConfig.from_pretrained(args.model_dir).model_type
    classes = {"bert": BertForQuestionAnswering, "deformer_bert": DeformerBertForQuestionAnswering}
    if model_type not in classes:
        raise ValueError(f"--model_dir {args.model_dir} holds a {model_type!r} model; export takes a BERT or "
                         "DeFormer QA checkpoint.")
    target = Path(args.export_dir)
    target.mkdir(parents=True, exist_ok=True)
    model = classes[model_type].from_pretrained(args.model_dir, dtype=torch.float32)
    model.to(torch.float16).save_pretrained(target)
    AutoTokenizer.from_pretrained(args.model_dir).save_pretrained(target)
    for extra, name in (("train_results.json", "train_results.json"), ("metrics.json", "metrics.json"),
                        ("eval_results.json", "metrics.json")):
        if (Path(args.model_dir) / extra).is_file():
            shutil.copyfile(Path(args.model_dir) / extra, target / name)
    write_checksums(target)
    return target


def average(args) -> Path:
    """Weight average of several checkpoints of one architecture (checkpoint averaging, "model soups"; e.g. the last
    checkpoints of consecutive distillation runs), saved in fp32 with the first checkpoint's config and tokenizer
    into `args.output_dir`, ready for `--do_eval` (threshold tuning on the calibration split) and `export`.

    `args.weights` (one per checkpoint, default uniform `1/n`) must sum to 1; they may be negative, so
    `--model_dirs DEFORMER TEACHER --weights 1.2 -0.2` gives `teacher + 1.2 (deformer - teacher)`: the DeFormer's
    change from its initialisation scaled by 1.2 (interpolation for weights in [0, 1], extrapolation beyond). A plain
    BERT QA checkpoint (the DeFormer's teacher, which the DeFormer starts from, paper slides "DeFormer") may be mixed
    with DeFormers: their tensors have the same names and shapes; the output takes the first checkpoint's config.

    Every floating-point tensor is combined in fp32, whatever the checkpoints' dtype; integer buffers must be equal.

    Raises:
        ValueError: fewer than two `--model_dirs`; `--weights` of another length, not finite or not summing to 1
            (within 1e-6); checkpoints of different model families, numbers of layers, or (among DeFormers) numbers
            of decomposed layers; different tensor names or shapes, or integer buffers that differ.
    """
    import math

    import torch
    from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer

    from .. import register_models

    register_models()
    if len(args.model_dirs) < 2:
        raise ValueError(f"--model_dirs: averaging needs at least two checkpoints, got {len(args.model_dirs)}.")
    weights = getattr(args, "weights", None)
    if weights is None:
        weights = [1.0 / len(args.model_dirs)] * len(args.model_dirs)
    if len(weights) != len(args.model_dirs):
        raise ValueError(f"--weights: one weight per --model_dirs entry, got {len(weights)} weights for "
                         f"{len(args.model_dirs)} checkpoints.")
    if not all(math.isfinite(w) for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
        raise ValueError(f"--weights must be finite and sum to 1, got {list(weights)} (sum {sum(weights)}).")
    configs = [AutoConfig.from_pretrained(path) for path in args.model_dirs]
    described = [(c.model_type, getattr(c, "num_decomposed_layers", None), c.num_hidden_layers) for c in configs]
    family = {"deformer_bert": "bert"}  # a DeFormer has its BERT teacher's tensors
    if (len({(family.get(kind, kind), layers) for kind, _, layers in described}) > 1
            or len({k for _, k, _ in described} - {None}) > 1):
        raise ValueError("--model_dirs: checkpoints differ in (model_type, num_decomposed_layers, layers): "
                         + ", ".join(f"{path}: {shape}" for path, shape in zip(args.model_dirs, described)))
    models = [AutoModelForQuestionAnswering.from_pretrained(path, dtype=torch.float32) for path in args.model_dirs]
    states = [model.state_dict() for model in models]
    if any(set(state) != set(states[0]) for state in states):
        raise ValueError("--model_dirs: the checkpoints have different tensor names.")
    merged = {}
    for name, first in states[0].items():
        tensors = [state[name] for state in states]
        if any(t.shape != first.shape for t in tensors):
            raise ValueError(f"--model_dirs: tensor {name!r} has another shape in some checkpoint.")
        if first.is_floating_point():
            merged[name] = sum(w * t.float() for w, t in zip(weights, tensors))
        elif any(not torch.equal(t, first) for t in tensors):
            raise ValueError(f"--model_dirs: integer tensor {name!r} differs between checkpoints.")
        else:
            merged[name] = first
    models[0].load_state_dict(merged)
    target = Path(args.output_dir)
    models[0].save_pretrained(target)
    AutoTokenizer.from_pretrained(args.model_dirs[0]).save_pretrained(target)
    with open(target / "average.json", "w") as handle:
        json.dump({"command": "python -m hf_readonce.recipes.reference_qa average " + " ".join(args.argv),
                   "model_dirs": list(args.model_dirs), "weights": list(weights)}, handle, indent=2)
    return target


def main(argv=None):
    """Command line of the recipe (`python -m hf_readonce.recipes.reference_qa {train,evaluate,export,average} ...`; `--help` lists
    the arguments). `argv` defaults to `sys.argv[1:]`; argparse exits with status 2 on bad arguments."""
    parser = argparse.ArgumentParser(prog="python -m hf_readonce.recipes.reference_qa", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="fine-tune the full MiniLM QA reference model")
    t.add_argument("--output_dir", required=True)
    t.add_argument("--data_dir", default=str(Path.cwd().parent / "shared" / "data"))
    t.add_argument("--datasets", nargs="+", default=["disfl_qa", "quoref"])
    t.add_argument("--model_name_or_path", default=None)
    t.add_argument("--max_seq_length", type=int, default=256)
    t.add_argument("--max_question_length", type=int, default=48)
    t.add_argument("--doc_stride", type=int, default=64)
    t.add_argument("--negative_window_fraction", type=float, default=0.3,
                   help="share of answer-free windows of answerable questions kept (Quoref); Disfl-QA keeps all")
    t.add_argument("--batch_size", type=int, default=32)
    t.add_argument("--learning_rate", type=float, default=1e-4)
    t.add_argument("--warmup_steps", type=int, default=30)
    t.add_argument("--max_steps", type=int, default=-1)
    t.add_argument("--num_train_epochs", type=float, default=2.0)
    t.add_argument("--bf16", action="store_true")
    t.add_argument("--attention_probs_dropout_prob", type=float, default=None,
                   help="override the checkpoint's attention dropout (0.1); 0 lets SDPA use its fused CPU kernel "
                        "instead of the math path, about 2x faster training steps on CPU")
    t.add_argument("--seed", type=int, default=42)
    e = sub.add_parser("evaluate", help="score a full QA checkpoint on each dataset's validation file")
    e.add_argument("--model_dir", required=True)
    e.add_argument("--data_dir", default=str(Path.cwd().parent / "shared" / "data"))
    e.add_argument("--datasets", nargs="+", default=["disfl_qa", "quoref"])
    e.add_argument("--max_seq_length", type=int, default=256)
    e.add_argument("--max_question_length", type=int, default=48)
    e.add_argument("--doc_stride", type=int, default=64)
    x = sub.add_parser("export", help="fp16 safetensors + tokenizer + metrics + checksums, for shipping")
    x.add_argument("--model_dir", required=True)
    x.add_argument("--export_dir", required=True)
    a = sub.add_parser("average", help="weight average of checkpoints (fp32, uniform by default), for evaluation "
                                       "and export")
    a.add_argument("--model_dirs", nargs="+", required=True)
    a.add_argument("--weights", nargs="+", type=float, default=None,
                   help="one weight per checkpoint, summing to 1 (default uniform); negative weights extrapolate")
    a.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    import sys

    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "train":
        print(json.dumps(train(args), indent=2))
    elif args.command == "evaluate":
        print(json.dumps(evaluate(args), indent=2))
    elif args.command == "average":
        print(average(args))
    else:
        print(export(args))


if __name__ == "__main__":
    main()
