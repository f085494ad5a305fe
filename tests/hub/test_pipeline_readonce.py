"""ReadOnce BART `text2text-generation` / `summarization` pipelines: each document read once for all its texts, the
same generations as calling `encode_documents` + `generate` by hand, published with the checkpoint and loaded with
`trust_remote_code` where hf_readonce cannot be imported."""

import json

import pytest
import torch

from hf_readonce.hub.publish import publish
from hf_readonce.models.readonce_bart.pipeline_readonce_bart import (
    ReadOnceSummarizationPipeline,
    ReadOnceText2TextGenerationPipeline,
)
from tests.conftest import run_without_hf_readonce

DOCUMENTS = ["Emma is a novel by Jane Austen, published in December 1815. It is about youthful hubris.",
             "Persuasion is the last novel fully completed by Jane Austen."]
TEXTS = ["Who wrote Emma?", "When was Emma published?"]


def tiny_readonce():
    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration

    torch.manual_seed(0)
    return ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None)).eval()


def by_hand(model, tokenizer, texts, document, max_new_tokens=5):
    doc = tokenizer([document], truncation=True, max_length=256, return_tensors="pt")
    reps = model.encode_documents(doc.input_ids, doc.attention_mask)
    out = []
    for text in texts:
        q = tokenizer([text], truncation=True, max_length=32, return_tensors="pt")
        ids = model.generate(input_ids=q.input_ids, attention_mask=q.attention_mask, document_representations=reps,
                             max_new_tokens=max_new_tokens, do_sample=False)
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True).strip())
    return out


@pytest.fixture(scope="module")
def published(tmp_path_factory, tokenizer):
    source = tmp_path_factory.mktemp("readonce_src")
    tiny_readonce().save_pretrained(source)
    tokenizer.save_pretrained(source)
    return publish(source, "someone/tiny-readonce", local_dir=tmp_path_factory.mktemp("readonce_pub") / "repo")


def test_generations_equal_by_hand_and_documents_read_once(tokenizer, monkeypatch):
    model = tiny_readonce()
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    expected = by_hand(model, tokenizer, TEXTS, DOCUMENTS[0])
    rows, original = [], model.encode_documents
    monkeypatch.setattr(model, "encode_documents", lambda ids, *a, **k: rows.append(ids.shape[0]) or original(ids, *a, **k))
    got = pipe(TEXTS + ["Who wrote Persuasion?"], document=[DOCUMENTS[0], DOCUMENTS[0], DOCUMENTS[1]],
               max_new_tokens=5, batch_size=2)
    assert rows == [2]  # two distinct documents, encoded once, for three texts
    assert [g["generated_text"] for g in got[:2]] == expected  # flat for several texts, as transformers
    assert pipe(TEXTS[0], document=DOCUMENTS[0], max_new_tokens=5) == [{"generated_text": expected[0]}]
    summarize = ReadOnceSummarizationPipeline(model=model, tokenizer=tokenizer)
    summary = by_hand(model, tokenizer, ["summary"], DOCUMENTS[1])[0]
    assert summarize(DOCUMENTS[1], max_new_tokens=5) == [{"summary_text": summary}]
    assert summarize(DOCUMENTS, max_new_tokens=5)[1] == {"summary_text": summary}
    several = dict(max_new_tokens=3, num_beams=2, generate_kwargs={"num_return_sequences": 2})
    per_text = pipe(TEXTS, document=DOCUMENTS[0], **several)  # a list of 2 sequences per text, in order
    assert [len(sequences) for sequences in per_text] == [2] * len(TEXTS)
    assert len(pipe(TEXTS[0], document=DOCUMENTS[0], **several)) == 2
    assert [len(sequences) for sequences in summarize(DOCUMENTS, **several)] == [2, 2]
    from transformers import GenerationConfig

    config = GenerationConfig(**{**model.generation_config.to_dict(), "num_return_sequences": 2, "num_beams": 2})
    by_config = pipe(TEXTS, document=DOCUMENTS[0], num_beams=2, max_new_tokens=3,
                     generate_kwargs={"generation_config": config})
    assert [len(sequences) for sequences in by_config] == [2] * len(TEXTS)  # grouped whatever sets the count
    with pytest.raises(ValueError, match="`document` 0 is empty"):
        pipe("Who?", document=" ")
    with pytest.raises(ValueError, match="`text` has 2 entries but `document` has 3"):
        pipe(TEXTS, document=DOCUMENTS + ["x"])
    with pytest.raises(TypeError, match=r"pass generate arguments such as \['temperature'\] in `generate_kwargs`"):
        pipe("Who?", document=DOCUMENTS[0], temperature=0.5)
    with pytest.raises(ValueError, match="`max_new_tokens` must be >= 1"):
        pipe("Who?", document=DOCUMENTS[0], max_new_tokens=0)


def test_published_pipelines_load_without_hf_readonce(published, tokenizer, tmp_path):
    config = json.loads((published.folder / "config.json").read_text())
    assert sorted(config["custom_pipelines"]) == ["summarization", "text2text-generation"]
    assert "pipeline_readonce_bart.py" in published.files and "generation_config.json" in published.files
    model = tiny_readonce()
    expected = {"answers": by_hand(model, tokenizer, TEXTS, DOCUMENTS[0]),
                "summary": by_hand(model, tokenizer, ["summary"], DOCUMENTS[1])[0]}
    result = run_without_hf_readonce(f"""
        import json
        try:
            import hf_readonce
            raise SystemExit("hf_readonce was importable")
        except ImportError:
            pass
        from transformers import pipeline
        folder = {str(published.folder)!r}
        t2t = pipeline("text2text-generation", model=folder, trust_remote_code=True)
        summarize = pipeline("summarization", model=folder, trust_remote_code=True)
        assert "hf_readonce" not in type(t2t).__module__
        answers = [a["generated_text"] for a in t2t({TEXTS!r}, document={DOCUMENTS[0]!r}, max_new_tokens=5)]
        summary = summarize({DOCUMENTS[1]!r}, max_new_tokens=5)[0]["summary_text"]
        print("OUT", json.dumps({{"answers": answers, "summary": summary}}))
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("OUT "))
    assert json.loads(line[4:]) == expected



def test_saving_one_pipeline_keeps_the_other_the_checkpoint_declares(published, tmp_path):
    # transformers' Pipeline.save_pretrained writes `custom_pipelines` with the saved pipeline's task alone: the
    # saved folder (and the model's config) lost `text2text-generation` when the `summarization` pipeline was saved
    result = run_without_hf_readonce(f"""
        import json
        from transformers import pipeline
        summarize = pipeline("summarization", model={str(published.folder)!r}, trust_remote_code=True)
        summarize.save_pretrained({str(tmp_path / "saved")!r})
        print("MODEL", sorted(summarize.model.config.custom_pipelines))
        t2t = pipeline("text2text-generation", model={str(tmp_path / "saved")!r}, trust_remote_code=True)
        print("CLASS", type(t2t).__name__)
        summarize.save_pretrained({str(tmp_path / "saved" / "config.json")!r})  # a file: nothing written
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MODEL ['summarization', 'text2text-generation']" in result.stdout
    assert "CLASS ReadOnceText2TextGenerationPipeline" in result.stdout
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    declared = json.loads((published.folder / "config.json").read_text())
    assert saved["custom_pipelines"] == declared["custom_pipelines"]
    assert {k: v for k, v in saved.items() if k != "_name_or_path"} == {
        k: v for k, v in declared.items() if k != "_name_or_path"}
    assert (tmp_path / "saved" / "pipeline_readonce_bart.py").is_file()

def test_long_documents_are_read_in_chunks_up_to_t_times_k(tokenizer):
    """§5.5: a document longer than the model's positions is read in chunks of T tokens, up to the T·k capacity
    by default (not cut at 256 tokens), by the pipeline and by the store adapter alike."""
    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.representations import get_adapter

    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None)).eval()  # T = 128 positions, T * k = 512 tokens
    document = " ".join(f"Sentence {i} of a long story about Anne Elliot." for i in range(40))
    n = len(tokenizer(document)["input_ids"])
    assert 256 < n <= 512
    adapter = get_adapter(model, tokenizer)
    assert adapter.max_document_length == 512
    stored = adapter.encode([document])[0]
    assert int(stored["num_tokens"][0]) == n and stored["representations"].shape[0] == -(-n // 4)
    seen = []
    original = model.encode_documents
    model.encode_documents = lambda ids, *a, **k: seen.append(ids.shape[1]) or original(ids, *a, **k)
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    pipe("Who is the story about?", document=document, max_new_tokens=3)
    assert seen == [n]  # the whole document, read in ceil(n / 128) chunks by the model
    pipe("Who is the story about?", document=document, max_new_tokens=3, max_document_len=100)
    assert seen[-1] == 100


def test_a_left_padding_tokenizer_gives_each_text_its_generation_alone(tokenizer):
    """The question / prompt is read at learned positions counted from the first column: the pipelines and the store
    adapter pad it on the right whatever the tokenizer's `padding_side`, so a batch generates for each text what it
    generates alone."""
    from transformers import AutoTokenizer

    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.representations import get_adapter

    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101,
        forced_eos_token_id=None, init_std=0.5)).eval()  # larger weights: the generations depend on the text
    left = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    left.padding_side = "left"
    texts = ["Who?", "When was Emma published by Jane Austen, and where was it first published?"]
    pipe = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=left)
    alone = [pipe(text, document=DOCUMENTS[0], max_new_tokens=6)[0] for text in texts]
    assert alone[0] != alone[1]
    assert pipe(texts, document=DOCUMENTS[0], max_new_tokens=6) == alone
    right = ReadOnceText2TextGenerationPipeline(model=model, tokenizer=tokenizer)
    assert alone == [right(text, document=DOCUMENTS[0], max_new_tokens=6)[0] for text in texts]
    summarize = ReadOnceSummarizationPipeline(model=model, tokenizer=left)
    summaries = summarize(DOCUMENTS[0], prompt=texts, max_new_tokens=6)
    assert [s["summary_text"] for s in summaries] == [a["generated_text"] for a in alone]
    adapter = get_adapter(model, left)
    read = adapter.read(adapter.encode([DOCUMENTS[0], DOCUMENTS[0]]))
    inputs = adapter.generation_inputs(read, prompt=texts)
    assert inputs["attention_mask"][0].tolist() == sorted(inputs["attention_mask"][0].tolist(), reverse=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert [left.decode(row, skip_special_tokens=True).strip() for row in out] == \
        [a["generated_text"] for a in alone]
    assert left.padding_side == "left"


def test_summarization_pipeline_names_its_own_arguments(tokenizer):
    """`documents` and `prompt` are the summarization pipeline's arguments: an empty list names them (was "`text` is
    empty", the text2text pipeline's argument)."""
    summarize = ReadOnceSummarizationPipeline(model=tiny_readonce(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="`documents` is empty: nothing to summarize"):
        summarize([])
    with pytest.raises(ValueError, match="`prompt` is empty"):
        summarize(DOCUMENTS[0], prompt=[])
    with pytest.raises(ValueError, match="`prompt` is empty"):
        summarize(DOCUMENTS, prompt=[])
    with pytest.raises(TypeError, match="`prompt` must be a str, a list of str or an iterable of str, got int"):
        summarize(DOCUMENTS, prompt=5)
    with pytest.raises(ValueError, match="`documents` is required"):
        summarize()
    # an entry is named by the summarization pipeline's own arguments too (it said `document` 1 / `text` 0)
    with pytest.raises(ValueError, match="`documents` 1 is empty"):
        summarize([DOCUMENTS[0], "  "])
    with pytest.raises(TypeError, match="`documents` 0 must be a str, got int"):
        summarize([3])
    with pytest.raises(ValueError, match="`prompt` 1 is empty"):
        summarize(DOCUMENTS[0], prompt=["summary", " "])
    with pytest.raises(ValueError, match="`prompt` has 1 entries but `documents` has 2; pass one document for all "
                                         "prompts or one per prompt"):
        summarize(DOCUMENTS, prompt=["summary"])


def test_documents_cut_to_max_document_len_are_said(tokenizer, caplog):
    """A document longer than the tokens read is cut: the summarization (and text2text) pipeline says how many on
    its logger; documents read whole give no warning."""
    import logging

    pipe = ReadOnceSummarizationPipeline(model=tiny_readonce(), tokenizer=tokenizer)
    with caplog.at_level(logging.WARNING):
        pipe(DOCUMENTS, max_new_tokens=2, max_document_len=12)
    assert "2 of 2 document(s) held more than the 12 tokens read per document" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pipe(DOCUMENTS, max_new_tokens=2)
    assert "held more than" not in caplog.text
