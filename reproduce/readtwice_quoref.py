#!/usr/bin/env python
"""Reproduce the ReadTwice Quoref table (Zemlyanskiy et al., "ReadTwice", EACL 2021, Table 2 / §4): the
segment-independent baseline trained with the same globally normalised loss beside ReadTwice-CLS, -STS, -E, -E(SS)
(each segment sees only its memories) and -E read-once (segments hold the document only, the question is read once),
every row from all-MiniLM-L6-v2 with the same budget of at least 3 epochs of Quoref train (documents cut into
128-token segments sharing 32), all 1,299 validation questions scored beside the no-learning baselines (first span,
first sentence, first capitalised mention).

It runs `examples/question-answering/run_readtwice_qa.py` as `examples/question-answering/readtwice_table.sh` does,
the six rows side by side on one GPU (bf16). The number of steps is computed from the training set:
`ceil(epochs x questions / batch)` (3 x 5,201 / 8 = 1,951 steps with the shipped data), warm-up 10% of them.

One command, one GPU:

    python reproduce/readtwice_quoref.py --output_dir runs/reproduce_readtwice

Wall time (measured, six rows side by side, bf16 autocast over float32 weights): on one H200 (2026-11-28) the whole
command took 325 s (seed 42) and 298 s (seed 1) by its `wall_seconds`; every row trained all 1,951 steps, the
baseline, CLS, STS, E and E(SS) rows in 123-156 s and the read-once row in 236-250 s. On one H100 (2026-11-26) the
command took 320 s with `--time_budget_s 230` by the device call's clock (that results file predates
`wall_seconds`), where the read-once row stopped at 1,732 steps.
Evaluation takes 6-11 s per row (`benchmarks/results/reproduce/readtwice_quoref/`). On CPU use `--smoke` (2 steps
on 8 questions with a tiny model via `--warm_start`).

Writes `<output_dir>/<row>/readtwice_results.json` (each run's command, scores and baselines), `results.json`
(benchmark schema: one row per model with EM/F1, steps, epochs and training seconds; the baselines beside) and
`model_card.md`. `--pack_dir` packs the results (not the weights) into parts of at most 16 MiB.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TABLE = "ReadTwice on Quoref: segment-independent baseline, CLS, STS, E, E(SS), E read-once (validation EM/F1)"
ROWS = {
    "baseline": ["--baseline"],
    "cls": ["--memory_type", "cls"],
    "sts": ["--memory_type", "sts"],
    "e": ["--memory_type", "entity", "--entity_source", "capitalized"],
    "e_ss": ["--memory_type", "entity", "--entity_source", "capitalized", "--single_segment"],
    "e_ro": ["--memory_type", "entity", "--entity_source", "capitalized", "--question_in_first_read", "False"],
}
LABELS = {"baseline": "segment-independent baseline", "cls": "ReadTwice-CLS", "sts": "ReadTwice-STS",
          "e": "ReadTwice-E", "e_ss": "ReadTwice-E(SS)", "e_ro": "ReadTwice-E read-once"}
BASELINES = ("first_span", "first_sentence", "first_mention")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.common_arguments(parser, "runs/reproduce_readtwice", runs="<row>/ for each of --rows")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--epochs", type=float, default=3.0, help="passes over Quoref train (default 3)")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--segment_length", type=int, default=128)
    parser.add_argument("--segment_overlap", type=int, default=32)
    parser.add_argument("--time_budget_s", type=float, default=None,
                        help="stop each row's training after this many seconds (the steps reached are reported)")
    parser.add_argument("--warm_start", default=None,
                        help="BERT folder (default: all-MiniLM-L6-v2; the smoke test passes a tiny one)")
    return parser.parse_args(argv)


def training_steps(train_file: Path, epochs: float, batch_size: int, limit: int | None = None) -> tuple[int, int]:
    """`(steps, questions)`: the optimizer steps that make `epochs` passes over the usable questions of
    `train_file` (the rows `run_readtwice_qa.py` trains on), rounded up.

    Raises:
        ValueError: `epochs` or `batch_size` not positive, or no usable question.
    """
    from hf_readonce.tasks.question_answering import load_qa_examples

    if not epochs > 0 or not batch_size > 0:
        raise ValueError(f"--epochs and --batch_size must be positive, got {epochs!r} and {batch_size!r}.")
    questions = len(load_qa_examples(train_file, limit=limit)[0])
    if not questions:
        raise ValueError(f"{train_file} holds no usable question.")
    return math.ceil(epochs * questions / batch_size), questions


def commands(args, data: Path, out: Path, warm_start: Path, steps: int, gpu: bool) -> dict[str, list[str]]:
    script = str(_common.ROOT / "examples/question-answering/run_readtwice_qa.py")
    common = ["--model_name_or_path", str(warm_start), "--train_file", str(data / "quoref" / "train.jsonl"),
              "--validation_file", str(data / "quoref" / "validation.jsonl"), "--do_train", "--do_eval",
              "--segment_length", str(args.segment_length), "--segment_overlap", str(args.segment_overlap),
              "--max_steps", str(steps), "--per_device_train_batch_size", str(args.batch_size),
              "--learning_rate", str(args.learning_rate), "--warmup_steps", str(0 if args.smoke else steps // 10),
              "--weight_decay", "0.01", "--seed", str(args.seed), "--save_strategy", "no", "--report_to", "none",
              "--logging_steps", "100"]
    if args.smoke:
        common += ["--use_cpu", "--max_train_samples", "8", "--max_eval_samples", "4", "--eval_batch_size", "4"]
    if gpu:
        common += ["--bf16", "--eval_batch_size", "64"]
    if args.time_budget_s:
        common += ["--train_time_budget_s", str(args.time_budget_s)]
    return {row: [sys.executable, script, *ROWS[row], *common, "--output_dir", str(out / row)] for row in args.rows}


def _round(value, digits: int = 2):
    return None if value is None else round(float(value), digits)


def collect(args, out: Path) -> tuple[list[dict], dict]:
    rows, baselines = [], {}
    for name in args.rows:
        path = out / name / "readtwice_results.json"
        if not path.is_file():
            continue
        metrics = json.loads(path.read_text())
        rows.append({"row": name, "model": metrics.get("model"), "exact_match": _round(metrics.get("eval_exact_match")),
                     "f1": _round(metrics.get("eval_f1")), "eval_examples": metrics.get("eval_examples"),
                     "train_steps": metrics.get("train_steps"), "epochs": _round(metrics.get("epoch")),
                     "train_questions": metrics.get("train_questions"), "train_loss": _round(metrics.get("train_loss"), 4),
                     "train_seconds": _round(metrics.get("train_runtime"), 1),
                     "eval_seconds": _round(metrics.get("eval_seconds"), 1),
                     "num_parameters": metrics.get("num_parameters"),
                     "segments_per_document": _round(metrics.get("eval_segments_per_document"))})
        for baseline in BASELINES:
            if f"{baseline}_baseline_f1" in metrics:
                baselines[baseline] = {key: _round(metrics[f"{baseline}_baseline_{key}"])
                                       for key in ("exact_match", "f1")}
    anchor = next((r for r in rows if r["row"] == "baseline"), None)
    for row in rows:
        if anchor is not None and row is not anchor and None not in (row["f1"], anchor["f1"]):
            row["f1_above_baseline"] = round(row["f1"] - anchor["f1"], 2)
    return rows, baselines


def model_card_section(rows: list[dict], baselines: dict, warm_start: str) -> str:
    def number(value):
        return "" if value is None else f"{value:.2f}"

    questions = next((r["eval_examples"] for r in rows), None)
    lines = ["## Reproduction: ReadTwice on Quoref", "",
             f"Every row starts from `{warm_start}` with the same budget; Quoref validation ({questions} questions), "
             "documents cut into segments that share tokens; entity mentions come from a capitalisation heuristic, "
             "not an NER.", "", "| model | EM | F1 | steps | epochs |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {LABELS[row['row']]} | {number(row['exact_match'])} | {number(row['f1'])} | "
                     f"{row['train_steps']} | {number(row['epochs'])} |")
    for name, scores in baselines.items():
        lines.append(f"| baseline: {name.replace('_', ' ')} | {number(scores['exact_match'])} | "
                     f"{number(scores['f1'])} | | |")
    lines += ["", f"Command: `{_common.command_line()}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    import torch

    _common.start_clock()  # `wall_seconds` in the results: this command, from here
    args = parse_args(argv)
    out = Path(args.output_dir)
    data = Path(args.data_dir)
    gpu = torch.cuda.is_available() and not args.smoke
    _common.claim_output_dir(out, args.rows, args.overwrite_output_dir)
    warm_start = Path(args.warm_start) if args.warm_start else _common.minilm_folder(args.weights_from)
    if args.smoke:
        steps, questions = 2, 8
    else:
        steps, questions = training_steps(data / "quoref" / "train.jsonl", args.epochs, args.batch_size)
    failed = _common.run_children(commands(args, data, out, warm_start, steps, gpu), out)
    rows, baselines = collect(args, out)
    results = _common.write_results(out / "results.json", TABLE, rows, baselines,
                                    {"warm_start": str(warm_start), "smoke": args.smoke, "failed": failed,
                                     "steps": steps, "train_questions": questions, "epochs": args.epochs,
                                     "batch_size": args.batch_size})
    (out / "model_card.md").write_text(model_card_section(rows, baselines, args.warm_start or "all-MiniLM-L6-v2"))
    print(results.read_text())
    if args.pack_dir:
        _common.pack([results, out / "model_card.md"], Path(args.pack_dir))
    for name in failed:
        print(f"{name} failed: see {out / (name + '.log')}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_common.guarded(main))
