# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""LongDoc BART configuration: BART with neighborhood and convolutional attention for long-document summarization
(Kosaraju, Ang and Nabulsi, "Faster Transformers for Document Summarization", CS224N report)."""

import inspect

from transformers import BartConfig, PretrainedConfig

ENCODER_ATTENTION_TYPES = ("full", "neighborhood", "convolutional", "convolutional_per_head",
                           "neighborhood_convolutional")
DECODER_ATTENTION_TYPES = ("full", "neighborhood")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


class LongDocBartConfig(BartConfig):
    r"""
    Configuration of [`LongDocBartForConditionalGeneration`]: a BART whose encoder self-attention is neighborhood
    attention or convolutional attention (paper §2.3, "Proposed Models", Fig. 1), and whose decoder self-attention
    may be causal neighborhood attention.

    Every [`~transformers.BartConfig`] argument is accepted unchanged, so any BART checkpoint's `config.json` loads
    into it (with the defaults below). The extra arguments are:

    Args:
        encoder_attention_type (`str`, *optional*, defaults to `"neighborhood"`):
            The self-attention of every encoder layer:

            - `"full"`: BART's attention (the paper's baseline).
            - `"neighborhood"`: token i attends to the tokens j with `|i - j| <= neighborhood_radius` (the 2r + 1
              "surrounding words", §2.3 "Neighborhood Attention"). O(n·r) time and memory.
            - `"convolutional"`: the projected queries, keys and values are shortened by one Conv1d (kernel
              `conv_kernel_size`, stride `conv_stride`) over all `d_model` channels, full attention runs over the
              ceil(n / stride) compressed positions, and a ConvTranspose1d restores length n (§2.3 "Convolutional
              Model", Fig. 1 left: "the same convolution across all the heads").
            - `"convolutional_per_head"`: the same with one convolution per head (grouped convolutions,
              `groups = num_heads`; Fig. 1 middle, "Multi-Head Conv-Attn").
            - `"neighborhood_convolutional"`: both combined (the paper's future work, §3.4): the shared convolution
              of `"convolutional"`, then neighborhood attention over the compressed positions with radius
              `ceil(neighborhood_radius / conv_stride)` compressed positions (the same reach in tokens, rounded up).
        neighborhood_radius (`int`, *optional*, defaults to 100):
            r, the paper's neighborhood size (§3.2: r = 100). `>= 0` (r = 0: each token attends to itself only).
        conv_kernel_size (`int`, *optional*, defaults to 3):
            Kernel of the (de)convolutions (§3.2: "filters of size 3"). `>= 1`.
        conv_stride (`int`, *optional*, defaults to 3):
            Stride of the (de)convolutions (§3.2: "stride 3"). In `[1, conv_kernel_size]`, so that every token is
            covered by at least one window.
        decoder_attention_type (`str`, *optional*, defaults to `"full"`):
            The self-attention of every decoder layer: `"full"` (BART's causal attention) or `"neighborhood"` (causal
            neighborhood: the query at position t attends to positions `t - r .. t`, also with generate()'s KV
            cache). Cross-attention is always full.
        max_document_length (`int`, *optional*):
            Tokens read per document when the checkpoint was trained (recorded by the LongDoc summarization recipe):
            the default of the summarization pipeline, the store adapter and `hf-readonce encode` / `summarize`, so
            they read documents as training did. `None`: `max_position_embeddings`. Not part of the representation
            fingerprint (the store keys it as a setting).

    Raises:
        ValueError: naming the argument, if an attention type is unknown, `neighborhood_radius` is not an int
            `>= 0`, `conv_kernel_size` is not an int `>= 1`, `conv_stride` is not an int in
            `[1, conv_kernel_size]`, or `max_document_length` is not None or a positive int.

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "path/to/longdoc-checkpoint"
    >>> LongDocBartConfig = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = LongDocBartConfig(encoder_attention_type="convolutional_per_head")
    >>> (config.neighborhood_radius, config.conv_kernel_size, config.conv_stride, config.decoder_attention_type)
    (100, 3, 3, 'full')
    ```
    """

    model_type = "longdoc_bart"
    # fields the encoder never reads, besides the ones no family's representation reads
    # (`modeling_longdoc_bart._FINGERPRINT_IGNORED_FIELDS`): every decoder field (`decoder_attention_type` included).
    # (`_attn_implementation` is not a `to_dict()` field: SDPA, eager and FlexAttention compute the same outputs, to
    # float rounding, tested, so stored outputs are shared between them.)
    # `max_document_length` is a reading setting, keyed by the store as such.
    fingerprint_ignored_fields = ("max_document_length",)
    fingerprint_ignored_prefixes = ("decoder_",)

    def __init__(
        self,
        encoder_attention_type: str = "neighborhood",
        neighborhood_radius: int = 100,
        conv_kernel_size: int = 3,
        conv_stride: int = 3,
        decoder_attention_type: str = "full",
        max_document_length: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_document_length = max_document_length
        self.encoder_attention_type = encoder_attention_type
        self.neighborhood_radius = neighborhood_radius
        self.conv_kernel_size = conv_kernel_size
        self.conv_stride = conv_stride
        self.decoder_attention_type = decoder_attention_type
        self.validate_longdoc_settings()

    def default_document_length(self) -> int | None:
        """Tokens read per document unless a caller says otherwise: `max_document_length` where the checkpoint records
        it, else `max_position_embeddings`. The one default of the summarization pipeline, the store adapter and
        `hf-readonce encode` / `summarize`.

        Returns:
            `int` (tokens), or `None` for a config without a position table.
        """
        return getattr(self, "max_document_length", None) or getattr(self, "max_position_embeddings", None)

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

    def validate_longdoc_settings(self) -> None:
        r"""Check the LongDoc fields (see the class docstring). Called by `__init__` (also through `from_pretrained`
        and `from_dict`, which build the config with the fields they are given) and again by the LongDoc encoder and
        decoder when they are built, for a field assigned on a config after its construction
        (`config.neighborhood_radius = -1`).

        Raises:
            ValueError: naming the field, as the class docstring says.
        """
        max_document_length = getattr(self, "max_document_length", None)
        if max_document_length is not None and (not _is_int(max_document_length) or max_document_length < 1):
            raise ValueError(f"`max_document_length` must be None or a positive int, got {max_document_length!r}.")
        encoder_attention_type, decoder_attention_type = self.encoder_attention_type, self.decoder_attention_type
        neighborhood_radius, conv_kernel_size, conv_stride = (self.neighborhood_radius, self.conv_kernel_size,
                                                              self.conv_stride)
        if encoder_attention_type not in ENCODER_ATTENTION_TYPES:
            raise ValueError(
                f"`encoder_attention_type` must be one of {ENCODER_ATTENTION_TYPES}, got {encoder_attention_type!r}."
            )
        if decoder_attention_type not in DECODER_ATTENTION_TYPES:
            raise ValueError(
                f"`decoder_attention_type` must be one of {DECODER_ATTENTION_TYPES}, got {decoder_attention_type!r}."
            )
        if not _is_int(neighborhood_radius) or neighborhood_radius < 0:
            raise ValueError(f"`neighborhood_radius` must be an int >= 0, got {neighborhood_radius!r}.")
        if not _is_int(conv_kernel_size) or conv_kernel_size < 1:
            raise ValueError(f"`conv_kernel_size` must be an int >= 1, got {conv_kernel_size!r}.")
        if not _is_int(conv_stride) or not 1 <= conv_stride <= conv_kernel_size:
            raise ValueError(
                f"`conv_stride` must be an int in [1, conv_kernel_size={conv_kernel_size}] so that every token is in "
                f"a window, got {conv_stride!r}."
            )


__all__ = ["LongDocBartConfig"]
