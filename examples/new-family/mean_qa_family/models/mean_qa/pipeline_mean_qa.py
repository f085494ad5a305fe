"""The question-answering pipeline of the mean_qa family (travels with published checkpoints: imports only torch and
transformers)."""

import torch
from transformers import Pipeline


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, offsets: torch.Tensor,
              max_answer_length: int) -> tuple[int, int, float]:
    """The highest-scoring answer span of one passage.

    Args:
        start_logits, end_logits (`torch.Tensor` of shape `(passage_len,)`): one passage's scores (padding may follow
            its tokens).
        offsets (`torch.Tensor` of shape `(tokens, 2)`): each token's character span in the passage, `(0, 0)` for
            `[CLS]` and `[SEP]` (which never answer); `tokens <= passage_len`.
        max_answer_length (`int`): the most tokens an answer holds (>= 1).

    Returns:
        `(start_char, end_char, score)`: the answer is `passage[start_char:end_char]`; `score` is its probability
        among the allowed spans.

    Raises:
        ValueError: a `max_answer_length` below 1, or a passage without a token that can answer.
    """
    if isinstance(max_answer_length, bool) or not isinstance(max_answer_length, int) or max_answer_length < 1:
        raise ValueError(f"`max_answer_length` must be an int >= 1, got {max_answer_length!r}.")
    n = offsets.shape[0]
    word = offsets[:, 1] > offsets[:, 0]
    if not bool(word.any()):
        raise ValueError("the passage has no token that can answer.")
    scores = start_logits[:n, None].float() + end_logits[None, :n].float()
    allowed = torch.ones(n, n, dtype=torch.bool).triu() & ~torch.ones(n, n, dtype=torch.bool).triu(max_answer_length)
    allowed &= word[:, None] & word[None, :]
    scores = scores.masked_fill(~allowed, float("-inf")).reshape(-1)
    best = int(scores.argmax())
    first, last = divmod(best, n)
    return int(offsets[first, 0]), int(offsets[last, 1]), float(scores.softmax(-1)[best])


# the passage length read when neither the call nor the checkpoint gives one (at most the model's positions)
DEFAULT_MAX_PASSAGE_LEN = 128


# Copied from hf_readonce.models.deformer_bert.pipeline_deformer_bert._check_int
def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} ({value!r}).")
    if value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value}.")
    return value


class MeanQaQuestionAnsweringPipeline(Pipeline):
    """`qa(question=..., context=...)` -> `{"score", "start", "end", "answer"}`: the best span of the context (its
    first `max_passage_len` tokens), at most `max_answer_len` tokens long. `start` and `end` are character offsets in
    `context` (`answer == context[start:end]`); `score` is the span's probability among the allowed spans.

    Call (or construction) arguments:
        max_answer_len (`int`, defaults to 15): the most tokens an answer holds (>= 1).
        max_passage_len (`int`, *optional*): context tokens read, `[CLS]` and `[SEP]` included (3 up to the model's
            `max_position_embeddings`); defaults to the checkpoint's `max_passage_length`, else
            `min(128, max_position_embeddings)`. A longer context is cut: its tail is never an answer.

    Raises:
        TypeError: a `question` or `context` that is not one str, an argument the pipeline does not take (named,
            e.g. `max_answer_length` for `max_answer_len`), or a setting that is not an int.
        ValueError: a setting out of its range (a checkpoint's `max_passage_length` beyond the model's positions
            included, when no `max_passage_len` is given), or a context without a token that can answer (empty, or
            only characters the tokenizer drops).
    """

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, max_answer_len=None, max_passage_len=None, **kwargs):
        """`(preprocess, forward, postprocess)` parameters of the given settings (see the class docstring).

        Raises:
            TypeError: an argument other than `max_answer_len` and `max_passage_len`, or a setting that is not an
                int.
            ValueError: a `max_answer_len` below 1, a `max_passage_len` below 3 or beyond the model's positions.
        """
        if kwargs:
            raise TypeError(f"unexpected argument(s) {sorted(kwargs)} for the mean_qa question-answering pipeline; "
                            "it takes `max_answer_len` and `max_passage_len`.")
        preprocess, postprocess = {}, {}
        if max_passage_len is not None:
            preprocess["max_passage_len"] = _check_int("max_passage_len", max_passage_len, 3)
            positions = self.model.config.max_position_embeddings
            if max_passage_len > positions:
                raise ValueError(f"`max_passage_len` must be at most the model's max_position_embeddings={positions}, "
                                 f"got {max_passage_len}.")
        if max_answer_len is not None:
            postprocess["max_answer_len"] = _check_int("max_answer_len", max_answer_len, 1)
        return preprocess, {}, postprocess

    def __call__(self, question=None, context=None, **kwargs):
        """Answer one `question` (`str`) from one `context` (`str`); `kwargs`: the settings of the class docstring.

        Returns:
            `dict`: `score` (`float`), `start` and `end` (`int`, character offsets) and `answer` (`str`).

        Raises:
            TypeError: a `question` or `context` that is not a str; see the class docstring for the settings.
        """
        if not isinstance(question, str) or not isinstance(context, str):
            raise TypeError("give one `question` and one `context`, each a str.")
        return super().__call__({"question": question, "context": context}, **kwargs)

    def preprocess(self, inputs: dict, max_passage_len: int | None = None) -> dict:
        """Tokenize one question and its passage, each alone.

        Args:
            inputs (`dict`): `question` and `context`, each a `str`.
            max_passage_len (`int`, *optional*): passage tokens kept, `[CLS]` and `[SEP]` included (checked by the
                pipeline's settings); defaults to the checkpoint's `max_passage_length`, else
                `min(128, max_position_embeddings)`.

        Returns:
            `dict`: `input_ids` and `attention_mask` (`torch.LongTensor` of shape `(1, question_len)`) of
            `[CLS] question [SEP]`; `passage_input_ids` and `passage_attention_mask` (`torch.LongTensor` of shape
            `(1, passage_len)`) of `[CLS] context [SEP]`, cut to `max_passage_len`; `offsets` (`torch.LongTensor` of
            shape `(passage_len, 2)`), each passage token's character span in `context`, `(0, 0)` for `[CLS]` and
            `[SEP]`; and `context` itself.

        Raises:
            ValueError: no `max_passage_len` and a checkpoint's `max_passage_length` beyond the model's
                `max_position_embeddings`.
        """
        config = self.model.config
        length = max_passage_len
        if length is None:
            length = (getattr(config, "max_passage_length", None)
                      or min(DEFAULT_MAX_PASSAGE_LEN, config.max_position_embeddings))
            if length > config.max_position_embeddings:
                raise ValueError(f"the checkpoint's `max_passage_length`={length} is beyond the model's "
                                 f"max_position_embeddings={config.max_position_embeddings}: pass `max_passage_len` "
                                 f"(3 to {config.max_position_embeddings}).")
        passage = self.tokenizer(inputs["context"], truncation=True, max_length=length, return_offsets_mapping=True,
                                 return_tensors="pt")
        question = self.tokenizer(inputs["question"], return_tensors="pt")
        return {"input_ids": question["input_ids"], "attention_mask": question["attention_mask"],
                "passage_input_ids": passage["input_ids"], "passage_attention_mask": passage["attention_mask"],
                "offsets": passage["offset_mapping"][0], "context": inputs["context"]}

    def _forward(self, inputs: dict) -> dict:
        """The model's start and end scores of `preprocess`'s passage tokens: `start` and `end` of shape
        `(passage_len,)`, with `offsets` and `context` passed on."""
        output = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                            passage_input_ids=inputs["passage_input_ids"],
                            passage_attention_mask=inputs["passage_attention_mask"])
        return {"start": output.start_logits[0], "end": output.end_logits[0], "offsets": inputs["offsets"],
                "context": inputs["context"]}

    def postprocess(self, outputs: dict, max_answer_len: int = 15) -> dict:
        """The best span of `_forward`'s scores ([`best_span`]).

        Args:
            outputs (`dict`): `start` and `end` (`torch.Tensor` of shape `(passage_len,)`), `offsets`
                (`torch.Tensor` of shape `(passage_len, 2)`) and `context` (`str`).
            max_answer_len (`int`, defaults to 15): the most tokens an answer holds.

        Returns:
            `dict`: `score` (`float`, the span's probability among the allowed spans), `start` and `end` (`int`,
            character offsets in `context`) and `answer` (`context[start:end]`).

        Raises:
            ValueError: a context without a token that can answer.
        """
        start, end, score = best_span(outputs["start"], outputs["end"], outputs["offsets"], max_answer_len)
        return {"score": score, "start": start, "end": end, "answer": outputs["context"][start:end]}
