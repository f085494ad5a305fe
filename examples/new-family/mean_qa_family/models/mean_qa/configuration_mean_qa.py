"""Configuration of the mean_qa family (travels with published checkpoints: imports only transformers)."""

from transformers import BertConfig


class MeanQaBertConfig(BertConfig):
    r"""A [`~transformers.BertConfig`] (any BERT checkpoint's `config.json` loads into it) and one recorded setting.

    Args:
        max_passage_length (`int`, *optional*): tokens read per passage (`[CLS]` and `[SEP]` included) the
            checkpoint was trained with; the default of `hf-readonce encode`. `None` if unknown.
        **kwargs: [`~transformers.BertConfig`] arguments.

    Raises:
        ValueError: a `max_passage_length` that is not None or an int >= 3.
    """

    model_type = "mean_qa_bert"
    # a setting of the adapter (part of the store's settings), not of the stored states
    fingerprint_ignored_fields = ("max_passage_length",)

    def __init__(self, max_passage_length: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if max_passage_length is not None and (isinstance(max_passage_length, bool)
                                               or not isinstance(max_passage_length, int) or max_passage_length < 3):
            raise ValueError(f"`max_passage_length` must be None or an int >= 3, got {max_passage_length!r}.")
        self.max_passage_length = max_passage_length


__all__ = ["MeanQaBertConfig"]
