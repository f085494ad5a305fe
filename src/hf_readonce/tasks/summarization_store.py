"""Summaries generated from a [`RepresentationStore`]: each document's stored representations (a family's encoder
outputs, ReadOnce vectors, ...) feed `model.generate()`, so no document is read again however many summaries are
asked of it (other lengths, beams, prompts, models sharing the encoder). Serves every registered family declared with
`summarize=True`; what `hf-readonce summarize` runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..dtypes import takes_store_dtype
from ..representations.base import (
    current_fingerprint_if_any,
    digests_weights_once,
    one_tokenizer_fingerprint,
    tokenizer_lock,
)
from ..representations.fill import (
    check_store_arguments,
    ensure_stored,
    given_or_current_fingerprint,
    stored_documents_cut,
)
from ..representations.registry import family_of, get_adapter_class, registered_families
from ..representations.spaces import adapter_for_store, default_settings, find_space, own_settings, probe_adapter
from ..store import RepresentationStore


def summarizing_model_types() -> list[str]:
    """The model types whose stored representations can be summarized (families registered with
    `summarize=True`)."""
    return [t for spec in registered_families().values() if spec.summarize for t in spec.model_types]


def _adapter_class(model):
    """The adapter class of a model whose family summarizes from stored representations.

    Raises:
        TypeError: `model` is not a transformers model. ValueError: its family does not summarize (naming the ones
            that do).
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type is None:
        raise TypeError(f"`model` must be a transformers model, got {type(model).__name__}.")
    try:
        spec = family_of(model_type)
    except ValueError:
        spec = None
    if spec is None or not spec.summarize or model_type not in spec.model_types:
        raise ValueError(f"model type {model_type!r} does not generate summaries from stored representations; these "
                         f"do: {', '.join(summarizing_model_types())}.")
    return get_adapter_class(model_type)


def find_summarization_space(store: RepresentationStore, model, tokenizer,
                             settings: Mapping | None = None, *, fingerprint: str | None = None) -> dict | None:
    """The settings of the only representation space in `store` that `model` (its current weights: fingerprint) and
    `tokenizer` wrote, among those with the given `settings` (e.g. `{"max_document_length": 1024}`); the settings
    the adapter does not take from the command line (format, tokenizer, compute dtype...) must equal the adapter's.
    [`hf_readonce.representations.spaces.find_space`] for a family that summarizes.

    Args:
        store ([`RepresentationStore`]), model, tokenizer: as [`summarize_from_store`].
        settings (`Mapping`, *optional*): adapter settings to match (the family's `cli_settings` names); the others
            are free.
        fingerprint (`str`, *optional*): the model's [`current_fingerprint`] when the caller has just computed it (it
            hashes the weights); computed here when omitted, checked against the model's cached fingerprint when
            given ([`hf_readonce.representations.fill.given_or_current_fingerprint`]). The tokenizer is serialized for its fingerprint once
            ([`one_tokenizer_fingerprint`]).

    Returns:
        `dict` or `None`: the space's settings; `None` when the store holds nothing of this family for this tokenizer
        (then the adapter's defaults apply, e.g. for `encode_missing`).

    Raises:
        RepresentationMismatchError: the store holds such representations only for other models (both fingerprints
            named). ValueError: several spaces match (their settings named: pass one of them), bad `settings`, or a
            family that does not summarize; a `fingerprint` that is not this model's (stale, or another model's).
    """
    adapter_class = _adapter_class(model)
    settings = own_settings(adapter_class, settings)
    with one_tokenizer_fingerprint(tokenizer):  # the probe and the default adapter
        probe = probe_adapter(model, tokenizer, store, settings)
        # a given one is checked: a stale one, or another model's, would find that model's space
        fingerprint = given_or_current_fingerprint(probe, fingerprint)
        return find_space(store, adapter_class, fingerprint, probe.settings(), given=settings,
                          prefer=default_settings(model, tokenizer, settings))


@takes_store_dtype
@digests_weights_once
def summarize_from_store(model, tokenizer, store: RepresentationStore, documents: Sequence[str], *,
                         settings: Mapping | None = None, prompt: str | None = None, max_new_tokens: int = 60,
                         num_beams: int = 1, batch_size: int = 8, encode_missing: bool = False,
                         store_dtype: str = "float16", progress: bool = False, settings_used: dict | None = None,
                         counts: dict | None = None, document_names: Sequence[str] | None = None,
                         **generate_kwargs) -> list[str]:
    """Summarize documents from their representations stored in `store`: only the decoder (and, for ReadOnce, the
    representation+text model) runs; each distinct document is read from the store once.

    The stored representations are read back with the family's adapter (`adapter.read`, in the model's dtype and on
    its device) and turned into `generate()` arguments by `adapter.generation_inputs(read)`; greedy or beam search
    (`do_sample=False` unless `generate_kwargs` say otherwise). With stored states equal to what the model computes
    (an fp32 store, or a model computing in the storage dtype) the summaries equal those of the model reading the
    documents itself (tested per family).

    Args:
        model: a model of a family registered with `summarize=True` ([`summarizing_model_types`]), the one that
            encoded the store (same weights and compute dtype: its fingerprint).
        tokenizer: its tokenizer.
        store ([`RepresentationStore`]).
        documents (`Sequence[str]`): the texts, as they were encoded (documents are keyed by content hash).
        settings (`Mapping`, *optional*): the adapter settings to read (e.g. `{"max_document_length": 1024}`); by
            default the store's only space of this model ([`find_summarization_space`]), or with `encode_missing`
            and nothing stored yet, the adapter's defaults.
        prompt (`str`, *optional*): the text read with each document, for families that take one (their adapter's
            `summary_prompt` is the default); must be `None` for the others.
        max_new_tokens (`int`, defaults to 60), num_beams (`int`, defaults to 1): as `generate()`.
        batch_size (`int`, defaults to 8): documents per `generate()` call (and per read from the store).
        encode_missing (`bool`, defaults to `False`): encode and store documents that are missing instead of raising
            (into this model's own space, also when the store holds only other models' representations).
        store_dtype (`str`, defaults to `"float16"`): storage dtype of what `encode_missing` stores (fp32, fp16,
            bf16); the model computes in its own dtype.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr counting summarized documents.
        settings_used (`dict`, *optional*): filled with the family's settings (`cli_settings` names) of the
            representations read or written.
        counts (`dict`, *optional*): filled with `documents` (distinct documents summarized) and `documents_cut`
            (how many of them hold more tokens than the representations read, `max_document_length`: their summaries
            come from their first tokens only; counted from the token counts and cut flags stored with them,
            tokenizing only those they cannot tell about (stored with `max_document_length` tokens and no flag, by an
            earlier release, or without a count),
            [`hf_readonce.representations.fill.stored_documents_cut`]).
        document_names (`Sequence[str]`, *optional*): one name per document, used as it stands in the errors that
            name the first document not stored, or with `encode_missing` the first one that cannot be encoded (e.g.
            `"the document of id 'xsum-4' (line 3)"`); by default `"document <its index>"`.
        **generate_kwargs: further `generate()` arguments (`length_penalty`, `no_repeat_ngram_size`, ...).

    Returns:
        `list[str]`: one summary per document, in order (special tokens removed, stripped).

    Raises:
        MissingRepresentationError / RepresentationMismatchError: documents not stored for this model and settings
            (counted, the first named by its index or `document_names`) or stored only by another model (both
            fingerprints named).
        TypeError: `documents` or `document_names` is a single str or holds a non-str; `model` is not a
            transformers model; a `dtype=` keyword (the storage dtype is `store_dtype`), which `**generate_kwargs`
            would otherwise carry to `generate()`.
        ValueError: no documents, an empty document (its index named), a model type that does not summarize from
            stored representations, a count < 1 (`max_new_tokens`, `num_beams`, `batch_size`),
            `num_return_sequences` other than 1, `document_names` not one per document, a `prompt` the family does
            not take or longer than it reads (the checkpoint's recorded `max_question_length`, else the
            `max_prompt_length` of its adapter), `max_new_tokens` beyond the decoder's positions, several stored
            spaces; with `encode_missing`, documents the model cannot encode (counted, the first named).
    """
    from ..representations.base import check_positive_ints

    check_store_arguments(model, store, store_dtype)
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
        raise TypeError(f"`documents` must be a list of str, got {type(documents).__name__}.")
    if not documents:
        raise ValueError("`documents` is empty: nothing to summarize.")
    for i, text in enumerate(documents):
        if not isinstance(text, str):
            raise TypeError(f"`documents[{i}]` must be a str, got {type(text).__name__}.")
        if not text.strip():
            raise ValueError(f"`documents[{i}]` is empty: nothing to summarize.")
    check_positive_ints({"max_new_tokens": max_new_tokens, "num_beams": num_beams, "batch_size": batch_size})
    if document_names is not None:
        if isinstance(document_names, (str, bytes)) or not isinstance(document_names, Sequence):
            raise TypeError(f"`document_names` must be a list of str, one per document, got "
                            f"{type(document_names).__name__}.")
        if len(document_names) != len(documents):
            raise ValueError(f"`document_names` must hold one name per document ({len(documents)}), got "
                             f"{len(document_names)}.")
        for i, name in enumerate(document_names):
            if not isinstance(name, str):
                raise TypeError(f"`document_names[{i}]` must be a str, got {type(name).__name__}.")
    names = (list(document_names) if document_names is not None
             else [f"document {i}" for i in range(len(documents))])
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise ValueError("`num_return_sequences` must be 1: summarize_from_store returns one summary per document.")
    adapter_class = _adapter_class(model)
    if prompt is not None and getattr(adapter_class, "summary_prompt", None) is None:
        raise ValueError(f"`prompt` does not apply to {adapter_class.model_type} models: their summaries are "
                         "generated from the document alone.")
    positions = getattr(model.config, "max_position_embeddings", None)  # the decoder's learned positions
    if positions is not None and max_new_tokens > positions:
        raise ValueError(f"`max_new_tokens` {max_new_tokens} does not fit the model's {positions} decoder positions: "
                         "pass fewer.")
    # the checkpoint's own (the question length it records it was trained with), else the family's default
    prompt_length_of = getattr(adapter_class, "prompt_length_of", None)
    limit = (prompt_length_of(model.config) if prompt_length_of is not None
             else getattr(adapter_class, "max_prompt_length", None))
    length = None
    if prompt is not None and limit is not None:
        with tokenizer_lock(tokenizer):
            length = len(tokenizer(prompt)["input_ids"])
    if length is not None and length > limit:
        raise ValueError(f"`prompt` holds {length} tokens; this {adapter_class.model_type} model reads at most "
                         f"{limit} with each document (it would be cut): pass a shorter one.")
    # the weights are hashed once per call: the same fingerprint finds the space and reads it (a model without
    # `representation_fingerprint` gets None here and its adapter's own fingerprint below)
    fingerprint = current_fingerprint_if_any(model)
    adapter = adapter_for_store(model, tokenizer, store, settings=settings, encode_missing=encode_missing,
                                batch_size=batch_size, fingerprint=fingerprint)
    order: dict[str, int] = {}
    for text in documents:
        order.setdefault(text, len(order))
    texts = list(order)
    fingerprint, stored_settings, by_text = ensure_stored(adapter, store, texts, encode_missing=encode_missing,
                                                          store_dtype=store_dtype,
                                                          name_of=lambda text: names[documents.index(text)],
                                                          fingerprint=fingerprint)
    if settings_used is not None:
        settings_used.update({name: stored_settings.get(name) for name in type(adapter).cli_settings})
    if counts is not None:
        counts.update({"documents": len(texts),
                       "documents_cut": stored_documents_cut(adapter, store, fingerprint, stored_settings, by_text)})
    kwargs = {"max_new_tokens": max_new_tokens, "num_beams": num_beams, "do_sample": False, **generate_kwargs}
    summaries = generate_from_store(model, tokenizer, store, adapter, fingerprint, [by_text[t] for t in texts],
                                    None if prompt is None else [prompt] * len(texts), batch_size=batch_size,
                                    progress=progress, desc="summarize", **kwargs)
    return [summaries[order[text]] for text in documents]


def generate_from_store(model, tokenizer, store: RepresentationStore, adapter, fingerprint: str,
                        document_hashes: Sequence[str], prompts: Sequence[str] | None = None, *, batch_size: int = 8, progress: bool = False,
                        desc: str = "generate", timings: dict | None = None, **generate_kwargs) -> list[str]:
    """One generated text per row from stored representations: rows are read from `store` in batches of
    `batch_size` (`adapter.read`, in the model's dtype and on its device), turned into `generate()` arguments by
    `adapter.generation_inputs(read, prompt=...)` and decoded (special tokens removed, stripped).

    Args:
        model, tokenizer, store: as [`summarize_from_store`].
        adapter: the family adapter of the space read (e.g.
            [`hf_readonce.representations.spaces.adapter_for_store`]).
        fingerprint (`str`): the space's fingerprint, as `ensure_stored` returned it (not recomputed here).
        document_hashes (`Sequence[str]`): the [`content_hash`] of each row's document (stored: see
            `hf_readonce.representations.fill.ensure_stored`).
        prompts (`Sequence[str]`, *optional*): the text read with each row's document, for families that take one;
            `None`: the family's default.
        batch_size (`int`, defaults to 8), progress (`bool`), desc (`str`): rows per call, a tqdm bar and its label.
        timings (`dict`, *optional*): accumulates `read_seconds` (the store) and `generate_seconds`.
        **generate_kwargs: `generate()` arguments.

    Returns:
        `list[str]`: one text per row, in order.

    Raises:
        ValueError: `prompts` of another length than the rows; as `adapter.generation_inputs` and `generate()`.
    """
    import time

    import torch
    from tqdm.auto import tqdm

    if prompts is not None and len(prompts) != len(document_hashes):
        raise ValueError(f"{len(prompts)} prompts for {len(document_hashes)} rows: give one each.")
    settings = adapter.settings()
    timings = timings if timings is not None else {}
    texts: list[str] = []
    bar = tqdm(total=len(document_hashes), desc=desc, unit="row", disable=not progress, dynamic_ncols=True)
    with torch.no_grad():
        for start in range(0, len(document_hashes), batch_size):
            begin = time.perf_counter()
            stored = store.get_many(fingerprint, settings, list(document_hashes[start : start + batch_size]))
            read = adapter.read(stored, device=model.device, dtype=model.dtype)
            timings["read_seconds"] = timings.get("read_seconds", 0.0) + time.perf_counter() - begin
            extra = {} if prompts is None else {"prompt": list(prompts[start : start + batch_size])}
            begin = time.perf_counter()
            sequences = model.generate(**adapter.generation_inputs(read, **extra), **generate_kwargs)
            timings["generate_seconds"] = timings.get("generate_seconds", 0.0) + time.perf_counter() - begin
            texts += [text.strip() for text in tokenizer.batch_decode(sequences, skip_special_tokens=True)]
            bar.update(len(stored))
    bar.close()
    return texts


__all__ = ["find_summarization_space", "generate_from_store", "summarize_from_store",
           "summarizing_model_types"]
