#!/usr/bin/env python
"""Speed and memory of LongDoc BART's encoder attention types against full attention and transformers' LED:
encoder forward and one training step at 1k, 4k and 16k input tokens, bart-base dimensions,
random weights, 2 threads. Every ratio to full attention is printed beside its FLOP bound, computed from the
dimensions (the feed-forward and projection FLOPs stay, so the bound is well below n / (2r + 1)).

    PYTHONPATH=src python benchmarks/bench_longdoc.py                       # the full table (long: hours on CPU)
    PYTHONPATH=src python benchmarks/bench_longdoc.py --lengths 64,128 --d_model 32 --heads 2 --ffn 64 \\
        --layers 1 --radius 4 --in_process                                  # smoke run, seconds

Types (`--types`, comma-separated): `full`, `neighborhood`, `convolutional`, `convolutional_per_head`,
`neighborhood_convolutional`, `led`, each optionally with settings for a sweep: `neighborhood:r=50`,
`convolutional:k=5:s=5`, `led:r=50` (LED's `attention_window` is 2r: r tokens on each side, neighborhood's reach).

Measured per (type, length): `forward` = encoder forward under `torch.no_grad()` (eval); `train` = forward and
backward of the whole model with a `--target_length`-token summary (loss on the LM head; no optimizer step).
Timing goes through the benchmark harness (`benchmarks/harness.py`): at each length every type's model is built in
one process and the types run round robin (full, type 2, type 3, ..., full, type 2, ...), one untimed warm-up round
then `--repeats` (5) timed rounds, each call timed by `torch.utils.benchmark`; a ratio to full attention is formed
per round and reported as median [min-max] over the rounds. Memory: the peak resident set of each type's first
call (the warm-up call; with `--warmup 0` the first timed one) (Linux VmHWM, reset through `/proc/self/clear_refs` just before the call) minus the resident set at that
moment, one process per length with glibc's freed-block cache off (`MALLOC_MMAP_THRESHOLD_=131072
MALLOC_TRIM_THRESHOLD_=0`, so RSS follows the memory actually held); with `--in_process` (smoke runs) everything
runs in this process and memory is not reported. Lengths above `--max_positions` (16384, the longest position
table the benchmark builds) and unknown types exit with a message naming the option.

FLOP bounds: per encoder layer `8nd^2` (projections) `+ 4ndf` (feed-forward) `+` attention: full `4n^2d`,
neighborhood `4n(2r+1)d` (the band; the blocked kernel computes `4 ceil(n/b) b (b+2r) d`, b =
`default_neighborhood_block_size(r)`, printed as `kernel bound`),
convolutional `4m^2d + 8mkd^2/g` (m = ceil(n/s) compressed positions; conv on q, k, v and the deconvolution,
g = 1 shared, g = heads per head), neighborhood-convolutional `4m(2ceil(r/s)+1)d + 8mkd^2`; LED as neighborhood
(its sliding-chunk kernel on the input padded to a multiple of 2r computes more: `kernel bound`).
Training adds the decoder (self-attention over the summary, cross-attention reading the n encoder states, LM head)
at 3x the forward FLOPs for every part.

Results: `--json` writes the harness schema (median, min, max and every repeat of each time, ratio and peak; the
FLOP bound and its derivation beside every ratio; hardware, versions, the exact command).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

TYPES = ("full", "neighborhood", "convolutional", "convolutional_per_head", "neighborhood_convolutional", "led")


def parse_type(spec: str) -> dict:
    """`"neighborhood:r=50"` -> `{"type": "neighborhood", "r": 50, "name": "neighborhood:r=50"}`.

    Raises:
        harness.BenchmarkInputError: (a `SystemExit` with status 2) an unknown type or setting, naming `--types`.
    """
    name, *settings = spec.split(":")
    if name not in TYPES:
        raise harness.fail("--types", f"unknown attention type {name!r}; known: {', '.join(TYPES)}.")
    out = {"type": name, "name": spec}
    for setting in settings:
        key, _, value = setting.partition("=")
        if key not in ("r", "k", "s") or not value.isdigit() or int(value) < 1:
            raise harness.fail("--types", f"bad setting {setting!r} in {spec!r} (r=INT, k=INT, s=INT, each >= 1).")
        out[key] = int(value)
    return out


def layer_flops(kind: dict, n: int, d: int, f: int, heads: int, radius: int, kernel: int, stride: int) -> float:
    """Forward FLOPs of one encoder layer of `kind` at n tokens (see the module docstring): the *band* bound, what
    an ideal kernel computes. Matrix products only (2 FLOPs a multiply-add; norms, softmax and biases left out, as
    in torch's FLOP counter).

    Checked against `harness.count_flops` on the encoder forward the benchmark times
    (`tests/models/longdoc_bart/test_bench_longdoc.py`): `full`, `convolutional` and `convolutional_per_head`
    equal the counter exactly. `neighborhood`, `neighborhood_convolutional` and `led` are idealised here, each query
    scoring only its `2r + 1` band keys; their kernels compute more, which [`kernel_layer_flops`] counts (equal to
    the counter). At d 32, ffn 48, 2 layers, r 5, 64 tokens the counter finds 12.2 % more than this bound for
    `neighborhood` (blocks of 16 queries: 26 keys a query for the band's 11), 4.6 % more for
    `neighborhood_convolutional` (stride 3) and 14.5 % more for LED (sliding chunks of 2w, and 64 tokens padded to
    70); at bart-base dimensions, r = 100, 4,096 tokens, `neighborhood`'s kernel computes 0.6 % more than its band.
    """
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


def blocked_neighborhood_pairs(queries: int, radius: int) -> int:
    """(query, key) pairs the blocked neighborhood kernel (`neighborhood_attention_forward`, not causal, no KV
    cache) scores for q queries at radius r: `ceil(q / b) * b` query rows (the last block zero-padded) times
    `b + 2 min(r, q)` keys, b = `min(default_neighborhood_block_size(min(r, q)), q)`. Its mask is explicit, so the
    kernel scores every one of these pairs, band or not."""
    from hf_readonce.models.longdoc_bart.modeling_longdoc_bart import default_neighborhood_block_size

    r = min(radius, queries)
    block = min(default_neighborhood_block_size(r), queries)
    return math.ceil(queries / block) * block * (block + 2 * r)


def kernel_layer_flops(kind: dict, n: int, d: int, f: int, heads: int, radius: int, kernel: int,
                       stride: int) -> float:
    """FLOPs one encoder layer of `kind` actually computes at n tokens: equal to `harness.count_flops` on the
    encoder forward (tested). `neighborhood` scores [`blocked_neighborhood_pairs`]`(n, r)` (the former formula,
    `4n min(b + 2r, n) d`, missed the zero-padded rows of the last block when b does not divide n, and took
    b = 32 for r >= 32 even when r > n); `neighborhood_convolutional` the same over its m = ceil(n / s) compressed
    positions at radius `ceil(r / s)`, plus its (de)convolutions; LED (Longformer's sliding chunks, w = r keys each
    side) runs on its input padded to N = a multiple of 2w tokens: projections and feed-forward on N tokens,
    `(N / w - 1) 4w^2` score pairs and `3wN` value pairs; every other type: [`layer_flops`] (already exact)."""
    r, k, s = kind.get("r", radius), kind.get("k", kernel), kind.get("s", stride)
    t = kind["type"]
    dense = 8 * n * d * d + 4 * n * d * f
    if t == "neighborhood":
        return dense + 4 * blocked_neighborhood_pairs(n, r) * d
    if t == "neighborhood_convolutional":
        m = math.ceil(n / s)
        return dense + 8 * m * k * d * d + 4 * blocked_neighborhood_pairs(m, math.ceil(r / s)) * d
    if t == "led":
        padded = math.ceil(n / (2 * r)) * 2 * r
        pairs = (padded // r - 1) * 4 * r * r + 3 * r * padded
        return 8 * padded * d * d + 4 * padded * d * f + 2 * pairs * d
    return layer_flops(kind, n, d, f, heads, radius, kernel, stride)


def decoder_flops(n: int, t: int, d: int, f: int, layers: int, vocab: int) -> float:
    """Forward FLOPs of LongDoc BART's decoder for a t-token summary reading n encoder states, with the LM head: per
    layer self-attention projections `8td^2`, causal self-attention `2t(t + 1)d` (SDPA with `is_causal`, which
    skips the pairs above the diagonal; the former `4t^2d` counted them), cross-attention query and output
    projections `4td^2`, key and value projections of the n encoder states `4nd^2`, cross-attention `4tnd`,
    feed-forward `4tdf`; LM head `2tdV`. Equal to `harness.count_flops` on the training call's forward minus its
    encoder (tested). LED's decoder scores all t^2 self-attention pairs (an explicit mask), `2t(t - 1)d` a layer
    more, which its training bound leaves out (0.4 % of its decoder at d 32, 6 summary tokens, 64 input tokens)."""
    per_layer = 8 * t * d * d + 2 * t * (t + 1) * d + 4 * t * d * d + 4 * n * d * d + 4 * t * n * d + 4 * t * d * f
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


def measure_length(kinds: list[dict], length: int, args) -> dict:
    """Every type at one length, in this process: the types run round robin through `harness.interleave`
    (`--warmup` untimed rounds, then `--repeats` timed ones); each type's first call measures its peak memory
    (unless `--in_process`).

    Returns:
        `{"length", "times": {mode: {name: [seconds per round]}}, "peaks": {mode: {name: MiB or None}}}`.
    """
    import torch

    harness.set_threads(args.threads)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, args.vocab_size, (args.batch, length), generator=generator)
    mask = torch.ones_like(ids)
    labels = torch.randint(3, args.vocab_size, (args.batch, args.target_length), generator=generator)
    models = {kind["name"]: build(kind, args, length) for kind in kinds}
    out = {"length": length, "times": {}, "peaks": {}}
    modes = ["forward"] + ([] if args.no_train else ["train"])
    for mode in modes:
        calls = {}
        for name, model in models.items():
            if mode == "forward":
                model.eval()
                encoder = model.get_encoder()

                def call(encoder=encoder):
                    with torch.no_grad():
                        encoder(input_ids=ids, attention_mask=mask)
            else:
                model.train()

                def call(model=model):
                    model.zero_grad(set_to_none=True)
                    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            calls[name] = call
        peaks, base = {}, {}

        def before(name, base=base, peaks=peaks):  # the first call of each type (a warm-up call, or round 1 with --warmup 0)
            if name not in peaks:
                base[name] = reset_peak()

        def after(name, round_, peaks=peaks, base=base):
            if name not in peaks:
                peaks[name] = None if args.in_process else peak_mib() - base[name]

        if args.memory_only:  # one call per type, untimed: its peak memory only
            for name, call in calls.items():
                before(name)
                call()
                after(name, 0)
            out["times"][mode] = {}
        else:
            out["times"][mode] = harness.interleave(calls, repeats=args.repeats, warmup=args.warmup, before=before,
                                                    after=after)
        out["peaks"][mode] = peaks
        for model in models.values():
            model.zero_grad(set_to_none=True)
    return out


def measure_in_subprocess(length: int, argv: list[str]) -> dict:
    command = [sys.executable, __file__, *argv, "--one", str(length)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"the measurement at {length} tokens failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


KERNEL_TYPES = ("neighborhood", "neighborhood_convolutional", "led")
BOUND_DERIVATION = ("encoder FLOPs of full / of this type at bart-like dimensions (--d_model, --ffn, --layers): per "
                    "layer 8nd^2 (projections) + 4ndf (feed-forward) + attention: full 4n^2d, neighborhood/LED "
                    "4n(2r+1)d, convolutional 4m^2d + 8mkd^2/g (m = ceil(n/s), g = 1 shared or heads per head), "
                    "neighborhood-convolutional 4m(2ceil(r/s)+1)d + 8mkd^2; training adds the decoder and LM head, "
                    "backward counted as 2x forward (bench_longdoc.layer_flops, decoder_flops)")


def bounds(kind: dict, full: dict, length: int, args) -> dict:
    """FLOP ratios full / kind (the best speed-up the FLOPs allow) for the forward and the training step, from
    [`layer_flops`] (the band bound) and [`decoder_flops`]; `forward_kernel_bound` from [`kernel_layer_flops`]
    (what the kernel computes) for the types whose kernel computes more than their band (`neighborhood`,
    `neighborhood_convolutional`, `led`), else None.

    The training bound counts the backward as 2x the forward for every part, so the factor 3 cancels. torch's
    counter finds a little more: its SDPA backward is 2.5x the forward (the scores are recomputed), so at d 32,
    ffn 48, 2 + 2 layers, 64 tokens a training step counts 3.16x its forward for `full`, 3.09x for
    `neighborhood`, 3.03x for `convolutional`, 3.00x for LED (no SDPA); left out."""
    dims = (args.d_model, args.ffn)
    settings = (args.heads, args.radius, args.kernel, args.stride)

    def encoder(k):
        return args.layers * layer_flops(k, length, *dims, *settings)

    decoder = decoder_flops(length, args.target_length, *dims, args.layers, args.vocab_size)
    kernel = args.layers * kernel_layer_flops(kind, length, *dims, *settings)
    return {"forward_bound": encoder(full) / encoder(kind),
            "train_bound": (encoder(full) + decoder) / (encoder(kind) + decoder),
            "forward_kernel_bound": (encoder(full) / kernel if kind["type"] in KERNEL_TYPES else None)}


def record(measured: list[dict], kinds: list[dict], args, argv: list[str]) -> harness.Results:
    """The harness results of every length: per mode and type the seconds per call, the ratio to full attention
    (per round) with its FLOP bound, and the warm-up call's peak memory."""
    results = harness.Results("bench_longdoc", argv, settings=vars(args), note=args.note)
    full = {"type": "full", "name": "full"}
    for entry in measured:
        length = entry["length"]
        for mode, times in entry["times"].items():
            for kind in kinds:
                name = kind["name"]
                params = {"type": name, "length": length, "mode": mode, "batch": args.batch}
                if name in times:
                    results.add(f"{mode} {name} @{length}", times[name], "s", params=params)
                peak = entry["peaks"][mode].get(name)
                if peak is not None:
                    results.add(f"{mode} peak {name} @{length}", [peak], "MiB", harness.bound(
                        "none", derivation="peak RSS (VmHWM) of the type's first call minus RSS before it; one value"),
                        params=params)
                if name != "full" and "full" in times and name in times:
                    b = bounds(kind, full, length, args)
                    derivation = BOUND_DERIVATION
                    if mode == "forward" and b["forward_kernel_bound"] is not None:
                        derivation += ("; the kernel computes more than the band (blocked neighborhood kernel: "
                                       "ceil(n/b) b (b+2r) pairs, b = 32 (r >= 32) else 16; LED: sliding chunks on "
                                       "the input padded to a multiple of 2r; bench_longdoc.kernel_layer_flops): "
                                       f"kernel bound {b['forward_kernel_bound']:.3f}x")
                    results.add_ratio(f"{mode} {name} / full @{length}", times["full"], times[name],
                                      harness.bound("flop", b[f"{mode}_bound"], derivation),
                                      params={**params, "kernel_bound": b["forward_kernel_bound"]
                                              if mode == "forward" else None})
    results.extra["tokens_per_second_median"] = {
        f"{mode} {k['name']} @{e['length']}": args.batch * e["length"] / statistics.median(e["times"][mode][k["name"]])
        for e in measured for mode in e["times"] for k in kinds if k["name"] in e["times"][mode]}
    return results


def as_rows(measured: list[dict], kinds: list[dict], args) -> list[dict]:
    """Per (type, length): median tokens/s and peak MiB per mode (the plots' input)."""
    rows = []
    for entry in measured:
        for kind in kinds:
            row = {"name": kind["name"], "length": entry["length"]}
            for mode, times in entry["times"].items():
                if kind["name"] not in times:
                    continue
                row[f"{mode}_tokens_per_second"] = args.batch * entry["length"] / statistics.median(times[kind["name"]])
                row[f"{mode}_peak_mib"] = entry["peaks"][mode].get(kind["name"])
            rows.append(row)
    return rows


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
    harness.add_threads_argument(p, default=2)
    p.add_argument("--repeats", type=int, default=harness.MIN_REPEATS,
                   help="timed rounds after the warm-up round (median, min, max and every value are reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first; 0: the first timed round also "
                   "carries first-call costs (negligible next to a 16k-token forward of tens of seconds)")
    p.add_argument("--memory_only", action="store_true", help="one untimed call per type: peak memory only (for "
                   "lengths whose timed rounds do not fit the time at hand)")
    p.add_argument("--max_positions", type=int, default=16384,
                   help="the longest input the benchmark builds a position table for; longer --lengths are refused")
    p.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    p.add_argument("--no_train", action="store_true", help="encoder forward only")
    p.add_argument("--in_process", action="store_true", help="no subprocesses (smoke runs); memory not measured")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a log-log PNG of tokens/s and peak memory against length here")
    p.add_argument("--sweep_plot", help="write a PNG of tokens/s against r and against kernel = stride (at the first "
                   "length) here, for a sweep such as --types full,neighborhood:r=50,convolutional:k=5:s=5")
    p.add_argument("--one", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        raise harness.fail("--lengths", f"comma-separated integers expected, got {args.lengths!r}.") from None
    if any(n < 1 for n in lengths):
        raise harness.fail("--lengths", f"must be positive, got {args.lengths}.")
    if max(lengths) > args.max_positions:
        raise harness.fail("--lengths", f"{max(lengths)} tokens exceed the model's {args.max_positions} positions "
                                        "(--max_positions).")
    if args.repeats < 1:
        raise harness.fail("--repeats", f"must be >= 1, got {args.repeats}.")
    if args.warmup < 0:
        raise harness.fail("--warmup", f"must be >= 0, got {args.warmup}.")
    kinds = [parse_type(spec) for spec in args.types.split(",")]
    if args.one:  # a child process: every type at one length, one JSON line
        print(json.dumps(measure_length(kinds, int(args.one), args)))
        return {}
    if "full" not in [k["name"] for k in kinds]:
        print("note: no `full` type: ratios are not recorded.", file=sys.stderr)
    else:  # full first: the baseline leads every round
        kinds = sorted(kinds, key=lambda k: k["name"] != "full")
    child_argv = [a for a in argv if a != "--in_process"]
    measured = []
    for length in lengths:
        entry = measure_length(kinds, length, args) if args.in_process else measure_in_subprocess(length, child_argv)
        measured.append(entry)
        print(json.dumps({"length": length, "peaks": entry["peaks"]}), file=sys.stderr, flush=True)
    results = record(measured, kinds, args, argv)
    print(results.table())
    doc = results.write(args.json)
    rows = as_rows(measured, kinds, args)
    if args.plot:
        plot(rows, args.plot)
    if args.sweep_plot:
        plot_sweep(rows, args, args.sweep_plot)
    return doc


if __name__ == "__main__":
    main()
