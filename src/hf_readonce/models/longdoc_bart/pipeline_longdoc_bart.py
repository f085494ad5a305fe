# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""`summarization` pipeline for LongDoc BART: each distinct document of a call is encoded once (the neighborhood or
convolutional encoder, the long part of the work), and its encoder outputs serve every summary asked of it (the same
document passed several times, `num_return_sequences`, beams).

transformers 5 removed its own summarization pipeline; this one takes its output format (`[{"summary_text": ...}]`)
and the generation arguments HF users know (`max_new_tokens`, `min_new_tokens`, `num_beams`, `generate_kwargs`).

This file travels with saved checkpoints (`custom_pipelines` in `config.json`), so that
`pipeline("summarization", model=path, trust_remote_code=True)` works where hf-readonce is not installed: it imports
only torch, transformers and the standard library.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import sys
import threading
import types
import weakref
from collections.abc import Iterable, Mapping

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationConfig
from transformers.modeling_outputs import BaseModelOutput
from transformers.pipelines import PIPELINE_REGISTRY, Pipeline
from transformers.utils import logging

logger = logging.get_logger(__name__)

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


def _unexpected_arguments(pipeline_name: str, names, parameters=()) -> str:
    """The `TypeError` message for keyword arguments a document pipeline does not take: generation settings (fields
    of `GenerationConfig`, e.g. `temperature`, `do_sample`, `max_length`) are sent to `generate_kwargs`; a setting
    the Python API, the CLI or a config field spells otherwise than `parameters` (the pipeline's call parameters) is
    given the pipeline's spelling ([`_spelling_hints`]: `max_document_length` -> `max_document_len`); the others
    (e.g. `truncation`, `return_type`) are named as not parameters of this pipeline, whose output options are
    `return_text`, `return_tensors` and `clean_up_tokenization_spaces` and which cuts over-long documents itself
    (`max_document_len`, with a warning)."""
    fields = GenerationConfig()
    settings = sorted(name for name in names if hasattr(fields, name))
    hints = _spelling_hints([name for name in names if name not in settings], parameters)
    spelled = {name for name in names if _PIPELINE_SPELLINGS.get(name) in parameters}
    others = sorted(name for name in names if name not in settings and name not in spelled)
    parts = [f"unexpected argument(s) {sorted(names)} for {pipeline_name}"]
    if settings:
        parts.append(f"pass generate arguments such as {settings} in `generate_kwargs`")
    parts.extend(hints)
    if others:
        parts.append(f"{others} are not parameters of this pipeline (its output options are `return_text`, "
                     "`return_tensors` and `clean_up_tokenization_spaces`; it cuts documents longer than "
                     "`max_document_len` tokens itself, with a warning)")
    return "; ".join(parts) + "."


def _output_options(return_tensors=None, return_text=None, clean_up_tokenization_spaces=None) -> dict:
    """The postprocess parameters of transformers' output options, each checked to be a bool (`None`: not given).

    Raises:
        TypeError: an option that is not a bool, named.
    """
    options = {"return_tensors": return_tensors, "return_text": return_text,
               "clean_up_tokenization_spaces": clean_up_tokenization_spaces}
    return {name: _check_bool(name, value) for name, value in options.items() if value is not None}


def _check_outputs(postprocess_params: dict) -> None:
    """Refuse output options that leave nothing to return (`return_text=False` without `return_tensors=True`), with
    the call's and the pipeline's options merged, before any model work.

    Raises:
        ValueError: naming `return_text` and `return_tensors`.
    """
    tensors = postprocess_params.get("return_tensors", False)
    if not postprocess_params.get("return_text", not tensors) and not tensors:
        raise ValueError("`return_text=False` without `return_tensors=True` leaves nothing to return: pass "
                         "`return_tensors=True` for the token ids, or keep `return_text`.")


def _generate_arguments(generate_kwargs: dict, added: dict) -> dict:
    """The keyword arguments of one `generate` call: `generate_kwargs` with `added` (the pipeline's own settings) on
    top. With a `generation_config` among them, every generation setting goes into a copy of it (the caller's object
    is not changed) and the other arguments (e.g. `logits_processor`) stay keyword arguments: `generate` reads them as
    it would read them passed beside the config, without warning that this is deprecated.

    Args:
        generate_kwargs (`dict`): the user's `generate` arguments. added (`dict`): the pipeline's, which win.

    Returns:
        `dict`: the arguments to pass to `generate`.

    Raises:
        TypeError: a `generation_config` that is not a `transformers.GenerationConfig`.
    """
    kwargs = {**generate_kwargs, **added}
    config = kwargs.pop("generation_config", None)
    if config is None:
        return kwargs
    if not isinstance(config, GenerationConfig):
        raise TypeError("`generate_kwargs['generation_config']` must be a transformers GenerationConfig, got "
                        f"{type(config).__name__}.")
    config = copy.deepcopy(config)
    unused = config.update(**kwargs)
    return {**unused, "generation_config": config}


def _without_padding(sequences, model, kwargs: dict) -> list:
    """Each generated sequence up to its first end-of-sequence token (the first token, the decoder's start, aside):
    the padding a batched `generate` adds after a sequence that ended early is dropped, so a sequence's ids do not
    depend on the other texts of its batch (`batch_size`). Sequences without an end token are kept whole.

    Args:
        sequences (`Iterable[torch.LongTensor]`): 1-d id tensors, as `generate` returned them.
        model: the model that generated them. kwargs (`dict`): the `generate` arguments used. The end token is
            read as `generate` reads it: their `eos_token_id`, else their `generation_config`'s, else (where that
            config leaves it unset) the model's `generation_config`'s.

    Returns:
        `list[torch.LongTensor]`.
    """
    config = kwargs.get("generation_config")
    if "eos_token_id" in kwargs:
        eos = kwargs["eos_token_id"]
    else:
        eos = config.eos_token_id if config is not None else None
        if eos is None:  # `generate` fills what a given config leaves unset from the model's
            eos = model.generation_config.eos_token_id
    ends = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]
    trimmed = []
    for sequence in sequences:
        hits = torch.isin(sequence[1:], torch.tensor(ends, dtype=sequence.dtype)).nonzero() if ends else []
        trimmed.append(sequence[: int(hits[0]) + 2] if len(hits) else sequence)
    return trimmed


def _records(tokenizer, outputs: dict, prefix: str, return_tensors: bool = False, return_text: bool | None = None,
             clean_up_tokenization_spaces: bool | None = None) -> list[list[dict]]:
    """Per input, its `num_return_sequences` records, as transformers' text2text-generation and summarization
    pipelines return them: `{f"{prefix}_text": str}` (decoded without special tokens, surrounding spaces stripped),
    and with `return_tensors=True` `{f"{prefix}_token_ids": torch.LongTensor}` (the generated ids, the decoder's
    start token first; text too only when `return_text=True` is also given).

    Args:
        tokenizer: decodes the ids. outputs (`dict`): `sequences` (1-d id tensors) and `num_return_sequences`.
        prefix (`str`): `"generated"` or `"summary"`.
        return_tensors (`bool`, defaults to `False`): include the token ids.
        return_text (`bool`, *optional*): include the text; defaults to `not return_tensors`.
        clean_up_tokenization_spaces (`bool`, *optional*): passed to `batch_decode`; defaults to the tokenizer's
            own setting.

    Returns:
        `list[list[dict]]`: one list of records per input.
    """
    sequences, n = outputs["sequences"], outputs["num_return_sequences"]
    if return_text is None:
        return_text = not return_tensors
    records = [{} for _ in sequences]
    if return_text:
        options = {} if clean_up_tokenization_spaces is None else \
            {"clean_up_tokenization_spaces": clean_up_tokenization_spaces}
        for record, text in zip(records, tokenizer.batch_decode(sequences, skip_special_tokens=True, **options)):
            record[f"{prefix}_text"] = text.strip()
    if return_tensors:
        for record, ids in zip(records, sequences):
            record[f"{prefix}_token_ids"] = ids
    return [records[i : i + n] for i in range(0, len(records), n)]


def _note_documents_cut(batch, max_length: int, argument: str, limit: int | None = None) -> int:
    """Say how many documents of a tokenized `batch` were cut to `max_length` tokens (a warning on this module's
    logger): what is generated from them comes from their first tokens only, as `hf-readonce encode` and
    `hf-readonce summarize` also say. Counted from a fast tokenizer's `overflowing` tokens (a slow tokenizer's batch
    counts none).

    Args:
        batch (`BatchEncoding`): the documents, tokenized with `truncation=True, max_length=max_length`.
        max_length (`int`): the tokens read per document. argument (`str`): the call's argument that reads more.
        limit (`int`, *optional*): the most tokens the model can read (e.g. its learned positions); `None`: no bound.

    Returns:
        `int`: the number of documents cut.
    """
    encodings = getattr(batch, "encodings", None) or []
    cut = sum(1 for encoding in encodings if encoding.overflowing)
    if cut:
        more = (f"the model reads no more: {limit} positions" if limit is not None and max_length >= limit
                else f"`{argument}` reads more" + (f", up to {limit}" if limit is not None else ""))
        logger.warning(f"{cut} of {len(encodings)} document(s) held more than the {max_length} tokens read per "
                       f"document and were cut to them: their outputs come from those tokens only ({more}).")
    return cut


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


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._check_bool
def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {value!r}.")
    return value


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._check_int
def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} ({value!r}).")
    if value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value}.")
    return value


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


class LongDocSummarizationPipeline(_TokenizerPipeline):
    r"""
    Summaries of long documents by LongDoc BART: `pipe(document)` or `pipe([doc1, doc2, ...])`.

    The distinct documents of a call are tokenized (special tokens added, at most `max_document_len` tokens, right
    padding) and read by the model's encoder once, `batch_size` documents per encoder call; the decoder then
    generates from those encoder outputs (`model.generate(encoder_outputs=..., attention_mask=...)`), `batch_size`
    summaries per `generate` call. A document passed twice is encoded once, and beams or `num_return_sequences`
    reuse the same outputs. Padding does not change a document's encoder outputs (the encoder masks it), so every
    summary is the one `model.generate(input_ids=<the document alone>)` gives.

    Generation follows the model's `generation_config` except for the arguments passed here.

    Args:
        documents (`str`, `list[str]` or an iterable of `str`): the document(s). An iterable that is not a list or
            tuple (a generator, `KeyDataset(dataset, "article")`, a `torch.utils.data.Dataset` of strings) is read
            lazily, `batch_size` documents at a time (see `batch_size`), and the call returns an iterator.
        max_new_tokens (`int`, *optional*): tokens generated per summary; wins over a length in `generate_kwargs`.
        min_new_tokens (`int`, *optional*): tokens generated at least.
        num_beams (`int`, *optional*): beam search width.
        max_document_len (`int`, *optional*): document tokens read (longer documents are truncated; a warning
            counts them). Defaults to the length the checkpoint was trained with (`config.max_document_length`,
            recorded by the LongDoc summarization recipe), else `config.max_position_embeddings` (BART's positions
            are learned: no more fit).
        generate_kwargs (`dict`, *optional*): further `generate` arguments (e.g. `num_return_sequences`,
            `length_penalty`, `no_repeat_ngram_size`, a `generation_config`). A call's arguments win over the
            pipeline's key by key, and a length the call sets (`max_new_tokens` or `max_length`) replaces the
            pipeline's length.
        return_text (`bool`, *optional*): include `"summary_text"`; defaults to `True` unless `return_tensors=True`.
        return_tensors (`bool`, defaults to `False`): include `"summary_token_ids"`, the generated ids
            (`torch.LongTensor` of shape `(length,)`, the decoder's start token first, up to the end-of-sequence
            token: no batch padding), as transformers' summarization pipeline does; with it alone, the text is left
            out.
        clean_up_tokenization_spaces (`bool`, *optional*): passed to the tokenizer's decoding; defaults to the
            tokenizer's own setting.
        batch_size (`int`, defaults to 8): documents per encoder call and summaries per `generate` call. With an
            iterable input, also the documents pulled at a time: each group is summarized as one list call (a
            document repeated within it is encoded once), and the next group is pulled when the summaries of this
            one have been taken.

    Returns:
        For one document, `[{"summary_text": str}, ...]` (one entry per returned sequence); for several, one
        `{"summary_text": str}` per document, in order (a list of such lists with `num_return_sequences` > 1), as
        transformers' summarization pipeline returns; for an iterable, an iterator yielding one such result per
        document, in order (the results of the list call).

    Raises:
        ValueError: no document, an empty document (naming its position), a setting out of range (naming it), a
            `max_document_len` beyond the position table, `generate_kwargs` that set the encoder inputs,
            `return_text=False` without `return_tensors=True`.
        TypeError: a document that is not a string (naming its position), a setting of the wrong type, a
            `generation_config` that is not a `GenerationConfig`, a model without an encoder.
        With an iterable input, a bad setting is raised by the call, a bad document when the iterator reaches its
        group.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> summarize = pipeline("summarization", model="path/or/repo", trust_remote_code=True)
    >>> summarize([long_article, other_article], max_new_tokens=60, num_beams=4)
    [[{'summary_text': ...}], [{'summary_text': ...}]]
    ```
    """

    default_batch_size = 8  # `batch_size` when neither the call nor the pipeline sets it

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not callable(getattr(self.model, "get_encoder", None)) or not hasattr(self.model, "generate"):
            raise TypeError(f"{type(self).__name__} needs an encoder-decoder model (LongDoc BART), got "
                            f"{type(self.model).__name__}.")
        if self.tokenizer is None:
            raise TypeError(f"{type(self).__name__} needs a tokenizer.")

    def _sanitize_parameters(self, max_new_tokens=None, min_new_tokens=None, num_beams=None, max_document_len=None,
                             generate_kwargs=None, model_batch_size=None, return_tensors=None, return_text=None,
                             clean_up_tokenization_spaces=None, **kwargs):
        if kwargs:
            raise TypeError(_unexpected_arguments(type(self).__name__, kwargs,
                                                  inspect.signature(self._sanitize_parameters).parameters))
        postprocess = _output_options(return_tensors, return_text, clean_up_tokenization_spaces)
        preprocess, forward = {}, {}
        if max_document_len is not None:
            preprocess["max_document_len"] = _check_int("max_document_len", max_document_len, 1)
            limit = getattr(self.model.config, "max_position_embeddings", None)
            if limit is not None and max_document_len > limit:
                raise ValueError(f"`max_document_len` must be <= config.max_position_embeddings = {limit} (BART's "
                                 f"positions are learned), got {max_document_len}.")
        if model_batch_size is not None:
            forward["model_batch_size"] = _check_int("batch_size", model_batch_size, 1)
        generate = {}
        for name, value, low in (("max_new_tokens", max_new_tokens, 1), ("min_new_tokens", min_new_tokens, 0),
                                 ("num_beams", num_beams, 1)):
            if value is not None:
                generate[name] = _check_int(name, value, low)
        if generate_kwargs is not None:
            if not isinstance(generate_kwargs, dict):
                raise TypeError(f"`generate_kwargs` must be a dict, got {type(generate_kwargs).__name__}.")
            clash = sorted(set(generate_kwargs) & {"input_ids", "attention_mask", "encoder_outputs", "inputs_embeds"})
            if clash:
                raise ValueError(f"`generate_kwargs` must not set {clash}: the pipeline passes the documents' encoder "
                                 "outputs.")
            generate = _merge_generate_kwargs(generate_kwargs, generate)
        if generate:
            forward["generate_kwargs"] = generate
        return preprocess, forward, postprocess

    @staticmethod
    def _documents(documents, start: int = 0) -> list[str]:
        """The documents of a call as a list, each checked; an error names a document by its position, counted from
        `start` (the position of `documents[0]` in an iterable the call reads in groups).

        Raises:
            TypeError: `documents` neither a str, a list nor a tuple, or a document that is not a str.
            ValueError: no document, or an empty one.
        """
        docs = [documents] if isinstance(documents, str) else documents
        if not isinstance(docs, (list, tuple)):
            raise TypeError(f"`documents` must be a str, a list of str or an iterable of str (a generator, a "
                            f"dataset), got {type(documents).__name__}.")
        if not docs:
            raise ValueError("`documents` is empty: nothing to summarize.")
        for i, doc in enumerate(docs, start):
            if not isinstance(doc, str):
                row = " (a dataset's row: pass its text column, `KeyDataset(dataset, \"article\")`)" \
                    if isinstance(doc, Mapping) else ""
                raise TypeError(f"`documents` {i} must be a str, got {type(doc).__name__}{row}.")
            if not doc.strip():
                raise ValueError(f"`documents` {i} is empty.")
        return list(docs)

    def __call__(self, documents=None, batch_size=None, **kwargs):
        """Summarize, each distinct document read by the encoder once; the class docstring has the arguments and
        returns.

        Raises:
            ValueError / TypeError: as the class docstring lists (no documents, an empty one, a setting out of range).
        """
        if documents is None:
            documents = kwargs.pop("inputs", None)
        if documents is None:
            raise ValueError("`documents` is required.")
        items = _stream(documents, "documents")
        if items is not None:  # settings are checked now, before any document is read
            _check_outputs(_call_parameters(self, batch_size, dict(kwargs))[2])
            return self._summarize_stream(items, batch_size, kwargs)
        outputs = self._summarize(self._documents(documents), batch_size, kwargs)
        if isinstance(documents, str):
            return outputs[0]
        return [output[0] for output in outputs] if all(len(output) == 1 for output in outputs) else outputs

    def _summarize_stream(self, items, batch_size, kwargs: dict):
        """The summaries of an iterable of documents, one result per document, in order (a dict, or a list with
        `num_return_sequences` > 1): `batch_size` documents (the call's, else the pipeline's, else
        `default_batch_size`) are pulled and summarized as one list call at a time."""
        size = batch_size if batch_size is not None else self._batch_size or self.default_batch_size
        for start, group in _groups(items, size):
            for output in self._summarize(self._documents(group, start), batch_size, dict(kwargs)):
                yield output[0] if len(output) == 1 else output

    def _summarize(self, docs: list[str], batch_size, kwargs: dict) -> list[list[dict]]:
        """Per document, its list of records; each distinct document encoded once."""
        preprocess_params, forward_params, postprocess_params = _call_parameters(self, batch_size, kwargs)
        _check_outputs(postprocess_params)
        distinct = list(dict.fromkeys(docs))
        group = {"documents": distinct, "document_index": [distinct.index(d) for d in docs]}
        return self.run_single(group, preprocess_params, forward_params, postprocess_params)

    def preprocess(self, group, max_document_len=None):
        """Tokenize the distinct documents (special tokens added, at most `max_document_len` tokens, right padding
        whatever `tokenizer.padding_side` is).

        Returns:
            `dict` with `input_ids` and `attention_mask` `(num_distinct, length)` and `document_index`
            `(num_documents,)`, the row of each document of the call.
        """
        if max_document_len is None:  # what the checkpoint was trained with, else all the positions
            max_document_len = self.model.config.default_document_length()
        if hasattr(self.tokenizer, "deprecation_warnings"):  # long documents are truncated on purpose
            self.tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
        # right padding whatever `tokenizer.padding_side` says: BART's learned positions count from the first column,
        # so a left-padded document would be read at shifted positions and differ from the same document alone
        with tokenizer_lock(self.tokenizer):
            docs = self.tokenizer(group["documents"], truncation=max_document_len is not None,
                                  max_length=max_document_len, padding=True, padding_side="right",
                                  return_tensors="pt")
        if max_document_len is not None:
            _note_documents_cut(docs, max_document_len, "max_document_len",
                                getattr(self.model.config, "max_position_embeddings", None))
        return {"input_ids": docs["input_ids"], "attention_mask": docs["attention_mask"],
                "document_index": torch.tensor(group["document_index"], dtype=torch.long)}

    def _forward(self, inputs, generate_kwargs=None, model_batch_size=8):
        """Encode each distinct document once, then generate for the documents of the call from the encoder
        outputs, `model_batch_size` at a time.

        Returns:
            `dict` with `sequences` (`list[torch.LongTensor]`, the generated ids, `num_return_sequences` per
            document, in order) and `num_return_sequences`.
        """
        model = self.model
        encoder = model.get_encoder()
        input_ids, mask = inputs["input_ids"], inputs["attention_mask"]
        states = []
        for begin in range(0, input_ids.shape[0], model_batch_size):
            rows = slice(begin, begin + model_batch_size)
            # the states only: no attention weights or per-layer states, whatever the config's switches ask for
            states.append(encoder(input_ids=input_ids[rows], attention_mask=mask[rows], output_attentions=False,
                                  output_hidden_states=False).last_hidden_state)
        states = torch.cat(states)
        # the sequences only, as a tensor: `generate` collects no weights or per-layer states, whatever the
        # generation config asks for (its decoding steps read the model config's switches, as for any transformers
        # model: `generate` passes them on only when true)
        kwargs = _generate_arguments(generate_kwargs or {}, {"output_attentions": False, "output_hidden_states": False,
                                                             "return_dict_in_generate": False})
        sequences = []
        for begin in range(0, inputs["document_index"].shape[0], model_batch_size):
            index = inputs["document_index"][begin : begin + model_batch_size].to(states.device)
            # a fresh BaseModelOutput per call: beam search expands `encoder_outputs` in place
            out = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=states[index]),
                                 attention_mask=mask.to(states.device)[index], **kwargs)
            sequences += list(out.cpu())
        # sequences per document, from what generate returned (a `generation_config` may set the count too)
        num_return = max(len(sequences) // max(inputs["document_index"].shape[0], 1), 1)
        return {"sequences": _without_padding(sequences, model, kwargs), "num_return_sequences": num_return}

    def postprocess(self, outputs, return_tensors=False, return_text=None, clean_up_tokenization_spaces=None):
        """`[{"summary_text": str}, ...]` per document (`num_return_sequences` entries each), with
        `"summary_token_ids"` for `return_tensors=True` (see [`_records`] and the class docstring)."""
        return _records(self.tokenizer, outputs, "summary", return_tensors, return_text, clean_up_tokenization_spaces)


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


_register_pipeline("summarization", LongDocSummarizationPipeline, AutoModelForSeq2SeqLM)

__all__ = ["LongDocSummarizationPipeline"]
