"""Representation adapter of DeFormer-BERT: passage states after the k decomposed layers, for whole documents cut
into the windows of the model's own QA path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from ..models.deformer_bert.configuration_deformer_bert import DeformerBertConfig
from ..models.deformer_bert.modeling_deformer_bert import (
    DeformerBertForQuestionAnswering,
    DeformerBertModel,
    DeformerBertModelOutput,
    DeformerPassageOutput,
)
from ..models.deformer_bert.pipeline_deformer_bert import DeformerQuestionAnsweringPipeline, passage_windows
from .base import (
    AdapterBase,
    DocumentError,
    masked_log_softmax,
    pad_batch,
    pad_rows,
    scoped_tokenizer_fingerprint,
    tokenizer_lock,
)
from .registry import CardText, register_family


@dataclass
class PassageWindow:
    """One window of a tokenized passage.

    Attributes:
        passage_index (`int`): index of the passage in the list given to [`split_passages`].
        input_ids (`list[int]`): window tokens followed by `[SEP]` (no `[CLS]`); at most `max_passage_length` ids.
        offsets (`list[tuple[int, int] | None]`): character span of each token in the passage text; `None` for the
            final `[SEP]`.
    """

    passage_index: int
    input_ids: list[int]
    offsets: list[tuple[int, int] | None] = field(repr=False)


def tokenize_questions(tokenizer, questions: Sequence[str], max_question_length: int = 64) -> list[list[int]]:
    """Tokenize questions as BERT's first segment, `[CLS] question [SEP]`, truncated to `max_question_length` ids.

    Raises:
        ValueError: if `max_question_length < 3` or a question is empty.
    """
    if max_question_length < 3:
        raise ValueError(f"`max_question_length` must be >= 3, got {max_question_length}.")
    for i, question in enumerate(questions):
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question {i} is empty or not a string.")
    with tokenizer_lock(tokenizer):
        encoded = tokenizer(list(questions), truncation=True, max_length=max_question_length)
    return [list(ids) for ids in encoded["input_ids"]]


def split_passages(
    tokenizer, passages: Sequence[str], max_passage_length: int = 320, doc_stride: int = 128
) -> list[list[PassageWindow]]:
    """Split each passage into overlapping windows of at most `max_passage_length` ids (tokens + `[SEP]`).

    Consecutive windows share `doc_stride` tokens (HF's `stride` convention), so an answer cut by one window boundary
    is whole in the next. Windows depend only on the passage text and these two numbers.

    Args:
        tokenizer: a fast tokenizer (offsets are needed).
        passages (`Sequence[str]`): passage texts.
        max_passage_length (`int`, defaults to 320): window length in ids, `[SEP]` included.
        doc_stride (`int`, defaults to 128): tokens shared by consecutive windows.

    Returns:
        `list[list[PassageWindow]]`: the windows of each passage, in order.

    Raises:
        ValueError: if `max_passage_length < 2`, `doc_stride` is not in `[0, max_passage_length - 1)`, or a passage
            is empty.
    """
    if max_passage_length < 2:
        raise ValueError(f"`max_passage_length` must be >= 2, got {max_passage_length}.")
    body = max_passage_length - 1
    if not 0 <= doc_stride < body:
        raise ValueError(f"`doc_stride` must be in [0, {body}) for max_passage_length={max_passage_length}.")
    for i, passage in enumerate(passages):
        if not isinstance(passage, str) or not passage.strip():
            raise ValueError(f"passage {i} is empty or not a string.")
    # Whole passages are tokenized on purpose (they are windowed below), so the tokenizer's "longer than the
    # specified maximum" warning does not apply: mark it as already shown (transformers' own switch for it).
    if hasattr(tokenizer, "deprecation_warnings"):
        tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
    with tokenizer_lock(tokenizer):
        encoded = tokenizer(list(passages), add_special_tokens=False, return_offsets_mapping=True)
    result = []
    for index, (ids, offsets) in enumerate(zip(encoded["input_ids"], encoded["offset_mapping"])):
        window_ids, window_offsets = passage_windows(ids, offsets, max_passage_length, doc_stride,
                                                     tokenizer.sep_token_id)
        result.append([PassageWindow(index, w, o) for w, o in zip(window_ids, window_offsets)])
    return result


@dataclass
class PassageWindowCache:
    """Lower-layer passage states of many windows, as [`encode_windows`] returns them and [`predict_cached`] reads
    them, with the fingerprint and k of the model that computed them (checked by the model when it reads them).

    Attributes:
        states (`dict[tuple[int, int], torch.Tensor]`): `(passage_index, window_index)` -> unpadded states of shape
            `(window_length, hidden_size)`; `cache[(p, w)]` reads it too.
        model_fingerprint (`str`, *optional*): the model's `representation_fingerprint()`.
        num_decomposed_layers (`int`, *optional*): the k the states were computed with.
    """

    states: dict = field(default_factory=dict, repr=False)
    model_fingerprint: str | None = None
    num_decomposed_layers: int | None = None

    def __getitem__(self, key):
        return self.states[key]

    def __setitem__(self, key, value):
        self.states[key] = value


@torch.no_grad()
def encode_windows(model, windows, batch_size: int = 32, pad_token_id: int = 0,
                   progress: bool = False) -> PassageWindowCache:
    """Encode every window once with `model.encode_passages`.

    Args:
        windows (`list[list[PassageWindow]]`): the windows of each passage (an empty list leaves that passage out;
            the cache keeps the passages' indices in `windows`).
        batch_size (`int`, defaults to 32): windows per `encode_passages` call, shortest first.
        progress (`bool`, defaults to `False`): a tqdm bar on stderr counting encoded windows.

    Returns:
        [`PassageWindowCache`]: unpadded states `(window_length, hidden_size)` per `(passage_index, window_index)`,
        with the model's fingerprint and k.
    """
    model.eval()
    device = next(model.parameters()).device
    flat = [(p, w, window) for p, ws in enumerate(windows) for w, window in enumerate(ws)]
    flat.sort(key=lambda item: len(item[2].input_ids))
    cache = PassageWindowCache()
    bar = None
    if progress:  # no bar object at all without it (an adapter's encode calls this once per batch)
        from tqdm.auto import tqdm

        bar = tqdm(total=len(flat), desc="encode", unit="window", dynamic_ncols=True)
    for begin in range(0, len(flat), batch_size):
        items = flat[begin : begin + batch_size]
        ids = pad_batch([item[2].input_ids for item in items], pad_token_id).to(device)
        mask = pad_batch([[1] * len(item[2].input_ids) for item in items]).to(device)
        # the states only: no attention weights or per-layer states, whatever the config's output switches ask for
        states = model.encode_passages(ids, attention_mask=mask, output_attentions=False, output_hidden_states=False)
        for row, (p, w, window) in enumerate(items):
            cache[(p, w)] = states.last_hidden_state[row, : len(window.input_ids)]
        cache.model_fingerprint, cache.num_decomposed_layers = states.model_fingerprint, states.num_decomposed_layers
        if bar is not None:
            bar.update(len(items))
    if bar is not None:
        bar.close()
    return cache


class DeformerBertAdapter(AdapterBase):
    r"""Stores DeFormer-BERT passage states (output of layers 1..k) for whole documents.

    A document is tokenized without special tokens (offsets kept) and cut into windows of `max_passage_length - 1`
    tokens + `[SEP]`, consecutive windows sharing `doc_stride` tokens ([`split_passages`], the
    windowing of the model's own QA path), so documents longer than the model's positions are covered. Each window
    is encoded by `model.encode_passages`. The stored tensors of a document with `W` windows and `T` window tokens
    in all (`[SEP]`s included) are:

    - `hidden_states`: `(T, hidden_size)` floating, the windows' states concatenated (no padding);
    - `input_ids`: `(T,)` int32; `offsets`: `(T, 2)` int32 character spans in the text, `(-1, -1)` for `[SEP]`;
    - `window_lengths`: `(W,)` int32, summing to `T`.

    Args:
        model ([`DeformerBertForQuestionAnswering`] or [`DeformerBertModel`]): with `num_decomposed_layers > 0`.
        tokenizer: the model's fast tokenizer.
        max_passage_length (`int`, *optional*): window length in tokens, `[SEP]` included; defaults to the value
            the checkpoint records (`config.max_passage_length`, what it was trained with), else 256.
        doc_stride (`int`, *optional*): tokens shared by consecutive windows; defaults to `config.doc_stride`,
            else 64 (`hf-readonce encode` uses the same defaults).
        batch_size (`int`, defaults to 32): windows per `encode_passages` call.

    Raises:
        ValueError: if k = 0, if windows would exceed `max_position_embeddings - passage_position_offset`, or for
            window settings [`split_passages`] rejects.
        TypeError: if the tokenizer is not fast; a `model` of another family ([`AdapterBase.check_model`]).
    """

    model_type = "deformer_bert"
    representation = "deformer_passage_states/v1"
    checkpoint_model_types = ("deformer_bert", "bert")
    cli_settings = {
        "max_passage_length": ("--max-passage-length", 256, "window length in tokens, [SEP] included"),
        "doc_stride": ("--doc-stride", 64, "tokens shared by consecutive windows"),
    }
    recompute_needs_text = False
    output_distribution = ("answer-span start and end distributions over each window for a fixed probe question "
                           "(QA head)")

    def __init__(self, model, tokenizer, max_passage_length: int | None = None, doc_stride: int | None = None,
                 batch_size: int = 32):
        self.check_model(model)
        config = model.config
        if getattr(config, "num_decomposed_layers", 0) <= 0:
            raise ValueError("`model` must have num_decomposed_layers > 0 to cache passage states.")
        if max_passage_length is None:
            max_passage_length = getattr(config, "max_passage_length", None) or self.cli_settings["max_passage_length"][1]
        if doc_stride is None:
            recorded = getattr(config, "doc_stride", None)
            doc_stride = recorded if recorded is not None else self.cli_settings["doc_stride"][1]
        for name, value in (("max_passage_length", max_passage_length), ("doc_stride", doc_stride),
                            ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"`{name}` must be an int, got {value!r}.")
        room = config.max_position_embeddings - config.passage_position_offset
        if not 2 <= max_passage_length <= room:
            raise ValueError(
                f"`max_passage_length` must be in [2, {room}] (max_position_embeddings="
                f"{config.max_position_embeddings} - passage_position_offset={config.passage_position_offset}), "
                f"got {max_passage_length}."
            )
        if not 0 <= doc_stride < max_passage_length - 1:
            raise ValueError(f"`doc_stride` must be in [0, {max_passage_length - 1}), got {doc_stride}.")
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        self.model = model
        self.tokenizer = tokenizer
        self.max_passage_length = max_passage_length
        self.doc_stride = doc_stride
        self.batch_size = batch_size
        self._tokenizer_hash = scoped_tokenizer_fingerprint(tokenizer)

    @classmethod
    def load_model(cls, name_or_path: str, num_decomposed_layers: int | None = None, **kwargs):
        """A [`DeformerBertForQuestionAnswering`] from a `deformer_bert` checkpoint or a plain `bert` one (its QA
        head, if absent, newly initialized; seed beforehand for reproducible answers).

        Args:
            name_or_path (`str`): checkpoint folder or Hub id.
            num_decomposed_layers (`int`, *optional*): override k (default: the checkpoint's).
            **kwargs: passed to `from_pretrained`.
        """
        extra = {} if num_decomposed_layers is None else {"num_decomposed_layers": num_decomposed_layers}
        return DeformerBertForQuestionAnswering.from_pretrained(name_or_path, **extra, **kwargs)

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()` (weights of the embeddings and layers 1..k, k, position
        offset, hidden size)."""
        return self.model.representation_fingerprint()

    def settings(self) -> dict:
        """Representation settings: format, k, window length, stride and the tokenizer's fingerprint."""
        return {"representation": self.representation,
                "num_decomposed_layers": int(self.model.config.num_decomposed_layers),
                "max_passage_length": self.max_passage_length, "doc_stride": self.doc_stride,
                "tokenizer": self._tokenizer_hash}

    @classmethod
    def settings_match(cls, settings: dict, tokenizer) -> bool:
        """Whether stored `settings` were made by this adapter type with this tokenizer (used to find the space of
        a store when the window settings are not given)."""
        return settings.get("representation") == cls.representation and settings.get(
            "tokenizer") == scoped_tokenizer_fingerprint(tokenizer)

    def num_tokens(self, tensors: dict) -> int:
        """Tokens stored for one document (window tokens, `[SEP]`s included): T, the length of its `input_ids` of
        shape `(T,)`.

        Raises:
            KeyError: tensors without `input_ids`.
        """
        return int(tensors["input_ids"].shape[0])

    def windows(self, texts: Sequence[str]) -> list[list[PassageWindow]]:
        """The windows of each text ([`split_passages`]).

        Raises:
            DocumentError (a `ValueError`): naming the index of an empty or non-string text, or of a text with no
                token after tokenization.
        """
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DocumentError(i, "is empty or not a string: nothing to encode.")
        windows = split_passages(self.tokenizer, list(texts), self.max_passage_length, self.doc_stride)
        for i, doc_windows in enumerate(windows):  # a lone [SEP] would be stored as the passage: refuse it
            if not any(offset is not None for window in doc_windows for offset in window.offsets):
                raise DocumentError(i, "has no token after tokenization (only characters the tokenizer drops, such "
                                       "as control or zero-width characters): nothing to encode.")
        return windows

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """Encode documents; returns one tensor dict per text (see the class docstring for names and shapes).

        Raises:
            TypeError: if `texts` is a single str.
            DocumentError (a `ValueError`): naming the index of an empty or non-string text, or of a text with no
                token after tokenization ([`windows`]); errors of `encode_passages`.
        """
        if isinstance(texts, str):
            raise TypeError("`texts` must be a sequence of str, not a single str.")
        windows = self.windows(texts)
        pad = self.tokenizer.pad_token_id or 0
        cache = encode_windows(self.model, windows, batch_size=self.batch_size, pad_token_id=pad)
        out = []
        for p, doc_windows in enumerate(windows):
            states = torch.cat([cache[(p, w)].float().cpu() for w in range(len(doc_windows))])
            ids = [i for window in doc_windows for i in window.input_ids]
            offsets = [o if o is not None else (-1, -1) for window in doc_windows for o in window.offsets]
            out.append({
                "hidden_states": states,
                "input_ids": torch.tensor(ids, dtype=torch.int32),
                "offsets": torch.tensor(offsets, dtype=torch.int32).reshape(-1, 2),
                "window_lengths": torch.tensor([len(w.input_ids) for w in doc_windows], dtype=torch.int32),
            })
        return out

    @torch.no_grad()
    def recompute_from_stored(self, stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recompute one stored document's passage states from its stored windows (token ids, offsets, window
        lengths), without its text: the same tensors [`encode`] writes, the states freshly computed
        (`hidden_states` of shape `(T, hidden_size)`, the other tensors `stored`'s).

        Raises:
            KeyError: tensors that are not a DeFormer document's (no `input_ids` / `window_lengths`).
        """
        windows, _ = self.unpack(stored)
        pad = self.tokenizer.pad_token_id or 0
        cache = encode_windows(self.model, [windows], batch_size=self.batch_size, pad_token_id=pad)
        fresh = {name: tensor for name, tensor in stored.items() if name != "hidden_states"}
        fresh["hidden_states"] = torch.cat([cache[(0, w)].float().cpu() for w in range(len(windows))])
        return fresh

    @torch.no_grad()
    def output_log_probs(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """Start and end log-probabilities of the QA head over `[CLS] probe question [SEP] window` for each window of
        one document, `(2 * num_windows, question_length + max_window_length)` (padding has probability 0); `None`
        for a model without a QA head."""
        if not hasattr(self.model, "qa_outputs"):
            return None
        read = self.read([tensors], device=self.model.device, dtype=self.model.dtype)
        (question,) = tokenize_questions(self.tokenizer, [self.probe_question], 64)
        rows = read.last_hidden_state.shape[0]
        questions = torch.tensor([question] * rows, device=self.model.device)
        out = self.model(input_ids=questions, attention_mask=torch.ones_like(questions), passage_states=read,
                         return_dict=True)  # the output's fields, whatever `config.return_dict` says
        mask = torch.cat([torch.ones_like(questions), read.attention_mask.to(questions.device)], dim=1)
        width = out.start_logits.shape[1]
        return torch.cat([masked_log_softmax(out.start_logits, mask[:, :width]),
                          masked_log_softmax(out.end_logits, mask[:, :width])])

    @staticmethod
    def unpack(tensors: dict, passage_index: int = 0) -> tuple[list[PassageWindow], list[torch.Tensor]]:
        """Inverse of [`encode`] for one document: its windows (ids, offsets as [`PassageWindow`]) and each
        window's states `(window_length, hidden_size)` (views into `hidden_states`)."""
        ids = tensors["input_ids"].tolist()
        offsets = tensors["offsets"].tolist()
        windows, states, start = [], [], 0
        for length in tensors["window_lengths"].tolist():
            end = start + length
            window_offsets = [tuple(o) if o[0] >= 0 else None for o in offsets[start:end]]
            windows.append(PassageWindow(passage_index, ids[start:end], window_offsets))
            states.append(tensors["hidden_states"][start:end])
            start = end
        return windows, states


    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None, dtype=None) -> DeformerPassageOutput:
        """The model's input again: the windows of every stored document, one row per window (documents in order,
        then their windows), as a [`DeformerPassageOutput`] that `model(..., passage_states=...)` takes.

        Args:
            stored (`Sequence[dict]`): tensors of documents as written by [`encode`] (e.g. `store.get_many(...)`).
            device, dtype: where and in which floating dtype to put the states (default: as stored, on CPU).

        Returns:
            [`DeformerPassageOutput`]: `last_hidden_state` `(total_windows, max_window_length, hidden_size)`,
            `attention_mask` `(total_windows, max_window_length)`, the model fingerprint and k of this adapter.

        Raises:
            ValueError: if `stored` is empty.
        """
        if not stored:
            raise ValueError("nothing to read: `stored` is empty.")
        states = [state for tensors in stored for state in self.unpack(tensors)[1]]
        hidden, mask = pad_rows(states, device=device, dtype=dtype)
        return DeformerPassageOutput(last_hidden_state=hidden, attention_mask=mask,
                                     num_decomposed_layers=int(self.model.config.num_decomposed_layers),
                                     model_fingerprint=self.fingerprint())


__all__ = ["DeformerBertAdapter", "PassageWindow", "PassageWindowCache", "encode_windows", "split_passages",
           "tokenize_questions"]

register_family(
    name="deformer_bert",
    configs=(DeformerBertConfig,),
    auto_models={"AutoModel": DeformerBertModel, "AutoModelForQuestionAnswering": DeformerBertForQuestionAnswering},
    auto_class="AutoModelForQuestionAnswering",
    pipelines={"question-answering": DeformerQuestionAnsweringPipeline},
    adapter=DeformerBertAdapter,
    answer="extractive",
    answer_function="hf_readonce.tasks.question_answering_store:answer_from_store",
    exports=(DeformerBertModelOutput, DeformerPassageOutput),
    lazy_exports={"DeformerDistillationTrainer": "hf_readonce.tasks.trainers"},
    cards={
        "deformer_bert": CardText(
            tag="deformer",
            title="DeFormer",
            paper="Cao et al., ACL 2020, \"DeFormer: Decomposing Pre-trained Transformers for Faster Question "
                  "Answering\"",
            paragraphs=(
                "The lower k layers of a BERT read the question and the passage separately; only the upper layers "
                "read them together. The passage's states after layer k do not depend on the question, so they are "
                "computed once per passage, cached (in memory or in an hf-readonce `RepresentationStore`), and reused "
                "by every question about it: each question then runs through the lower layers alone.",
                "A DeFormer starts from a QA-fine-tuned BERT (its weights load unchanged) and is fine-tuned with the "
                "paper's auxiliary supervision: knowledge distillation from the full model's answer distributions "
                "and layerwise similarity of the upper layers' outputs to the full model's.",
            ),
            pipeline_tag="question-answering",
            usage=(
                "```python\nfrom transformers import pipeline\n\n"
                "qa = pipeline(\"question-answering\", model=\"{repo_id}\", trust_remote_code=True)\n"
                "qa(question=[\"Who wrote Emma?\", \"When was it published?\"],\n"
                "   context=\"Emma is a novel by Jane Austen, published in December 1815.\")\n"
                "# the context's passage states are computed once and reused for both questions\n```\n\n"
                "Or the model itself (hf-readonce is not needed):\n\n"
                "```python\nimport torch\nfrom transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n"
                "model = AutoModelForQuestionAnswering.from_pretrained(\"{repo_id}\", trust_remote_code=True).eval()\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\"{trust})\n"
                "question, passage = \"Who wrote Emma?\", \"Emma is a novel by Jane Austen.\"\n"
                "out = model(**tokenizer(question, passage, return_tensors=\"pt\"))   # pair input, as BERT\n"
                "passage_ids = tokenizer(passage, return_tensors=\"pt\").input_ids[:, 1:]   # `passage [SEP]`\n"
                "with torch.no_grad():   # else the cached states keep their autograd graph alive\n"
                "    states = model.encode_passages(passage_ids)   # read once\n"
                "question_ids = tokenizer(question, return_tensors=\"pt\").input_ids   # `[CLS] question [SEP]`\n"
                "out = model(input_ids=question_ids, passage_states=states)   # every question reuses them\n```"
            ),
        ),
        # the plain BERT a DeFormer is decomposed and distilled from (its checkpoints load as DeFormers)
        "bert": CardText(
            tag="extractive-qa",
            title="BERT extractive QA",
            paper="Devlin et al., NAACL 2019, \"BERT: Pre-training of Deep Bidirectional Transformers for Language "
                  "Understanding\"",
            paragraphs=(
                "A plain `BertForQuestionAnswering`: a span-classification head over BERT's pair encoding "
                "`[CLS] question [SEP] passage [SEP]`.",
                "In hf-readonce it is the full model that a DeFormer is decomposed from and distilled from.",
            ),
            pipeline_tag="question-answering",
            usage=(
                "```python\nfrom transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n"
                "model = AutoModelForQuestionAnswering.from_pretrained(\"{repo_id}\"{trust}).eval()\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\"{trust})\n```"
            ),
        ),
    },
)
