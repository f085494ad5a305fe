#!/usr/bin/env python
"""Token-selection rules for selective recompute (CacheBlend, Yao et al. 2025, §4.2-4.3), compared at one recompute
ratio on the first N questions of `bench_selective_recompute.py`'s own sample (same prompt building, question order,
seed, answer extraction and agreement metric): the full prompt's answer is computed once per question, then each
rule's answer at `--ratio`; agreement EM/F1 (the full answer as the reference, `squad_em_f1`) per rule and dataset.

A rule swaps the library's `_blend_layers` (the model module's global, which `selective_recompute` calls) for a copy
with these knobs:

- `deviation`: `v` (values only, the library's rule), `k` (keys only) or `kv` (keys and values, CacheBlend's "KV
  deviation": squared L2 of the key difference plus that of the value difference, keys compared at their new
  positions);
- `sinks`: the first `sinks` tokens of every passage block (not the prefix block, which is exact) are always kept
  among the carried tokens, counted inside the per-layer budget;
- `schedule`: `linear` (the library's `recompute_schedule`: from 1.5 r down to 0.5 r over layers 1..L-2) or `flat`
  (r at every layer 1..L-2: the set chosen at layer 1 is then kept, as in CacheBlend's reference implementation)
  or `steep` (linear from 2 r down to 0 over layers 1..L-2, same mean);
- `rank`: `layer` (deviation measured again at every layer, the library's gradual filtering) or `first` (the
  layer-1 deviation ranks the tokens for every later narrowing).
- `query` (`qmass`, `qmass_dev`): query-aware ranking, beyond the paper: the question's tokens run through the
  blend layers beside the carried tokens (their keys and values thrown away; the question is prefilled again after
  the blend, counted in `flop_fraction`), and each narrowing keeps the tokens on which the question puts the most
  attention mass at that layer (`mass`), or that mass times the root of the value deviation (`mass_dev`).

`oracle` / `oracle_v` are not rules but a reference ([`make_oracle`]): nothing is recomputed; at each layer the
full prompt's own keys and values are patched in for as many tokens as the library's schedule recomputes there,
those whose stored key+value (or value) deviates most from the full prompt's. It says how much agreement that
budget gives when the tokens of largest error get exactly the right numbers (not a bound on every rule: a rule
may pick other tokens and do better, as the library does on the first 40 Disfl-QA questions).

`--document_context after_prefix`: the passages encoded after the prompt's prefix block, as in
`bench_selective_recompute.py`.

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice -n 10 python benchmarks/selection_rules.py --questions 40 \\
        --jsonl runs/i36agree_rules.jsonl
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice -n 10 python benchmarks/selection_rules.py --questions 40 \\
        --rules k kv_flat kv_rank_l1 kv_steep --jsonl runs/i36agree_rules2.jsonl
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice -n 10 python benchmarks/selection_rules.py --questions 40 \\
        --rules steep sink16 --jsonl runs/i36agree_rules3.jsonl
    OMP_NUM_THREADS=1 python benchmarks/selection_rules.py --questions 40 --rules base qmass qmass_dev \\
        --document_context after_prefix --jsonl runs/qrules_ap.jsonl
    OMP_NUM_THREADS=1 python benchmarks/selection_rules.py --questions 40 --rules oracle oracle_v \\
        --document_context after_prefix --jsonl runs/oracle_ap_r0.15.jsonl
    python benchmarks/selection_rules.py --summarize --jsonl runs/i36agree_rules.jsonl

(run from `benchmarks/` with `PYTHONPATH=../src:.`). Each row also holds `library`: the unpatched library at the
same ratio (a check that `base` is the library's rule: identical answers). `flop_fraction`: the rule's prefill FLOPs
(`bench_selective_recompute.schedule_flops` with the rule's schedule) over the full prompt's prefill.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import harness
import torch
from bench_kv_cache import prefill_flops
from bench_selective_recompute import (
    DATASETS,
    PromptFormat,
    StopAtNewline,
    encode_passages,
    extract_answer,
    load_model,
    newline_tokens,
    sample_questions,
    schedule_flops,
    selective_flops,
)
from transformers import StoppingCriteriaList
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, rotate_half

import hf_readonce.models.block_attention_llama.modeling_block_attention_llama as bam
from hf_readonce.tasks.question_answering import squad_em_f1

RULES = {
    "base": dict(deviation="v", sinks=0, schedule="linear", rank="layer"),
    "kv": dict(deviation="kv", sinks=0, schedule="linear", rank="layer"),
    "sink4": dict(deviation="v", sinks=4, schedule="linear", rank="layer"),
    "flat": dict(deviation="v", sinks=0, schedule="flat", rank="layer"),
    "rank_l1": dict(deviation="v", sinks=0, schedule="linear", rank="first"),
    "kv_sink4": dict(deviation="kv", sinks=4, schedule="linear", rank="layer"),
    "k": dict(deviation="k", sinks=0, schedule="linear", rank="layer"),
    "kv_flat": dict(deviation="kv", sinks=0, schedule="flat", rank="layer"),
    "kv_rank_l1": dict(deviation="kv", sinks=0, schedule="linear", rank="first"),
    "kv_steep": dict(deviation="kv", sinks=0, schedule="steep", rank="layer"),
    "steep": dict(deviation="v", sinks=0, schedule="steep", rank="layer"),
    "sink16": dict(deviation="v", sinks=16, schedule="linear", rank="layer"),
    "qmass": dict(deviation="v", sinks=0, schedule="linear", rank="layer", query="mass"),
    "qmass_dev": dict(deviation="v", sinks=0, schedule="linear", rank="layer", query="mass_dev"),
    "oracle": dict(deviation="kv", sinks=0, schedule="linear", rank="layer", oracle=True),
    "oracle_v": dict(deviation="v", sinks=0, schedule="linear", rank="layer", oracle=True),
}
ORIGINAL = bam._blend_layers


def flat_schedule(ratio: float, num_layers: int, num_tokens: int) -> list[tuple[int, int]]:
    """`recompute_schedule`'s format with `ceil(r T)` queries at every layer 1..L-2."""
    if ratio == 0 or num_tokens == 0:
        return [(0, 0)] * num_layers
    s = max(1, math.ceil(ratio * num_tokens - 1e-9))
    out = [(num_tokens, num_tokens), (num_tokens, s)]
    out += [(s, s)] * (num_layers - 3)
    out.append((s, 0))
    return out


def steep_schedule(ratio: float, num_layers: int, num_tokens: int) -> list[tuple[int, int]]:
    """`recompute_schedule`'s linear narrowing from `min(1, 2 r)` down to `2 r - min(1, 2 r)` (mean r)."""
    if ratio == 0 or num_tokens == 0:
        return [(0, 0)] * num_layers
    middle = num_layers - 2
    high = min(1.0, 2 * ratio)
    low = 2 * ratio - high
    queries, carried = [num_tokens], num_tokens
    for i in range(middle):
        r = high + (low - high) * i / (middle - 1)
        carried = max(1, min(carried, math.ceil(r * num_tokens - 1e-9)))
        queries.append(carried)
    out, kv = [], num_tokens
    for layer in range(num_layers):
        query = queries[layer] if layer < num_layers - 1 else 0
        out.append((kv, query))
        kv = query if layer >= 1 else num_tokens
    return out


def schedule_of(rule: dict, ratio: float, num_layers: int, num_tokens: int):
    if rule["schedule"] == "flat":
        return flat_schedule(ratio, num_layers, num_tokens)
    if rule["schedule"] == "steep":
        return steep_schedule(ratio, num_layers, num_tokens)
    return bam.recompute_schedule(ratio, num_layers, num_tokens)


def question_qkv(attention, normed_q, positions_q, head_dim, decoder):
    """The question's queries `(heads, q, head_dim)`, keys and values `(kv_heads, q, head_dim)` at one layer
    (`normed_q` `(1, q, hidden)` after the layer's input norm, rotated at `positions_q`)."""
    q_len = normed_q.shape[1]
    cos, sin = decoder.rotary_emb(normed_q, positions_q[None])
    q = attention.q_proj(normed_q).view(1, q_len, -1, head_dim).transpose(1, 2)
    k = attention.k_proj(normed_q).view(1, q_len, -1, head_dim).transpose(1, 2)
    v = attention.v_proj(normed_q).view(1, q_len, -1, head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    return q[0], k[0], v[0]


def make_oracle(rule: dict, reference):
    """A `_blend_layers` replacement that recomputes nothing: at each layer it patches in the full prompt's own keys
    and values (`reference`, the `DynamicCache` of the full prompt's prefill of the document tokens) for as many
    tokens as the library's schedule recomputes there (`kv_tokens`), those whose stored key/value deviate most from
    the full prompt's (squared L2 of keys plus values, `kv`, or of values only, `v`). Every other token keeps its
    composed key/value. A reference for a selection rule at that budget: the exact numbers at the tokens with the
    largest true error, without the cost or the error of recomputing them (not a bound on every rule)."""

    @torch.no_grad()
    def blend(decoder, compose_layer, num_layers, num_tokens, input_ids, recompute_ratio):
        schedule = bam.recompute_schedule(recompute_ratio, num_layers, num_tokens)
        for layer_index in range(num_layers):
            keys, values = compose_layer(layer_index)
            count = schedule[layer_index][0]
            if count:
                true_k = reference.layers[layer_index].keys[0, :, :num_tokens].to(keys.dtype)
                true_v = reference.layers[layer_index].values[0, :, :num_tokens].to(values.dtype)
                error = (true_v - values).float().pow(2).sum(dim=(0, 2))
                if rule["deviation"] == "kv":
                    error = error + (true_k - keys).float().pow(2).sum(dim=(0, 2))
                chosen = error.topk(min(count, num_tokens)).indices
                keys[:, chosen] = true_k[:, chosen]
                values[:, chosen] = true_v[:, chosen]
            yield keys, values

    return blend


def make_blend(rule: dict, forced: torch.Tensor | None, question: torch.Tensor | None = None,
               trace: list | None = None):
    """A `_blend_layers` replacement following `rule`; `forced`: bool `(T,)` tokens always kept (or None);
    `question` `(q,)`: the question's token ids, for the query-aware rules (`query`: `mass` ranks the carried
    tokens by the attention mass the question puts on them at that layer, `mass_dev` by that mass times the root of
    the value deviation; the question runs through the layers beside the carried tokens, its own keys and values
    thrown away afterwards); `trace`: a list that gets each layer's question mass `(T,)` (query-aware rules).
    """

    @torch.no_grad()
    def blend(decoder, compose_layer, num_layers, num_tokens, input_ids, recompute_ratio):
        schedule = schedule_of(rule, recompute_ratio, num_layers, num_tokens)
        if schedule[0][0] == 0:
            for layer_index in range(num_layers):
                yield compose_layer(layer_index)
            return
        keys, values = compose_layer(0)
        device = keys.device
        positions = torch.arange(num_tokens, device=device)
        carried = positions
        first_score = None
        hidden = decoder.embed_tokens(input_ids.to(device)[None]).to(keys.dtype)
        query_rule = rule.get("query")
        if query_rule:
            hidden_q = decoder.embed_tokens(question.to(device)[None]).to(keys.dtype)
            positions_q = torch.arange(num_tokens, num_tokens + question.numel(), device=device)
        for layer_index, layer in enumerate(decoder.layers):
            if layer_index > 0:
                keys, values = compose_layer(layer_index)
            if hidden is None:
                yield keys, values
                continue
            attention = layer.self_attn
            head_dim = attention.head_dim
            normed = layer.input_layernorm(hidden)
            cos, sin = decoder.rotary_emb(normed, carried[None])
            k = attention.k_proj(normed).view(1, carried.numel(), -1, head_dim).transpose(1, 2)
            v = attention.v_proj(normed).view(1, carried.numel(), -1, head_dim).transpose(1, 2)
            k = k * cos[:, None] + rotate_half(k) * sin[:, None]
            deviation = (v[0] - values[:, carried]).float().pow(2).sum(dim=(0, 2))
            if rule["deviation"] == "k":
                deviation = (k[0] - keys[:, carried]).float().pow(2).sum(dim=(0, 2))
            if rule["deviation"] == "kv":
                deviation = deviation + (k[0] - keys[:, carried]).float().pow(2).sum(dim=(0, 2))
            if layer_index == 1:
                first_score = torch.zeros(num_tokens, device=device)
                first_score[carried] = deviation
            keys[:, carried] = k[0].to(keys.dtype)
            values[:, carried] = v[0].to(values.dtype)
            queries = schedule[layer_index][1]
            if queries == 0:
                hidden = None
                yield keys, values
                continue
            if query_rule:  # the question at this layer, over the keys as they now are
                normed_q = layer.input_layernorm(hidden_q)
                qq, kq, vq = question_qkv(attention, normed_q, positions_q, head_dim, decoder)
                groups = qq.shape[0] // keys.shape[0]
                all_k = torch.cat([keys, kq.to(keys.dtype)], 1).repeat_interleave(groups, 0)
                all_v = torch.cat([values, vq.to(values.dtype)], 1).repeat_interleave(groups, 0)
                scores = qq @ all_k.transpose(1, 2) * attention.scaling  # (heads, q, T + q)
                n_q = qq.shape[1]
                causal = torch.ones(n_q, num_tokens + n_q, dtype=torch.bool, device=device)
                causal[:, num_tokens:] = torch.tril(torch.ones(n_q, n_q, dtype=torch.bool, device=device))
                probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
                mass = probs[..., :num_tokens].sum(dim=(0, 1))
                if trace is not None:
                    trace.append(mass)
                out_q = (probs @ all_v).transpose(0, 1).reshape(1, n_q, -1)
                hidden_q = hidden_q + attention.o_proj(out_q)
                hidden_q = hidden_q + layer.mlp(layer.post_attention_layernorm(hidden_q))
            if queries < carried.numel():
                score = first_score[carried] if (rule["rank"] == "first" and first_score is not None) else deviation
                score = score.clone()
                if query_rule == "mass":
                    score = mass[carried].clone()
                elif query_rule == "mass_dev":
                    score = mass[carried] * deviation.sqrt()
                if forced is not None:
                    score[forced[carried]] = float("inf")
                keep = score.topk(queries).indices.sort().values
                carried, hidden, normed = carried[keep], hidden[:, keep], normed[:, keep]
                cos, sin = cos[:, keep], sin[:, keep]
            q = attention.q_proj(normed).view(1, carried.numel(), -1, head_dim).transpose(1, 2)
            q = q * cos[:, None] + rotate_half(q) * sin[:, None]
            allowed = positions[None] <= carried[:, None]
            out = torch.nn.functional.scaled_dot_product_attention(
                q, keys[None], values[None], attn_mask=allowed, scale=attention.scaling, enable_gqa=True)
            yield keys, values
            hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(1, carried.numel(), -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    return blend


def forced_of(lengths: list[int], count: int) -> torch.Tensor:
    """Bool `(sum(lengths),)`: the first `count` tokens of every block after the first (the prefix block)."""
    forced, start = torch.zeros(sum(lengths), dtype=torch.bool), lengths[0]
    for n in lengths[1:]:
        forced[start:start + n][:count] = True
        start += n
    return forced


def answer(model, tokenizer, ids, newline_ids, extra) -> str:
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    generated = model.generate(ids, max_new_tokens=16, do_sample=False, num_beams=1, pad_token_id=pad,
                               eos_token_id=eos, stopping_criteria=StoppingCriteriaList([StopAtNewline(
                                   newline_ids, ids.shape[1], tokenizer, extract_answer)]), **extra)
    return extract_answer(tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=True))


def summarize(path: str, json_path: str | None = None) -> dict:
    """Agreement EM / F1 with the full prompt and mean FLOP fraction per rule and dataset, from a `--jsonl` file:
    printed as a table, written to `json_path` when given, and returned."""
    rows = [json.loads(x) for x in open(path)]
    rules = list(dict.fromkeys(k for r in rows for k in r["answers"] if k != "full"))
    out = {"source": str(path), "rules": {}}
    print("| rule | dataset | n | agreement EM | agreement F1 | mean FLOP fraction of full prefill |")
    print("|---|---|---|---|---|---|")
    for rule in rules:
        for dataset in DATASETS:
            some = [r for r in rows if r["dataset"] == dataset and rule in r["answers"]]
            if not some:
                continue
            ref = [{"id": r["id"], "answers": {"text": [r["answers"]["full"]], "answer_start": [0]}} for r in some]
            agree = squad_em_f1({r["id"]: r["answers"][rule] for r in some}, ref)
            frac = sum(r["flop_fraction"][rule] for r in some) / len(some)
            out["rules"].setdefault(rule, {})[dataset] = {"questions": len(some), "agreement_em": agree["exact_match"],
                                                          "agreement_f1": agree["f1"], "flop_fraction_mean": frac}
            print(f"| {rule} | {dataset} | {len(some)} | {agree['exact_match']:.1f} | {agree['f1']:.1f} | "
                  f"{frac:.3f} |")
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=2) + "\n")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=40)
    p.add_argument("--ratio", type=float, default=0.15)
    harness.add_threads_argument(p, default=1)
    p.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--passage_tokens", type=int, default=128)  # as the measured chat run
    p.add_argument("--document_context", choices=("alone", "after_prefix"), default="alone")
    p.add_argument("--jsonl", required=True)
    p.add_argument("--summarize", action="store_true")
    p.add_argument("--json", default=None, help="with --summarize: write the table as JSON here")
    args = p.parse_args(argv)
    if not 0 <= args.ratio <= 1:
        p.error(f"--ratio must be in [0, 1], got {args.ratio}")
    if args.questions < 1:
        p.error(f"--questions must be >= 1, got {args.questions}")
    if args.summarize:
        summarize(args.jsonl, args.json)
        return 0
    harness.set_threads(args.threads)
    model, tokenizer, _ = load_model(False)
    newline_ids = newline_tokens(tokenizer)
    fmt = PromptFormat(tokenizer, "chat", args.passage_tokens)
    samples = {d: sample_questions(tokenizer, d, args.passage_tokens, 0)[:args.questions] for d in args.datasets}
    caches: dict = {}
    begin = time.perf_counter()
    with open(args.jsonl, "a") as sink:
        for index in range(args.questions):
            for dataset in args.datasets:
                question = samples[dataset][index]
                encode_passages(model, fmt, question["contexts"], caches,
                                after_prefix=args.document_context == "after_prefix")
                asked = fmt.tail(question["question"])
                documents = [caches[None]] + [caches[c] for c in question["contexts"]]
                prompt = fmt.prefix + [t for c in question["contexts"] for t in fmt.document(c)] + asked
                lengths = [int(d.key_states.shape[3]) for d in documents]
                total = sum(lengths)
                full_flops = prefill_flops(model.config, len(prompt), 0)
                row = {"dataset": dataset, "position": index, "id": question["id"], "answers": {},
                       "flop_fraction": {}, "document_tokens": total}
                with torch.no_grad():
                    row["answers"]["full"] = answer(model, tokenizer, torch.tensor([prompt]), newline_ids, {})
                    for name in args.rules:
                        rule = RULES[name]
                        if rule.get("oracle"):
                            reference = model(torch.tensor([prompt[:total]]), use_cache=True,
                                              logits_to_keep=1).past_key_values
                            bam._blend_layers = make_oracle(rule, reference)
                        else:
                            bam._blend_layers = make_blend(rule, forced_of(lengths, rule["sinks"]) if rule["sinks"]
                                                           else None, torch.tensor(asked))
                        try:
                            row["answers"][name] = answer(model, tokenizer, torch.tensor([asked]), newline_ids, {
                                "document_caches": documents, "recompute_ratio": args.ratio})
                        finally:
                            bam._blend_layers = ORIGINAL
                        sched = schedule_of(rule, args.ratio, model.config.num_hidden_layers, total)
                        flops = schedule_flops(model.config, sched, total, len(asked))
                        if rule.get("query"):  # the question's extra pass through the blend
                            flops += prefill_flops(model.config, len(asked), total)
                        row["flop_fraction"][name] = flops / full_flops
                    row["answers"]["library"] = answer(model, tokenizer, torch.tensor([asked]), newline_ids, {
                        "document_caches": documents, "recompute_ratio": args.ratio})  # unpatched: == base
                    row["flop_fraction"]["library"] = selective_flops(model.config, args.ratio, total,
                                                                      len(asked)) / full_flops
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print(f"[{time.perf_counter() - begin:7.1f}s] {dataset} {index + 1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
