"""The KV cache under both of its names. transformers 5.24 renamed `past_key_values` to `cache` (the field of every
ModelOutput, the argument of `forward`, `generate`, the decoder layers and attention modules) and kept the old name as
a deprecated alias; 5.6 to 5.23 know only `past_key_values`. Every model family here accepts either name, passes on
the installed transformers' one, returns its cache under that name and refuses both at once; the encoder-only
families (DeFormer, ReadTwice) keep no cache and refuse either name. These tests run unchanged under transformers 5.6
and 5.24 (CI runs `tests/models` under both)."""

from dataclasses import fields

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import Trainer, TrainingArguments
from transformers.modeling_outputs import CausalLMOutputWithPast

from hf_readonce import RecurrentCache
from tests.models.block_attention_llama.test_modeling_block_attention_llama import ids as llama_ids
from tests.models.block_attention_llama.test_modeling_block_attention_llama import tiny as tiny_block_attention
from tests.models.deformer_bert.test_modeling_deformer_bert import make_pairs, tiny_deformer
from tests.models.longdoc_bart.test_modeling_longdoc_bart import longdoc
from tests.models.readonce_bart.test_modeling_readonce_bart import tiny as tiny_readonce
from tests.models.readonce_bart.test_modeling_readonce_bart import tokens
from tests.models.readtwice_bert.test_modeling_readtwice_bert import DOCS, segments, tiny_qa
from tests.models.recurrent.test_modeling_recurrent import ids as recurrent_ids
from tests.models.recurrent.test_modeling_recurrent import tiny as tiny_recurrent

INSTALLED = "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"
BOTH = ["past_key_values", "cache"]


def test_every_family_uses_the_installed_name():
    from hf_readonce.models.block_attention_llama import modeling_block_attention_llama
    from hf_readonce.models.longdoc_bart import modeling_longdoc_bart
    from hf_readonce.models.readonce_bart import modeling_readonce_bart
    from hf_readonce.models.recurrent import modeling_recurrence

    assert (INSTALLED == "cache") == (Version(transformers.__version__).release >= (5, 24))
    for module in (modeling_block_attention_llama, modeling_longdoc_bart, modeling_readonce_bart,
                   modeling_recurrence):
        assert module.CACHE_NAME == INSTALLED, module.__name__


# ------------------------------------------------------------------------------------------------ block attention
def test_block_attention_composed_cache_field_and_either_name():
    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import ComposedDocumentCache

    model = tiny_block_attention()
    document, question = llama_ids(9, 1), llama_ids(4, 2)
    with torch.no_grad():
        caches = model.encode_documents(document)
        prefix = model.compose_batch(caches, 1)
        assert [f.name for f in fields(prefix)] == [INSTALLED, "attention_mask"]
        # HF's own alias (5.24) or the field itself (5.6): `past_key_values=` builds it under either version
        rebuilt = ComposedDocumentCache(past_key_values=getattr(prefix, INSTALLED), attention_mask=prefix.attention_mask)
        assert getattr(rebuilt, INSTALLED) is getattr(prefix, INSTALLED)
        reference = model(question, document_caches=caches).logits
        mask = torch.cat([prefix.attention_mask, torch.ones_like(question)], dim=1)
        for name in BOTH:
            prefix = model.compose_batch(caches, 1)
            out = model(question, attention_mask=mask, position_ids=torch.arange(9, 13)[None],
                        **{name: getattr(prefix, INSTALLED)})
            torch.testing.assert_close(out.logits, reference, atol=1e-5, rtol=0)
            assert getattr(out, INSTALLED).get_seq_length() == 13
            with pytest.raises(ValueError, match="document_caches"):
                model(question, document_caches=caches, **{name: getattr(prefix, INSTALLED)})
            with pytest.raises(ValueError, match="document_caches"):
                model.generate(question, document_caches=caches, max_new_tokens=2,
                               **{name: getattr(prefix, INSTALLED)})
        with pytest.raises(ValueError, match="not both"):
            model(question, attention_mask=mask, past_key_values=getattr(model.compose_batch(caches, 1), INSTALLED),
                  cache=getattr(prefix, INSTALLED))


# ------------------------------------------------------------------------------------------------ recurrent
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_recurrent_stream_continues_under_either_name(family):
    model = tiny_recurrent(family)
    x = recurrent_ids(2, 61)
    with torch.no_grad():
        reference = model(x, use_cache=False).logits[:, 37:]
        for name in BOTH:
            first = model(x[:, :37], use_cache=True)
            assert isinstance(getattr(first, INSTALLED), RecurrentCache)
            rest = model(x[:, 37:], **{name: getattr(first, INSTALLED)})
            torch.testing.assert_close(rest.logits, reference, atol=1e-5, rtol=0)
        with pytest.raises(ValueError, match="not both"):
            model(x, past_key_values=RecurrentCache(config=model.config), cache=RecurrentCache(config=model.config))
        # generate() with the caller's cache: `past_key_values` (5.6; the deprecated alias under 5.24) or `cache`
        prompt = recurrent_ids(1, 40)
        greedy = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
        expected = model.generate(prompt, **greedy)
        for name in sorted({"past_key_values", INSTALLED}):
            got = model.generate(prompt, **{name: RecurrentCache(config=model.config)}, **greedy)
            assert torch.equal(got, expected), name


def test_recurrent_trainer_predict_leaves_the_cache_out(tmp_path):
    """`keys_to_ignore_at_inference` names the cache output under both names, so that `Trainer.predict` on the
    cached path (eval mode with `use_cache=True`) returns the logits alone."""
    from datasets import Dataset

    model = tiny_recurrent("gpt2")
    rows = [{"input_ids": recurrent_ids(1, 20, seed=s)[0].tolist()} for s in range(4)]
    dataset = Dataset.from_list([{**r, "labels": r["input_ids"]} for r in rows])
    args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, use_cpu=True, report_to="none",
                             use_cache=True)
    predictions = Trainer(model=model, args=args).predict(dataset).predictions
    assert getattr(predictions, "shape", None) == (4, 20, 99), type(predictions)


# ------------------------------------------------------------------------------------------------ BART families
@pytest.mark.parametrize("make", ["readonce_attention", "longdoc_neighborhood"])
def test_bart_decoder_step_under_either_name(make):
    if make == "readonce_attention":  # its own forward: either name under every version
        model = tiny_readonce(fusion="attention")
        inputs = dict(input_ids=tokens(2, 7), document_representations=model.encode_documents(tokens(2, 12, seed=2)))
        names = BOTH
    else:  # BART's forward, our decoder and attention below it: the names BART takes
        model = longdoc(encoder_attention_type="neighborhood", decoder_attention_type="neighborhood",
                        neighborhood_radius=2)
        inputs = dict(input_ids=tokens(2, 12))
        names = sorted({"past_key_values", INSTALLED})
    decoder_ids = tokens(2, 6, seed=3)
    with torch.no_grad():
        full = model(**inputs, decoder_input_ids=decoder_ids, use_cache=False).logits[:, -1]
        for name in names:
            first = model(**inputs, decoder_input_ids=decoder_ids[:, :-1], use_cache=True)
            step = model(**inputs, decoder_input_ids=decoder_ids[:, -1:], use_cache=True,
                         **{name: getattr(first, INSTALLED)})
            torch.testing.assert_close(step.logits[:, -1], full, atol=1e-5, rtol=0)
            assert getattr(step, INSTALLED).get_seq_length() == 6
        first = model(**inputs, decoder_input_ids=decoder_ids[:, :-1], use_cache=True)
        if make == "readonce_attention":
            with pytest.raises(ValueError, match="not both"):
                model(**inputs, decoder_input_ids=decoder_ids[:, -1:], past_key_values=getattr(first, INSTALLED),
                      cache=getattr(first, INSTALLED).self_attention_cache)


# ------------------------------------------------------------------------------------------------ encoder-only families
def _encoder_only_calls(family):
    """`(name, call(**kwargs) -> logits-like tensor)` for every public entry point of an encoder-only family that
    takes `**kwargs`, and the argument its refusal points to."""
    if family == "deformer":
        model = tiny_deformer(k=2)
        (ids, types, mask), _, _ = make_pairs([5, 8], [12, 7])
        return [("DeformerBertForQuestionAnswering.forward", lambda **kw: model(ids, mask, types, **kw).start_logits),
                ("DeformerBertModel.forward",
                 lambda **kw: model.bert(ids, mask, types, **kw).last_hidden_state)], "passage_states="
    from hf_readonce import ReadTwiceBertForMaskedLM
    from tests.models.readtwice_bert.test_modeling_readtwice_bert import tiny_config

    model, ids = tiny_qa(memory_type="sts"), segments(5)
    torch.manual_seed(0)
    mlm = ReadTwiceBertForMaskedLM(tiny_config(memory_type="sts")).eval()
    return [("ReadTwiceBertForQuestionAnswering.forward", lambda **kw: model(ids, document_ids=DOCS, **kw).start_logits),
            ("ReadTwiceBertModel.forward", lambda **kw: model.bert(ids, document_ids=DOCS, **kw).last_hidden_state),
            ("ReadTwiceBertForQuestionAnswering.encode_documents",
             lambda **kw: model.encode_documents(ids, document_ids=DOCS, **kw).first_read_hidden_state),
            ("ReadTwiceBertModel.encode_documents",
             lambda **kw: model.bert.encode_documents(ids, document_ids=DOCS, **kw).first_read_hidden_state),
            ("ReadTwiceBertForMaskedLM.forward", lambda **kw: mlm(ids, document_ids=DOCS, **kw).logits)], \
        "document_states="


@pytest.mark.parametrize("family", ["deformer", "readtwice"])
def test_encoder_only_families_refuse_a_cache_and_ignore_use_cache(family):
    """DeFormer and ReadTwice took `past_key_values=` / `cache=` into `**kwargs` and handed them to BERT's layers,
    which filled the caller's cache with this call's keys (and, were it filled, attended to another input's keys or
    failed on the mask's shape); `cache_position=` was swallowed. They keep no cache: a cache argument that is not
    `None` is refused by name; `use_cache` is a switch `BertModel` accepts and ignores on an encoder, and so do they."""
    from transformers import DynamicCache

    calls, reuse = _encoder_only_calls(family)
    with torch.no_grad():
        for method, call in calls:
            expected = call()
            for name in ["past_key_values", "cache", "cache_position"]:
                value = torch.arange(4) if name == "cache_position" else DynamicCache()
                with pytest.raises(ValueError) as error:
                    call(**{name: value})
                assert str(error.value).startswith(f"{method}() got `{name}`, but the model is an encoder and keeps "
                                                   "no key/value cache"), str(error.value)
                assert reuse in str(error.value)
                if name != "cache_position":
                    assert value.get_seq_length() == 0  # the caller's cache is left as it was
            # what peft and `generate()` hand on (`None`), and the switch, as `BertForQuestionAnswering` takes it
            for kwargs in [dict(past_key_values=None, cache=None, cache_position=None), dict(use_cache=True),
                           dict(use_cache=False)]:
                torch.testing.assert_close(call(**kwargs), expected, msg=f"{method} {kwargs}")

