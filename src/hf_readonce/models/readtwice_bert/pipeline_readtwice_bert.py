# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""`question-answering` pipeline for ReadTwice-BERT: a long document is cut into the model's segments, every segment
is read at once (their memories shared, so each segment's second read sees the whole document), and the best span is
picked across all segments.

transformers 5 removed its own question-answering pipeline; this one takes the arguments HF users know from it
(`question`, `context`, `top_k`, `max_answer_len`, `max_question_len`, `handle_impossible_answer`) and returns the
same `{"score", "start", "end", "answer"}` dictionaries. Segmentation and span search are those of hf-readonce's
ReadTwice QA path (`hf_readonce.tasks.readtwice_qa`: `prepare_readtwice_qa_features`, `postprocess_readtwice_qa`).

This file travels with saved checkpoints (`custom_pipelines` in `config.json`), so that
`pipeline("question-answering", model=path, trust_remote_code=True)` works where hf-readonce is not installed: it
imports only torch, transformers and the standard library.
"""

from __future__ import annotations

import inspect
import itertools
import math
import re
import sys
import threading
import types
import weakref
from collections.abc import Iterable, Mapping, Sequence

import torch
from transformers import AutoModelForQuestionAnswering
from transformers.pipelines import PIPELINE_REGISTRY, Pipeline
from transformers.utils import logging

logger = logging.get_logger(__name__)

_DEFAULT_MAX_QUESTION_LEN = 64

_CAPITALIZED = re.compile(r"[A-Z][\w-]*(?:['’][A-Za-z]+)?(?:(?:[ \t]+(?:of|de|da|van|von|del|the))*[ \t]+[A-Z][\w-]*)*")
_SENTENCE_STARTERS = {
    "The", "A", "An", "In", "On", "At", "He", "She", "It", "They", "We", "I", "His", "Her", "Their", "This", "That",
    "When", "While", "After", "Before", "As", "But", "And", "However", "Although", "There", "Then", "What", "Who",
    "Which", "Where", "How", "Why", "If", "During", "Since", "Once", "Instead", "For", "With", "By", "From", "To",
    "Of", "One", "Two",
}


def capitalized_mentions(text: str) -> list[tuple[int, int]]:
    """Mentions from a capitalisation heuristic: maximal runs of capitalised words (joined by `of`, `de`, `van`, ...),
    dropping single-word runs that are common sentence starters. NOT a named-entity recogniser: it is the explicit,
    opt-in stand-in used where no NER model with sound provenance can be installed (no spaCy English pipeline is
    published on PyPI by its authors; see the ReadTwice README section). Pass it as `mention_fn` knowingly.

    Returns:
        `list[tuple[int, int]]`: `(char_start, char_end)` spans, end exclusive.
    """
    spans = []
    for match in _CAPITALIZED.finditer(text):
        start, end = match.span()
        words = match.group().split()
        if words and words[0] in _SENTENCE_STARTERS:
            if len(words) == 1:
                continue
            start = match.start() + match.group().index(words[1])
        for suffix in ("'s", "’s"):
            if text[start:end].endswith(suffix):
                end -= len(suffix)
        spans.append((start, end))
    return spans


# the mention finders a checkpoint's `config.mentions` (the pipeline's default `mention_fn`), a stored space's
# `mentions` setting and `--mentions` can name
MENTION_FUNCTIONS = {"capitalized_mentions": capitalized_mentions}


# Copied from hf_readonce.dtypes.resolve_compute_dtype
def resolve_compute_dtype(requested, device, checkpoint_dtype):
    """The dtype to compute in: `requested` when it names one; for `None` or `"auto"`, float32 on a CPU and
    `checkpoint_dtype` on any other device (hf-readonce's one rule, `hf_readonce.dtypes`).

    Args:
        requested (`str`, `torch.dtype` or `None`): `"auto"`, `"float32"`, `"bfloat16"`, `"float16"` or a dtype.
        device (`str` or `torch.device`): where the model computes (`"cpu"`, `"cuda:0"`, ...).
        checkpoint_dtype (`torch.dtype` or `None`): the dtype the checkpoint is saved in (`None`: float32).

    Returns:
        `torch.dtype`: a floating dtype.

    Raises:
        ValueError: if `requested` names no floating dtype.
    """
    if requested is None or requested == "auto":
        return torch.float32 if torch.device(device).type == "cpu" or checkpoint_dtype is None else checkpoint_dtype
    dtype = getattr(torch, requested, None) if isinstance(requested, str) else requested
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"compute dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {requested!r}.")
    return dtype


# Copied from hf_readonce.representations.base._TOKENIZER_LOCKS
# the re-entrant lock of each tokenizer backend ([`tokenizer_lock`]), dropped with it; the registry is one object of
# the process, kept on a module registered in `sys.modules`, so that every copy of this code (each pipeline file
# carries one, and a pipeline loaded from the Hub is a module of its own) takes the same lock for a tokenizer
_TOKENIZER_LOCKS: weakref.WeakKeyDictionary = vars(sys.modules.setdefault(
    "_hf_readonce_tokenizer_locks", types.ModuleType("_hf_readonce_tokenizer_locks"))).setdefault(
    "locks", weakref.WeakKeyDictionary())


# Copied from hf_readonce.representations.base.tokenizer_lock
def tokenizer_lock(tokenizer):
    """The re-entrant lock that serialises calls of `tokenizer`; every tokenizer call of hf-readonce (adapters,
    tasks, pipelines) is made holding it, across the whole call and never across model work:
    `with tokenizer_lock(tokenizer): batch = tokenizer(texts, truncation=True, max_length=n)`.

    A fast tokenizer keeps its truncation and padding settings on its Rust backend between calls: a call sets them,
    then encodes with the GIL released, so two threads calling one tokenizer with different `truncation`,
    `max_length` or `padding` can each encode with the other's settings (a document silently cut short). Calls made
    holding this lock never mix settings. There is one lock per backend (`tokenizer.backend_tokenizer`, which a
    shallow copy shares; a tokenizer without one is its own key), in a weak-keyed registry that every copy of this
    function in the process shares (each pipeline file carries one) and that lets the lock go with the tokenizer; an
    object that cannot be weakly referenced shares one lock with the other objects of its class. Decoding uses no
    per-call state and is not serialised. A tokenizer call made without the lock (a user's own, in another thread) is
    not covered: hold the lock around it, or give that thread its own `copy.deepcopy(tokenizer)`.

    Args:
        tokenizer: any tokenizer object (a transformers fast or slow tokenizer, or one of another kind).

    Returns:
        the lock (a `threading.RLock`), the same object on every call with this tokenizer: re-entrant, so a helper
        called while it is held takes it again without blocking. Nothing is raised.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    key = tokenizer if backend is None else backend
    try:
        lock = _TOKENIZER_LOCKS.get(key)
    except TypeError:  # cannot be weakly referenced (or hashed): one lock for the objects of its class
        key = type(key)
        lock = _TOKENIZER_LOCKS.get(key)
    if lock is None:  # an atomic insert: two threads asking at once get the same lock
        lock = _TOKENIZER_LOCKS.setdefault(key, threading.RLock())
    return lock


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._PIPELINE_SPELLINGS
# a keyword given to a pipeline call -> the pipeline's parameter it stands for: a length as the Python API, the CLI and
# config fields spell it -> as the pipelines spell it (transformers' pipeline names: `max_answer_len`,
# `max_question_len`, `max_seq_len`, and `_len` for the lengths of their own); `dtype`, which is the compute dtype
# (given when a pipeline is built) -> `store_dtype`, the storage dtype of `store=`, so named in the Python API too
_PIPELINE_SPELLINGS = {
    "max_answer_length": "max_answer_len", "max_question_length": "max_question_len",
    "max_seq_length": "max_seq_len", "max_passage_length": "max_passage_len",
    "max_document_length": "max_document_len", "dtype": "store_dtype",
}


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._spelling_hints
def _spelling_hints(names, parameters) -> list[str]:
    """For the unexpected keyword arguments `names` of a pipeline call, a hint for each one that stands for a
    parameter of the call (`parameters`, the pipeline's call parameters hold it): a length the Python API, the CLI
    or a config field spells otherwise (`max_answer_length` -> `max_answer_len`), and `dtype` where the call takes
    `store_dtype` (`dtype` is the compute dtype, given when the pipeline is built; the storage dtype of `store=` is
    `store_dtype`, as in the Python API). One phrase per name, for the `TypeError` that names them. Returns `[]`
    when none stands for a parameter."""
    hints = []
    for name in sorted(names):
        spelled = _PIPELINE_SPELLINGS.get(name)
        if spelled is None or spelled not in parameters:
            continue
        if name == "dtype":
            hints.append("`dtype` is the compute dtype, given when the pipeline is built (`pipeline(..., "
                         "dtype=...)`); the storage dtype of `store=` is `store_dtype`")
        else:
            hints.append(f"this pipeline spells `{name}` as `{spelled}`, as transformers' pipelines do")
    return hints


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._call_parameters
def _call_parameters(pipeline, batch_size, kwargs: dict) -> tuple[dict, dict, dict]:
    """The preprocess, forward and postprocess parameters of one call: the call's `kwargs` (checked by the
    pipeline's `_sanitize_parameters`, with `batch_size`, else the pipeline's own, as `model_batch_size`) over those
    the pipeline was built with; `generate_kwargs` key by key, as transformers' pipelines merge generate arguments.

    Raises:
        TypeError / ValueError: a `batch_size` (the call's or the pipeline's) that is not an int >= 1, named
            `batch_size` (the argument the user passed).
    """
    batch_size = batch_size if batch_size is not None else pipeline._batch_size
    if batch_size is not None:
        kwargs["model_batch_size"] = _check_int("batch_size", batch_size, 1)
    preprocess, forward, postprocess = pipeline._sanitize_parameters(**kwargs)
    built = pipeline._forward_params
    if "generate_kwargs" in forward and "generate_kwargs" in built:
        forward["generate_kwargs"] = _merge_generate_kwargs(built["generate_kwargs"], forward["generate_kwargs"])
    return ({**pipeline._preprocess_params, **preprocess}, {**built, **forward},
            {**pipeline._postprocess_params, **postprocess})


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._merge_generate_kwargs
def _merge_generate_kwargs(base: dict, over: dict) -> dict:
    """`generate` arguments: `over`'s on top of `base`'s, key by key (transformers' rule for a call's arguments over
    a pipeline's), except that a length counts as one setting: when `over` sets `max_new_tokens` or `max_length`
    (`min_new_tokens` or `min_length`), `base`'s keys of that pair are dropped, so a call's `max_length` is not
    overruled by a `max_new_tokens` the pipeline was built with (`generate` reads `max_new_tokens` first). A length
    of `None` in `over` sets nothing.

    Args:
        base (`dict`): the arguments overridden (the pipeline's, or `generate_kwargs` under a call's own
            `max_new_tokens`). over (`dict`): the arguments that win.

    Returns:
        `dict`: a new dict (neither argument is changed).
    """
    pairs = (("max_new_tokens", "max_length"), ("min_new_tokens", "min_length"))
    lengths = {name for pair in pairs for name in pair}
    over = {name: value for name, value in over.items() if not (name in lengths and value is None)}
    merged = dict(base)
    for pair in pairs:
        if any(name in over for name in pair):
            for name in pair:
                merged.pop(name, None)
    merged.update(over)
    return merged


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._stream
def _stream(inputs, name: str = "inputs"):
    """An iterator over `inputs` when a call reads them lazily, else `None`: a generator or any other iterable that is
    not a `str`, `bytes`, mapping (a `dict`, `UserDict`: one input, never its keys), `list` or `tuple` (a
    `datasets.Dataset`, transformers' `KeyDataset`, a `torch.utils.data.Dataset`). A map-style torch dataset (with
    `__len__`) is read by index, `0 .. len - 1`; nothing is read before the iterator is advanced.

    Args:
        inputs: the call's input. name (`str`, defaults to `"inputs"`): its argument's name, said in the error.

    Returns:
        `Iterator` or `None`.

    Raises:
        TypeError: `inputs` is a `set` or `frozenset`: it has no order, so results could not be matched to inputs;
            or a table with columns (a pandas `DataFrame`): iterating it gives its column names, not its rows.
    """
    if inputs is None or isinstance(inputs, (str, bytes, Mapping, list, tuple)):
        return None
    if isinstance(inputs, (set, frozenset)):
        raise TypeError(f"`{name}` is a {type(inputs).__name__}, which has no order: the results could not be "
                        "matched to the inputs. Pass a list or another ordered iterable.")
    if hasattr(inputs, "columns") and hasattr(inputs, "iloc"):
        raise TypeError(f"`{name}` is a {type(inputs).__name__}, a table: iterating it gives its column names, not "
                        "its rows. Pass one column (`table[\"article\"]`) or its rows as dicts "
                        "(`table.to_dict(\"records\")`).")
    dataset = torch.utils.data.Dataset
    if isinstance(inputs, dataset) and not isinstance(inputs, torch.utils.data.IterableDataset) \
            and hasattr(inputs, "__len__"):
        return (inputs[index] for index in range(len(inputs)))
    if isinstance(inputs, Iterable):
        return iter(inputs)
    return None


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._groups
def _groups(items, size: int):
    """The items of an iterator in groups of `size` (the last one shorter), each pulled only when the one before it
    has been used: `(start, group)`, `start` the position of the group's first item in the whole input.

    Args:
        items (`Iterator`): the inputs. size (`int`): items per group (>= 1).
    """
    start = 0
    while True:
        group = list(itertools.islice(items, size))
        if not group:
            return
        yield start, group
        start += len(group)


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._check_int
def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} ({value!r}).")
    if value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value}.")
    return value


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._check_bool
def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {value!r}.")
    return value


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._no_token_message
def _no_token_message(group: dict) -> str:
    """The error for a context without a token (only characters the tokenizer drops), naming the input it came from:
    `group["positions"]`, the positions of the inputs that share the context, when the group has them."""
    positions = group.get("positions") or []
    where = f" {positions[0]}" if positions else ""
    also = f" (the context of inputs {positions})" if len(positions) > 1 else ""
    return f"`context`{where}{also} has no token: it holds only characters the tokenizer drops."


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._questions_cut
def _questions_cut(batch) -> int:
    """How many questions of a tokenized `batch` were cut to the `max_length` they were tokenized with: those whose
    encoding holds `overflowing` tokens. Read from the tokenization the pipeline does anyway, so no question is
    tokenized again; a batch without encodings (not from a fast tokenizer) counts none.

    Args:
        batch (`BatchEncoding`): questions tokenized with `truncation=True, max_length=...` (one or several).

    Returns:
        `int`: the number of questions cut.
    """
    return sum(1 for encoding in getattr(batch, "encodings", None) or [] if encoding.overflowing)


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._note_questions_cut
def _note_questions_cut(cut: int, total: int, max_length: int, limit: int | None = None) -> None:
    """Say in one warning on this module's logger that `cut` of the `total` questions of a call held more than the
    `max_length` tokens read per question and were cut to them: their answers come from those tokens only (what
    `hf-readonce answer` notes for the same questions). Nothing is said when `cut` is 0.

    Args:
        cut (`int`): the questions cut. total (`int`): the questions of the call.
        max_length (`int`): the tokens read per question (the call's `max_question_len`).
        limit (`int`, *optional*): the largest `max_question_len` the model reads (e.g. its positions); `None`: no
            bound.
    """
    if not cut:
        return
    more = ("the model reads no more of a question" if limit is not None and max_length >= limit
            else "`max_question_len` reads more" + (f", up to {limit}" if limit is not None else ""))
    logger.warning(f"{cut} of {total} question(s) held more than the {max_length} tokens read per question and were "
                   f"cut to them: their answers come from those tokens only ({more}).")


def check_overflow_windows(tokenizer, encoded, texts: Sequence[str], sequence_id: int) -> None:
    """Check that the overflow windows of `encoded` cover every text to its last token.

    ReadTwice reads a document as overlapping segments (`return_overflowing_tokens=True`, `stride=segment_overlap`;
    the paper's §3 segmentation). tokenizers 0.23.1 and 0.23.2 stop those windows after the second, which silently
    drops the rest of every longer document (answers past it can never be found). This check turns that into an
    error.

    Args:
        tokenizer: the fast tokenizer that produced `encoded`.
        encoded: its `BatchEncoding`, made with `return_overflowing_tokens=True` and `return_offsets_mapping=True`.
        texts (`Sequence[str]`): the texts that were cut, in the order given to the tokenizer (one per sample).
        sequence_id (`int`): which sequence of each window holds the text (0 alone, 1 after a question).

    Raises:
        RuntimeError: the windows of some text end before its last token, naming the installed tokenizers version.
    """
    owners = encoded.get("overflow_to_sample_mapping") or [0] * len(encoded["input_ids"])
    covered = [0] * len(texts)
    for window, owner in enumerate(owners):
        ends = [end for (start, end), s in zip(encoded["offset_mapping"][window], encoded.sequence_ids(window))
                if s == sequence_id]
        covered[owner] = max([covered[owner], *ends])
    with tokenizer_lock(tokenizer):
        whole = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    for index, (text_offsets, reached) in enumerate(zip(whole, covered)):
        last = max((end for _, end in text_offsets), default=0)
        if reached < last:
            import importlib.metadata

            try:
                version = importlib.metadata.version("tokenizers")
            except importlib.metadata.PackageNotFoundError:
                version = "unknown"
            raise RuntimeError(
                f"the tokenizer's overflow windows stop at character {reached} of text {index}, whose last token "
                f"ends at character {last}: the rest of the document would be dropped. tokenizers {version} is "
                "installed; versions 0.23.1 and 0.23.2 cut overflow windows short: "
                "pip install \"tokenizers>=0.20,!=0.23.1,!=0.23.2\".")


def entity_spans_for_segment(
    offsets: Sequence[tuple[int, int] | None], char_spans: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Map character spans (end exclusive) onto one segment's tokens: the inclusive token span of the tokens (with
    non-`None` offsets) that overlap each character span; spans with no such token in the segment are dropped
    (a mention cut by a segment boundary keeps its part inside). Duplicates are removed, order kept.

    Returns:
        `list[tuple[int, int]]` of inclusive `(start_token, end_token)`.
    """
    result = []
    for cs, ce in char_spans:
        inside = [i for i, o in enumerate(offsets) if o is not None and o[0] < ce and o[1] > cs and o[1] > o[0]]
        if inside and (inside[0], inside[-1]) not in result:
            result.append((inside[0], inside[-1]))
    return result


def segment_span_candidates(start_logits, end_logits, offsets, n_best_size: int,
                            max_answer_len: int) -> list[tuple[float, int, int]]:
    """The answer spans of one segment: among its context tokens (non-`None` offsets), the `n_best_size` best start
    and end positions (stable order on ties), every pair with `start <= end < start + max_answer_len`, scored
    `start_logit + end_logit`; the search of every ReadTwice QA path (this pipeline,
    `hf_readonce.tasks.readtwice_qa.postprocess_readtwice_qa`).

    Args:
        start_logits, end_logits (`torch.Tensor` of shape `(segment_length,)`): the segment's logits.
        offsets (`list`): per segment token, its `(start, end)` character span in the context or `None`.

    Returns:
        `list[tuple[float, int, int]]`: `(score, char start, char end)` in search order (empty without context
        tokens); each score is the sum of the two logits as Python floats (each logit tensor is read once, into a
        list).
    """
    real = [i for i, o in enumerate(offsets) if o is not None]
    if not real:
        return []
    index, k = torch.tensor(real), min(n_best_size, len(real))
    starts = index[torch.sort(start_logits[index], descending=True, stable=True).indices[:k]].tolist()
    ends = index[torch.sort(end_logits[index], descending=True, stable=True).indices[:k]].tolist()
    start_values, end_values = start_logits.tolist(), end_logits.tolist()
    return [(start_values[s] + end_values[e], offsets[s][0], offsets[e][1]) for s in starts
            for e in ends if s <= e < s + max_answer_len]


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._best_answers
def _best_answers(context: str, candidates, start_pool, end_pool, null_logit: float, handle_impossible_answer: bool,
                  top_k: int):
    """The `top_k` best answers to one question, from its span candidates over every window (segment) of the context.

    Args:
        context (`str`): the text the character spans index.
        candidates (`list[tuple[float, int, int]]`): `(start logit + end logit, char start, char end)` in search
            order (ties keep it).
        start_pool, end_pool (`list[torch.Tensor]`): per window, the start and end logits of its context tokens: the
            softmax of every window's tokens (and the no-answer slot) gives the scores, for start and end separately.
        null_logit (`float`): the no-answer logit score (its half joins each softmax); a candidate with
            `handle_impossible_answer`, ranked before every span it beats.
        top_k (`int`): answers kept; identical character spans (from overlapping windows) count once.

    Returns:
        `{"score", "start", "end", "answer"}` with `top_k=1`, else a list of them (the empty answer with score 0 when
        no valid span exists).
    """
    start_all = torch.cat(start_pool) if start_pool else torch.zeros(0)
    end_all = torch.cat(end_pool) if end_pool else torch.zeros(0)
    if handle_impossible_answer:
        half = torch.tensor([null_logit / 2])
        start_all, end_all = torch.cat([start_all, half]), torch.cat([end_all, half])
    log_z = float(torch.logsumexp(start_all, 0)) + float(torch.logsumexp(end_all, 0)) if start_all.numel() else 0.0
    order = sorted(range(len(candidates)), key=lambda i: -candidates[i][0])  # stable: search order on ties
    answers, seen = [], set()
    for i in order:
        score, char_start, char_end = candidates[i]
        if (char_start, char_end) in seen:
            continue
        seen.add((char_start, char_end))
        answers.append((score, {"score": math.exp(score - log_z), "start": char_start, "end": char_end,
                                "answer": context[char_start:char_end]}))
    if handle_impossible_answer:
        empty = {"score": math.exp(null_logit - log_z), "start": 0, "end": 0, "answer": ""}
        position = next((j for j, (score, _) in enumerate(answers) if null_logit > score), len(answers))
        answers.insert(position, (null_logit, empty))
    answers = [answer for _, answer in answers[:top_k]]
    if not answers:  # no valid span (e.g. max_answer_len shorter than every candidate): the empty answer
        answers = [{"score": 0.0, "start": 0, "end": 0, "answer": ""}]
    return answers[0] if top_k == 1 else answers


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._TokenizerPipeline
class _TokenizerPipeline(Pipeline):
    r"""What every hf-readonce pipeline shares: it loads a tokenizer and nothing else (no processor, image or video
    processor, feature extractor), and it computes in the `dtype` that `pipeline(..., dtype=...)` asks for
    (`"auto"` by default: on a CPU, float32 whatever the checkpoint's dtype; see `resolve_compute_dtype`).

    Args:
        *args, **kwargs: those of [`~transformers.Pipeline`]; `dtype` (`str` or `torch.dtype`, *optional*) is also
            applied to the model after loading. A pipeline built directly from a model object keeps the model's dtype.

    Raises:
        ValueError: an unknown `dtype` (from `resolve_compute_dtype`).
    """

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        # `pipeline(...)` passes its `dtype` on ("auto" by default): on a CPU, "auto" computes in float32 whatever
        # the checkpoint's dtype. A pipeline built directly from a model object keeps the model's dtype.
        requested = kwargs.get("dtype")
        super().__init__(*args, **kwargs)
        if requested is not None:
            self.model.to(resolve_compute_dtype(requested, self.device, self.model.dtype))

    def save_pretrained(self, save_directory, **kwargs):
        r"""[`~transformers.Pipeline.save_pretrained`], keeping the other pipelines of this file that the model's
        config declares. transformers writes `custom_pipelines` with this class's task alone (and sets that on the
        model's config), so saving one pipeline of a checkpoint that declares two (ReadOnce BART's `summarization`
        and `text2text-generation`) dropped the other from the saved folder and from the model. The tasks whose
        class is in this file, whose code the saved folder holds, are kept in both.

        Args:
            save_directory (`str` or `os.PathLike`), **kwargs: as for [`~transformers.Pipeline.save_pretrained`].
        """
        declared = dict(getattr(self.model.config, "custom_pipelines", None) or {})
        super().save_pretrained(save_directory, **kwargs)
        written = getattr(self.model.config, "custom_pipelines", None) or {}
        module = type(self).__module__.rsplit(".", 1)[-1]
        kept = {task: info for task, info in declared.items() if task not in written and isinstance(info, dict)
                and str(info.get("impl", "")).split(".")[0] == module}
        if kept:  # (a `save_directory` that is a file: transformers wrote nothing and changed nothing)
            self.model.config.custom_pipelines = {**kept, **written}
            self.model.config.save_pretrained(save_directory)


class ReadTwiceQuestionAnsweringPipeline(_TokenizerPipeline):
    r"""
    Extractive question answering over long documents with ReadTwice: `pipe(question=..., context=<document>)`.

    The context is cut into segments of the checkpoint's `config.segment_length` ids (special tokens included),
    consecutive segments sharing `config.segment_overlap` tokens (HF's `stride`). All segments of a document go through
    the model in one call: BERT₁ reads them, their memories are gathered into one table per document, and BERT₂ reads
    every segment again with that table, so information crosses segments.

    - Read-once checkpoints (`question_in_first_read=False`): segments are `[CLS] part [SEP]` and each question is
      `[CLS] question [SEP]` (at most `max_question_len` ids); the document's first read and memories are computed
      once (`model.encode_documents`) and serve every question of the call.
    - Paper checkpoints (`question_in_first_read=True`): every segment is `[CLS] question [SEP] part [SEP]`, so each
      question reads the document anew (questions are batched as separate documents).

    Span search is that of hf-readonce's ReadTwice QA path: per segment the `n_best_size` best starts and ends among
    context tokens, `start <= end < start + max_answer_len`, score `start_logit + end_logit`, compared across
    segments. With `handle_impossible_answer`, the empty answer (`{"answer": "", "start": 0, "end": 0}`) competes
    with logit score `min over segments of start[CLS] + end[CLS]` (HF's rule). `score` is the probability of the span
    under a softmax over every segment's context tokens (and the no-answer slot) for start and end separately
    (`p_start * p_end`; the model is trained with this global normalisation, eq. 7), so scores rank as the logits do.

    Args:
        question (`str` or `list[str]`): the question(s).
        context (`str` or `list[str]`): one document for every question, or one per question (equal lengths).
            The first argument may instead be a dict `{"question": ..., "context": ...}`, a list of such dicts, or
            an iterable of them (a generator, a `datasets.Dataset` of such rows, a `torch.utils.data.Dataset`): the
            call then returns an iterator and reads the inputs lazily, `batch_size` at a time (see `batch_size`).
        top_k (`int`, defaults to 1): answers per question: one dict per question with `top_k=1`, else a list (fewer
            when fewer distinct spans exist); identical character spans from overlapping segments count once.
        max_answer_len (`int`, defaults to 15): longest answer in tokens.
        max_question_len (`int`, *optional*): question length in ids (read-once: `[CLS]` and `[SEP]` included;
            paper layout: question tokens only); longer questions are truncated, and one warning per call counts
            them. Defaults to the checkpoint's `max_question_length`, else 64 (as `hf-readonce answer`); read-once
            checkpoints read at most `max_position_embeddings`.
        handle_impossible_answer (`bool`, defaults to `False`): allow the empty answer.
        n_best_size (`int`, defaults to 20): start and end candidates per segment.
        mention_fn (`Callable[[str], list[tuple[int, int]]]`, *optional*): character spans of entity mentions,
            read by `memory_type="entity"` checkpoints; defaults to the finder the checkpoint records
            (`config.mentions`, e.g. `"capitalized_mentions"`: [`capitalized_mentions`], which this file carries),
            and is required where it records none.
        batch_size (`int`, defaults to 8): questions per model call. With an iterable input, also the inputs pulled
            at a time: each group is answered as one list call (a document repeated within it is read once; one
            warning per group counts its questions cut), and the next group is pulled when the answers of this one
            have been taken.

    Returns:
        For one question, a dict `{"score": float, "start": int, "end": int, "answer": str}` (`start`/`end` are
        character offsets in the context, `answer == context[start:end]`), or a list of `top_k` of them; for several
        questions, a list with one such result per question, in order; for an iterable, an iterator over the list
        call's results, one per input, in order.

    Raises:
        ValueError: an empty question or context (naming which), `question` and `context` lists of different lengths,
            a setting out of range (naming it: a read-once `max_question_len` beyond `max_position_embeddings`),
            a paper-layout question that leaves no room for the document in a segment, a context without a token
            (only characters the tokenizer drops; naming its position), or an entity-memory model without
            `mention_fn` that records no mention finder.
        TypeError: a question or context that is not a string, an input that is not a dict (naming its position),
            a setting of the wrong type, a slow tokenizer, or a model that is not ReadTwice (no `segment_length` in
            its config).
        With an iterable input, a bad setting is raised by the call, a bad input when the iterator reaches its group.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> qa = pipeline("question-answering", model="path/or/repo", trust_remote_code=True)
    >>> qa(question=["Who wrote Emma?", "When?"], context=long_document, top_k=2)
    [[{'score': ..., 'start': ..., 'end': ..., 'answer': ...}, ...], [...]]
    ```
    """

    default_batch_size = 8  # `batch_size` when neither the call nor the pipeline sets it

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = self.model.config
        if getattr(config, "segment_length", None) is None or getattr(config, "segment_overlap", None) is None:
            raise TypeError(f"ReadTwiceQuestionAnsweringPipeline needs a ReadTwice model (config.segment_length and "
                            f"segment_overlap), got a {getattr(config, 'model_type', type(config).__name__)!r} one.")
        if self.tokenizer is None or not getattr(self.tokenizer, "is_fast", False):
            raise TypeError("ReadTwiceQuestionAnsweringPipeline needs a fast tokenizer (character offsets).")

    # ------------------------------------------------------------------ parameters
    def _sanitize_parameters(self, top_k=None, max_answer_len=None, max_question_len=None,
                             handle_impossible_answer=None, n_best_size=None, model_batch_size=None, mention_fn=None,
                             **kwargs):
        if kwargs:
            hints = _spelling_hints(kwargs, inspect.signature(self._sanitize_parameters).parameters)
            raise TypeError("; ".join([f"unexpected argument(s) {sorted(kwargs)} for the question-answering pipeline",
                                       *hints]) + ".")
        preprocess, forward, postprocess = {}, {}, {}
        for name, value, low, target in (
            ("max_question_len", max_question_len, 3, preprocess), ("top_k", top_k, 1, postprocess),
            ("max_answer_len", max_answer_len, 1, postprocess), ("n_best_size", n_best_size, 1, postprocess),
            ("model_batch_size", model_batch_size, 1, forward),
        ):
            if value is not None:
                target[name] = _check_int(name, value, low)
        if handle_impossible_answer is not None:
            postprocess["handle_impossible_answer"] = _check_bool("handle_impossible_answer", handle_impossible_answer)
        if mention_fn is not None:
            if not callable(mention_fn):
                raise TypeError(f"`mention_fn` must be callable (text -> character spans), got {mention_fn!r}.")
            preprocess["mention_fn"] = mention_fn
        return preprocess, forward, postprocess

    # ------------------------------------------------------------------ inputs
    # Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert.DeformerQuestionAnsweringPipeline._normalize
    @staticmethod
    def _normalize(inputs, question, context, start: int = 0) -> list[tuple[str, str]]:
        """`[(question, context), ...]` from the accepted call forms; errors name an input by its position, counted
        from `start` (the position of `inputs[0]` in an iterable the call reads in groups).

        Raises:
            ValueError / TypeError: see the class docstring.
        """
        if inputs is not None:
            if question is not None or context is not None:
                raise ValueError("pass either a dict (or list of dicts) or `question=`/`context=`, not both.")
            items = [inputs] if isinstance(inputs, dict) else inputs
            if not isinstance(items, (list, tuple)):
                raise TypeError("the first argument must be a dict {'question': ..., 'context': ...}, a list of "
                                f"them or an iterable of them (a generator, a dataset), got {type(inputs).__name__}.")
            pairs = []
            for i, item in enumerate(items, start):
                if not isinstance(item, dict):
                    raise TypeError(f"input {i} must be a dict {{'question': ..., 'context': ...}}, got "
                                    f"{type(item).__name__}.")
                if "question" not in item or "context" not in item:
                    raise ValueError(f"input {i} needs 'question' and 'context' keys, got {sorted(item)}.")
                pairs.append((item["question"], item["context"]))
        else:
            if question is None or context is None:
                raise ValueError("both `question` and `context` are required.")
            questions = [question] if isinstance(question, str) else question
            if not isinstance(questions, (list, tuple)):
                raise TypeError(f"`question` must be a str or a list of str, got {type(question).__name__} (an "
                                "iterable of {'question': ..., 'context': ...} dicts is the first argument).")
            if isinstance(context, str):
                contexts = [context] * len(questions)
            elif isinstance(context, (list, tuple)):
                contexts = list(context)
                if len(contexts) != len(questions):
                    raise ValueError(f"`question` has {len(questions)} entries but `context` has {len(contexts)}; "
                                     "pass one context for all questions or one per question.")
            else:
                raise TypeError(f"`context` must be a str or a list of str, got {type(context).__name__}.")
            pairs = list(zip(questions, contexts))
        if not pairs:
            raise ValueError("`question` is empty: nothing to answer.")
        for i, (q, c) in enumerate(pairs, start):
            for name, value in (("question", q), ("context", c)):
                if not isinstance(value, str):
                    raise TypeError(f"`{name}` {i} must be a str, got {type(value).__name__}.")
                if not value.strip():
                    raise ValueError(f"`{name}` {i} is empty.")
        return pairs

    # Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert.DeformerQuestionAnsweringPipeline.__call__
    def __call__(self, *args, question=None, context=None, batch_size=None, **kwargs):
        """Answer questions about contexts (documents), each context read once; the class docstring has the arguments,
        returns and paper section.

        Raises:
            ValueError / TypeError: as the class docstring lists (missing or empty question or context, a setting out
                of range or of the wrong type, named).
        """
        if len(args) > 1:
            if question is not None or context is not None:
                raise ValueError("pass `question` and `context` either by position or by keyword, not both.")
            question, context, args = args[0], args[1], args[2:]
            if args:
                raise TypeError("at most two positional arguments (question, context).")
        inputs = args[0] if args else kwargs.pop("inputs", None)
        items = _stream(inputs)
        if items is not None:
            if question is not None or context is not None:
                raise ValueError("pass either an iterable of {'question': ..., 'context': ...} dicts or "
                                 "`question=`/`context=`, not both.")
            _call_parameters(self, batch_size, dict(kwargs))  # settings are checked now, before any input is read
            return self._answer_stream(items, batch_size, kwargs)
        pairs = self._normalize(inputs, question, context)
        results = self._answer(pairs, batch_size, kwargs)
        single = inputs is None and isinstance(question, str) or isinstance(inputs, dict)
        return results[0] if single else results

    # Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert.DeformerQuestionAnsweringPipeline._answer_stream
    def _answer_stream(self, items, batch_size, kwargs: dict):
        """The answers to an iterable of `{"question", "context"}` dicts, one per input, in order: the inputs are
        pulled `batch_size` at a time (the call's, else the pipeline's, else `default_batch_size`) and each group is
        answered as one list call, its contexts read once."""
        size = batch_size if batch_size is not None else self._batch_size or self.default_batch_size
        for start, group in _groups(items, size):
            yield from self._answer(self._normalize(group, None, None, start), batch_size, dict(kwargs), start)

    # Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert.DeformerQuestionAnsweringPipeline._answer
    def _answer(self, pairs, batch_size, kwargs: dict, start: int = 0) -> list:
        """The answer to each `(question, context)` pair, in order, each distinct context read once; `start` is the
        position of the first pair in the call's input (errors name an input by it)."""
        preprocess_params, forward_params, postprocess_params = _call_parameters(self, batch_size, kwargs)
        groups: dict[str, list[int]] = {}
        for index, (_, c) in enumerate(pairs):
            groups.setdefault(c, []).append(index)
        self._prepare(list(groups), preprocess_params, forward_params)
        results: list = [None] * len(pairs)
        cut = 0  # questions cut to max_question_len, over every context: one warning per call
        for c, indices in groups.items():
            group = {"context": c, "questions": [pairs[i][0] for i in indices],
                     "positions": [start + i for i in indices]}
            model_inputs = self.preprocess(group, **preprocess_params)
            cut += model_inputs["questions_cut"]
            answers = self.postprocess(self.forward(model_inputs, **forward_params), **postprocess_params)
            for i, answer in zip(indices, answers):
                results[i] = answer
        _note_questions_cut(cut, len(pairs), model_inputs["max_question_len"], model_inputs["question_limit"])
        return results

    def _prepare(self, contexts: list[str], preprocess_params: dict, forward_params: dict) -> None:
        """What a call resolves before any model work: nothing (no store)."""

    # ------------------------------------------------------------------ the three steps
    def preprocess(self, group, max_question_len=None, mention_fn=None):
        """Cut one document into segments (per question in the paper layout).

        Returns:
            `dict` with `context`, `read_once` (`bool`) and `documents`: one entry for the read-once layout (shared
            by every question) or one per question, each with `input_ids`, `token_type_ids` (per segment, unpadded,
            at most `segment_length`), `offsets` (per segment and token, the character span in the context or
            `None` for special and question tokens), `entity_spans` (per segment, inclusive token spans) and, for
            the read-once layout, `question_ids` (per question, `[CLS] question [SEP]`); `num_questions`,
            `questions_cut` (how many questions held more than `max_question_len` tokens and were cut to them),
            `max_question_len` (the length used) and `question_limit` (the largest the model reads: its
            `max_position_embeddings` read once, the question tokens that leave a segment more than
            `segment_overlap` document tokens in the paper layout); `__call__` says in one warning how many
            questions of the call were cut.

        Raises:
            ValueError: entity memories without `mention_fn` and no recorded finder (`config.mentions`); a
                paper-layout question leaving no room in a segment; a read-once `max_question_len` beyond
                `max_position_embeddings`; a context without a token (only characters the tokenizer drops).
        """
        config, tokenizer = self.model.config, self.tokenizer
        if max_question_len is None:
            max_question_len = getattr(config, "max_question_length", None) or _DEFAULT_MAX_QUESTION_LEN
        read_once = not config.question_in_first_read
        if read_once and max_question_len > config.max_position_embeddings:
            raise ValueError(f"`max_question_len` must be <= max_position_embeddings={config.max_position_embeddings}"
                             f" (a question is read alone), got {max_question_len}.")
        entity = getattr(config, "memory_type", None) == "entity"
        if entity and mention_fn is None:  # the finder the checkpoint was trained with, where it records one
            recorded = getattr(config, "mentions", None)  # a name; anything else (a hand-edited list) is no finder
            mention_fn = MENTION_FUNCTIONS.get(recorded) if isinstance(recorded, str) else None
        if entity and mention_fn is None:
            raise ValueError("this ReadTwice model uses entity memories (memory_type='entity') and records no mention "
                             f"finder of {sorted(MENTION_FUNCTIONS)} (config.mentions = "
                             f"{getattr(config, 'mentions', None)!r}): pass `mention_fn` (text -> character spans of "
                             "entity mentions).")
        length, overlap = config.segment_length, config.segment_overlap
        context = group["context"]
        context_mentions = mention_fn(context) if entity else []
        if hasattr(tokenizer, "deprecation_warnings"):  # whole documents are tokenized on purpose (segmented)
            tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True

        def segments(encoded, context_id, question_mentions=()):
            document = {"input_ids": [], "token_type_ids": [], "offsets": [], "entity_spans": []}
            for seg in range(len(encoded["input_ids"])):
                ids = list(encoded["input_ids"][seg])
                sequence_ids = encoded.sequence_ids(seg)
                offsets = [tuple(o) if s == context_id else None
                           for o, s in zip(encoded["offset_mapping"][seg], sequence_ids)]
                spans = entity_spans_for_segment(offsets, context_mentions) if entity else []
                if question_mentions:
                    question_offsets = [tuple(o) if s == 0 else None
                                        for o, s in zip(encoded["offset_mapping"][seg], sequence_ids)]
                    spans = entity_spans_for_segment(question_offsets, question_mentions) + spans
                document["input_ids"].append(ids)
                document["token_type_ids"].append([1] * len(ids) if read_once
                                                  else list(encoded["token_type_ids"][seg]))
                document["offsets"].append(offsets)
                document["entity_spans"].append(spans)
            return document

        if read_once:
            with tokenizer_lock(tokenizer):
                encoded = tokenizer(context, truncation=True, max_length=length, stride=overlap,
                                    return_overflowing_tokens=True, return_offsets_mapping=True)
            check_overflow_windows(tokenizer, encoded, [context], 0)
            document = segments(encoded, 0)
            with tokenizer_lock(tokenizer):
                questions = tokenizer([q.strip() for q in group["questions"]], truncation=True,
                                      max_length=max_question_len)
            document["question_ids"] = [list(q) for q in questions["input_ids"]]
            documents, cut, limit = [document], _questions_cut(questions), int(config.max_position_embeddings)
        else:
            # a segment is [CLS] question [SEP] part [SEP], the part more than segment_overlap tokens
            documents, cut, limit = [], 0, length - overlap - 4
            for question in group["questions"]:
                question = question.strip()
                # the first max_question_len tokens, cut from the question's own text at the last one's end (case
                # kept, so mentions line up with the tokens; `hf_readonce.tasks.readtwice_qa.truncate_question`)
                with tokenizer_lock(tokenizer):
                    encoded = tokenizer(question, truncation=True, max_length=max_question_len,
                                        add_special_tokens=False, return_offsets_mapping=True)
                part, cut = encoded["input_ids"], cut + _questions_cut(encoded)
                if len(part) >= max_question_len:
                    question = question[: encoded["offset_mapping"][-1][1]]
                if length - len(part) - 3 <= overlap:
                    raise ValueError(f"segment_length={length} leaves no more than segment_overlap={overlap} "
                                     f"document tokens after a {len(part)}-token question: pass a smaller "
                                     "`max_question_len`.")
                with tokenizer_lock(tokenizer):
                    encoded = tokenizer(question, context, truncation="only_second", max_length=length,
                                        stride=overlap, return_overflowing_tokens=True, return_offsets_mapping=True)
                check_overflow_windows(tokenizer, encoded, [context], 1)
                documents.append(segments(encoded, 1, mention_fn(question) if entity else ()))
        if not any(o is not None for segment in documents[0]["offsets"] for o in segment):
            raise ValueError(_no_token_message(group))
        return {"context": context, "read_once": read_once, "documents": documents,
                "num_questions": len(group["questions"]), "questions_cut": cut, "max_question_len": max_question_len,
                "question_limit": limit}

    @staticmethod
    def _pad(rows, value=0) -> torch.Tensor:
        out = torch.full((len(rows), max(1, max(len(r) for r in rows))), value, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def _segment_batch(self, documents, device) -> dict:
        """Flat segment tensors of several documents (`document_ids` = position in `documents`)."""
        pad = self.tokenizer.pad_token_id or 0
        segments = [ids for d in documents for ids in d["input_ids"]]
        batch = {
            "input_ids": self._pad(segments, pad),
            "attention_mask": self._pad([[1] * len(s) for s in segments]),
            "token_type_ids": self._pad([t for d in documents for t in d["token_type_ids"]]),
            "document_ids": torch.tensor([i for i, d in enumerate(documents) for _ in d["input_ids"]]),
            "segment_positions": torch.tensor([p for d in documents for p in range(len(d["input_ids"]))]),
        }
        if getattr(self.model.config, "memory_type", None) == "entity":
            spans = [s for d in documents for s in d["entity_spans"]]
            tensor = torch.full((len(spans), max(1, max(len(s) for s in spans)), 2), -1, dtype=torch.long)
            for i, row in enumerate(spans):
                if row:
                    tensor[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            batch["entity_spans"] = tensor
        return {name: value.to(device) for name, value in batch.items()}

    def _forward(self, inputs, model_batch_size=8):
        """Run the model over all segments of the document at once. Returns the inputs plus `logits`: per question,
        per segment, `(start, end)` logits over the segment's tokens and the no-answer score `start[CLS] +
        end[CLS]`."""
        model, pad = self.model, self.tokenizer.pad_token_id or 0
        device = next(model.parameters()).device
        logits = []
        if inputs["read_once"]:
            document = inputs["documents"][0]
            batch = self._segment_batch([document], device)
            # the document's first read and memories, once; no attention weights or per-layer states, whatever the
            # config's output switches ask for
            states = model.encode_documents(**batch, output_attentions=False, output_hidden_states=False)
            lengths = [len(ids) for ids in document["input_ids"]]
            questions = document["question_ids"]
            for begin in range(0, len(questions), model_batch_size):
                chunk = questions[begin : begin + model_batch_size]
                q_ids = self._pad(chunk, pad).to(device)
                out = model(question_input_ids=q_ids, question_attention_mask=self._pad([[1] * len(q) for q in chunk]
                                                                                        ).to(device),
                            question_token_type_ids=torch.zeros_like(q_ids),
                            question_document_ids=torch.zeros(len(chunk), dtype=torch.long, device=device),
                            document_states=states, output_attentions=False, output_hidden_states=False,
                            return_dict=True)
                start, end = out.start_logits.float().cpu(), out.end_logits.float().cpu()
                shift = int(out.question_length)
                per_question = [[None] * len(lengths) for _ in chunk]
                for row, (q, seg) in enumerate(zip(out.question_index.tolist(), out.segment_index.tolist())):
                    n = lengths[seg]
                    per_question[q][seg] = (start[row, shift : shift + n], end[row, shift : shift + n],
                                            float(start[row, 0] + end[row, 0]))
                logits += per_question
        else:
            documents = inputs["documents"]
            for begin in range(0, len(documents), model_batch_size):
                chunk = documents[begin : begin + model_batch_size]
                # the logits only: no attention weights or per-layer states, whatever the config's switches ask for
                out = model(**self._segment_batch(chunk, device), output_attentions=False, output_hidden_states=False,
                            return_dict=True)
                start, end = out.start_logits.float().cpu(), out.end_logits.float().cpu()
                groups, segment_index = out.group_ids.tolist(), out.segment_index.tolist()
                per_question = [[] for _ in chunk]
                first = {}
                for row, (q, seg) in enumerate(zip(groups, segment_index)):
                    first.setdefault(q, seg)
                    n = len(chunk[q]["input_ids"][seg - first[q]])
                    per_question[q].append((start[row, :n], end[row, :n], float(start[row, 0] + end[row, 0])))
                logits += per_question
        return {**inputs, "logits": logits}

    def postprocess(self, outputs, top_k=1, max_answer_len=15, handle_impossible_answer=False, n_best_size=20):
        """Per question, the `top_k` best answers (see the class docstring for the search and the scores)."""
        context, documents = outputs["context"], outputs["documents"]
        results = []
        for q, per_segment in enumerate(outputs["logits"]):
            offsets = (documents[0] if outputs["read_once"] else documents[q])["offsets"]
            candidates = []  # (logit score, char start, char end), in search order
            start_pool, end_pool, null = [], [], math.inf
            for seg, (start_logits, end_logits, null_score) in enumerate(per_segment):
                segment_offsets = offsets[seg]
                null = min(null, null_score)
                real = [i for i, o in enumerate(segment_offsets) if o is not None]
                if not real:
                    continue
                start_pool.append(start_logits[real])
                end_pool.append(end_logits[real])
                candidates += segment_span_candidates(start_logits, end_logits, segment_offsets, n_best_size,
                                                      max_answer_len)
            results.append(_best_answers(context, candidates, start_pool, end_pool, null, handle_impossible_answer,
                                         top_k))
        return results


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._register_pipeline
def _register_pipeline(task: str, pipeline_class, pt_model) -> None:
    """Register `pipeline_class` for `task` in transformers' `PIPELINE_REGISTRY` unless a class already owns the task.
    transformers keeps one class per task, and several hf-readonce families share a task (question-answering,
    summarization); the first pipeline file imported in a process owns it, and a second copy of a file (a checkpoint's,
    loaded with remote code beside hf-readonce's) re-registers nothing. A class that does not own its task still
    knows it, so `save_pretrained` writes `custom_pipelines`, and `pipeline(..., trust_remote_code=True)` loads each
    family's class from its checkpoint's config."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(task)
    if registered is None:
        PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=pipeline_class, pt_model=pt_model, type="text")
    else:
        pipeline_class._registered_impl = {task: {**registered, "impl": pipeline_class}}


_register_pipeline("question-answering", ReadTwiceQuestionAnsweringPipeline, AutoModelForQuestionAnswering)

__all__ = ["MENTION_FUNCTIONS", "ReadTwiceQuestionAnsweringPipeline", "capitalized_mentions", "entity_spans_for_segment",
           "segment_span_candidates"]
