# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""ReadTwice-BERT configuration (Zemlyanskiy et al., 2021, "ReadTwice: Reading Very Large Documents with
Memories")."""

import inspect

from transformers import BertConfig, PretrainedConfig

MEMORY_TYPES = ("cls", "sts", "entity")
MEMORY_OUTPUT_INITS = ("identity", "zero")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pop_init_fields(config_class, kwargs: dict) -> dict:
    """Remove from `kwargs` and return the keyword arguments that are fields of `config_class` or of the transformers
    config it extends (the arguments of their `__init__`, and the names its `attribute_map` gives them, such as
    GPT-2's `max_position_embeddings` for `n_positions`, which `__init__` also takes; not `PreTrainedConfig`'s own,
    which transformers handles): what a config's `from_dict` builds the config with, so that `__init__` validates
    them together and derives its defaults from them, instead of transformers setting them unchecked after
    `__init__`."""
    own = {name for klass in config_class.__mro__[:config_class.__mro__.index(PretrainedConfig)]
           if "__init__" in vars(klass) for name in inspect.signature(klass.__init__).parameters}
    own -= {"self", "args", "kwargs", *inspect.signature(PretrainedConfig.__init__).parameters}
    own |= {alias for alias, name in getattr(config_class, "attribute_map", {}).items() if name in own}
    return {key: kwargs.pop(key) for key in list(kwargs) if key in own}


class ReadTwiceBertConfig(BertConfig):
    r"""
    Configuration of the ReadTwice-BERT models: BERT₁ reads every segment of a long document independently, each
    segment's memories are gathered into one table per document, a MemoryAttention layer merges every token with the
    table, and a small BERT₂ reads the merged states (§2.1, Figure 1).

    All [`~transformers.BertConfig`] arguments are accepted unchanged, so any BERT checkpoint's `config.json` loads
    into it (BERT₁ is that checkpoint). The extra arguments are:

    Args:
        memory_type (`str`, *optional*, defaults to `"sts"`):
            ExtractMemories variant (§2.1): `"cls"` (one memory per segment, its `[CLS]` state), `"sts"` (one memory
            per `span_length`-token span: first and last token states concatenated and projected) or `"entity"`
            (one memory per entity mention, encoded like STS; MemoryAttention is then applied only to mention tokens,
            App. A). `"entity"` needs `entity_spans` at every forward.
        span_length (`int`, *optional*, defaults to 32):
            Tokens per STS span (§2.1: 32).
        num_second_read_layers (`int`, *optional*, defaults to 2):
            Layers of BERT₂ (§2.1: 2). Must be in `[1, num_hidden_layers]`. The paper pre-trains BERT₂ with BERT₁,
            end-to-end, with MLM on BERT₂'s output (§2.2), starting from RoBERTa-base (§4.1). This library ships no
            such pre-trained checkpoint: when a BERT checkpoint without BERT₂ weights is loaded, BERT₂ layer `j`
            starts as a copy of BERT₁ layer `num_hidden_layers - num_second_read_layers + j`, a warm start of this
            library (not the paper's) that task fine-tuning or [`ReadTwiceBertForMaskedLM`] pre-training then trains.
        max_relative_segment_distance (`int`, *optional*, defaults to 10):
            B of eq. 3: the relative segment distance `i - m_s` is clipped to `[-B, B]` before indexing the learned
            scores ω (eq. 2); `2B + 1` scores.
        memory_top_k (`int` or `None`, *optional*, defaults to `None`):
            `None`: dense MemoryAttention, every token attends to all memories of its document (eq. 1-4), as the
            paper's pre-training and its HotpotQA and TriviaQA fine-tuning. An int k: sparse MemoryAttention, each
            token attends only to the k memories with the largest dot product with its state (plus the no-op memory
            M₀); the paper uses it, with k = 100, only for NarrativeQA fine-tuning (App. C.4, "Fine-tuning"). A
            table of at most k memories is attended densely. Saved configs carry the field explicitly, so a model
            saved with the former default (100) loads with 100 and keeps its representation fingerprint.
        single_segment (`bool`, *optional*, defaults to `False`):
            The paper's SS ablation (§4.4): each segment sees only its own memories, so segments are read
            independently (no information crosses segments).
        segment_length (`int`, *optional*, defaults to `min(512, max_position_embeddings)`):
            Tokens per segment (§4.2: 512), used by the data helpers; must not exceed `max_position_embeddings`.
        segment_overlap (`int`, *optional*, defaults to `min(128, segment_length // 4)`):
            Tokens shared by consecutive segments of a document (§4.2: 128); in `[0, segment_length)`.
        question_in_first_read (`bool`, *optional*, defaults to `True`):
            `True` is the paper's QA setup: every segment is `[CLS] question [SEP] document part [SEP]`, so BERT₁ and
            the memory table depend on the question. `False` is the read-once variant: BERT₁ reads document segments
            alone (`[CLS] document part [SEP]`) and the question alone; the first read and memory table can then be
            computed once per document (`encode_documents`) and reused for every question, and BERT₂ reads
            `[question states; merged segment states]`.
        memory_output_init (`str`, *optional*, defaults to `"identity"`):
            Initialisation of the linear map applied to the MemoryAttention output (eq. 4) before the residual sum.
            `"identity"` reproduces eq. 4 exactly at initialisation; `"zero"` starts with MemoryAttention switched
            off (`H³ = LayerNorm(H¹)`), a gentler warm start from a BERT checkpoint that was not pretrained with
            memories.
        coref_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the coreference auxiliary loss (App. B) in [`ReadTwiceBertForMaskedLM`]; used only when
            `entity_ids` are passed. `0` disables it.
        max_question_length (`int`, *optional*):
            Question length the checkpoint was trained with, counted as the layout reads a question (read-once:
            `[CLS] question [SEP]` ids; the paper's layout: the question's own tokens); recorded by
            `run_readtwice_qa.py`, it is the default of `hf-readonce answer` and of the `question-answering`
            pipeline (64 where it is `None`, unknown). Not part of the representation fingerprint: no stored first
            read holds a question.

    Raises:
        ValueError: naming the field, if `memory_type` or `memory_output_init` is not one of the allowed strings, if an
            integer field has the wrong type or range (`span_length >= 1`, `1 <= num_second_read_layers <=
            num_hidden_layers`, `max_relative_segment_distance >= 0`, `memory_top_k >= 1` or `None`,
            `2 <= segment_length <= max_position_embeddings`, `0 <= segment_overlap < segment_length`,
            `max_question_length >= 3` or `None`), if a boolean field is not a `bool`, or if `coref_loss_weight` is
            negative or not finite.

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "path/to/readtwice-checkpoint"
    >>> ReadTwiceBertConfig = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = ReadTwiceBertConfig(num_hidden_layers=6, memory_type="cls", memory_top_k=None)
    >>> config.num_second_read_layers
    2
    ```
    """

    model_type = "readtwice_bert"
    # fields the first read never reads, besides the ones no family's representation reads
    # (`modeling_readtwice_bert._FINGERPRINT_IGNORED_FIELDS`): a training loss weight, and the recorded mention finder
    # (`mentions`, a reading setting the store keys as such, as the other families' recorded lengths)
    fingerprint_ignored_fields = ("coref_loss_weight", "mentions")
    # what `Trainer.evaluate` / `predict` leave out of the predictions they gather: `question_length` is a Python int
    # (the width of the question states at the start of each row), which accelerate cannot pad or concatenate; rows
    # of several batches line up when their questions are padded to one width (`ReadTwiceBertModel.forward`)
    keys_to_ignore_at_inference = ["question_length"]

    def __init__(
        self,
        memory_type: str = "sts",
        span_length: int = 32,
        num_second_read_layers: int = 2,
        max_relative_segment_distance: int = 10,
        memory_top_k: int | None = None,
        single_segment: bool = False,
        segment_length: int | None = None,
        segment_overlap: int | None = None,
        question_in_first_read: bool = True,
        memory_output_init: str = "identity",
        coref_loss_weight: float = 1.0,
        max_question_length: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if memory_type not in MEMORY_TYPES:
            raise ValueError(f"`memory_type` must be one of {MEMORY_TYPES}, got {memory_type!r}.")
        if memory_output_init not in MEMORY_OUTPUT_INITS:
            raise ValueError(f"`memory_output_init` must be one of {MEMORY_OUTPUT_INITS}, got {memory_output_init!r}.")
        for name, value, low in (("span_length", span_length, 1), ("max_relative_segment_distance",
                                                                    max_relative_segment_distance, 0)):
            if not _is_int(value) or value < low:
                raise ValueError(f"`{name}` must be an int >= {low}, got {value!r}.")
        if not _is_int(num_second_read_layers) or not 1 <= num_second_read_layers <= self.num_hidden_layers:
            raise ValueError(
                f"`num_second_read_layers` must be an int in [1, num_hidden_layers={self.num_hidden_layers}], got "
                f"{num_second_read_layers!r}."
            )
        if memory_top_k is not None and (not _is_int(memory_top_k) or memory_top_k < 1):
            raise ValueError(f"`memory_top_k` must be None (dense) or an int >= 1, got {memory_top_k!r}.")
        if segment_length is None:
            segment_length = min(512, self.max_position_embeddings)
        if segment_overlap is None and _is_int(segment_length):
            segment_overlap = min(128, segment_length // 4)
        if not _is_int(segment_length) or not 2 <= segment_length <= self.max_position_embeddings:
            raise ValueError(
                f"`segment_length` must be an int in [2, max_position_embeddings={self.max_position_embeddings}], "
                f"got {segment_length!r}."
            )
        if not _is_int(segment_overlap) or not 0 <= segment_overlap < segment_length:
            raise ValueError(
                f"`segment_overlap` must be an int in [0, segment_length={segment_length}), got {segment_overlap!r}."
            )
        for name, value in (("single_segment", single_segment), ("question_in_first_read", question_in_first_read)):
            if not isinstance(value, bool):
                raise ValueError(f"`{name}` must be a bool, got {value!r}.")
        if isinstance(coref_loss_weight, bool) or not isinstance(coref_loss_weight, (int, float)) or not (
            0 <= coref_loss_weight < float("inf")
        ):
            raise ValueError(f"`coref_loss_weight` must be a finite float >= 0, got {coref_loss_weight!r}.")
        if max_question_length is not None and (not _is_int(max_question_length) or max_question_length < 3):
            raise ValueError(f"`max_question_length` must be None or an int >= 3, got {max_question_length!r}.")
        self.memory_type = memory_type
        self.span_length = span_length
        self.num_second_read_layers = num_second_read_layers
        self.max_relative_segment_distance = max_relative_segment_distance
        self.memory_top_k = memory_top_k
        self.single_segment = single_segment
        self.segment_length = segment_length
        self.segment_overlap = segment_overlap
        self.question_in_first_read = question_in_first_read
        self.memory_output_init = memory_output_init
        self.coref_loss_weight = float(coref_loss_weight)
        self.max_question_length = max_question_length

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """As [`~transformers.PreTrainedConfig.from_dict`], but the keyword arguments that are fields of this class or of
        the transformers config it extends (the arguments of their `__init__`, as `from_pretrained(checkpoint,
        field=value)` passes them; not `PreTrainedConfig`'s own, which transformers handles) build the config with the
        saved values instead of being set on it afterwards (what transformers does with the others): they are
        validated together as in `__init__` (a `ValueError` naming the field; `num_hidden_layers=8,
        num_second_read_layers=6` is checked against the 8 given), and the defaults `__init__` derives from them
        follow them where the checkpoint does not record those (e.g. ReadTwice's `segment_overlap` from
        `segment_length`, DeFormer's `num_decomposed_layers` from `num_hidden_layers`)."""
        given = _pop_init_fields(cls, kwargs)
        return super().from_dict({**config_dict, **given}, **kwargs)

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        """As `PreTrainedConfig.get_config_dict`, but a plain BERT checkpoint's `model_type` ("bert") reads as
        "readtwice_bert": ReadTwice starts from BERT weights (the paper initialises from a pretrained BERT-style
        checkpoint, RoBERTa, and pre-trains both readers, §4.1; this library copies BERT₁'s top layers into BERT₂ as
        a warm start of its own, see `num_second_read_layers`), so transformers' "model of type bert to instantiate
        a model of type readtwice_bert" warning does not apply. Any other model type is left as is (and still warned about)."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if config_dict.get("model_type") == "bert":
            config_dict = {**config_dict, "model_type": cls.model_type}
        return config_dict, kwargs


__all__ = ["ReadTwiceBertConfig"]
