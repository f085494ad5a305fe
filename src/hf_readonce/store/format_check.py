"""Check a store against the representation format a checkpoint declares (`representation_format.json`, written
beside the weights by `hf_readonce.hub.publish`), so that a store shared on the Hub is known to fit a model before
any of its tensors is used.

A representation format is a JSON object:

```json
{"format": "hf-readonce-representation-format", "format_version": 1,
 "model_type": "deformer_bert", "representation": "deformer_passage_states/v1",
 "fingerprint_scheme": "deformer_bert.representation_fingerprint/sha256-v1",
 "fingerprint": "<64 hex>", "settings": {"num_decomposed_layers": 4, "max_passage_length": 256, ...},
 "dtype": "float16", "store_format": "hf-readonce-representation-store", "store_format_version": 1}
```

`fingerprint` + `settings` are the store's key of a representation space ([`space_key`]); `dtype` is the floating
dtype the representations are stored in. A model's representations also depend on the dtype it computes in (part of
its fingerprint), so a format may add `"fingerprints": {"float32": "<64 hex>", "float16": "<64 hex>"}`, compute
dtype -> fingerprint (`hf_readonce.hub.publish` declares float32, what a CPU computes in, and the checkpoint's saved
dtype, what CUDA computes in, beside `model_dtype`, the compute dtype of `fingerprint`); a space with any declared
fingerprint fits. This module, like the rest of `store/`, knows no model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from .errors import RepresentationMismatchError
from .keys import RepresentationSpace, canonical_settings, space_key
from .shards import FORMAT_NAME, FORMAT_VERSION

REPRESENTATION_FORMAT_NAME = "hf-readonce-representation-format"
REPRESENTATION_FORMAT_VERSION = 1
REPRESENTATION_FORMAT_FILE = "representation_format.json"
_REQUIRED = ("format", "format_version", "model_type", "fingerprint", "settings", "dtype", "store_format_version")
_FLOATING = ("float32", "float16", "bfloat16", "float64")


def validate_representation_format(representation_format: Mapping) -> dict:
    """Check the shape of a representation format (see the module docstring) and return it as a plain dict.

    Raises:
        TypeError: if it is not a mapping, or `settings` is not a mapping.
        ValueError: a missing key (naming it), another `format`, an unknown `format_version`, or a `dtype` that is
            not a floating dtype name.
    """
    if not isinstance(representation_format, Mapping):
        raise TypeError(f"`representation_format` must be a mapping (the JSON object), got "
                        f"{type(representation_format).__name__}.")
    missing = [key for key in _REQUIRED if key not in representation_format]
    if missing:
        raise ValueError(f"`representation_format` lacks the key(s) {missing}.")
    if representation_format["format"] != REPRESENTATION_FORMAT_NAME:
        raise ValueError(f"`representation_format['format']` is {representation_format['format']!r}, expected "
                         f"{REPRESENTATION_FORMAT_NAME!r}.")
    if representation_format["format_version"] != REPRESENTATION_FORMAT_VERSION:
        raise ValueError(f"representation format version {representation_format['format_version']!r}; this "
                         f"hf-readonce reads version {REPRESENTATION_FORMAT_VERSION}.")
    if not isinstance(representation_format["settings"], Mapping):
        raise TypeError("`representation_format['settings']` must be a mapping.")
    if representation_format["dtype"] not in _FLOATING:
        raise ValueError(f"`representation_format['dtype']` must be one of {_FLOATING}, got "
                         f"{representation_format['dtype']!r}.")
    fingerprints = representation_format.get("fingerprints", {})
    if not isinstance(fingerprints, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in fingerprints.items()):
        raise TypeError("`representation_format['fingerprints']` must map compute dtype names to fingerprints.")
    return json.loads(json.dumps(dict(representation_format)))


def differing_settings(stored: Mapping, declared: Mapping) -> list[str]:
    """The names of the settings whose value differs between two settings mappings.

    Args:
        stored (`Mapping`), declared (`Mapping`): settings (name -> JSON value); a name missing from one counts as
            `None` there.

    Returns:
        `list[str]`: the differing names, sorted.
    """
    return sorted(name for name in set(stored) | set(declared) if stored.get(name) != declared.get(name))


def declared_fingerprints(representation_format: Mapping) -> dict[str, str]:
    """The fingerprints a representation format declares.

    Args:
        representation_format (`Mapping`): a validated format ([`validate_representation_format`]).

    Returns:
        `dict[str, str]`: fingerprint -> the compute dtype that makes it (`"?"` when the format does not say), over
        `fingerprint` (with `model_dtype`) and every entry of `fingerprints`.

    Raises:
        KeyError: a format without `fingerprint` (validate it first).
    """
    fmt = representation_format
    out = {fmt["fingerprint"]: fmt.get("model_dtype") or "?"}
    for dtype, fingerprint in (fmt.get("fingerprints") or {}).items():
        out.setdefault(fingerprint, dtype)
    return out


def load_representation_format(path: str | os.PathLike) -> dict:
    """Read `representation_format.json` from a checkpoint folder (or the file itself) and validate it.

    Raises:
        FileNotFoundError: if the folder has no `representation_format.json`.
        ValueError: unreadable JSON, or see [`validate_representation_format`].
    """
    path = Path(path)
    if path.is_dir():
        path = path / REPRESENTATION_FORMAT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {REPRESENTATION_FORMAT_FILE} at {path.parent}: the checkpoint does not declare a "
                                "representation format (publish it with `hf-readonce publish`).")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    return validate_representation_format(data)


def check_store_format(store, representation_format: Mapping, *, check_dtype: bool = True) -> RepresentationSpace:
    """Check that `store` holds representations of the declared format and return their space.

    Args:
        store ([`RepresentationStore`]): the store to check (read only).
        representation_format (`Mapping`): the checkpoint's format (e.g. from [`load_representation_format`]).
        check_dtype (`bool`, defaults to `True`): also require every floating tensor of the space to be stored in
            the declared `dtype`.

    Returns:
        [`RepresentationSpace`]: the store's space of this fingerprint and these settings.

    Raises:
        RepresentationMismatchError (a `ValueError`): the store's format version differs; no space of the store
            has this fingerprint and these settings (the message names the store's spaces of the same model type and
            the settings that differ, or says that the fingerprint differs); or (with `check_dtype`) a document is
            stored in another dtype (naming it).
        TypeError / ValueError: a malformed format (see [`validate_representation_format`]).
    """
    fmt = validate_representation_format(representation_format)
    if fmt.get("store_format", FORMAT_NAME) != FORMAT_NAME or fmt["store_format_version"] != FORMAT_VERSION:
        raise RepresentationMismatchError(
            f"the checkpoint declares store format {fmt.get('store_format', FORMAT_NAME)!r} version "
            f"{fmt['store_format_version']}; store {store.path} is {FORMAT_NAME!r} version {FORMAT_VERSION}.")
    declared = declared_fingerprints(fmt)
    spaces = {space.key: space for space in store.spaces()}
    key = next((space_key(fingerprint, fmt["settings"]) for fingerprint in declared
                if space_key(fingerprint, fmt["settings"]) in spaces), space_key(fmt["fingerprint"], fmt["settings"]))
    if key not in spaces:
        prints = " or ".join(f"{fingerprint[:16]}... (computed in {dtype})" for fingerprint, dtype in declared.items())
        expected = f"fingerprint {prints}, settings {canonical_settings(fmt['settings'])}"
        same_type = [s for s in spaces.values() if s.model_type in (None, fmt["model_type"])]
        if not same_type:
            found = "; ".join(s.describe() for s in spaces.values()) or "no representation at all"
            raise RepresentationMismatchError(
                f"store {store.path} holds no {fmt['model_type']} representations matching the checkpoint "
                f"({expected}); it holds: {found}.")
        details = []
        for space in same_type:
            differing = differing_settings(space.settings, fmt["settings"])
            what = [f"{name} {space.settings.get(name)!r} != {fmt['settings'].get(name)!r}" for name in differing]
            if space.fingerprint not in declared:
                what.insert(0, f"fingerprint {space.fingerprint[:16]}... is none of the declared ones (other "
                               "weights, another compute dtype than those declared, or another fingerprint scheme)")
            details.append(f"space {space.key[:12]}: " + ", ".join(what))
        raise RepresentationMismatchError(
            f"store {store.path} holds no representations of the checkpoint's format ({expected}): "
            + "; ".join(details) + ". Re-encode the documents with this checkpoint (`hf-readonce encode`).")
    if check_dtype:
        space = spaces[key]
        for entry in store.entries(space.fingerprint, fmt["settings"]):
            for name, info in entry.tensors.items():
                dtype = info.get("dtype")
                if dtype in _FLOATING and dtype != fmt["dtype"]:
                    raise RepresentationMismatchError(
                        f"document {entry.name} of store {store.path} stores {name!r} as {dtype}; the checkpoint "
                        f"declares {fmt['dtype']} (pass check_dtype=False to accept another dtype).")
    return spaces[key]


__all__ = ["REPRESENTATION_FORMAT_FILE", "REPRESENTATION_FORMAT_NAME", "REPRESENTATION_FORMAT_VERSION",
           "check_store_format", "declared_fingerprints", "differing_settings", "load_representation_format",
           "validate_representation_format"]
