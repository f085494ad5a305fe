# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""ReadTwice-BERT (Zemlyanskiy et al., 2021): configuration and models."""

from .configuration_readtwice_bert import ReadTwiceBertConfig
from .modeling_readtwice_bert import (
    ReadTwiceBertForMaskedLM,
    ReadTwiceBertForQuestionAnswering,
    ReadTwiceBertModel,
    ReadTwiceBertModelOutput,
    ReadTwiceBertPreTrainedModel,
    ReadTwiceDocumentOutput,
    ReadTwiceMaskedLMOutput,
    ReadTwiceQuestionAnsweringModelOutput,
    readtwice_mlm_masking,
    readtwice_span_loss,
)

__all__ = [
    "ReadTwiceBertConfig",
    "ReadTwiceBertForMaskedLM",
    "ReadTwiceBertForQuestionAnswering",
    "ReadTwiceBertModel",
    "ReadTwiceBertModelOutput",
    "ReadTwiceBertPreTrainedModel",
    "ReadTwiceDocumentOutput",
    "ReadTwiceMaskedLMOutput",
    "ReadTwiceQuestionAnsweringModelOutput",
    "readtwice_mlm_masking",
    "readtwice_span_loss",
]
