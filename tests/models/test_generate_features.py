"""transformers' `generate()` features on every generating family (tiny random models): the same tokens as the plain
call where the feature should change nothing or just stop early, a clear error naming the feature where it cannot
apply."""

import pytest
import torch

from tests.hub.test_pipeline_readonce import tiny_readonce
from tests.models.block_attention_llama.cases import tiny_block_attention
from tests.models.longdoc_bart.cases import tiny_longdoc
from tests.models.recurrent.cases import tiny_recurrent

DOCUMENT = "emma woodhouse handsome clever and rich with a comfortable home and happy disposition seemed to unite"
QUESTION = "who is handsome and clever"
LONG_PROMPT = " ".join(["emma", "knightley", "harriet"] * 12)  # beyond the recurrent models' 32 positions


def _family_calls(tokenizer):
    """`{name: (model, generate)}`: each family's model and a call of its `generate` on one prompt with the given
    keyword arguments (ReadOnce with the document's tokens, block attention with document caches)."""
    document = tokenizer([DOCUMENT], return_tensors="pt")
    question = tokenizer([QUESTION], return_tensors="pt")
    readonce, longdoc, block = tiny_readonce(), tiny_longdoc(), tiny_block_attention()
    caches = block.encode_documents(document.input_ids)
    block_question = tokenizer([QUESTION], add_special_tokens=False, return_tensors="pt").input_ids
    long_prompt = tokenizer([LONG_PROMPT], return_tensors="pt").input_ids
    gpt2, llama = tiny_recurrent("gpt2"), tiny_recurrent("llama")
    return {
        "readonce_bart": (readonce, lambda **kw: readonce.generate(
            question.input_ids, attention_mask=question.attention_mask, document_input_ids=document.input_ids,
            document_input_attention_mask=document.attention_mask, **kw)),
        "longdoc_bart": (longdoc, lambda **kw: longdoc.generate(
            document.input_ids, attention_mask=document.attention_mask, **kw)),
        "block_attention_llama": (block, lambda **kw: block.generate(block_question, document_caches=caches, **kw)),
        "block_attention_llama_plain": (block, lambda **kw: block.generate(document.input_ids, **kw)),
        "recurrent_gpt2": (gpt2, lambda **kw: gpt2.generate(long_prompt, **kw)),
        "recurrent_llama": (llama, lambda **kw: llama.generate(long_prompt, **kw)),
    }


FAMILIES = ["readonce_bart", "longdoc_bart", "block_attention_llama", "block_attention_llama_plain", "recurrent_gpt2",
            "recurrent_llama"]


@pytest.fixture(scope="module")
def family_calls(tokenizer):
    return _family_calls(tokenizer)


@pytest.mark.parametrize("family", FAMILIES)
def test_stop_strings_stop_at_the_string(family, family_calls, tokenizer):
    """`stop_strings` with `tokenizer=` (which `generate()` hands on to the model with the inputs) ends the greedy
    tokens at the first new whole word that is the stop string: the same tokens as without it, up to there."""
    _, generate = family_calls[family]
    greedy = generate(max_new_tokens=6, do_sample=False)
    new = greedy[0, -6:].tolist()
    # the last new token that decodes to a word of its own, at its first place (a stop string matches text)
    at = max(new.index(t) for t in new if tokenizer.decode([t]).isalnum())
    stopped = generate(max_new_tokens=6, do_sample=False, stop_strings=[tokenizer.decode([new[at]])],
                       tokenizer=tokenizer)
    assert torch.equal(stopped, greedy[:, :greedy.shape[1] - 6 + at + 1])


@pytest.mark.parametrize("family", ["deformer_bert", "readonce_bart", "longdoc_bart", "block_attention_llama"])
def test_forward_refuses_a_tokenizer_given_by_hand(family, family_calls, tokenizer):
    """Generation drops the `tokenizer` it hands on with the inputs; `forward` itself still refuses one as a keyword
    it does not read (a misplaced argument is caught), on a family without `generate` (DeFormer) as on the
    generating ones."""
    from tests.conftest import tiny_model

    text = tokenizer([QUESTION], [DOCUMENT], return_tensors="pt") if family == "deformer_bert" else None
    model = tiny_model() if family == "deformer_bert" else family_calls[family][0]
    inputs = dict(text) if text is not None else {"input_ids": tokenizer([QUESTION], return_tensors="pt").input_ids}
    with pytest.raises(TypeError, match="unexpected keyword argument 'tokenizer'"):
        model(**inputs, tokenizer=tokenizer)


@pytest.mark.parametrize("family", ["recurrent_gpt2", "recurrent_llama"])
@pytest.mark.parametrize("feature", ["assistant_model", "prompt_lookup_num_tokens"])
def test_recurrent_assisted_decoding_is_refused_up_front(family, feature, family_calls):
    """Assisted decoding would crop the recurrent cache after rejected candidates: a `ValueError` naming it, before
    the first step."""
    import copy

    model, generate = family_calls[family]
    value = copy.deepcopy(model) if feature == "assistant_model" else 2
    with pytest.raises(ValueError, match="assisted generation is not supported"):
        generate(max_new_tokens=4, do_sample=False, **{feature: value})


def test_recurrent_model_as_another_models_assistant_is_named():
    """As the `assistant_model` of a stock Llama, a recurrent Llama cannot be rolled back after rejected candidates:
    the error names assisted decoding and `assistant_model`, not only the cache."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_readonce.models.recurrent.configuration_recurrent_llama import RecurrentLlamaConfig
    from hf_readonce.models.recurrent.modeling_recurrent_llama import RecurrentLlamaForCausalLM

    torch.manual_seed(0)
    sizes = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    model = LlamaForCausalLM(LlamaConfig(**sizes)).eval()
    assistant = RecurrentLlamaForCausalLM(RecurrentLlamaConfig(**sizes)).eval()
    with pytest.raises(NotImplementedError, match="assisted decoding.*`assistant_model`"):
        model.generate(torch.randint(0, 64, (1, 12)), assistant_model=assistant, max_new_tokens=20, do_sample=False)


@pytest.mark.parametrize("family", ["readonce_bart", "longdoc_bart", "block_attention_llama"])
def test_prompt_lookup_gives_the_greedy_tokens(family, family_calls):
    """Speculative decoding from the prompt keeps only the tokens greedy decoding picks."""
    _, generate = family_calls[family]
    assert torch.equal(generate(max_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=2),
                       generate(max_new_tokens=6, do_sample=False))


@pytest.mark.parametrize("lookup", [{}, {"prompt_lookup_num_tokens": 2}])
def test_block_attention_without_documents_generates_as_llama(lookup, family_calls, tokenizer):
    """Without document caches, block-attention Llama generates the tokens of transformers' `LlamaForCausalLM` with
    the same weights, greedy and with prompt lookup (compared with the vanilla model rather than with greedy
    decoding: on transformers 5.6 prompt lookup leaves greedy's tokens for `LlamaForCausalLM` itself)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    block, generate = family_calls["block_attention_llama_plain"]
    fields = LlamaConfig().to_dict()
    llama = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in block.config.to_dict().items() if k in fields})).eval()
    llama.load_state_dict(block.state_dict())
    ids = tokenizer([DOCUMENT], return_tensors="pt").input_ids
    assert torch.equal(generate(max_new_tokens=6, do_sample=False, **lookup),
                       llama.generate(ids, max_new_tokens=6, do_sample=False, **lookup))


@pytest.mark.parametrize("documents", ["document_input_ids", "document_representations", "encoder_outputs"])
def test_readonce_assistant_model_is_refused_clearly(documents, tokenizer):
    """The assistant runs its own `generate` and encoder, which the documents cannot reach: a `ValueError` naming
    `assistant_model` and how the documents came, as tokens, as (differentiable) representations, or inside the
    encoder's outputs."""
    import copy

    model = tiny_readonce()
    document = tokenizer([DOCUMENT], return_tensors="pt")
    question = tokenizer([QUESTION], return_tensors="pt")
    representations = model.encode_documents(document.input_ids)
    if documents == "encoder_outputs":
        with torch.no_grad():
            encoded = model.get_encoder()(input_ids=question.input_ids, attention_mask=question.attention_mask,
                                          document_representations=representations)
        given = {"encoder_outputs": encoded, "attention_mask": encoded.attention_mask}
    else:
        given = ({"document_input_ids": document.input_ids} if documents == "document_input_ids" else
                 {"document_representations": representations})
    with pytest.raises(ValueError, match=f"`assistant_model`.*not supported by ReadOnce BART with `{documents}`"
                                         ".*prompt_lookup_num_tokens"):
        model.generate(question.input_ids if documents != "encoder_outputs" else None,
                       assistant_model=copy.deepcopy(model), max_new_tokens=4, do_sample=False, **given)


def test_readonce_assistant_model_without_documents_gives_the_greedy_tokens(tokenizer):
    """A question without documents is BART's generation: assisted decoding with a copy of the model keeps the
    greedy tokens."""
    import copy

    model = tiny_readonce()
    question = tokenizer([QUESTION], return_tensors="pt")
    settings = dict(attention_mask=question.attention_mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(model.generate(question.input_ids, assistant_model=copy.deepcopy(model), **settings),
                       model.generate(question.input_ids, **settings))


def _longdoc_batch(tokenizer):
    """A tiny LongDoc BART, two documents of different lengths (right-padded) and their encoder outputs."""
    model = tiny_longdoc()
    documents = tokenizer([DOCUMENT, "knightley"], padding=True, return_tensors="pt")
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=documents.input_ids, attention_mask=documents.attention_mask)
    return model, documents, encoded


@pytest.mark.parametrize("stored", [False, True])
def test_longdoc_prefill_chunk_size_gives_the_unchunked_tokens(stored, tokenizer):
    """`prefill_chunk_size` (a `generate()` keyword) chunks nothing of the document, which the encoder has read: the
    padded batch's tokens and logits are those of the unchunked call, from the text or from stored outputs."""
    model, documents, encoded = _longdoc_batch(tokenizer)
    inputs = ({"encoder_outputs": encoded} if stored else {"input_ids": documents.input_ids})
    settings = dict(attention_mask=documents.attention_mask, max_new_tokens=5, do_sample=False,
                    return_dict_in_generate=True, output_logits=True)
    plain = model.generate(**inputs, **settings)
    for chunk in (1, 3):
        chunked = model.generate(**inputs, prefill_chunk_size=chunk, **settings)
        assert torch.equal(chunked.sequences, plain.sequences)
        torch.testing.assert_close(torch.stack(chunked.logits), torch.stack(plain.logits))


def test_longdoc_assistant_model(tokenizer):
    """Assisted decoding with a copy of the model gives the greedy tokens from the text; with stored encoder outputs
    (which the assistant's encoder cannot read) a `ValueError` names `assistant_model` and what to pass instead."""
    import copy

    model, documents, encoded = _longdoc_batch(tokenizer)
    settings = dict(attention_mask=documents.attention_mask[:1], max_new_tokens=5, do_sample=False)
    greedy = model.generate(documents.input_ids[:1], **settings)
    assert torch.equal(model.generate(documents.input_ids[:1], assistant_model=copy.deepcopy(model), **settings),
                       greedy)
    one = type(encoded)(last_hidden_state=encoded.last_hidden_state[:1])
    assert torch.equal(model.generate(encoder_outputs=one, prompt_lookup_num_tokens=2, **settings), greedy)
    with pytest.raises(ValueError, match="`assistant_model`.*`encoder_outputs`.*`input_ids`"):
        model.generate(encoder_outputs=one, assistant_model=copy.deepcopy(model), **settings)
