"""The mean_qa family's representation adapter and its registration: the module the package's
`hf_readonce.families` entry point names, imported by `import hf_readonce`."""

from collections.abc import Mapping, Sequence

import torch

from hf_readonce.representations import AdapterBase, CardText, pad_rows, register_family
from hf_readonce.representations.base import DocumentError, check_positive_ints, scoped_tokenizer_fingerprint

from .models.mean_qa.configuration_mean_qa import MeanQaBertConfig
from .models.mean_qa.modeling_mean_qa import MeanQaBertForQuestionAnswering, MeanQaBertModel, MeanQaPassageOutput
from .models.mean_qa.pipeline_mean_qa import MeanQaQuestionAnsweringPipeline


class MeanQaAdapter(AdapterBase):
    r"""Stores each passage's token states, read once by [`MeanQaBertModel.encode_passages`]. A passage is read as
    `[CLS] passage [SEP]`, cut to `max_passage_length` tokens; the stored tensors of a passage of n tokens are:

    - `hidden_states`: `(n, hidden_size)` floating;
    - `input_ids`: `(n,)` int32; `offsets`: `(n, 2)` int32 character spans in the text, `(0, 0)` for `[CLS]`/`[SEP]`.

    Args:
        model ([`MeanQaBertForQuestionAnswering`] or [`MeanQaBertModel`]).
        tokenizer: the model's fast tokenizer.
        max_passage_length (`int`, *optional*): tokens read per passage; defaults to the checkpoint's recorded
            `max_passage_length`, else 128 (`hf-readonce encode --max-passage-length`).
        batch_size (`int`, defaults to 8): passages per model call.

    Raises:
        TypeError: a model of another family, a tokenizer that is not fast, a setting that is not an int.
        ValueError: a setting below 1, or a `max_passage_length` beyond the model's positions.
    """

    model_type = "mean_qa_bert"
    representation = "mean_qa_passage_states/v1"
    checkpoint_model_types = ("mean_qa_bert",)
    cli_settings = {"max_passage_length": ("--max-passage-length", 128, "tokens read per passage, [CLS] and [SEP] "
                                                                        "included")}
    recompute_needs_text = False  # the token ids are stored: `verify --recompute` reads them back

    def __init__(self, model, tokenizer, max_passage_length: int | None = None, batch_size: int = 8):
        self.check_model(model)
        if max_passage_length is None:
            max_passage_length = (getattr(model.config, "max_passage_length", None)
                                  or self.cli_settings["max_passage_length"][1])
        check_positive_ints({"max_passage_length": max_passage_length, "batch_size": batch_size})
        if max_passage_length > model.config.max_position_embeddings:
            raise ValueError(f"`max_passage_length` must be at most max_position_embeddings="
                             f"{model.config.max_position_embeddings}, got {max_passage_length}.")
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.max_passage_length = self.max_document_length = max_passage_length  # the base class counts cut ones
        self._tokenizer_hash = scoped_tokenizer_fingerprint(tokenizer)

    @classmethod
    def load_model(cls, name_or_path, **overrides):
        """A [`MeanQaBertForQuestionAnswering`] from a `mean_qa_bert` checkpoint.

        Args:
            name_or_path (`str` or `os.PathLike`): a local folder or a Hub repository id.
            **overrides: [`~transformers.PreTrainedModel.from_pretrained`] arguments (e.g. `dtype`).

        Raises:
            OSError: no checkpoint there (as `from_pretrained` raises it).
        """
        return MeanQaBertForQuestionAnswering.from_pretrained(name_or_path, **overrides)

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()` (64 hex characters)."""
        return self.model.representation_fingerprint()

    def settings(self) -> dict:
        """The stored layout, the passage length and the tokenizer's fingerprint (JSON-ready)."""
        return {"representation": self.representation, "max_passage_length": self.max_passage_length,
                "tokenizer": self._tokenizer_hash}

    def num_tokens(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Tokens read of one stored passage (n, the length of its `input_ids`)."""
        return int(tensors["input_ids"].shape[0])

    def _states(self, ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """Passage states `(n_i, hidden_size)` of token id rows `(n_i,)`, `batch_size` rows per model call."""
        states = []
        device = self.model.device
        for start in range(0, len(ids), self.batch_size):
            rows = ids[start:start + self.batch_size]
            padded = torch.nn.utils.rnn.pad_sequence([row.long() for row in rows], batch_first=True).to(device)
            mask = torch.zeros_like(padded)
            for i, row in enumerate(rows):
                mask[i, : len(row)] = 1
            with torch.no_grad():
                out = self.model.encode_passages(padded, mask).passage_states
            states += [out[i, : len(row)].cpu() for i, row in enumerate(rows)]
        return states

    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """One dict of tensors per text (see the class docstring), in order.

        Raises:
            DocumentError: naming the index of an empty or non-string text.
        """
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DocumentError(i, "is empty or not a string")
        batch = self._tokenize_documents(texts, return_offsets_mapping=True)
        ids = [torch.tensor(row, dtype=torch.int32) for row in batch["input_ids"]]
        return [{"hidden_states": states, "input_ids": row, "offsets": torch.tensor(offsets, dtype=torch.int32)}
                for states, row, offsets in zip(self._states(ids), ids, batch["offset_mapping"], strict=True)]

    def recompute_from_stored(self, stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One passage's tensors computed again from its stored token ids (what `verify --recompute` compares).

        Args:
            stored (`Mapping[str, torch.Tensor]`): one passage's stored tensors (see the class docstring); `input_ids`
                of shape `(n,)` is read.

        Returns:
            `dict[str, torch.Tensor]`: `hidden_states` of shape `(n, hidden_size)` recomputed, `input_ids` and
            `offsets` as stored.
        """
        return {"hidden_states": self._states([stored["input_ids"]])[0], "input_ids": stored["input_ids"],
                "offsets": stored["offsets"]}

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None, dtype=None) -> MeanQaPassageOutput:
        """Stored passages -> the model's `passage_states` input.

        Args:
            stored (`Sequence[Mapping[str, torch.Tensor]]`): stored passages, each with `hidden_states` of shape
                `(n_i, hidden_size)`.
            device (`torch.device` or `str`, *optional*), dtype (`torch.dtype`, *optional*): where and as what the
                states are returned; as stored by default.

        Returns:
            [`MeanQaPassageOutput`]: `passage_states` of shape `(len(stored), longest, hidden_size)` right-padded
            with zeros, `passage_attention_mask` of shape `(len(stored), longest)` (1 for real tokens) and this
            adapter's fingerprint.

        Raises:
            ValueError: `stored` is empty.
        """
        states, mask = pad_rows([tensors["hidden_states"] for tensors in stored], device=device, dtype=dtype)
        return MeanQaPassageOutput(passage_states=states, passage_attention_mask=mask,
                                   model_fingerprint=self.fingerprint())


__all__ = ["MeanQaAdapter"]

register_family(
    name="mean_qa",
    configs=(MeanQaBertConfig,),
    auto_models={"AutoModel": MeanQaBertModel, "AutoModelForQuestionAnswering": MeanQaBertForQuestionAnswering},
    auto_class="AutoModelForQuestionAnswering",
    pipelines={"question-answering": MeanQaQuestionAnsweringPipeline},
    adapter=MeanQaAdapter,
    answer="extractive",
    answer_function="mean_qa_family.qa:answer_from_store",
    exports=(MeanQaPassageOutput,),
    cards={"mean_qa_bert": CardText(
        tag="mean-qa", title="Mean-pooled question QA", paper="The hf-readonce family example (no paper)",
        paragraphs=("BERT reads each passage alone, once; its token states are stored. A question is read alone "
                    "and mean-pooled, and every passage token scores as the answer's start or end against it.",),
        pipeline_tag="question-answering",
        usage=("```python\nfrom transformers import pipeline\n\nqa = pipeline(\"question-answering\", "
               "model=\"{repo_id}\"{trust})\nqa(question=\"Who wrote Emma?\", context=\"Emma is a novel by Jane "
               "Austen.\")\n```"),
        widget=None)},  # the pipeline needs a question and its context: no single-text widget
)
