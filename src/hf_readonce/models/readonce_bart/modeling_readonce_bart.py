# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch ReadOnce BART: Lin et al., "ReadOnce Transformers: Reusable Representations of Text for Transformers"
(ACL 2021).

- A *document encoder* (a BART encoder with its own weights + sliding-window aggregation, §3.1, eq. 1/2, Fig. 2)
  reads a document once and compresses its n tokens into `ceil(n / k)` vectors, the ReadOnce representations.
- A *representation+text model* (a full BART, §3.2, Fig. 3) runs the task text (a question, or "summary") alone
  through encoder layers `1..L`, appends the representations to it for layers `L+1..N`, and decodes as usual
  (`fusion="append"`). With `fusion="attention"` (App. A.1, eq. 4) the representations are never appended; the
  self-attention of encoder layers `L+1..N` and of every decoder layer is averaged with a separate attention over them.

Both parts start from the same BART weights and are trained jointly on QA (§3.3); downstream, the document encoder
may be frozen and its representations precomputed once per document (§3.4).

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers and the
files next to it.
"""

import difflib
import functools
import hashlib
import inspect
import json
import math
import sys
from dataclasses import dataclass, fields

import torch
import transformers
from torch import nn
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.models.bart.modeling_bart import (
    BartAttention,
    BartDecoder,
    BartDecoderLayer,
    BartEncoder,
    BartEncoderLayer,
    BartForConditionalGeneration,
    BartModel,
    BartPreTrainedModel,
    shift_tokens_right,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple, logging
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_readonce_bart import ReadOnceBartConfig

logger = logging.get_logger(__name__)

# Copied from hf_readonce.models.block_attention_llama.modeling_block_attention_llama.CACHE_NAME with CausalLMOutputWithPast->Seq2SeqLMOutput
# transformers 5.24 renamed `past_key_values` to `cache`: the field of every ModelOutput and the argument of `forward`,
# `generate`, the decoder layers, the attention modules and the mask functions (the old name stays accepted there,
# deprecated). Earlier 5.x releases know only `past_key_values`. This file accepts both names and passes on the one of
# the installed transformers.
CACHE_NAME = "cache" if "cache" in {f.name for f in fields(Seq2SeqLMOutput)} else "past_key_values"


# Copied from hf_readonce.models.block_attention_llama.modeling_block_attention_llama._either_cache
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


# Copied from hf_readonce.models.longdoc_bart.modeling_longdoc_bart._compute_dtype_tag
def _compute_dtype_tag(params) -> str:
    """The part of a representation fingerprint's tag that keys the compute dtype, for the families whose fingerprint
    hashed no dtype at first (LongDoc BART, ReadOnce BART): `""` when every one of `params` (`(name, parameter)`
    pairs) is float32, so that float32 compute keeps the fingerprint it always had (stores written before still
    read), else `"dtypes=<name>:<dtype>,...|"` naming each parameter that is not float32, so that the same weights
    computing in float16 or bfloat16 have a fingerprint of their own (their outputs differ by the rounding of the
    compute dtype, `hf_readonce.dtypes`)."""
    other = [f"{name}:{str(p.dtype).removeprefix('torch.')}" for name, p in params if p.dtype != torch.float32]
    return f"dtypes={','.join(other)}|" if other else ""


# Copied from hf_readonce.models.deformer_bert.modeling_deformer_bert._check_token_ids
def _check_token_ids(ids, bound: int, argument: str) -> None:
    """Raise a `ValueError` naming `argument` and the bound if a token id of `ids` is outside `[0, bound)` (called
    when the embedding lookup fails, so the normal path costs nothing)."""
    if torch.is_tensor(ids) and ids.numel() and not ids.is_floating_point():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise ValueError(f"`{argument}` holds token id {low if low < 0 else high}, outside the vocabulary "
                             f"[0, {bound}) of this model.") from None


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


# What a BART model of this project (ReadOnce, LongDoc; the bare models and the conditional generation heads) leaves
# unread besides [`_UNREAD_KEYWORDS`], for [`_refuse_unread_keywords`]. BART itself reads none of them: its encoder and
# decoder number their positions themselves, and its LM head scores every position.
_BART_UNREAD_KEYWORDS = {
    **_UNREAD_KEYWORDS,
    "position_ids": (None, "the model numbers positions itself, as BART does (learned positions from 0 for the text, "
                           "the decoder's following its cache); `BartModel` does not read `position_ids` either"),
    "is_causal": (None, "the encoder reads bidirectionally and the decoder causally, as in BART; `is_causal` would "
                        "turn only some of their attention layers the other way"),
    "logits_to_keep": (0, "the LM head scores every decoder position; slice `logits[:, -k:]` afterwards instead"),
}
# a bare model (no LM head) computes no loss
_BART_MODEL_UNREAD_KEYWORDS = {
    **_BART_UNREAD_KEYWORDS,
    "num_items_in_batch": (None, "the bare model computes no loss to divide by it; the conditional generation model "
                                 "(with `labels`) reads it"),
}


def _check_loss_count_has_decoder_inputs(model, num_items_in_batch, labels, decoder_input_ids,
                                         decoder_inputs_embeds) -> None:
    """Raise a `ValueError` when `num_items_in_batch` (`Trainer`'s count of the step's target tokens) comes without
    `labels`, `decoder_input_ids` or `decoder_inputs_embeds`: `Trainer` takes `labels` out of the batch before the
    forward for `label_smoothing_factor` (or a `compute_loss_func`) and scores the logits itself, and BART's decoder
    with neither labels nor decoder inputs reads the encoder input shifted right, so the loss would be over the wrong
    logits (or a shape error inside the label smoother). Without `num_items_in_batch` (a plain call) nothing is
    checked: BART's denoising default stays."""
    if num_items_in_batch is not None and labels is None and decoder_input_ids is None \
            and decoder_inputs_embeds is None:
        raise ValueError(
            f"{type(model).__name__}.forward() got `num_items_in_batch` (Trainer's count of target tokens) but no "
            "`labels`, `decoder_input_ids` or `decoder_inputs_embeds`: the decoder would read the encoder input "
            "shifted right, not the targets. Trainer takes `labels` out of the batch for `label_smoothing_factor` "
            "(or a `compute_loss_func`): give the batches `decoder_input_ids` made from the labels "
            "(`DataCollatorForSeq2Seq(tokenizer, model=model)` adds them).")


def _check_no_token_types(model, token_type_ids, instead: str, method: str = "forward") -> None:
    """Raise a `ValueError` when `token_type_ids` mark a second segment (a value other than 0): a BERT tokenizer
    returns them with the ids and BART's forward takes them without reading them (BART has no token-type embeddings),
    so a text pair (`tokenizer(question, document)`) would be read as one text without a word. All zeros (one text,
    `model(**tokenizer(text))`), `None` and anything that is not a tensor pass. `instead` ends the message: how this
    model reads a second text.

    Raises:
        ValueError: `token_type_ids` holding a value other than 0.
    """
    if torch.is_tensor(token_type_ids) and bool((token_type_ids != 0).any()):
        raise ValueError(f"{type(model).__name__}.{method}() got `token_type_ids` marking a second segment, which it "
                         f"does not support: BART has no token types, so a text pair would be read as one text. "
                         f"{instead}")


def _check_representations_type(document_representations) -> None:
    """Raise a `TypeError` naming `document_representations` unless it is a tensor, a
    [`ReadOnceDocumentEncoderOutput`] holding a tensor, or `None` (a list or a numpy array would fail deep inside
    torch, or under another name)."""
    representations = document_representations
    if isinstance(representations, ReadOnceDocumentEncoderOutput):
        _check_tensor_arguments({}, {"document_representations.representations": representations.representations,
                                     "document_representations.attention_mask": representations.attention_mask})
    elif representations is not None and not torch.is_tensor(representations):
        raise TypeError(f"`document_representations` must be a (batch, m, d_model) torch.Tensor or a "
                        f"ReadOnceDocumentEncoderOutput, got {type(representations).__name__}.")


def _check_encoder_outputs_type(encoder_outputs) -> None:
    """Raise a `TypeError` naming `encoder_outputs` when it holds the documents' representations (a
    [`ReadOnceDocumentEncoderOutput`] from `encode_documents`): read as the encoder's states, the text would never be
    read, with no error."""
    if isinstance(encoder_outputs, ReadOnceDocumentEncoderOutput):
        raise TypeError("`encoder_outputs` must be the encoder's output (`model.get_encoder()(input_ids=..., "
                        "document_representations=...)`), got a ReadOnceDocumentEncoderOutput: the representations "
                        "`encode_documents` returns go in as `document_representations=`.")


def _check_text_inputs(input_ids, attention_mask, input_name: str = "input_ids",
                       mask_name: str = "attention_mask") -> None:
    """Raise a `TypeError` for token ids that are not integers and a `ValueError` for a 2-D padding mask whose shape
    differs from `(batch, length)` of the ids, naming both arguments (torch would fail later without naming them, or
    broadcast a one-row mask over the batch silently)."""
    if not torch.is_tensor(input_ids):
        return
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"`{input_name}` must hold integer token ids, got {input_ids.dtype}.")
    if torch.is_tensor(attention_mask) and attention_mask.dim() == 2 and input_ids.dim() == 2 and (
            tuple(attention_mask.shape) != tuple(input_ids.shape)):
        raise ValueError(f"`{mask_name}` {tuple(attention_mask.shape)} must have the shape of `{input_name}` "
                         f"{tuple(input_ids.shape)}.")


def _check_batch_of_texts(value, name: str, dims: int = 2) -> None:
    """Raise a `ValueError` naming `name` unless `value` (a tensor, or `None`) has `dims` dimensions and neither an
    empty batch nor an empty text: `(batch_size, text_length)` ids, `(batch_size, text_length, d_model)` embeddings
    (1-D ids of one text would otherwise fail as a bare `IndexError` in BART's shift or a reshape error)."""
    if torch.is_tensor(value) and (value.dim() != dims or value.shape[0] == 0 or value.shape[1] == 0):
        axes = "batch_size, text_length" + (", d_model" if dims == 3 else "")
        raise ValueError(f"`{name}` must be a non-empty ({axes}) tensor, got shape {tuple(value.shape)}.")


def _check_decoder_batch(decoder_input_ids, decoder_inputs_embeds, encoder_hidden_states,
                         max_positions: int | None = None) -> None:
    """Raise a `ValueError` when the decoder rows (`labels` / `decoder_input_ids`) and the encoder's batch
    (`input_ids` / `encoder_outputs`) differ in size, or when the decoder ids are longer than `max_positions` (the
    position table; BART's lookup would raise a bare `IndexError`), and a `TypeError` for decoder ids that are not
    integers: BART would fail inside cross-attention without naming them, or attend every row to a one-row encoder
    silently."""
    _check_text_inputs(decoder_input_ids, None, "labels` / `decoder_input_ids")
    reference = decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
    name = "`labels` / `decoder_input_ids`" if decoder_input_ids is not None else "`decoder_inputs_embeds`"
    if torch.is_tensor(reference) and max_positions is not None and reference.dim() >= 2 and (
            reference.shape[1] > max_positions):
        raise ValueError(f"{name} hold {reference.shape[1]} tokens, more than the model's {max_positions} positions: "
                         "truncate the targets (`max_length` in the tokenizer).")
    if torch.is_tensor(reference) and torch.is_tensor(encoder_hidden_states) and reference.dim() >= 2 and (
            reference.shape[0] != encoder_hidden_states.shape[0]):
        raise ValueError(f"{name} hold {reference.shape[0]} rows for an encoder batch of "
                         f"{encoder_hidden_states.shape[0]} (`input_ids` / `encoder_outputs`): one target row per "
                         "input row.")


def _separate_token_tables(model) -> dict:
    """The token tables of their own that the encoder and the decoder of `model`'s BART (`model.model` of a
    conditional generation model, else `model` itself) read instead of `shared`: with `tie_word_embeddings=False`, as
    in `BartModel`, where `shared`, the encoder's `embed_tokens` and the decoder's `embed_tokens` are three parameters
    (each `(vocab_size, d_model)`).

    Returns:
        `dict`: `"encoder"` / `"decoder"` -> its `embed_tokens` module, for each part whose table is not `shared`'s
        weight; `{}` for a tied model (one table) and for a model without a BART (a document encoder, an encoder).
    """
    bart = getattr(model, "model", model)
    if not isinstance(bart, BartModel):
        return {}
    return {part: getattr(bart, part).embed_tokens for part in ("encoder", "decoder")
            if getattr(bart, part).embed_tokens.weight is not bart.shared.weight}


def _read_shared_where_missing(model, missing_keys: set) -> None:
    """During `from_pretrained` (from [`tie_weights`], after transformers initialized the keys the checkpoint
    lacks): each separate encoder / decoder token table of `model` ([`_separate_token_tables`],
    `tie_word_embeddings=False`) that the checkpoint lacks, while it holds `shared`, is given `shared`'s weights
    (`(vocab_size, d_model)`) instead of the random rows drawn for it, and its key is taken out of `missing_keys`
    (in place). Such a checkpoint holds one table, which its encoder and decoder both read; BART's untied checkpoints
    hold all three and load as they are.

    Args:
        model: the model being loaded (a conditional generation model, or a bare `BartModel`-based one; anything
            else is left alone).
        missing_keys (`set[str]`): the loading info's missing keys, named from `model`.

    Raises:
        ValueError: if a table is to be given `shared`'s weights while `shared` has none here (on the meta device:
            offloaded to disk by a `device_map`), naming the ways to load such a checkpoint.
    """
    bart = getattr(model, "model", model)
    prefix = "" if bart is model else "model."
    if not isinstance(bart, BartModel) or f"{prefix}shared.weight" in missing_keys:
        return
    for part, table in _separate_token_tables(model).items():
        key = f"{prefix}{part}.embed_tokens.weight"
        if key in missing_keys and table.weight.shape == bart.shared.weight.shape:
            if bart.shared.weight.device.type == "meta":
                raise ValueError(
                    f"This checkpoint holds one token table, `{prefix}shared.weight`, and no `{key}`; with "
                    "`tie_word_embeddings=False` the table is copied into the model's own, but `device_map` offloaded "
                    "`shared` to disk, where it cannot be read while loading. Load it with a `device_map` that keeps "
                    f"the token tables (`{prefix}shared`, `{prefix}encoder.embed_tokens`, "
                    f"`{prefix}decoder.embed_tokens`) in memory, or with `tie_word_embeddings=True` (the encoder and "
                    "the decoder then read `shared`, as the checkpoint does).")
            with torch.no_grad():
                table.weight.copy_(bart.shared.weight)
            missing_keys.discard(key)


# How ReadOnce reads a second text, for [`_check_no_token_types`]'s message.
_READONCE_SECOND_TEXT = ("Tokenize the question or task text alone and pass the document apart (`document_input_ids=` "
                         "or `document_representations=`).")


@dataclass
class ReadOnceDocumentEncoderOutput(ModelOutput):
    r"""
    ReadOnce representations of a batch of documents (output of `encode_documents`).

    Args:
        representations (`torch.FloatTensor` of shape `(batch_size, num_representations, d_model)`):
            `num_representations = ceil(n / k)` for documents of n tokens (more with overlapping chunks).
        attention_mask (`torch.LongTensor` of shape `(batch_size, num_representations)`):
            1 for representations of real tokens, 0 for padding (shorter documents in the batch).
        compression_ratio (`int`): the k used.
        model_fingerprint (`str`): SHA-256 of the document encoder's weights and settings that made them.
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True` with
            `attn_implementation="eager"`): the self-attention weights of each layer of the document encoder's BART
            encoder, one tensor per layer of shape `(batch_size, num_chunks, num_heads, chunk_length,
            chunk_length)`. Documents are read in chunks of at most `document_chunk_length` tokens (one chunk for a
            document that fits, §5.5), each by BART's encoder alone, and chunk c holds `BartEncoder`'s weights on
            that chunk's tokens; `chunk_length` is the first chunk's token count (a shorter last chunk is
            zero-padded). The tokens are in reading order: each row's real tokens first, in their order, then its
            padding, as the representations follow them (with right padding, the input's own order). A chunk that
            holds none of a row's tokens (a shorter document of the batch) has zero weights in that row. Other
            attention implementations compute no weights (an empty tuple, after transformers' warning for SDPA, as
            for BART). Not part of the representations: the representation+text model and the stores do not read
            them.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`): the
            document encoder's BART encoder states, chunk by chunk as `attentions`: the embeddings and the output of
            each layer (`encoder_layers + 1` tensors), each of shape `(batch_size, num_chunks, chunk_length,
            d_model)`, chunk c holding `BartEncoder`'s `hidden_states` on that chunk's tokens (padding tokens
            included, as BART computes them), in reading order; a shorter last chunk is zero-padded, and a chunk that
            holds none of a row's tokens is zeros in that row. The last tensor is what the aggregation reads. Returned
            with any attention implementation. Not part of the representations, as `attentions`.
    """

    representations: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    compression_ratio: int | None = None
    model_fingerprint: str | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ReadOnceEncoderOutput(BaseModelOutput):
    r"""
    Output of the representation+text encoder.

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, text_length + num_representations, d_model)`):
            with `fusion="append"`, the text's states followed by the representations' states after layer N; with
            `fusion="attention"`, the text's states alone, `(batch_size, text_length, d_model)`.
        attention_mask (`torch.LongTensor` of shape `(batch_size, text_length + num_representations)`): the mask the
            decoder's cross-attention uses (text mask, then representation mask; the text mask alone with
            `fusion="attention"`).
        document_representations (`torch.FloatTensor` of shape `(batch_size, num_representations, d_model)`):
            with `fusion="attention"` only: the representations R, which every decoder layer also attends to
            (App. A.1). They travel here so that `generate()` expands them with the encoder output for beam search.
        document_attention_mask (`torch.LongTensor` of shape `(batch_size, num_representations)`): their mask.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`): the
            embeddings and the output of each encoder layer, as BART's encoder returns them; with
            `fusion="append"` the outputs of layers `L+1..N` are `(batch_size, text_length + num_representations,
            d_model)` (R appended after layer L, Fig. 3), the others `(batch_size, text_length, d_model)`.
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True` with
            `attn_implementation="eager"`): each encoder layer's self-attention weights `(batch_size, num_heads,
            length, length)`, as BART's encoder returns them: `length` is `text_length` for layers `1..L` and
            `text_length + num_representations` for layers `L+1..N` with `fusion="append"` (text and
            representations attend to each other there), `text_length` in every layer with `fusion="attention"`,
            where a fused layer's weights are those of its self-attention `Attn` over the text (eq. 4; those of
            `Attn'` over R are `representation_attentions`). Other attention implementations compute no weights (an
            empty tuple, after transformers' warning for SDPA, as for BART).
        representation_attentions (`tuple(torch.FloatTensor)`, *optional*, `fusion="attention"` only, returned with
            `attentions`: when `output_attentions=True`): the weights of `Attn'` (eq. 4), the attention of each fused
            layer (`L+1..N`) over the representations R, one tensor per fused layer of shape `(batch_size,
            num_heads, text_length, num_representations)`: a softmax over R, each row summing to 1 over the real
            representations, 0 on padding ones (`document_attention_mask`). An empty tuple without representations
            (no `Attn'` runs) or at `L = N` (no fused encoder layer), and with an attention implementation that
            computes no weights (SDPA, as `attentions`). `None` with `fusion="append"`.
    """

    attention_mask: torch.LongTensor | None = None
    document_representations: torch.FloatTensor | None = None
    document_attention_mask: torch.LongTensor | None = None
    representation_attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ReadOnceDecoderOutput(BaseModelOutputWithPastAndCrossAttentions):
    r"""
    Output of [`ReadOnceBartDecoder`] (`fusion="attention"`): BART's decoder output, plus the weights of each
    layer's `Attn'` over the representations.

    Args:
        last_hidden_state, cache / past_key_values, hidden_states, attentions, cross_attentions: as
            `BaseModelOutputWithPastAndCrossAttentions` (BART's decoder); `attentions` are those of each layer's
            self-attention `Attn` over the target tokens, `(batch_size, num_heads, target_length, past +
            target_length)`.
        representation_attentions (`tuple(torch.FloatTensor)`, *optional*, returned with `attentions`: when
            `output_attentions=True`): the weights of each decoder layer's `Attn'` over the representations R
            (eq. 4), one tensor per layer of shape `(batch_size, num_heads, target_length, num_representations)`,
            each row summing to 1 over the real representations, 0 on padding ones. An empty tuple without
            representations and with an attention implementation that computes no weights (SDPA).
    """

    representation_attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ReadOnceSeq2SeqModelOutput(Seq2SeqModelOutput):
    r"""
    Output of [`ReadOnceBartModel`]: BART's `Seq2SeqModelOutput` (its fields and their order unchanged), plus, last,
    the weights of the attention `Attn'` over the representations (`fusion="attention"`, App. A.1, eq. 4), which no
    field of BART's output holds.

    Args:
        last_hidden_state, cache / past_key_values, decoder_hidden_states, decoder_attentions, cross_attentions,
            encoder_last_hidden_state, encoder_hidden_states, encoder_attentions: as `Seq2SeqModelOutput`.
        encoder_representation_attentions (`tuple(torch.FloatTensor)`, *optional*, `fusion="attention"` only,
            returned with `encoder_attentions`: when `output_attentions=True`): `Attn'`'s weights in each fused
            encoder layer (`L+1..N`), `(batch_size, num_heads, text_length, num_representations)` each
            ([`ReadOnceEncoderOutput`]'s `representation_attentions`).
        decoder_representation_attentions (`tuple(torch.FloatTensor)`, *optional*, `fusion="attention"` only,
            returned with `decoder_attentions`): `Attn'`'s weights in each decoder layer, `(batch_size, num_heads,
            target_length, num_representations)` each ([`ReadOnceDecoderOutput`]'s `representation_attentions`).
    """

    encoder_representation_attentions: tuple[torch.FloatTensor, ...] | None = None
    decoder_representation_attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ReadOnceSeq2SeqLMOutput(Seq2SeqLMOutput):
    r"""
    Output of [`ReadOnceBartForConditionalGeneration`]: BART's `Seq2SeqLMOutput` (its fields and their order
    unchanged: `loss`, `logits` `(batch_size, target_length, vocab_size)`, the cache, the decoder's and encoder's
    states and weights), plus, last, the weights of `Attn'` over the representations (`fusion="attention"`).

    Args:
        loss, logits, cache / past_key_values, decoder_hidden_states, decoder_attentions, cross_attentions,
            encoder_last_hidden_state, encoder_hidden_states, encoder_attentions: as `Seq2SeqLMOutput`.
        encoder_representation_attentions, decoder_representation_attentions (`tuple(torch.FloatTensor)`,
            *optional*, `fusion="attention"` only, returned when `output_attentions=True`): as
            [`ReadOnceSeq2SeqModelOutput`]: one `(batch_size, num_heads, text_length, num_representations)` tensor
            per fused encoder layer, one `(batch_size, num_heads, target_length, num_representations)` tensor per
            decoder layer. `generate(..., return_dict_in_generate=True, output_attentions=True)` does not return
            them: transformers' generation output has no field for them (it collects `encoder_attentions`,
            `decoder_attentions` and `cross_attentions` only); run `forward` on the generated tokens
            (`decoder_input_ids`) with `output_attentions=True` for them.
    """

    encoder_representation_attentions: tuple[torch.FloatTensor, ...] | None = None
    decoder_representation_attentions: tuple[torch.FloatTensor, ...] | None = None


# The switch `capture_outputs` reads for the key `representation_attentions` of `_can_record_outputs` (`output_<key>`):
# set from `output_attentions` by [`_record_representation_attentions`], never by a caller.
_REPRESENTATION_SWITCH = "output_representation_attentions"


def _record_representation_attentions(forward):
    """Decorate a `forward` below transformers' `capture_outputs` (encoder) or one that calls such a forward
    (decoder) so that the weights of `Attn'` (`representation_attentions`, recorded by the hooks of
    `_can_record_outputs`) are recorded exactly when those of `Attn` are: with `fusion="attention"`, the switch
    `output_representation_attentions` that `capture_outputs` reads is set to what it reads for `attentions`
    (`output_attentions` if given, else `config.output_attentions`); with `fusion="append"` it is left out (no field).
    The wrapped `forward` pops it before its layers run.

    Raises:
        TypeError: a caller passing `output_representation_attentions` (not an argument: `output_attentions`
            switches both).
    """

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if _REPRESENTATION_SWITCH in kwargs:
            raise TypeError(f"{type(self).__name__}.forward() got an unexpected keyword argument "
                            f"'{_REPRESENTATION_SWITCH}'. Did you mean 'output_attentions'?")
        if getattr(self.config, "fusion", "append") == "attention":
            kwargs[_REPRESENTATION_SWITCH] = kwargs.get("output_attentions",
                                                        getattr(self.config, "output_attentions", False))
        return forward(self, *args, **kwargs)

    return wrapper


class ReadOnceAggregation(nn.Module):
    r"""Sliding-window aggregation f of eq. 2: `r_j = f(h_{k*j}, ..., h_{k*j + w - 1})`.

    `"linear"` is the learned weighted sum of eq. 1: a scalar score `u(h_i) = v^T h_i + b` per token, softmax over
    the window's real tokens, `r_j = sum_i softmax(u)_i h_i`. `"mean"` and `"max"` pool the window's real tokens.
    """

    def __init__(self, config: ReadOnceBartConfig):
        super().__init__()
        self.aggregation = config.aggregation
        self.score = nn.Linear(config.d_model, 1) if config.aggregation == "linear" else None
        if self.score is not None:  # zero at start: uniform weights, the linear sum begins as the mean
            self.score.readonce_init_zeros = True  # read by `ReadOnceBartPreTrainedModel._init_weights`

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor, stride: int, window: int):
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, n, d_model)`): encoder output.
            attention_mask (`torch.Tensor` of shape `(batch_size, n)`): 1 for real tokens.
            stride (`int`): k. window (`int`): w >= k.

        Returns:
            `(representations (batch_size, ceil(n / k), d_model), mask (batch_size, ceil(n / k)))`: a window counts
            as present when the attention mask has at least one real token in it (whatever its first token); a
            window with no real token is masked out (its representation is zeros).
        """
        batch, length, dim = hidden_states.shape
        count = math.ceil(length / stride)
        padded = (count - 1) * stride + window
        mask = attention_mask.to(hidden_states.dtype)
        states = nn.functional.pad(hidden_states, (0, 0, 0, padded - length))
        mask = nn.functional.pad(mask, (0, padded - length))
        windows = states.unfold(1, window, stride)  # (batch, count, dim, window)
        window_mask = mask.unfold(1, window, stride)  # (batch, count, window)
        valid = window_mask.bool()
        if self.aggregation == "linear":
            scores = nn.functional.pad(self.score(hidden_states).squeeze(-1), (0, padded - length))
            scores = scores.unfold(1, window, stride).masked_fill(~valid, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores.float(), dim=-1).to(states.dtype) * window_mask
            representations = torch.einsum("bcdw,bcw->bcd", windows, weights)
        elif self.aggregation == "mean":
            total = torch.einsum("bcdw,bcw->bcd", windows, window_mask)
            representations = total / window_mask.sum(-1, keepdim=True).clamp(min=1)
        else:
            filled = windows.masked_fill(~valid[:, :, None, :], torch.finfo(states.dtype).min)
            representations = filled.max(dim=-1).values
        present = valid.any(dim=-1)
        representations = representations * present[..., None].to(representations.dtype)
        return representations, present.long()


class ReadOnceBartFusedAttention(BartAttention):
    r"""A BART self-attention fused with attention over ReadOnce representations (App. A.1, eq. 4):

    `H^l = (Attn(H^{l-1}, H^{l-1}, H^{l-1}) + Attn'(H^{l-1}, R, R)) / 2`

    `Attn` is this module itself (BART's parameter names `q_proj`, `k_proj`, `v_proj`, `out_proj`, so BART checkpoints
    load unchanged); `Attn'` is `representation_attn`, a separate [`~transformers.models.bart.modeling_bart.BartAttention`]
    (never causal, no KV cache: R is short, its keys and values are recomputed) whose weights start as a copy of
    `Attn`'s (`copy_self_attention_weights`). Without representations the module is exactly `Attn`.

    Args:
        config ([`ReadOnceBartConfig`]): dimensions, dropout and attention implementation.
        num_heads (`int`): attention heads of both modules.
        is_decoder, is_causal (`bool`, defaults to `False`): as for `BartAttention` (the decoder's self-attention is
            causal; `Attn'` never is).
        layer_idx (`int`, *optional*): the layer's index, for the KV cache of `Attn`.
    """

    def __init__(self, config: ReadOnceBartConfig, num_heads: int, is_decoder: bool = False, is_causal: bool = False,
                 layer_idx: int | None = None):
        super().__init__(config.d_model, num_heads, dropout=config.attention_dropout, is_decoder=is_decoder,
                         is_causal=is_causal, config=config, layer_idx=layer_idx)
        self.representation_attn = BartAttention(config.d_model, num_heads, dropout=config.attention_dropout,
                                                 config=config)

    @torch.no_grad()
    def copy_self_attention_weights(self) -> None:
        """Initialize `Attn'` from `Attn` (App. A.1: "initialized by the corresponding weights in attn")."""
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            getattr(self.representation_attn, name).load_state_dict(getattr(self, name).state_dict())

    def forward(self, hidden_states: torch.Tensor, key_value_states: torch.Tensor | None = None,
                past_key_values=None, attention_mask: torch.Tensor | None = None,
                document_representations: torch.Tensor | None = None,
                document_attention_mask: torch.Tensor | None = None, cache=None, **kwargs):
        r"""
        Args:
            hidden_states (`torch.FloatTensor` of shape `(batch_size, length, d_model)`): H^{l-1}.
            key_value_states, past_key_values, attention_mask: as for `BartAttention` (used by `Attn` only).
            cache: the name of `past_key_values` from transformers 5.24 on; either name, not both (a `ValueError`).
            document_representations (`torch.FloatTensor` of shape `(batch_size, m, d_model)`, *optional*): R.
            document_attention_mask (`torch.Tensor` of shape `(batch_size, m)`, *optional*): 1 for real
                representations.

        Returns:
            `(attn_output (batch_size, length, d_model), attn_weights of Attn or None)`.
        """
        past_key_values = _either_cache(past_key_values, cache)
        output, weights = super().forward(hidden_states, key_value_states=key_value_states,
                                          attention_mask=attention_mask, **{CACHE_NAME: past_key_values}, **kwargs)
        if document_representations is None:
            return output, weights
        representations = document_representations.to(hidden_states.dtype)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                         attention_mask=document_attention_mask,
                                         encoder_hidden_states=representations)
        extra, _ = self.representation_attn(hidden_states, key_value_states=representations, attention_mask=mask,
                                            **kwargs)
        return (output + extra) / 2, weights


class ReadOnceBartEncoderLayer(BartEncoderLayer):
    r"""A BART encoder layer whose self-attention is [`ReadOnceBartFusedAttention`] (`fusion="attention"`, layers
    `L+1..N` of [`ReadOnceBartEncoder`], App. A.1, eq. 4). It takes the representations as positional arguments: with
    gradient checkpointing and `use_reentrant=True` (PEFT's default) only positional tensors get their gradients, and
    representations captured as keyword arguments made the backward pass run through the document encoder's graph
    once per layer ("Trying to backward through the graph a second time"). Without representations it is exactly
    `BartEncoderLayer`.

    Args:
        config ([`ReadOnceBartConfig`]), layer_idx (`int`, *optional*): as for `BartEncoderLayer`.
    """

    def __init__(self, config: ReadOnceBartConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx=layer_idx)
        self.self_attn = ReadOnceBartFusedAttention(config, config.encoder_attention_heads, layer_idx=layer_idx)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                document_representations: torch.Tensor | None = None,
                document_attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        r"""`BartEncoderLayer.forward` with R `(batch_size, m, d_model)` and its mask `(batch_size, m)` for the fused
        self-attention. Returns `(batch_size, length, d_model)`."""
        return super().forward(hidden_states, attention_mask, document_representations=document_representations,
                               document_attention_mask=document_attention_mask, **kwargs)


class ReadOnceBartDecoderLayer(BartDecoderLayer):
    r"""A BART decoder layer whose self-attention is [`ReadOnceBartFusedAttention`] (`fusion="attention"`, App. A.1:
    "for the decoder ... we also compute the hidden states of each layer as per eqn. 4"). The representations go to
    the self-attention only; cross-attention and feed-forward blocks are BART's. Without representations the layer
    is exactly `BartDecoderLayer`."""

    def __init__(self, config: ReadOnceBartConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx=layer_idx)
        self.self_attn = ReadOnceBartFusedAttention(config, config.decoder_attention_heads, is_decoder=True,
                                                    is_causal=True, layer_idx=layer_idx)

    def _residual(self, block_output: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        block_output = nn.functional.dropout(block_output, p=self.dropout, training=self.training)
        return norm(residual + block_output)  # post-LN, as BART

    def __call__(self, hidden_states, attention_mask=None, encoder_hidden_states=None, document_representations=None,
                 document_attention_mask=None, **kwargs):
        # BART's decoder hands the representations on as keyword arguments; they go on as positional ones, as BART
        # passes `encoder_hidden_states`: with gradient checkpointing and `use_reentrant=True` only positional tensors
        # get their gradients (captured ones made the backward pass run through the document encoder's graph again).
        # The switch of `Attn'`'s weights is read by the decoder's `capture_outputs`, not by the layer.
        kwargs.pop(_REPRESENTATION_SWITCH, None)
        return super().__call__(hidden_states, attention_mask, encoder_hidden_states, document_representations,
                                document_attention_mask, **kwargs)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                encoder_hidden_states: torch.Tensor | None = None,
                document_representations: torch.Tensor | None = None,
                document_attention_mask: torch.Tensor | None = None, encoder_attention_mask: torch.Tensor | None = None,
                past_key_values=None, use_cache: bool | None = True, cache=None, **kwargs) -> torch.Tensor:
        r"""As `BartDecoderLayer.forward`, plus `document_representations` `(batch_size, m, d_model)` and
        `document_attention_mask` `(batch_size, m)` for the fused self-attention (4th and 5th, positional for
        gradient checkpointing; `encoder_attention_mask` and the cache come after them). The cache is
        `past_key_values` or, from transformers 5.24 on, `cache` (both: a `ValueError`). Returns `(batch_size,
        target_length, d_model)`."""
        past_key_values = _either_cache(past_key_values, cache)
        attended, _ = self.self_attn(hidden_states, attention_mask=attention_mask,
                                     document_representations=document_representations,
                                     document_attention_mask=document_attention_mask,
                                     **{CACHE_NAME: past_key_values}, **kwargs)
        hidden_states = self._residual(attended, hidden_states, self.self_attn_layer_norm)
        if encoder_hidden_states is not None:
            attended, _ = self.encoder_attn(hidden_states, key_value_states=encoder_hidden_states,
                                            attention_mask=encoder_attention_mask, **{CACHE_NAME: past_key_values},
                                            **kwargs)
            hidden_states = self._residual(attended, hidden_states, self.encoder_attn_layer_norm)
        inner = nn.functional.dropout(self.activation_fn(self.fc1(hidden_states)), p=self.activation_dropout,
                                      training=self.training)
        return self._residual(self.fc2(inner), hidden_states, self.final_layer_norm)


class ReadOnceBartDecoder(BartDecoder):
    r"""BART's decoder with [`ReadOnceBartDecoderLayer`]s (`fusion="attention"` only, App. A.1: every decoder
    layer's self-attention averaged with an attention over the representations, eq. 4). `forward` takes BART's
    arguments plus `document_representations` / `document_attention_mask`, which reach every layer."""

    # BART's recorders, with the self-attention matched by its path (the module name ends in `self_attn`), not by
    # class: the `representation_attn` (Attn') inside a fused self-attention is a `BartAttention` under `self_attn`
    # too, and its weights over R are not the layer's self-attention weights: they are recorded apart
    # (`representation_attentions`, switched by `output_attentions`, [`_record_representation_attentions`]).
    _can_record_outputs = {
        "hidden_states": BartDecoderLayer,
        "attentions": OutputRecorder(None, index=1, class_name="self_attn"),
        "cross_attentions": OutputRecorder(BartAttention, index=1, layer_name="encoder_attn"),
        "representation_attentions": OutputRecorder(BartAttention, index=1, layer_name="representation_attn"),
    }

    def __init__(self, config: ReadOnceBartConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(ReadOnceBartDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers))
        self.post_init()

    @_record_representation_attentions
    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                encoder_hidden_states: torch.Tensor | None = None, encoder_attention_mask: torch.Tensor | None = None,
                past_key_values=None, inputs_embeds: torch.Tensor | None = None, use_cache: bool | None = None,
                document_representations: torch.Tensor | None = None,
                document_attention_mask: torch.Tensor | None = None, cache=None,
                **kwargs: Unpack[TransformersKwargs]) -> ReadOnceDecoderOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*): decoder tokens (the new
                ones when the cache holds earlier ones).
            attention_mask (`torch.Tensor` of shape `(batch_size, past + target_length)`, *optional*): decoder
                padding mask.
            encoder_hidden_states (`(batch_size, length, d_model)`), encoder_attention_mask (`(batch_size, length)`),
                past_key_values, inputs_embeds, use_cache: as `BartDecoder.forward` (what [`ReadOnceBartModel`]
                passes: the question and representation states of [`ReadOnceEncoderOutput`] and their combined mask).
            document_representations (`torch.FloatTensor` of shape `(batch_size, m, d_model)`, *optional*): R, which
                every layer's self-attention also attends to (eq. 4); without it the decoder is BART's.
            document_attention_mask (`torch.Tensor` of shape `(batch_size, m)`, *optional*): 1 for real
                representations.
            cache: the name of `past_key_values` from transformers 5.24 on (what `BartModel` passes there); either
                name, not both.
            output_attentions, output_hidden_states (`bool`, *optional*, keyword): as in BART (default: the
                config's); `output_attentions` also returns the weights of each layer's `Attn'` over R.
            return_dict (`bool`, *optional*, keyword): return a tuple when False, as BART's decoder (default:
                `config.return_dict`).

        Returns:
            [`ReadOnceDecoderOutput`]: BART's `BaseModelOutputWithPastAndCrossAttentions` (`last_hidden_state`
            `(batch_size, target_length, d_model)`, the cache, `hidden_states`, `attentions`, `cross_attentions`)
            and `representation_attentions`, the weights of `Attn'`, last.

        Raises:
            ValueError: both `past_key_values` and `cache`.
            TypeError: a keyword argument it does not take (a misspelling such as `document_representation=` or
                `encoder_attention_masks=`), named with the argument it probably meant, where BART's `**kwargs` would
                swallow it and the decoder would run without it. Accepted besides its own: what
                [`_check_keyword_arguments`] accepts (`TransformersKwargs`, what `generate()` and `Trainer` pass down
                through the model).
        """
        # set by the decorator (with `fusion="attention"`), for the `capture_outputs` of BART's decoder
        switch = {_REPRESENTATION_SWITCH: kwargs.pop(_REPRESENTATION_SWITCH)} if _REPRESENTATION_SWITCH in kwargs else {}
        _check_keyword_arguments(self, kwargs)
        return_dict = kwargs.pop("return_dict", getattr(self.config, "return_dict", True))
        outputs = super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                  encoder_hidden_states=encoder_hidden_states,
                                  encoder_attention_mask=encoder_attention_mask, inputs_embeds=inputs_embeds,
                                  use_cache=use_cache, document_representations=document_representations,
                                  document_attention_mask=document_attention_mask,
                                  **{CACHE_NAME: _either_cache(past_key_values, cache)}, **kwargs,
                                  **switch, return_dict=True)
        # `capture_outputs` set `representation_attentions` on BART's output object, which has no such field
        outputs = ReadOnceDecoderOutput(
            **{field.name: getattr(outputs, field.name, None) for field in fields(ReadOnceDecoderOutput)
               if field.name != "representation_attentions"},
            representation_attentions=outputs.get("representation_attentions"),
        )
        return outputs if return_dict is not False else outputs.to_tuple()


class ReadOnceBartPreTrainedModel(BartPreTrainedModel):
    r"""Base class of the ReadOnce BART models (Lin et al., ACL 2021, "ReadOnce Transformers: Reusable
    Representations of Text for Transformers"): BART's weight initialization and loading with
    [`ReadOnceBartConfig`]. The scoring layer of the `"linear"` aggregation (eq. 1, the weights of eq. 2's weighted
    sum, [`ReadOnceAggregation`]) starts at zero where a checkpoint does not hold it, so the weighted sum starts as
    the window mean."""

    config_class = ReadOnceBartConfig
    config: ReadOnceBartConfig
    # BART's layers and the fused ones (`fusion="attention"`): `device_map="auto"` keeps each on one device (matched by
    # class name, so BART's list alone let a fused layer's residual and attention land on two GPUs)
    _no_split_modules = ["BartEncoderLayer", "BartDecoderLayer", "ReadOnceBartEncoderLayer", "ReadOnceBartDecoderLayer"]

    def _honour_layer_norm_eps(self) -> None:
        """Set the epsilon of every `nn.LayerNorm` of this model to `config.layer_norm_eps` (BART's modules hard-code
        `nn.LayerNorm`'s default, 1e-5). Called at the end of `__init__`, before `post_init`."""
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.eps = self.config.layer_norm_eps

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

    def tie_weights(self, missing_keys: set[str] | None = None, recompute_mapping: bool = True):
        r"""[`~transformers.PreTrainedModel.tie_weights`]: with `tie_word_embeddings=True`, one token table
        (`shared`, the encoder's and decoder's `embed_tokens`, the LM head). With `False` the encoder's and the
        decoder's tables are parameters of their own, as in `BartModel`, loaded from the checkpoint's
        `encoder.embed_tokens` / `decoder.embed_tokens`; called by `from_pretrained` with `missing_keys` (the keys the
        checkpoint lacks), it gives a part whose table the checkpoint lacks `shared`'s weights, where the checkpoint
        holds `shared` (a checkpoint with one table, read by encoder and decoder), instead of random rows
        ([`_read_shared_where_missing`], which takes the filled keys out of `missing_keys`).

        Args:
            missing_keys (`set[str]`, *optional*), recompute_mapping (`bool`, defaults to `True`): as in transformers.

        Raises:
            ValueError: for such a checkpoint loaded with `shared` offloaded to disk ([`_read_shared_where_missing`]).
        """
        super().tie_weights(missing_keys=missing_keys, recompute_mapping=recompute_mapping)
        if missing_keys is not None:
            _read_shared_where_missing(self, missing_keys)

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        r"""[`~transformers.PreTrainedModel.resize_token_embeddings`] (BART's `final_logits_bias` with it). With
        `tie_word_embeddings=False` the encoder's and the decoder's own token tables ([`_separate_token_tables`]) are
        resized too, each keeping its rows, and stay separate: BART's `set_input_embeddings`, which the resize calls,
        would give both the resized `shared` table in their place.

        Args:
            new_num_tokens (`int`, *optional*), pad_to_multiple_of (`int`, *optional*), mean_resizing (`bool`,
                defaults to `True`): as in transformers (the added rows of each separate table are drawn from its
                own rows' mean and covariance, or as at initialization with `mean_resizing=False`).

        Returns:
            `torch.nn.Embedding`: the input embeddings (`shared`), `(vocab_size, d_model)` after the resize.
        """
        tables = _separate_token_tables(self)
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        bart = getattr(self, "model", self)
        for part, table in tables.items():
            getattr(bart, part).embed_tokens = self._get_resized_embeddings(table, embeddings.num_embeddings,
                                                                            mean_resizing=mean_resizing)
        return embeddings

    def initialize_representation_attention(self) -> None:
        r"""With `fusion="attention"`, copy every fused layer's self-attention weights into its `representation_attn`
        (App. A.1). Called at construction, by `from_pretrained` when a checkpoint lacks those weights, and by
        the BERT->BART converter; a no-op with `fusion="append"`."""
        for module in self.modules():
            if isinstance(module, ReadOnceBartFusedAttention):
                module.copy_self_attention_weights()

    def _init_weights(self, module):
        super()._init_weights(module)
        # On the score itself, not on `ReadOnceAggregation`: transformers skips, for remote code, a module whose own
        # parameters are all initialized, which a module without direct parameters always is, and BART's own
        # initialization of the `score` Linear drew over zeros set from its parent.
        if isinstance(module, nn.Linear) and getattr(module, "readonce_init_zeros", False):
            init.zeros_(module.weight)  # uniform weights at start: the linear sum begins as the mean
            init.zeros_(module.bias)


class ReadOnceBartDocumentEncoder(ReadOnceBartPreTrainedModel):
    r"""The document encoder of Fig. 2: a BART encoder (its own weights) and [`ReadOnceAggregation`]. Documents
    longer than `config.document_chunk_length` tokens are cut into chunks (overlap `document_chunk_overlap`), each
    read separately with positions restarting at 0, and the chunks' representations are concatenated (§5.5,
    App. C.1)."""

    def __init__(self, config: ReadOnceBartConfig):
        super().__init__(config)
        self.encoder = BartEncoder(config)
        self.aggregation = ReadOnceAggregation(config)
        self._fingerprint_cache = None
        self.post_init()

    def representation_fingerprint(self) -> str:
        """SHA-256 hex of the document encoder's weights, of every config field that can change representations
        (aggregation, window, chunking, activation, attention heads, ...; all of `config.to_dict()` except the
        metadata in `_FINGERPRINT_IGNORED_FIELDS` and the `decoder_*` fields), of the transformers major version and
        of the compute dtype (the dtype of each weight that is not float32, [`_compute_dtype_tag`]: float32 weights
        hash as they did before dtypes were keyed, so a float16 checkpoint computing in float32 and in float16 has two
        fingerprints).

        Computed only when asked (storing or checking representations; a training forward never hashes), and cached
        until the config changes or a parameter is replaced or modified in place (torch's version counters).

        Returns:
            `str`: 64 hex characters.
        """
        params = list(self.named_parameters())
        config_json = _config_fingerprint(self.config, ReadOnceBartConfig)
        return _weights_fingerprint(self, "readonce_bart|" + _compute_dtype_tag(params), config_json, params,
                                    hash_dtypes=False)

    def forward(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                compression_ratio: int | None = None, with_fingerprint: bool = True,
                output_attentions: bool | None = None,
                output_hidden_states: bool | None = None) -> ReadOnceDocumentEncoderOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, n)`): document tokens (any n).
            attention_mask (`torch.Tensor` of shape `(batch_size, n)`, *optional*): 1 for real tokens. Padding may
                be on either side (or inside): the real tokens of each row are read as one contiguous document, so
                left- and right-padded batches give the same representations.
            compression_ratio (`int`, *optional*): k for this call (defaults to `config.compression_ratio`, §5.2);
                the window keeps the configured overlap `w - k`.
            with_fingerprint (`bool`, defaults to `True`): record [`representation_fingerprint`] in the output (for
                representations that leave the model); the joint-training forward passes `False`, so a training
                step never hashes the encoder.
            output_attentions (`bool`, *optional*): also return the BART encoder's attention weights, chunk by
                chunk (`attentions` of [`ReadOnceDocumentEncoderOutput`]), as `BartEncoder` returns them: with
                `attn_implementation="eager"`. Defaults to `config.output_attentions`. The representations do not
                depend on it.
            output_hidden_states (`bool`, *optional*): also return the BART encoder's embeddings and layer outputs,
                chunk by chunk (`hidden_states` of [`ReadOnceDocumentEncoderOutput`]), as `BartEncoder` returns them.
                Defaults to `config.output_hidden_states`. The representations do not depend on it.

        Returns:
            [`ReadOnceDocumentEncoderOutput`].

        Raises:
            ValueError: empty `input_ids` or a document with no real token (a `RuntimeError` when run under
                `torch.compile`, where the check is a graph op); a token id outside the vocabulary; a bad k; a chunk
                overlap that is not a multiple of k.
            TypeError: `input_ids` not an integer tensor, `attention_mask` not a tensor (a list, a numpy array); an
                `output_attentions` or `output_hidden_states` that is not a bool.
        """
        config = self.config
        output_attentions = _output_switch("output_attentions", output_attentions, config)
        output_hidden_states = _output_switch("output_hidden_states", output_hidden_states, config)
        _check_tensor_arguments({"input_ids": input_ids}, {"attention_mask": attention_mask})
        _check_batch_of_texts(input_ids, "input_ids")
        k = config.compression_ratio if compression_ratio is None else compression_ratio
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"`compression_ratio` must be a positive int, got {compression_ratio!r}.")
        window = k + config.window_size - config.compression_ratio
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"`attention_mask` {tuple(attention_mask.shape)} must match `input_ids` "
                             f"{tuple(input_ids.shape)}.")
        if torch.compiler.is_compiling():  # a graph op, not a Python branch on tensor values (which splits the graph)
            torch._assert_async((attention_mask.sum(-1) > 0).all(), "a document of the batch is empty: nothing to "
                                 "encode.")
        else:
            empty = (attention_mask.sum(-1) == 0).nonzero().flatten().tolist()
            if empty:
                raise ValueError(f"document(s) {empty} of the batch are empty: nothing to encode.")
        # Padding anywhere (left, right, inside): each row's real tokens are moved to the front in their order (a
        # stable sort on the mask), so windows start at the document's first real token and positions at 0 whatever
        # the tokenizer's padding side, and the real representations form a prefix of each row.
        order = torch.sort((attention_mask == 0).to(torch.int8), dim=1, stable=True).indices
        input_ids, attention_mask = input_ids.gather(1, order), attention_mask.gather(1, order)
        chunk, overlap = config.document_chunk_length, config.document_chunk_overlap
        if overlap % k:
            raise ValueError(f"document_chunk_overlap {overlap} must be a multiple of compression_ratio {k}.")
        length = input_ids.shape[1]
        starts = [0]
        while starts[-1] + chunk < length:
            starts.append(starts[-1] + chunk - overlap)
        pieces, masks, chunk_attentions, chunk_hidden_states = [], [], [], []
        for index, start in enumerate(starts):
            ids = input_ids[:, start : start + chunk]
            mask = attention_mask[:, start : start + chunk]
            run_mask = mask.clone()
            run_mask[mask.sum(-1) == 0, 0] = 1  # rows already finished: compute something finite, masked below
            try:
                # the output as a dataclass whatever `config.return_dict` says, and nothing recorded that is thrown away
                encoded = self.encoder(input_ids=ids, attention_mask=run_mask, return_dict=True,
                                       output_attentions=output_attentions, output_hidden_states=output_hidden_states)
            except (IndexError, RuntimeError):
                _check_token_ids(input_ids, config.vocab_size, "input_ids")
                raise
            if output_attentions:
                chunk_attentions.append((encoded.attentions, mask.sum(-1) > 0))
            if output_hidden_states:
                chunk_hidden_states.append((encoded.hidden_states, mask.sum(-1) > 0))
            reps, rep_mask = self.aggregation(encoded.last_hidden_state, mask, k, window)
            if index > 0 and overlap:
                reps, rep_mask = reps[:, overlap // k :], rep_mask[:, overlap // k :]
            pieces.append(reps)
            masks.append(rep_mask)
        return ReadOnceDocumentEncoderOutput(
            representations=torch.cat(pieces, 1), attention_mask=torch.cat(masks, 1), compression_ratio=k,
            model_fingerprint=self.representation_fingerprint() if with_fingerprint else None,
            attentions=_stack_chunk_outputs(chunk_attentions, square=True) if output_attentions else None,
            hidden_states=_stack_chunk_outputs(chunk_hidden_states, square=False) if output_hidden_states else None,
        )


def _stack_chunk_outputs(chunk_outputs, square: bool) -> tuple[torch.Tensor, ...]:
    """The document encoder's per-layer outputs chunk by chunk (see [`ReadOnceDocumentEncoderOutput`]), from what
    `BartEncoder` returned for each chunk: a list of `(outputs, present)` pairs, `outputs` one tensor per layer and
    `present` `(batch,)`, False for the rows that have no token in the chunk (their outputs, computed over a stand-in
    token, become zeros). Attention weights (`square=True`) are `(batch, heads, length_c, length_c)` per chunk and
    come out `(batch, num_chunks, heads, chunk_length, chunk_length)`; hidden states (`square=False`) are `(batch,
    length_c, d_model)` and come out `(batch, num_chunks, chunk_length, d_model)`. Later chunks, shorter than the
    first, are zero-padded to its length. `()` when the encoder returned none (an empty tuple, as BART's attentions
    under SDPA)."""
    if any(len(outputs) == 0 for outputs, _ in chunk_outputs):
        return ()
    length = chunk_outputs[0][0][0].shape[-2]
    layers = []
    for layer in range(len(chunk_outputs[0][0])):
        chunks = []
        for outputs, present in chunk_outputs:
            values = outputs[layer]
            values = values * present.view(-1, *[1] * (values.dim() - 1)).to(values.dtype)
            pad = length - values.shape[-2]
            chunks.append(nn.functional.pad(values, (0, pad, 0, pad) if square else (0, 0, 0, pad)) if pad else values)
        layers.append(torch.stack(chunks, dim=1))
    return tuple(layers)


class ReadOnceBartEncoder(BartEncoder):
    r"""The representation+text model's encoder (Fig. 3): BART's encoder, with the document representations
    appended to the text's hidden states after layer L (`config.append_layer` question-only layers, `0 <= L <= N`,
    see [`ReadOnceBartConfig`] for the equation; `fusion="append"`). Representations
    carry no position embedding. With `fusion="attention"` (App. A.1) the self-attention of layers `L+1..N` is a
    [`ReadOnceBartFusedAttention`] over the text and the representations instead, and the output keeps the text's
    length. Without representations it is exactly BART's encoder."""

    # `output_hidden_states` / `output_attentions`: recorded by transformers' output hooks (`capture_outputs`), as in
    # BART's encoder; the self-attention is matched by its path, not by class (see [`ReadOnceBartDecoder`]), and the
    # `Attn'` of the fused layers (`representation_attn`) by its own path, switched by `output_attentions`
    # ([`_record_representation_attentions`]).
    _can_record_outputs = {
        "hidden_states": BartEncoderLayer,
        "attentions": OutputRecorder(None, index=1, class_name="self_attn"),
        "representation_attentions": OutputRecorder(BartAttention, index=1, layer_name="representation_attn"),
    }

    def __init__(self, config: ReadOnceBartConfig):
        super().__init__(config)
        if config.fusion == "attention":
            for index in range(config.append_layer, config.encoder_layers):  # layers L+1..N (1-based)
                self.layers[index] = ReadOnceBartEncoderLayer(config, layer_idx=index)
            self.post_init()

    # `hidden_states` are the layers' outputs, not replaced by `last_hidden_state` (which holds R too at L = N)
    @_record_representation_attentions
    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        document_representations: torch.Tensor | ReadOnceDocumentEncoderOutput | None = None,
        document_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> ReadOnceEncoderOutput:
        r"""
        The first three arguments keep `BartEncoder.forward`'s positional order, so a caller written for BART's encoder
        passes the same thing at the same place; the document arguments come after them.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, text_length)`): the question / task text.
            attention_mask (`torch.Tensor` of shape `(batch_size, text_length)`, *optional*).
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, text_length, d_model)`, *optional*): instead of
                `input_ids` (exactly one of the two).
            document_representations (`torch.FloatTensor` of shape `(batch_size, m, d_model)` or
                [`ReadOnceDocumentEncoderOutput`], *optional*).
            document_attention_mask (`torch.Tensor` of shape `(batch_size, m)`, *optional*): defaults to the mask
                inside [`ReadOnceDocumentEncoderOutput`], or all ones.

            output_hidden_states, output_attentions (`bool`, *optional*, keyword): also return every layer's states /
                self-attention weights (`attn_implementation="eager"`), and with `fusion="attention"` the weights of
                each fused layer's `Attn'` over R (`representation_attentions`), see [`ReadOnceEncoderOutput`];
                default: the config's.
            return_dict (`bool`, *optional*, keyword): return a tuple when False (as BART's encoder).

        Returns:
            [`ReadOnceEncoderOutput`] (`last_hidden_state` `(batch_size, text_length + m, d_model)` and the combined
            `attention_mask`).

        Raises:
            ValueError: representations of the wrong hidden size or batch, a mask of the wrong shape; `input_ids`
                that are not 2-D (`inputs_embeds` not 3-D) or are empty; a token id of
                `input_ids` outside `[0, vocab_size)`, naming it and the vocabulary size (checked when the embedding
                lookup fails).
            TypeError: `input_ids` that are not integer token ids; an argument that is not a tensor (a list, a numpy
                array); a keyword argument it does not take (a misspelling such as `atention_mask=` or
                `document_representation=`), named with the argument it probably meant. Accepted besides its own:
                what [`_check_keyword_arguments`] accepts, and the arguments of
                [`ReadOnceBartForConditionalGeneration.forward`], which `generate()` hands on to this encoder (e.g.
                the `labels` of `Seq2SeqTrainer`'s `predict_with_generate`).
        """
        kwargs.pop(_REPRESENTATION_SWITCH, None)  # read by `capture_outputs`, not by the layers
        _check_keyword_arguments(self, kwargs, passed_to=(ReadOnceBartForConditionalGeneration.forward,))
        # what the layers record is `capture_outputs`'s (hooks); `output_attentions` goes on to the attention
        # functions, as in BART, so that one without weights says so (transformers' SDPA warning)
        kwargs.pop("output_hidden_states", None)
        _check_tensor_arguments({"input_ids": input_ids}, {"attention_mask": attention_mask,
                                                           "inputs_embeds": inputs_embeds,
                                                           "document_attention_mask": document_attention_mask})
        _check_representations_type(document_representations)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` or `inputs_embeds`.")
        _check_text_inputs(input_ids, attention_mask)
        _check_batch_of_texts(input_ids, "input_ids")
        _check_batch_of_texts(inputs_embeds, "inputs_embeds", dims=3)
        length = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        if length > self.config.max_position_embeddings:
            raise ValueError(f"`{'input_ids' if input_ids is not None else 'inputs_embeds'}` hold {length} tokens, "
                             f"more than the model's {self.config.max_position_embeddings}"
                             " positions: truncate the question / task text (`max_length` in the tokenizer); documents"
                             " of any length go to `document_input_ids` or `encode_documents`, read in chunks.")
        if inputs_embeds is None:
            try:
                inputs_embeds = self.embed_tokens(input_ids)
            except (IndexError, RuntimeError):  # torch's "index out of range": name the argument and the bound
                _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
                raise
        batch, text_length = inputs_embeds.shape[:2]
        if attention_mask is None:
            attention_mask = torch.ones(batch, text_length, dtype=torch.long, device=inputs_embeds.device)
        representations, rep_mask = _unpack_representations(
            document_representations, document_attention_mask, batch, self.config.d_model
        )
        hidden_states = inputs_embeds + self.embed_positions(inputs_embeds[:, :, -1]).to(inputs_embeds.device)
        hidden_states = self.layernorm_embedding(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        mask = attention_mask
        layer_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=mask)
        append_at = self.config.append_layer  # L question-only layers, then R is appended (Fig. 3)
        fused = self.config.fusion == "attention" and representations is not None
        appending = not fused and representations is not None
        for index, layer in enumerate(self.layers):
            extra = ()
            if fused and index >= append_at:  # eq. 4: attend to R beside the text, keep the text's length
                extra = (representations, rep_mask)  # positional: see ReadOnceBartEncoderLayer
            elif appending and index == append_at:  # Fig. 3: append R to the text after layer L
                hidden_states, mask, layer_mask = self._append(hidden_states, attention_mask, representations, rep_mask)
            if self.training and self.layerdrop > 0.0 and torch.rand([]) < self.layerdrop:
                continue
            hidden_states = layer(hidden_states, layer_mask, *extra, **kwargs)
        if appending and append_at == len(self.layers):  # L = N: appended after the last encoder layer
            hidden_states, mask, _ = self._append(hidden_states, attention_mask, representations, rep_mask)
        if fused:
            return ReadOnceEncoderOutput(last_hidden_state=hidden_states, attention_mask=mask,
                                         document_representations=representations, document_attention_mask=rep_mask)
        return ReadOnceEncoderOutput(last_hidden_state=hidden_states, attention_mask=mask)


    def _append(self, hidden_states, attention_mask, representations, rep_mask):
        """`[H^L ; R]` and its masks: `(hidden (batch, q + m, d_model), mask (batch, q + m), 4-D layer mask)`."""
        hidden_states = torch.cat([hidden_states, representations.to(hidden_states.dtype)], dim=1)
        mask = torch.cat([attention_mask, rep_mask.to(attention_mask.dtype)], dim=1)
        layer_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=mask)
        return hidden_states, mask, layer_mask


def _encoder_output_from_tuple(encoder_outputs) -> ReadOnceEncoderOutput:
    """The [`ReadOnceEncoderOutput`] of a tuple (or list) `encoder_outputs`, as BART wraps a tuple in a
    `BaseModelOutput`: what [`ReadOnceBartEncoder`] returns with `return_dict=False` (the output's values, `None`
    left out: `last_hidden_state`; the tensors `attention_mask`, the cross-attention mask, and with
    `fusion="attention"` `document_representations` and `document_attention_mask`; the recorded tuples, in the order
    `hidden_states`, `attentions`, `representation_attentions`, each when asked), or BART's `(last_hidden_state,
    hidden_states?, attentions?)`. Read by position, the combined mask and R were lost: a size error in
    cross-attention, or a decoder that silently did not attend to R."""
    last_hidden_state, *rest = encoder_outputs
    recorded = [value for value in rest if isinstance(value, (tuple, list))]
    tensors = [value for value in rest if torch.is_tensor(value)]
    hidden_states = None
    # hidden states are (batch, length, d_model) and never empty; attention weights (both kinds) are 4-D, and the
    # weights of Attn' are recorded only with those of Attn, after them
    if recorded and any(torch.is_tensor(value) and value.dim() == 3 for value in recorded[0]):
        hidden_states, recorded = recorded[0], recorded[1:]
    attentions, representation_attentions = (recorded + [None] * 2)[:2]
    attention_mask, representations, representation_mask = (tensors + [None] * 3)[:3]
    return ReadOnceEncoderOutput(
        last_hidden_state=last_hidden_state, hidden_states=hidden_states, attentions=attentions,
        attention_mask=attention_mask, document_representations=representations,
        document_attention_mask=representation_mask, representation_attentions=representation_attentions,
    )


def _unpack_representations(representations, mask, batch: int, d_model: int):
    if representations is None:
        if mask is not None:
            raise ValueError("`document_attention_mask` was given without `document_representations`.")
        return None, None
    if isinstance(representations, ReadOnceDocumentEncoderOutput):
        mask = representations.attention_mask if mask is None else mask
        representations = representations.representations
    _check_representations_type(representations)
    if representations is None or representations.dim() != 3:  # None: an output object without its tensor
        raise ValueError("`document_representations` must be a (batch, m, d_model) tensor or ReadOnceDocumentEncoderOutput.")
    if representations.shape[-1] != d_model:
        raise ValueError(f"`document_representations` have hidden size {representations.shape[-1]}, the model "
                         f"expects d_model={d_model}: were they made by another model?")
    if representations.shape[0] != batch:
        raise ValueError(f"`document_representations` hold {representations.shape[0]} documents for a batch of "
                         f"{batch} texts.")
    if mask is None:
        mask = torch.ones(representations.shape[:2], dtype=torch.long, device=representations.device)
    if tuple(mask.shape) != tuple(representations.shape[:2]):
        raise ValueError(f"`document_attention_mask` {tuple(mask.shape)} must be (batch, m) = "
                         f"{tuple(representations.shape[:2])}.")
    return representations, mask


class ReadOnceBartModel(ReadOnceBartPreTrainedModel, BartModel):
    r"""[`~transformers.BartModel`] whose encoder is [`ReadOnceBartEncoder`], the representation+text model of §3.2
    (Fig. 3): the decoder cross-attends to the question states and the representation states (the combined mask of
    [`ReadOnceEncoderOutput`]); with `fusion="attention"` (App. A.1) the decoder is [`ReadOnceBartDecoder`].

    It is the `model` of [`ReadOnceBartForConditionalGeneration`] and what `AutoModel` loads: `AutoModel.from_pretrained`
    of a ReadOnce checkpoint (`trust_remote_code=True` where hf-readonce is not installed) gives this model with the
    checkpoint's `model.*` weights (BART's `base_model_prefix`), as `AutoModel` gives a `BartModel` for a
    `BartForConditionalGeneration` checkpoint; the document encoder and the LM head are left out (the documents come
    as `document_representations`, e.g. from the full model's `encode_documents` or a store). Its outputs are the
    full model's `model` outputs. A plain BART checkpoint loads too (with `fusion="attention"`, the representation
    attention starts as a copy of the self-attention, as in the full model).

    Token tables as in `BartModel`, whatever the fusion: with `config.tie_word_embeddings=True` (the default, and
    what the converter writes) the encoder and the decoder read the one `shared` table, `(vocab_size, d_model)`; with
    `False`, `shared`, the encoder's and the decoder's `embed_tokens` are three parameters, each loaded from its
    checkpoint key (a checkpoint holding only `shared` gives it to both, [`ReadOnceBartPreTrainedModel.tie_weights`]).
    The document encoder of [`ReadOnceBartForConditionalGeneration`] has its own table either way.
    """

    # a ReadOnce checkpoint (of the full model) also holds what this model leaves out
    _keys_to_ignore_on_load_unexpected = [*BartModel._keys_to_ignore_on_load_unexpected, r"^document_encoder\.",
                                          r"^final_logits_bias$", r"^lm_head\."]

    def __init__(self, config: ReadOnceBartConfig):
        super().__init__(config)
        self.encoder = ReadOnceBartEncoder(config)
        if config.fusion == "attention":
            self.decoder = ReadOnceBartDecoder(config)
        if config.tie_word_embeddings:  # one table for all; untied, each keeps its own, as in `BartModel`
            self.encoder.embed_tokens = self.shared
            if config.fusion == "attention":  # BART's own decoder: its `embed_tokens` module, tied to `shared`
                self.decoder.embed_tokens = self.shared
        self._honour_layer_norm_eps()
        self.post_init()
        self.initialize_representation_attention()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        r"""[`~transformers.PreTrainedModel.from_pretrained`]; from a checkpoint without App. A.1's weights (a plain
        BART with `fusion="attention"`), the representation attention starts as a copy of the self-attention."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        fusion_missing = [key for key in info["missing_keys"] if ".representation_attn." in key]
        if fusion_missing:
            model.initialize_representation_attention()
            info["missing_keys"] = [key for key in info["missing_keys"] if key not in set(fusion_missing)]
        return (model, info) if want_info else model

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values=None, document_representations=None,
                document_attention_mask=None, decoder_inputs_embeds=None, use_cache=None, cache=None,
                inputs_embeds=None, **kwargs) -> ReadOnceSeq2SeqModelOutput:
        r"""As [`~transformers.BartModel.forward`], plus `document_representations` / `document_attention_mask`
        (see [`ReadOnceBartEncoder`]).

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, text_length)`): the question / task text.
            attention_mask (`torch.Tensor` of shape `(batch_size, text_length)`, *optional*).
            decoder_input_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*): without them
                (and without `decoder_inputs_embeds`), `input_ids` shifted right, as in BART.
            decoder_attention_mask (`torch.Tensor` of shape `(batch_size, target_length)`, *optional*).
            encoder_outputs ([`ReadOnceEncoderOutput`], *optional*): the encoder's output, computed once (what
                `generate` passes); its `attention_mask` is the cross-attention mask. The tuple the encoder returns
                with `return_dict=False` is read as that output (its fields in order, `None` left out).
            past_key_values (`EncoderDecoderCache`, *optional*), cache: the decoder's KV cache; `cache` is its name
                from transformers 5.24 on. Either name, not both.
            document_representations (`(batch_size, m, d_model)` tensor or [`ReadOnceDocumentEncoderOutput`],
                *optional*), document_attention_mask (`torch.Tensor` of shape `(batch_size, m)`, *optional*): the
                documents' representations; without them the model reads the text alone (BART closed-book). A
                [`ReadOnceDocumentEncoderOutput`]'s fingerprint is not checked here (this model has no document
                encoder): the full model checks it.
            decoder_inputs_embeds (`(batch_size, target_length, d_model)`, *optional*), use_cache: as in BART.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, text_length, d_model)`, *optional*): instead of
                `input_ids`, as in BART; last in the signature, so that positional calls keep their meaning.
            output_attentions, output_hidden_states (`bool`, *optional*, keyword): reach the encoder and the decoder,
                as in BART (attention weights need `attn_implementation="eager"`); with `fusion="attention"`,
                `output_attentions` also returns the weights of `Attn'` over R ([`ReadOnceSeq2SeqModelOutput`]).

            return_dict (`bool`, *optional*, keyword): return a tuple when False (`@can_return_tuple`, as
                `BartModel`).

        Returns:
            [`ReadOnceSeq2SeqModelOutput`], BART's `Seq2SeqModelOutput` with its fields in their order:
            `last_hidden_state` `(batch_size, target_length, d_model)` (the decoder's), its cache (`past_key_values`,
            `cache` from transformers 5.24), and `encoder_last_hidden_state` `(batch_size, text_length + m, d_model)`
            (`fusion="append"`; `(batch_size, text_length, d_model)` with `fusion="attention"`); last, with
            `fusion="attention"` and `output_attentions=True`, the weights of `Attn'` over R
            (`encoder_representation_attentions`, `decoder_representation_attentions`).

        Raises:
            TypeError: an input that is not a tensor (a list, a numpy array), or token ids that are not integers; a
                keyword argument it does not take (a misspelling such as `encoder_output=`), named with the argument
                it probably meant; `encoder_outputs` that are a [`ReadOnceDocumentEncoderOutput`] (representations,
                which go in as `document_representations`).
            ValueError: as [`ReadOnceBartEncoder.forward`] (`input_ids` not 2-D or empty, also before they are
                shifted into the decoder's inputs); neither decoder inputs nor `input_ids`; `decoder_input_ids`
                that are not 2-D (`decoder_inputs_embeds` not 3-D) or are empty; decoder rows that do not match the
                encoder's batch; a decoder token id outside `[0, vocab_size)`, naming it and the
                vocabulary size (checked when the embedding lookup fails); both `past_key_values` and `cache`; `token_type_ids` marking a
                second segment; a keyword of `TransformersKwargs` it does not read ([`_BART_MODEL_UNREAD_KEYWORDS`]:
                those of [`ReadOnceBartForConditionalGeneration.forward`], and `num_items_in_batch`: no loss here).
        """
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _BART_MODEL_UNREAD_KEYWORDS)
        _check_no_token_types(self, kwargs.pop("token_type_ids", None), _READONCE_SECOND_TEXT)
        _check_tensor_arguments({"input_ids": input_ids, "decoder_input_ids": decoder_input_ids},
                                {"attention_mask": attention_mask, "decoder_attention_mask": decoder_attention_mask,
                                 "document_attention_mask": document_attention_mask,
                                 "decoder_inputs_embeds": decoder_inputs_embeds})
        _check_representations_type(document_representations)
        _check_encoder_outputs_type(encoder_outputs)
        past_key_values = _either_cache(past_key_values, cache)
        if decoder_input_ids is None and decoder_inputs_embeds is None:  # BART's default
            if input_ids is None:
                raise ValueError("Pass `decoder_input_ids` or `decoder_inputs_embeds`, or `input_ids` (shifted "
                                 "right into the decoder's inputs, as in BART).")
            _check_batch_of_texts(input_ids, "input_ids")  # before BART's shift reads its second axis
            decoder_input_ids = shift_tokens_right(input_ids, self.config.pad_token_id,
                                                   self.config.decoder_start_token_id)
        if isinstance(encoder_outputs, (tuple, list)):  # the encoder's `return_dict=False` output, or BART's
            encoder_outputs = _encoder_output_from_tuple(encoder_outputs)
        if encoder_outputs is None:
            asked = {key: kwargs[key] for key in ("output_attentions", "output_hidden_states") if key in kwargs}
            encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                                           document_representations=document_representations,
                                           document_attention_mask=document_attention_mask, return_dict=True, **asked)
        cross_mask = getattr(encoder_outputs, "attention_mask", None)
        if cross_mask is None:
            cross_mask = attention_mask
        _check_batch_of_texts(decoder_input_ids, "decoder_input_ids")  # BART would fail unpacking their shape
        _check_batch_of_texts(decoder_inputs_embeds, "decoder_inputs_embeds", dims=3)
        _check_decoder_batch(decoder_input_ids, decoder_inputs_embeds, encoder_outputs[0],
                             self.config.max_position_embeddings)
        representations = getattr(encoder_outputs, "document_representations", None)
        if representations is not None:  # fusion="attention": every decoder layer attends to R too (App. A.1)
            kwargs["document_representations"] = representations
            kwargs["document_attention_mask"] = encoder_outputs.document_attention_mask
        try:
            decoder_outputs = self.decoder(
                input_ids=decoder_input_ids, attention_mask=decoder_attention_mask,
                encoder_hidden_states=encoder_outputs[0], encoder_attention_mask=cross_mask,
                inputs_embeds=decoder_inputs_embeds, use_cache=use_cache, **{CACHE_NAME: past_key_values}, **kwargs,
            )
        except (IndexError, RuntimeError):  # torch's "index out of range": name the argument and the bound
            _check_token_ids(decoder_input_ids, self.config.vocab_size, "decoder_input_ids` / `labels")
            raise
        return ReadOnceSeq2SeqModelOutput(
            last_hidden_state=decoder_outputs[0], **{CACHE_NAME: getattr(decoder_outputs, CACHE_NAME, None)},
            decoder_hidden_states=getattr(decoder_outputs, "hidden_states", None),
            decoder_attentions=getattr(decoder_outputs, "attentions", None),
            cross_attentions=getattr(decoder_outputs, "cross_attentions", None),
            encoder_last_hidden_state=encoder_outputs[0],
            encoder_hidden_states=getattr(encoder_outputs, "hidden_states", None),
            encoder_attentions=getattr(encoder_outputs, "attentions", None),
            encoder_representation_attentions=getattr(encoder_outputs, "representation_attentions", None),
            decoder_representation_attentions=getattr(decoder_outputs, "representation_attentions", None),
        )


class ReadOnceBartForConditionalGeneration(ReadOnceBartPreTrainedModel, BartForConditionalGeneration):
    r"""
    ReadOnce Transformer on BART (Lin et al. 2021): `document_encoder` ([`ReadOnceBartDocumentEncoder`]) compresses
    documents once; `model` (a BART with [`ReadOnceBartEncoder`]) answers or summarizes from the text input and the
    representations; `lm_head` as in BART. Parameter names under `model.*` and `lm_head` are BART's, so
    `from_pretrained(<any BART checkpoint>)` loads BART into the representation+text model and copies BART's encoder
    into the document encoder (the paper's initialization); the aggregation starts as a uniform weighted sum.

    `generate(input_ids=question_ids, attention_mask=..., document_representations=...,
    document_attention_mask=...)` works with greedy and beam search and batches: the representations reach the
    encoder through `get_encoder()` and the combined cross-attention mask travels inside `encoder_outputs`.
    """

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: ReadOnceBartConfig):
        ReadOnceBartPreTrainedModel.__init__(self, config)
        self.model = ReadOnceBartModel(config)
        self.document_encoder = ReadOnceBartDocumentEncoder(config)
        self.final_logits_bias = nn.Buffer(torch.zeros((1, self.model.shared.num_embeddings)))
        self.lm_head = nn.Linear(config.d_model, self.model.shared.num_embeddings, bias=False)
        self._honour_layer_norm_eps()
        self.post_init()
        self.initialize_representation_attention()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        r"""[`~transformers.PreTrainedModel.from_pretrained`]; from a plain BART checkpoint (no document encoder
        weights), the document encoder is initialized as a copy of BART's encoder (§3)."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        missing = [key for key in info["missing_keys"] if key.startswith("document_encoder.encoder.")]
        if missing:
            model.initialize_document_encoder()
        fusion_missing = [key for key in info["missing_keys"] if ".representation_attn." in key]
        if fusion_missing:  # a checkpoint without App. A.1 weights: Attn' starts as a copy of Attn
            model.initialize_representation_attention()
        done = set(missing) | set(fusion_missing)
        info["missing_keys"] = [key for key in info["missing_keys"] if key not in done]
        return (model, info) if want_info else model

    def initialize_document_encoder(self) -> None:
        r"""Copy the representation+text model's encoder (BART's weights; not App. A.1's `representation_attn`) into
        the document encoder, the paper's initialization (§3: both parts start from the same BART, separate
        weights). Called by `from_pretrained` for checkpoints without a document encoder and by the BERT->BART
        converter."""
        state = {name: tensor for name, tensor in self.model.encoder.state_dict().items()
                 if ".representation_attn." not in name}
        self.document_encoder.encoder.load_state_dict(state)

    def get_encoder(self):
        """The representation+text model's encoder ([`ReadOnceBartEncoder`]), what `generate` runs once."""
        return self.model.encoder

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        r"""[`~transformers.PreTrainedModel.resize_token_embeddings`] for every token table of the model: BART's
        (`model.shared`, the encoder's and decoder's, `lm_head`, `final_logits_bias`) and the document encoder's own
        (`document_encoder.encoder.embed_tokens`, separate weights), so that documents may hold the added tokens and
        the saved checkpoint loads again (its `vocab_size` is that of every table).

        Args:
            new_num_tokens (`int`, *optional*), pad_to_multiple_of (`int`, *optional*), mean_resizing (`bool`,
                defaults to `True`): as in transformers; the document encoder's added rows are drawn from its own
                embeddings' mean and covariance (or as at initialization with `mean_resizing=False`).

        Returns:
            `torch.nn.Embedding`: the input embeddings (`model.shared`).
        """
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        document_embeddings = self.document_encoder.encoder.embed_tokens
        if document_embeddings.num_embeddings != embeddings.num_embeddings:
            requires_grad = document_embeddings.weight.requires_grad
            resized = self._get_resized_embeddings(document_embeddings, embeddings.num_embeddings,
                                                   mean_resizing=mean_resizing)
            resized.requires_grad_(requires_grad)
            self.document_encoder.encoder.embed_tokens = resized
        self.document_encoder.config.vocab_size = embeddings.num_embeddings
        return embeddings

    def freeze_document_encoder(self, freeze: bool = True) -> None:
        """Stop (or restart) training the document encoder, for downstream fine-tuning on precomputed
        representations (§3.4)."""
        for parameter in self.document_encoder.parameters():
            parameter.requires_grad_(not freeze)

    def representation_fingerprint(self) -> str:
        """The fingerprint of the representations this model's document encoder computes; see
        [`ReadOnceBartDocumentEncoder.representation_fingerprint`]."""
        return self.document_encoder.representation_fingerprint()

    def encode_documents(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                         compression_ratio: int | None = None, output_attentions: bool | None = None,
                         output_hidden_states: bool | None = None) -> ReadOnceDocumentEncoderOutput:
        r"""Read documents once: `(batch, n)` token ids -> [`ReadOnceDocumentEncoderOutput`] with
        `(batch, ceil(n / k), d_model)` vectors (Fig. 2, eq. 1-2; documents longer than T read in chunks, §5.5).

        Args:
            input_ids (`torch.LongTensor` of shape `(batch, n)`), attention_mask (`(batch, n)`, *optional*).
            compression_ratio (`int`, *optional*): k at inference (§5.2), default `config.compression_ratio`.
            output_attentions (`bool`, *optional*): also return the document encoder's attention weights, one
                `(batch, num_chunks, num_heads, chunk_length, chunk_length)` tensor per layer (`attentions` of
                [`ReadOnceDocumentEncoderOutput`]; `attn_implementation="eager"`). Defaults to
                `config.output_attentions`.
            output_hidden_states (`bool`, *optional*): also return the document encoder's embeddings and layer
                outputs, `encoder_layers + 1` tensors `(batch, num_chunks, chunk_length, d_model)` (`hidden_states` of
                [`ReadOnceDocumentEncoderOutput`]). Defaults to `config.output_hidden_states`.

        Raises:
            TypeError: `input_ids` that are not integer ids, or `input_ids` / `attention_mask` that are not tensors (a
                list, a numpy array); an `output_attentions` or `output_hidden_states` that is not a bool.
            ValueError: an empty or non-2-D `input_ids`, a mask of another shape, an empty document, a k that is not
                a positive int or does not divide the chunk overlap (see [`ReadOnceBartDocumentEncoder.forward`]).
        """
        return self.document_encoder(input_ids, attention_mask=attention_mask, compression_ratio=compression_ratio,
                                     output_attentions=output_attentions, output_hidden_states=output_hidden_states)

    def optimizer_parameter_groups(self, bart_learning_rate: float = 1e-5, new_learning_rate: float = 1e-4,
                                   weight_decay: float = 0.0) -> list[dict]:
        r"""Parameter groups with the paper's learning rates (§4.1): 1e-5 for weights that come from BART, 1e-4 for
        the new ones (the aggregation). Frozen parameters are left out.

        Returns:
            `list[dict]` for `torch.optim.AdamW(groups)` (or `Trainer(optimizers=...)`).
        """
        new, old = [], []
        for name, parameter in self.named_parameters():
            if parameter.requires_grad:
                (new if name.startswith("document_encoder.aggregation.") else old).append(parameter)
        return [{"params": old, "lr": bart_learning_rate, "weight_decay": weight_decay},
                {"params": new, "lr": new_learning_rate, "weight_decay": weight_decay}]

    @torch.no_grad()
    def generate(self, *args, **kwargs):
        r"""`GenerationMixin.generate`, with the documents given either way: as `document_representations` (read
        once, e.g. from a store) or as raw `document_input_ids` (+ `document_input_attention_mask`), which are
        encoded here once, before decoding starts (generation's encoder runs once, so the document must be turned
        into its representations first: passed on to every decoding step, raw tokens would never reach it).
        `token_type_ids`, which a BERT tokenizer returns with the ids (`model.generate(**tokenizer(question,
        return_tensors="pt"), document_representations=...)`), are dropped: BART has no token types, and `forward`
        ignores them too (`GenerationMixin` would refuse them as unused).

        Raises:
            ValueError: both `document_representations` and `document_input_ids`; `document_attention_mask` given
                for `document_input_ids`; documents with `encoder_outputs` (the encoder has read the text already:
                the documents could no longer reach it); `assistant_model` (assisted decoding) with documents or
                `encoder_outputs` (the assistant runs its own `generate` and encoder on this call's inputs, which
                cannot carry the documents to it; `prompt_lookup_num_tokens` works); as `forward`. A question without documents
                takes an `assistant_model` (then this is BART's assisted decoding, the greedy tokens).
            TypeError: `input_ids` (or `inputs`), a mask, `document_input_ids` or `document_representations` that are
                not tensors (a list, a numpy array); token ids that are not integers; `encoder_outputs` that are a
                [`ReadOnceDocumentEncoderOutput`] (pass it as `document_representations`).
        """
        kwargs.pop("token_type_ids", None)
        documents = [name for name in ("document_representations", "document_input_ids", "encoder_outputs")
                     if kwargs.get(name) is not None]
        if kwargs.get("assistant_model") is not None and documents:
            raise ValueError(f"`assistant_model` (assisted decoding) is not supported by ReadOnce BART with "
                             f"`{documents[0]}`: the assistant runs its own `generate` and encoder on this call's "
                             "inputs, which cannot carry the documents to it. Generate without it, or use "
                             "`prompt_lookup_num_tokens=` for speculative decoding from the prompt.")
        _check_encoder_outputs_type(kwargs.get("encoder_outputs"))
        if kwargs.get("encoder_outputs") is not None and any(
                kwargs.get(name) is not None for name in ("document_representations", "document_input_ids")):
            raise ValueError("Pass the documents with the text (`document_representations` or `document_input_ids`, "
                             "read by the encoder once) or `encoder_outputs` (the encoder's output, which holds them "
                             "already), not both: the encoder does not run again.")
        _check_tensor_arguments(
            {"input_ids": args[0] if args else kwargs.get("input_ids"), "inputs": kwargs.get("inputs"),
             "document_input_ids": kwargs.get("document_input_ids"),
             "decoder_input_ids": kwargs.get("decoder_input_ids")},
            {name: kwargs.get(name) for name in ("attention_mask", "document_attention_mask",
                                                 "document_input_attention_mask", "decoder_attention_mask")})
        _check_representations_type(kwargs.get("document_representations"))
        document_input_ids = kwargs.pop("document_input_ids", None)
        document_input_mask = kwargs.pop("document_input_attention_mask", None)
        if document_input_ids is not None:
            kwargs["document_representations"] = self._encode_document_tokens(
                document_input_ids, document_input_mask, kwargs.get("document_representations"),
                kwargs.get("document_attention_mask"))
        elif document_input_mask is not None:
            raise ValueError("`document_input_attention_mask` was given without `document_input_ids`.")
        return super().generate(*args, **kwargs)

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

    def _encode_document_tokens(self, document_input_ids, document_input_attention_mask, document_representations,
                                document_attention_mask):
        """Raw document tokens (`document_input_ids` `(batch, n)` and their mask) encoded here by the document
        encoder, for `forward` (with gradients: joint training, §3.3) and `generate` (once, before decoding). Encoded
        inside the model and never leaving it, so no fingerprint is hashed (or checked).

        Raises:
            ValueError: `document_representations` given too, `document_attention_mask` given for the tokens (their
                mask is `document_input_attention_mask`), or a mask of another shape than the tokens.
            TypeError: tokens that are not integer ids, tokens or their mask that are not tensors.
        """
        if document_representations is not None:
            raise ValueError("Pass `document_representations` or `document_input_ids`, not both.")
        if document_attention_mask is not None:
            raise ValueError("`document_attention_mask` is the mask of `document_representations`; the mask of "
                             "`document_input_ids` is `document_input_attention_mask`.")
        _check_tensor_arguments({"document_input_ids": document_input_ids},
                                {"document_input_attention_mask": document_input_attention_mask})
        _check_text_inputs(document_input_ids, document_input_attention_mask, "document_input_ids",
                           "document_input_attention_mask")
        # the document encoder's attentions and hidden states are not part of `forward`'s output
        # (`encode_documents` returns them)
        return self.document_encoder(document_input_ids, attention_mask=document_input_attention_mask,
                                     with_fingerprint=False, output_attentions=False, output_hidden_states=False)

    def _check_fingerprint(self, document_representations):
        if isinstance(document_representations, ReadOnceDocumentEncoderOutput) and \
                document_representations.model_fingerprint is not None:
            mine = self.representation_fingerprint()
            if document_representations.model_fingerprint != mine:
                raise ValueError(
                    f"`document_representations` were made by document encoder "
                    f"{document_representations.model_fingerprint[:16]}..., this model's is {mine[:16]}...: "
                    "re-encode the documents with this model."
                )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        document_representations: torch.Tensor | ReadOnceDocumentEncoderOutput | None = None,
        document_attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.LongTensor | None = None,
        encoder_outputs=None,
        past_key_values=None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        document_input_ids: torch.LongTensor | None = None,
        document_input_attention_mask: torch.Tensor | None = None,
        cache=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ReadOnceSeq2SeqLMOutput:
        # The text and document arguments and their docs repeat ReadOnceBartEncoder.forward's: this forward passes them
        # through, and transformers documents each public forward in full.
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, text_length)`): the question / task text.
            attention_mask (`torch.Tensor` of shape `(batch_size, text_length)`, *optional*).
            document_representations (`(batch_size, m, d_model)` tensor or [`ReadOnceDocumentEncoderOutput`], *optional*):
                precomputed representations (from `encode_documents` or a store). Only a
                [`ReadOnceDocumentEncoderOutput`] carries the encoder's fingerprint, so only it is checked against
                this model's document encoder; a bare tensor is trusted as given.
            document_attention_mask (`torch.Tensor` of shape `(batch_size, m)`, *optional*).
            document_input_ids (`torch.LongTensor` of shape `(batch_size, n)`, *optional*): raw document tokens,
                encoded here with gradients (joint training of both parts, §3.3) when no representations are given.
                With neither representations nor document tokens the model reads the text alone (BART closed-book),
                as `BartForConditionalGeneration` would.
            document_input_attention_mask (`torch.Tensor` of shape `(batch_size, n)`, *optional*).
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, text_length, d_model)`, *optional*, keyword):
                the text's embeddings instead of `input_ids` (exactly one of the two), as in BART.
            labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*): target tokens (`-100`
                ignored); decoder inputs are the labels shifted right (unless `decoder_input_ids` or
                `decoder_inputs_embeds` are given), as in BART.
            num_items_in_batch (`int` or `torch.Tensor`, *optional*, keyword): with `labels`, the loss is the sum of
                the target tokens' cross-entropies divided by it (what `Trainer` passes: the number of targets of all
                the batches it accumulates for one step), instead of their mean, as transformers' causal LMs take it
                (`BartForConditionalGeneration` does not read it, so `Trainer` trained it with the gradients of the
                accumulated batches added).
            token_type_ids (`torch.LongTensor`, *optional*, keyword): what a BERT tokenizer returns with the ids; all
                zeros (one text) are accepted and not read, a second segment is refused.
            cache_position (keyword): accepted, not read: the decoder's positions follow its cache, as in
                transformers' BART (from 5.24 on, BART reads none; `generate()` of earlier releases passes it).
            past_key_values (`EncoderDecoderCache`, *optional*), cache: the decoder's KV cache, as in BART; `cache`
                is its name from transformers 5.24 on (what `generate` passes there). Either name, not both.
            output_attentions, output_hidden_states (`bool`, *optional*, keyword): as in BART (default: the config's):
                `encoder_attentions` / `encoder_hidden_states` as [`ReadOnceEncoderOutput`] describes them (R appended
                after layer L with `fusion="append"`), and the decoder's `decoder_attentions`, `cross_attentions`
                (over the text and, with `fusion="append"`, the representations) and `decoder_hidden_states`.
                Attention weights need `attn_implementation="eager"`; with `fusion="attention"` they are those of each
                fused self-attention's `Attn` (eq. 4), and those of `Attn'` over R are returned apart, in
                `encoder_representation_attentions` (one `(batch_size, num_heads, text_length, m)` tensor per fused
                encoder layer) and `decoder_representation_attentions` (one `(batch_size, num_heads, target_length,
                m)` tensor per decoder layer). `generate(..., return_dict_in_generate=True,
                output_attentions=True)` does not return `Attn'`'s weights (transformers' generation output has no
                field for them). The document encoder's own layers (with
                `document_input_ids`) are not returned: `encode_documents(..., output_attentions=True,
                output_hidden_states=True)` returns them.

            return_dict (`bool`, *optional*, keyword): return a tuple when False (`@can_return_tuple`, as
                `BartForConditionalGeneration`).

        Returns:
            [`ReadOnceSeq2SeqLMOutput`]: BART's `Seq2SeqLMOutput` with its fields in their order, the loss first when
            `labels` are given (its cache field is `past_key_values`, `cache` from transformers 5.24), and last the
            weights of `Attn'` over R (`fusion="attention"`, `output_attentions=True`).

        Raises:
            ValueError: representations from another document encoder, of the wrong hidden size or batch; both
                representations and document tokens given; both `past_key_values` and `cache`; a mask whose shape
                differs from its ids'; `labels` / `decoder_input_ids` with another number of rows than the input;
                `input_ids`, `labels` or `decoder_input_ids` that are not 2-D or are empty (as
                [`ReadOnceBartEncoder.forward`]); `num_items_in_batch` without `labels`, `decoder_input_ids` or
                `decoder_inputs_embeds` ([`_check_loss_count_has_decoder_inputs`]);
                `token_type_ids` marking a second segment ([`_check_no_token_types`]); a keyword of
                `TransformersKwargs` it does not read ([`_BART_UNREAD_KEYWORDS`]): `position_ids`, `is_causal`,
                `logits_to_keep` other than 0, flash attention's packed-sequence arguments (`cu_seq_lens_q`, ...,
                `seq_idx`), `output_router_logits=True`.
            TypeError: token ids or `labels` that are not integers; an input, a mask or `labels` that is not a tensor
                (a list, a numpy array); a keyword argument it does not take (a misspelling such as
                `document_representation=` or `encoder_output=`), named with the argument it probably meant.
        """
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _BART_UNREAD_KEYWORDS)
        _check_no_token_types(self, kwargs.pop("token_type_ids", None), _READONCE_SECOND_TEXT)
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        _check_loss_count_has_decoder_inputs(self, num_items_in_batch, labels, decoder_input_ids,
                                             kwargs.get("decoder_inputs_embeds"))
        _check_tensor_arguments({"input_ids": input_ids, "labels": labels, "decoder_input_ids": decoder_input_ids,
                                 "document_input_ids": document_input_ids},
                                {"attention_mask": attention_mask, "document_attention_mask": document_attention_mask,
                                 "decoder_attention_mask": decoder_attention_mask,
                                 "document_input_attention_mask": document_input_attention_mask})
        _check_representations_type(document_representations)
        _check_text_inputs(labels, None, "labels")
        _check_batch_of_texts(labels, "labels")
        past_key_values = _either_cache(past_key_values, cache)
        if document_input_ids is not None:
            document_representations = self._encode_document_tokens(
                document_input_ids, document_input_attention_mask, document_representations, document_attention_mask)
        self._check_fingerprint(document_representations)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and kwargs.get("decoder_inputs_embeds") is None:  # BART's default
                decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id,
                                                       self.config.decoder_start_token_id)
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
            document_representations=document_representations, document_attention_mask=document_attention_mask,
            use_cache=use_cache, **{CACHE_NAME: past_key_values}, **kwargs, return_dict=True,
        )
        hidden_states = outputs.last_hidden_state
        logits = self.lm_head(hidden_states) + self.final_logits_bias.to(hidden_states.device)
        loss = None
        if labels is not None:
            # the mean over the target tokens, or, given `num_items_in_batch` (`Trainer`'s count of the targets of all
            # the batches it accumulates), their sum divided by it, as transformers' own losses take it
            loss = nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                               labels.to(logits.device).reshape(-1), ignore_index=-100,
                                               reduction="mean" if num_items_in_batch is None else "sum")
            if num_items_in_batch is not None:
                loss = loss / (num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch)
                               else num_items_in_batch)
        return ReadOnceSeq2SeqLMOutput(
            loss=loss, logits=logits, encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            decoder_hidden_states=outputs.decoder_hidden_states, decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions, encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            encoder_representation_attentions=outputs.encoder_representation_attentions,
            decoder_representation_attentions=outputs.decoder_representation_attentions,
            **{CACHE_NAME: getattr(outputs, CACHE_NAME)},
        )


ReadOnceBartConfig.register_for_auto_class()
ReadOnceBartModel.register_for_auto_class("AutoModel")
ReadOnceBartForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "ReadOnceAggregation",
    "ReadOnceBartDecoder",
    "ReadOnceBartDecoderLayer",
    "ReadOnceBartDocumentEncoder",
    "ReadOnceBartEncoder",
    "ReadOnceBartEncoderLayer",
    "ReadOnceBartForConditionalGeneration",
    "ReadOnceBartFusedAttention",
    "ReadOnceBartModel",
    "ReadOnceBartPreTrainedModel",
    "ReadOnceDecoderOutput",
    "ReadOnceDocumentEncoderOutput",
    "ReadOnceEncoderOutput",
    "ReadOnceSeq2SeqLMOutput",
    "ReadOnceSeq2SeqModelOutput",
]
