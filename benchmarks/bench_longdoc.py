#!/usr/bin/env python
"""Speed and memory of LongDoc BART's encoder attention types against full attention and transformers' LED
(issue 13, "Measured"): encoder forward and one training step at 1k, 4k and 16k input tokens, bart-base dimensions,
random weights, 2 threads. Every ratio to full attention is printed beside its FLOP bound, computed from the
dimensions (the feed-forward and projection FLOPs stay, so the bound is well below n / (2r + 1)).

    PYTHONPATH=src python benchmarks/bench_longdoc.py                       # the issue's table (long: hours on CPU)
    PYTHONPATH=src python benchmarks/bench_longdoc.py --lengths 64,128 --d_model 32 --heads 2 --ffn 64 \\
        --layers 1 --radius 4 --in_process                                  # smoke run, seconds

Types (`--types`, comma-separated): `full`, `neighborhood`, `convolutional`, `convolutional_per_head`,
`neighborhood_convolutional`, `led`, each optionally with settings for a sweep: `neighborhood:r=50`,
`convolutional:k=5:s=5`, `led:r=50` (LED's `attention_window` is 2r: r tokens on each side, neighborhood's reach).

Measured per (type, length): `forward` = encoder forward under `torch.no_grad()` (eval); `train` = forward and
backward of the whole model with a `--target_length`-token summary (loss on the LM head; no optimizer step).
Tokens/s counts input tokens, from the fastest of `--repeats` timed runs after one untimed warm-up run. Memory: the peak resident set of each measured phase
(Linux VmHWM, reset through `/proc/self/clear_refs` just before the phase) minus the resident set at that moment,
each (type, length) in a fresh subprocess with glibc's freed-block cache off (`MALLOC_MMAP_THRESHOLD_=131072
MALLOC_TRIM_THRESHOLD_=0`, so RSS follows the memory actually held); with
`--in_process` (smoke runs) everything runs in this process and memory is not reported.

FLOP bounds: per encoder layer `8nd^2` (projections) `+ 4ndf` (feed-forward) `+` attention: full `4n^2d`,
neighborhood `4n(2r+1)d` (the blocked kernel computes `4n(b+2r)d`, b = max(16, r), printed as `kernel bound`),
convolutional `4m^2d + 8mkd^2/g` (m = ceil(n/s) compressed positions; conv on q, k, v and the deconvolution,
g = 1 shared, g = heads per head), neighborhood-convolutional `4m(2ceil(r/s)+1)d + 8mkd^2`; LED as neighborhood.
Training adds the decoder (self-attention over the summary, cross-attention reading the n encoder states, LM head)
at 3x the forward FLOPs for every part.

README and CHANGELOG carry its first run, at 1k and 4k tokens only (`benchmarks/results/bench_longdoc_1k_4k.*`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

TYPES = ("full", "neighborhood", "convolutional", "convolutional_per_head", "neighborhood_convolutional", "led")


def parse_type(spec: str) -> dict:
    """`"neighborhood:r=50"` -> `{"type": "neighborhood", "r": 50, "name": "neighborhood:r=50"}`.

    Raises:
        ValueError: an unknown type or setting (naming `--types`).
    """
    name, *settings = spec.split(":")
    if name not in TYPES:
        raise ValueError(f"--types: unknown type {name!r}; known: {', '.join(TYPES)}.")
    out = {"type": name, "name": spec}
    for setting in settings:
        key, _, value = setting.partition("=")
        if key not in ("r", "k", "s") or not value.isdigit():
            raise ValueError(f"--types: bad setting {setting!r} in {spec!r} (r=INT, k=INT, s=INT).")
        out[key] = int(value)
    return out


def layer_flops(kind: dict, n: int, d: int, f: int, heads: int, radius: int, kernel: int, stride: int) -> float:
    """Forward FLOPs of one encoder layer of `kind` at n tokens (see the module docstring)."""
    r, k, s = kind.get("r", radius), kind.get("k", kernel), kind.get("s", stride)
    dense = 8 * n * d * d + 4 * n * d * f
    t = kind["type"]
    if t == "full":
        return dense + 4 * n * n * d
    if t in ("neighborhood", "led"):
        return dense + 4 * n * min(2 * r + 1, n) * d
    m = math.ceil(n / s)
    groups = heads if t == "convolutional_per_head" else 1
    conv = 8 * m * k * d * d / groups  # 3 convolutions (q, k, v) and 1 deconvolution, 2 FLOPs per MAC
    if t == "neighborhood_convolutional":
        return dense + conv + 4 * m * min(2 * math.ceil(r / s) + 1, m) * d
    return dense + conv + 4 * m * m * d


def kernel_layer_flops(kind: dict, n: int, d: int, f: int, radius: int) -> float:
    """FLOPs the blocked neighborhood kernel actually computes (query blocks of b = max(16, r) against b + 2r
    keys); other types: their bound."""
    r = kind.get("r", radius)
    block = max(16, r)
    return 8 * n * d * d + 4 * n * d * f + 4 * n * min(block + 2 * r, n) * d


def decoder_flops(n: int, t: int, d: int, f: int, layers: int, vocab: int) -> float:
    """Forward FLOPs of the decoder for a t-token summary reading n encoder states, and the LM head."""
    per_layer = 8 * t * d * d + 4 * t * t * d + 4 * t * d * d + 4 * n * d * d + 4 * t * n * d + 4 * t * d * f
    return layers * per_layer + 2 * t * d * vocab


def build(kind: dict, args, length: int):
    import torch
    from transformers import LEDConfig, LEDForConditionalGeneration

    from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration

    torch.manual_seed(0)
    common = dict(vocab_size=args.vocab_size, d_model=args.d_model, encoder_layers=args.layers,
                  decoder_layers=args.layers, encoder_attention_heads=args.heads, decoder_attention_heads=args.heads,
                  encoder_ffn_dim=args.ffn, decoder_ffn_dim=args.ffn, dropout=0.0, attention_dropout=0.0,
                  pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    r = kind.get("r", args.radius)
    if kind["type"] == "led":
        # LED pads its input up to a multiple of the window: its position table must cover the padded length
        padded = -(-length // (2 * r)) * (2 * r)
        config = LEDConfig(**common, attention_window=2 * r, max_encoder_position_embeddings=padded,
                           max_decoder_position_embeddings=max(args.target_length, 16))
        return LEDForConditionalGeneration(config)
    config = LongDocBartConfig(**common, max_position_embeddings=max(length, args.target_length),
                               encoder_attention_type=kind["type"], neighborhood_radius=r,
                               conv_kernel_size=kind.get("k", args.kernel), conv_stride=kind.get("s", args.stride))
    config._attn_implementation = "sdpa"
    return LongDocBartForConditionalGeneration(config)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> float:
    """Reset the Linux peak-RSS counter (VmHWM) to the current resident set and return that, MiB. Without the reset
    a measured phase whose peak stays under the model build's (random init allocates temporaries) reads 0."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kib("VmRSS") / 1024
    except OSError:  # not Linux, or no permission: fall back to the lifetime peak
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_mib() -> float:
    """Peak resident set since the last [`reset_peak`] (VmHWM), MiB; the lifetime peak where VmHWM is missing."""
    try:
        return _status_kib("VmHWM") / 1024
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(kind: dict, length: int, args) -> dict:
    """Time (and, out of process, peak memory of) the encoder forward and a training step of one type at one
    length."""
    import torch

    torch.set_num_threads(args.threads)
    model = build(kind, args, length)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, args.vocab_size, (args.batch, length), generator=generator)
    mask = torch.ones_like(ids)
    labels = torch.randint(3, args.vocab_size, (args.batch, args.target_length), generator=generator)
    result = {"name": kind["name"], "length": length}
    base = reset_peak()
    encoder = model.get_encoder()
    model.eval()
    times = []
    with torch.no_grad():
        encoder(input_ids=ids, attention_mask=mask)  # warm-up (untimed): first-call allocations, kernel selection
        for _ in range(args.repeats):
            start = time.perf_counter()
            encoder(input_ids=ids, attention_mask=mask)
            times.append(time.perf_counter() - start)
    result["forward_seconds"] = min(times)
    result["forward_tokens_per_second"] = args.batch * length / min(times)
    result["forward_peak_mib"] = None if args.in_process else peak_mib() - base
    if not args.no_train:
        model.train()
        base = reset_peak()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()  # warm-up (untimed)
        times = []
        for _ in range(args.repeats):
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            times.append(time.perf_counter() - start)
        result["train_seconds"] = min(times)
        result["train_tokens_per_second"] = args.batch * length / min(times)
        result["train_peak_mib"] = None if args.in_process else peak_mib() - base
    return result


def measure_in_subprocess(spec: str, length: int, argv: list[str]) -> dict:
    command = [sys.executable, __file__, *argv, "--one", f"{spec}@{length}"]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        return {"name": spec, "length": length, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def bounds(kind: dict, full: dict, length: int, args) -> dict:
    """FLOP ratios full / kind (the best speed-up the FLOPs allow) for the forward and the training step."""
    dims = (args.d_model, args.ffn)

    def encoder(k):
        return args.layers * layer_flops(k, length, *dims, args.heads, args.radius, args.kernel, args.stride)

    decoder = decoder_flops(length, args.target_length, *dims, args.layers, args.vocab_size)
    kernel = args.layers * kernel_layer_flops(kind, length, *dims, args.radius)
    return {"forward_bound": encoder(full) / encoder(kind),
            "train_bound": (encoder(full) + decoder) / (encoder(kind) + decoder),
            "forward_kernel_bound": (encoder(full) / kernel if kind["type"] == "neighborhood" else None)}


def report(results: list[dict], args) -> str:
    full = {"type": "full", "name": "full"}
    by_key = {(r["name"], r["length"]): r for r in results}
    lines = [f"{'type':28s} {'n':>6s} {'mode':>7s} {'tok/s':>10s} {'peak MiB':>9s} {'x full':>7s} {'bound':>6s} "
             f"{'kernel':>7s}"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['name']:28s} {r['length']:6d} failed: {r['error']}")
            continue
        kind = parse_type(r["name"])
        b = bounds(kind, full, r["length"], args)
        reference = by_key.get(("full", r["length"]))
        for mode in ("forward", "train"):
            if f"{mode}_tokens_per_second" not in r:
                continue
            speed = r[f"{mode}_tokens_per_second"]
            ratio = (speed / reference[f"{mode}_tokens_per_second"]
                     if reference and f"{mode}_tokens_per_second" in reference else None)
            peak = r.get(f"{mode}_peak_mib")
            kernel = b["forward_kernel_bound"] if mode == "forward" else None
            lines.append(f"{r['name']:28s} {r['length']:6d} {mode:>7s} {speed:10.1f} "
                         f"{'-' if peak is None else f'{peak:.0f}':>9s} {'-' if ratio is None else f'{ratio:.2f}':>7s} "
                         f"{b[mode + '_bound']:6.2f} {'-' if kernel is None else f'{kernel:.2f}':>7s}")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    names = list(dict.fromkeys(r["name"] for r in results))
    for name in names:
        rows = sorted((r for r in results if r["name"] == name and "error" not in r), key=lambda r: r["length"])
        lengths = [r["length"] for r in rows]
        for axis, key in zip(axes, ("forward_tokens_per_second", "train_tokens_per_second", "train_peak_mib")):
            values = [r.get(key) for r in rows]
            if values and all(v is not None for v in values):
                axis.plot(lengths, values, marker="o", label=name)
    for axis, title in zip(axes, ("encoder forward, tokens/s", "training step, tokens/s", "training peak MiB")):
        axis.set(xscale="log", yscale="log", xlabel="input tokens", title=title)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def plot_sweep(results: list[dict], args, path: str) -> None:
    """Tokens/s of each swept setting at one length (the first of `--lengths`): against r for `neighborhood` and
    `led`, against kernel = stride for the convolutional types, full attention as a horizontal line; one row of panels
    per measured mode (forward, training step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    length = results[0]["length"]
    rows = [r for r in results if r["length"] == length and "error" not in r]
    modes = [m for m in ("forward", "train") if any(f"{m}_tokens_per_second" in r for r in rows)]
    figure, axes = plt.subplots(len(modes), 2, figsize=(11, 3.8 * len(modes)), squeeze=False)
    for row_axes, mode in zip(axes, modes):
        key = f"{mode}_tokens_per_second"
        panels = ((row_axes[0], ("neighborhood", "led"), "r", args.radius, "radius r (tokens each side)"),
                  (row_axes[1], ("convolutional", "convolutional_per_head"), "k", args.kernel,
                   "kernel = stride"))
        for axis, types, setting, default, label in panels:
            ticks = set()
            for type_name in types:
                points = sorted((parse_type(r["name"]).get(setting, default), r[key]) for r in rows
                                if parse_type(r["name"])["type"] == type_name and key in r)
                if points:
                    axis.plot(*zip(*points), marker="o", label=type_name)
                    ticks.update(x for x, _ in points)
            for r in rows:
                if r["name"] == "full" and key in r:
                    axis.axhline(r[key], color="grey", linestyle="--", label="full")
            axis.set(xscale="log", xlabel=label, ylabel="tokens/s", title=f"{mode}, {length} tokens")
            if ticks:  # the swept values themselves, written plainly (log-axis labels overlap at 3x10^1, 4x10^1)
                axis.set_xticks(sorted(ticks), [str(t) for t in sorted(ticks)])
                axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="1024,4096,16384", help="input lengths, comma-separated")
    p.add_argument("--types", default="full,neighborhood,convolutional,convolutional_per_head,led")
    p.add_argument("--d_model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=3072)
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (bart-base: 6)")
    p.add_argument("--vocab_size", type=int, default=50265)
    p.add_argument("--radius", type=int, default=100)
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--stride", type=int, default=3)
    p.add_argument("--target_length", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="timed runs per measurement; the fastest is kept")
    p.add_argument("--no_train", action="store_true", help="encoder forward only")
    p.add_argument("--in_process", action="store_true", help="no subprocesses (smoke runs); memory not measured")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a log-log PNG of tokens/s and peak memory against length here")
    p.add_argument("--sweep_plot", help="write a PNG of tokens/s against r and against kernel = stride (at the first "
                   "length) here, for a sweep such as --types full,neighborhood:r=50,convolutional:k=5:s=5")
    p.add_argument("--one", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    if any(n < 1 for n in lengths):
        raise ValueError(f"--lengths must be positive, got {args.lengths}.")
    if args.one:  # a child process: one measurement, one JSON line
        spec, _, length = args.one.rpartition("@")
        print(json.dumps(measure(parse_type(spec), int(length), args)))
        return []
    kinds = [parse_type(spec) for spec in args.types.split(",")]
    if "full" not in [k["name"] for k in kinds]:
        print("note: no `full` type: ratios are not printed (bounds are).", file=sys.stderr)
    results = []
    child_argv = [a for a in argv if a != "--in_process"]
    for length in lengths:
        for kind in kinds:
            result = (measure(kind, length, args) if args.in_process
                      else measure_in_subprocess(kind["name"], length, child_argv))
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    print(report(results, args))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"arguments": vars(args), "results": results}, handle, indent=2)
    if args.plot:
        plot(results, args.plot)
    if args.sweep_plot:
        plot_sweep(results, args, args.sweep_plot)
    return results


if __name__ == "__main__":
    main()
