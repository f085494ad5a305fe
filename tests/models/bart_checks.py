"""Checkpoints in the layout LongDoc and ReadOnce BART wrote before their token tables followed
`tie_word_embeddings`: one token table, `model.shared`, read by the encoder and the decoder. Shared by both families'
loading tests."""

import torch


def one_token_table_state(reference, tie: bool, lm_head_too: bool = False) -> dict:
    """Make the `BartForConditionalGeneration` `reference` read one token table (its encoder's and decoder's
    `embed_tokens` copied from `model.shared`; untied, a random LM head of its own unless `lm_head_too`, which copies
    `shared` into it as well) and return its state dict as such a checkpoint holds it: `model.shared.weight`, no
    `embed_tokens` keys, and `lm_head.weight` only where the LM head is a table of its own (untied, not
    `lm_head_too`). Tensors contiguous, ready for `safetensors.torch.save_file`."""
    with torch.no_grad():
        tables = [reference.model.encoder.embed_tokens, reference.model.decoder.embed_tokens]
        for table in tables + ([reference.lm_head] if lm_head_too else []):
            table.weight.copy_(reference.model.shared.weight)
        if not tie and not lm_head_too:
            reference.lm_head.weight.normal_()
    own_head = not tie and not lm_head_too
    return {key: tensor.contiguous() for key, tensor in reference.state_dict().items()
            if not key.endswith(".embed_tokens.weight") and (own_head or key != "lm_head.weight")}
