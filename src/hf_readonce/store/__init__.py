"""Read once, reuse everywhere: a persistent store of precomputed document representations.

[`RepresentationStore`] keeps named tensors per document in safetensors shards (memory-mapped reads, checksums,
atomic commits, file locking), keyed by `(model fingerprint, settings, content hash)`. Model adapters
([`DeformerStoreAdapter`]) say how a model turns texts into those tensors; [`encode_documents`] fills a store,
[`make_encode_function`] does it from `datasets.Dataset.map`, [`answer_from_store`] answers questions from it, and
[`export_to_dataset`] / [`import_from_dataset`] move a store to and from the Hub as a dataset. The command line is
`hf-readonce encode | answer | info | verify`.
"""

from .adapters import DeformerStoreAdapter, ReadOnceStoreAdapter, get_adapter, register_adapter, tokenizer_fingerprint
from .core import (
    FORMAT_VERSION,
    CorruptedShardError,
    Corruption,
    DocumentEntry,
    MissingRepresentationError,
    ReadOnlyStoreError,
    RepresentationMismatchError,
    RepresentationSpace,
    RepresentationStore,
    StoreError,
    StoreWriter,
    VerifyReport,
    bytes_per_1000_tokens,
    canonical_settings,
    content_hash,
    rank_of,
    representation_key,
    resolve_dtype,
    space_key,
    tensors_checksum,
)
from .datasets_io import export_to_dataset, import_from_dataset
from .encode import (
    BadLine,
    EncodeStats,
    StoreEncodeFunction,
    answer_from_store,
    encode_documents,
    find_deformer_space,
    iter_documents,
    iter_jsonl,
    make_encode_function,
)

__all__ = [
    "FORMAT_VERSION",
    "BadLine",
    "CorruptedShardError",
    "Corruption",
    "DeformerStoreAdapter",
    "DocumentEntry",
    "EncodeStats",
    "MissingRepresentationError",
    "ReadOnlyStoreError",
    "ReadOnceStoreAdapter",
    "RepresentationMismatchError",
    "RepresentationSpace",
    "RepresentationStore",
    "StoreEncodeFunction",
    "StoreError",
    "StoreWriter",
    "VerifyReport",
    "answer_from_store",
    "bytes_per_1000_tokens",
    "canonical_settings",
    "content_hash",
    "encode_documents",
    "export_to_dataset",
    "find_deformer_space",
    "get_adapter",
    "import_from_dataset",
    "iter_documents",
    "iter_jsonl",
    "make_encode_function",
    "rank_of",
    "register_adapter",
    "representation_key",
    "resolve_dtype",
    "space_key",
    "tensors_checksum",
    "tokenizer_fingerprint",
]
