"""Perplexity of causal LMs over long documents, the way Yoshida et al. (2020, §4.2, Table 2) measure it.

A document of T tokens is read in windows of `window_size` tokens; consecutive windows share `window_overlap` tokens,
which are context only, so every token after the first is predicted exactly once:

- disjoint execution: `window_overlap = 0` (cheapest; tokens at the start of a window see little context);
- partially overlapped execution: `0 < window_overlap < window_size - 1`;
- fully overlapped (sliding) execution: `window_overlap = window_size - 1` (one new token per window; the most
  context and the most compute).

Plain HF causal LMs (`GPT2LMHeadModel`, `LlamaForCausalLM`, ...) read each window independently. Recurrent models
(`RecurrentGPT2LMHeadModel`, `RecurrentLlamaForCausalLM`) read the same windows in sequence and carry the recurrent
vector, so a window also sees a summary of everything before it. Both are scored on the same targets: results are
comparable row by row. Perplexity is reported per token and per word (whitespace-separated words of the text, the
paper's word-level perplexity: `exp(total NLL / number of words)`).
"""

from __future__ import annotations

import math
import operator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..models.recurrent.modeling_recurrence import RecurrentCausalLMMixin, window_spans


@dataclass
class PerplexityResult:
    """Totals of one evaluation.

    Attributes:
        nll (`float`): summed negative log-likelihood of the counted targets, in nats.
        num_tokens (`int`): counted targets (T - 1 for a document of T tokens).
        num_words (`int` or `None`): words of the text, for word-level perplexity.
        num_windows (`int`): windows read.
        tokens_read (`int`): tokens run through the model (T plus the overlap tokens read again).
        window_size, window_overlap (`int`): the execution.
    """

    nll: float
    num_tokens: int
    num_words: int | None
    num_windows: int
    tokens_read: int
    window_size: int
    window_overlap: int

    @property
    def token_perplexity(self) -> float:
        """`exp(nll / num_tokens)`."""
        return math.exp(self.nll / self.num_tokens)

    @property
    def word_perplexity(self) -> float | None:
        """`exp(nll / num_words)`, or `None` without a word count."""
        return math.exp(self.nll / self.num_words) if self.num_words else None

    def as_dict(self) -> dict:
        """The totals and both perplexities as a JSON-ready dict."""
        return {**self.__dict__, "token_perplexity": self.token_perplexity, "word_perplexity": self.word_perplexity}


def _check(input_ids, window_size: int, window_overlap: int, max_positions: int | None) -> torch.Tensor:
    if not torch.is_tensor(input_ids):
        raise TypeError(f"`input_ids` must be a torch.LongTensor, got {type(input_ids).__name__}.")
    if input_ids.dim() == 2 and input_ids.shape[0] == 1:
        input_ids = input_ids[0]
    if input_ids.dim() != 1 or input_ids.numel() < 2:
        raise ValueError(f"`input_ids` must be one document of at least 2 tokens, got shape {tuple(input_ids.shape)}.")
    if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 2:
        raise ValueError(f"`window_size` must be an int >= 2, got {window_size!r}.")
    if max_positions is not None and window_size > max_positions:
        raise ValueError(f"`window_size` {window_size} exceeds the model's {max_positions} positions.")
    if isinstance(window_overlap, bool) or not isinstance(window_overlap, int) or not 0 <= window_overlap < window_size:
        raise ValueError(f"`window_overlap` must be an int in [0, window_size), got {window_overlap!r}.")
    return input_ids


def _max_positions(config) -> int | None:
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def _positive_count(value) -> int | None:
    """`value` as a Python int when it is a whole number >= 1 (an int, a numpy integer, a 0-d integer tensor: what
    `operator.index` takes; never a bool), else `None`."""
    if isinstance(value, bool) or getattr(value, "dtype", None) == torch.bool:
        return None
    try:
        value = operator.index(value)
    except TypeError:
        return None
    return value if value >= 1 else None


@torch.no_grad()
def evaluate_perplexity(model, input_ids: torch.Tensor, *, window_size: int, window_overlap: int = 0,
                        num_words: int | None = None, batch_size: int = 8,
                        allow_overlap_mismatch: bool = False) -> PerplexityResult:
    r"""Perplexity of `model` on one long document read in windows (§4.2).

    A recurrent model is evaluated at the overlap it was trained with (`model.config.window_overlap`): its
    recurrent vector is trained to summarise every token up to the first token of the current window, so evaluating
    it at another overlap shifts that alignment and is not the paper's protocol (§4.2, §5: "we train with the same
    overlap that we test with"). Table 2 therefore needs one recurrent model per evaluation overlap. The window size
    may differ from the training one (the recurrent vector still summarises everything before the window).

    Args:
        model: a plain HF causal LM or a recurrent model of this package (put in eval mode here).
        input_ids (`torch.LongTensor` of shape `(T,)` or `(1, T)`): the whole document, any length.
        window_size (`int`): tokens per window (at most the model's positions for a plain model).
        window_overlap (`int`, defaults to 0): tokens each window repeats from the previous one (context only).
        num_words (`int`, *optional*): words of the text, for `word_perplexity`.
        batch_size (`int`, defaults to 8): windows per forward pass for a plain model (they are independent).
        allow_overlap_mismatch (`bool`, defaults to `False`): evaluate a recurrent model at an overlap other than
            its config's anyway (an ablation, not the paper's protocol). Ignored for plain models.

    Returns:
        [`PerplexityResult`].

    Raises:
        TypeError / ValueError: `input_ids` not a single document of at least 2 tokens, a window size below 2 or
            beyond the model's positions, an overlap outside `[0, window_size)`.
        ValueError: `batch_size` not a positive whole number, `num_words` neither `None` nor one (a bool is
            neither; a numpy integer or a 0-d integer tensor is).
        ValueError: a recurrent model asked for a `window_overlap` other than its `config.window_overlap` (the
            message names both) without `allow_overlap_mismatch=True`.
    """
    input_ids = _check(input_ids, window_size, window_overlap, _max_positions(model.config))
    if _positive_count(batch_size) is None:
        raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}.")
    if num_words is not None and _positive_count(num_words) is None:
        raise ValueError(f"`num_words` must be a positive int (the words of the text) or None, got {num_words!r}.")
    batch_size = _positive_count(batch_size)  # numpy integers and 0-d integer tensors count as the int they hold
    num_words = None if num_words is None else _positive_count(num_words)
    if isinstance(model, RecurrentCausalLMMixin) and window_overlap != model.config.window_overlap \
            and not allow_overlap_mismatch:
        raise ValueError(
            f"evaluate_perplexity(window_overlap={window_overlap}) on a recurrent model trained with "
            f"config.window_overlap={model.config.window_overlap}: the recurrent vector is trained for its own "
            "overlap (Yoshida et al. 2020, §4.2, §5), so train one model per evaluation overlap, or pass "
            "allow_overlap_mismatch=True for an explicit ablation."
        )
    model.eval()
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    length = input_ids.numel()
    spans = window_spans(length, window_size, window_overlap)
    tokens_read = sum(end - start for start, end, _ in spans)
    if isinstance(model, RecurrentCausalLMMixin):
        config = model.config
        saved = config.window_size, config.window_overlap
        config.window_size, config.window_overlap = window_size, window_overlap
        try:
            out = model(input_ids[None], labels=input_ids[None], use_cache=False, logits_to_keep=1)
        finally:
            config.window_size, config.window_overlap = saved
        nll = float(out.loss) * (length - 1)
    else:
        nll = 0.0
        for first in range(0, len(spans), batch_size):
            group = spans[first : first + batch_size]
            width = max(end - start for start, end, _ in group)
            rows = torch.zeros(len(group), width, dtype=torch.long, device=device)
            mask = torch.zeros(len(group), width, dtype=torch.long, device=device)
            targets = torch.full((len(group), width), -100, dtype=torch.long, device=device)
            for row, (start, end, new_from) in enumerate(group):
                rows[row, : end - start] = input_ids[start:end]
                mask[row, : end - start] = 1
                # window position p predicts token start + p + 1 (the last position predicts the first token of the
                # next window); positions before `new_from` are context already scored by the previous window
                stop = min(end + 1, length)
                targets[row, new_from : stop - start - 1] = input_ids[start + new_from + 1 : stop]
            logits = model(input_ids=rows, attention_mask=mask).logits
            nll += float(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                         ignore_index=-100, reduction="sum"))
    return PerplexityResult(nll=nll, num_tokens=length - 1, num_words=num_words, num_windows=len(spans),
                            tokens_read=tokens_read, window_size=window_size, window_overlap=window_overlap)


def flops_per_token(config, window_size: int, window_overlap: int = 0, recurrent: bool = False) -> float:
    r"""Approximate forward FLOPs per predicted token of windowed execution (the FLOPs column of Table 2).

    Per window of `w` tokens: `2 * P * w` for the transformer blocks' matrices (P = their parameters), `2 * N * w^2 * d`
    for causal attention scores and values, `2 * d * V * w` for the LM head; the recurrent model adds one key/value
    at layer L (`4 * w * d` plus its projection) and the pooling + feed-forward network once per window. Divided by
    the `w - o` new tokens of a window.

    Args:
        config: a GPT-2 or Llama-family config (hidden size, layers, vocabulary, intermediate size).
        window_size (`int`), window_overlap (`int`): the execution. recurrent (`bool`): add the recurrence.

    Returns:
        `float`: FLOPs per predicted token.
    """
    d = config.hidden_size
    layers = config.num_hidden_layers
    vocab = config.vocab_size
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d
    gated = hasattr(config, "intermediate_size") and getattr(config, "hidden_act", "gelu") in ("silu", "swish")
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    attn_params = d * d * 2 + 2 * d * (d // heads) * kv_heads
    mlp_params = (3 if gated else 2) * d * inner
    block_params = layers * (attn_params + mlp_params)
    w, o = window_size, window_overlap
    flops = 2 * block_params * w + 2 * layers * w * w * d + 2 * d * vocab * w
    if recurrent:
        sizes = [d, *getattr(config, "recurrence_hidden_sizes", []), d]
        flops += 2 * sum(a * b for a, b in zip(sizes, sizes[1:])) + 2 * layers * d  # FFN + pooling, once
        flops += 4 * w * d + 2 * 2 * d * (d // heads) * kv_heads  # one more key/value and its projection
    return flops / (w - o)


@contextmanager
def recurrence_zeroed(model):
    r"""Within the block, every recurrent vector the model inserts (§3.1: the output of `model.recurrence`, a
    `(batch_size, hidden_size)` tensor per window) is zero.

    An ablation: a recurrent model evaluated inside it and outside it tells how much its perplexity owes to the
    recurrence. The zero vector still enters layer L (`config.recurrence_layer`) as a key/value (a Llama or GPT-2
    projection of zero is its bias), so the windows' attention is otherwise unchanged. The hook is removed on exit,
    also on error.

    Args:
        model: a recurrent model of this package ([`RecurrentGPT2LMHeadModel`], [`RecurrentLlamaForCausalLM`]).

    Yields:
        `model` itself, with the hook in place.

    Raises:
        TypeError: `model` is not a recurrent model (it has no `recurrence` module).
    """
    if not isinstance(model, RecurrentCausalLMMixin):
        raise TypeError(f"`model` must be a recurrent model of hf_readonce, got {type(model).__name__}.")
    handle = model.recurrence.register_forward_hook(lambda module, args, output: torch.zeros_like(output))
    try:
        yield model
    finally:
        handle.remove()


__all__ = ["PerplexityResult", "evaluate_perplexity", "flops_per_token", "recurrence_zeroed"]
