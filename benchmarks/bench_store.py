#!/usr/bin/env python
"""RepresentationStore benchmark: everything measured side by side in one run, on real Disfl-QA passages.

1. Loading a batch of stored DeFormer passage states (memory-mapped safetensors, checksums checked) vs recomputing
   them with the model (tokenize, window, layers 1..k), at MiniLM (k=4) and bert-base (k=9) sizes, random weights.
2. Bytes on disk per 1,000 stored tokens for each storage dtype (fp32, fp16, bf16), both sizes.
3. `hf-readonce encode` throughput (documents/s) with 1 process and with 2 processes
   (`accelerate launch --multi_gpu --num_processes 2`, a gloo group on CPU), real MiniLM weights.
4. End-to-end answering of every `disfl_qa/validation.jsonl` question (about 6.6 per passage): from the store vs
   the plain model reading every question+passage pair (same weights, same windows, same decoding).

    python benchmarks/bench_store.py                  # all four, about 5 minutes on 2 CPU cores
    python benchmarks/bench_store.py --parts 1 2 --batch_size 16 --repeats 5

Speed does not depend on weight values, so parts 1, 2 and 4 use random weights for bert-base (no BERT-base weights
are reachable here) and MiniLM's real weights where a checkpoint is loaded.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
from hf_readonce.representations import DeformerBertAdapter, fill_store
from hf_readonce.store import RepresentationStore, bytes_per_1000_tokens, content_hash
from hf_readonce.tasks.question_answering import (
    build_features,
    load_qa_examples,
    postprocess_qa_predictions,
    predict_pairs,
)
from hf_readonce.tasks.question_answering_store import answer_from_store
from hf_readonce.weights import minilm_path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))
SIZES = {
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                   num_decomposed_layers=4),
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                      num_decomposed_layers=9),
}


def random_deformer(size: str, seed: int = 0) -> DeformerBertForQuestionAnswering:
    torch.manual_seed(seed)
    config = DeformerBertConfig(vocab_size=30522, max_position_embeddings=512, **SIZES[size])
    return DeformerBertForQuestionAnswering(config).eval()


def passages(limit: int | None = None) -> list[str]:
    examples, _ = load_qa_examples(DATA / "disfl_qa" / "validation.jsonl")
    unique = list(dict.fromkeys(e["context"] for e in examples))
    return unique[:limit] if limit else unique


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def part_load_vs_recompute(tokenizer, batch_size: int, repeats: int, results: dict) -> None:
    texts = passages(batch_size)
    hashes = [content_hash(t) for t in texts]
    for size in SIZES:
        model = random_deformer(size)
        adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128, batch_size=batch_size)
        with tempfile.TemporaryDirectory() as tmp:
            store = RepresentationStore(tmp)
            fill_store(adapter, store, texts, dtype="float16")
            fingerprint, settings = adapter.fingerprint(), adapter.settings()
            tokens = sum(adapter.num_tokens(t) for t in store.get_many(fingerprint, settings, hashes))

            def load(verify=True, fingerprint=fingerprint, settings=settings):
                fresh = RepresentationStore(tmp, readonly=True)  # cold index, memory-mapped reads
                tensors = fresh.get_many(fingerprint, settings, hashes, verify=verify)
                states = [t["hidden_states"].float() for t in tensors]  # what the model consumes
                torch.nn.utils.rnn.pad_sequence(states, batch_first=True)

            def recompute(adapter=adapter):
                adapter.encode(texts)

            recompute()  # warm-up
            load()
            timings = {"recompute": [], "load": [], "load_no_verify": []}
            for _ in range(repeats):  # interleaved
                for name, fn in (("recompute", recompute), ("load", load),
                                 ("load_no_verify", lambda: load(False))):
                    start = time.perf_counter()
                    fn()
                    timings[name].append(time.perf_counter() - start)
        t = {name: statistics.median(v) for name, v in timings.items()}
        row = {"documents": len(texts), "tokens": tokens, "recompute_s": t["recompute"], "load_s": t["load"],
               "load_no_verify_s": t["load_no_verify"], "ratio": t["recompute"] / t["load"],
               "ratio_no_verify": t["recompute"] / t["load_no_verify"]}
        results.setdefault("load_vs_recompute", {})[size] = row
        print(f"[1] {size:9s} batch of {len(texts)} passages ({tokens} tokens): recompute {t['recompute'] * 1e3:8.1f} ms"
              f" | load {t['load'] * 1e3:6.1f} ms (checksums) -> {row['ratio']:6.1f}x"
              f" | load {t['load_no_verify'] * 1e3:6.1f} ms (no checksums) -> {row['ratio_no_verify']:6.1f}x",
              flush=True)


def part_bytes(tokenizer, results: dict) -> None:
    texts = passages(50)
    for size in SIZES:
        model = random_deformer(size)
        adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128)
        for dtype in ("float32", "float16", "bfloat16"):
            with tempfile.TemporaryDirectory() as tmp:
                store = RepresentationStore(tmp)
                fill_store(adapter, store, texts, dtype=dtype)
                per_1000 = bytes_per_1000_tokens(store, adapter.fingerprint(), adapter.settings())
            results.setdefault("bytes_per_1000_tokens", {}).setdefault(size, {})[dtype] = per_1000
            print(f"[2] {size:9s} {dtype:8s}: {per_1000 / 1024:8.1f} KiB per 1,000 tokens (hidden "
                  f"{model.config.hidden_size})", flush=True)


def _encode_run(command: list[str], docs: Path, store: Path, checkpoint: Path) -> tuple[float, float, int]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    args = ["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
            "--max-passage-length", "320", "--doc-stride", "128"]
    start = time.perf_counter()
    run = subprocess.run(command + args, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-2000:])
    seconds = [float(s) for s in re.findall(r"encoded \d+ document\(s\) \(\d+ tokens\) in ([\d.]+) s", run.stdout)]
    encoded = sum(int(n) for n in re.findall(r"encoded (\d+) document", run.stdout))
    return wall, max(seconds), encoded


def part_encode_processes(results: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        checkpoint = tmp / "minilm-deformer"
        model = DeformerBertForQuestionAnswering.from_pretrained(minilm_path(), num_decomposed_layers=4)
        model.save_pretrained(checkpoint)
        AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(checkpoint)
        docs = tmp / "docs.jsonl"
        docs.write_text("".join(json.dumps({"id": str(i), "context": t}) + "\n" for i, t in enumerate(passages())))
        runs = {
            "1 process": [sys.executable, "-m", "hf_readonce.cli"],
            "2 processes": [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m",
                            "hf_readonce.cli"],
        }
        for name, command in runs.items():
            wall, seconds, encoded = _encode_run(command, docs, tmp / name.replace(" ", "_"), checkpoint)
            row = {"documents": encoded, "encode_s": seconds, "wall_s": wall, "docs_per_s": encoded / seconds,
                   "docs_per_s_wall": encoded / wall}
            results.setdefault("encode_throughput", {})[name] = row
            print(f"[3] encode, {name:11s}: {encoded} documents, {row['docs_per_s']:6.2f} docs/s while encoding "
                  f"({seconds:.1f} s), {row['docs_per_s_wall']:6.2f} docs/s wall time with start-up ({wall:.1f} s)",
                  flush=True)


def part_answer(tokenizer, results: dict, limit: int | None) -> None:
    examples, _ = load_qa_examples(DATA / "disfl_qa" / "validation.jsonl", limit=limit)
    model = DeformerBertForQuestionAnswering.from_pretrained(minilm_path(), num_decomposed_layers=4).eval()
    kwargs = dict(max_question_length=64, max_passage_length=320, doc_stride=128)
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128)
    with tempfile.TemporaryDirectory() as tmp:
        store = RepresentationStore(tmp)
        start = time.perf_counter()
        stats = fill_store(adapter, store, [e["context"] for e in examples], dtype="float16")
        encode_s = time.perf_counter() - start
        with torch.no_grad():
            start = time.perf_counter()
            features, windows, _ = build_features(examples, tokenizer, **kwargs)
            plain = postprocess_qa_predictions(examples, features, windows, predict_pairs(model, features, windows))
            plain_s = time.perf_counter() - start
            start = time.perf_counter()
            stored = answer_from_store(model, tokenizer, RepresentationStore(tmp, readonly=True), examples,
                                       max_question_length=64)
            store_s = time.perf_counter() - start
    agree = sum(plain[k] == stored[k] for k in plain) / len(plain)
    n, p = len(examples), stats.encoded
    row = {"questions": n, "passages": p, "plain_s": plain_s, "store_s": store_s, "encode_s": encode_s,
           "plain_qps": n / plain_s, "store_qps": n / store_s, "speedup": plain_s / store_s,
           "speedup_including_encode": plain_s / (store_s + encode_s), "same_answer_fraction": agree}
    results["answer"] = row
    print(f"[4] answer {n} questions over {p} passages ({n / p:.1f} per passage): plain model {row['plain_qps']:.1f} "
          f"q/s ({plain_s:.1f} s) | from the store {row['store_qps']:.1f} q/s ({store_s:.1f} s) -> "
          f"{row['speedup']:.2f}x; with the one-time encode ({encode_s:.1f} s) {row['speedup_including_encode']:.2f}x; "
          f"same answer for {agree:.1%} (fp16 storage)", flush=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--batch_size", type=int, default=16, help="passages per batch in part 1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max_questions", type=int, default=None, help="limit part 4 (default: all)")
    parser.add_argument("--output", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    results = {"torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}
    print(f"torch {torch.__version__}, {results['torch_threads']} threads, {results['cpu_count']} CPUs", flush=True)
    if 1 in args.parts:
        part_load_vs_recompute(tokenizer, args.batch_size, args.repeats, results)
    if 2 in args.parts:
        part_bytes(tokenizer, results)
    if 3 in args.parts:
        part_encode_processes(results)
    if 4 in args.parts:
        part_answer(tokenizer, results, args.max_questions)
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
