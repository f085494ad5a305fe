"""The block-attention Llama adapter beyond the contract: storage dtypes, settings, refusal of another model's
caches, Llama checkpoints, bad settings."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
from hf_readonce.representations import BlockAttentionLlamaAdapter, fill_store, get_adapter, get_adapter_class
from hf_readonce.store import RepresentationStore, content_hash
from hf_readonce.store.errors import RepresentationMismatchError

DOCUMENTS = ["Emma is a novel by Jane Austen, published in December 1815.",
             "Persuasion was Austen's last completed novel, published at the end of 1817."]
QUESTION = "Who wrote Emma?"


def tiny(tokenizer, seed=0):
    torch.manual_seed(seed)
    return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()


def stored(adapter, path, dtype):
    store = RepresentationStore(path)
    fill_store(adapter, store, DOCUMENTS, store_dtype=dtype)
    tensors = store.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])
    size = sum(p.stat().st_size for p in (path / "shards").rglob("*.safetensors"))
    return tensors, size


def test_storage_dtypes_round_trip(tokenizer, tmp_path):
    model = tiny(tokenizer)
    adapter = get_adapter(model, tokenizer)
    question = torch.tensor([tokenizer(QUESTION, add_special_tokens=False)["input_ids"]])
    results = {}
    for dtype in ("float32", "float16", "bfloat16"):
        tensors, size = stored(adapter, tmp_path / dtype, dtype)
        assert tensors[0]["keys"].dtype == getattr(torch, dtype)
        assert tensors[0]["input_ids"].dtype == torch.int32  # integers keep their dtype
        read = adapter.read(tensors)
        with torch.no_grad():
            results[dtype] = (model(question, document_caches=read).logits, size)
    reference, size32 = results["float32"]
    for dtype, tolerance in (("float16", 1e-2), ("bfloat16", 5e-2)):
        logits, size = results[dtype]
        torch.testing.assert_close(logits, reference, atol=tolerance, rtol=0)
        assert size < 0.6 * size32  # two bytes per number instead of four (plus the same header and ids)


def test_settings_and_fingerprint(tokenizer):
    model = tiny(tokenizer)
    adapter = BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=32)
    settings = adapter.settings()
    assert settings["max_document_length"] == 32 and settings["compute_dtype"] == "float32"
    assert settings["representation"] == "llama_kv_cache/v1" and len(settings["tokenizer"]) == 64
    assert adapter.fingerprint() == model.representation_fingerprint()
    assert BlockAttentionLlamaAdapter(model, tokenizer).max_document_length == 128  # max_position_embeddings
    (tensors,) = adapter.encode(DOCUMENTS[:1])
    n = int(tensors["num_tokens"][0])
    assert tensors["keys"].shape == tensors["values"].shape == (2, 2, n, 8) and tensors["input_ids"].shape == (n,)
    # stored under `keys` / `values` (the names stores already hold), read back as the output's fields
    assert set(tensors) == {"keys", "values", "input_ids", "num_tokens"}
    read = adapter.read([tensors])
    assert torch.equal(read.key_states[0], tensors["keys"]) and torch.equal(read.value_states[0], tensors["values"])


def test_caches_of_another_model_are_refused(tokenizer, tmp_path):
    model, other = tiny(tokenizer, seed=0), tiny(tokenizer, seed=1)
    adapter = get_adapter(model, tokenizer)
    tensors, _ = stored(adapter, tmp_path / "store", "float32")
    question = torch.tensor([tokenizer(QUESTION, add_special_tokens=False)["input_ids"]])
    with pytest.raises(ValueError, match="fingerprint"):
        other.generate(question, document_caches=adapter.read(tensors), max_new_tokens=2)
    # the store itself has nothing for the other model's fingerprint
    store = RepresentationStore(tmp_path / "store", readonly=True)
    other_adapter = get_adapter(other, tokenizer)
    with pytest.raises(RepresentationMismatchError):  # stored for another model: named, not silently missing
        store.get_many(other_adapter.fingerprint(), other_adapter.settings(), [content_hash(DOCUMENTS[0])])


def test_llama_checkpoint_loads_through_the_registry(tokenizer, tmp_path):
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=128))
    llama.save_pretrained(tmp_path)
    adapter_class = get_adapter_class("llama")
    assert adapter_class is BlockAttentionLlamaAdapter
    model = adapter_class.load_model(str(tmp_path))
    assert type(model) is BlockAttentionLlamaForCausalLM
    assert type(get_adapter(model, tokenizer)) is BlockAttentionLlamaAdapter


def test_bad_settings(tokenizer):
    model = tiny(tokenizer)
    with pytest.raises(TypeError, match="BlockAttentionLlamaForCausalLM"):
        BlockAttentionLlamaAdapter(LlamaForCausalLM(LlamaConfig(**model.config.to_dict())), tokenizer)
    with pytest.raises(TypeError, match="max_document_length"):
        BlockAttentionLlamaAdapter(model, tokenizer, max_document_length="64")
    with pytest.raises(ValueError, match="batch_size"):
        BlockAttentionLlamaAdapter(model, tokenizer, batch_size=0)
    positions = model.config.max_position_embeddings
    assert BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=positions).max_document_length == positions
    with pytest.raises(ValueError, match=f"at most the model's {positions} positions, got {positions + 1}"):
        BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=positions + 1)
    with pytest.raises(TypeError, match="add_special_tokens"):
        BlockAttentionLlamaAdapter(model, tokenizer, add_special_tokens=1)
    dynamic = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(**{
        **model.config.to_dict(), "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}))
    with pytest.raises(ValueError, match=r"`model`: cannot compose document caches for rope_type 'dynamic'"):
        BlockAttentionLlamaAdapter(dynamic, tokenizer)  # its caches could be stored, never composed
    adapter = BlockAttentionLlamaAdapter(model, tokenizer)
    with pytest.raises(TypeError, match="texts"):
        adapter.encode("one text")
    with pytest.raises(ValueError, match="document 1"):
        adapter.encode(["fine", "  "])
    with pytest.raises(ValueError, match="stored"):
        adapter.read([])


def test_cli_encode_a_llama_checkpoint_through_the_registry(tokenizer, tmp_path):
    """`hf-readonce encode` on a plain Llama checkpoint: loaded as a block-attention Llama, caches stored under its
    fingerprint, read back into the same logits as the model reading the documents itself."""
    import json

    from hf_readonce.cli import main as cli_main

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=128)).save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "context": text}) + "\n" for i, text in enumerate(DOCUMENTS)))
    assert cli_main(["encode", str(tmp_path / "ckpt"), "--documents", str(docs), "--store", str(tmp_path / "store"),
                     "--max-document-length", "32", "--no-progress", "--device", "cpu"]) == 0
    model = BlockAttentionLlamaForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
    adapter = get_adapter(model, tokenizer, max_document_length=32)
    stored_tensors = RepresentationStore(tmp_path / "store", readonly=True).get_many(
        adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])  # fp16, the CLI default
    read = adapter.read(stored_tensors)
    question = torch.tensor([tokenizer(QUESTION, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        own = [model.encode_documents(torch.tensor([ids])) for ids in adapter.tokenize(DOCUMENTS)]
        torch.testing.assert_close(model(question, document_caches=read).logits,
                                   model(question, document_caches=own).logits, atol=1e-2, rtol=0)
