"""BlockAttentionLlamaForCausalLM (Block-Attention, TurboRAG): per-document KV caches, composition by re-rotating
keys, generate() from composed caches, the block training mask; on tiny random Llama configs in fp32."""

import functools
import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM, DocumentCacheOutput
from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import (
    block_attention_mask,
    compose_document_caches,
    document_cache_fingerprint,
    rope_setting,
    selective_recompute,
)
from tests.conftest import run_without_hf_readonce

TINY = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
ATOL = 1e-4


def tiny(seed=0, **overrides):
    torch.manual_seed(seed)
    return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**{**TINY, **overrides})).eval()


def plain(model):
    """`LlamaForCausalLM` with the same weights and settings."""
    config = LlamaConfig(**{k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "auto_map")})
    llama = LlamaForCausalLM(config).eval()
    llama.load_state_dict(model.state_dict())
    return llama


def ids(length, seed, batch=1):
    return torch.randint(3, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def greedy(**kwargs):
    return dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True,
                pad_token_id=0, **kwargs)


def assert_same_generation(reference, composed, new_tokens=6):
    """Same new tokens and the same logits at every step."""
    assert reference.sequences[:, -new_tokens:].tolist() == composed.sequences[:, -new_tokens:].tolist()
    for a, b in zip(reference.logits, composed.logits, strict=True):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


# ----------------------------------------------------------------------------------------------------- config, loading
def test_config_loads_any_llama_config_and_checkpoint(tmp_path):
    llama = LlamaForCausalLM(LlamaConfig(**TINY)).eval()
    llama.save_pretrained(tmp_path)
    config = BlockAttentionLlamaConfig.from_pretrained(tmp_path)
    assert config.model_type == "block_attention_llama" and config.hidden_size == 32
    model = BlockAttentionLlamaForCausalLM.from_pretrained(tmp_path).eval()  # nothing newly initialized
    x = ids(12, 1)
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, llama(x).logits, atol=0, rtol=0)
    # a plain Llama and the block-attention model with the same weights make the same caches
    assert document_cache_fingerprint(llama) == model.representation_fingerprint()
    assert type(AutoConfig.for_model("block_attention_llama")) is BlockAttentionLlamaConfig


# ----------------------------------------------------------------------------------------------------- composition
@pytest.mark.parametrize("rope", [None, {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                                  {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                   "rope_theta": 500000.0},
                                  {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64,
                                   "rope_theta": 10000.0}])
@pytest.mark.parametrize("offset", [0, 7, 150])
def test_one_document_composed_at_offset_equals_encoding_it_there(rope, offset):
    model = tiny(**({} if rope is None else {"rope_parameters": rope}))
    document = ids(20, 1)
    with torch.no_grad():
        cache = model.encode_documents(document)
        direct = model.model(document, position_ids=torch.arange(offset, offset + 20)[None], use_cache=True)
    composed = model.compose_document_caches(cache, offset=offset)
    assert composed.get_seq_length() == 20
    for layer in range(model.config.num_hidden_layers):
        torch.testing.assert_close(composed.layers[layer].keys, direct.past_key_values.layers[layer].keys,
                                   atol=ATOL, rtol=0)
        torch.testing.assert_close(composed.layers[layer].values, direct.past_key_values.layers[layer].values,
                                   atol=ATOL, rtol=0)
    # the module-level function for plain Llama models gives the same cache
    again = compose_document_caches(cache, plain(model).config, offset=offset)
    torch.testing.assert_close(again.layers[0].keys, composed.layers[0].keys, atol=0, rtol=0)


def test_rope_types_without_exact_rotation_are_refused():
    model = tiny(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    with torch.no_grad():
        cache = model.encode_documents(ids(10, 1))
    with pytest.raises(ValueError, match="rope_type 'dynamic'"):
        model.compose_document_caches(cache)
    with pytest.raises(ValueError, match="rope_type"):
        model.generate(ids(4, 2), document_caches=cache, max_new_tokens=2)


def test_padded_document_batch_gives_each_document_its_own_cache():
    model = tiny()
    a, b = ids(12, 1), ids(7, 2)
    batch = torch.zeros(2, 12, dtype=torch.long)
    batch[0], batch[1, 5:] = a[0], b[0]  # b left-padded
    mask = (batch != 0).long()
    with torch.no_grad():
        both = model.encode_documents(batch, mask)
        alone = model.encode_documents(b)
    assert both.key_states.shape == (2, 2, 2, 12, 8) and both.num_documents == 2
    split = both.split()
    assert split[1].key_states.shape == (1, 2, 2, 7, 8) and split[1].position_ids.tolist() == [list(range(7))]
    torch.testing.assert_close(split[1].key_states, alone.key_states, atol=ATOL, rtol=0)
    torch.testing.assert_close(split[1].value_states, alone.value_states, atol=ATOL, rtol=0)


def test_document_caches_are_a_mapping_like_any_model_output():
    """`DocumentCacheOutput` keeps `ModelOutput`'s mapping methods: its cache fields are `key_states` and
    `value_states` (fields named `keys` / `values` would shadow `keys()` / `values()`, breaking `dict()` and
    `to_tuple()`)."""
    model = tiny()
    batch = torch.cat([ids(6, 1), ids(6, 2)])
    with torch.no_grad():
        caches = model.encode_documents(batch)
    fields = ["key_states", "value_states", "attention_mask", "position_ids", "model_fingerprint", "input_ids",
              "rope_setting"]
    as_dict = dict(caches)
    assert list(as_dict) == fields and list(caches.keys()) == fields
    assert as_dict["key_states"] is caches.key_states and as_dict["value_states"] is caches.value_states
    assert caches["key_states"].shape == caches["value_states"].shape == (2, 2, 2, 6, 8)
    as_tuple = caches.to_tuple()
    assert len(as_tuple) == len(fields) and as_tuple[0] is caches.key_states and as_tuple[1] is caches.value_states
    assert [v is caches[k] for k, v in zip(caches.keys(), caches.values(), strict=True)] == [True] * len(fields)
    with pytest.raises(TypeError, match="keys"):
        DocumentCacheOutput(keys=caches.key_states, values=caches.value_states)


# ----------------------------------------------------------------------------------------------------- one document
def test_one_document_is_exactly_the_plain_causal_lm():
    model = tiny()
    llama = plain(model)
    document, question = ids(24, 1), ids(7, 2)
    prompt = torch.cat([document, question], dim=1)
    with torch.no_grad():
        cache = model.encode_documents(document)
        composed = model(question, document_caches=cache).logits
        full = llama(prompt).logits[:, 24:]
        torch.testing.assert_close(composed, full, atol=ATOL, rtol=0)
        reference = llama.generate(prompt, **greedy())
        composed = model.generate(question, document_caches=cache, **greedy())
        assert_same_generation(reference, composed)
        assert torch.equal(composed.sequences, reference.sequences[:, 24:])  # the question, then the new tokens
        # cache passed as a list, or its documents one per element, is the same
        listed = model.generate(question, document_caches=[cache], **greedy())
        assert listed.sequences.tolist() == model.generate(question, document_caches=cache, **greedy()).sequences.tolist()


def test_output_attentions_are_llama_s_over_the_composed_prefix():
    """Llama's own recording (eager): with `document_caches` the question's rows over prefix + question, equal to the
    plain causal LM's rows of the question over document + question (one document), with and without selective
    recomputation (run before Llama's layers, so it adds no entries); with `block_ids`, 0 across blocks."""
    model = tiny()
    model.set_attn_implementation("eager")
    llama = plain(model)
    llama.set_attn_implementation("eager")
    document, question = ids(24, 1), ids(7, 2)
    with torch.no_grad():
        cache = model.encode_documents(document)
        full = llama(torch.cat([document, question], dim=1), output_attentions=True).attentions
        for ratio in (0.0, 0.5):
            composed = model(question, document_caches=cache, output_attentions=True, recompute_ratio=ratio)
            assert [tuple(a.shape) for a in composed.attentions] == [(1, 4, 7, 31)] * 2
        composed = model(question, document_caches=cache, output_attentions=True).attentions
        blocked = model(torch.cat([ids(11, 3), ids(6, 4), question], dim=1), output_attentions=True,
                        block_ids=torch.tensor([[0] * 11 + [1] * 6 + [-1] * 7])).attentions
    for ours, theirs in zip(composed, full):
        torch.testing.assert_close(ours, theirs[:, :, 24:], atol=1e-6, rtol=0)
    for weights in blocked:
        assert torch.all(weights[..., 11:17, :11] == 0) and torch.all(weights[..., 17:, :17] > 0)


def test_generate_batched_with_left_padding_equals_plain_generate():
    model = tiny()
    llama = plain(model)
    document = ids(16, 1)
    questions = [ids(6, 2)[0], ids(3, 3)[0]]
    q = torch.zeros(2, 6, dtype=torch.long)
    full = torch.zeros(2, 22, dtype=torch.long)
    for row, question in enumerate(questions):
        q[row, 6 - len(question):] = question
        full[row, 22 - 16 - len(question):] = torch.cat([document[0], question])
    with torch.no_grad():
        cache = model.encode_documents(document)
        reference = llama.generate(full, attention_mask=(full != 0).long(), **greedy())
        composed = model.generate(q, attention_mask=(q != 0).long(), document_caches=cache, **greedy())
    assert_same_generation(reference, composed)
    assert torch.equal(composed.sequences[:, :6], q)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_infers_the_questions_mask_from_the_pad_token_as_llama_does(use_cache):
    """Left-padded questions without `attention_mask`: `LlamaForCausalLM.generate` infers the mask from
    `pad_token_id` (when the prompt holds it and it is no eos token); with `document_caches` the padding was read as
    question tokens, other tokens without a word."""
    model = tiny()
    llama = plain(model)
    document = ids(16, 1)
    q = torch.zeros(2, 6, dtype=torch.long)
    q[0], q[1, 3:] = ids(6, 2)[0], ids(3, 3)[0]
    full = torch.zeros(2, 22, dtype=torch.long)
    full[0], full[1, 3:] = torch.cat([document[0], q[0]]), torch.cat([document[0], q[1, 3:]])
    with torch.no_grad():
        cache = model.encode_documents(document)
        given = model.generate(q, attention_mask=(q != 0).long(), document_caches=cache, use_cache=use_cache,
                               **greedy())
        inferred = model.generate(q, document_caches=cache, use_cache=use_cache, **greedy())
        reference = llama.generate(full, **greedy())  # Llama infers the mask of the padded full prompts
        # a pad token that is the eos token (as many Llama tokenizers set it): no mask is inferred, a question
        # holding it reads it, as Llama reads it in the full prompt
        eos = model.config.eos_token_id
        question = q[:1].clone()
        question[0, 2] = eos
        eos_settings = dict(greedy(), pad_token_id=eos)
        eos_reference = llama.generate(torch.cat([document, question], 1), **eos_settings)
        eos_composed = model.generate(question, document_caches=cache, use_cache=use_cache, **eos_settings)
    assert_same_generation(given, inferred)
    assert_same_generation(reference, inferred)
    assert_same_generation(eos_reference, eos_composed)


def test_generate_with_beams_equals_plain_generate():
    model = tiny()
    llama = plain(model)
    document, question = ids(18, 1), ids(5, 2, batch=2)
    prompt = torch.cat([document.expand(2, -1), question], dim=1)
    settings = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, num_beams=2, num_return_sequences=2,
                    output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        cache = model.encode_documents(document)
        reference = llama.generate(prompt, **settings)
        composed = model.generate(question, document_caches=cache, **settings)
    assert composed.sequences.shape == (4, 10)
    assert reference.sequences[:, 18:].tolist() == composed.sequences.tolist()
    torch.testing.assert_close(composed.sequences_scores, reference.sequences_scores, atol=ATOL, rtol=0)


def test_generate_settles_its_settings_as_generate_does():
    """Beams and returned sequences set in the model's `generation_config` apply under a `generation_config` given
    without them, as `generate` merges the two: the prefix was composed for one copy of each row, and `generate` made
    six (a RuntimeError from `torch.cat`)."""
    from transformers import GenerationConfig

    model = tiny()
    llama = plain(model)
    document, question = ids(16, 1), ids(5, 2, batch=2)
    for each in (model, llama):
        each.generation_config.num_beams, each.generation_config.num_return_sequences = 3, 2
    given = GenerationConfig(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cache = model.encode_documents(document)
        reference = llama.generate(torch.cat([document.expand(2, -1), question], 1), generation_config=given)
        for use_cache in (True, False):
            model.generation_config.use_cache = use_cache
            composed = model.generate(question, document_caches=cache, generation_config=given)
            assert reference.shape == (4, 26) and torch.equal(composed, reference[:, 16:]), use_cache


def test_generate_with_other_documents_per_row():
    model = tiny()
    llama = plain(model)
    documents = [ids(9, 1), ids(14, 2), ids(5, 3)]
    question = ids(4, 4, batch=2)
    with torch.no_grad():
        caches = [model.encode_documents(d) for d in documents]
        rows = [[caches[0], caches[1]], [caches[2]]]
        composed = model.generate(question, document_caches=rows, **greedy())
        for row, docs in enumerate(([0, 1], [2])):
            prompt = torch.cat([documents[d] for d in docs] + [question[row:row + 1]], dim=1)
            # the plain model reads every document, each alone: the block-attention forward of the full prompt
            block_ids = torch.tensor([sum(([d] * documents[d].shape[1] for d in docs), []) + [-1] * 4])
            width = prompt.shape[1] - 4
            logits = model(prompt, block_ids=block_ids).logits[:, -1]
            torch.testing.assert_close(composed.logits[0][row:row + 1], logits, atol=ATOL, rtol=0)
            if len(docs) == 1:  # one document: the plain causal LM
                reference = llama.generate(prompt, **greedy())
                assert reference.sequences[0, width:].tolist() == composed.sequences[row].tolist()
    with pytest.raises(ValueError, match="per-row lists"):
        model.generate(question, document_caches=[[caches[0]]], max_new_tokens=2)


@pytest.mark.parametrize("per_row", [False, True])
def test_generate_without_the_cache_equals_generate_with_it(per_row):
    """`use_cache=False` reads the question and the tokens so far after the composed documents at every step, as
    `use_cache=True` does once. The composed prefix was passed as a cache and `generate` fed it the whole sequence at
    every step, so the cache grew by the question again and again: other tokens, without a word."""
    model = tiny()
    documents = [ids(9, 1), ids(14, 2), ids(5, 3)]
    question = torch.zeros(3, 6, dtype=torch.long)
    for row, length in enumerate((6, 3, 4)):  # left-padded questions
        question[row, 6 - length:] = ids(length, 4 + row)[0]
    mask = (question != 0).long()
    with torch.no_grad():
        caches = [model.encode_documents(d) for d in documents]
        document_caches = [[caches[0], caches[1]], [caches[2]], [caches[1]]] if per_row else caches[:2]
        for settings in (greedy(), dict(greedy(), num_beams=3, num_return_sequences=2, output_scores=True),
                         dict(greedy(), recompute_ratio=0.5)):
            cached = model.generate(question, attention_mask=mask, document_caches=document_caches, **settings)
            uncached = model.generate(question, attention_mask=mask, document_caches=document_caches,
                                      use_cache=False, **settings)
            assert uncached.sequences.tolist() == cached.sequences.tolist()
            assert_same_generation(cached, uncached)
            if "num_beams" in settings:
                torch.testing.assert_close(uncached.sequences_scores, cached.sequences_scores, atol=ATOL, rtol=0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_runs_past_max_position_embeddings_as_llama_does(use_cache, caplog):
    """Documents and question are checked against `max_position_embeddings` before the first step (refused past it);
    the new tokens may run past it, as `LlamaForCausalLM.generate`'s do on the full prompt, with transformers'
    reminder when Llama gives it, the documents counted. Without the cache, every step's forward refused the question
    grown by the tokens so far (mid-generation, the tokens lost); with it, the reminder never counted the documents."""
    from transformers.utils import logging as hf_logging

    def reminded(generate, *args, **kwargs):
        type(hf_logging.get_logger("x")).warning_once.cache_clear()  # said once per process
        caplog.clear()
        hf_logging.enable_propagation()
        try:
            with caplog.at_level("WARNING"), torch.no_grad():
                out = generate(*args, **kwargs)
        finally:
            hf_logging.disable_propagation()
        return out, "exceeded the model's predefined maximum length (29)" in caplog.text

    model = tiny(max_position_embeddings=29)
    llama = plain(model)
    document, question = ids(20, 1), ids(6, 2)
    with torch.no_grad():
        cache = model.encode_documents(document)
    for new_tokens, past in ((3, False), (4, False), (6, True)):  # 26 + 3 = 29 positions; the 30th is never read
        settings = dict(greedy(), max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        reference, llama_reminded = reminded(llama.generate, torch.cat([document, question], 1), **settings)
        composed, composed_reminded = reminded(model.generate, question, document_caches=cache, use_cache=use_cache,
                                               **settings)
        assert_same_generation(reference, composed, new_tokens)
        assert llama_reminded is past and composed_reminded is past, new_tokens
    with pytest.raises(ValueError, match="a question of 10 tokens make 30 positions, more than the model's "
                                         "max_position_embeddings 29"):
        model.generate(ids(10, 3), document_caches=cache, use_cache=use_cache, **greedy())


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_s_default_length_counts_the_documents_as_llama_s_does(use_cache):
    """Without `max_new_tokens` or `max_length`, `generate` makes 20 new tokens, no more than `max_position_embeddings`
    in all: on the full prompt the documents count there; after composed caches they did not (20 new tokens where
    Llama stops at the limit)."""
    model = tiny(max_position_embeddings=36)
    llama = plain(model)
    document, question = ids(20, 1), ids(6, 2)
    settings = dict(do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cache = model.encode_documents(document)
        reference = llama.generate(torch.cat([document, question], 1), **settings)
        composed = model.generate(question, document_caches=cache, use_cache=use_cache, **settings)
        assert reference.shape == (1, 36) and torch.equal(composed, reference[:, 20:])
        # within the limit (256 positions), the default's 20 new tokens
        roomy = tiny()
        composed = roomy.generate(question, document_caches=roomy.encode_documents(document), use_cache=use_cache,
                                  **settings)
        assert composed.shape == (1, 26)


def test_generate_takes_the_prompt_as_inputs_as_llama_does():
    """`GenerationMixin.generate` names its prompt `inputs`: `generate(inputs=ids)` raised a TypeError (the prompt
    given twice) on this model, where `LlamaForCausalLM` generates."""
    model = tiny()
    llama = plain(model)
    document, question = ids(12, 1), ids(5, 2, batch=2)
    with torch.no_grad():
        cache = model.encode_documents(document)
        assert torch.equal(model.generate(inputs=question, **greedy()).sequences,
                           llama.generate(inputs=question, **greedy()).sequences)
        assert torch.equal(model.generate(inputs=question, document_caches=cache, **greedy()).sequences,
                           model.generate(question, document_caches=cache, **greedy()).sequences)
        with pytest.raises(ValueError, match="`input_ids` or `inputs`"):
            model.generate(question, inputs=question, max_new_tokens=2)


def test_generate_takes_the_generation_config_second_by_position_as_llama_does():
    """`GenerationMixin.generate`'s second positional argument is `generation_config`: `generate(ids,
    GenerationConfig(...))` was read as `document_caches` (a TypeError about document caches) on this model, where
    `LlamaForCausalLM` generates. `document_caches` and `recompute_ratio` are keyword-only; anything else second is a
    TypeError naming `generation_config` (document caches there point to `document_caches=`)."""
    import inspect

    from transformers import GenerationConfig

    model = tiny()
    llama = plain(model)
    document, question = ids(12, 1), ids(5, 2, batch=2)
    given = GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cache = model.encode_documents(document)
        expected = llama.generate(question, given)
        assert expected.shape == (2, 11)
        assert torch.equal(model.generate(question, given), expected)
        composed = model.generate(question, given, document_caches=cache)
        assert torch.equal(composed, model.generate(question, generation_config=given, document_caches=cache))
        assert torch.equal(composed, llama.generate(torch.cat([document.expand(2, -1), question], 1), given)[:, 12:])
        assert torch.equal(model.generate(question, given, document_caches=cache, recompute_ratio=1), composed)
        for wrong in (cache, [cache], [[cache], [cache]]):
            with pytest.raises(TypeError, match=r"`generation_config` must be a GenerationConfig, got \w+ \(the "
                                                r"second positional argument.*`document_caches=` \(keyword-only\)"):
                model.generate(question, wrong)
        with pytest.raises(TypeError, match=r"`generation_config` must be a GenerationConfig, got dict\.$"):
            model.generate(question, {"max_new_tokens": 2})
        with pytest.raises(TypeError, match=r"`generation_config` must be a GenerationConfig, got str\.$"):
            model.generate(question, generation_config="greedy", document_caches=cache)
    parameters = inspect.signature(model.generate).parameters
    assert list(parameters)[:2] == ["input_ids", "generation_config"]
    assert {parameters[name].kind for name in ("document_caches", "recompute_ratio")} == {
        inspect.Parameter.KEYWORD_ONLY}


# ----------------------------------------------------------------------------------------------------- block mask
def test_block_mask_forward_equals_composed_caches_plus_question():
    model = tiny()
    documents = [ids(11, 1), ids(6, 2), ids(9, 3)]
    question = ids(5, 4)
    sequence = torch.cat([*documents, question], dim=1)
    block_ids = torch.tensor([[0] * 11 + [1] * 6 + [2] * 9 + [-1] * 5])
    with torch.no_grad():
        caches = [model.encode_documents(d) for d in documents]
        composed = model(question, document_caches=caches)
        blocked = model(sequence, block_ids=block_ids)
        causal = model(sequence)
        # documents in block mode are each the document read alone
        torch.testing.assert_close(blocked.logits[:, 11:17], model(documents[1]).logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(composed.logits, blocked.logits[:, -5:], atol=ATOL, rtol=0)
    # the mask matters: plain causal attention over the same sequence differs
    assert (causal.logits[:, -5:] - blocked.logits[:, -5:]).abs().max() > 1e-3
    # and the keys of the full blocked sequence are those of the composed caches
    composed_cache = model.compose_document_caches(caches)
    for layer in range(2):
        torch.testing.assert_close(composed_cache.layers[layer].keys, blocked.past_key_values.layers[layer].keys[:, :, :26],
                                   atol=ATOL, rtol=0)


def test_block_mask_with_left_padding_and_both_attention_implementations():
    model = tiny()
    documents = [ids(8, 1), ids(5, 2)]
    question = ids(4, 3)
    row = torch.cat([*documents, question], dim=1)[0]
    sequence = torch.zeros(2, 20, dtype=torch.long)
    sequence[0, 3:], sequence[1, 3 + 8:] = row, row[8:]  # row 1: document 2 and the question only
    mask = (sequence != 0).long()
    block_ids = torch.full((2, 20), -1)
    block_ids[0, 3:11], block_ids[0, 11:16] = 0, 1
    block_ids[1, 11:16] = 4
    with torch.no_grad():
        caches = [model.encode_documents(d) for d in documents]
        composed = model(question.expand(2, -1), document_caches=[caches, [caches[1]]])
        for implementation in ("sdpa", "eager"):
            model.set_attn_implementation(implementation)
            blocked = model(sequence, attention_mask=mask, block_ids=block_ids)
            torch.testing.assert_close(composed.logits, blocked.logits[:, -4:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", ["block_ids", "plain", "document_caches"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_loss_of_a_padded_batch_scores_what_each_row_scores_alone(path, side):
    """With labels, padding scores nothing: the loss of a padded batch (labels -100 on padding, and with the token
    ids on padding) is the mean over the targets of its rows each alone, left padding included (a left-padded
    row's first token is predicted by no padding position), with `block_ids`, without, and after
    `document_caches`."""
    model = tiny()
    rows = [ids(n, seed) for n, seed in ((9, 1), (4, 2), (13, 3))]
    width = max(r.shape[1] for r in rows)
    sequence, mask = torch.zeros(len(rows), width, dtype=torch.long), torch.zeros(len(rows), width, dtype=torch.long)
    block_ids = torch.full((len(rows), width), -1)
    for i, r in enumerate(rows):
        n = r.shape[1]
        columns = slice(width - n, width) if side == "left" else slice(0, n)
        sequence[i, columns], mask[i, columns] = r[0], 1
        block_ids[i, columns] = torch.tensor([0] * (n // 2) + [-1] * (n - n // 2))
    extra, extra_alone = {}, [{} for _ in rows]
    if path == "block_ids":
        extra = {"block_ids": block_ids}
        extra_alone = [{"block_ids": block_ids[i][mask[i].bool()][None]} for i in range(len(rows))]
    elif path == "document_caches":
        with torch.no_grad():
            documents = [[model.encode_documents(ids(n, 10 + i))] for i, n in enumerate((6, 3, 5))]
        extra = {"document_caches": documents}
        extra_alone = [{"document_caches": d} for d in documents]
    with torch.no_grad():
        alone = [model(r, labels=r, **kw).loss for r, kw in zip(rows, extra_alone, strict=True)]
        targets = torch.tensor([r.shape[1] - 1 for r in rows], dtype=torch.float32)
        expected = (torch.stack(alone) * targets).sum() / targets.sum()
        for labels in (sequence.masked_fill(mask == 0, -100), sequence):  # -100 on padding, or the padding's ids
            got = model(sequence, attention_mask=mask, labels=labels, **extra).loss
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        # without padding the loss is Llama's
        full = sequence[2:]
        torch.testing.assert_close(model(full, attention_mask=mask[2:], labels=full).loss,
                                   plain(model)(full, labels=full).loss, atol=1e-5, rtol=0)


@pytest.mark.parametrize("padded", [False, True])
def test_labels_of_another_shape_than_the_input_are_refused_naming_them(padded):
    """`labels` must be `(batch_size, seq_length)`, that of `input_ids`: a 1-D, 3-D or another batch's labels are a
    ValueError naming `labels`, with or without padding in `attention_mask` (not an error from inside the loss, nor a
    loss over broadcast labels)."""
    model = tiny()
    sequence = ids(8, 1, batch=3)
    mask = torch.ones_like(sequence)
    if padded:
        mask[0, :3] = 0
    with torch.no_grad():
        for labels in (sequence[0], sequence[:2], sequence[..., None], sequence[:, :6]):
            with pytest.raises(ValueError, match="`labels` must have the shape"):
                model(sequence, attention_mask=mask, labels=labels)
        with pytest.raises(ValueError, match="`labels` must have the shape"):
            model(inputs_embeds=model.get_input_embeddings()(sequence), attention_mask=mask, labels=sequence[:2])
        assert torch.isfinite(model(sequence, attention_mask=mask, labels=sequence).loss)


def test_block_attention_mask_values():
    block_ids = torch.tensor([[0, 0, 1, 1, -1, -1]])
    mask = block_attention_mask(block_ids, torch.tensor([[0, 1, 1, 1, 1, 1]]))
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [[1, 0, 0, 0, 0, 0],   # padding attends to itself only
                       [0, 1, 0, 0, 0, 0],
                       [0, 0, 1, 0, 0, 0],
                       [0, 0, 1, 1, 0, 0],
                       [0, 1, 1, 1, 1, 0],   # the question: everything before it but padding
                       [0, 1, 1, 1, 1, 1]]


def test_compiled_block_ids_forward_is_one_graph_that_still_checks_the_ids():
    """`torch.compile(fullgraph=True)` of a `block_ids` forward: one graph (a Python branch on a tensor value, e.g.
    the `block_ids >= -1` check, would split it and fail here), eager's logits, and ids below -1 still refused (as a
    graph op: a `RuntimeError` with the eager `ValueError`'s message)."""
    model = tiny()
    sequence = ids(12, 1)
    block_ids = torch.tensor([[0] * 5 + [1] * 4 + [-1] * 3])
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        eager, got = (m(sequence, block_ids=block_ids).logits for m in (model, compiled))
        torch.testing.assert_close(got, eager, atol=1e-6, rtol=0)
        with pytest.raises(RuntimeError, match="must be >= -1"):
            compiled(sequence, block_ids=block_ids - 2)


# ----------------------------------------------------------------------------------------------------- fingerprints
def test_caches_of_another_model_are_refused():
    model, other = tiny(seed=0), tiny(seed=1)
    document, question = ids(10, 1), ids(4, 2)
    with torch.no_grad():
        foreign = other.encode_documents(document)
        own = model.encode_documents(document)
    assert foreign.model_fingerprint != own.model_fingerprint
    for call in (lambda: model.generate(question, document_caches=foreign, max_new_tokens=2),
                 lambda: model(question, document_caches=[own, foreign]),
                 lambda: model.compose_document_caches(foreign),
                 lambda: compose_document_caches(foreign, model.config, model_fingerprint=own.model_fingerprint)):
        with pytest.raises(ValueError, match="fingerprint"):
            call()
    unsigned = DocumentCacheOutput(key_states=own.key_states, value_states=own.value_states,
                                   attention_mask=own.attention_mask, position_ids=own.position_ids)
    with pytest.raises(ValueError, match="no model_fingerprint"):
        model(question, document_caches=unsigned)
    # changing a weight in place (a training step) changes the fingerprint: old caches are refused
    with torch.no_grad():
        model.model.layers[1].self_attn.k_proj.weight.add_(1e-3)
    assert model.representation_fingerprint() != own.model_fingerprint
    with pytest.raises(ValueError, match="fingerprint"):
        model(question, document_caches=own)
    # another value of a config field that changes the states is another fingerprint; metadata is not
    before = tiny().representation_fingerprint()
    assert tiny(rms_norm_eps=1e-5).representation_fingerprint() != before
    assert tiny(eos_token_id=5).representation_fingerprint() == before


def test_fingerprint_without_adapters_is_the_one_stored_caches_carry():
    """A model without peft layers hashes exactly what it hashed before the adapters' state entered the fingerprint
    (caches stored before stay readable): the tag, the config's fingerprint, then each decoder parameter's name and
    float32 values (not the final norm); a LoRA adapter unloaded again leaves no trace."""
    import hashlib

    from peft import LoraConfig, get_peft_model

    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import _config_fingerprint

    model = tiny()
    digest = hashlib.sha256(b"llama_kv_cache|" + _config_fingerprint(model.config, BlockAttentionLlamaConfig).encode())
    for name, p in model.model.named_parameters():
        if not name.startswith("norm."):
            digest.update(name.encode())
            digest.update(p.detach().to(torch.float32).contiguous().numpy().data)
    assert model.representation_fingerprint() == digest.hexdigest()
    assert document_cache_fingerprint(plain(model)) == digest.hexdigest()
    wrapped = get_peft_model(tiny(), LoraConfig(target_modules=["q_proj", "v_proj"], r=4))  # B = 0: the same outputs
    assert wrapped.representation_fingerprint() != digest.hexdigest()  # the adapters' state is hashed
    assert wrapped.unload().representation_fingerprint() == digest.hexdigest()


# ----------------------------------------------------------------------------------------------------- errors
def test_bad_inputs_are_clear_errors():
    model = tiny()
    with torch.no_grad():
        cache = model.encode_documents(ids(6, 1))
    question = ids(4, 2)
    with pytest.raises(TypeError, match="input_ids"):
        model.encode_documents(torch.zeros(1, 5))
    with pytest.raises(ValueError, match="input_ids"):
        model.encode_documents(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="vocabulary"):
        model.encode_documents(torch.full((1, 3), 500))
    with pytest.raises(ValueError, match="no real token"):
        model.encode_documents(ids(3, 1), attention_mask=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        model.encode_documents(ids(3, 1), attention_mask=torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="block_ids"):
        model(question, block_ids=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="block_ids"):
        model(question, block_ids=torch.zeros(1, 4))
    with pytest.raises(ValueError, match="block_ids"):
        model(question, block_ids=torch.full((1, 4), -2))
    with pytest.raises(ValueError, match="not both"):
        model(question, block_ids=torch.zeros(1, 4, dtype=torch.long), document_caches=cache)
    with pytest.raises(ValueError, match="past_key_values"):
        model.generate(question, document_caches=cache, past_key_values=model.compose_document_caches(cache))
    with pytest.raises(ValueError, match=r"`cache_implementation` \('static'\) cannot be used with `document_caches`"):
        model.generate(question, document_caches=cache, cache_implementation="static", max_new_tokens=2)
    # "paged" switches `generate` to continuous batching, which reads no `document_caches`, with or without the cache
    # (it returned the questions without a new token, its error only logged)
    for use_cache in (True, False):
        with pytest.raises(ValueError, match=r"`cache_implementation` \('paged'\) cannot be used with `document_caches`"):
            model.generate(question, document_caches=cache, cache_implementation="paged", use_cache=use_cache,
                           max_new_tokens=2)
    for name in ("past_key_values", "cache"):  # document caches where a Cache goes: an AttributeError deep in Llama
        for call in (model, model.model, lambda *args, **kwargs: model.generate(*args, max_new_tokens=2, **kwargs)):
            with pytest.raises(TypeError, match=rf"`{name}` got a DocumentCacheOutput .* `document_caches=`"):
                call(question, **{name: cache})
    with pytest.raises(TypeError, match="document_caches"):
        model(question, document_caches="not a cache")
    with pytest.raises(TypeError, match=r"document_caches\[1\]"):
        model(question, document_caches=[cache, torch.zeros(3)])
    with pytest.raises(ValueError, match="offset"):
        model.compose_document_caches(cache, offset=-1)
    limit = model.config.max_position_embeddings
    with pytest.raises(ValueError, match=rf"`offset` {limit} and the .* past the model's max_position_embeddings"):
        model.compose_document_caches(cache, offset=limit)  # positions never trained: refused, not composed
    with pytest.raises(ValueError, match="attention_mask"):
        model.generate(question, document_caches=cache, attention_mask=torch.ones(1, 9, dtype=torch.long))
    smaller = tiny(num_key_value_heads=1)
    with pytest.raises(ValueError, match="heads_kv"):
        compose_document_caches(cache, smaller.config)
    from transformers import GPT2Config  # a config without rotary positions, and the model given for its config

    with pytest.raises(ValueError, match=r"`config` \(GPT2Config\) is not the config of a rotary Llama-family "
                                         r"model: it has no rope_parameters \(rope_type, rope_theta\)"):
        compose_document_caches(cache, GPT2Config(n_embd=32, n_layer=2, n_head=4))
    with pytest.raises(TypeError, match=r"`config` must be the model's config .*got BlockAttentionLlamaForCausalLM: "
                                        r"pass `model.config`"):
        compose_document_caches(cache, model)


def test_question_ids_outside_the_vocabulary_and_an_empty_question_are_refused_by_name():
    """As `encode_documents` does for the documents: a question id outside `[0, vocab_size)` is named with the
    vocabulary size (not torch's bare `IndexError` from the embedding lookup), in `forward` (with or without document
    caches), the bare model and `generate`; an empty question after document caches is named too (not a reshape
    error deep in Llama's attention)."""
    model = tiny()
    with torch.no_grad():
        cache = model.encode_documents(ids(6, 1))
    question = ids(4, 2)
    question[0, 2] = model.config.vocab_size + 9
    vocabulary = rf"`input_ids` holds token id {model.config.vocab_size + 9}, outside the vocabulary \[0, 101\)"
    for call in (lambda: model(question), lambda: model.model(question), lambda: model(question, document_caches=cache),
                 lambda: model.generate(question, max_new_tokens=2),
                 lambda: model.generate(question, document_caches=cache, max_new_tokens=2)):
        with pytest.raises(ValueError, match=vocabulary):
            call()
    with pytest.raises(ValueError, match=r"`input_ids` holds token id -1"):
        model(torch.tensor([[5, -1, 7]]))
    empty = torch.zeros(1, 0, dtype=torch.long)
    with pytest.raises(ValueError, match=r"`input_ids` \(the question\) is empty \(shape \(1, 0\)\)"):
        model.generate(empty, document_caches=cache, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"`input_ids` \(the question\) is empty"):
        model(empty, document_caches=cache)
    question[0, 2] = model.config.vocab_size - 1  # the last id is in the vocabulary
    model.generate(question, document_caches=cache, max_new_tokens=2)


def test_configs_that_are_not_one_rotary_llama_setting_are_refused_by_name():
    """`compose_document_caches(caches, config)` with a config that passed the rotary check and failed later: Gemma
    3's rotary parameters per layer type (a bare KeyError 'rope_type'), a config without `num_key_value_heads`
    (GPT-NeoX's: an AttributeError, or another model's RoPE setting named); `selective_recompute` of a Gemma 3
    model is refused for its per-layer-type parameters too, whatever the caches carry."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, GPTNeoXConfig

    model = tiny()
    with torch.no_grad():
        cache = model.encode_documents(ids(6, 1))
    gemma = Gemma3TextConfig(vocab_size=TINY["vocab_size"], hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    with pytest.raises(ValueError, match=r"`config` \(Gemma3TextConfig\) has rotary parameters per layer type "
                                         r"\(rope_parameters of sliding_attention, full_attention\)"):
        compose_document_caches(cache, gemma)
    without = DocumentCacheOutput(key_states=cache.key_states, value_states=cache.value_states,  # built by hand:
                                  attention_mask=cache.attention_mask, position_ids=cache.position_ids,
                                  input_ids=cache.input_ids)  # no RoPE setting or fingerprint to compare
    with pytest.raises(ValueError, match=r"`config` \(GPTNeoXConfig\) is not the config of a rotary Llama-family "
                                         r"model: it has no num_key_value_heads"):
        compose_document_caches(without, GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                       rotary_pct=1.0))
    with pytest.raises(ValueError, match=r"RoPE parameters per layer type \(sliding_attention, full_attention\)"):
        selective_recompute(Gemma3ForCausalLM(gemma).eval(), without, 0.5)


def test_configs_whose_keys_are_not_rotary_over_every_head_dimension_and_layer_are_refused_by_name():
    """Keys were re-rotated over the whole head in every layer whatever the config said: a `partial_rotary_factor`
    below 1 (StableLM, Phi, GLM rotate only part of each head) or layers without RoPE (SmolLM3's `no_rope_layers`)
    gave a composed cache that is not the model's own (both passed the rotary check); each is refused naming the
    field, on every path that re-positions keys."""
    from transformers import SmolLM3Config, SmolLM3ForCausalLM, StableLmConfig, StableLmForCausalLM

    model = tiny()
    with torch.no_grad():
        cache = model.encode_documents(ids(6, 1))
    shape = {key: TINY[key] for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                        "num_attention_heads", "num_key_value_heads", "pad_token_id", "bos_token_id",
                                        "eos_token_id")}
    stablelm = StableLmConfig(**shape)  # partial_rotary_factor 0.25
    # caches as a store adapter over a StableLM model reads them: its RoPE setting, no fingerprint to check
    as_stablelm = DocumentCacheOutput(key_states=cache.key_states, value_states=cache.value_states,
                                      attention_mask=cache.attention_mask, position_ids=cache.position_ids,
                                      rope_setting=rope_setting(stablelm))
    with pytest.raises(ValueError, match=r"partial_rotary_factor 0.25 \(rope_parameters of StableLmConfig\)"):
        compose_document_caches(as_stablelm, stablelm)
    with pytest.raises(ValueError, match="partial_rotary_factor 0.25"):
        selective_recompute(StableLmForCausalLM(stablelm).eval(), cache, 0.5)
    smollm3 = SmolLM3Config(**shape, no_rope_layers=[1, 0])
    as_smollm3 = DocumentCacheOutput(**{**as_stablelm, "rope_setting": rope_setting(smollm3)})
    with pytest.raises(ValueError, match=r"no_rope_layers \[1, 0\] \(SmolLM3Config\): layers \[1\] use no RoPE"):
        compose_document_caches(as_smollm3, smollm3)
    with pytest.raises(ValueError, match="no_rope_layers"):
        selective_recompute(SmolLM3ForCausalLM(smollm3).eval(), cache, 0.5)
    # a Llama config whose rotary frequencies honour the factor (linear scaling does) rotates part of each head:
    # refused naming the field, the Llama model itself cannot run with it
    linear = LlamaConfig(**TINY, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match=r"partial_rotary_factor 0.5 \(rope_parameters of LlamaConfig\)"):
        compose_document_caches(without_setting(cache), linear)
    # every dimension and layer rotary, said explicitly, is accepted as before (a cache without a RoPE setting to
    # compare: the settings' JSON differs from TINY's by the explicit fields)
    for config in (LlamaConfig(**TINY, partial_rotary_factor=1.0), SmolLM3Config(**shape, no_rope_layers=[1, 1])):
        assert compose_document_caches(without_setting(cache), config).get_seq_length() == 6


def without_setting(cache):
    """`cache` without its RoPE setting and fingerprint (what a cache made before they were recorded carries)."""
    return DocumentCacheOutput(key_states=cache.key_states, value_states=cache.value_states,
                               attention_mask=cache.attention_mask, position_ids=cache.position_ids)


@pytest.mark.parametrize("outside", [False, True])
def test_a_llama_config_whose_rotary_embedding_ignores_partial_rotary_factor_composes_as_the_full_prompt(outside):
    """Llama's default rotary embedding reads no `partial_rotary_factor`: a Llama (or block-attention Llama) config
    carrying one below 1 still rotates every dimension of each head, so its caches compose exactly, on every path.
    They were refused as if the model were StableLM's."""
    if outside:  # the field beside `rope_parameters`, where transformers < 5 kept it
        model = tiny()
        model.config.partial_rotary_factor = 0.5
    else:
        model = tiny(partial_rotary_factor=0.5)
        assert model.config.rope_parameters["partial_rotary_factor"] == 0.5
    llama = plain(model)
    assert 2 * llama.model.rotary_emb.inv_freq.numel() == model.config.head_dim  # the whole head is rotary
    documents, offset = [ids(7, 1), ids(5, 2)], 9
    starts = [offset, offset + 7]
    with torch.no_grad():
        caches = [model.encode_documents(document) for document in documents]
        direct = [llama.model(document, position_ids=torch.arange(start, start + document.shape[1])[None],
                              use_cache=True).past_key_values for document, start in zip(documents, starts)]
    # (the plain config holds the factor in `rope_parameters`, a RoPE setting of another JSON: caches without one)
    for composed in (compose_document_caches([without_setting(cache) for cache in caches], llama.config,
                                             offset=offset),
                     model.compose_document_caches(caches, offset=offset)):
        for layer in range(model.config.num_hidden_layers):
            expected = torch.cat([cache.layers[layer].keys for cache in direct], dim=2)
            torch.testing.assert_close(composed.layers[layer].keys, expected, atol=ATOL, rtol=0)
    with torch.no_grad():
        model.compose_batch(caches, 1)
        selective_recompute(model, caches, 0.5)
        model.generate(ids(4, 3), document_caches=caches, max_new_tokens=2)


@pytest.mark.parametrize("offset", [0, 9])
def test_a_head_dim_other_than_hidden_size_over_heads_composes_as_the_full_prompt(offset):
    """`head_dim` set apart from `hidden_size // num_attention_heads` (as Qwen3's and Gemma's configs do): the
    rotation reads the config's head size, so each composed document is the plain model's cache of that document
    read at its place (the cache a block-masked prompt makes)."""
    model = tiny(head_dim=16)
    llama = plain(model)
    documents, starts = [ids(7, 1), ids(5, 2)], [offset, offset + 7]
    with torch.no_grad():
        caches = [model.encode_documents(document) for document in documents]
        direct = [llama.model(document, position_ids=torch.arange(start, start + document.shape[1])[None],
                              use_cache=True).past_key_values for document, start in zip(documents, starts)]
    composed = compose_document_caches(caches, llama.config, offset=offset)
    assert composed.layers[0].keys.shape == (1, TINY["num_key_value_heads"], 12, 16)
    for layer in range(model.config.num_hidden_layers):
        expected = torch.cat([cache.layers[layer].keys for cache in direct], dim=2)
        torch.testing.assert_close(composed.layers[layer].keys, expected, atol=ATOL, rtol=0)


# Each public entry point with each tensor argument given as a numpy array or a list: a TypeError naming that
# argument (torch failed deep inside, or under another name: `embedding()`'s `indices`, a missing `.to`, `.shape`).
TENSOR_ARGUMENTS = [
    ("encode_documents", "input_ids"), ("encode_documents", "attention_mask"),
    ("forward", "input_ids"), ("forward", "attention_mask"), ("forward", "position_ids"), ("forward", "labels"),
    ("forward", "inputs_embeds"), ("forward", "block_ids"), ("forward_block_ids", "attention_mask"),
    ("forward_documents", "input_ids"), ("forward_documents", "attention_mask"),
    ("forward_documents", "position_ids"), ("generate", "input_ids"), ("generate", "attention_mask"),
    ("generate_documents", "input_ids"), ("generate_documents", "attention_mask"),
    ("block_attention_mask", "attention_mask"), ("block_attention_mask", "block_ids"),
]


@pytest.mark.parametrize("convert", ["numpy", "list"])
@pytest.mark.parametrize("entry, argument", TENSOR_ARGUMENTS)
def test_arrays_and_lists_are_refused_naming_the_argument(entry, argument, convert):
    model = tiny()
    with torch.no_grad():
        cache = model.encode_documents(ids(6, 1))
    question = ids(4, 2)
    tensors = {"input_ids": question, "attention_mask": torch.ones(1, 4, dtype=torch.long),
               "position_ids": torch.arange(4)[None], "labels": question, "inputs_embeds": torch.zeros(1, 4, 32),
               "block_ids": torch.zeros(1, 4, dtype=torch.long)}
    call = {"input_ids": question}
    if entry.startswith("forward_block_ids") or entry == "block_attention_mask":
        call["block_ids"] = tensors["block_ids"]
    if entry.endswith("_documents") and entry != "encode_documents":
        call["document_caches"] = cache
    if argument == "inputs_embeds":
        del call["input_ids"]
    call[argument] = tensors[argument].numpy() if convert == "numpy" else tensors[argument].tolist()
    function = {"encode_documents": model.encode_documents, "generate": model.generate,
                "generate_documents": model.generate, "block_attention_mask": block_attention_mask}.get(entry, model)
    if entry.startswith("generate"):
        call["max_new_tokens"] = 1
    if entry == "block_attention_mask":
        call.pop("input_ids")
    with torch.no_grad(), pytest.raises(TypeError, match=rf"^`{argument}` must be a torch.Tensor, got "
                                                         rf"{'ndarray' if convert == 'numpy' else 'list'}"):
        function(**call)


# ----------------------------------------------------------------------------------------------------- hub, training
def test_save_load_and_remote_code_round_trip(tmp_path):
    model = tiny()
    model.save_pretrained(tmp_path / "ckpt")
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("*.py"))
    assert saved == ["configuration_block_attention_llama.py", "modeling_block_attention_llama.py"]
    document, question = ids(12, 1), ids(5, 2)
    with torch.no_grad():
        cache = model.encode_documents(document)
        expected = model.generate(question, document_caches=cache, **greedy())
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
    assert type(reloaded) is BlockAttentionLlamaForCausalLM
    assert reloaded.representation_fingerprint() == model.representation_fingerprint()
    with torch.no_grad():  # the reloaded model accepts the caches of the saved one
        again = reloaded.generate(question, document_caches=cache, **greedy())
    assert again.sequences.tolist() == expected.sequences.tolist()
    torch.save({"document": document, "question": question, "tokens": expected.sequences}, tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'ckpt')!r}, trust_remote_code=True).eval()
        assert "hf_readonce" not in type(model).__module__, type(model).__module__
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        with torch.no_grad():
            cache = model.encode_documents(d["document"])
            out = model.generate(d["question"], document_caches=cache, max_new_tokens=6, min_new_tokens=6,
                                 do_sample=False, pad_token_id=0)
        assert out.tolist() == d["tokens"].tolist(), (out, d["tokens"])
        print("OK", type(model).__name__, tuple(out.shape))
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK BlockAttentionLlamaForCausalLM (1, 11)" in result.stdout


def test_auto_model_loads_the_bare_model_of_a_saved_causal_lm_without_hf_readonce(tmp_path):
    """`AutoModel` on a saved causal LM gives `BlockAttentionLlamaModel` with the LM's `model.*` weights, as `AutoModel`
    gives a `LlamaModel` for a `LlamaForCausalLM` checkpoint, also from the folder's own code where hf-readonce is
    absent (`save_pretrained` writes `AutoModel` into `auto_map`); its hidden states are those under the causal LM's
    head, with Llama's causal mask and with the Block-Attention training mask (`block_ids`, left padding)."""
    from transformers import AutoModel

    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import BlockAttentionLlamaModel

    model = tiny()
    model.save_pretrained(tmp_path / "ckpt")
    auto_map = json.loads((tmp_path / "ckpt" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == "modeling_block_attention_llama.BlockAttentionLlamaModel"
    tokens = ids(12, 3, batch=2)
    mask = torch.ones_like(tokens)
    mask[1, :3] = 0
    block_ids = torch.tensor([[0] * 4 + [1] * 4 + [-1] * 4, [-1] * 3 + [0] * 5 + [-1] * 4])
    with torch.no_grad():
        causal = model.model(tokens, attention_mask=mask).last_hidden_state
        blocked_logits = model(tokens, attention_mask=mask, block_ids=block_ids).logits
    bare, info = AutoModel.from_pretrained(tmp_path / "ckpt", output_loading_info=True)
    assert type(bare) is BlockAttentionLlamaModel and not any(info.values()), info  # the LM head is left quietly
    with torch.no_grad():
        assert torch.equal(bare.eval()(tokens, attention_mask=mask).last_hidden_state, causal)
        blocked = bare(tokens, attention_mask=mask, block_ids=block_ids).last_hidden_state
    assert torch.equal(model.lm_head(blocked), blocked_logits)
    assert not torch.allclose(blocked, causal)  # the block mask counts
    torch.save({"tokens": tokens, "mask": mask, "block_ids": block_ids}, tmp_path / "inputs.pt")
    result = run_without_hf_readonce(f"""
        import json, torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(tmp_path / 'ckpt')!r}, trust_remote_code=True).eval()
        d = torch.load({str(tmp_path / 'inputs.pt')!r})
        with torch.no_grad():
            causal = model(d["tokens"], attention_mask=d["mask"]).last_hidden_state
            blocked = model(d["tokens"], attention_mask=d["mask"], block_ids=d["block_ids"]).last_hidden_state
        print("BARE", type(model).__module__.split(".")[0], type(model).__name__,
              json.dumps([causal.flatten().tolist(), blocked.flatten().tolist()]))
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    _, package, name, values = next(line for line in result.stdout.splitlines() if line.startswith("BARE ")).split(
        " ", 3)
    assert (package, name) == ("transformers_modules", "BlockAttentionLlamaModel")
    got_causal, got_blocked = json.loads(values)
    assert torch.equal(torch.tensor(got_causal), causal.flatten())
    assert torch.equal(torch.tensor(got_blocked), blocked.flatten())


@pytest.mark.parametrize("tie", [False, True])
def test_the_causal_lms_model_is_the_bare_model_and_takes_block_ids(tie):
    """`BlockAttentionLlamaForCausalLM.model` is `BlockAttentionLlamaModel`, so `model.model(block_ids=...)` applies the
    block mask (the states under the LM's head with `block_ids`) instead of a `LlamaModel` swallowing `block_ids`
    into its `**kwargs` and returning the causal states, and refuses a misspelled keyword; the causal LM is still
    initialized as `LlamaForCausalLM` (same weights for a seed, nothing drawn twice)."""
    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import BlockAttentionLlamaModel

    model = tiny(tie_word_embeddings=tie)
    after = torch.rand(4)
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=tie))
    assert torch.equal(torch.rand(4), after)  # the same random draws, no more
    assert model.state_dict().keys() == llama.state_dict().keys()
    assert all(torch.equal(value, llama.state_dict()[key]) for key, value in model.state_dict().items())
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie
    assert type(model.model) is BlockAttentionLlamaModel
    tokens = ids(12, 3, batch=2)
    mask = torch.ones_like(tokens)
    mask[1, :3] = 0
    block_ids = torch.tensor([[0] * 4 + [1] * 4 + [-1] * 4, [-1] * 3 + [0] * 5 + [-1] * 4])
    with torch.no_grad():
        blocked = model.model(tokens, attention_mask=mask, block_ids=block_ids).last_hidden_state
        causal = model.model(tokens, attention_mask=mask).last_hidden_state
        assert torch.equal(model.lm_head(blocked), model(tokens, attention_mask=mask, block_ids=block_ids).logits)
        assert not torch.allclose(blocked, causal)
        with pytest.raises(TypeError, match="'block_id'. Did you mean 'block_ids'"):
            model.model(tokens, attention_mask=mask, block_id=block_ids)


def test_lora_training_step_with_block_mask():
    from peft import LoraConfig, get_peft_model

    model = tiny().train()
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    sequence = ids(20, 1)
    block_ids = torch.tensor([[0] * 8 + [1] * 7 + [-1] * 5])
    labels = sequence.masked_fill(block_ids != -1, -100)  # the loss on the question/answer only
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    loss = lora(input_ids=sequence, block_ids=block_ids, labels=labels).loss
    loss.backward()
    grads = [p.grad for n, p in lora.named_parameters() if "lora_" in n]
    assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    before = model.representation_fingerprint()
    optimizer.step()
    assert model.representation_fingerprint() != before  # LoRA weights are part of the cache fingerprint


def test_lora_causal_lm_round_trip_generate_and_document_caches(tmp_path):
    """`task_type="CAUSAL_LM"` (peft's `PeftModelForCausalLM`) hands `block_ids` and `document_caches` on: one
    `Trainer` step on a `block_ids` column, save, reload, merge and load with `trust_remote_code=True` keep the trained
    logits; caches encoded through the wrapper answer and generate as the merged model's do, and those of the same
    weights with the adapter disabled (or another adapter active) are refused (the fingerprint holds the adapters'
    state, not only their weights)."""
    from peft import LoraConfig

    from tests.models.peft_checks import lora_round_trip

    document, question = ids(12, 1), ids(5, 2)
    sequence = torch.cat([document, question], dim=1).expand(2, -1)
    block_ids = torch.tensor([[0] * 6 + [1] * 6 + [-1] * 5] * 2)
    labels = sequence.masked_fill(block_ids != -1, -100)
    inputs = dict(input_ids=sequence, block_ids=block_ids, labels=labels)
    rows = [{key: value[i] for key, value in inputs.items()} for i in range(2)]
    config = LoraConfig(task_type="CAUSAL_LM", target_modules=["q_proj", "k_proj", "v_proj"], r=4)
    peft_model, merged = lora_round_trip(tiny, config, inputs, rows, AutoModelForCausalLM, tmp_path)
    generate = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        caches = peft_model.encode_documents(document)
        torch.testing.assert_close(peft_model(question, document_caches=caches).logits,
                                   merged(question, document_caches=merged.encode_documents(document)).logits,
                                   atol=1e-5, rtol=1e-4)
        expected = merged.generate(question, document_caches=merged.encode_documents(document), **generate)
        assert torch.equal(peft_model.generate(question, document_caches=caches, **generate), expected)
        assert torch.equal(peft_model.generate(input_ids=question, document_caches=caches, **generate), expected)
        with peft_model.disable_adapter():
            without = peft_model.encode_documents(document)
        assert not torch.allclose(without.key_states, caches.key_states)
        with pytest.raises(ValueError, match="was made by model"):
            peft_model(question, document_caches=without)
        peft_model.add_adapter("other", LoraConfig(task_type="CAUSAL_LM", target_modules=["q_proj", "v_proj"], r=4))
        peft_model.set_adapter("other")
        with pytest.raises(ValueError, match="was made by model"):
            peft_model(question, document_caches=caches)


def test_trainer_step_with_block_ids(tmp_path):
    """`Trainer` keeps the `block_ids` column (a `forward` argument) and trains on it."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    model = tiny().train()
    block_ids = [0] * 8 + [1] * 7 + [-1] * 5
    rows = []
    for seed in range(4):
        sequence = ids(20, seed)[0].tolist()
        rows.append({"input_ids": sequence, "block_ids": block_ids,
                     "labels": [t if b == -1 else -100 for t, b in zip(sequence, block_ids)]})
    before = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    seen = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs.get("block_ids")), with_kwargs=True)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, use_cpu=True,
                             report_to="none", save_strategy="no", learning_rate=1e-2)
    result = Trainer(model=model, args=args, train_dataset=Dataset.from_list(rows)).train()
    assert result.training_loss > 0
    assert seen and seen[0] is not None and seen[0].tolist() == [block_ids] * 4
    assert not torch.equal(before, model.model.layers[0].self_attn.q_proj.weight)


def test_trainer_step_over_right_padded_batches_is_the_step_of_the_mean_over_their_targets(tmp_path):
    """Right padding labelled -100 (`DocumentQACollator`'s batches): the model sums the targets it scores and divides
    by `Trainer`'s `num_items_in_batch`, so one SGD step over two accumulated batches of 2 rows is the step of the
    loss's mean over the 4 rows' targets (read in one forward), scaled by targets / `num_items_in_batch`: 1 where
    Trainer counts `labels[:, 1:] != -100` (transformers 5.24), 20 / 24 where it counts `labels != -100` (5.6: one
    more per row, as for `LlamaForCausalLM`)."""
    from transformers import Trainer, TrainingArguments

    from hf_readonce.tasks.document_cache_qa import DocumentQACollator

    rows = [{"input_ids": ids(n, seed)[0].tolist()} for seed, n in enumerate((5, 9, 7, 3))]
    rows = [{**r, "labels": r["input_ids"]} for r in rows]
    batch = DocumentQACollator(pad_token_id=0)(rows)
    assert bool((batch["labels"][batch["attention_mask"] == 0] == -100).all())
    reference = tiny().train()
    reference(**batch).loss.backward()
    expected = [p.detach() - p.grad for p in reference.parameters()]
    targets = int((batch["labels"][:, 1:] != -100).sum())
    model = tiny().train()
    counts = []  # the num_items_in_batch Trainer passes with each micro-batch
    forward = model.forward

    @functools.wraps(forward)  # Trainer reads the signature: the columns it keeps, that it takes loss kwargs
    def counting_forward(*args, **kwargs):
        counts.append(int(kwargs["num_items_in_batch"]))
        return forward(*args, **kwargs)

    model.forward = counting_forward
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2,
                             gradient_accumulation_steps=2, optim="sgd", learning_rate=1.0, max_grad_norm=0.0,
                             weight_decay=0.0, lr_scheduler_type="constant", use_cpu=True, report_to="none",
                             save_strategy="no", dataloader_drop_last=False)
    Trainer(model=model, args=args, train_dataset=rows, data_collator=DocumentQACollator(pad_token_id=0)).train()
    assert len(counts) == 2 and counts[0] == counts[1] and counts[0] in (targets, targets + len(rows)), counts
    scale = targets / counts[0]
    for trained, wanted, start in zip(model.parameters(), expected, reference.parameters(), strict=True):
        torch.testing.assert_close(trained.detach(), start.detach() - (start.detach() - wanted) * scale, atol=1e-6,
                                   rtol=0)


def test_compose_batch_refuses_bad_counts_by_name():
    model = tiny()
    with torch.no_grad():
        caches = model.encode_documents(ids(9, 1))
        assert model.compose_batch(caches, 2, repeat=2).attention_mask.shape[0] == 4
        for kwargs, error, words in [({"batch_size": 0}, ValueError, "`batch_size` must be >= 1"),
                                     ({"batch_size": -1}, ValueError, "`batch_size` must be >= 1"),
                                     ({"batch_size": 1, "repeat": 0}, ValueError, "`repeat` must be >= 1"),
                                     ({"batch_size": 2.0}, TypeError, "`batch_size` must be an int")]:
            with pytest.raises(error, match=words):
                model.compose_batch(caches, **kwargs)


def test_a_misspelled_keyword_argument_is_a_type_error_naming_it():
    """Llama's `forward` takes `**kwargs`: `document_cache=` (for `document_caches=`) answered without the documents."""
    model = tiny()
    document, question = ids(24, 1), ids(7, 2)
    with torch.no_grad():
        cache = model.encode_documents(document)
        for call, message in [
                (lambda: model(question, document_cache=cache),
                 "BlockAttentionLlamaForCausalLM.forward() got an unexpected keyword argument 'document_cache'. "
                 "Did you mean 'document_caches'?"),
                (lambda: model(question, recompute_ration=0.5, document_caches=cache),
                 "BlockAttentionLlamaForCausalLM.forward() got an unexpected keyword argument 'recompute_ration'. "
                 "Did you mean 'recompute_ratio'?")]:
            with pytest.raises(TypeError) as error:
                call()
            assert str(error.value) == message
        # what transformers passes (`TransformersKwargs`, `return_dict`, Llama's own arguments) and a `None`
        expected = model(question, document_caches=cache).logits
        out = model(question, document_caches=cache, return_dict=True, output_attentions=False, use_cache=True,
                    num_items_in_batch=torch.tensor(6), logits_to_keep=0, document_cache=None)
        torch.testing.assert_close(out.logits, expected)
        with pytest.raises(ValueError, match="document_cache"):  # generate(): transformers' own check names it
            model.generate(question, document_cache=cache, **greedy())


def test_trainer_label_smoothing_scores_the_next_token(tmp_path):
    """`label_smoothing_factor`: `Trainer` shifts the labels only for the causal-LM class names transformers knows;
    `BlockAttentionLlamaForCausalLM` was not among them, so each position's logits were scored against its own
    token."""
    from tests.models.loss_checks import assert_label_smoothing_scores_the_next_token

    block_ids = torch.tensor([0] * 8 + [1] * 7 + [-1] * 5)
    rows = []
    for seed in range(4):
        sequence = ids(20, seed)[0]
        rows.append({"input_ids": sequence, "block_ids": block_ids,
                     "labels": torch.where(block_ids == -1, sequence, torch.full_like(sequence, -100))})
    assert_label_smoothing_scores_the_next_token(tiny(), rows, tmp_path)


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flash_attention_3", "kernels-community/flash-attn"])
@pytest.mark.parametrize("bare", [False, True])
def test_block_ids_are_refused_under_flash_attention(implementation, bare):
    """Flash attention reads a padding mask only, so the 4-D block mask of `block_ids` would not reach it (transformers
    hands a 4-D mask on as it is, and flash takes it for padding): the causal LM and the bare model refuse `block_ids`
    under any flash implementation, naming the implementation and the one to load, before any attention runs (no
    flash package is needed to see it); with SDPA the same call runs."""
    model = tiny()
    target = model.model if bare else model
    ids = torch.randint(0, TINY["vocab_size"], (1, 8))
    blocks = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2]])
    with torch.no_grad():
        target(input_ids=ids, block_ids=blocks)  # SDPA: runs
        target.config._attn_implementation = implementation
        with pytest.raises(ValueError, match=rf"`block_ids` needs the 4-D block mask, which flash attention cannot "
                                             rf"read .*attn_implementation='{implementation}'.*\"sdpa\""):
            target(input_ids=ids, block_ids=blocks)


def test_block_ids_are_refused_under_an_attention_registered_with_the_flash_mask():
    """An attention registered with flash attention's mask (as transformers registers a Hub flash kernel, whatever its
    name) reads a padding mask only: `block_ids` are refused under it, as under `flash_attention_2`, instead of its
    taking the 4-D block mask for padding."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = "my-org/varlen-kernel"

    def padding_only(module, query, key, value, attention_mask, **kwargs):  # a kernel that reads no 4-D mask
        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, None, **kwargs)

    AttentionInterface.register(name, padding_only)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, flash_attention_mask)
    try:
        model = tiny()
        ids = torch.randint(0, TINY["vocab_size"], (1, 8))
        blocks = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2]])
        model.config._attn_implementation = name
        with torch.no_grad(), pytest.raises(ValueError, match=rf"flash attention cannot read .*'{name}'"):
            model(input_ids=ids, block_ids=blocks)
    finally:
        del AttentionInterface._global_mapping[name], ALL_MASK_ATTENTION_FUNCTIONS._global_mapping[name]
