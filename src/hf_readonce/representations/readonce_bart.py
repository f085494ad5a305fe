"""Representation adapter of ReadOnce BART: the document encoder's n/k vectors of whole documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..models.readonce_bart.configuration_readonce_bart import ReadOnceBartConfig
from ..models.readonce_bart.modeling_readonce_bart import (
    ReadOnceBartForConditionalGeneration,
    ReadOnceBartModel,
    ReadOnceDocumentEncoderOutput,
)
from ..models.readonce_bart.pipeline_readonce_bart import (
    ReadOnceSummarizationPipeline,
    ReadOnceText2TextGenerationPipeline,
)
from .base import AdapterBase, check_positive_ints, pad_rows, scoped_tokenizer_fingerprint, tokenizer_lock
from .registry import CardText, register_family


class ReadOnceBartAdapter(AdapterBase):
    r"""Stores ReadOnce representations (Lin et al. 2021) of whole documents: `representations` `(m, d_model)`
    (m = ceil(n / k)) and `num_tokens` `(1,)` int32 per document. Documents are read up to `max_document_length`
    tokens; a document longer than the model's `config.document_chunk_length` (T) is read in chunks of T tokens
    by the model itself (§5.5), so by default nothing is cut below the T·k capacity of the representation+text model.

    Args:
        model ([`ReadOnceBartForConditionalGeneration`]), tokenizer: the model and its tokenizer.
        max_document_length (`int`, *optional*): tokens read per document (longer documents are truncated).
            Defaults to the length the checkpoint records (`config.max_document_length`, written by the ReadOnce
            recipe), else `config.document_chunk_length * k`, the T·k capacity of §5.5 (T·k / k = T representations,
            as many positions as one chunk of text). The length is part of the settings a store is keyed by.
        compression_ratio (`int`, *optional*): k (defaults to the model's); part of the settings, so
            representations of another k are never returned for this one.
        batch_size (`int`, defaults to 32): documents per `encode_documents` call.

    Raises:
        TypeError: a setting that is not an int; a `model` of another family ([`AdapterBase.check_model`]).
        ValueError: a setting below 1 (naming it).
    """

    model_type = "readonce_bart"
    representation = "readonce_representations/v1"
    checkpoint_model_types = ("readonce_bart",)
    cli_settings = {
        "max_document_length": ("--max-document-length", None,
                                "tokens read per document (default: the length the checkpoint records, else the "
                                "model's chunk length x k, §5.5)"),
        "compression_ratio": ("--compression-ratio", None,
                              "k, tokens per stored vector, at inference (§5.2; default: the model's); another k is "
                              "stored as its own setting"),
    }
    recompute_needs_text = True  # only the representations are stored, not the tokens
    summary_prompt = "summary"  # what hf-readonce's summarization training pairs with every article
    # tokens of a question or prompt read with the vectors where the checkpoint records none (an adapter reads the
    # `max_question_length` its config records, `prompt_length_of`), as the pipeline's `max_question_len` (longer ones
    # are cut; `questions_cut` counts them, `hf-readonce answer` notes them, `summarize_from_store` refuses a longer
    # prompt)
    max_prompt_length = 32
    output_distribution = "first decoder step's token distribution for a fixed probe question"

    @classmethod
    def settings_kwargs(cls, settings) -> dict:
        """Constructor arguments of a stored space's settings: document length and k."""
        return {name: settings[name] for name in ("max_document_length", "compression_ratio") if name in settings}

    def __init__(self, model, tokenizer, max_document_length: int | None = None, compression_ratio: int | None = None,
                 batch_size: int = 32):
        self.check_model(model)
        check_positive_ints({"max_document_length": max_document_length, "compression_ratio": compression_ratio,
                             "batch_size": batch_size}, optional=("max_document_length", "compression_ratio"))
        self.model, self.tokenizer = model, tokenizer
        self.batch_size = batch_size
        self.compression_ratio = compression_ratio if compression_ratio is not None else model.config.compression_ratio
        self.max_document_length = (max_document_length if max_document_length is not None
                                    else model.config.default_document_length(self.compression_ratio))
        self.max_prompt_length = self.prompt_length_of(model.config)  # what the checkpoint was trained with
        self._tokenizer_hash = scoped_tokenizer_fingerprint(tokenizer)

    @classmethod
    def load_model(cls, name_or_path: str, **kwargs):
        """A [`ReadOnceBartForConditionalGeneration`] from a `readonce_bart` checkpoint (`kwargs` go to
        `from_pretrained`)."""
        return ReadOnceBartForConditionalGeneration.from_pretrained(name_or_path, **kwargs)

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()` (document encoder weights, aggregation, window and chunk
        settings)."""
        return self.model.representation_fingerprint()

    def settings(self) -> dict:
        """Representation settings: format, k, document length and the tokenizer's fingerprint."""
        return {"representation": self.representation, "compression_ratio": self.compression_ratio,
                "max_document_length": self.max_document_length, "tokenizer": self._tokenizer_hash}

    def num_tokens(self, tensors: dict) -> int:
        """Document tokens read for one stored document: its `num_tokens` tensor of shape `(1,)`, n.

        Raises:
            KeyError: tensors without `num_tokens`.
        """
        return int(tensors["num_tokens"][0])

    @torch.no_grad()
    def encode(self, texts):
        """Encode documents (`Sequence[str]`) -> one tensor dict per text (see the class docstring):
        `representations` of shape `(m, d_model)` (fp32, on CPU; m = ceil(n / k)) and `num_tokens` `(1,)` int32 for a
        document of n tokens.

        Raises:
            ValueError: an empty document (from the model).
        """
        batch = self._tokenize_documents(list(texts), padding=True, padding_side="right",
                                         return_tensors="pt").to(self.model.device)
        # the representations only: no attention weights or per-layer states, whatever the config's output switches
        # ask for
        reps = self.model.encode_documents(batch.input_ids, batch.attention_mask, self.compression_ratio,
                                           output_attentions=False, output_hidden_states=False)
        out = []
        for row in range(len(texts)):
            present = reps.attention_mask[row].bool()  # by the mask, not by assuming a valid prefix
            out.append({"representations": reps.representations[row][present].float().cpu(),
                        "num_tokens": batch.attention_mask[row].sum().to(torch.int32).reshape(1).cpu()})
        return out


    @torch.no_grad()
    def output_log_probs(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Log-probabilities `(1, vocab_size)` of the decoder's first token for the probe question read with one
        document's representations (decoder started at `decoder_start_token_id`)."""
        read = self.read([tensors], device=self.model.device, dtype=self.model.dtype)
        with tokenizer_lock(self.tokenizer):
            question = self.tokenizer([self.probe_question], return_tensors="pt")
        question = question.to(self.model.device)
        config = self.model.config
        start = next((t for t in (config.decoder_start_token_id, config.bos_token_id) if t is not None), 0)
        out = self.model(question.input_ids, attention_mask=question.attention_mask, document_representations=read,
                         document_attention_mask=read.attention_mask,
                         decoder_input_ids=torch.tensor([[start]], device=self.model.device), return_dict=True)
        return out.logits[:, -1].float().log_softmax(-1)

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None,
             dtype=None) -> ReadOnceDocumentEncoderOutput:
        """The model's input again: the stored representations of several documents as
        [`ReadOnceDocumentEncoderOutput`] (`document_representations=` of `forward` and `generate`).

        Args:
            stored (`Sequence[dict]`): tensors of documents as written by [`encode`] (e.g. `store.get_many(...)`).
            device, dtype: where and in which floating dtype to put them (default: as stored, on CPU).

        Returns:
            [`ReadOnceDocumentEncoderOutput`]: `representations` `(len(stored), max m, d_model)`, `attention_mask`
            `(len(stored), max m)`, this adapter's k and the model fingerprint.

        Raises:
            ValueError: if `stored` is empty.
        """
        if not stored:
            raise ValueError("nothing to read: `stored` is empty.")
        representations, mask = pad_rows([t["representations"] for t in stored], device=device, dtype=dtype)
        return ReadOnceDocumentEncoderOutput(representations=representations, attention_mask=mask,
                                       compression_ratio=self.compression_ratio, model_fingerprint=self.fingerprint())

    def generation_inputs(self, read: ReadOnceDocumentEncoderOutput, prompt: str | None = None) -> dict:
        r"""The `generate()` arguments that summarize the documents of `read` from their stored representations: the
        representation+text model reads a prompt with each document's vectors (§3.4), as
        [`ReadOnceSummarizationPipeline`] does when it reads the documents itself.

        Args:
            read ([`ReadOnceDocumentEncoderOutput`]): [`read`]'s output for n documents (on the model's device).
            prompt (`str` or `list[str]`, *optional*): the text read with every document (or one per document, e.g.
                questions), at most `max_prompt_length` tokens (the checkpoint's `max_question_length`, else 32), as
                the pipeline reads it: longer ones are cut to them, as there ([`questions_cut`] counts them);
                defaults to `summary_prompt` (`"summary"`, what hf-readonce's summarization training pairs with every
                article).

        Returns:
            `dict`: `input_ids` and `attention_mask` `(n, prompt tokens)` (right-padded) and
            `document_representations=read`.

        Raises:
            TypeError: a `prompt` that is not a str or a list of str. ValueError: an empty prompt, or a list of
                another length than the documents.
        """
        rows = read.representations.shape[0]
        prompt = self.summary_prompt if prompt is None else prompt
        prompts = [prompt] * rows if isinstance(prompt, str) else prompt
        if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
            raise TypeError(f"`prompt` must be a str or a list of str, got {type(prompt).__name__}.")
        if len(prompts) != rows:
            raise ValueError(f"{len(prompts)} prompts for {rows} documents: give one prompt, or one per document.")
        for i, text in enumerate(prompts):
            if not text.strip():
                raise ValueError(f"prompt {i} is empty: give the text read with each document (default \"summary\").")
        with tokenizer_lock(self.tokenizer):  # right padding: positions count from column 0
            batch = self.tokenizer(list(prompts), truncation=True, max_length=self.max_prompt_length, padding=True,
                                   padding_side="right", return_tensors="pt")
        device = read.representations.device
        return {"input_ids": batch.input_ids.to(device), "attention_mask": batch.attention_mask.to(device),
                "document_representations": read}


__all__ = ["ReadOnceBartAdapter"]

register_family(
    name="readonce_bart",
    configs=(ReadOnceBartConfig,),
    auto_models={"AutoModel": ReadOnceBartModel, "AutoModelForSeq2SeqLM": ReadOnceBartForConditionalGeneration},
    auto_class="AutoModelForSeq2SeqLM",
    pipelines={"text2text-generation": ReadOnceText2TextGenerationPipeline,
               "summarization": ReadOnceSummarizationPipeline},
    adapter=ReadOnceBartAdapter,
    answer="generative",
    answer_function="hf_readonce.tasks.generative_qa_store:answer_from_representations",
    summarize=True,
    exports=(ReadOnceDocumentEncoderOutput,),
    cards={
        "readonce_bart": CardText(
            tag="readonce",
            title="ReadOnce Transformers",
            paper="Lin et al., ACL 2021, \"ReadOnce Transformers: Reusable Representations of Text for "
                  "Transformers\"",
            paragraphs=(
                "A document encoder reads a document once and compresses its n tokens into ceil(n / k) vectors. A "
                "BART reads the question (or prompt) alone through its first L encoder layers, appends the document "
                "vectors after layer L, and generates the answer.",
                "The vectors depend only on the document, so they are computed once and reused by every question, "
                "task and epoch; they carry the encoder's fingerprint, so vectors from another encoder are refused.",
            ),
            pipeline_tag="text2text-generation",
            widget=None,  # its pipeline reads a question with a document: no single-text example can run it
            usage=(
                "```python\nimport torch\nfrom transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n\n"
                "model = AutoModelForSeq2SeqLM.from_pretrained(\"{repo_id}\", trust_remote_code=True).eval()\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\"{trust})\n"
                "passages = [\"Emma is a novel by Jane Austen, published in December 1815.\"]\n"
                "questions = [\"Who wrote Emma?\"]   # one per passage, in order\n"
                "doc = tokenizer(passages, truncation=True, max_length=256, padding=True, return_tensors=\"pt\")\n"
                "with torch.no_grad():   # else the representations keep their autograd graph alive\n"
                "    reps = model.encode_documents(doc.input_ids, doc.attention_mask)   # read once\n"
                "q = tokenizer(questions, padding=True, return_tensors=\"pt\")\n"
                "answers = model.generate(input_ids=q.input_ids, attention_mask=q.attention_mask,\n"
                "                         document_representations=reps, max_new_tokens=24)\n```"
            ),
        ),
    },
)
