#!/usr/bin/env python
"""Trivial baselines of every evaluation set used here, printed beside the models' scores in README and model cards.

QA, extractive (all questions, SQuAD 2.0 HasAns/NoAns): always-empty, first span (3 words), first sentence.
QA as generation (answerable questions only, as the ReadOnce rows are scored): first span, first sentence.
Summarization (XSum validation): lead-1 and lead-3, ROUGE-1/2/L F-measure (torchmetrics).

    python benchmarks/trivial_baselines.py --data_dir ../shared/data --output benchmarks/results/trivial_baselines.json
"""

import argparse
import json
from pathlib import Path

from hf_readonce.recipes.readonce import load_rows, trivial_generation_baselines
from hf_readonce.tasks.question_answering import format_scores, load_qa_examples, trivial_baselines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=str(Path.cwd().parent / "shared" / "data"))
    parser.add_argument("--output", default="benchmarks/results/trivial_baselines.json")
    args = parser.parse_args()
    data = Path(args.data_dir)
    out = {}
    for name in ("disfl_qa", "quoref"):
        examples, _ = load_qa_examples(data / name / "validation.jsonl")
        out[f"{name}_extractive"] = {"questions": len(examples), **trivial_baselines(examples)}
        for baseline, scores in trivial_baselines(examples).items():
            print(format_scores(f"{name} {baseline}", scores))
        rows = load_rows("qa", str(data / name / "validation.jsonl"))
        out[f"{name}_answerable_generation"] = {"questions": len(rows), **trivial_generation_baselines("qa", rows)}
    rows = load_rows("summarization", str(data / "xsum" / "validation.jsonl"))
    out["xsum"] = {"documents": len(rows), **trivial_generation_baselines("summarization", rows)}
    print(json.dumps(out, indent=2))
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
