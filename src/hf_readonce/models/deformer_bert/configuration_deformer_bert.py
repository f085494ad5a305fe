# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""DeFormer-BERT configuration (Cao et al., ACL 2020, "DeFormer: Decomposing Pre-trained Transformers for Faster
Question Answering")."""

import inspect

from transformers import BertConfig, PretrainedConfig


# Copied from hf_readonce.models.readtwice_bert.configuration_readtwice_bert._pop_init_fields
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


class DeformerBertConfig(BertConfig):
    r"""
    Configuration of a DeFormer-BERT model: a BERT whose lower `num_decomposed_layers` layers read the question
    segment and the passage segment separately, and whose upper layers read them jointly (eq. 5 of the DeFormer
    slides, `[A^n; B^n] = L_{k+1:n}([L_{1:k}(A^0); L_{1:k}(B^0)])`).

    All [`~transformers.BertConfig`] arguments are accepted unchanged, so any BERT checkpoint's `config.json` loads
    into it. The extra arguments are:

    Args:
        num_decomposed_layers (`int`, *optional*):
            k in the paper: how many lower layers (1..k) read question and passage separately. `0` is plain BERT
            (the model is then numerically identical to `BertForQuestionAnswering`). Defaults to three quarters of
            `num_hidden_layers`, rounded down (9 of 12 for BERT-base, the paper's main setting; 4 of 6 for MiniLM-L6).
        passage_position_offset (`int`, *optional*, defaults to 0):
            Position id of the first passage token when `num_decomposed_layers > 0`. Passage positions restart at
            this offset instead of following the question, so cached passage states do not depend on the length of
            the question they are later paired with.
        distillation_temperature (`float`, *optional*, defaults to 2.0):
            Softmax temperature T of the knowledge-distillation loss (paper's auxiliary supervision, L_kd).
        kd_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of L_kd in the training loss; used only when teacher logits are passed to `forward`.
        lrs_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the layerwise representation similarity loss L_lrs; used only when teacher hidden states are
            passed to `forward`.
        max_question_length (`int`, *optional*):
            Question length in tokens (`[CLS] question [SEP]`) the checkpoint was trained and evaluated with;
            recorded by the training pipeline, used as the default of `hf-readonce answer`. `None` if unknown.
        max_passage_length (`int`, *optional*):
            Passage window length in tokens (`[SEP]` included) the checkpoint was trained with; default of
            `hf-readonce encode`. `None` if unknown.
        doc_stride (`int`, *optional*):
            Tokens shared by consecutive passage windows at training time; default of `hf-readonce encode`.
        allow_no_answer (`bool`, *optional*):
            Whether the checkpoint was trained to answer "" (SQuAD 2.0 style); default of `hf-readonce answer`.
        null_score_diff_threshold (`float`, *optional*):
            No-answer margin (logits) tuned on held-out training passages (SQuAD 2.0's `find_best_thresh`); the empty
            answer wins when `null_score - best_span_score` exceeds it. `None` if never tuned (0 is then used).

    Raises:
        ValueError: if `num_decomposed_layers` is not an integer in `[0, num_hidden_layers]`, if
            `passage_position_offset` is negative or leaves no room in `max_position_embeddings`, if the temperature
            is not positive, if a loss weight is negative, if the temperature or a loss weight is not a finite number
            or the threshold is not a number (NaN; an infinite threshold is accepted, `+inf` never answers empty), if
            `allow_no_answer` is not None, True or False (a string such as "no" would read as True), or if a recorded
            window setting is out of range (`max_question_length >= 3`, `max_passage_length >= 2`,
            `0 <= doc_stride < max_passage_length - 1`; the lengths are defaults of the tools that read the
            checkpoint, not bounded by the position table here: the pipeline and the store adapter refuse a length
            the table cannot hold when they use it, naming it).

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "hf-readonce/deformer-minilm-qa-reference"
    >>> DeformerBertConfig = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = DeformerBertConfig(num_hidden_layers=6, num_decomposed_layers=4)
    >>> config.num_decomposed_layers
    4
    ```
    """

    model_type = "deformer_bert"
    # fields the passage states never read, besides the ones no family's representation reads
    # (`modeling_deformer_bert._FINGERPRINT_IGNORED_FIELDS`, `max_question_length` among them): training losses and
    # the other QA settings a training run records (the windows are part of the store's settings instead)
    fingerprint_ignored_fields = ("distillation_temperature", "kd_loss_weight", "lrs_loss_weight",
                                  "max_passage_length", "doc_stride", "allow_no_answer", "null_score_diff_threshold")

    def __init__(
        self,
        num_decomposed_layers: int | None = None,
        passage_position_offset: int = 0,
        distillation_temperature: float = 2.0,
        kd_loss_weight: float = 1.0,
        lrs_loss_weight: float = 1.0,
        max_question_length: int | None = None,
        max_passage_length: int | None = None,
        doc_stride: int | None = None,
        allow_no_answer: bool | None = None,
        null_score_diff_threshold: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_decomposed_layers is None:
            num_decomposed_layers = (3 * self.num_hidden_layers) // 4
        if isinstance(num_decomposed_layers, bool) or not isinstance(num_decomposed_layers, int):
            raise ValueError(
                f"`num_decomposed_layers` must be an int, got {type(num_decomposed_layers).__name__} "
                f"({num_decomposed_layers!r})."
            )
        if not 0 <= num_decomposed_layers <= self.num_hidden_layers:
            raise ValueError(
                f"`num_decomposed_layers` must be between 0 and num_hidden_layers={self.num_hidden_layers}, "
                f"got {num_decomposed_layers}."
            )
        if isinstance(passage_position_offset, bool) or not isinstance(passage_position_offset, int):
            raise ValueError(f"`passage_position_offset` must be an int, got {passage_position_offset!r}.")
        if not 0 <= passage_position_offset < self.max_position_embeddings:
            raise ValueError(
                f"`passage_position_offset` must be in [0, max_position_embeddings={self.max_position_embeddings}), "
                f"got {passage_position_offset}."
            )
        for name, value in (("distillation_temperature", distillation_temperature), ("kd_loss_weight", kd_loss_weight),
                            ("lrs_loss_weight", lrs_loss_weight), ("null_score_diff_threshold", null_score_diff_threshold)):
            if value is None and name == "null_score_diff_threshold":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ValueError(f"`{name}` must be a number, got {value!r}.")
            # the threshold may be infinite (+inf: never answer empty, what the calibration may tune); a loss is not
            # (at T = inf the KD loss is T^2 * 0 = NaN, an infinite weight makes the loss inf)
            if name != "null_score_diff_threshold" and value in (float("inf"), float("-inf")):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}.")
        if not distillation_temperature > 0:
            raise ValueError(f"`distillation_temperature` must be > 0, got {distillation_temperature}.")
        for name, value in (("kd_loss_weight", kd_loss_weight), ("lrs_loss_weight", lrs_loss_weight)):
            if not value >= 0:
                raise ValueError(f"`{name}` must be >= 0, got {value}.")
        if allow_no_answer is not None and not isinstance(allow_no_answer, bool):
            raise ValueError(f"`allow_no_answer` must be None, True or False, got {allow_no_answer!r}.")
        self.num_decomposed_layers = num_decomposed_layers
        self.passage_position_offset = passage_position_offset
        self.distillation_temperature = float(distillation_temperature)
        self.kd_loss_weight = float(kd_loss_weight)
        self.lrs_loss_weight = float(lrs_loss_weight)
        for name, value, low in (("max_question_length", max_question_length, 3),
                                 ("max_passage_length", max_passage_length, 2), ("doc_stride", doc_stride, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"`{name}` must be None or an int >= {low}, got {value!r}.")
        if max_passage_length is not None and doc_stride is not None and doc_stride >= max_passage_length - 1:
            raise ValueError(f"`doc_stride` must be < max_passage_length - 1 = {max_passage_length - 1} (windows hold "
                             f"max_passage_length - 1 tokens and [SEP]), got {doc_stride}.")
        self.max_question_length = max_question_length
        self.max_passage_length = max_passage_length
        self.doc_stride = doc_stride
        self.allow_no_answer = allow_no_answer
        self.null_score_diff_threshold = null_score_diff_threshold

    # Copied from hf_readonce.models.readtwice_bert.configuration_readtwice_bert.ReadTwiceBertConfig.from_dict
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
        "deformer_bert": loading BERT weights into a DeFormer is this model's intended use (its k is chosen at load
        time), so transformers' "model of type bert to instantiate a model of type deformer_bert" warning does not
        apply. Any other model type is left as is (and still warned about)."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if config_dict.get("model_type") == "bert":
            config_dict = {**config_dict, "model_type": cls.model_type}
        return config_dict, kwargs


__all__ = ["DeformerBertConfig"]
