"""The DeFormer `question-answering` pipeline: same answers as hf-readonce's own QA path (windows, n-best, no-answer
rule), passage states computed once per context for all the questions of a call, HF's argument names and output
format, and clear errors for bad input."""

import pytest

from hf_readonce.models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline
from hf_readonce.tasks.question_answering import (
    build_features,
    encode_windows,
    postprocess_qa_predictions,
    predict_cached,
)
from tests.conftest import tiny_model

CONTEXTS = [
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to unite "
    "some of the best blessings of existence; and had lived nearly twenty-one years in the world with very little "
    "to distress or vex her. She was the youngest of the two daughters of a most affectionate, indulgent father.",
    "Persuasion is the last novel fully completed by Jane Austen. It was published at the end of 1817, six months "
    "after her death.",
]
QUESTIONS = [["Who was handsome, clever and rich?", "How old was Emma?", "Who was her father?"],
             ["Who wrote Persuasion?", "When was it published?"]]
WINDOWS = {"max_passage_len": 24, "doc_stride": 8, "max_question_len": 16}


def package_answers(model, tokenizer, questions, context, max_answer_len, allow_no_answer, threshold=0.0):
    examples = [{"id": str(i), "question": q, "context": context} for i, q in enumerate(questions)]
    features, windows, _ = build_features(examples, tokenizer, max_question_length=WINDOWS["max_question_len"],
                                          max_passage_length=WINDOWS["max_passage_len"],
                                          doc_stride=WINDOWS["doc_stride"])
    logits = predict_cached(model, features, encode_windows(model, windows))
    predictions = postprocess_qa_predictions(examples, features, windows, logits, max_answer_length=max_answer_len,
                                             allow_no_answer=allow_no_answer, null_score_diff_threshold=threshold)
    return [predictions[str(i)] for i in range(len(questions))], len(windows[0])


@pytest.fixture(scope="module")
def qa(tokenizer):
    return DeformerQuestionAnsweringPipeline(model=tiny_model(), tokenizer=tokenizer)


@pytest.mark.parametrize("handle_impossible_answer,threshold", [(False, None), (True, None), (True, -1e6)])
def test_answers_equal_the_package_qa_path(qa, tokenizer, handle_impossible_answer, threshold):
    extra = {} if threshold is None else {"null_score_diff_threshold": threshold}
    for context, questions in zip(CONTEXTS, QUESTIONS):
        got = qa(question=questions, context=context, max_answer_len=6,
                 handle_impossible_answer=handle_impossible_answer, **WINDOWS, **extra)
        expected, num_windows = package_answers(qa.model, tokenizer, questions, context, 6, handle_impossible_answer,
                                                threshold or 0.0)
        assert [answer["answer"] for answer in got] == expected
        for answer in got:
            assert set(answer) == {"score", "start", "end", "answer"}
            assert context[answer["start"]:answer["end"]] == answer["answer"]
            assert 0.0 <= answer["score"] <= 1.0
    assert num_windows > 1  # the first context is windowed: answers were compared across windows
    if threshold == -1e6:
        assert expected == [""] * len(expected) and got[0] == {"score": got[0]["score"], "start": 0, "end": 0,
                                                               "answer": ""}


def test_passage_states_computed_once_per_context_for_every_question(qa, tokenizer, monkeypatch):
    encoded_rows, original = [], qa.model.encode_passages

    def counting(input_ids, **kwargs):
        encoded_rows.append(input_ids.shape[0])
        return original(input_ids, **kwargs)

    monkeypatch.setattr(qa.model, "encode_passages", counting)
    windows, more = (len(qa.preprocess({"context": c, "questions": ["q"]}, **WINDOWS)["window_ids"]) for c in CONTEXTS)
    questions = QUESTIONS[0] + QUESTIONS[1]
    contexts = [CONTEXTS[0]] * 3 + [CONTEXTS[1]] * 2
    out = qa(question=questions, context=contexts, **WINDOWS)  # one context per question: grouped by context
    assert len(out) == 5 and sum(encoded_rows) == windows + more  # each window once, not once per question
    encoded_rows.clear()
    single = qa(question=QUESTIONS[0][1], context=CONTEXTS[0], **WINDOWS)
    assert single == out[1] and sum(encoded_rows) == windows
    # the dict forms give the same answers
    assert qa({"question": QUESTIONS[0][1], "context": CONTEXTS[0]}, **WINDOWS) == single
    assert qa([{"question": q, "context": c} for q, c in zip(questions, contexts)], **WINDOWS) == out


def test_top_k_sorted_distinct_spans(qa):
    out = qa(question=QUESTIONS[0], context=CONTEXTS[0], top_k=4, max_answer_len=5, **WINDOWS)
    assert len(out) == 3 and all(len(answers) == 4 for answers in out)
    for answers in out:
        scores = [a["score"] for a in answers]
        assert scores == sorted(scores, reverse=True)
        assert len({(a["start"], a["end"]) for a in answers}) == 4
        assert all(len(qa.tokenizer(a["answer"], add_special_tokens=False)["input_ids"]) <= 5 for a in answers)
    top1 = qa(question=QUESTIONS[0], context=CONTEXTS[0], max_answer_len=5, **WINDOWS)
    assert [answers[0] for answers in out] == top1


def test_defaults_come_from_the_checkpoint(tokenizer):
    model = tiny_model()
    model.config.max_question_length, model.config.max_passage_length, model.config.doc_stride = 16, 24, 8
    model.config.allow_no_answer, model.config.null_score_diff_threshold = True, -1e6
    pipe = DeformerQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    assert pipe._window_settings() == (16, 24, 8)
    assert pipe(question="How old was Emma?", context=CONTEXTS[0])["answer"] == ""  # the recorded no-answer rule
    assert pipe(question="How old was Emma?", context=CONTEXTS[0], handle_impossible_answer=False)["answer"]


def test_bad_input_raises_naming_the_argument(qa, tokenizer):
    with pytest.raises(ValueError, match="`question` 1 is empty"):
        qa(question=["Who?", "  "], context=CONTEXTS[0])
    with pytest.raises(ValueError, match="`context` 0 is empty"):
        qa(question="Who?", context="")
    with pytest.raises(TypeError, match="`question` 0 must be a str"):
        qa(question=[3], context=CONTEXTS[0])
    with pytest.raises(ValueError, match="`question` has 2 entries but `context` has 1"):
        qa(question=["a", "b"], context=["c"])
    with pytest.raises(ValueError, match="both `question` and `context`"):
        qa(question="Who?")
    with pytest.raises(ValueError, match="`top_k` must be >= 1"):
        qa(question="Who?", context=CONTEXTS[0], top_k=0)
    with pytest.raises(TypeError, match="`max_answer_len` must be an int"):
        qa(question="Who?", context=CONTEXTS[0], max_answer_len="5")
    with pytest.raises(ValueError, match="`doc_stride` must be < max_passage_len - 1"):
        qa(question="Who?", context=CONTEXTS[0], max_passage_len=24, doc_stride=30)
    with pytest.raises(ValueError, match="`max_passage_len` must be in"):
        qa(question="Who?", context=CONTEXTS[0], max_passage_len=1000)
    with pytest.raises(TypeError, match="unexpected argument"):
        qa(question="Who?", context=CONTEXTS[0], max_anwser_len=3)
    plain = tiny_model()
    plain.config.num_decomposed_layers = 0
    with pytest.raises(ValueError, match="num_decomposed_layers > 0"):
        DeformerQuestionAnsweringPipeline(model=plain, tokenizer=tokenizer)


def test_published_reference_deformer_computes_in_fp32_on_cpu_and_answers_as_the_cli(tmp_path, qa_rows, capsys):
    """The shipped DeFormer (saved in fp16), published with `hf-readonce publish reference-deformer` and loaded by
    `pipeline(..., trust_remote_code=True)` where hf-readonce cannot be imported: it computes in float32 on the CPU
    by default (the rule of `hf_readonce.dtypes`, copied into the pipeline) and gives the answers of `hf-readonce
    answer` (max_answer_len 30, the CLI's default)."""
    import json
    from pathlib import Path

    from hf_readonce.cli import main as cli_main
    from hf_readonce.weights import reference_deformer_path
    from tests.conftest import run_without_hf_readonce, write_jsonl

    folder = tmp_path / "published"
    assert cli_main(["publish", "reference-deformer", "--repo-id", "someone/deformer", "--local-dir", str(folder)]) == 0
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float16"  # published as shipped
    # no --metrics: the card carries the checkpoint's recorded evaluation (metrics.json), baselines beside
    recorded = json.loads((Path(reference_deformer_path()) / "metrics.json").read_text())
    card = (folder / "README.md").read_text()
    assert "recorded evaluation (metrics.json, Disfl-QA)" in capsys.readouterr().err
    assert "google-research-datasets/disfl_qa" in card
    assert f"| Disfl-QA, validation (1,785 questions) | F1 | **{recorded['cached_f1']:.2f}** | " \
           f"{recorded['baselines']['always_empty']['f1']:.2f} |" in card
    rows = qa_rows[:10]
    questions = write_jsonl(tmp_path / "q.jsonl", rows)
    store = tmp_path / "store"
    assert cli_main(["encode", "reference-deformer", "--documents", str(questions), "--store", str(store),
                     "--dtype", "fp32", "--no-progress"]) == 0
    assert cli_main(["answer", "reference-deformer", "--store", str(store), "--questions", str(questions),
                     "--output", str(tmp_path / "preds.jsonl"), "--no-progress"]) == 0
    capsys.readouterr()
    cli = [json.loads(line)["prediction_text"] for line in (tmp_path / "preds.jsonl").open()]
    done = run_without_hf_readonce(f"""
        import json
        from transformers import pipeline
        qa = pipeline("question-answering", model={str(folder)!r}, trust_remote_code=True)
        rows = [json.loads(line) for line in open({str(questions)!r})]
        answers = [qa(question=r["question"], context=r["context"], max_answer_len=30)["answer"] for r in rows]
        print(json.dumps({{"dtype": str(qa.model.dtype), "answers": answers}}))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["dtype"] == "torch.float32"
    assert result["answers"] == cli and any(cli) and not all(cli)  # spans and no-answers both occur


def test_publish_reference_deformer_card_fields_without_metrics_still_need_a_metrics_file(tmp_path, capsys):
    """`--dataset-type` describes a `--metrics` file: given alone, the recorded evaluation is not relabelled with it
    (the CLI refuses, naming --metrics, and writes nothing); `--metrics FILE` replaces the recorded one."""
    import json

    from hf_readonce.cli import main as cli_main

    assert cli_main(["publish", "reference-deformer", "--repo-id", "someone/deformer", "--local-dir",
                     str(tmp_path / "a"), "--dataset-type", "quoref"]) != 0
    assert "--metrics" in capsys.readouterr().err and not (tmp_path / "a").exists()
    metrics = tmp_path / "eval_results.json"
    metrics.write_text(json.dumps({"eval_exact_match": 12.5, "eval_f1": 20.25}))
    assert cli_main(["publish", "reference-deformer", "--repo-id", "someone/deformer", "--local-dir",
                     str(tmp_path / "b"), "--metrics", str(metrics), "--dataset-type", "quoref"]) == 0
    card = (tmp_path / "b" / "README.md").read_text()
    assert "recorded evaluation" not in capsys.readouterr().err
    assert "| quoref, validation | F1 | **20.25** |" in card and "Disfl-QA" not in card
