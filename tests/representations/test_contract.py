"""The contract every representation adapter keeps: documents encoded into a store, read back with the adapter's
read side and fed to the model give the same logits (and generated tokens) as the model reading the documents
itself, to 1e-5 in fp32.

The test runs over every registered adapter; a family registered without a harness here fails
`test_every_registered_adapter_has_a_contract_harness`.
"""

import pytest
import torch

from hf_readonce import (
    BlockAttentionLlamaConfig,
    BlockAttentionLlamaForCausalLM,
    DeformerBertConfig,
    DeformerBertForQuestionAnswering,
    LongDocBartConfig,
    LongDocBartForConditionalGeneration,
    ReadOnceBartConfig,
    ReadOnceBartForConditionalGeneration,
    ReadTwiceBertConfig,
    ReadTwiceBertForQuestionAnswering,
)
from hf_readonce.representations import fill_store, get_adapter, registered_adapters
from hf_readonce.store import RepresentationStore, content_hash
from hf_readonce.tasks.question_answering import pad_batch, pair_inputs
from hf_readonce.tasks.readtwice_qa import ReadTwiceQACollator, capitalized_mentions, prepare_readtwice_qa_features

DOCUMENTS = [
    "Emma is a novel by Jane Austen, published in December 1815. It is about the perils of misconstrued romance.",
    "Persuasion was Austen's last completed novel. It was published at the end of 1817, "
    "six months after her death, and follows Anne Elliot. " * 3,
    "Northanger Abbey is a coming-of-age novel.",
]
QUESTION = "Who wrote the novel and when was it published?"


def deformer_bert_harness(tokenizer):
    torch.manual_seed(0)
    model = DeformerBertForQuestionAnswering(DeformerBertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=128, num_decomposed_layers=2)).eval()
    settings = {"max_passage_length": 32, "doc_stride": 8}  # the long document spans several windows

    def check(adapter, read):
        windows = [w for doc in adapter.windows(DOCUMENTS) for w in doc]
        question = tokenizer(QUESTION)["input_ids"]
        assert read.last_hidden_state.shape[0] == len(windows) > len(DOCUMENTS)
        questions = torch.tensor([question] * len(windows))
        cached = model(input_ids=questions, attention_mask=torch.ones_like(questions), passage_states=read)
        pairs = [pair_inputs(question, window) for window in windows]
        inputs = {key: pad_batch([p[key] for p in pairs], 0) for key in ("input_ids", "token_type_ids",
                                                                          "attention_mask")}
        full = model(**inputs)
        for row, window in enumerate(windows):  # same positions: question, then the window's tokens
            n = len(question) + len(window.input_ids)
            for name in ("start_logits", "end_logits"):
                torch.testing.assert_close(getattr(cached, name)[row, :n], getattr(full, name)[row, :n],
                                           atol=1e-5, rtol=0)

    return model, settings, check


def readonce_bart_harness(tokenizer):
    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None)).eval()
    settings = {"max_document_length": 64}

    def check(adapter, read):
        documents = tokenizer(DOCUMENTS, truncation=True, max_length=64, padding=True, return_tensors="pt")
        question = tokenizer([QUESTION] * len(DOCUMENTS), return_tensors="pt")
        labels = torch.randint(1000, 2000, (len(DOCUMENTS), 5), generator=torch.Generator().manual_seed(0))
        from_store = model(question.input_ids, attention_mask=question.attention_mask,
                           document_representations=read, document_attention_mask=read.attention_mask, labels=labels)
        itself = model(question.input_ids, attention_mask=question.attention_mask, labels=labels,
                       document_input_ids=documents.input_ids,
                       document_input_attention_mask=documents.attention_mask)
        torch.testing.assert_close(from_store.logits, itself.logits, atol=1e-5, rtol=0)
        generate = dict(attention_mask=question.attention_mask, max_new_tokens=4, min_new_tokens=4, do_sample=False)
        stored_tokens = model.generate(question.input_ids, document_representations=read,
                                       document_attention_mask=read.attention_mask, **generate)
        own = model.encode_documents(documents.input_ids, documents.attention_mask)
        own_tokens = model.generate(question.input_ids, document_representations=own,
                                    document_attention_mask=own.attention_mask, **generate)
        assert torch.equal(stored_tokens, own_tokens)

    return model, settings, check


def readtwice_bert_harness(tokenizer):
    torch.manual_seed(0)
    model = ReadTwiceBertForQuestionAnswering(ReadTwiceBertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64, segment_length=24, segment_overlap=6,
        memory_type="entity", memory_top_k=3, span_length=4, question_in_first_read=False)).eval()
    with torch.no_grad():  # zero at initialisation: make the memories' segment positions matter
        model.bert.memory_attention.relative_segment_scores.normal_()
    settings = {"mention_fn": capitalized_mentions}  # segments, overlap and memory type come from the config

    def check(adapter, read):
        examples = [{"question": QUESTION, "context": text} for text in DOCUMENTS]
        features = prepare_readtwice_qa_features(tokenizer, examples, 24, 6, question_in_first_read=False,
                                                 mention_fn=capitalized_mentions)
        assert read.first_read_hidden_state.shape[0] == sum(f.num_segments for f in features) > len(DOCUMENTS)
        batch = ReadTwiceQACollator(tokenizer.pad_token_id, with_entities=True, with_labels=False)(features)
        itself = model(**batch)  # the model's own first read of every segment
        questions = {key: value for key, value in batch.items() if key.startswith("question_")}
        from_store = model(document_states=read, **questions)
        assert from_store.group_ids.tolist() == itself.group_ids.tolist()
        # rows are [question; segment]; the stored segments are padded to the longest one stored, so compare the
        # real tokens only
        mask = torch.cat([batch["question_attention_mask"][batch["document_ids"]], batch["attention_mask"]], dim=1)
        width = min(from_store.start_logits.shape[1], itself.start_logits.shape[1])
        real = mask[:, :width].bool()
        assert int(real.sum()) == int(mask.sum())
        for name in ("start_logits", "end_logits"):
            torch.testing.assert_close(getattr(from_store, name)[:, :width][real],
                                       getattr(itself, name)[:, :width][real], atol=1e-5, rtol=0)

    return model, settings, check


def block_attention_llama_harness(tokenizer):
    torch.manual_seed(0)
    model = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0,
        bos_token_id=101, eos_token_id=102)).eval()
    settings = {"max_document_length": 64}  # the long document is truncated

    def check(adapter, read):
        documents = [torch.tensor([ids]) for ids in adapter.tokenize(DOCUMENTS)]
        assert read.keys.shape[0] == len(DOCUMENTS) and max(d.shape[1] for d in documents) == 64
        question = torch.tensor([tokenizer(QUESTION, add_special_tokens=False)["input_ids"]])
        # the model reading the documents itself: every document alone (block mask), then the question
        prompt = torch.cat([*documents, question], dim=1)
        block_ids = torch.tensor([[b for b, d in enumerate(documents) for _ in range(d.shape[1])]
                                  + [-1] * question.shape[1]])
        itself = model(prompt, block_ids=block_ids).logits[:, -question.shape[1]:]
        from_store = model(question, document_caches=read).logits
        torch.testing.assert_close(from_store, itself, atol=1e-5, rtol=0)
        generate = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
        stored_tokens = model.generate(question, document_caches=read, **generate)
        own = [model.encode_documents(d) for d in documents]
        assert torch.equal(stored_tokens, model.generate(question, document_caches=own, **generate))
        # one stored document before the question is the plain causal LM reading document + question
        single = model.generate(question, document_caches=read.split()[0], **generate)
        full = model.generate(torch.cat([documents[0], question], dim=1), **generate)
        assert torch.equal(single, full[:, documents[0].shape[1]:])

    return model, settings, check


def longdoc_bart_harness(tokenizer):
    torch.manual_seed(0)
    # neighborhood attention with r = 4 < the documents' lengths, so the stored outputs are the local ones; init_std
    # 0.2 so that the encoder outputs move the logits enough for the comparison to bite
    model = LongDocBartForConditionalGeneration(LongDocBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        encoder_attention_type="neighborhood", neighborhood_radius=4, init_std=0.2, pad_token_id=0,
        bos_token_id=101, eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None)).eval()
    settings = {"max_document_length": 64}

    def check(adapter, read):
        documents = tokenizer(DOCUMENTS, truncation=True, max_length=64, padding=True, return_tensors="pt")
        assert read.last_hidden_state.shape == (len(DOCUMENTS), documents.input_ids.shape[1], 32)
        assert torch.equal(read.attention_mask, documents.attention_mask)
        labels = torch.randint(1000, 2000, (len(DOCUMENTS), 5), generator=torch.Generator().manual_seed(0))
        from_store = model(encoder_outputs=read, attention_mask=read.attention_mask, labels=labels)
        itself = model(input_ids=documents.input_ids, attention_mask=documents.attention_mask, labels=labels)
        torch.testing.assert_close(from_store.logits, itself.logits, atol=1e-5, rtol=0)
        for num_beams in (1, 2):  # beam search expands `encoder_outputs` in place: a fresh read per call
            generate = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=num_beams)
            fresh = adapter.read([{"hidden_states": read.last_hidden_state[i][read.attention_mask[i].bool()]}
                                  for i in range(len(DOCUMENTS))])
            stored_tokens = model.generate(encoder_outputs=fresh, attention_mask=fresh.attention_mask, **generate)
            own_tokens = model.generate(documents.input_ids, attention_mask=documents.attention_mask, **generate)
            assert stored_tokens.shape == (len(DOCUMENTS), 7) and torch.equal(stored_tokens, own_tokens)

    return model, settings, check


HARNESSES = {"block_attention_llama": block_attention_llama_harness, "deformer_bert": deformer_bert_harness,
             "longdoc_bart": longdoc_bart_harness, "readonce_bart": readonce_bart_harness,
             "readtwice_bert": readtwice_bert_harness}


def test_every_registered_adapter_has_a_contract_harness():
    assert set(registered_adapters()) == set(HARNESSES)


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_store_round_trip_gives_the_models_own_outputs(model_type, tokenizer, tmp_path):
    model, settings, check = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    assert type(adapter) is registered_adapters()[model_type]
    store = RepresentationStore(tmp_path / "store")
    stats = fill_store(adapter, store, DOCUMENTS, dtype="float32")
    assert stats.encoded == len(DOCUMENTS)
    reopened = RepresentationStore(tmp_path / "store", readonly=True)  # another process would see the same
    stored = reopened.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])
    read = adapter.read(stored)
    # ReadTwice-BERT names its representation fingerprint `fingerprint()` (the model's own API)
    model_fingerprint = getattr(model, "representation_fingerprint", None) or model.fingerprint
    assert read.model_fingerprint == model_fingerprint() == adapter.fingerprint()
    with torch.no_grad():
        check(adapter, read)
