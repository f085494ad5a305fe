"""Read once, reuse everywhere: a persistent store of precomputed document representations.

[`RepresentationStore`] keeps named tensors per document in safetensors shards (reads into memory of their own, checksums,
atomic commits, file locking), keyed by `(model fingerprint, settings, content hash)`. The store knows no model: it
imports nothing from the rest of hf-readonce. Filling it from a model is [`hf_readonce.representations`]'s job
([`fill_store`], one adapter per model family); answering questions from it is
[`hf_readonce.tasks.question_answering_store.answer_from_store`]. [`export_to_dataset`] / [`import_from_dataset`]
move a store to and from the Hub as a dataset. The command line is
`hf-readonce encode | answer | info | verify | prune`.

Modules: `errors` (exceptions), `keys` (content hash, settings, space and representation keys), `shards` (the
on-disk format, checksums, atomic writes), `manifest` (the schema of manifests, the paths they may name, shard
headers read back), `store` ([`RepresentationStore`], [`StoreWriter`]), `maintenance` (info, verify, repair, prune),
`datasets_io` (`datasets` export and import).
"""

from .datasets_io import export_to_dataset, import_from_dataset
from .errors import (
    CorruptedManifestError,
    CorruptedShardError,
    MissingRepresentationError,
    ReadOnlyStoreError,
    RepresentationMismatchError,
    StoreError,
    StoreNotFoundError,
)
from .keys import (
    DocumentEntry,
    RepresentationKey,
    RepresentationSpace,
    canonical_settings,
    content_hash,
    rank_of,
    representation_key,
    space_key,
)
from .maintenance import Corruption, VerifyReport, bytes_per_1000_tokens, restore_store_marker
from .shards import FORMAT_VERSION, resolve_dtype, tensors_checksum, tensors_read_checksum
from .store import RepresentationStore, StoreWriter

__all__ = [
    "FORMAT_VERSION",
    "CorruptedManifestError",
    "CorruptedShardError",
    "Corruption",
    "DocumentEntry",
    "MissingRepresentationError",
    "ReadOnlyStoreError",
    "StoreNotFoundError",
    "RepresentationKey",
    "RepresentationMismatchError",
    "RepresentationSpace",
    "RepresentationStore",
    "StoreError",
    "StoreWriter",
    "VerifyReport",
    "bytes_per_1000_tokens",
    "canonical_settings",
    "content_hash",
    "export_to_dataset",
    "import_from_dataset",
    "rank_of",
    "representation_key",
    "resolve_dtype",
    "restore_store_marker",
    "space_key",
    "tensors_checksum",
    "tensors_read_checksum",
]
