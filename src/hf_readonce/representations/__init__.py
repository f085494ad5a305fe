"""The bridge between models and the store: one adapter per model family says how the model turns documents into
stored tensors, which fingerprint and settings key them, and how stored tensors become the model's input again.

Adding a family means adding one file here that defines its adapter and calls
`register_adapter(model_type, AdapterClass)` on its last line: every module of this folder other than `base`,
`registry`, `fill` and `recompute` is imported below, so the registry always holds every family. [`fill_store`]
fills a [`~hf_readonce.store.RepresentationStore`] through any registered adapter; [`recompute_store`] recomputes
stored documents with their model and compares ([`AdapterBase.check_recompute`]).
"""

import importlib
import pkgutil

from .base import AdapterBase, RecomputeCheck, RepresentationAdapter, kl_divergence, pad_rows, tokenizer_fingerprint
from .fill import EncodeStats, StoreEncodeFunction, fill_store, make_encode_function
from .registry import get_adapter, get_adapter_class, register_adapter, registered_adapters

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in {"base", "registry", "fill", "recompute"}:
        importlib.import_module(f"{__name__}.{_module.name}")  # the family file registers its adapter

from .block_attention_llama import BlockAttentionLlamaAdapter  # noqa: E402
from .deformer_bert import DeformerBertAdapter  # noqa: E402
from .longdoc_bart import LongDocBartAdapter, LongDocEncoderOutput  # noqa: E402
from .readonce_bart import ReadOnceBartAdapter  # noqa: E402
from .recompute import SpaceRecomputeReport, recompute_store  # noqa: E402

__all__ = [
    "AdapterBase",
    "BlockAttentionLlamaAdapter",
    "DeformerBertAdapter",
    "EncodeStats",
    "LongDocBartAdapter",
    "LongDocEncoderOutput",
    "ReadOnceBartAdapter",
    "RecomputeCheck",
    "RepresentationAdapter",
    "SpaceRecomputeReport",
    "StoreEncodeFunction",
    "fill_store",
    "get_adapter",
    "get_adapter_class",
    "kl_divergence",
    "make_encode_function",
    "pad_rows",
    "recompute_store",
    "register_adapter",
    "registered_adapters",
    "tokenizer_fingerprint",
]
