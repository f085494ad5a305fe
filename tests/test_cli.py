"""The CLI as a newcomer meets it: defaults recorded in the checkpoint, errors in the CLI's own words, baselines
printed beside scores, progress that counts what the summary counts."""

import json

import pytest

from hf_readonce.cli import main as cli_main

from .test_store import tiny_model, write_jsonl  # noqa: F401  (fixtures below reuse the store tests' helpers)


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
