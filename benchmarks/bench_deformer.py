#!/usr/bin/env python
"""DeFormer with cached passage states vs `BertForQuestionAnswering` (same weights): inference time and peak memory,
measured side by side in one run, with the theoretical FLOP ratio beside the measured one.

Shapes follow the DeFormer paper's SQuAD setting: passages of 320 tokens, questions of 32, batch of questions whose
passages were encoded beforehand. Random weights (speed does not depend on weight values).

    python benchmarks/bench_deformer.py                      # bert-base (k=9) and MiniLM (k=4) configs
    python benchmarks/bench_deformer.py --configs minilm --repeats 3 --batch_size 8

Time: through the benchmark harness (`benchmarks/harness.py`): the paths run round robin (BERT, cached DeFormer,
passage encoding), `--warmup` untimed rounds then `--repeats` timed ones; medians with ranges, the speed-up per round
beside its FLOP bound. Memory: each path runs once in a fresh subprocess whose
peak-RSS counter (Linux VmHWM) is reset after the model and inputs are loaded, so the figure is the extra memory the
forward pass needs (activations), printed with the resident total (weights included) beside it.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import BertConfig, BertForQuestionAnswering

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering, DeformerPassageOutput

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

CONFIGS = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, k=9),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, k=4),
}


def flops_per_layer(tokens: int, hidden: int, intermediate: int) -> float:
    """Multiply-adds x2 of one BERT layer on `tokens` tokens: projections, FFN and the two attention products (all
    `tokens^2` pairs: BERT's attention has no causal mask). Equal to torch's FLOP counter per layer (tested)."""
    return 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * tokens * tokens * hidden


def span_head_flops(tokens: int, hidden: int) -> float:
    """The question-answering head: a `hidden -> 2` linear layer (start and end logits) on every token, `4 t h`."""
    return 4 * tokens * hidden


def path_flops(q: int, p: int, hidden: int, intermediate: int, layers: int, k: int) -> tuple[float, float]:
    """Forward FLOPs of one (question, passage) pair: (BERT on q + p tokens, DeFormer from cached passage states:
    k layers on the question alone, n - k layers on q + p), both with the span head on q + p tokens. Equal to
    `harness.count_flops` on the benchmark's timed calls, `bert(pair, token_type_ids=types)` and
    `deformer(input_ids=question, passage_states=states)`, per batch row (tested); embeddings and layer norms do no
    matrix products. The span head, which the former ratio left out, moves the ratio by about 2e-5 at bert-base
    size (q 32, p 320)."""
    head = span_head_flops(q + p, hidden)
    full = layers * flops_per_layer(q + p, hidden, intermediate) + head
    cached = k * flops_per_layer(q, hidden, intermediate) + (layers - k) * flops_per_layer(q + p, hidden,
                                                                                          intermediate) + head
    return full, cached


def theoretical_ratio(q: int, p: int, hidden: int, intermediate: int, layers: int, k: int) -> float:
    """FLOPs of BERT on q+p tokens over FLOPs of DeFormer answering from cached passage states (eq. 5: k layers on
    the question alone, n-k layers jointly), span heads included ([`path_flops`])."""
    full, cached = path_flops(q, p, hidden, intermediate, layers, k)
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
    harness.set_threads(args.threads)
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


def bench(args, config: str, results: harness.Results) -> dict:
    harness.set_threads(args.threads)
    bert, deformer, k = build(config)
    question, passage, pair, types = make_inputs(args.batch_size, args.question_length, args.passage_length)
    with torch.no_grad():
        states = deformer.encode_passages(passage)
        # correctness guard: the cached path answers exactly like the uncached DeFormer on the same pairs
        full = deformer(pair, token_type_ids=types).start_logits
        cached = deformer(input_ids=question, passage_states=states).start_logits
        max_diff = float((full - cached).abs().max())
        times = harness.interleave({"bert": lambda: bert(pair, token_type_ids=types),
                                    "deformer_cached": lambda: deformer(input_ids=question, passage_states=states),
                                    "deformer_encode": lambda: deformer.encode_passages(passage)},
                                   repeats=args.repeats, warmup=args.warmup)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "states.pt")
        torch.save({"last_hidden_state": states.last_hidden_state, "attention_mask": states.attention_mask,
                    "num_decomposed_layers": states.num_decomposed_layers,
                    "model_fingerprint": states.model_fingerprint}, path)
        memory = {mode: measure_memory(args, config, mode, path) for mode in ("bert", "deformer")}
    spec = CONFIGS[config]
    params = {"config": config, "num_decomposed_layers": k, "batch_size": args.batch_size,
              "question_length": args.question_length, "passage_length": args.passage_length}
    bound_value = theoretical_ratio(args.question_length, args.passage_length, spec["hidden_size"],
                                    spec["intermediate_size"], spec["num_hidden_layers"], k)
    results.add(f"{config}: BertForQuestionAnswering", times["bert"], params=params)
    results.add(f"{config}: DeFormer, cached passages", times["deformer_cached"], params=params)
    results.add(f"{config}: DeFormer passage encoding (once)", times["deformer_encode"], params=params)
    ratio = results.add_ratio(f"{config}: speed-up of cached DeFormer over BERT", times["bert"],
                              times["deformer_cached"], harness.bound(
                                  "flop", bound_value, "BERT on q+p tokens / (k layers on q + n-k layers on q+p), per "
                                  "layer 2t(4h^2 + 2hi) + 4t^2h, span head 4th on q+p "
                                  "(bench_deformer.theoretical_ratio, DeFormer eq. 5)"),
                              params=params)
    memory_derivation = "peak RSS (VmHWM) of one forward in a fresh process minus RSS before it; one value"
    results.add(f"{config}: BERT forward extra memory", [memory["bert"]["extra_mib"]], "MiB",
                harness.bound("none", derivation=memory_derivation), params=params)
    results.add(f"{config}: DeFormer forward extra memory", [memory["deformer"]["extra_mib"]], "MiB",
                harness.bound("none", derivation=memory_derivation), params=params)
    results.extra[config] = {"cached_vs_uncached_max_abs_diff": max_diff,
                             "bert_peak_total_mib": memory["bert"]["peak_mib"],
                             "deformer_peak_total_mib": memory["deformer"]["peak_mib"]}
    return {"config": config, "k": k, "speedup": ratio, "bound": bound_value, "max_diff": max_diff,
            "memory": memory}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["bert-base", "minilm"], choices=sorted(CONFIGS))
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--question_length", type=int, default=32)
    parser.add_argument("--passage_length", type=int, default=320)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    harness.add_threads_argument(parser, default=torch.get_num_threads())
    parser.add_argument("--output", default=None, help="also write the results as JSON (harness schema) here")
    parser.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    parser.add_argument("--child", choices=["bert", "deformer"], help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--states", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if args.question_length < 3 or args.passage_length < 1 or args.question_length + args.passage_length > 512:
        raise harness.fail("--passage_length", f"question {args.question_length} + passage {args.passage_length} "
                                               "tokens must fit BERT's 512 positions (question >= 3, passage >= 1).")
    if args.repeats < 1 or args.batch_size < 1:
        raise harness.fail("--repeats" if args.repeats < 1 else "--batch_size", "must be >= 1.")
    results = harness.Results("bench_deformer", argv, settings=vars(args), note=args.note)
    for config in args.configs:
        bench(args, config, results)
    print(results.table())
    return results.write(args.output)


if __name__ == "__main__":
    main()
