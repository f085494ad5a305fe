"""Build a BART-architecture model from a BERT checkpoint (the BERT2BERT recipe of Rothe et al., 2020), so that
ReadOnce BART can be trained here on real pretrained weights: no BART checkpoint is reachable offline, but the
packaged all-MiniLM-L6-v2 BERT is.

- Encoder: a BART encoder layer is a post-LayerNorm transformer layer, like BERT's, so every weight maps one to
  one (`query/key/value/output.dense` -> `q_proj/k_proj/v_proj/out_proj`, `intermediate/output.dense` ->
  `fc1/fc2`, the two LayerNorms). Token-type embedding 0 is folded into the position table (BART has no token
  types), the embedding scale is 1, and `layernorm_embedding` is BERT's embedding LayerNorm. The encoder then
  computes BERT's hidden states (ReadOnce BART's `layer_norm_eps` takes BERT's 1e-12).
- Decoder: the same BERT layers warm-start the decoder's self-attention and feed-forward blocks (causal masking
  is the only change); cross-attention is new and randomly initialized, as in BERT2BERT.
- Embeddings and LM head are tied to BERT's word embeddings; `[CLS]` starts decoding, `[SEP]` ends it, `[PAD]` pads.
"""

from __future__ import annotations

import torch
from transformers import BartConfig, BertModel

from .configuration_readonce_bart import ReadOnceBartConfig
from .modeling_readonce_bart import ReadOnceBartForConditionalGeneration


def bart_config_from_bert(bert_config, config_class=BartConfig, **overrides):
    """A BART(-family) config with the shapes of a BERT config (layers, hidden, heads, FFN, vocabulary, positions)
    and BERT's special tokens; `overrides` are set last (e.g. `layer_norm_eps=` where the config class has it).

    Raises:
        ValueError: if the BERT activation has no BART equivalent.
    """
    if bert_config.hidden_act not in ("gelu", "relu", "gelu_new", "silu"):
        raise ValueError(f"unsupported BERT activation {bert_config.hidden_act!r}.")
    cls_id = getattr(bert_config, "cls_token_id", None) or 101
    sep_id = getattr(bert_config, "sep_token_id", None) or 102
    settings = dict(
        vocab_size=bert_config.vocab_size, d_model=bert_config.hidden_size,
        encoder_layers=bert_config.num_hidden_layers, decoder_layers=bert_config.num_hidden_layers,
        encoder_attention_heads=bert_config.num_attention_heads,
        decoder_attention_heads=bert_config.num_attention_heads,
        encoder_ffn_dim=bert_config.intermediate_size, decoder_ffn_dim=bert_config.intermediate_size,
        max_position_embeddings=bert_config.max_position_embeddings, activation_function=bert_config.hidden_act,
        dropout=bert_config.hidden_dropout_prob, attention_dropout=bert_config.attention_probs_dropout_prob,
        activation_dropout=0.0, scale_embedding=False, init_std=bert_config.initializer_range,
        pad_token_id=bert_config.pad_token_id or 0, bos_token_id=cls_id, eos_token_id=sep_id,
        decoder_start_token_id=cls_id, forced_bos_token_id=None, forced_eos_token_id=sep_id,
        tie_word_embeddings=True,
    )
    settings.update(overrides)
    return config_class(**settings)


def _attention(prefix: str, bert_prefix: str, bert: dict) -> dict:
    pairs = {"q_proj": "attention.self.query", "k_proj": "attention.self.key", "v_proj": "attention.self.value",
             "out_proj": "attention.output.dense"}
    return {f"{prefix}.{name}.{p}": bert[f"{bert_prefix}.{source}.{p}"] for name, source in pairs.items()
            for p in ("weight", "bias")}


def bart_state_dict_from_bert(bert: BertModel, config) -> dict:
    """BART parameter names (`model.shared`, `model.encoder.*`, `model.decoder.*` except cross-attention) mapped
    from a `BertModel`'s weights (see the module docstring)."""
    w = {k: v.detach().clone() for k, v in bert.state_dict().items()}
    positions = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    table = torch.cat([positions[:2].clone().zero_(), positions])  # BART's learned positions have an offset of 2
    state = {"model.shared.weight": w["embeddings.word_embeddings.weight"]}
    for side in ("encoder", "decoder"):
        state[f"model.{side}.embed_tokens.weight"] = w["embeddings.word_embeddings.weight"]
        state[f"model.{side}.embed_positions.weight"] = table
        state[f"model.{side}.layernorm_embedding.weight"] = w["embeddings.LayerNorm.weight"]
        state[f"model.{side}.layernorm_embedding.bias"] = w["embeddings.LayerNorm.bias"]
        for i in range(config.encoder_layers if side == "encoder" else config.decoder_layers):
            src, dst = f"encoder.layer.{i}", f"model.{side}.layers.{i}"
            state.update(_attention(f"{dst}.self_attn", src, w))
            for p in ("weight", "bias"):
                state[f"{dst}.self_attn_layer_norm.{p}"] = w[f"{src}.attention.output.LayerNorm.{p}"]
                state[f"{dst}.fc1.{p}"] = w[f"{src}.intermediate.dense.{p}"]
                state[f"{dst}.fc2.{p}"] = w[f"{src}.output.dense.{p}"]
                state[f"{dst}.final_layer_norm.{p}"] = w[f"{src}.output.LayerNorm.{p}"]
    state["lm_head.weight"] = w["embeddings.word_embeddings.weight"]
    return state


def readonce_bart_from_bert(bert_name_or_path, seed: int = 0, **readonce_kwargs) -> ReadOnceBartForConditionalGeneration:
    r"""A [`ReadOnceBartForConditionalGeneration`] warm-started from a BERT checkpoint: the representation+text BART
    as in [`bart_state_dict_from_bert`], and the document encoder as a copy of the same encoder (separate weights,
    the paper's initialization).

    Args:
        bert_name_or_path: a BERT checkpoint folder (e.g. `hf_readonce.weights.minilm_path()`) or a `BertModel`.
        seed (`int`, defaults to 0): seeds the new weights (cross-attention, aggregation).
        **readonce_kwargs: `compression_ratio`, `window_size`, `aggregation`, `append_layer`, ...

    Returns:
        the model in train mode, float32.

    Raises:
        ValueError: for an unsupported activation or invalid ReadOnce settings.
    """
    bert = bert_name_or_path if isinstance(bert_name_or_path, BertModel) else BertModel.from_pretrained(
        bert_name_or_path, add_pooling_layer=False)
    # ReadOnce BART's LayerNorms take BERT's epsilon (BartConfig has no such field)
    config = bart_config_from_bert(bert.config, ReadOnceBartConfig,
                                   **{"layer_norm_eps": bert.config.layer_norm_eps, **readonce_kwargs})
    torch.manual_seed(seed)
    model = ReadOnceBartForConditionalGeneration(config)
    state = bart_state_dict_from_bert(bert, config)
    result = model.load_state_dict(state, strict=False)
    unexpected = [k for k in result.unexpected_keys]
    if unexpected:
        raise ValueError(f"unexpected keys while converting BERT: {unexpected[:5]}")
    model.initialize_document_encoder()
    model.initialize_representation_attention()  # fusion="attention": Attn' starts as the converted Attn
    model.tie_weights()
    return model


__all__ = ["bart_config_from_bert", "bart_state_dict_from_bert", "readonce_bart_from_bert"]
