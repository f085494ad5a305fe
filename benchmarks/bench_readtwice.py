#!/usr/bin/env python
"""ReadTwice-BERT vs `BertForQuestionAnswering` reading the same segments: forward and training-step time, parameter
count, the read-once variant's questions per second, and (optionally) peak memory on a whole Austen novel.

Paper figure (§4.1): ReadTwice is about 30% slower than its base model and has 12% more parameters. Goal:
<= 1.3x time.

Shapes: bert-base dimensions (12 layers, hidden 768), random weights (speed does not depend on weight values),
one document of `--segments` (10) segments of `--segment_length` (512) tokens; ReadTwice-E with synthetic entity
mentions (`--mention_every` tokens apart, 2 tokens long), top-k 100. BERT reads the same segments independently.
Time: through `benchmarks/harness.py` (torch.utils.benchmark), the two models round robin, one warm-up round then
`--repeats` (5) rounds, ratios per round as median [min-max]; a training step is forward + backward + AdamW step.

Read once (`question_in_first_read=False`), `--questions` (7) questions per document, one question per call:
- stored: the first read and memory table encoded once per document (`encode_documents`), then every question runs
  only its own first read and MemoryAttention + BERT₂ (the encode time is amortised over the 7 questions);
- recomputed: every question re-encodes the document;
- paper setup (question_in_first_read=True): every question re-reads all segments with the question inside.

    python benchmarks/bench_readtwice.py                       # bert-base, 10 x 512, CPU (slow: minutes)
    python benchmarks/bench_readtwice.py --device cuda         # on a GPU
    python benchmarks/bench_readtwice.py --quick               # tiny sizes, seconds (a smoke test)
    python benchmarks/bench_readtwice.py --austen ../shared/data/austen/emma.txt   # + novel peak memory (MiniLM)

Results are printed and written as JSON to `--output` (default benchmarks/results/bench_readtwice.json; --quick
writes nothing unless --output is given).
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForQuestionAnswering

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

from hf_readonce import ReadTwiceBertConfig, ReadTwiceBertForQuestionAnswering

BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
            max_position_embeddings=512)
QUICK = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=128)


def synthetic_mentions(num_segments, length, every, start=1):
    spans = [[(j, j + 1) for j in range(start, length - 2, every)] for _ in range(num_segments)]
    return torch.tensor(spans, dtype=torch.long)


def build(dims, memory_type, question_in_first_read, top_k, seed=0):
    torch.manual_seed(seed)
    bert = BertForQuestionAnswering(BertConfig(**dims))
    config = ReadTwiceBertConfig(**dims, memory_type=memory_type, memory_top_k=top_k,
                                 question_in_first_read=question_in_first_read)
    readtwice = ReadTwiceBertForQuestionAnswering(config)
    readtwice.load_state_dict(bert.state_dict(), strict=False)  # same BERT1 (speed does not depend on it)
    return bert, readtwice


def train_step(model, optimizer, batch):
    optimizer.zero_grad(set_to_none=True)
    model(**batch).loss.backward()
    optimizer.step()


def forward_flops(bert, readtwice, common: dict, rt_extra: dict) -> tuple[int, int]:
    """Forward FLOPs of the two timed forward calls, `bert(**common)` and `readtwice(**common, **rt_extra)`, each
    counted on one untimed run by `harness.count_flops` (matrix products and attention; element-wise work and
    the optimizer step left out), in eval mode under `torch.no_grad()`. Their ratio is the benchmark's FLOP
    figure for the time ratio, in place of the parameter ratio used before: the parameters count the word
    embeddings, which do no FLOPs, and ReadTwice reads every segment through BERT1 and then through its
    second-read layers, so its FLOPs grow by more than its parameters (at the --quick dimensions, 4 + 2 layers of
    hidden 64, 3 segments of 64 tokens: 1.57x the FLOPs for 1.41x the parameters; at bert-base, 12 + 2 layers,
    at least 14 / 12 = 1.17x for about 1.12x the parameters)."""
    modes = bert.training, readtwice.training
    bert.eval(), readtwice.eval()
    try:
        with torch.no_grad():
            return (harness.count_flops(lambda: bert(**common)),
                    harness.count_flops(lambda: readtwice(**common, **rt_extra)))
    finally:
        bert.train(modes[0]), readtwice.train(modes[1])


def speed(args, dims, device):
    n, length = args.segments, args.segment_length
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000 if dims is BASE else 5, dims["vocab_size"], (n, length), generator=g)
    ids[:, 0] = 101 if dims is BASE else 2
    mask = torch.ones_like(ids)
    spans = synthetic_mentions(n, length, args.mention_every)
    starts = torch.full((n,), -1)
    starts[n // 2] = length // 2
    bert, readtwice = build(dims, args.memory_type, True, args.top_k)
    bert.to(device)
    readtwice.to(device)
    common = dict(input_ids=ids.to(device), attention_mask=mask.to(device))
    rt_extra = dict(document_ids=torch.zeros(n, dtype=torch.long, device=device),
                    entity_spans=spans.to(device) if args.memory_type == "entity" else None)
    labels_bert = dict(start_positions=torch.full((n,), length // 2, device=device),
                       end_positions=torch.full((n,), length // 2 + 1, device=device))
    labels_rt = dict(start_positions=starts.to(device), end_positions=starts.clamp(min=-1).to(device))
    result = {"segments": n, "segment_length": length, "memory_type": args.memory_type, "memory_top_k": args.top_k,
              "mentions_per_segment": int(spans.shape[1]),
              "params_bert": sum(p.numel() for p in bert.parameters()),
              "params_readtwice": sum(p.numel() for p in readtwice.parameters())}
    result["param_ratio"] = result["params_readtwice"] / result["params_bert"]
    flops_bert, flops_readtwice = forward_flops(bert, readtwice, common, rt_extra)
    result.update(gflops_bert=flops_bert / 1e9, gflops_readtwice=flops_readtwice / 1e9,
                  flop_ratio=flops_readtwice / flops_bert)
    for model in (bert, readtwice):
        model.eval()
    with torch.no_grad():
        f_bert = lambda: bert(**common)  # noqa: E731
        f_rt = lambda: readtwice(**common, **rt_extra)  # noqa: E731
        forward = harness.interleave({"bert": f_bert, "readtwice": f_rt}, repeats=args.repeats, warmup=1)
    result["forward_s_bert"] = statistics.median(forward["bert"])
    result["forward_s_readtwice"] = statistics.median(forward["readtwice"])
    result["forward_ratio"] = result["forward_s_readtwice"] / result["forward_s_bert"]
    for model in (bert, readtwice):
        model.train()
    opt_bert = torch.optim.AdamW(bert.parameters(), lr=1e-5)
    opt_rt = torch.optim.AdamW(readtwice.parameters(), lr=1e-5)
    s_bert = lambda: train_step(bert, opt_bert, {**common, **labels_bert})  # noqa: E731
    s_rt = lambda: train_step(readtwice, opt_rt, {**common, **rt_extra, **labels_rt})  # noqa: E731
    step = harness.interleave({"bert": s_bert, "readtwice": s_rt}, repeats=args.repeats, warmup=1)
    result["train_step_s_bert"] = statistics.median(step["bert"])
    result["train_step_s_readtwice"] = statistics.median(step["readtwice"])
    result["train_step_ratio"] = result["train_step_s_readtwice"] / result["train_step_s_bert"]
    result["times"] = {"forward": forward, "train_step": step}
    return result


@torch.no_grad()
def read_once(args, dims, device):
    n, length, q_len, nq = args.segments, args.segment_length, args.question_length, args.questions
    g = torch.Generator().manual_seed(2)
    low = 1000 if dims is BASE else 5
    doc = torch.randint(low, dims["vocab_size"], (n, length), generator=g)
    questions = torch.randint(low, dims["vocab_size"], (nq, q_len), generator=g)
    spans = synthetic_mentions(n, length, args.mention_every).to(device)
    entity = args.memory_type == "entity"
    _, model = build(dims, args.memory_type, False, args.top_k)
    _, paper = build(dims, args.memory_type, True, args.top_k)
    model.to(device).eval()
    paper.to(device).eval()
    doc_d = doc.to(device)
    extra = {"entity_spans": spans} if entity else {}

    def stored():
        states = model.encode_documents(doc_d, **extra)
        for q in range(nq):
            model(question_input_ids=questions[q : q + 1].to(device), document_states=states)

    def recomputed():
        for q in range(nq):
            model(doc_d, question_input_ids=questions[q : q + 1].to(device), **extra)

    # paper setup: the question sits in every segment ([CLS] q [SEP] part [SEP]) of the same total length
    paper_segments = torch.cat([questions[:, None, :].expand(nq, n, q_len), doc[None, :, : length - q_len]
                                .expand(nq, n, length - q_len)], dim=2).to(device)

    def paper_setup():
        for q in range(nq):
            paper(paper_segments[q], **extra)

    states = model.encode_documents(doc_d, **extra)

    def only_questions():
        for q in range(nq):
            model(question_input_ids=questions[q : q + 1].to(device), document_states=states)

    times = harness.interleave({"stored": stored, "recomputed": recomputed, "paper_setup": paper_setup,
                                "stored_excluding_encode": only_questions}, repeats=args.repeats, warmup=1)
    result = {"questions_per_document": nq, "question_length": q_len, "times": times}
    # the FLOP bound of recomputed / stored: both timed calls counted once more, untimed, by torch's counter
    flops = {name: harness.count_flops(fn) for name, fn in (("stored", stored), ("recomputed", recomputed))}
    result.update(gflops_stored=flops["stored"] / 1e9, gflops_recomputed=flops["recomputed"] / 1e9,
                  flop_bound=flops["recomputed"] / flops["stored"])
    for name, values in times.items():
        result[f"questions_per_s_{name}"] = nq / statistics.median(values)
    result["stored_over_recomputed"] = result["questions_per_s_stored"] / result["questions_per_s_recomputed"]
    return result


# --------------------------------------------------------------------------------------------- Austen peak memory
def austen_worker(path, limit, memory_type, per_subdocument=128):
    """Run MiniLM-ReadTwice over the sub-documents (<= `per_subdocument` segments of 512, overlap 128) of a novel;
    print JSON."""
    from transformers import AutoTokenizer

    from hf_readonce.tasks.readtwice_qa import capitalized_mentions, entity_spans_for_segment
    from hf_readonce.weights import minilm_path

    torch.set_grad_enabled(False)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = ReadTwiceBertForQuestionAnswering.from_pretrained(minilm_path(), memory_type=memory_type).eval()
    text = Path(path).read_text(encoding="utf-8")
    enc = tokenizer(text, truncation=True, max_length=512, stride=128, return_overflowing_tokens=True,
                    return_offsets_mapping=True)
    mentions = capitalized_mentions(text) if memory_type == "entity" else []
    segments = len(enc["input_ids"])
    subdocs = [range(b, min(b + per_subdocument, segments)) for b in range(0, segments, per_subdocument)]
    if limit:
        subdocs = subdocs[:limit]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    begin = time.perf_counter()
    for rows in subdocs:
        ids = [enc["input_ids"][r] for r in rows]
        width = max(map(len, ids))
        batch = torch.zeros(len(ids), width, dtype=torch.long)
        mask = torch.zeros_like(batch)
        for i, row in enumerate(ids):
            batch[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        extra = {}
        if memory_type == "entity":
            per = [entity_spans_for_segment([tuple(o) if o[1] > o[0] else None for o in enc["offset_mapping"][r]],
                                            [m for m in mentions]) for r in rows]
            spans = torch.full((len(rows), max(1, max(map(len, per))), 2), -1, dtype=torch.long)
            for i, row in enumerate(per):
                if row:
                    spans[i, : len(row)] = torch.tensor(row)
            extra["entity_spans"] = spans
        model(batch, attention_mask=mask, **extra)
    dims = {name: getattr(model.config, name) for name in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                          "num_attention_heads", "intermediate_size")}
    print(json.dumps({"model": "all-MiniLM-L6-v2", "dims": dims, "segments": segments,
                      "subdocuments_run": len(subdocs), "seconds": time.perf_counter() - begin,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "rss_before_forward_mib": before / 1024}))


def austen(args):
    rows = {}
    for label, limit in (("one_subdocument", 1), ("whole_novel", 0)):
        out = subprocess.run([sys.executable, __file__, "--_austen_worker", args.austen, "--_limit", str(limit),
                              "--memory_type", args.austen_memory_type, "--austen_subdocument_segments",
                              str(args.austen_subdocument_segments)], capture_output=True, text=True, check=True)
        rows[label] = json.loads(out.stdout.strip().splitlines()[-1])
    rows["peak_ratio_whole_over_one"] = rows["whole_novel"]["peak_rss_mib"] / rows["one_subdocument"]["peak_rss_mib"]
    return rows


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test in seconds")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--segment_length", type=int, default=512)
    parser.add_argument("--question_length", type=int, default=24)
    parser.add_argument("--questions", type=int, default=7)
    parser.add_argument("--memory_type", default="entity", choices=["cls", "sts", "entity"])
    parser.add_argument("--top_k", type=int, default=100, help="0 for dense MemoryAttention")
    parser.add_argument("--mention_every", type=int, default=12, help="synthetic mention spacing in tokens")
    parser.add_argument("--repeats", type=int, default=harness.MIN_REPEATS, help="timed rounds after one warm-up")
    parser.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    parser.add_argument("--austen", default=None, help="a novel (plain text) for the peak-memory row")
    parser.add_argument("--austen_only", action="store_true", help="only the novel peak-memory row")
    parser.add_argument("--austen_memory_type", default="entity", choices=["cls", "sts", "entity"])
    parser.add_argument("--austen_subdocument_segments", type=int, default=128, help="paper: 128 (49k tokens)")
    parser.add_argument("--output", default=None)
    parser.add_argument("--_austen_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_limit", type=int, default=0, help=argparse.SUPPRESS)
    harness.add_threads_argument(parser)
    args = parser.parse_args(argv)
    harness.set_threads(args.threads)
    if args._austen_worker:
        return austen_worker(args._austen_worker, args._limit, args.memory_type, args.austen_subdocument_segments)
    dims = BASE
    if args.quick:
        dims = QUICK
        args.segments, args.segment_length, args.question_length, args.repeats = 3, 64, 8, 1
    args.top_k = args.top_k or None
    device = torch.device(args.device)
    if args.segment_length > dims["max_position_embeddings"] or args.segment_length < 4:
        raise harness.fail("--segment_length", f"{args.segment_length} tokens: the model has "
                                               f"{dims['max_position_embeddings']} positions (4.. allowed).")
    if args.question_length >= args.segment_length or args.question_length < 1:
        raise harness.fail("--question_length", f"must be in [1, --segment_length), got {args.question_length}.")
    if args.repeats < 1 or args.segments < 1 or args.questions < 1:
        raise harness.fail("--repeats", "--repeats, --segments and --questions must be >= 1.")
    results = harness.Results("bench_readtwice", argv, settings=vars(args),
                              note=args.note if device.type == "cpu" else f"{args.note}; device {device}")
    results.extra["device"] = str(device)
    if not args.austen_only:
        results.extra["dims"] = dims  # the random speed models' sizes; the Austen rows record their own model
        speed_row = speed(args, dims, device)
        times = speed_row.pop("times")
        params = {"segments": args.segments, "segment_length": args.segment_length, "memory_type": args.memory_type,
                  "memory_top_k": args.top_k}
        bound = harness.bound("flop", speed_row["flop_ratio"], (
            f"ReadTwice / BERT forward FLOPs, {speed_row['gflops_readtwice']:.1f} / {speed_row['gflops_bert']:.1f} "
            "GFLOP, counted on the timed forward calls by torch.utils.flop_counter.FlopCounterMode "
            "(bench_readtwice.forward_flops; the training step's backward taken as 2x the forward on both sides): "
            "the time ratio's expected value, not a ceiling (paper: about 1.3x time, 1.12x parameters; parameter "
            f"ratio here {speed_row['param_ratio']:.3f})"))
        for mode, pair in times.items():
            for name, values in pair.items():
                results.add(f"{mode}: {name}", values, params=params)
            results.add_ratio(f"{mode}: readtwice time / bert time", pair["readtwice"], pair["bert"], bound,
                              params=params)
        results.extra["speed"] = speed_row
        once = read_once(args, dims, device)
        times = once.pop("times")
        params = {"questions": args.questions, "question_length": args.question_length}
        for name, values in times.items():
            results.add(f"read once: {args.questions} questions, {name}", values, params=params)
        results.add_ratio("read once: recomputed time / stored time", times["recomputed"], times["stored"],
                          harness.bound("flop", once["flop_bound"], (
                              f"forward FLOPs of the {args.questions} questions recomputing the first read per "
                              f"question / encoding it once and storing it, {once['gflops_recomputed']:.1f} / "
                              f"{once['gflops_stored']:.1f} GFLOP, counted on the timed calls by "
                              "torch.utils.flop_counter.FlopCounterMode (harness.count_flops)")), params=params)
        results.extra["read_once"] = once
    if args.austen:
        rows = austen(args)
        rows["subdocument_segments"] = args.austen_subdocument_segments
        results.extra["austen"] = rows
        results.add("austen: whole novel peak / one sub-document peak", [rows["peak_ratio_whole_over_one"]], "ratio",
                    harness.bound("memory", 1.0, "memory is per sub-document: the whole novel needs no more "
                                  "(bound 1.0)"))
        print(json.dumps(rows, indent=2))
    print(results.table())
    output = args.output or (None if args.quick else "benchmarks/results/bench_readtwice.json")
    return results.write(output)


if __name__ == "__main__":
    main()
