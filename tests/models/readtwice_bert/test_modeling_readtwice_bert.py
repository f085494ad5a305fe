"""ReadTwice-BERT: equivalence with BERT, memory flow across segments and documents, OR-model loss, top-k, read-once,
MLM pretraining objective, Trainer, gradient checkpointing, LoRA, save/load, remote code, real MiniLM weights."""

import ast
import json
import math
import sys

import numpy as np
import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    BertConfig,
    BertModel,
    Trainer,
    TrainingArguments,
)
from transformers.masking_utils import create_bidirectional_mask

from hf_readonce import (
    ReadTwiceBertConfig,
    ReadTwiceBertForMaskedLM,
    ReadTwiceBertForQuestionAnswering,
    ReadTwiceBertModel,
    ReadTwiceDocumentOutput,
)
from hf_readonce.models.readtwice_bert.modeling_readtwice_bert import (
    default_segment_positions,
    readtwice_mlm_masking,
    readtwice_span_loss,
)
from hf_readonce.tasks.readtwice_qa import (
    GlobalNormBertForQuestionAnswering,
    ReadTwiceQACollator,
    capitalized_mentions,
    entity_spans_for_segment,
    postprocess_readtwice_qa,
    predict_readtwice_qa,
    prepare_readtwice_qa_features,
)
from tests.conftest import refuses_unread_keyword

from ...conftest import REPO_ROOT, run_without_hf_readonce

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SPANS = torch.tensor([[[1, 2], [5, 5]], [[3, 4], [-1, -1]], [[0, 1], [6, 8]], [[0, 0], [7, 9]], [[2, 2], [-1, -1]]])
DOCS = torch.tensor([0, 0, 0, 1, 1])


def tiny_config(**overrides):
    return ReadTwiceBertConfig(**{**TINY, "memory_top_k": None, "span_length": 4, **overrides})


def tiny_qa(seed=0, **overrides):
    torch.manual_seed(seed)
    return ReadTwiceBertForQuestionAnswering(tiny_config(**overrides)).eval()


def segments(n=5, length=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (n, length), generator=g)
    ids[:, 0] = 2
    return ids


# ----------------------------------------------------------------------------------------------- config
def test_config_defaults_and_validation():
    config = ReadTwiceBertConfig()
    assert (config.memory_type, config.span_length, config.num_second_read_layers) == ("sts", 32, 2)
    # dense MemoryAttention by default: the paper uses top-k (k = 100) only for NarrativeQA fine-tuning (App. C.4)
    assert (config.max_relative_segment_distance, config.memory_top_k, config.single_segment) == (10, None, False)
    assert (config.segment_length, config.segment_overlap, config.question_in_first_read) == (512, 128, True)
    assert ReadTwiceBertConfig(memory_top_k=None).memory_top_k is None
    bad = {
        "memory_type": "token", "span_length": 0, "num_second_read_layers": 13, "max_relative_segment_distance": -1,
        "memory_top_k": 0, "single_segment": 1, "segment_length": 513, "segment_overlap": 512,
        "question_in_first_read": "no", "memory_output_init": "ones", "coref_loss_weight": -1.0,
    }
    for field, value in bad.items():
        with pytest.raises(ValueError, match=field):
            ReadTwiceBertConfig(**{field: value})
    with pytest.raises(ValueError, match="num_second_read_layers"):
        ReadTwiceBertConfig(num_second_read_layers=0)
    with pytest.raises(ValueError, match="span_length"):
        ReadTwiceBertConfig(span_length=2.0)


def test_a_saved_memory_top_k_survives_the_dense_default_with_its_fingerprint(tmp_path):
    """A model saved while the default was `memory_top_k=100` has the field in its config.json: it loads with 100
    (not the dense default) and with the representation fingerprint it had, so stored representations keep their key
    and meaning; a model made with the new default is another config, hence another key."""
    sparse = tiny_qa(memory_top_k=100)
    sparse.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["memory_top_k"] == 100
    loaded = ReadTwiceBertForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert loaded.config.memory_top_k == 100
    assert loaded.representation_fingerprint() == sparse.representation_fingerprint()
    dense = tiny_qa()  # the same weights (seed), the default config
    assert dense.config.memory_top_k is None
    assert dense.representation_fingerprint() != sparse.representation_fingerprint()


def test_auto_classes_registered():
    config = AutoConfig.for_model("readtwice_bert", **TINY)
    assert isinstance(config, ReadTwiceBertConfig)
    assert isinstance(AutoModelForQuestionAnswering.from_config(config), ReadTwiceBertForQuestionAnswering)
    assert isinstance(AutoModelForMaskedLM.from_config(config), ReadTwiceBertForMaskedLM)


def test_default_segment_positions():
    assert default_segment_positions(torch.tensor([3, 3, 7, 3, 7])).tolist() == [0, 1, 0, 2, 1]


# ----------------------------------------------------------------------------------------------- equivalence
def test_first_read_equals_bert_and_zero_memory_is_layernorm(tmp_path):
    torch.manual_seed(0)
    bert = BertModel(BertConfig(**TINY), add_pooling_layer=False).eval()
    bert.save_pretrained(tmp_path)
    model = ReadTwiceBertForQuestionAnswering.from_pretrained(
        tmp_path, single_segment=True, memory_output_init="zero", memory_top_k=None
    ).eval()
    ids = segments(3)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    doc_ids = torch.arange(3)  # one segment per document
    out = model.bert(ids, attention_mask=mask, document_ids=doc_ids)
    for i in range(3):  # each segment alone through BertModel
        n = int(mask[i].sum())
        expected = bert(ids[i : i + 1, :n]).last_hidden_state[0]
        torch.testing.assert_close(out.first_read_hidden_state[i, :n], expected, atol=1e-5, rtol=0)
    # BERT2 was initialised from BERT1's last layers
    second = model.bert.second_read_encoder.layer
    for j, layer in enumerate(second):
        for (name, p), q in zip(layer.named_parameters(), model.bert.encoder.layer[1 + j].parameters()):
            assert torch.equal(p, q), name
    # MemoryAttention disabled by its zero-initialised output: H3 = LayerNorm(H1), then BERT2 and the head
    ln = model.bert.memory_attention.LayerNorm
    torch.testing.assert_close(out.merged_hidden_state, ln(out.first_read_hidden_state), atol=1e-6, rtol=0)
    hidden = ln(bert(ids, attention_mask=mask).last_hidden_state)
    ext = create_bidirectional_mask(config=model.config, inputs_embeds=hidden, attention_mask=mask)
    for layer in second:
        hidden = layer(hidden, ext)
    logits = model.qa_outputs(model.qa_activation(model.qa_ffn(hidden)))
    got = model(ids, attention_mask=mask, document_ids=doc_ids)
    for i in range(3):
        n = int(mask[i].sum())
        torch.testing.assert_close(got.start_logits[i, :n], logits[i, :n, 0], atol=1e-5, rtol=0)


def test_output_attentions_return_bert1_s_attentions_then_bert2_s(tmp_path):
    """`output_attentions=True` returned MemoryAttention's α only (`memory_attentions`); BERT's self-attention
    weights are now `attentions` too, as `BertModel` returns them (eager): BERT₁'s layers, which are `BertModel`'s
    on the segments, then BERT₂'s. A stored first read gives BERT₂'s alone, the same; the logits do not change."""
    torch.manual_seed(0)
    bert = BertModel(BertConfig(**TINY), add_pooling_layer=False).eval()
    bert.set_attn_implementation("eager")
    bert.save_pretrained(tmp_path)
    model = ReadTwiceBertForQuestionAnswering.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids = segments(3)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    doc_ids = torch.tensor([0, 0, 1])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, document_ids=doc_ids, output_attentions=True)
        plain = model(ids, attention_mask=mask, document_ids=doc_ids)
        expected = bert(ids, attention_mask=mask, output_attentions=True).attentions
        stored = model(document_states=model.encode_documents(ids, attention_mask=mask, document_ids=doc_ids),
                       output_attentions=True)
    first, second = TINY["num_hidden_layers"], model.config.num_second_read_layers
    assert plain.attentions is None and plain.memory_attentions is None
    assert len(out.attentions) == first + second and out.memory_attentions.shape[:2] == (3, 12)
    for ours, theirs in zip(out.attentions[:first], expected):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    assert len(stored.attentions) == second
    for ours, again in zip(out.attentions[first:], stored.attentions):
        assert ours.shape == (3, TINY["num_attention_heads"], 12, 12)
        torch.testing.assert_close(ours, again, atol=1e-6, rtol=0)
        assert torch.all(ours[1, :, :, 9:] == 0)  # padding keys
        torch.testing.assert_close(ours.sum(-1), torch.ones(3, TINY["num_attention_heads"], 12))
    assert torch.equal(out.start_logits, plain.start_logits)


def test_read_once_attentions_are_bert2_s_over_question_and_segment(tmp_path):
    """Read-once setup: BERT₁ read the questions and the segments apart, so only BERT₂'s layers are returned, over
    the (question, segment) rows; the masked-LM head returns them too; under SDPA they are an empty tuple after
    transformers' warning, and α is still returned."""
    from transformers.integrations import sdpa_attention

    model = tiny_qa(question_in_first_read=False)
    model.set_attn_implementation("eager")
    ids, questions, q_docs = segments(5), segments(3, length=6, seed=4), torch.tensor([0, 1, 1])
    with torch.no_grad():
        out = model(ids, document_ids=DOCS, question_input_ids=questions, question_document_ids=q_docs,
                    output_attentions=True)
        stored = model(document_states=model.encode_documents(ids, document_ids=DOCS), question_input_ids=questions,
                       question_document_ids=q_docs, output_attentions=True, return_dict=True)
    assert [tuple(a.shape) for a in out.attentions] == [(7, TINY["num_attention_heads"], 18, 18)] * 2
    for ours, again in zip(out.attentions, stored.attentions):
        torch.testing.assert_close(ours, again, atol=1e-6, rtol=0)
    torch.manual_seed(0)
    mlm = ReadTwiceBertForMaskedLM(tiny_config()).eval()
    mlm.set_attn_implementation("eager")
    with torch.no_grad():
        assert len(mlm(ids, document_ids=DOCS, output_attentions=True).attentions) == TINY["num_hidden_layers"] + 2
    model.set_attn_implementation("sdpa")
    said = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sdpa_attention.logger, "warning_once", lambda message, *a, **k: said.append(message))
        with torch.no_grad():
            out = model(ids, document_ids=DOCS, question_input_ids=questions, question_document_ids=q_docs,
                        output_attentions=True)
    assert out.attentions == () and out.memory_attentions is not None and said


def test_encode_documents_returns_bert1_s_attentions_of_bert_on_each_segment(tmp_path):
    """`encode_documents` refused `output_attentions=True` and ignored `config.output_attentions` (no field): now
    BERT₁'s weights, `BertModel`'s on each segment read alone (§2.1) and what `forward` records for the same first
    read, in a new last field; the first read, its memories and the fingerprint do not depend on the switch, and
    such an output still serves `document_states`."""
    torch.manual_seed(0)
    bert = BertModel(BertConfig(**TINY), add_pooling_layer=False).eval()
    bert.set_attn_implementation("eager")
    bert.save_pretrained(tmp_path)
    model = ReadTwiceBertForQuestionAnswering.from_pretrained(tmp_path, attn_implementation="eager",
                                                              question_in_first_read=False).eval()
    ids = segments(3)
    mask, types = torch.ones_like(ids), torch.ones_like(ids)  # token type 1: the read-once layout's segments
    mask[1, 9:] = 0
    doc_ids = torch.tensor([0, 0, 1])
    questions = segments(2, length=6, seed=4)
    with torch.no_grad():
        plain = model.encode_documents(ids, mask, types, doc_ids)
        out = model.encode_documents(ids, mask, types, doc_ids, output_attentions=True)
        expected = bert(ids, attention_mask=mask, token_type_ids=types, output_attentions=True).attentions
        recorded = model.bert(ids, attention_mask=mask, token_type_ids=types, document_ids=doc_ids,
                              output_attentions=True).attentions
        answers = [model(document_states=states, question_input_ids=questions,
                         question_document_ids=torch.tensor([0, 1])).start_logits for states in (plain, out)]
    first = TINY["num_hidden_layers"]
    assert plain.attentions is None
    assert len(out.attentions) == first
    for layer, weights in enumerate(out.attentions):
        assert weights.shape == (3, TINY["num_attention_heads"], 12, 12)
        torch.testing.assert_close(weights, expected[layer], atol=1e-6, rtol=0)
        torch.testing.assert_close(weights, recorded[layer], atol=1e-6, rtol=0)
        assert torch.all(weights[1, :, :, 9:] == 0)  # padding keys
    # a new last field: the fields before it, and so every tuple position, are those of the output without it
    assert list(out.keys()) == [*plain.keys(), "attentions"]
    for name in plain.keys():
        assert (torch.equal(out[name], plain[name]) if torch.is_tensor(plain[name]) else out[name] == plain[name])
    assert torch.equal(answers[0], answers[1])


def test_encode_documents_attentions_follow_the_config_and_sdpa_warns_as_for_bert(monkeypatch):
    from transformers.integrations import sdpa_attention

    model = tiny_qa(memory_type="sts", question_in_first_read=False)
    model.set_attn_implementation("eager")
    ids = segments(5)
    with torch.no_grad():
        plain = model.encode_documents(ids, document_ids=DOCS)
        model.config.output_attentions = True
        for encode in (model.encode_documents, model.bert.encode_documents):
            out = encode(ids, document_ids=DOCS)
            assert len(out.attentions) == TINY["num_hidden_layers"]
            assert torch.equal(out.first_read_hidden_state, plain.first_read_hidden_state)
            assert torch.equal(out.memory_values, plain.memory_values)
            assert out.model_fingerprint == plain.model_fingerprint
            assert encode(ids, document_ids=DOCS, output_attentions=False).attentions is None
    model.config.output_attentions = False
    for value in (1, "False"):
        for encode in (model.encode_documents, model.bert.encode_documents):
            with pytest.raises(TypeError, match="`output_attentions` must be a bool"):
                encode(ids, document_ids=DOCS, output_attentions=value)
    model.set_attn_implementation("sdpa")
    said = []
    monkeypatch.setattr(sdpa_attention.logger, "warning_once", lambda message, *a, **k: said.append(message))
    with torch.no_grad():
        out = model.encode_documents(ids, document_ids=DOCS, output_attentions=True)
    assert out.attentions == () and torch.allclose(out.first_read_hidden_state, plain.first_read_hidden_state,
                                                   atol=1e-5)
    assert said and "output_attentions" in said[0]


def test_encode_documents_returns_bert1_s_hidden_states_of_bert_on_each_segment(tmp_path):
    """`encode_documents` refused `output_hidden_states=True` (a ValueError) and ignored `config.output_hidden_states`
    (no field): now the embeddings and every BERT₁ layer's output, `BertModel`'s `hidden_states` on each segment read
    alone (§2.1) and the first read's part of `forward`'s `hidden_states` for the same segments, in a new last
    field; the first read, its memories and the fingerprint do not depend on the switch, and such an output still
    serves `document_states`."""
    torch.manual_seed(0)
    bert = BertModel(BertConfig(**TINY), add_pooling_layer=False).eval()
    bert.save_pretrained(tmp_path)
    model = ReadTwiceBertForQuestionAnswering.from_pretrained(tmp_path, question_in_first_read=False).eval()
    ids = segments(3)
    mask, types = torch.ones_like(ids), torch.ones_like(ids)  # token type 1: the read-once layout's segments
    mask[1, 9:] = 0
    doc_ids = torch.tensor([0, 0, 1])
    questions = segments(2, length=6, seed=4)
    with torch.no_grad():
        plain = model.encode_documents(ids, mask, types, doc_ids)
        out = model.encode_documents(ids, mask, types, doc_ids, output_hidden_states=True)
        expected = bert(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True).hidden_states
        returned = model.bert(ids, attention_mask=mask, token_type_ids=types, document_ids=doc_ids,
                              output_hidden_states=True).hidden_states
        answers = [model(document_states=states, question_input_ids=questions,
                         question_document_ids=torch.tensor([0, 1])).start_logits for states in (plain, out)]
    first = TINY["num_hidden_layers"]
    assert plain.hidden_states is None and out.attentions is None
    assert len(out.hidden_states) == first + 1
    for layer, states in enumerate(out.hidden_states):
        assert states.shape == (3, 12, TINY["hidden_size"])
        torch.testing.assert_close(states, expected[layer], atol=1e-5, rtol=0)
        torch.testing.assert_close(states, returned[layer], atol=1e-6, rtol=0)
    assert torch.equal(out.hidden_states[-1], out.first_read_hidden_state)
    # a new last field: the fields before it, and so every tuple position, are those of the output without it
    assert list(out.keys()) == [*plain.keys(), "hidden_states"]
    for name in plain.keys():
        assert (torch.equal(out[name], plain[name]) if torch.is_tensor(plain[name]) else out[name] == plain[name])
    assert torch.equal(answers[0], answers[1])


def test_encode_documents_hidden_states_follow_the_config_and_come_with_the_attentions():
    model = tiny_qa(memory_type="sts", question_in_first_read=False)
    ids = segments(5)
    with torch.no_grad():
        plain = model.encode_documents(ids, document_ids=DOCS)
        model.config.output_hidden_states = True
        for encode in (model.encode_documents, model.bert.encode_documents):
            out = encode(ids, document_ids=DOCS)
            assert len(out.hidden_states) == TINY["num_hidden_layers"] + 1 and out.attentions is None
            assert torch.equal(out.first_read_hidden_state, plain.first_read_hidden_state)
            assert torch.equal(out.memory_values, plain.memory_values)
            assert out.model_fingerprint == plain.model_fingerprint
            assert encode(ids, document_ids=DOCS, output_hidden_states=False).hidden_states is None
        model.set_attn_implementation("eager")
        both = model.encode_documents(ids, document_ids=DOCS, output_attentions=True)  # SDPA gave states (above)
    assert len(both.attentions) == TINY["num_hidden_layers"]
    assert len(both.hidden_states) == TINY["num_hidden_layers"] + 1
    assert list(both.keys())[-2:] == ["attentions", "hidden_states"]
    model.config.output_hidden_states = False
    for value in (1, "False"):
        for encode in (model.encode_documents, model.bert.encode_documents):
            with pytest.raises(TypeError, match="`output_hidden_states` must be a bool"):
                encode(ids, document_ids=DOCS, output_hidden_states=value)


def test_forward_output_switches_are_bools_or_none_for_the_config():
    """The model's `forward` (and through it the heads') read `output_attentions` / `output_hidden_states` with
    `bool()`: a string `"False"` returned the weights, a list of hidden-state indices all the states, without a word.
    Now a non-bool is a TypeError naming the argument, and `None` is the config's, as in `encode_documents`."""
    model = tiny_qa(memory_type="sts")
    model.set_attn_implementation("eager")
    mlm = ReadTwiceBertForMaskedLM(tiny_config(memory_type="sts")).eval()
    ids = segments(5)
    with torch.no_grad():
        plain = model(ids, document_ids=DOCS)
        for run in (model, model.bert):
            asked = run(ids, document_ids=DOCS, output_attentions=True, output_hidden_states=True)
            assert len(asked.hidden_states) == 2 * TINY["num_hidden_layers"] + 1 and len(asked.attentions) > 0
            model.config.output_hidden_states = model.config.output_attentions = True
            for given in ({}, dict(output_attentions=None, output_hidden_states=None)):
                out = run(ids, document_ids=DOCS, **given)
                for field in ("hidden_states", "attentions", "memory_attentions"):
                    ours, theirs = getattr(out, field), getattr(asked, field)
                    assert len(ours) == len(theirs) and all(torch.equal(a, b) for a, b in zip(ours, theirs)), field
            off = run(ids, document_ids=DOCS, output_attentions=False, output_hidden_states=False)
            assert off.hidden_states is None and off.attentions is None and off.memory_attentions is None
            model.config.output_hidden_states = model.config.output_attentions = False
            assert run is model.bert or torch.equal(off.start_logits, plain.start_logits)
    for name, value in [("output_attentions", "False"), ("output_attentions", torch.tensor(True)),
                        ("output_hidden_states", "False"), ("output_hidden_states", [-1]),
                        ("output_hidden_states", 1)]:
        for run in (model, model.bert, mlm):
            with pytest.raises(TypeError, match=f"`{name}` must be a bool"):
                run(ids, document_ids=DOCS, **{name: value})


@pytest.mark.parametrize("memory_type", ["cls", "sts", "entity"])
def test_memories_cross_segments_but_not_documents_or_ss(memory_type):
    ids = segments(5)
    changed = ids.clone()
    changed[0, 1:11] = torch.randint(5, 99, (10,), generator=torch.Generator().manual_seed(9))
    extra = {"entity_spans": SPANS} if memory_type == "entity" else {}
    for single_segment in (False, True):
        model = tiny_qa(memory_type=memory_type, single_segment=single_segment)
        a = model(ids, document_ids=DOCS, **extra).start_logits
        b = model(changed, document_ids=DOCS, **extra).start_logits
        assert not torch.allclose(a[0], b[0])  # the changed segment itself
        same_doc_changed = not torch.allclose(a[1:3], b[1:3], atol=1e-6, rtol=0)
        assert same_doc_changed is (not single_segment)
        torch.testing.assert_close(a[3:], b[3:], atol=0, rtol=0)  # another document of the batch: untouched


@pytest.mark.parametrize("memory_type", ["cls", "sts", "entity"])
def test_a_row_of_padding_only_gives_no_memory(memory_type):
    """A segment row of padding only (a batch padded to a number of segments per document) changes nothing: the
    real segments of its document and of the others get what they get without it, and it adds no memory."""
    ids, mask = segments(5), torch.ones(5, 12, dtype=torch.long)
    mask[4, -5:] = 0
    extra = {"entity_spans": SPANS} if memory_type == "entity" else {}
    model = tiny_qa(memory_type=memory_type)
    with torch.no_grad():
        model.bert.memory_attention.relative_segment_scores.normal_()
        alone = model(ids, attention_mask=mask, document_ids=DOCS, **extra)
        padded_extra = {"entity_spans": torch.cat([SPANS, torch.full((1, 2, 2), -1)])} if extra else {}
        padded_mask = torch.cat([mask, torch.zeros(1, 12, dtype=torch.long)])
        memories = model.bert(ids, attention_mask=mask, document_ids=DOCS, **extra).memory_values.shape[0]
        for document in (0, 1):  # the row of padding beside the segments of either document
            inputs = dict(input_ids=torch.cat([ids, segments(1, seed=7)]), attention_mask=padded_mask,
                          document_ids=torch.cat([DOCS, torch.tensor([document])]), **padded_extra)
            assert model.bert(**inputs).memory_values.shape[0] == memories
            padded = model(**inputs)
            real = mask.bool()
            for name in ("start_logits", "end_logits"):
                torch.testing.assert_close(getattr(padded, name)[:5][real], getattr(alone, name)[real],
                                           atol=1e-6, rtol=0)


@pytest.mark.parametrize("question_in_first_read", [True, False])
def test_an_entity_span_on_padding_is_refused_naming_it(question_in_first_read):
    """A mention whose start or end is a padding column (a row of padding only, or past a segment's last real token)
    would make a memory of padding states that every real segment of its document reads: a ValueError naming
    `entity_spans`, from the forward and from `encode_documents`; spans on real tokens are read as before."""
    model = tiny_qa(memory_type="entity", question_in_first_read=question_in_first_read)
    ids, mask = segments(5), torch.ones(5, 12, dtype=torch.long)
    mask[4, -5:] = 0
    question = {} if question_in_first_read else {"question_input_ids": segments(2, 5, seed=3),
                                                  "question_document_ids": torch.tensor([0, 1])}
    with torch.no_grad():
        model(ids, attention_mask=mask, document_ids=DOCS, entity_spans=SPANS, **question)
        for row, span in ((4, [6, 8]), (4, [7, 7]), (1, [10, 11])):
            spans = SPANS.clone()
            spans[row, 1] = torch.tensor(span)
            row_mask = mask.clone()
            if row == 1:
                row_mask[1, 10:] = 0
            with pytest.raises(ValueError, match="`entity_spans` holds 1 span.s. on padding"):
                model(ids, attention_mask=row_mask, document_ids=DOCS, entity_spans=spans, **question)
            with pytest.raises(ValueError, match="`entity_spans` holds 1 span.s. on padding"):
                model.bert.encode_documents(ids, row_mask, document_ids=DOCS, entity_spans=spans)


def test_entity_memory_is_identity_outside_mentions():
    model = tiny_qa(memory_type="entity")
    out = model.bert(segments(5), document_ids=DOCS, entity_spans=SPANS)
    inside = torch.zeros(5, 12, dtype=torch.bool)
    for s in range(5):
        for a, b in SPANS[s].tolist():
            if a >= 0:
                inside[s, a : b + 1] = True
    assert torch.equal(out.merged_hidden_state[~inside], out.first_read_hidden_state[~inside])
    assert not torch.allclose(out.merged_hidden_state[inside], out.first_read_hidden_state[inside])


def test_entity_without_spans_is_an_error():
    model = tiny_qa(memory_type="entity")
    with pytest.raises(ValueError, match="entity_spans"):
        model(segments(2))
    with pytest.raises(ValueError, match="entity_spans"):
        model(segments(2), entity_spans=torch.tensor([[[3, 1]], [[0, 0]]]))


def test_relative_segment_scores_and_no_op_memory_matter():
    model = tiny_qa(memory_type="cls")
    ids = segments(5)
    base = model(ids, document_ids=DOCS).start_logits
    with torch.no_grad():
        model.bert.memory_attention.relative_segment_scores[10 + 1] = 5.0  # distance +1
    shifted = model(ids, document_ids=DOCS).start_logits
    assert not torch.allclose(base[1], shifted[1])  # segment 1 sees segment 0 at distance 1
    torch.testing.assert_close(base[0], shifted[0])  # segment 0 has no memory at distance +1
    attn = model.bert(ids, document_ids=DOCS, output_attentions=True).memory_attentions
    assert attn.shape == (5, 12, 1 + 5)
    torch.testing.assert_close(attn.sum(-1), torch.ones(5, 12))
    assert torch.all(attn[:3, :, 4:] == 0) and torch.all(attn[3:, :, 1:4] == 0)  # no weight across documents


def test_top_k_at_least_table_size_equals_dense():
    ids = segments(5)
    dense = tiny_qa(memory_type="sts", memory_top_k=None)(ids, document_ids=DOCS).start_logits
    table = tiny_qa(memory_type="sts")(ids, document_ids=DOCS)  # 3 spans of 4 per segment: 15 memories
    for k in (9, 15, 100):  # >= the largest document's table (9), or the whole batch's
        got = tiny_qa(memory_type="sts", memory_top_k=k)(ids, document_ids=DOCS).start_logits
        torch.testing.assert_close(got, dense, atol=1e-6, rtol=0)
    sparse = tiny_qa(memory_type="sts", memory_top_k=2)(ids, document_ids=DOCS).start_logits
    assert not torch.allclose(sparse, dense, atol=1e-5)
    assert table.start_logits.shape == (5, 12)


def test_sdpa_and_eager_memory_attention_agree():
    ids = segments(5)
    outs = []
    for impl in ("eager", "sdpa"):
        model = tiny_qa(memory_type="sts", memory_top_k=4)
        model.set_attn_implementation(impl)
        outs.append(model(ids, document_ids=DOCS).start_logits)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("memory_type", ["sts", "entity"])
def test_sparse_memory_attention_under_bf16_autocast(memory_type):
    # `Trainer(bf16=True)` runs the forward under autocast: the top-k scores come out of the matmul in bf16, so the
    # mask value must be bf16's floor, not fp32's (which does not fit and raised a RuntimeError before)
    ids = segments(5)
    spans = SPANS if memory_type == "entity" else None
    model = tiny_qa(memory_type=memory_type, memory_top_k=2)
    reference = model(ids, document_ids=DOCS, entity_spans=spans).start_logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(ids, document_ids=DOCS, entity_spans=spans).start_logits
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), reference, atol=0.15, rtol=0.05)


# ----------------------------------------------------------------------------------------------- loss
def test_or_model_loss_matches_direct_computation():
    start = torch.tensor([[0.1, 2.0, -1.0, 0.5], [1.5, 0.0, 0.3, -9.0], [0.2, 0.4, 0.6, 0.8]])
    end = torch.tensor([[0.3, -0.2, 1.0, 0.0], [0.0, 2.5, 0.1, -9.0], [1.0, 0.0, -1.0, 0.5]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    groups = torch.tensor([7, 7, 3])
    # doc 7: answer starts at (0,1) and (1,0) [two segments], ends at (0,2) and (1,1); doc 3: start 2, end 3
    starts = torch.tensor([[1, -1], [0, -1], [2, -1]])
    ends = torch.tensor([[2, -1], [1, -1], [3, 3]])  # a duplicate gold position counts once
    got = readtwice_span_loss(start, end, starts, ends, groups, mask)
    e = math.exp
    doc7_b = -math.log((e(2.0) + e(1.5)) / (e(0.1) + e(2.0) + e(-1.0) + e(0.5) + e(1.5) + e(0.0) + e(0.3)))
    doc7_e = -math.log((e(1.0) + e(2.5)) / (e(0.3) + e(-0.2) + e(1.0) + e(0.0) + e(0.0) + e(2.5) + e(0.1)))
    doc3_b = -math.log(e(0.6) / (e(0.2) + e(0.4) + e(0.6) + e(0.8)))
    doc3_e = -math.log(e(0.5) / (e(1.0) + e(0.0) + e(-1.0) + e(0.5)))
    expected = ((doc7_b + doc7_e) / 2 + (doc3_b + doc3_e) / 2) / 2
    assert abs(got.item() - expected) < 1e-5
    # a document without any gold position contributes nothing
    none = torch.tensor([[-1], [-1], [2]])
    got = readtwice_span_loss(start, end, none, torch.tensor([[-1], [-1], [3]]), groups, mask)
    assert abs(got.item() - (doc3_b + doc3_e) / 2) < 1e-5
    zero = readtwice_span_loss(start.requires_grad_(), end, -torch.ones(3, 1, dtype=torch.long),
                               -torch.ones(3, 1, dtype=torch.long), groups, mask)
    assert zero.item() == 0 and zero.requires_grad


# ----------------------------------------------------------------------------------------------- read once
@pytest.mark.parametrize("memory_type", ["cls", "entity"])
def test_read_once_stored_equals_recomputed(memory_type):
    model = tiny_qa(memory_type=memory_type, question_in_first_read=False, memory_top_k=3)
    ids = segments(5)
    questions = segments(3, length=6, seed=4)
    q_mask = torch.ones_like(questions)
    q_mask[2, 4:] = 0
    q_docs = torch.tensor([0, 1, 1])
    extra = {"entity_spans": SPANS} if memory_type == "entity" else {}
    stored = model.encode_documents(ids, document_ids=DOCS, **extra)
    assert isinstance(stored, ReadTwiceDocumentOutput) and stored.model_fingerprint == model.representation_fingerprint()
    assert stored.first_read_hidden_state.shape == (5, 12, 32)
    a = model(question_input_ids=questions, question_attention_mask=q_mask, question_document_ids=q_docs,
              document_states=stored)
    b = model(ids, document_ids=DOCS, question_input_ids=questions, question_attention_mask=q_mask,
              question_document_ids=q_docs, **extra)
    torch.testing.assert_close(a.start_logits, b.start_logits, atol=1e-6, rtol=0)
    assert a.start_logits.shape == (3 + 2 + 2, 6 + 12)
    assert a.group_ids.tolist() == [0, 0, 0, 1, 1, 2, 2] and a.segment_index.tolist() == [0, 1, 2, 3, 4, 3, 4]
    # the stored states depend on the documents only, and different questions give different answers
    assert not torch.allclose(a.start_logits[3], a.start_logits[5])
    other = tiny_qa(seed=5, memory_type=memory_type, question_in_first_read=False)
    with pytest.raises(ValueError, match="another model"):
        other(question_input_ids=questions, question_document_ids=q_docs, document_states=stored)
    with pytest.raises(ValueError, match="question_input_ids"):
        model(ids, document_ids=DOCS, **extra)


def test_paper_setup_document_states_round_trip_and_errors():
    model = tiny_qa(memory_type="sts")
    ids = segments(5)
    stored = model.encode_documents(ids, document_ids=DOCS)
    torch.testing.assert_close(model(document_states=stored).start_logits,
                               model(ids, document_ids=DOCS).start_logits, atol=0, rtol=0)
    with pytest.raises(ValueError, match="exactly one"):
        model(ids, document_states=stored)
    with pytest.raises(ValueError, match="read-once"):
        model(ids, question_input_ids=ids[:1, :4])
    with pytest.raises(TypeError, match="ReadTwiceDocumentOutput"):
        model(document_states={"first_read_hidden_state": stored.first_read_hidden_state})


# ----------------------------------------------------------------------------------------------- pretraining
def test_mlm_masking_whole_mentions_and_span_rate():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 99, (40, 60), generator=g)
    mask = torch.ones_like(ids)
    spans = torch.tensor([[[2, 4], [10, 11], [30, 35]]] * 40)
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = True
    masked, labels = readtwice_mlm_masking(ids, mask, mask_token_id=4, vocab_size=99, entity_spans=spans,
                                           special_tokens_mask=special, generator=g)
    chosen = labels != -100
    assert torch.equal(labels[chosen], ids[chosen]) and not chosen[:, 0].any()
    for a, b in ((2, 4), (10, 11), (30, 35)):  # a mention is masked whole or not at all
        block = chosen[:, a : b + 1]
        assert torch.all(block.all(1) | ~block.any(1))
    mention_rate = chosen[:, 2:5].all(1).float().mean().item()
    other = torch.ones(60, dtype=torch.bool)
    other[[0, 2, 3, 4, 10, 11, 30, 31, 32, 33, 34, 35]] = False
    other_rate = chosen[:, other].float().mean().item()
    assert 0.1 < mention_rate < 0.45 and abs(other_rate - 0.15) < 0.02
    assert (masked[chosen] == 4).float().mean() > 0.6


def test_masked_lm_loss_and_coreference():
    torch.manual_seed(0)
    model = ReadTwiceBertForMaskedLM(tiny_config(memory_type="entity")).train()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    ids = segments(5)
    masked, labels = readtwice_mlm_masking(ids, torch.ones_like(ids), 4, 99, entity_spans=SPANS,
                                           generator=torch.Generator().manual_seed(1))
    entity_ids = torch.tensor([[0, 1], [0, -1], [2, 1], [5, 5], [6, -1]])
    out = model(masked, document_ids=DOCS, entity_spans=SPANS, entity_ids=entity_ids, labels=labels)
    assert out.logits.shape == (5, 12, 99)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.coref_loss)
    out.loss.backward()
    assert model.bert.memory_extractor.projection.weight.grad.abs().sum() > 0
    assert model.coref_bias.grad is not None
    # direct computation of the coreference loss
    values = model.bert(masked, document_ids=DOCS, entity_spans=SPANS).memory_values.detach()
    ids_flat = torch.tensor([0, 1, 0, 2, 1, 5, 5, 6])
    docs_flat = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])
    terms = []
    for m in range(8):
        for n in range(8):
            if m != n and docs_flat[m] == docs_flat[n]:
                y = float(ids_flat[m] == ids_flat[n])
                terms.append(torch.nn.functional.binary_cross_entropy_with_logits(
                    values[m] @ values[n] + model.coref_bias.detach(), torch.tensor([y])))
    model.eval()
    again = model(masked, document_ids=DOCS, entity_spans=SPANS, entity_ids=entity_ids, labels=labels)
    torch.testing.assert_close(again.coref_loss, torch.stack(terms).mean(), atol=1e-5, rtol=1e-5)



@pytest.mark.parametrize("memory_type, entity_ids", [("sts", None), ("entity", None),
                                                     ("entity", [[0, -1], [-1, -1], [-1, -1], [2, -1], [-1, -1]])])
def test_masked_lm_loss_without_a_coreference_pair_gives_every_parameter_a_gradient(memory_type, entity_ids):
    """Without a coreference pair (no `entity_ids`, or no two linked mentions of one document) the loss is the MLM
    loss and `coref_bias` gets a zero gradient: under `DistributedDataParallel` without `find_unused_parameters`
    (Trainer's choice with gradient checkpointing) a parameter without a gradient on some process stops training
    ("Expected to have finished reduction in the prior iteration")."""
    torch.manual_seed(0)
    model = ReadTwiceBertForMaskedLM(tiny_config(memory_type=memory_type)).train()
    ids = segments(5)
    masked, labels = readtwice_mlm_masking(ids, torch.ones_like(ids), 4, 99, entity_spans=SPANS,
                                           generator=torch.Generator().manual_seed(1))
    extra = {} if entity_ids is None else {"entity_ids": torch.tensor(entity_ids)}
    out = model(masked, document_ids=DOCS, entity_spans=SPANS, labels=labels, **extra)
    assert out.coref_loss is None
    assert torch.equal(out.loss, out.mlm_loss)
    out.loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert missing == []
    assert torch.equal(model.coref_bias.grad, torch.zeros(1))

# ----------------------------------------------------------------------------------------------- training tools
def tiny_features(n=4, seed=0, question_in_first_read=True):
    g = torch.Generator().manual_seed(seed)
    from hf_readonce.tasks.readtwice_qa import ReadTwiceQAFeature

    features = []
    for i in range(n):
        num = 1 + i % 3
        ids = [[2] + torch.randint(5, 99, (10,), generator=g).tolist() + [3] for _ in range(num)]
        starts = [[4] if s == num - 1 else [] for s in range(num)]
        ends = [[6] if s == num - 1 else [] for s in range(num)]
        features.append(ReadTwiceQAFeature(i, ids, [[0] * 12] * num, [[(0, 1)] * 12] * num, starts, ends,
                                           [[(4, 6)]] * num, [2, 7, 8, 3] if not question_in_first_read else None))
    return features


def test_trainer_step(tmp_path):
    model = tiny_qa(memory_type="entity").train()
    features = tiny_features()
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, report_to="none",
                             use_cpu=True, save_strategy="no", learning_rate=1e-2, remove_unused_columns=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(model=model, args=args, train_dataset=features,
                      data_collator=ReadTwiceQACollator(0, with_entities=True))
    assert trainer.label_names == ["start_positions", "end_positions"]
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert {"bert.memory_attention.no_op_memory", "bert.second_read_encoder.layer.0.output.dense.weight",
            "bert.encoder.layer.0.attention.self.query.weight", "qa_outputs.weight"} <= changed


@pytest.mark.parametrize("question_in_first_read", [True, False])
def test_trainer_evaluate_and_predict(tmp_path, question_in_first_read):
    # the output's `question_length` is a Python int, which accelerate cannot pad across the evaluation batches: the
    # config lists it in `keys_to_ignore_at_inference`, so `evaluate` / `predict` gather the logits without it
    model = tiny_qa(memory_type="entity", question_in_first_read=question_in_first_read)
    features = tiny_features(question_in_first_read=question_in_first_read)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to="none", use_cpu=True,
                             remove_unused_columns=False)
    trainer = Trainer(model=model, args=args, data_collator=ReadTwiceQACollator(0, with_entities=True))
    metrics = trainer.evaluate(features)
    assert math.isfinite(metrics["eval_loss"])
    predictions = trainer.predict(features)
    start_logits = predictions.predictions[0]
    rows = sum(len(feature.input_ids) for feature in features)
    assert start_logits.shape[0] == rows
    collate = ReadTwiceQACollator(0, with_entities=True)
    with torch.no_grad():
        first = model(**collate(features[:2]))
    width = first.start_logits.shape[1]
    assert np.allclose(start_logits[: first.start_logits.shape[0], :width], first.start_logits.numpy(), atol=1e-5)


def test_gradient_checkpointing_same_gradients():
    batch = ReadTwiceQACollator(0, with_entities=True)(tiny_features())
    grads = []
    for checkpointing in (False, True):
        model = tiny_qa(memory_type="entity").train()
        if checkpointing:
            model.gradient_checkpointing_enable()
            layers = list(model.bert.encoder.layer) + list(model.bert.second_read_encoder.layer)
            assert all(layer.gradient_checkpointing for layer in layers)
        model(**batch).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_lora_query_value():
    from peft import LoraConfig, get_peft_model

    model = tiny_qa(memory_type="sts", question_in_first_read=False)
    peft_model = get_peft_model(model, LoraConfig(target_modules=["query", "value"], r=4, lora_alpha=8))
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("second_read_encoder" in n for n in trainable)
    batch = ReadTwiceQACollator(0)(tiny_features(question_in_first_read=False))
    out = peft_model(**batch)
    out.loss.backward()
    assert all(p.grad is not None for n, p in peft_model.named_parameters() if p.requires_grad)
    stored = peft_model.base_model.model.encode_documents(batch["input_ids"], batch["attention_mask"],
                                                          batch["token_type_ids"], batch["document_ids"])
    again = peft_model(question_input_ids=batch["question_input_ids"],
                       question_attention_mask=batch["question_attention_mask"],
                       question_document_ids=batch["question_document_ids"], document_states=stored)
    torch.testing.assert_close(again.start_logits, out.start_logits, atol=1e-5, rtol=0)


def read_once_features():
    """[`tiny_features`] in the read-once layout as `prepare_readtwice_qa_features` writes it: segments of type 1."""
    features = tiny_features(question_in_first_read=False)
    for feature in features:
        feature.token_type_ids = [[1] * len(ids) for ids in feature.input_ids]
    return features


def test_peft_question_answering_wrapper_is_refused_where_it_drops_token_type_ids():
    """peft's `PeftModelForQuestionAnswering` (`task_type="QUESTION_ANS"`) takes `token_type_ids` as its own
    parameter and does not hand it on: segments the collator typed 1 were read as type 0, other logits without a
    word, in training and at inference, while `encode_documents` (called on the model) read them as typed. A call
    with segments is refused, naming the wrapper and the way round it; questions over a stored first read are not."""
    from peft import LoraConfig, get_peft_model

    batch = ReadTwiceQACollator(0)(read_once_features())
    base = tiny_qa(memory_type="sts", question_in_first_read=False)
    expected = base(**batch).start_logits
    assert not torch.allclose(base(**{**batch, "token_type_ids": None}).start_logits, expected)  # what dropping did
    config = LoraConfig(task_type="QUESTION_ANS", target_modules=["query", "value"], r=4)
    peft_model = get_peft_model(tiny_qa(memory_type="sts", question_in_first_read=False), config).eval()
    with pytest.raises(ValueError, match=r'task_type="QUESTION_ANS".*modules_to_save=\["qa_outputs"\]'):
        peft_model(**batch)
    segments = [batch[key] for key in ("input_ids", "attention_mask", "token_type_ids", "document_ids")]
    questions = {key: value for key, value in batch.items() if key.startswith("question_")}
    torch.testing.assert_close(peft_model(**questions, document_states=peft_model.encode_documents(*segments)).start_logits,
                               base(**questions, document_states=base.encode_documents(*segments)).start_logits)


def test_lora_without_task_type_round_trip_and_stored_first_read(tmp_path):
    """The way round the QA wrapper (docs/models/readtwice_bert.md): a `PeftModel` without a task type and the QA head
    in `modules_to_save` hands `token_type_ids` on; trained one `Trainer` step, saved, reloaded, merged and loaded
    with `trust_remote_code=True`, the logits stay the trained ones. A first read stored through the wrapper answers
    as its full read does, and one of the same weights with the adapter disabled is refused (the fingerprint holds
    the adapters' state, not only their weights)."""
    from peft import LoraConfig

    from tests.models.peft_checks import lora_round_trip

    features = read_once_features()
    batch = ReadTwiceQACollator(0)(features)
    config = LoraConfig(target_modules=["query", "value"], modules_to_save=["qa_outputs"], r=4, lora_alpha=8)
    peft_model, _ = lora_round_trip(lambda: tiny_qa(memory_type="sts", question_in_first_read=False), config, batch,
                                    features[:2], AutoModelForQuestionAnswering, tmp_path, output="start_logits",
                                    data_collator=ReadTwiceQACollator(0))
    segments = [batch[key] for key in ("input_ids", "attention_mask", "token_type_ids", "document_ids")]
    questions = {key: value for key, value in batch.items() if key.startswith("question_")}
    with torch.no_grad():
        stored = peft_model.encode_documents(*segments)
        torch.testing.assert_close(peft_model(**questions, document_states=stored).start_logits,
                                   peft_model(**batch).start_logits, atol=1e-5, rtol=0)
        with peft_model.disable_adapter():
            without = peft_model.encode_documents(*segments)
        assert not torch.allclose(without.first_read_hidden_state, stored.first_read_hidden_state)
        with pytest.raises(ValueError, match="re-encode the documents"):
            peft_model(**questions, document_states=without)


# ----------------------------------------------------------------------------------------------- save / load
def test_save_load_round_trip(tmp_path):
    model = tiny_qa(memory_type="cls", memory_top_k=2)
    model.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["config.json", "configuration_readtwice_bert.py", "model.safetensors",
                     "modeling_readtwice_bert.py"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "readtwice_bert" and config["memory_type"] == "cls" and config["memory_top_k"] == 2
    assert config["auto_map"]["AutoModelForQuestionAnswering"].endswith("ReadTwiceBertForQuestionAnswering")
    loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, ReadTwiceBertForQuestionAnswering)
    ids = segments(5)
    torch.testing.assert_close(loaded(ids, document_ids=DOCS).start_logits,
                               model(ids, document_ids=DOCS).start_logits, atol=0, rtol=0)
    base = ReadTwiceBertModel.from_pretrained(tmp_path)  # the encoder alone, second read kept (not re-copied)
    assert torch.equal(base.second_read_encoder.layer[0].output.dense.weight,
                       model.bert.second_read_encoder.layer[0].output.dense.weight)


def test_remote_code_without_hf_readonce(tmp_path):
    model = tiny_qa(memory_type="entity", question_in_first_read=False, memory_top_k=3)
    model.save_pretrained(tmp_path / "ckpt")
    ids, questions = segments(5), segments(3, length=6, seed=4)
    q_docs = torch.tensor([0, 1, 1])
    expected = model(ids, document_ids=DOCS, entity_spans=SPANS, question_input_ids=questions,
                     question_document_ids=q_docs).start_logits
    torch.save({"ids": ids, "docs": DOCS, "spans": SPANS, "q": questions, "qd": q_docs, "expected": expected},
               tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import torch
        try:
            import hf_readonce
            raise SystemExit("hf_readonce was importable")
        except ImportError:
            pass
        from transformers import AutoModelForQuestionAnswering
        model = AutoModelForQuestionAnswering.from_pretrained({str(tmp_path / 'ckpt')!r}, trust_remote_code=True).eval()
        assert type(model).__name__ == "ReadTwiceBertForQuestionAnswering", type(model)
        assert "hf_readonce" not in type(model).__module__, type(model).__module__
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        stored = model.encode_documents(d["ids"], document_ids=d["docs"], entity_spans=d["spans"])
        got = model(question_input_ids=d["q"], question_document_ids=d["qd"], document_states=stored).start_logits
        torch.testing.assert_close(got, d["expected"], atol=1e-6, rtol=0)
        print("OK", got.shape)
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


def test_model_folder_imports_only_torch_transformers_stdlib_and_siblings():
    folder = REPO_ROOT / "src" / "hf_readonce" / "models" / "readtwice_bert"
    stdlib = set(sys.stdlib_module_names)
    for path in folder.glob("*_readtwice_bert.py"):
        # configuration: transformers and stdlib only; modeling and pipeline files may also use torch
        allowed = {"transformers"} | stdlib | ({"torch"} if path.name.startswith(("modeling_", "pipeline_")) else set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    assert node.level == 1, f"{path.name}: only single-dot relative imports"
                    continue
                roots = [node.module.split(".")[0]]
            elif isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            else:
                continue
            for root in roots:
                assert root in allowed, f"{path.name} imports {root}"


# ----------------------------------------------------------------------------------------------- QA glue
def test_entity_spans_for_segment_and_heuristic():
    offsets = [None, (0, 4), (5, 9), (9, 10), (11, 17), None]
    assert entity_spans_for_segment(offsets, [(0, 9), (11, 17), (20, 25), (0, 9)]) == [(1, 2), (4, 4)]
    text = "The Ring went to Mount Doom. Frodo Baggins of the Shire's hobbits"
    found = [text[a:b] for a, b in capitalized_mentions(text)]
    assert found == ["Ring", "Mount Doom", "Frodo Baggins of the Shire"]


def test_postprocess_picks_best_span_across_segments():
    examples = [{"id": "x", "context": "alpha beta gamma delta", "question": "q"}]
    from hf_readonce.tasks.readtwice_qa import ReadTwiceQAFeature

    offsets = [[None, (0, 5), (6, 10), None], [None, (11, 16), (17, 22), None]]
    feature = ReadTwiceQAFeature(0, [[1] * 4] * 2, [[0] * 4] * 2, offsets, [[], []], [[], []], [[], []])
    start = np.array([[9.0, 1.0, 0.0, 0.0], [0.0, 0.5, 3.0, 0.0]])  # [CLS] is never an answer
    end = np.array([[9.0, 0.0, 1.5, 0.0], [0.0, 0.0, 2.0, 0.0]])
    assert postprocess_readtwice_qa(examples, [feature], [(start, end, 0)]) == {"x": "delta"}
    start[0, 1] = 10.0
    assert postprocess_readtwice_qa(examples, [feature], [(start, end, 0)]) == {"x": "alpha beta"}
    assert postprocess_readtwice_qa(examples, [feature], [(start, end, 0)], max_answer_length=1) == {"x": "alpha"}


@pytest.mark.slow
def test_minilm_warm_start_on_real_quoref_segments(data_dir):
    from transformers import AutoTokenizer

    from hf_readonce.tasks.question_answering import load_qa_examples, squad_em_f1
    from hf_readonce.weights import minilm_path

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    examples, _ = load_qa_examples(data_dir / "quoref" / "validation.jsonl", limit=3)
    features = prepare_readtwice_qa_features(tokenizer, examples, segment_length=128, segment_overlap=32,
                                             mention_fn=capitalized_mentions)
    assert all(f.num_segments >= 2 for f in features)
    for example, feature in zip(examples, features):  # gold labels point at the answer text
        answer = example["answers"]["text"][0]
        seg = next(i for i, s in enumerate(feature.start_positions) if s)
        o = feature.offsets[seg]
        s, e = feature.start_positions[seg][0], feature.end_positions[seg][0]
        assert example["context"][o[s][0] : o[e][1]] == answer
    model = ReadTwiceBertForQuestionAnswering.from_pretrained(path, memory_type="entity", segment_length=128,
                                                              segment_overlap=32).eval()
    bert = BertModel.from_pretrained(path, add_pooling_layer=False).eval()
    batch = ReadTwiceQACollator(tokenizer.pad_token_id, with_entities=True)(features)
    with torch.no_grad():
        out = model.bert(**{k: v for k, v in batch.items() if k not in ("start_positions", "end_positions")})
        expected = bert(batch["input_ids"][:1], attention_mask=batch["attention_mask"][:1],
                        token_type_ids=batch["token_type_ids"][:1]).last_hidden_state
        torch.testing.assert_close(out.first_read_hidden_state[:1], expected, atol=1e-4, rtol=0)
        qa = model(**batch)
    assert torch.isfinite(qa.loss) and qa.start_logits.shape == batch["input_ids"].shape
    assert out.memory_values.shape[0] == int((batch["entity_spans"][..., 0] >= 0).sum()) > 0
    logits = predict_readtwice_qa(model, features, ReadTwiceQACollator(tokenizer.pad_token_id, with_entities=True))
    scores = squad_em_f1(postprocess_readtwice_qa(examples, features, logits), examples)
    assert 0 <= scores["f1"] <= 100
    baseline = GlobalNormBertForQuestionAnswering.from_pretrained(path).eval()
    with torch.no_grad():
        assert torch.isfinite(baseline(**batch).loss)


# ----------------------------------------------------------------------------------------------- store adapter
@pytest.mark.parametrize("memory_type", ["sts", "entity"])
def test_store_adapter_round_trip_equals_reading_the_documents(tmp_path, memory_type):
    from transformers import AutoTokenizer

    from hf_readonce.representations import fill_store, get_adapter
    from hf_readonce.representations.readtwice_bert import ReadTwiceBertAdapter
    from hf_readonce.store import RepresentationStore, content_hash
    from hf_readonce.weights import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = tiny_qa(memory_type=memory_type, question_in_first_read=False, memory_top_k=5,
                    vocab_size=tokenizer.vocab_size, segment_length=24, segment_overlap=6)
    texts = ["Frodo Baggins left the Shire with Sam. Gandalf met Frodo Baggins in Bree, and Strider led them to "
             "Rivendell where Elrond held a council about the Ring.", "Emma Woodhouse lived at Hartfield."]
    examples = [{"question": "Who led Frodo Baggins to Rivendell?", "context": texts[0]},
                {"question": "Where did Emma live?", "context": texts[1]}]
    mention_fn = capitalized_mentions if memory_type == "entity" else None
    with pytest.raises(ValueError, match="question_in_first_read"):
        ReadTwiceBertAdapter(tiny_qa(vocab_size=tokenizer.vocab_size), tokenizer)
    adapter = get_adapter(model, tokenizer, mention_fn=mention_fn)
    assert type(adapter) is ReadTwiceBertAdapter
    store = RepresentationStore(tmp_path / "store")
    fill_store(adapter, store, texts, store_dtype="float32")
    stored = store.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(t) for t in texts])
    states = adapter.read(stored)
    assert isinstance(states, ReadTwiceDocumentOutput)
    features = prepare_readtwice_qa_features(tokenizer, examples, 24, 6, question_in_first_read=False,
                                             mention_fn=mention_fn)
    assert features[0].num_segments >= 3
    batch = ReadTwiceQACollator(tokenizer.pad_token_id, with_entities=memory_type == "entity",
                                with_labels=False)(features)
    expected = model(**batch).start_logits
    questions = {k: v for k, v in batch.items() if k.startswith("question_")}
    got = model(document_states=states, **questions).start_logits
    q = batch["question_input_ids"].shape[1]
    mask = torch.cat([batch["question_attention_mask"][batch["document_ids"]], batch["attention_mask"]], dim=1)
    width = min(got.shape[1], expected.shape[1])
    torch.testing.assert_close(got[:, :width][mask[:, :width].bool()], expected[:, :width][mask[:, :width].bool()],
                               atol=1e-5, rtol=0)
    assert q > 0 and adapter.num_tokens(stored[0]) == int(batch["attention_mask"][batch["document_ids"] == 0].sum())


def test_store_adapter_loads_readtwice_and_bert_checkpoints_for_storing(tmp_path):
    from hf_readonce.representations import get_adapter_class
    from hf_readonce.representations.readtwice_bert import ReadTwiceBertAdapter

    assert get_adapter_class("readtwice_bert") is ReadTwiceBertAdapter and list(ReadTwiceBertAdapter.cli_settings) == ["mentions"]
    tiny_qa(question_in_first_read=False).save_pretrained(tmp_path / "read_once")
    model = ReadTwiceBertAdapter.load_model(str(tmp_path / "read_once"))
    assert isinstance(model, ReadTwiceBertForQuestionAnswering) and not model.config.question_in_first_read
    tiny_qa().save_pretrained(tmp_path / "paper")  # question_in_first_read=True: nothing document-only to store
    with pytest.raises(ValueError, match="question_in_first_read=True"):
        ReadTwiceBertAdapter.load_model(str(tmp_path / "paper"))
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY), add_pooling_layer=False).save_pretrained(tmp_path / "bert")
    model = ReadTwiceBertAdapter.load_model(str(tmp_path / "bert"), memory_type="sts", span_length=4)
    assert model.config.model_type == "readtwice_bert" and not model.config.question_in_first_read
    assert model.config.memory_type == "sts"
    with pytest.raises(ValueError, match="question_in_first_read=True"):
        ReadTwiceBertAdapter.load_model(str(tmp_path / "bert"), question_in_first_read=True)


def test_float_indices_mismatched_question_masks_and_unpaired_labels_are_refused_by_name():
    model = tiny_qa(memory_type="entity", question_in_first_read=False)
    ids, questions, q_docs = segments(5), segments(2, length=6, seed=4), torch.tensor([0, 1])
    call = dict(document_ids=DOCS, entity_spans=SPANS, question_input_ids=questions, question_document_ids=q_docs)
    for name, value, error, words in [
            ("input_ids", ids.float(), TypeError, "`input_ids` must be an integer tensor"),
            ("document_ids", DOCS.float(), TypeError, "`document_ids` must be an integer tensor"),
            ("entity_spans", SPANS + 0.5, TypeError, "`entity_spans` must be an integer tensor"),
            ("question_input_ids", questions.float(), TypeError, "`question_input_ids` must be an integer tensor"),
            ("question_attention_mask", torch.ones(1, 6, dtype=torch.long), ValueError,
             r"`question_attention_mask` has shape \(1, 6\), expected that of `question_input_ids` \(2, 6\)"),
            ("start_positions", torch.tensor([1, 2, 1, 2, 3]), ValueError, "`start_positions` was given without its pair")]:
        with pytest.raises(error, match=words):
            model(**{"input_ids": ids, **call, name: value})
    with pytest.raises(TypeError, match="`end_positions` must be an integer tensor"):
        model(ids, **call, start_positions=torch.tensor([7, 8, 7, 8, 9]), end_positions=torch.tensor([8.0] * 5))
    starts, ends = torch.tensor([7, 8, 7, 8, 9]), torch.tensor([8, 9, 8, 9, 10])  # rows: 3 + 2 question/segment pairs
    assert model(ids, **call, start_positions=starts, end_positions=ends).loss.isfinite()
    with pytest.raises(ValueError, match=r"span positions must be .* got shape \(5, 1, 1\)"):  # a torch error before
        model(ids, **call, start_positions=starts[:, None, None], end_positions=ends[:, None, None])
    with pytest.raises(ValueError, match="`question_input_ids` holds 70 tokens per question, more than the model's "
                                         "max_position_embeddings 64"):
        model(ids, **{**call, "question_input_ids": segments(2, length=70, seed=4)})
    vocab = model.config.vocab_size  # an id outside the vocabulary: named, not torch's "index out of range"
    with pytest.raises(ValueError, match=rf"`input_ids` holds token id {vocab + 3}, outside the vocabulary"):
        model(torch.where(ids == ids[0, 1], ids, vocab + 3), **call)


# ----------------------------------------------------------------------------------------------- misspelled keywords
def test_a_misspelled_keyword_argument_is_a_type_error_naming_it():
    """`**kwargs` took any name: `document_state=` (for `document_states=`) ran the model without the stored read."""
    model = tiny_qa(memory_type="sts")
    ids = segments(5)
    stored = model.encode_documents(ids, document_ids=DOCS)
    mask = torch.ones_like(ids)
    mlm = ReadTwiceBertForMaskedLM(tiny_config(memory_type="sts")).eval()
    for call, message in [
            (lambda: model(ids, document_ids=DOCS, document_state=stored),
             "ReadTwiceBertForQuestionAnswering.forward() got an unexpected keyword argument 'document_state'. "
             "Did you mean 'document_states'?"),
            (lambda: model.bert(ids, document_ids=DOCS, document_state=stored),
             "ReadTwiceBertModel.forward() got an unexpected keyword argument 'document_state'. "
             "Did you mean 'document_states'?"),
            (lambda: model.encode_documents(ids, document_ids=DOCS, attention_masks=mask),
             "ReadTwiceBertForQuestionAnswering.encode_documents() got an unexpected keyword argument "
             "'attention_masks'. Did you mean 'attention_mask'?"),
            (lambda: model.bert.encode_documents(ids, document_ids=DOCS, attention_masks=mask),
             "ReadTwiceBertModel.encode_documents() got an unexpected keyword argument 'attention_masks'. "
             "Did you mean 'attention_mask'?"),
            (lambda: mlm(ids, document_ids=DOCS, entity_span=SPANS),
             "ReadTwiceBertForMaskedLM.forward() got an unexpected keyword argument 'entity_span'. "
             "Did you mean 'entity_spans'?"),
            (lambda: model(ids, document_ids=DOCS, xyzzy=1),
             "ReadTwiceBertForQuestionAnswering.forward() got an unexpected keyword argument 'xyzzy'")]:
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == message
    # what transformers passes, a `None` (it changes nothing), and what a head hands on to `ReadTwiceBertModel`
    expected = model(ids, document_ids=DOCS).start_logits
    torch.testing.assert_close(model(ids, document_ids=DOCS, return_dict=True, output_attentions=False,
                                     use_cache=False, document_state=None).start_logits, expected)
    assert mlm(document_states=mlm.bert.encode_documents(ids, document_ids=DOCS)).logits.shape == (5, 12, 99)


# ----------------------------------------------------------------------------------------------- keywords not read
# keywords `TransformersKwargs` (or transformers' plumbing) lets through that no ReadTwice forward reads: each changed
# nothing, whatever its value
UNREAD = {"position_ids": torch.arange(3, 15).expand(5, -1), "cu_seq_lens_q": torch.tensor([0, 6, 12], dtype=torch.int32),
          "cu_seq_lens_k": torch.tensor([0, 6, 12], dtype=torch.int32), "max_length_q": 6, "max_length_k": 6,
          "seq_idx": torch.zeros(5, 12, dtype=torch.int32), "is_causal": True, "output_router_logits": True,
          "logits_to_keep": 1, "num_items_in_batch": torch.tensor(3), "debug_io": True, "debug_io_dir": "debug",
          "prune_layers": 1}


@pytest.mark.parametrize("name", sorted(UNREAD))
def test_a_keyword_it_does_not_read_is_refused_naming_it(name):
    """`position_ids` reached BERT's layers, which do not read them: the segments were read at positions 0.. whatever
    was given (other positions, the same logits). Flash attention's packing arguments, `is_causal=True` (causal only
    where SDPA got no mask), `num_items_in_batch` (the losses are means), `logits_to_keep`, `output_router_logits`
    and transformers' I/O debugger options went the same way. Each is refused, by every forward."""
    model = tiny_qa(memory_type="sts")
    mlm = ReadTwiceBertForMaskedLM(tiny_config(memory_type="sts")).eval()
    ids, value = segments(5), {name: UNREAD[name]}
    question = {"question_input_ids": segments(2, length=6, seed=2), "question_document_ids": torch.tensor([0, 1])}
    read_once = tiny_qa(memory_type="sts", question_in_first_read=False)
    for call, where in [(lambda: model(ids, document_ids=DOCS, **value), "ReadTwiceBertForQuestionAnswering.forward"),
                        (lambda: model.bert(ids, document_ids=DOCS, **value), "ReadTwiceBertModel.forward"),
                        (lambda: read_once(ids, document_ids=DOCS, **question, **value),
                         "ReadTwiceBertForQuestionAnswering.forward"),
                        (lambda: mlm(ids, document_ids=DOCS, **value), "ReadTwiceBertForMaskedLM.forward"),
                        (lambda: model.encode_documents(ids, document_ids=DOCS, **value),
                         "ReadTwiceBertForQuestionAnswering.encode_documents"),
                        (lambda: model.bert.encode_documents(ids, document_ids=DOCS, **value),
                         "ReadTwiceBertModel.encode_documents")]:
        with refuses_unread_keyword(name, rf"^{where}\(\) got `{name}`, which it does not support"):
            call()


def test_the_values_a_keyword_it_does_not_read_takes_by_default_pass():
    """`is_causal=False` (a bidirectional read), `logits_to_keep=0` (every position) and the switches left off ask
    for what the model does: they pass, and change nothing."""
    model = tiny_qa(memory_type="sts")
    ids = segments(5)
    expected = model(ids, document_ids=DOCS).start_logits
    neutral = dict(is_causal=False, logits_to_keep=0, output_router_logits=False, debug_io=False)
    torch.testing.assert_close(model(ids, document_ids=DOCS, **neutral).start_logits, expected)
    stored = model.encode_documents(ids, document_ids=DOCS)
    again = model.encode_documents(ids, document_ids=DOCS, output_attentions=False, output_hidden_states=False,
                                   return_dict=True, **neutral)
    torch.testing.assert_close(again.first_read_hidden_state, stored.first_read_hidden_state)


def test_encode_documents_refuses_the_tuple_it_does_not_return():
    """`encode_documents` returns a `ReadTwiceDocumentOutput` (the first read and its memories, and BERT₁'s attention
    weights and hidden states when asked): asked for a tuple, it returned that output, without a word."""
    model = tiny_qa(memory_type="sts")
    with pytest.raises(ValueError, match=r"encode_documents\(\) got `return_dict`, which it does not support"):
        model.encode_documents(segments(5), document_ids=DOCS, return_dict=False)


def test_masked_lm_loss_under_gradient_accumulation_is_the_whole_batch_s(tmp_path):
    """`Trainer` took `ReadTwiceBertForMaskedLM` (a `**kwargs` forward, no `accepts_loss_kwargs`) for a model that
    divides its loss by `num_items_in_batch`, passed it, and left the losses of the accumulated batches unscaled;
    the loss (a mean) did not read it: two half batches trained with about twice the whole batch's gradients."""
    from tests.models.loss_checks import assert_accumulation_equals_one_batch

    ids = segments(4)
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]  # one target per row: the mean over each half batch is half the whole batch's sum
    masked = ids.clone()
    masked[:, 3] = 4
    # every segment a document of its own: no memory crosses rows, so the rows do not depend on how they are batched
    rows = [{"input_ids": masked[i], "labels": labels[i], "document_ids": torch.tensor(i)} for i in range(4)]

    def build():
        torch.manual_seed(0)
        return ReadTwiceBertForMaskedLM(tiny_config(memory_type="sts"))

    assert assert_accumulation_equals_one_batch(build, rows, tmp_path) is False

