"""Representation adapter of block-attention Llama: each document's per-layer key/value cache, encoded alone at
positions 0..n-1 (Block-Attention, Ma, Wang & Lan, ICLR 2025; TurboRAG, Lu et al. 2024), stored and read back as the model's
[`DocumentCacheOutput`] for `generate(document_caches=...)`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..models.block_attention_llama.configuration_block_attention_llama import BlockAttentionLlamaConfig
from ..models.block_attention_llama.modeling_block_attention_llama import (
    BlockAttentionLlamaForCausalLM,
    BlockAttentionLlamaModel,
    DocumentCacheOutput,
    _check_rope,
    rope_setting,
)
from .base import AdapterBase, DocumentError, check_positive_ints, scoped_tokenizer_fingerprint, tokenizer_lock
from .registry import CardText, register_family


class BlockAttentionLlamaAdapter(AdapterBase):
    r"""Stores the key/value cache of whole documents for [`BlockAttentionLlamaForCausalLM`] (any Llama checkpoint
    loads as one, see [`load_model`]). Per document of n tokens:

    - `keys`, `values`: `(num_layers, num_key_value_heads, n, head_dim)` floating, keys rotated at positions 0..n-1
      (the store's dtype option keeps them in fp32, fp16 or bf16; they are composed in the model's dtype); [`read`]
      gives them back as `DocumentCacheOutput.key_states` and `.value_states`;
    - `input_ids`: `(n,)` int32, the tokens read (for recomputation and checks);
    - `num_tokens`: `(1,)` int32.

    Documents are tokenized without special tokens by default, so that a stored document followed by a question is
    exactly the prompt `document + question` (pass `add_special_tokens=True` for a BOS per document).

    Args:
        model ([`BlockAttentionLlamaForCausalLM`]): the model (a plain `LlamaForCausalLM` computes the same caches:
            load it with `BlockAttentionLlamaForCausalLM.from_pretrained(path)`).
        tokenizer: its fast tokenizer.
        max_document_length (`int`, *optional*): tokens read per document (longer ones are truncated). Defaults to
            `config.max_position_embeddings`.
        add_special_tokens (`bool`, defaults to `False`): let the tokenizer add its special tokens to each document.
        batch_size (`int`, defaults to 8): documents per `encode_documents` call.

    Raises:
        TypeError: a model without `encode_documents` or of another family ([`AdapterBase.check_model`]), a setting
            of the wrong type, a slow tokenizer.
        ValueError: a setting below 1 (naming it), a `max_document_length` above `config.max_position_embeddings`,
            a model whose `rope_type` (`dynamic`, `longrope`) makes its caches impossible to compose (refused before
            anything is encoded or stored).
    """

    model_type = "block_attention_llama"
    representation = "llama_kv_cache/v1"
    checkpoint_model_types = ("block_attention_llama", "llama")
    cli_settings = {
        "max_document_length": ("--max-document-length", None,
                                "tokens read per document (default: the model's max_position_embeddings)"),
    }
    recompute_needs_text = False
    output_distribution = "next-token distribution after the document and a fixed probe prompt"
    # the probe read after a document's cache; the question prompt of `hf-readonce answer`
    # (`hf_readonce.tasks.document_cache_qa.question_prompt`)
    probe_prompt = "\n\nQuestion: What is this document about?\nAnswer:"

    @classmethod
    def settings_kwargs(cls, settings) -> dict:
        """Constructor arguments of a stored space's settings: document length and special tokens."""
        return {name: settings[name] for name in ("max_document_length", "add_special_tokens") if name in settings}

    def __init__(self, model, tokenizer, max_document_length: int | None = None, add_special_tokens: bool = False,
                 batch_size: int = 8):
        if not callable(getattr(model, "encode_documents", None)) or not hasattr(model, "representation_fingerprint"):
            raise TypeError(f"`model` must be a BlockAttentionLlamaForCausalLM, got {type(model).__name__} (load a "
                            "Llama checkpoint with BlockAttentionLlamaForCausalLM.from_pretrained).")
        self.check_model(model)
        check_positive_ints({"max_document_length": max_document_length, "batch_size": batch_size},
                            optional=("max_document_length",))
        if not isinstance(add_special_tokens, bool):
            raise TypeError(f"`add_special_tokens` must be a bool, got {add_special_tokens!r}.")
        try:  # caches of a rope type whose rotation is not exact could be stored but never composed: refused first
            _check_rope(model.config)
        except ValueError as error:
            raise ValueError(f"`model`: {error} Its document caches are not stored.") from None
        positions = int(model.config.max_position_embeddings)
        if max_document_length is not None and max_document_length > positions:
            raise ValueError(f"`max_document_length` (--max-document-length) must be at most the model's "
                             f"{positions} positions, got {max_document_length}.")
        self.model, self.tokenizer = model, tokenizer
        self.max_document_length = max_document_length if max_document_length is not None else positions
        self.add_special_tokens = add_special_tokens
        self.batch_size = batch_size
        self._tokenizer_hash = scoped_tokenizer_fingerprint(tokenizer)

    @classmethod
    def load_model(cls, name_or_path: str, **kwargs):
        """A [`BlockAttentionLlamaForCausalLM`] from a `block_attention_llama` or a plain `llama` checkpoint
        (`kwargs` go to `from_pretrained`)."""
        return BlockAttentionLlamaForCausalLM.from_pretrained(name_or_path, **kwargs)

    def fingerprint(self) -> str:
        """The model's `representation_fingerprint()` (decoder weights, config fields that change the caches,
        transformers major version); the tokenizer is part of [`settings`]."""
        return self.model.representation_fingerprint()

    def settings(self) -> dict:
        """Representation settings: format, document length, special tokens, the dtype the model computes the
        caches in (a bf16 model's caches are not an fp32 model's) and the tokenizer's fingerprint. The storage dtype
        is the store's (recorded per shard)."""
        return {"representation": self.representation, "max_document_length": self.max_document_length,
                "add_special_tokens": self.add_special_tokens,
                "compute_dtype": str(self.model.dtype).removeprefix("torch."), "tokenizer": self._tokenizer_hash}

    def num_tokens(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Document tokens read for one stored document: its `num_tokens` tensor of shape `(1,)`, n.

        Raises:
            KeyError: tensors without `num_tokens`.
        """
        return int(tensors["num_tokens"][0])

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids each text is read as (truncated to `max_document_length`).

        Raises:
            TypeError: a single str instead of a sequence.
            DocumentError (a `ValueError`): naming the index of an empty or non-string text, or of a text that has
                no token.
        """
        if isinstance(texts, str):
            raise TypeError("`texts` must be a sequence of str, not a single str.")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DocumentError(i, "is empty or not a string: nothing to encode.")
        ids = self._tokenize_documents(list(texts), add_special_tokens=self.add_special_tokens)["input_ids"]
        for i, row in enumerate(ids):
            if not row:
                raise DocumentError(i, "has no token after tokenization (only characters the tokenizer drops, such "
                                       "as control or zero-width characters): nothing to encode.")
        return ids

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """Encode documents (`Sequence[str]`) -> one tensor dict per text, in fp32 on CPU (the store casts them to
        its dtype): for a document of n tokens `keys` and `values` of shape `(num_layers, num_key_value_heads, n,
        head_dim)`, `input_ids` `(n,)` and `num_tokens` `(1,)` (see the class docstring).

        Raises:
            TypeError / ValueError: as [`tokenize`]; errors of `encode_documents`.
        """
        return self._encode_ids(self.tokenize(texts))

    def _encode_ids(self, ids: Sequence[Sequence[int]]) -> list[dict[str, torch.Tensor]]:
        """Token ids of documents -> one tensor dict per document, `batch_size` documents per model call."""
        out = []
        for start in range(0, len(ids), self.batch_size):
            chunk = ids[start:start + self.batch_size]
            width = max(len(row) for row in chunk)
            input_ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, tokens in enumerate(chunk):
                input_ids[row, :len(tokens)] = torch.tensor(tokens)
                mask[row, :len(tokens)] = 1
            caches = self.model.encode_documents(input_ids.to(self.model.device), mask.to(self.model.device),
                                                 with_fingerprint=False)
            for row, tokens in enumerate(chunk):
                n = len(tokens)
                out.append({"keys": caches.key_states[row, :, :, :n].float().cpu().contiguous(),
                            "values": caches.value_states[row, :, :, :n].float().cpu().contiguous(),
                            "input_ids": torch.tensor(tokens, dtype=torch.int32),
                            "num_tokens": torch.tensor([n], dtype=torch.int32)})
        return out

    @torch.no_grad()
    def recompute_from_stored(self, stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recompute one stored document's cache from its stored token ids `input_ids` of shape `(n,)`, without its
        text (the tensors [`encode`] writes, same names and shapes).

        Raises:
            KeyError: tensors without `input_ids`.
        """
        return self._encode_ids([stored["input_ids"].tolist()])[0]

    @torch.no_grad()
    def output_log_probs(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Log-probabilities `(1, vocab_size)` of the next token after one document's cache followed by the probe
        prompt (`probe_prompt`, tokenized without special tokens)."""
        read = self.read([tensors], device=self.model.device)
        with tokenizer_lock(self.tokenizer):
            probe = self.tokenizer(self.probe_prompt, add_special_tokens=False)["input_ids"]
        probe = torch.tensor([probe], device=self.model.device)
        return self.model(probe, document_caches=read).logits[:, -1].float().log_softmax(-1)

    def read(self, stored: Sequence[Mapping[str, torch.Tensor]], *, device=None, dtype=None) -> DocumentCacheOutput:
        """The model's input again: the stored caches of several documents as one [`DocumentCacheOutput`]
        (`document_caches=` of `generate` and `forward`: the documents in this order, one after another).

        Args:
            stored (`Sequence[dict]`): tensors of documents as written by [`encode`] (e.g. `store.get_many(...)`).
            device, dtype: where and in which floating dtype to put them (default: as stored, on CPU; the model
                composes them in its own dtype).

        Returns:
            [`DocumentCacheOutput`]: `key_states` and `value_states` (the stored `keys` and `values`) `(len(stored),
            num_layers, num_key_value_heads, max n, head_dim)` right-padded, `attention_mask`, `position_ids` (0..n-1)
            and the stored token ids `input_ids` (for selective recompute; when every document has them) `(len(stored),
            max n)`, this adapter's model fingerprint and its model's RoPE setting. The tensors carry no fingerprint of
            their own, so read what this adapter's space holds (`store.get_many(adapter.fingerprint(),
            adapter.settings(), ...)`): caches another model wrote, read through this adapter, would be labelled as
            this model's and pass its fingerprint check.

        Raises:
            ValueError: no document, or documents whose keys, values and token ids disagree in shape.
        """
        if not stored:
            raise ValueError("nothing to read: `stored` is empty.")
        first = stored[0]["keys"]
        dtype = dtype or first.dtype
        width = max(int(t["keys"].shape[2]) for t in stored)
        shape = (len(stored), first.shape[0], first.shape[1], width, first.shape[3])
        keys = torch.zeros(shape, dtype=dtype, device=device)
        values = torch.zeros(shape, dtype=dtype, device=device)
        mask = torch.zeros(len(stored), width, dtype=torch.long, device=device)
        with_ids = all("input_ids" in tensors for tensors in stored)
        input_ids = torch.zeros(len(stored), width, dtype=torch.long, device=device) if with_ids else None
        for i, tensors in enumerate(stored):
            k, v = tensors["keys"], tensors["values"]
            if k.shape != v.shape or k.shape[:2] + k.shape[3:] != first.shape[:2] + first.shape[3:]:
                raise ValueError(f"stored document {i}: keys {tuple(k.shape)} and values {tuple(v.shape)} do not "
                                 f"match (num_layers, num_key_value_heads, n, head_dim) of document 0.")
            n = k.shape[2]
            keys[i, :, :, :n] = k.to(device=device, dtype=dtype)
            values[i, :, :, :n] = v.to(device=device, dtype=dtype)
            mask[i, :n] = 1
            if with_ids:
                ids = tensors["input_ids"]
                if ids.shape != (n,):
                    raise ValueError(f"stored document {i}: input_ids {tuple(ids.shape)} do not match its {n} cached "
                                     "tokens.")
                input_ids[i, :n] = ids.to(device=device, dtype=torch.long)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        return DocumentCacheOutput(key_states=keys, value_states=values, attention_mask=mask, position_ids=positions,
                                   model_fingerprint=self.fingerprint(), input_ids=input_ids,
                                   rope_setting=rope_setting(self.model.config))


__all__ = ["BlockAttentionLlamaAdapter"]

register_family(
    name="block_attention_llama",
    configs=(BlockAttentionLlamaConfig,),
    auto_models={"AutoModel": BlockAttentionLlamaModel, "AutoModelForCausalLM": BlockAttentionLlamaForCausalLM},
    auto_class="AutoModelForCausalLM",
    adapter=BlockAttentionLlamaAdapter,  # transformers' own text-generation pipeline runs the model
    answer="generative",
    answer_function="hf_readonce.tasks.document_cache_qa:answer_with_document_caches",
    exports=(DocumentCacheOutput,),
    cards={
        "block_attention_llama": CardText(
            tag="block-attention",
            title="Block-Attention Llama",
            paper="Ma, Wang & Lan, ICLR 2025, \"Block-Attention for Efficient Prefilling\" (arXiv 2409.15355); "
                  "Lu et al., 2024, \"TurboRAG\"",
            paragraphs=(
                "A Llama-family causal LM whose documents are read once, each alone into its own key/value cache. "
                "Caches are stored, their keys re-rotated to their place in a prompt and composed in front of a "
                "question, so a question about known documents runs only its own tokens through the model.",
                "The architecture and weights are exactly Llama's: without document caches the model is the plain "
                "causal LM (transformers' text-generation pipeline runs it as it runs Llama); fine-tuning may use the "
                "Block-Attention mask, under which each document attends only to itself.",
            ),
            pipeline_tag="text-generation",
            usage=(
                "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer, pipeline\n\n"
                "generate = pipeline(\"text-generation\", model=\"{repo_id}\", trust_remote_code=True)  # as Llama\n\n"
                "model = AutoModelForCausalLM.from_pretrained(\"{repo_id}\", trust_remote_code=True).eval()\n"
                "tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\"{trust})\n"
                "documents = [\"Emma is a novel by Jane Austen.\", \"Persuasion was published in 1817.\"]\n"
                "docs = [tokenizer(d, return_tensors=\"pt\").input_ids for d in documents]\n"
                "caches = [model.encode_documents(ids) for ids in docs]   # each read once, alone; store them\n"
                "q = \"\\n\\nQuestion: Who wrote Emma?\\nAnswer:\"\n"
                "question = tokenizer(q, add_special_tokens=False, return_tensors=\"pt\").input_ids\n"
                "out = model.generate(question, document_caches=caches, max_new_tokens=32)\n```"
            ),
        ),
    },
)
