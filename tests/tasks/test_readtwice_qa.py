"""`hf_readonce.tasks.readtwice_qa` refuses bad training input with one error naming it: an example without a usable
`question` / `context` (it raised a bare `KeyError` or `AttributeError`), and a collator batch that is empty, holds
something else than `ReadTwiceQAFeature`s (e.g. a `datasets.Dataset`'s dict rows) or mixes the two layouts (it
raised `IndexError`, `AttributeError` or `TypeError: object of type 'NoneType' has no len()`). `Trainer.predict`
over batches whose questions differ in length gives rows that map back to tokens when the collator pads the questions
to one width."""

import numpy as np
import pytest
import torch
from transformers import Trainer, TrainingArguments

from hf_readonce.tasks.readtwice_qa import (
    ReadTwiceQACollator,
    logits_per_feature,
    postprocess_readtwice_qa,
    predict_readtwice_qa,
    prepare_readtwice_qa_features,
)

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


# two batches of two questions each (`per_device_eval_batch_size=2`): at most 8, then 15 tokens read once ([CLS] and
# [SEP] included)
AUSTEN = ("Emma Woodhouse lives at Hartfield with her father. Miss Taylor, her governess, marries Mr. Weston and "
          "moves to Randalls. Emma then takes up Harriet Smith, whose parents are unknown, and tries to match her "
          "with the vicar, Mr. Elton, who wants to marry Emma herself.")
PREDICTED = [{"id": f"q{i}", "question": question, "context": AUSTEN,
              "answers": {"text": [answer], "answer_start": [AUSTEN.index(answer)]}}
             for i, (question, answer) in enumerate([
                 ("Who is Emma?", "Emma Woodhouse"), ("Who does Emma take up?", "Harriet Smith"),
                 ("Whom does Emma try to match with the vicar of the parish?", "Harriet Smith"),
                 ("Where does Miss Taylor move to after she marries Mr. Weston?", "Randalls")])]


def test_trainer_predict_rows_line_up_over_batches_of_different_question_lengths(tokenizer, tmp_path):
    from tests.hub.test_pipeline_readtwice import tiny_readtwice

    model = tiny_readtwice(question_in_first_read=False)
    model.config.max_question_length = 16
    features = prepare_readtwice_qa_features(tokenizer, PREDICTED, 24, 6, question_in_first_read=False,
                                             max_question_length=model.config.max_question_length)
    lengths = [len(f.question_ids) for f in features]
    assert lengths == [6, 8, 15, 15] and min(f.num_segments for f in features) > 1
    # the reference: the model over each batch, questions padded to the batch's longest (shifts 8 and 15)
    reference = predict_readtwice_qa(model, features, ReadTwiceQACollator(tokenizer.pad_token_id, with_labels=False),
                                     batch_size=2)
    assert [shift for _, _, shift in reference] == [8, 8, 15, 15]

    collator = ReadTwiceQACollator(tokenizer.pad_token_id, question_length=model.config.max_question_length)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to="none", use_cpu=True,
                             remove_unused_columns=False)
    output = Trainer(model=model, args=args, data_collator=collator).predict(features)
    start, end = output.predictions[:2]
    # every row: the 16 question columns, then the segment's tokens
    row = 0
    for feature, (ref_start, ref_end, shift) in zip(features, reference):
        for segment, ids in enumerate(feature.input_ids):
            n = len(ids)
            np.testing.assert_allclose(start[row, 16 : 16 + n], ref_start[segment, shift : shift + n], atol=1e-5)
            np.testing.assert_allclose(end[row, 16 : 16 + n], ref_end[segment, shift : shift + n], atol=1e-5)
            gold = [p for p in output.label_ids[0][row] if p >= 0]  # the labels are in the same columns
            assert gold == [p + 16 for p in feature.start_positions[segment]]
            row += 1
    assert row == start.shape[0]
    logits = logits_per_feature(output.predictions, features, collator)
    assert [shift for _, _, shift in logits] == [16] * len(features)
    assert postprocess_readtwice_qa(PREDICTED, features, logits) == postprocess_readtwice_qa(PREDICTED, features,
                                                                                           reference)

    # padded per batch, the columns move between batches: refused, not misread
    default = ReadTwiceQACollator(tokenizer.pad_token_id)
    output = Trainer(model=model, args=args, data_collator=default).predict(features)
    with pytest.raises(ValueError, match="questions have different lengths .* question_length="):
        logits_per_feature(output.predictions, features, default)
    with pytest.raises(ValueError, match="hold 7 rows, but `features` have"):
        logits_per_feature(tuple(p[:7] for p in output.predictions), features, collator)


def test_collator_question_length_is_checked(tokenizer):
    features = prepare_readtwice_qa_features(tokenizer, PREDICTED, 24, 6, question_in_first_read=False)
    batch = ReadTwiceQACollator(tokenizer.pad_token_id, question_length=20)(features[:2])
    assert batch["question_input_ids"].shape[1] == batch["question_attention_mask"].shape[1] == 20
    assert batch["question_attention_mask"].sum(dim=1).tolist() == [len(f.question_ids) for f in features[:2]]
    shift = [p - s[0] for p, s in zip(batch["start_positions"][:, 0].tolist(),
                                      [s or [None] for f in features[:2] for s in f.start_positions]) if p >= 0]
    assert set(shift) == {20}
    # the paper's layout has no question columns: the setting changes nothing there
    paper = prepare_readtwice_qa_features(tokenizer, PREDICTED[:2], 24, 6, question_in_first_read=True)
    for key, value in ReadTwiceQACollator(tokenizer.pad_token_id, question_length=20)(paper).items():
        assert torch.equal(value, ReadTwiceQACollator(tokenizer.pad_token_id)(paper)[key])
    with pytest.raises(ValueError, match="example 2: its question has 15 tokens, more than the collator's "
                                         "`question_length` 8"):
        ReadTwiceQACollator(tokenizer.pad_token_id, question_length=8)(features)
    with pytest.raises(ValueError, match="`question_length` must be >= 1, got 0"):
        ReadTwiceQACollator(question_length=0)
    with pytest.raises(TypeError, match="`question_length` must be an int or None, got float"):
        ReadTwiceQACollator(question_length=16.0)


def test_logits_per_feature_refuses_rows_narrower_than_the_collators_question_width(tokenizer):
    """Predictions made with another collator (here: rows 8 question columns wide) than the one given (64) cannot be
    split at its width: refused, naming both widths, instead of sliced past the end of each row."""
    features = prepare_readtwice_qa_features(tokenizer, PREDICTED[:2], 24, 6, question_in_first_read=False,
                                             max_question_length=16)
    rows = sum(f.num_segments for f in features)
    narrow = (np.zeros((rows, 8 + 24)), np.zeros((rows, 8 + 24)))
    with pytest.raises(ValueError, match="rows are 32 wide, less than the question width 64 plus"):
        logits_per_feature(narrow, features, ReadTwiceQACollator(tokenizer.pad_token_id, question_length=64))
    assert [shift for _, _, shift in logits_per_feature(narrow, features, ReadTwiceQACollator(question_length=8))] \
        == [8, 8]
