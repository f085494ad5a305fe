"""hf-readonce: read a document once, reuse it everywhere.

Importing the package registers every model of `hf_readonce.models` with transformers' Auto classes
(`AutoConfig`, `AutoModel`, `AutoModelFor...`), so `AutoModelForQuestionAnswering.from_pretrained(path)` works on
a saved checkpoint without `trust_remote_code`. Saved checkpoints also carry `auto_map` and the modeling files, so
they load with `trust_remote_code=True` where hf-readonce is not installed.

Only the models are imported here. [`RepresentationStore`] and [`DeformerDistillationTrainer`] are re-exported
lazily (on first access), so `import hf_readonce` pulls in no `Trainer`, store or `datasets`. The import paths of
0.1.0 (`hf_readonce.qa`, `hf_readonce.models.modeling_deformer_bert`, ...) still import, as deprecated shims
([`hf_readonce._compat`]).
"""

import importlib

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
)

from . import _compat
from .models.deformer_bert.configuration_deformer_bert import DeformerBertConfig
from .models.deformer_bert.modeling_deformer_bert import (
    DeformerBertForQuestionAnswering,
    DeformerBertModel,
    DeformerBertModelOutput,
    DeformerPassageOutput,
)
from .models.readonce_bart.configuration_readonce_bart import ReadOnceBartConfig
from .models.readonce_bart.modeling_readonce_bart import (
    ReadOnceBartForConditionalGeneration,
    ReadOnceDocumentEncoderOutput,
    ReadOnceRepresentations,
)
from .models.recurrent.configuration_recurrent_gpt2 import RecurrentGPT2Config
from .models.recurrent.configuration_recurrent_llama import RecurrentLlamaConfig
from .models.recurrent.modeling_recurrence import RecurrentCache, RecurrentCausalLMOutputWithPast
from .models.recurrent.modeling_recurrent_gpt2 import RecurrentGPT2LMHeadModel
from .models.recurrent.modeling_recurrent_llama import RecurrentLlamaForCausalLM

__version__ = "0.1.0"

_compat.install()


def _register(config_class, model_type, auto_models):
    """Register `config_class` under `model_type` and each `(auto_class, model_class)` pair (idempotent)."""
    AutoConfig.register(model_type, config_class, exist_ok=True)
    for auto_class, model_class in auto_models:
        auto_class.register(config_class, model_class, exist_ok=True)


_register(
    DeformerBertConfig,
    "deformer_bert",
    [(AutoModel, DeformerBertModel), (AutoModelForQuestionAnswering, DeformerBertForQuestionAnswering)],
)

_register(ReadOnceBartConfig, "readonce_bart", [(AutoModelForSeq2SeqLM, ReadOnceBartForConditionalGeneration)])
_register(RecurrentGPT2Config, "recurrent_gpt2", [(AutoModelForCausalLM, RecurrentGPT2LMHeadModel)])
_register(RecurrentLlamaConfig, "recurrent_llama", [(AutoModelForCausalLM, RecurrentLlamaForCausalLM)])

# name -> module, imported on first access (PEP 562): they pull in the store, `datasets` or `Trainer`
_LAZY = {
    "RepresentationStore": "hf_readonce.store",
    "DeformerDistillationTrainer": "hf_readonce.tasks.trainers",
}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "DeformerBertConfig",
    "DeformerBertForQuestionAnswering",
    "DeformerBertModel",
    "DeformerBertModelOutput",
    "DeformerDistillationTrainer",
    "DeformerPassageOutput",
    "ReadOnceBartConfig",
    "ReadOnceBartForConditionalGeneration",
    "ReadOnceDocumentEncoderOutput",
    "ReadOnceRepresentations",
    "RecurrentCache",
    "RecurrentCausalLMOutputWithPast",
    "RecurrentGPT2Config",
    "RecurrentGPT2LMHeadModel",
    "RecurrentLlamaConfig",
    "RecurrentLlamaForCausalLM",
    "RepresentationStore",
    "__version__",
]
