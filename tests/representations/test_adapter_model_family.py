"""An adapter, or a task reading a store, given a model of another family: a `TypeError` naming the adapter's family
and the model's class, before any setting of the other family's config is read (the families' own tiny models, the
real MiniLM tokenizer)."""

import importlib

import pytest

from hf_readonce.representations import registered_adapters
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.question_answering_store import answer_from_store, find_deformer_space
from hf_readonce.tasks.readtwice_qa import capitalized_mentions
from hf_readonce.tasks.readtwice_qa_store import answer_from_readtwice_store

ROWS = [{"id": "a", "question": "Where did Emma live?", "context": "Emma Woodhouse lived in Highbury."}]


@pytest.fixture(scope="module")
def models(tokenizer):
    return {family: importlib.import_module(f"tests.models.{family}.cases").contract_harness(tokenizer)[0]
            for family in registered_adapters()}


def test_every_adapter_refuses_a_model_of_another_family(models, tokenizer):
    for family, adapter_class in registered_adapters().items():
        settings = {"readtwice_bert": {"mention_fn": capitalized_mentions},
                    "deformer_bert": {"max_passage_length": 32, "doc_stride": 8}}.get(family, {})
        adapter_class(models[family], tokenizer, **settings)  # its own family's model is taken
        for other, model in models.items():
            if other == family:
                continue
            with pytest.raises(TypeError, match=rf"`model` must be a (BlockAttentionLlamaForCausalLM|{family} model "
                                                rf"for {adapter_class.__name__}), got {type(model).__name__}"):
                adapter_class(model, tokenizer, **settings)


def test_store_tasks_refuse_a_model_of_another_family(models, tokenizer, tmp_path):
    store = RepresentationStore(tmp_path / "store")
    for call in (lambda: answer_from_store(models["readonce_bart"], tokenizer, store, ROWS, encode_missing=True),
                 lambda: answer_from_store(models["readtwice_bert"], tokenizer, store, ROWS, max_passage_length=32,
                                           doc_stride=8),
                 lambda: find_deformer_space(store, models["longdoc_bart"], tokenizer)):
        with pytest.raises(TypeError, match="`model` must be a deformer_bert model"):
            call()
    with pytest.raises(TypeError, match="`model` must be a readtwice_bert model"):
        answer_from_readtwice_store(models["deformer_bert"], tokenizer, store, ROWS, encode_missing=True)
    assert len(RepresentationStore(tmp_path / "store")) == 0
