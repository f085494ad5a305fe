"""Representation adapter of ReadTwice-BERT: the read-once first read (BERT₁ states and the memory table) of whole
documents, written into a [`~hf_readonce.store.RepresentationStore`] once and read back as the model's own input,
[`ReadTwiceDocumentOutput`], for every question about those documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import PretrainedConfig

from ..models.readtwice_bert.configuration_readtwice_bert import ReadTwiceBertConfig
from ..models.readtwice_bert.modeling_readtwice_bert import (
    ReadTwiceBertForMaskedLM,
    ReadTwiceBertForQuestionAnswering,
    ReadTwiceBertModel,
    ReadTwiceDocumentOutput,
)

# the mention heuristic and the finders a checkpoint or a stored space can name live with the pipeline, which travels
# with checkpoints and uses the one a checkpoint records (`config.mentions`)
from ..models.readtwice_bert.pipeline_readtwice_bert import (
    MENTION_FUNCTIONS,
    ReadTwiceQuestionAnsweringPipeline,
    capitalized_mentions,
    check_overflow_windows,
    entity_spans_for_segment,
)
from .base import AdapterBase, masked_log_softmax, scoped_tokenizer_fingerprint, tokenizer_lock
from .registry import CardText, register_family


class ReadTwiceBertAdapter(AdapterBase):
    r"""Stores, per document, what [`ReadTwiceBertModel.encode_documents`] computes in the read-once layout
    (`question_in_first_read=False`): segments `[CLS] part [SEP]` of `config.segment_length` ids sharing
    `config.segment_overlap` tokens (token type 1), read by BERT₁, and their memories. Tensors of a document with `S`
    segments of at most `T` ids and `M` memories:

    - `first_read_hidden_state` `(S, T, hidden_size)` floating; `attention_mask` `(S, T)` int32;
    - `input_ids` `(S, T)` int32; `offsets` `(S, T, 2)` int32 character spans, `(-1, -1)` for special tokens/padding;
    - `memory_values` `(M, hidden_size)` floating; `memory_segment_index` `(M,)` int32 (segment of each memory);
    - `entity_token_mask` `(S, T)` int32 and `entity_spans` `(S, max_mentions, 2)` int32 for `memory_type="entity"`
      (`max_mentions`: the most mentions of one of the document's segments, at least 1; `(-1, -1)` pads).

    Segment length, overlap and memory type come from the model's config (they are part of the settings); the
    mention finder of entity memories is the adapter's one setting of its own (`--mentions` on the command line).

    Args:
        model ([`ReadTwiceBertForQuestionAnswering`] or [`ReadTwiceBertModel`]): with `question_in_first_read=False`.
        tokenizer: its fast tokenizer.
        mention_fn (`Callable[[str], list[tuple[int, int]]]`, *optional*): entity mention character spans; required
            for `memory_type="entity"`. Its name is part of the settings.
        batch_size (`int`, defaults to 8): documents per `encode_documents` call.
        mentions (`str`, *optional*): the mention finder by name, for `memory_type="entity"`: a name of
            [`MENTION_FUNCTIONS`] (`"capitalized_mentions"`, the package's capitalisation heuristic, not a
            named-entity recogniser); what `--mentions` passes. Either this or `mention_fn`.

    Raises:
        ValueError: if the model reads the question in its first read (nothing document-only to store),
            `memory_type="entity"` without a mention finder, `mentions` not a known name, or given for other
            memories, or with a different `mention_fn`; `batch_size < 1`.
        TypeError: if the tokenizer is not fast; a `model` of another family ([`AdapterBase.check_model`]).
    """

    model_type = "readtwice_bert"
    representation = "readtwice_first_read/v1"
    checkpoint_model_types = ("readtwice_bert", "bert")
    cli_settings = {
        "mentions": ("--mentions", None, "entity memories (memory_type='entity'): the mention finder, "
                                         "'capitalized_mentions' (a capitalisation heuristic, not a named-entity "
                                         "recogniser; the only one the command line knows)"),
    }
    recompute_needs_text = False
    output_distribution = ("answer-span start and end distributions over each segment for a fixed probe question "
                           "(QA head)")

    @classmethod
    def settings_kwargs(cls, settings) -> dict:
        """Constructor arguments of a stored space's settings: the mention function when it is the package's
        `capitalized_mentions` (another one cannot be rebuilt from its name: pass it yourself)."""
        if isinstance(settings.get("mentions"), str) and settings["mentions"] in MENTION_FUNCTIONS:
            return {"mention_fn": MENTION_FUNCTIONS[settings["mentions"]]}
        return {}

    @classmethod
    def stores_representations(cls, model) -> bool:
        """Whether `model`'s first read depends on the document alone (`question_in_first_read=False`), so that it
        can be stored; a checkpoint of the paper's layout reads each segment with its question and stores nothing."""
        return not model.config.question_in_first_read

    def __init__(self, model, tokenizer, mention_fn=None, batch_size: int = 8, mentions: str | None = None):
        self.check_model(model)
        config = model.config
        if config.question_in_first_read:
            raise ValueError(
                "ReadTwice first reads are document-only (storable) only with question_in_first_read=False."
            )
        if mentions is not None:
            if not isinstance(mentions, str) or mentions not in MENTION_FUNCTIONS:
                raise ValueError(f"`mentions` (--mentions) must be one of {sorted(MENTION_FUNCTIONS)}, got "
                                 f"{mentions!r}.")
            if config.memory_type != "entity":
                raise ValueError(f"`mentions` (--mentions) applies to entity memories only; this model's memory_type "
                                 f"is {config.memory_type!r}.")
            if mention_fn is not None and mention_fn is not MENTION_FUNCTIONS[mentions]:
                raise ValueError("pass `mention_fn` or `mentions`, not both.")
            mention_fn = MENTION_FUNCTIONS[mentions]
        if config.memory_type == "entity" and mention_fn is None:
            raise ValueError("memory_type='entity' needs a `mention_fn` (entity mentions of each document; on the "
                             "command line `--mentions capitalized_mentions`, a capitalisation heuristic).")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}.")
        self.model, self.tokenizer, self.mention_fn, self.batch_size = model, tokenizer, mention_fn, batch_size
        self._tokenizer_hash = scoped_tokenizer_fingerprint(tokenizer)

    @classmethod
    def load_model(cls, name_or_path: str, **kwargs):
        """A [`ReadTwiceBertForQuestionAnswering`] from a `readtwice_bert` checkpoint, or from a plain `bert` one
        (BERT₂ copied from BERT₁'s last layers, memory and QA head newly initialized: seed beforehand), in the
        read-once layout (`question_in_first_read=False`, the default for a `bert` checkpoint).

        Args:
            name_or_path (`str`): checkpoint folder or Hub id.
            **kwargs: passed to `from_pretrained` (config overrides such as `memory_type=` included).

        Raises:
            ValueError: if the loaded model reads the question in its first read (a checkpoint trained with
                `question_in_first_read=True`): its first read depends on the question, so there is nothing to store.
        """
        config_dict, _ = PretrainedConfig.get_config_dict(name_or_path)
        if config_dict.get("model_type") == "bert":
            kwargs.setdefault("question_in_first_read", False)
            # ReadTwiceBertConfig keeps a BERT checkpoint's model_type ("bert"); the registry needs its own
            kwargs["model_type"] = cls.model_type
        loaded = ReadTwiceBertForQuestionAnswering.from_pretrained(name_or_path, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, info) with output_loading_info=True
        if model.config.question_in_first_read:
            raise ValueError(
                f"{name_or_path!r} reads the question in its first read (question_in_first_read=True): its first "
                "read depends on the question and cannot be stored. Store documents with a model trained with "
                "question_in_first_read=False."
            )
        return loaded

    @property
    def _encoder(self):
        return self.model.bert if hasattr(self.model, "bert") else self.model

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()` (embeddings, BERT₁, ExtractMemories weights; the config fields
        that change them)."""
        return self._encoder.representation_fingerprint()

    def settings(self) -> dict:
        """Format, segment length and overlap, memory type, mention function and the tokenizer's fingerprint."""
        config = self.model.config
        return {"representation": self.representation, "segment_length": config.segment_length,
                "segment_overlap": config.segment_overlap, "memory_type": config.memory_type,
                "mentions": getattr(self.mention_fn, "__name__", None) if self.mention_fn else None,
                "tokenizer": self._tokenizer_hash}

    def num_tokens(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Segment tokens stored for one document (special tokens and overlaps included): the sum of its
        `attention_mask` of shape `(S, T)`.

        Raises:
            KeyError: tensors without `attention_mask`.
        """
        return int(tensors["attention_mask"].sum())

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """Encode documents (see the class docstring for tensor names and shapes).

        Raises:
            TypeError: if `texts` is a single str. ValueError: naming an empty text.
        """
        if isinstance(texts, str):
            raise TypeError("`texts` must be a sequence of str, not a single str.")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"document {i} is empty or not a string: nothing to encode.")
        out = []
        for begin in range(0, len(texts), self.batch_size):
            out += self._encode_batch(list(texts[begin : begin + self.batch_size]))
        return out

    def _encode_batch(self, texts):
        config = self.model.config
        with tokenizer_lock(self.tokenizer):
            enc = self.tokenizer(texts, truncation=True, max_length=config.segment_length,
                                 stride=config.segment_overlap, return_overflowing_tokens=True,
                                 return_offsets_mapping=True)
        check_overflow_windows(self.tokenizer, enc, texts, 0)
        owner = list(enc["overflow_to_sample_mapping"])
        num, width = len(owner), max(len(ids) for ids in enc["input_ids"])
        ids = torch.zeros(num, width, dtype=torch.long)
        mask, offsets = torch.zeros_like(ids), torch.full((num, width, 2), -1, dtype=torch.long)
        spans_rows = []
        mentions = [self.mention_fn(t) for t in texts] if config.memory_type == "entity" else None
        for row in range(num):
            n = len(enc["input_ids"][row])
            ids[row, :n] = torch.tensor(enc["input_ids"][row])
            mask[row, :n] = 1
            seq = enc.sequence_ids(row)
            row_offsets = [tuple(o) if s == 0 else None for o, s in zip(enc["offset_mapping"][row], seq)]
            for j, o in enumerate(row_offsets):
                if o is not None:
                    offsets[row, j] = torch.tensor(o)
            if mentions is not None:
                spans_rows.append(entity_spans_for_segment(row_offsets, mentions[owner[row]]))
        entity_spans = None
        if mentions is not None:
            entity_spans = torch.full((num, max(1, max(map(len, spans_rows))), 2), -1, dtype=torch.long)
            for row, spans in enumerate(spans_rows):
                if spans:
                    entity_spans[row, : len(spans)] = torch.tensor(spans)
        return self._first_read(ids, mask, offsets, owner, len(texts), entity_spans)

    def _first_read(self, ids, mask, offsets, owner, num_documents, entity_spans=None):
        """BERT₁ over the segments `ids`/`mask` `(S, T)` of `num_documents` documents (`owner[s]`: document of
        segment s) -> one tensor dict per document (see the class docstring)."""
        device = self._encoder.device
        document_ids = torch.tensor(owner)
        # the first read and its memories only: no attention weights or per-layer states, whatever the config's
        # output switches ask for
        states = self._encoder.encode_documents(
            ids.to(device), mask.to(device), torch.ones_like(ids).to(device), document_ids.to(device),
            entity_spans=entity_spans.to(device) if entity_spans is not None else None, output_attentions=False,
            output_hidden_states=False,
        )
        result = []
        for d in range(num_documents):
            rows = (document_ids == d).nonzero().flatten()
            first, last = int(rows[0]), int(rows[-1]) + 1
            length = int(mask[first:last].sum(dim=1).max())
            memories = (states.memory_document_ids.cpu() == d).nonzero().flatten()
            tensors = {
                "first_read_hidden_state": states.first_read_hidden_state[first:last, :length].float().cpu(),
                "attention_mask": mask[first:last, :length].to(torch.int32),
                "input_ids": ids[first:last, :length].to(torch.int32),
                "offsets": offsets[first:last, :length].to(torch.int32),
                "memory_values": states.memory_values[memories.to(device)].float().cpu(),
                "memory_segment_index": (states.memory_segment_index.cpu()[memories] - first).to(torch.int32),
            }
            if entity_spans is not None:
                tensors["entity_token_mask"] = states.entity_token_mask[first:last, :length].cpu().to(torch.int32)
                # the batch pads the spans (-1) to the most mentions of any of its segments: kept to this document's
                # own most (at least 1), so what is stored does not depend on the documents it was encoded with
                spans = entity_spans[first:last]
                width = max(1, int((spans[..., 0] >= 0).sum(dim=1).max()))
                tensors["entity_spans"] = spans[:, :width].to(torch.int32)
            result.append(tensors)
        return result

    @torch.no_grad()
    def recompute_from_stored(self, stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recompute one stored document's first read from its stored segments (`input_ids`, `attention_mask` of
        shape `(S, T)`, `offsets` `(S, T, 2)` and, for entity memories, `entity_spans` `(S, max_mentions, 2)`),
        without its text: the same tensors [`encode`] writes, same names and shapes.

        Raises:
            KeyError: tensors that are not a ReadTwice document's.
        """
        spans = stored.get("entity_spans")
        (fresh,) = self._first_read(stored["input_ids"].long(), stored["attention_mask"].long(),
                                    stored["offsets"].long(), [0] * int(stored["input_ids"].shape[0]), 1,
                                    spans.long() if spans is not None else None)
        return fresh

    def comparable(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`entity_spans` compared without padding columns beyond the document's own most mentions per segment (shape
        `(S, max_mentions, 2)` cut to them, at least 1, as [`encode`] writes them; a store may also hold spans padded
        (-1) to the most mentions of the batch a document was encoded in); the other tensors as they are."""
        out = dict(tensors)
        spans = out.get("entity_spans")
        if spans is not None and spans.ndim == 3:
            width = int((spans[..., 0] >= 0).sum(dim=1).max()) if spans.numel() else 0
            out["entity_spans"] = spans[:, : max(1, width)]
        return out

    @torch.no_grad()
    def output_log_probs(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """Start and end log-probabilities of the QA head over each row (probe question, then a segment) of one
        document, `(2 * num_rows, row_length)` (padding has probability 0); `None` for a model without a QA head."""
        if not hasattr(self.model, "qa_outputs"):
            return None
        device = self.model.device
        read = self.read([tensors], device=device, dtype=self.model.dtype)
        with tokenizer_lock(self.tokenizer):
            question = self.tokenizer([self.probe_question], return_tensors="pt")
        question = question.to(device)
        out = self.model(document_states=read, question_input_ids=question.input_ids,
                         question_attention_mask=question.attention_mask,
                         question_token_type_ids=torch.zeros_like(question.input_ids),
                         question_document_ids=torch.zeros(1, dtype=torch.long, device=device), return_dict=True)
        return torch.cat([masked_log_softmax(out.start_logits, out.attention_mask),
                          masked_log_softmax(out.end_logits, out.attention_mask)])

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None,
             dtype=None) -> ReadTwiceDocumentOutput:
        """The model's input again: stored tensors of several documents (as written by [`encode`], e.g.
        `store.get_many(...)`) -> one [`ReadTwiceDocumentOutput`] with `document_ids` 0..len(stored)-1 (pass them as
        `question_document_ids`), carrying this model's fingerprint; feed it to
        `model(question_input_ids=..., question_document_ids=..., document_states=...)`.

        Args:
            stored (`Sequence[dict]`): tensors of documents as written by [`encode`].
            device, dtype: where and in which floating dtype to put the states (default: as stored, on CPU).

        Returns:
            [`ReadTwiceDocumentOutput`]: segments of every document in order, right-padded to the longest one:
            `first_read_hidden_state` of shape `(total_segments, max T, hidden_size)`, `attention_mask` (and
            `entity_token_mask` for entity memories) `(total_segments, max T)`, `document_ids` and
            `segment_positions` `(total_segments,)`, `memory_values` `(total_memories, hidden_size)` and the
            memories' `memory_document_ids`, `memory_segment_positions`, `memory_segment_index`
            `(total_memories,)`.

        Raises:
            ValueError: if `stored` is empty.
        """
        if not stored:
            raise ValueError("nothing to read: `stored` is empty.")
        dtype = dtype or stored[0]["first_read_hidden_state"].dtype
        width = max(int(t["attention_mask"].shape[1]) for t in stored)
        total = sum(int(t["attention_mask"].shape[0]) for t in stored)
        hidden = self.model.config.hidden_size
        # the padded outputs are allocated once and each document's rows copied (and cast) into them: the states,
        # the largest tensors, are copied once
        states = torch.zeros((total, width, stored[0]["first_read_hidden_state"].shape[-1]), dtype=dtype,
                             device=device)
        masks = torch.zeros((total, width), dtype=torch.long, device=device)
        entity = (torch.zeros((total, width), dtype=torch.bool, device=device)
                  if any("entity_token_mask" in t for t in stored) else None)
        doc_ids, positions, values, mem_doc, mem_pos, mem_seg = [], [], [], [], [], []
        offset = 0
        for d, t in enumerate(stored):
            s, length = t["attention_mask"].shape
            states[offset : offset + s, :length] = t["first_read_hidden_state"]
            masks[offset : offset + s, :length] = t["attention_mask"]
            doc_ids.append(torch.full((s,), d, dtype=torch.long))
            positions.append(torch.arange(s))
            if "entity_token_mask" in t:
                entity[offset : offset + s, :length] = t["entity_token_mask"]
            seg = t["memory_segment_index"].long()
            values.append(t["memory_values"].to(dtype).reshape(-1, hidden))
            mem_doc.append(torch.full_like(seg, d))
            mem_pos.append(seg)
            mem_seg.append(seg + offset)
            offset += s
        return ReadTwiceDocumentOutput(
            first_read_hidden_state=states,
            attention_mask=masks,
            document_ids=torch.cat(doc_ids).to(device),
            segment_positions=torch.cat(positions).to(device),
            entity_token_mask=entity,
            memory_values=torch.cat(values).to(device),
            memory_document_ids=torch.cat(mem_doc).to(device),
            memory_segment_positions=torch.cat(mem_pos).to(device),
            memory_segment_index=torch.cat(mem_seg).to(device),
            memory_type=self.model.config.memory_type,
            model_fingerprint=self.fingerprint(),
        )


__all__ = ["ReadTwiceBertAdapter", "capitalized_mentions"]

register_family(
    name="readtwice_bert",
    configs=(ReadTwiceBertConfig,),
    auto_models={"AutoModel": ReadTwiceBertModel, "AutoModelForQuestionAnswering": ReadTwiceBertForQuestionAnswering,
                 "AutoModelForMaskedLM": ReadTwiceBertForMaskedLM},
    auto_class="AutoModelForQuestionAnswering",
    pipelines={"question-answering": ReadTwiceQuestionAnsweringPipeline},
    answer="extractive",
    answer_function="hf_readonce.tasks.readtwice_qa_store:answer_from_readtwice_store",
    adapter=ReadTwiceBertAdapter,
    exports=(ReadTwiceDocumentOutput,),
    cards={
        "readtwice_bert": CardText(
            tag="readtwice",
            title="ReadTwice",
            paper="Zemlyanskiy et al., 2021, \"ReadTwice: Reading Very Large Documents with Memories\"",
            paragraphs=(
                "A BERT reads every segment of a document independently; memories extracted from each segment go "
                "into one table per document, which a memory-attention layer reads before a second read of each "
                "segment.",
                "With the question left out of the first read, the first read depends only on the document and is "
                "stored once.",
            ),
            pipeline_tag="question-answering",
            usage=(
                "```python\nfrom transformers import pipeline\n\n"
                "qa = pipeline(\"question-answering\", model=\"{repo_id}\", trust_remote_code=True)\n"
                "long_document = \"Emma is a novel by Jane Austen, published in December 1815. \" * 40   # any text\n"
                "qa(question=[\"Who wrote Emma?\", \"When was it published?\"], context=long_document)\n"
                "# the document is cut into the model's segments; the best span is picked across all of them\n```\n\n"
                "Or the model itself (hf-readonce is not needed): a flat batch of segments `(num_segments, "
                "segment_length)` with `document_ids` and `segment_positions` `(num_segments,)` and `entity_spans` "
                "`(num_segments, max_mentions, 2)` (inclusive token spans of entity mentions, `(-1, -1)` pads; read "
                "by entity memories). The question stands beside each segment (`question_in_first_read=True`, the "
                "paper's layout) or is read apart from the document (`False`, the layout whose first read is stored "
                "once):\n\n"
                "```python\nimport torch\nfrom transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n"
                "model = AutoModelForQuestionAnswering.from_pretrained(\"{repo_id}\", trust_remote_code=True).eval()\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\", trust_remote_code=True)\n"
                "parts, question = [\"Emma is a novel by Jane Austen.\", \"It was published in December 1815.\"], "
                "\"Who wrote Emma?\"\n"
                "if model.config.question_in_first_read:\n"
                "    segments, extra, side = tokenizer([question] * len(parts), parts, padding=True, return_tensors=\"pt\"), "
                "{}, 1\n"
                "else:\n"
                "    segments, side = tokenizer(parts, padding=True, return_tensors=\"pt\"), 0\n"
                "    asked = tokenizer([question], return_tensors=\"pt\")\n"
                "    extra = {\"question_input_ids\": asked[\"input_ids\"], \"question_attention_mask\": "
                "asked[\"attention_mask\"]}\n"
                "emma = [segments.char_to_token(0, 0, sequence_index=side), segments.char_to_token(0, 3, "
                "sequence_index=side)]\n"
                "spans = torch.tensor([[emma], [[-1, -1]]])  # one mention (\"Emma\") in the first segment\n"
                "with torch.no_grad():\n"
                "    out = model(**segments, document_ids=torch.tensor([0, 0]), segment_positions=torch.tensor([0, 1]),\n"
                "                entity_spans=spans, **extra)\n"
                "print(out.start_logits.shape)  # (num_segments, row_length): a row is a segment with its question\n```"
            ),
        ),
    },
)
