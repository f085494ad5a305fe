"""The recurrent family (GPT-2 and Llama with a recurrent memory between windows, Yoshida et al. 2020): it stores no
representations (no adapter); this file only declares the family."""

from __future__ import annotations

import dataclasses

from ..models.recurrent.configuration_recurrent_gpt2 import RecurrentGPT2Config
from ..models.recurrent.configuration_recurrent_llama import RecurrentLlamaConfig
from ..models.recurrent.convert_to_recurrent import to_recurrent
from ..models.recurrent.modeling_recurrence import RecurrentCache, RecurrentCausalLMOutputWithPast
from ..models.recurrent.modeling_recurrent_gpt2 import RecurrentGPT2LMHeadModel
from ..models.recurrent.modeling_recurrent_llama import RecurrentLlamaForCausalLM
from .registry import CardText, register_family

_CARD = CardText(
    tag="recurrent-transformer",
    title="Recurrent GPT-2",
    paper="Yoshida, Ettinger & Gimpel, 2020, \"Adding Recurrence to Pretrained Transformers for Improved Efficiency and "
          "Context Size\"",
    paragraphs=(
        "The model reads text in windows. Each window's hidden states are pooled and mapped by a small feed-forward "
        "network into one vector, which enters layer L of the next window as an extra key and value.",
        "Context therefore reaches beyond the position table at the memory of one window; the first window is "
        "exactly the pretrained model.",
    ),
    pipeline_tag="text-generation",
    usage=(
        "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        "model = AutoModelForCausalLM.from_pretrained(\"{repo_id}\"{trust}).eval()\n"
        "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\"{trust})\n"
        "text = (\"It is a truth universally acknowledged, that a single man in possession of a good fortune, \"\n"
        "        \"must be in want of a wife. \") * 40\n"
        "ids = tokenizer(text, return_tensors=\"pt\").input_ids   # may be longer than the position table\n"
        "out = model.generate(ids, max_new_tokens=50)\n```"
    ),
)

__all__: list[str] = []

register_family(
    name="recurrent",
    configs=(RecurrentGPT2Config, RecurrentLlamaConfig),
    # transformers' own text-generation pipeline runs both (no pipeline file travels)
    auto_models={"AutoModelForCausalLM": (RecurrentGPT2LMHeadModel, RecurrentLlamaForCausalLM)},
    auto_class="AutoModelForCausalLM",
    exports=(RecurrentCache, RecurrentCausalLMOutputWithPast, to_recurrent),
    cards={"recurrent_gpt2": _CARD, "recurrent_llama": dataclasses.replace(_CARD, title="Recurrent Llama")},
)
