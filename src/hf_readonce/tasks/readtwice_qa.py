"""Extractive QA glue for ReadTwice: split (question, long document) pairs into segment batches with tokenizer
offsets (HF's `doc_stride` preprocessing, `stride` = `segment_overlap`), gold labels for the OR-model loss, entity
mentions, a collator, batched prediction, n-best decoding across all segments of a document, and a segment-independent
BERT baseline trained with the same globally normalised loss.

Two layouts, matching `ReadTwiceBertConfig.question_in_first_read`:

- `True` (paper, App. C): every segment is `[CLS] question [SEP] document part [SEP]` (`truncation="only_second"`).
- `False` (read-once): segments are `[CLS] document part [SEP]` (token type 1) and the question is encoded once as
  `[CLS] question [SEP]` (token type 0); rows seen by the loss are `[question; segment]`, so gold positions are shifted
  by the padded question length in the collator (the batch's longest question, or the collator's fixed
  `question_length`, which `Trainer.predict` needs to line up the rows of its batches: see `logits_per_feature`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import BertForQuestionAnswering
from transformers.utils import ModelOutput

from ..models.readtwice_bert.modeling_readtwice_bert import readtwice_span_loss

# re-exported: the mention heuristic and the segment entity spans belong to the ReadTwice representation (its adapter,
# below the tasks, and the pipeline that travels with checkpoints)
from ..models.readtwice_bert.pipeline_readtwice_bert import (
    check_overflow_windows,
    entity_spans_for_segment,
    segment_span_candidates,
)
from ..representations.base import tokenizer_lock
from ..representations.readtwice_bert import capitalized_mentions
from .jsonl import field_problem
from .question_answering import answer_problem

MentionFn = Callable[[str], list[tuple[int, int]]]


@dataclass
class ReadTwiceQAFeature:
    """All segments of one (question, document) example.

    Attributes:
        example_index (`int`): index in the example list.
        input_ids, token_type_ids (`list[list[int]]`): one list per segment (unpadded, at most `segment_length`).
        offsets (`list[list[tuple[int, int] | None]]`): per segment and token, the character span in the *context*,
            or `None` for question and special tokens (never part of an answer).
        start_positions, end_positions (`list[list[int]]`): per segment, every gold token index (segment coordinates).
        entity_spans (`list[list[tuple[int, int]]]`): per segment, inclusive token spans of entity mentions.
        question_ids (`list[int] | None`): `[CLS] question [SEP]` in the read-once layout, else `None`.
    """

    example_index: int
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    offsets: list[list[tuple[int, int] | None]] = field(repr=False)
    start_positions: list[list[int]]
    end_positions: list[list[int]]
    entity_spans: list[list[tuple[int, int]]]
    question_ids: list[int] | None = None

    @property
    def num_segments(self) -> int:
        """Segments of the example (`len(input_ids)`)."""
        return len(self.input_ids)


def spacy_mentions(nlp) -> MentionFn:
    """Wrap a caller-loaded spaCy pipeline with an `ner` component as a `mention_fn` (`doc.ents` character spans).
    hf-readonce does not depend on spaCy: install spaCy and a pipeline from its authors' releases yourself.

    Raises:
        ValueError: if the pipeline has no `ner` component.
    """
    if "ner" not in getattr(nlp, "pipe_names", ()):
        raise ValueError("The spaCy pipeline has no 'ner' component.")

    def mentions(text: str) -> list[tuple[int, int]]:
        return [(ent.start_char, ent.end_char) for ent in nlp(text).ents]

    return mentions


def _gold_tokens(offsets, answer_start: int, answer_text: str) -> tuple[int, int] | None:
    end_char = answer_start + len(answer_text)
    starts = [i for i, o in enumerate(offsets) if o is not None and o[0] <= answer_start < o[1]]
    ends = [i for i, o in enumerate(offsets) if o is not None and o[0] < end_char <= o[1]]
    if not starts or not ends or ends[-1] < starts[0]:
        return None
    return starts[0], ends[-1]


def truncate_question(tokenizer, question: str, max_question_length: int) -> tuple[list[int], str]:
    """The first `max_question_length` tokens of `question` (no special tokens) and the text they cover, cut from
    the question itself at the end of the last kept token: case and characters are kept, so character spans found
    in the cut text (entity mentions) line up with its tokens' offsets. Text cut at a token end tokenizes to the same
    ids (WordPiece's longest-match-first makes the same pieces of a word's prefix).

    Returns:
        `(ids, text)`: the ids, and `question` itself when it has fewer than `max_question_length` tokens.
    """
    with tokenizer_lock(tokenizer):
        encoded = tokenizer(question, truncation=True, max_length=max_question_length, add_special_tokens=False,
                            return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    if len(ids) >= max_question_length:
        question = question[: encoded["offset_mapping"][-1][1]]
    return ids, question


def prepare_readtwice_qa_features(
    tokenizer,
    examples: Sequence[dict],
    segment_length: int = 512,
    segment_overlap: int = 128,
    question_in_first_read: bool = True,
    max_question_length: int = 64,
    mention_fn: MentionFn | None = None,
    max_segments: int | None = None,
    check_answers: bool = True,
) -> list[ReadTwiceQAFeature]:
    """Split SQuAD-style examples (`question`, `context`, `answers{text[], answer_start[]}`) into ReadTwice segments.

    Args:
        tokenizer: a fast BERT tokenizer (offsets are needed).
        examples: rows with non-empty `question` and `context`.
        segment_length (`int`, defaults to 512): ids per segment, special tokens and (paper layout) question included.
        segment_overlap (`int`, defaults to 128): tokens shared by consecutive segments (HF's `stride`).
        question_in_first_read (`bool`, defaults to `True`): the layout (see the module docstring).
        max_question_length (`int`, defaults to 64): questions are truncated to this many ids.
        mention_fn (`Callable[[str], list[tuple[int, int]]]`, *optional*): character spans of entity mentions, applied
            to the context and (paper layout) to the question; needed for `memory_type="entity"`.
        max_segments (`int`, *optional*): keep only the first `max_segments` segments of a document (the paper's
            sub-document limit is 128).
        check_answers (`bool`, defaults to `True`): refuse answers that do not match their context (the gold spans
            are training labels); pass False for rows read only to be answered and scored by text.

    Returns:
        `list[ReadTwiceQAFeature]`, one per example, in order.

    Raises:
        ValueError: if `segment_overlap` is not in `[0, segment_length)` or leaves no room for context tokens, if an
            example's `question` or `context` is missing, not a string or blank, or with `check_answers` an example's
            answers do not match its context ([`question_answering.answer_problem`]), naming the example.
        TypeError: an example that is not a mapping.
    """
    if not 0 <= segment_overlap < segment_length:
        raise ValueError(f"`segment_overlap` must be in [0, segment_length={segment_length}), got {segment_overlap}.")
    features = []
    for index, example in enumerate(examples):
        if not isinstance(example, Mapping):
            raise TypeError(f"`examples`: example {index} is a {type(example).__name__}, not a mapping with "
                            "'question', 'context' and 'answers'.")
        problem = field_problem(example, "question") or field_problem(example, "context")
        problem = problem or answer_problem(example, labels=check_answers)
        if problem:
            raise ValueError(f"example {example.get('id', index)!r}: {problem}.")
        question, context = example["question"].strip(), example["context"]
        context_mentions = mention_fn(context) if mention_fn else []
        question_ids = None
        question_mentions = []
        if question_in_first_read:
            question_part, question = truncate_question(tokenizer, question, max_question_length)
            question_mentions = mention_fn(question) if mention_fn else []
            if segment_length - len(question_part) - 3 <= segment_overlap:
                raise ValueError(
                    f"segment_length={segment_length} leaves no more than segment_overlap={segment_overlap} context "
                    f"tokens after a {len(question_part)}-token question: lower the overlap or max_question_length."
                )
            with tokenizer_lock(tokenizer):
                encoded = tokenizer(question, context, truncation="only_second", max_length=segment_length,
                                    stride=segment_overlap, return_overflowing_tokens=True,
                                    return_offsets_mapping=True)
        else:
            with tokenizer_lock(tokenizer):
                question_ids = list(tokenizer(question, truncation=True, max_length=max_question_length)["input_ids"])
                encoded = tokenizer(context, truncation=True, max_length=segment_length, stride=segment_overlap,
                                    return_overflowing_tokens=True, return_offsets_mapping=True)
        check_overflow_windows(tokenizer, encoded, [context], 1 if question_in_first_read else 0)
        answers = example.get("answers") or {}
        starts, texts = answers.get("answer_start"), answers.get("text")
        gold_answers = list(zip([] if starts is None else [int(a) for a in starts], [] if texts is None else texts))
        feature = ReadTwiceQAFeature(index, [], [], [], [], [], [], question_ids)
        for seg in range(len(encoded["input_ids"])):
            if max_segments is not None and seg >= max_segments:
                break
            ids = list(encoded["input_ids"][seg])
            sequence_ids = encoded.sequence_ids(seg)
            context_id = 1 if question_in_first_read else 0
            offsets = [tuple(o) if s == context_id else None
                       for o, s in zip(encoded["offset_mapping"][seg], sequence_ids)]
            types = list(encoded["token_type_ids"][seg]) if question_in_first_read else [1] * len(ids)
            starts, ends = [], []
            for answer_start, text in gold_answers:
                span = _gold_tokens(offsets, answer_start, text)
                if span is not None and span[0] not in starts:
                    starts.append(span[0])
                    ends.append(span[1])
            mentions = entity_spans_for_segment(offsets, context_mentions)
            if question_mentions:
                question_offsets = [tuple(o) if s == 0 else None
                                    for o, s in zip(encoded["offset_mapping"][seg], sequence_ids)]
                mentions = entity_spans_for_segment(question_offsets, question_mentions) + mentions
            feature.input_ids.append(ids)
            feature.token_type_ids.append(types)
            feature.offsets.append(offsets)
            feature.start_positions.append(starts)
            feature.end_positions.append(ends)
            feature.entity_spans.append(mentions)
        features.append(feature)
    return features


def _pad(rows: Sequence[Sequence[int]], value: int, width: int | None = None) -> torch.Tensor:
    width = width if width is not None else max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
    return out


class ReadTwiceQACollator:
    """Flatten the segments of several [`ReadTwiceQAFeature`]s into one ReadTwice batch (`document_ids` = position of
    the feature in the batch). Works as a `Trainer` `data_collator`.

    Returned keys: `input_ids`, `attention_mask`, `token_type_ids` `(num_segments, max_length)`; `document_ids`,
    `segment_positions` `(num_segments,)`; `start_positions`, `end_positions` `(num_rows, max_answers)` (`-1` pad;
    row coordinates, i.e. shifted by the padded question length in the read-once layout); `entity_spans`
    `(num_segments, max_mentions, 2)` (`-1` pad) when `with_entities`; read-once layout: `question_input_ids`,
    `question_attention_mask`, `question_token_type_ids` `(num_questions, question_length)`,
    `question_document_ids` `(num_questions,)`.

    In the read-once layout the questions are padded to the longest question of the batch by default, so the model's
    rows (`[question; segment]`) put a segment's tokens at another column in each batch: what `Trainer.predict` and
    `Trainer.evaluate` concatenate (they drop the output's per-batch `question_length`) can then not be mapped back to
    tokens. Pass `question_length` (e.g. the checkpoint's `config.max_question_length`, the length
    [`prepare_readtwice_qa_features`] cut the questions to) to pad every batch's questions to that one width: token
    `j` of a segment is then column `question_length + j` of every row, and [`logits_per_feature`] splits the
    concatenated predictions per feature for [`postprocess_readtwice_qa`]. Real tokens are read the same either way
    (question padding is masked); only the row width, and the labels' shift, change.

    Args:
        pad_token_id (`int`, defaults to 0): the id that pads `input_ids` and `question_input_ids`.
        with_entities (`bool`, defaults to `False`): add `entity_spans` (for `memory_type="entity"`).
        with_labels (`bool`, defaults to `True`): add `start_positions` and `end_positions`.
        question_length (`int`, *optional*): read-once layout: pad `question_input_ids` (and their mask and token
            types) to this many tokens in every batch, instead of to the batch's longest question; ignored in the
            paper's layout, whose rows are the segments themselves (a segment's tokens start at column 0).

    Raises:
        TypeError: `question_length` that is not an int (or `None`).
        ValueError: `question_length` below 1.
    """

    def __init__(self, pad_token_id: int = 0, with_entities: bool = False, with_labels: bool = True,
                 question_length: int | None = None):
        if question_length is not None:
            if not isinstance(question_length, int) or isinstance(question_length, bool):
                raise TypeError(f"`question_length` must be an int or None, got {type(question_length).__name__}.")
            if question_length < 1:
                raise ValueError(f"`question_length` must be >= 1, got {question_length}.")
        self.pad_token_id = pad_token_id
        self.with_entities = with_entities
        self.with_labels = with_labels
        self.question_length = question_length

    def __call__(self, features: Sequence[ReadTwiceQAFeature]) -> dict[str, torch.Tensor]:
        """Batch `features` (a non-empty sequence of [`ReadTwiceQAFeature`] of one layout).

        Returns:
            `dict[str, torch.Tensor]`: long tensors, the keys and shapes of the class docstring (`input_ids`
            `(num_segments, max_length)`, `num_segments` summed over `features`, ...).

        Raises:
            TypeError: an element that is not a `ReadTwiceQAFeature` (e.g. a row of a `datasets.Dataset`, which holds
                no dataclasses: pass the list `prepare_readtwice_qa_features` returns).
            ValueError: no features, features of both layouts (read-once and question-in-first-read) mixed, or (with
                `question_length`) a question longer than `question_length` tokens.
        """
        if not features:
            raise ValueError("`features` is empty: a batch needs at least one ReadTwiceQAFeature.")
        wrong = next((f for f in features if not isinstance(f, ReadTwiceQAFeature)), None)
        if wrong is not None:
            raise TypeError(f"`features` must be ReadTwiceQAFeature objects (from prepare_readtwice_qa_features), got "
                            f"a {type(wrong).__name__}.")
        if len({f.question_ids is None for f in features}) > 1:
            raise ValueError("`features` mix the read-once layout (question_in_first_read=False) with the paper's "
                             "layout: prepare them with one setting, the model's.")
        segments = [ids for f in features for ids in f.input_ids]
        batch = {
            "input_ids": _pad(segments, self.pad_token_id),
            "attention_mask": _pad([[1] * len(s) for s in segments], 0),
            "token_type_ids": _pad([t for f in features for t in f.token_type_ids], 0),
            "document_ids": torch.tensor([d for d, f in enumerate(features) for _ in f.input_ids]),
            "segment_positions": torch.tensor([p for f in features for p in range(f.num_segments)]),
        }
        read_once = features[0].question_ids is not None
        shift = 0
        if read_once:
            questions = [f.question_ids for f in features]
            width = self.question_length
            if width is not None:
                longest = max(features, key=lambda f: len(f.question_ids))
                if len(longest.question_ids) > width:
                    raise ValueError(
                        f"example {longest.example_index}: its question has {len(longest.question_ids)} tokens, more "
                        f"than the collator's `question_length` {width}: prepare the features with "
                        f"`max_question_length` <= {width}, or pass a larger `question_length`."
                    )
            batch["question_input_ids"] = _pad(questions, self.pad_token_id, width)
            batch["question_attention_mask"] = _pad([[1] * len(q) for q in questions], 0, width)
            batch["question_token_type_ids"] = torch.zeros_like(batch["question_input_ids"])
            batch["question_document_ids"] = torch.arange(len(features))
            shift = batch["question_input_ids"].shape[1]
        if self.with_labels:
            for key in ("start_positions", "end_positions"):
                rows = [[p + shift for p in positions] for f in features for positions in getattr(f, key)]
                batch[key] = _pad(rows, -1, max(1, max(len(r) for r in rows)))
        if self.with_entities:
            spans = [s for f in features for s in f.entity_spans]
            width = max(1, max(len(s) for s in spans))
            tensor = torch.full((len(spans), width, 2), -1, dtype=torch.long)
            for i, row in enumerate(spans):
                if row:
                    tensor[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            batch["entity_spans"] = tensor
        return batch


@torch.no_grad()
def predict_readtwice_qa(model, features: Sequence[ReadTwiceQAFeature], collator: ReadTwiceQACollator,
                         batch_size: int = 8) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Run `model` (ReadTwice or [`GlobalNormBertForQuestionAnswering`]) over `features` in batches of documents.

    Returns:
        Per feature, `(start_logits (num_segments, row_length), end_logits, question_length)` as float32 numpy arrays.
    """
    model.eval()
    device = next(model.parameters()).device
    results = []
    for begin in range(0, len(features), batch_size):
        chunk = features[begin : begin + batch_size]
        batch = {k: v.to(device) for k, v in collator(chunk).items()
                 if k not in ("start_positions", "end_positions")}
        out = model(**batch, return_dict=True)
        start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        groups = out.group_ids.cpu().numpy()
        question_length = int(out.question_length or 0)
        for local in range(len(chunk)):
            rows = groups == local
            results.append((start[rows], end[rows], question_length))
    return results


def logits_per_feature(predictions, features: Sequence[ReadTwiceQAFeature],
                       collator: ReadTwiceQACollator) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Split what `Trainer.predict` returns for a ReadTwice QA model into the per-feature logits that
    [`postprocess_readtwice_qa`] takes (as [`predict_readtwice_qa`] returns them).

    `Trainer.predict` concatenates the rows of every batch (pads them to one width with `-100`, at the end) and drops
    the output's `question_length` (`keys_to_ignore_at_inference`). The rows come in the order of `features`, each
    feature's segments in order (the model's rows are question-major in the read-once layout), so the only thing to
    know is where a segment's tokens start: column 0 in the paper's layout, and in the read-once layout the fixed
    question width of `collator` (`ReadTwiceQACollator(question_length=...)`), or the questions' common length when
    they all have the same number of tokens.

    Args:
        predictions: `PredictionOutput.predictions` of `Trainer.predict(features)` with `collator` as its
            `data_collator`: a tuple whose first two entries are the start and end logits, arrays of shape
            `(num_rows, width)` with `num_rows` the segments of all `features`.
        features (`Sequence[ReadTwiceQAFeature]`): the features that were predicted, in the same order (an
            evaluation `DataLoader` keeps it).
        collator ([`ReadTwiceQACollator`]): the collator that batched them.

    Returns:
        `list[tuple[np.ndarray, np.ndarray, int]]`: per feature, `(start_logits (num_segments, width), end_logits,
        question_length)`; a segment's tokens are at the columns from `question_length` on.

    Raises:
        ValueError: read-once features whose questions differ in length with a collator that pads each batch to its
            longest question (`question_length=None`: the columns differ between batches, so the predictions cannot
            be mapped back to tokens); logits that are not two `(num_rows, width)` arrays; a number of rows other
            than the segments of `features`; rows too narrow for the question width and the longest segment.
    """
    if not isinstance(predictions, (tuple, list)) or len(predictions) < 2:
        raise ValueError("`predictions` must be the tuple `Trainer.predict(...).predictions`, starting with the start "
                         "and end logits.")
    start, end = np.asarray(predictions[0]), np.asarray(predictions[1])
    if start.ndim != 2 or start.shape != end.shape:
        raise ValueError(f"`predictions` must start with start and end logits of one shape (num_rows, width), got "
                         f"{start.shape} and {end.shape}.")
    shift = 0
    if any(f.question_ids is not None for f in features):
        lengths = {len(f.question_ids) for f in features if f.question_ids is not None}
        shift = collator.question_length
        if shift is None and len(lengths) > 1:
            raise ValueError(
                "the read-once questions have different lengths and the collator padded each batch to its longest "
                "question, so a segment's tokens start at another column in each batch: predict with "
                "`ReadTwiceQACollator(..., question_length=model.config.max_question_length)` (or another fixed "
                "width) to map the predictions back to tokens."
            )
        if shift is None:
            shift = lengths.pop()
    counts = [f.num_segments for f in features]
    if start.shape[0] != sum(counts):
        raise ValueError(f"`predictions` hold {start.shape[0]} rows, but `features` have {sum(counts)} segments: pass "
                         "the features that were predicted, in order (and no `dataloader_drop_last`).")
    longest = max((len(ids) for f in features for ids in f.input_ids), default=0)
    if start.shape[1] < shift + longest:
        raise ValueError(f"`predictions` rows are {start.shape[1]} wide, less than the question width {shift} plus "
                         f"the longest segment's {longest} tokens: were they predicted with this collator?")
    results, row = [], 0
    for count in counts:
        results.append((start[row : row + count], end[row : row + count], shift))
        row += count
    return results


def postprocess_readtwice_qa(examples: Sequence[dict], features: Sequence[ReadTwiceQAFeature], logits,
                             n_best_size: int = 20, max_answer_length: int = 30) -> dict[str, str]:
    """Best span across all segments of each document (App. C.1, "picks the most confident prediction amongst all the
    segments"): for each segment the `n_best_size` highest start and end logits over context tokens, spans with
    `start <= end < start + max_answer_length`, score `start + end`, mapped back to context characters (the span
    search of the ReadTwice pipeline, `segment_span_candidates`, one implementation for both).

    Args:
        examples (`Sequence[dict]`): the examples, with `context` (and `id`, else the index names the prediction).
        features (`Sequence[ReadTwiceQAFeature]`): their features, as `prepare_readtwice_qa_features` returns.
        logits: per feature, `(start_logits, end_logits, question_length)` as [`predict_readtwice_qa`] returns
            (or [`logits_per_feature`], from `Trainer.predict`): arrays or tensors of shape `(num_segments,
            row_length)`, a segment's tokens at the columns from `question_length` on (0 in the paper's layout).
        n_best_size (`int`, defaults to 20): start and end candidates per segment.
        max_answer_length (`int`, defaults to 30): longest span, in tokens.

    Returns:
        `dict[str, str]`: example id (or index) -> predicted text ("" when no valid span exists).

    Raises:
        ValueError: if `logits` and `features` differ in length.
    """
    if len(logits) != len(features):
        raise ValueError(f"{len(logits)} logits for {len(features)} features.")
    predictions = {}
    for feature, (start_logits, end_logits, shift) in zip(features, logits):
        example = examples[feature.example_index]
        best_score, best_text = -math.inf, ""
        for seg, offsets in enumerate(feature.offsets):
            n = len(offsets)
            s_logits = torch.as_tensor(start_logits[seg, shift : shift + n])
            e_logits = torch.as_tensor(end_logits[seg, shift : shift + n])
            for score, char_start, char_end in segment_span_candidates(s_logits, e_logits, offsets, n_best_size,
                                                                      max_answer_length):
                if score > best_score:
                    best_score, best_text = score, example["context"][char_start:char_end]
        predictions[str(example.get("id", feature.example_index))] = best_text
    return predictions


def first_mention_baseline(examples: Sequence[dict]) -> dict[str, str]:
    """A trivial floor: predict the first [`capitalized_mentions`] span of the context whose text does not occur in
    the question (Quoref answers are mostly names). No learning involved.

    Returns:
        `dict[str, str]`: example id -> predicted text.
    """
    predictions = {}
    for i, example in enumerate(examples):
        text = ""
        for start, end in capitalized_mentions(example["context"]):
            candidate = example["context"][start:end]
            if candidate not in example["question"]:
                text = candidate
                break
        predictions[str(example.get("id", i))] = text
    return predictions


@dataclass
class GlobalNormQuestionAnsweringOutput(ModelOutput):
    """Output of [`GlobalNormBertForQuestionAnswering`]: `loss` (eq. 7), `start_logits`/`end_logits`
    `(num_segments, segment_length)`, `group_ids` `(num_segments,)` and `question_length` (always 0)."""

    loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None
    group_ids: torch.Tensor | None = None
    question_length: int | None = None


class GlobalNormBertForQuestionAnswering(BertForQuestionAnswering):
    """The segment-independent baseline: `BertForQuestionAnswering` reading every segment alone, trained with the
    same OR-model loss with global normalisation over each document's segments as ReadTwice ([`readtwice_span_loss`],
    eq. 7) and decoded with the same cross-segment n-best. Takes the paper-layout batch of [`ReadTwiceQACollator`]
    (`document_ids` group the segments; `segment_positions` and `entity_spans` are accepted and ignored).
    """

    accepts_loss_kwargs = False

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, document_ids=None,
                segment_positions=None, entity_spans=None, start_positions=None, end_positions=None, **kwargs):
        """Shapes as [`ReadTwiceQACollator`]; returns loss (eq. 7), `start_logits`/`end_logits` `(num_segments,
        segment_length)` and `group_ids` (= `document_ids`).

        Raises:
            ValueError: with labels, `document_ids` not of shape `(num_segments,)` ([`readtwice_span_loss`]).
        """
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if document_ids is None:
            document_ids = torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = readtwice_span_loss(out.start_logits, out.end_logits, start_positions, end_positions,
                                       document_ids, attention_mask)
        return GlobalNormQuestionAnsweringOutput(loss, out.start_logits, out.end_logits, document_ids, 0)


__all__ = [
    "GlobalNormBertForQuestionAnswering",
    "GlobalNormQuestionAnsweringOutput",
    "ReadTwiceQACollator",
    "ReadTwiceQAFeature",
    "capitalized_mentions",
    "entity_spans_for_segment",
    "first_mention_baseline",
    "logits_per_feature",
    "postprocess_readtwice_qa",
    "predict_readtwice_qa",
    "prepare_readtwice_qa_features",
    "spacy_mentions",
    "truncate_question",
]
