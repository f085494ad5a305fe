#!/usr/bin/env python
"""DeFormer with cached passage states vs `BertForQuestionAnswering` (same weights): inference time and peak memory,
measured side by side in one run, with the theoretical FLOP ratio beside the measured one.

Shapes follow the DeFormer paper's SQuAD setting: passages of 320 tokens, questions of 32, batch of questions whose
passages were encoded beforehand. Random weights (speed does not depend on weight values).

    python benchmarks/bench_deformer.py                      # bert-base (k=9) and MiniLM (k=4) configs
    python benchmarks/bench_deformer.py --configs minilm --repeats 3 --batch_size 8

Time: median of `--repeats` runs of each path, interleaved. Memory: each path runs once in a fresh subprocess whose
peak-RSS counter (Linux VmHWM) is reset after the model and inputs are loaded, so the figure is the extra memory the
forward pass needs (activations), printed with the resident total (weights included) beside it.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForQuestionAnswering

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering, DeformerPassageOutput

CONFIGS = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, k=9),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, k=4),
}


def flops_per_layer(tokens: int, hidden: int, intermediate: int) -> float:
    """Multiply-adds x2 of one BERT layer on `tokens` tokens: projections, FFN and the two attention products."""
    return 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * tokens * tokens * hidden


def theoretical_ratio(q: int, p: int, hidden: int, intermediate: int, layers: int, k: int) -> float:
    """FLOPs of BERT on q+p tokens over FLOPs of DeFormer answering from cached passage states (eq. 5: k layers on
    the question alone, n-k layers jointly)."""
    full = layers * flops_per_layer(q + p, hidden, intermediate)
    cached = k * flops_per_layer(q, hidden, intermediate) + (layers - k) * flops_per_layer(q + p, hidden, intermediate)
    return full / cached


def build(name: str, seed: int = 0):
    spec = dict(CONFIGS[name])
    k = spec.pop("k")
    common = dict(vocab_size=30522, max_position_embeddings=512, **spec)
    torch.manual_seed(seed)
    bert = BertForQuestionAnswering(BertConfig(**common)).eval()
    deformer = DeformerBertForQuestionAnswering(DeformerBertConfig(num_decomposed_layers=k, **common)).eval()
    deformer.load_state_dict(bert.state_dict())
    return bert, deformer, k


def make_inputs(batch: int, q: int, p: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    question = torch.randint(1000, 30000, (batch, q), generator=g)
    passage = torch.randint(1000, 30000, (batch, p), generator=g)
    pair = torch.cat([question, passage], 1)
    types = torch.cat([torch.zeros_like(question), torch.ones_like(passage)], 1)
    return question, passage, pair, types


def child(args) -> None:
    """Subprocess entry: load model + inputs, reset the peak-RSS counter, run one forward, print memory JSON."""
    torch.set_num_threads(args.threads)
    bert, deformer, _ = build(args.config)
    question, passage, pair, types = make_inputs(args.batch_size, args.question_length, args.passage_length)
    if args.child == "deformer":
        saved = torch.load(args.states)
        states = DeformerPassageOutput(**saved)
        deformer.representation_fingerprint()  # computed once per model and cached; not part of a forward
        del bert
    else:
        del deformer
    import gc

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    status = Path("/proc/self/status").read_text()
    base = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
    with torch.no_grad():
        if args.child == "deformer":
            deformer(input_ids=question, passage_states=states)
        else:
            bert(pair, token_type_ids=types)
    status = Path("/proc/self/status").read_text()
    peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
    print(json.dumps({"baseline_mib": base / 1024, "peak_mib": peak / 1024, "extra_mib": (peak - base) / 1024}))


def measure_memory(args, config: str, mode: str, states_path: str) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--config", config, "--states", states_path,
               "--batch_size", str(args.batch_size), "--question_length", str(args.question_length),
               "--passage_length", str(args.passage_length), "--threads", str(args.threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(args, config: str) -> dict:
    torch.set_num_threads(args.threads)
    bert, deformer, k = build(config)
    question, passage, pair, types = make_inputs(args.batch_size, args.question_length, args.passage_length)
    with torch.no_grad():
        states = deformer.encode_passages(passage)
        # correctness guard: the cached path answers exactly like the uncached DeFormer on the same pairs
        full = deformer(pair, token_type_ids=types).start_logits
        cached = deformer(input_ids=question, passage_states=states).start_logits
        max_diff = float((full - cached).abs().max())
        times = {"bert": [], "deformer_cached": [], "deformer_encode": []}
        for _ in range(args.warmup):
            bert(pair, token_type_ids=types)
            deformer(input_ids=question, passage_states=states)
        for _ in range(args.repeats):
            start = time.perf_counter()
            bert(pair, token_type_ids=types)
            times["bert"].append(time.perf_counter() - start)
            start = time.perf_counter()
            deformer(input_ids=question, passage_states=states)
            times["deformer_cached"].append(time.perf_counter() - start)
            start = time.perf_counter()
            deformer.encode_passages(passage)
            times["deformer_encode"].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "states.pt")
        torch.save({"last_hidden_state": states.last_hidden_state, "attention_mask": states.attention_mask,
                    "num_decomposed_layers": states.num_decomposed_layers,
                    "model_fingerprint": states.model_fingerprint}, path)
        memory = {mode: measure_memory(args, config, mode, path) for mode in ("bert", "deformer")}
    spec = CONFIGS[config]
    result = {
        "config": config, "num_decomposed_layers": k, "batch_size": args.batch_size,
        "question_length": args.question_length, "passage_length": args.passage_length, "threads": args.threads,
        "bert_seconds": round(median["bert"], 4), "deformer_cached_seconds": round(median["deformer_cached"], 4),
        "deformer_passage_encode_seconds": round(median["deformer_encode"], 4),
        "speedup_measured": round(median["bert"] / median["deformer_cached"], 2),
        "speedup_theoretical_flops": round(theoretical_ratio(args.question_length, args.passage_length,
                                                             spec["hidden_size"], spec["intermediate_size"],
                                                             spec["num_hidden_layers"], k), 2),
        "bert_forward_extra_mib": round(memory["bert"]["extra_mib"], 1),
        "deformer_forward_extra_mib": round(memory["deformer"]["extra_mib"], 1),
        "bert_peak_total_mib": round(memory["bert"]["peak_mib"], 1),
        "deformer_peak_total_mib": round(memory["deformer"]["peak_mib"], 1),
        "cached_vs_uncached_max_abs_diff": max_diff,
    }
    result["forward_memory_reduction_pct"] = round(
        100 * (1 - result["deformer_forward_extra_mib"] / result["bert_forward_extra_mib"]), 1)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["bert-base", "minilm"], choices=sorted(CONFIGS))
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--question_length", type=int, default=32)
    parser.add_argument("--passage_length", type=int, default=320)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--output", default=None, help="also write the results as JSON here")
    parser.add_argument("--child", choices=["bert", "deformer"], help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--states", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    results = [bench(args, config) for config in args.configs]
    for r in results:
        print(f"\n== {r['config']} (k={r['num_decomposed_layers']}), batch {r['batch_size']}, question "
              f"{r['question_length']} + passage {r['passage_length']} tokens, {r['threads']} threads")
        print(f"BertForQuestionAnswering     {r['bert_seconds']:.3f} s   forward memory {r['bert_forward_extra_mib']:.0f} MiB")
        print(f"DeFormer, cached passages    {r['deformer_cached_seconds']:.3f} s   forward memory "
              f"{r['deformer_forward_extra_mib']:.0f} MiB")
        print(f"speed-up {r['speedup_measured']:.2f}x measured, {r['speedup_theoretical_flops']:.2f}x FLOP ratio; "
              f"forward memory reduced {r['forward_memory_reduction_pct']:.1f}%; passage encoding (once) "
              f"{r['deformer_passage_encode_seconds']:.3f} s; cached-vs-uncached max |diff| "
              f"{r['cached_vs_uncached_max_abs_diff']:.1e}")
    print(json.dumps(results, indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
