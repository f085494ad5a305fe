"""How a stored representation is keyed: the content hash of a document, the canonical JSON of settings, the space
key of one (model fingerprint, settings) pair, the representation key of a document in a space, and the
[`RepresentationSpace`] / [`DocumentEntry`] records of the index."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


# ---------------------------------------------------------------------------------------------------------- keys
def content_hash(text: str) -> str:
    """Key of a document: SHA-256 hex digest (64 characters) of its UTF-8 text. Only the content counts: the same
    text from two files, or under two ids, is one document.

    Raises:
        TypeError: if `text` is not a `str`.
    """
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def canonical_settings(settings: Mapping[str, Any]) -> str:
    """Canonical JSON of a settings mapping (sorted keys, no whitespace, no NaN): the form hashed into space keys.

    Raises:
        TypeError: if `settings` is not a mapping with `str` keys, or holds values JSON cannot represent.
        ValueError: if a value is NaN or infinite.
    """
    if not isinstance(settings, Mapping):
        raise TypeError(f"`settings` must be a mapping (dict), got {type(settings).__name__}.")
    for key in settings:
        if not isinstance(key, str):
            raise TypeError(f"`settings` keys must be str, got {key!r}.")
    try:
        return json.dumps(dict(settings), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as error:
        raise TypeError(f"`settings` must hold only JSON values (str, int, float, bool, None, lists, dicts): {error}") from None
    except ValueError as error:
        raise ValueError(f"`settings` must not hold NaN or infinite numbers: {error}") from None


def _check_fingerprint(fingerprint: str) -> str:
    if not isinstance(fingerprint, str) or not fingerprint:
        raise TypeError(f"`fingerprint` must be a non-empty str, got {fingerprint!r}.")
    return fingerprint


def space_key(fingerprint: str, settings: Mapping[str, Any]) -> str:
    """Key of a representation space: SHA-256 hex of the model fingerprint and the canonical settings. Any change to
    either gives another key.

    Args:
        fingerprint (`str`): identifies the weights and the config fields that change the representation (e.g.
            `model.representation_fingerprint()`).
        settings (`Mapping[str, Any]`): representation settings (e.g. `num_decomposed_layers`, window length).

    Raises:
        TypeError / ValueError: as [`canonical_settings`]; a fingerprint that is not a non-empty `str`.
    """
    _check_fingerprint(fingerprint)
    payload = json.dumps({"fingerprint": fingerprint, "settings": json.loads(canonical_settings(settings))},
                         sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


class RepresentationKey(NamedTuple):
    """The one key of a stored representation: the [`space_key`] of (model fingerprint, settings) and the
    [`content_hash`] of the document. A `NamedTuple`, so it equals, hashes and unpacks as the plain
    `(space_key, content_hash)` tuple (the store's index is keyed by it).

    Attributes:
        space (`str`): 64 hex characters. content_hash (`str`): 64 hex characters.
    """

    space: str
    content_hash: str


def check_document_hash(document_hash, name: str = "document_hash") -> str:
    """Check that `document_hash` is a [`content_hash`] (64 lowercase hex characters) and return it.

    Raises:
        TypeError: if it is not a `str` (a list passed where one hash is expected, `None`).
        ValueError: if it is a string of another form (a document's text, an uppercase or truncated hash), naming
            `name`.
    """
    if not isinstance(document_hash, str):
        raise TypeError(f"`{name}` must be a content hash (str), got {type(document_hash).__name__}.")
    if len(document_hash) != 64 or document_hash.strip("0123456789abcdef"):
        shown = document_hash if len(document_hash) <= 70 else document_hash[:67] + "..."
        raise ValueError(f"`{name}` must be a 64-character lowercase hex SHA-256 (`content_hash(text)`), got "
                         f"{shown!r}.")
    return document_hash


def check_document_hashes(document_hashes, name: str = "document_hashes") -> list[str]:
    """[`check_document_hash`] for each of a sequence of hashes; a single string is refused (it would be read as
    one hash per character).

    Raises:
        TypeError: `document_hashes` is a single `str` or not iterable, or holds a non-string.
        ValueError: as [`check_document_hash`].
    """
    if isinstance(document_hashes, (str, bytes)):
        raise TypeError(f"`{name}` must be a list of content hashes, not a single {type(document_hashes).__name__}; "
                        "pass [document_hash].")
    try:
        hashes = list(document_hashes)
    except TypeError:
        raise TypeError(f"`{name}` must be a list of content hashes, got {type(document_hashes).__name__}.") from None
    return [check_document_hash(h, f"{name}[{i}]") for i, h in enumerate(hashes)]


def check_bool(value, name: str, optional: bool = False) -> bool | None:
    """`value` if it is a `bool` (or `None` where `optional`), else a `TypeError` naming `name`: a string such as
    `"false"` or `"no"` would read as true (a store opened writable or created where it should not be, a folder
    deleted), a number as whatever its truth is.

    Raises:
        TypeError: `value` is not a `bool` (nor `None` where `optional`).
    """
    if isinstance(value, bool) or (optional and value is None):
        return value
    raise TypeError(f"`{name}` must be a bool{' or None' if optional else ''}, got {type(value).__name__} {value!r}.")


def representation_key(fingerprint: str, settings: Mapping[str, Any], text_or_hash: str, *,
                       is_hash: bool = False) -> RepresentationKey:
    """The full key under which a document's representation is stored.

    Args:
        fingerprint (`str`), settings (`Mapping`): the representation space (see [`space_key`]).
        text_or_hash (`str`): the document text, or (with `is_hash=True`) its [`content_hash`].

    Returns:
        [`RepresentationKey`] `(space, content_hash)`.

    Raises:
        TypeError / ValueError: as [`space_key`] and [`content_hash`].
    """
    return RepresentationKey(space_key(fingerprint, settings), text_or_hash if is_hash else content_hash(text_or_hash))


def rank_of(document_hash: str, num_processes: int) -> int:
    """Process (rank) that encodes a document when `num_processes` processes share a corpus: the content hash,
    read as an integer, modulo `num_processes`. Deterministic, independent of file order, and identical texts go to
    the same rank.

    Raises:
        ValueError: if `num_processes < 1` or `document_hash` is not hexadecimal.
    """
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"`num_processes` must be an int >= 1, got {num_processes!r}.")
    try:
        return int(document_hash[:16], 16) % num_processes
    except (TypeError, ValueError):
        raise ValueError(f"`document_hash` must be a hex digest, got {document_hash!r}.") from None


def printable(text) -> str:
    """`text` (any value, as `str`) with every non-printable character (newlines, escapes, controls) written as a
    Python escape, so that a crafted document id or file name cannot forge a line of output."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)


# ---------------------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class RepresentationSpace:
    """One (model fingerprint, settings) pair, as recorded in the store.

    Attributes:
        key (`str`): [`space_key`] of the pair.
        fingerprint (`str`): model fingerprint.
        settings (`dict`): representation settings.
        model_type (`str` or `None`): the model family that wrote it (e.g. `"deformer_bert"`), informative only.
        model_name (`str` or `None`): the name the writer gave the model (`hf-readonce encode` records its MODEL
            argument, `fill_store` the model's `config.name_or_path`), informative only: an opaque string the store
            never interprets; `None` where none was given (and in stores written before it was recorded). Of a space
            several writers wrote, the name one of its shards records; `RepresentationStore.info()` lists them all.
    """

    key: str
    fingerprint: str
    settings: dict = field(hash=False, compare=False)
    model_type: str | None = field(default=None, compare=False)
    model_name: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        """One line naming the fingerprint (first 16 hex digits) and the settings."""
        return f"fingerprint {self.fingerprint[:16]}... settings {canonical_settings(self.settings)}"


@dataclass(frozen=True)
class DocumentEntry:
    """Where one stored document lives.

    Attributes:
        space (`str`): space key. content_hash (`str`): document key. shard (`str`): shard path relative to the
        store. tensors (`dict[str, dict]`): per tensor name, its `key` in the shard, `dtype` and `shape`.
        sha256 (`str`): [`tensors_checksum`] of the document (SHA-256). meta (`dict`): small JSON metadata (e.g.
        `id`). xxh3_128 (`str`): [`tensors_read_checksum`] of the document, checked by every read; `""` for
        documents written by earlier releases (their reads check `sha256`).
    """

    space: str
    content_hash: str
    shard: str
    tensors: dict = field(hash=False, compare=False)
    sha256: str = ""
    meta: dict = field(default_factory=dict, hash=False, compare=False)
    xxh3_128: str = ""

    @property
    def name(self) -> str:
        """Human name: the document's `id` from its metadata if any (control characters escaped, see
        [`printable`]), else the first 16 hex digits of its hash."""
        doc_id = self.meta.get("id") if isinstance(self.meta, dict) else None
        return f"{printable(doc_id)} ({self.content_hash[:16]})" if doc_id is not None else self.content_hash[:16]


__all__ = ["DocumentEntry", "RepresentationKey", "RepresentationSpace", "canonical_settings", "check_bool",
           "check_document_hash",
           "check_document_hashes", "content_hash", "printable", "rank_of", "representation_key", "space_key"]
