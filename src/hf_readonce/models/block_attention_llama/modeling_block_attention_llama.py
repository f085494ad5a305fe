# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch block-attention Llama: a Llama-family causal LM (Llama, SmolLM2, ...) that reads each document once into
its own key/value cache, and composes stored caches in front of a question.

It follows Block-Attention (Ma, Wang & Lan, ICLR 2025, "Block-Attention for Efficient Prefilling", arXiv 2409.15355;
code: TemporaryLoRA/Block-Attention) and TurboRAG (Lu et al. 2024): every document is encoded alone at positions 0..n-1; to place it at offset p of a
prompt, its stored keys (post-RoPE) are rotated by the position delta p (re-encoding the positions, Block-Attention
§2.3), the caches of several documents are concatenated, and the question is read with the composition as its prefix.
Values carry no position and are kept as they are. Fine-tuning with the block mask (`forward(block_ids=...)`), under
which each document attends only to itself while the question and answer attend to everything before them, makes the
model's training match this use (Block-Attention §2.4).

Positions are the *composed* ones in both places: under the block mask a document at offset p of a training sequence
is read at positions p..p+n-1, and a cache composed at offset p is rotated to exactly those positions. With the
document's hidden states independent of its offset (rotary attention depends only on relative positions and the
document sees nothing else), both are the same computation; the tests check it to 1e-4 in fp32.

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers, the
standard library and the configuration next to it.
"""

import contextlib
import contextvars
import copy
import difflib
import functools
import hashlib
import inspect
import json
import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, make_dataclass

import torch
import transformers
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationConfig
from transformers.generation.stopping_criteria import StoppingCriteria
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.models.llama.modeling_llama import (
    LlamaForCausalLM,
    LlamaModel,
    LlamaPreTrainedModel,
    LlamaRotaryEmbedding,
    rotate_half,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple, logging

from .configuration_block_attention_llama import BlockAttentionLlamaConfig

logger = logging.get_logger(__name__)

# Rotary types whose frequencies do not depend on the sequence length: rotating a stored key by a position delta is
# then exactly the key computed at the new position ("yarn" scales cos and sin by one constant factor, which the
# stored key already carries). "dynamic" and "longrope" change their frequencies with the length read.
EXACT_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})

# The model types whose model is transformers' Llama (a plain Llama checkpoint, or this family's): a config field
# Llama's own modules do not read (`partial_rotary_factor` with the default rotary type) changes none of its keys.
LLAMA_MODEL_TYPES = frozenset({"llama", "block_attention_llama"})

# transformers 5.24 renamed `past_key_values` to `cache`: the field of every ModelOutput and the argument of `forward`,
# `generate`, the decoder layers, the attention modules and the mask functions (the old name stays accepted there,
# deprecated). Earlier 5.x releases know only `past_key_values`. This file accepts both names and passes on the one of
# the installed transformers.
CACHE_NAME = "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"

# While `generate(document_caches=...)` runs: the positions its composed documents add to the sequences `generate`
# sees (the longest row's documents and question, less the questions' width), so that its length settings count them
# as they count the full prompt's for `LlamaForCausalLM.generate`
# ([`BlockAttentionLlamaForCausalLM._prepare_generated_length`], [`_get_stopping_criteria`]). Its prompt (documents
# and question) was checked against `max_position_embeddings` before the first step; the new tokens may run past it.
_GENERATING_AFTER_PREFIX: contextvars.ContextVar = contextvars.ContextVar("hf_readonce_generating_after_prefix",
                                                                          default=None)


def _either_cache(past_key_values, cache):
    """The KV cache given as `past_key_values` or as `cache` (transformers >= 5.24's name); both: `ValueError`."""
    if past_key_values is not None and cache is not None and past_key_values is not cache:
        raise ValueError("Pass the cache as `cache` or as `past_key_values`, not both.")
    return past_key_values if past_key_values is not None else cache


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._FINGERPRINT_IGNORED_FIELDS
# The fingerprint policy of every family (one source: the other modeling files hold checked copies of these two
# definitions). Config fields that never change a representation, in any family: metadata, output switches, token ids
# (an embedding's padding index changes only gradients), the dtype (the weights are hashed as they are), initializer
# settings (the weights are hashed), task heads and labels, generation settings, and the question length a QA
# checkpoint records it was trained with (`max_question_length`, one name in every family: no stored representation
# holds a question, and a call reads questions at the length it is given). A family adds the fields its own
# representation never reads through its config class only (`fingerprint_ignored_fields` and
# `fingerprint_ignored_prefixes`, e.g. training losses or the decoder's fields). Every other field of
# `config.to_dict()` is part of the representation fingerprint, with the transformers major version.
_FINGERPRINT_IGNORED_FIELDS = frozenset({
    "transformers_version", "architectures", "_name_or_path", "auto_map", "id2label", "label2id", "num_labels",
    "problem_type", "finetuning_task", "task_specific_params", "dtype", "torch_dtype", "use_cache",
    "output_hidden_states", "output_attentions", "return_dict", "torchscript", "tokenizer_class", "prefix",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id",
    "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id", "initializer_range", "init_std",
    "initializer_factor", "tie_word_embeddings", "classifier_dropout", "max_length", "min_length", "num_beams",
    "no_repeat_ngram_size", "early_stopping", "length_penalty", "custom_pipelines", "max_question_length",
})


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._config_fingerprint
def _config_fingerprint(config, config_class) -> str:
    """Canonical JSON of the config fields that can change the representation and the transformers major version:
    hashed into the representation fingerprint, so any change to them (activation, layer-norm epsilon, attention
    heads, ...) is another key. The fields are `config.to_dict()` minus `_FINGERPRINT_IGNORED_FIELDS` and minus what
    the family's `config_class` declares in `fingerprint_ignored_fields` / `fingerprint_ignored_prefixes` (its own
    config class even when `config` is another one, e.g. a plain Llama config)."""
    ignored = _FINGERPRINT_IGNORED_FIELDS | frozenset(getattr(config_class, "fingerprint_ignored_fields", ()))
    prefixes = tuple(getattr(config_class, "fingerprint_ignored_prefixes", ()))
    fields = {key: value for key, value in config.to_dict().items()
              if key not in ignored and not (prefixes and key.startswith(prefixes))}
    return json.dumps({"transformers": transformers.__version__.split(".")[0], "config": fields}, sort_keys=True,
                      default=str)


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_tensor_arguments
def _check_tensor_arguments(ids: dict, masks: dict | None = None) -> None:
    """Raise a `TypeError` naming the argument for an input that is not a `torch.Tensor` (a list or a numpy array: the
    model would fail deep inside torch), or, among `ids` (token ids, token types), one that does not hold integers
    (a float or bool tensor the embedding lookup would refuse without saying which argument). `None` values are
    skipped; `masks` (attention masks: any dtype) are checked only for being tensors."""
    for name, value in {**ids, **(masks or {})}.items():
        if value is not None and not torch.is_tensor(value):
            raise TypeError(f"`{name}` must be a torch.Tensor, got {type(value).__name__} (convert it with "
                            "torch.as_tensor, or tokenize with return_tensors='pt').")
    for name, value in ids.items():
        if value is not None and (value.is_floating_point() or value.dtype == torch.bool):
            raise TypeError(f"`{name}` must hold integer token ids, got {value.dtype}.")


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_token_ids
def _check_token_ids(ids, bound: int, argument: str) -> None:
    """Raise a `ValueError` naming `argument` and the bound if a token id of `ids` is outside `[0, bound)` (called
    when the embedding lookup fails, so the normal path costs nothing)."""
    if torch.is_tensor(ids) and ids.numel() and not ids.is_floating_point():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise ValueError(f"`{argument}` holds token id {low if low < 0 else high}, outside the vocabulary "
                             f"[0, {bound}) of this model.") from None


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._accepted_keywords
@functools.cache
def _accepted_keywords(model_class: type, method: str, passed_to: tuple = (), declared_only: bool = False) -> frozenset:
    """The keyword names `model_class.<method>` accepts into its `**kwargs` (see [`_check_keyword_arguments`]): the
    parameters that `method` declares in any class of `model_class.__mro__` (the override's and those of the
    transformers method it extends, e.g. `cache_position` of `LlamaForCausalLM.forward` in early 5.x releases), those
    of the functions in `passed_to` (where the method hands its `**kwargs` on, or, for an encoder, the forward of the
    model whose arguments `generate()` hands on to it), the keys of transformers'
    `TransformersKwargs` (read from the installed release, bases included), the keywords transformers itself passes
    to a model whatever its signature (`generate()`, `Trainer`, `@can_return_tuple`, the debugging options of its
    forward decorators), and `token_type_ids`, which a BERT tokenizer returns and `model(**tokenizer(text))` hands to
    a model without token types (BART's and Llama's `forward` ignore it). Computed once per class.

    With `declared_only=True`, only the names a user writes, those [`_check_keyword_arguments`] may suggest: the
    declared parameters and `return_dict`, `use_cache`, `output_attentions`, `output_hidden_states`; not the
    internals of `TransformersKwargs` and transformers' own plumbing (`max_length=` is no misspelling of flash
    attention's `max_length_q`)."""
    names = {"return_dict", "use_cache", "output_attentions", "output_hidden_states"}
    if not declared_only:
        names.update({"cache", "past_key_values", "cache_position", "position_ids", "logits_to_keep",
                      "num_items_in_batch", "debug_io", "debug_io_dir", "prune_layers", "token_type_ids"})
        for typed_dict in (TransformersKwargs, *getattr(TransformersKwargs, "__orig_bases__", ())):
            if isinstance(typed_dict, type):  # a TypedDict's keys include its bases'; `__annotations__` too
                names.update(getattr(typed_dict, "__required_keys__", ()),
                             getattr(typed_dict, "__optional_keys__", ()))
                try:
                    names.update(typed_dict.__annotations__)
                except Exception:  # an annotation that cannot be evaluated (Python >= 3.14 evaluates them lazily)
                    pass
    functions = [vars(klass)[method] for klass in model_class.__mro__ if method in vars(klass)]
    for function in (*functions, *passed_to):
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):  # not introspectable (a builtin): it adds no name
            continue
        names.update(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return frozenset(names)


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_keyword_arguments
def _check_keyword_arguments(model, kwargs: dict, method: str = "forward", passed_to: tuple = ()) -> None:
    """Raise a `TypeError` in Python's own words for a key of `kwargs` (what `model.<method>` received in its
    `**kwargs`) that nothing would read: a misspelled argument (`document_state=` for `document_states=`) would
    otherwise be swallowed by the layers below and the model would run without it, a silently different answer.
    Accepted: what [`_accepted_keywords`] lists (declared parameters, `TransformersKwargs`, what `generate()` and
    `Trainer` pass), and any key whose value is `None` (it changes nothing, and `generate()` forwards such keys
    unchecked, as its own `model_kwargs` check skips them). The message names the first unexpected key and, when one
    is close, the argument it probably meant (`difflib`, among the names a user writes: `_accepted_keywords(...,
    declared_only=True)`). Skipped while `torch.compile` traces (the signature look-up is no graph code), so a
    compiled model does not check."""
    if not kwargs or torch.compiler.is_compiling():
        return
    accepted = _accepted_keywords(type(model), method, tuple(passed_to))
    for name, value in kwargs.items():
        if value is not None and name not in accepted:
            meant = _accepted_keywords(type(model), method, tuple(passed_to), True)
            close = difflib.get_close_matches(name, sorted(meant), n=1)
            hint = f". Did you mean '{close[0]}'?" if close else ""
            raise TypeError(f"{type(model).__name__}.{method}() got an unexpected keyword argument '{name}'{hint}")


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._refuse_unread_keywords
def _refuse_unread_keywords(model, kwargs: dict, unread: dict, method: str = "forward") -> None:
    """Raise a `ValueError` for a key of `kwargs` (what `model.<method>` received in its `**kwargs`) that `unread`
    lists: a name [`_check_keyword_arguments`] accepts (a key of `TransformersKwargs`, or what transformers passes to
    any model) but that this forward never reads, so that the model would run as without it, a different result
    without a word (e.g. packed sequences read as one, positions that are not the ones given). `unread` maps each
    name to `(neutral, why)`: `None` passes, and so does `neutral` when it is not `None` (the value that asks for what
    the model does anyway: `False` for a switch, `0` for `logits_to_keep`); any other value is refused, the message
    naming the argument and ending with `why` (the reason and what to use instead).

    Raises:
        ValueError: a value of an unread argument that is neither `None` nor its neutral value.
    """
    for name, (neutral, why) in unread.items():
        value = kwargs.get(name)
        if value is None or (neutral is not None and type(value) in (bool, int) and value == neutral):
            continue
        raise ValueError(f"{type(model).__name__}.{method}() got `{name}`, which it does not support: {why}.")


# transformers' continuous batching (`generate(cache_implementation="paged")`, `generate_batch`): its cache, and the
# keywords it passes to `forward` (its `PagedAttentionArgs`: the packed batch's `cu_seq_lens_*` and `max_length_*`
# (`max_seqlen_*` before 5.24), the cache's `read_index` / `write_index` / `block_table`, the runner's
# `logits_indices` / `logits_processor_args`, ...), read from the installed release; where the cache is found but
# not those arguments, the names of 5.6 to 5.24. Without the cache, no step is taken for one (continuous batching
# is refused as any unread keyword).
try:
    from transformers.generation.continuous_batching import PagedAttentionCache
except Exception:  # a release without continuous batching, or another layout of it
    PagedAttentionCache = None
try:
    from transformers.generation.continuous_batching.input_outputs import PagedAttentionArgs

    PAGED_KEYWORDS = frozenset(PagedAttentionArgs.__annotations__)
except Exception:
    PAGED_KEYWORDS = frozenset({
        "input_ids", "attention_mask", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
        "max_length_k", "max_seqlen_q", "max_seqlen_k", "write_index", "read_index", "logits_indices", "cache",
        "block_table", "logits_processor_args", "use_cache", "is_causal",
    })


def _is_paged(cache) -> bool:
    """Whether `cache` is continuous batching's `PagedAttentionCache` (its batch is packed into one row)."""
    return PagedAttentionCache is not None and isinstance(cache, PagedAttentionCache)


def _check_paged_call(model, cache, block_ids, document_caches) -> bool:
    """Whether this forward is a step of continuous batching (`cache` is a `PagedAttentionCache`): the plain Llama
    forward, whose attention reads the packed batch apart (the cache's indices, the mask or the sequence lengths it
    passes), as `LlamaForCausalLM`'s does.

    Raises:
        ValueError: a paged cache with `block_ids` or `document_caches`, whose masks are built for a padded batch
            (one sequence per row) and would read the packed sequences as one.
    """
    if not _is_paged(cache):
        return False
    for name, value in (("block_ids", block_ids), ("document_caches", document_caches)):
        if value is not None:
            raise ValueError(f"{type(model).__name__}.forward() got `{name}` with a paged cache (continuous batching: "
                             "`generate(cache_implementation=\"paged\")`, `generate_batch`), which packs the batch "
                             f"into one row: `{name}` is read for one sequence per row, and would read the packed "
                             "sequences as one. Use `generate` or `forward` without a paged cache (a padded batch).")
    return True


def _without_paged_keywords(kwargs: dict) -> dict:
    """`kwargs` less continuous batching's keywords (`PAGED_KEYWORDS`), for [`_check_keyword_arguments`] in a step
    of continuous batching, where Llama's layers read them (its paged cache and attention) or take them unread, as in
    `LlamaForCausalLM` (`logits_indices`, `logits_processor_args`: the runner's own, read by it)."""
    return {name: value for name, value in kwargs.items() if name not in PAGED_KEYWORDS}


def _cache_name(paged: bool) -> str:
    """The keyword Llama's forward takes the cache as: `CACHE_NAME`, or, for a paged cache, `cache`, as continuous
    batching passes it (before transformers 5.24 no Llama argument of that name: its `paged|` attention functions
    read the cache from their keyword arguments)."""
    return "cache" if paged else CACHE_NAME


# Why flash attention's packing arguments are refused where nothing reads them ([`_block_attention_unread_keywords`]).
_BLOCK_ATTENTION_PACKED = (
    "only flash attention reads the packed sequences of a flattened batch apart (`cu_seq_lens_q` / `cu_seq_lens_k` / "
    "`max_length_q` / `max_length_k`, as `DataCollatorWithFlattening` returns them), with "
    "`attn_implementation=\"flash_attention_2\"` and neither `block_ids` nor `document_caches` (whose mask the model "
    "builds itself): here they would be read as one sequence, each attending to the others. Pad the batch instead, "
    "one sequence per row (e.g. `DataCollatorWithPadding`)"
)


def _block_attention_unread_keywords(config, block_ids, document_caches, paged: bool = False) -> dict:
    """The keywords of `TransformersKwargs` a forward with these arguments would leave unread, for
    [`_refuse_unread_keywords`]: `seq_idx` (no Llama attention reads it); flash attention's packing arguments unless
    neither `block_ids` nor `document_caches` are given and either `config` asks for flash attention or the call is
    a step of continuous batching (`paged`: its paged cache and the attention it runs read them; Llama's forward
    then reads them, as `LlamaForCausalLM`'s); and, with `block_ids` or `document_caches`, `is_causal=False` (the
    model builds the mask of such a call itself: causal within each block, or after the composed documents). Without
    either, `is_causal` is read as Llama reads it."""
    masked = block_ids is not None or document_caches is not None
    unread = {"seq_idx": (None, "no attention of Llama reads it (it marks the sequences of a packed batch for "
                                "state-space layers). Pad the batch instead, one sequence per row")}
    if masked or not (paged or "flash" in str(getattr(config, "_attn_implementation", None) or "")):
        unread.update(dict.fromkeys(("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"),
                                    (None, _BLOCK_ATTENTION_PACKED)))
    if masked:
        unread["is_causal"] = (True, "with `block_ids` or `document_caches` the model builds the attention mask "
                                     "itself (causal within each block, or after the composed documents)")
    return unread


def _decoder(model):
    """The `LlamaModel` (decoder stack) of a causal LM or the decoder itself."""
    decoder = getattr(model, "model", None)
    return decoder if decoder is not None and hasattr(decoder, "layers") else model


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._peft_adapter_state
def _peft_adapter_state(owner, params) -> tuple:
    """What the peft layers among `owner`'s modules contribute to a representation beyond their weights, for those
    holding one of `params` (the `(name, parameter)` pairs a representation fingerprint hashes): for each (a tuner
    layer such as LoRA's, which wraps its `base_layer`, or a `modules_to_save` copy of its `original_module`), its path
    in `owner`, its active adapters, whether adapters are disabled, the merged ones and its scaling (LoRA's
    `alpha / r` per adapter, which `set_scale` changes). Every adapter's weights stay in the model whichever is
    active, so the weights alone cannot tell the representations of adapter `a` from those of adapter `b`
    (`set_adapter`) or of the model without adapters (`with peft_model.disable_adapter():`). Read through attributes
    (no peft import); `()` when no name of `params` runs through a peft layer (a model without adapters), at the cost
    of one scan of the names."""
    markers = (".base_layer.", ".original_module.", ".modules_to_save.")
    if not any(marker in name for name, _ in params for marker in markers):
        return ()
    hashed = {id(p) for _, p in params}
    state = []
    for path, layer in owner.named_modules():
        if ("base_layer" in layer._modules or "original_module" in layer._modules) and any(
                id(p) in hashed for p in layer.parameters()):
            scaling = getattr(layer, "scaling", None)
            state.append((path, tuple(getattr(layer, "active_adapters", ())),
                          bool(getattr(layer, "disable_adapters", False)), tuple(getattr(layer, "merged_adapters", ())),
                          tuple(sorted(scaling.items())) if isinstance(scaling, dict) else None))
    return tuple(state)


def document_cache_fingerprint(model) -> str:
    """SHA-256 hex of what a document's key/value cache depends on: the weights of the decoder that compute keys and
    values (token embeddings and every layer; not the final norm nor the LM head), every config field that can change
    them (rotary settings, heads, epsilon, activation, ...; `config.to_dict()` minus the metadata of
    `_FINGERPRINT_IGNORED_FIELDS`) and the transformers major version; under peft, also the adapters' state
    ([`_peft_adapter_state`]: active, disabled, merged, scaling), so that switching or disabling an adapter is another
    fingerprint (a model without peft layers hashes as before).

    Works for any Llama-family causal LM (`LlamaForCausalLM`, [`BlockAttentionLlamaForCausalLM`]) or `LlamaModel`.
    Cached on the model until the config changes or a parameter is replaced or modified in place (torch's version
    counters), as `ReadOnceBartDocumentEncoder.representation_fingerprint`; a training forward never hashes.

    Args:
        model (`torch.nn.Module`): with a `config` and Llama's decoder (`model.model.layers` or `model.layers`).

    Returns:
        `str`: 64 hex characters.

    Raises:
        TypeError: if `model` has no `config`.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"`model` must be a transformers model with a config, got {type(model).__name__}.")
    decoder = _decoder(model)
    params = [(name, p) for name, p in decoder.named_parameters() if not name.startswith("norm.")]
    config_json = _config_fingerprint(config, BlockAttentionLlamaConfig)
    adapters = _peft_adapter_state(decoder, params)
    state = (config_json, adapters, *((name, p.data_ptr(), p._version, p.dtype) for name, p in params))
    cached = model.__dict__.get("_document_cache_fingerprint")
    if cached is not None and cached[0] == state:
        return cached[1]
    digest = hashlib.sha256(b"llama_kv_cache|" + config_json.encode())
    if adapters:
        digest.update(repr(adapters).encode())
    for name, p in params:
        digest.update(name.encode())
        digest.update(p.detach().to("cpu", torch.float32).contiguous().numpy().data)
    model.__dict__["_document_cache_fingerprint"] = (state, digest.hexdigest())
    return digest.hexdigest()


@dataclass
class DocumentCacheOutput(ModelOutput):
    r"""
    Key/value caches of a batch of documents, each encoded alone (output of `encode_documents`, or of a store
    adapter's `read`). Documents are padded to the longest one; `attention_mask` says which tokens are real.

    Args:
        key_states (`torch.FloatTensor` of shape `(num_documents, num_layers, num_key_value_heads, length, head_dim)`):
            per-layer keys, rotated (RoPE) at `position_ids`.
        value_states (`torch.FloatTensor` of shape `(num_documents, num_layers, num_key_value_heads, length,
            head_dim)`): per-layer values (no position in them).
        attention_mask (`torch.LongTensor` of shape `(num_documents, length)`): 1 for the document's tokens, 0 for
            padding.
        position_ids (`torch.LongTensor` of shape `(num_documents, length)`): the positions the keys were rotated at
            (0..n-1 for a document of n tokens; 0 at padding).
        model_fingerprint (`str`): [`document_cache_fingerprint`] of the model that made them; a model refuses caches
            of another fingerprint.
        input_ids (`torch.LongTensor` of shape `(num_documents, length)`, *optional*): the documents' tokens (0 at
            padding); needed by selective recompute ([`selective_recompute`], `recompute_ratio > 0`), which runs
            some of them through the model again.
        rope_setting (`str`, *optional*): [`rope_setting`] of the model that made them (rotary type, base, scaling,
            head size); a model refuses caches of another RoPE setting, naming both.
    """

    key_states: torch.FloatTensor | None = None
    value_states: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    position_ids: torch.LongTensor | None = None
    model_fingerprint: str | None = None
    input_ids: torch.LongTensor | None = None
    rope_setting: str | None = None

    @property
    def num_documents(self) -> int:
        """Number of documents (the first dimension of `key_states`)."""
        return 0 if self.key_states is None else int(self.key_states.shape[0])

    def split(self) -> list["DocumentCacheOutput"]:
        """One [`DocumentCacheOutput`] per document, its padding removed: `key_states` and `value_states`
        `(1, num_layers, num_key_value_heads, n, head_dim)`, mask and positions `(1, n)`."""
        out = []
        for row in range(self.num_documents):
            real = self.attention_mask[row].bool()
            n = int(real.sum())
            if bool(real[:n].all()):  # right padding or none: views, no copy of the document's cache
                real = slice(0, n)
            out.append(DocumentCacheOutput(
                key_states=self.key_states[row][:, :, real][None],
                value_states=self.value_states[row][:, :, real][None],
                attention_mask=self.attention_mask[row][real][None], position_ids=self.position_ids[row][real][None],
                model_fingerprint=self.model_fingerprint,
                input_ids=None if self.input_ids is None else self.input_ids[row][
                    real if isinstance(real, slice) else real.to(self.input_ids.device)][None],
                rope_setting=self.rope_setting))
        return out


def _rope_layer_types(rope) -> list[str]:
    """The layer types of a `rope_parameters` that holds one set of parameters per layer type (Gemma 3's
    `{"full_attention": {...}, "sliding_attention": {...}}`, beside which transformers < 5.24 also sets a top-level
    `rope_type` and a `rope_theta` of None); `[]` for one set (`{"rope_type": ..., "rope_theta": ...}`)."""
    if not isinstance(rope, Mapping):
        return []
    return [str(key) for key, value in rope.items() if isinstance(value, Mapping)]


def _check_rope(config) -> None:
    """A ValueError naming the field unless every stored key of a model with `config` can be re-positioned by one
    rotation over its whole head in transformers' `rotate_half` layout: one set of rotary parameters (not one per
    layer type), a `rope_type` of `EXACT_ROPE_TYPES`, a `partial_rotary_factor` of 1 (models that honour a smaller
    one, e.g. StableLM, Phi, GLM, rotate only part of each head, which Llama's rotary embedding does not know; the
    config alone does not say whether the model honours it, except a Llama config's: see
    [`_llama_rotates_whole_head`]) and every layer rotary (`no_rope_layers` of SmolLM3 and Llama 4: the keys of a
    layer without RoPE carry no position). The head size (`head_dim`, also when it is not
    `hidden_size // num_attention_heads`) is read from the config where keys are rotated, as Llama's attention
    reads it."""
    rope = getattr(config, "rope_parameters", None) or {}
    if _rope_layer_types(rope):
        raise ValueError(
            f"cannot compose document caches for RoPE parameters per layer type ({', '.join(_rope_layer_types(rope))}): "
            "stored keys are re-rotated with one RoPE setting for every layer (Llama-family models)."
        )
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
    if rope_type not in EXACT_ROPE_TYPES:
        raise ValueError(
            f"cannot compose document caches for rope_type {rope_type!r}: rotating stored keys by a position delta "
            f"is exact only for {sorted(EXACT_ROPE_TYPES)} (whose frequencies do not depend on the length read)."
        )
    for where, factor in (("rope_parameters of ", rope.get("partial_rotary_factor") if isinstance(rope, Mapping)
                           else None), ("", getattr(config, "partial_rotary_factor", None))):
        if factor is not None and factor != 1 and not _llama_rotates_whole_head(config):
            raise ValueError(
                f"cannot compose document caches for partial_rotary_factor {factor!r} ({where}"
                f"{type(config).__name__}): a model that rotates only that part of each head (StableLM, Phi, GLM, "
                "...) would get keys re-rotated over the whole head; only partial_rotary_factor 1 (every dimension "
                "rotary, as in Llama) is supported."
            )
    no_rope = getattr(config, "no_rope_layers", None)
    if isinstance(no_rope, Sequence) and not all(no_rope):
        layers = [index for index, rotary in enumerate(no_rope) if not rotary]
        raise ValueError(
            f"cannot compose document caches for no_rope_layers {list(no_rope)!r} ({type(config).__name__}): layers "
            f"{layers} use no RoPE, and their stored keys, which carry no position, would be rotated; only models "
            "whose every layer is rotary are supported."
        )


def _llama_rotates_whole_head(config) -> bool:
    """Whether `config` is a Llama one (`LLAMA_MODEL_TYPES`) whose rotary frequencies span the whole head: Llama's
    attention rotates every dimension with the frequencies of its rotary embedding, which for the default type reads
    no `partial_rotary_factor`, so its keys are re-positioned exactly whatever that field says. (Where they honour
    it, e.g. linear scaling, they span part of the head only, and the Llama model itself cannot run.) Read on a
    copy: building the rotary embedding may move a `partial_rotary_factor` into `rope_parameters`, which would change
    the config's [`rope_setting`]."""
    if getattr(config, "model_type", None) not in LLAMA_MODEL_TYPES:
        return False
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * LlamaRotaryEmbedding(config=copy.deepcopy(config)).inv_freq.numel() == head_dim


def rope_setting(config) -> str:
    """Canonical JSON of what a stored key's rotation depends on: the rotary parameters (`rope_parameters`: type,
    base `rope_theta`, scaling factors), the head size and the partial-rotary factor. Caches record it
    (`DocumentCacheOutput.rope_setting`) so that a model with another RoPE setting refuses them with both settings
    named (the fingerprint, which covers it too, names only hashes).

    Args:
        config (`LlamaConfig`): a Llama-family config.

    Returns:
        `str`: sorted-key JSON.
    """
    rope = getattr(config, "rope_parameters", None)
    rope = dict(rope) if isinstance(rope, dict) else {"rope_theta": getattr(config, "rope_theta", None)}
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return json.dumps({"rope_parameters": rope, "head_dim": head_dim,
                       "partial_rotary_factor": getattr(config, "partial_rotary_factor", 1.0)}, sort_keys=True,
                      default=str)


def _check_rope_settings(documents: list[DocumentCacheOutput], config, argument: str) -> None:
    expected = rope_setting(config)
    for i, document in enumerate(documents):
        if document.rope_setting is not None and document.rope_setting != expected:
            raise ValueError(f"document {i} of `{argument}` was encoded with RoPE setting {document.rope_setting}, "
                             f"this model uses {expected}: its keys are rotated for other positions; re-encode the "
                             "documents with this model.")


def check_context_length(num_documents: int, prefix_length: int, question_length: int, config, what: str) -> None:
    """Refuse a composed prompt (`num_documents` documents of `prefix_length` tokens in all, then `question_length`
    more) longer than the model's positions, before any work: past `max_position_embeddings` a rotary model answers
    from positions it never saw, where transformers only warns.

    Args:
        num_documents, prefix_length, question_length (`int`): the prompt's documents and tokens.
        config: the model's config (`max_position_embeddings`; none: nothing to check).
        what (`str`): how the error names the prompt (e.g. "`document_caches[1]`" or "question 'q7'").

    Raises:
        ValueError: naming `what`, the three lengths and the limit.
    """
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and prefix_length + question_length > limit:
        raise ValueError(f"{what}: {num_documents} document(s) of {prefix_length} tokens and a question of "
                         f"{question_length} tokens make {prefix_length + question_length} positions, more than the "
                         f"model's max_position_embeddings {limit}: pass fewer or shorter documents (encoded with a "
                         "smaller max_document_length) or a shorter question.")


def _check_context_length(documents: Sequence[DocumentCacheOutput], question_length: int, config,
                          argument: str) -> None:
    """[`check_context_length`] of one row's documents (unpadded, one per document), named as `argument`."""
    check_context_length(len(documents), _prefix_length(documents), question_length, config, f"`{argument}`")


def _prefix_length(documents: Sequence[DocumentCacheOutput]) -> int:
    """The real tokens of one row's documents (unpadded, one per document): the positions their composition takes."""
    return sum(int(document.attention_mask.sum()) for document in documents)


def _as_documents(document_caches, argument: str = "document_caches") -> list[DocumentCacheOutput]:
    """A `DocumentCacheOutput` or a sequence of them -> one unpadded `DocumentCacheOutput` per document, in order."""
    if isinstance(document_caches, DocumentCacheOutput):
        document_caches = [document_caches]
    if isinstance(document_caches, (str, bytes)) or not isinstance(document_caches, Sequence):
        raise TypeError(f"`{argument}` must be a DocumentCacheOutput or a sequence of them, got "
                        f"{type(document_caches).__name__}.")
    documents = []
    for i, cache in enumerate(document_caches):
        if not isinstance(cache, DocumentCacheOutput):
            raise TypeError(f"`{argument}[{i}]` must be a DocumentCacheOutput, got {type(cache).__name__}.")
        if cache.key_states is None or cache.value_states is None or cache.attention_mask is None or \
                cache.position_ids is None:
            raise ValueError(f"`{argument}[{i}]` lacks key_states, value_states, attention_mask or position_ids.")
        if cache.key_states.ndim != 5 or cache.key_states.shape != cache.value_states.shape:
            raise ValueError(f"`{argument}[{i}]`: key_states and value_states must both be (num_documents, "
                             f"num_layers, num_key_value_heads, length, head_dim), got "
                             f"{tuple(cache.key_states.shape)} and {tuple(cache.value_states.shape)}.")
        if cache.attention_mask.shape != cache.key_states.shape[:1] + cache.key_states.shape[3:4] or \
                cache.position_ids.shape != cache.attention_mask.shape:
            raise ValueError(f"`{argument}[{i}]`: attention_mask and position_ids must be (num_documents, length) "
                             f"= {tuple(cache.key_states.shape[:1] + cache.key_states.shape[3:4])}.")
        documents.extend(cache.split())
    if not documents:
        raise ValueError(f"`{argument}` holds no document.")
    return documents


def _check_cache_arguments(past_key_values, cache) -> None:
    """Raise a `TypeError` naming the argument when `past_key_values` or `cache` holds document caches (a
    [`DocumentCacheOutput`], from `encode_documents` or a store) instead of a transformers `Cache` (Llama would fail
    on a missing `Cache` method, naming neither)."""
    for name, value in (("past_key_values", past_key_values), ("cache", cache)):
        if isinstance(value, DocumentCacheOutput):
            raise TypeError(f"`{name}` got a DocumentCacheOutput (from `encode_documents` or a store), not a Cache: "
                            "pass it to the causal LM as `document_caches=`, or compose it into a cache first "
                            "(`compose_document_caches`).")


def _holds_document_caches(value) -> bool:
    """Whether `value` is a [`DocumentCacheOutput`], or a sequence holding one (or a sequence of them, per row)."""
    if isinstance(value, DocumentCacheOutput):
        return True
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and any(
        isinstance(item, DocumentCacheOutput) or (isinstance(item, Sequence) and any(
            isinstance(inner, DocumentCacheOutput) for inner in item)) for item in value)


def _per_row_documents(document_caches, batch_size: int) -> bool:
    """Whether `document_caches` holds one sequence of documents per row (`[[a, b], [c]]`) rather than the same
    documents for every row (`a`, `[a, b]`).

    Raises:
        ValueError: per-row lists that are not `batch_size`.
    """
    per_row = (isinstance(document_caches, Sequence) and not isinstance(document_caches, (str, bytes))
               and len(document_caches) > 0 and not isinstance(document_caches[0], DocumentCacheOutput))
    if per_row and len(document_caches) != batch_size:
        raise ValueError(f"`document_caches` holds {len(document_caches)} per-row lists for a batch of {batch_size} "
                         "rows.")
    return per_row


def _check_fingerprints(documents: list[DocumentCacheOutput], expected: str | None, argument: str) -> None:
    if expected is None:
        return
    for document in documents:
        if document.model_fingerprint is None:
            raise ValueError(f"a cache of `{argument}` carries no model_fingerprint: it cannot be checked against "
                             "this model; encode the documents with `encode_documents` (or a store adapter).")
        if document.model_fingerprint != expected:
            raise ValueError(
                f"a cache of `{argument}` was made by model {document.model_fingerprint[:16]}..., this model's "
                f"fingerprint is {expected[:16]}...: its keys and values would silently shift the outputs; "
                "re-encode the documents with this model."
            )


def rotate_keys(keys: torch.Tensor, delta: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate post-RoPE keys by a position delta: the key of position `p` becomes the key of position `p + delta`
    (R(p + d) = R(d) R(p) for rotary embeddings, in transformers' `rotate_half` layout). Computed in fp32, returned in
    the keys' dtype.

    Adapted from transformers' `LlamaRotaryEmbedding.forward` and `apply_rotary_pos_emb` (keys only, no attention
    scaling: the stored keys carry it already).

    Args:
        keys (`torch.Tensor` of shape `(..., length, head_dim)`): post-RoPE keys.
        delta (`torch.LongTensor` of shape `(length,)`): position change per token.
        inv_freq (`torch.Tensor` of shape `(head_dim // 2,)`): the rotary inverse frequencies.

    Returns:
        `torch.Tensor` of the shape and dtype of `keys`.

    Raises:
        ValueError: if `head_dim != 2 * len(inv_freq)` or `delta` does not have `length` entries.
        TypeError: an argument that is not a tensor (a list, a numpy array).
    """
    _check_tensor_arguments({}, {"keys": keys, "delta": delta, "inv_freq": inv_freq})
    _check_rotation(keys.shape, delta, inv_freq)
    cos, sin = _rotation(delta, inv_freq, keys.device)
    return _rotate(keys.float(), cos, sin).to(keys.dtype)


def _check_rotation(shape, delta: torch.Tensor, inv_freq: torch.Tensor) -> None:
    """`ValueError` unless keys of `shape` `(..., length, head_dim)` can be rotated by `delta` `(length,)` with
    `inv_freq` `(head_dim // 2,)`."""
    if shape[-1] != 2 * inv_freq.shape[-1]:
        raise ValueError(f"`keys` have head_dim {shape[-1]}, the rotary frequencies {inv_freq.shape[-1]} "
                         "(head_dim / 2 expected).")
    if delta.shape != shape[-2:-1]:
        raise ValueError(f"`delta` must have shape ({shape[-2]},), got {tuple(delta.shape)}.")


def _rotation(delta: torch.Tensor, inv_freq: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    """`cos`, `sin` `(length, head_dim)` in fp32 of the rotation by `delta` `(length,)` positions."""
    freqs = delta.to(device, torch.float32)[:, None] * inv_freq.to(device, torch.float32)[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate(keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """fp32 keys `(..., length, head_dim)` rotated by `cos`, `sin` `(length, head_dim)` (elementwise: rotating a
    slice gives exactly the rows of rotating the whole)."""
    return keys * cos + rotate_half(keys) * sin


def _check_rotary_config(config, argument: str = "config") -> None:
    """A ValueError (TypeError for what is no config) naming `argument` unless it is the config of a rotary
    Llama-family model: one set of rotary parameters (`rope_parameters` with `rope_type` and `rope_theta`; not one
    per layer type, as Gemma 3's), layers, heads and key/value heads. The ValueError names what is missing."""
    if not isinstance(config, transformers.PretrainedConfig):
        raise TypeError(f"`{argument}` must be the model's config (a LlamaConfig), got {type(config).__name__}"
                        + (": pass `model.config`." if hasattr(config, "config") else "."))
    rope = getattr(config, "rope_parameters", None)
    if _rope_layer_types(rope):
        raise ValueError(f"`{argument}` ({type(config).__name__}) has rotary parameters per layer type "
                         f"(rope_parameters of {', '.join(_rope_layer_types(rope))}): stored caches can be re-positioned only "
                         "for rotary Llama-family models, whose layers share one RoPE setting.")
    missing = [] if isinstance(rope, Mapping) and "rope_type" in rope and "rope_theta" in rope else [
        "rope_parameters (rope_type, rope_theta)"]
    missing += [name for name in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size")
                if getattr(config, name, None) is None]
    if missing:
        raise ValueError(f"`{argument}` ({type(config).__name__}) is not the config of a rotary Llama-family model: "
                         f"it has no {', '.join(missing)} (stored caches can be re-positioned only for rotary "
                         "Llama-family models).")


def _rope_inv_freq(config, rotary: LlamaRotaryEmbedding | None = None) -> torch.Tensor:
    _check_rope(config)
    if rotary is None:
        rotary = LlamaRotaryEmbedding(config=config)
    return rotary.original_inv_freq if hasattr(rotary, "original_inv_freq") else rotary.inv_freq


def _composer(documents: list[DocumentCacheOutput], config, inv_freq: torch.Tensor, offset: int, device, dtype):
    """Place unpadded single documents one after another from `offset`, one layer at a time.

    Checks every document's shape (and its rotation) at once, then returns `(num_layers, total_length, layer)`:
    `layer(l)` gives layer `l`'s keys and values, two new tensors `(num_key_value_heads, total_length, head_dim)`
    in `dtype` on `device`, each document's keys rotated from the positions it was encoded at to its place. Nothing
    is composed before it is asked for: a caller that hands each layer on (to a cache, which copies it) before asking
    for the next holds one composed layer at a time beside the stored caches, and the rotation's temporaries are one
    document's layer. Rotation is elementwise, so a layer is bit for bit the same as in a composition of all layers
    at once."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    expected = (config.num_hidden_layers, config.num_key_value_heads, head_dim)
    for i, document in enumerate(documents):
        k = document.key_states[0]  # (layers, heads_kv, n, head_dim)
        if (k.shape[0], k.shape[1], k.shape[3]) != expected:
            raise ValueError(f"document {i} of `document_caches` has (layers, heads_kv, head_dim) = "
                             f"{(k.shape[0], k.shape[1], k.shape[3])}, this model {expected}.")
    first = documents[0].key_states
    target_dtype, target_device = dtype or first.dtype, device if device is not None else first.device
    total = sum(int(document.key_states.shape[3]) for document in documents)
    parts, cursor = [], 0
    for document in documents:
        k, v = document.key_states[0], document.value_states[0]
        n = k.shape[2]
        new_positions = torch.arange(offset + cursor, offset + cursor + n, device=k.device)
        delta = new_positions - document.position_ids[0].to(k.device)
        _check_rotation(k.shape, delta, inv_freq)
        cos, sin = _rotation(delta, inv_freq, target_device)
        parts.append((k, v, cos, sin, cursor, n))
        cursor += n

    def layer(index: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys = torch.empty((expected[1], total, head_dim), dtype=target_dtype, device=target_device)
        values = torch.empty_like(keys)
        for k, v, cos, sin, start, n in parts:
            keys[:, start:start + n] = _rotate(k[index].to(target_device, torch.float32), cos, sin)
            values[:, start:start + n] = v[index]
        return keys, values

    return expected[0], total, layer


def _compose(documents: list[DocumentCacheOutput], config, inv_freq: torch.Tensor, offset: int, device, dtype):
    """Place unpadded single documents one after another from `offset`: per-layer lists of keys and values, each
    `(num_key_value_heads, total_length, head_dim)`, new tensors (one copy of the composition; one tensor per layer,
    so that a cache growing layer by layer frees each layer's old tensor as it goes)."""
    num_layers, _, layer = _composer(documents, config, inv_freq, offset, device, dtype)
    keys, values = [], []
    for index in range(num_layers):
        k, v = layer(index)
        keys.append(k)
        values.append(v)
    return keys, values


def _streamed_cache(layers, config) -> DynamicCache:
    """`(keys, values)` of one row per layer, each `(num_key_value_heads, length, head_dim)`, from an iterator ->
    a `DynamicCache` of batch 1. The cache copies each layer as it takes it (a `DynamicLayer` concatenates onto an
    empty tensor), and the layer given is dropped before the next one is asked for: with a lazy iterator
    ([`_composer`], [`_blend_layers`]) the composition is never held twice, only one layer of it is."""
    cache, index = DynamicCache(config=config), 0
    for keys, values in layers:  # not `enumerate`: its reused result tuple would keep the last layer alive
        cache.update(keys[None], values[None], index)
        del keys, values
        index += 1
    return cache


def _dynamic_cache(keys: torch.Tensor, values: torch.Tensor, config) -> DynamicCache:
    """`(batch, layers, heads_kv, length, head_dim)` keys/values -> a transformers `DynamicCache`."""
    return DynamicCache(ddp_cache_data=[(keys[:, layer].contiguous(), values[:, layer].contiguous())
                                        for layer in range(keys.shape[1])], config=config)


def check_recompute_ratio(recompute_ratio) -> float:
    """`recompute_ratio` (a Python, numpy or one-element tensor real) as a float in [0, 1].

    Raises:
        ValueError: not a real number (a bool neither), not finite, or outside [0, 1] (naming the argument and the
            value).
    """
    if torch.is_tensor(recompute_ratio) and recompute_ratio.numel() == 1 and not recompute_ratio.dtype == torch.bool:
        recompute_ratio = recompute_ratio.item()  # a one-element tensor holds a number as well
    elif getattr(recompute_ratio, "ndim", None) == 0 and hasattr(recompute_ratio, "item"):
        recompute_ratio = recompute_ratio.item()  # a 0-d numpy array (numpy scalars are numbers.Real already)
    if isinstance(recompute_ratio, bool) or not isinstance(recompute_ratio, numbers.Real) or \
            not math.isfinite(recompute_ratio) or not 0 <= recompute_ratio <= 1:
        raise ValueError(f"`recompute_ratio` must be a number in [0, 1] (the fraction of document tokens recomputed "
                         f"per layer), got {recompute_ratio!r}.")
    return float(recompute_ratio)


def recompute_schedule(recompute_ratio: float, num_layers: int, num_tokens: int) -> list[tuple[int, int]]:
    """How many document tokens selective recompute ([`selective_recompute`]) runs through each layer: per layer `l`
    (0-indexed), `(kv_tokens, query_tokens)`: the tokens whose keys and values are recomputed at layer `l` and the
    tokens (a subset) whose attention and MLP run at layer `l` to give their input to layer `l + 1`.

    - layer 0: every token (the keys and values of layer 0 depend on the token alone, so they are exact in the
      stored cache; the layer's output is what the first deviation is measured on);
    - layer 1: keys and values of every token (this is where the reused and the recomputed values first differ:
      CacheBlend's selection layer, §4.3), queries of the `s_1` tokens of highest value deviation;
    - layer `l >= 2`: keys and values of the `s_{l-1}` tokens carried in, queries of the `s_l` of them deviating
      most (gradual filtering, CacheBlend §4.3);
    - the last layer: keys and values only (its output is never read for a document token).

    `s_l = ceil(r_l * num_tokens)`, with `r_l` falling linearly over layers 1..L-2 from `min(1, 1.5 r)` to
    `2 r - min(1, 1.5 r)`: their mean is `r = recompute_ratio` (the fraction of document tokens recomputed per
    layer, as the paper's "recompute ratio"). `r = 0`: nothing is recomputed; `r = 1`: every token everywhere.

    Args:
        recompute_ratio (`float`): in [0, 1]. num_layers (`int`): decoder layers L. num_tokens (`int`): document
            tokens T.

    Returns:
        `list[tuple[int, int]]` of length `num_layers` (all `(0, 0)` for ratio 0).

    Raises:
        ValueError: a ratio outside [0, 1].
    """
    ratio = check_recompute_ratio(recompute_ratio)
    if ratio == 0 or num_tokens == 0:
        return [(0, 0)] * num_layers
    middle = list(range(1, num_layers - 1))
    high = min(1.0, 1.5 * ratio)
    low = 2 * ratio - high
    queries, carried = [num_tokens], num_tokens
    for i, _ in enumerate(middle):
        r = high if len(middle) == 1 else high + (low - high) * i / (len(middle) - 1)
        r = ratio if len(middle) == 1 else r
        carried = max(1, min(carried, math.ceil(r * num_tokens - 1e-9)))
        queries.append(carried)
    schedule, kv = [], num_tokens
    for layer in range(num_layers):
        query = queries[layer] if layer < num_layers - 1 else 0
        schedule.append((kv, query))
        kv = query if layer >= 1 else num_tokens
    return schedule


def _check_rotary_model(model, argument: str = "model"):
    """The decoder of a Llama-family causal LM with rotary positions, or a ValueError naming what is missing."""
    decoder = _decoder(model)
    layers = getattr(decoder, "layers", None)
    rotary = getattr(decoder, "rotary_emb", None)
    attention = getattr(layers[0], "self_attn", None) if layers is not None and len(layers) else None
    if rotary is None or attention is None or not all(
            hasattr(attention, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj")):
        raise ValueError(f"`{argument}` ({type(model).__name__}) has no rotary position embeddings in a Llama-family "
                         "decoder (`model.layers[i].self_attn.{q,k,v,o}_proj` and `model.rotary_emb`): stored caches "
                         "can be re-positioned and selectively recomputed only for rotary Llama-family models.")
    _check_rope(model.config)
    return decoder


@torch.no_grad()
def _blend_layers(decoder, compose_layer, num_layers: int, num_tokens: int, input_ids: torch.Tensor | None,
                  recompute_ratio: float):
    """Selective recompute of one composed row, layer by layer: yields each layer's `(keys, values)`
    `(num_key_value_heads, T, head_dim)` at positions 0..T-1, the recomputed tokens' rows written in place into the
    layer that `compose_layer(l)` gave ([`_composer`]; fresh tensors, not the stored ones), once that layer is done.
    `input_ids` `(T,)` (unused for a ratio of 0, which yields the plain composition).

    A layer is composed only when it is processed, and given up as soon as it is done, so beside the stored caches
    and the layers already handed on this holds one composed layer and one layer's activations of the carried tokens
    (the same computation, in the same order, as on a composition of all layers at once)."""
    schedule = recompute_schedule(recompute_ratio, num_layers, num_tokens)
    if schedule[0][0] == 0:
        for layer_index in range(num_layers):
            yield compose_layer(layer_index)
        return
    keys, values = compose_layer(0)
    device = keys.device
    positions = torch.arange(num_tokens, device=device)
    carried = positions  # tokens whose input to the current layer is computed (all of them into layer 0)
    hidden = decoder.embed_tokens(input_ids.to(device)[None]).to(keys.dtype)  # (1, n, hidden)
    for layer_index, layer in enumerate(decoder.layers):
        if layer_index > 0:
            keys, values = compose_layer(layer_index)
        if hidden is None:  # past the last layer with queries: the plain composition
            yield keys, values
            del keys, values
            continue
        attention = layer.self_attn
        head_dim = attention.head_dim
        normed = layer.input_layernorm(hidden)
        cos, sin = decoder.rotary_emb(normed, carried[None])
        k = attention.k_proj(normed).view(1, carried.numel(), -1, head_dim).transpose(1, 2)
        v = attention.v_proj(normed).view(1, carried.numel(), -1, head_dim).transpose(1, 2)
        k = k * cos[:, None] + rotate_half(k) * sin[:, None]
        deviation = (v[0] - values[:, carried]).float().pow(2).sum(dim=(0, 2))  # (n,) CacheBlend §4.2
        keys[:, carried] = k[0].to(keys.dtype)
        values[:, carried] = v[0].to(values.dtype)
        del k, v
        queries = schedule[layer_index][1]
        if queries == 0:
            hidden = normed = cos = sin = deviation = None
            yield keys, values
            del keys, values
            continue
        if queries < carried.numel():  # keep the tokens of highest value deviation, in position order
            keep = deviation.topk(queries).indices.sort().values
            carried, hidden, normed = carried[keep], hidden[:, keep], normed[:, keep]
            cos, sin = cos[:, keep], sin[:, keep]
        del deviation
        q = attention.q_proj(normed).view(1, carried.numel(), -1, head_dim).transpose(1, 2)
        del normed
        q = q * cos[:, None] + rotate_half(q) * sin[:, None]
        del cos, sin
        allowed = positions[None] <= carried[:, None]  # (n, T): causal over every document token before
        out = torch.nn.functional.scaled_dot_product_attention(
            q, keys[None], values[None], attn_mask=allowed, scale=attention.scaling, enable_gqa=True)
        del q, allowed
        yield keys, values  # this layer is done: hand it on before its MLP and the next layer are computed
        del keys, values
        hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(1, carried.numel(), -1))
        del out
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))


def _document_ids(documents: list[DocumentCacheOutput], argument: str) -> torch.Tensor:
    for i, document in enumerate(documents):
        if document.input_ids is None:
            raise ValueError(f"document {i} of `{argument}` carries no input_ids: selective recompute "
                             "(`recompute_ratio` > 0) reads the documents' tokens again; encode them with "
                             "`encode_documents` or read them from a store (which keeps their token ids).")
        if document.input_ids.shape != document.attention_mask.shape:
            raise ValueError(f"document {i} of `{argument}`: input_ids {tuple(document.input_ids.shape)} do not match "
                             f"its cache's length {tuple(document.attention_mask.shape)}.")
    return torch.cat([document.input_ids[0].to(torch.long).cpu() for document in documents])


def selective_recompute(model, document_caches, recompute_ratio: float, *, model_fingerprint: str | None = None):
    r"""Compose stored document caches and recompute the keys and values of a selected fraction of their tokens,
    layer by layer, so that the composition approaches the full prompt's cache: CacheBlend (Yao et al., EuroSys
    2025, "CacheBlend: Fast Large Language Model Serving for RAG with Cached Knowledge Fusion", §4) for any rotary
    Llama-family causal LM, unmodified weights.

    1. Position re-encoding: each document's stored keys are rotated to its place in the composition
       ([`compose_document_caches`]; CacheBlend §4.1, Block-Attention §2.3).
    2. Layer 0 is computed for every document token, attending to every document token before it (its keys and
       values depend on the token alone, so the stored ones are already exact; its output is not).
    3. Selection (CacheBlend §4.2-4.3, "HKVD" tokens): at layer 1 the keys and values of every document token are
       recomputed from that output, and the tokens whose recomputed *values* deviate most from the reused ones
       (squared L2 over heads and head dimensions) continue; at each later layer the keys and values of the
       carried tokens are recomputed, their deviation measured again, and the set narrowed to the tokens deviating
       most (gradual filtering), by the schedule of [`recompute_schedule`] (mean fraction `recompute_ratio` per
       layer). The carried tokens attend to every document token before them: recomputed where it was, reused
       elsewhere. Tokens not carried keep their reused keys and values.
    4. The question and any text after the documents are then read in full (`generate` / `forward`) with this cache.

    `recompute_ratio=0` is the plain composition (bit for bit); `recompute_ratio=1` recomputes every token at every
    layer, which is the full prompt's cache (to float rounding). Peak memory: the work runs layer by layer (a
    layer's keys are re-rotated only when it is processed, the recomputed rows are written into it in place, and it
    goes into the returned cache before the next layer is composed), so beside the stored caches it holds the layers
    done so far, one more layer, and one layer's activations of the carried tokens with their attention
    `(heads, carried, T)`: at most the full prompt's prefill, which holds its whole cache and one layer's
    activations of every token (tested).

    Args:
        model: a rotary Llama-family causal LM (`LlamaForCausalLM`, [`BlockAttentionLlamaForCausalLM`], ...).
        document_caches ([`DocumentCacheOutput`] or `Sequence[DocumentCacheOutput]`): every document, in order,
            carrying its `input_ids` (what `encode_documents` and the store adapter's `read` give).
        recompute_ratio (`float`): fraction of document tokens recomputed per layer, in [0, 1].
        model_fingerprint (`str`, *optional*): when given, every cache must carry this fingerprint (a
            [`BlockAttentionLlamaForCausalLM`] passes its own). When omitted, the caches that carry a fingerprint must
            carry the model's own [`document_cache_fingerprint`] (hashed once, then cached on the model), so a plain
            `LlamaForCausalLM` refuses another model's caches too; caches without one (built by hand) are not checked.

    Returns:
        `DynamicCache` of batch size 1 in the model's dtype and device: layer `l` holds keys and values
        `(1, num_key_value_heads, total_length, head_dim)` at positions 0..total_length-1. The caches passed in are
        not modified.

    Raises:
        ValueError: `recompute_ratio` outside [0, 1]; a model without rotary positions (naming its class), a
            rope type for which re-positioning is not exact, a `partial_rotary_factor` other than 1 (unless the
            model is Llama and its rotary embedding ignores it) or layers without RoPE (`no_rope_layers`), each
            naming the field; caches of another RoPE setting or model (fingerprint) or shape; a cache without
            `input_ids` when the ratio is above 0. TypeError: caches of another type.
    """
    ratio = check_recompute_ratio(recompute_ratio)
    decoder = _check_rotary_model(model)
    documents = _as_documents(document_caches)
    _check_rope_settings(documents, model.config, "document_caches")
    if model_fingerprint is not None:
        _check_fingerprints(documents, model_fingerprint, "document_caches")
    elif any(document.model_fingerprint is not None for document in documents):  # the model's own, hashed once
        _check_fingerprints([document for document in documents if document.model_fingerprint is not None],
                            document_cache_fingerprint(model), "document_caches")
    return _streamed_cache(_row_layers(model, decoder, documents, ratio, "document_caches"), model.config)


def _row_layers(model, decoder, documents, ratio: float, argument: str):
    """One row's documents composed and, for a ratio above 0, selectively recomputed, as an iterator over layers
    ([`_blend_layers`]); every check (token ids, shapes) runs before it is returned."""
    ids = _document_ids(documents, argument) if ratio > 0 else None
    inv_freq = _rope_inv_freq(model.config, decoder.rotary_emb)
    num_layers, total, layer = _composer(documents, model.config, inv_freq, 0, model.device, model.dtype)
    return _blend_layers(decoder, layer, num_layers, total, ids, ratio)


def _compose_row(model, decoder, documents, ratio: float, argument: str):
    """[`_row_layers`] as per-layer lists of keys and values (the whole composition at once)."""
    keys, values = [], []
    for k, v in _row_layers(model, decoder, documents, ratio, argument):
        keys.append(k)
        values.append(v)
    return keys, values


def compose_document_caches(document_caches, config, *, offset: int = 0, model_fingerprint: str | None = None,
                            device=None, dtype=None) -> DynamicCache:
    """Place document caches one after another from position `offset`, each one's keys rotated from the positions it
    was encoded at to its place in the composition (Block-Attention's position re-encoding, TurboRAG), and return them
    as a transformers `DynamicCache` of batch size 1, ready as the cache (`past_key_values`, `cache` from transformers
    5.24) of any Llama-family model whose `config` this is (a plain `LlamaForCausalLM` too: pass `attention_mask`
    covering prefix and new tokens and position ids continuing after the prefix).

    Args:
        document_caches ([`DocumentCacheOutput`] or `Sequence[DocumentCacheOutput]`): every document of each, in order.
        config (`LlamaConfig`): the model's config (layers, heads, rotary settings).
        offset (`int`, defaults to 0): position of the first document's first token.
        model_fingerprint (`str`, *optional*): when given, every cache must carry this fingerprint.
        device, dtype: of the composed cache (default: those of the stored tensors).

    Returns:
        `DynamicCache` whose layer `l` holds keys and values `(1, num_key_value_heads, total_length, head_dim)`,
        total_length the sum of the documents' lengths.

    Raises:
        ValueError: a config without rotary positions (e.g. GPT-2's), with rotary parameters per layer type (e.g.
            Gemma 3's), without `num_key_value_heads` (e.g. GPT-NeoX's), a rope type for which the rotation is
            not exact (see `EXACT_ROPE_TYPES`), a `partial_rotary_factor` other than 1 (e.g. StableLM's, whose keys
            are rotary over part of each head only; a Llama config's whose rotary frequencies ignore it passes) or
            layers without RoPE (`no_rope_layers`, e.g. SmolLM3's), each naming the field, a negative `offset` or one that places the documents past `max_position_embeddings`,
            caches of another shape or fingerprint, or no document. TypeError: a `config` that is not a config (e.g.
            the model itself), caches of another type.
    """
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"`offset` must be an int >= 0, got {offset!r}.")
    _check_rotary_config(config)
    inv_freq = _rope_inv_freq(config)
    documents = _as_documents(document_caches)
    limit = getattr(config, "max_position_embeddings", None)
    end = offset + sum(int(document.key_states.shape[3]) for document in documents)
    if limit is not None and end > limit:
        raise ValueError(f"`offset` {offset} and the {end - offset} document tokens reach position {end}, past the "
                         f"model's max_position_embeddings {limit}: place them from a smaller offset.")
    _check_rope_settings(documents, config, "document_caches")
    _check_fingerprints(documents, model_fingerprint, "document_caches")
    num_layers, _, layer = _composer(documents, config, inv_freq, offset, device, dtype)
    return _streamed_cache((layer(index) for index in range(num_layers)), config)


def block_attention_mask(block_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The training mask of Block-Attention (Ma, Wang & Lan 2025, §2.4) as a 4-D additive mask: a token of document block
    `b >= 0` attends causally to the tokens of block `b` only; a token of block `-1` (question, answer, instructions)
    attends causally to every token before it. Padding (`attention_mask == 0`) is never attended to; a padding query
    attends to itself only, so no row is empty.

    Args:
        block_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`): block of each token, `-1` for global
            tokens.
        attention_mask (`torch.Tensor` of shape `(batch_size, seq_length)`, *optional*): 1 for real tokens.
        dtype (`torch.dtype`, defaults to `torch.float32`): of the additive mask (the model's).

    Returns:
        `torch.Tensor` of shape `(batch_size, 1, seq_length, seq_length)`: 0 where attention is allowed,
        `torch.finfo(dtype).min` elsewhere (the form transformers' eager and sdpa attention take).

    Raises:
        TypeError: `block_ids` that are not an integer tensor, an `attention_mask` that is not a tensor (a list, a
            numpy array). ValueError: `block_ids` not 2-D, ids below -1 (a `RuntimeError` with the same message
            when run under `torch.compile`, where the check is a graph op), or an `attention_mask` of another shape.
    """
    _check_tensor_arguments({}, {"block_ids": block_ids, "attention_mask": attention_mask})
    if block_ids.is_floating_point() or block_ids.dtype == torch.bool:
        raise TypeError("`block_ids` must be an integer tensor (batch_size, seq_length).")
    if block_ids.ndim != 2:
        raise ValueError(f"`block_ids` must be (batch_size, seq_length), got shape {tuple(block_ids.shape)}.")
    if torch.compiler.is_compiling():  # a graph op, not a Python branch on a tensor value (which splits the graph)
        torch._assert_async((block_ids >= -1).all(), "`block_ids` must be >= -1 (-1: global tokens).")
    elif block_ids.numel() and int(block_ids.min()) < -1:
        raise ValueError(f"`block_ids` must be >= -1 (-1: global tokens), got {int(block_ids.min())}.")
    length = block_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=block_ids.device).tril()
    same_block = block_ids[:, :, None] == block_ids[:, None, :]
    is_global = (block_ids == -1)[:, :, None]
    allowed = causal[None] & (same_block | is_global)
    if attention_mask is not None:
        if attention_mask.shape != block_ids.shape:
            raise ValueError(f"`attention_mask` must have the shape of `block_ids` {tuple(block_ids.shape)}, got "
                             f"{tuple(attention_mask.shape)}.")
        allowed = allowed & attention_mask.to(block_ids.device).bool()[:, None, :]
    allowed = allowed | torch.eye(length, dtype=torch.bool, device=block_ids.device)[None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=block_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


# Copied from hf_readonce.models.recurrent.modeling_recurrence.IGNORE_INDEX
IGNORE_INDEX = -100


# Copied from hf_readonce.models.recurrent.modeling_recurrence._targets_of_real_tokens
def _targets_of_real_tokens(labels: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """`(batch, T)` targets of a padded batch: at each real column (`real`, bool `(batch, T)`) the label of the next
    real column of its row (a hole of padding skipped), `-100` after the row's last real token and at padding."""
    batch_size, length = labels.shape
    columns = torch.arange(length, device=labels.device).expand(batch_size, length)
    own = torch.where(real, columns, torch.full_like(columns, length))  # each real column's index, else past the end
    after = torch.cat([own[:, 1:], own.new_full((batch_size, 1), length)], dim=1)
    following = after.flip(1).cummin(dim=1).values.flip(1)  # the first real column after each column
    padded = torch.cat([labels, labels.new_full((batch_size, 1), IGNORE_INDEX)], dim=1)
    return padded.gather(1, following).masked_fill(~real, IGNORE_INDEX)


def _check_labels_shape(labels: torch.LongTensor | None, reference: torch.Tensor | None) -> None:
    """Raise a `ValueError` naming `labels` unless it is `None` or of shape `(batch_size, seq_length)`, that of
    `reference` (`input_ids` `(batch_size, seq_length)`, or `inputs_embeds` `(batch_size, seq_length, hidden_size)`;
    nothing is checked when both are `None`): another shape would be shifted and scored against the wrong positions,
    or fail inside the loss without saying which argument."""
    if labels is None or reference is None:
        return
    if tuple(labels.shape) != tuple(reference.shape[:2]):
        raise ValueError(f"`labels` must have the shape (batch_size, seq_length) of the input, "
                         f"{tuple(reference.shape[:2])}, got {tuple(labels.shape)}.")


def _labels_of_real_tokens(labels: torch.LongTensor | None, attention_mask) -> torch.LongTensor | None:
    """`labels` `(batch_size, seq_length)` rewritten so that Llama's loss (position t predicts `labels[:, t + 1]`)
    scores what each row scores alone: a real token predicts the next real token's label, a padding position
    nothing, so a left-padded row's first token is predicted by nothing and a label on padding counts nowhere.
    `attention_mask`: the 2-D padding mask of the input, `(batch_size, seq_length)` or with the cached columns
    first, `(batch_size, past_length + seq_length)`. `labels` unchanged when there is no padding (or no 2-D mask)."""
    if labels is None or not torch.is_tensor(attention_mask) or attention_mask.ndim != 2:
        return labels
    length = labels.shape[1]
    if attention_mask.shape[1] < length:
        return labels
    real = attention_mask[:, -length:].to(labels.device) != 0
    if bool(real.all()):
        return labels
    targets = _targets_of_real_tokens(labels.long(), real)  # column t: the target that position t predicts
    return torch.cat([targets.new_full((labels.shape[0], 1), IGNORE_INDEX), targets[:, :-1]], dim=1)


def _positions_from_mask(attention_mask: torch.Tensor) -> torch.LongTensor:
    """Position ids of real tokens counted from the first real one (0 at padding), as `generate` makes them."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def _block_attention_inputs(block_ids, input_ids, inputs_embeds, attention_mask, position_ids, past_key_values,
                            dtype: torch.dtype, config=None) -> tuple[torch.Tensor, torch.LongTensor]:
    """The attention mask and position ids of `forward(block_ids=...)` (the causal LM's and the bare model's): the
    4-D [`block_attention_mask`] in `dtype` and, unless given, positions counted from the first real token.

    Returns:
        `(attention_mask (batch_size, 1, seq_length, seq_length), position_ids (batch_size or 1, seq_length))`.

    Raises:
        ValueError: a non-empty `past_key_values`, `block_ids` of another shape than the input's `(batch_size,
            seq_length)`, an `attention_mask` that is not the 2-D padding mask, a `config` that runs flash attention
            (it reads a padding mask only, not the block mask: an implementation named `*flash*`, or one registered
            with flash attention's mask, as transformers registers the flash kernels of the Hub); as
            [`block_attention_mask`].
    """
    implementation = str(getattr(config, "_attn_implementation", None) or "")
    if "flash" in implementation or ALL_MASK_ATTENTION_FUNCTIONS.get(implementation) is flash_attention_mask:
        raise ValueError(f"`block_ids` needs the 4-D block mask, which flash attention cannot read (it takes a padding "
                         f"mask only); the model runs "
                         f"attn_implementation={implementation!r}: load it with attn_implementation=\"sdpa\" (or "
                         f"\"eager\", \"flex_attention\") to train with `block_ids`.")
    if past_key_values is not None and past_key_values.get_seq_length() > 0:
        raise ValueError("`block_ids` masks a whole sequence: it cannot be used with a non-empty "
                         "`past_key_values`.")
    reference = input_ids if input_ids is not None else inputs_embeds
    if reference is None or tuple(block_ids.shape) != tuple(reference.shape[:2]):
        shape = None if reference is None else tuple(reference.shape[:2])
        raise ValueError(f"`block_ids` must have the shape (batch_size, seq_length) of the input {shape}, "
                         f"got {tuple(getattr(block_ids, 'shape', ()))}.")
    if attention_mask is not None and attention_mask.ndim != 2:
        raise ValueError("with `block_ids`, `attention_mask` must be the 2-D padding mask.")
    if position_ids is None:
        position_ids = (_positions_from_mask(attention_mask) if attention_mask is not None
                        else torch.arange(block_ids.shape[1], device=block_ids.device)[None])
    return block_attention_mask(block_ids, attention_mask, dtype=dtype), position_ids


_COMPOSED_DOCUMENT_CACHE_DOC = r"""
    Document caches composed as the prefix of a batch (output of `BlockAttentionLlamaForCausalLM.compose_batch`).

    Args:
        past_key_values (`DynamicCache`): layer `l` holds keys and values
            `(batch_size, num_key_value_heads, prefix_length, head_dim)`, each row's documents left-padded to the
            longest row. Named `cache` under transformers >= 5.24, as in every ModelOutput there (where
            `past_key_values` still reads and sets it, deprecated).
        attention_mask (`torch.LongTensor` of shape `(batch_size, prefix_length)`): 1 at the documents' tokens.
    """

# Made with `make_dataclass` because its first field is named after the installed transformers (`CACHE_NAME`).
ComposedDocumentCache = make_dataclass(
    "ComposedDocumentCache",
    [(CACHE_NAME, DynamicCache | None, field(default=None)),
     ("attention_mask", torch.LongTensor | None, field(default=None))],
    bases=(ModelOutput,),
    namespace={"__doc__": _COMPOSED_DOCUMENT_CACHE_DOC, "__module__": __name__},
)


class BlockAttentionLlamaPreTrainedModel(LlamaPreTrainedModel):
    r"""Base class of the block-attention Llama models ([`BlockAttentionLlamaModel`],
    [`BlockAttentionLlamaForCausalLM`]): Llama's weight initialization and loading with [`BlockAttentionLlamaConfig`],
    and a `save_pretrained` that writes every Auto class of this file into `auto_map`."""

    config_class = BlockAttentionLlamaConfig

    # Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert.DeformerBertPreTrainedModel.save_pretrained
    def save_pretrained(self, save_directory, *args, **kwargs):
        r"""`PreTrainedModel.save_pretrained`, with every Auto class that a model class of this file is registered
        for (`register_for_auto_class`) in the saved config's `auto_map`, not only the saved class's own (all that
        transformers writes): the folder then loads through each of them (`AutoModel`, the task heads) with
        `trust_remote_code=True`, also where hf-readonce is not installed. Entries the config already has are
        kept; `auto_map` is not part of the representation fingerprint."""
        module = sys.modules[__name__]
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
                head = cls.__dict__.get("_auto_class")
                if head is not None:
                    auto_map.setdefault(head, f"{__name__.rsplit('.', 1)[-1]}.{cls.__name__}")
        if auto_map:
            self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)


class BlockAttentionLlamaModel(BlockAttentionLlamaPreTrainedModel, LlamaModel):
    r"""The bare block-attention Llama: `LlamaModel` with [`BlockAttentionLlamaConfig`], the `model` part of
    [`BlockAttentionLlamaForCausalLM`] (no LM head), and what `AutoModel` loads.

    `AutoModel.from_pretrained` of a block-attention checkpoint (`trust_remote_code=True` where hf-readonce is not
    installed) gives this model with the checkpoint's `model.*` weights (Llama's `base_model_prefix`), as `AutoModel`
    gives a `LlamaModel` for a `LlamaForCausalLM` checkpoint; its hidden states are those of the causal LM's `model`.
    Same parameters as `LlamaModel`, so a plain Llama checkpoint loads too. `forward` is Llama's plus the
    Block-Attention training mask (`block_ids`, as in [`BlockAttentionLlamaForCausalLM.forward`]). Document caches
    are encoded and composed by the causal LM; a composed cache ([`compose_document_caches`], which takes this
    model's config) reads here as `past_key_values`, with the attention mask over prefix and input.
    """

    # a checkpoint of the causal LM also holds its head
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        block_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""
        `LlamaModel.forward`, plus the Block-Attention training mask. A step of continuous batching (a
        `PagedAttentionCache` as `cache`, with the keywords of its packed batch) is `LlamaModel`'s.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): tokens.
            attention_mask (`torch.Tensor` of shape `(batch_size, past_length + seq_length)`, *optional*): 1 for real
                tokens.
            position_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): default: counted from
                the first real token with `block_ids`, else Llama's default.
            past_key_values (`Cache`, *optional*), inputs_embeds, use_cache: as in `LlamaModel`.
            block_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): the Block-Attention
                training mask ([`block_attention_mask`]), as in [`BlockAttentionLlamaForCausalLM.forward`].
            cache (`Cache`, *optional*): the name of `past_key_values` from transformers 5.24 on; either name is
                accepted with every supported transformers, not both.

            return_dict (`bool`, *optional*, keyword): return a tuple when False, as `LlamaModel`.

        Returns:
            [`~transformers.modeling_outputs.BaseModelOutputWithPast`]: `last_hidden_state` `(batch_size, seq_length,
            hidden_size)`, the hidden states under the causal LM's head.

        Raises:
            ValueError: `block_ids` of another shape than the input, with a non-empty cache or under flash
                attention (which cannot read the block mask: load with `attn_implementation="sdpa"`); both
                `past_key_values` and `cache`; a token id of `input_ids` outside `[0, vocab_size)`, naming it and the
                vocabulary size (checked when the embedding lookup fails); a keyword of `TransformersKwargs` nothing would read
                ([`_block_attention_unread_keywords`]): `seq_idx`, flash attention's packed-sequence arguments
                without flash attention (or continuous batching's paged cache) or with `block_ids`,
                `is_causal=False` with `block_ids`; `block_ids` with a paged cache (continuous batching, which
                packs the batch into one row).
            TypeError: `input_ids`, `attention_mask`, `position_ids`, `inputs_embeds` or `block_ids` that are not
                tensors (a list, a numpy array); floating `input_ids` or `block_ids`; a keyword argument it does not
                take (a misspelling such as `block_id=`), named with the argument it probably meant; a
                [`DocumentCacheOutput`] as `past_key_values` / `cache`.
        """
        _check_cache_arguments(past_key_values, cache)
        past_key_values = _either_cache(past_key_values, cache)
        paged = _check_paged_call(self, past_key_values, block_ids, None)
        _check_keyword_arguments(self, _without_paged_keywords(kwargs) if paged else kwargs)
        _check_tensor_arguments({"input_ids": input_ids},
                                {"attention_mask": attention_mask, "position_ids": position_ids,
                                 "inputs_embeds": inputs_embeds, "block_ids": block_ids})
        _refuse_unread_keywords(self, kwargs, _block_attention_unread_keywords(self.config, block_ids, None, paged))
        if block_ids is not None:
            attention_mask, position_ids = _block_attention_inputs(block_ids, input_ids, inputs_embeds, attention_mask,
                                                                   position_ids, past_key_values, self.dtype,
                                                                   self.config)
        try:
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                   inputs_embeds=inputs_embeds, use_cache=use_cache,
                                   **{_cache_name(paged): past_key_values}, **kwargs)
        except (IndexError, RuntimeError):  # torch's "index out of range": name the argument and the bound
            _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
            raise


class BlockAttentionLlamaForCausalLM(BlockAttentionLlamaPreTrainedModel, LlamaForCausalLM):
    r"""A Llama-family causal LM that reads each document once into a key/value cache and answers from composed
    caches: Block-Attention (Ma, Wang & Lan 2025) and TurboRAG (Lu et al. 2024) inside transformers' `generate()`.

    Same parameters and same outputs as `LlamaForCausalLM` (any Llama checkpoint loads, nothing is newly initialized);
    its `model` is [`BlockAttentionLlamaModel`] (a `LlamaModel` that also takes `block_ids`). It adds:

    - [`encode_documents`]: each document encoded alone at positions 0..n-1 -> [`DocumentCacheOutput`] with the
      model fingerprint;
    - [`compose_document_caches`]: caches placed one after another, keys re-rotated to their new positions -> a
      `DynamicCache`;
    - `forward(document_caches=...)` and `generate(input_ids=<question>, document_caches=...)`: the question read
      after the composed caches (with one document, exactly the plain causal LM reading document then question);
    - `forward(block_ids=...)`: the Block-Attention training mask (each document attends only to itself).
    """

    def __init__(self, config: BlockAttentionLlamaConfig):
        # `LlamaForCausalLM.__init__` with `BlockAttentionLlamaModel` as `model`, so that `model.model(block_ids=...)`
        # applies the block mask as the `AutoModel` of a saved checkpoint does (a `LlamaModel` swallowed `block_ids`
        # into its `**kwargs` and returned the causal hidden states). Built once, in the same order: the same modules,
        # parameter names and random initialization as `LlamaForCausalLM`, so fingerprints and checkpoints are unchanged.
        super(LlamaForCausalLM, self).__init__(config)
        self.model = BlockAttentionLlamaModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def representation_fingerprint(self) -> str:
        """[`document_cache_fingerprint`] of this model: the key under which its document caches are stored and
        checked (64 hex characters)."""
        return document_cache_fingerprint(self)

    @torch.no_grad()
    def encode_documents(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None, *,
                         prefix: DocumentCacheOutput | None = None,
                         with_fingerprint: bool = True) -> DocumentCacheOutput:
        r"""Encode each document (row) alone, at positions 0..n-1 counted from its first real token, and return its
        per-layer keys and values (runs without gradients; for training use `forward(block_ids=...)`).

        With `prefix`, each document is encoded after that shared prefix instead (the "shared prefix" of APE, Yang,
        Chen & Chen, ICLR 2025, arXiv 2502.05431, §4): its tokens sit at positions P..P+n-1 and attend to the
        prefix's P keys/values and to themselves, so no document's first tokens become the sequence's first tokens
        (an attention sink) as they do when encoded alone. The prefix's own keys/values are not returned: compose
        the prefix's cache first, then the documents (`document_caches=[prefix, documents]`); with one document this
        is exactly the full prompt `prefix + document`. Documents encoded alone and after a prefix are different
        caches; keep them apart (a store keyed by the prefix, or one prefix per store).

        Args:
            input_ids (`torch.LongTensor` of shape `(num_documents, length)`): document tokens, padded on either side.
            attention_mask (`torch.Tensor` of shape `(num_documents, length)`, *optional*): 1 for real tokens
                (default: all real).
            prefix ([`DocumentCacheOutput`], *optional*): the cache of one document without padding, encoded by this
                model at positions 0..P-1 (e.g. `encode_documents(prefix_ids)`: a system prompt or chat header).
            with_fingerprint (`bool`, defaults to `True`): record [`representation_fingerprint`] in the output.

        Returns:
            [`DocumentCacheOutput`]: `key_states` and `value_states` `(num_documents, num_layers,
            num_key_value_heads, length, head_dim)` in the model's dtype, `attention_mask` and `position_ids`
            `(num_documents, length)` (from P at the first real token with a prefix of P tokens, else from 0).

        Raises:
            TypeError: `input_ids` or `attention_mask` that are not tensors (a list, a numpy array), floating
                `input_ids`, a `prefix` that is not a `DocumentCacheOutput`. ValueError: `input_ids`
                not 2-D or empty, a mask of another shape, a document without real tokens, token ids outside the
                vocabulary, or a `prefix` of another model (fingerprint) or RoPE setting, of more than one document,
                with padding, or not at positions 0..P-1.
        """
        _check_tensor_arguments({"input_ids": input_ids}, {"attention_mask": attention_mask})
        if input_ids.ndim != 2 or input_ids.numel() == 0:
            raise ValueError(f"`input_ids` must be a non-empty (num_documents, length) tensor, got shape "
                             f"{tuple(input_ids.shape)}.")
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size:
            raise ValueError(f"`input_ids` holds token ids outside the vocabulary [0, {self.config.vocab_size}).")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"`attention_mask` must have the shape of `input_ids` {tuple(input_ids.shape)}, got "
                             f"{tuple(attention_mask.shape)}.")
        attention_mask = attention_mask.to(input_ids.device).long()
        empty = (attention_mask.sum(-1) == 0).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"document(s) {empty} of `input_ids` have no real token (attention_mask all 0).")
        position_ids = _positions_from_mask(attention_mask)
        cache = DynamicCache(config=self.config)
        start, read_mask = 0, attention_mask  # read_mask: the keys the documents attend to (the prefix's too)
        if prefix is not None:
            start = self._check_prefix(prefix)
            batch = input_ids.shape[0]
            for index in range(self.config.num_hidden_layers):  # the prefix, once per document row
                cache.update(prefix.key_states[:, index].to(self.device, self.dtype).expand(batch, -1, -1, -1),
                             prefix.value_states[:, index].to(self.device, self.dtype).expand(batch, -1, -1, -1),
                             index)
            position_ids = (position_ids + start).masked_fill(attention_mask == 0, 0)
            read_mask = torch.cat([attention_mask.new_ones(batch, start), attention_mask], dim=1)
        self.model(input_ids=input_ids, attention_mask=read_mask, position_ids=position_ids, use_cache=True,
                   **{CACHE_NAME: cache})
        keys = torch.stack([layer.keys[:, :, start:] for layer in cache.layers], dim=1)
        values = torch.stack([layer.values[:, :, start:] for layer in cache.layers], dim=1)
        return DocumentCacheOutput(key_states=keys, value_states=values, attention_mask=attention_mask,
                                   position_ids=position_ids,
                                   model_fingerprint=self.representation_fingerprint() if with_fingerprint else None,
                                   input_ids=input_ids.masked_fill(attention_mask == 0, 0),
                                   rope_setting=rope_setting(self.config))

    def _check_prefix(self, prefix) -> int:
        """The length P of a `prefix` for [`encode_documents`], after checking it (see there)."""
        if not isinstance(prefix, DocumentCacheOutput):
            raise TypeError(f"`prefix` must be a DocumentCacheOutput (from encode_documents), got "
                            f"{type(prefix).__name__}.")
        documents = _as_documents(prefix, "prefix")
        if len(documents) != 1:
            raise ValueError(f"`prefix` must hold one document, it holds {len(documents)}.")
        _check_rope_settings(documents, self.config, "prefix")
        _check_fingerprints(documents, self.representation_fingerprint(), "prefix")
        if prefix.attention_mask.shape[1] != documents[0].key_states.shape[3]:
            raise ValueError("`prefix` has padding; encode the prefix alone, without padding.")
        length = int(prefix.key_states.shape[3])
        if not torch.equal(prefix.position_ids[0].cpu(), torch.arange(length)):
            raise ValueError(f"`prefix` must be encoded at positions 0..{length - 1} (as `encode_documents` without "
                             "a prefix does).")
        return length

    def compose_document_caches(self, document_caches, *, offset: int = 0) -> DynamicCache:
        r"""Place document caches one after another from position `offset`, each one's keys rotated to its new
        positions (see the module-level [`compose_document_caches`]), after checking that this model made them.

        Args:
            document_caches ([`DocumentCacheOutput`] or `Sequence[DocumentCacheOutput]`): every document, in order.
            offset (`int`, defaults to 0): position of the first document token.

        Returns:
            `DynamicCache` of batch size 1 in this model's dtype and device, layer `l` holding keys and values
            `(1, num_key_value_heads, total_length, head_dim)`.

        Raises:
            ValueError: caches made by another model (fingerprint), of another shape, a rope type for which the
                rotation is not exact, a `partial_rotary_factor` other than 1 that the rotary frequencies honour (naming it), a negative
                offset. TypeError: caches of another type.
        """
        return compose_document_caches(document_caches, self.config, offset=offset,
                                       model_fingerprint=self.representation_fingerprint(), device=self.device,
                                       dtype=self.dtype)

    def compose_batch(self, document_caches, batch_size: int, *, repeat: int = 1,
                      recompute_ratio: float = 0.0, question_length=0) -> ComposedDocumentCache:
        r"""The composed prefix of a batch: the same documents for every row, or one list of documents per row.

        Args:
            document_caches: a [`DocumentCacheOutput`] or a sequence of them (the same prefix for every row), or a
                sequence of `batch_size` such sequences (row `i`'s documents, in order). Rows of different lengths
                are left-padded (masked, and position ids counted from the first real token stay right).
            batch_size (`int`): rows of the question batch.
            repeat (`int`, defaults to 1): copies of each row, adjacent (beams, returned sequences).
            recompute_ratio (`float`, defaults to 0): fraction of document tokens whose keys and values are
                recomputed per layer ([`selective_recompute`], CacheBlend §4); 0: the stored caches as they are,
                1: the full prompt's cache. The same documents for every row are composed (and recomputed) once for
                the batch; per-row lists are composed once each, also where two rows hold the same documents; the
                `repeat` copies of a row are copies.
            question_length (`int`, a sequence of `batch_size` ints or a `(batch_size,)` tensor, defaults to 0): the
                real (unpadded) tokens that will follow each row's prefix (its question), counted with it against
                `config.max_position_embeddings` before anything is composed.

        Returns:
            [`ComposedDocumentCache`] with `batch_size * repeat` rows.

        Raises:
            ValueError: a per-row list whose length is not `batch_size`, caches of another model, RoPE setting or
                shape, `recompute_ratio` outside [0, 1], caches without `input_ids` for a ratio above 0, a
                `batch_size` or `repeat` below 1, a row whose documents and question together run past
                `config.max_position_embeddings` (naming the three lengths).
            TypeError: a `batch_size` or `repeat` that is not an int.
        """
        for name, value in (("batch_size", batch_size), ("repeat", repeat)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}.")
            if value < 1:
                raise ValueError(f"`{name}` must be >= 1, got {value}.")
        ratio = check_recompute_ratio(recompute_ratio)
        fingerprint = self.representation_fingerprint()
        per_row = _per_row_documents(document_caches, batch_size)
        if per_row:
            rows = []
            for i, row in enumerate(document_caches):
                documents = _as_documents(row, f"document_caches[{i}]")
                _check_rope_settings(documents, self.config, f"document_caches[{i}]")
                _check_fingerprints(documents, fingerprint, f"document_caches[{i}]")
                rows.append(documents)
            if ratio > 0:
                for i, documents in enumerate(rows):
                    _document_ids(documents, f"document_caches[{i}]")
            arguments = [f"document_caches[{i}]" for i in range(len(rows))]
        else:
            documents = _as_documents(document_caches)
            _check_rope_settings(documents, self.config, "document_caches")
            _check_fingerprints(documents, fingerprint, "document_caches")
            rows, arguments = [documents], ["document_caches"]
        lengths = question_length.tolist() if torch.is_tensor(question_length) else question_length
        lengths = [lengths] * batch_size if isinstance(lengths, numbers.Real) else list(lengths)
        if len(lengths) != batch_size or any(isinstance(n, bool) or not isinstance(n, numbers.Real) or n != int(n)
                                             or n < 0 for n in lengths):
            raise ValueError(f"`question_length` must be a whole number >= 0 or one per row of the {batch_size}, "
                             f"got {question_length!r}.")
        lengths = [int(n) for n in lengths]
        if per_row:
            for documents, argument, length in zip(rows, arguments, lengths, strict=True):
                _check_context_length(documents, length, self.config, argument)
        else:  # the same documents for every row: the longest question decides
            _check_context_length(rows[0], max(lengths), self.config, arguments[0])
        if batch_size == 1 and repeat == 1:  # no padding: the composition itself, streamed into the cache
            layers = _row_layers(self, self.model, rows[0], ratio, arguments[0])
            cache = _streamed_cache(layers, self.config)
            mask = torch.ones(1, cache.get_seq_length(), dtype=torch.long, device=self.device)
            return ComposedDocumentCache(**{CACHE_NAME: cache}, attention_mask=mask)
        rows = [_compose_row(self, self.model, documents, ratio, argument)
                for documents, argument in zip(rows, arguments, strict=True)]
        if not per_row:
            rows = rows * batch_size
        rows = [(torch.stack(k), torch.stack(v)) for k, v in rows]
        width = max(k.shape[2] for k, _ in rows)
        shape = (batch_size, *rows[0][0].shape[:2], width, rows[0][0].shape[3])
        keys = torch.zeros(shape, dtype=self.dtype, device=self.device)
        values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        mask = torch.zeros(batch_size, width, dtype=torch.long, device=self.device)
        for i, (k, v) in enumerate(rows):  # left padding, as for the questions of a generate batch
            keys[i, :, :, width - k.shape[2]:] = k
            values[i, :, :, width - k.shape[2]:] = v
            mask[i, width - k.shape[2]:] = 1
        if repeat > 1:
            keys, values = keys.repeat_interleave(repeat, dim=0), values.repeat_interleave(repeat, dim=0)
            mask = mask.repeat_interleave(repeat, dim=0)
        return ComposedDocumentCache(**{CACHE_NAME: _dynamic_cache(keys, values, self.config)}, attention_mask=mask)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        block_ids: torch.LongTensor | None = None,
        document_caches=None,
        cache: Cache | None = None,
        recompute_ratio: float = 0.0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        r"""
        `LlamaForCausalLM.forward`, plus the block mask for training and composed document caches as the prefix. A
        step of continuous batching (a `PagedAttentionCache` as `cache`, with the keywords of its packed batch) is
        `LlamaForCausalLM`'s.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): tokens.
            attention_mask (`torch.Tensor` of shape `(batch_size, past_length + seq_length)`, *optional*): 1 for real
                tokens. With `document_caches`, the mask of `input_ids` only `(batch_size, seq_length)`: the prefix's
                is added here.
            position_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): default: counted from
                the first real token (with `block_ids` or `document_caches`), else Llama's default.
            past_key_values (`Cache`, *optional*), inputs_embeds, use_cache, logits_to_keep: as in
                `LlamaForCausalLM`.
            labels (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): as in `LlamaForCausalLM`
                (shifted inside: position t predicts `labels[:, t + 1]`; `-100` ignored), and with a 2-D
                `attention_mask` that has padding, a real token predicts the next real token's label and a padding
                position nothing, as for each row alone: a left-padded row's first token is predicted by nothing (by
                the prefix neither, with `document_caches`), and a label on padding counts nowhere. With `Trainer`,
                whose `num_items_in_batch` counts `labels[:, 1:] != -100` (transformers 5.24; 5.6 counts
                `labels != -100`, one more per row, as for `LlamaForCausalLM`) and is the loss's denominator, give
                padding the label -100 and pad on the right, so that its count is the targets scored here.
            block_ids (`torch.LongTensor` of shape `(batch_size, seq_length)`, *optional*): the Block-Attention
                training mask ([`block_attention_mask`]): tokens of document block `b >= 0` attend causally within
                block `b` only; tokens of block `-1` (question, answer) attend to everything before them. Positions
                are the composed ones (a block at offset p is read at positions p..), as a cache composed at p.
            document_caches ([`DocumentCacheOutput`], a sequence of them, or one sequence per row, *optional*): read
                `input_ids` after these documents' composed caches (see [`compose_batch`]).
            cache (`Cache`, *optional*): the name of `past_key_values` from transformers 5.24 on (what `generate`
                passes there); either name is accepted with every supported transformers, not both.
            recompute_ratio (`float`, defaults to 0): with `document_caches`, the fraction of document tokens
                recomputed per layer ([`selective_recompute`], CacheBlend §4); 0: the caches as stored.

            return_dict (`bool`, *optional*, keyword): return a tuple when False (`@can_return_tuple`).

        Returns:
            [`~transformers.modeling_outputs.CausalLMOutputWithPast`]: logits `(batch_size, seq_length, vocab_size)`
            of `input_ids` (and the loss with `labels`); its cache (`past_key_values`, `cache` from transformers 5.24)
            includes the composed prefix (none with `document_caches` and `use_cache=False`).

        Raises:
            ValueError: `labels` of another shape than `(batch_size, seq_length)` of the input; `block_ids` of
                another shape than `input_ids`, with a non-empty cache, under flash attention (which cannot read the
                block mask) or with `document_caches`; `document_caches` with `past_key_values`; caches of another
                model (fingerprint);
                a token id of `input_ids` outside `[0, vocab_size)` (as [`BlockAttentionLlamaModel.forward`]); an
                empty question with `document_caches`;
                both `past_key_values` and `cache`; a keyword of `TransformersKwargs` nothing would read
                ([`_block_attention_unread_keywords`]): `seq_idx`, flash attention's packed-sequence arguments
                without flash attention (or continuous batching's paged cache) or with `block_ids` or
                `document_caches` (a flattened batch would be read as one sequence), `is_causal=False` with
                `block_ids` or `document_caches`; `block_ids` or `document_caches` with a paged cache (continuous
                batching, which packs the batch into one row).
            TypeError: `input_ids`, `attention_mask`, `position_ids`, `inputs_embeds`, `labels` or `block_ids` that
                are not tensors (a list, a numpy array); floating `input_ids`, `labels` or `block_ids`; a keyword
                argument it does not take (a misspelling such as `document_cache=`), named with the argument it
                probably meant; a [`DocumentCacheOutput`] as `past_key_values` / `cache` (it goes in as
                `document_caches`).
        """
        _check_cache_arguments(past_key_values, cache)
        past_key_values = _either_cache(past_key_values, cache)
        paged = _check_paged_call(self, past_key_values, block_ids, document_caches)
        _check_keyword_arguments(self, _without_paged_keywords(kwargs) if paged else kwargs)
        _check_tensor_arguments({"input_ids": input_ids, "labels": labels},
                                {"attention_mask": attention_mask, "position_ids": position_ids,
                                 "inputs_embeds": inputs_embeds, "block_ids": block_ids})
        _refuse_unread_keywords(self, kwargs, _block_attention_unread_keywords(self.config, block_ids, document_caches,
                                                                               paged))
        if not paged:  # each row scores what it scores alone: no target of or from padding (see `labels`)
            _check_labels_shape(labels, input_ids if input_ids is not None else inputs_embeds)
            labels = _labels_of_real_tokens(labels, attention_mask)
        if block_ids is not None:
            if document_caches is not None:
                raise ValueError("Pass `block_ids` (training mask over full sequences) or `document_caches`, not both.")
            attention_mask, position_ids = _block_attention_inputs(block_ids, input_ids, inputs_embeds, attention_mask,
                                                                   position_ids, past_key_values, self.dtype,
                                                                   self.config)
        elif document_caches is None and recompute_ratio:
            raise ValueError("`recompute_ratio` applies to `document_caches`, none were given.")
        elif document_caches is not None:
            if past_key_values is not None:
                raise ValueError("Pass `document_caches` or `past_key_values`, not both.")
            reference = input_ids if input_ids is not None else inputs_embeds
            if reference is None:
                raise ValueError("`input_ids` (the question) are needed with `document_caches`.")
            batch_size, length = reference.shape[:2]
            if batch_size == 0 or length == 0:
                raise ValueError(f"`{'input_ids' if input_ids is not None else 'inputs_embeds'}` (the question) is "
                                 f"empty (shape {tuple(reference.shape)}): at least one token is read after "
                                 "`document_caches`.")
            if attention_mask is None:
                attention_mask = torch.ones(batch_size, length, dtype=torch.long, device=reference.device)
            if attention_mask.shape != (batch_size, length):
                raise ValueError(f"with `document_caches`, `attention_mask` must be the question's "
                                 f"{(batch_size, length)}, got {tuple(attention_mask.shape)}.")
            # within `generate(use_cache=False)`, `input_ids` are the question and the tokens generated so far: the
            # prompt was checked before the first step, and the new tokens may run past the positions (as Llama's)
            generating = _GENERATING_AFTER_PREFIX.get() is not None
            prefix = self.compose_batch(document_caches, batch_size, recompute_ratio=recompute_ratio,
                                        question_length=0 if generating else attention_mask.sum(dim=1))
            past_key_values = getattr(prefix, CACHE_NAME)
            attention_mask = torch.cat([prefix.attention_mask, attention_mask.to(prefix.attention_mask)], dim=1)
            if position_ids is None:
                position_ids = _positions_from_mask(attention_mask)[:, -length:]
        outputs = super().forward(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache, logits_to_keep=logits_to_keep,
            **{_cache_name(paged): past_key_values}, **kwargs, return_dict=True,
        )
        if document_caches is not None and use_cache is False:
            # the prefix was composed for this call only: no cache is returned, as Llama returns none without
            # `use_cache` (`generate(use_cache=False)` would pass it back beside `document_caches` at the next step)
            outputs = type(outputs)(**{key: value for key, value in outputs.items() if key != CACHE_NAME})
        return outputs

    def generate(self, input_ids: torch.LongTensor | None = None, generation_config: GenerationConfig | None = None,
                 *, document_caches=None, recompute_ratio: float = 0.0, **kwargs):
        r"""`GenerationMixin.generate`, with composed document caches as the prefix of `input_ids`.

        Without `document_caches` this is Llama's `generate`, continuous batching included
        (`cache_implementation="paged"`, and `generate_batch`): the same tokens as `LlamaForCausalLM`. With them, the
        caches are composed ([`compose_batch`], copied for beams and returned sequences), `attention_mask` is extended
        over the prefix, and position ids continue after it, so that with one document this is exactly the plain causal
        LM generating from document + question (greedy tokens identical, logits to float rounding), batched with left
        padding, and with beams. With `use_cache=False` nothing is carried from step to step: every step reads the
        question and the tokens so far after the prefix composed anew (`forward(document_caches=...)`), the same tokens
        as with the cache, the composition (and any recompute) repeated at every step. Documents and question are
        checked against `config.max_position_embeddings` before the first step; the new tokens may run past it, as
        `LlamaForCausalLM.generate`'s may, with transformers' "exceeded the model's predefined maximum length" reminder
        counting the documents, with or without the cache; without `max_new_tokens` or `max_length`, `generate`'s
        default (20 new tokens, within `max_position_embeddings`) counts them too, as in the full prompt.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, question_length)`): the questions (left-padded);
                `inputs`, `GenerationMixin.generate`'s name for it, is taken too.
            generation_config (`GenerationConfig`, *optional*): as in `GenerationMixin.generate`, whose second
                positional argument it is too (`generate(input_ids, GenerationConfig(...))`); the arguments after it
                are keyword-only.
            document_caches (keyword-only): as in [`compose_batch`].
            recompute_ratio (`float`, defaults to 0, keyword-only): fraction of document tokens whose keys and values
                are recomputed per layer before the question is read (CacheBlend, [`selective_recompute`]): 0 answers
                from the stored caches as they are (Block-Attention / TurboRAG composition), 1 is the full prompt
                (to float rounding); in between, the tokens whose values deviate most from a full prefill
                (measured at layer 1, narrowed layer by layer) are recomputed.
            **kwargs: as for `generate` (`attention_mask` is the questions' `(batch_size, question_length)`, inferred
                from `pad_token_id` when not given, as `generate` infers it; `max_length` counts question and new
                tokens, not the prefix: prefer `max_new_tokens`).

        Returns:
            As `generate`: the questions followed by the new tokens (the prefix is not repeated).

        Raises:
            ValueError: both `input_ids` and `inputs`; `document_caches` without `input_ids` (or with an empty
                question), with `past_key_values` (or `cache`) or `inputs_embeds`, a question mask of another shape;
                a token id outside `[0, vocab_size)` (naming it and the vocabulary size); caches of
                another model (fingerprint), RoPE setting or shape, `recompute_ratio` outside [0, 1] or without
                `document_caches`, documents and question longer together than `config.max_position_embeddings`, a
                `cache_implementation` with `document_caches` (with the cache; "paged" with or without it).
            TypeError: `input_ids`, `attention_mask`, `position_ids` or `inputs_embeds` that are not tensors (a list,
                a numpy array); floating `input_ids`; a [`DocumentCacheOutput`] as `past_key_values` / `cache` (it
                goes in as `document_caches`); a `generation_config` that is no `GenerationConfig` (document caches
                given second, by position: they go in as `document_caches=`).
        """
        if generation_config is not None:
            if not isinstance(generation_config, GenerationConfig):
                hint = (" (the second positional argument, as in `GenerationMixin.generate`): pass document caches "
                        "as `document_caches=` (keyword-only)" if _holds_document_caches(generation_config) else "")
                raise TypeError(f"`generation_config` must be a GenerationConfig, got "
                                f"{type(generation_config).__name__}{hint}.")
            kwargs["generation_config"] = generation_config
        if kwargs.get("inputs") is not None:
            if input_ids is not None:
                raise ValueError("Pass the prompt as `input_ids` or `inputs` (the same argument), not both.")
            input_ids = kwargs.pop("inputs")
        _check_tensor_arguments({"input_ids": input_ids}, {name: kwargs.get(name) for name in
                                                           ("attention_mask", "position_ids", "inputs_embeds")})
        _check_cache_arguments(kwargs.get("past_key_values"), kwargs.get("cache"))
        if document_caches is None:
            if recompute_ratio:
                raise ValueError("`recompute_ratio` applies to `document_caches`, none were given.")
            return super().generate(input_ids, **kwargs)
        if input_ids is None or not torch.is_tensor(input_ids) or input_ids.ndim != 2:
            raise ValueError("`input_ids` (batch_size, question_length) are needed with `document_caches`.")
        if input_ids.numel() == 0:
            raise ValueError(f"`input_ids` (the question) is empty (shape {tuple(input_ids.shape)}): at least one "
                             "token is read after `document_caches`.")
        for name in ("past_key_values", "cache", "inputs_embeds"):
            if kwargs.get(name) is not None:
                raise ValueError(f"Pass `document_caches` or `{name}`, not both.")
        # the settings `generate` will use: the keyword arguments over a given `generation_config` over the model's,
        # merged by `generate`'s own (private) step, as transformers' models that override `generate` read them (RAG,
        # MusicGen, Whisper); no public method does it (its signature and body compared in 5.6, 5.10, 5.15, 5.20 and
        # 5.24: the same)
        settings, _ = self._prepare_generation_config(
            kwargs.get("generation_config"), **{key: value for key, value in kwargs.items()
                                                if key not in ("generation_config", "attention_mask")})
        attention_mask = kwargs.pop("attention_mask", None)
        if attention_mask is None:
            # as `generate` infers it: from the padding, when the questions hold `pad_token_id` and it is no eos token
            pad, eos = settings.pad_token_id, settings.eos_token_id
            eos = [] if eos is None else torch.as_tensor(eos).flatten().tolist()
            infer = pad is not None and pad not in eos and bool((input_ids == pad).any())
            attention_mask = input_ids.ne(pad).long() if infer else torch.ones_like(input_ids)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"`attention_mask` must be the questions' {tuple(input_ids.shape)}, got "
                             f"{tuple(attention_mask.shape)}.")
        # the copies of each row that `generate` makes (beams, returned sequences)
        repeat = max(settings.num_beams or 1, settings.num_return_sequences or 1)
        question_lengths = attention_mask.sum(dim=1).tolist()  # left padding takes no position
        if kwargs.get("cache_implementation") == "paged":  # what `generate` switches to continuous batching on
            raise ValueError("`cache_implementation` ('paged') cannot be used with `document_caches`: `generate` "
                             "switches to continuous batching, which reads no document caches.")
        if settings.use_cache is False:
            # No cache between steps: each forward composes the prefix itself, for the rows `generate` expanded. The
            # positions continue after each row's prefix (`generate` would count them from the question's mask).
            if _per_row_documents(document_caches, input_ids.shape[0]):
                rows = [(_as_documents(row, f"document_caches[{i}]"), f"document_caches[{i}]", length)
                        for i, (row, length) in enumerate(zip(document_caches, question_lengths, strict=True))]
                document_caches = [row for row in document_caches for _ in range(repeat)]
            else:  # the same documents for every row: the longest question decides
                rows = [(_as_documents(document_caches), "document_caches", max(question_lengths))]
            for documents, argument, length in rows:  # the prompt, before the first step (as `compose_batch`)
                _check_context_length(documents, length, self.config, argument)
            prefix_lengths = [_prefix_length(documents) for documents, _, _ in rows]
            prefix_lengths *= input_ids.shape[0] // len(rows)  # one per row
            if kwargs.get("position_ids") is None:
                positions = _positions_from_mask(attention_mask) + torch.tensor(prefix_lengths)[:, None].to(input_ids)
                kwargs["position_ids"] = positions.masked_fill(attention_mask == 0, 0)
            longest = max(p + q for p, q in zip(prefix_lengths, question_lengths, strict=True))
            with _generating_after(longest - input_ids.shape[1]):
                return super().generate(input_ids, attention_mask=attention_mask, document_caches=document_caches,
                                        recompute_ratio=recompute_ratio, **kwargs)
        if settings.cache_implementation is not None:
            raise ValueError(f"`cache_implementation` ({settings.cache_implementation!r}) cannot be used with "
                             "`document_caches`: their composed prefix is the cache (a DynamicCache).")
        prefix = self.compose_batch(document_caches, input_ids.shape[0], repeat=repeat,
                                    recompute_ratio=recompute_ratio, question_length=question_lengths)
        # Only the question's ids go in; the mask covers prefix + question, so `generate` feeds every question
        # token (its ids are shorter than the mask) and counts positions from the mask.
        mask = torch.cat([prefix.attention_mask[::repeat], attention_mask.to(prefix.attention_mask)], dim=1)
        longest = int((prefix.attention_mask[::repeat].sum(dim=1).cpu() + torch.tensor(question_lengths)).max())
        with _generating_after(longest - input_ids.shape[1]):
            return super().generate(input_ids, attention_mask=mask, **{CACHE_NAME: getattr(prefix, CACHE_NAME)},
                                    **kwargs)

    # Copied from hf_readonce.models.readonce_bart.modeling_readonce_bart.ReadOnceBartForConditionalGeneration.prepare_inputs_for_generation
    def prepare_inputs_for_generation(self, *args, tokenizer=None, **kwargs):
        r"""`GenerationMixin.prepare_inputs_for_generation` (the `forward` inputs of one `generate()` step), without
        `tokenizer`: `generate(stop_strings=..., tokenizer=...)` reads the tokenizer for the stop strings, and its
        greedy, sampling and beam search hand it on with the model's inputs. `forward` reads no tokenizer and refuses
        one, as any keyword it does not read, so it is dropped here, where generation builds the inputs.

        Args:
            *args, **kwargs: those of `GenerationMixin.prepare_inputs_for_generation`.
            tokenizer (`PreTrainedTokenizerBase`, *optional*): the tokenizer given to `generate()`; not used here.

        Returns:
            `dict`: the keyword arguments of the step's `forward` call, as `GenerationMixin` builds them.
        """
        return super().prepare_inputs_for_generation(*args, **kwargs)

    def generate_batch(self, inputs, generation_config: GenerationConfig | None = None, *args, **kwargs):
        r"""`generate_batch` (continuous batching), Llama's: the prompts packed into one row per step, the same
        tokens as `LlamaForCausalLM`. It reads no document caches and no block mask (of its keyword arguments
        transformers reads `max_new_tokens` only, and would drop the others without a word).

        Args:
            inputs (`list[list[int]]`): the prompts, as in `generate_batch`.
            generation_config (`GenerationConfig`, *optional*): as in `generate_batch`.
            *args, **kwargs: as in `generate_batch`.

        Returns:
            As `generate_batch`: a dict of request ids to their outputs.

        Raises:
            ValueError: `document_caches`, `block_ids` or a non-zero `recompute_ratio` (also through
                `generate(cache_implementation="paged")`): the answer would be the prompt's alone. Use
                `generate(input_ids, document_caches=...)`.
        """
        for name in ("document_caches", "block_ids", "recompute_ratio"):
            value = kwargs.get(name)
            if value is not None and not (name == "recompute_ratio" and type(value) in (int, float) and value == 0):
                raise ValueError(f"{type(self).__name__}.generate_batch() got `{name}`, which continuous batching "
                                 "does not read (it would answer from the prompts alone): use "
                                 "`generate(input_ids, document_caches=...)` without a paged cache.")
        return super().generate_batch(inputs, generation_config, *args, **kwargs)

    def _prepare_generated_length(self, *args, **kwargs):
        """transformers' generated length; within `generate(document_caches=...)`, its default (20 new tokens, and no
        more than `max_position_embeddings` in all, when neither `max_new_tokens` nor `max_length` is set) counts the
        composed documents, as it counts them in the full prompt of `LlamaForCausalLM.generate` (the sequences
        `generate` sees hold the questions and new tokens only)."""
        generation_config = super()._prepare_generated_length(*args, **kwargs)
        extra = _GENERATING_AFTER_PREFIX.get()
        limit = getattr(self.config, "max_position_embeddings", None)
        if extra and limit is not None and kwargs.get("has_default_max_length") and \
                generation_config.max_new_tokens is None:
            generation_config.max_length = min(generation_config.max_length, limit - extra)
        return generation_config

    def _get_stopping_criteria(self, *args, **kwargs):
        """transformers' stopping criteria; within `generate(document_caches=...)`, the "exceeded the model's
        predefined maximum length" reminder of `MaxLengthCriteria` counts the composed documents too
        ([`_PositionsReminder`]: the sequences `generate` sees hold the questions and new tokens only), so that it
        comes when the new tokens run past `max_position_embeddings`, as it does for `LlamaForCausalLM.generate` on
        the full prompt."""
        criteria = super()._get_stopping_criteria(*args, **kwargs)
        extra = _GENERATING_AFTER_PREFIX.get()
        for criterion in list(criteria) if extra else ():
            limit = getattr(criterion, "max_position_embeddings", None)
            if limit is not None:
                criterion.max_position_embeddings = None
                criteria.append(_PositionsReminder(extra, limit, criterion.max_length))
        return criteria


class _PositionsReminder(StoppingCriteria):
    """Stops nothing: the reminder of transformers' `MaxLengthCriteria` (said once, when a generation runs past
    `max_position_embeddings`) for a generation after composed documents, which add `extra` positions to the sequences
    `generate` sees (questions and new tokens)."""

    def __init__(self, extra: int, max_position_embeddings: int, max_length: int):
        self.extra = extra
        self.max_position_embeddings = max_position_embeddings
        self.max_length = max_length

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        # as `MaxLengthCriteria`: once a step will read a position past the limit (not after the last token)
        if input_ids.shape[1] < self.max_length and self.extra + input_ids.shape[1] > self.max_position_embeddings:
            logger.warning_once(
                "This is a friendly reminder - the current text generation call has exceeded the model's predefined "
                f"maximum length ({self.max_position_embeddings}), the composed documents counted. Depending on the "
                "model, you may observe exceptions, performance degradation, or nothing at all."
            )
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@contextlib.contextmanager
def _generating_after(extra: int):
    """Hold `extra` in `_GENERATING_AFTER_PREFIX` for the block (a `generate` call from composed caches)."""
    token = _GENERATING_AFTER_PREFIX.set(extra)
    try:
        yield
    finally:
        _GENERATING_AFTER_PREFIX.reset(token)


BlockAttentionLlamaConfig.register_for_auto_class()
BlockAttentionLlamaModel.register_for_auto_class("AutoModel")
BlockAttentionLlamaForCausalLM.register_for_auto_class("AutoModelForCausalLM")
# Importing this file (from hf_readonce, or the copy saved next to a checkpoint and loaded with
# `trust_remote_code=True`) lists the class among transformers' causal LMs, `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`:
# `Trainer`'s label smoother (`label_smoothing_factor`) shifts the labels by one only for the class names listed
# there, and would otherwise score each position's logits against that position's own token. `setdefault` makes it
# idempotent (importing again, or another copy of this file, adds nothing) and keeps any name transformers lists for
# the type. The Auto classes pair these names only with the config types transformers ships
# (`CONFIG_MAPPING_NAMES`), so no `AutoModelForCausalLM` / `AutoConfig` lookup changes; the text-generation
# pipeline's supported-model check and `Trainer`'s model card read the class as a causal LM.
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(BlockAttentionLlamaConfig.model_type, BlockAttentionLlamaForCausalLM.__name__)

__all__ = [
    "BlockAttentionLlamaForCausalLM",
    "BlockAttentionLlamaModel",
    "BlockAttentionLlamaPreTrainedModel",
    "ComposedDocumentCache",
    "DocumentCacheOutput",
    "block_attention_mask",
    "compose_document_caches",
    "check_context_length",
    "check_recompute_ratio",
    "document_cache_fingerprint",
    "recompute_schedule",
    "rope_setting",
    "rotate_keys",
    "selective_recompute",
]
