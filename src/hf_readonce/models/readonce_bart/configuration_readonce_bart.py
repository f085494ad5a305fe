# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""ReadOnce BART configuration (Lin et al., "ReadOnce Transformers: Reusable Representations of Text for
Transformers", ACL 2021)."""

from transformers import BartConfig

AGGREGATIONS = ("linear", "mean", "max")
FUSIONS = ("append", "attention")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ReadOnceBartConfig(BartConfig):
    r"""
    Configuration of [`ReadOnceBartForConditionalGeneration`]: a BART document encoder that compresses a document
    once into about n/k vectors (sliding-window aggregation, §3.1, Fig. 2), and a representation+text BART that reads
    a question (or any task text) together with those vectors (§3.2, Fig. 3).

    Every [`~transformers.BartConfig`] argument is accepted unchanged, so any BART checkpoint's `config.json` loads
    into it. The extra arguments are:

    Args:
        compression_ratio (`int`, *optional*, defaults to 8):
            k, the stride of the sliding window: a document of n tokens gives `ceil(n / k)` representations.
            `encode_documents(..., compression_ratio=...)` may use another k at inference (§5.2).
        window_size (`int`, *optional*):
            w, tokens aggregated into one representation (eq. 2). Defaults to k (no overlap). Must be `>= k` so that
            every token is covered.
        aggregation (`str`, *optional*, defaults to `"linear"`):
            f of eq. 2: `"linear"` (learned weighted sum, eq. 1: a scalar score per token, softmax over the window;
            the paper's choice), `"mean"` or `"max"`.
        append_layer (`int`, *optional*):
            L, 1-based: the question runs alone through encoder layers `1..L-1`, then the representations are
            concatenated to it for layers `L..N` (Fig. 3). Defaults to `encoder_layers // 2` (6 for bart-large);
            `L = 1` appends them before the first layer.
        fusion (`str`, *optional*, defaults to `"append"`):
            How the representations enter the representation+text model. `"append"` (Fig. 3, the paper's choice):
            they are concatenated to the text's hidden states before encoder layer L. `"attention"` (App. A.1,
            eq. 4): the text is never lengthened; instead the self-attention of encoder layers `L..N` and of every
            decoder layer becomes `(Attn(H, H, H) + Attn'(H, R, R)) / 2`, where `Attn'` is a separate attention
            module over the representations R, initialized from `Attn`.
        document_chunk_length (`int`, *optional*):
            T, tokens per chunk when a document is longer than the encoder's positions (§5.5, App. C.1): each chunk
            is compressed separately and the representations are concatenated (capacity `T * k` tokens per
            `T`-token chunk of the question model's input). Defaults to `max_position_embeddings`.
        document_chunk_overlap (`int`, *optional*, defaults to 0):
            o, tokens shared by consecutive chunks (context only: their representations come from the earlier
            chunk).
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Epsilon of every LayerNorm (BART's built-in value is 1e-5; a model converted from BERT keeps BERT's
            1e-12 so that its encoder computes BERT's hidden states exactly).

    Raises:
        ValueError: if k or w is not a positive int, `w < k`, the aggregation or fusion is unknown, L is not in
            `[1, encoder_layers]`, the chunk length is not in `[1, max_position_embeddings]`, or the chunk overlap is
            not in `[0, chunk_length)` or is not a multiple of k (chunks must start on a window boundary).

    Example:

    ```python
    >>> from hf_readonce import ReadOnceBartConfig
    >>> config = ReadOnceBartConfig(encoder_layers=12, compression_ratio=8)
    >>> (config.compression_ratio, config.window_size, config.append_layer, config.aggregation)
    (8, 8, 6, 'linear')
    ```
    """

    model_type = "readonce_bart"

    def __init__(
        self,
        compression_ratio: int = 8,
        window_size: int | None = None,
        aggregation: str = "linear",
        append_layer: int | None = None,
        fusion: str = "append",
        document_chunk_length: int | None = None,
        document_chunk_overlap: int = 0,
        layer_norm_eps: float = 1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if isinstance(layer_norm_eps, bool) or not isinstance(layer_norm_eps, (int, float)) or layer_norm_eps <= 0:
            raise ValueError(f"`layer_norm_eps` must be a positive number, got {layer_norm_eps!r}.")
        self.layer_norm_eps = float(layer_norm_eps)
        if not _is_int(compression_ratio) or compression_ratio < 1:
            raise ValueError(f"`compression_ratio` must be a positive int, got {compression_ratio!r}.")
        window_size = compression_ratio if window_size is None else window_size
        if not _is_int(window_size) or window_size < compression_ratio:
            raise ValueError(
                f"`window_size` must be an int >= compression_ratio ({compression_ratio}) so that every token is "
                f"aggregated, got {window_size!r}."
            )
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"`aggregation` must be one of {AGGREGATIONS}, got {aggregation!r}.")
        if fusion not in FUSIONS:
            raise ValueError(f"`fusion` must be one of {FUSIONS}, got {fusion!r}.")
        append_layer = max(1, self.encoder_layers // 2) if append_layer is None else append_layer
        if not _is_int(append_layer) or not 1 <= append_layer <= self.encoder_layers:
            raise ValueError(
                f"`append_layer` must be an int in [1, encoder_layers={self.encoder_layers}], got {append_layer!r}."
            )
        chunk = self.max_position_embeddings if document_chunk_length is None else document_chunk_length
        if not _is_int(chunk) or not 1 <= chunk <= self.max_position_embeddings:
            raise ValueError(
                f"`document_chunk_length` must be an int in [1, max_position_embeddings={self.max_position_embeddings}]"
                f", got {document_chunk_length!r}."
            )
        if not _is_int(document_chunk_overlap) or not 0 <= document_chunk_overlap < chunk:
            raise ValueError(f"`document_chunk_overlap` must be an int in [0, {chunk}), got {document_chunk_overlap!r}.")
        if document_chunk_overlap % compression_ratio:
            raise ValueError(
                f"`document_chunk_overlap` ({document_chunk_overlap}) must be a multiple of compression_ratio "
                f"({compression_ratio})."
            )
        # Validated values set one by one, as in configuration_recurrence.set_recurrence_config: each family folder
        # travels to the Hub on its own, so they share no helper.
        self.compression_ratio = compression_ratio
        self.window_size = window_size
        self.aggregation = aggregation
        self.append_layer = append_layer
        self.fusion = fusion
        self.document_chunk_length = chunk
        self.document_chunk_overlap = document_chunk_overlap


__all__ = ["ReadOnceBartConfig"]
