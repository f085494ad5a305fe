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


class MeanQaQuestionAnsweringPipeline(Pipeline):
    """`qa(question=..., context=...)` -> `{"score", "start", "end", "answer"}`: the best span of the context (its
    first `max_passage_len` tokens), at most `max_answer_len` tokens long.

    Call arguments: `max_answer_len` (`int`, defaults to 15), `max_passage_len` (`int`, defaults to the checkpoint's
    `max_passage_length`, else 128).
    """

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, max_answer_len=None, max_passage_len=None, **kwargs):
        pre = {} if max_passage_len is None else {"max_passage_len": max_passage_len}
        post = {} if max_answer_len is None else {"max_answer_len": max_answer_len}
        return pre, {}, post

    def __call__(self, question=None, context=None, **kwargs):
        if not isinstance(question, str) or not isinstance(context, str):
            raise TypeError("give one `question` and one `context`, each a str.")
        return super().__call__({"question": question, "context": context}, **kwargs)

    def preprocess(self, inputs, max_passage_len=None):
        length = max_passage_len or getattr(self.model.config, "max_passage_length", None) or 128
        passage = self.tokenizer(inputs["context"], truncation=True, max_length=length, return_offsets_mapping=True,
                                 return_tensors="pt")
        question = self.tokenizer(inputs["question"], return_tensors="pt")
        return {"input_ids": question["input_ids"], "attention_mask": question["attention_mask"],
                "passage_input_ids": passage["input_ids"], "passage_attention_mask": passage["attention_mask"],
                "offsets": passage["offset_mapping"][0], "context": inputs["context"]}

    def _forward(self, inputs):
        output = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                            passage_input_ids=inputs["passage_input_ids"],
                            passage_attention_mask=inputs["passage_attention_mask"])
        return {"start": output.start_logits[0], "end": output.end_logits[0], "offsets": inputs["offsets"],
                "context": inputs["context"]}

    def postprocess(self, outputs, max_answer_len=15):
        start, end, score = best_span(outputs["start"], outputs["end"], outputs["offsets"], max_answer_len)
        return {"score": score, "start": start, "end": end, "answer": outputs["context"][start:end]}
