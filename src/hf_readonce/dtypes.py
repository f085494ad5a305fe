"""The compute dtype of hf-readonce: one rule for every entry point.

Every path that loads a model to run it (`hf-readonce encode`, `answer`, `verify --recompute`, `hf-readonce demo`,
the `question-answering` / `summarization` / `text2text-generation` pipelines that travel with saved checkpoints, the
demo Space and `hf_readonce.representations.base.AdapterBase.load_for_compute`) computes in the dtype
[`resolve_compute_dtype`] gives:

- an explicit request (`"float32"`, `"bfloat16"`, `"float16"` or a `torch.dtype`) is kept;
- `"auto"` (the default) is **float32 on a CPU** and the checkpoint's own dtype elsewhere (CUDA, ...).

Why: the reference checkpoints are saved in fp16 and transformers 5 loads a checkpoint in its saved dtype, but CPUs
have no fast fp16 matrix kernels: one DeFormer forward of 32 windows of 256 tokens took 17.6 s in fp16 against
5.1 s in fp32 on the same 2 cores. bf16 is fast only on CPUs with native bf16 (AVX-512 BF16 or AMX), so it is
used only when asked for.

The storage dtype (`hf-readonce encode --store-dtype`, `fill_store(store_dtype=...)`) is another setting: states are
computed in the compute dtype, then cast to the storage dtype when written. The two keep apart by name: `dtype` is
the compute dtype (transformers' `from_pretrained(dtype=...)`, `pipeline(dtype=...)`), `store_dtype` the storage
dtype (`fill_store`, `ensure_stored`, the tasks that read a store, `hf_readonce.hub.publish`, the DeFormer
pipeline's `store=` calls); [`takes_store_dtype`] refuses a `dtype=` given to one of the storage functions.

Stored representations are keyed by the compute dtype, so a model computing in fp32 and the same checkpoint computing
in fp16 or bf16 write and read different representation spaces (their states differ by the rounding of the compute
dtype): through the model's `representation_fingerprint()`, which hashes every parameter's dtype with its values
(DeFormer, ReadTwice) or the dtype of every parameter that is not float32 (LongDoc BART, ReadOnce BART, whose float32
fingerprint is the one they had before they keyed the dtype), or through the adapter's settings (block-attention
Llama's `compute_dtype`). When a store holds
states only for another compute dtype of the same weights, [`compute_dtype_hint`] finds which one, and the error
says so (`hf-readonce answer` then names `--compute-dtype`).

The pipelines under `hf_readonce/models/` travel to the Hub without hf-readonce, so each holds a verbatim copy of
[`resolve_compute_dtype`], marked `# Copied from hf_readonce.dtypes.resolve_compute_dtype`.
"""

from __future__ import annotations

import copy
import functools

import torch

COMPUTE_DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


def resolve_compute_dtype(requested, device, checkpoint_dtype):
    """The dtype to compute in: `requested` when it names one; for `None` or `"auto"`, float32 on a CPU and
    `checkpoint_dtype` on any other device (hf-readonce's one rule, `hf_readonce.dtypes`).

    Args:
        requested (`str`, `torch.dtype` or `None`): `"auto"`, `"float32"`, `"bfloat16"`, `"float16"` or a dtype.
        device (`str` or `torch.device`): where the model computes (`"cpu"`, `"cuda:0"`, ...).
        checkpoint_dtype (`torch.dtype` or `None`): the dtype the checkpoint is saved in (`None`: float32).

    Returns:
        `torch.dtype`: a floating dtype.

    Raises:
        ValueError: if `requested` names no floating dtype.
    """
    if requested is None or requested == "auto":
        return torch.float32 if torch.device(device).type == "cpu" or checkpoint_dtype is None else checkpoint_dtype
    dtype = getattr(torch, requested, None) if isinstance(requested, str) else requested
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"compute dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {requested!r}.")
    return dtype


def checkpoint_dtype(config) -> torch.dtype | None:
    """The dtype a checkpoint was saved in, as its config records it (`dtype`, or `torch_dtype` in configs written
    by transformers 4), or `None` when it records none.

    Args:
        config (`PretrainedConfig` or the `dict` of its `config.json`).
    """
    get = config.get if isinstance(config, dict) else lambda name: getattr(config, name, None)
    value = get("dtype") or get("torch_dtype")
    if isinstance(value, str):
        value = getattr(torch, value, None)
    return value if isinstance(value, torch.dtype) and value.is_floating_point else None


def load_dtype(requested, device, config) -> torch.dtype:
    """The `dtype=` to pass to `from_pretrained` for a model that will compute on `device`: [`resolve_compute_dtype`]
    with the checkpoint's dtype read from its `config` (so the weights are cast once, while loading).

    Raises:
        ValueError: if `requested` names no floating dtype.
    """
    return resolve_compute_dtype(requested, device, checkpoint_dtype(config))


def compute_dtype_hint(model, fingerprints, load=None) -> torch.dtype | None:
    """Which other compute dtype of the same weights would have made one of `fingerprints`: the model is
    fingerprinted in float32, float16 and bfloat16 in turn. Called on the error path only (it copies or reloads the
    model).

    Args:
        model: a model with `representation_fingerprint()` (every hf-readonce model that stores representations).
        fingerprints (`Iterable[str]`): the fingerprints a store holds.
        load (`Callable[[torch.dtype], model]`, *optional*): loads the checkpoint to compute in a dtype, as the
            command that would read the store loads it. Without it the model is copied and cast, which finds a
            narrower dtype (float32 weights cast to float16 are what loading in float16 gives) but not a wider one:
            weights loaded in bfloat16 and cast back to float32 are not the checkpoint's float32 weights.

    Returns:
        `torch.dtype` or `None`: the first dtype whose fingerprint is among `fingerprints`, `None` if none is (other
        weights, not another dtype).
    """
    wanted = set(fingerprints)
    if not wanted or not hasattr(model, "representation_fingerprint"):
        return None
    current = getattr(model, "dtype", None)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        if dtype == current:
            continue
        other = load(dtype) if load is not None else copy.deepcopy(model).to(dtype)
        if other.representation_fingerprint() in wanted:
            return dtype
    return None


def dtype_name(dtype) -> str:
    """`torch.float16` -> `"float16"` (the spelling of `--compute-dtype`)."""
    return str(dtype).removeprefix("torch.")


def takes_store_dtype(function):
    """Decorator of the functions that take the storage dtype of what they write as `store_dtype`
    ([`~hf_readonce.representations.fill_store`], [`~hf_readonce.representations.fill.ensure_stored`], the tasks that
    read a store, `hf_readonce.hub.publish`): a `dtype=` keyword given to one is refused, before any work, with a
    `TypeError` naming `store_dtype`. In hf-readonce, as in transformers, `dtype` is the dtype a model computes in
    (`from_pretrained(..., dtype=...)`); the refusal holds for a function that takes `**kwargs` too, which would
    otherwise carry `dtype` on (e.g. to `generate()`). The signature is the function's (`inspect.signature` reads it
    through `__wrapped__`).

    Args:
        function (`Callable`): a function (or `__init__`) with a keyword argument `store_dtype`.

    Returns:
        `Callable`: the function, refusing `dtype=`.

    Raises (on call):
        TypeError: a `dtype=` keyword, naming the function and `store_dtype` (nothing of the function has run).
    """
    shown = function.__qualname__.removesuffix(".__init__")

    @functools.wraps(function)
    def refusing_dtype(*args, **kwargs):
        if "dtype" in kwargs:
            raise TypeError(f"{shown}() takes the storage dtype as `store_dtype`, not `dtype` (got "
                            f"dtype={kwargs['dtype']!r}): pass store_dtype={kwargs['dtype']!r}; the dtype the model "
                            "computes in is set when it is loaded (`from_pretrained(..., dtype=...)`).")
        return function(*args, **kwargs)

    return refusing_dtype


__all__ = ["COMPUTE_DTYPE_CHOICES", "checkpoint_dtype", "compute_dtype_hint", "dtype_name", "load_dtype",
           "resolve_compute_dtype", "takes_store_dtype"]
