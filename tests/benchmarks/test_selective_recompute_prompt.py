"""benchmarks/bench_selective_recompute.py: the chat prompt's blocks (prefix, passages, tail) concatenate to the
SmolLM2-Instruct chat template's tokens, answers are post-processed by one documented rule, bad options exit
naming them, and its FLOP formula agrees with torch's FLOP counter (on a tiny random model; no real model is run)."""


import pytest

from tests.conftest import load_benchmark


def bench():
    """`benchmarks/bench_selective_recompute.py` as a module."""
    return load_benchmark("bench_selective_recompute")


@pytest.mark.parametrize(("text", "answer"), [
    ("The answer is: 1978.", "1978."),
    ("The answer is:\n1974\n", "1974"),
    ("\n\n Paris \nmore", "Paris"),
    ("The answer to this question is: Computational theory", "Computational theory"),
    ("Answer: the Nile", "the Nile"),
    ("Answerable questions", "Answerable questions"),
    ("The answer is:", ""),
    ("", ""),
])
def test_extract_answer(text, answer):
    assert bench().extract_answer(text) == answer


def test_chat_blocks_are_the_chat_template_tokens(smollm2):
    module = bench()
    _, tokenizer = smollm2  # SmolLM2-Instruct's own tokenizer and chat template (the session's copy of the weights)
    fmt = module.PromptFormat(tokenizer, "chat", passage_tokens=8)
    passages = ["The Amazon flows through Brazil.", "Emma was written by Jane Austen in 1815, in Chawton."]
    ids = fmt.prefix + [t for p in passages for t in fmt.document(p)] + fmt.tail("Who wrote Emma?")
    cut = [tokenizer.decode(tokenizer(p, add_special_tokens=False)["input_ids"][:8]) for p in passages]
    user = "Passages:\n\n" + "".join(c + "\n\n" for c in cut) + \
        "Question: Who wrote Emma?\nAnswer with a short span copied from the passages."
    text = tokenizer.apply_chat_template([{"role": "system", "content": module.CHAT_SYSTEM},
                                          {"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True)
    assert tokenizer.decode(ids) == text
    assert len(fmt.document(passages[1])) == 8 + len(fmt.separator)
    assert module.PromptFormat(tokenizer, "plain", 8).prefix == []
    with pytest.raises(ValueError, match="style"):
        module.PromptFormat(tokenizer, "chatty", 8)
    with pytest.raises(ValueError, match="shots"):
        module.PromptFormat(tokenizer, "chat", 8, shots=3)


@pytest.mark.parametrize(("argv", "option"), [(["--full_ratio_every", "0"], "--full_ratio_every"),
                                               (["--shots", "5"], "--shots"),
                                               (["--prompt", "chatty"], "--prompt"),
                                               (["--prompt", "plain", "--document_context", "after_prefix"],
                                                "--document_context"),
                                               (["--cache_dtype", "int8"], "--cache_dtype"),
                                               (["--rounded_full", "fp32"], "--rounded_full")])
def test_bad_options_exit_naming_them(argv, option, capsys):
    with pytest.raises(SystemExit) as raised:
        bench().main(argv)
    assert raised.value.code == 2 and option in capsys.readouterr().err


def test_encode_passages_after_the_prefix_block():
    """`--document_context after_prefix`: each passage's cache is encoded after the prefix block (positions from P,
    the library's `encode_documents(..., prefix=...)`), the prefix block itself once; a prompt without a prefix
    block is refused."""
    import torch

    module = bench()

    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM

    class Format:  # the two members encode_passages reads
        prefix = [5, 6, 7]

        @staticmethod
        def document(text):
            return [10 + ord(c) % 50 for c in text]

    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)).eval()
    after, alone = {}, {}
    with torch.no_grad():
        module.encode_passages(model, Format, ["abcd", "xyz"], after, after_prefix=True)
        module.encode_passages(model, Format, ["abcd"], alone)
        expected = model.encode_documents(torch.tensor([Format.document("abcd")]), prefix=after[None])
    assert after[None].position_ids.tolist() == [[0, 1, 2]]
    assert after["abcd"].position_ids.tolist() == [[3, 4, 5, 6]] and after["xyz"].position_ids.tolist() == [[3, 4, 5]]
    assert alone["abcd"].position_ids.tolist() == [[0, 1, 2, 3]]
    assert torch.equal(after["abcd"].key_states, expected.key_states)
    assert not torch.allclose(after["abcd"].value_states, alone["abcd"].value_states)
    Format.prefix = []
    with pytest.raises(ValueError, match="after_prefix needs a prompt with a prefix block"):
        module.encode_passages(model, Format, ["abcd"], {}, after_prefix=True)


def test_rounded_paths_round_only_the_stored_numbers():
    """`full@<dtype>` and `--cache_dtype`: the full prompt's cache of the tokens before the question, unrounded, gives
    the full prompt's next-token logits; rounded to bf16 its keys/values are exactly the bf16 numbers of the
    unrounded ones (and differ from them); `round_cache` rounds a document cache the same way and leaves it alone
    at its own dtype."""
    import torch

    module = bench()

    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM

    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)).eval()
    ids = torch.randint(3, 97, (1, 12))
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        exact = module.rounded_prefix_cache(model, ids[:, :9], torch.float32)
        after = model(ids[:, 9:], past_key_values=exact).logits[:, -1]
        rounded = module.rounded_prefix_cache(model, ids[:, :9], torch.bfloat16)
        document = model.encode_documents(ids[:, :9])
    torch.testing.assert_close(after, full, rtol=1e-5, atol=1e-5)
    for layer, exact_layer in zip(rounded.layers, exact.layers):
        for name in ("keys", "values"):
            got, unrounded = getattr(layer, name), getattr(exact_layer, name)[:, :, :9]
            assert got.dtype == torch.float32 and torch.equal(got, unrounded.to(torch.bfloat16).float())
            assert not torch.equal(got, unrounded)
    keys = document.key_states.clone()
    assert module.round_cache(document, torch.float32).key_states is document.key_states
    rounded_document = module.round_cache(document, torch.bfloat16)
    assert rounded_document.key_states.dtype == torch.float32
    assert torch.equal(rounded_document.key_states, keys.to(torch.bfloat16).float())


@pytest.mark.parametrize("ratio", [0.0, 0.15, 1.0])
def test_selective_flops_is_what_torch_counts_but_the_masked_pairs(ratio):
    """`selective_flops` (the FLOP bound's denominator) against torch's FLOP counter on the composed path of a tiny
    block-attention Llama: equal once the difference is accounted term by term. The formula counts causal pairs
    ((T + 1) / 2 keys on average per recomputed token, q (q + 1) / 2 within the question) and the keys' re-rotation
    (6 FLOPs per key number, element-wise, which the counter leaves out); the kernel, given an explicit mask, also
    scores the masked pairs (T per recomputed token, q (T + q) for the question). At SmolLM2's size the counter
    finds 6 % more than the formula at ratio 0.15."""
    import torch

    selective_flops = bench().selective_flops  # puts benchmarks/ on the path
    import harness

    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import recompute_schedule

    torch.manual_seed(0)
    config = BlockAttentionLlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=6,
                                       num_attention_heads=6, num_key_value_heads=2, head_dim=8)
    model = BlockAttentionLlamaForCausalLM(config).eval()
    documents = [model.encode_documents(torch.randint(3, 97, (1, n))) for n in (40, 30, 50)]
    question = torch.randint(3, 97, (1, 7))
    tokens, asked, layers, pair = 120, 7, 6, 4 * 6 * 8  # pair: scores + weighted sum, every head
    with torch.no_grad():
        counted = harness.count_flops(lambda: model.generate(
            question, document_caches=documents, recompute_ratio=ratio, max_new_tokens=1, min_new_tokens=1,
            do_sample=False, pad_token_id=0))
    rotation = 6 * layers * 2 * 8 * tokens
    masked = asked * (asked - 1) / 2 * pair * layers + sum(
        queries * (tokens - (tokens + 1) / 2) * pair for _, queries in recompute_schedule(ratio, layers, tokens))
    assert counted == selective_flops(config, ratio, tokens, asked) - rotation + masked
