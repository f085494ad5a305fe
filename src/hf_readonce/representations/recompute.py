"""Recompute stored documents with the model that wrote them and compare (what `hf-readonce verify --recompute N
--model M` runs): the store knows no model, so the walk over a store's representation spaces lives here, and each
family's adapter recomputes and compares one document ([`AdapterBase.check_recompute`])."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..store import RepresentationStore, canonical_settings
from ..store.maintenance import store_info
from .base import current_fingerprint, one_tokenizer_fingerprint
from .registry import get_adapter_class


@dataclass
class SpaceRecomputeReport:
    r"""Recomputation of some documents of one representation space of a store.

    Attributes:
        space (`str`): the space key. model_type (`str`): the family. fingerprint (`str`): the model fingerprint.
        settings (`dict`): the space's settings. dtypes (`list[str]`): storage dtypes of its shards.
        stored_documents (`int`): documents the space holds.
        checks (`list[tuple[str, str, RecomputeCheck]]`): per recomputed document, its content hash, its name (id
            and hash) and the [`RecomputeCheck`].
        skipped (`str`, *optional*): why the space was not recomputed (settings this model and tokenizer do not
            give, documents whose text is needed but not given...).
        unavailable (`int`): documents left out because their text is needed and was not given.
    """

    space: str
    model_type: str | None
    fingerprint: str
    settings: dict
    dtypes: list = field(default_factory=list)
    stored_documents: int = 0
    checks: list = field(default_factory=list)
    skipped: str | None = None
    unavailable: int = 0

    @property
    def max_abs_diff(self) -> float | None:
        """The largest `|stored - fresh|` over the recomputed documents (`None` if none was)."""
        return max((c.max_abs_diff for _, _, c in self.checks), default=None)

    @property
    def kls(self) -> list[float]:
        """The KL of each recomputed document that has one."""
        return [c.kl for _, _, c in self.checks if c.kl is not None]

    @property
    def kl_kind(self) -> str | None:
        """Which output distribution the KLs compare (`None`: the family has none, max abs diff only)."""
        return next((c.kl_kind for _, _, c in self.checks if c.kl_kind), None)

    @property
    def mismatched(self) -> list[tuple[str, list[str]]]:
        """`(document name, tensor names)` of documents not read the same way (shapes or token ids differ)."""
        return [(name, c.mismatched) for _, name, c in self.checks if c.mismatched]

    def as_dict(self) -> dict:
        """JSON-ready (infinite values as the string "inf")."""
        def number(x):
            return None if x is None else (x if math.isfinite(x) else str(x))

        kls = self.kls
        return {"space": self.space, "model_type": self.model_type, "fingerprint": self.fingerprint,
                "settings": self.settings, "dtypes": self.dtypes, "stored_documents": self.stored_documents,
                "recomputed": len(self.checks), "skipped": self.skipped, "unavailable": self.unavailable,
                "max_abs_diff": number(self.max_abs_diff), "kl_kind": self.kl_kind,
                "max_kl": number(max(kls)) if kls else None,
                "mean_kl": number(sum(kls) / len(kls)) if kls else None,
                "documents": [{"content_hash": h, "name": name, **check.as_dict()} for h, name, check in self.checks]}


def recompute_store(store: RepresentationStore, model, tokenizer, num_documents: int, *,
                    texts: Mapping[str, str] | None = None, exclude: Collection[str] = ()) -> list[SpaceRecomputeReport]:
    r"""Recompute `num_documents` stored documents of every space of `store` that `model` wrote, and compare them
    with what is stored.

    A space is this model's when the adapter registered for `model.config.model_type`, rebuilt from the space's
    settings ([`AdapterBase.settings_kwargs`]), has the space's fingerprint, or, when no adapter can be built from
    them (settings or a model the adapter refuses, e.g. a RoPE type whose caches cannot be composed), when the
    model's own [`current_fingerprint`] is the space's (reported as skipped, saying why); spaces of other models are
    left out (not reported). The documents are chosen deterministically: the space's entries sorted by content hash, the
    first `num_documents` (of those whose text is in `texts`, for families that keep no tokens).

    Args:
        store ([`RepresentationStore`]): read only.
        model: the model (in eval mode, on its device) and tokenizer: its fast tokenizer.
        num_documents (`int`): documents per space, >= 1.
        texts (`Mapping[str, str]`, *optional*): content hash -> document text; used when given (the whole encode
            path is rerun, tokenization included), required for families whose `recompute_needs_text`.
        exclude (`Collection[str]`): content hashes to leave out (e.g. those `verify` found corrupted).

    Returns:
        `list[SpaceRecomputeReport]`, one per space of this model (`skipped` says why one was not recomputed).

    Raises:
        TypeError: `num_documents` not an int, a model without `representation_fingerprint()`. ValueError:
            `num_documents < 1`, or no adapter for the model's type.
    """
    if isinstance(num_documents, bool) or not isinstance(num_documents, int):
        raise TypeError(f"`num_documents` must be an int, got {num_documents!r}.")
    if num_documents < 1:
        raise ValueError(f"`num_documents` must be >= 1, got {num_documents}.")
    adapter_class = get_adapter_class(model.config.model_type)
    texts = texts or {}
    store.refresh()
    # (the spaces' dtypes only: no wait for another process's commit, which `verify` has waited for)
    dtypes = {key: space["dtypes"] for key, space in store_info(store, confirm_orphans=False)["spaces"].items()}
    reports, own = [], None  # own: the model's fingerprint, once its weights are digested (once per call)
    # each space's adapter records the tokenizer's fingerprint: the tokenizer is serialized once
    with one_tokenizer_fingerprint(tokenizer):
        for space in sorted(store.spaces(), key=lambda s: s.key):
            if space.model_type not in (None, adapter_class.model_type):
                continue
            if space.settings.get("representation") != getattr(adapter_class, "representation", None):
                continue
            try:
                adapter = adapter_class(model, tokenizer, **adapter_class.settings_kwargs(space.settings))
            except (TypeError, ValueError) as error:
                adapter, reason = None, f"cannot rebuild the adapter from the stored settings: {error}"
            if adapter is None:  # whose space it is, without the adapter: the model's own fingerprint (hashed once)
                if own is None:
                    own = current_fingerprint(model)
                if own != space.fingerprint:
                    continue  # another model's space (e.g. one whose settings this model refuses)
            else:
                # the weights digested once per call (which refreshes the model's cached fingerprint if they
                # changed); the other spaces' adapters, of the same model, read that cache
                fingerprint = adapter.fingerprint() if own is not None else current_fingerprint(adapter)
                own = fingerprint  # every adapter's fingerprint is its model's (`representation_fingerprint()`)
                if fingerprint != space.fingerprint:
                    continue  # another model's space
            entries = sorted(store.entries(space.fingerprint, space.settings), key=lambda e: e.content_hash)
            report = SpaceRecomputeReport(space=space.key, model_type=space.model_type or adapter_class.model_type,
                                          fingerprint=space.fingerprint, settings=dict(space.settings),
                                          dtypes=list(dtypes.get(space.key, [])), stored_documents=len(entries))
            reports.append(report)
            if adapter is None:
                report.skipped = reason
                continue
            if canonical_settings(adapter.settings()) != canonical_settings(space.settings):
                differing = sorted(k for k in set(adapter.settings()) | set(space.settings)
                                   if adapter.settings().get(k) != space.settings.get(k))
                report.skipped = (f"this model and tokenizer give other settings ({', '.join(differing)} differ): the "
                                  "documents cannot be recomputed as they were stored")
                continue
            chosen = []
            for entry in entries:
                if entry.content_hash in exclude:
                    continue
                text = texts.get(entry.content_hash)
                if text is None and adapter.recompute_needs_text:
                    report.unavailable += 1
                    continue
                chosen.append((entry, text))
                if len(chosen) == num_documents:
                    break
            if not chosen and report.unavailable:
                report.skipped = (f"{adapter_class.model_type} representations keep no tokens: recomputing needs the "
                                  "documents' texts, and none of this space's documents was given "
                                  + ("(pass them with --documents)" if not texts else "in the texts passed"))
            for entry, text in chosen:
                tensors = store.read_entry(entry)
                report.checks.append((entry.content_hash, entry.name, adapter.check_recompute(tensors, text)))
    return reports


__all__ = ["SpaceRecomputeReport", "recompute_store"]
