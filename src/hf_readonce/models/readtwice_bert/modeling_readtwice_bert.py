# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch ReadTwice-BERT: read the segments of a long document in parallel, gather their memories into one table
per document, merge every token with that table, and read the segments again.

Implements Zemlyanskiy et al., 2021, "ReadTwice: Reading Very Large Documents with Memories": §2.1 (BERT₁,
ExtractMemories, Gather, MemoryAttention eqs. 1-4, BERT₂), App. A (entity-only sparse MemoryAttention), App. B
(coreference auxiliary loss), App. C.1 (QA head eqs. 5-6, OR-model loss with global normalisation eq. 7), App. C.4
(top-k sparse MemoryAttention) and §2.2 (MLM on BERT₂'s output with entity and span masking).

Inputs are a flat batch of segments: `input_ids` `(num_segments, segment_length)` plus `document_ids`
`(num_segments,)` (which document each segment belongs to) and `segment_positions` `(num_segments,)` (its index in
that document). Several documents share a batch; memories never cross documents.

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers, the
standard library and the configuration file next to it.
"""

import difflib
import functools
import hashlib
import inspect
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import MaskedLMOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import (
    BertEmbeddings,
    BertEncoder,
    BertLayer,
    BertOnlyMLMHead,
    BertPreTrainedModel,
    BertSelfAttention,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, logging
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .configuration_readtwice_bert import ReadTwiceBertConfig

logger = logging.get_logger(__name__)

# MemoryAttention scores are computed for chunks of rows so that one chunk's `(rows, length, memories)` score tensor
# holds at most this many elements; this bounds peak memory for documents of up to 128 segments (the paper's limit).
_MEMORY_SCORE_BUDGET = 1 << 25


# ------------------------------------------------------------------------------------------------ outputs
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


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._weights_fingerprint
def _weights_fingerprint(owner, tag: str, config_json: str, params, hash_dtypes: bool) -> str:
    """SHA-256 (64 hex characters) of `tag`, `config_json` (from [`_config_fingerprint`]) and each of `params` (the
    `(name, parameter)` pairs a representation depends on): its name, its dtype when `hash_dtypes`, and its values as
    float32; under peft, also the adapters' state ([`_peft_adapter_state`]: active, disabled, merged, scaling), so
    that switching or disabling an adapter is another fingerprint (a model without peft layers hashes as before).
    Cached on `owner._fingerprint_cache` and recomputed only when the config or the adapters' state changes or a
    parameter is replaced or modified in place (torch's version counters), so calling it per batch is cheap."""
    adapters = _peft_adapter_state(owner, params)
    state = (config_json, adapters, *((name, p.data_ptr(), p._version, p.dtype) for name, p in params))
    if owner._fingerprint_cache is not None and owner._fingerprint_cache[0] == state:
        return owner._fingerprint_cache[1]
    digest = hashlib.sha256(tag.encode() + config_json.encode())
    if adapters:
        digest.update(repr(adapters).encode())
    for name, p in params:
        digest.update(name.encode())
        if hash_dtypes:
            digest.update(str(p.dtype).encode())
        digest.update(p.detach().to("cpu", torch.float32).contiguous().numpy().data)  # no copy for fp32
    owner._fingerprint_cache = (state, digest.hexdigest())
    return owner._fingerprint_cache[1]


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_token_ids
def _check_token_ids(ids, bound: int, argument: str) -> None:
    """Raise a `ValueError` naming `argument` and the bound if a token id of `ids` is outside `[0, bound)` (called
    when the embedding lookup fails, so the normal path costs nothing)."""
    if torch.is_tensor(ids) and ids.numel() and not ids.is_floating_point():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise ValueError(f"`{argument}` holds token id {low if low < 0 else high}, outside the vocabulary "
                             f"[0, {bound}) of this model.") from None


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._output_switch
def _output_switch(name: str, value, config) -> bool:
    """Whether a call returns the per-layer outputs that the switch `name` (`"output_attentions"` or
    `"output_hidden_states"`) asks for: `value`, else `config.<name>`, as transformers' models read the switch.

    Raises:
        TypeError: a `value` that is neither `None` nor a `bool`, naming `name` (a string such as `"False"` would
            otherwise read as true; a list of hidden-state indices, which `capture_outputs` can select, is not taken).
    """
    if value is None:
        return bool(getattr(config, name, False))
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool (or None: `config.{name}`), got {type(value).__name__}.")
    return value


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


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._PACKED_SEQUENCES
# What no model of this project reads among the keywords [`_accepted_keywords`] lets through (`TransformersKwargs`,
# transformers' own plumbing), refused by [`_refuse_unread_keywords`] where a forward would swallow them: each name
# maps to `(neutral, why)`, `neutral` being the value that asks for what the model does anyway (`None`: none) and
# `why` the reason and what to use instead. Flash attention's packing arguments (what `DataCollatorWithFlattening`
# returns) and the router logits of mixture-of-experts models; a family adds its own.
_PACKED_SEQUENCES = (
    "it reads one sequence per row, so the packed sequences of a flattened batch (flash attention's "
    "`cu_seq_lens_q` / `cu_seq_lens_k` / `max_length_q` / `max_length_k`, `seq_idx`, as `DataCollatorWithFlattening` "
    "returns them) would be read as one sequence, each attending to the others. Pad the batch instead, one sequence "
    "per row (e.g. `DataCollatorWithPadding`)"
)

# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._UNREAD_KEYWORDS
_UNREAD_KEYWORDS = {
    **dict.fromkeys(("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"),
                    (None, _PACKED_SEQUENCES)),
    "output_router_logits": (False, "the model has no mixture-of-experts router, so there are no router logits to "
                                    "return; leave it out"),
}


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._DEBUG_IO
# transformers' I/O debugger, which its own forwards run when asked (`debug_io=True`); a forward of this project that
# calls none of them refuses it
_DEBUG_IO = ("transformers' I/O debugger does not run inside this forward: wrap the call in `with "
             "transformers.model_addition_debugger_context(model, debug_path):` instead")

# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._UNREAD_DEBUG_KEYWORDS
_UNREAD_DEBUG_KEYWORDS = {"debug_io": (False, _DEBUG_IO), "debug_io_dir": (None, _DEBUG_IO),
                          "prune_layers": (None, _DEBUG_IO)}


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


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._ENCODER_UNREAD_KEYWORDS
# What a BERT encoder of this project (DeFormer, ReadTwice; the bare models and their heads) leaves unread besides
# [`_UNREAD_KEYWORDS`], for [`_refuse_unread_keywords`].
_ENCODER_UNREAD_KEYWORDS = {
    **_UNREAD_KEYWORDS,
    **_UNREAD_DEBUG_KEYWORDS,
    "is_causal": (False, "the model reads its input bidirectionally, as BERT; `is_causal=True` would make only some "
                         "attention layers causal (under SDPA, those of a batch without padding)"),
    "logits_to_keep": (0, "the model scores every position (its span or token logits); slice the logits afterwards "
                          "instead"),
    "num_items_in_batch": (None, "its loss is not a sum to divide by a token count: the heads average over the "
                                 "batch, and `Trainer` scales that mean for gradient accumulation itself "
                                 "(`accepts_loss_kwargs = False`, so it passes no `num_items_in_batch`); a bare "
                                 "model computes no loss"),
}


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_no_cache_arguments
def _check_no_cache_arguments(model, kwargs: dict, reuse: str, method: str = "forward") -> None:
    """Refuse the cache arguments of an encoder-only model (DeFormer, ReadTwice: no KV cache): raise a `ValueError`
    naming `past_key_values` (or `cache`, its name from transformers 5.24 on) or `cache_position` when its value is not
    `None`. BERT's layers would fill a given cache with this call's keys or, were it filled, attend to another input's
    keys under a mask that does not cover them (a shape error or, without padding, other logits without a word), and
    an encoder returns no cache to continue. `use_cache` is a switch `BertModel` accepts and turns off unless
    `config.is_decoder` (`BertConfig` defaults it to `True`), so it is accepted (any value) and ignored here too, and
    `None` values pass (peft hands some on). All four are dropped from `kwargs`, so none reaches BERT's layers.
    `reuse` ends the message: what the model reuses instead of a cache."""
    kwargs.pop("use_cache", None)
    for name in ("past_key_values", "cache", "cache_position"):
        if kwargs.pop(name, None) is not None:
            raise ValueError(f"{type(model).__name__}.{method}() got `{name}`, but the model is an encoder and keeps "
                             f"no key/value cache: {reuse}.")


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_peft_token_type_ids
def _check_peft_token_type_ids(model, token_type_ids, reads_segments: bool) -> None:
    """Refuse a call that peft's question-answering wrapper stripped of its token types: raise a `ValueError` when
    `reads_segments` (the call reads text whose token types matter: a question+passage pair, a document segment),
    `token_type_ids` is `None` and `model` is wrapped by peft with `task_type="QUESTION_ANS"` (a `peft_config` of that
    task type, which peft's tuners set on the model they inject into).

    `PeftModelForQuestionAnswering.forward` (what `get_peft_model` and `PeftModel.from_pretrained` give for that task
    type) takes `token_type_ids` and `position_ids` as its own parameters and hands neither on to the model it wraps,
    so every token would be read as segment 0: other logits than the same inputs give the model itself, in training
    and at inference, without a word. A `PeftModel` without a task type passes every argument on, and transformers'
    own `model.add_adapter(...)` (`_hf_peft_config_loaded`) keeps the model's `forward`; neither is refused. A direct
    call of the wrapped model with `token_type_ids` (`peft_model.get_base_model()(...)`) passes too.

    The model does not see who calls it, only its `peft_config`: a direct call of the wrapped model without
    `token_type_ids` is refused as well (the message says to pass them, zeros for one segment), and peft's
    prompt-learning methods (prompt tuning, p-tuning), which set no `peft_config` on the model, are not seen: under
    `task_type="QUESTION_ANS"` they drop `token_type_ids` too, which a k > 0 DeFormer then asks for and ReadTwice
    refuses (it takes no `inputs_embeds`), but a plain-BERT DeFormer (k = 0) reads the pair as segment 0."""
    if token_type_ids is not None or not reads_segments or getattr(model, "_hf_peft_config_loaded", False):
        return
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not any(getattr(config, "task_type", None) == "QUESTION_ANS"
                                                for config in configs.values()):
        return
    raise ValueError(
        f"{type(model).__name__} got no `token_type_ids` and is wrapped by peft with task_type=\"QUESTION_ANS\", "
        "whose `PeftModelForQuestionAnswering.forward` does not pass `token_type_ids` (nor `position_ids`) on: the "
        "model would read every token as segment 0, a different answer. Wrap it without a task type, keeping the QA "
        "head trainable: `get_peft_model(model, LoraConfig(target_modules=[...], modules_to_save=[\"qa_outputs\"]))` "
        "(a `PeftModel`, which passes every argument on). Calling the wrapped model itself "
        "(`peft_model.get_base_model()(...)`), pass its `token_type_ids` (zeros for one segment)."
    )


# How a ReadTwice model reuses work, for [`_check_no_cache_arguments`]'s message.
_READTWICE_REUSE = "it reuses a first read through `document_states=` (from `encode_documents`)"
# What ReadTwice's forwards leave unread, for [`_refuse_unread_keywords`]: an encoder's (`is_causal`, packing, ...),
# and `position_ids`: BERT₁ reads every segment and every question at the positions 0.. of its own (§2.1), which is
# what the model was trained with, and BERT₂ reads its states with no position embedding.
_READTWICE_UNREAD_KEYWORDS = {
    **_ENCODER_UNREAD_KEYWORDS,
    "position_ids": (None, "ReadTwice reads every segment and every question at positions 0.. of its own (BERT's, "
                           "§2.1); the place of a segment in its document is `segment_positions=`"),
}
# `encode_documents` returns the first read and its memories, as a `ReadTwiceDocumentOutput`, and BERT₁'s attention
# weights and hidden states when asked (`output_attentions`, `output_hidden_states`, two of its parameters)
_READTWICE_ENCODE_UNREAD_KEYWORDS = {
    **_READTWICE_UNREAD_KEYWORDS,
    "return_dict": (True, "`encode_documents` always returns a `ReadTwiceDocumentOutput` (its fields are read by "
                          "name), never a tuple"),
}


@dataclass
class ReadTwiceDocumentOutput(ModelOutput):
    r"""
    What the first read of a batch of segments produces, as returned by [`ReadTwiceBertModel.encode_documents`]:
    BERT₁'s states (H¹ of §2.1) and the gathered memory table (M of §2.1). With `question_in_first_read=False` it
    depends only on the documents, so it can be stored once and passed to `forward(document_states=...)` for every
    question about them.

    Args:
        first_read_hidden_state (`torch.FloatTensor` of shape `(num_segments, segment_length, hidden_size)`):
            H¹ = BERT₁(x_i) for every segment.
        attention_mask (`torch.LongTensor` of shape `(num_segments, segment_length)`):
            1 for real tokens, 0 for padding (right padding).
        document_ids (`torch.LongTensor` of shape `(num_segments,)`): document of each segment.
        segment_positions (`torch.LongTensor` of shape `(num_segments,)`): index of each segment in its document.
        entity_token_mask (`torch.BoolTensor` of shape `(num_segments, segment_length)`, *optional*):
            `memory_type="entity"` only: True for tokens inside an entity mention (the tokens MemoryAttention is
            applied to, App. A).
        memory_values (`torch.FloatTensor` of shape `(num_memories, hidden_size)`):
            The flat memory table of the whole batch (every document's memories, in segment order).
        memory_document_ids (`torch.LongTensor` of shape `(num_memories,)`): document of each memory.
        memory_segment_positions (`torch.LongTensor` of shape `(num_memories,)`): m_s, segment position of each
            memory's source segment (eq. 2).
        memory_segment_index (`torch.LongTensor` of shape `(num_memories,)`): row (in this batch) of each memory's
            source segment.
        memory_mention_index (`torch.LongTensor` of shape `(num_memories,)`, *optional*):
            `memory_type="entity"` only: flat index `segment * max_mentions + slot` of each memory's mention in
            `entity_spans`, to align `entity_ids` with memories (coreference loss).
        memory_type (`str`): the `memory_type` the table was built with.
        model_fingerprint (`str`): SHA-256 of the weights and settings that produced these states (see
            [`ReadTwiceBertModel.representation_fingerprint`]).
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True` with
            `attn_implementation="eager"`): BERT₁'s self-attention weights (after the softmax), one `(num_segments,
            num_attention_heads, segment_length, segment_length)` tensor per BERT₁ layer (`num_hidden_layers` of
            them), as `BertModel` returns them for each segment read alone (§2.1: the first read is standard BERT on
            each segment, at positions 0.. of its own, with its token types): the first `num_hidden_layers` tensors
            of `forward`'s `attentions` when its rows are these segments. Padding keys get weight 0. Other attention
            implementations compute no weights (an empty tuple, after transformers' warning for SDPA, as for BERT).
            Not part of the first read: `forward(document_states=...)` and the representation stores read the fields
            above only, and the fingerprint does not depend on them. MemoryAttention's α (`memory_attentions` of
            [`ReadTwiceBertModelOutput`]) is not computed here: it is the attention of the rows that read the memory
            table (in the read-once setup, each (question, segment) pair), returned by `forward(...,
            output_attentions=True)`, also from stored `document_states`.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`): the
            embeddings and the output of every BERT₁ layer, `num_hidden_layers + 1` tensors of shape `(num_segments,
            segment_length, hidden_size)` (the last is `first_read_hidden_state`), as `BertModel` returns its
            `hidden_states` for each segment read alone: the first `num_hidden_layers + 1` tensors of `forward`'s
            `hidden_states` when its rows are these segments. Returned with any attention implementation. Not part
            of the first read, as `attentions`: H³ and BERT₂'s layers run in `forward`, which returns them.
    """

    first_read_hidden_state: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    document_ids: torch.LongTensor | None = None
    segment_positions: torch.LongTensor | None = None
    entity_token_mask: torch.BoolTensor | None = None
    memory_values: torch.FloatTensor | None = None
    memory_document_ids: torch.LongTensor | None = None
    memory_segment_positions: torch.LongTensor | None = None
    memory_segment_index: torch.LongTensor | None = None
    memory_mention_index: torch.LongTensor | None = None
    memory_type: str | None = None
    model_fingerprint: str | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ReadTwiceBertModelOutput(ModelOutput):
    r"""
    Output of [`ReadTwiceBertModel`]. A *row* is one segment (paper setup, `question_in_first_read=True`, or no
    question), or one (question, segment) pair (read-once setup with questions: the question's states followed by the
    segment's states, so `row_length = question_length + segment_length`).

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(num_rows, row_length, hidden_size)`):
            H⁴ = BERT₂(H³), the second read.
        merged_hidden_state (`torch.FloatTensor` of shape `(num_rows, row_length, hidden_size)`):
            H³ = LayerNorm(H¹ + H²), the MemoryAttention output (identity on non-mention tokens for `"entity"`).
        first_read_hidden_state (`torch.FloatTensor` of shape `(num_rows, row_length, hidden_size)`):
            H¹ of each row.
        attention_mask (`torch.LongTensor` of shape `(num_rows, row_length)`): 1 for real tokens.
        group_ids (`torch.LongTensor` of shape `(num_rows,)`):
            The unit the QA loss normalises over (eq. 7): the document id of each row, or the question index of each
            pair in the read-once setup.
        document_ids (`torch.LongTensor` of shape `(num_rows,)`): document of each row.
        segment_index (`torch.LongTensor` of shape `(num_rows,)`): the segment (row of `input_ids`) of each row.
        question_index (`torch.LongTensor` of shape `(num_rows,)`, *optional*): question of each pair (read-once
            setup with questions only).
        question_length (`int`): tokens of question states at the start of each row (0 without separate questions):
            the width of `question_input_ids`, i.e. the padded question length of this batch, so token `j` of a
            segment is column `question_length + j` of its rows. A Python int, which `Trainer.evaluate` / `predict`
            leave out (`keys_to_ignore_at_inference`) when they concatenate the batches: pad every batch's questions
            to one width (e.g. `config.max_question_length`) for their rows to line up, see
            [`ReadTwiceBertModel.forward`].
        memory_values (`torch.FloatTensor` of shape `(num_memories, hidden_size)`): the memory table used.
        memory_document_ids (`torch.LongTensor` of shape `(num_memories,)`).
        memory_mention_index (`torch.LongTensor` of shape `(num_memories,)`, *optional*): see
            [`ReadTwiceDocumentOutput`].
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`):
            Each `(num_rows, row_length, hidden_size)`: the embeddings and every BERT₁ layer (only when rows are
            segments and the first read ran in this call), then H³, then every BERT₂ layer. A first read stored by
            `encode_documents` returns BERT₁'s with `output_hidden_states=True` ([`ReadTwiceDocumentOutput`]).
        memory_attentions (`torch.FloatTensor` of shape `(num_rows, row_length, 1 + num_memories)`, *optional*):
            α of eq. 1 (column 0 is the no-op memory M₀), returned when `output_attentions=True`.
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True` with
            `attn_implementation="eager"`): the self-attention weights of BERT's layers, each `(num_rows,
            num_attention_heads, row_length, row_length)`, as `BertModel` returns them: every BERT₁ layer (only when
            rows are segments and the first read ran in this call, as for `hidden_states`), then every BERT₂ layer.
            A first read stored by `encode_documents` returns BERT₁'s with `output_attentions=True`
            ([`ReadTwiceDocumentOutput`]). Other attention implementations compute no weights (an empty tuple,
            after transformers' warning for SDPA, as for BERT); `memory_attentions` are returned with any
            implementation.
    """

    last_hidden_state: torch.FloatTensor | None = None
    merged_hidden_state: torch.FloatTensor | None = None
    first_read_hidden_state: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    group_ids: torch.LongTensor | None = None
    document_ids: torch.LongTensor | None = None
    segment_index: torch.LongTensor | None = None
    question_index: torch.LongTensor | None = None
    question_length: int | None = None
    memory_values: torch.FloatTensor | None = None
    memory_document_ids: torch.LongTensor | None = None
    memory_mention_index: torch.LongTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    memory_attentions: torch.FloatTensor | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ReadTwiceQuestionAnsweringModelOutput(ModelOutput):
    r"""
    Output of [`ReadTwiceBertForQuestionAnswering`] (transformers' `QuestionAnsweringModelOutput` plus the row
    bookkeeping needed to pick the best span across the segments of a document).

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `start_positions` and `end_positions` are
            given): OR-model loss with global normalisation (eq. 7), `(L_b + L_e) / 2`, averaged over the groups that
            have at least one gold position.
        start_logits, end_logits (`torch.FloatTensor` of shape `(num_rows, row_length)`): Z⁽ᵇ⁾ and Z⁽ᵉ⁾ (eqs. 5-6), in
            row coordinates: in the read-once setup the first `question_length` columns are the question's, and
            token `j` of the row's segment is column `question_length + j`. With questions padded to one width in
            every batch, what `Trainer.predict` concatenates lines up (see [`ReadTwiceBertModel.forward`]).
        attention_mask (`torch.LongTensor` of shape `(num_rows, row_length)`).
        group_ids, segment_index, question_index, question_length: see [`ReadTwiceBertModelOutput`].
        hidden_states (`tuple(torch.FloatTensor)`, *optional*): see [`ReadTwiceBertModelOutput`].
        attentions (`tuple(torch.FloatTensor)`, *optional*), memory_attentions (`torch.FloatTensor`, *optional*):
            returned when `output_attentions=True`, see [`ReadTwiceBertModelOutput`].
    """

    loss: torch.FloatTensor | None = None
    start_logits: torch.FloatTensor | None = None
    end_logits: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    group_ids: torch.LongTensor | None = None
    segment_index: torch.LongTensor | None = None
    question_index: torch.LongTensor | None = None
    question_length: int | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    memory_attentions: torch.FloatTensor | None = None


@dataclass
class ReadTwiceMaskedLMOutput(MaskedLMOutput):
    r"""
    Output of [`ReadTwiceBertForMaskedLM`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*): `mlm_loss + coref_loss_weight * coref_loss`.
        logits (`torch.FloatTensor` of shape `(num_segments, segment_length, vocab_size)`): MLM scores from BERT₂'s
            output (§2.2).
        mlm_loss (`torch.FloatTensor` of shape `()`, *optional*): cross-entropy over positions with `labels != -100`.
        coref_loss (`torch.FloatTensor` of shape `()`, *optional*): App. B logistic loss (only with `entity_ids`).
        hidden_states, attentions, memory_attentions: returned when `output_hidden_states=True` /
            `output_attentions=True`, see [`ReadTwiceBertModelOutput`].
    """

    mlm_loss: torch.FloatTensor | None = None
    coref_loss: torch.FloatTensor | None = None
    memory_attentions: torch.FloatTensor | None = None


# ------------------------------------------------------------------------------------------------ helpers
def _check_integer_tensors(**tensors) -> None:
    """Raise a `TypeError` naming the first given tensor that does not hold integers (token ids, document ids,
    positions and spans are indices: a float tensor would be truncated silently or fail inside an embedding)."""
    for name, tensor in tensors.items():
        if torch.is_tensor(tensor) and (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool):
            raise TypeError(f"`{name}` must be an integer tensor, got {tensor.dtype}.")


def default_segment_positions(document_ids: torch.LongTensor) -> torch.LongTensor:
    """Index of every segment inside its document, by order of appearance in the batch.

    Args:
        document_ids (`torch.LongTensor` of shape `(num_segments,)`).

    Returns:
        `torch.LongTensor` of shape `(num_segments,)`: for row r, the number of earlier rows with the same document.
    """
    same = document_ids[:, None] == document_ids[None, :]
    earlier = torch.ones_like(same).tril(diagonal=-1)
    return (same & earlier).sum(dim=1)


def _sdpa_or_eager_interface(config) -> Callable:
    # MemoryAttention needs an additive float bias (ω of eq. 2, top-k and document masks), which flash kernels do not
    # take: every other implementation falls back to SDPA for this one layer.
    implementation = config._attn_implementation
    if implementation not in ("eager", "sdpa"):
        implementation = "sdpa"
    return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, memory_eager_attention_forward)


def memory_eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float = 1.0,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention with transformers' interface (adapted from transformers' BERT `eager_attention_forward`).

    Args:
        query (`(batch, heads, q_len, dim)`), key and value (`(batch, heads, kv_len, dim)`).
        attention_mask (`(batch, heads or 1, q_len or 1, kv_len)`, *optional*): additive float mask.
        scaling (`float`, defaults to 1.0): eq. 1 uses the plain dot product h·M.

    Returns:
        `(attn_output (batch, q_len, heads, dim), attn_weights (batch, heads, q_len, kv_len))`.
    """
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


# ------------------------------------------------------------------------------------------------ layers
class ReadTwiceMemoryExtractor(nn.Module):
    r"""
    ExtractMemories + Gather (§2.1). From BERT₁'s states H¹ `(num_segments, segment_length, hidden_size)`:

    - `"cls"`: one memory per segment that holds a real token, `H¹[i, 0]`.
    - `"sts"`: one memory per consecutive `span_length`-token span (spans start at 0, L, 2L, ... and stop at the last
      real token): `W [H¹[i, first]; H¹[i, last]]` with a learned `W` of shape `(hidden_size, 2 hidden_size)`.
    - `"entity"`: one memory per mention span of `entity_spans`, encoded like STS (same kind of projection).

    Memories of all segments are concatenated into one flat table (Gather); padding rows/spans give no memory.
    Segments must be right-padded. STS spans cover the whole segment, so in the paper's QA layout (question inside
    every segment) the first span(s) include the question tokens.
    """

    def __init__(self, config: ReadTwiceBertConfig):
        super().__init__()
        self.memory_type = config.memory_type
        self.span_length = config.span_length
        if self.memory_type != "cls":
            self.projection = nn.Linear(2 * config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        entity_spans: torch.LongTensor | None = None,
    ) -> tuple[torch.Tensor, torch.LongTensor, torch.LongTensor | None]:
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(num_segments, segment_length, hidden_size)`): H¹.
            attention_mask (`torch.LongTensor` of shape `(num_segments, segment_length)`): right-padded mask.
            entity_spans (`torch.LongTensor` of shape `(num_segments, max_mentions, 2)`, *optional*):
                Inclusive `(start, end)` token indices of each mention in its segment; `(-1, -1)` pads. Required for
                `memory_type="entity"`.

        Returns:
            `(memory_values (num_memories, hidden_size), memory_segment_index (num_memories,),
            memory_mention_index (num_memories,) or None)`.

        Raises:
            ValueError: `memory_type="entity"` without `entity_spans`, or spans that are malformed, out of range or
                on padding.
        """
        num_segments, length, _ = hidden_states.shape
        device = hidden_states.device
        if self.memory_type == "cls":
            # a row of padding only (a batch padded to a number of segments) is no segment: it gives no memory
            segment_index = attention_mask.bool().any(dim=1).nonzero().squeeze(-1).to(device)
            return hidden_states[segment_index, 0], segment_index, None
        if self.memory_type == "sts":
            lengths = attention_mask.sum(dim=1)
            starts = torch.arange(0, length, self.span_length, device=device)
            valid = starts[None, :] < lengths[:, None]  # (S, K)
            ends = torch.minimum(starts[None, :] + self.span_length - 1, (lengths - 1).clamp(min=0)[:, None])
            starts = starts[None, :].expand_as(ends)
            mention_index = None
        else:
            spans = check_entity_spans(entity_spans, num_segments, length, attention_mask)
            starts, ends = spans[..., 0], spans[..., 1]
            valid = starts >= 0
            mention_index = valid.flatten().nonzero().squeeze(-1)
        segment_index, slot = valid.nonzero(as_tuple=True)
        first = hidden_states[segment_index, starts[segment_index, slot]]
        last = hidden_states[segment_index, ends[segment_index, slot]]
        values = self.projection(torch.cat([first, last], dim=-1))
        return values, segment_index, mention_index


def check_entity_spans(entity_spans, num_segments: int, segment_length: int,
                       attention_mask: torch.Tensor | None = None) -> torch.LongTensor:
    """Validate `entity_spans` (`(num_segments, max_mentions, 2)`, inclusive token indices, `-1` padding).

    Args:
        entity_spans: the spans to check. num_segments (`int`), segment_length (`int`): the segments' shape.
        attention_mask (`torch.Tensor` of shape `(num_segments, segment_length)`, *optional*): when given, a span
            must start and end on real tokens (a mention on padding would make a memory of padding states).

    Returns:
        The spans as a `torch.LongTensor`.

    Raises:
        ValueError: if `entity_spans` is missing (memory_type="entity" has no fallback), has the wrong shape, or a
            non-padding span has `start > end`, a negative index, or an index `>= segment_length`, or (with
            `attention_mask`) starts or ends on padding.
        TypeError: if `entity_spans` does not hold integers.
    """
    _check_integer_tensors(entity_spans=entity_spans)
    if entity_spans is None:
        raise ValueError(
            "memory_type='entity' needs `entity_spans` (num_segments, max_mentions, 2): the entity mentions of every "
            "segment, from an NER system or the caller (see hf_readonce.tasks.readtwice_qa.entity_spans_for_segment). "
            "There is no silent fallback; use memory_type='sts' or 'cls' without mentions."
        )
    spans = torch.as_tensor(entity_spans, dtype=torch.long)
    if spans.dim() != 3 or spans.shape[0] != num_segments or spans.shape[2] != 2:
        raise ValueError(
            f"`entity_spans` must have shape ({num_segments}, max_mentions, 2), got {tuple(spans.shape)}."
        )
    real = spans[..., 0] >= 0
    bad = real & ((spans[..., 1] < spans[..., 0]) | (spans[..., 1] >= segment_length))
    if bool(bad.any()):
        raise ValueError(
            f"`entity_spans` holds {int(bad.sum())} span(s) with end < start or end >= segment_length "
            f"({segment_length}); pad with (-1, -1)."
        )
    if attention_mask is not None:
        padding = ~attention_mask.to(spans.device).bool()
        on_padding = real & (padding.gather(1, spans[..., 0].clamp(min=0)) | padding.gather(1, spans[..., 1].clamp(min=0)))
        if bool(on_padding.any()):
            raise ValueError(
                f"`entity_spans` holds {int(on_padding.sum())} span(s) on padding (`attention_mask` 0 at their start "
                f"or end, in segment(s) {sorted(set(on_padding.nonzero()[:, 0].tolist()))}): a mention is made of "
                "real tokens; pad with (-1, -1)."
            )
    return spans


class ReadTwiceMemoryAttention(nn.Module):
    r"""
    MemoryAttention with its residual and LayerNorm (§2.1, eqs. 1-4; App. A; App. C.4). For token j of row i with
    first-read state h = H¹[i, j], over the memories m of the row's document:

        α_m = exp(hᵀM_m + ω[clip(i − m_s, −B, B)]) / (Σ_m' exp(hᵀM_m' + ω[clip(i − m_s', −B, B)]) + exp(hᵀM₀))   (1-3)
        h² = W_o Σ_m α_m M_m + b_o                                                                          (4)
        h³ = LayerNorm(h + h²)

    M₀ (`no_op_memory`) is a learned memory that only enters the denominator; ω (`relative_segment_scores`, `2B + 1`
    values, B = `max_relative_segment_distance`) is a learned score per clipped relative segment distance. `W_o`,
    `b_o` (`output_weight`, `output_bias`) are a linear map not in the paper, initialised to the identity (eq. 4
    exactly) or to zero (`memory_output_init`). With `memory_top_k`, only the k memories with the largest hᵀM_m
    compete (App. C.4). With `single_segment`, a row sees only its own segment's memories (SS ablation). With
    `memory_type="entity"` the layer is the identity (h³ = h) on tokens outside entity mentions (App. A).

    The dot products use no 1/√d scaling, as eq. 1 writes them.
    """

    def __init__(self, config: ReadTwiceBertConfig):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.max_distance = config.max_relative_segment_distance
        self.no_op_memory = nn.Parameter(torch.empty(hidden))
        self.relative_segment_scores = nn.Parameter(torch.empty(2 * self.max_distance + 1))
        self.output_weight = nn.Parameter(torch.empty(hidden, hidden))
        self.output_bias = nn.Parameter(torch.empty(hidden))
        self.LayerNorm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.attention_dropout = config.attention_probs_dropout_prob
        # read by transformers' attention interfaces
        self.is_causal = False
        self.num_key_value_groups = 1

    def forward(
        self,
        hidden_states: torch.Tensor,
        row_document_ids: torch.LongTensor,
        row_segment_positions: torch.LongTensor,
        row_segment_index: torch.LongTensor,
        memory_values: torch.Tensor,
        memory_document_ids: torch.LongTensor,
        memory_segment_positions: torch.LongTensor,
        memory_segment_index: torch.LongTensor,
        query_mask: torch.BoolTensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(num_rows, row_length, hidden_size)`): H¹ of each row.
            row_document_ids, row_segment_positions, row_segment_index (`torch.LongTensor` of shape `(num_rows,)`):
                document, position i in the document, and batch segment of each row.
            memory_values (`torch.FloatTensor` of shape `(num_memories, hidden_size)`): the flat table M.
            memory_document_ids, memory_segment_positions, memory_segment_index (`torch.LongTensor` of shape
                `(num_memories,)`): document, m_s and batch segment of each memory.
            query_mask (`torch.BoolTensor` of shape `(num_rows, row_length)`, *optional*): tokens the layer applies
                to; the others pass through unchanged (entity memories, App. A).
            output_attentions (`bool`): also return α.

        Returns:
            `(merged (num_rows, row_length, hidden_size), attentions (num_rows, row_length, 1 + num_memories) or
            None)`.
        """
        num_rows, length, hidden = hidden_states.shape
        num_memories = memory_values.shape[0]
        dtype = hidden_states.dtype
        floor = torch.finfo(dtype).min
        allowed = row_document_ids[:, None] == memory_document_ids[None, :]  # (R, M)
        if self.config.single_segment:
            allowed = allowed & (row_segment_index[:, None] == memory_segment_index[None, :])
        distance = (row_segment_positions[:, None] - memory_segment_positions[None, :]).clamp(
            -self.max_distance, self.max_distance
        )
        bias = self.relative_segment_scores.to(dtype)[distance + self.max_distance]  # (R, M), eq. 2
        memory_values = memory_values.to(dtype)
        keys = torch.cat([self.no_op_memory.to(dtype)[None], memory_values], dim=0)
        values = torch.cat([memory_values.new_zeros(1, hidden), memory_values], dim=0)  # M₀ has no value (eq. 4)
        top_k = self.config.memory_top_k
        sparse = top_k is not None and top_k < num_memories
        interface = _sdpa_or_eager_interface(self.config)
        if output_attentions:
            interface = memory_eager_attention_forward
        chunk = max(1, _MEMORY_SCORE_BUDGET // max(1, length * (num_memories + 1)))
        outputs, attentions = [], []
        for begin in range(0, num_rows, chunk):
            rows = slice(begin, begin + chunk)
            query = hidden_states[rows]
            rows_n = query.shape[0]
            if sparse:
                dots = torch.matmul(query, memory_values.t())  # (C, L, M): the top-k criterion of App. C.4
                # under autocast the matmul returns bf16/fp16 while `hidden_states` is fp32: mask in dots' own dtype
                dots = dots.masked_fill(~allowed[rows, None, :], torch.finfo(dots.dtype).min)
                keep = torch.zeros_like(dots, dtype=torch.bool)
                keep.scatter_(-1, dots.topk(top_k, dim=-1).indices, True)
                keep = keep & allowed[rows, None, :]
                memory_mask = torch.where(keep, bias[rows, None, :], floor)  # (C, L, M)
            else:
                memory_mask = torch.where(allowed[rows], bias[rows], floor)[:, None, :]  # (C, 1, M)
            no_op = memory_mask.new_zeros(memory_mask.shape[:-1] + (1,))
            mask = torch.cat([no_op, memory_mask], dim=-1)[:, None]  # (C, 1, L or 1, 1 + M)
            out, weights = interface(
                self,
                query[:, None],
                keys[None, None].expand(rows_n, 1, -1, -1),
                values[None, None].expand(rows_n, 1, -1, -1),
                mask,
                scaling=1.0,
                dropout=self.attention_dropout if self.training else 0.0,
            )
            outputs.append(out.reshape(rows_n, length, hidden))
            if output_attentions:
                attentions.append(weights[:, 0])
        memory_output = torch.cat(outputs, dim=0)
        memory_output = F.linear(memory_output, self.output_weight.to(dtype), self.output_bias.to(dtype))
        merged = self.LayerNorm(hidden_states + self.dropout(memory_output))
        if query_mask is not None:
            merged = torch.where(query_mask[..., None], merged, hidden_states)
        return merged, (torch.cat(attentions, dim=0) if output_attentions else None)


class ReadTwiceSecondReadEncoder(nn.Module):
    """BERT₂ (§2.1): `num_second_read_layers` BERT layers over the merged states H³. Layer j is initialised from
    BERT₁ layer `num_hidden_layers - num_second_read_layers + j` when loading a checkpoint without BERT₂ weights
    (see [`ReadTwiceBertPreTrainedModel.from_pretrained`])."""

    def __init__(self, config: ReadTwiceBertConfig):
        super().__init__()
        self.layer = nn.ModuleList(
            [BertLayer(config, layer_idx=config.num_hidden_layers + j) for j in range(config.num_second_read_layers)]
        )


# ------------------------------------------------------------------------------------------------ models
class ReadTwiceBertPreTrainedModel(BertPreTrainedModel):
    """Base class of the ReadTwice-BERT models (Zemlyanskiy et al., 2021, "ReadTwice: Reading Very Large Documents
    with Memories", §2.1: BERT₁, memories, BERT₂): BERT's weight initialisation and loading, ReadTwice's config, and
    the warm start of BERT₂ from BERT₁'s last layers when a plain BERT checkpoint is loaded (this library's, see
    `from_pretrained`: the paper pre-trains BERT₂ with BERT₁, §2.2)."""

    config_class = ReadTwiceBertConfig
    config: ReadTwiceBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    # `device_map="auto"` places whole BERT layers (BERT₁'s and BERT₂'s): a layer's attention, feed-forward and the
    # residuals across them on one device; and the whole MemoryAttention, whose own parameters (M₀, ω, W_o, b_o) meet
    # its LayerNorm's input in one residual
    _no_split_modules = ["BertLayer", "ReadTwiceMemoryAttention"]
    # `output_attentions=True`: the weights of BERT₁'s and BERT₂'s self-attention, recorded by transformers' output
    # hooks (`capture_outputs`) over the layers the output covers ([`ReadTwiceBertModel._read`], and
    # [`ReadTwiceBertModel._encode_first_read`] for `encode_documents`); hidden states are the model's own (H³ sits
    # between the two reads), not recorded by hooks.
    _can_record_outputs = {"attentions": BertSelfAttention}

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

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, ReadTwiceMemoryAttention):
            init.normal_(module.no_op_memory, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.relative_segment_scores)
            if self.config.memory_output_init == "identity":
                init.eye_(module.output_weight)
            else:
                init.zeros_(module.output_weight)
            init.zeros_(module.output_bias)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        r"""`PreTrainedModel.from_pretrained`, plus: when the checkpoint has no BERT₂ weights (a plain BERT
        checkpoint), BERT₂ layer j is copied from BERT₁ layer `num_hidden_layers - num_second_read_layers + j`
        (this library's warm start: the paper pre-trains BERT₂ with BERT₁ instead, §2.2 and §4.1; §2.1 motivates a
        small BERT₂ that "only needs to incorporate information from the memory"). ExtractMemories,
        MemoryAttention and task heads keep their fresh initialisation."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        missing = set(info.get("missing_keys", ()))
        base = model if isinstance(model, ReadTwiceBertModel) else getattr(model, cls.base_model_prefix)
        second_keys = [name for name, _ in base.second_read_encoder.named_parameters(prefix="second_read_encoder")]
        prefixed = [k if base is model else f"{cls.base_model_prefix}.{k}" for k in second_keys]
        if second_keys and all(k in missing for k in prefixed):
            base.init_second_read_from_first_read()
            logger.info("BERT₂ initialised from BERT₁'s last %d layers.", model.config.num_second_read_layers)
        return (model, info) if want_info else model


class ReadTwiceBertModel(ReadTwiceBertPreTrainedModel):
    r"""
    The ReadTwice encoder (§2.1, Figure 1): BERT₁ (`embeddings`, `encoder`, named as in `BertModel` so BERT
    checkpoints load unchanged), ExtractMemories (`memory_extractor`), MemoryAttention (`memory_attention`) and BERT₂
    (`second_read_encoder`). No pooler.

        H¹_i = BERT₁(x_i);  M = Gather([ExtractMemories(H¹_1), ..., ExtractMemories(H¹_N)]) per document;
        H³_i = LayerNorm(H¹_i + MemoryAttention(H¹_i, M));  H⁴_i = BERT₂(H³_i)

    Ways to run it:

    1. `forward(input_ids, attention_mask, token_type_ids, document_ids, segment_positions[, entity_spans])`: every
       row is a segment. In the paper's QA setup each segment is `[CLS] question [SEP] document part [SEP]`.
    2. `encode_documents(...)` once, then `forward(document_states=...)` (the first read is not recomputed).
    3. Read-once (`question_in_first_read=False`): segments are `[CLS] document part [SEP]` (document only); pass
       `question_input_ids` `(num_questions, question_length)` and `question_document_ids` `(num_questions,)`, with
       `input_ids` or stored `document_states`. BERT₁ reads each question alone; every (question, segment of its
       document) pair becomes a row `[question states; segment states]` for MemoryAttention and BERT₂.
    """

    # `get_input_embeddings` / `set_input_embeddings` (transformers' defaults) find `embeddings.word_embeddings`
    _input_embed_layer = "word_embeddings"

    def __init__(self, config: ReadTwiceBertConfig):
        super().__init__(config)
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.memory_extractor = ReadTwiceMemoryExtractor(config)
        self.memory_attention = ReadTwiceMemoryAttention(config)
        self.second_read_encoder = ReadTwiceSecondReadEncoder(config)
        self._fingerprint_cache = None
        self.post_init()

    @torch.no_grad()
    def init_second_read_from_first_read(self) -> None:
        """Copy BERT₁'s last `num_second_read_layers` layers into BERT₂ (layer j <- BERT₁ layer
        `num_hidden_layers - num_second_read_layers + j`)."""
        offset = self.config.num_hidden_layers - self.config.num_second_read_layers
        for j, layer in enumerate(self.second_read_encoder.layer):
            layer.load_state_dict(self.encoder.layer[offset + j].state_dict())

    # ------------------------------------------------------------------ fingerprint
    def representation_fingerprint(self) -> str:
        """SHA-256 hex digest of everything that determines [`ReadTwiceDocumentOutput`]: the weights of the
        embeddings, BERT₁ and ExtractMemories, every config field that can change them (`memory_type`,
        `span_length`, `hidden_act`, `layer_norm_eps`, `num_attention_heads`, ...; all of `config.to_dict()` except
        the metadata in `_FINGERPRINT_IGNORED_FIELDS`) and the transformers major version (the name every model
        family uses). Cached until the config changes or a parameter is replaced or modified in place.

        Returns:
            `str`: 64 hex characters.
        """
        params = []
        for prefix in ("embeddings", "encoder", "memory_extractor"):
            params += list(getattr(self, prefix).named_parameters(prefix=prefix))
        config_json = _config_fingerprint(self.config, ReadTwiceBertConfig)
        return _weights_fingerprint(self, "readtwice_bert|", config_json, params, hash_dtypes=True)

    def check_document_states(self, document_states: ReadTwiceDocumentOutput) -> None:
        """Raise unless `document_states` came from this model's first read.

        Raises:
            TypeError: if it is not a [`ReadTwiceDocumentOutput`].
            ValueError: if its memory type, hidden size or fingerprint differ from this model's.
        """
        if not isinstance(document_states, ReadTwiceDocumentOutput):
            raise TypeError(
                "`document_states` must be the ReadTwiceDocumentOutput returned by `encode_documents`, got "
                f"{type(document_states).__name__}."
            )
        states = document_states.first_read_hidden_state
        if not torch.is_tensor(states) or states.dim() != 3 or states.shape[-1] != self.config.hidden_size:
            raise ValueError(
                "`document_states.first_read_hidden_state` must be (num_segments, segment_length, "
                f"{self.config.hidden_size})."
            )
        if document_states.memory_type not in (None, self.config.memory_type):
            raise ValueError(
                f"`document_states` hold {document_states.memory_type!r} memories, this model uses "
                f"memory_type={self.config.memory_type!r}."
            )
        fingerprint = document_states.model_fingerprint
        if fingerprint is not None and fingerprint != self.representation_fingerprint():
            raise ValueError(
                f"`document_states` were computed by another model (fingerprint {fingerprint[:12]}...) than this one "
                f"({self.representation_fingerprint()[:12]}...): re-encode the documents with this model."
            )

    # ------------------------------------------------------------------ first read
    def _bert1(self, input_ids, attention_mask, token_type_ids, all_hidden_states=None, **kwargs):
        try:
            hidden = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        except (IndexError, RuntimeError):  # torch's "index out of range": name the argument and the bound
            _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
            _check_token_ids(token_type_ids, self.config.type_vocab_size, "token_type_ids")
            raise
        if all_hidden_states is not None:
            all_hidden_states.append(hidden)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        for layer in self.encoder.layer:
            hidden = layer(hidden, mask, **kwargs)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden)
        return hidden

    def encode_documents(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        segment_positions: torch.LongTensor | None = None,
        entity_spans: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ReadTwiceDocumentOutput:
        r"""
        The first read (BERT₁ over every segment independently) and the memory table (ExtractMemories + Gather),
        §2.1. With `question_in_first_read=False` the result depends only on the documents and can be stored.

        Args:
            input_ids (`torch.LongTensor` of shape `(num_segments, segment_length)`): right-padded segments.
            attention_mask (`torch.LongTensor` of shape `(num_segments, segment_length)`, *optional*): defaults to
                `input_ids != pad_token_id`.
            token_type_ids (`torch.LongTensor` of shape `(num_segments, segment_length)`, *optional*): defaults to 0.
            document_ids (`torch.LongTensor` of shape `(num_segments,)`, *optional*): defaults to one document.
            segment_positions (`torch.LongTensor` of shape `(num_segments,)`, *optional*): defaults to the order of
                appearance within each document ([`default_segment_positions`]).
            entity_spans (`torch.LongTensor` of shape `(num_segments, max_mentions, 2)`, *optional*): inclusive token
                spans of entity mentions, `(-1, -1)` padding; required for `memory_type="entity"`.
            output_attentions (`bool`, *optional*): also return BERT₁'s attention weights over each segment
                (`attentions` of [`ReadTwiceDocumentOutput`]), as `forward` returns those of the BERT layers it
                runs: with `attn_implementation="eager"`. Defaults to `config.output_attentions`. The first read,
                the memory table and the fingerprint do not depend on it. MemoryAttention does not run here, so
                there is no `memory_attentions`: `forward(document_states=..., output_attentions=True)` returns them.
            output_hidden_states (`bool`, *optional*): also return the embeddings and every BERT₁ layer's output
                over each segment (`hidden_states` of [`ReadTwiceDocumentOutput`]), as `forward` returns those of the
                first read when it runs it. Defaults to `config.output_hidden_states`. The first read, the memory
                table and the fingerprint do not depend on it.

        Returns:
            [`ReadTwiceDocumentOutput`], with `attentions` (`num_hidden_layers` tensors `(num_segments,
            num_attention_heads, segment_length, segment_length)`) and `hidden_states` (`num_hidden_layers + 1`
            tensors `(num_segments, segment_length, hidden_size)`) when asked.

        Raises:
            ValueError: on missing or mis-shaped inputs, or `memory_type="entity"` without `entity_spans`; a
                `past_key_values` / `cache` / `cache_position` that is not `None` (the model is an encoder and keeps
                no key/value cache; `use_cache` is accepted and ignored, as by `BertModel`; see
                [`_check_no_cache_arguments`]); a keyword of `TransformersKwargs` it does not read
                ([`_READTWICE_ENCODE_UNREAD_KEYWORDS`]: `position_ids`, flash attention's packed-sequence arguments,
                `is_causal=True`, `return_dict=False`, `num_items_in_batch`, `logits_to_keep` other than 0,
                `output_router_logits=True`, transformers' `debug_io` options).
            TypeError: ids, positions or spans that are not integer tensors; an `output_attentions` or
                `output_hidden_states` that is not a bool; a keyword argument it does not take (a misspelling such as
                `attention_masks=`), named with the argument it probably meant.
        """
        _check_keyword_arguments(self, kwargs, "encode_documents")
        _refuse_unread_keywords(self, kwargs, _READTWICE_ENCODE_UNREAD_KEYWORDS, "encode_documents")
        _check_no_cache_arguments(self, kwargs, _READTWICE_REUSE, "encode_documents")
        output_attentions = _output_switch("output_attentions", output_attentions, self.config)
        output_hidden_states = _output_switch("output_hidden_states", output_hidden_states, self.config)
        # a neutral value only (the check above): the output is a dataclass
        kwargs.pop("return_dict", None)
        input_ids, attention_mask, token_type_ids, document_ids, segment_positions = self._check_segments(
            input_ids, attention_mask, token_type_ids, document_ids, segment_positions
        )
        all_hidden_states = [] if output_hidden_states else None
        first_read = self._encode_first_read(input_ids, attention_mask, token_type_ids, all_hidden_states,
                                             output_attentions=output_attentions, return_dict=True, **kwargs)
        return self._gather(first_read.first_read_hidden_state, attention_mask, document_ids, segment_positions,
                            entity_spans, True, attentions=first_read.attentions,
                            hidden_states=tuple(all_hidden_states) if output_hidden_states else None)

    @capture_outputs
    def _encode_first_read(self, input_ids, attention_mask, token_type_ids, all_hidden_states,
                           **kwargs) -> ReadTwiceDocumentOutput:
        """BERT₁ over checked segments `(num_segments, segment_length)`, for [`encode_documents`]: a
        [`ReadTwiceDocumentOutput`] holding `first_read_hidden_state`, and `attentions` when
        `kwargs["output_attentions"]` is set (recorded by transformers' `capture_outputs` over the BERT₁ layers run
        here, as in [`_read`]; handed on to the layers too, as `BertModel` does, so that an attention implementation
        without weights says so). The embeddings and each layer's output are appended to `all_hidden_states` unless
        it is `None` ([`_bert1`])."""
        return ReadTwiceDocumentOutput(
            first_read_hidden_state=self._bert1(input_ids, attention_mask, token_type_ids, all_hidden_states, **kwargs)
        )

    def _gather(self, hidden, attention_mask, document_ids, segment_positions, entity_spans, with_fingerprint=False,
                attentions=None, hidden_states=None):
        values, segment_index, mention_index = self.memory_extractor(hidden, attention_mask, entity_spans)
        entity_token_mask = None
        if self.config.memory_type == "entity":
            spans = check_entity_spans(entity_spans, hidden.shape[0], hidden.shape[1], attention_mask).to(hidden.device)
            positions = torch.arange(hidden.shape[1], device=hidden.device)
            inside = (positions[None, None, :] >= spans[..., 0:1]) & (positions[None, None, :] <= spans[..., 1:2])
            entity_token_mask = (inside & (spans[..., 0:1] >= 0)).any(dim=1) & attention_mask.bool()
        return ReadTwiceDocumentOutput(
            first_read_hidden_state=hidden,
            attention_mask=attention_mask,
            document_ids=document_ids,
            segment_positions=segment_positions,
            entity_token_mask=entity_token_mask,
            memory_values=values,
            memory_document_ids=document_ids[segment_index],
            memory_segment_positions=segment_positions[segment_index],
            memory_segment_index=segment_index,
            memory_mention_index=mention_index,
            memory_type=self.config.memory_type,
            model_fingerprint=self.representation_fingerprint() if with_fingerprint else None,
            attentions=attentions,
            hidden_states=hidden_states,
        )

    def _check_segments(self, input_ids, attention_mask, token_type_ids, document_ids, segment_positions):
        if not torch.is_tensor(input_ids) or input_ids.dim() != 2 or input_ids.numel() == 0:
            raise ValueError("`input_ids` must be a non-empty (num_segments, segment_length) tensor.")
        _check_integer_tensors(input_ids=input_ids, document_ids=document_ids, segment_positions=segment_positions)
        num_segments, length = input_ids.shape
        if length > self.config.max_position_embeddings:
            raise ValueError(
                f"Segments of {length} tokens exceed max_position_embeddings={self.config.max_position_embeddings}."
            )
        if attention_mask is None:
            pad = self.config.pad_token_id
            attention_mask = (input_ids != pad).long() if pad is not None else torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if tuple(tensor.shape) != (num_segments, length):
                raise ValueError(f"`{name}` has shape {tuple(tensor.shape)}, expected {(num_segments, length)}.")
        if document_ids is None:
            document_ids = torch.zeros(num_segments, dtype=torch.long, device=input_ids.device)
        if segment_positions is None:
            segment_positions = default_segment_positions(document_ids)
        for name, tensor in (("document_ids", document_ids), ("segment_positions", segment_positions)):
            if tuple(tensor.shape) != (num_segments,):
                raise ValueError(f"`{name}` has shape {tuple(tensor.shape)}, expected ({num_segments},).")
        return input_ids, attention_mask, token_type_ids, document_ids.long(), segment_positions.long()

    # ------------------------------------------------------------------ forward
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        segment_positions: torch.LongTensor | None = None,
        entity_spans: torch.LongTensor | None = None,
        question_input_ids: torch.LongTensor | None = None,
        question_attention_mask: torch.LongTensor | None = None,
        question_token_type_ids: torch.LongTensor | None = None,
        question_document_ids: torch.LongTensor | None = None,
        document_states: ReadTwiceDocumentOutput | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ReadTwiceBertModelOutput:
        r"""
        Args:
            input_ids, attention_mask, token_type_ids (`torch.LongTensor` of shape `(num_segments, segment_length)`),
            document_ids, segment_positions (`torch.LongTensor` of shape `(num_segments,)`), entity_spans
                (`(num_segments, max_mentions, 2)`): the segments, as in [`encode_documents`]. Omit them when
                `document_states` is given.
            question_input_ids, question_attention_mask, question_token_type_ids (`torch.LongTensor` of shape
                `(num_questions, question_length)`, *optional*): read-once setup only (`question_in_first_read=False`):
                `[CLS] question [SEP]`, read alone by BERT₁, right-padded (padding is masked). Every (question,
                segment) row starts with the `question_length` question columns, padding included, so the segment's
                tokens start at column `question_length`, the output's `question_length`. `Trainer.evaluate` /
                `predict` concatenate the rows of all batches and drop that int: pad the questions of every batch to
                one width (the checkpoint's `config.max_question_length`, e.g. with
                `hf_readonce.tasks.readtwice_qa.ReadTwiceQACollator(question_length=...)`, or a tokenizer's
                `padding="max_length"`), and token `j` of a segment is column `question_length + j` of every row of
                the predictions (the default, padding to each batch's longest question, moves it from batch to batch).
                The real tokens' states do not depend on the padding.
            question_document_ids (`torch.LongTensor` of shape `(num_questions,)`, *optional*): the document id of
                each question; defaults to 0 for every question when all segments belong to one document.
            document_states ([`ReadTwiceDocumentOutput`], *optional*): a stored first read (skips BERT₁ on the
                segments).
            output_hidden_states (`bool`, *optional*), output_attentions (`bool`, *optional*): return the hidden
                states / the attention weights: MemoryAttention's α (`memory_attentions`) and, with
                `attn_implementation="eager"`, BERT's self-attention weights (`attentions`), see
                [`ReadTwiceBertModelOutput`]. Default: the config's.

        Returns:
            [`ReadTwiceBertModelOutput`].

        Raises:
            ValueError: if both or neither of `input_ids` and `document_states` are given, if questions are passed
                with `question_in_first_read=True`, if a question's document has no segment, on bad shapes, or for
                `memory_type="entity"` without `entity_spans`; a `past_key_values` / `cache` / `cache_position` that
                is not `None` (the model is an encoder and keeps no key/value cache; `use_cache` is accepted and
                ignored, as by `BertModel`; see [`_check_no_cache_arguments`]); a keyword of `TransformersKwargs` it
                does not read ([`_READTWICE_UNREAD_KEYWORDS`]): `position_ids` (every segment and question is read
                at positions 0.. of its own), flash attention's packed-sequence arguments (`cu_seq_lens_q`, ...,
                `seq_idx`), `is_causal=True`, `num_items_in_batch` (the heads' losses are batch means, which
                `Trainer` scales for gradient accumulation itself), `logits_to_keep` other than 0,
                `output_router_logits=True`, transformers' `debug_io` options.
            TypeError: if `document_states` is not a [`ReadTwiceDocumentOutput`]; ids, positions or spans that are
                not integer tensors; an `output_attentions` or `output_hidden_states` that is neither a bool nor
                `None` (a string `"False"` would read as true; a list of hidden-state indices, which transformers'
                `capture_outputs` can select, is not supported); a keyword argument it does not take (a misspelling
                such as `document_state=`), named with the argument it probably meant.
        """
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _READTWICE_UNREAD_KEYWORDS)
        _check_no_cache_arguments(self, kwargs, _READTWICE_REUSE)
        config = self.config
        # the argument, else the config (as `BertModel` reads them); anything but a bool or `None` is refused
        output_hidden_states = _output_switch("output_hidden_states", output_hidden_states, config)
        output_attentions = _output_switch("output_attentions", output_attentions, config)
        kwargs.pop("output_attentions", None)
        kwargs.pop("output_hidden_states", None)
        if (input_ids is None) == (document_states is None):
            raise ValueError("Pass exactly one of `input_ids` (segments) and `document_states` (a stored first read).")
        if question_input_ids is not None and config.question_in_first_read:
            raise ValueError(
                "`question_input_ids` are for the read-once setup (question_in_first_read=False); with "
                "question_in_first_read=True put the question in every segment."
            )
        segments = (input_ids, attention_mask, token_type_ids, document_ids, segment_positions, entity_spans)
        read = dict(output_hidden_states=output_hidden_states, output_attentions=output_attentions, return_dict=True)
        if question_input_ids is None:  # a row is a segment: BERT₁'s layers are part of the output if they run here
            return self._read(segments, document_states, **read, **kwargs)
        # read-once setup: a row is a (question, segment) pair; BERT₁ read the question and the segment apart, so its
        # layers are not part of the output (as for the hidden states)
        doc = self._first_read(segments, document_states, None, **kwargs)
        device = doc.first_read_hidden_state.device
        if not torch.is_tensor(question_input_ids) or question_input_ids.dim() != 2:
            raise ValueError("`question_input_ids` must be a (num_questions, question_length) tensor.")
        _check_integer_tensors(question_input_ids=question_input_ids, question_document_ids=question_document_ids)
        if question_attention_mask is None:
            question_attention_mask = torch.ones_like(question_input_ids)
        if question_token_type_ids is None:
            question_token_type_ids = torch.zeros_like(question_input_ids)
        for name, tensor in (("question_attention_mask", question_attention_mask),
                             ("question_token_type_ids", question_token_type_ids)):
            if tuple(tensor.shape) != tuple(question_input_ids.shape):
                raise ValueError(f"`{name}` has shape {tuple(tensor.shape)}, expected that of "
                                 f"`question_input_ids` {tuple(question_input_ids.shape)}.")
        if question_document_ids is None:
            if bool((doc.document_ids != doc.document_ids[0]).any()):
                raise ValueError("`question_document_ids` is required when the segments span several documents.")
            question_document_ids = doc.document_ids[:1].expand(question_input_ids.shape[0])
        if tuple(question_document_ids.shape) != (question_input_ids.shape[0],):
            raise ValueError("`question_document_ids` must have shape (num_questions,).")
        if question_input_ids.shape[1] > config.max_position_embeddings:
            raise ValueError(f"`question_input_ids` holds {question_input_ids.shape[1]} tokens per question, more "
                             f"than the model's max_position_embeddings {config.max_position_embeddings}: "
                             "truncate the questions (e.g. `max_question_length`).")
        questions = self._bert1(question_input_ids, question_attention_mask, question_token_type_ids, **kwargs)
        match = question_document_ids.to(device)[:, None] == doc.document_ids[None, :]
        orphan = ~match.any(dim=1)
        if bool(orphan.any()):
            raise ValueError(f"Question(s) {orphan.nonzero().flatten().tolist()} have no segment of their document.")
        question_index, segment_index = match.nonzero(as_tuple=True)
        question_length = question_input_ids.shape[1]
        rows = torch.cat([questions[question_index], doc.first_read_hidden_state[segment_index]], dim=1)
        row_mask = torch.cat(
            [question_attention_mask[question_index], doc.attention_mask[segment_index].to(question_attention_mask)],
            dim=1,
        )
        query_mask = None
        if doc.entity_token_mask is not None:
            query_mask = torch.cat(
                [torch.zeros_like(row_mask[:, :question_length], dtype=torch.bool),
                 doc.entity_token_mask[segment_index]], dim=1
            )
        pairs = (rows, row_mask, segment_index, question_index, query_mask, question_index, question_length)
        return self._read(None, doc, pairs, **read, **kwargs)

    def _first_read(self, segments, document_states, all_hidden, **kwargs) -> ReadTwiceDocumentOutput:
        """`document_states` checked, or, without them, the first read of `segments` (`(input_ids, attention_mask,
        token_type_ids, document_ids, segment_positions, entity_spans)`, checked: BERT₁ and the memory table, its
        layers' states appended to `all_hidden` when it is a list)."""
        if document_states is not None:
            self.check_document_states(document_states)
            return document_states
        input_ids, attention_mask, token_type_ids, document_ids, segment_positions, entity_spans = segments
        input_ids, attention_mask, token_type_ids, document_ids, segment_positions = self._check_segments(
            input_ids, attention_mask, token_type_ids, document_ids, segment_positions
        )
        hidden = self._bert1(input_ids, attention_mask, token_type_ids, all_hidden, **kwargs)
        return self._gather(hidden, attention_mask, document_ids, segment_positions, entity_spans)

    @capture_outputs
    def _read(self, segments, document_states, pairs=None, output_hidden_states=False, output_attentions=False,
              **kwargs) -> ReadTwiceBertModelOutput:
        """The part of `forward` whose layers make the output: the first read of `segments` when no
        `document_states` are given and the rows are segments (`pairs` is `None`), then MemoryAttention over the rows
        and BERT₂. `pairs`: the rows of the read-once setup, `(rows, row_mask, segment_index, group_ids, query_mask,
        question_index, question_length)`, built by `forward` from its question states. transformers'
        `capture_outputs` records the self-attention weights of exactly the BERT layers run here
        (`_can_record_outputs`) when `output_attentions` is set (`return_dict=True`, given by `forward`, keeps the
        output a dataclass whatever `config.return_dict` says)."""
        config = self.config
        kwargs["output_attentions"] = output_attentions  # to BERT's attention functions, as `BertModel` passes it
        all_hidden = [] if output_hidden_states and document_states is None and pairs is None else None
        doc = document_states  # checked by `forward` with `pairs`
        if pairs is None:
            doc = self._first_read(segments, document_states, all_hidden, **kwargs)
            num_segments = doc.first_read_hidden_state.shape[0]
            segment_index = torch.arange(num_segments, device=doc.first_read_hidden_state.device)
            pairs = (doc.first_read_hidden_state, doc.attention_mask, segment_index, doc.document_ids,
                     doc.entity_token_mask, None, 0)
        rows, row_mask, segment_index, group_ids, query_mask, question_index, question_length = pairs
        row_document_ids = doc.document_ids[segment_index]
        merged, memory_attentions = self.memory_attention(
            rows,
            row_document_ids,
            doc.segment_positions[segment_index],
            segment_index,
            doc.memory_values,
            doc.memory_document_ids,
            doc.memory_segment_positions,
            doc.memory_segment_index,
            query_mask=query_mask,
            output_attentions=output_attentions,
        )
        if output_hidden_states:
            all_hidden = (all_hidden or []) + [merged]
        hidden = merged
        mask = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=row_mask)
        for layer in self.second_read_encoder.layer:
            hidden = layer(hidden, mask, **kwargs)
            if output_hidden_states:
                all_hidden.append(hidden)
        return ReadTwiceBertModelOutput(
            last_hidden_state=hidden,
            merged_hidden_state=merged,
            first_read_hidden_state=rows,
            attention_mask=row_mask,
            group_ids=group_ids,
            document_ids=row_document_ids,
            segment_index=segment_index,
            question_index=question_index,
            question_length=question_length,
            memory_values=doc.memory_values,
            memory_document_ids=doc.memory_document_ids,
            memory_mention_index=doc.memory_mention_index,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            memory_attentions=memory_attentions,
        )


def readtwice_span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_positions: torch.LongTensor,
    end_positions: torch.LongTensor,
    group_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""
    OR-model loss with global normalisation (App. C.1, eq. 7; Clark & Gardner 2018): for each group g (a document's
    segments, or a question's pairs) and each boundary,

        L⁽ᵇ⁾_g = −log( Σ_{(i,j)∈B_g} exp Z⁽ᵇ⁾_{i,j} / Σ_{i∈g, j} exp Z⁽ᵇ⁾_{i,j} )

    where B_g holds every gold (row, token) start in the group (any segment that contains the answer, and every
    annotated occurrence); the same for ends. Padding tokens (`attention_mask == 0`) are left out of the denominator.
    Returns `mean_g (L⁽ᵇ⁾_g + L⁽ᵉ⁾_g) / 2` over the groups with at least one gold start and one gold end (a group
    without any, e.g. an answer cut off by segmentation, contributes nothing).

    Args:
        start_logits, end_logits (`torch.FloatTensor` of shape `(num_rows, row_length)`).
        start_positions, end_positions (`torch.LongTensor` of shape `(num_rows,)` or `(num_rows, max_answers)`):
            gold token indices in each row; negative values (or values `>= row_length`) mean "no gold here".
        group_ids (`torch.LongTensor` of shape `(num_rows,)`).
        attention_mask (`torch.Tensor` of shape `(num_rows, row_length)`, *optional*).

    Returns:
        Scalar `torch.Tensor` (0 connected to the graph when no group has gold positions).

    Raises:
        ValueError: if shapes disagree.
    """
    num_rows, length = start_logits.shape
    if end_logits.shape != start_logits.shape or group_ids.shape != (num_rows,):
        raise ValueError("start/end logits must be (num_rows, row_length) and group_ids (num_rows,).")
    floor = torch.finfo(start_logits.dtype).min
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(start_logits, dtype=torch.bool)
    groups, inverse = torch.unique(group_ids, return_inverse=True)
    member = inverse[None, :] == torch.arange(len(groups), device=group_ids.device)[:, None]  # (G, R)

    def boundary(logits, positions):
        if positions.dim() == 1:
            positions = positions[:, None]
        if positions.dim() != 2 or positions.shape[0] != num_rows:
            raise ValueError(f"span positions must be (num_rows,) or (num_rows, max_answers) with num_rows = "
                             f"{num_rows}, got shape {tuple(positions.shape)}.")
        positions = positions.to(logits.device).long()
        ok = (positions >= 0) & (positions < length)
        gold = torch.zeros_like(valid)
        rows = torch.arange(num_rows, device=logits.device)[:, None].expand_as(positions)
        gold[rows[ok], positions[ok]] = True
        gold = gold & valid
        logits = logits.float()
        per_group_all = torch.where(member[:, :, None] & valid[None], logits[None], floor).flatten(1)
        per_group_gold = torch.where(member[:, :, None] & gold[None], logits[None], floor).flatten(1)
        has_gold = (member[:, :, None] & gold[None]).flatten(1).any(dim=1)
        return torch.logsumexp(per_group_all, dim=1) - torch.logsumexp(per_group_gold, dim=1), has_gold

    start_loss, start_ok = boundary(start_logits, start_positions)
    end_loss, end_ok = boundary(end_logits, end_positions)
    ok = start_ok & end_ok
    if not bool(ok.any()):
        return (start_logits.sum() + end_logits.sum()) * 0.0
    return ((start_loss[ok] + end_loss[ok]) / 2).mean()


class ReadTwiceBertForQuestionAnswering(ReadTwiceBertPreTrainedModel):
    r"""
    ReadTwice with the extractive QA head of App. C.1: `Z⁽ᵇ⁾ = W_b · FFN(H⁴)`, `Z⁽ᵉ⁾ = W_e · FFN(H⁴)` (eqs. 5-6, FFN =
    `qa_ffn` + the config's activation, shared; `qa_outputs` holds `[W_b; W_e]`), trained with the OR-model loss with
    global normalisation over all segments of a document (eq. 7, [`readtwice_span_loss`]). At inference the best
    span is picked across all segments of a document (see `hf_readonce.tasks.readtwice_qa.postprocess_readtwice_qa`).
    """

    # The loss is a mean over documents: Trainer must scale it for gradient accumulation itself.
    accepts_loss_kwargs = False

    def __init__(self, config: ReadTwiceBertConfig):
        super().__init__(config)
        self.bert = ReadTwiceBertModel(config)
        self.qa_ffn = nn.Linear(config.hidden_size, config.hidden_size)
        self.qa_activation = ACT2FN[config.hidden_act]
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def encode_documents(self, *args, **kwargs) -> ReadTwiceDocumentOutput:
        """The stored first read (§2.1): `(num_segments, segment_length)` segments -> [`ReadTwiceDocumentOutput`];
        the arguments, shapes and errors of [`ReadTwiceBertModel.encode_documents`]. With `output_attentions=True`
        (default: `config.output_attentions`; `attn_implementation="eager"`) also BERT₁'s attention weights, one
        `(num_segments, num_attention_heads, segment_length, segment_length)` tensor per layer; with
        `output_hidden_states=True` (default: `config.output_hidden_states`) the embeddings and every BERT₁ layer's
        output, each `(num_segments, segment_length, hidden_size)`.

        Raises:
            ValueError / TypeError: as [`ReadTwiceBertModel.encode_documents`] (missing or mis-shaped inputs,
                `memory_type="entity"` without `entity_spans`, indices that are not integers, an `output_attentions`
                or `output_hidden_states` that is not a bool, a keyword argument it does not take, a cache argument
                that is not `None`, a keyword of `TransformersKwargs` it does not read).
        """
        _check_keyword_arguments(self, kwargs, "encode_documents", (ReadTwiceBertModel.encode_documents,))
        _refuse_unread_keywords(self, kwargs, _READTWICE_ENCODE_UNREAD_KEYWORDS, "encode_documents")
        _check_no_cache_arguments(self, kwargs, _READTWICE_REUSE, "encode_documents")
        return self.bert.encode_documents(*args, **kwargs)

    def representation_fingerprint(self) -> str:
        """See [`ReadTwiceBertModel.representation_fingerprint`]."""
        return self.bert.representation_fingerprint()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        segment_positions: torch.LongTensor | None = None,
        entity_spans: torch.LongTensor | None = None,
        question_input_ids: torch.LongTensor | None = None,
        question_attention_mask: torch.LongTensor | None = None,
        question_token_type_ids: torch.LongTensor | None = None,
        question_document_ids: torch.LongTensor | None = None,
        document_states: ReadTwiceDocumentOutput | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ReadTwiceQuestionAnsweringModelOutput:
        r"""
        Args:
            input_ids ... document_states: see [`ReadTwiceBertModel.forward`]. With `question_in_first_read=False`
                questions are required.
            start_positions, end_positions (`torch.LongTensor` of shape `(num_rows,)` or `(num_rows, max_answers)`,
                *optional*): gold token indices per row (row coordinates, so in the read-once setup offset by
                `question_length`), `-1` where the row holds no answer; see [`readtwice_span_loss`].

        Returns:
            [`ReadTwiceQuestionAnsweringModelOutput`]; logits `(num_rows, row_length)` in row coordinates (a
            segment's token `j` at column `question_length + j`; for `Trainer.predict` over batches, pad the questions
            to one width, see `question_input_ids` in [`ReadTwiceBertModel.forward`]).

        Raises:
            ValueError: as [`ReadTwiceBertModel.forward`] (`position_ids`, `num_items_in_batch` and the other
                keywords it does not read included); no questions with `question_in_first_read=False`; one of
                `start_positions` / `end_positions` without the other; segments without `token_type_ids` while the
                model is wrapped by peft with `task_type="QUESTION_ANS"`, whose wrapper drops them (see
                [`_check_peft_token_type_ids`]).
            TypeError: span positions that are not integers; as [`ReadTwiceBertModel.forward`], a keyword argument
                it does not take (e.g. `document_state=`) included.
        """
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _READTWICE_UNREAD_KEYWORDS)
        _check_no_cache_arguments(self, kwargs, _READTWICE_REUSE)
        _check_peft_token_type_ids(self, token_type_ids, reads_segments=input_ids is not None)
        if not self.config.question_in_first_read and question_input_ids is None:
            raise ValueError("question_in_first_read=False: pass the questions as `question_input_ids`.")
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            document_ids=document_ids,
            segment_positions=segment_positions,
            entity_spans=entity_spans,
            question_input_ids=question_input_ids,
            question_attention_mask=question_attention_mask,
            question_token_type_ids=question_token_type_ids,
            question_document_ids=question_document_ids,
            document_states=document_states,
            output_hidden_states=output_hidden_states,
            return_dict=True,  # the output's fields, whatever `config.return_dict` says
            **kwargs,
        )
        logits = self.qa_outputs(self.qa_activation(self.qa_ffn(outputs.last_hidden_state)))
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        loss = None
        if (start_positions is None) != (end_positions is None):
            given = "start_positions" if end_positions is None else "end_positions"
            raise ValueError(f"`{given}` was given without its pair: pass both `start_positions` and `end_positions` "
                             "to get a loss, or neither.")
        _check_integer_tensors(start_positions=start_positions, end_positions=end_positions)
        if start_positions is not None and end_positions is not None:
            loss = readtwice_span_loss(
                start_logits, end_logits, start_positions, end_positions, outputs.group_ids, outputs.attention_mask
            )
        return ReadTwiceQuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            attention_mask=outputs.attention_mask,
            group_ids=outputs.group_ids,
            segment_index=outputs.segment_index,
            question_index=outputs.question_index,
            question_length=outputs.question_length,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            memory_attentions=outputs.memory_attentions,
        )


class ReadTwiceBertForMaskedLM(ReadTwiceBertPreTrainedModel):
    r"""
    ReadTwice pretraining (§2.2, App. B): masked-language-model scores from BERT₂'s output (BERT's MLM head `cls`,
    tied to the word embeddings), trained on inputs masked by [`readtwice_mlm_masking`] (whole entity mentions at 25%,
    contiguous spans at 15% elsewhere), plus, for `memory_type="entity"` with `entity_ids`, the coreference auxiliary
    loss of App. B: for memories m ≠ m' of the same document whose mentions are linked (`entity_ids >= 0`),
    `y = σ(M_mᵀ M_m' + b₀)` with target 1 iff both link to the same entity, averaged logistic loss, weighted by
    `coref_loss_weight`. Without a coreference pair (another memory type, no `entity_ids`, or no two linked mentions
    of one document) b₀ (`coref_bias`) enters the loss with weight 0: its gradient is 0 rather than missing, so that
    every parameter has a gradient on every process and `DistributedDataParallel` trains with Trainer's defaults
    (`find_unused_parameters=False` under gradient checkpointing).
    """

    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }
    # The loss is a mean over the masked tokens plus the coreference loss, a mean over memory pairs: Trainer must scale
    # it for gradient accumulation itself (with `**kwargs` and no such flag it passed `num_items_in_batch`, which the
    # loss did not read, and left the sum over accumulated batches unscaled).
    accepts_loss_kwargs = False
    # `device_map="auto"` keeps the MLM head whole: its decoder's bias is the head's own `bias` (tied), which
    # transformers' tied-parameter sizing (`infer_auto_device_map`) cannot place once the head is split
    _no_split_modules = ["BertLayer", "ReadTwiceMemoryAttention", "BertLMPredictionHead"]

    def __init__(self, config: ReadTwiceBertConfig):
        super().__init__(config)
        self.bert = ReadTwiceBertModel(config)
        self.cls = BertOnlyMLMHead(config)
        self.coref_bias = nn.Parameter(torch.zeros(1))
        self.post_init()

    def get_output_embeddings(self):
        """The MLM decoder (tied to the word embeddings)."""
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        """Replace the MLM decoder and its bias (`resize_token_embeddings`)."""
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if module is self:
            init.zeros_(self.coref_bias)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        segment_positions: torch.LongTensor | None = None,
        entity_spans: torch.LongTensor | None = None,
        entity_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ReadTwiceMaskedLMOutput:
        r"""
        Args:
            input_ids ... entity_spans: the (masked) segments, see [`ReadTwiceBertModel.encode_documents`].
            entity_ids (`torch.LongTensor` of shape `(num_segments, max_mentions)`, *optional*): entity id of each
                mention in `entity_spans` (`-1`: not linked, ignored by the coreference loss).
            labels (`torch.LongTensor` of shape `(num_segments, segment_length)`, *optional*): original token ids at
                masked positions, `-100` elsewhere.

        Returns:
            [`ReadTwiceMaskedLMOutput`] with logits `(num_segments, segment_length, vocab_size)`.

        Raises:
            ValueError: as [`ReadTwiceBertModel.forward`] (`position_ids` and the other keywords it does not read
                included; `num_items_in_batch` too: the loss is a mean, which `Trainer` scales for gradient
                accumulation itself, `accepts_loss_kwargs = False`); `entity_ids` whose shape differs from
                `entity_spans.shape[:2]`, or `entity_ids` with a memory type other than `"entity"`.
            TypeError: as [`ReadTwiceBertModel.forward`], a keyword argument that neither this forward nor
                [`ReadTwiceBertModel.forward`] takes (e.g. `entity_span=`) included.
        """
        _check_keyword_arguments(self, kwargs, passed_to=(ReadTwiceBertModel.forward,))
        _refuse_unread_keywords(self, kwargs, _READTWICE_UNREAD_KEYWORDS)
        _check_no_cache_arguments(self, kwargs, _READTWICE_REUSE)
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            document_ids=document_ids,
            segment_positions=segment_positions,
            entity_spans=entity_spans,
            output_hidden_states=output_hidden_states,
            return_dict=True,  # the output's fields, whatever `config.return_dict` says
            **kwargs,
        )
        logits = self.cls(outputs.last_hidden_state)
        mlm_loss = coref_loss = loss = None
        if labels is not None:
            mlm_loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1), ignore_index=-100)
            loss = mlm_loss
        if entity_ids is not None and self.config.coref_loss_weight > 0:
            if self.config.memory_type != "entity":
                raise ValueError("`entity_ids` (coreference loss, App. B) need memory_type='entity'.")
            if entity_spans is None or tuple(entity_ids.shape) != tuple(torch.as_tensor(entity_spans).shape[:2]):
                raise ValueError("`entity_ids` must have shape (num_segments, max_mentions), like `entity_spans`.")
            coref_loss = self.coreference_loss(
                outputs.memory_values, outputs.memory_document_ids, entity_ids.flatten()[outputs.memory_mention_index]
            )
            if coref_loss is not None:
                weighted = self.config.coref_loss_weight * coref_loss
                loss = weighted if loss is None else loss + weighted
        if loss is not None and coref_loss is None and torch.is_grad_enabled():
            # b₀ takes part in every loss (weight 0 without a coreference pair: its gradient is 0, not missing), so
            # that `DistributedDataParallel` without `find_unused_parameters` (Trainer's choice under gradient
            # checkpointing) gets its gradient from every process, whether or not that process's batch has a pair
            loss = loss + 0.0 * self.coref_bias.float().sum()
        return ReadTwiceMaskedLMOutput(
            loss=loss, logits=logits, mlm_loss=mlm_loss, coref_loss=coref_loss, hidden_states=outputs.hidden_states,
            attentions=outputs.attentions, memory_attentions=outputs.memory_attentions,
        )

    def coreference_loss(
        self, memory_values: torch.Tensor, memory_document_ids: torch.LongTensor, memory_entity_ids: torch.LongTensor
    ) -> torch.Tensor | None:
        r"""App. B: mean of `BCE(σ(M_mᵀ M_m' + b₀), [id_m == id_m'])` over ordered pairs m ≠ m' of memories of the
        same document that both carry an entity id (`>= 0`).

        Args:
            memory_values (`(num_memories, hidden_size)`), memory_document_ids (`(num_memories,)`),
            memory_entity_ids (`(num_memories,)`).

        Returns:
            Scalar `torch.Tensor`, or `None` when no pair qualifies.
        """
        linked = memory_entity_ids >= 0
        pairs = (memory_document_ids[:, None] == memory_document_ids[None, :]) & linked[:, None] & linked[None, :]
        pairs.fill_diagonal_(False)
        if not bool(pairs.any()):
            return None
        scores = memory_values.float() @ memory_values.float().t() + self.coref_bias.float()
        targets = (memory_entity_ids[:, None] == memory_entity_ids[None, :]).float()
        return F.binary_cross_entropy_with_logits(scores[pairs], targets[pairs])


def readtwice_mlm_masking(
    input_ids: torch.LongTensor,
    attention_mask: torch.LongTensor,
    mask_token_id: int,
    vocab_size: int,
    entity_spans: torch.LongTensor | None = None,
    special_tokens_mask: torch.BoolTensor | None = None,
    entity_mask_probability: float = 0.25,
    span_mask_probability: float = 0.15,
    max_span_length: int = 10,
    geometric_p: float = 0.2,
    generator: torch.Generator | None = None,
) -> tuple[torch.LongTensor, torch.LongTensor]:
    r"""
    ReadTwice's masking for pretraining (§2.2): every entity mention is chosen with probability
    `entity_mask_probability` (25%) and then all its tokens are masked together; outside mentions, contiguous spans
    (lengths ~ Geometric(`geometric_p`) clipped to `max_span_length`, as in SpanBERT) are masked until
    `span_mask_probability` (15%) of each segment's maskable non-entity tokens are masked. A chosen token becomes
    `[MASK]` 80% of the time, a random token 10%, and stays 10% (BERT).

    Args:
        input_ids, attention_mask (`torch.LongTensor` of shape `(num_segments, segment_length)`).
        mask_token_id (`int`), vocab_size (`int`).
        entity_spans (`torch.LongTensor` of shape `(num_segments, max_mentions, 2)`, *optional*): inclusive spans,
            `(-1, -1)` padding.
        special_tokens_mask (`torch.BoolTensor` of shape `(num_segments, segment_length)`, *optional*): never masked
            (`[CLS]`, `[SEP]`); padding is never masked either.
        generator (`torch.Generator`, *optional*): for reproducible masks.

    Returns:
        `(masked_input_ids, labels)`, both `(num_segments, segment_length)`; labels are `-100` at unmasked positions.

    Raises:
        ValueError: if a probability is outside [0, 1], `max_span_length < 1` or `geometric_p` not in (0, 1].
    """
    for name, value in (("entity_mask_probability", entity_mask_probability),
                        ("span_mask_probability", span_mask_probability)):
        if not 0 <= value <= 1:
            raise ValueError(f"`{name}` must be in [0, 1], got {value}.")
    if max_span_length < 1 or not 0 < geometric_p <= 1:
        raise ValueError("`max_span_length` must be >= 1 and `geometric_p` in (0, 1].")
    num_segments, length = input_ids.shape
    maskable = attention_mask.bool().clone()
    if special_tokens_mask is not None:
        maskable &= ~special_tokens_mask.bool()
    chosen = torch.zeros_like(maskable)
    in_entity = torch.zeros_like(maskable)
    if entity_spans is not None:
        spans = check_entity_spans(entity_spans, num_segments, length)
        for s in range(num_segments):
            for start, end in spans[s].tolist():
                if start < 0:
                    continue
                in_entity[s, start : end + 1] = True
                if torch.rand((), generator=generator).item() < entity_mask_probability:
                    chosen[s, start : end + 1] = True
    chosen &= maskable
    other = maskable & ~in_entity
    for s in range(num_segments):
        candidates = other[s].nonzero().flatten().tolist()
        budget = round(span_mask_probability * len(candidates))
        done, attempts = 0, 0
        while done < budget and attempts < 10 * max(1, budget):
            attempts += 1
            u = float(torch.rand((), generator=generator))
            span = 1 if geometric_p >= 1 else 1 + int(math.log(max(u, 1e-12)) / math.log(1 - geometric_p))
            span = min(max_span_length, span)
            start = candidates[int(torch.randint(len(candidates), (), generator=generator))]
            for j in range(start, min(length, start + span)):
                if done >= budget:
                    break
                if other[s, j] and not chosen[s, j]:
                    chosen[s, j] = True
                    done += 1
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    roll = torch.rand(input_ids.shape, generator=generator)
    masked = input_ids.clone()
    masked[chosen & (roll < 0.8)] = mask_token_id
    random_tokens = torch.randint(vocab_size, input_ids.shape, generator=generator)
    replace = chosen & (roll >= 0.8) & (roll < 0.9)
    masked[replace] = random_tokens[replace]
    return masked, labels


ReadTwiceBertConfig.register_for_auto_class()
ReadTwiceBertModel.register_for_auto_class("AutoModel")
ReadTwiceBertForQuestionAnswering.register_for_auto_class("AutoModelForQuestionAnswering")
ReadTwiceBertForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")

__all__ = [
    "ReadTwiceBertForMaskedLM",
    "ReadTwiceBertForQuestionAnswering",
    "ReadTwiceBertModel",
    "ReadTwiceBertModelOutput",
    "ReadTwiceBertPreTrainedModel",
    "ReadTwiceDocumentOutput",
    "ReadTwiceMaskedLMOutput",
    "ReadTwiceMemoryAttention",
    "ReadTwiceMemoryExtractor",
    "ReadTwiceQuestionAnsweringModelOutput",
    "check_entity_spans",
    "default_segment_positions",
    "readtwice_mlm_masking",
    "readtwice_span_loss",
]
