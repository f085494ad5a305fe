"""The overflow-window check of ReadTwice's segmentation (`check_overflow_windows`)."""

import pytest
from transformers import BatchEncoding

from hf_readonce.models.readtwice_bert.pipeline_readtwice_bert import check_overflow_windows

TEXT = " ".join(f"word{i} is followed by another sentence number {i}." for i in range(60))


def _windows(tokenizer, *texts, question=None):
    args = (question, texts[0]) if question else (list(texts),)
    return tokenizer(*args, truncation="only_second" if question else True, max_length=48, stride=8,
                     return_overflowing_tokens=True, return_offsets_mapping=True)


def test_complete_windows_pass_alone_and_after_a_question(tokenizer):
    encoded = _windows(tokenizer, TEXT, "short text")
    assert len(encoded["input_ids"]) > 3
    check_overflow_windows(tokenizer, encoded, [TEXT, "short text"], 0)
    check_overflow_windows(tokenizer, _windows(tokenizer, TEXT, question="who follows?"), [TEXT], 1)


@pytest.mark.parametrize("keep", [1, 2])
def test_windows_cut_after_the_second_raise_and_name_the_tokenizers_version(tokenizer, keep):
    """What tokenizers 0.23.1 / 0.23.2 return: the windows stop early (simulated by dropping the later ones)."""
    encoded = _windows(tokenizer, TEXT)
    cut = BatchEncoding({key: value[:keep] for key, value in encoded.items()}, encoding=encoded.encodings[:keep])
    with pytest.raises(RuntimeError, match=r"overflow windows stop at character \d+ of text 0.*tokenizers"):
        check_overflow_windows(tokenizer, cut, [TEXT], 0)
