# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""PyTorch DeFormer-BERT: BERT whose lower layers read question and passage separately, so that passage states can
be computed once, cached and reused for every question about that passage.

Implements Cao et al., ACL 2020, "DeFormer: Decomposing Pre-trained Transformers for Faster Question Answering"
(eq. 5 for the decomposition, the auxiliary supervision losses L_kd and L_lrs for training).

This file travels with saved checkpoints (`trust_remote_code=True`): it imports only torch, transformers and the
configuration file next to it.
"""

import difflib
import functools
import hashlib
import inspect
import json
import sys
from dataclasses import dataclass

import torch
import transformers
from torch import nn
from torch.nn import functional as F
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import QuestionAnsweringModelOutput
from transformers.models.bert.modeling_bert import (
    BertEmbeddings,
    BertEncoder,
    BertPreTrainedModel,
    BertSelfAttention,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple, logging
from transformers.utils.output_capturing import capture_outputs

from .configuration_deformer_bert import DeformerBertConfig

logger = logging.get_logger(__name__)


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


def _check_token_ids(ids, bound: int, argument: str) -> None:
    """Raise a `ValueError` naming `argument` and the bound if a token id of `ids` is outside `[0, bound)` (called
    when the embedding lookup fails, so the normal path costs nothing)."""
    if torch.is_tensor(ids) and ids.numel() and not ids.is_floating_point():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise ValueError(f"`{argument}` holds token id {low if low < 0 else high}, outside the vocabulary "
                             f"[0, {bound}) of this model.") from None


def _check_all(ok: torch.Tensor, message: str) -> None:
    """Raise a `ValueError` with `message` unless every element of the bool tensor `ok` is true.

    Under `torch.compile` the check is a graph op (`torch._assert_async`, which raises a `RuntimeError` with the same
    message when the compiled code runs) instead of a Python branch on a tensor value, which would split the graph:
    compiled models check their inputs too.

    Raises:
        ValueError: some element of `ok` is false (`RuntimeError` under `torch.compile`).
    """
    if torch.compiler.is_compiling():
        torch._assert_async(ok.all(), message)
    elif not bool(ok.all()):
        raise ValueError(message)


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
_UNREAD_KEYWORDS = {
    **dict.fromkeys(("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"),
                    (None, _PACKED_SEQUENCES)),
    "output_router_logits": (False, "the model has no mixture-of-experts router, so there are no router logits to "
                                    "return; leave it out"),
}
# transformers' I/O debugger, which its own forwards run when asked (`debug_io=True`); a forward of this project that
# calls none of them refuses it
_DEBUG_IO = ("transformers' I/O debugger does not run inside this forward: wrap the call in `with "
             "transformers.model_addition_debugger_context(model, debug_path):` instead")
_UNREAD_DEBUG_KEYWORDS = {"debug_io": (False, _DEBUG_IO), "debug_io_dir": (None, _DEBUG_IO),
                          "prune_layers": (None, _DEBUG_IO)}


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


# How a DeFormer reuses work, for [`_check_no_cache_arguments`]'s message.
_DEFORMER_REUSE = "it reuses passages through `passage_states=` (from `encode_passages`)"


def _check_span_labels(start_positions, end_positions, batch_size: int) -> None:
    """Raise a `ValueError` naming the argument when answer-span labels cannot be read as
    `BertForQuestionAnswering` reads them: one of the two without the other (no loss would be computed, silently),
    a float tensor, or a shape other than `(batch_size,)` / `(batch_size, 1)`."""
    if (start_positions is None) != (end_positions is None):
        given = "start_positions" if start_positions is not None else "end_positions"
        raise ValueError(f"`{given}` was given without its pair: the span loss needs both `start_positions` and "
                         "`end_positions`.")
    for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
        if positions is None:
            continue
        if not torch.is_tensor(positions) or positions.is_floating_point() or positions.dtype == torch.bool:
            raise ValueError(f"`{name}` must be an integer tensor of token indices, got "
                             f"{getattr(positions, 'dtype', type(positions).__name__)}.")
        if positions.shape not in ((batch_size,), (batch_size, 1)):
            raise ValueError(f"`{name}` must have shape ({batch_size},) (one token index per row), got "
                             f"{tuple(positions.shape)}.")


@dataclass
class DeformerPassageOutput(ModelOutput):
    r"""
    Passage states after the decomposed lower layers, as returned by
    [`DeformerBertModel.encode_passages`]. They depend only on the passage, never on a question, so they can be
    cached (in memory or in a store) and paired with any question later.

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, passage_length, hidden_size)`):
            Hidden states of the passage tokens after layer k = `num_decomposed_layers` (B^k in eq. 5).
        attention_mask (`torch.LongTensor` of shape `(batch_size, passage_length)`):
            1 for real passage tokens, 0 for padding.
        num_decomposed_layers (`int`):
            The k the states were computed with.
        model_fingerprint (`str`):
            Hex digest identifying the weights and configuration that produced the states (see
            [`DeformerBertModel.representation_fingerprint`]).
        attentions (`tuple(torch.FloatTensor)`, *optional*):
            The self-attention weights (after the softmax) of the decomposed layers 1..k over the passage alone, one
            `(batch_size, num_attention_heads, passage_length, passage_length)` tensor per layer, as `BertModel`
            returns them for the passage read alone (token type 1, positions from `passage_position_offset`): the
            passage block of the pair encoding's lower-layer attentions ([`DeformerBertModelOutput`]). Returned when
            `output_attentions=True` with `attn_implementation="eager"` (other implementations compute no weights: an
            empty tuple, after transformers' warning for SDPA, as for BERT). Not part of the passage states:
            `forward(passage_states=...)` and the representation stores read the fields above only.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*):
            The passage's embeddings and the output of each decomposed layer 1..k, k + 1 tensors of shape
            `(batch_size, passage_length, hidden_size)` (the last is `last_hidden_state`), as `BertModel` returns the
            first k + 1 of its `hidden_states` for the passage read alone (token type 1, positions from
            `passage_position_offset`): the passage block of the pair encoding's lower-layer `hidden_states`
            ([`DeformerBertModelOutput`]). Returned when `output_hidden_states=True`, with any attention
            implementation. Not part of the passage states, as `attentions`.
    """

    last_hidden_state: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    num_decomposed_layers: int | None = None
    model_fingerprint: str | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class DeformerBertModelOutput(ModelOutput):
    r"""
    Output of [`DeformerBertModel`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
            Hidden states after the last layer. With `passage_states`, `sequence_length` is
            `question_length + passage_length` (question tokens first, then passage tokens, each block keeping its
            own padding).
        attention_mask (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
            The key mask used by the upper (joint) layers, aligned with `last_hidden_state`.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*):
            Embeddings and the output of every layer, each `(batch_size, sequence_length, hidden_size)`; returned
            when `output_hidden_states=True`. With `passage_states`, n - k + 1 tensors over `question_length +
            passage_length` positions: the joint layers' input (the question's layer-k states, then the stored
            passage's) and the outputs of layers k+1..n (the lower layers of the passage were not run here:
            `encode_passages` returns the passage's with `output_hidden_states=True`).
        attentions (`tuple(torch.FloatTensor)`, *optional*):
            The self-attention weights (after the softmax) of every layer, each `(batch_size, num_attention_heads,
            sequence_length, sequence_length)`, as `BertModel` returns them; returned when `output_attentions=True`
            with `attn_implementation="eager"` (other implementations compute no weights: an empty tuple, after
            transformers' warning for SDPA, as for BERT). A decomposed lower layer 1..k (DeFormer §3, eq. 5: question
            and passage read separately) gives its question-wide and passage-wide attentions in this one full-sequence
            matrix, block diagonal: a query gives weight 0 to every key of the other segment (and to padding, which
            joins the question segment), so each real token's row sums to 1 over its own segment. Upper layers k+1..n
            attend jointly. With `passage_states` only the n - k joint layers are returned, over `question_length +
            passage_length` positions (the passage's lower layers ran in `encode_passages`, which returns their
            weights with `output_attentions=True`; the question's are left out as for `hidden_states`).
    """

    last_hidden_state: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def _segment_mask_function(segment_ids: torch.Tensor):
    """Mask function (transformers' mask interface) allowing attention only inside a segment (eq. 5, lower layers).

    `segment_ids` is `(batch_size, sequence_length)`; query i may attend key j iff both carry the same id.
    """

    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return segment_ids[batch_idx, q_idx] == segment_ids[batch_idx, kv_idx]

    return inner_mask


class DeformerBertPreTrainedModel(BertPreTrainedModel):
    """Base class of the DeFormer-BERT models (Cao et al., ACL 2020, "DeFormer: Decomposing Pre-trained Transformers
    for Faster Question Answering"; the decomposition is eq. 5 of its slides, see [`DeformerBertModel`]): BERT's
    weight initialization and loading, DeFormer's config."""

    config_class = DeformerBertConfig
    config: DeformerBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    # BERT checkpoints carry a pooler that a QA model does not use (as `BertForQuestionAnswering` has none).
    _keys_to_ignore_on_load_unexpected = [r"pooler\."]
    # Flash attention reads a padding mask only: transformers' flash mask drops the segment mask of the decomposed
    # lower layers (`_segment_mask_function`), which would then attend across question and passage. SDPA, eager and
    # FlexAttention take it.
    _supports_flash_attn = False
    # `device_map="auto"` places whole BERT layers: a layer's attention, feed-forward and the residuals across them on
    # one device
    _no_split_modules = ["BertLayer"]
    # `output_attentions=True`: BERT's self-attention weights, recorded by transformers' output hooks
    # (`capture_outputs`) over the layers the output covers ([`DeformerBertModel._encode`], and
    # [`DeformerBertModel._encode_passage_layers`] for `encode_passages`). Hidden states are the model's own (with
    # `passage_states` they cover the joint layers only), so they are not recorded by hooks.
    _can_record_outputs = {"attentions": BertSelfAttention}

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


class DeformerBertModel(DeformerBertPreTrainedModel):
    r"""
    The DeFormer-BERT encoder (no pooler). Parameter names are those of `BertModel` (`embeddings.*`,
    `encoder.layer.N.*`), so any BERT checkpoint loads unchanged; the decomposition adds no parameters.

    It computes eq. 5 of the DeFormer slides (Cao et al., ACL 2020), `[A^n; B^n] = L_{k+1:n}([L_{1:k}(A^0);
    L_{1:k}(B^0)])`: the question A and the passage B go through the lower layers 1..k separately (question-wide and
    passage-wide self-attention), through the upper layers k+1..n jointly, with k = `config.num_decomposed_layers`.

    Three ways to run it:

    1. `forward(input_ids, attention_mask, token_type_ids)` on the usual pair encoding
       `[CLS] question [SEP] passage [SEP]`: layers 1..k attend only within the question segment
       (`token_type_ids == 0`) or only within the passage segment (`token_type_ids == 1`), passage positions restart
       at `config.passage_position_offset`; layers k+1..n attend jointly. This is the training path.
    2. `encode_passages(passage_input_ids)`: the passage alone (`passage [SEP]`, no `[CLS]`) through the embeddings
       and layers 1..k, giving [`DeformerPassageOutput`] to cache.
    3. `forward(input_ids=<question segment>, passage_states=<DeformerPassageOutput>)`: the question alone through
       layers 1..k, then the joint upper layers over `[question; passage]`. Same result as (1) on the same pair.

    Args:
        config ([`DeformerBertConfig`]): the model configuration.

    Raises:
        ValueError: if `config.num_decomposed_layers` is not an int between 0 and `config.num_hidden_layers` (the
            config checks it when built; checked again for a config edited afterwards).
    """

    # `get_input_embeddings` / `set_input_embeddings` (transformers' defaults) find `embeddings.word_embeddings`
    _input_embed_layer = "word_embeddings"

    def __init__(self, config: DeformerBertConfig):
        super().__init__(config)
        self.config = config
        k = config.num_decomposed_layers  # the config checks it when built; again here for one edited afterwards
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= config.num_hidden_layers:
            raise ValueError(f"`num_decomposed_layers` must be an int between 0 and num_hidden_layers="
                             f"{config.num_hidden_layers}, got {k!r}.")
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self._fingerprint_cache = None
        self.post_init()

    # ------------------------------------------------------------------ helpers
    def representation_fingerprint(self) -> str:
        """SHA-256 hex digest of everything that determines passage states (the cached representation): the weights
        of the embeddings and of layers 1..k, every config field that can change the computation (`hidden_act`,
        `layer_norm_eps`, `num_attention_heads`, k, `passage_position_offset`, ...; all of `config.to_dict()` except
        the fields of `_FINGERPRINT_IGNORED_FIELDS` and `DeformerBertConfig.fingerprint_ignored_fields`) and the
        transformers major version.

        The digest is cached and recomputed only when the config changes or a parameter is replaced or modified in
        place (torch's version counters), so calling it per batch is cheap.

        Returns:
            `str`: 64 hex characters.
        """
        k = self.config.num_decomposed_layers
        params = list(self.embeddings.named_parameters(prefix="embeddings"))
        for i in range(k):
            params += list(self.encoder.layer[i].named_parameters(prefix=f"encoder.layer.{i}"))
        config_json = _config_fingerprint(self.config, DeformerBertConfig)
        return _weights_fingerprint(self, f"deformer_bert|k={k}|", config_json, params, hash_dtypes=True)

    def _embed(self, input_ids, **kwargs):
        """`self.embeddings(input_ids=input_ids, **kwargs)`; a token id outside the vocabulary raises a `ValueError`
        naming the argument and the bound instead of torch's "index out of range"."""
        try:
            return self.embeddings(input_ids=input_ids, **kwargs)
        except (IndexError, RuntimeError):
            _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
            _check_token_ids(kwargs.get("token_type_ids"), self.config.type_vocab_size, "token_type_ids")
            raise

    def _bidirectional_mask(self, hidden_states, attention_mask, segment_ids=None):
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            and_mask_function=_segment_mask_function(segment_ids) if segment_ids is not None else None,
        )

    def _run_layers(self, hidden_states, mask, start, end, all_hidden_states, **kwargs):
        for layer_module in self.encoder.layer[start:end]:
            hidden_states = layer_module(hidden_states, mask, **kwargs)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
        return hidden_states

    def _passage_position_ids(self, batch_size: int, length: int, device) -> torch.Tensor:
        offset = self.config.passage_position_offset
        if offset + length > self.config.max_position_embeddings:
            raise ValueError(
                f"Passage of {length} tokens starting at passage_position_offset={offset} exceeds "
                f"max_position_embeddings={self.config.max_position_embeddings}; split long passages into windows."
            )
        return (torch.arange(length, device=device) + offset).unsqueeze(0).expand(batch_size, -1)

    def check_passage_states(self, passage_states: DeformerPassageOutput) -> None:
        """Raise if `passage_states` were not produced by this model's passage encoder.

        Raises:
            TypeError: if `passage_states` is not a [`DeformerPassageOutput`] (or a dict with its keys).
            ValueError: if its hidden size, `num_decomposed_layers` or `model_fingerprint` differ from this
                model's, or its tensors have inconsistent shapes.
        """
        if not isinstance(passage_states, (DeformerPassageOutput, dict)):
            raise TypeError(
                "`passage_states` must be the DeformerPassageOutput returned by `encode_passages`, got "
                f"{type(passage_states).__name__}."
            )
        states = passage_states.get("last_hidden_state")
        mask = passage_states.get("attention_mask")
        if not torch.is_tensor(states) or states.dim() != 3:
            raise ValueError("`passage_states.last_hidden_state` must be a (batch, passage_length, hidden) tensor.")
        if states.shape[-1] != self.config.hidden_size:
            raise ValueError(
                f"`passage_states` have hidden size {states.shape[-1]} but this model's hidden_size is "
                f"{self.config.hidden_size}."
            )
        if mask is not None and tuple(mask.shape) != tuple(states.shape[:2]):
            raise ValueError(
                f"`passage_states.attention_mask` has shape {tuple(mask.shape)}, expected {tuple(states.shape[:2])}."
            )
        k = passage_states.get("num_decomposed_layers")
        if k is not None and k != self.config.num_decomposed_layers:
            raise ValueError(
                f"`passage_states` were computed with num_decomposed_layers={k}, but this model uses "
                f"num_decomposed_layers={self.config.num_decomposed_layers}."
            )
        fingerprint = passage_states.get("model_fingerprint")
        if fingerprint is not None and fingerprint != self.representation_fingerprint():
            raise ValueError(
                f"`passage_states` were computed by another model (fingerprint {fingerprint[:12]}...) than this one "
                f"({self.representation_fingerprint()[:12]}...): re-encode the passages with this model."
            )

    # ------------------------------------------------------------------ passage cache
    def encode_passages(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
    ) -> DeformerPassageOutput:
        r"""
        Run passages alone through the embeddings and the decomposed layers 1..k (L_{1:k}(B^0) in eq. 5).

        Gradients are tracked as in any forward (a training step may backpropagate through the states). To cache
        states for inference, call it under `torch.no_grad()` (or `torch.inference_mode()`): otherwise every cached
        output keeps its autograd graph, the activations of the k layers, alive.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, passage_length)`):
                Passage tokens as they appear in the pair encoding, i.e. `passage [SEP]` without `[CLS]`.
            attention_mask (`torch.LongTensor` of shape `(batch_size, passage_length)`, *optional*):
                1 for tokens, 0 for padding; defaults to all ones.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, passage_length)`, *optional*):
                Defaults to all ones (the passage is BERT's second segment).
            output_attentions (`bool`, *optional*):
                Also return the attention weights of layers 1..k over the passage (`attentions` of
                [`DeformerPassageOutput`]), as `forward` returns those of the layers it runs: with
                `attn_implementation="eager"`. Defaults to `config.output_attentions`. The states do not depend on it.
            output_hidden_states (`bool`, *optional*):
                Also return the passage's embeddings and the output of each of layers 1..k (`hidden_states` of
                [`DeformerPassageOutput`]), as `forward` returns those of the layers it runs. Defaults to
                `config.output_hidden_states`. The states do not depend on it.

        Returns:
            [`DeformerPassageOutput`] with `last_hidden_state` `(batch_size, passage_length, hidden_size)`, and
            `attentions` (k tensors `(batch_size, num_attention_heads, passage_length, passage_length)`) and
            `hidden_states` (k + 1 tensors `(batch_size, passage_length, hidden_size)`) when asked.

        Raises:
            ValueError: if `num_decomposed_layers == 0` (nothing can be cached: plain BERT), if `input_ids` is not
                2-D or is empty, if shapes disagree, or if the passage is longer than the position table allows.
            TypeError: an input that is not a tensor, or ids that are not integers (each named); an
                `output_attentions` or `output_hidden_states` that is not a bool.
        """
        if self.config.num_decomposed_layers == 0:
            raise ValueError(
                "encode_passages needs num_decomposed_layers > 0: with 0 the model is plain BERT and passage states "
                "depend on the question."
            )
        output_attentions = _output_switch("output_attentions", output_attentions, self.config)
        output_hidden_states = _output_switch("output_hidden_states", output_hidden_states, self.config)
        _check_tensor_arguments({"input_ids": input_ids, "token_type_ids": token_type_ids},
                                {"attention_mask": attention_mask})
        if input_ids.dim() != 2:
            raise ValueError("`input_ids` must be a (batch_size, passage_length) tensor.")
        if input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
            raise ValueError("`input_ids` is empty: a passage needs at least one token.")
        for name, value in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if value is not None and value.shape != input_ids.shape:
                raise ValueError(
                    f"`{name}` shape {tuple(value.shape)} != `input_ids` shape {tuple(input_ids.shape)}."
                )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.ones_like(input_ids)
        batch_size, length = input_ids.shape
        position_ids = self._passage_position_ids(batch_size, length, input_ids.device)
        hidden_states = self._embed(input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        mask = self._bidirectional_mask(hidden_states, attention_mask)
        all_hidden_states = [hidden_states] if output_hidden_states else None
        encoded = self._encode_passage_layers(hidden_states, mask, all_hidden_states,
                                              output_attentions=output_attentions, return_dict=True)
        return DeformerPassageOutput(
            last_hidden_state=encoded.last_hidden_state,
            attention_mask=attention_mask,
            num_decomposed_layers=self.config.num_decomposed_layers,
            model_fingerprint=self.representation_fingerprint(),
            attentions=encoded.attentions,
            hidden_states=tuple(all_hidden_states) if all_hidden_states is not None else None,
        )

    @capture_outputs
    def _encode_passage_layers(self, hidden_states, mask, all_hidden_states, **layer_kwargs) -> DeformerPassageOutput:
        """Layers 1..k over embedded passages `(batch, passage_length, hidden_size)` under their mask, for
        [`encode_passages`]: a [`DeformerPassageOutput`] holding `last_hidden_state`, and `attentions` when
        `layer_kwargs["output_attentions"]` is set (recorded by transformers' `capture_outputs`, as in [`_encode`];
        handed on to the layers too, as BERT does, so that an attention implementation without weights says so).
        Each layer's output is appended to `all_hidden_states` unless it is `None`, as in [`_encode`]."""
        hidden_states = self._run_layers(hidden_states, mask, 0, self.config.num_decomposed_layers, all_hidden_states,
                                         **layer_kwargs)
        return DeformerPassageOutput(last_hidden_state=hidden_states)

    # ------------------------------------------------------------------ forward
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        passage_states: DeformerPassageOutput | None = None,
        output_hidden_states: bool | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> DeformerBertModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Without `passage_states`: the pair encoding `[CLS] question [SEP] passage [SEP]` (right padding).
                With `passage_states`: the question segment only, `[CLS] question [SEP]`.
            attention_mask (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for tokens, 0 for padding; defaults to all ones.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                0 for the question segment, 1 for the passage segment. Required for the pair encoding when
                `num_decomposed_layers > 0` (it is what splits the input); defaults to zeros otherwise.
            passage_states ([`DeformerPassageOutput`], *optional*):
                Cached passage states from [`encode_passages`]; the passage's lower layers are then skipped.
            output_hidden_states (`bool`, *optional*):
                Also return the embeddings and every layer's output. Defaults to `config.output_hidden_states`.
            output_attentions (`bool`, *optional*, keyword):
                Also return every layer's attention weights (`attentions` of [`DeformerBertModelOutput`]: block
                diagonal in the decomposed layers), as `BertModel` does: with `attn_implementation="eager"`.
                Defaults to `config.output_attentions`.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)` or `(1, sequence_length)`,
                *optional*): as in `BertModel`, with `num_decomposed_layers=0` only (after DeFormer's own arguments
                here, so that positional calls written for this model keep their meaning; the QA head takes BERT's
                order). With k > 0 the model numbers the positions itself (question from 0, passage from
                `config.passage_position_offset`, §3), so passing them raises.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                word embeddings instead of `input_ids` (exactly one of the two), as in `BertModel`; position and
                token-type embeddings are added as for `input_ids`.
            return_dict (`bool`, *optional*, keyword): return a tuple (`last_hidden_state`, `attention_mask`, then
                `hidden_states` and `attentions` where returned) when False (`@can_return_tuple`, as `BertModel`).
                Defaults to `config.return_dict`.

        Returns:
            [`DeformerBertModelOutput`], or its tuple with `return_dict=False`.

        Raises:
            ValueError: neither or both of `input_ids` and `inputs_embeds`, an empty batch, mismatched shapes,
                `position_ids` while `num_decomposed_layers > 0`, pair input without `token_type_ids` while
                `num_decomposed_layers > 0`, an example with no question token or a segment longer than
                `max_position_embeddings` (these two a `RuntimeError` with the same message when run under
                `torch.compile`, where they are graph ops), `passage_states` from another model,
                k or hidden size, or `passage_states` with a pair encoding (`token_type_ids` 1 on real tokens); a
                `past_key_values` / `cache` / `cache_position` that is not `None`: the model is an encoder and keeps
                no key/value cache (`use_cache` is accepted and ignored, as by `BertModel`; see
                [`_check_no_cache_arguments`]); a keyword of `TransformersKwargs` it does not read
                ([`_ENCODER_UNREAD_KEYWORDS`]): flash attention's packed-sequence arguments (`cu_seq_lens_q`, ...,
                `seq_idx`), `is_causal=True`, `output_router_logits=True`, `logits_to_keep` other than 0,
                `num_items_in_batch`, transformers' `debug_io` options (`is_causal=False` and
                `logits_to_keep=0` ask for what the model does and pass).
            TypeError: an input that is not a tensor, or `input_ids` / `token_type_ids` / `position_ids` that do not
                hold integers (each named); an `output_attentions` or `output_hidden_states` that is neither a bool
                nor `None` (a string `"False"` would read as true; a list of hidden-state indices, which
                transformers' `capture_outputs` can select, is not supported); a keyword argument it does not take (a
                misspelling such as `passage_state=`), named with the argument it probably meant.
        """
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _ENCODER_UNREAD_KEYWORDS)
        _check_no_cache_arguments(self, kwargs, _DEFORMER_REUSE)
        config = self.config
        k = config.num_decomposed_layers
        # the argument, else the config (as `BertModel` reads them); anything but a bool or `None` is refused
        output_hidden_states = _output_switch("output_hidden_states", output_hidden_states, config)
        output_attentions = _output_switch("output_attentions", kwargs.pop("output_attentions", None), config)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("`input_ids` is required (or `inputs_embeds` instead of it; exactly one of the two).")
        _check_tensor_arguments({"input_ids": input_ids, "token_type_ids": token_type_ids,
                                 "position_ids": position_ids},
                                {"attention_mask": attention_mask, "inputs_embeds": inputs_embeds})
        if input_ids is not None and input_ids.dim() != 2:
            raise ValueError(f"`input_ids` must be (batch_size, sequence_length), got shape {tuple(input_ids.shape)}.")
        given_shape = (input_ids if input_ids is not None else inputs_embeds).shape
        if given_shape[0] == 0 or given_shape[1] == 0:
            raise ValueError(f"`{'input_ids' if input_ids is not None else 'inputs_embeds'}` is empty (shape "
                             f"{tuple(given_shape)}): nothing to read.")
        if inputs_embeds is not None and (inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.hidden_size):
            raise ValueError(f"`inputs_embeds` must be (batch_size, sequence_length, hidden_size={config.hidden_size}),"
                             f" got shape {tuple(inputs_embeds.shape)}.")
        source, given = ("input_ids", input_ids) if input_ids is not None else ("inputs_embeds", inputs_embeds)
        shape, device = given.shape[:2], given.device
        if attention_mask is None:
            attention_mask = torch.ones(shape, dtype=torch.long, device=device)
        if attention_mask.shape != shape:
            raise ValueError(
                f"`attention_mask` shape {tuple(attention_mask.shape)} != `{source}` shape {tuple(shape)}."
            )
        if token_type_ids is not None and token_type_ids.shape != shape:
            raise ValueError(
                f"`token_type_ids` shape {tuple(token_type_ids.shape)} != `{source}` shape {tuple(shape)}."
            )
        if position_ids is not None:
            if k > 0 or passage_states is not None:
                raise ValueError(
                    f"`position_ids` can only be given with num_decomposed_layers=0 (this model has {k}): a DeFormer "
                    "numbers the question from 0 and the passage from `config.passage_position_offset` itself."
                )
            if position_ids.dim() != 2 or position_ids.shape[1] != shape[1] or position_ids.shape[0] not in (1, shape[0]):
                raise ValueError(f"`position_ids` must be (batch_size, sequence_length) or (1, sequence_length) for "
                                 f"`{source}` of shape {tuple(shape)}, got {tuple(position_ids.shape)}.")
        all_hidden_states = [] if output_hidden_states else None
        # handed on to the layers, as BERT does, so that an attention implementation without weights says so
        # (transformers' SDPA warning)
        layer_kwargs = {key: value for key, value in kwargs.items() if key != "return_dict"}
        layer_kwargs["output_attentions"] = output_attentions

        if passage_states is not None:
            return self._forward_with_passage_states(
                input_ids, inputs_embeds, attention_mask, token_type_ids, passage_states, all_hidden_states,
                layer_kwargs,
            )

        if k == 0:
            # Plain BERT: standard positions, joint attention in every layer.
            hidden_states = self._embed(input_ids, token_type_ids=token_type_ids, position_ids=position_ids,
                                        inputs_embeds=inputs_embeds)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
        else:
            if token_type_ids is None:
                raise ValueError(
                    "`token_type_ids` is required when num_decomposed_layers > 0: it marks the question (0) and "
                    "passage (1) segments that the lower layers read separately."
                )
            # Padding joins the question segment, which always holds [CLS], so every query row has a key.
            segment_ids = torch.where(attention_mask.bool(), token_type_ids, torch.zeros_like(token_type_ids))
            is_question = (segment_ids == 0) & attention_mask.bool()
            question_lengths = is_question.sum(dim=1, keepdim=True)
            _check_all(question_lengths > 0,
                       "An example has no question token (`token_type_ids == 0` with attention_mask 1).")
            positions = torch.arange(shape[1], device=device).unsqueeze(0)
            passage_positions = positions - question_lengths + config.passage_position_offset
            position_ids = torch.where(segment_ids == 0, positions, passage_positions.clamp(min=0))
            _check_all(position_ids < config.max_position_embeddings,
                       f"A segment is longer than max_position_embeddings={config.max_position_embeddings}.")
            hidden_states = self._embed(input_ids, token_type_ids=token_type_ids, position_ids=position_ids,
                                        inputs_embeds=inputs_embeds)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
            lower_mask = self._bidirectional_mask(hidden_states, attention_mask, segment_ids)
            return self._encode(hidden_states, attention_mask, all_hidden_states, lower_mask=lower_mask,
                                return_dict=True, **layer_kwargs)
        return self._encode(hidden_states, attention_mask, all_hidden_states, return_dict=True, **layer_kwargs)

    def _forward_with_passage_states(
        self, input_ids, inputs_embeds, attention_mask, token_type_ids, passage_states, all_hidden_states, layer_kwargs
    ):
        config = self.config
        k = config.num_decomposed_layers
        if k == 0:
            raise ValueError("`passage_states` cannot be used with num_decomposed_layers=0 (plain BERT).")
        self.check_passage_states(passage_states)
        passage_hidden = passage_states["last_hidden_state"]
        passage_mask = passage_states.get("attention_mask")
        if passage_mask is None:
            passage_mask = torch.ones(passage_hidden.shape[:2], dtype=attention_mask.dtype,
                                      device=attention_mask.device)
        if passage_hidden.shape[0] != attention_mask.shape[0]:
            raise ValueError(
                f"`passage_states` hold {passage_hidden.shape[0]} passages for {attention_mask.shape[0]} questions; "
                "repeat or index them so that each question has its passage."
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(attention_mask, dtype=torch.long)
        elif bool(((token_type_ids != 0) & attention_mask.bool()).any()):
            raise ValueError("with `passage_states`, `input_ids` hold the question segment only (`[CLS] question "
                             "[SEP]`, `token_type_ids` 0); these `token_type_ids` mark passage tokens: a pair encoding "
                             "would read the passage twice.")
        question_length = attention_mask.shape[1]
        if question_length > config.max_position_embeddings:
            raise ValueError(f"`input_ids` (the questions) hold {question_length} tokens, more than the model's "
                             f"max_position_embeddings={config.max_position_embeddings}: truncate the questions.")
        hidden_states = self._embed(input_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds)
        mask = self._bidirectional_mask(hidden_states, attention_mask)
        # the question's lower layers run outside `_encode`: their attentions are not returned (see the output)
        hidden_states = self._run_layers(hidden_states, mask, 0, k, None, **layer_kwargs)
        hidden_states = torch.cat([hidden_states, passage_hidden.to(hidden_states.dtype)], dim=1)
        joint_mask = torch.cat([attention_mask, passage_mask.to(attention_mask.dtype)], dim=1)
        if all_hidden_states is not None:
            all_hidden_states.append(hidden_states)
        return self._encode(hidden_states, joint_mask, all_hidden_states, return_dict=True, **layer_kwargs)

    @capture_outputs
    def _encode(self, hidden_states, attention_mask, all_hidden_states, lower_mask=None,
                **layer_kwargs) -> DeformerBertModelOutput:
        """The layers whose outputs the model returns: with `lower_mask` (the segment mask of the pair encoding),
        the decomposed layers 1..k under it first; then layers k+1..n (all layers when k = 0) over the joint
        question+passage sequence `(batch, length, hidden_size)` with its key mask `(batch, length)`; and the
        model output. transformers' `capture_outputs` records the attention weights of exactly these layers
        (`_can_record_outputs`) when `layer_kwargs["output_attentions"]` is set (`return_dict=True`, given by every
        caller, keeps the output a dataclass whatever `config.return_dict` says)."""
        k = self.config.num_decomposed_layers
        if lower_mask is not None:
            hidden_states = self._run_layers(hidden_states, lower_mask, 0, k, all_hidden_states, **layer_kwargs)
        mask = self._bidirectional_mask(hidden_states, attention_mask)
        hidden_states = self._run_layers(hidden_states, mask, k, self.config.num_hidden_layers, all_hidden_states,
                                         **layer_kwargs)
        return DeformerBertModelOutput(
            last_hidden_state=hidden_states,
            attention_mask=attention_mask,
            hidden_states=tuple(all_hidden_states) if all_hidden_states is not None else None,
        )


class DeformerBertForQuestionAnswering(DeformerBertPreTrainedModel):
    r"""
    DeFormer-BERT with BERT's span-classification head (`qa_outputs`), a drop-in replacement for
    `BertForQuestionAnswering`: same weight names, same pair-encoded inputs, same
    [`~transformers.modeling_outputs.QuestionAnsweringModelOutput`]. With `num_decomposed_layers=0` it is numerically
    identical to `BertForQuestionAnswering`.

    Training loss (DeFormer §3, "auxiliary supervision"), as the authors' code defines it
    (StonyBrookNLP/deformer, `tasks/qa_sbert.py` with `config/sbert_qa.ini`'s defaults `ce_gama = kd_alpha =
    kd_mse_beta = 1`, `kd_temperature = 2`):
    `loss = L_span + kd_loss_weight * L_kd + lrs_loss_weight * L_lrs`, where

    - L_span is BERT's start/end cross-entropy, averaged over start and end, over every position of the padded
      batch as BERT's and the authors' (`get_cross_entropy_loss` over `max_seq_length`) compute it: padding's
      logits take part in the softmax, so an example's L_span depends on how far its batch pads it;
    - L_kd = T^2 * KL(P_full^T || P_DeFormer^T), averaged over start and end, at temperature
      T = `distillation_temperature`: the teacher's distribution is the reference, as in the authors' code
      (`kl_div_loss`: sum teacher * (log teacher - log student)) and in Hinton et al.; the slides write the arguments
      the other way round (D_KL(P_DeFormer || P_Full)); we follow the code, whose figures the paper reports;
    - L_lrs = the mean over the n - k upper layers i = k+1..n of the mean squared difference between the
      DeFormer's and the full model's outputs of layer i, over each example's real tokens and hidden units, averaged
      over the examples of the batch (the authors' `tf.losses.mean_squared_error` per upper-encoder output, divided
      by the number of upper layers). One deviation: padding positions are excluded from each example's mean (the
      original's fixed-length TPU batches include them, every example weighing the same), so the loss does not
      depend on how a batch was padded.

    Every term is a mean over the examples of the batch: a batch split over `DistributedDataParallel` processes or
    over accumulated micro-batches of equal size (which `Trainer` averages) trains as the whole batch would.

    The auxiliary terms are added only when the teacher's outputs are passed (see
    [`hf_readonce.DeformerDistillationTrainer`], which runs the teacher).
    """

    # The loss is a batch mean (span + auxiliary terms): Trainer must scale it for gradient accumulation itself.
    accepts_loss_kwargs = False

    def __init__(self, config: DeformerBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = DeformerBertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def representation_fingerprint(self) -> str:
        """The fingerprint of the passage states this model computes; see
        [`DeformerBertModel.representation_fingerprint`]."""
        return self.bert.representation_fingerprint()

    def encode_passages(self, input_ids, attention_mask=None, token_type_ids=None, output_attentions=None,
                        output_hidden_states=None) -> DeformerPassageOutput:
        """Cache passage states (the passage half of the lower k layers, §3): `(batch, passage_length)` ids ->
        [`DeformerPassageOutput`] with `(batch, passage_length, hidden_size)` states, and with
        `output_attentions=True` (default: `config.output_attentions`; `attn_implementation="eager"`) the k layers'
        attention weights over the passage, each `(batch, num_attention_heads, passage_length, passage_length)`,
        with `output_hidden_states=True` (default: `config.output_hidden_states`) the passage's embeddings and the k
        layers' outputs, k + 1 tensors `(batch, passage_length, hidden_size)`; see
        [`DeformerBertModel.encode_passages`]. Gradients are tracked: cache states for inference under
        `torch.no_grad()`, or each cached output keeps its autograd graph alive.

        Raises:
            ValueError: as [`DeformerBertModel.encode_passages`] (k = 0, mis-shaped inputs, a passage beyond the
                position table).
            TypeError: as [`DeformerBertModel.encode_passages`] (inputs that are not integer tensors, an
                `output_attentions` or `output_hidden_states` that is not a bool).
        """
        return self.bert.encode_passages(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                         output_attentions=output_attentions, output_hidden_states=output_hidden_states)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        passage_states: DeformerPassageOutput | None = None,
        teacher_start_logits: torch.FloatTensor | None = None,
        teacher_end_logits: torch.FloatTensor | None = None,
        teacher_hidden_states: tuple[torch.FloatTensor, ...] | None = None,
        output_hidden_states: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        r"""
        Args:
            input_ids, attention_mask, token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                As in `BertForQuestionAnswering` (pair encoding), or the question segment only when
                `passage_states` is given (see [`DeformerBertModel.forward`]).
            position_ids, inputs_embeds: as in `BertForQuestionAnswering` (same positions in the signature, so a
                positional call written for it means the same here); `position_ids` with `num_decomposed_layers=0`
                only, see [`DeformerBertModel.forward`].
            start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Gold span boundaries (token indices in the layout of the logits); positions outside the sequence are
                ignored, as in BERT.
            passage_states ([`DeformerPassageOutput`], *optional*):
                Cached passage states; the logits then cover `question_length + passage_length` positions,
                question tokens first.
            teacher_start_logits, teacher_end_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`,
                *optional*): Teacher logits on the same pair encoding, for L_kd.
            teacher_hidden_states (`tuple(torch.FloatTensor)`, *optional*):
                The teacher's `hidden_states` (embeddings + n layers, each `(batch_size, sequence_length, hidden)`),
                for L_lrs; the teacher must have the same depth and hidden size.
            output_hidden_states (`bool`, *optional*): return every layer's states. Defaults to
                `config.output_hidden_states`, as in `BertForQuestionAnswering`.
            output_attentions (`bool`, *optional*, keyword): return every layer's attention weights (with
                `attn_implementation="eager"`), see [`DeformerBertModelOutput`]. Defaults to
                `config.output_attentions`.
            return_dict (`bool`, *optional*, keyword): return a tuple when False (`@can_return_tuple`, as
                `BertForQuestionAnswering`).

        Returns:
            [`~transformers.modeling_outputs.QuestionAnsweringModelOutput`] with `loss` first when positions are
            given.

        Raises:
            ValueError: as [`DeformerBertModel.forward`]; teacher tensors whose shapes do not match, or one teacher
                logits tensor without the other; one of `start_positions` / `end_positions` without the other, a
                float one, or one of another shape than `(batch_size,)`; a cache argument that is not `None`, as
                there (`use_cache` is accepted and ignored, as by `BertForQuestionAnswering`), and a keyword of
                `TransformersKwargs` it does not read, as there (`num_items_in_batch` included: the loss is a batch
                mean, which `Trainer` scales for gradient accumulation itself); a pair without
                `token_type_ids` while the model is wrapped by peft with `task_type="QUESTION_ANS"`, whose wrapper
                drops them (see [`_check_peft_token_type_ids`]).
            TypeError: as [`DeformerBertModel.forward`], a keyword argument it does not take (e.g. `passage_state=`)
                included.
        """
        _check_keyword_arguments(self, kwargs)
        _refuse_unread_keywords(self, kwargs, _ENCODER_UNREAD_KEYWORDS)
        _check_no_cache_arguments(self, kwargs, _DEFORMER_REUSE)
        _check_peft_token_type_ids(self, token_type_ids, reads_segments=passage_states is None)
        if (teacher_start_logits is None) != (teacher_end_logits is None):
            given = "teacher_start_logits" if teacher_end_logits is None else "teacher_end_logits"
            raise ValueError(f"`{given}` was given without its pair: pass both `teacher_start_logits` and "
                             "`teacher_end_logits` for the distillation loss L_kd, or neither.")
        need_states = teacher_hidden_states is not None and self.config.lrs_loss_weight > 0
        # `None`: the config's, as `BertForQuestionAnswering` reads it; anything but a bool or `None` is refused
        output_hidden_states = _output_switch("output_hidden_states", output_hidden_states, self.config)
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            passage_states=passage_states,
            output_hidden_states=output_hidden_states or need_states,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state
        logits = self.qa_outputs(sequence_output)
        start_logits, end_logits = logits.split(1, dim=-1)
        start_logits = start_logits.squeeze(-1).contiguous()
        end_logits = end_logits.squeeze(-1).contiguous()

        total_loss = None
        _check_span_labels(start_positions, end_positions, start_logits.shape[0])
        if start_positions is not None and end_positions is not None:
            if start_positions.dim() > 1:
                start_positions = start_positions.squeeze(-1)
            if end_positions.dim() > 1:
                end_positions = end_positions.squeeze(-1)
            ignored_index = start_logits.size(1)
            start_positions = start_positions.clamp(0, ignored_index)
            end_positions = end_positions.clamp(0, ignored_index)
            loss_fct = nn.CrossEntropyLoss(ignore_index=ignored_index)
            total_loss = (loss_fct(start_logits, start_positions) + loss_fct(end_logits, end_positions)) / 2
            mask = outputs.attention_mask.bool()
            if teacher_start_logits is not None and teacher_end_logits is not None and self.config.kd_loss_weight > 0:
                kd = (
                    self.distillation_loss(start_logits, teacher_start_logits, mask)
                    + self.distillation_loss(end_logits, teacher_end_logits, mask)
                ) / 2
                total_loss = total_loss + self.config.kd_loss_weight * kd
            if need_states:
                lrs = self.layerwise_similarity_loss(outputs.hidden_states, teacher_hidden_states, mask)
                total_loss = total_loss + self.config.lrs_loss_weight * lrs

        hidden_states = outputs.hidden_states if output_hidden_states else None
        return QuestionAnsweringModelOutput(
            loss=total_loss, start_logits=start_logits, end_logits=end_logits, hidden_states=hidden_states,
            attentions=outputs.attentions,
        )

    def distillation_loss(
        self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        r"""Knowledge-distillation loss L_kd for one boundary (start or end):
        `T^2 * KL(softmax(teacher / T) || softmax(student / T))`, batch mean, padding positions excluded.

        Args:
            student_logits, teacher_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`).
            mask (`torch.BoolTensor` of shape `(batch_size, sequence_length)`): True for real tokens.

        Returns:
            Scalar `torch.Tensor`.

        Raises:
            ValueError: if the teacher's logits do not have the student's shape.
        """
        if teacher_logits.shape != student_logits.shape:
            raise ValueError(
                f"teacher logits shape {tuple(teacher_logits.shape)} != student logits shape "
                f"{tuple(student_logits.shape)}: run the teacher on the same pair encoding."
            )
        temperature = self.config.distillation_temperature
        floor = torch.finfo(student_logits.dtype).min
        student = student_logits.masked_fill(~mask, floor) / temperature
        teacher = teacher_logits.detach().to(student_logits.dtype).masked_fill(~mask, floor) / temperature
        kl = F.kl_div(F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1), log_target=True,
                      reduction="batchmean")
        return kl * temperature**2

    def layerwise_similarity_loss(
        self, student_states: tuple[torch.Tensor, ...], teacher_states: tuple[torch.Tensor, ...], mask: torch.Tensor
    ) -> torch.Tensor:
        r"""Layerwise representation similarity
        L_lrs = 1 / (n - k) * sum_{i=k+1}^{n} mean_b mean_j ||v_bj^i - u_bj^i||^2 / hidden_size,
        over the examples b of the batch and the real tokens j of each (u: DeFormer, v: full model; `hidden_states`
        index i is layer i's output, index 0 the embeddings): the upper layers' outputs, as the authors' code compares
        them. Each example weighs the same, whatever its number of real tokens (an example without any weighs 0), so
        the loss of a batch is the mean of its examples' losses, as the span and distillation losses are. Zero when
        k = 0 or k = n (no upper layer to align).

        Args:
            student_states, teacher_states (`tuple(torch.FloatTensor)`): `n + 1` tensors of shape
                `(batch_size, sequence_length, hidden_size)` each.
            mask (`torch.BoolTensor` of shape `(batch_size, sequence_length)`).

        Returns:
            Scalar `torch.Tensor` of the student states' dtype, summed and divided in float32 (a teacher of another
            dtype is compared in float32 too).

        Raises:
            ValueError: if the teacher has a different number of layers or state shapes.
        """
        n = self.config.num_hidden_layers
        if len(teacher_states) != n + 1 or len(student_states) != n + 1:
            raise ValueError(
                f"teacher_hidden_states must hold {n + 1} tensors (embeddings + {n} layers), got {len(teacher_states)}."
            )
        # float32 sums and counts: a count of real tokens x hidden units over 65,504 is inf in float16 and inexact in
        # bfloat16 from 256 on
        weights = mask.to(torch.float32).unsqueeze(-1)
        # per example: its real tokens times the hidden units (at least 1, so that a row without tokens adds 0)
        count = (weights.sum(dim=(1, 2)) * student_states[0].shape[-1]).clamp(min=1)
        loss = student_states[0].new_zeros((), dtype=torch.float32)
        upper = range(self.config.num_decomposed_layers + 1, n + 1)
        for i in upper:
            if teacher_states[i].shape != student_states[i].shape:
                raise ValueError(
                    f"teacher hidden state {i} has shape {tuple(teacher_states[i].shape)}, expected "
                    f"{tuple(student_states[i].shape)}."
                )
            diff = (student_states[i].float() - teacher_states[i].detach().float()) * weights
            loss = loss + (diff.pow(2).sum(dim=(1, 2)) / count).mean()
        return (loss / max(len(upper), 1)).to(student_states[0].dtype)


DeformerBertConfig.register_for_auto_class()
DeformerBertModel.register_for_auto_class("AutoModel")
DeformerBertForQuestionAnswering.register_for_auto_class("AutoModelForQuestionAnswering")

__all__ = [
    "DeformerBertForQuestionAnswering",
    "DeformerBertModel",
    "DeformerBertPreTrainedModel",
    "DeformerPassageOutput",
    "DeformerBertModelOutput",
]
