"""The mean_qa models: BERT reads a passage alone (its token states are what a store keeps) and a question alone,
mean-pooled; each passage token scores as an answer start and end against the pooled question.

This file travels with published checkpoints (`trust_remote_code=True`): it imports only torch, transformers and the
configuration file beside it. The fingerprint policy below is hf-readonce's, copied (`# Copied from` markers).
"""

import hashlib
import json
from dataclasses import dataclass

import torch
import transformers
from torch import nn
from transformers.modeling_outputs import QuestionAnsweringModelOutput
from transformers.models.bert.modeling_bert import BertModel, BertPreTrainedModel
from transformers.utils import ModelOutput

from .configuration_mean_qa import MeanQaBertConfig

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


@dataclass
class MeanQaPassageOutput(ModelOutput):
    r"""Passage token states, read once per passage and reused by every question about it.

    Attributes:
        passage_states (`torch.FloatTensor` of shape `(batch, passage_len, hidden_size)`): BERT's last layer over
            `[CLS] passage [SEP]`, right-padded.
        passage_attention_mask (`torch.LongTensor` of shape `(batch, passage_len)`): 1 for real tokens, 0 for padding.
        model_fingerprint (`str`, *optional*): the `representation_fingerprint()` of the model that computed them.
    """

    passage_states: torch.FloatTensor | None = None
    passage_attention_mask: torch.LongTensor | None = None
    model_fingerprint: str | None = None


class MeanQaBertModel(BertModel):
    r"""BERT without its pooler, reading a passage or a question alone. Loads any BERT checkpoint's weights.

    Args:
        config ([`MeanQaBertConfig`]).
        add_pooling_layer (`bool`, defaults to `False`): taken for [`~transformers.BertModel`]'s signature; the
            model never has a pooler (its pooled output is never read).
    """

    config_class = MeanQaBertConfig

    def __init__(self, config: MeanQaBertConfig, add_pooling_layer: bool = False):
        super().__init__(config, add_pooling_layer=False)
        self._fingerprint_cache = None

    def representation_fingerprint(self) -> str:
        """SHA-256 hex digest (64 characters) of what passage states depend on: every weight of this encoder (name,
        dtype, values), the config fields that change them (all of `config.to_dict()` but hf-readonce's ignored
        fields and `MeanQaBertConfig.fingerprint_ignored_fields`) and the transformers major version. Cached until
        the config or a weight changes."""
        config_json = _config_fingerprint(self.config, MeanQaBertConfig)
        return _weights_fingerprint(self, "mean_qa_bert|", config_json, list(self.named_parameters()),
                                    hash_dtypes=True)

    def encode_passages(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
                        ) -> MeanQaPassageOutput:
        """Read passages alone.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch, passage_len)`): `[CLS] passage [SEP]`, right-padded.
            attention_mask (`torch.Tensor` of shape `(batch, passage_len)`, *optional*): 1 for real tokens; all ones
                by default.

        Returns:
            [`MeanQaPassageOutput`]: states of shape `(batch, passage_len, hidden_size)`.

        Raises:
            TypeError: `input_ids` that is not an integer tensor.
        """
        if not torch.is_tensor(input_ids) or input_ids.is_floating_point():
            raise TypeError(f"`input_ids` must be an integer torch.Tensor, got {type(input_ids).__name__}.")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        states = self(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return MeanQaPassageOutput(passage_states=states, passage_attention_mask=attention_mask.long(),
                                   model_fingerprint=self.representation_fingerprint())

    def encode_questions(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
                         ) -> torch.FloatTensor:
        """Read questions alone and mean-pool them over their real tokens.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch, question_len)`): `[CLS] question [SEP]`, right-padded.
            attention_mask (`torch.Tensor` of shape `(batch, question_len)`, *optional*): all ones by default.

        Returns:
            `torch.FloatTensor` of shape `(batch, hidden_size)`.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        states = self(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(1) / weights.sum(1).clamp(min=1)


class MeanQaBertForQuestionAnswering(BertPreTrainedModel):
    r"""Extractive QA from passage states read once: `start_logits[i] = <W_s h_i + b_s, q>` and
    `end_logits[i] = <W_e h_i + b_e, q>`, with `h_i` the passage token states and `q` the mean-pooled question.

    Args:
        config ([`MeanQaBertConfig`]).
    """

    config_class = MeanQaBertConfig

    def __init__(self, config: MeanQaBertConfig):
        super().__init__(config)
        self.bert = MeanQaBertModel(config)
        self.qa_start = nn.Linear(config.hidden_size, config.hidden_size)
        self.qa_end = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def representation_fingerprint(self) -> str:
        """The encoder's [`MeanQaBertModel.representation_fingerprint`] (the QA heads never touch stored states)."""
        return self.bert.representation_fingerprint()

    def encode_passages(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
                        ) -> MeanQaPassageOutput:
        """Read passages alone with the encoder ([`MeanQaBertModel.encode_passages`]).

        Args:
            input_ids (`torch.LongTensor` of shape `(batch, passage_len)`): `[CLS] passage [SEP]`, right-padded.
            attention_mask (`torch.Tensor` of shape `(batch, passage_len)`, *optional*): 1 for real tokens; all ones
                by default.

        Returns:
            [`MeanQaPassageOutput`]: states of shape `(batch, passage_len, hidden_size)`, their mask and this model's
            fingerprint.

        Raises:
            TypeError: `input_ids` that is not an integer tensor.
        """
        return self.bert.encode_passages(input_ids, attention_mask)

    def check_passage_states(self, passage_states: MeanQaPassageOutput, num_questions: int) -> None:
        """Raise unless `passage_states` are this model's passage states, one passage per question.

        Raises:
            TypeError: `passage_states` that is not a [`MeanQaPassageOutput`].
            ValueError: states that are not `(num_questions, passage_len, hidden_size)`, a mask of another shape, or
                a `model_fingerprint` that is not this model's (states another model computed).
        """
        if not isinstance(passage_states, MeanQaPassageOutput):
            raise TypeError("`passage_states` must be the MeanQaPassageOutput of `encode_passages` (or a store's), "
                            f"got {type(passage_states).__name__}.")
        states, mask = passage_states.passage_states, passage_states.passage_attention_mask
        expected = (num_questions, "passage_len", self.config.hidden_size)
        if not torch.is_tensor(states) or states.dim() != 3 or states.shape[0] != num_questions or \
                states.shape[2] != self.config.hidden_size:
            got = tuple(states.shape) if torch.is_tensor(states) else type(states).__name__
            raise ValueError(f"`passage_states.passage_states` must be of shape {expected} (one passage per "
                             f"question), got {got}.")
        if not torch.is_tensor(mask) or tuple(mask.shape) != tuple(states.shape[:2]):
            got = tuple(mask.shape) if torch.is_tensor(mask) else type(mask).__name__
            raise ValueError(f"`passage_states.passage_attention_mask` must be of shape {tuple(states.shape[:2])}, "
                             f"got {got}.")
        fingerprint = passage_states.model_fingerprint
        if fingerprint is not None and fingerprint != self.representation_fingerprint():
            raise ValueError(f"`passage_states` were computed by another model (fingerprint {fingerprint[:12]}...) "
                             f"than this one ({self.representation_fingerprint()[:12]}...): encode the passages "
                             "with this model.")

    def forward(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                passage_input_ids: torch.LongTensor | None = None, passage_attention_mask: torch.Tensor | None = None,
                passage_states: MeanQaPassageOutput | None = None, start_positions: torch.LongTensor | None = None,
                end_positions: torch.LongTensor | None = None, **kwargs) -> QuestionAnsweringModelOutput:
        """Score every passage token as the start and the end of the answer.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch, question_len)`): the questions.
            attention_mask (`torch.Tensor` of shape `(batch, question_len)`, *optional*).
            passage_input_ids (`torch.LongTensor` of shape `(batch, passage_len)`, *optional*), passage_attention_mask:
                the passages, read here; or
            passage_states ([`MeanQaPassageOutput`], *optional*): passages read once before (e.g. from a store).
            start_positions, end_positions (`torch.LongTensor` of shape `(batch,)`, *optional*): the answer's first
                and last passage token, for the loss (mean of the two cross-entropies).
            **kwargs: ignored (e.g. a tokenizer's `token_type_ids`).

        Returns:
            `QuestionAnsweringModelOutput`: `start_logits` and `end_logits` of shape `(batch, passage_len)`, padding
            at the dtype's lowest value.

        Raises:
            ValueError: neither or both of `passage_input_ids` and `passage_states`; passages that are not one per
                question; `passage_states` of another model ([`check_passage_states`]).
            TypeError: `passage_states` that is not a [`MeanQaPassageOutput`].
        """
        if (passage_input_ids is None) == (passage_states is None):
            raise ValueError("give exactly one of `passage_input_ids` and `passage_states`.")
        if passage_states is None:
            passage_states = self.encode_passages(passage_input_ids, passage_attention_mask)
        self.check_passage_states(passage_states, input_ids.shape[0])
        states, mask = passage_states.passage_states, passage_states.passage_attention_mask
        question = self.bert.encode_questions(input_ids, attention_mask)[:, None].to(states.dtype)
        low = torch.finfo(states.dtype).min
        start = (self.qa_start(states) * question).sum(-1).masked_fill(mask == 0, low)
        end = (self.qa_end(states) * question).sum(-1).masked_fill(mask == 0, low)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (nn.functional.cross_entropy(start.float(), start_positions)
                    + nn.functional.cross_entropy(end.float(), end_positions)) / 2
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start, end_logits=end)


# `save_pretrained` copies this file (and the configuration) and writes `auto_map` only for registered classes
MeanQaBertConfig.register_for_auto_class()
MeanQaBertModel.register_for_auto_class("AutoModel")
MeanQaBertForQuestionAnswering.register_for_auto_class("AutoModelForQuestionAnswering")

__all__ = ["MeanQaBertForQuestionAnswering", "MeanQaBertModel", "MeanQaPassageOutput"]
