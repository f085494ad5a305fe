#!/usr/bin/env python
"""`hf-readonce encode` / `answer` against the Python API (`fill_store` / `answer_from_store`), side by side.

Issue 38's goals: on the first `--questions` (default 300) Disfl-QA validation questions and their distinct
passages, with the shipped reference DeFormer,

- `hf-readonce encode MODEL --documents P.jsonl --store S` (a new process each time, start-up, model loading and
  the checkpoint's checksum check included) takes at most 1 / 0.8 of the time of `fill_store(adapter, store, ...)`
  called in this process on a model already loaded in fp32 (the API's model loading is reported apart);
- `hf-readonce answer MODEL --store S --questions Q.jsonl --output preds.jsonl` likewise against
  `answer_from_store(model, tokenizer, store, rows)`, both reading the same filled store.

The CLI runs as the console script does (a new Python process per command). The CLI and API runs are interleaved
(API, CLI, API, CLI, ...) in one run and the medians taken; each CLI run writes a new store / predictions file in a
temporary folder. Both paths must give the same answers (checked; a difference is reported, not hidden).

Reported: the throughput ratio (API wall seconds / CLI wall seconds, >= 0.8 is the goal); the same ratio in CPU
seconds (user + system of all threads; on a machine shared with other jobs it moves less than wall time); and the
"work" ratio (API seconds / the seconds the CLI prints for its own encoding or answering, i.e. without its start-up:
importing torch and transformers, loading the model, scoring). The start-up is a fixed cost, so the throughput ratio
grows with the number of questions (`--questions 1786`: the whole Disfl-QA validation set).

    python benchmarks/bench_cli_vs_api.py                       # 3 rounds, about 4 minutes on 2 CPU cores
    python benchmarks/bench_cli_vs_api.py --rounds 5 --output benchmarks/results/cli_vs_api.json

`--model` is what the CLI is given (default `reference-deformer`, the name `hf-readonce checkpoints` lists); pass a
folder to time an older CLI that knows no names. The API always loads the resolved folder with `dtype=float32`.
"""

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cli(args: list[str], env: dict) -> tuple[float, float, float, str]:
    """Run `hf-readonce ARGS` as a user does (the console script: a new process); returns its wall seconds, its CPU
    seconds (user + system, all threads), the seconds it reports for its own work, and its output."""
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, "-c", CONSOLE_SCRIPT, *args], env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"hf-readonce {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    reported = re.search(r"(?:encoded|answered) \d+ .*? in ([0-9.]+) s", done.stdout)
    return seconds, cpu, float(reported.group(1)) if reported else float("nan"), done.stdout + done.stderr


# what the `hf-readonce` console script runs (argv[0] as the script's, so registration is deferred as there)
CONSOLE_SCRIPT = "import sys; sys.argv[0] = 'hf-readonce'; from hf_readonce.cli import main; sys.exit(main())"


def _timed(function, *args, **kwargs):
    """(wall seconds, CPU seconds of this process, result) of `function(*args, **kwargs)`."""
    start, cpu = time.perf_counter(), time.process_time()
    result = function(*args, **kwargs)
    return time.perf_counter() - start, time.process_time() - cpu, result


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "runs": [round(v, 3) for v in values]}


def _ratio(api: list[float], cli: list[float]) -> float:
    return round(statistics.median(api) / statistics.median(cli), 3)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="reference-deformer", help="what the CLI is given (name or folder)")
    parser.add_argument("--questions", type=int, default=300, help="first N Disfl-QA validation questions")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved API/CLI rounds (medians reported)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--output", default=None, help="results JSON (default: print only)")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoTokenizer

    import hf_readonce  # noqa: F401  (registers the models)
    from hf_readonce.representations import DeformerBertAdapter, fill_store
    from hf_readonce.representations.deformer_bert import DeformerBertForQuestionAnswering
    from hf_readonce.store import RepresentationStore
    from hf_readonce.tasks.question_answering_store import answer_from_store
    from hf_readonce.weights import reference_deformer_path

    folder = reference_deformer_path()
    rows = [json.loads(line) for line in open(DATA / "disfl_qa" / "validation.jsonl", encoding="utf-8")]
    rows = rows[: args.questions]
    passages = list(dict.fromkeys(r["context"] for r in rows))
    work = Path(tempfile.mkdtemp(prefix="bench-cli-vs-api-"))
    questions_file, documents_file = work / "questions.jsonl", work / "passages.jsonl"
    with open(questions_file, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    with open(documents_file, "w", encoding="utf-8") as handle:
        for i, text in enumerate(passages):
            handle.write(json.dumps({"id": f"p{i}", "context": text}) + "\n")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1")

    start = time.perf_counter()
    model = DeformerBertForQuestionAnswering.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    api_load_seconds = time.perf_counter() - start
    config = model.config
    window = dict(max_passage_length=config.max_passage_length, doc_stride=config.doc_stride)
    answer_kwargs = dict(max_question_length=config.max_question_length, batch_size=args.batch_size,
                         allow_no_answer=bool(config.allow_no_answer),
                         null_score_diff_threshold=config.null_score_diff_threshold or 0.0)

    names = ("api_encode", "cli_encode", "api_answer", "cli_answer")
    times = {name: [] for name in names}
    cpu = {name: [] for name in names}
    reported = {"cli_encode": [], "cli_answer": []}
    api_predictions, cli_predictions, cli_output = None, None, ""
    for round_index in range(args.rounds):
        # encode: API then CLI, each into a new store
        api_store = RepresentationStore(work / f"api-store-{round_index}")
        adapter = DeformerBertAdapter(model, tokenizer, batch_size=args.batch_size, **window)
        seconds, cpu_seconds, _ = _timed(fill_store, adapter, api_store,
                                         [(f"p{i}", t) for i, t in enumerate(passages)], dtype="float16")
        times["api_encode"].append(seconds)
        cpu["api_encode"].append(cpu_seconds)
        cli_store = work / f"cli-store-{round_index}"
        seconds, cpu_seconds, own, _ = _cli(["encode", args.model, "--documents", str(documents_file), "--store",
                                             str(cli_store), "--no-progress", "--batch-size", str(args.batch_size)],
                                            env)
        times["cli_encode"].append(seconds)
        cpu["cli_encode"].append(cpu_seconds)
        reported["cli_encode"].append(own)
        # answer: API from its store, CLI from its store
        seconds, cpu_seconds, api_predictions = _timed(answer_from_store, model, tokenizer, api_store, rows,
                                                       **answer_kwargs)
        times["api_answer"].append(seconds)
        cpu["api_answer"].append(cpu_seconds)
        predictions_file = work / f"preds-{round_index}.jsonl"
        seconds, cpu_seconds, own, cli_output = _cli(
            ["answer", args.model, "--store", str(cli_store), "--questions", str(questions_file), "--output",
             str(predictions_file), "--no-progress", "--batch-size", str(args.batch_size)], env)
        times["cli_answer"].append(seconds)
        cpu["cli_answer"].append(cpu_seconds)
        reported["cli_answer"].append(own)
        cli_predictions = {json.loads(line)["id"]: json.loads(line)["prediction_text"]
                           for line in open(predictions_file, encoding="utf-8")}
        print(f"round {round_index + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
        shutil.rmtree(api_store.path)
    differing = sorted(i for i in api_predictions if api_predictions[i] != cli_predictions.get(i))
    result = {
        "command": "python benchmarks/bench_cli_vs_api.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "cli_model_argument": args.model, "checkpoint": str(folder),
        "questions": len(rows), "passages": len(passages), "batch_size": args.batch_size,
        "api_dtype": "float32", "api_model_load_seconds": round(api_load_seconds, 3),
        "seconds": {name: _summary(values) for name, values in times.items()},
        "cpu_seconds": {name: _summary(values) for name, values in cpu.items()},
        "cli_reported_work_seconds": {name: _summary(values) for name, values in reported.items()},
        "throughput_ratio_encode": _ratio(times["api_encode"], times["cli_encode"]),
        "throughput_ratio_answer": _ratio(times["api_answer"], times["cli_answer"]),
        "throughput_ratio_encode_per_round": [round(a / c, 3) for a, c in zip(times["api_encode"], times["cli_encode"])],
        "throughput_ratio_answer_per_round": [round(a / c, 3) for a, c in zip(times["api_answer"], times["cli_answer"])],
        "cpu_time_ratio_encode": _ratio(cpu["api_encode"], cpu["cli_encode"]),
        "cpu_time_ratio_answer": _ratio(cpu["api_answer"], cpu["cli_answer"]),
        "work_ratio_encode": _ratio(times["api_encode"], reported["cli_encode"]),
        "work_ratio_answer": _ratio(times["api_answer"], reported["cli_answer"]),
        "goal": ">= 0.8 for both (CLI start-up, model loading and checksum included; API model already loaded)",
        "definitions": "throughput ratio = median API wall s / median CLI wall s (whole process); cpu_time ratio = "
                       "the same with CPU seconds (user + system, all threads: less sensitive to other jobs on the "
                       "machine); work ratio = API wall s / the seconds the CLI reports for its encoding/answering "
                       "(start-up excluded)",
        "answers_differing": len(differing), "answers_differing_ids": differing[:20],
        "cli_answer_output_last_run": cli_output.strip().splitlines()[-4:],
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "note": "2-core machine shared with other jobs; rounds interleaved API/CLI, medians with min-max",
    }
    print(json.dumps(result, indent=2))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
