#!/usr/bin/env python
"""`hf-readonce encode` / `answer` against the Python API (`fill_store` / `answer_from_store`), side by side.

The goals: on the first `--questions` (default 300) Disfl-QA validation questions and their distinct
passages, with the shipped reference DeFormer,

- `hf-readonce encode MODEL --documents P.jsonl --store S` (a new process each time, start-up, model loading and
  the checkpoint's checksum check included) takes at most 1 / 0.8 of the time of `fill_store(adapter, store, ...)`
  called in this process on a model already loaded in fp32 (the API's model loading is reported apart);
- `hf-readonce answer MODEL --store S --questions Q.jsonl --output preds.jsonl` likewise against
  `answer_from_store(model, tokenizer, store, rows)`, both reading the same filled store.

The CLI runs as the console script does (a new Python process per command). The CLI and API runs are interleaved
(API, CLI, API, CLI, ...) in one run through `benchmarks/harness.py` (`--rounds`, 5) and the medians taken, ratios
per round; each CLI run writes a new store / predictions file in a
temporary folder. Both paths must give the same answers (checked; a difference is reported, not hidden).

Reported: the throughput ratio (API wall seconds / CLI wall seconds, >= 0.8 is the goal); the same ratio in CPU
seconds (user + system of all threads; on a machine shared with other jobs it moves less than wall time); and the
"work" ratio (API seconds / the seconds the CLI prints for its own encoding or answering, i.e. without its start-up:
importing torch and transformers, loading the model, scoring). The start-up is a fixed cost, so the throughput ratio
grows with the number of questions (`--questions 1785`: every Disfl-QA validation question with a non-empty
question). Beside them, the "ceiling" ratio: API seconds / (API seconds + the import floor), where the floor is a
new Python process that only runs `import torch, transformers.modeling_utils` (timed in the same rounds): no CLI
that starts a process per command can do better.

    python benchmarks/bench_cli_vs_api.py                       # 5 rounds, about 7 minutes on 2 CPU cores
    python benchmarks/bench_cli_vs_api.py --rounds 5 --output benchmarks/results/cli_vs_api.json

`--model` is what the CLI is given (default `reference-deformer`, the name `hf-readonce checkpoints` lists); pass a
folder to time an older CLI that knows no names. The API always loads the resolved folder with `dtype=float32`.
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

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


# the least a new Python process must import before it can load a transformers model (the CLI's floor)
FLOOR_SCRIPT = "import torch, transformers.modeling_utils"

# what the `hf-readonce` console script runs (argv[0] as the script's, so registration is deferred as there)
CONSOLE_SCRIPT = "import sys; sys.argv[0] = 'hf-readonce'; from hf_readonce.cli import main; sys.exit(main())"


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="reference-deformer", help="what the CLI is given (name or folder)")
    parser.add_argument("--questions", type=int, default=300,
                        help="first N Disfl-QA validation questions (1785: all with a question)")
    parser.add_argument("--rounds", type=int, default=harness.MIN_REPEATS,
                        help="interleaved API/CLI rounds (medians with ranges reported)")
    parser.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--output", default=None, help="results JSON (default: print only)")
    harness.add_threads_argument(parser)
    args = parser.parse_args(argv)
    harness.set_threads(args.threads)
    if args.questions < 1 or args.rounds < 1 or args.batch_size < 1:
        raise harness.fail("--questions", "--questions, --rounds and --batch_size must be >= 1.")

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
    # rows the CLI would skip as bad lines (an empty question: one in Disfl-QA validation) are left out on both sides
    rows = [r for r in rows if all(isinstance(r.get(k), str) and r[k].strip() for k in ("question", "context"))]
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
    cpu = {name: [] for name in names}
    reported = {"cli_encode": [], "cli_answer": []}
    state = {"round": -1, "api_predictions": None, "cli_predictions": None, "cli_output": ""}
    adapter = DeformerBertAdapter(model, tokenizer, batch_size=args.batch_size, **window)

    def api_encode():  # a new store each round (the round begins here)
        state["round"] += 1
        if state.get("api_store") is not None:
            shutil.rmtree(state["api_store"].path, ignore_errors=True)
        state["api_store"] = RepresentationStore(work / f"api-store-{state['round']}")
        begin = time.process_time()
        fill_store(adapter, state["api_store"], [(f"p{i}", t) for i, t in enumerate(passages)], store_dtype="float16")
        cpu["api_encode"].append(time.process_time() - begin)

    def cli_encode():
        _, cpu_seconds, own, _ = _cli(["encode", args.model, "--documents", str(documents_file), "--store",
                                       str(work / f"cli-store-{state['round']}"), "--no-progress", "--batch-size",
                                       str(args.batch_size)], env)
        cpu["cli_encode"].append(cpu_seconds)
        reported["cli_encode"].append(own)

    def api_answer():
        begin = time.process_time()
        state["api_predictions"] = answer_from_store(model, tokenizer, state["api_store"], rows, **answer_kwargs)
        cpu["api_answer"].append(time.process_time() - begin)

    def cli_answer():
        predictions_file = work / f"preds-{state['round']}.jsonl"
        _, cpu_seconds, own, state["cli_output"] = _cli(
            ["answer", args.model, "--store", str(work / f"cli-store-{state['round']}"), "--questions",
             str(questions_file), "--output", str(predictions_file), "--no-progress", "--batch-size",
             str(args.batch_size)], env)
        cpu["cli_answer"].append(cpu_seconds)
        reported["cli_answer"].append(own)
        state["cli_predictions"] = {json.loads(line)["id"]: json.loads(line)["prediction_text"]
                                    for line in open(predictions_file, encoding="utf-8")}

    def import_floor():  # what any CLI that runs as a new Python process pays before it can load a model
        done = subprocess.run([sys.executable, "-c", FLOOR_SCRIPT], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the import floor script failed ({done.returncode}):\n{done.stderr[-3000:]}")

    # API, CLI, API, CLI ...: wall seconds through the harness (torch.utils.benchmark); CPU and CLI-reported
    # seconds recorded by the calls themselves; no warm-up round (every CLI run starts a new process anyway)
    times = harness.interleave({"api_encode": api_encode, "cli_encode": cli_encode, "api_answer": api_answer,
                                "cli_answer": cli_answer, "import_floor": import_floor},
                               repeats=args.rounds, warmup=0)
    api_predictions, cli_predictions, cli_output = (state["api_predictions"], state["cli_predictions"],
                                                    state["cli_output"])
    differing = sorted(i for i in api_predictions if api_predictions[i] != cli_predictions.get(i))
    results = harness.Results("bench_cli_vs_api", argv, settings=vars(args), note=args.note)
    params = {"questions": len(rows), "passages": len(passages), "batch_size": args.batch_size,
              "cli_model_argument": args.model}
    for name in names:
        results.add(f"{name} wall", times[name], params=params)
        results.add(f"{name} cpu", cpu[name], params=params)
    for name in ("cli_encode", "cli_answer"):
        results.add(f"{name} reported work", reported[name], params=params)
    results.add("import_floor wall", times["import_floor"], params={"script": FLOOR_SCRIPT})
    goal = harness.bound("none", derivation="no FLOP bound: both sides run the same model on the same inputs; the "
                         "CLI adds process start-up, model loading and the checkpoint's checksum (ideal ratio 1.0, "
                         "goal >= 0.8)")
    for task in ("encode", "answer"):
        results.add_ratio(f"throughput ratio {task} (API wall / CLI wall)", times[f"api_{task}"], times[f"cli_{task}"],
                          goal, params=params)
        results.add_ratio(f"cpu time ratio {task}", cpu[f"api_{task}"], cpu[f"cli_{task}"], goal, params=params)
        results.add_ratio(f"work ratio {task} (API wall / CLI-reported seconds)", times[f"api_{task}"],
                          reported[f"cli_{task}"], goal, params=params)
        # the best throughput ratio a one-process-per-command CLI could reach in this round: API / (API + floor)
        ceiling = [api + floor for api, floor in zip(times[f"api_{task}"], times["import_floor"])]
        results.add_ratio(f"ceiling ratio {task} (API wall / (API wall + import floor))", times[f"api_{task}"],
                          ceiling, harness.bound("none", derivation="the import floor is Python start-up plus "
                                                 "`import torch, transformers.modeling_utils`, which any CLI that "
                                                 "loads a transformers model in a new process pays"), params=params)
    results.extra.update({
        "checkpoint": str(folder), "api_dtype": "float32", "api_model_load_seconds": api_load_seconds,
        "answers_differing": len(differing), "answers_differing_ids": differing[:20],
        "cli_answer_output_last_run": cli_output.strip().splitlines()[-4:],
        "definitions": "ceiling ratio = API wall s / (API wall s + the wall s of a new Python process that only "
                       "imports torch and transformers.modeling_utils), the most any one-process-per-command CLI can "
                       "reach; throughput ratio = API wall s / CLI wall s (whole process), per round; cpu time ratio = the "
                       "same with CPU seconds (user + system, all threads: less sensitive to other jobs on the "
                       "machine); work ratio = API wall s / the seconds the CLI reports for its encoding/answering "
                       "(start-up excluded)",
    })
    print(results.table())
    result = results.write(args.output)
    shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
