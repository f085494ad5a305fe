"""Sharing hf-readonce models on the Hugging Face Hub: [`publish`] assembles (and uploads) a repo folder with
safetensors weights, the model's code, its pipeline, its tokenizer, `representation_format.json` and a model card
built by [`build_model_card`] from a run's metrics.

Nothing here is imported by `import hf_readonce`; the names below load on first access.
"""

import importlib

_NAMES = {
    "PublishResult": "hf_readonce.hub.publish",
    "publish": "hf_readonce.hub.publish",
    "representation_format_for": "hf_readonce.hub.publish",
    "FAMILIES": "hf_readonce.hub.publish",
    "build_model_card": "hf_readonce.hub.cards",
    "card_from_metrics_file": "hf_readonce.hub.cards",
    "EvalRow": "hf_readonce.hub.cards",
}


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)


__all__ = sorted(_NAMES)
