#!/usr/bin/env python
"""Reproduce the ReadOnce learning table (Lin, Sabharwal & Khot, "Read Once Transformers", ACL 2021,
Tables 2-3 / §5): plain BART reading the document as text (the baseline, the upper bound of a model that reads the document with its question) beside
ReadOnce BART at k = 2 and k = 8, every row warm-started from all-MiniLM-L6-v2 (BERT converted to BART) with the same
budget, in the paper's two stages:

1. QA as generation on Disfl-QA + Quoref train (as many questions from each, §3.3; ReadOnce trains the document
   encoder and the representation+text model jointly), scored by EM/F1 on both validation sets; the k = 8 model
   is also scored at k = 2, 4, 16 (k changed at inference, §5.2);
2. XSum summarization from each QA model with the same budget: the baseline fine-tunes end to end, ReadOnce freezes
   its document encoder, stores every article's representations once in a `RepresentationStore` and trains the
   representation+text model on them (§3.4); ROUGE-1/2/L on all 205 XSum validation articles.

It runs `examples/readonce/run_readonce_qa.py` and `run_readonce_summarization.py` as
`examples/readonce/compare_baseline_k2_k8.sh` does, the three rows of a stage side by side on one GPU (bf16).

One command, one GPU:

    python reproduce/readonce.py --output_dir runs/reproduce_readonce

Wall time on one H100, measured with `--qa_steps 1500 --time_budget_s 200`
(`benchmarks/results/reproduce/readonce/h100_qa1500_xsum1000_lr1e-4.json`; the whole command by the device call's clock,
not in that file, which predates `wall_seconds`): 419 s, of which
QA training 117-179 s per row and XSum training 89-96 s per row (three rows side by side), the rest loading,
storing representations and the evaluations (generation on 2,595 questions at four k, 205 articles). With the
default 5,000 QA steps, about 14 minutes (an estimate scaled from those step times, not a measurement). A device
call limited to 10 minutes needs `--qa_steps` or `--time_budget_s` (each training stage stops
there and reports the steps it reached), e.g. `--time_budget_s 240`. On 2 CPU cores shared with other work (load
average about 14) a QA step of batch 32 took 51-81 s (seen in a log, not in a results file): use `--smoke` there (2 steps on a few rows, a tiny model via
`--warm_start`).

Writes `<output_dir>/qa_<row>/` and `xsum_<row>/` (each run's model and `readonce_results.json`), `results.json`
(benchmark schema: one row per model with its QA and XSum scores, the training steps and seconds; the baselines
beside: always-empty, first span and first sentence for QA, where always-empty scores 0 since the recipe keeps
answerable questions only, and lead-1 / lead-3 for XSum) and `model_card.md`. `--pack_dir` packs the results (not
the weights) into parts of at most 16 MiB with a SHA-256 manifest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TABLE = "ReadOnce BART: baseline vs k = 2 / k = 8 from the MiniLM warm start, QA (Disfl-QA + Quoref) then XSum"
VARIANTS = ["baseline", "2", "8"]
QA_SETS = ["disfl_qa", "quoref"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.common_arguments(parser, "runs/reproduce_readonce", runs="qa_<row>/, xsum_<row>/ of the --stages run")
    parser.add_argument("--variants", nargs="+", default=VARIANTS,
                        help="rows: 'baseline' and/or compression ratios k (default: baseline 2 8)")
    parser.add_argument("--stages", nargs="+", default=["qa", "xsum"], choices=["qa", "xsum"],
                        help="'xsum' alone starts from the QA models already in --output_dir (and keeps them, "
                             "reporting their scores beside its own)")
    parser.add_argument("--qa_steps", type=int, default=5000)
    parser.add_argument("--xsum_steps", type=int, default=1000,
                        help="XSum steps (default 1,000: 40 epochs of the 796 shipped train articles at batch 32)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4,
                        help="pretrained weights' rate; the new aggregation trains at 10x (§4.1)")
    parser.add_argument("--warmup_steps", type=int, default=250)
    parser.add_argument("--max_document_length", type=int, default=256)
    parser.add_argument("--eval_compression_ratios", default="2,4,8,16",
                        help="ReadOnce rows are also scored at these k on QA (§5.2)")
    parser.add_argument("--time_budget_s", type=float, default=None,
                        help="stop each training stage after this many seconds (the steps reached are reported)")
    parser.add_argument("--warm_start", default=None,
                        help="BERT folder to convert (default: all-MiniLM-L6-v2; the smoke test passes a tiny one)")
    args = parser.parse_args(argv)
    for variant in args.variants:
        if variant != "baseline" and not (variant.isdigit() and int(variant) >= 1):
            parser.error(f"--variants: 'baseline' or a compression ratio k >= 1, got {variant!r}")
    return args


def row_name(variant: str) -> str:
    return "baseline" if variant == "baseline" else f"k{variant}"


def _common_options(args, gpu: bool) -> list[str]:
    options = ["--do_train", "--do_eval", "--per_device_train_batch_size", str(2 if args.smoke else args.batch_size),
               "--per_device_eval_batch_size", "128" if gpu else "4", "--learning_rate", str(args.learning_rate),
               "--warmup_steps", str(0 if args.smoke else args.warmup_steps), "--weight_decay", "0.01",
               "--seed", str(args.seed), "--report_to", "none", "--save_strategy", "no", "--logging_steps", "250",
               "--max_document_length", str(64 if args.smoke else args.max_document_length)]
    if args.smoke:
        options += ["--use_cpu", "--max_train_samples", "8", "--max_eval_samples", "4"]
    if gpu:
        options += ["--bf16", "--dataloader_num_workers", "2"]
    if args.time_budget_s:
        options += ["--train_time_budget_s", str(args.time_budget_s)]
    return options


def qa_commands(args, data: Path, out: Path, warm_start: Path, gpu: bool) -> dict[str, list[str]]:
    """One `run_readonce_qa.py` command per row (stage 1: QA on Disfl-QA + Quoref)."""
    script = str(_common.ROOT / "examples/readonce/run_readonce_qa.py")
    tokens = "4" if args.smoke else "24"
    qa = ["--train_file", f"{data}/disfl_qa/train.jsonl,{data}/quoref/train.jsonl",
          "--validation_file", f"{data}/disfl_qa/validation.jsonl,{data}/quoref/validation.jsonl",
          "--max_target_length", "24", "--generation_max_tokens", tokens,
          "--max_steps", str(2 if args.smoke else args.qa_steps), "--model_name_or_path", str(warm_start)]
    commands = {}
    for variant in args.variants:
        name = row_name(variant)
        command = [sys.executable, script, *_common_options(args, gpu), *qa, "--output_dir", str(out / f"qa_{name}")]
        if variant == "baseline":
            command += ["--variant", "baseline"]
        else:
            command += ["--compression_ratio", variant, "--eval_compression_ratios", args.eval_compression_ratios]
        commands[f"qa_{name}"] = command
    return commands


def xsum_commands(args, data: Path, out: Path, gpu: bool) -> dict[str, list[str]]:
    """One `run_readonce_summarization.py` command per row (stage 2: XSum from that row's QA model)."""
    script = str(_common.ROOT / "examples/readonce/run_readonce_summarization.py")
    steps = str(2 if args.smoke else args.xsum_steps)
    xsum = ["--train_file", f"{data}/xsum/train.jsonl", "--validation_file", f"{data}/xsum/validation.jsonl",
            "--max_target_length", "64", "--generation_max_tokens", "4" if args.smoke else "64", "--max_steps", steps]
    commands = {}
    for variant in args.variants:
        name = row_name(variant)
        command = [sys.executable, script, *_common_options(args, gpu), *xsum,
                   "--model_name_or_path", str(out / f"qa_{name}"), "--output_dir", str(out / f"xsum_{name}")]
        if variant == "baseline":
            command += ["--variant", "baseline"]
        else:  # document encoder frozen, representations stored once, stage 2 only (§3.4)
            command += ["--stage1_steps", "0", "--stage2_steps", steps]
        commands[f"xsum_{name}"] = command
    return commands


def _stage(metrics: dict) -> dict:
    """Training figures of a run (stage 1 for QA and the XSum baseline, stage 2 for ReadOnce on XSum)."""
    stage = "stage2" if "stage2_train_loss" in metrics else "stage1"
    return {key: metrics.get(f"{stage}_{key}") for key in ("train_loss", "train_steps", "train_seconds",
                                                            "seconds_per_batch")}


def collect(args, out: Path) -> tuple[list[dict], dict]:
    """Rows (one per variant) and baselines from the runs' `readonce_results.json`."""
    rows, baselines = [], {}
    for variant in args.variants:
        name = row_name(variant)
        row = {"row": name, "variant": "baseline" if variant == "baseline" else "readonce",
               "compression_ratio": None if variant == "baseline" else int(variant)}
        qa_path, xsum_path = out / f"qa_{name}" / "readonce_results.json", out / f"xsum_{name}" / "readonce_results.json"
        seconds = 0.0
        if qa_path.is_file():
            metrics = json.loads(qa_path.read_text())
            qa = {"training": _stage(metrics)}
            for data_set in QA_SETS:
                qa[data_set] = {key: metrics.get(f"eval_{data_set}_{key}") for key in (
                    "exact_match", "f1", "loss", "examples", "sample_prediction")}
                if f"eval_{data_set}_baselines" in metrics:
                    baselines.setdefault(data_set, {}).update(metrics[f"eval_{data_set}_baselines"])
                at_k = {key[len(f"eval_{data_set}_k"):]: value for key, value in metrics.items()
                        if key.startswith(f"eval_{data_set}_k") and isinstance(value, dict)}
                if at_k:
                    qa[data_set]["at_k"] = {k: {m: v.get(m) for m in ("exact_match", "f1")} for k, v in at_k.items()}
            row["qa"] = qa
            seconds += qa["training"]["train_seconds"] or 0.0
        if xsum_path.is_file():
            metrics = json.loads(xsum_path.read_text())
            row["xsum"] = {"training": _stage(metrics), **{key: metrics.get(f"eval_{key}") for key in (
                "rouge1", "rouge2", "rougeL", "loss", "examples", "sample_prediction")},
                "store_encode_seconds": metrics.get("store_encode_seconds")}
            baselines["xsum"] = metrics.get("eval_baselines", baselines.get("xsum"))
            seconds += row["xsum"]["training"]["train_seconds"] or 0.0
        if "qa" in row or "xsum" in row:
            row["train_seconds"] = round(seconds, 1)
            rows.append(row)
    # the gap to the upper bound (the baseline reads the document as text), reported, never used to choose
    upper = next((r for r in rows if r["row"] == "baseline" and "qa" in r), None)
    for row in rows:
        if upper is not None and row is not upper and "qa" in row:
            row["qa_f1_below_baseline"] = {
                data_set: round(upper["qa"][data_set]["f1"] - row["qa"][data_set]["f1"], 2)
                for data_set in QA_SETS if upper["qa"][data_set].get("f1") is not None
                and row["qa"][data_set].get("f1") is not None}
    return rows, baselines


def always_empty(args, data: Path) -> dict:
    """EM/F1 of answering nothing on the same validation questions the runs score (answerable ones only)."""
    from hf_readonce.recipes.readonce import load_rows, score_generations

    limit = 4 if args.smoke else None
    scores = {}
    for data_set in QA_SETS:
        rows = load_rows("qa", str(data / data_set / "validation.jsonl"), limit)
        scores[data_set] = score_generations("qa", [""] * len(rows), rows)
    return scores


def model_card_section(rows: list[dict], baselines: dict, warm_start: str, command: str | None = None) -> str:
    """The model-card section of a run: one column group per stage that ran (QA, XSum), the trivial baselines
    beside, the k-at-inference scores, and the command (default: this process's command line; pass a results
    file's `command` to rebuild the section from it)."""
    def cell(value):
        return "" if value is None else f"{value}"

    has_qa, has_xsum = any("qa" in r for r in rows), any("xsum" in r for r in rows)
    counts = {key: next((r[part][key]["examples"] if key in QA_SETS else r[part]["examples"] for r in rows
                         if part in r), None) for part, key in (("qa", "disfl_qa"), ("qa", "quoref"), ("xsum", "xsum"))}
    stages = ", then ".join(name for name, ran in (("QA", has_qa), ("XSum", has_xsum)) if ran)
    scored = []
    if has_qa:
        scored.append(f"QA: Disfl-QA ({counts['disfl_qa']}) and Quoref ({counts['quoref']}) validation questions "
                      "with an answer, EM / F1")
    if has_xsum:
        scored.append(f"XSum: ROUGE on {counts['xsum']} validation articles")
    header = ["model"]
    if has_qa:
        header += ["Disfl-QA EM", "Disfl-QA F1", "Quoref EM", "Quoref F1"]
    if has_xsum:
        header += ["XSum ROUGE-1", "XSum ROUGE-2", "XSum ROUGE-L"]
    header += ["QA steps"] * has_qa + ["XSum steps"] * has_xsum
    lines = [f"## Reproduction: ReadOnce learning table ({stages})", "",
             f"Every row starts from `{warm_start}` (BERT converted to BART) with the same budget. "
             + "; ".join(scored) + ".", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def line(label, qa_cells, xsum_cells, steps):
        cells = [label] + (qa_cells if has_qa else []) + (xsum_cells if has_xsum else [])
        cells += [s for s, ran in zip(steps, (has_qa, has_xsum)) if ran]
        return "| " + " | ".join(cells) + " |"

    for row in rows:
        qa, xsum = row.get("qa", {}), row.get("xsum", {})
        label = "baseline (document as text)" if row["variant"] == "baseline" else f"ReadOnce k = {row['compression_ratio']}"
        qa_cells = [cell(qa.get(d, {}).get(m)) for d in QA_SETS for m in ("exact_match", "f1")]
        xsum_cells = [cell(xsum.get(m)) for m in ("rouge1", "rouge2", "rougeL")]
        lines.append(line(label, qa_cells, xsum_cells, [cell(qa.get("training", {}).get("train_steps")),
                                                        cell(xsum.get("training", {}).get("train_steps"))]))
    if has_qa:
        for name in sorted({name for data_set in QA_SETS for name in baselines.get(data_set, {})}):
            qa_cells = [cell(baselines.get(d, {}).get(name, {}).get(m)) for d in QA_SETS for m in ("exact_match", "f1")]
            lines.append(line(f"baseline: {name.replace('_', ' ')}", qa_cells, [""] * 3, ["", ""]))
    if has_xsum:
        for name, scores in (baselines.get("xsum") or {}).items():
            xsum_cells = [cell(scores.get(m)) for m in ("rouge1", "rouge2", "rougeL")]
            lines.append(line(f"baseline: {name.replace('_', '-')}", [""] * 4, xsum_cells, ["", ""]))
    changed = [r for r in rows if r.get("qa", {}).get("disfl_qa", {}).get("at_k")]
    if changed:
        lines += ["", "k changed at inference (§5.2), Disfl-QA / Quoref F1:", ""]
        for row in changed:
            at = row["qa"]["disfl_qa"]["at_k"]
            quoref = row["qa"]["quoref"].get("at_k", {})
            parts = [f"k = {k}: {at[k].get('f1')} / {quoref.get(k, {}).get('f1')}" for k in sorted(at, key=int)]
            lines.append(f"- trained at k = {row['compression_ratio']}: " + "; ".join(parts))
    lines += ["", f"Command: `{command or _common.command_line()}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    import torch

    _common.start_clock()  # `wall_seconds` in the results: this command, from here
    args = parse_args(argv)
    out = Path(args.output_dir)
    data = Path(args.data_dir)
    gpu = torch.cuda.is_available() and not args.smoke
    # `--stages xsum` starts from the QA stage's models in --output_dir and reports their scores beside its own: only
    # the XSum runs must be new there (results.json and the card are rewritten, with both stages)
    files = ("results.json", "model_card.md") if "qa" in args.stages else ()
    _common.claim_output_dir(out, [f"{stage}_{row_name(v)}" for stage in args.stages for v in args.variants],
                             args.overwrite_output_dir, files)
    warm_start = Path(args.warm_start) if args.warm_start else _common.minilm_folder(args.weights_from)
    failed = []
    if "qa" in args.stages:
        failed += _common.run_children(qa_commands(args, data, out, warm_start, gpu), out)
    if "xsum" in args.stages and _common.STOPPED:  # stage 2 never starts: its runs count as failed
        failed += list(xsum_commands(args, data, out, gpu))
    elif "xsum" in args.stages:
        commands = {name: command for name, command in xsum_commands(args, data, out, gpu).items()
                    if f"qa_{name[len('xsum_'):]}" not in failed}
        failed += _common.run_children(commands, out)
    rows, baselines = collect(args, out)
    if baselines.get("disfl_qa") or baselines.get("quoref"):
        for data_set, scores in always_empty(args, data).items():
            baselines.setdefault(data_set, {})["always_empty"] = scores
    results = _common.write_results(out / "results.json", TABLE, rows, baselines,
                                    {"warm_start": str(warm_start), "smoke": args.smoke, "failed": failed,
                                     "stages": args.stages, "qa_steps": 2 if args.smoke else args.qa_steps,
                                     "xsum_steps": 2 if args.smoke else args.xsum_steps})
    (out / "model_card.md").write_text(model_card_section(
        rows, baselines, args.warm_start or "all-MiniLM-L6-v2"))
    print(results.read_text())
    if args.pack_dir:
        _common.pack([results, out / "model_card.md"], Path(args.pack_dir))
    for name in failed:
        print(f"{name} failed: see {out / (name + '.log')}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_common.guarded(main))
