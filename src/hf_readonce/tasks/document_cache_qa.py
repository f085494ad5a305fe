"""Generative QA with decoder LLMs over stored per-document KV caches: a question's passages are read once each (their
key/value caches stored by [`BlockAttentionLlamaAdapter`]), composed in front of the question prompt, and the answer
is generated with `generate(document_caches=...)`. Also the same prompt read in full (the baseline), and the training
rows of the prompt (passages, question, answer; block ids for the Block-Attention mask).

Prompt format (one format for training, composed caches and full prompts):

```
<passage 1><passage 2>...<passage m>\\n\\nQuestion: <question>\\nAnswer: <answer><eos>
```

Each passage is tokenized alone as the adapter stores it (no special tokens by default, truncated to
`max_document_length` tokens; passages follow each other with nothing in between, each one being its own block); the
question prompt `"\\n\\nQuestion: {question}\\nAnswer:"` is tokenized alone without special tokens; the answer is
`" " + answer` and the tokenizer's EOS. Token by token, composed caches and the full prompt see the same sequence, so
with one passage and no block-attention training they give the same answer. A generated answer is its first line
that holds text, stripped ([`clean_answer`]).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ..dtypes import takes_store_dtype
from ..models.block_attention_llama.modeling_block_attention_llama import (
    check_context_length,
    check_recompute_ratio,
)
from ..representations.base import (
    current_fingerprint,
    digests_weights_once,
    one_tokenizer_fingerprint,
    tokenizer_lock,
)
from ..representations.block_attention_llama import BlockAttentionLlamaAdapter
from ..representations.fill import (
    check_store_arguments,
    ensure_stored,
    given_or_current_fingerprint,
    stored_documents_cut,
)
from ..representations.spaces import _choose_space, _spaces_with
from ..store import MissingRepresentationError, RepresentationMismatchError, RepresentationStore
from .jsonl import field_problem
from .question_answering import gold_answers, passages_of

QUESTION_TEMPLATE = "\n\nQuestion: {question}\nAnswer:"


def to_block_attention(model):
    """A [`BlockAttentionLlamaForCausalLM`] with the weights, config and generation config of an in-memory Llama-family
    causal LM (e.g. `hf_readonce.tasks.language_modeling.load_smollm2()`'s, which comes from a GGUF file and has no
    checkpoint folder); the model itself is returned when it is one already. Same dtype, same device, eval mode.

    Raises:
        TypeError: a model that is not a Llama-family causal LM (its weights do not load into the Llama layout).
    """
    from ..models.block_attention_llama.configuration_block_attention_llama import BlockAttentionLlamaConfig
    from ..models.block_attention_llama.modeling_block_attention_llama import BlockAttentionLlamaForCausalLM

    if isinstance(model, BlockAttentionLlamaForCausalLM):
        return model
    settings = getattr(getattr(model, "config", None), "to_dict", lambda: None)()
    if settings is None:
        raise TypeError(f"`model` must be a transformers causal LM, got {type(model).__name__}.")
    for key in ("model_type", "architectures", "transformers_version", "quantization_config", "auto_map"):
        settings.pop(key, None)
    converted = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**settings)).to(model.dtype)
    try:
        converted.load_state_dict(model.state_dict())
    except RuntimeError as error:
        raise TypeError(f"`model` ({type(model).__name__}) is not a Llama-family causal LM: {error}") from None
    converted.generation_config = model.generation_config
    return converted.to(model.device).eval()


def question_prompt(question: str) -> str:
    """The text read after the passages: `"\\n\\nQuestion: {question}\\nAnswer:"` (surrounding whitespace of the
    question stripped).

    Raises:
        ValueError: an empty or non-string question.
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"`question` must be a non-empty string, got {question!r}.")
    return QUESTION_TEMPLATE.format(question=question.strip())


def question_ids(tokenizer, question: str) -> list[int]:
    """Token ids of [`question_prompt`] (no special tokens).

    Raises:
        ValueError: an empty or non-string question (as [`question_prompt`]).
    """
    prompt = question_prompt(question)
    with tokenizer_lock(tokenizer):
        return list(tokenizer(prompt, add_special_tokens=False)["input_ids"])


def answer_ids(tokenizer, answer: str) -> list[int]:
    """Token ids of the target answer: `" " + answer` (no special tokens), then the EOS token when the tokenizer has
    one."""
    with tokenizer_lock(tokenizer):
        ids = list(tokenizer(" " + answer.strip(), add_special_tokens=False)["input_ids"])
    return ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])


def clean_answer(text: str) -> str:
    """A generated continuation -> the answer: its first line that holds text, stripped (newlines before any text
    are skipped: a model that starts its answer on a new line is not read as answering nothing)."""
    return text.lstrip().split("\n", 1)[0].strip()


def find_document_cache_space(store: RepresentationStore, model, tokenizer,
                              max_document_length: int | None = None, *, fingerprint: str | None = None) -> dict:
    """The settings of the only block-attention Llama space in `store` made by this model (fingerprint), this
    tokenizer and this compute dtype (and `max_document_length`, when given; documents read with or without special
    tokens alike, the space says which):
    [`hf_readonce.representations.spaces.find_space`], saying what the store holds instead when nothing matches.

    `fingerprint` (*optional*): the model's [`current_fingerprint`] when the caller has just computed it (it hashes
    the weights); computed here when omitted. Checked against the model's cached fingerprint
    ([`hf_readonce.representations.fill.given_or_current_fingerprint`]): a stale one or another model's would find that
    model's caches, which would then be read as this model's.

    Raises:
        RepresentationMismatchError: the store holds such caches only for other models (the fingerprints named).
        MissingRepresentationError: the store holds no such caches for this tokenizer and dtype.
        ValueError: several document lengths are stored for this model and none is the default (pass
            `max_document_length`); a `fingerprint` that is not this model's.
    """
    given = {} if max_document_length is None else {"max_document_length": max_document_length}
    probe = BlockAttentionLlamaAdapter(model, tokenizer, **given)
    # which special tokens a document was read with is the encoder's choice (`add_special_tokens`), read back from
    # the space found: the default's space first, else either (as the family's own settings not given)
    # a given one is checked: a stale one, or another model's, would find that model's space
    fingerprint = given_or_current_fingerprint(probe, fingerprint)
    exact = probe.settings()
    wanted = {name: value for name, value in exact.items() if name != "add_special_tokens"}
    # [`find_space`] over one listing of the store's spaces: those read as the default reads them, else either way
    store.refresh()
    spaces, named = store.spaces(), set(given)
    either = _spaces_with(spaces, BlockAttentionLlamaAdapter, wanted, named)
    default = [s for s in either if s.settings.get("add_special_tokens") == exact["add_special_tokens"]]
    try:
        found = _choose_space(store, default, BlockAttentionLlamaAdapter, fingerprint, named, prefer=exact)
    except RepresentationMismatchError:
        found = None
    if found is None:
        found = _choose_space(store, either, BlockAttentionLlamaAdapter, fingerprint, named, prefer=wanted)
    if found is not None:
        return found
    raise MissingRepresentationError(
        f"store {store.path} holds no document caches for this tokenizer and compute dtype "
        f"({wanted['compute_dtype']})" + (f" and max_document_length {max_document_length}"
                                          if max_document_length is not None else "") + ". "
        + _what_the_store_holds(spaces, wanted))


def _what_the_store_holds(spaces: Sequence, wanted: dict) -> str:
    """What a store holds instead of the caches asked for, in one sentence: this model's caches of another compute
    dtype or document length (named, with the option that reads them), else the model types of its spaces (`spaces`:
    the store's, as `store.spaces()` lists them)."""
    caches = [s for s in spaces if s.settings.get("representation") == wanted["representation"]
              and s.settings.get("tokenizer") == wanted["tokenizer"]]
    dtypes = sorted({str(s.settings.get("compute_dtype")) for s in caches} - {str(wanted["compute_dtype"])})
    if dtypes:
        return (f"It holds caches of this tokenizer computed in {', '.join(dtypes)}: compute in that dtype "
                f"(`--compute-dtype {dtypes[0]}`) to read them, or encode again.")
    lengths = sorted({str(s.settings.get("max_document_length")) for s in caches})
    if lengths:
        return f"It holds caches of max_document_length {', '.join(lengths)} (`--max-document-length`)."
    held = sorted({s.model_type or "?" for s in spaces})
    return (f"It holds representations of {', '.join(held)} models only; encode the documents with this model "
            "first." if held else "It is empty; encode the documents with this model first.")


def _left_pad(rows: Sequence[Sequence[int]], pad_token_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def _generation_kwargs(tokenizer, max_new_tokens: int) -> dict:
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
    kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False, "num_beams": 1, "pad_token_id": pad}
    if eos is not None:
        kwargs["eos_token_id"] = eos
    return kwargs


class _StopAfterFirstLine(StoppingCriteria):
    """Ends each row's generation once its text after column `start` holds a newline that follows some text: where
    the answer [`clean_answer`] keeps ends, so the answers are the same, sooner. A newline before any text does not
    end it (transformers' `StopStringCriteria` would, leaving an empty answer)."""

    def __init__(self, tokenizer, start: int):
        self.tokenizer, self.start = tokenizer, start

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.start:], skip_special_tokens=True)
        return torch.tensor(["\n" in text.lstrip() for text in texts], dtype=torch.bool, device=input_ids.device)


def _check(examples, batch_size, max_new_tokens) -> list[Mapping]:
    """The rows as a list, checked with the two counts before any work (TypeError: `examples` not an iterable of
    mappings, e.g. one row given alone; ValueError: a bad count or row, named)."""
    if isinstance(examples, (str, bytes, Mapping)) or not hasattr(examples, "__iter__"):
        raise TypeError(f"`examples` must be an iterable of rows (a list of dicts, a `datasets.Dataset`) with "
                        f"`question` and `context` (or `contexts`), got {type(examples).__name__}.")
    examples = list(examples)
    for i, example in enumerate(examples):
        if not isinstance(example, Mapping):
            raise TypeError(f"example {i} of `examples` must be a mapping (e.g. a dict) with `question` and `context` "
                            f"(or `contexts`), got {type(example).__name__}.")
    for name, value in (("batch_size", batch_size), ("max_new_tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
    for i, example in enumerate(examples):
        problem = field_problem(example, "question")
        if problem is not None:
            raise ValueError(f"question {example.get('id', i)!r}: {problem}.")
        passages_of(example)
    return examples


@takes_store_dtype
@digests_weights_once
def answer_with_document_caches(model, tokenizer, store: RepresentationStore, examples: Iterable[Mapping], *,
                                max_document_length: int | None = None, batch_size: int = 8,
                                max_new_tokens: int = 30, encode_missing: bool = False, store_dtype: str = "float16",
                                progress: bool = False, timings: dict | None = None,
                                recompute_ratio: float = 0.0, settings_used: dict | None = None,
                                counts: dict | None = None) -> dict[str, str]:
    """Answer questions with a causal LM from the stored key/value caches of their passages: per row, the stored
    caches of its passages (in order) are composed in front of its question prompt (see the module docstring) and
    the answer is generated greedily (`generate(document_caches=...)`, rows batched with left padding).

    Args:
        model ([`BlockAttentionLlamaForCausalLM`]), tokenizer: the model that encoded the store and its tokenizer.
        store ([`RepresentationStore`]).
        examples (`Iterable[Mapping]`): rows (dicts or any mapping; a list, a `datasets.Dataset`, a generator...)
            with `id`, `question` and `context` (str or list of str) or `contexts`; read once, before any work.
        max_document_length (`int`, *optional*): the stored document length; looked up in the store when omitted
            ([`find_document_cache_space`]).
        batch_size (`int`, defaults to 8): questions per `generate` call.
        max_new_tokens (`int`, defaults to 30): answer tokens generated at most.
        encode_missing (`bool`, defaults to `False`): encode and store passages that are missing instead of raising.
        store_dtype (`str`, defaults to `"float16"`): storage dtype of what `encode_missing` stores (fp32, fp16,
            bf16); the caches are computed in the model's dtype.
        progress (`bool`): a tqdm bar on stderr counting answered questions.
        timings (`dict`, *optional*): filled with `read_seconds` (reading the store) and `generate_seconds`.
        recompute_ratio (`float`, defaults to 0): fraction of passage tokens whose keys and values are recomputed
            per layer before the question is read (selective recompute, CacheBlend; `generate(recompute_ratio=)`):
            0 answers from the stored caches as they are, 1 as the full prompt. The store is only read.
        settings_used (`dict`, *optional*): filled with the stored document length read and the prompt, decoding
            and recompute ratio used (what `hf-readonce answer` prints).
        counts (`dict`, *optional*): filled with `passages` (distinct passages read) and `passages_cut` (how many of
            them hold more tokens than the caches read, `max_document_length`: they were cut to it when encoded, and
            the answers come from their first tokens only; counted from the token counts and cut flags stored with
            them, tokenizing only those they cannot tell about (stored with `max_document_length` tokens and no flag, by
            an earlier release, or without a count),
            [`hf_readonce.representations.fill.stored_documents_cut`]).

    Returns:
        `dict[str, str]`: example id -> answer, in example order.

    Raises:
        MissingRepresentationError / RepresentationMismatchError: passages not stored for this model and settings
            (naming the first question concerned).
        ValueError: bad rows or arguments (naming them); a `max_document_length` above the model's
            `max_position_embeddings` or a model whose `rope_type` (dynamic, longrope) makes its caches impossible to
            compose (both refused before the weights are hashed); a row whose passages and question run past the
            model's `max_position_embeddings` (naming the question and the lengths).
        TypeError: `examples` not an iterable of mappings (e.g. one row given alone), a `model` or `store` of
            another type; a `dtype=` keyword (the storage dtype is `store_dtype`).
    """
    check_store_arguments(model, store, store_dtype)
    examples = _check(examples, batch_size, max_new_tokens)
    recompute_ratio = check_recompute_ratio(recompute_ratio)
    with one_tokenizer_fingerprint(tokenizer):  # the tokenizer serialized once: for every adapter built here
        # the adapter's own checks cost nothing, so they come before the weights are hashed: a model of another type,
        # a rope type whose caches cannot be composed, a `max_document_length` past the model's positions, a slow
        # tokenizer
        BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=max_document_length)
        # the weights are hashed once per call: the same fingerprint finds the space and reads it
        fingerprint = current_fingerprint(model)
        try:
            settings = find_document_cache_space(store, model, tokenizer, max_document_length,
                                                 fingerprint=fingerprint)
        except (MissingRepresentationError, RepresentationMismatchError):  # nothing of this model's stored yet
            if not encode_missing:
                raise
            settings = {"max_document_length": max_document_length, "add_special_tokens": False}
        adapter = BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=settings["max_document_length"],
                                             add_special_tokens=settings.get("add_special_tokens", False))
    if settings_used is not None:
        settings_used.update(max_document_length=adapter.settings()["max_document_length"],
                             prompt=f"<passage caches>{QUESTION_TEMPLATE!r}",
                             decoding="greedy, answer: the first line with text", recompute_ratio=f"{recompute_ratio:g}")
    passages = [passages_of(e) for e in examples]
    texts = list(dict.fromkeys(p for row in passages for p in row))

    def name_of(text: str) -> str:
        first = next(e for e, row in zip(examples, passages) if text in row)
        return f"a passage of question id {first.get('id')!r}" + (
            f", title {first['title']!r}" if first.get("title") else "")

    fingerprint, settings, hashes = ensure_stored(adapter, store, texts, encode_missing=encode_missing,
                                                  store_dtype=store_dtype, what="passages", name_of=name_of,
                                                  fingerprint=fingerprint)
    if counts is not None:
        counts.update({"passages": len(texts),
                       "passages_cut": stored_documents_cut(adapter, store, fingerprint, settings, hashes)})
    timings = timings if timings is not None else {}
    timings.setdefault("read_seconds", 0.0)
    timings.setdefault("generate_seconds", 0.0)
    pad = _generation_kwargs(tokenizer, max_new_tokens)["pad_token_id"]

    def batch(rows):
        begin = time.perf_counter()
        caches = [[adapter.read(store.get_many(fingerprint, settings, [hashes[p] for p in passages[i]]),
                                device=model.device, dtype=model.dtype)] for i in rows]
        timings["read_seconds"] += time.perf_counter() - begin
        questions = [question_ids(tokenizer, examples[i]["question"]) for i in rows]
        for i, (cache,), question in zip(rows, caches, questions, strict=True):  # named by question, before generate
            check_context_length(len(passages[i]), int(cache.attention_mask.sum()), len(question), model.config,
                                 f"question {examples[i].get('id', i)!r}")
        ids, mask = _left_pad(questions, pad, model.device)
        return ids, mask, {"document_caches": caches, "recompute_ratio": recompute_ratio}

    return _generate_answers(model, tokenizer, examples, batch, batch_size=batch_size, max_new_tokens=max_new_tokens,
                             progress=progress, timings=timings)


def _generate_answers(model, tokenizer, examples: Sequence[Mapping], batch, *, batch_size: int, max_new_tokens: int,
                      progress: bool, timings: dict | None = None) -> dict[str, str]:
    """The batched greedy answer loop shared by [`answer_with_document_caches`] and [`answer_with_full_prompt`]:
    `batch(rows)` gives `(input_ids, attention_mask, extra generate() kwargs)` for a range of example indices; the
    generated tokens after the input are decoded and cut by [`clean_answer`] (each row stops generating at the end of
    its first line of text, [`_StopAfterFirstLine`], since nothing after it is kept). The model is put in eval mode and its
    training mode restored; `timings["generate_seconds"]` (if given) accumulates the generate time.

    Returns:
        `dict[str, str]`: example id (or index) -> answer, in example order.
    """
    from tqdm.auto import tqdm

    generation = _generation_kwargs(tokenizer, max_new_tokens)
    bar = tqdm(total=len(examples), desc="answer", unit="question", disable=not progress, dynamic_ncols=True)
    predictions: dict[str, str] = {}
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(examples), batch_size):
            rows = range(start, min(start + batch_size, len(examples)))
            ids, mask, extra = batch(rows)
            begin = time.perf_counter()
            with torch.no_grad():
                stop = StoppingCriteriaList([_StopAfterFirstLine(tokenizer, ids.shape[1])])
                out = model.generate(ids, attention_mask=mask, stopping_criteria=stop, **extra, **generation)
            if timings is not None:
                timings["generate_seconds"] = timings.get("generate_seconds", 0.0) + time.perf_counter() - begin
            for row, i in enumerate(rows):
                text = tokenizer.decode(out[row, ids.shape[1]:], skip_special_tokens=True)
                predictions[str(examples[i].get("id", i))] = clean_answer(text)
            bar.update(len(rows))
    finally:
        bar.close()
        model.train(was_training)
    return predictions


def prompt_ids(tokenizer, passages: Sequence[str], question: str, max_document_length: int,
               add_special_tokens: bool = False) -> tuple[list[int], list[int]]:
    """The full prompt (the module docstring's format) as one sequence: every passage tokenized as the adapter stores it
    (truncated to `max_document_length`), then the question prompt.

    Returns:
        `(input_ids, block_ids)`: `block_ids[t]` is the passage index of token t, -1 for the question prompt (the
        Block-Attention training mask's blocks).

    Raises:
        ValueError: an empty or non-string question ([`question_prompt`]).
    """
    ids, blocks = [], []
    for b, passage in enumerate(passages):
        with tokenizer_lock(tokenizer):
            tokens = tokenizer(passage, truncation=True, max_length=max_document_length,
                               add_special_tokens=add_special_tokens)["input_ids"]
        ids += tokens
        blocks += [b] * len(tokens)
    tail = question_ids(tokenizer, question)
    return ids + tail, blocks + [-1] * len(tail)


def answer_with_full_prompt(model, tokenizer, examples: Iterable[Mapping], *, max_document_length: int,
                            add_special_tokens: bool = False, batch_size: int = 8, max_new_tokens: int = 30,
                            progress: bool = False) -> dict[str, str]:
    """The baseline of [`answer_with_document_caches`]: the same prompt read in full by the model (documents
    attending to each other, causal attention over everything), answers generated greedily.

    Args:
        model: any causal LM (e.g. `LlamaForCausalLM`), tokenizer: its tokenizer.
        examples, batch_size, max_new_tokens, progress: as in [`answer_with_document_caches`].
        max_document_length (`int`): tokens kept per passage (as the adapter's setting).
        add_special_tokens (`bool`, defaults to `False`): as the adapter's setting.

    Returns:
        `dict[str, str]`: example id -> answer.

    Raises:
        ValueError: bad rows or arguments (naming them). TypeError: `examples` not an iterable of mappings.
    """
    examples = _check(examples, batch_size, max_new_tokens)
    pad = _generation_kwargs(tokenizer, max_new_tokens)["pad_token_id"]

    def batch(rows):
        prompts = [prompt_ids(tokenizer, passages_of(examples[i]), examples[i]["question"], max_document_length,
                              add_special_tokens)[0] for i in rows]
        ids, mask = _left_pad(prompts, pad, model.device)
        return ids, mask, {}

    return _generate_answers(model, tokenizer, examples, batch, batch_size=batch_size, max_new_tokens=max_new_tokens,
                             progress=progress)


def add_distractor_passages(examples: Sequence[dict], num_distractors: int = 3, seed: int = 0) -> list[dict]:
    """Give every row `num_distractors` other passages of the same rows (retrieved distractors): copies of the rows
    with `contexts` (the row's own `context` at a random position among the distractors) and `gold_passage` (that
    position). Deterministic: a row's distractors and position depend only on `seed`, its `id` and the set of
    distinct passages, never on the row order or on other runs.

    Args:
        examples (`Sequence[dict]`): SQuAD-style rows with `id` and `context`.
        num_distractors (`int`, defaults to 3): other passages per row (0: the row's passage alone).
        seed (`int`, defaults to 0).

    Returns:
        `list[dict]`: new rows (the input rows are not modified).

    Raises:
        ValueError: a negative `num_distractors`, or fewer distinct other passages than `num_distractors`.
    """
    if isinstance(num_distractors, bool) or not isinstance(num_distractors, int) or num_distractors < 0:
        raise ValueError(f"`num_distractors` must be an int >= 0, got {num_distractors!r}.")
    contexts = sorted({e["context"] for e in examples})
    if num_distractors and len(contexts) - 1 < num_distractors:
        raise ValueError(f"{len(contexts)} distinct passages: too few for {num_distractors} distractors per row.")
    index = {c: i for i, c in enumerate(contexts)}
    out = []
    for i, example in enumerate(examples):
        rng = random.Random(f"{seed}|{example.get('id', i)}|{len(contexts)}")
        own = index[example["context"]]
        others = [j if j < own else j + 1 for j in rng.sample(range(len(contexts) - 1), num_distractors)]
        position = rng.randrange(num_distractors + 1)
        passages = [contexts[j] for j in others]
        passages.insert(position, example["context"])
        out.append({**example, "contexts": passages, "gold_passage": position})
    return out


def answer_kept(tokenizer, example: dict, max_document_length: int, add_special_tokens: bool = False) -> bool:
    """Whether a row's first gold answer lies inside the part of its passage (`context`) that is read
    (`max_document_length` tokens); always False for a row without an answer.

    Raises:
        ValueError: `answers` not of the SQuAD shape ([`gold_answers`], naming the row's `id`).
    """
    texts, starts = gold_answers(example)
    if not texts or not starts:
        return False
    end = starts[0] + len(texts[0])
    with tokenizer_lock(tokenizer):
        encoded = tokenizer(example["context"], truncation=True, max_length=max_document_length,
                            add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    ends = [b for _, b in encoded["offset_mapping"] if b > 0]
    return bool(ends) and end <= max(ends)


def training_features(tokenizer, examples: Sequence[dict], max_document_length: int, *, block_attention: bool,
                      add_special_tokens: bool = False) -> list[dict]:
    """Causal-LM training rows of the prompt format: `input_ids` = passages, question prompt, answer
    ([`answer_ids`]); `labels` = the answer's tokens only (-100 elsewhere); with `block_attention`, `block_ids` (the
    passage index of each passage token, -1 for question and answer: `forward(block_ids=...)`'s Block-Attention
    mask, under which a passage attends only to itself).

    Args:
        tokenizer: the model's tokenizer. examples (`Sequence[dict]`): rows with `question`, `context`/`contexts`
            and `answers` (the first answer text is the target; rows without one are skipped).
        max_document_length (`int`): tokens kept per passage. block_attention (`bool`): add `block_ids`.
        add_special_tokens (`bool`, defaults to `False`): as the adapter's setting.

    Returns:
        `list[dict]` of int lists.

    Raises:
        ValueError: naming the row's id, for `answers` not of the SQuAD shape ([`gold_answers`]), no passage or an
            empty one ([`passages_of`]), or an empty question ([`question_prompt`]).
        KeyError: an answered row without `question`.
    """
    features = []
    for example in examples:
        texts, _ = gold_answers(example)
        if not texts:
            continue
        prompt, blocks = prompt_ids(tokenizer, passages_of(example), example["question"], max_document_length,
                                    add_special_tokens)
        target = answer_ids(tokenizer, texts[0])
        feature = {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target}
        if block_attention:
            feature["block_ids"] = blocks + [-1] * len(target)
        features.append(feature)
    return features


class DocumentQACollator:
    """Right-pads [`training_features`] rows into a batch: `input_ids` (pad id), `attention_mask`, `labels` (-100),
    and `block_ids` (-1) when the rows have them. Returns `torch.LongTensor`s of shape `(batch_size, longest)`.

    Args:
        pad_token_id (`int`): the id that pads `input_ids`.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        """Batch `rows` (dicts of token-id lists: `input_ids`, and `labels` / `block_ids` when the first row has
        them), each right-padded to the longest `input_ids`.

        Returns:
            `dict[str, torch.LongTensor]`: `input_ids`, `attention_mask` (1 on real tokens) and the rows' `labels` /
            `block_ids`, each of shape `(len(rows), longest)`.

        Raises:
            ValueError: if `rows` is empty.
        """
        if not rows:
            raise ValueError("nothing to batch: `rows` is empty.")
        width = max(len(r["input_ids"]) for r in rows)
        fills = {"input_ids": self.pad_token_id, "labels": -100, "block_ids": -1}
        batch = {}
        for name, fill in fills.items():
            if name in rows[0]:
                batch[name] = torch.tensor([list(r[name]) + [fill] * (width - len(r[name])) for r in rows])
        batch["attention_mask"] = torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"]))
                                                for r in rows])
        return batch


__all__ = ["QUESTION_TEMPLATE", "DocumentQACollator", "add_distractor_passages", "answer_ids", "answer_kept",
           "answer_with_document_caches", "answer_with_full_prompt", "clean_answer", "find_document_cache_space",
           "passages_of", "prompt_ids", "question_ids", "question_prompt", "to_block_attention",
           "training_features"]
