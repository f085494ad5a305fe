#!/usr/bin/env python
"""Peak memory of the recurrent Llama at SmolLM2-135M size (random weights): bounded by the window, not the stream.

Two measurements, each point in a fresh subprocess (the model is built, its gradient buffers
allocated where a step trains, the Linux peak-RSS counter VmHWM is reset, then the measured work runs; reported:
the peak resident MiB and the increment over the loaded model):

1. one training step (forward + backward) with gradient checkpointing and Trainer's default `logits_to_keep=0`, on
   1 and on 20 windows of `--window_size` tokens. Goal: 20 windows within 1.3x of 1 window.
2. `evaluate_perplexity` of a document of 16k and of 160k tokens. Goal: 160k within 1.3x of 16k.

    python benchmarks/bench_recurrent_memory.py                 # SmolLM2-135M size (not run in this project yet)
    python benchmarks/bench_recurrent_memory.py --size tiny     # a few seconds: checks the script only

glibc's freed-block cache is turned off (`MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=0`) so that RSS follows
the memory actually held (see `bench_recurrent.py`).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_readonce.models.recurrent.convert_to_recurrent import to_recurrent
from hf_readonce.tasks.perplexity import evaluate_perplexity

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

SIZES = {
    # SmolLM2-135M's architecture (HuggingFaceTB/SmolLM2-135M config.json)
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True),
    "tiny": dict(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True),
}
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(field)


def _model(size: str, window_size: int, overlap: int):
    torch.manual_seed(0)
    return to_recurrent(LlamaForCausalLM(LlamaConfig(**SIZES[size])), window_size=window_size,
                        window_overlap=overlap)


def point(kind: str, amount: int, size: str, window_size: int, overlap: int) -> dict:
    """One measurement in this process: `kind` "train" (`amount` windows) or "eval" (`amount` tokens)."""
    model = _model(size, window_size, overlap)
    vocab = model.config.vocab_size
    if kind == "train":
        model.train()
        model.gradient_checkpointing_enable()
        for parameter in model.parameters():
            parameter.grad = torch.zeros_like(parameter)
        x = torch.randint(0, vocab, (1, window_size + (amount - 1) * (window_size - overlap)))
    else:
        model.eval()
        x = torch.randint(0, vocab, (amount,))
    loaded = _kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    if kind == "train":
        out = model(x, labels=x)  # logits_to_keep=0, Trainer's default
        out.loss.backward()
        value = float(out.loss)
    else:
        value = evaluate_perplexity(model, x, window_size=window_size, window_overlap=overlap).token_perplexity
    peak = _kib("VmHWM")
    return {"kind": kind, "amount": amount, "peak_mib": round(peak / 1024, 1),
            "increment_mib": round((peak - loaded) / 1024, 1), "value": value}


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="smollm2")
    parser.add_argument("--window_size", type=int, default=None, help="default: 256 (smollm2), 32 (tiny)")
    parser.add_argument("--overlap", type=int, default=0)
    parser.add_argument("--train_windows", type=int, nargs=2, default=[1, 20])
    parser.add_argument("--eval_tokens", type=int, nargs=2, default=None, help="default: 16384 163840 (tiny: /16)")
    parser.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    parser.add_argument("--output", default=None, help="write the results (harness schema) here")
    parser.add_argument("--_point", nargs=2, default=None, help=argparse.SUPPRESS)
    harness.add_threads_argument(parser)
    args = parser.parse_args(argv)
    harness.set_threads(args.threads)
    window = args.window_size or (256 if args.size == "smollm2" else 32)
    eval_tokens = args.eval_tokens or ([16384, 163840] if args.size == "smollm2" else [1024, 10240])
    if args._point:
        print(json.dumps(point(args._point[0], int(args._point[1]), args.size, window, args.overlap)))
        return {}
    if window < 2 or window > SIZES[args.size]["max_position_embeddings"]:
        raise harness.fail("--window_size", f"{window} tokens: the {args.size} model has "
                                            f"{SIZES[args.size]['max_position_embeddings']} positions.")
    if not 0 <= args.overlap < window:
        raise harness.fail("--overlap", f"must be in [0, --window_size), got {args.overlap}.")
    results = harness.Results("bench_recurrent_memory", argv, settings=vars(args), note=args.note)
    results.extra.update({"size": args.size, "window_size": window, "overlap": args.overlap, "points": []})
    derivation = "peak RSS (VmHWM) in a fresh process after the model is loaded; one value per point"
    for kind, amounts in (("train", args.train_windows), ("eval", eval_tokens)):
        for amount in amounts:
            command = [sys.executable, __file__, "--size", args.size, "--window_size", str(window), "--overlap",
                       str(args.overlap), "--_point", kind, str(amount)]
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **ALLOCATOR})
            if done.returncode:
                raise RuntimeError(f"the {kind} point at {amount} failed: {done.stderr.strip()[-2000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            results.extra["points"].append(row)
            unit = "windows" if kind == "train" else "tokens"
            results.add(f"{kind} peak at {amount} {unit}", [row["peak_mib"]], "MiB",
                        harness.bound("none", derivation=derivation), params={"kind": kind, unit: amount})
            print(f"{kind} {amount}: peak {row['peak_mib']} MiB, increment {row['increment_mib']} MiB", flush=True)
        small, large = results.extra["points"][-2:]
        ratio = large["peak_mib"] / small["peak_mib"]
        results.add(f"{kind} peak ratio {amounts[1]} / {amounts[0]}", [ratio], "ratio", harness.bound(
            "memory", 1.0, "the recurrence holds one window's activations whatever the stream's length: the "
            "bound is 1.0 (goal <= 1.3)"), params={"kind": kind})
        print(f"{kind}: peak ratio {ratio:.3f} (goal <= 1.3)", flush=True)
    return results.write(args.output)


if __name__ == "__main__":
    main()
