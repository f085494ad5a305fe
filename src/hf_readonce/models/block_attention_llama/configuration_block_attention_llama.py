# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""Block-attention Llama configuration: a Llama-family causal LM (Llama, SmolLM2, ...) whose documents are read once,
each into its own key/value cache, and composed in front of a question (Ma, Wang & Lan, ICLR 2025, "Block-Attention
for Efficient Prefilling", arXiv 2409.15355; Lu et al. 2024, "TurboRAG")."""

from transformers import LlamaConfig


class BlockAttentionLlamaConfig(LlamaConfig):
    r"""
    Configuration of [`BlockAttentionLlamaForCausalLM`].

    It adds no argument to [`~transformers.LlamaConfig`]: the architecture and the weights are exactly Llama's, so any
    Llama checkpoint's `config.json` loads into it (`BlockAttentionLlamaConfig.from_pretrained(llama_path)`), and a
    plain Llama and a block-attention Llama with the same weights compute the same document caches. What differs is
    how the model is used: documents are encoded alone (positions 0..n-1), their caches are stored, re-rotated to
    their place in a prompt and composed (`encode_documents`, `compose_document_caches`, `generate(document_caches=)`),
    and fine-tuning may use the block mask of Block-Attention (`forward(block_ids=...)`), under which each document
    attends only to itself.

    Composition re-rotates stored keys by a position delta, which is exact for rotary embeddings whose frequencies do
    not depend on the sequence length: `rope_type` "default", "linear", "llama3" and "yarn". The model refuses to
    compose caches (`ValueError`) for the other types ("dynamic", "longrope", ...); the config itself accepts them so
    that every Llama checkpoint loads.

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "path/to/block-attention-llama-checkpoint"
    >>> BlockAttentionLlamaConfig = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = BlockAttentionLlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
    >>> config.model_type
    'block_attention_llama'
    ```
    """

    model_type = "block_attention_llama"
    # fields a document's keys and values never depend on, besides the ones no family's representation reads
    # (`modeling_block_attention_llama._FINGERPRINT_IGNORED_FIELDS`): the model type (a plain Llama and a
    # block-attention Llama with the same weights compute the same caches) and the feed-forward chunking and
    # encoder-decoder switches transformers adds to every config
    fingerprint_ignored_fields = ("model_type", "chunk_size_feed_forward", "is_encoder_decoder")

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        """As `PreTrainedConfig.get_config_dict`, but a plain Llama checkpoint's `model_type` ("llama") reads as
        "block_attention_llama": loading Llama weights into this model is its intended use (the architecture is
        Llama's), so transformers' "model of type llama to instantiate a model of type block_attention_llama" warning
        does not apply, and the loaded config saves as this model's. Any other model type is left as is (and still
        warned about)."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if config_dict.get("model_type") == "llama":
            config_dict = {**config_dict, "model_type": cls.model_type}
        return config_dict, kwargs


__all__ = ["BlockAttentionLlamaConfig"]
