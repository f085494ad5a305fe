"""hf-readonce: read a document once, reuse it everywhere.

Importing the package registers every model of `hf_readonce.models` with transformers' Auto classes
(`AutoConfig`, `AutoModel`, `AutoModelFor...`), so `AutoModelForQuestionAnswering.from_pretrained(path)` works on
a saved checkpoint without `trust_remote_code`. Saved checkpoints also carry `auto_map` and the modeling files, so
they load with `trust_remote_code=True` where hf-readonce is not installed.

Only the models are imported here. [`RepresentationStore`] and [`DeformerDistillationTrainer`] are re-exported
lazily (on first access), so `import hf_readonce` pulls in no `Trainer`, store or `datasets`.

One exception: when the process is the `hf-readonce` console script, registration (which imports torch and
transformers' modeling code, several seconds) is deferred to the first access of a model name or to
[`register_models`], which the commands that load a model call. So `hf-readonce --help`, `info` and `verify`
start without importing any model.
"""

import importlib
import os
import sys

__version__ = "0.1.0"

# name -> module of every model-side name re-exported here (imported by `register_models`)
_MODEL_NAMES = {
    "BlockAttentionLlamaConfig": "hf_readonce.models.block_attention_llama.configuration_block_attention_llama",
    "BlockAttentionLlamaForCausalLM": "hf_readonce.models.block_attention_llama.modeling_block_attention_llama",
    "DocumentCacheOutput": "hf_readonce.models.block_attention_llama.modeling_block_attention_llama",
    "DeformerBertConfig": "hf_readonce.models.deformer_bert.configuration_deformer_bert",
    "DeformerBertForQuestionAnswering": "hf_readonce.models.deformer_bert.modeling_deformer_bert",
    "DeformerBertModel": "hf_readonce.models.deformer_bert.modeling_deformer_bert",
    "DeformerBertModelOutput": "hf_readonce.models.deformer_bert.modeling_deformer_bert",
    "DeformerPassageOutput": "hf_readonce.models.deformer_bert.modeling_deformer_bert",
    "LongDocBartConfig": "hf_readonce.models.longdoc_bart.configuration_longdoc_bart",
    "LongDocBartForConditionalGeneration": "hf_readonce.models.longdoc_bart.modeling_longdoc_bart",
    "LongDocBartModel": "hf_readonce.models.longdoc_bart.modeling_longdoc_bart",
    "LongDocBartPreTrainedModel": "hf_readonce.models.longdoc_bart.modeling_longdoc_bart",
    "ReadOnceBartConfig": "hf_readonce.models.readonce_bart.configuration_readonce_bart",
    "ReadOnceBartForConditionalGeneration": "hf_readonce.models.readonce_bart.modeling_readonce_bart",
    "ReadOnceDocumentEncoderOutput": "hf_readonce.models.readonce_bart.modeling_readonce_bart",
    "ReadOnceRepresentations": "hf_readonce.models.readonce_bart.modeling_readonce_bart",
    "ReadTwiceBertConfig": "hf_readonce.models.readtwice_bert.configuration_readtwice_bert",
    "ReadTwiceBertForMaskedLM": "hf_readonce.models.readtwice_bert.modeling_readtwice_bert",
    "ReadTwiceBertForQuestionAnswering": "hf_readonce.models.readtwice_bert.modeling_readtwice_bert",
    "ReadTwiceBertModel": "hf_readonce.models.readtwice_bert.modeling_readtwice_bert",
    "ReadTwiceDocumentOutput": "hf_readonce.models.readtwice_bert.modeling_readtwice_bert",
    "RecurrentCache": "hf_readonce.models.recurrent.modeling_recurrence",
    "RecurrentCausalLMOutputWithPast": "hf_readonce.models.recurrent.modeling_recurrence",
    "RecurrentGPT2Config": "hf_readonce.models.recurrent.configuration_recurrent_gpt2",
    "RecurrentGPT2LMHeadModel": "hf_readonce.models.recurrent.modeling_recurrent_gpt2",
    "RecurrentLlamaConfig": "hf_readonce.models.recurrent.configuration_recurrent_llama",
    "RecurrentLlamaForCausalLM": "hf_readonce.models.recurrent.modeling_recurrent_llama",
}

# name -> module, imported on first access (PEP 562): they pull in the store, `datasets` or `Trainer`
_LAZY = {
    "RepresentationStore": "hf_readonce.store",
    "DeformerDistillationTrainer": "hf_readonce.tasks.trainers",
}

_registered = False


def register_models() -> None:
    """Import every model family and register it with transformers' Auto classes (idempotent). Runs on
    `import hf_readonce`, except in the `hf-readonce` console script, which calls it only for commands that load a
    model."""
    global _registered
    if _registered:
        return
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForQuestionAnswering,
        AutoModelForSeq2SeqLM,
    )

    names = {name: getattr(importlib.import_module(module), name) for name, module in _MODEL_NAMES.items()}
    globals().update(names)
    families = [
        ("deformer_bert", "DeformerBertConfig",
         [(AutoModel, "DeformerBertModel"), (AutoModelForQuestionAnswering, "DeformerBertForQuestionAnswering")]),
        ("readonce_bart", "ReadOnceBartConfig", [(AutoModelForSeq2SeqLM, "ReadOnceBartForConditionalGeneration")]),
        ("longdoc_bart", "LongDocBartConfig",
         [(AutoModel, "LongDocBartModel"), (AutoModelForSeq2SeqLM, "LongDocBartForConditionalGeneration")]),
        ("recurrent_gpt2", "RecurrentGPT2Config", [(AutoModelForCausalLM, "RecurrentGPT2LMHeadModel")]),
        ("recurrent_llama", "RecurrentLlamaConfig", [(AutoModelForCausalLM, "RecurrentLlamaForCausalLM")]),
        ("block_attention_llama", "BlockAttentionLlamaConfig",
         [(AutoModelForCausalLM, "BlockAttentionLlamaForCausalLM")]),
        ("readtwice_bert", "ReadTwiceBertConfig",
         [(AutoModel, "ReadTwiceBertModel"), (AutoModelForQuestionAnswering, "ReadTwiceBertForQuestionAnswering"),
          (AutoModelForMaskedLM, "ReadTwiceBertForMaskedLM")]),
    ]
    for model_type, config_name, auto_models in families:
        AutoConfig.register(model_type, names[config_name], exist_ok=True)
        for auto_class, model_name in auto_models:
            auto_class.register(names[config_name], names[model_name], exist_ok=True)
    _registered = True


def _is_console_script() -> bool:
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("hf-readonce", "hf-readonce.exe")


if not _is_console_script():
    register_models()


def __getattr__(name):
    if name in _MODEL_NAMES:
        register_models()
        return globals()[name]
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_MODEL_NAMES))


__all__ = sorted([*_MODEL_NAMES, *_LAZY, "__version__", "register_models"])
