"""ReadTwice answers from stored first reads (`hf_readonce.tasks.readtwice_qa_store`) equal the ReadTwice pipeline
reading the documents itself; several documents share one store read; missing, foreign and bad input is named."""

import pytest

from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import ReadTwiceQuestionAnsweringPipeline
from hf_readonce.representations import ReadTwiceBertAdapter, fill_store
from hf_readonce.store import MissingRepresentationError, RepresentationMismatchError, RepresentationStore
from hf_readonce.tasks.readtwice_qa_store import answer_from_readtwice_store
from tests.hub.test_pipeline_deformer import CONTEXTS
from tests.hub.test_pipeline_readtwice import DOCUMENT, MAX_QUESTION_LEN, QUESTIONS, tiny_readtwice

OTHER = " ".join(reversed(CONTEXTS))


def _examples():
    rows = [{"id": f"a{i}", "question": q, "context": DOCUMENT} for i, q in enumerate(QUESTIONS)]
    return rows + [{"id": f"b{i}", "question": q, "context": OTHER} for i, q in enumerate(QUESTIONS[:2])]


@pytest.mark.parametrize("memory_type", ["sts", "entity"])
def test_answers_from_the_store_equal_the_pipeline_reading_the_documents(tokenizer, tmp_path, memory_type):
    model = tiny_readtwice(memory_type=memory_type)
    mentions = {"mention_fn": ReadTwiceBertAdapter.settings_kwargs({"mentions": "capitalized_mentions"})[
        "mention_fn"]} if memory_type == "entity" else {}
    store = RepresentationStore(tmp_path / "store")
    assert fill_store(ReadTwiceBertAdapter(model, tokenizer, **mentions), store, [DOCUMENT, OTHER],
                      store_dtype="float32").encoded == 2
    examples = _examples()
    # two documents in one store read, questions of both in one batch; the mention function found from the store
    answers = answer_from_readtwice_store(model, tokenizer, store, examples, max_question_length=MAX_QUESTION_LEN,
                                          max_answer_length=15, batch_size=4, documents_per_chunk=2)
    pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, max_question_len=MAX_QUESTION_LEN)
    expected = {e["id"]: pipe(question=e["question"], context=e["context"], max_answer_len=15, **mentions)["answer"]
                for e in examples}
    assert answers == expected
    assert any(answers.values())  # spans, not a vacuous agreement on empty answers


def test_counts_the_questions_cut_to_max_question_length(tokenizer, tmp_path):
    """A question longer than `max_question_length` is cut to it (its answer reads its first tokens only): `counts`
    says how many were, as `hf-readonce answer` notes."""
    model = tiny_readtwice()
    store = RepresentationStore(tmp_path / "store")
    examples = _examples()
    lengths = [len(tokenizer(e["question"]).input_ids) for e in examples]
    limit = min(lengths)
    cut = sum(length > limit for length in lengths)
    assert 0 < cut < len(examples)
    counts = {}
    answers = answer_from_readtwice_store(model, tokenizer, store, examples, encode_missing=True,
                                          max_question_length=limit, counts=counts)
    assert counts == {"questions": len(examples), "questions_cut": cut}
    assert answer_from_readtwice_store(model, tokenizer, store, examples, max_question_length=limit) == answers
    counts.clear()
    answer_from_readtwice_store(model, tokenizer, store, examples, max_question_length=MAX_QUESTION_LEN,
                                counts=counts)
    assert counts == {"questions": len(examples), "questions_cut": 0}


def test_missing_foreign_and_bad_input(tokenizer, tmp_path):
    model = tiny_readtwice()
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(MissingRepresentationError, match="1 of 1 documents are not stored.*question id 'a0'"):
        answer_from_readtwice_store(model, tokenizer, store, _examples()[:1])
    answers = answer_from_readtwice_store(model, tokenizer, store, _examples(), encode_missing=True)
    assert len(store) == 2 and set(answers) == {e["id"] for e in _examples()}
    with pytest.raises(RepresentationMismatchError):
        answer_from_readtwice_store(tiny_readtwice(seed=1), tokenizer, store, _examples())
    with pytest.raises(ValueError, match="question_in_first_read"):
        answer_from_readtwice_store(tiny_readtwice(question_in_first_read=True), tokenizer, store, _examples())
    with pytest.raises(ValueError, match="two examples have the id"):
        answer_from_readtwice_store(model, tokenizer, store, _examples()[:1] * 2)
    with pytest.raises(ValueError, match="n_best_size"):
        answer_from_readtwice_store(model, tokenizer, store, _examples(), n_best_size=0)
    with pytest.raises(ValueError, match="'question' is blank"):
        answer_from_readtwice_store(model, tokenizer, store, [{"id": "x", "question": " ", "context": DOCUMENT}])
    with pytest.raises(TypeError, match="examples"):
        answer_from_readtwice_store(model, tokenizer, store, "What?")
    assert len(store) == 2


def test_entity_memories_need_the_mention_function_the_store_was_made_with(tokenizer, tmp_path):
    model = tiny_readtwice(memory_type="entity")
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(ValueError, match="mention_fn"):  # nothing stored: no mention function to find
        answer_from_readtwice_store(model, tokenizer, store, _examples(), encode_missing=True)
    assert len(store) == 0


def test_cli_encodes_and_answers_readtwice_stores(tokenizer, tmp_path, capsys):
    """`hf-readonce encode` then `answer` on a read-once ReadTwice checkpoint: the CLI's answers are the API's, with
    EM/F1 beside the baselines; window options of other families are refused by name."""
    import json

    from hf_readonce.cli import main as cli_main
    from tests.conftest import write_jsonl

    folder = tmp_path / "readtwice"
    model = tiny_readtwice()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    examples = [{**e, "answers": {"text": [e["context"][:5]], "answer_start": [0]}} for e in _examples()]
    questions = write_jsonl(tmp_path / "q.jsonl", examples)
    store, output = tmp_path / "store", tmp_path / "p.jsonl"
    assert cli_main(["encode", str(folder), "--documents", str(questions), "--store", str(store), "--dtype", "fp32",
                     "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["answer", str(folder), "--store", str(store), "--questions", str(questions), "--output",
                     str(output), "--max-question-length", str(MAX_QUESTION_LEN), "--max-answer-length", "15",
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    got = {row["id"]: row["prediction_text"] for row in map(json.loads, output.read_text().splitlines())}
    assert got == answer_from_readtwice_store(model, tokenizer, RepresentationStore(store), _examples(),
                                             max_question_length=MAX_QUESTION_LEN, max_answer_length=15)
    assert "segment_length 24, segment_overlap 6, memory_type sts" in out and "baseline: first-span" in out
    assert "question(s) held more" not in capsys.readouterr().err  # none cut: no note
    # questions cut to a shorter --max-question-length are counted in a note (they were cut without a word)
    lengths = [len(tokenizer(e["question"]).input_ids) for e in examples]
    assert cli_main(["answer", str(folder), "--store", str(store), "--questions", str(questions), "--output",
                     str(output), "--max-question-length", str(min(lengths)), "--no-progress"]) == 0
    cut = sum(length > min(lengths) for length in lengths)
    assert (f"hf-readonce answer: note: {cut} of the {len(examples)} question(s) held more than the {min(lengths)} "
            "tokens read per question: they were cut to them, and the answers come from those tokens only "
            "(`--max-question-length` reads more, up to the model's positions)") in capsys.readouterr().err
    assert cli_main(["answer", str(folder), "--store", str(store), "--questions", str(questions), "--output",
                     str(output), "--doc-stride", "8", "--no-progress"]) == 2
    assert "--doc-stride does not apply to readtwice_bert" in capsys.readouterr().err
    # another family's own setting (an adapter's `cli_settings` option) is parsed and refused by name
    assert cli_main(["answer", str(folder), "--store", str(store), "--questions", str(questions), "--output",
                     str(output), "--compression-ratio", "2", "--no-progress"]) == 2
    assert "--compression-ratio does not apply to readtwice_bert" in capsys.readouterr().err


def test_cli_encodes_entity_memories_with_the_mentions_option(tokenizer, tmp_path, capsys):
    """Entity memories need a mention finder: `--mentions capitalized_mentions` names the package's (opt-in: without
    it encode says so), and `answer` finds it from the store (or takes it with `--encode-missing`); the answers are
    the API's with the same mention function."""
    import json

    from hf_readonce.cli import main as cli_main
    from hf_readonce.representations.readtwice_bert import capitalized_mentions
    from tests.conftest import write_jsonl

    folder = tmp_path / "readtwice"
    model = tiny_readtwice(memory_type="entity")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    questions = write_jsonl(tmp_path / "q.jsonl", _examples())
    store, output = tmp_path / "store", tmp_path / "p.jsonl"
    common = ["--documents", str(questions), "--store", str(store), "--dtype", "fp32", "--no-progress"]
    assert cli_main(["encode", str(folder), *common]) == 2
    assert "--mentions capitalized_mentions" in capsys.readouterr().err
    assert cli_main(["encode", str(folder), *common, "--mentions", "spacy"]) == 2
    assert "must be one of ['capitalized_mentions']" in capsys.readouterr().err
    assert cli_main(["encode", str(folder), *common, "--mentions", "capitalized_mentions"]) == 0
    assert RepresentationStore(store).spaces()[0].settings["mentions"] == "capitalized_mentions"
    expected = answer_from_readtwice_store(model, tokenizer, RepresentationStore(store), _examples(),
                                           mention_fn=capitalized_mentions, max_question_length=MAX_QUESTION_LEN)
    for extra, target in (([], store), (["--encode-missing", "--mentions", "capitalized_mentions"], tmp_path / "new")):
        assert cli_main(["answer", str(folder), "--store", str(target), "--questions", str(questions), "--output",
                         str(output), "--max-question-length", str(MAX_QUESTION_LEN), "--no-progress", *extra]) == 0
        got = {row["id"]: row["prediction_text"] for row in map(json.loads, output.read_text().splitlines())}
        assert got == expected
    model.config.mentions = "capitalized_mentions"  # recorded in the checkpoint: encode and answer read it
    model.save_pretrained(folder)
    assert cli_main(["answer", str(folder), "--store", str(tmp_path / "recorded"), "--questions", str(questions),
                     "--output", str(output), "--max-question-length", str(MAX_QUESTION_LEN), "--no-progress",
                     "--encode-missing"]) == 0
    assert {row["id"]: row["prediction_text"] for row in map(json.loads, output.read_text().splitlines())} == expected
    capsys.readouterr()
    model.config.mentions = "spacy_ner"  # a name the package cannot rebuild: the error says where it came from
    model.save_pretrained(folder)
    assert cli_main(["answer", str(folder), "--store", str(tmp_path / "recorded2"), "--questions", str(questions),
                     "--output", str(output), "--no-progress", "--encode-missing"]) == 2
    assert "the checkpoint's config records mentions='spacy_ner'" in capsys.readouterr().err
    sts = tmp_path / "sts"
    tiny_readtwice().save_pretrained(sts)
    tokenizer.save_pretrained(sts)
    assert cli_main(["encode", str(sts), *common, "--mentions", "capitalized_mentions"]) == 2
    assert "applies to entity memories only" in capsys.readouterr().err


def test_a_mentions_setting_that_is_no_name_is_refused_by_name(tokenizer):
    """`mentions` is the name of a finder in `MENTION_FUNCTIONS`: a list (a hand-edited config, a stored setting) is
    refused as any unknown name is, naming `mentions`, not with a bare "unhashable type" TypeError."""
    model = tiny_readtwice(memory_type="entity")
    with pytest.raises(ValueError, match=r"`mentions` \(--mentions\) must be one of \['capitalized_mentions'\]"):
        ReadTwiceBertAdapter(model, tokenizer, mentions=["capitalized_mentions"])
    assert ReadTwiceBertAdapter.settings_kwargs({"mentions": ["capitalized_mentions"]}) == {}


def test_the_recorded_question_length_reads_the_first_reads_stored_before(tokenizer, tmp_path, capsys):
    """`run_readtwice_qa.py` records the question length a checkpoint was trained with (`config.max_question_length`,
    a declared field as DeFormer's): `hf-readonce answer` and the store path read questions at it, and the first reads
    the same weights stored before it was recorded are read (the fingerprint ignores the field: recording it wrote
    another key, and every stored first read was refused as another model's)."""
    import json

    from hf_readonce import ReadTwiceBertForQuestionAnswering
    from hf_readonce.cli import main as cli_main
    from tests.conftest import write_jsonl

    examples = _examples()
    lengths = [len(tokenizer(e["question"]).input_ids) for e in examples]
    limit = min(lengths)
    cut = sum(length > limit for length in lengths)
    old, new = tmp_path / "old", tmp_path / "new"
    model = tiny_readtwice()
    model.save_pretrained(old)
    written = json.loads((old / "config.json").read_text())
    model.save_pretrained(new)
    (new / "config.json").write_text(json.dumps({**written, "max_question_length": limit}))
    (old / "config.json").write_text(json.dumps({k: v for k, v in written.items() if k != "max_question_length"}))
    for folder in (old, new):
        tokenizer.save_pretrained(folder)
    store = RepresentationStore(tmp_path / "store")
    before = ReadTwiceBertForQuestionAnswering.from_pretrained(old).eval()
    assert before.config.max_question_length is None
    assert fill_store(ReadTwiceBertAdapter(before, tokenizer), store, [DOCUMENT, OTHER]).encoded == 2
    recorded = ReadTwiceBertForQuestionAnswering.from_pretrained(new).eval()
    assert recorded.config.max_question_length == limit
    counts = {}
    answers = answer_from_readtwice_store(recorded, tokenizer, store, examples, counts=counts)  # nothing encoded
    assert counts == {"questions": len(examples), "questions_cut": cut} and len(store) == 2
    assert answers == answer_from_readtwice_store(before, tokenizer, store, examples, max_question_length=limit)
    assert cli_main(["answer", str(new), "--store", str(tmp_path / "store"), "--questions",
                     str(write_jsonl(tmp_path / "q.jsonl", examples)), "--output", str(tmp_path / "p.jsonl"),
                     "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"max_question_length {limit};" in captured.out
    assert f"note: {cut} of the {len(examples)} question(s) held more than the {limit} tokens" in captured.err


def test_config_return_dict_false_gives_the_same_answers(tokenizer, tmp_path):
    """A user's `config.return_dict=False` (or `torchscript=True`) makes the model return tuples; the store's answers,
    the pipeline (with and without the question in the first read) and `predict_readtwice_qa` ask for the output's
    fields and give what they give with the default."""
    from hf_readonce.tasks.readtwice_qa import ReadTwiceQACollator, predict_readtwice_qa, prepare_readtwice_qa_features

    def answers(return_dict):
        got, models = [], {}
        for question_in_first_read in (False, True):
            model = models[question_in_first_read] = tiny_readtwice(question_in_first_read=question_in_first_read)
            model.config.return_dict = return_dict
            pipe = ReadTwiceQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, max_question_len=MAX_QUESTION_LEN)
            got.append([pipe(question=q, context=DOCUMENT, max_answer_len=15)["answer"] for q in QUESTIONS])
        store = RepresentationStore(tmp_path / f"store_{return_dict}")
        fill_store(ReadTwiceBertAdapter(models[False], tokenizer), store, [DOCUMENT, OTHER], store_dtype="float32")
        got.append(answer_from_readtwice_store(models[False], tokenizer, store, _examples(),
                                               max_question_length=MAX_QUESTION_LEN, max_answer_length=15))
        features = prepare_readtwice_qa_features(tokenizer, _examples()[:2], 24, 6, question_in_first_read=True)
        got.append(predict_readtwice_qa(models[True], features,
                                        ReadTwiceQACollator(tokenizer.pad_token_id, with_labels=False)))
        return got

    expected, got = answers(True), answers(False)
    assert got[:3] == expected[:3] and any(expected[2].values())
    assert len(got[3]) == len(expected[3]) > 0
    for (start, end, group), (start_0, end_0, group_0) in zip(got[3], expected[3], strict=True):
        assert (start == start_0).all() and (end == end_0).all() and group == group_0


def _padding_per_call(model, monkeypatch):
    """Per model call: `(padded question tokens, padded segment tokens)` of the (question, segment) rows it runs,
    read from the masks the call gets."""
    calls = []
    forward = model.forward

    def counting(*args, **kwargs):
        questions, documents = kwargs["question_attention_mask"], kwargs["document_states"]
        rows = kwargs["question_document_ids"][:, None] == documents.document_ids[None, :]
        question_of_row, segment_of_row = rows.nonzero(as_tuple=True)
        calls.append((int((questions[question_of_row] == 0).sum()),
                      int((documents.attention_mask[segment_of_row] == 0).sum())))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    return calls


def test_questions_of_similar_length_share_a_batch_and_answers_keep_the_input_order(tokenizer, tmp_path,
                                                                                    monkeypatch):
    """Documents long, short, long (one segment each, the long ones of one length), a question each, two per batch:
    in input order the first batch pads the short document's segment to the long one's; grouped by length (the
    default), no batch pads anything (a call reads its own documents only), and the answers are those of the
    input order, keyed in example order."""
    words = "the quick brown fox jumps over a lazy dog near the river bank".split()
    contexts = [" ".join(words[:12]), "rain is expected today", " ".join(words[1:13])]
    rows = [{"id": f"q{i}", "question": f"what did the {animal} do?", "context": context}
            for i, (animal, context) in enumerate(zip(["fox", "dog", "cat"], contexts))]
    lengths = [len(tokenizer(c).input_ids) for c in contexts]
    assert lengths[0] == lengths[2] > lengths[1] and max(lengths) <= 24  # one segment each
    model = tiny_readtwice()
    store = RepresentationStore(tmp_path / "store")
    fill_store(ReadTwiceBertAdapter(model, tokenizer), store, contexts, store_dtype="float32")
    calls = _padding_per_call(model, monkeypatch)
    in_order = answer_from_readtwice_store(model, tokenizer, store, rows, batch_size=2, group_by_length=False)
    assert calls[0][1] > 0  # the short document's segment padded to the long one's
    calls.clear()
    grouped = answer_from_readtwice_store(model, tokenizer, store, rows, batch_size=2)
    assert calls == [(0, 0), (0, 0)]
    assert list(grouped) == [r["id"] for r in rows] and grouped == in_order
    with pytest.raises(TypeError, match="`group_by_length` must be a bool, got int 1"):
        answer_from_readtwice_store(model, tokenizer, store, rows, group_by_length=1)
