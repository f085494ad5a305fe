# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""`text2text-generation` and `summarization` pipelines for ReadOnce BART: each document of a call is read once
(`encode_documents`, n tokens -> ceil(n / k) vectors) and its representations serve every question or prompt asked
about it.

transformers 5 removed its own text2text-generation and summarization pipelines; these take their output format
(`{"generated_text": ...}`, `{"summary_text": ...}`) and the generation arguments (`max_new_tokens`, `num_beams`,
`generate_kwargs`).

This file travels with saved checkpoints (`custom_pipelines` in `config.json`): it imports only torch, transformers
and the standard library.
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
from transformers.pipelines import PIPELINE_REGISTRY, Pipeline
from transformers.utils import logging

logger = logging.get_logger(__name__)
# question (prompt) tokens read where the checkpoint records none (`config.max_question_length`); the store adapter's
# `max_prompt_length`, as `hf-readonce answer` reads
_DEFAULT_MAX_QUESTION_LEN = 32
# tokens generated per text where neither the call, `generate_kwargs` nor the model's `generation_config` sets a length
_DEFAULT_MAX_NEW_TOKENS = 32
# the `generate` inputs the pipeline itself passes: `generate_kwargs` may not set them
_PIPELINE_GENERATE_INPUTS = frozenset({"input_ids", "attention_mask", "document_representations", "encoder_outputs",
                                       "inputs_embeds"})


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


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._unexpected_arguments
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


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._note_documents_cut
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


def _note_texts_cut(batch, max_length: int, noun: str) -> int:
    """Say how many texts (questions, prompts) of a tokenized `batch` were cut to `max_length` tokens, in one warning
    on this module's logger, as [`_note_documents_cut`] does for documents: what is generated for them reads their
    first tokens only. Counted from a fast tokenizer's `overflowing` tokens (a slow tokenizer's batch counts none).

    Args:
        batch (`BatchEncoding`): the texts, tokenized with `truncation=True, max_length=max_length`.
        max_length (`int`): the tokens read per text (the call's `max_question_len`).
        noun (`str`): what the warning calls a text ("question", "prompt").

    Returns:
        `int`: the number of texts cut.
    """
    encodings = getattr(batch, "encodings", None) or []
    cut = sum(1 for encoding in encodings if encoding.overflowing)
    if cut:
        logger.warning(f"{cut} of {len(encodings)} {noun}(s) held more than the {max_length} tokens read per {noun} "
                       f"and were cut to them: what is generated for them reads those tokens only "
                       "(`max_question_len` reads more).")
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


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._output_options
def _output_options(return_tensors=None, return_text=None, clean_up_tokenization_spaces=None) -> dict:
    """The postprocess parameters of transformers' output options, each checked to be a bool (`None`: not given).

    Raises:
        TypeError: an option that is not a bool, named.
    """
    options = {"return_tensors": return_tensors, "return_text": return_text,
               "clean_up_tokenization_spaces": clean_up_tokenization_spaces}
    return {name: _check_bool(name, value) for name, value in options.items() if value is not None}


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._check_outputs
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


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._generate_arguments
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


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._without_padding
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


# Copied from hf_readonce.models.longdoc_bart.pipeline_longdoc_bart._records
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


def _pair_stream(first, second, names: tuple[str, str]):
    """`(first item, second item)` pairs pulled lazily from a call's two inputs, at least one of them an iterable read
    lazily (see [`_stream`]): a `str` is paired with every item of the other; two iterables (or a list beside one)
    are zipped, one item of each per pair.

    Args:
        first, second: the inputs (`str`, `list`, `tuple` or an iterable). names (`tuple[str, str]`): the caller's
            names of the two arguments, said in the errors.

    Returns:
        `Iterator[tuple]`.

    Raises:
        TypeError: an input that is neither a str nor iterable (at the call). ValueError: one iterable has fewer
            items than the other (when the iterator reaches the end of the shorter).
    """
    iterators = []
    for value, name in zip((first, second), names):
        if isinstance(value, str):
            iterators.append(itertools.repeat(value))
        elif isinstance(value, (list, tuple)):
            iterators.append(iter(value))
        else:
            items = _stream(value, name)
            if items is None:
                raise TypeError(f"`{name}` must be a str, a list of str or an iterable of str (a generator, a "
                                f"dataset), got {type(value).__name__}.")
            iterators.append(items)
    shared = [isinstance(value, str) for value in (first, second)]

    def pairs():
        end, count = object(), 0
        for a, b in zip(*iterators) if any(shared) else itertools.zip_longest(*iterators, fillvalue=end):
            if a is end or b is end:
                short, long = (names[0], names[1]) if a is end else (names[1], names[0])
                raise ValueError(f"`{short}` has {count} entries but `{long}` has more; pass one "
                                 f"{names[1].rstrip('s')} for all {names[0]}s or one per {names[0]}.")
            yield a, b
            count += 1

    return pairs()


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


class ReadOnceText2TextGenerationPipeline(_TokenizerPipeline):
    r"""
    Questions (or prompts) about documents, answered by ReadOnce BART: `pipe(["q1", "q2"], document=doc)`.

    Every distinct document of a call is tokenized (at most `max_document_len` tokens) and encoded once by the
    document encoder; each text is tokenized alone (at most `max_question_len` tokens) and generated from with its
    document's representations (`model.generate(..., document_representations=...)`), decoded as the model's
    `generation_config` says (greedy with one beam unless it records otherwise) unless `num_beams` or
    `generate_kwargs` say otherwise.

    Args:
        text (`str`, `list[str]` or an iterable of `str`): the question(s) or prompt(s). An iterable that is not a
            list or tuple (a generator, `KeyDataset(dataset, "question")`, a `torch.utils.data.Dataset` of strings)
            is read lazily, `batch_size` texts at a time (see `batch_size`), and the call returns an iterator.
        document (`str`, `list[str]` or an iterable of `str`): one document for every text, or one per text (equal
            lengths; with an iterable `text`, a list or an iterable read along with it; an iterable `document` with
            a `str` text asks that text of every document).
        max_new_tokens (`int`, *optional*): tokens generated per text; wins over `generate_kwargs`. Defaults to what
            `generate_kwargs` sets (`max_new_tokens`; `max_length`, which counts the decoder's start token; a
            `generation_config`), else what the model's `generation_config` sets, else 32.
        num_beams (`int`, *optional*): beam search width; wins over `generate_kwargs`. Defaults to what
            `generate_kwargs` sets, else what the model's `generation_config` sets, else 1.
        max_question_len (`int`, *optional*): text tokens read, special tokens included (longer texts are
            truncated; a warning counts them). Defaults to the length the checkpoint records it was trained with
            (`config.max_question_length`), else 32 (as `hf-readonce answer`).
        max_document_len (`int`, *optional*): document tokens read (longer documents are truncated; a warning
            counts them). Defaults to the length the checkpoint records (`config.max_document_length`), else
            `config.document_chunk_length * k`, the T·k capacity of §5.5: a document longer than one chunk of T
            tokens is read in chunks by the model itself, not cut.
        compression_ratio (`int`, *optional*): k at inference (§5.2); defaults to the model's.
        generate_kwargs (`dict`, *optional*): further `generate` arguments (`max_length`, `min_length`,
            `do_sample`, `num_return_sequences`, a `generation_config`, ...); they override the model's
            `generation_config`, and may not set the inputs the pipeline passes (`input_ids`, `attention_mask`,
            `document_representations`, `encoder_outputs`, `inputs_embeds`). A call's arguments win over the
            pipeline's (`pipeline(..., max_new_tokens=...)`) key by key, and a length the call sets
            (`max_new_tokens` or `max_length`) replaces the pipeline's length.
        return_text (`bool`, *optional*): include `"generated_text"` (`"summary_text"`); defaults to `True` unless
            `return_tensors=True`.
        return_tensors (`bool`, defaults to `False`): include `"generated_token_ids"` (`"summary_token_ids"`), the
            generated ids (`torch.LongTensor` of shape `(length,)`, the decoder's start token first, up to the
            end-of-sequence token: no batch padding), as transformers' text2text and summarization pipelines do;
            with it alone, the text is left out.
        clean_up_tokenization_spaces (`bool`, *optional*): passed to the tokenizer's decoding; defaults to the
            tokenizer's own setting.
        batch_size (`int`, defaults to 32): texts per `generate` call. With an iterable input, also the texts
            pulled at a time: each group is generated for as one list call (a document repeated within it is read
            once), and the next group is pulled when the results of this one have been taken.

    Returns:
        For one text, `[{"generated_text": str}]`; for several, one `{"generated_text": str}` per text, in order
        (a list of such lists with `num_return_sequences` > 1), as transformers' text2text pipeline returns; for an
        iterable, an iterator yielding one such result per text, in order (the results of the list call).

    Raises:
        ValueError: an empty text or document (naming its position), lists (or iterables) of different lengths, a
            setting out of range (naming it), `generate_kwargs` that set the inputs the pipeline passes,
            `return_text=False` without `return_tensors=True`.
        TypeError: a text or document that is not a string (naming its position), a setting of the wrong type, a
            `generation_config` that is not a `GenerationConfig`.
        With an iterable input, a bad setting is raised by the call, a bad text or document when the iterator
        reaches its group.
    """

    output_key = "generated_text"
    default_prompt = None
    default_batch_size = 32  # `batch_size` when neither the call nor the pipeline sets it
    text_noun = "question"  # what the warning about texts cut to `max_question_len` calls a text

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not hasattr(self.model, "encode_documents"):
            raise TypeError(f"{type(self).__name__} needs a ReadOnce model (with `encode_documents`), got "
                            f"{type(self.model).__name__}.")
        if self.tokenizer is None:
            raise TypeError(f"{type(self).__name__} needs a tokenizer.")

    def _sanitize_parameters(self, max_new_tokens=None, num_beams=None, max_question_len=None, max_document_len=None,
                             compression_ratio=None, generate_kwargs=None, model_batch_size=None, return_tensors=None,
                             return_text=None, clean_up_tokenization_spaces=None, **kwargs):
        if kwargs:
            raise TypeError(_unexpected_arguments(type(self).__name__, kwargs,
                                                  inspect.signature(self._sanitize_parameters).parameters))
        postprocess = _output_options(return_tensors, return_text, clean_up_tokenization_spaces)
        preprocess, forward, generate = {}, {}, {}
        for name, value, low, target in (
            ("max_question_len", max_question_len, 1, preprocess), ("max_document_len", max_document_len, 1, preprocess),
            ("max_new_tokens", max_new_tokens, 1, generate), ("num_beams", num_beams, 1, generate),
            ("compression_ratio", compression_ratio, 1, forward), ("model_batch_size", model_batch_size, 1, forward),
        ):
            if value is not None:
                target[name] = _check_int(name, value, low)
        if generate_kwargs is not None:
            if not isinstance(generate_kwargs, dict):
                raise TypeError(f"`generate_kwargs` must be a dict, got {type(generate_kwargs).__name__}.")
            clash = sorted(set(generate_kwargs) & _PIPELINE_GENERATE_INPUTS)
            if clash:
                raise ValueError(f"`generate_kwargs` must not set {clash}: the pipeline passes the texts and their "
                                 "documents' representations.")
            # `max_new_tokens` and `num_beams` given beside `generate_kwargs` win over them
            generate = _merge_generate_kwargs(generate_kwargs, generate)
        if generate:
            forward["generate_kwargs"] = generate
        if "compression_ratio" in forward:  # the default document length (unless recorded) is T * k at this call's k
            preprocess["compression_ratio"] = forward["compression_ratio"]
        return preprocess, forward, postprocess

    def _pairs(self, text, document, names: tuple[str, str] = ("text", "document"),
               start: int = 0) -> list[tuple[str, str]]:
        """`(text, document)` pairs, one per text; `names` are the caller's names of the two arguments, said in the
        errors (the summarization pipeline's are `prompt` and `documents`), which name an entry by its position
        counted from `start` (the position of the first pair in an iterable the call reads in groups).

        Raises:
            TypeError: an argument or an entry that is not a str. ValueError: lists of different lengths, no text, an
                empty entry (its index named).
        """
        text_name, document_name = names
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"`{text_name}` must be a str, a list of str or an iterable of str, got {type(text).__name__}.")
        if isinstance(document, str):
            documents = [document] * len(texts)
        elif isinstance(document, (list, tuple)):
            documents = list(document)
            if len(documents) != len(texts):
                raise ValueError(f"`{text_name}` has {len(texts)} entries but `{document_name}` has {len(documents)}; "
                                 f"pass one {document_name.rstrip('s')} for all {text_name}s or one per "
                                 f"{text_name}.")
        else:
            raise TypeError(f"`{document_name}` must be a str, a list of str or an iterable of str, got {type(document).__name__}.")
        if not texts:
            raise ValueError(f"`{text_name}` is empty: nothing to generate from.")
        for i, (t, d) in enumerate(zip(texts, documents), start):
            for name, value in ((text_name, t), (document_name, d)):
                if not isinstance(value, str):
                    row = " (a dataset's row: pass its text column, `KeyDataset(dataset, \"column\")`)" \
                        if isinstance(value, Mapping) else ""
                    raise TypeError(f"`{name}` {i} must be a str, got {type(value).__name__}{row}.")
                if not value.strip():
                    raise ValueError(f"`{name}` {i} is empty.")
        return list(zip(texts, documents))

    def __call__(self, text=None, document=None, batch_size=None, **kwargs):
        """Generate for each text from its document's representations (each document read once, §3); the class
        docstring has the arguments and returns.

        Raises:
            ValueError / TypeError: as the class docstring lists (`text` or `document` missing or empty, lists of
                different lengths, a setting out of range).
        """
        if text is None or document is None:
            raise ValueError("both `text` and `document` are required.")
        if _stream(text, "text") is not None or _stream(document, "document") is not None:
            return self._run_stream(_pair_stream(text, document, ("text", "document")), ("text", "document"),
                                    batch_size, kwargs)
        pairs = self._pairs(text, document)
        return self._run(pairs, single=isinstance(text, str), batch_size=batch_size, **kwargs)

    def _run_stream(self, pairs, names: tuple[str, str], batch_size, kwargs: dict):
        """Check the call's settings, then return the iterator over the results of `pairs` (an iterator of
        `(text, document)`), one per pair, in order: `batch_size` pairs (the call's, else the pipeline's, else
        `default_batch_size`) are pulled and generated for as one list call at a time."""
        _check_outputs(_call_parameters(self, batch_size, dict(kwargs))[2])
        size = batch_size if batch_size is not None else self._batch_size or self.default_batch_size

        def results():
            for start, group in _groups(pairs, size):
                checked = self._pairs([t for t, _ in group], [d for _, d in group], names, start)
                for output in self._generate(checked, batch_size, dict(kwargs)):
                    yield output[0] if len(output) == 1 else output

        return results()

    def _run(self, pairs, single, batch_size=None, **kwargs):
        outputs = self._generate(pairs, batch_size, kwargs)
        if single:
            return outputs[0]
        return [output[0] for output in outputs] if all(len(output) == 1 for output in outputs) else outputs

    def _generate(self, pairs, batch_size, kwargs: dict) -> list[list[dict]]:
        """Per `(text, document)` pair, its list of records; each distinct document read once."""
        preprocess_params, forward_params, postprocess_params = _call_parameters(self, batch_size, kwargs)
        _check_outputs(postprocess_params)
        documents: dict[str, list[int]] = {}
        for index, (_, d) in enumerate(pairs):
            documents.setdefault(d, []).append(index)
        group = {"documents": list(documents), "texts": [t for t, _ in pairs],
                 "document_index": [list(documents).index(d) for _, d in pairs]}
        return self.run_single(group, preprocess_params, forward_params, postprocess_params)

    def preprocess(self, group, max_question_len=None, max_document_len=None, compression_ratio=None):
        """Tokenize the distinct documents (at most `max_document_len` tokens, default the recorded length, else
        T·k) and the texts (at most `max_question_len` tokens, default the recorded length, else 32), right-padded
        whatever `tokenizer.padding_side` is.
        One warning each says how many documents and how many texts were cut (none when nothing was).

        Returns:
            `dict` with `document_input_ids` / `document_attention_mask` `(num_distinct, length)`, `input_ids` /
            `attention_mask` `(num_texts, length)` and `document_index` `(num_texts,)`, the document row of each
            text.
        """
        if max_document_len is None:  # what the checkpoint was trained with, else T·k (as the store adapter)
            max_document_len = self.model.config.default_document_length(compression_ratio)
        if max_question_len is None:  # what the checkpoint was trained with, else 32 (as the store adapter)
            max_question_len = getattr(self.model.config, "max_question_length", None) or _DEFAULT_MAX_QUESTION_LEN
        # right padding whatever `tokenizer.padding_side` says: the text's learned positions count from the first
        # column, so a left-padded text would be read at shifted positions and differ from the same text alone
        with tokenizer_lock(self.tokenizer):
            docs = self.tokenizer(group["documents"], truncation=True, max_length=max_document_len, padding=True,
                                  padding_side="right", return_tensors="pt")
        _note_documents_cut(docs, max_document_len, "max_document_len")
        with tokenizer_lock(self.tokenizer):
            texts = self.tokenizer(group["texts"], truncation=True, max_length=max_question_len, padding=True,
                                   padding_side="right", return_tensors="pt")
        _note_texts_cut(texts, max_question_len, self.text_noun)
        return {"document_input_ids": docs["input_ids"], "document_attention_mask": docs["attention_mask"],
                "input_ids": texts["input_ids"], "attention_mask": texts["attention_mask"],
                "document_index": torch.tensor(group["document_index"], dtype=torch.long)}

    def _forward(self, inputs, compression_ratio=None, generate_kwargs=None, model_batch_size=32):
        """Encode each distinct document once, then generate for the texts in batches. `generate_kwargs` holds the
        call's and the pipeline's generate arguments (`max_new_tokens` and `num_beams` among them); the length is what
        they set (`max_new_tokens`, `max_length`, a `generation_config`), else what the model's `generation_config`
        sets, else 32 new tokens; the decoding (beams, sampling) is what they set, else what the model's
        `generation_config` records (as `generate` itself reads it: greedy with one beam where it records nothing).
        """
        model = self.model
        lengths = ("max_new_tokens", "max_length")
        # a length of None is no length: `generate` would read it as one
        generate_kwargs = {k: v for k, v in (generate_kwargs or {}).items() if not (k in lengths and v is None)}
        config = generate_kwargs.get("generation_config") or model.generation_config
        defaults = {}
        if not any(name in generate_kwargs or getattr(config, name, None) is not None for name in lengths):
            defaults["max_new_tokens"] = _DEFAULT_MAX_NEW_TOKENS
        # the representations only: no attention weights or per-layer states, whatever the config's output switches
        # ask for
        reps = model.encode_documents(inputs["document_input_ids"], inputs["document_attention_mask"],
                                      compression_ratio, output_attentions=False, output_hidden_states=False)
        # the sequences only, as a tensor: `generate`'s text encoder computes no attention weights or per-layer
        # states and `generate` collects none, whatever the generation config asks for (its decoding steps read the
        # model config's switches, as for any transformers model: `generate` passes them on only when true)
        kwargs = _generate_arguments({**defaults, **generate_kwargs}, {
            "output_attentions": False, "output_hidden_states": False, "return_dict_in_generate": False})
        sequences = []
        for begin in range(0, inputs["input_ids"].shape[0], model_batch_size):
            rows = slice(begin, begin + model_batch_size)
            index = inputs["document_index"][rows].to(reps.representations.device)
            chunk_reps = type(reps)(representations=reps.representations[index],
                                    attention_mask=reps.attention_mask[index],
                                    compression_ratio=reps.compression_ratio,
                                    model_fingerprint=reps.model_fingerprint)
            out = model.generate(input_ids=inputs["input_ids"][rows], attention_mask=inputs["attention_mask"][rows],
                                 document_representations=chunk_reps, **kwargs)
            sequences += [row for row in out.cpu()]
        # sequences per text, from what generate returned (a `generation_config` may set it too)
        num_return = max(len(sequences) // max(inputs["input_ids"].shape[0], 1), 1)
        return {"sequences": _without_padding(sequences, model, kwargs), "num_return_sequences": num_return}

    def postprocess(self, outputs, return_tensors=False, return_text=None, clean_up_tokenization_spaces=None):
        """`[{output_key: text}, ...]` per input text, `num_return_sequences` entries each, with the token ids
        (`"generated_token_ids"`, `"summary_token_ids"`) for `return_tensors=True` (see [`_records`]); `__call__`
        returns the dicts themselves for several texts when each has one."""
        return _records(self.tokenizer, {"num_return_sequences": 1, **outputs}, self.output_key.rsplit("_", 1)[0],
                        return_tensors, return_text, clean_up_tokenization_spaces)


class ReadOnceSummarizationPipeline(ReadOnceText2TextGenerationPipeline):
    r"""
    Summaries by ReadOnce BART: `pipe(documents)`; each document is read once and the summary is generated from its
    representations with the prompt `prompt` (default `"summary"`, the text hf-readonce's summarization training
    pairs with every article). Several prompts about one document: `pipe(document, prompt=["summary", "title"])`.

    Args:
        documents (`str`, `list[str]` or an iterable of `str`): the document(s). An iterable that is not a list or
            tuple (a generator, `KeyDataset(dataset, "article")`, a `torch.utils.data.Dataset` of strings) is read
            lazily, `batch_size` documents at a time, and the call returns an iterator yielding one result per
            document, in order (the results of the list call).
        prompt (`str`, `list[str]` or an iterable of `str`, defaults to `"summary"`): one prompt for every document,
            or a list: with one document, one summary per prompt; with several, one prompt per document (an iterable
            is read along with iterable documents, or asked of one document lazily).
        Other arguments: as [`ReadOnceText2TextGenerationPipeline`] (`return_tensors=True` gives
            `"summary_token_ids"`).

    Returns:
        For one document, `[{"summary_text": str}]`; for several documents (or prompts), one `{"summary_text":
        str}` each, in order (a list of such lists with `num_return_sequences` > 1), as transformers' summarization
        pipeline returns.

    Raises:
        ValueError / TypeError: as [`ReadOnceText2TextGenerationPipeline`], naming `prompt` and `documents` (an
            empty or non-str entry by its index, lists of different lengths); `documents` missing, empty or not a
            str / list; `prompt` an empty list or not a str / list.
    """

    output_key = "summary_text"
    text_noun = "prompt"

    def __call__(self, documents=None, prompt="summary", batch_size=None, **kwargs):
        """Summarize, each document read once; the class docstring has the arguments and returns.

        Raises:
            ValueError / TypeError: as the class docstring lists (`documents` missing, empty or of the wrong type;
                `prompt` an empty list or neither a str nor a list).
        """
        if documents is None:
            raise ValueError("`documents` is required.")
        if _stream(documents, "documents") is not None or _stream(prompt, "prompt") is not None:
            return self._run_stream(_pair_stream(prompt, documents, ("prompt", "documents")), ("prompt", "documents"),
                                    batch_size, kwargs)
        if not isinstance(prompt, (str, list, tuple)):
            raise TypeError(f"`prompt` must be a str, a list of str or an iterable of str, got {type(prompt).__name__}.")
        if not isinstance(prompt, str) and not prompt:
            raise ValueError("`prompt` is empty: give a prompt (default \"summary\") or one per document.")
        if isinstance(documents, str) and not isinstance(prompt, str):
            pairs = self._pairs(prompt, documents, ("prompt", "documents"))  # several prompts about one document
            single = False
        else:
            docs = [documents] if isinstance(documents, str) else documents
            if not isinstance(docs, (list, tuple)):
                raise TypeError(f"`documents` must be a str, a list of str or an iterable of str, got {type(documents).__name__}.")
            if not docs:
                raise ValueError("`documents` is empty: nothing to summarize.")
            prompts = [prompt] * len(docs) if isinstance(prompt, str) else prompt
            pairs = self._pairs(list(prompts), list(docs), ("prompt", "documents"))
            single = isinstance(documents, str)
        return self._run(pairs, single=single, batch_size=batch_size, **kwargs)


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


_register_pipeline("text2text-generation", ReadOnceText2TextGenerationPipeline, AutoModelForSeq2SeqLM)
_register_pipeline("summarization", ReadOnceSummarizationPipeline, AutoModelForSeq2SeqLM)

__all__ = ["ReadOnceSummarizationPipeline", "ReadOnceText2TextGenerationPipeline"]
