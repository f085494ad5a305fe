"""Build a LongDoc BART from a BERT checkpoint (the BERT2BERT recipe of Rothe et al., 2020): the BART-shaped config
and the weight mapping of `convert_bert_to_readonce_bart`, as checked copies (the files of one model folder travel
alone). The recipe that loads them into a [`LongDocBartForConditionalGeneration`] with the chosen encoder attention is
`hf_readonce.recipes.longdoc_summarization.longdoc_bart_from_bert`.

- Encoder: a BART encoder layer is a post-LayerNorm transformer layer, like BERT's, so every weight maps one to
  one (`query/key/value/output.dense` -> `q_proj/k_proj/v_proj/out_proj`, `intermediate/output.dense` ->
  `fc1/fc2`, the two LayerNorms). Token-type embedding 0 is folded into the position table (BART has no token
  types), the embedding scale is 1, and `layernorm_embedding` is BERT's embedding LayerNorm.
- Decoder: the same BERT layers warm-start the decoder's self-attention and feed-forward blocks (causal masking
  is the only change); cross-attention is new and randomly initialized, as in BERT2BERT.
- Embeddings and LM head are tied to BERT's word embeddings; `[CLS]` starts decoding, `[SEP]` ends it, `[PAD]` pads.
"""

from __future__ import annotations

import torch
from transformers import BartConfig, BertModel


# Copied from hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart.bart_config_from_bert
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


# Copied from hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart._attention
def _attention(prefix: str, bert_prefix: str, bert: dict) -> dict:
    pairs = {"q_proj": "attention.self.query", "k_proj": "attention.self.key", "v_proj": "attention.self.value",
             "out_proj": "attention.output.dense"}
    return {f"{prefix}.{name}.{p}": bert[f"{bert_prefix}.{source}.{p}"] for name, source in pairs.items()
            for p in ("weight", "bias")}


# Copied from hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart.bart_state_dict_from_bert
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


__all__ = ["bart_config_from_bert", "bart_state_dict_from_bert"]
