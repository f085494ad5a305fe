"""hf-readonce: read a document once, reuse it everywhere.

Importing the package registers every model of `hf_readonce.models` with transformers' Auto classes
(`AutoConfig`, `AutoModel`, `AutoModelFor...`), so `AutoModelForQuestionAnswering.from_pretrained(path)` works on
a saved checkpoint without `trust_remote_code`. Saved checkpoints also carry `auto_map` and the modeling files, so
they load with `trust_remote_code=True` where hf-readonce is not installed.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
)

from .models.configuration_deformer_bert import DeformerBertConfig
from .models.configuration_readonce_bart import ReadOnceBartConfig
from .models.configuration_recurrent_gpt2 import RecurrentGPT2Config
from .models.configuration_recurrent_llama import RecurrentLlamaConfig
from .models.modeling_deformer_bert import (
    DeformerBertForQuestionAnswering,
    DeformerBertModel,
    DeformerBertModelOutput,
    DeformerPassageOutput,
)
from .models.modeling_readonce_bart import ReadOnceBartForConditionalGeneration, ReadOnceRepresentations
from .models.modeling_recurrence import RecurrentCache, RecurrentCausalLMOutputWithPast
from .models.modeling_recurrent_gpt2 import RecurrentGPT2LMHeadModel
from .models.modeling_recurrent_llama import RecurrentLlamaForCausalLM

__version__ = "0.1.0"


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

from .models.readtwice_bert import (  # noqa: E402
    ReadTwiceBertConfig,
    ReadTwiceBertForMaskedLM,
    ReadTwiceBertForQuestionAnswering,
    ReadTwiceBertModel,
    ReadTwiceDocumentOutput,
)

_register(
    ReadTwiceBertConfig,
    "readtwice_bert",
    [(AutoModel, ReadTwiceBertModel), (AutoModelForQuestionAnswering, ReadTwiceBertForQuestionAnswering),
     (AutoModelForMaskedLM, ReadTwiceBertForMaskedLM)],
)

from .store import RepresentationStore  # noqa: E402
from .training import DeformerDistillationTrainer  # noqa: E402

__all__ = [
    "DeformerBertConfig",
    "DeformerBertForQuestionAnswering",
    "DeformerBertModel",
    "DeformerBertModelOutput",
    "DeformerDistillationTrainer",
    "DeformerPassageOutput",
    "ReadOnceBartConfig",
    "ReadOnceBartForConditionalGeneration",
    "ReadOnceRepresentations",
    "ReadTwiceBertConfig",
    "ReadTwiceBertForMaskedLM",
    "ReadTwiceBertForQuestionAnswering",
    "ReadTwiceBertModel",
    "ReadTwiceDocumentOutput",
    "RecurrentCache",
    "RecurrentCausalLMOutputWithPast",
    "RecurrentGPT2Config",
    "RecurrentGPT2LMHeadModel",
    "RecurrentLlamaConfig",
    "RecurrentLlamaForCausalLM",
    "RepresentationStore",
    "__version__",
]
