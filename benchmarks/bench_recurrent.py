#!/usr/bin/env python
"""Recurrent GPT-2 benchmark at GPT-2 small size (12 layers, hidden 768, random weights), side by side in one run.

1. Training peak memory vs the number of windows (1, 5, 20 windows of 300 tokens), gradient checkpointing on, loss
   computed window by window, `logits_to_keep=1`: the recurrence keeps only one vector per window between windows
   (§3.2), so memory should not grow with the stream. Goal: 20 windows within 1.3x of 1 window. Each point runs in a
   fresh subprocess whose peak-RSS counter (Linux VmHWM) is reset after the model and inputs are built, so the figure
   is the memory the training step itself needs.
2. Tokens/s of the recurrent model vs `GPT2LMHeadModel` at the same window and overlap, windows read in sequence
   (a batch of 4 streams of 5 windows): inference and a training step without checkpointing. Goal: the recurrence
   costs under 5%.

    python benchmarks/bench_recurrent.py
    python benchmarks/bench_recurrent.py --windows 1 5 --repeats 2
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_readonce.lm import to_recurrent

SMALL = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(field)


def memory_point(windows: int, window_size: int) -> dict:
    """One training step of the recurrent model on `windows` windows, checkpointing on; extra peak RSS in MiB."""
    torch.manual_seed(0)
    model = to_recurrent(GPT2LMHeadModel(GPT2Config(**SMALL)), window_size=window_size).train()
    model.gradient_checkpointing_enable()
    x = torch.randint(0, 50257, (1, windows * window_size))
    out = model(x, labels=x, logits_to_keep=1)  # warm-up step (allocator pools, gradient buffers)
    out.loss.backward()
    model.zero_grad(set_to_none=False)
    baseline = _rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    start = time.perf_counter()
    out = model(x, labels=x, logits_to_keep=1)
    out.loss.backward()
    seconds = time.perf_counter() - start
    return {"windows": windows, "tokens": windows * window_size, "extra_peak_mib": (_rss_kib("VmHWM") - baseline) / 1024,
            "resident_mib": _rss_kib("VmHWM") / 1024, "step_seconds": seconds}


def throughput(window_size: int, overlap: int, repeats: int) -> dict:
    torch.manual_seed(0)
    plain = GPT2LMHeadModel(GPT2Config(**SMALL))
    recurrent = to_recurrent(plain, window_size=window_size, window_overlap=overlap)
    windows, batch = 5, 4
    length = window_size + (windows - 1) * (window_size - overlap)
    x = torch.randint(0, 50257, (batch, length))
    spans = [(0, window_size, 0)]
    while spans[-1][1] < length:
        start = spans[-1][1] - overlap
        spans.append((start, start + window_size, overlap))

    def plain_pass(train: bool):
        for start, end, _ in spans:
            chunk = x[:, start:end]
            out = plain(chunk, labels=chunk if train else None)
            if train:
                out.loss.backward()

    def recurrent_pass(train: bool):
        out = recurrent(x, labels=x if train else None, use_cache=False)
        if train:
            out.loss.backward()

    results = {}
    for mode in ("inference", "training"):
        train = mode == "training"
        for model in (plain, recurrent):
            model.train(train)
        times = {"plain": [], "recurrent": []}
        with torch.set_grad_enabled(train):
            plain_pass(train), recurrent_pass(train)  # warm-up
            for _ in range(repeats):  # interleaved
                for name, fn in (("plain", plain_pass), ("recurrent", recurrent_pass)):
                    start = time.perf_counter()
                    fn(train)
                    times[name].append(time.perf_counter() - start)
        new_tokens = batch * length
        p, r = statistics.median(times["plain"]), statistics.median(times["recurrent"])
        results[mode] = {"plain_tokens_per_s": new_tokens / p, "recurrent_tokens_per_s": new_tokens / r,
                         "recurrence_cost": r / p - 1}
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--window_size", type=int, default=300)
    parser.add_argument("--overlap", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=None)
    parser.add_argument("--_memory_point", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._memory_point is not None:
        print(json.dumps(memory_point(args._memory_point, args.window_size)))
        return {}
    results = {"threads": torch.get_num_threads(), "memory": []}
    print(f"GPT-2 small, random weights, window {args.window_size}, {results['threads']} threads", flush=True)
    for windows in args.windows:
        run = subprocess.run([sys.executable, __file__, "--_memory_point", str(windows), "--window_size",
                              str(args.window_size)], capture_output=True, text=True, check=True)
        point = json.loads(run.stdout.strip().splitlines()[-1])
        results["memory"].append(point)
        ratio = point["extra_peak_mib"] / results["memory"][0]["extra_peak_mib"]
        print(f"[1] {windows:3d} windows ({point['tokens']:5d} tokens): training step peak +{point['extra_peak_mib']:.0f}"
              f" MiB over the loaded model ({point['resident_mib']:.0f} MiB resident), {ratio:.2f}x of 1 window, "
              f"{point['step_seconds']:.1f} s", flush=True)
    results["throughput"] = throughput(args.window_size, args.overlap, args.repeats)
    for mode, row in results["throughput"].items():
        print(f"[2] {mode:9s}: GPT2LMHeadModel {row['plain_tokens_per_s']:.0f} tokens/s, recurrent "
              f"{row['recurrent_tokens_per_s']:.0f} tokens/s -> recurrence costs {row['recurrence_cost']:+.1%}",
              flush=True)
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
