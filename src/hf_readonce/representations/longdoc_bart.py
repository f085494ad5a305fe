"""Representation adapter of LongDoc BART: the encoder's outputs of whole documents, read once and reused by every
later summary of the document (other lengths, beams, prompts, decoder-only training epochs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers.modeling_outputs import BaseModelOutput

from ..models.longdoc_bart.configuration_longdoc_bart import LongDocBartConfig
from ..models.longdoc_bart.modeling_longdoc_bart import (
    LongDocBartForConditionalGeneration,
    LongDocBartModel,
    LongDocBartPreTrainedModel,
)
from ..models.longdoc_bart.pipeline_longdoc_bart import LongDocSummarizationPipeline
from .base import AdapterBase, check_positive_ints, pad_rows, scoped_tokenizer_fingerprint
from .registry import CardText, register_family


@dataclass
class LongDocEncoderOutput(BaseModelOutput):
    r"""Stored encoder outputs of several documents, as transformers' [`~transformers.modeling_outputs.BaseModelOutput`]
    (so `model.generate(encoder_outputs=read, attention_mask=read.attention_mask)` and
    `model(encoder_outputs=read, attention_mask=read.attention_mask, labels=...)` take it as they take the encoder's
    own output), with the padding mask and the fingerprint of the model that wrote them.

    Attributes:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, max n, d_model)`): right-padded encoder outputs.
        attention_mask (`torch.LongTensor` of shape `(batch, max n)`): 1 for real tokens; pass it as
            `attention_mask=` (the cross-attention's padding mask).
        model_fingerprint (`str`, *optional*): `representation_fingerprint()` of the model that wrote them.

    The model checks `model_fingerprint` against its own (another model's outputs are refused with a
    `ValueError`) and casts the states to its dtype; `generate` never modifies the object (beam search expands a
    copy), so it can be passed again.
    """

    attention_mask: torch.LongTensor | None = None
    model_fingerprint: str | None = None


class LongDocBartAdapter(AdapterBase):
    r"""Stores LongDoc BART encoder outputs (§2.3's encoder, neighborhood or convolutional attention) of whole
    documents: per document `hidden_states` `(n, d_model)` float (n = the document's tokens, special tokens
    included, no padding) and `num_tokens` `(1,)` int32 (= n).

    A document is tokenized with the model's tokenizer (special tokens added, right padding, truncated to
    `max_document_length` tokens) and encoded in batches of `batch_size`; padding does not change a document's
    outputs (the encoder masks it), so each row's real tokens are what the model computes reading the document
    alone. The encoder runs in eval mode (no dropout) whatever the model's mode, which is restored afterwards.

    Args:
        model ([`LongDocBartForConditionalGeneration`]): the model (any encoder attention type).
        tokenizer: its fast tokenizer.
        max_document_length (`int`, *optional*): tokens read per document (longer documents are truncated).
            Defaults to the length the checkpoint was trained with (`config.max_document_length`, recorded by the
            LongDoc summarization recipe), else `config.max_position_embeddings` (BART's positions are learned, so
            no more fit; extend the table first, e.g.
            `hf_readonce.recipes.longdoc_summarization.extend_position_embeddings`). Part of the settings a store is
            keyed by.
        batch_size (`int`, defaults to 8): documents per encoder call.

    Raises:
        TypeError: a setting that is not an int; a tokenizer that is not fast; a `model` of another family
            ([`AdapterBase.check_model`]).
        ValueError: a setting below 1, or `max_document_length > config.max_position_embeddings` (naming it).
    """

    model_type = "longdoc_bart"
    representation = "longdoc_encoder_outputs/v1"
    checkpoint_model_types = ("longdoc_bart",)
    cli_settings = {
        "max_document_length": ("--max-document-length", None,
                                "tokens read per document (default: the length the checkpoint records, else the "
                                "model's max_position_embeddings)"),
    }
    recompute_needs_text = True  # only the encoder outputs are stored, not the tokens
    output_distribution = "first decoder step's token distribution (decoder started at decoder_start_token_id)"

    def __init__(self, model, tokenizer, max_document_length: int | None = None, batch_size: int = 8):
        self.check_model(model)
        check_positive_ints({"max_document_length": max_document_length, "batch_size": batch_size},
                            optional=("max_document_length",))
        positions = model.config.max_position_embeddings
        if max_document_length is None:  # what the checkpoint was trained with, else all the positions
            max_document_length = model.config.default_document_length()
        if max_document_length > positions:
            raise ValueError(f"`max_document_length` {max_document_length} exceeds the model's "
                             f"max_position_embeddings {positions} (learned positions); extend the position table.")
        self.model, self.tokenizer = model, tokenizer
        self.max_document_length, self.batch_size = max_document_length, batch_size
        self._tokenizer_hash = scoped_tokenizer_fingerprint(tokenizer)

    @classmethod
    def load_model(cls, name_or_path: str, **kwargs):
        """A [`LongDocBartForConditionalGeneration`] from a `longdoc_bart` checkpoint (`kwargs` go to
        `from_pretrained`)."""
        return LongDocBartForConditionalGeneration.from_pretrained(name_or_path, **kwargs)

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()` (encoder weights, encoder config fields, transformers major
        version)."""
        return self.model.representation_fingerprint()

    def settings(self) -> dict:
        """Representation settings: format, document length and the tokenizer's fingerprint."""
        return {"representation": self.representation, "max_document_length": self.max_document_length,
                "tokenizer": self._tokenizer_hash}

    def num_tokens(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Document tokens read for one stored document: its `num_tokens` tensor of shape `(1,)`, n.

        Raises:
            KeyError: tensors without `num_tokens`.
        """
        return int(tensors["num_tokens"][0])

    def tokenize(self, texts: Sequence[str]):
        """The batch the encoder reads: `input_ids`, `attention_mask` `(len(texts), longest)`, right-padded,
        truncated to `max_document_length` (what [`encode`] and a model reading the documents itself use).

        Raises:
            TypeError: `texts` is a single str. ValueError: naming the index of an empty or non-string text.
        """
        return self._tokenize(texts)

    def _tokenize(self, texts: Sequence[str], new_call: bool = True):
        """[`tokenize`], noting the documents it cuts for [`documents_cut`] (`new_call=False`: a further part of the
        batch of the same `encode` call)."""
        if isinstance(texts, str):
            raise TypeError("`texts` must be a sequence of str, not a single str.")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"document {i} of `texts` is empty or not a string: nothing to encode.")
        return self._tokenize_documents(list(texts), new_call=new_call, padding=True, padding_side="right",
                                        return_tensors="pt")

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """Encode documents (`Sequence[str]`) -> one tensor dict per text (see the class docstring): `hidden_states`
        of shape `(n, d_model)` (fp32, on CPU) and `num_tokens` `(1,)` int32 for a document of n tokens.

        Raises:
            TypeError, ValueError: as [`tokenize`].
        """
        encoder = self.model.get_encoder()
        was_training = encoder.training
        encoder.eval()
        out = []
        try:
            for start in range(0, len(texts), self.batch_size):
                batch = self._tokenize(texts[start : start + self.batch_size], new_call=start == 0)
                batch = batch.to(self.model.device)
                states = encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 return_dict=True).last_hidden_state
                for row in range(states.shape[0]):
                    present = batch.attention_mask[row].bool()
                    out.append({"hidden_states": states[row][present].float().cpu(),
                                "num_tokens": present.sum().to(torch.int32).reshape(1).cpu()})
        finally:
            encoder.train(was_training)
        return out

    @torch.no_grad()
    def output_log_probs(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Log-probabilities `(1, vocab_size)` of the decoder's first token given one document's encoder outputs
        (decoder started at `decoder_start_token_id`)."""
        read = self.read([tensors], device=self.model.device, dtype=self.model.dtype)
        config = self.model.config
        start = next((t for t in (config.decoder_start_token_id, config.bos_token_id) if t is not None), 0)
        out = self.model(encoder_outputs=read, attention_mask=read.attention_mask,
                         decoder_input_ids=torch.tensor([[start]], device=self.model.device))
        return out.logits[:, -1].float().log_softmax(-1)

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None, dtype=None) -> LongDocEncoderOutput:
        """The model's input again: stored encoder outputs of several documents as [`LongDocEncoderOutput`]
        (`encoder_outputs=` of `forward` and `generate`, with `attention_mask=read.attention_mask`).

        Args:
            stored (`Sequence[dict]`): tensors of documents as written by [`encode`] (e.g. `store.get_many(...)`).
            device, dtype: where and in which floating dtype to put them (default: on CPU, in the model's dtype;
                the model would cast them anyway).

        Returns:
            [`LongDocEncoderOutput`]: `last_hidden_state` `(len(stored), max n, d_model)`, `attention_mask`
            `(len(stored), max n)` and the model fingerprint.

        Raises:
            ValueError: if `stored` is empty.
        """
        if not stored:
            raise ValueError("nothing to read: `stored` is empty.")
        states, mask = pad_rows([t["hidden_states"] for t in stored], device=device,
                                dtype=self.model.dtype if dtype is None else dtype)
        return LongDocEncoderOutput(last_hidden_state=states, attention_mask=mask,
                                    model_fingerprint=self.fingerprint())

    def generation_inputs(self, read: LongDocEncoderOutput, prompt: str | None = None) -> dict:
        r"""The `generate()` arguments that summarize the documents of `read` from their stored encoder outputs
        (the decoder cross-attends to them as to the encoder's own output, §2.3).

        Args:
            read ([`LongDocEncoderOutput`]): [`read`]'s output for n documents.
            prompt: not used by this family (its summaries are conditioned on the document alone); must be `None`.

        Returns:
            `dict`: `encoder_outputs=read` and `attention_mask=read.attention_mask` `(n, max n tokens)`.

        Raises:
            ValueError: a `prompt` was given.
        """
        if prompt is not None:
            raise ValueError("`prompt` does not apply to LongDoc BART: its summaries are generated from the document "
                             "alone.")
        return {"encoder_outputs": read, "attention_mask": read.attention_mask}


__all__ = ["LongDocBartAdapter", "LongDocEncoderOutput"]

register_family(
    name="longdoc_bart",
    configs=(LongDocBartConfig,),
    auto_models={"AutoModel": LongDocBartModel, "AutoModelForSeq2SeqLM": LongDocBartForConditionalGeneration},
    auto_class="AutoModelForSeq2SeqLM",
    pipelines={"summarization": LongDocSummarizationPipeline},
    adapter=LongDocBartAdapter,
    summarize=True,
    exports=(LongDocBartPreTrainedModel,),
    cards={
        "longdoc_bart": CardText(
            tag="longdoc",
            title="LongDoc BART",
            paper="Kosaraju, Ang & Nabulsi, Stanford CS224N report, \"Faster Transformers for Document "
                  "Summarization\"",
            paragraphs=(
                "A BART whose encoder self-attention is local or compressed: neighborhood attention lets token i "
                "attend to the tokens within r positions (O(n·r) instead of O(n²)), and convolutional attention "
                "shortens the projected queries, keys and values with a strided convolution, attends over the "
                "compressed positions and restores the length with a transposed convolution. The decoder may use "
                "causal neighborhood attention.",
                "The parameter names are BART's, so any BART checkpoint loads unchanged; only the convolutional types "
                "add weights. The encoder's outputs depend only on the document: the summarization pipeline encodes "
                "each document once for every summary asked of it, and they can be stored and reused (they carry the "
                "encoder's fingerprint).",
            ),
            pipeline_tag="summarization",
            usage=(
                "```python\nfrom transformers import pipeline\n\n"
                "summarize = pipeline(\"summarization\", model=\"{repo_id}\", trust_remote_code=True)\n"
                "long_article = \"The council approved a new bridge over the river on Tuesday. \" * 60  # any text\n"
                "other_article = \"Heavy rain flooded several streets in the town centre overnight.\"\n"
                "summarize([long_article, other_article], max_new_tokens=60, num_beams=4)\n"
                "# each distinct document is encoded once for every summary asked of it\n```\n\n"
                "Or the model itself:\n\n"
                "```python\nfrom transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n\n"
                "model = AutoModelForSeq2SeqLM.from_pretrained(\"{repo_id}\", trust_remote_code=True).eval()\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\"{trust})\n"
                "article = \"Heavy rain flooded several streets in the town centre overnight.\"\n"
                "doc = tokenizer(article, truncation=True, return_tensors=\"pt\")\n"
                "summary = model.generate(input_ids=doc.input_ids, attention_mask=doc.attention_mask,\n"
                "                         max_new_tokens=60, num_beams=4)\n```"
            ),
        ),
    },
)
