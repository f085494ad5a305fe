# Copyright 2026 The hf-readonce developers.
# Licensed under the Apache License, Version 2.0.
"""ReadOnce BART configuration (Lin et al., "ReadOnce Transformers: Reusable Representations of Text for
Transformers", ACL 2021)."""

import inspect

from transformers import BartConfig, PretrainedConfig

AGGREGATIONS = ("linear", "mean", "max")
FUSIONS = ("append", "attention")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Copied from hf_readonce.models.readtwice_bert.configuration_readtwice_bert._pop_init_fields
def _pop_init_fields(config_class, kwargs: dict) -> dict:
    """Remove from `kwargs` and return the keyword arguments that are fields of `config_class` or of the transformers
    config it extends (the arguments of their `__init__`, and the names its `attribute_map` gives them, such as
    GPT-2's `max_position_embeddings` for `n_positions`, which `__init__` also takes; not `PreTrainedConfig`'s own,
    which transformers handles): what a config's `from_dict` builds the config with, so that `__init__` validates
    them together and derives its defaults from them, instead of transformers setting them unchecked after
    `__init__`."""
    own = {name for klass in config_class.__mro__[:config_class.__mro__.index(PretrainedConfig)]
           if "__init__" in vars(klass) for name in inspect.signature(klass.__init__).parameters}
    own -= {"self", "args", "kwargs", *inspect.signature(PretrainedConfig.__init__).parameters}
    own |= {alias for alias, name in getattr(config_class, "attribute_map", {}).items() if name in own}
    return {key: kwargs.pop(key) for key in list(kwargs) if key in own}


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
            L, in `[0, N]` (N = `encoder_layers`): the question runs alone through encoder layers `1..L`, then the
            representations R are appended to its states and layers `L+1..N` read both (Fig. 3, "the encoder only
            processes the q tokens of the question for the first L layers"; App. C.3's cost model):

                H^0 = embed(question),  H^l = Layer_l(H^{l-1})            for l = 1..L   (q positions)
                X^L = [H^L ; R],        X^l = Layer_l(X^{l-1})            for l = L+1..N (q + m positions)
                encoder cost ~ T_e * (L/N * q^2 + (1 - L/N) * (q + m)^2),  m = ceil(n / k)

            The encoder output X^N (the question's states, then the representations') is what the decoder attends
            to. Defaults to `encoder_layers // 2` (6 of 12: 6 + 6 layers, the paper's Append(L=6)). `L = 0`
            appends R to the embeddings; `L = N` appends R after the last encoder layer (only the decoder's
            cross-attention reads R). hf-readonce 0.1.x used "appended *before* layer L" (L - 1 question-only
            layers, 5 + 7 at L = 6); a saved `config.json` without `append_layer_convention` is read in that
            convention and converted (L - 1), so old checkpoints compute what they computed.
        append_layer_convention (`str`, *optional*, defaults to `"after"`):
            `"after"`: `append_layer` as above. `"before"`: the 0.1.x meaning (1-based layer *before* which R is
            appended), converted to `"after"` at construction; the config then stores `"after"`.
        fusion (`str`, *optional*, defaults to `"append"`):
            How the representations enter the representation+text model. `"append"` (Fig. 3, the paper's choice):
            they are concatenated to the text's hidden states after encoder layer L. `"attention"` (App. A.1,
            eq. 4): the text is never lengthened; instead the self-attention of encoder layers `L+1..N` and of every
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
        max_document_length (`int`, *optional*):
            Tokens read per document when the checkpoint was trained (recorded by the ReadOnce recipe): the default
            of the store adapter and `hf-readonce encode`, so stored representations match training. `None`: T * k.
            Not part of the representation fingerprint (the store keys it as a setting).
        max_question_length (`int`, *optional*):
            Tokens read of a question (or prompt), special tokens included, when the checkpoint was trained (recorded
            by the ReadOnce recipe): the default of the `text2text-generation` and `summarization` pipelines, of the
            store adapter and of `hf-readonce answer` / `summarize`. `None`: 32. Not part of the representation
            fingerprint (the document encoder never reads a question).

    Raises:
        ValueError: if k or w is not a positive int, `max_document_length` or `max_question_length` is not None or a
            positive int, `layer_norm_eps` is not a finite positive number, `w < k`, the aggregation or fusion is
            unknown, L is not in `[0, encoder_layers]` (`[1, encoder_layers]` in the 0.1.x `"before"` convention),
            the convention is unknown, the chunk length is not in `[1, max_position_embeddings]`, or the chunk
            overlap is not in `[0, chunk_length)` or is not a multiple of k (chunks must start on a window boundary).

    Example:

    ```python
    >>> from transformers import AutoConfig
    >>> # this file travels with the family's checkpoints (a Hub repo, or a folder `save_pretrained` wrote), and
    >>> # `trust_remote_code` loads the class from there: nothing but transformers is needed
    >>> checkpoint = "path/to/readonce-checkpoint"
    >>> ReadOnceBartConfig = type(AutoConfig.from_pretrained(checkpoint, trust_remote_code=True))  # doctest: +SKIP
    >>> config = ReadOnceBartConfig(encoder_layers=12, compression_ratio=8)
    >>> (config.compression_ratio, config.window_size, config.append_layer, config.aggregation)
    (8, 8, 6, 'linear')
    >>> ReadOnceBartConfig(encoder_layers=12, append_layer=6, append_layer_convention="before").append_layer
    5
    ```
    """

    model_type = "readonce_bart"
    # fields the document encoder never reads, besides the ones no family's representation reads
    # (`modeling_readonce_bart._FINGERPRINT_IGNORED_FIELDS`): the representation+text model's settings
    fingerprint_ignored_fields = ("fusion", "append_layer", "max_document_length")
    fingerprint_ignored_prefixes = ("decoder_",)

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
        append_layer_convention: str = "after",
        max_document_length: int | None = None,
        max_question_length: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if max_document_length is not None and (not _is_int(max_document_length) or max_document_length < 1):
            raise ValueError(f"`max_document_length` must be None or a positive int, got {max_document_length!r}.")
        self.max_document_length = max_document_length
        if max_question_length is not None and (not _is_int(max_question_length) or max_question_length < 1):
            raise ValueError(f"`max_question_length` must be None or a positive int, got {max_question_length!r}.")
        self.max_question_length = max_question_length
        # a NaN or infinite epsilon makes every LayerNorm output NaN
        if isinstance(layer_norm_eps, bool) or not isinstance(layer_norm_eps, (int, float)) or not (
            0 < layer_norm_eps < float("inf")
        ):
            raise ValueError(f"`layer_norm_eps` must be a finite positive number, got {layer_norm_eps!r}.")
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
        if append_layer_convention not in ("after", "before"):
            raise ValueError(f"`append_layer_convention` must be 'after' or 'before', got {append_layer_convention!r}.")
        if append_layer is None:
            append_layer = self.encoder_layers // 2
        elif append_layer_convention == "before":  # 0.1.x: appended before 1-based layer L, i.e. after L - 1 layers
            if not _is_int(append_layer) or not 1 <= append_layer <= self.encoder_layers:
                raise ValueError(f"`append_layer` (0.1.x 'before' convention) must be an int in "
                                 f"[1, encoder_layers={self.encoder_layers}], got {append_layer!r}.")
            append_layer -= 1
        if not _is_int(append_layer) or not 0 <= append_layer <= self.encoder_layers:
            raise ValueError(
                f"`append_layer` must be an int in [0, encoder_layers={self.encoder_layers}], got {append_layer!r}."
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
        self.append_layer_convention = "after"
        self.fusion = fusion
        self.document_chunk_length = chunk
        self.document_chunk_overlap = document_chunk_overlap

    def default_document_length(self, compression_ratio: int | None = None) -> int:
        """Tokens read per document unless a caller says otherwise: `max_document_length` where the checkpoint records
        it, else `T * k` (`document_chunk_length` times `compression_ratio`, this config's unless given). The one
        default of the summarization pipeline, the store adapter and `hf-readonce encode`.

        Args:
            compression_ratio (`int`, *optional*): k to read with, when it differs from `self.compression_ratio`.

        Returns:
            `int` (tokens).
        """
        if getattr(self, "max_document_length", None) is not None:
            return self.max_document_length
        return self.document_chunk_length * (compression_ratio or self.compression_ratio)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """As [`~transformers.PreTrainedConfig.from_dict`]; a saved config with `append_layer` but no
        `append_layer_convention` (written by hf-readonce 0.1.x) is read in the 0.1.x `"before"` convention.

        The keyword arguments that are fields of this class or of `BartConfig` (the arguments of their `__init__`,
        e.g. `from_pretrained(bart_checkpoint, compression_ratio=16)`; not `PreTrainedConfig`'s own, which
        transformers handles) build the config with the saved values instead of being set on it afterwards (what
        transformers does with the others): they are validated together as in `__init__` (a `ValueError` naming the
        field; `encoder_layers=4, append_layer=3` is checked against the 4 given), and the defaults derived from them
        follow them: a `window_size` the checkpoint does not record is k, one it records keeps its overlap `w - k` at
        a new k (§5.2, as the ReadOnce recipe fine-tunes a checkpoint at another k), and a given `append_layer` is in
        the current convention."""
        if "append_layer" in config_dict and "append_layer_convention" not in config_dict:
            config_dict = {**config_dict, "append_layer_convention": "before"}
        given = _pop_init_fields(cls, kwargs)
        if "append_layer" in given:
            given.setdefault("append_layer_convention", "after")
        saved_k, saved_w = config_dict.get("compression_ratio"), config_dict.get("window_size")
        if ("compression_ratio" in given and "window_size" not in given and _is_int(saved_k) and _is_int(saved_w)
                and _is_int(given["compression_ratio"])):
            given["window_size"] = given["compression_ratio"] + saved_w - saved_k
        return super().from_dict({**config_dict, **given}, **kwargs)


__all__ = ["ReadOnceBartConfig"]
