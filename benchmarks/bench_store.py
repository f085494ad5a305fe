#!/usr/bin/env python
"""RepresentationStore benchmark: everything measured side by side in one run, on real Disfl-QA passages.

1. Loading a batch of stored DeFormer passage states (safetensors shards, checksums checked) vs recomputing
   them with the model (tokenize, window, layers 1..k), at MiniLM (k=4) and bert-base (k=9) sizes, random weights:
   loads warm (shards in the page cache), cold (every store file fsynced and dropped from the page cache with
   `posix_fadvise(POSIX_FADV_DONTNEED)` just before) and warm without checksums, round robin with the recompute
   through `benchmarks/harness.py` (one warm-up round, `--repeats` rounds; ratios per round).
2. Bytes on disk per 1,000 stored tokens for each storage dtype (fp32, fp16, bf16), both sizes.
3. `hf-readonce encode` throughput (documents/s) with 1 process and with 2 processes
   (`accelerate launch --multi_gpu --num_processes 2`, a gloo group on CPU), real MiniLM weights.
4. End-to-end answering of every `disfl_qa/validation.jsonl` question (about 6.6 per passage): from the store vs
   the plain model reading every question+passage pair (same weights, same windows, same decoding).

    python benchmarks/bench_store.py                  # all four, about 5 minutes on 2 CPU cores
    python benchmarks/bench_store.py --parts 1 2 --batch_size 16 --repeats 5
    python benchmarks/bench_store.py --parts 3 4 --flops_only  # FLOP bounds of parts 3 and 4, no timing

Speed does not depend on weight values, so parts 1, 2 and 4 use random weights for bert-base (no BERT-base weights
are reachable here) and MiniLM's real weights where a checkpoint is loaded.
"""

import argparse
import gc
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

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


def part_load_vs_recompute(tokenizer, batch_size: int, repeats: int, results: harness.Results) -> None:
    """Recompute a batch of passages vs load it from the store, round robin: warm (page cache holding the shards),
    cold (every store file fsynced and dropped from the page cache just before, `harness.drop_page_cache`), and
    warm without checksums. Each load opens the store afresh (index read, shards opened on first use)."""
    texts = passages(batch_size)
    hashes = [content_hash(t) for t in texts]
    for size in SIZES:
        model = random_deformer(size)
        adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128, batch_size=batch_size)
        with tempfile.TemporaryDirectory(prefix="bench_store_", dir=REPO) as tmp:  # not a tmpfs: pages can drop
            store = RepresentationStore(tmp)
            fill_store(adapter, store, texts, store_dtype="float16")
            fingerprint, settings = adapter.fingerprint(), adapter.settings()
            tokens = sum(adapter.num_tokens(t) for t in store.get_many(fingerprint, settings, hashes))
            del store
            gc.collect()

            def load(verify=True, fingerprint=fingerprint, settings=settings):
                fresh = RepresentationStore(tmp, readonly=True)  # cold index, shards opened anew
                tensors = fresh.get_many(fingerprint, settings, hashes, verify=verify)
                states = [t["hidden_states"].float() for t in tensors]  # what the model consumes
                torch.nn.utils.rnn.pad_sequence(states, batch_first=True)

            resident = []

            def before(name, tmp=tmp, resident=resident):
                if name.endswith("cold"):
                    gc.collect()  # the shards an earlier load opened are closed
                    if not harness.drop_page_cache([tmp]):
                        raise RuntimeError("os.posix_fadvise is missing: cold reads cannot be measured here.")
                    resident.append(harness.cached_fraction([tmp]))

            times = harness.interleave({"recompute": lambda adapter=adapter: adapter.encode(texts),
                                        "load warm": load, "load cold": load,
                                        "load warm, no checksums": lambda: load(False)},
                                       repeats=repeats, warmup=1, before=before)
        params = {"size": size, "documents": len(texts), "tokens": tokens, "store_dtype": "float16"}
        derivation = ("no FLOP bound: a load does no model FLOPs; its floor is the bytes read (tokens x hidden x 2 "
                      "at fp16) over the storage's bandwidth, plus hashing for checksums")
        for name, values in times.items():
            results.add(f"[1] {size}: {name}", values, params=params)
        for name in ("load warm", "load cold", "load warm, no checksums"):
            results.add_ratio(f"[1] {size}: recompute / {name}", times["recompute"], times[name],
                              harness.bound("memory", tokens * model.config.hidden_size * 2, derivation),
                              params=params)
        results.extra.setdefault("page_cache_resident_fraction_after_drop", {})[size] = resident
        print(f"[1] {size:9s} batch of {len(texts)} passages ({tokens} tokens): " + ", ".join(
            f"{name} {statistics.median(v) * 1e3:.1f} ms" for name, v in times.items()), flush=True)


def part_bytes(tokenizer, results: harness.Results) -> None:
    texts = passages(50)
    for size in SIZES:
        model = random_deformer(size)
        adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128)
        for dtype in ("float32", "float16", "bfloat16"):
            with tempfile.TemporaryDirectory() as tmp:
                store = RepresentationStore(tmp)
                fill_store(adapter, store, texts, store_dtype=dtype)
                per_1000 = bytes_per_1000_tokens(store, adapter.fingerprint(), adapter.settings())
            results.extra.setdefault("bytes_per_1000_tokens", {}).setdefault(size, {})[dtype] = per_1000
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


def encode_flops(limit: int | None = None) -> dict:
    """The FLOPs of part 3's two runs, counted by `harness.count_flops` in this process (nothing timed): the
    adapter `hf-readonce encode` builds (MiniLM, k = 4, windows of 320 tokens, stride 128, 32 windows per batch) fills
    a fresh store with every passage as one process, then with each of 2 processes' shares (`fill_store`'s
    `rank` / `num_processes`, the split the CLI uses under `accelerate launch`).

    Args:
        limit (`int`, *optional*): encode only the first `limit` unique passages (default: all of them, as part 3).

    Returns:
        `dict`: `documents`, `flops_1_process` (FLOPs), `flops_2_processes` (FLOPs of rank 0 and rank 1, a list),
        `flop_ratio` (one process's FLOPs over the two processes' together: the bound of the documents/s ratio on
        the same cores) and `largest_share_bound` (one process's FLOPs over the larger share's: the ceiling if each
        of the 2 processes had a core to itself and the one process used a single core).
    """
    texts = passages(limit)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = DeformerBertForQuestionAnswering.from_pretrained(minilm_path(), num_decomposed_layers=4).eval()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128, batch_size=32)
    with tempfile.TemporaryDirectory(prefix="bench_store_flops_") as tmp:
        def fill(rank: int, world: int):
            store = RepresentationStore(Path(tmp) / f"{world}_{rank}")
            return lambda: fill_store(adapter, store, texts, store_dtype="float16", rank=rank, num_processes=world)

        with torch.no_grad():
            one = harness.count_flops(fill(0, 1))
            two = [harness.count_flops(fill(rank, 2)) for rank in range(2)]
    return {"documents": len(texts), "flops_1_process": one, "flops_2_processes": two,
            "flop_ratio": one / sum(two), "largest_share_bound": one / max(two)}


def part_encode_processes(results: harness.Results, flops_only: bool = False, limit: int | None = None) -> None:
    """`hf-readonce encode` with 1 and 2 processes, one run each (start-up included in the wall time): documents/s
    as the CLI reports them (one value each). `flops_only` counts the two runs' FLOPs (`encode_flops`), the bound
    of their documents/s ratio, and runs nothing else; `limit` caps the passages there."""
    if flops_only:
        flops = results.extra["encode_flops"] = encode_flops(limit)
        print(f"[3] encode {flops['documents']} passages: FLOPs 1 process {flops['flops_1_process']:.4g}, "
              f"2 processes {' + '.join(f'{x:.4g}' for x in flops['flops_2_processes'])}; FLOP bound of the "
              f"documents/s ratio on the same cores {flops['flop_ratio']:.2f}x (with a core per process and one "
              f"core for the single process: {flops['largest_share_bound']:.2f}x)", flush=True)
        return
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
            results.extra.setdefault("encode_throughput", {})[name] = row
            results.add(f"[3] encode, {name}: documents/s while encoding", [row["docs_per_s"]], "documents/s",
                        harness.bound("none", derivation="one run of the CLI; throughput, not a ratio"),
                        params={"documents": encoded, "processes": name})
            print(f"[3] encode, {name:11s}: {encoded} documents, {row['docs_per_s']:6.2f} docs/s while encoding "
                  f"({seconds:.1f} s), {row['docs_per_s_wall']:6.2f} docs/s wall time with start-up ({wall:.1f} s)",
                  flush=True)


def part_answer(tokenizer, results: harness.Results, limit: int | None, repeats: int, flops_only: bool = False) -> None:
    """Every question answered by the plain model vs from the store (opened afresh, warm), and the one-time fill of
    a fresh store, round robin (`repeats` rounds after one warm-up round). The speed-up's bound is the FLOP ratio of
    the two paths, counted by `harness.count_flops` on one untimed pass of each over the same questions (the padding
    of each path's batches included). `flops_only` counts that ratio and checks the answers, and times
    nothing."""
    examples, _ = load_qa_examples(DATA / "disfl_qa" / "validation.jsonl", limit=limit)
    model = DeformerBertForQuestionAnswering.from_pretrained(minilm_path(), num_decomposed_layers=4).eval()
    kwargs = dict(max_question_length=64, max_passage_length=320, doc_stride=128)
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=320, doc_stride=128)
    contexts = [e["context"] for e in examples]
    answers = {}
    with tempfile.TemporaryDirectory(prefix="bench_store_", dir=REPO) as tmp:
        stats = fill_store(adapter, RepresentationStore(Path(tmp) / "kept"), contexts, store_dtype="float16")
        counter = iter(range(10**6))

        def fill():
            fill_store(adapter, RepresentationStore(Path(tmp) / f"fill{next(counter)}"), contexts,
                       store_dtype="float16")

        @torch.no_grad()
        def plain():
            features, windows, _ = build_features(examples, tokenizer, **kwargs)
            answers["plain"] = postprocess_qa_predictions(examples, features, windows,
                                                          predict_pairs(model, features, windows))

        @torch.no_grad()
        def stored():
            answers["store"] = answer_from_store(model, tokenizer, RepresentationStore(Path(tmp) / "kept",
                                                                                       readonly=True),
                                                 examples, max_question_length=64)

        flops = {"plain": harness.count_flops(plain), "store": harness.count_flops(stored)}
        if not flops_only:
            times = harness.interleave({"plain": plain, "store": stored, "fill": fill}, repeats=repeats, warmup=1)
    plain_answers, stored_answers = answers["plain"], answers["store"]
    agree = sum(plain_answers[k] == stored_answers[k] for k in plain_answers) / len(plain_answers)
    n, p = len(examples), stats.encoded
    params = {"questions": n, "passages": p, "store_dtype": "float16"}
    c = model.config
    flop_ratio = flops["plain"] / flops["store"]
    results.extra["answer"] = {"questions": n, "passages": p, "same_answer_fraction": agree,
                               "flops_plain": flops["plain"], "flops_store": flops["store"], "flop_ratio": flop_ratio}
    print(f"[4] {n} questions over {p} passages: FLOPs plain {flops['plain']:.4g}, from the store "
          f"{flops['store']:.4g}, FLOP bound of the speed-up {flop_ratio:.2f}x (k = {c.num_decomposed_layers} of "
          f"{c.num_hidden_layers} layers); same answer for {agree:.1%} (fp16 storage)", flush=True)
    if flops_only:
        return
    results.add(f"[4] answer {n} questions: plain model", times["plain"], params=params)
    results.add(f"[4] answer {n} questions: from the store", times["store"], params=params)
    results.add(f"[4] fill the store with {p} passages (once)", times["fill"], params=params)
    results.add_ratio("[4] speed-up from the store", times["plain"], times["store"], harness.bound(
        "flop", flop_ratio, "FLOPs of the plain path over those of the store path, counted on one pass of each over "
                            f"the same questions (count_flops; k = {c.num_decomposed_layers} of "
                            f"{c.num_hidden_layers} layers, padding included)"), params=params)
    results.add("[4] speed-up with the one-time fill counted",
                [a / (b + f) for a, b, f in zip(times["plain"], times["store"], times["fill"])], "x",
                harness.bound("none", derivation="as the speed-up from the store"), params=params)
    print(f"[4] answer {n} questions over {p} passages ({n / p:.1f} per passage): plain "
          f"{statistics.median(times['plain']):.1f} s | from the store {statistics.median(times['store']):.1f} s | "
          f"fill {statistics.median(times['fill']):.1f} s; same answer for {agree:.1%} (fp16 storage)", flush=True)


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--batch_size", type=int, default=16, help="passages per batch in part 1")
    parser.add_argument("--repeats", type=int, default=harness.MIN_REPEATS, help="timed rounds of parts 1 and 4")
    parser.add_argument("--max_questions", type=int, default=None, help="limit part 4 (default: all)")
    parser.add_argument("--max_passages", type=int, default=None,
                        help="with --flops_only: limit part 3's passages (default: all)")
    parser.add_argument("--flops_only", action="store_true",
                        help="parts 3 and 4: count the FLOP bound of each comparison (and check part 4's answers); "
                             "time nothing")
    parser.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    parser.add_argument("--output", default=None, help="write the figures as JSON (harness schema) here")
    harness.add_threads_argument(parser)
    args = parser.parse_args(argv)
    harness.set_threads(args.threads)
    if any(part not in (1, 2, 3, 4) for part in args.parts):
        raise harness.fail("--parts", f"parts are 1, 2, 3 and 4, got {args.parts}.")
    if args.flops_only and (not set(args.parts) <= {3, 4} or args.output):
        raise harness.fail("--flops_only", "counts the FLOPs of parts 3 and 4 and times nothing: pass it with "
                                           "--parts 3, 4 or both, and without --output (no results file is written)")
    if args.max_passages is not None and not args.flops_only:
        raise harness.fail("--max_passages", "limits part 3's FLOP count only: pass it with --flops_only.")
    for name in ("repeats", "batch_size", "max_passages"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise harness.fail(f"--{name}", "must be >= 1.")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    results = harness.Results("bench_store", argv, settings=vars(args), note=args.note)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs", flush=True)
    if 1 in args.parts:
        part_load_vs_recompute(tokenizer, args.batch_size, args.repeats, results)
    if 2 in args.parts:
        part_bytes(tokenizer, results)
    if 3 in args.parts:
        part_encode_processes(results, args.flops_only, args.max_passages)
    if 4 in args.parts:
        part_answer(tokenizer, results, args.max_questions, args.repeats, args.flops_only)
    if args.flops_only:
        return results.doc
    print(results.table())
    return results.write(args.output)


if __name__ == "__main__":
    main()
