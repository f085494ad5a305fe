"""Selective recompute of composed document caches (CacheBlend, Yao et al. 2025, §4): ratio 0 is the plain
composition, ratio 1 the full prompt, the selection schedule, and bad input; tiny random Llama configs in fp32."""

import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM, DocumentCacheOutput
from hf_readonce.models.block_attention_llama.modeling_block_attention_llama import (
    recompute_schedule,
    selective_recompute,
)

TINY = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=5, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
ATOL = 1e-4


def tiny(seed=0, **overrides):
    torch.manual_seed(seed)
    return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**{**TINY, **overrides})).eval()


def plain(model):
    config = LlamaConfig(**{k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "auto_map")})
    llama = LlamaForCausalLM(config).eval()
    llama.load_state_dict(model.state_dict())
    return llama


def ids(length, seed, batch=1):
    return torch.randint(3, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def documents(model, lengths=(9, 13, 6), seed=10):
    docs = [ids(n, seed + i) for i, n in enumerate(lengths)]
    with torch.no_grad():
        return docs, [model.encode_documents(d) for d in docs]


def snapshot(caches):
    return [(c.key_states.clone(), c.value_states.clone(), c.input_ids.clone()) for c in caches]


def assert_unchanged(caches, before):
    for cache, (k, v, i) in zip(caches, before, strict=True):
        assert torch.equal(cache.key_states, k) and torch.equal(cache.value_states, v)
        assert torch.equal(cache.input_ids, i)


GREEDY = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True,
              pad_token_id=0)


def test_ratio_zero_is_the_plain_composition_exactly():
    model = tiny()
    _, caches = documents(model)
    question = ids(4, 1)
    with torch.no_grad():
        composed = model(question, document_caches=caches).logits
        zero = model(question, document_caches=caches, recompute_ratio=0).logits
        assert torch.equal(composed, zero)
        a = model.generate(question, document_caches=caches, **GREEDY)
        b = model.generate(question, document_caches=caches, recompute_ratio=0.0, **GREEDY)
    assert torch.equal(a.sequences, b.sequences)
    for x, y in zip(a.logits, b.logits, strict=True):
        assert torch.equal(x, y)


def test_ratio_one_is_the_full_prompt():
    model = tiny()
    docs, caches = documents(model)
    question = ids(4, 1)
    before = snapshot(caches)
    llama = plain(model)
    full = torch.cat([*docs, question], dim=1)
    with torch.no_grad():
        reference = llama.generate(full, **GREEDY)
        recomputed = model.generate(question, document_caches=caches, recompute_ratio=1, **GREEDY)
        composed = model(question, document_caches=caches).logits
        full_logits = llama(full).logits[:, -4:]
    assert reference.sequences[:, -6:].tolist() == recomputed.sequences[:, -6:].tolist()
    for a, b in zip(reference.logits, recomputed.logits, strict=True):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
    # without recompute the composition differs from the full prompt (the test can fail)
    assert (composed - full_logits).abs().max() > 1e-2
    assert_unchanged(caches, before)


def test_ratio_one_per_row_documents_and_left_padding():
    model = tiny()
    llama = plain(model)
    docs_a, caches_a = documents(model, (7, 5), seed=20)
    docs_b, caches_b = documents(model, (11, 4, 6), seed=30)
    questions = [ids(3, 2)[0].tolist(), ids(5, 3)[0].tolist()]
    width = max(len(q) for q in questions)
    batch = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for row, q in enumerate(questions):
        batch[row, width - len(q):] = torch.tensor(q)
        mask[row, width - len(q):] = 1
    with torch.no_grad():
        out = model.generate(batch, attention_mask=mask, document_caches=[caches_a, caches_b], recompute_ratio=1,
                             **GREEDY)
        for row, docs in enumerate((docs_a, docs_b)):
            full = torch.cat([*docs, torch.tensor([questions[row]])], dim=1)
            reference = llama.generate(full, **GREEDY)
            assert out.sequences[row, -6:].tolist() == reference.sequences[0, -6:].tolist()


def test_first_layers_match_the_full_prompt_at_any_ratio():
    """Layer 0 is computed for every token and layer 1's keys and values are recomputed for every token (where the
    deviation is measured), so both equal the full prompt's at any ratio above 0; deeper layers mix."""
    model = tiny()
    docs, caches = documents(model)
    with torch.no_grad():
        full = plain(model).model(torch.cat(docs, dim=1), use_cache=True).past_key_values
        blended = selective_recompute(model, caches, 0.2)
        plain_composed = model.compose_document_caches(caches)
    for layer in (0, 1):
        torch.testing.assert_close(blended.layers[layer].keys, full.layers[layer].keys, atol=ATOL, rtol=0)
        torch.testing.assert_close(blended.layers[layer].values, full.layers[layer].values, atol=ATOL, rtol=0)
    # at layer 1 the composition alone deviates (documents did not see each other), so the recompute did something
    assert (plain_composed.layers[1].values - full.layers[1].values).abs().max() > 1e-3
    # a deeper layer: the tokens recomputed there equal neither the reused nor, in general, the full values
    last = model.config.num_hidden_layers - 1
    changed = (blended.layers[last].values - plain_composed.layers[last].values).abs().amax(dim=(0, 1, 3)) > 0
    kv_tokens = recompute_schedule(0.2, model.config.num_hidden_layers, 28)[last][0]
    assert int(changed.sum()) == kv_tokens
    # the documents were read by a plain LlamaForCausalLM too (module-level function)
    again = selective_recompute(plain(model), caches, 0.2)
    torch.testing.assert_close(again.layers[last].values, blended.layers[last].values, atol=ATOL, rtol=0)


def test_recompute_brings_the_answer_closer_to_the_full_prompt():
    model = tiny()
    docs, caches = documents(model, (20, 20, 20), seed=40)
    question = ids(5, 4)
    with torch.no_grad():
        target = plain(model)(torch.cat([*docs, question], dim=1)).logits[:, -5:]
        errors = [(model(question, document_caches=caches, recompute_ratio=r).logits - target).abs().max().item()
                  for r in (0.0, 0.5, 1.0)]
    assert errors[2] < ATOL < errors[1] < errors[0]


@pytest.mark.parametrize("ratio", [0.05, 0.15, 0.3, 0.5, 0.9])
def test_schedule_narrows_layer_by_layer_with_the_ratio_as_its_mean(ratio):
    layers, tokens = 30, 600
    schedule = recompute_schedule(ratio, layers, tokens)
    assert schedule[0] == (tokens, tokens) and schedule[1][0] == tokens
    queries = [q for _, q in schedule[1:-1]]
    assert all(a >= b for a, b in zip(queries, queries[1:]))  # gradual filtering: a nested, shrinking set
    assert queries[0] > queries[-1]
    assert abs(sum(queries) / len(queries) / tokens - ratio) < 0.01
    assert schedule[-1][1] == 0  # the last layer: keys and values only
    assert [kv for kv, _ in schedule[2:]] == [q for _, q in schedule[1:-1]]


def test_schedule_at_the_ends():
    assert recompute_schedule(0, 30, 100) == [(0, 0)] * 30
    assert recompute_schedule(1, 30, 100) == [(100, 100)] * 29 + [(100, 0)]
    assert recompute_schedule(0.01, 30, 10)[-2][1] == 1  # at least one token continues


@pytest.mark.parametrize("ratio", [-0.1, 1.5, math.nan, math.inf, True, "0.5", None])
def test_bad_ratio_is_refused_naming_it(ratio):
    model = tiny()
    _, caches = documents(model)
    before = snapshot(caches)
    with pytest.raises(ValueError, match="recompute_ratio"):
        model.generate(ids(4, 1), document_caches=caches, recompute_ratio=ratio, max_new_tokens=2)
    with pytest.raises(ValueError, match="recompute_ratio"):
        selective_recompute(model, caches, ratio)
    assert_unchanged(caches, before)


def test_numpy_and_tensor_ratios_are_numbers_too():
    np = pytest.importorskip("numpy")
    model = tiny()
    _, caches = documents(model)
    expected = model.generate(ids(4, 1), document_caches=caches, recompute_ratio=0.25, **GREEDY).sequences
    for ratio in (np.float32(0.25), np.float64(0.25), np.array(0.25), torch.tensor(0.25)):
        got = model.generate(ids(4, 1), document_caches=caches, recompute_ratio=ratio, **GREEDY).sequences
        assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="recompute_ratio"):
        model.generate(ids(4, 1), document_caches=caches, recompute_ratio=torch.tensor([0.2, 0.3]), max_new_tokens=2)
    with pytest.raises(ValueError, match="recompute_ratio"):
        model.generate(ids(4, 1), document_caches=caches, recompute_ratio=np.array(True), max_new_tokens=2)


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_documents_and_question_past_the_positions_are_refused_before_any_work(ratio, monkeypatch):
    """transformers only warns past `max_position_embeddings`; a composed prompt says so, naming the lengths, before
    composing (the three documents hold 28 tokens)."""
    model = tiny(max_position_embeddings=30)
    _, caches = documents(model)
    before = snapshot(caches)
    import hf_readonce.models.block_attention_llama.modeling_block_attention_llama as modeling

    monkeypatch.setattr(modeling, "_compose_row", lambda *a, **k: pytest.fail("composed before the length check"))
    monkeypatch.setattr(modeling, "_row_layers", lambda *a, **k: pytest.fail("composed before the length check"))
    for call in (lambda: model.generate(ids(3, 1), document_caches=caches, recompute_ratio=ratio, max_new_tokens=2),
                 lambda: model(ids(3, 1), document_caches=caches, recompute_ratio=ratio),
                 lambda: model.generate(ids(3, 1, batch=2), document_caches=[caches[:1], caches],
                                        recompute_ratio=ratio, max_new_tokens=2),
                 lambda: model.generate(ids(3, 1), document_caches=caches, recompute_ratio=ratio, max_new_tokens=2,
                                        use_cache=False),
                 lambda: model.generate(ids(3, 1, batch=2), document_caches=[caches[:1], caches], use_cache=False,
                                        recompute_ratio=ratio, max_new_tokens=2)):
        with pytest.raises(ValueError, match=r"28 tokens and a question of 3 tokens make 31 positions.*"
                                             r"max_position_embeddings 30"):
            call()
    assert_unchanged(caches, before)
    monkeypatch.undo()
    model.generate(ids(2, 1), document_caches=caches, recompute_ratio=ratio, max_new_tokens=1)  # 30 positions fit
    # left padding takes no position: a 1-token question beside a 3-token one fits its 28-token documents
    questions, mask = ids(3, 1, batch=2), torch.tensor([[0, 0, 1], [1, 1, 1]])
    model.generate(questions, attention_mask=mask, document_caches=[caches, caches[:1]], recompute_ratio=ratio,
                   max_new_tokens=1, pad_token_id=0)
    model(questions, attention_mask=mask, document_caches=[caches, caches[:1]], recompute_ratio=ratio)
    np = pytest.importorskip("numpy")
    model.compose_batch(caches, 1, question_length=np.int64(2), recompute_ratio=ratio)  # numpy counts are counts
    for bad in (2.5, -1, [1, 2], True):
        with pytest.raises(ValueError, match="question_length"):
            model.compose_batch(caches, 1, question_length=bad)


def test_a_batch_recomputes_shared_documents_once_and_each_per_row_list_once(monkeypatch):
    """As `compose_batch` says: the documents of every row are composed (and recomputed) once for the batch, a per-row
    list once per row (two rows with the same documents: twice), and the copies for beams are copies."""
    import hf_readonce.models.block_attention_llama.modeling_block_attention_llama as modeling

    model = tiny()
    _, caches = documents(model)
    composed = []
    original = modeling._compose_row
    monkeypatch.setattr(modeling, "_compose_row", lambda *a, **k: composed.append(a[4]) or original(*a, **k))
    for document_caches, repeat, expected in ((caches, 1, ["document_caches"]), (caches, 3, ["document_caches"]),
                                              ([caches, caches[:1], caches], 2,
                                               ["document_caches[0]", "document_caches[1]", "document_caches[2]"])):
        composed.clear()
        prefix = model.compose_batch(document_caches, 3, repeat=repeat, recompute_ratio=0.5)
        assert composed == expected and prefix.attention_mask.shape[0] == 3 * repeat


def test_ratio_without_documents_is_refused():
    model = tiny()
    with pytest.raises(ValueError, match="recompute_ratio"):
        model.generate(ids(4, 1), recompute_ratio=0.5, max_new_tokens=2)
    with pytest.raises(ValueError, match="recompute_ratio"):
        model(ids(4, 1), recompute_ratio=0.5)


def test_caches_of_another_model_or_rope_setting_are_refused():
    model = tiny()
    _, caches = documents(model)
    _, foreign = documents(tiny(seed=1))
    other_rope = tiny(rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    _, rotated_otherwise = documents(other_rope)
    before = snapshot(caches)
    with pytest.raises(ValueError, match="fingerprint"):
        model.generate(ids(4, 1), document_caches=[caches[0], foreign[1]], recompute_ratio=0.3, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"document 1 of `document_caches`.*RoPE setting.*500\.0"):
        model.generate(ids(4, 1), document_caches=[caches[0], rotated_otherwise[1]], recompute_ratio=0.3,
                       max_new_tokens=2)
    with pytest.raises(ValueError, match="RoPE setting"):
        selective_recompute(model, rotated_otherwise, 0.3)
    # a plain LlamaForCausalLM passes no fingerprint: the function checks the caches against the model's own
    for ratio in (0.0, 0.3):
        with pytest.raises(ValueError, match="fingerprint"):
            selective_recompute(plain(tiny(seed=1)), caches, ratio)
    assert_unchanged(caches, before)


def test_model_without_rotary_positions_is_refused():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()
    _, caches = documents(tiny())
    with pytest.raises(ValueError, match=r"`model` \(GPT2LMHeadModel\).*rotary"):
        selective_recompute(gpt2, caches, 0.3)
    dynamic = tiny(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="rope_type"):
        selective_recompute(dynamic, documents(dynamic)[1], 0.3)


def test_caches_without_token_ids_need_them_only_to_recompute():
    model = tiny()
    _, caches = documents(model)
    bare = [DocumentCacheOutput(key_states=c.key_states, value_states=c.value_states,
                                attention_mask=c.attention_mask, position_ids=c.position_ids,
                                model_fingerprint=c.model_fingerprint) for c in caches]
    question = ids(4, 1)
    with torch.no_grad():
        assert torch.equal(model(question, document_caches=bare).logits,
                           model(question, document_caches=caches).logits)
    with pytest.raises(ValueError, match="document 0 of `document_caches` carries no input_ids"):
        model(question, document_caches=bare, recompute_ratio=0.2)


def _peak_allocated_bytes(fn) -> int:
    """Peak bytes held by tensors allocated while `fn()` runs, above what was held before: the running sum of the
    CPU allocator's allocation and free events recorded by the torch profiler (`profile_memory`), in time order."""
    profiler = pytest.importorskip("torch.profiler")
    event_type = getattr(torch._C._profiler, "_EventType", None)
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    tree = getattr(prof.profiler.kineto_results, "experimental_event_tree", None)
    if event_type is None or tree is None:
        pytest.skip("this torch's profiler has no event tree with allocation events")
    events, stack = [], list(tree())
    while stack:
        node = stack.pop()
        if node.tag == event_type.Allocation:
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    held = peak = 0
    for _, size in sorted(events, key=lambda event: event[0]):
        held += size
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("ratio", [0.0, 0.15, 1.0])
def test_peak_memory_at_most_the_full_prompts(ratio):
    """The composed (and recomputed) prefix is streamed layer by layer into the cache: reading the question after
    it never holds more than the full prompt's forward (which holds the whole cache and one layer's activations).
    Composing every layer first and then handing the layers to the cache (which copies them) held two compositions:
    1.18 MB against the full prompt's 1.03 MB on this config, at every ratio."""
    torch.manual_seed(0)  # a cache that dominates one layer's activations, as in real checkpoints (SmolLM2: 30 layers)
    model = tiny(num_hidden_layers=8, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=64)
    docs = [torch.randint(3, 64, (1, 48), generator=torch.Generator().manual_seed(20 + i)) for i in range(3)]
    question = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(30))
    with torch.no_grad():
        caches = [model.encode_documents(d) for d in docs]
        full = _peak_allocated_bytes(lambda: model(torch.cat(docs + [question], 1), logits_to_keep=1))
        composed = _peak_allocated_bytes(
            lambda: model(question, document_caches=caches, recompute_ratio=ratio, logits_to_keep=1))
    cache_bytes = sum(c.key_states.numel() + c.value_states.numel() for c in caches) * 4
    assert composed >= cache_bytes  # the measurement sees the composition itself
    assert composed <= full, f"ratio {ratio}: peak {composed} bytes, the full prompt's {full}"


# ------------------------------------------------------------------ documents encoded after a shared prefix (APE)
def test_one_document_after_a_prefix_composes_to_the_full_prompt_exactly():
    """`encode_documents(doc, prefix=p)`: the document's keys/values as in the full prompt `p + doc` (positions
    P..P+n-1, attention over the prefix), so composing [p, doc] in front of a question is the full prompt at ratio 0;
    encoded alone, the same document is not (the test can fail)."""
    model = tiny()
    llama = plain(model)
    prefix_ids, doc, question = ids(7, 3), ids(11, 4), ids(4, 5)
    with torch.no_grad():
        prefix = model.encode_documents(prefix_ids)
        after = model.encode_documents(doc, prefix=prefix)
        alone = model.encode_documents(doc)
        full = llama(torch.cat([prefix_ids, doc, question], dim=1), use_cache=True)
        composed = model(question, document_caches=[prefix, after]).logits
        composed_alone = model(question, document_caches=[prefix, alone]).logits
    assert after.position_ids.tolist() == [list(range(7, 18))]
    for layer in range(TINY["num_hidden_layers"]):
        torch.testing.assert_close(after.key_states[:, layer], full.past_key_values.layers[layer].keys[:, :, 7:18],
                                   atol=ATOL, rtol=0)
        torch.testing.assert_close(after.value_states[:, layer], full.past_key_values.layers[layer].values[:, :, 7:18],
                                   atol=ATOL, rtol=0)
    torch.testing.assert_close(composed, full.logits[:, -4:], atol=ATOL, rtol=0)
    assert (composed_alone - full.logits[:, -4:]).abs().max() > 1e-2


def test_documents_after_a_prefix_batched_with_padding_and_recomputed():
    """A padded batch (left and right padding) gives each document the cache it gets alone after the prefix; such
    caches compose with others and selective recompute at ratio 1 is still the full prompt."""
    model = tiny()
    llama = plain(model)
    prefix_ids, question = ids(5, 6), ids(4, 7)
    docs = [ids(n, 20 + i) for i, n in enumerate((9, 6, 12))]
    batch = torch.zeros(3, 14, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for row, (doc, left) in enumerate(zip(docs, (True, False, True))):
        n = doc.shape[1]
        span = slice(14 - n, 14) if left else slice(0, n)
        batch[row, span], mask[row, span] = doc[0], 1
    with torch.no_grad():
        prefix = model.encode_documents(prefix_ids)
        together = model.encode_documents(batch, mask, prefix=prefix).split()
        one_by_one = [model.encode_documents(d, prefix=prefix) for d in docs]
        for a, b in zip(together, one_by_one, strict=True):
            assert a.position_ids.tolist() == b.position_ids.tolist()
            torch.testing.assert_close(a.key_states, b.key_states, atol=ATOL, rtol=0)
            torch.testing.assert_close(a.value_states, b.value_states, atol=ATOL, rtol=0)
        full = llama(torch.cat([prefix_ids, *docs, question], dim=1)).logits[:, -4:]
        recomputed = model(question, document_caches=[prefix, *together], recompute_ratio=1).logits
    torch.testing.assert_close(recomputed, full, atol=ATOL, rtol=0)


def test_bad_prefix_is_refused_naming_it():
    model = tiny()
    doc = ids(6, 8)
    with torch.no_grad():
        prefix = model.encode_documents(ids(5, 9))
        two = model.encode_documents(ids(5, 9).repeat(2, 1))
        foreign = tiny(seed=1).encode_documents(ids(5, 9))
        shifted = model.encode_documents(ids(5, 9), prefix=prefix)  # at positions 5..9
        padded = model.encode_documents(torch.tensor([[0, 4, 5, 6]]), torch.tensor([[0, 1, 1, 1]]))
    with pytest.raises(TypeError, match="`prefix` must be a DocumentCacheOutput"):
        model.encode_documents(doc, prefix=prefix.key_states)
    with pytest.raises(ValueError, match="`prefix` must hold one document, it holds 2"):
        model.encode_documents(doc, prefix=two)
    with pytest.raises(ValueError, match="`prefix`.*fingerprint"):
        model.encode_documents(doc, prefix=foreign)
    with pytest.raises(ValueError, match=r"`prefix` must be encoded at positions 0\.\.4"):
        model.encode_documents(doc, prefix=shifted)
    with pytest.raises(ValueError, match="`prefix` has padding"):
        model.encode_documents(doc, prefix=padded)
