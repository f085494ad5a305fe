"""`hf-readonce encode | answer | verify --recompute` for causal LMs (a plain Llama checkpoint, loaded as a
block-attention Llama) and `verify --recompute` for the other families of a store: stored caches composed in front
of the question give the full prompt's greedy answers, options of the wrong family are refused by name, and the
recompute report names the figures it gives."""

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_readonce import BlockAttentionLlamaForCausalLM
from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.document_cache_qa import (
    answer_with_full_prompt,
    clean_answer,
    passages_of,
    prompt_ids,
    question_ids,
    question_prompt,
)
from tests.conftest import write_jsonl

PASSAGES = [
    "Emma is a novel by Jane Austen, published in December 1815. It is about the perils of misconstrued romance.",
    "Persuasion was Austen's last completed novel. It was published at the end of 1817, six months after her death.",
    "Northanger Abbey is a coming-of-age novel, published in 1817 as well.",
    "Mansfield Park follows Fanny Price, who is sent to live with her wealthy relatives.",
]
ROWS = [
    {"id": "a", "question": "Who wrote Emma?", "context": PASSAGES[0],
     "answers": {"text": ["Jane Austen"], "answer_start": [19]}},
    {"id": "b", "question": "When was Persuasion published?", "context": PASSAGES[1],
     "answers": {"text": ["1817"], "answer_start": [72]}},
    {"id": "c", "question": "Who is sent to live with relatives?", "contexts": [PASSAGES[2], PASSAGES[3], PASSAGES[0]],
     "answers": {"text": ["Fanny Price"], "answer_start": [0]}},
]


@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256, initializer_range=0.2)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def encode(checkpoint, store, rows, tmp_path, *extra):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": i, "context": p} for i, p in enumerate(
        dict.fromkeys(p for r in rows for p in passages_of(r)))])
    return cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--device", "cpu", *extra])


def test_prompt_format(tokenizer):
    assert question_prompt("  Who wrote Emma? ") == "\n\nQuestion: Who wrote Emma?\nAnswer:"
    assert clean_answer(" Jane Austen\nQuestion: more") == "Jane Austen"
    assert clean_answer(" \n\nPharmacy informatics\nQuestion: more") == "Pharmacy informatics"  # a leading newline
    assert clean_answer("\n \n") == ""
    ids, blocks = prompt_ids(tokenizer, PASSAGES[:2], "Who?", max_document_length=8)
    assert blocks[:8] == [0] * 8 and blocks[8:16] == [1] * 8 and set(blocks[16:]) == {-1}
    assert len(ids) == len(blocks) and ids[:8] == tokenizer(PASSAGES[0], add_special_tokens=False)["input_ids"][:8]
    assert passages_of({"contexts": ["x", "y"]}) == ["x", "y"] and passages_of({"context": "x"}) == ["x"]
    for bad in ({"id": 7}, {"id": 7, "contexts": []}, {"id": 7, "contexts": ["ok", " "]}):
        with pytest.raises(ValueError, match="7"):
            passages_of(bad)
    with pytest.raises(ValueError, match="question"):
        question_prompt(" ")


def test_encode_and_answer_a_llama_checkpoint_equal_the_full_prompt(tmp_path, llama_checkpoint, tokenizer, capsys):
    store = tmp_path / "store"
    assert encode(llama_checkpoint, store, ROWS, tmp_path, "--dtype", "fp32", "--max-document-length", "64") == 0
    assert "encoded 4 document(s)" in capsys.readouterr().out
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    preds = tmp_path / "preds.jsonl"
    assert cli_main(["answer", str(llama_checkpoint), "--store", str(store), "--questions", str(questions),
                     "--output", str(preds), "--no-progress", "--device", "cpu", "--max-answer-length", "5",
                     "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "answered 3 question(s) over 4 stored passage(s)" in out and "reading the store" in out
    assert "Question:" in out and "model" in out and "baseline: first-span" in out and "EM " in out
    predictions = {json.loads(line)["id"]: json.loads(line)["prediction_text"] for line in preds.open()}
    assert list(predictions) == ["a", "b", "c"]
    # one stored passage composed before the question is the plain causal LM reading passage + question: the same
    # greedy answers (fp32 store); rows batched with left padding
    model = BlockAttentionLlamaForCausalLM.from_pretrained(llama_checkpoint).eval()
    full = answer_with_full_prompt(model, tokenizer, ROWS[:2], max_document_length=64, max_new_tokens=5)
    assert {k: predictions[k] for k in ("a", "b")} == full
    assert any(predictions.values())  # a random model still says something: the comparison is not of empty strings


def test_answer_options_and_missing_passages(tmp_path, llama_checkpoint, checkpoint, capsys):
    store = tmp_path / "store"
    assert encode(llama_checkpoint, store, ROWS[:1], tmp_path, "--max-document-length", "64") == 0
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    common = ["--store", str(store), "--questions", str(questions), "--output", str(tmp_path / "p.jsonl"),
              "--no-progress", "--device", "cpu", "--max-answer-length", "2"]
    capsys.readouterr()
    for option in (["--doc-stride", "8"], ["--n-best-size", "5"]):  # DeFormer-only options, named
        assert cli_main(["answer", str(llama_checkpoint), *common, *option]) == 2
        err = capsys.readouterr().err
        assert option[0] in err and "not apply to" in err
    # more new tokens than the model has positions: refused before generating (positions 256 here)
    assert cli_main(["answer", str(llama_checkpoint), *common, "--max-answer-length", "100000"]) == 2
    assert "--max-answer-length 100000 new tokens do not fit the model's 256 positions" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # counts are whole numbers >= 1, said by argparse naming the option
        cli_main(["answer", str(llama_checkpoint), *common, "--batch-size", "0"])
    assert "argument --batch-size: expected a whole number >= 1, got 0" in capsys.readouterr().err
    assert encode(llama_checkpoint, tmp_path / "s2", ROWS[:1], tmp_path, "--num-decomposed-layers", "2") == 2
    assert "--num-decomposed-layers does not apply to llama models" in capsys.readouterr().err
    assert cli_main(["answer", str(checkpoint), *common, "--max-document-length", "64"]) == 2  # a DeFormer
    assert "--max-document-length does not apply to deformer_bert models" in capsys.readouterr().err
    # passages of rows b and c are not stored: named, with the way out; nothing written
    assert cli_main(["answer", str(llama_checkpoint), *common]) == 2
    err = capsys.readouterr().err
    assert "not stored" in err and "question id 'b'" in err and "--encode-missing" in err
    assert not (tmp_path / "p.jsonl").exists()
    # another document length than the stored one: nothing stored for it
    assert cli_main(["answer", str(llama_checkpoint), *common, "--max-document-length", "32"]) == 2
    err = capsys.readouterr().err
    assert "no document caches" in err and "It holds caches of max_document_length 64" in err
    # caches of another compute dtype, and a store of another family: said what the store holds
    assert cli_main(["answer", str(llama_checkpoint), *common, "--compute-dtype", "bfloat16"]) == 2
    assert "computed in float32: compute in that dtype (`--compute-dtype float32`)" in capsys.readouterr().err
    deformer_store = tmp_path / "deformer_store"
    assert encode(checkpoint, deformer_store, ROWS[:1], tmp_path, "--max-passage-length", "64", "--doc-stride", "16") == 0
    capsys.readouterr()
    assert cli_main(["answer", str(llama_checkpoint), *common[2:], "--store", str(deformer_store)]) == 2
    assert "It holds representations of deformer_bert models only" in capsys.readouterr().err
    one = write_jsonl(tmp_path / "one.jsonl", ROWS[:1])  # and the other way round: a DeFormer over the KV store
    assert cli_main(["answer", str(checkpoint), "--store", str(store), "--questions", str(one), "--output",
                     str(tmp_path / "p3.jsonl"), "--no-progress"]) == 2
    assert "it holds representations of block_attention_llama models only" in capsys.readouterr().err
    assert cli_main(["answer", str(llama_checkpoint), *common, "--encode-missing"]) == 0
    assert (tmp_path / "p.jsonl").exists()
    # a row without any passage is set aside, named by its line
    bad = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], {"id": "x", "question": "Why?", "contexts": []}])
    assert cli_main(["answer", str(llama_checkpoint), *common[:2], "--questions", str(bad), "--output",
                     str(tmp_path / "p2.jsonl"), "--no-progress", "--device", "cpu", "--max-answer-length", "2"]) == 0
    assert "line 2: missing or empty context/contexts" in capsys.readouterr().err


def test_verify_recompute_every_family_of_a_store(tmp_path, llama_checkpoint, checkpoint, tokenizer, qa_rows, capsys):
    """One store, three families: a DeFormer and a Llama (recomputed from their stored tokens) and a ReadOnce BART
    (which stores no tokens: recomputed only with --documents)."""
    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration

    torch.manual_seed(0)
    readonce = tmp_path / "ro"
    ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0, decoder_start_token_id=101)).save_pretrained(readonce)
    tokenizer.save_pretrained(readonce)
    store = tmp_path / "store"
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:8])
    for model, extra in ((llama_checkpoint, ["--max-document-length", "64"]), (checkpoint, [
            "--max-passage-length", "64", "--doc-stride", "16"]), (readonce, ["--max-document-length", "64"])):
        assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(store), "--no-progress",
                         "--device", "cpu", *extra]) == 0
    capsys.readouterr()
    verify = ["verify", "--store", str(store), "--no-progress", "--device", "cpu"]
    assert cli_main([*verify, "--recompute", "2"]) == 2
    assert "--recompute needs --model" in capsys.readouterr().err
    assert cli_main([*verify, "--model", str(checkpoint)]) == 2
    assert "--model is read only with --recompute" in capsys.readouterr().err
    assert cli_main([*verify, "--recompute", "2", "--model", str(llama_checkpoint), "--model", str(checkpoint),
                     "--model", str(readonce)]) == 1  # ReadOnce needs the texts
    out = capsys.readouterr().out
    assert out.startswith("OK:")
    assert "block_attention_llama" in out and "2 of 8 document(s) recomputed from stored tokens" in out
    assert "KL(fresh || stored) of the next-token distribution" in out
    assert "answer-span start and end distributions" in out
    assert "readonce_bart" in out and "not recomputed" in out and "keep no tokens" in out
    assert cli_main([*verify, "--recompute", "3", "--model", str(llama_checkpoint), "--model", str(checkpoint),
                     "--model", str(readonce), "--documents", str(docs), "--json", "--max-kl", "1e-3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and len(report["recompute"]) == 3
    for space in report["recompute"]:
        assert space["recomputed"] == 3 and space["skipped"] is None and space["dtypes"] == ["float16"]
        assert 0 < space["max_abs_diff"] < 1e-2  # the fp16 store's rounding, no more
        assert space["kl_kind"] and 0 <= space["max_kl"] < 1e-3
        assert all(d["recomputed_from"] == "text" and not d["mismatched"] for d in space["documents"])
    # --max-kl below what fp16 rounding gives: exit 1, the documents named
    assert cli_main([*verify, "--recompute", "1", "--model", str(llama_checkpoint), "--max-kl", "0"]) == 1
    assert "above --max-kl 0" in capsys.readouterr().out
    # a model that made none of the spaces: said, with what the store holds
    other = tmp_path / "other"
    torch.manual_seed(1)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256)).save_pretrained(other)
    tokenizer.save_pretrained(other)
    capsys.readouterr()
    assert cli_main([*verify, "--recompute", "1", "--model", str(other)]) == 2
    err = capsys.readouterr().err
    assert "no representation space" in err and "deformer_bert" in err



def test_verify_recompute_notes_documents_it_did_not_read(tmp_path, llama_checkpoint, capsys):
    """Stored caches keep their tokens: `--documents` is read only for the documents whose texts it holds. A file
    that holds none of those recomputed was ignored in silence: a note says so, and why (the run does not fail)."""
    store = tmp_path / "store"
    assert encode(llama_checkpoint, store, ROWS, tmp_path) == 0
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "x", "context": "A text that was never encoded."}])
    capsys.readouterr()
    verify = ["verify", "--store", str(store), "--no-progress", "--device", "cpu", "--recompute", "2", "--model",
              str(llama_checkpoint)]
    assert cli_main([*verify, "--documents", str(other)]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if "--documents" in line]
    assert len(notes) == 1, captured.err
    assert notes[0].startswith(f"hf-readonce: note: --documents {other} was not read for space ")
    assert "(block_attention_llama)" in notes[0]
    assert "keep the tokens they were read from" in notes[0] and "recomputed from their stored tokens" in notes[0]
    assert "2 of 4 document(s) recomputed from stored tokens" in captured.out
    assert cli_main([*verify, "--documents", str(other), "--json"]) == 0  # stdout stays one JSON document
    captured = capsys.readouterr()
    assert json.loads(captured.out)["recompute"][0]["recomputed"] == 2 and "was not read for space" in captured.err
    assert cli_main([*verify, "--documents", str(tmp_path / "docs.jsonl")]) == 0  # the texts encoded: read
    captured = capsys.readouterr()
    assert "recomputed from text" in captured.out and "--documents" not in captured.err, captured.err

def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_answer_with_recompute_ratio_reads_the_store_only(tmp_path, llama_checkpoint, checkpoint, tokenizer, capsys):
    """`--recompute-ratio 1` recomputes every passage token at every layer: the full prompt's greedy answers, also for
    a row of several passages (which the plain composition does not give without fine-tuning); the store's files
    are byte for byte the same after answering and after refused calls; `verify --recompute` still compares."""
    store = tmp_path / "store"
    assert encode(llama_checkpoint, store, ROWS, tmp_path, "--dtype", "fp32", "--max-document-length", "64") == 0
    before = _files(store)
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    preds = tmp_path / "preds.jsonl"
    common = ["--store", str(store), "--questions", str(questions), "--output", str(preds), "--no-progress",
              "--device", "cpu", "--max-answer-length", "5", "--batch-size", "2"]
    capsys.readouterr()
    assert cli_main(["answer", str(llama_checkpoint), *common, "--recompute-ratio", "1"]) == 0
    assert "recompute_ratio 1" in capsys.readouterr().out
    predictions = {json.loads(line)["id"]: json.loads(line)["prediction_text"] for line in preds.open()}
    model = BlockAttentionLlamaForCausalLM.from_pretrained(llama_checkpoint).eval()
    assert predictions == answer_with_full_prompt(model, tokenizer, ROWS, max_document_length=64, max_new_tokens=5)
    assert _files(store) == before
    for bad in ("1.5", "-0.1", "nan"):
        assert cli_main(["answer", str(llama_checkpoint), *common, "--recompute-ratio", bad]) == 2
        assert "--recompute-ratio must be a number in [0, 1]" in capsys.readouterr().err
    assert cli_main(["answer", str(checkpoint), *common, "--recompute-ratio", "0.5"]) == 2  # a DeFormer
    err = capsys.readouterr().err
    assert "--recompute-ratio applies to block_attention_llama, llama models only" in err, err
    assert _files(store) == before
    assert cli_main(["verify", "--store", str(store), "--no-progress", "--device", "cpu", "--recompute", "2",
                     "--model", str(llama_checkpoint)]) == 0
    assert "2 of 4 document(s) recomputed from stored tokens" in capsys.readouterr().out


def test_answer_refuses_a_row_past_the_models_positions(tmp_path, tokenizer, capsys):
    """A row whose passages and question need more positions than the model has: one line naming the question and
    the lengths, exit 2, no predictions file, the store untouched (transformers itself only warns there)."""
    checkpoint = tmp_path / "short"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=60)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    store = tmp_path / "store"
    assert encode(checkpoint, store, ROWS, tmp_path, "--max-document-length", "40") == 0
    before = _files(store)
    preds = tmp_path / "preds.jsonl"
    capsys.readouterr()
    assert cli_main(["answer", str(checkpoint), "--store", str(store), "--questions",
                     str(write_jsonl(tmp_path / "q.jsonl", ROWS)), "--output", str(preds), "--no-progress",
                     "--device", "cpu", "--max-answer-length", "2"]) == 2
    err = capsys.readouterr().err
    assert "question 'c': 3 document(s) of 60 tokens" in err and "max_position_embeddings 60" in err, err
    assert "Traceback" not in err and not preds.exists() and _files(store) == before


def test_info_lists_the_answer_options_a_family_takes(capsys):
    """`--recompute-ratio` is an `answer` option only the document-cache family's answering function takes: `info`
    says so beside that family (text and JSON), and for no other family."""
    assert cli_main(["info"]) == 0
    out = capsys.readouterr().out
    assert "answer (generative; --recompute-ratio)" in out and out.count("--recompute-ratio") == 1
    assert cli_main(["info", "--json"]) == 0
    options = {row["family"]: row["answer_options"] for row in json.loads(capsys.readouterr().out)}
    assert options["block_attention_llama"] == ["--recompute-ratio"]
    assert not any(value for family, value in options.items() if family != "block_attention_llama")


def test_generation_stops_after_the_first_line_with_text_not_at_a_leading_newline():
    """The answer loop's stopping rule ends a row where `clean_answer` cuts it: at a newline that follows some text;
    a row whose continuation so far is only newlines (or spaces) goes on; each row of a batch on its own. A byte-level
    BPE tokenizer (as Llama-family models have; BERT's drops newlines), trained here on a few lines."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from hf_readonce.tasks.document_cache_qa import _StopAfterFirstLine

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(["Question: Who?\nAnswer: Jane Austen\n\n"] * 4, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>")
    prompt = tokenizer("Question: Who?\nAnswer:", add_special_tokens=False)["input_ids"]
    rows = [" \n", " \nJane", " \nJane Austen\n", " Jane\n"]
    pieces = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in rows]
    width = max(map(len, pieces))
    batch = torch.tensor([prompt + ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids in pieces])
    stop = _StopAfterFirstLine(tokenizer, len(prompt))(batch, None)
    assert stop.tolist() == [False, False, True, True]


def test_encode_missing_beside_another_models_caches(tmp_path, llama_checkpoint, tokenizer, capsys):
    """A store holding another checkpoint's caches only: without `--encode-missing` that is said (both fingerprints);
    with it, this model's caches are encoded into their own space beside the others, which stay as they were."""
    other = tmp_path / "other"
    torch.manual_seed(1)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256, initializer_range=0.2)).save_pretrained(other)
    tokenizer.save_pretrained(other)
    store = tmp_path / "store"
    assert encode(other, store, ROWS[:1], tmp_path, "--max-document-length", "64") == 0
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS[:1])
    common = ["--store", str(store), "--questions", str(questions), "--no-progress", "--device", "cpu",
              "--max-answer-length", "2", "--max-document-length", "64"]
    capsys.readouterr()
    assert cli_main(["answer", str(llama_checkpoint), *common, "--output", str(tmp_path / "a.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "only for" in err and not (tmp_path / "a.jsonl").exists()
    # the plain-checkpoint note once, not again for each compute dtype the mismatch diagnosis reloads the model in
    assert err.count("is a plain llama checkpoint") == 1
    assert cli_main(["answer", str(llama_checkpoint), *common, "--output", str(tmp_path / "b.jsonl"),
                     "--encode-missing"]) == 0
    assert "(--encode-missing encoded 1 of these passages first)" in capsys.readouterr().out
    assert len({space.fingerprint for space in RepresentationStore(store, readonly=True).spaces()}) == 2


def test_answer_counts_the_passages_cut_to_the_length_read(tmp_path, llama_checkpoint, tokenizer, capsys):
    """A passage longer than the caches read is answered from its first tokens only: `answer` says how many, with
    --encode-missing (whose encoding said nothing of it) and from a store `encode` filled, as `summarize` does; a
    store of short passages gives no note."""
    lengths = [len(tokenizer(p, add_special_tokens=False).input_ids) for p in PASSAGES]
    assert min(lengths) > 12 and min(lengths) <= 20 < max(lengths)
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    store = tmp_path / "store"
    answer = ["answer", str(llama_checkpoint), "--store", str(store), "--questions", str(questions), "--output",
              str(tmp_path / "p.jsonl"), "--no-progress", "--device", "cpu", "--max-answer-length", "2"]
    assert cli_main([*answer, "--encode-missing", "--max-document-length", "12"]) == 0
    captured = capsys.readouterr()
    assert "--encode-missing encoded 4 of these passages first" in captured.out
    assert "note: 4 of the 4 distinct passage(s) held more than the 12 tokens read per passage" in captured.err
    assert cli_main(answer) == 0  # from the store: the same passages, the same note
    assert "note: 4 of the 4 distinct passage(s) held more than the 12 tokens" in capsys.readouterr().err
    cut = sum(length > 20 for length in lengths)
    assert encode(llama_checkpoint, tmp_path / "s20", ROWS, tmp_path, "--max-document-length", "20") == 0
    assert f"note: {cut} document(s) held more than the 20 tokens" in capsys.readouterr().err  # encode says it too
    assert cli_main([*answer[:3], str(tmp_path / "s20"), *answer[4:]]) == 0
    assert f"note: {cut} of the 4 distinct passage(s) held more than the 20 tokens" in capsys.readouterr().err
    assert cli_main([*answer[:3], str(tmp_path / "s256"), *answer[4:], "--encode-missing"]) == 0  # all of them read
    assert "held more than" not in capsys.readouterr().err


def dynamic_rope_checkpoint(path, tokenizer):
    """A tiny Llama checkpoint of dynamic RoPE (whose caches cannot be composed) at `path`."""
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                               "rope_theta": 10000.0})
                     ).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_a_rope_type_that_cannot_be_composed_stores_nothing(tmp_path, llama_checkpoint, tokenizer, capsys):
    """`encode` and `answer --encode-missing` of a Llama checkpoint whose rope type makes composition inexact: one
    error line before any document is encoded, the store as it was (the answer failed only after encoding every
    passage into a space of its own)."""
    dynamic = dynamic_rope_checkpoint(tmp_path / "dynamic", tokenizer)
    store = tmp_path / "store"
    assert encode(llama_checkpoint, store, ROWS, tmp_path, "--max-document-length", "64") == 0
    files = {path: path.read_bytes() for path in store.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert encode(dynamic, store, ROWS, tmp_path, "--max-document-length", "64") == 2
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    assert cli_main(["answer", str(dynamic), "--store", str(store), "--questions", str(questions), "--output",
                     str(tmp_path / "p.jsonl"), "--encode-missing", "--no-progress", "--device", "cpu",
                     "--max-document-length", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 2 and err.count("rope_type 'dynamic'") == 2 and "Traceback" not in err
    assert {path: path.read_bytes() for path in store.rglob("*") if path.is_file()} == files


def test_verify_recompute_beside_a_model_whose_rope_type_is_refused(tmp_path, llama_checkpoint, tokenizer, capsys):
    """`verify --recompute 1 --model good --model dynamic`: the store is sound (exit 0); the dynamic-RoPE model,
    which the adapter refuses, made none of its spaces, so it reports none (it listed the good model's space as its
    own and "not recomputed", exit 1)."""
    dynamic = dynamic_rope_checkpoint(tmp_path / "dynamic", tokenizer)
    store = tmp_path / "store"
    assert encode(llama_checkpoint, store, ROWS, tmp_path, "--dtype", "fp32", "--max-document-length", "64") == 0
    capsys.readouterr()
    assert cli_main(["verify", "--store", str(store), "--no-progress", "--device", "cpu", "--recompute", "1",
                     "--model", str(llama_checkpoint), "--model", str(dynamic)]) == 0
    out = capsys.readouterr().out
    assert "not recomputed" not in out and out.count("recompute: space") == 1


# ------------------------------------------------------------------------------------- real weights: SmolLM2-135M
SMOLLM2_PASSAGE_TOKENS = 64


@pytest.fixture(scope="module")
def smollm2_checkpoint(smollm2, smollm2_block, tmp_path_factory):
    """SmolLM2-135M-Instruct (fp32) saved once as a block-attention checkpoint folder with its tokenizer (the
    documented route for a GGUF model: `to_block_attention(llama)`, the session's), and that block-attention model."""
    _, tokenizer = smollm2
    path = tmp_path_factory.mktemp("smollm2")
    model = smollm2_block
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model


def test_encode_and_answer_real_questions_with_smollm2(tmp_path, smollm2, smollm2_checkpoint, qa_rows, capsys):
    """`hf-readonce encode` + `answer` on SmolLM2 for three Disfl-QA questions, each over its own passage, and one
    over two passages (fp32 store): a row of one stored passage answers as transformers' `LlamaForCausalLM` reading
    passage + question; the two-passage row answers as the model composing the caches it encodes itself (the store
    round trip changes nothing)."""
    llama, tokenizer = smollm2
    checkpoint, model = smollm2_checkpoint
    by_id = {row["id"]: row for row in qa_rows}
    rows = [by_id[i] for i in ("disflqa-23", "disflqa-46", "disflqa-49")]
    two = {"id": "two", "question": rows[2]["question"], "contexts": [rows[1]["context"], rows[2]["context"]]}
    store = tmp_path / "store"
    assert encode(checkpoint, store, rows, tmp_path, "--dtype", "fp32", "--max-document-length",
                  str(SMOLLM2_PASSAGE_TOKENS)) == 0
    assert "encoded 3 document(s)" in capsys.readouterr().out
    preds = tmp_path / "preds.jsonl"
    assert cli_main(["answer", str(checkpoint), "--store", str(store), "--questions",
                     str(write_jsonl(tmp_path / "q.jsonl", [*rows, two])), "--output", str(preds), "--no-progress",
                     "--device", "cpu", "--max-answer-length", "8"]) == 0
    assert "answered 4 question(s) over 3 stored passage(s)" in capsys.readouterr().out
    predictions = {json.loads(line)["id"]: json.loads(line)["prediction_text"] for line in preds.open()}
    full = answer_with_full_prompt(llama, tokenizer, rows, max_document_length=SMOLLM2_PASSAGE_TOKENS,
                                   max_new_tokens=8)
    assert {k: v for k, v in predictions.items() if k != "two"} == full
    assert all(full.values())  # real answers compared (untuned SmolLM2 often answers this prompt with nothing)
    passages = [tokenizer(p, add_special_tokens=False, truncation=True, max_length=SMOLLM2_PASSAGE_TOKENS,
                          return_tensors="pt").input_ids for p in two["contexts"]]
    question = torch.tensor([question_ids(tokenizer, two["question"])])
    with torch.no_grad():
        fresh = model.generate(question, document_caches=[model.encode_documents(p) for p in passages],
                               max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert predictions["two"] == clean_answer(tokenizer.decode(fresh[0, question.shape[1]:], skip_special_tokens=True))
    assert predictions["two"]
