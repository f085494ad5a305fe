#!/usr/bin/env python
"""Reproduce the DeFormer table (Cao et al., ACL 2020, Table 3 / §4): distil k = 4 and k = 3 DeFormers from the
shipped reference QA model (all-MiniLM-L6-v2 fine-tuned on Quoref + Disfl-QA) with KD + LRS on Disfl-QA + Quoref
train, choose each k's checkpoint on the calibration split (10% of the Disfl-QA train passages, by hash), and score
it on Disfl-QA validation with the always-empty / first-span baselines beside.

One command, one GPU:

    python reproduce/deformer.py --ks 4 3 --output_dir runs/reproduce_deformer

Expected wall time on one H100: about 8 minutes for both k (5,000 steps of batch 32 each, run side by side on the
same GPU; the teacher reads every batch), plus about a minute of evaluation. On 2 CPU cores a step takes about
2 s: use `--smoke` there, which checks the whole path in a few steps with a tiny random teacher.

Per k it writes `<output_dir>/k<k>/` (the run, its checkpoints, the averaged candidate), `results.json` (the
benchmark schema; `rows` = one per k with calibration F1, validation EM/F1/HasAns/NoAns and training seconds) and
`model_card.md` (a results section). `--pack_dir` packs the chosen fp16 export of `--pack_k` and the results into
parts of at most 16 MiB with a SHA-256 manifest (`python reproduce/unpack.py <pack_dir> --output_dir <dir>`
reassembles them). Selection is by calibration F1 only; validation is read once per candidate, never to choose.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TABLE = "DeFormer k = 4 / k = 3 distilled from the reference QA model (Disfl-QA validation)"
SHIPPED = _common.CHECKPOINTS / "deformer-minilm-qa-reference" / "metrics.json"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.common_arguments(parser, "runs/reproduce_deformer", runs="k<k>/ (or k<k>-lr<rate>/) for each of --ks")
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 3], help="numbers of decomposed layers, run side "
                        "by side (default: 4 3)")
    parser.add_argument("--max_steps", type=int, default=5000)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--learning_rates", type=float, nargs="+", default=None,
                        help="one learning rate per --ks entry (default: --learning_rate for all); the same k may "
                             "appear twice with two rates, each run choosing its own checkpoint on calibration")
    parser.add_argument("--warmup_steps", type=int, default=250)
    parser.add_argument("--save_steps", type=int, default=500)
    parser.add_argument("--average_last", type=int, default=4,
                        help="also score the uniform average of the last N saved checkpoints (default 4)")
    parser.add_argument("--time_budget_s", type=float, default=None,
                        help="stop training (and save) once this many seconds have passed")
    parser.add_argument("--teacher", default=None,
                        help="teacher folder (default: the shipped checkpoints/minilm-qa-reference)")
    parser.add_argument("--pack_k", type=int, default=4, help="which k's chosen export --pack_dir packs")
    parser.add_argument("--k", type=int, default=None, help=argparse.SUPPRESS)  # one k, in a child process
    parser.add_argument("--run_name", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def smoke_overrides(args) -> dict:
    """Tiny sizes for the CPU smoke run."""
    return dict(max_steps=4, batch_size=2, save_steps=2, warmup_steps=0, max_train_samples=16, max_eval_samples=12)


def _data_and_training(args, k_dir: Path, do_train: bool, model: str, k: int | None):
    from transformers import TrainingArguments

    from hf_readonce.recipes.deformer_qa import DataArguments, ModelArguments

    data = Path(args.data_dir)
    smoke = smoke_overrides(args) if args.smoke else {}
    model_args = ModelArguments(model_name_or_path=model, num_decomposed_layers=k,
                                teacher_model_name_or_path=args.teacher if do_train else None,
                                attention_probs_dropout_prob=0.0)
    data_args = DataArguments(
        train_file=str(data / "disfl_qa" / "train.jsonl"),
        extra_train_files=[str(data / "quoref" / "train.jsonl")] if do_train else [],
        validation_file=str(data / "disfl_qa" / "validation.jsonl"),
        allow_no_answer=True, calibration_fraction=0.1, max_seq_length=256, max_question_length=48, doc_stride=64,
        eval_paths="cached", eval_batch_size=128,
        max_train_samples=smoke.get("max_train_samples"), max_eval_samples=smoke.get("max_eval_samples"))
    import torch

    training_args = TrainingArguments(
        output_dir=str(k_dir), do_train=do_train, do_eval=True,
        max_steps=smoke.get("max_steps", args.max_steps),
        per_device_train_batch_size=smoke.get("batch_size", args.batch_size),
        learning_rate=args.learning_rate, warmup_steps=smoke.get("warmup_steps", args.warmup_steps),
        weight_decay=0.01, bf16=torch.cuda.is_available() and not args.smoke,
        use_cpu=args.smoke or not torch.cuda.is_available(),
        save_strategy="steps", save_steps=smoke.get("save_steps", args.save_steps),
        save_total_limit=max(args.average_last, 1), logging_steps=50, report_to="none", seed=args.seed,
        dataloader_num_workers=0 if args.smoke else 2)
    return model_args, data_args, training_args


def _budget_callback(seconds: float | None):
    from hf_readonce.tasks.trainers import TimeBudgetCallback

    return [TimeBudgetCallback(seconds)] if seconds else []


def _scores(metrics: dict) -> dict:
    keys = ("calibration_f1", "cached_exact_match", "cached_f1", "cached_HasAns_f1", "cached_NoAns_exact",
            "null_score_diff_threshold", "eval_questions", "calibration_questions")
    return {key: metrics[key] for key in keys if key in metrics}


def run_one_k(args) -> dict:
    """Distil one k, score the final model and the average of the last checkpoints on calibration, keep the best,
    write its threshold/windowing into its config and export it as fp16. Returns the row."""
    from hf_readonce.recipes import reference_qa
    from hf_readonce.recipes.deformer_qa import run

    k = args.k
    k_dir = Path(args.output_dir) / args.run_name
    teacher = args.teacher
    model_args, data_args, training_args = _data_and_training(args, k_dir, True, teacher, k)
    with _common.Stopwatch() as watch:
        metrics = run(model_args, data_args, training_args, callbacks=_budget_callback(args.time_budget_s))
    candidates = {"final": (k_dir, _scores(metrics))}
    checkpoints = sorted(k_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    last = checkpoints[-args.average_last:] if args.average_last > 1 else []
    if len(last) >= 2:
        average_dir = k_dir / f"average_last{len(last)}"
        reference_qa.main(["average", "--model_dirs", *map(str, last), "--output_dir", str(average_dir)])
        m_args, d_args, t_args = _data_and_training(args, average_dir, False, str(average_dir), None)
        candidates[average_dir.name] = (average_dir, _scores(run(m_args, d_args, t_args)))
    chosen = max(candidates, key=lambda name: candidates[name][1].get("calibration_f1", float("-inf")))
    chosen_dir, chosen_scores = candidates[chosen]
    config_path = chosen_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.update(null_score_diff_threshold=chosen_scores["null_score_diff_threshold"], max_question_length=48,
                  max_passage_length=208, doc_stride=64, allow_no_answer=True)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    (chosen_dir / "eval_results.json").write_text(json.dumps(dict(chosen_scores, chosen=chosen), indent=2))
    export_dir = k_dir / "export"
    if export_dir.exists():
        shutil.rmtree(export_dir)
    reference_qa.main(["export", "--model_dir", str(chosen_dir), "--export_dir", str(export_dir)])
    row = {"run": args.run_name, "num_decomposed_layers": k, "learning_rate": args.learning_rate, "chosen": chosen, "chosen_by": "calibration_f1",
           "train_seconds": watch.seconds, "train_steps_scheduled": training_args.max_steps,
           "train_loss": metrics.get("train_loss"), "batch_size": training_args.per_device_train_batch_size,
           "candidates": {name: scores for name, (_, scores) in candidates.items()}, **chosen_scores,
           "baselines": metrics.get("baselines", {})}
    (k_dir / "row.json").write_text(json.dumps(row, indent=2) + "\n")
    return row


def model_card_section(rows: list[dict], baselines: dict, shipped: dict | None) -> str:
    lines = ["## Reproduction: DeFormer distilled from the reference QA model", "",
             "Disfl-QA validation, answers from cached passage states; the checkpoint of each k was chosen by F1 on "
             "the calibration split (10% of the Disfl-QA train passages), never on validation.", "",
             "| model | calibration F1 | EM | F1 | HasAns F1 | NoAns EM |", "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| DeFormer k = {row['num_decomposed_layers']}, lr {row['learning_rate']:g} ({row['chosen']}) | {row.get('calibration_f1')} "
                     f"| {row.get('cached_exact_match')} | {row.get('cached_f1')} | {row.get('cached_HasAns_f1')} | "
                     f"{row.get('cached_NoAns_exact')} |")
    if shipped:
        lines.append(f"| shipped DeFormer k = {shipped.get('num_decomposed_layers')} | {shipped.get('calibration_f1')}"
                     f" | {shipped.get('cached_exact_match')} | {shipped.get('cached_f1')} | "
                     f"{shipped.get('cached_HasAns_f1')} | {shipped.get('cached_NoAns_exact')} |")
    for name, scores in baselines.items():
        lines.append(f"| baseline: {name.replace('_', ' ')} | | {scores.get('exact_match')} | {scores.get('f1')} | "
                     f"{scores.get('HasAns_f1')} | {scores.get('NoAns_exact')} |")
    lines += ["", f"Command: `{_common.command_line()}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    _common.start_clock()  # `wall_seconds` in the results: this command, from here
    args = parse_args(argv)
    out = Path(args.output_dir)
    if args.k is None:  # the parent claims the folder; a child (one k) runs in the folder its parent claimed
        rates = args.learning_rates or [args.learning_rate] * len(args.ks)
        if len(rates) != len(args.ks):
            raise SystemExit(f"--learning_rates: one per --ks entry, got {len(rates)} for {len(args.ks)}")
        names = [f"k{k}" if args.ks.count(k) == 1 else f"k{k}-lr{rate:g}" for k, rate in zip(args.ks, rates)]
        _common.claim_output_dir(out, names, args.overwrite_output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.teacher is None:
        args.teacher = str(_common.restore_checkpoint("minilm-qa-reference", args.weights_from))
    if args.k is not None:
        run_one_k(args)
        return 0
    # one child process per k, side by side on the same device (a MiniLM step leaves most of a GPU idle)
    base = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])]
    children = []
    for k, rate, name in zip(args.ks, rates, names):
        log = open(out / f"{name}.log", "w")
        command = [*_strip_option(_strip_option(base, "--ks"), "--learning_rates"), "--teacher", args.teacher,
                   "--k", str(k), "--learning_rate", str(rate), "--run_name", name]
        children.append((name, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log))
    failed = []
    for name, child, log in children:
        if child.wait() != 0:
            failed.append(name)
        log.close()
    rows = [json.loads((out / name / "row.json").read_text()) for name in names if name not in failed]
    baselines = rows[0]["baselines"] if rows else {}
    shipped = json.loads(SHIPPED.read_text()) if SHIPPED.is_file() else None
    results = _common.write_results(out / "results.json", TABLE, rows, baselines,
                                    {"shipped": {key: shipped.get(key) for key in (
                                        "num_decomposed_layers", "calibration_f1", "cached_exact_match", "cached_f1",
                                        "cached_HasAns_f1", "cached_NoAns_exact")} if shipped else None,
                                     "smoke": args.smoke, "failed_ks": failed})
    (out / "model_card.md").write_text(model_card_section(rows, baselines, shipped))
    print(results.read_text())
    packable = [r for r in rows if r["num_decomposed_layers"] == args.pack_k]
    if args.pack_dir and packable:
        best = max(packable, key=lambda r: r.get("calibration_f1", float("-inf")))  # chosen on calibration only
        export = out / best["run"] / "export"
        _common.pack([*sorted(p for p in export.iterdir() if p.is_file()), results, out / "model_card.md"],
                     Path(args.pack_dir))
    for name in failed:
        print(f"{name} failed: see {out / (name + '.log')}", file=sys.stderr)
    return 1 if failed else 0


def _strip_option(argv, option):
    """argv without `option V [V ...]`."""
    result, skipping = [], False
    for a in argv:
        if a == option:
            skipping = True
            continue
        if skipping and not a.startswith("--"):
            continue
        skipping = False
        result.append(a)
    return result


if __name__ == "__main__":
    sys.exit(_common.guarded(main))
