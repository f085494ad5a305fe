"""Block-attention Llama under transformers' continuous batching (`generate(cache_implementation="paged")`,
`generate_batch`), on CPU: without document caches and `block_ids` the model is Llama, so the packed batch's keywords
reach Llama's paged cache and attention as they do in `LlamaForCausalLM` (the same greedy tokens from the same
weights; they were refused, and transformers only logged the error and returned no token). With `block_ids` or
`document_caches`, whose masks read one sequence per row, a paged cache is refused by name."""

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation import ContinuousBatchingConfig

from tests.models.block_attention_llama.test_modeling_block_attention_llama import ids, plain, tiny

# several prompts of different lengths: (length, seed)
PROMPTS = [(5, 1), (9, 2), (3, 3), (12, 4)]
NEW_TOKENS = 5


def settings():
    """Greedy, a fixed number of new tokens (no eos: continuous batching's own default disables it)."""
    return GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, eos_token_id=None)


def small():
    """A small paged cache (its default, sized from the free memory, takes seconds per call to set up on CPU), that
    still packs every prompt of `PROMPTS` into the first step."""
    return ContinuousBatchingConfig(num_blocks=4, max_batch_tokens=64)


def models():
    """A tiny random block-attention Llama and `LlamaForCausalLM` with its weights, each built for one test
    (transformers 5.6 leaves a model on its `paged|` attention after continuous batching)."""
    model = tiny()
    return model, plain(model)


def test_generate_paged_without_document_caches_is_llama_s():
    """`generate(cache_implementation="paged")` switches to continuous batching: one prompt per call, each length."""
    model, llama = models()
    greedy = dict(cache_implementation="paged", max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                  continuous_batching_config=small())
    prompts = [ids(length, seed) for length, seed in PROMPTS] + [ids(7, 6, batch=2)]  # and two rows at once
    for prompt in prompts:
        expected = llama.generate(prompt, **greedy)
        got = model.generate(prompt, **greedy)
        assert expected.shape[-1] > prompt.shape[1]  # Llama generates here: not a comparison of two empty answers
        assert got.tolist() == expected.tolist()


def test_generate_batch_packs_prompts_of_different_lengths_as_llama():
    """`generate_batch`, the continuous-batching entry point: the prompts of different lengths packed into one row
    per step, read apart by the paged cache and attention; every request gets Llama's tokens, none fails."""
    prompts = [ids(length, seed)[0].tolist() for length, seed in PROMPTS]
    model, llama = models()
    expected = llama.generate_batch(prompts, generation_config=settings(), continuous_batching_config=small())
    got = model.generate_batch(prompts, generation_config=settings(), continuous_batching_config=small())
    assert len(got) == len(expected) == len(prompts)
    for request, reference in expected.items():
        assert len(reference.generated_tokens) == NEW_TOKENS
        assert getattr(got[request], "error", None) is None
        assert got[request].generated_tokens == reference.generated_tokens


def test_a_paged_cache_with_block_ids_or_document_caches_is_refused():
    """The keywords of a continuous-batching step (captured from a real one) pass only on the plain path: with
    `block_ids` or `document_caches` (a mask for one sequence per row) the paged cache is refused by name, and
    without the paged cache its packed-batch keywords are refused as before (nothing would read them apart)."""
    model, _ = models()
    steps = []

    def capture(module, args, kwargs):
        if not steps:
            steps.append(dict(kwargs))

    handle = model.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        model.generate_batch([ids(5, 1)[0].tolist(), ids(9, 2)[0].tolist()], generation_config=settings(),
                             continuous_batching_config=small())
    finally:
        handle.remove()
    step = steps[0]
    tokens = step["input_ids"]
    caches = model.encode_documents(ids(4, 5))
    block_ids = torch.zeros_like(tokens)
    for call, name in [(lambda: model(**step, block_ids=block_ids), "block_ids"),
                       (lambda: model.model(**{k: v for k, v in step.items() if k != "logits_to_keep"},
                                            block_ids=block_ids), "block_ids"),
                       (lambda: model(**step, document_caches=caches), "document_caches")]:
        with pytest.raises(ValueError, match=rf"got `{name}` with a paged cache \(continuous batching"):
            call()
    unpaged = {key: value for key, value in step.items() if key != "cache"}
    with pytest.raises(TypeError, match="unexpected keyword argument '(logits_indices|max_seqlen_q)'"):
        model(**unpaged)


def test_generate_batch_refuses_what_continuous_batching_would_drop():
    """`generate_batch` reads only `max_new_tokens` of its keyword arguments: `document_caches=` (or `block_ids=`,
    `recompute_ratio=`) was dropped without a word, and the model answered from the prompt alone (Llama's tokens, a
    different answer). Refused by name, before any continuous batching starts, as through
    `generate(cache_implementation="paged")`, which hands its keywords to `generate_batch`."""
    model, _ = models()
    question = ids(5, 2)
    caches = model.encode_documents(ids(12, 1))
    given = dict(generation_config=settings(), continuous_batching_config=small())
    for name, value in [("document_caches", caches), ("document_caches", [caches]), ("recompute_ratio", 0.5),
                        ("block_ids", torch.zeros_like(question))]:
        with pytest.raises(ValueError, match=rf"generate_batch\(\) got `{name}`.*continuous batching"):
            model.generate_batch([question[0].tolist()], **given, **{name: value})
    with pytest.raises(ValueError, match=r"generate_batch\(\) got `block_ids`"):
        model.generate(question, cache_implementation="paged", block_ids=torch.zeros_like(question),
                       max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                       continuous_batching_config=small())
