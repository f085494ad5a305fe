#!/usr/bin/env python
"""The DeFormer `question-answering` pipeline that travels with a published checkpoint, with and without `store=`:
one pipeline call per question (the way a server answers), on the first `--questions` Disfl-QA validation
questions, the store filled by a warm-up round. Every `--model` folder (a `hf-readonce publish` output; by default
the shipped reference DeFormer published with this checkout's code into a temporary folder) is loaded with
`pipeline(..., trust_remote_code=True)` in this one process, and every (folder, store or not) pair is timed round
robin through `harness.interleave`, so folders published by different versions of the code compare fairly.

Each folder gets, for one call per question and for one call with every question: seconds without a store, with
the warm store, and their ratio (store / no store) per round. Its bound is the FLOP ratio of the two paths, counted on one pass over the same questions
(`harness.count_flops`): with the passage states stored the pipeline runs only the question's lower layers and the
upper layers, so anything above that ratio is the store path's own overhead (fingerprints, reads). The answers of
every path are checked equal before timing.

    python benchmarks/bench_pipeline_store.py --json benchmarks/results/bench_pipeline_store.json
    python benchmarks/bench_pipeline_store.py --model /tmp/pub_before --model /tmp/pub_after --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", default=None,
                   help="a published DeFormer folder (repeatable; default: the reference DeFormer published now)")
    p.add_argument("--questions", type=int, default=15, help="questions, one pipeline call each (default 15)")
    p.add_argument("--repeats", type=int, default=harness.MIN_REPEATS, help="timed rounds after one warm-up round")
    harness.add_threads_argument(p, default=2)
    p.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    p.add_argument("--json", help="write the results (harness schema) here")
    return p


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    if args.questions < 1:
        raise harness.fail("--questions", f"must be >= 1, got {args.questions}")
    if args.repeats < 1:
        raise harness.fail("--repeats", f"must be >= 1, got {args.repeats}")
    for folder in args.model or []:
        if not (Path(folder) / "config.json").is_file():
            raise harness.fail("--model", f"{folder} holds no config.json (a `hf-readonce publish` folder)")
    validation = DATA / "disfl_qa" / "validation.jsonl"
    if not validation.is_file():
        raise harness.fail("--questions", f"{validation} not found; set $HF_READONCE_DATA")
    harness.set_threads(args.threads)
    from transformers import pipeline

    from hf_readonce.store import RepresentationStore

    rows = [json.loads(line) for line in validation.open(encoding="utf-8")][:args.questions]
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-store-") as work:
        folders = list(args.model or [])
        if not folders:
            folders = [str(Path(work) / "published")]
            subprocess.run([sys.executable, "-m", "hf_readonce.cli", "publish", "reference-deformer", "--repo-id",
                            "bench/deformer", "--local-dir", folders[0], "--no-progress"], check=True,
                           capture_output=True)
        pipes = {folder: pipeline("question-answering", model=folder, trust_remote_code=True) for folder in folders}
        stores = {folder: RepresentationStore(Path(work) / f"store{i}") for i, folder in enumerate(folders)}

        def call(folder: str, use_store: bool, batched: bool):
            kwargs = {"store": stores[folder]} if use_store else {}
            if batched:  # one call with every question
                return pipes[folder](question=[r["question"] for r in rows], context=[r["context"] for r in rows],
                                     **kwargs)
            return [pipes[folder](question=r["question"], context=r["context"], **kwargs) for r in rows]

        paths = [(f, s, b) for f in folders for b in (False, True) for s in (False, True)]
        answers = {path: call(*path) for path in paths}  # also fills the stores
        if any(answers[path] != answers[(folders[0], False, path[2])] for path in paths):
            raise SystemExit("bench_pipeline_store: the paths gave different answers; nothing is timed.")
        flops = {path: harness.count_flops(lambda path=path: call(*path)) for path in paths}
        times = harness.interleave({path: (lambda path=path: call(*path)) for path in paths}, repeats=args.repeats)
    results = harness.Results("bench_pipeline_store", argv, settings=vars(args), note=args.note)
    for i, folder in enumerate(folders):
        for batched in (False, True):
            params = {"model": folder, "questions": len(rows), "calls": 1 if batched else len(rows)}
            plain, stored = times[(folder, False, batched)], times[(folder, True, batched)]
            label = f"model {i} ({Path(folder).name}), {len(rows)} questions " + (
                "in 1 call" if batched else "in 1 call each")
            results.add(f"{label}: s without store", plain, params=params)
            results.add(f"{label}: s with the warm store", stored, params=params)
            ratio = flops[(folder, True, batched)] / flops[(folder, False, batched)]
            results.add_ratio(f"{label}: time with store / without", stored, plain, params=params,
                              bound=harness.bound("flop", ratio, "FLOPs of the store path over those of the plain "
                                                  "path, counted on one pass over the same calls (count_flops)"))
    results.extra["answers_equal"] = True
    print(results.table())
    return results.write(args.json)


if __name__ == "__main__":
    main()
