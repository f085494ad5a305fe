"""The `hf-readonce` command line: encode (bad lines, repair, resume after a kill, two processes, ReadOnce), answer,
info, verify; the CLI as a newcomer meets it (defaults recorded in the checkpoint, errors in the CLI's own
words, baselines beside scores)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationMismatchError, RepresentationStore, content_hash
from tests.conftest import DATA_DIR, REPO_ROOT, tiny_model, write_jsonl


# ------------------------------------------------------------------------------------------------------ CLI
def test_cli_encode_bad_lines_info_verify_repair_answer(tmp_path, checkpoint, qa_rows, capsys):
    docs = tmp_path / "docs.jsonl"
    lines = [json.dumps(r).encode() for r in qa_rows[:20]]
    lines.insert(3, b"{not json")
    lines.insert(7, b'{"id": "latin1", "context": "caf\xe9"}')
    lines.insert(9, json.dumps({"id": "empty", "context": "  "}).encode())
    docs.write_bytes(b"\n".join(lines) + b"\n")
    store_dir = tmp_path / "store"
    common = [str(checkpoint), "--store", str(store_dir), "--no-progress", "--max-passage-length", "64",
              "--doc-stride", "16"]
    assert cli_main(["encode", *common, "--documents", str(docs), "--shard-size-mb", "0.05"]) == 0
    err = capsys.readouterr().err
    assert "line 4: not valid JSON" in err and "line 8: not valid UTF-8" in err and "line 10: empty document" in err
    unique = len({r["context"] for r in qa_rows[:20]})
    assert len(RepresentationStore(store_dir)) == unique
    assert cli_main(["encode", *common, "--documents", str(docs), "--strict"]) == 1  # bad lines -> exit 1
    assert f"already stored {unique}" in capsys.readouterr().out
    assert cli_main(["info", "--store", str(store_dir)]) == 0
    assert f"documents: {unique}" in capsys.readouterr().out
    assert cli_main(["verify", "--store", str(store_dir), "--no-progress"]) == 0
    capsys.readouterr()
    victim = sorted((store_dir / "shards").rglob("*.safetensors"))[-1]
    data = bytearray(victim.read_bytes())
    data[-4:] = b"\x00\xff\x00\xff"
    victim.write_bytes(bytes(data))
    assert cli_main(["verify", "--store", str(store_dir), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "CORRUPTED shards/" in out and victim.name in out
    assert cli_main(["encode", *common, "--documents", str(docs), "--repair"]) == 0
    assert "repair:" in capsys.readouterr().err
    assert cli_main(["verify", "--store", str(store_dir), "--no-progress"]) == 0
    assert len(RepresentationStore(store_dir)) == unique
    capsys.readouterr()
    assert cli_main(["info", "--store", str(store_dir)]) == 0  # the quarantined shard is counted apart
    out = capsys.readouterr().out
    assert "file(s) under quarantine/" in out
    info = RepresentationStore(store_dir).info()
    assert info["quarantine_files"] >= 1 and 0 < info["quarantine_bytes"] < info["bytes_on_disk"]
    assert info["quarantine_bytes"] == sum(f.stat().st_size for f in (store_dir / "quarantine").rglob("*")
                                           if f.is_file())
    questions = write_jsonl(tmp_path / "q.jsonl", qa_rows[:20])
    preds = tmp_path / "preds.jsonl"
    assert cli_main(["answer", str(checkpoint), "--store", str(store_dir), "--questions", str(questions),
                     "--output", str(preds), "--no-progress", "--max-question-length", "24"]) == 0
    assert "EM " in capsys.readouterr().out
    assert [json.loads(line)["id"] for line in preds.open()] == [r["id"] for r in qa_rows[:20]]
    # a question length the model's 128 positions cannot hold, or none at all, is refused by the option's name
    too_long = ["answer", str(checkpoint), "--store", str(store_dir), "--questions", str(questions), "--output",
                str(tmp_path / "p3.jsonl"), "--max-question-length", "129"]
    assert cli_main(too_long) == 2
    assert "--max-question-length 129 does not fit the model's 128 positions" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli_main([*too_long[:-1], "0"])
    assert usage.value.code == 2 and "--max-question-length: expected a whole number >= 1" in capsys.readouterr().err
    assert not (tmp_path / "p3.jsonl").exists()
    # bad input: a store path that is a file, a missing documents file, questions not stored
    assert cli_main(["encode", *common[:1], "--store", str(docs), "--documents", str(docs)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert cli_main(["encode", *common, "--documents", str(tmp_path / "absent.jsonl")]) == 2
    other = write_jsonl(tmp_path / "other.jsonl", [{**qa_rows[0], "context": "A passage that was never encoded."}])
    assert cli_main(["answer", str(checkpoint), "--store", str(store_dir), "--questions", str(other),
                     "--output", str(tmp_path / "p2.jsonl"), "--no-progress"]) == 2
    assert "not stored" in capsys.readouterr().err
    assert not (tmp_path / "p2.jsonl").exists()


def _cli(*args, **kwargs):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "hf_readonce.cli", *args], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _enwiki_docs(tmp_path, n):
    path = DATA_DIR / "enwiki" / "train.jsonl"
    if not path.is_file():
        pytest.skip("enwiki data not found")
    rows = []
    with path.open() as handle:
        for line in handle:
            row = json.loads(line)
            text = row.get("text") or row.get("context") or ""
            if text.strip():
                rows.append({"id": str(len(rows)), "text": text[:3000]})
            if len(rows) == n:
                break
    return write_jsonl(tmp_path / "docs.jsonl", rows), rows


def test_killed_encode_resumes_without_loss_or_duplicates(tmp_path, checkpoint):
    docs, rows = _enwiki_docs(tmp_path, 300)
    store_dir = tmp_path / "store"
    args = ["encode", str(checkpoint), "--documents", str(docs), "--text-field", "text", "--store", str(store_dir),
            "--no-progress", "--batch-size", "2", "--shard-size-mb", "0.01", "--max-passage-length", "64",
            "--doc-stride", "8"]
    proc = _cli(*args)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        index = store_dir / "index"
        if index.is_dir() and len(list(index.glob("*.json"))) >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "encode finished before it could be killed: make the corpus larger"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    partial = len(RepresentationStore(store_dir))
    assert 0 < partial < len(rows)
    proc = _cli(*args)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"already stored {partial}" in out
    store = RepresentationStore(store_dir)
    info = store.info()
    assert len(store) == len({r["text"] for r in rows}) and info["duplicates"] == 0 and store.verify().ok


def test_a_terminated_encode_stops_as_an_interrupted_one(tmp_path, checkpoint):
    """SIGTERM (what `timeout`, Slurm and Kubernetes send) stops `encode` as Ctrl-C does: one line, exit 143, the
    committed shards kept and intact."""
    docs, rows = _enwiki_docs(tmp_path, 300)
    store_dir = tmp_path / "store"
    proc = _cli("encode", str(checkpoint), "--documents", str(docs), "--text-field", "text", "--store",
                str(store_dir), "--no-progress", "--batch-size", "2", "--shard-size-mb", "0.01",
                "--max-passage-length", "64", "--doc-stride", "8")
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (store_dir / "index").is_dir() and len(list((store_dir / "index").glob("*.json"))) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "encode finished before it could be stopped: make the corpus larger"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    store = RepresentationStore(store_dir)
    assert proc.returncode == 143 and err.strip() == (f"hf-readonce encode: interrupted; committed shards are kept "
                                                      f"({len(store)} document(s) encoded by this run), re-run to "
                                                      "finish."), err
    assert 0 < len(store) < len(rows) and store.verify().ok


def test_two_processes_equal_one_process(tmp_path, checkpoint):
    docs, rows = _enwiki_docs(tmp_path, 40)
    common = ["--documents", str(docs), "--text-field", "text", "--no-progress", "--max-passage-length", "64",
              "--doc-stride", "8", "--dtype", "fp32"]
    single = _cli("encode", str(checkpoint), "--store", str(tmp_path / "one"), *common)
    out, err = single.communicate(timeout=300)
    assert single.returncode == 0, err
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    launch = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
         "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "hf_readonce.cli", "encode",
         str(checkpoint), "--store", str(tmp_path / "two"), *common],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "[rank 0/2]" in launch.stdout and "[rank 1/2]" in launch.stdout
    one, two = RepresentationStore(tmp_path / "one"), RepresentationStore(tmp_path / "two")
    assert len(one) == len(two) == len({r["text"] for r in rows}) and two.verify().ok
    a = {(e.space, e.content_hash) for e in one.entries()}
    assert a == {(e.space, e.content_hash) for e in two.entries()}
    for space, h in a:
        (entry,) = [e for e in one.entries() if e.content_hash == h]
        fingerprint = one._spaces[space].fingerprint
        settings_ = one._spaces[space].settings
        x, y = one.get(fingerprint, settings_, h), two.get(fingerprint, settings_, h)
        assert x.keys() == y.keys()
        for name in x:
            torch.testing.assert_close(x[name], y[name], rtol=1e-4, atol=1e-5)


def test_cli_encode_readonce_representations(tmp_path, tokenizer, qa_rows, capsys):
    from hf_readonce import ReadOnceBartConfig, ReadOnceBartForConditionalGeneration
    from hf_readonce.representations import ReadOnceBartAdapter

    torch.manual_seed(0)
    model = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
        compression_ratio=4, pad_token_id=0)).eval()
    model.save_pretrained(tmp_path / "ro")
    tokenizer.save_pretrained(tmp_path / "ro")
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:10])
    assert cli_main(["encode", str(tmp_path / "ro"), "--documents", str(docs), "--store", str(tmp_path / "s"),
                     "--no-progress", "--max-document-length", "64"]) == 0
    # a DeFormer-only option is refused, naming the family's own options
    for option in (["--max-passage-length", "64"], ["--doc-stride", "8"]):
        assert cli_main(["encode", str(tmp_path / "ro"), "--documents", str(docs), "--store", str(tmp_path / "s"),
                         "--no-progress", *option]) == 2
        err = capsys.readouterr().err
        assert f"{option[0]} does not apply to readonce_bart models" in err and "--max-document-length" in err, err
    store = RepresentationStore(tmp_path / "s")
    adapter = ReadOnceBartAdapter(model, tokenizer, max_document_length=64)
    text = qa_rows[0]["context"]
    stored = store.get(adapter.fingerprint(), adapter.settings(), content_hash(text))
    (expected,) = adapter.encode([text])
    assert stored["representations"].shape == expected["representations"].shape == (16, 32)  # 64 tokens / k=4
    torch.testing.assert_close(stored["representations"].float(), expected["representations"], atol=1e-2, rtol=0)
    with pytest.raises(RepresentationMismatchError):  # another k is another representation
        store.get(adapter.fingerprint(), ReadOnceBartAdapter(model, tokenizer, 64, compression_ratio=8).settings(),
                  content_hash(text))
    # k at inference (§5.2) from the command line: stored as its own setting
    assert cli_main(["encode", str(tmp_path / "ro"), "--documents", str(docs), "--store", str(tmp_path / "s"),
                     "--no-progress", "--max-document-length", "64", "--compression-ratio", "8"]) == 0
    k8 = ReadOnceBartAdapter(model, tokenizer, 64, compression_ratio=8)
    assert RepresentationStore(tmp_path / "s").get(k8.fingerprint(), k8.settings(),
                                                   content_hash(text))["representations"].shape == (8, 32)


def test_encode_groups_documents_by_length_unless_told_to_keep_the_input_order(tmp_path, checkpoint, monkeypatch):
    """`encode` encodes the documents read ahead longest first (`fill_store`'s `group_by_length`); with
    `--no-group-by-length` in input order, one batch read at a time. Both store the same documents."""
    import hf_readonce.representations as representations

    texts = [f"Passage {i}: " + "the mill on the river Ash " * (1 + (i * 5) % 7) for i in range(8)]
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": f"p{i}", "context": t} for i, t in enumerate(texts)])
    fill_store, calls = representations.fill_store, []

    def recording(adapter, store, documents, **kwargs):
        encode = adapter.encode
        adapter.encode = lambda batch: (calls.append([len(t) for t in batch]), encode(batch))[1]
        return fill_store(adapter, store, documents, **kwargs)

    monkeypatch.setattr(representations, "fill_store", recording)
    common = ["--no-progress", "--batch-size", "2", "--max-passage-length", "64", "--doc-stride", "16"]
    for store, option, order in (("grouped", [], sorted(map(len, texts), reverse=True)),
                                 ("plain", ["--no-group-by-length"], [len(t) for t in texts])):
        calls.clear()
        assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(tmp_path / store),
                         *common, *option]) == 0
        assert [length for call in calls for length in call] == order and len(calls) == 4, option
    stored = [sorted(e.content_hash for e in RepresentationStore(tmp_path / s).entries()) for s in ("grouped", "plain")]
    assert stored[0] == stored[1] == sorted(map(content_hash, texts))


def test_option_names_per_family():
    from hf_readonce.cli import build_parser

    parser = build_parser()
    common = ["answer", "m", "--store", "s", "--questions", "q", "--output", "o"]
    assert parser.parse_args(common + ["--n-best-size", "7"]).n_best_size == 7
    assert parser.parse_args(common).n_best_size is None  # 20 for extractive models; refused for causal LMs
    answer_help = parser._subparsers._group_actions[0].choices["answer"].format_help()
    assert "--n-best-size" in answer_help
    encode = parser.parse_args(["encode", "m", "--store", "s", "--documents", "d", "--max-document-length", "99"])
    assert (encode.max_document_length, encode.max_passage_length, encode.doc_stride) == (99, None, None)


# ------------------------------------------------------------------------------------------- newcomer's CLI
@pytest.fixture(scope="module")
def recorded_checkpoint(tmp_path_factory):
    """A tiny DeFormer whose config records its windowing and no-answer threshold, as the training pipeline does."""
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path

    path = tmp_path_factory.mktemp("recorded")
    model = tiny_model()
    model.config.max_question_length, model.config.max_passage_length, model.config.doc_stride = 20, 48, 8
    model.config.allow_no_answer, model.config.null_score_diff_threshold = True, 1.5
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(path)
    return path


ROWS = [
    {"id": "q1", "title": "Paris", "question": "Where is Paris?", "context": "Paris is the capital of France, a "
     "country in western Europe with many rivers and old towns.", "answers": {"text": ["France"],
                                                                               "answer_start": [24]}},
    {"id": "q2", "title": "Paris", "question": "What is the capital?", "context": "Paris is the capital of France, a "
     "country in western Europe with many rivers and old towns.", "answers": {"text": [], "answer_start": []}},
]


def test_encode_and_answer_default_to_the_checkpoint_settings(tmp_path, recorded_checkpoint, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", ROWS)
    store = tmp_path / "store"
    assert cli_main(["encode", str(recorded_checkpoint), "--documents", str(docs), "--store", str(store),
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "encoded 1 document(s)" in out  # two rows, one distinct passage
    (space,) = json.loads(json.dumps(__import__("hf_readonce").RepresentationStore(store).info()))["spaces"].values()
    assert (space["settings"]["max_passage_length"], space["settings"]["doc_stride"]) == (48, 8)
    preds = tmp_path / "preds.jsonl"
    assert cli_main(["answer", str(recorded_checkpoint), "--store", str(store), "--questions", str(docs),
                     "--output", str(preds), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "max_question_length 20, allow_no_answer True, null_score_diff_threshold 1.500" in out
    assert "baseline: always-empty" in out and "baseline: first-span" in out and "NoAns" in out
    assert cli_main(["answer", str(recorded_checkpoint), "--store", str(store), "--questions", str(docs),
                     "--output", str(preds), "--no-progress", "--no-allow-no-answer"]) == 0
    assert "allow_no_answer False" in capsys.readouterr().out


def test_answer_notes_the_questions_cut_to_max_question_length(tmp_path, recorded_checkpoint, tokenizer, capsys):
    """A question longer than `--max-question-length` (the checkpoint's recorded 20 by default) was cut to it in
    silence: a note on stderr now counts them, in the words of the note about passages cut."""
    long_question = ("Which country in western Europe with many rivers and old towns has Paris as its capital, "
                     "according to the passage?")
    assert len(tokenizer(long_question).input_ids) > 20
    questions = write_jsonl(tmp_path / "q.jsonl", [*ROWS, {**ROWS[0], "id": "q3", "question": long_question}])
    answer = ["answer", str(recorded_checkpoint), "--store", str(tmp_path / "store"), "--questions", str(questions),
              "--output", str(tmp_path / "p.jsonl"), "--no-progress", "--encode-missing"]
    assert cli_main(answer) == 0
    err = capsys.readouterr().err
    assert ("hf-readonce answer: note: 1 of the 3 question(s) held more than the 20 tokens read per question: they "
            "were cut to them, and the answers come from those tokens only (`--max-question-length` reads more, up "
            "to the model's positions)") in err
    assert cli_main([*answer, "--max-question-length", "64"]) == 0  # read whole: no note
    assert "question(s) held more" not in capsys.readouterr().err


def test_errors_speak_the_cli_language(tmp_path, recorded_checkpoint, capsys):
    absent = tmp_path / "nowhere"
    for command in (["info", "--store", str(absent)], ["verify", "--store", str(absent)]):
        assert cli_main(command) == 2
        err = capsys.readouterr().err
        assert f"no store at {absent}" in err and "hf-readonce encode" in err and "create=False" not in err
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    assert cli_main(["answer", str(recorded_checkpoint), "--store", str(absent), "--questions", str(questions),
                     "--output", str(tmp_path / "p.jsonl"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"no store at {absent}" in err and "--encode-missing" in err and "readonly" not in err
    assert not absent.exists()
    # a store that lacks the question's passage: the row's id and title are named, with the way out
    other = write_jsonl(tmp_path / "other.jsonl", [{**ROWS[0], "context": "Lyon is a city in France, on the Rhone."}])
    store = tmp_path / "store"
    assert cli_main(["encode", str(recorded_checkpoint), "--documents", str(other), "--store", str(store),
                     "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["answer", str(recorded_checkpoint), "--store", str(store), "--questions", str(questions),
                     "--output", str(tmp_path / "p.jsonl"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "question id 'q1', title 'Paris'" in err and "--encode-missing" in err


def test_answer_encode_missing_on_a_new_store_windows_as_the_checkpoint_records(tmp_path, recorded_checkpoint,
                                                                                  capsys):
    """`answer --encode-missing` into a store that does not exist yet needs no window options: it windows as the
    checkpoint records (48 / 8 here), as `encode` does, and the store then holds that space."""
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    store = tmp_path / "fresh"
    assert cli_main(["answer", str(recorded_checkpoint), "--store", str(store), "--questions", str(questions),
                     "--output", str(tmp_path / "p.jsonl"), "--no-progress", "--encode-missing"]) == 0
    capsys.readouterr()
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == len(ROWS)
    from hf_readonce.store import RepresentationStore

    (space,) = RepresentationStore(store, readonly=True).spaces()
    assert (space.settings["max_passage_length"], space.settings["doc_stride"]) == (48, 8)


def test_answer_encode_missing_stores_in_the_dtype_of_store_dtype(tmp_path, recorded_checkpoint, capsys):
    """`answer --encode-missing --store-dtype` stores in that dtype, as `summarize --encode-missing --store-dtype` and
    `encode --store-dtype` do (and as the Python answering functions' `store_dtype=`); `--dtype`, its other spelling,
    stores the same; without either, fp16."""
    questions = write_jsonl(tmp_path / "q.jsonl", ROWS)
    for number, (given, stored) in enumerate(((["--store-dtype", "fp32"], ["float32"]),
                                              (["--dtype", "fp32"], ["float32"]), ([], ["float16"]))):
        store = tmp_path / f"store{number}"
        assert cli_main(["answer", str(recorded_checkpoint), "--store", str(store), "--questions", str(questions),
                         "--output", str(tmp_path / f"p{number}.jsonl"), "--no-progress", "--encode-missing",
                         *given]) == 0
        capsys.readouterr()
        (space,) = RepresentationStore(store, readonly=True).info()["spaces"].values()
        assert space["dtypes"] == stored


def test_encode_store_dtype_and_its_other_spelling_dtype_store_alike(tmp_path, recorded_checkpoint, capsys):
    """`--store-dtype` is the storage dtype's option; `--dtype`, the spelling recorded commands use, is the same
    option: `encode` with either stores bfloat16 when given bf16."""
    documents = write_jsonl(tmp_path / "d.jsonl", ROWS)
    stored = {}
    for option in ("--store-dtype", "--dtype"):
        store = tmp_path / option.strip("-")
        assert cli_main(["encode", str(recorded_checkpoint), "--documents", str(documents), "--store", str(store),
                         "--no-progress", option, "bf16"]) == 0
        (space,) = RepresentationStore(store, readonly=True).info()["spaces"].values()
        stored[option] = space["dtypes"]
    capsys.readouterr()
    assert stored == {"--store-dtype": ["bfloat16"], "--dtype": ["bfloat16"]}


@pytest.mark.parametrize("option", ["--store-dtype", "--dtype"])
@pytest.mark.parametrize("command", ["answer", "summarize"])
def test_storage_dtype_without_encode_missing_is_refused(command, option, tmp_path, capsys):
    """`--store-dtype` (or `--dtype`) is the dtype `--encode-missing` stores in; without it nothing is stored, so the
    option (easily taken for the compute dtype) is refused by name before any model is loaded, and nothing is
    written."""
    rows = write_jsonl(tmp_path / "in.jsonl", ROWS)
    inputs = ["--questions", str(rows)] if command == "answer" else ["--documents", str(rows)]
    output = tmp_path / "out.jsonl"
    code = cli_main([command, str(tmp_path / "no-model"), "--store", str(tmp_path / "store"), *inputs,
                     "--output", str(output), "--no-progress", option, "fp32"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--store-dtype fp32 is the storage dtype of what --encode-missing stores" in err, err
    assert "--compute-dtype" in err and not output.exists()


def test_loading_a_bert_checkpoint_is_quiet_but_says_the_head_is_untrained(tmp_path):
    import os
    import subprocess
    import sys

    from transformers import AutoTokenizer, BertConfig, BertModel

    from hf_readonce.weights import minilm_path

    path = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(path)  # a base BERT with a pooler, no QA head
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(path)
    # a fresh process: transformers' log handler writes to the stderr it found at import time
    code = ("import sys; from hf_readonce.cli import load_qa_model; "
            "m, _ = load_qa_model(sys.argv[1], num_decomposed_layers=1); print(m.config.model_type)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deformer_bert"
    err = done.stderr
    assert "LOAD REPORT" not in err and "to instantiate a model of type" not in err and "pooler" not in err, err
    assert "no question-answering head" in err


def test_console_script_help_and_info_import_no_model(tmp_path):
    """`hf-readonce --help`, `info` and `verify` start without importing transformers' models (registration is
    deferred in the console script); a command that loads a model registers them."""
    code = (
        "import sys; sys.argv[0] = 'hf-readonce'\n"
        "from hf_readonce.cli import main\n"
        "from hf_readonce.store import RepresentationStore\n"
        "RepresentationStore(sys.argv[1])\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert main(['info', '--store', sys.argv[1]]) == 0\n"
        "assert main(['verify', '--store', sys.argv[1], '--no-progress']) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('transformers.models', 'hf_readonce.models')))\n"
        "print('HEAVY', heavy)\n"
        "import hf_readonce\n"
        "hf_readonce.register_models()\n"
        "from transformers import AutoConfig\n"
        "print('REGISTERED', AutoConfig.for_model('deformer_bert').model_type)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
    assert "REGISTERED deformer_bert" in done.stdout


# ------------------------------------------------------------------------------------------------ issue 38: newcomer
def test_input_that_holds_nothing_fails_before_a_store_is_made(tmp_path, checkpoint, qa_rows, capsys):
    """An empty documents file, or one without the --text-field, exits 1 saying so (naming the fields of the first
    valid line) and creates no store; an empty questions file exits 1 likewise."""
    store_dir = tmp_path / "store"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    assert cli_main(["encode", str(checkpoint), "--documents", str(empty), "--store", str(store_dir), "--strict",
                     "--no-progress"]) == 1
    assert f"{empty} holds no documents" in capsys.readouterr().err
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "a", "title": "t", "context": qa_rows[0]["context"]}])
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--text-field", "text", "--store",
                     str(store_dir), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "--text-field 'text'" in err and "'id', 'title', 'context'" in err and err.count("\n") == 1
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"id": "a", "context": "  "}])
    assert cli_main(["encode", str(checkpoint), "--documents", str(blank), "--store", str(store_dir)]) == 1
    assert "holds no documents" in capsys.readouterr().err
    assert not store_dir.exists()
    assert cli_main(["answer", str(checkpoint), "--questions", str(empty), "--store", str(store_dir), "--output",
                     str(tmp_path / "preds.jsonl"), "--no-progress"]) == 1
    assert f"{empty} holds no questions" in capsys.readouterr().err
    assert not store_dir.exists() and not (tmp_path / "preds.jsonl").exists()
    assert cli_main(["answer", str(checkpoint), "--questions", str(docs), "--store", str(store_dir), "--output",
                     str(tmp_path / "preds.jsonl")]) == 1
    assert "no usable question" in capsys.readouterr().err


def test_encode_exits_1_when_every_document_is_set_aside(tmp_path, checkpoint, capsys):
    """A file whose every document has no token after tokenization (zero-width characters) holds nothing to encode:
    exit 1 as an empty file, without `--strict`, leaving no store (nor the folders) it created, and a store that
    was there as it was; one encodable document beside them is exit 0."""
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "a", "context": "\u200b\u200b"},
                                                 {"id": "b", "context": "\u200b"}])
    common = ["--store", str(tmp_path / "s"), "--max-passage-length", "64", "--doc-stride", "8", "--no-progress"]
    new_store = tmp_path / "new" / "deeper" / "s"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(new_store),
                     *common[2:]]) == 1
    err = capsys.readouterr().err
    assert "set aside 2 document(s)" in err and "every document of" in err
    assert not (tmp_path / "new").exists()
    RepresentationStore(tmp_path / "s")  # a store that exists (empty) is kept
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 1
    assert "every document of" in capsys.readouterr().err and (tmp_path / "s" / "store.json").is_file()
    more = write_jsonl(tmp_path / "more.jsonl", [{"id": "a", "context": "\u200b"}, {"id": "c", "context": "Paris."}])
    assert cli_main(["encode", str(checkpoint), "--documents", str(more), *common]) == 0


def test_an_id_field_no_line_has_is_refused(tmp_path, checkpoint, qa_rows, capsys):
    """`--id-field` naming a field no document has named every document `line N` without a word: refused before a
    store is made (the default `id` may be absent)."""
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"context": r["context"]} for r in qa_rows[:2]])
    common = ["--store", str(tmp_path / "s"), "--max-passage-length", "64", "--doc-stride", "8", "--no-progress"]
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--id-field", "nope", *common]) == 2
    assert "--id-field 'nope': no line of" in capsys.readouterr().err and not (tmp_path / "s").exists()
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 0


def test_encode_reads_the_start_of_its_input_once_before_the_model(tmp_path, checkpoint, qa_rows, capsys,
                                                                    monkeypatch):
    """The checks before any model work (the text field found, a document present, `--id-field` on some line) read
    the input once, up to its first line; then the encoder reads it, and with the progress bar one more read counts
    its distinct documents. An XSum-style file without `context` is read to its end once to find `document`."""
    from hf_readonce.tasks import jsonl

    reads, iter_jsonl = [], jsonl.iter_jsonl

    def counting(path, problems=None):
        reads.append(0)
        for item in iter_jsonl(path, problems):
            reads[-1] += 1  # lines handed out by this read
            yield item

    monkeypatch.setattr(jsonl, "iter_jsonl", counting)
    rows = [{"id": f"d{i}", "context": r["context"]} for i, r in enumerate(qa_rows[:4])]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    common = ["--store", str(tmp_path / "s"), "--max-passage-length", "64", "--doc-stride", "8"]
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--id-field", "id", "--no-progress",
                     *common]) == 0
    assert reads == [1, 4]  # the checks stop at line 1; the encoder reads all
    reads.clear()
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 0
    assert reads == [1, 4, 4]  # the bar's count of distinct documents, then the encoder
    reads.clear()
    xsum = write_jsonl(tmp_path / "xsum.jsonl", [{"id": f"x{i}", "document": r["context"]} for i, r in
                                                 enumerate(qa_rows[:3])])
    assert cli_main(["encode", str(checkpoint), "--documents", str(xsum), "--no-progress", *common]) == 0
    assert reads == [3, 3] and "reading 'document'" in capsys.readouterr().err


def test_a_model_folder_without_config_is_named_before_anything_is_made(tmp_path, qa_rows, capsys):
    """An existing folder with no config.json (not a saved checkpoint) is said so, not with transformers' "Should
    have a `model_type` key"; no store is created."""
    (tmp_path / "empty").mkdir()
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:1])
    assert cli_main(["encode", str(tmp_path / "empty"), "--documents", str(docs), "--store", str(tmp_path / "s"),
                     "--no-progress"]) == 2
    assert "holds no config.json, so it is no saved checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_one_unreadable_line_is_named_and_verify_bad_documents_exit_2(tmp_path, checkpoint, qa_rows, capsys):
    """A file whose only line cannot be read says why (a line cut short here), not only "no JSON object line";
    `verify --recompute --documents` without usable texts exits 2 (a usage error: verify's 1 means a damaged store);
    without `--text-field`, a file with `document` but no `context` is read from `document`, said on stderr."""
    cut = tmp_path / "cut.jsonl"
    cut.write_text(json.dumps({"id": "a", "context": qa_rows[0]["context"]})[:40] + "\n")
    assert cli_main(["encode", str(checkpoint), "--documents", str(cut), "--store", str(tmp_path / "s"),
                     "--no-progress"]) == 1
    assert "no JSON object line; line 1: not valid JSON (" in capsys.readouterr().err
    assert cli_main(["answer", str(checkpoint), "--questions", str(cut), "--store", str(tmp_path / "s"), "--output",
                     str(tmp_path / "p.jsonl")]) == 1
    assert "holds no questions (no JSON object line; line 1: not valid JSON" in capsys.readouterr().err
    store = tmp_path / "store"
    documents = write_jsonl(tmp_path / "docs.jsonl", [{"id": r["id"], "document": r["context"]} for r in qa_rows[:2]])
    assert cli_main(["encode", str(checkpoint), "--documents", str(documents), "--store", str(store), "--dtype",
                     "fp32", "--max-passage-length", "64", "--doc-stride", "8", "--no-progress"]) == 0
    assert "reading 'document'" in capsys.readouterr().err and len(RepresentationStore(store, readonly=True)) == 2
    for extra in (["--text-field", "text"], []):
        bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "title": "no text"}])
        assert cli_main(["verify", "--store", str(store), "--recompute", "1", "--model", str(checkpoint),
                         "--documents", str(bad), *extra]) == 2
        assert "no line of" in capsys.readouterr().err


def test_a_missing_local_model_folder_is_named_before_any_hub_lookup(tmp_path, qa_rows, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:1])
    (tmp_path / "runs").mkdir()
    for name in (str(tmp_path / "no-such-model"), str(tmp_path / "runs" / "demo"), "./no/such/model"):
        assert cli_main(["encode", name, "--documents", str(docs), "--store", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err
        assert "does not exist" in err and "Repo id" not in err and "reference-deformer" in err, err
    os.chdir(tmp_path)  # a relative path whose first part is a local folder reads as a path, not a Hub id
    try:
        assert cli_main(["encode", "runs/demo", "--documents", str(docs), "--store", str(tmp_path / "s")]) == 2
        assert "runs/demo does not exist" in capsys.readouterr().err
    finally:
        os.chdir(REPO_ROOT)
    assert not (tmp_path / "s").exists()


def test_shipped_checkpoints_have_names(tmp_path, qa_rows, capsys):
    """`hf-readonce checkpoints` lists the names MODEL accepts; `encode`/`answer reference-deformer` use the shipped
    DeFormer, in float32 on the CPU (the checkpoint is saved in fp16)."""
    from hf_readonce.weights import reference_deformer_path, reference_qa_path

    assert cli_main(["checkpoints"]) == 0
    out = capsys.readouterr().out
    assert "reference-deformer" in out and str(reference_deformer_path()) in out and str(reference_qa_path()) in out
    assert cli_main(["checkpoints", "--path", "reference-qa"]) == 0
    assert capsys.readouterr().out.strip() == str(reference_qa_path())
    assert cli_main(["checkpoints", "--path", "nope"]) == 2
    rows = qa_rows[:6]
    docs, questions = write_jsonl(tmp_path / "docs.jsonl", rows), write_jsonl(tmp_path / "q.jsonl", rows)
    store_dir = tmp_path / "store"
    assert cli_main(["encode", "reference-deformer", "--documents", str(docs), "--store", str(store_dir),
                     "--no-progress"]) == 0
    capsys.readouterr()
    (space,) = RepresentationStore(store_dir).spaces()
    from hf_readonce.cli import load_qa_model

    model, _ = load_qa_model(str(reference_deformer_path()), device=torch.device("cpu"))
    assert model.dtype == torch.float32 and space.fingerprint == model.representation_fingerprint()
    assert cli_main(["answer", "reference-deformer", "--store", str(store_dir), "--questions", str(questions),
                     "--output", str(tmp_path / "preds.jsonl"), "--no-progress"]) == 0
    assert f"answered {len(rows)} question(s)" in capsys.readouterr().out


def test_a_store_of_another_compute_dtype_is_named(tmp_path, checkpoint, qa_rows, capsys):
    """States computed in float16 are another representation space than float32's; `answer` says which compute
    dtype wrote them and how to read them."""
    rows = qa_rows[:4]
    docs, questions = write_jsonl(tmp_path / "docs.jsonl", rows), write_jsonl(tmp_path / "q.jsonl", rows)
    store_dir = tmp_path / "store"
    common = ["--store", str(store_dir), "--no-progress", "--max-passage-length", "64", "--doc-stride", "16"]
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--compute-dtype", "float16",
                     *common]) == 0
    capsys.readouterr()
    answer = ["answer", str(checkpoint), "--questions", str(questions), "--output", str(tmp_path / "p.jsonl"),
              "--store", str(store_dir), "--no-progress"]
    assert cli_main(answer) == 2
    err = capsys.readouterr().err
    assert "computed in float16" in err and "--compute-dtype float16" in err, err
    assert cli_main([*answer, "--compute-dtype", "float16"]) == 0
    verify = ["verify", "--store", str(store_dir), "--no-progress", "--recompute", "1", "--model", str(checkpoint)]
    assert cli_main(verify) == 2
    assert "--compute-dtype float16" in capsys.readouterr().err
    assert cli_main([*verify, "--compute-dtype", "float16"]) == 0
    # the wider direction: float32 states, a bfloat16 run (weights loaded in bfloat16 cast back to float32 are not
    # the checkpoint's float32 weights, so the hint reloads the checkpoint in each dtype)
    fp32_store = tmp_path / "store32"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common[2:], "--store",
                     str(fp32_store)]) == 0
    capsys.readouterr()
    answer[answer.index(str(store_dir))] = str(fp32_store)
    assert cli_main([*answer, "--compute-dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert "computed in float32" in err and "--compute-dtype float32" in err, err


def test_no_progress_silences_the_weight_loading_bar(tmp_path, checkpoint, qa_rows):
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:2])
    errs = []
    for extra in ([], ["--no-progress"]):
        proc = _cli("encode", str(checkpoint), "--documents", str(docs), "--store", str(tmp_path / f"s{len(extra)}"),
                    "--max-passage-length", "64", "--doc-stride", "16", *extra)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        errs.append(err)
    assert "Loading weights" in errs[0]  # shown by default (so the check below can fail)
    assert "Loading weights" not in errs[1] and "it/s" not in errs[1], errs[1]


def test_help_says_what_the_commands_do(capsys):
    from hf_readonce.cli import build_parser

    text = build_parser().format_help()
    assert "fine-tune" not in text and "shipped DeFormer answers" in text
    with pytest.raises(SystemExit):
        cli_main(["encode", "--help"])
    out = capsys.readouterr().out
    assert "--compute-dtype" in out and "reference-deformer" in out
    # a family's own settings are options of encode, answer and summarize, and their --help lists them
    for command in ("encode", "answer", "summarize"):
        with pytest.raises(SystemExit):
            cli_main([command, "--help"])
        out = capsys.readouterr().out
        assert "--compression-ratio" in out and "readonce_bart: k, tokens per stored vector" in out, (command, out)
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    assert "--compression-ratio" not in capsys.readouterr().out


def test_a_hub_id_that_cannot_be_fetched_fails_at_once(tmp_path, qa_rows, capsys, monkeypatch):
    """Neither a folder nor a shipped name: without a Hub connection (and not cached), the command stops in one line
    at once instead of after huggingface_hub's retries (about 50 s offline); a misspelled shipped name is named
    before any Hub lookup."""
    import time as time_

    from huggingface_hub import constants

    import hf_readonce.cli as cli

    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:1])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for variable in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert cli._hub_unreachable(timeout=2) is not None
    start = time_.perf_counter()
    assert cli_main(["encode", "someone/summarizer", "--documents", str(docs), "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert time_.perf_counter() - start < 5
    assert "the Hub cannot be reached from this machine (127.0.0.1:9" in err and "check the name" in err, err
    assert not (tmp_path / "s").exists()
    assert cli_main(["answer", "reference-deformr", "--store", str(tmp_path / "s"), "--questions", str(docs),
                     "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "did you mean 'reference-deformer'?" in capsys.readouterr().err
    # a reachable endpoint (a listening socket here) is left to transformers; so is a proxy, and the offline mode
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert cli._hub_unreachable(timeout=2) is None
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert cli._hub_unreachable(timeout=2) is None
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert cli._hub_unreachable(timeout=2) is None


@pytest.mark.parametrize("command", ["encode", "answer"])
def test_a_job_whose_new_store_another_failed_job_removed_still_stores(tmp_path, checkpoint, qa_rows, capsys,
                                                                       monkeypatch, command):
    """Two jobs started together on one new `--store` (under folders that do not exist yet): the other one fails
    before storing anything, and its clean-up (`_remove_empty_store`, as `answer --encode-missing` and `encode` run
    it) removes the empty store and those folders after this job opened the store and before its first commit.
    This job creates the store anew and succeeds: its documents are stored, `verify` is clean. It failed with "the
    store no longer exists"."""
    from hf_readonce import cli
    from hf_readonce.store.store import RepresentationStore as Store

    top = tmp_path / "new"
    store = top / "stores" / "s"
    rows = qa_rows[:2]
    real_commit, removed = Store.commit_shard, []

    def commit_shard(self, *args, **kwargs):
        if not removed:  # the failed job's clean-up, between this job's open and its first commit
            cli._remove_empty_store(store, top)
            removed.append(not top.exists())
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(Store, "commit_shard", commit_shard)
    window = ["--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]
    if command == "encode":
        argv = ["encode", str(checkpoint), "--documents", str(write_jsonl(tmp_path / "d.jsonl", rows)),
                "--text-field", "context", "--store", str(store), *window]
    else:
        argv = ["answer", str(checkpoint), "--questions", str(write_jsonl(tmp_path / "q.jsonl", rows)), "--store",
                str(store), "--output", str(tmp_path / "p.jsonl"), "--encode-missing", *window]
    assert cli_main(argv) == 0, capsys.readouterr().err
    monkeypatch.undo()
    assert removed == [True]
    contexts = {row["context"] for row in rows}
    reopened = RepresentationStore(store, create=False)
    assert {entry.content_hash for entry in reopened.entries()} == {content_hash(c) for c in contexts}
    assert reopened.verify().ok and not reopened.verify().orphans
    if command == "answer":
        assert len((tmp_path / "p.jsonl").read_text().splitlines()) == len(rows)


def test_an_encode_that_fails_keeps_what_another_job_stored_in_its_new_store(tmp_path, checkpoint, capsys,
                                                                            monkeypatch):
    """`encode` of a model that cannot be loaded removes the new store it made only while it holds nothing, under
    the store's lock: a document another job commits into it just after the removal's first look found it empty is
    kept, and so is the store. The removal looked, then deleted the folder (`shutil.rmtree`) with whatever it held by
    then."""
    import hf_readonce.store.maintenance as maintenance
    from hf_readonce.store.store import RepresentationStore as Store

    docs = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "context": "The cat sat on the mat."}])
    unknown = tmp_path / "foo_model"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "foo"}))
    store = tmp_path / "new" / "s"
    stored = []

    def then_another_job_commits(look):
        def looked(*args, **kwargs):
            found = look(*args, **kwargs)
            if not stored:
                stored.append(Store(store).put("f" * 64, {"k": 1}, content_hash("theirs"), {"x": torch.ones(2)}))
            return found

        return looked

    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):  # as the removal was: its looks were done when it deleted the folder
        if os.fspath(path) == str(store):
            then_another_job_commits(lambda: None)()
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(maintenance, "_only_a_skeleton", then_another_job_commits(maintenance._only_a_skeleton))
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert cli_main(["encode", str(unknown), "--documents", str(docs), "--store", str(store)]) == 2
    monkeypatch.undo()
    assert stored == [True] and "model_type 'foo'" in capsys.readouterr().err
    kept = RepresentationStore(store, create=False)
    assert kept.get("f" * 64, {"k": 1}, content_hash("theirs"))["x"].tolist() == [1.0, 1.0] and kept.verify().ok
    assert cli_main(["encode", str(unknown), "--documents", str(docs), "--store", str(tmp_path / "other" / "s")]) == 2
    assert not (tmp_path / "other").exists()  # the folders it made go with the empty store, up to the first


def test_a_mistyped_model_or_option_gets_one_line_in_the_cli_words(tmp_path, qa_rows, capsys):
    """A misspelled shipped name is named with the closest shipped one (not transformers' advice to check the
    internet connection); a folder of an unknown model type points to `hf-readonce info`; usage errors are one line;
    both spellings of a storage dtype are read."""
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:1])
    store = tmp_path / "s"
    assert cli_main(["encode", "reference-deformr", "--documents", str(docs), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'reference-deformer'?" in err and "internet" not in err.split("Hub could not")[0], err
    unknown = tmp_path / "foo_model"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "foo"}))
    assert cli_main(["encode", str(unknown), "--documents", str(docs), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "model_type 'foo' is neither" in err and "deformer_bert" in err and "pip install" not in err, err
    assert not store.exists()  # the store these calls made for a model that cannot encode is removed again
    store.mkdir()
    (store / "mine.txt").write_text("not a store's file")
    assert cli_main(["encode", str(unknown), "--documents", str(docs), "--store", str(store)]) == 2
    assert (store / "mine.txt").read_text() == "not a store's file"  # a folder that existed is never removed
    assert "not a hf-readonce store" in capsys.readouterr().err
    existing = tmp_path / "existing"
    RepresentationStore(existing)  # an empty store the user made: kept, though empty
    assert cli_main(["encode", str(unknown), "--documents", str(docs), "--store", str(existing)]) == 2
    assert (existing / "store.json").is_file()
    capsys.readouterr()
    for argv in (["encode", "x", "--documents", str(docs), "--store", str(store), "--dtype", "float17"], ["encde"]):
        with pytest.raises(SystemExit) as stop:
            cli_main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--help` lists the options" in err and "usage" not in err, err
    from hf_readonce.cli import build_parser

    for option in ("--store-dtype", "--dtype"):
        for spelling in ("fp16", "float16"):
            parsed = build_parser().parse_args(["encode", "m", "--documents", "d", "--store", "s", option, spelling])
            assert parsed.store_dtype == "float16"


def test_a_reader_that_stops_early_is_no_error(monkeypatch, capsys):
    """`hf-readonce info | head -1`: the closed pipe ends the command quietly with status 141 (128 + SIGPIPE), not
    with an 'unexpected error' line."""
    import hf_readonce.cli as cli

    def stopped_reader(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_checkpoints", stopped_reader)
    monkeypatch.setattr(cli, "_silence_stdout", lambda: None)  # capsys' stdout has no descriptor to redirect
    assert cli_main(["checkpoints"]) == 141
    assert capsys.readouterr().err == ""


def test_demo_errors_are_one_line_and_take_hyphenated_options(tmp_path, capsys):
    """`demo` stops as the other commands do (`hf-readonce demo: error: ...`, status 2) and reads `--data-dir` as
    well as `--data_dir`; naming the `disfl_qa/` folder itself is understood."""
    for option in ("--data-dir", "--data_dir"):
        with pytest.raises(SystemExit) as stop:
            cli_main(["demo", option, str(tmp_path / "nowhere")])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("hf-readonce demo: error: ") and "nowhere/disfl_qa/validation.jsonl not found" in err, err
    folder = tmp_path / "data" / "disfl_qa"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("")
    with pytest.raises(SystemExit):
        cli_main(["demo", "--data-dir", str(folder)])
    assert f"{folder}/validation.jsonl not found" in capsys.readouterr().err


def _demo_error(argv, capsys) -> str:
    """The one line `hf-readonce demo ARGV` stops with (status 2)."""
    with pytest.raises(SystemExit) as stop:
        cli_main(["demo", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hf-readonce demo: error: ") and err.count("\n") == 1, err
    return err


def test_demo_counts_are_whole_numbers_of_at_least_one(tmp_path, capsys):
    """`--max_eval_samples 0` evaluated every question and -5 dropped the last five: the demo's counts (and the
    learning rate) are usage errors naming the option unless >= 1 (> 0), in both spellings, before anything loads."""
    for option in ("--max_eval_samples", "--max-eval-samples", "--speed-eval-samples", "--speed-rounds",
                   "--max-train-samples", "--max-steps", "--batch-size", "--num-decomposed-layers"):
        for value in ("0", "-5", "2.5"):
            err = _demo_error([option, value, "--data-dir", str(tmp_path)], capsys)
            name = option.lstrip("-").replace("_", "-")
            assert f"--{name}/--{name.replace('-', '_')}" in err and "whole number >= 1" in err, err
    for value in ("0", "-1e-4", "nan"):
        assert "--learning-rate/--learning_rate: expected a number > 0" in _demo_error([f"--learning-rate={value}"],
                                                                                      capsys)


def test_demo_refuses_an_output_dir_that_holds_files(tmp_path, capsys):
    """`--output-dir` with files in it (a user's own model) was overwritten: refused, nothing touched, before any
    data or model is read."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("{}")
    err = _demo_error(["--output-dir", str(tmp_path / "mine"), "--data-dir", str(tmp_path / "absent")], capsys)
    assert "is not an empty folder" in err and (tmp_path / "mine" / "config.json").read_text() == "{}"


def test_demo_refuses_a_model_that_is_not_a_deformer_and_a_missing_one(tmp_path, capsys, monkeypatch):
    """`--model` must be a DeFormer (a ReadTwice or ReadOnce checkpoint was run as one, or crashed), `--teacher` a
    full BERT QA model; a path that does not exist gets encode's message. Only validation.jsonl is needed without
    `--distill` (train.jsonl is read for distillation and threshold tuning only)."""
    folder = tmp_path / "data" / "disfl_qa"
    folder.mkdir(parents=True)
    (folder / "validation.jsonl").write_text("")
    data = ["--data-dir", str(folder.parent)]
    readtwice = tmp_path / "readtwice"
    readtwice.mkdir()
    (readtwice / "config.json").write_text(json.dumps({"model_type": "readtwice_bert"}))
    for model, found in ((readtwice, "readtwice_bert"), (REPO_ROOT / "tests/fixtures/v0_1_0/readonce_bart",
                                                         "readonce_bart")):
        err = _demo_error([*data, "--model", str(model)], capsys)
        assert f"--model {model} is a {found} checkpoint, not a DeFormer" in err, err
    untyped = tmp_path / "untyped"
    untyped.mkdir()
    (untyped / "config.json").write_text("{}")  # the line read "is a checkpoint without a model_type checkpoint"
    err = _demo_error([*data, "--model", str(untyped)], capsys)
    assert f"--model {untyped} is a checkpoint whose config.json records no model_type, not a DeFormer" in err, err
    err = _demo_error([*data, "--model", str(tmp_path / "nothing")], capsys)
    assert "--model: model" in err and "does not exist (no such folder; shipped checkpoints:" in err, err
    monkeypatch.chdir(tmp_path)  # `runs/nothing` could be a Hub id: offline, the Hub cannot provide it
    err = _demo_error([*data, "--model", "runs/nothing"], capsys)
    assert "--model: cannot load model 'runs/nothing': no such folder, not a shipped checkpoint" in err, err
    err = _demo_error([*data, "--teacher", str(REPO_ROOT / "tests/fixtures/v0_1_0/deformer_bert")], capsys)
    assert "--teacher" in err and "is a deformer_bert checkpoint, not a full BERT extractive-QA model" in err, err
    # --distill trains on train.jsonl: its absence is said, with why
    err = _demo_error([*data, "--distill"], capsys)
    assert "train.jsonl not found (--distill trains on it" in err, err



def test_demo_refuses_a_deformer_folder_without_a_tokenizer(tmp_path, capsys, monkeypatch):
    """A DeFormer saved without its tokenizer stopped with an "unexpected" error from inside transformers: the line
    names the folder, says it holds no tokenizer and how to save one, before the demo starts."""
    import hf_readonce.recipes.demo as demo

    folder = tmp_path / "data" / "disfl_qa"
    folder.mkdir(parents=True)
    (folder / "validation.jsonl").write_text("")
    model = tmp_path / "no-tokenizer"
    tiny_model().save_pretrained(model)
    capsys.readouterr()  # (save_pretrained's progress bar)
    monkeypatch.setattr(demo, "run", lambda *args: pytest.fail("the demo ran without a tokenizer"))
    err = _demo_error(["--data-dir", str(folder.parent), "--model", str(model)], capsys)
    assert f"--model: the folder {model} holds no tokenizer" in err, err
    assert "save the tokenizer next to the model (`tokenizer.save_pretrained(" in err and "unexpected" not in err, err

def test_demo_labels_describe_the_model_given(tmp_path, capsys, monkeypatch):
    """A DeFormer that is not the shipped reference is printed as itself (not "the reference DeFormer", not
    "shipped reference"); a threshold its config does not record is not said to be tuned on "?" questions; the
    teacher's recorded scores, on every validation question, are left out beside scores of a subset."""
    from transformers import AutoTokenizer

    import hf_readonce.recipes.demo as demo
    from hf_readonce.weights import minilm_path

    folder = tmp_path / "data" / "disfl_qa"
    folder.mkdir(parents=True)
    (folder / "validation.jsonl").write_text("")
    model = tmp_path / "my-deformer"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "deformer_bert"}))
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(model)  # the demo checks it holds a tokenizer
    scores = {"exact_match": 10.0, "f1": 20.0}
    metrics = {"num_decomposed_layers": 2, "eval_questions": 12, "eval_passages": 5, "cached_exact_match": 10.0,
               "cached_f1": 20.0, "baselines": {"always_empty": scores}, "null_score_diff_threshold": 0.0,
               "speed_questions": 6, "speedup_precomputed": 1.5, "flop_ratio_precomputed": 1.4,
               "speedup_including_encoding": 1.1, "flop_ratio_including_encoding": 1.0}
    monkeypatch.setattr(demo, "run", lambda *args: dict(metrics))
    demo.main(["--data-dir", str(folder.parent), "--model", str(model), "--max_eval_samples", "12"])
    out = capsys.readouterr().out
    assert f"the DeFormer ({model})" in out and f"DeFormer k=2 ({model})" in out
    assert "reference" not in out and "tuned on ?" not in out and "?" not in out, out
    assert "No-answer threshold 0.000, the default: the checkpoint records none." in out
    assert "full MiniLM (teacher, recorded)" not in out
    assert "The teacher's recorded scores, on all 1785 validation questions, are left out: 12 were answered" in out
    (model / "config.json").write_text(json.dumps({"model_type": "deformer_bert", "null_score_diff_threshold": 1.5}))
    metrics["null_score_diff_threshold"] = 1.5
    demo.main(["--data-dir", str(folder.parent), "--model", str(model)])
    assert "No-answer threshold 1.500, recorded in the checkpoint." in capsys.readouterr().out
    # the shipped reference, on as many questions as its teacher's record: labelled as such, the teacher beside
    metrics["eval_questions"] = 1785
    demo.main(["--data-dir", str(folder.parent), "--model", "reference-deformer"])
    out = capsys.readouterr().out
    assert "the reference DeFormer (" in out and "DeFormer k=2 (shipped reference)" in out
    assert "full MiniLM (teacher, recorded)" in out and "left out" not in out
    assert "tuned on 597 held-out Disfl-QA train questions" in out and "The shipped DeFormer was distilled" in out


def test_gold_answers_as_a_list_of_strings_are_scored(tmp_path, checkpoint, qa_rows, capsys):
    """`"answers": ["Paris"]` is scored like SQuAD's `{"text": ["Paris"]}`; answers in a shape the CLI cannot read
    are said, not skipped in silence."""
    rows = qa_rows[:3]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    store = tmp_path / "store"
    common = ["--store", str(store), "--no-progress", "--max-passage-length", "64", "--doc-stride", "16"]
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 0
    answer = ["answer", str(checkpoint), "--output", str(tmp_path / "p.jsonl"), *common]
    outputs = {}
    for name, shape in (("squad", lambda a: a), ("list", lambda a: list(a["text"])),
                        ("other", lambda a: {"answer": a["text"]}),
                        ("string", lambda a: {"text": "Paris"})):  # a text, not a list: said, not a crash
        questions = write_jsonl(tmp_path / f"{name}.jsonl", [{**r, "answers": shape(r["answers"])} for r in rows])
        capsys.readouterr()
        assert cli_main([*answer, "--questions", str(questions)]) == 0
        outputs[name] = capsys.readouterr()
    scores = [line for line in outputs["squad"].out.splitlines() if " EM " in line]
    assert scores and scores == [line for line in outputs["list"].out.splitlines() if " EM " in line]
    assert " EM " not in outputs["other"].out and "3 of 3 question(s) carry no gold answers" in outputs["other"].err
    assert " EM " not in outputs["string"].out and "3 of 3 question(s) carry no gold answers" in outputs["string"].err
    assert f"(question {rows[0]['id']}: 'answers' needs a sequence 'text')" in outputs["string"].err


def test_answer_over_a_store_that_lost_its_index_points_to_repair(tmp_path, checkpoint, qa_rows, capsys):
    """The passages are on disk but no manifest lists them: the "not stored" error says so and names `--repair`."""
    rows = qa_rows[:3]
    docs, questions = write_jsonl(tmp_path / "docs.jsonl", rows), write_jsonl(tmp_path / "q.jsonl", rows)
    store = tmp_path / "store"
    common = ["--store", str(store), "--no-progress", "--max-passage-length", "64", "--doc-stride", "16"]
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 0
    for manifest in (store / "index").glob("*.json"):
        manifest.unlink()
    capsys.readouterr()
    assert cli_main(["answer", str(checkpoint), "--questions", str(questions), "--output", str(tmp_path / "p.jsonl"),
                     *common]) == 2
    err = capsys.readouterr().err
    assert "not stored" in err and "its index does not list" in err and "--repair" in err, err


def test_repair_names_the_space_of_another_model_it_cannot_recompute(tmp_path, checkpoint, tokenizer, capsys):
    """`encode --repair` drops damaged documents from every space; it recomputes its own model's and names the
    others (fingerprint and settings: a space the repair emptied is no longer in `info`) and exits 1."""
    from hf_readonce.representations import DeformerBertAdapter, fill_store
    from hf_readonce.store import space_key

    rows = [{"id": f"d{i}", "context": f"Passage {i} tells of the old mill on the river Ash and its miller."}
            for i in range(3)]
    docs, store_dir = write_jsonl(tmp_path / "docs.jsonl", rows), tmp_path / "store"
    args = ["encode", str(checkpoint), "--documents", str(docs), "--store", str(store_dir), "--no-progress",
            "--max-passage-length", "64", "--doc-stride", "8", "--dtype", "fp32"]
    assert cli_main(args) == 0
    other = DeformerBertAdapter(tiny_model(seed=1), tokenizer, max_passage_length=32, doc_stride=8)
    fill_store(other, RepresentationStore(store_dir), [r["context"] for r in rows], store_dtype="fp32")
    other_key = space_key(other.fingerprint(), other.settings())
    for shard in (store_dir / "shards").rglob("*.safetensors"):  # the last document's bytes, in both spaces
        data = bytearray(shard.read_bytes())
        data[-10] ^= 0xFF
        shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli_main(args + ["--repair"]) == 1
    err = capsys.readouterr().err
    import re

    assert re.search(r"repair: \d+ intact document\(s\) rewritten, \d+ dropped in 2 representation spaces", err)
    found = re.search(rf"(\d+) document\(s\) dropped from space {other_key[:16]} \(deformer_bert, fingerprint "
                      rf"{other.fingerprint()[:16]}\.\.\. settings ", err)
    assert found and "run `encode --repair` with that model" in err
    store = RepresentationStore(store_dir)
    assert len(list(store.entries(other.fingerprint(), other.settings()))) == 3 - int(found.group(1))
    assert len(store) == 3 + 3 - int(found.group(1)) and store.verify().ok  # its own space recomputed in full


def test_frictions_a_newcomer_met(tmp_path, qa_rows, capsys):
    """`answer --encode-missing` on a new store with a checkpoint that records no window takes encode's window; one
    of `--max-passage-length` / `--doc-stride` alone is completed from the store; a store whose index lost its
    manifest is not called empty; `encode --dtype` over documents stored in another dtype says it keeps them; a
    device the machine lacks creates no store; the Hub ids `checkpoints` prints name the local copies; --version."""
    import torch
    from transformers import AutoTokenizer

    from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
    from hf_readonce.weights import REFERENCE_DEFORMER, minilm_path

    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:6])
    questions = write_jsonl(tmp_path / "q.jsonl", qa_rows[:6])
    output = tmp_path / "p.jsonl"
    torch.manual_seed(0)  # a checkpoint that records no window, with room for encode's default one (256)
    checkpoint = tmp_path / "model"
    DeformerBertForQuestionAnswering(DeformerBertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=320, num_decomposed_layers=2)).save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(checkpoint)
    new = tmp_path / "new"
    assert cli_main(["answer", str(checkpoint), "--store", str(new), "--questions", str(questions), "--output",
                     str(output), "--encode-missing", "--no-progress"]) == 0
    out = capsys.readouterr().out
    passages = len({r["context"] for r in qa_rows[:6]})
    assert "stored states of max_passage_length 256, doc_stride 64" in out
    assert f"{passages} stored passage(s) (--encode-missing encoded {passages} of these passages first)" in out, out
    space = RepresentationStore(new).spaces()[0]
    assert (space.settings["max_passage_length"], space.settings["doc_stride"]) == (256, 64)
    assert cli_main(["encode", str(checkpoint), "--store", str(new), "--documents", str(docs), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    for given in (["--max-passage-length", "64"], ["--doc-stride", "16"]):
        assert cli_main(["answer", str(checkpoint), "--store", str(new), "--questions", str(questions), "--output",
                         str(output), "--no-progress", *given]) == 0
        assert "stored states of max_passage_length 64, doc_stride 16" in capsys.readouterr().out
    assert cli_main(["answer", str(checkpoint), "--store", str(new), "--questions", str(questions), "--output",
                     str(output), "--no-progress", "--max-passage-length", "99"]) == 2
    assert "(num_decomposed_layers=2, max_passage_length=99); it holds" in capsys.readouterr().err
    # a lost manifest: the shard is still there, the message says so instead of "it is empty"
    damaged = tmp_path / "damaged"
    assert cli_main(["encode", str(checkpoint), "--store", str(damaged), "--documents", str(docs),
                     "--no-progress"]) == 0
    for manifest in (damaged / "index").glob("*.json"):
        manifest.write_text('{"garbage": 1}')
    capsys.readouterr()
    assert cli_main(["answer", str(checkpoint), "--store", str(damaged), "--questions", str(questions), "--output",
                     str(output), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "it is empty" not in err and "its index does not list" in err and "--repair" in err, err
    # --store-dtype (here by its other spelling, --dtype) over documents stored in another dtype
    assert cli_main(["encode", str(checkpoint), "--store", str(new), "--documents", str(docs), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16", "--dtype", "fp32"]) == 0
    err = capsys.readouterr().err  # the option as its help spells it, not the torch name it is read as
    assert "already stored as float16 and are kept as they are; --store-dtype fp32 applies to newly encoded ones" \
        in err, err
    if not torch.cuda.is_available():
        assert cli_main(["encode", str(checkpoint), "--store", str(tmp_path / "gpu"), "--documents", str(docs),
                         "--device", "cuda", "--no-progress"]) == 2
        assert "no cuda device" in capsys.readouterr().err and not (tmp_path / "gpu").exists()
    # a plain BERT read as a family's model it was not trained as is said to be one (it answered below always-empty)
    assert cli_main(["encode", "reference-qa", "--store", str(tmp_path / "qa"), "--documents", str(docs),
                     "--no-progress"]) == 0
    assert "is a plain bert checkpoint, read here as a deformer_bert model" in capsys.readouterr().err
    from hf_readonce.cli import _resolve_model

    assert _resolve_model(REFERENCE_DEFORMER.repo_id) == _resolve_model("reference-deformer")
    with pytest.raises(SystemExit) as stop:
        cli_main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("hf-readonce ")


def test_an_output_that_is_the_input_is_refused_and_bad_lines_say_why(tmp_path, checkpoint, qa_rows, capsys):
    """`--output` naming the `--questions` (or `--documents`) file would replace the input by the output: refused
    before anything runs, the input unchanged. An unknown option is named in the command's own words; a set-aside
    line says what is wrong with its field (absent, null, not a string, blank)."""
    rows = qa_rows[:2]
    questions = write_jsonl(tmp_path / "q.jsonl", rows)
    before = questions.read_text()
    (tmp_path / "link.jsonl").symlink_to(questions)
    for output in (questions, tmp_path / "link.jsonl"):
        assert cli_main(["answer", str(checkpoint), "--store", str(tmp_path / "s"), "--questions", str(questions),
                         "--output", str(output), "--encode-missing", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "is the --questions file" in err and len(err.strip().splitlines()) == 1, err
    assert questions.read_text() == before and not (tmp_path / "s").exists()
    assert cli_main(["summarize", str(checkpoint), "--store", str(tmp_path / "s"), "--documents", str(questions),
                     "--output", str(questions)]) == 2
    assert "is the --documents file" in capsys.readouterr().err and questions.read_text() == before
    # nor a path inside the store (its store.json or index files would be overwritten), through a link as well
    store = tmp_path / "stored"
    assert cli_main(["answer", str(checkpoint), "--store", str(store), "--questions", str(questions), "--output",
                     str(tmp_path / "outside.jsonl"), "--encode-missing", "--no-progress", "--max-passage-length", "64",
                     "--doc-stride", "16"]) == 0
    (tmp_path / "store_link").symlink_to(store)
    marker = (store / "store.json").read_bytes()
    for command, option in (("answer", "--questions"), ("summarize", "--documents")):
        for output in (store / "store.json", tmp_path / "store_link" / "preds.jsonl"):
            capsys.readouterr()
            assert cli_main([command, str(checkpoint), "--store", str(store), option, str(questions), "--output",
                             str(output), "--no-progress"]) == 2
            assert "is inside --store" in capsys.readouterr().err
    assert (store / "store.json").read_bytes() == marker and not (store / "preds.jsonl").exists()

    with pytest.raises(SystemExit) as stop:
        cli_main(["verify", "--store", str(tmp_path / "s"), "--bogus"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("hf-readonce verify: error: unrecognized arguments: --bogus")

    bad = [{"id": "a", "question": "Who?", "context": None}, {"id": "b", "question": 5, "context": "Text."},
           {"id": "c", "question": "Who?"}, {"id": "d", "question": " ", "context": "Text."}, rows[0]]
    assert cli_main(["answer", str(checkpoint), "--store", str(tmp_path / "s"), "--questions",
                     str(write_jsonl(tmp_path / "bad.jsonl", bad)), "--output", str(tmp_path / "p.jsonl"),
                     "--encode-missing", "--no-progress", "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    err = capsys.readouterr().err
    for line, reason in ((1, "'context' is null"), (2, "'question' is of type int, not a string"),
                         (3, "no 'context' field"), (4, "'question' is blank")):
        assert f"line {line}: {reason}" in err, err


def test_answer_encode_missing_names_the_window_it_took_and_the_checkpoints_limit(tmp_path, checkpoint, capsys):
    """`answer --encode-missing` with nothing stored, on a checkpoint with fewer positions than the default window
    (256), said "`max_passage_length` must be in [2, 128] ..., got 256", a value the user never typed: it now says
    the window is the default one, the checkpoint's limit and the option to pass; an option the user typed is named
    as typed; no store is left behind."""
    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "Who wrote Emma?",
                                                    "context": "Emma is a novel by Jane Austen."}])
    common = ["answer", str(checkpoint), "--store", str(tmp_path / "store"), "--questions", str(questions),
              "--output", str(tmp_path / "p.jsonl"), "--encode-missing", "--no-progress"]
    assert cli_main(common) == 2
    err = capsys.readouterr().err
    assert ("nothing of this model is stored yet, so --encode-missing windows the passages as `hf-readonce encode` "
            "would: with windows of 256 tokens, the default (the checkpoint records no `max_passage_length`), which "
            "do not fit this checkpoint's 128 passage positions") in err
    assert err.rstrip().endswith("pass `max_passage_length` (--max-passage-length) of at most 128.") and "got" not in err
    assert cli_main(common + ["--max-passage-length", "200"]) == 2
    assert "error: --max-passage-length must be in [2, 128]" in capsys.readouterr().err
    assert cli_main(common + ["--max-passage-length", "32"]) == 2
    err = capsys.readouterr().err
    assert "with a stride of 64 tokens, the default (the checkpoint records no `doc_stride`)" in err
    assert "pass `doc_stride` (--doc-stride) of at most 30." in err
    assert not (tmp_path / "store").exists()
    assert cli_main(common + ["--max-passage-length", "128"]) == 0
