"""The family registry (`register_family`, peft's `register_peft_method` pattern): every family of the package is
registered with its Auto classes, cards and CLI capabilities, and a bad spec raises at registration with a
`ValueError` naming the family and the field, registering nothing."""

import pytest
import torch
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

from hf_readonce.representations import (
    CardText,
    family_of,
    register_family,
    registered_adapters,
    registered_cards,
    registered_families,
)
from hf_readonce.representations.registry import ADAPTER_ATTRIBUTES
from tests.conftest import REPO_ROOT

CARD = CardText(tag="toy", title="Toy", paper="Nobody, 2026, \"Toys\"", paragraphs=("A toy.",),
                pipeline_tag="feature-extraction", usage="`{repo_id}`{trust}")


class BadToyConfig(PretrainedConfig):
    model_type = "bad_toy"


class BadToyModel(PreTrainedModel):
    config_class = BadToyConfig

    def __init__(self, config):
        super().__init__(config)
        self.linear = torch.nn.Linear(2, 2)
        self.post_init()


class ClashingConfig(PretrainedConfig):
    model_type = "deformer_bert"  # another family's


class BertTypeConfig(PretrainedConfig):
    model_type = "bert"  # transformers' own


class OtherToyConfig(PretrainedConfig):
    model_type = "other_toy"


class ForeignModel(PreTrainedModel):
    config_class = OtherToyConfig


class ToyAdapter:
    model_type = "not_a_toy_type"
    representation = "toy/v1"
    checkpoint_model_types = ("not_a_toy_type",)
    cli_settings: dict = {}

    @classmethod
    def load_model(cls, name_or_path):
        raise NotImplementedError

    def fingerprint(self): ...

    def settings(self): ...

    def encode(self, texts): ...

    def num_tokens(self, tensors): ...

    def read(self, stored): ...


def good(**overrides) -> dict:
    spec = dict(name="bad_toy", configs=(BadToyConfig,), auto_models={"AutoModel": BadToyModel}, auto_class="AutoModel",
                cards={"bad_toy": CARD})
    spec.update(overrides)
    return spec


@pytest.mark.parametrize("overrides, field, words", [
    ({"configs": (None,)}, "configs[0]", "is missing"),
    ({"configs": (BadToyConfig, None)}, "configs[1]", "is missing"),
    ({"auto_models": {"AutoModel": None}}, "auto_models['AutoModel']", "is missing"),
    ({"auto_models": {"AutoModel": BadToyConfig}}, "auto_models['AutoModel']", "must be a model class"),
    ({"pipelines": {"feature-extraction": None}}, "pipelines['feature-extraction']", "is missing"),
    ({"configs": (BadToyConfig, BadToyConfig)}, "configs", "declares model type 'bad_toy' twice"),
    ({"configs": (BadToyConfig, ClashingConfig)}, "configs",
     "'deformer_bert', already registered by family 'deformer_bert'"),
    ({"configs": (BertTypeConfig,), "cards": {"bert": CARD}}, "configs", "'bert', which is transformers' own"),
    ({"adapter": ToyAdapter}, "adapter", "is for model type 'not_a_toy_type', which the family does not have"),
    ({"adapter": type("Half", (), {"model_type": "bad_toy"})}, "adapter", "lacks"),
    ({"auto_models": {"AutoModel": ForeignModel}}, "auto_models['AutoModel']", "not one of the family's `configs`"),
    ({"auto_models": {"AutoNothing": BadToyModel}}, "auto_models", "not a transformers Auto class"),
    ({"auto_class": "AutoModelForCausalLM"}, "auto_class", "is not a key of `auto_models`"),
    ({"cards": {}}, "cards", "no card text for model type(s) ['bad_toy']"),
    ({"answer": "extractive"}, "answer", "needs an `adapter`"),
    ({"summarize": "yes"}, "summarize", "must be True or False"),
    ({"answer_function": "some.module:answer"}, "answer_function", "needs `answer`"),
    ({"summarize": True}, "summarize", "needs an `adapter` with a `generation_inputs(read)` method"),
    ({"exports": (None,)}, "exports[0]", "is missing"),
    ({"name": "deformer_bert"}, "name", "is already registered by hf_readonce.representations.deformer_bert"),
])
def test_bad_spec_raises_naming_family_and_field(overrides, field, words):
    spec = good(**overrides)
    with pytest.raises(ValueError) as error:
        register_family(**spec)
    message = str(error.value)
    assert message.startswith(f"family {spec['name']!r}: `{field}`"), message
    assert words in message, message
    assert "bad_toy" not in registered_families() and "bad_toy" not in registered_cards()
    assert set(registered_families()["deformer_bert"].model_types) == {"deformer_bert"}  # the clash changed nothing
    with pytest.raises(ValueError):
        AutoConfig.for_model("bad_toy")  # nothing reached transformers


def test_every_family_is_registered_with_its_auto_classes_and_cards():
    import transformers

    families = registered_families()
    folders = {p.name for p in (REPO_ROOT / "src" / "hf_readonce" / "models").iterdir() if p.is_dir()
               and p.name != "__pycache__"}
    assert set(families) == folders  # one spec per models/<family>/ folder
    for spec in families.values():
        assert spec.module == f"hf_readonce.representations.{spec.name}"
        for config in spec.configs:
            assert type(AutoConfig.for_model(config.model_type)) is config
            assert registered_cards()[config.model_type] is spec.cards[config.model_type]
        for head, classes in spec.auto_models.items():
            mapping = getattr(transformers, head)._model_mapping
            for cls in classes:
                assert mapping[cls.config_class] is cls
        if spec.adapter is not None:
            assert registered_adapters()[spec.adapter.model_type] is spec.adapter
            assert all(hasattr(spec.adapter, attribute) for attribute in ADAPTER_ATTRIBUTES)
        assert all(family_of(model_type) is spec for model_type in spec.model_types)
        import hf_readonce

        for pipeline_class in spec.pipelines.values():  # usable in process without a published folder
            assert getattr(hf_readonce, pipeline_class.__name__) is pipeline_class
            assert pipeline_class.__name__ in hf_readonce.__all__


def test_usage_snippet_is_rendered_for_the_repo():
    assert CARD.render_usage("me/toy") == "`me/toy`, trust_remote_code=True"
    assert CARD.render_usage("me/toy", custom_code=False) == "`me/toy`"


def test_family_of_unknown_model_type_names_the_known_ones():
    with pytest.raises(ValueError, match="no hf-readonce family has model_type 'nothing'; known: .*'deformer_bert'"):
        family_of("nothing")
