"""`hf_readonce.tasks.readtwice_qa` refuses bad training input with one error naming it: an example without a usable
`question` / `context` (it raised a bare `KeyError` or `AttributeError`), and a collator batch that is empty, holds
something else than `ReadTwiceQAFeature`s (e.g. a `datasets.Dataset`'s dict rows) or mixes the two layouts (it
raised `IndexError`, `AttributeError` or `TypeError: object of type 'NoneType' has no len()`)."""

import pytest

from hf_readonce.tasks.readtwice_qa import ReadTwiceQACollator, prepare_readtwice_qa_features

ROW = {"id": "q1", "question": "Who wrote Emma?", "context": "Emma is a novel by Jane Austen.",
       "answers": {"text": ["Jane Austen"], "answer_start": [19]}}


@pytest.mark.parametrize("row, match", [
    ({k: v for k, v in ROW.items() if k != "context"}, "example 'q1': no 'context' field"),
    ({**ROW, "question": None}, "example 'q1': 'question' is null"),
    ({**ROW, "context": 5}, "example 'q1': 'context' is of type int, not a string"),
    ({**ROW, "question": "  "}, "example 'q1': 'question' is blank"),
])
def test_examples_without_question_or_context_are_refused(tokenizer, row, match):
    with pytest.raises(ValueError, match=match):
        prepare_readtwice_qa_features(tokenizer, [ROW, row], segment_length=64, segment_overlap=16,
                                      check_answers=False)
    with pytest.raises(TypeError, match="`examples`: example 0 is a str"):
        prepare_readtwice_qa_features(tokenizer, ["Who wrote Emma?"], segment_length=64, segment_overlap=16)


def test_collator_refuses_bad_batches(tokenizer):
    read_once = prepare_readtwice_qa_features(tokenizer, [ROW], 64, 16, question_in_first_read=False)
    paper = prepare_readtwice_qa_features(tokenizer, [ROW], 64, 16, question_in_first_read=True)
    collator = ReadTwiceQACollator(tokenizer.pad_token_id)
    assert collator(read_once + read_once)["question_input_ids"].shape[0] == 2
    with pytest.raises(ValueError, match="`features` is empty"):
        collator([])
    with pytest.raises(TypeError, match="ReadTwiceQAFeature objects .* got a dict"):
        collator([vars(read_once[0])])
    with pytest.raises(ValueError, match="mix the read-once layout"):
        collator(read_once + paper)
