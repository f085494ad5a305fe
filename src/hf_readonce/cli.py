"""`hf-readonce` command line (also `python -m hf_readonce.cli`).

Subcommands:

- `encode MODEL --documents FILE.jsonl --store DIR`: store the representation of every document not stored yet
  (re-running does no model work for stored documents; `--repair` first drops what `verify` finds corrupted, then
  recomputes it). Under `accelerate launch --num_processes N -m hf_readonce.cli encode ...` each process encodes
  its share of the documents (by content hash) into the same store. Documents read ahead are encoded longest first
  (`fill_store`'s `group_by_length`); `--no-group-by-length` keeps the input order.
- `answer MODEL --store DIR --questions FILE.jsonl --output preds.jsonl`: answer from stored passage states; prints
  EM/F1 beside the trivial baselines when the questions carry gold answers. Extractive families extract spans with
  the answering function their spec declares (`FamilySpec.answer_function`), and so do generative ones: a causal LM
  (block-attention Llama or Llama checkpoint) composes the stored KV caches of each row's passages (`context`, or a
  list in `contexts`) in front of `"\n\nQuestion: {question}\nAnswer:"` and generates the answer greedily
  (`hf_readonce.tasks.document_cache_qa`); a ReadOnce model reads each question with its document's stored vectors
  (`hf_readonce.tasks.generative_qa_store`).
- `summarize MODEL --store DIR --documents FILE.jsonl --output summaries.jsonl`: summaries generated from each
  document's stored representations (families registered with `summarize=True`: their encoder never runs again);
  prints ROUGE-1/2/L beside lead-1 and lead-3 when every document carries a reference summary
  (`hf_readonce.tasks.summarization_store`).
- `info --store DIR`: documents, size on disk, and per representation space its fingerprint, settings and the model
  `encode` was given (MODEL as typed; a local folder as its absolute path, or relative to the store when it lies
  beside it, shown where the store is now), to tell which space `prune --space` gets.
- `info MODEL [--store DIR]`: the store key `encode` would write MODEL's representations under: its fingerprint per
  compute dtype (`--compute-dtype auto` keys a CPU's float32 and CUDA's checkpoint dtype apart) and settings, computed
  by the same loading and adapter as `encode` (the fingerprint hashes the weights, so they are loaded, on the CPU; no
  document is read); with `--store`, which spaces of the store have that key and, for the others, whether the
  fingerprint, the settings or the compute dtype differs, and the `encode` command that stores the model's.
- `verify --store DIR`: check every checksum, and every manifest field against its shard's own header; exits 1
  naming each corrupted shard, manifest (and field) and document. With
  `--recompute N --model MODEL [--documents FILE.jsonl]`, also recompute N documents of each representation space
  the model wrote and report the largest |stored - fresh| and the KL of the model's output distribution between
  fresh and stored states (`hf_readonce.representations.recompute_store`); exits 1 if a document was not read the
  same way (other token ids), a KL is above `--max-kl`, a largest difference above `--max-diff`, or a space of the
  model could not be recomputed.
- `prune --store DIR --space KEY [--quarantine] [--dry-run]`: delete every document of a representation space
  (`info` lists the spaces; e.g. an old model's) and with `--quarantine` the files `repair` set aside; the only
  command that deletes stored representations.
- `demo`: the package's end-to-end demo (see `hf_readonce.recipes.demo`).
- `publish MODEL_DIR --repo-id OWNER/NAME [--local-dir DIR] [--private] [--store STORE] [--metrics FILE]`: assemble
  a Hub repo folder (weights, code, pipeline, tokenizer, representation format, model card) and write it to
  `--local-dir`, or create the repo and upload it in one commit (see `hf_readonce.hub.publish`); a shipped checkpoint
  (`reference-deformer`) brings its recorded evaluation to the card unless `--metrics` is given.
- `checkpoints [--path NAME]`: the checkpoints shipped with hf-readonce and their folders; MODEL (and MODEL_DIR)
  accept their names (`reference-deformer`, `reference-qa`) wherever they accept a folder.

Models compute in the dtype of `hf_readonce.dtypes` (`--compute-dtype auto`: float32 on a CPU, the checkpoint's
dtype on CUDA); `encode --store-dtype` (also spelled `--dtype`) is the storage dtype, a separate setting.

Exit status: 0 success; 1 corruption found (`verify`), documents left unrepaired, shards a `prune` left behind a
link, bad input lines with `--strict`, no space of the store under the model's key (`info MODEL --store`),
or an input file that holds no documents / questions (or none under `--text-field`); 2 usage errors and errors that
stop a command (one line saying why and what to do; never a traceback: set `HF_READONCE_TRACEBACK=1` to see one for
an unexpected error); 130 (143 for SIGTERM) when stopped, with one line saying what the command left (`encode`: the
committed shards, and how many documents it committed; `answer` / `summarize`: no output written, the `--output` file
as it was; `publish`: nothing written); 141, quietly, when the reader of the output stops early
(`hf-readonce info | head -1`). Every command takes `--no-progress`.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import inspect
import json
import math
import os
import re
import shlex
import signal
import sys
import time
import warnings
from pathlib import Path

from .arguments import OneLineArgumentParser as _Parser
from .arguments import path_argument as _path
from .arguments import positive_int as _positive_int
from .arguments import silence_progress_bars

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away
COMPUTE_DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")  # hf_readonce.dtypes (not imported: fast --help)


class CommandError(Exception):
    """An error that stops a command; printed as `hf-readonce <command>: error: <message>` with exit status `status`
    (default 2; 1 for input that holds nothing to work on, e.g. an empty documents file)."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _installed_version() -> str:
    """The installed distribution's version (without importing the package's heavy modules), else the source's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hf-readonce")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _report_bad_lines(problems, path, stream=None, limit: int = 20) -> None:
    if not problems:
        return
    stream = stream or sys.stderr
    print(f"hf-readonce: {path}: set aside {len(problems)} line(s):", file=stream)
    for problem in problems[:limit]:
        print(f"  {problem}", file=stream)
    if len(problems) > limit:
        print(f"  ... and {len(problems) - limit} more", file=stream)


def _listed(texts: list[str], limit: int, separator: str = ", ") -> str:
    """The first `limit` of `texts` joined by `separator`, then `(and N more)` for the rest: how a message names many
    paths or ids."""
    more = f" (and {len(texts) - limit} more)" if len(texts) > limit else ""
    return separator.join(texts[:limit]) + more


def _no_object_line(path: Path, what: str, problems: list) -> str:
    """The message for an input file without a JSON-object line: `FILE holds no WHAT (no JSON object line)`, with the
    first unreadable line's reason where there is one (a byte-order mark, gzip data, a lone surrogate: why a one-line
    file was set aside)."""
    reason = f"; {problems[0]}" if problems else ""
    return f"{path} holds no {what} (no JSON object line{reason})."


DEFAULT_TEXT_FIELDS = ("context", "document")  # SQuAD-style passages, then XSum-style documents


def _scan_head(path: Path, text_field: str | None, id_field: str | None) -> dict:
    """One read of a JSONL file from its first line, for the checks made before any model work, stopping at the first
    line by which all of them are known: which field holds the texts (`text_field`, or when `None` `context` if a line
    holds a text there, else `document` if one does, else `context`), whether a line holds a text in it, and whether
    a line has `id_field` (when given). A file without such lines is read to its end.

    Returns:
        `dict`: `text_field` (the field found), `usable` (a line holds a non-blank string there), `has_field` (a line
        has the field), `first` (`(line number, row)` of the first JSON-object line, or `None`), `problems` (the
        lines set aside until it stopped), `id_seen` (a line has `id_field`; `True` when it is `None`).
    """
    from .tasks.jsonl import iter_jsonl

    names = (text_field,) if text_field is not None else DEFAULT_TEXT_FIELDS
    usable, has_field = dict.fromkeys(names, False), dict.fromkeys(names, False)
    first, id_seen, problems = None, id_field is None, []
    for number, row in iter_jsonl(path, problems):
        first = first or (number, row)
        for name in names:
            value = row.get(name)
            usable[name] = usable[name] or (isinstance(value, str) and bool(value.strip()))
            has_field[name] = has_field[name] or name in row
        id_seen = id_seen or id_field in row
        if usable[names[0]] and id_seen:
            break
    found = next((name for name in names if usable[name]), names[0])
    return {"text_field": found, "usable": usable[found], "has_field": has_field[found], "first": first,
            "problems": problems, "id_seen": id_seen}


def _refuse_unreadable(path: Path, option: str) -> None:
    """Stop before any model work when an input file the command reads (`--documents`, `--questions`) exists but
    cannot be opened for reading, e.g. without read permission. A path that is not a regular file (a FIFO, which
    opening would block on until a writer comes) is left to the reader.

    Raises:
        CommandError: naming `option`, the path and the reason (exit status 2).
    """
    if not path.is_file():
        return
    with _reading_input(path, option):
        with open(path, "rb"):
            pass


@contextlib.contextmanager
def _reading_input(path: Path, option: str, then: str = "give a file you can read"):
    """Around code that reads the input file `path` an option names (`--documents`, `--questions`): an `OSError`
    raised there (an I/O error in the middle of the file, which names no file; the file removed, or swapped for a
    folder, since it was checked) becomes one error line naming the option and the path, e.g. `--documents
    docs.jsonl cannot be read (Input/output error); give a file you can read.`

    Args:
        path (`Path`): the file. option (`str`): the option named. then (`str`, defaults to "give a file you can
            read"): what the message advises, after the reason.

    Raises:
        CommandError: for an `OSError` raised inside the block (exit status 2).
    """
    try:
        yield
    except OSError as error:
        reason = (error.strerror or str(error) or type(error).__name__).rstrip(".")
        raise CommandError(f"{option} {path} cannot be read ({reason}); {then}.") from None


def _input_rows(rows, path: Path, option: str, then: str = "give a file you can read"):
    """`rows` (an iterator reading the input file `path`, e.g. `iter_documents`) passed on one by one, an `OSError`
    raised while reading it said as [`_reading_input`] says it, with `then` as the advice (the same default).

    Raises:
        CommandError: as [`_reading_input`].
    """
    with _reading_input(path, option, then):
        yield from rows


def _input_file(value: str, option: str, pipe: bool = False) -> Path:
    """The input file an option names (`--documents`, `--questions`), checked before any model work, every input
    option said alike: `--questions q.jsonl does not exist.`, `... is a directory, expected a JSONL file.`, `... is
    not a regular file, expected a JSONL file.` (a FIFO or device, unless `pipe`: `encode` reads its documents from
    one), then [`_refuse_unreadable`].

    Args:
        value (`str`): the path as given. option (`str`): the option named in the message. pipe (`bool`, defaults to
            `False`): also take a path that is not a regular file (a FIFO, `/dev/stdin`).

    Returns:
        `Path`: the path.

    Raises:
        CommandError: naming `option` and the path, as above (exit status 2).
    """
    path = Path(value)
    if not path.exists():
        raise CommandError(f"{option} {path} does not exist.")
    if path.is_dir():
        raise CommandError(f"{option} {path} is a directory, expected a JSONL file.")
    if not pipe and not path.is_file():
        raise CommandError(f"{option} {path} is not a regular file, expected a JSONL file.")
    _refuse_unreadable(path, option)
    return path


def _input_fields(path: Path, text_field: str | None, id_field: str | None = None, option: str = "--text-field",
                  status: int = EXIT_PROBLEMS, input_option: str = "--documents") -> tuple[str, str]:
    """The text and id fields `encode` and `verify` read, and their input checked before any model work, in one read
    from the start of `path` ([`_scan_head`]). Without `--text-field` (`text_field` `None`) texts are read from
    `context` if a line holds a text there, else from `document` if one does (an XSum-style file; said on stderr),
    else `context` (the error that follows names it). The checks are those of [`_refuse_without_documents`], and an
    `id_field` given on the command line that no line has is an error (every document would be named `line N`
    without a word); the default `id` may be absent. A path that is not a regular file (a FIFO, read once by the
    encoder) is not read: `context` and `id` unless given.

    Returns:
        `(text_field, id_field)`.

    Raises:
        CommandError: as [`_refuse_without_documents`] (with `option` and `status`); an `id_field` no line has; the
            file failing to be read, naming `input_option` (the option that gave `path`) and the path
            ([`_reading_input`]).
    """
    id_field_read = id_field if id_field is not None else "id"
    if not path.is_file():
        return text_field if text_field is not None else DEFAULT_TEXT_FIELDS[0], id_field_read
    with _reading_input(path, input_option):
        scan = _scan_head(path, text_field, id_field)
    if text_field is None and scan["text_field"] != DEFAULT_TEXT_FIELDS[0]:
        print(f"--text-field: no line of {path} has a 'context'; reading 'document'.", file=sys.stderr)
    _refuse_without_documents(path, scan, option, status)
    if not scan["id_seen"]:
        raise CommandError(f"--id-field {id_field!r}: no line of {path} has this field (without the option "
                           "documents are named by their `id`, else `line N`).")
    return scan["text_field"], id_field_read


def _refuse_without_documents(path: Path, scan: dict, option: str, status: int) -> None:
    """Stop before any model work when a JSONL input holds nothing to encode, from a [`_scan_head`] of `path`: no
    JSON-object line at all ("FILE holds no documents", with the first unreadable line's reason), or no line whose
    text field is a non-blank string (naming the fields of the first valid line when no line has the field).

    Args:
        path (`Path`): the JSONL file. scan (`dict`): its [`_scan_head`]. option (`str`): the option named in the
            message. status (`int`): the exit status (1: the input holds nothing to work on; `verify` passes 2, its
            1 meaning a damaged store).

    Raises:
        CommandError: with `status`, as above.
    """
    if scan["usable"]:
        return
    if scan["first"] is None:
        raise CommandError(_no_object_line(path, "documents", scan["problems"]), status=status)
    text_field = scan["text_field"]
    if scan["has_field"]:
        raise CommandError(f"{path} holds no documents: every {text_field!r} field is empty or not a string.",
                           status=status)
    number, row = scan["first"]
    fields = ", ".join(repr(key) for key in row) or "none"
    raise CommandError(f"{option} {text_field!r}: no line of {path} has this field; its first valid line (line "
                       f"{number}) has the fields {fields}.", status=status)


def _device(name: str):
    """The torch device of `--device` (`auto`: cuda if available, else cpu).

    Raises:
        CommandError: not a device name, or a device this machine does not have (e.g. `cuda` without CUDA).
    """
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise CommandError(f"--device {name!r} is not a torch device ({error}).") from None
    if device.type == "cpu":
        return device
    backend = getattr(torch, device.type, None) if device.type != "mps" else getattr(torch.backends, "mps", None)
    available = getattr(backend, "is_available", lambda: False)()
    if not available:
        built = " (this torch was built without CUDA)" if device.type == "cuda" and torch.version.cuda is None else ""
        raise CommandError(f"--device {name}: no {device.type} device is available on this machine{built}; use "
                           "--device cpu (or auto, which picks cuda when there is one).")
    count = getattr(backend, "device_count", lambda: 1)()
    if device.index is not None and device.index >= count:
        raise CommandError(f"--device {name}: this machine has {count} {device.type} device(s), numbered from 0.")
    return device


def _finite(value: float, option: str, positive: bool = False) -> float:
    """`value` if it is a finite number (and > 0 with `positive`), else a CommandError naming `option`."""
    if value is not None and (not math.isfinite(value) or (positive and value <= 0)):
        raise CommandError(f"{option} must be a finite number{' > 0' if positive else ''}, got {value}.")
    return value


_STORAGE_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
# how help, docs and messages spell the storage dtype options (`encode`, `answer`, `summarize`, `publish
# --store-dtype`, also spelled `--dtype`)
STORAGE_DTYPE_METAVAR = "{" + ",".join(_STORAGE_DTYPES) + "}"
# the storage dtype options' help says that `--dtype`, which recorded commands use, is the same option
DTYPE_ALIAS = "; --dtype is another spelling of --store-dtype"


def _storage_dtype(value: str) -> str:
    """A storage dtype option (`--store-dtype`, alias `--dtype`, of `encode`, `answer`, `summarize`, `publish`):
    `fp16`, `bf16` or `fp32`, the spelling help, docs and messages show; the torch names (`float16`, the spelling of
    `--compute-dtype`) are read too, without being offered. Returns the torch name (`"float16"`).

    Raises:
        argparse.ArgumentTypeError: for any other value (argparse's usage error, exit status 2), naming the choices.
    """
    name = _STORAGE_DTYPES.get(value, value)
    if name not in _STORAGE_DTYPES.values():
        raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(_STORAGE_DTYPES)})")
    return name


def _check_storage_dtype_use(args) -> None:
    """`answer` / `summarize --store-dtype` sets the dtype `--encode-missing` stores in: refused without it, where
    nothing is stored and the option would be ignored (the dtype models compute in is `--compute-dtype`).

    Raises:
        CommandError: `--store-dtype` (or `--dtype`) given without `--encode-missing`.
    """
    if args.store_dtype is not None and not args.encode_missing:
        raise CommandError(f"--store-dtype {_storage_dtype_option(args.store_dtype)} is the storage dtype of what "
                           "--encode-missing stores, and without --encode-missing nothing is stored: pass both, or "
                           "drop --store-dtype (the dtype the model computes in is --compute-dtype).")


def _storage_dtype_options(args, accepted, model_type: str) -> dict:
    """`answer`'s storage dtype for `--encode-missing` as its answering function takes it (`store_dtype`, the name
    of [`~hf_readonce.representations.fill_store`]'s): `{"store_dtype": "float16"}` for `--store-dtype fp16`, `{}`
    without the option (the function's default, float16).

    Raises:
        CommandError: `--store-dtype` given to a family whose answering function takes no `store_dtype` (its
            `--encode-missing` would store in another dtype than asked).
    """
    if args.store_dtype is None:
        return {}
    if "store_dtype" not in accepted:
        raise CommandError(f"--store-dtype does not apply to {model_type} models: their answering function stores "
                           "what --encode-missing encodes in its own dtype.")
    return {"store_dtype": args.store_dtype}


def _storage_dtype_option(name: str) -> str:
    """A storage dtype's torch name (`"float16"`) as the `--store-dtype` option spells it (`fp16`)."""
    return next((short for short, long in _STORAGE_DTYPES.items() if long == name), name)


def _quoted(path) -> str:
    """`path` (a `str` or `Path`) as a command this CLI prints for pasting into a shell names it: quoted where it holds
    a space or another character the shell reads (`'my store'`), as given otherwise."""
    return shlex.quote(str(path))


def _one_line(error: BaseException) -> str:
    """An exception as one line: its message's first line (or its type), with the file of an `OSError`."""
    if isinstance(error, OSError) and error.strerror:
        text = f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    else:
        text = str(error).strip() or type(error).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0].rstrip(".") + (" ..." if len(lines) > 1 else "")


def _resolve_model(name: str) -> str:
    """The folder or Hub id a MODEL argument names: a shipped checkpoint's name (`reference-deformer`,
    `reference-qa`, see `hf-readonce checkpoints`) becomes its folder; an existing folder stays; a path that does not
    exist is an error here, before any Hub lookup (a name that is no valid Hub repo id, or whose first part is a
    local folder, is read as a path), and so are a file (e.g. the documents file given as MODEL) and a folder without
    config.json.

    Raises:
        CommandError: a shipped checkpoint that cannot be found or fails its checksum; a missing local folder, a file,
            a folder that is no saved checkpoint.
    """
    from .arguments import local_model_or_hub_id
    from .weights import SHIPPED_NAMES

    try:
        found = local_model_or_hub_id(name)
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from None
    if Path(found).is_dir() and not (Path(found) / "config.json").is_file():
        raise CommandError(f"model {name!r}: the folder {found} holds no config.json, so it is no saved checkpoint "
                           "(`save_pretrained` writes one; `hf-readonce checkpoints` lists the shipped ones).")
    if found != name or Path(name).expanduser().exists():
        return found
    import difflib

    close = difflib.get_close_matches(name, list(SHIPPED_NAMES), n=1, cutoff=0.8)
    if close and "/" not in name:  # a misspelled shipped name, not a Hub id: say so now, not after the Hub's retries
        raise CommandError(f"model {name!r} is no folder here and no shipped checkpoint: did you mean {close[0]!r}? "
                           f"(shipped: {', '.join(SHIPPED_NAMES)}).")
    unreachable = _hub_unreachable() if not _cached_on_this_machine(name) else None
    if unreachable is not None:  # huggingface_hub would retry for about 25-50 s before saying the same
        raise CommandError(f"model {name!r} is no folder here and no shipped checkpoint (shipped: "
                           f"{', '.join(SHIPPED_NAMES)}), and the Hub cannot be reached from this machine "
                           f"({unreachable}); check the name, or pass the folder of a downloaded checkpoint.")
    return name


# the start of a model name `encode` recorded relative to the store's folder ([`_model_name`]): a Hub id, a shipped
# name or an absolute path never starts with it
_BESIDE_THE_STORE = "../"


def _model_name(name: str, store=None) -> str:
    """The name `encode` records with the representation spaces it writes (`hf-readonce info --store` shows it, so
    that the spaces of two checkpoints of one family can be told apart): MODEL as given, a shipped checkpoint's name
    or a Hub id, or for a local folder its absolute path (`~` expanded, links kept), which names it from any working
    directory. With `store` (the store folder it is recorded in), a local folder that lies beside the store, under
    the store folder's parent (`work/model` for `work/store`; not the file system's root), is recorded as its path
    relative to the store folder, `../model`: the name then still names it once both are copied or moved together
    (`cp -r work/ other/`), where an absolute path named the folder they were copied from. A folder that holds the
    store (the store's parent itself, or above) keeps its absolute path, and so does a folder beside a store folder
    that is a symbolic link (for the file system, `../model` is beside the link's target). [`_recorded_model`] reads
    it back."""
    path = Path(name).expanduser()
    if not path.exists():
        return name
    folder = os.path.abspath(path)
    if store is not None:
        home = os.path.abspath(Path(store).expanduser())
        parent = os.path.dirname(home)
        try:  # (paths on two drives have no common path)
            beside = (os.path.commonpath([folder, parent]) == parent and os.path.commonpath([folder, home]) != home
                      and folder != parent and parent != os.path.dirname(parent))
        except ValueError:
            beside = False
        relative = os.path.relpath(folder, home) if beside else None
        # (`../...`), unless the store folder is a link: `..` is then, for the file system, its target's parent
        if relative is not None and os.path.realpath(os.path.join(home, relative)) == os.path.realpath(folder):
            return Path(relative).as_posix()
    return folder


def _recorded_model(name: str, store) -> str:
    """A model name a store records as MODEL names it from any working directory: one `encode` recorded relative to
    the store folder ([`_model_name`], `../model`) joined to `store`, where the store is now (a store opened through
    a symbolic link: beside the link's target, where the file system reads `..`); any other (an absolute path, a Hub
    id, a shipped name) as it is."""
    if name.startswith(_BESIDE_THE_STORE):
        home = os.path.abspath(Path(store).expanduser())
        folder = os.path.normpath(os.path.join(home, name))
        if os.path.realpath(folder) != os.path.realpath(os.path.join(home, name)):  # a store opened through a link:
            folder = os.path.normpath(os.path.join(os.path.realpath(home), name))  # `..` is beside its target
        return folder
    return name


def _recorded_models(names, store) -> tuple[list[str], list[str]]:
    """The models a store records for a space (`names`: its `model_names`), each as [`_recorded_model`] names it
    (one folder recorded under two names, absolute and relative, once), and those of them that are local folders
    (an absolute path, or a path relative to the store) that do not exist here: a store copied or moved without
    them, or a folder moved or removed since.

    Returns:
        `(models, missing)`: both lists of names, in the order `names` gives.
    """
    models = list(dict.fromkeys(_recorded_model(name, store) for name in names))
    missing = [model for model in models if os.path.isabs(model) and not os.path.isdir(model)]
    return models, missing


def _named_as_encode_names_it(model, name: str, store=None) -> None:
    """Set `model.config.name_or_path` to what `encode` records for MODEL `name` in `store` ([`_model_name`]),
    which `fill_store` records by default: `answer` and `summarize --encode-missing` then name the spaces they write
    as `encode` does, not by the relative path or the shipped checkpoint's folder the model was loaded from (`info`
    listed one model under two names). `name_or_path` is no part of a representation fingerprint, and nothing loads
    from it after the model is loaded."""
    model.config.name_or_path = _model_name(name, store)


def _cached_on_this_machine(repo_id: str) -> bool:
    """Whether the Hub cache of this machine holds `repo_id`'s `config.json` (transformers then loads it offline)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an unreadable cache counts as no cache
        return False


def _hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hub endpoint (`HF_ENDPOINT`, default https://huggingface.co) cannot be reached, in a few words, or
    None when a TCP connection to it opens within `timeout` seconds, when `HF_HUB_OFFLINE` is set (transformers then
    fails at once by itself) or when a proxy is configured (its reachability is not tested here)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                                                                    "all_proxy", "HTTP_PROXY", "http_proxy")):
        return None
    endpoint = urlparse(constants.ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror:
        return f"{host} does not resolve"
    except OSError as error:
        return f"{host}:{port}: {error.strerror or type(error).__name__}"


def _config_error(name_or_path: str, error: Exception) -> str:
    """The one-line reason `AutoConfig.from_pretrained(name_or_path)` failed, in the words of this package: a local
    folder whose config.json records no `model_type` says so and what to add (transformers' own line gives no way
    out); one whose config.json starts with a UTF-8 byte order mark (transformers reads it as an invalid JSON file)
    says so; one whose `model_type` no installed family or transformers architecture knows points to `hf-readonce info`
    (and, where the folder carries its model's code, to installing the package that registers its family; a Hub
    checkpoint that carries its code too), naming the family entry points that failed to load; a name that is
    neither a folder nor a shipped checkpoint and that the Hub could not provide names the shipped checkpoints (the
    closest first) instead of transformers' advice to check the internet connection."""
    import difflib

    from .representations import registered_families
    from .representations.registry import entry_point_failures_note
    from .weights import SHIPPED_NAMES

    config_file = Path(name_or_path) / "config.json"
    if config_file.is_file():
        try:
            raw = config_file.read_bytes()
            if raw.startswith(codecs.BOM_UTF8):  # transformers reads config.json as UTF-8 without a mark
                return (f"cannot load model {name_or_path!r}: {config_file} starts with a UTF-8 byte order mark, "
                        "which transformers does not read: save it as UTF-8 without a byte order mark.")
            saved = json.loads(raw.decode("utf-8"))
            model_type = saved.get("model_type")
        except (OSError, ValueError, AttributeError):
            return f"cannot load model {name_or_path!r}: {config_file} is not a JSON object ({_one_line(error)})."
        from transformers import CONFIG_MAPPING

        if not model_type:  # transformers: "Unrecognized model ... Should have a `model_type` key", without a way out
            types = dict.fromkeys(t for s in registered_families().values() if s.adapter is not None
                                  for t in s.checkpoint_model_types)
            return (f"cannot load model {name_or_path!r}: {config_file} records no model_type, so no architecture "
                    f"can be chosen for it: add to it the \"model_type\" of the model it holds (one of "
                    f"{', '.join(types)}), or save the checkpoint again with `save_pretrained`, which records it.")
        if model_type not in CONFIG_MAPPING:
            families = ", ".join(t for s in registered_families().values() for t in s.model_types)
            auto_map = saved.get("auto_map")
            carries_code = isinstance(auto_map, dict) and "AutoConfig" in auto_map
            return (f"cannot load model {name_or_path!r}: its model_type {model_type!r} is neither a transformers "
                    f"architecture nor an hf-readonce family (installed families: {families}; `hf-readonce info` "
                    "lists what each can do)"
                    + ("; the folder carries its model's code, which hf-readonce does not run: install the package "
                       "that registers its family (an `hf_readonce.families` entry point)" if carries_code else "")
                    + f"{entry_point_failures_note()}.")
        return f"cannot load model {name_or_path!r}: {_one_line(error)}"
    if Path(name_or_path).exists():
        return f"cannot load model {name_or_path!r}: {_one_line(error)}"
    if "trust_remote_code" in str(error):  # a Hub checkpoint whose model type only its own code (`auto_map`) defines
        return (f"cannot load model {name_or_path!r}: its model type is neither a transformers architecture nor an "
                "hf-readonce family, and the checkpoint carries its model's code, which hf-readonce does not run: "
                f"install the package that registers its family (an `hf_readonce.families` entry point)"
                f"{entry_point_failures_note()}.")
    close = difflib.get_close_matches(name_or_path, list(SHIPPED_NAMES), n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return (f"cannot load model {name_or_path!r}: no such folder, not a shipped checkpoint ({guess}shipped: "
            f"{', '.join(SHIPPED_NAMES)}), and the Hub could not provide it ({_one_line(error)}).")


def load_qa_model(name_or_path: str, num_decomposed_layers: int | None = None, device="cpu", seed: int = 0,
                  allow_readonce: bool = False, compute_dtype: str = "auto", notes: bool = True):
    """Load a model and its fast tokenizer through the family registry: the adapter registered for the checkpoint's
    `model_type` loads it (a checkpoint type an adapter accepts, e.g. a plain BERT, is loaded as that family's model;
    an extractive family's QA head, if absent, is initialized with `seed`, so answers are reproducible), in the
    compute dtype of `hf_readonce.dtypes` (`"auto"`: float32 on a CPU, the checkpoint's dtype elsewhere). Without
    `allow_readonce` (what `answer` passes) only families that answer from stored representations
    (`FamilySpec.answer`) are accepted; `encode` accepts every family with an adapter. `notes=False` leaves out the
    notes on stderr (a plain checkpoint read as a family's model, a QA head initialized at random): a reload of the
    same checkpoint, whose notes were printed at the first load, or `info MODEL`, which does not answer with it.

    Raises:
        CommandError: if the checkpoint cannot be loaded or no adapter is registered for its model type.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoTokenizer, set_seed

    from . import register_models
    from .representations import family_of, get_adapter_class, registered_families
    from .weights import load_quietly

    register_models()  # the console script defers it (fast --help/info/verify); loading a model needs it

    try:
        # never the custom code a folder carries (nor transformers' prompt to run it): a family is an installed one
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)
    except (OSError, ValueError, StrictDataclassError) as error:  # the last: a config.json field of the wrong type
        raise CommandError(_config_error(name_or_path, error)) from None
    try:
        adapter_class = get_adapter_class(config.model_type)
    except ValueError:
        adapter_class = None
    spec = family_of(adapter_class.model_type) if adapter_class is not None else None
    if spec is None or (not allow_readonce and spec.answer is None):
        served = [s for s in registered_families().values() if s.adapter is not None
                  and (allow_readonce or s.answer is not None)]
        supported = "; ".join(
            ", ".join(s.checkpoint_model_types) + (f" ({s.answer} answers)" if not allow_readonce else "")
            for s in served)
        raise CommandError(f"model {name_or_path!r} has model_type {config.model_type!r}; this command supports "
                           f"{supported}.")
    takes_k = any("num_decomposed_layers" in inspect.signature(config_class.__init__).parameters
                  for config_class in spec.configs)
    if num_decomposed_layers is not None and not takes_k:
        raise CommandError(f"--num-decomposed-layers does not apply to {config.model_type} models (their config "
                           "has no num_decomposed_layers).")
    extra = {} if num_decomposed_layers is None else {"num_decomposed_layers": num_decomposed_layers}
    set_seed(seed)
    # transformers' load report would list BERT's unused `pooler` (expected: a QA model has none); what matters to
    # a user, a missing QA head, is said below in one line.
    load = dict(device=device, compute_dtype=compute_dtype, config=config)
    try:
        if spec.answer == "extractive":
            model, info = load_quietly(adapter_class.load_for_compute, name_or_path, output_loading_info=True,
                                       **load, **extra)
        else:
            model, info = load_quietly(adapter_class.load_for_compute, name_or_path, **load, **extra), {}
    except (ValueError, TypeError) as error:  # e.g. a checkpoint whose representations cannot be stored
        raise CommandError(f"cannot use model {name_or_path!r}: {error}") from None
    except Exception as error:  # no weights (OSError), a truncated or garbled model.safetensors (SafetensorError)
        raise CommandError(f"cannot load the weights of model {name_or_path!r}: {_one_line(error)}. The folder needs "
                           "config.json and complete weights (model.safetensors), as `save_pretrained` writes "
                           "them; copy or download them again.") from None
    # e.g. a plain BERT read as a family's model it was not trained as
    if notes and config.model_type not in spec.model_types:
        title = getattr(spec.cards.get(adapter_class.model_type), "title", adapter_class.model_type)
        split = getattr(model.config, "num_decomposed_layers", None)
        print(f"hf-readonce: note: {name_or_path} is a plain {config.model_type} checkpoint, read here as a "
              f"{adapter_class.model_type} model ({title}"
              + (f", num_decomposed_layers {split}" if split is not None else "")
              + f") without that family's training: its answers are not the {config.model_type} model's own and are "
              "usually worse; train or distil it as the family's page says first.", file=sys.stderr)
    if notes and any(key.startswith("qa_outputs") for key in info.get("missing_keys", [])):
        print(f"hf-readonce: note: {name_or_path} has no question-answering head; it was initialized at random "
              f"(seed {seed}), so answers are meaningless until the model is fine-tuned for QA.", file=sys.stderr)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except Exception as error:  # no tokenizer files: OSError, ValueError, or a conversion error of transformers
        raise CommandError(f"cannot load the tokenizer of model {name_or_path!r}: {_one_line(error)}. Save the "
                           "tokenizer beside the weights (`tokenizer.save_pretrained(folder)`: tokenizer.json, "
                           "tokenizer_config.json).") from None
    if not getattr(tokenizer, "is_fast", False):
        raise CommandError(f"model {name_or_path!r} has no fast tokenizer (offsets are needed).")
    return model, tokenizer


def _family_of(name_or_path: str):
    """The [`FamilySpec`] of a checkpoint's model type (or of a checkpoint type a family's adapter loads), or None
    when the config cannot be read or no family has it (the model loader then says why, in its own words)."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    from . import register_models
    from .representations import family_of

    register_models()
    try:
        return family_of(AutoConfig.from_pretrained(name_or_path, trust_remote_code=False).model_type)
    except (OSError, ValueError, TypeError, StrictDataclassError):  # the last: a config.json field of the wrong type
        return None


def _generative_model_types(taking: str | None = None) -> str:
    """The checkpoint types `answer` generates answers for (families whose `answer` is "generative"), or only those
    whose answering function takes the argument `taking` (e.g. `"recompute_ratio"`)."""
    from .representations import registered_families
    from .representations.registry import answer_function

    def takes(spec) -> bool:
        return taking is None or taking in inspect.signature(answer_function(spec)).parameters

    return ", ".join(t for s in registered_families().values() if s.answer == "generative" and takes(s)
                     for t in s.checkpoint_model_types)


# the representation settings the CLI always has an option for (each family's adapter says which apply to it); a
# setting only a newer family declares gets its option from the adapter's `cli_settings` (`_family_options`)
_SETTING_OPTIONS = ("max_passage_length", "doc_stride", "max_document_length")


def _setting_names() -> list[str]:
    """Every representation setting name an option may carry: the fixed ones and every registered adapter's."""
    from .representations import registered_adapters

    names = list(_SETTING_OPTIONS)
    for adapter_class in registered_adapters().values():
        names += [name for name in adapter_class.cli_settings if name not in names]
    return names


def _adapter_settings(args, adapter_class) -> dict:
    """The adapter settings of `encode` for one family: its options' values (or the adapter's defaults).

    Raises:
        CommandError: if an option that does not apply to this family was given.
    """
    given = {name: getattr(args, name, None) for name in _setting_names()}
    own = adapter_class.cli_settings
    foreign = [name for name, value in given.items() if value is not None and name not in own]
    if foreign:
        raise _foreign_settings(foreign, adapter_class)
    return {name: given[name] if given[name] is not None else default for name, (_, default, _) in own.items()}


def _do_not_apply(options) -> str:
    """`--a does not apply` / `--a, --b do not apply`, for the options a command refuses."""
    options = list(options)
    return f"{', '.join(options)} {'does' if len(options) == 1 else 'do'} not apply"


def _foreign_settings(names, adapter_class) -> CommandError:
    """The error for representation-setting options (by setting name) that `adapter_class`'s family does not take,
    naming them and the family's own options (`encode`, `answer`, `summarize` and `publish` refuse them alike)."""
    own = ", ".join(option for option, _, _ in adapter_class.cli_settings.values()) or "none"
    return CommandError(f"{_do_not_apply('--' + name.replace('_', '-') for name in names)} to "
                        f"{adapter_class.model_type} models; their options are {own}.")


def _open_store(path: str, readonly: bool = False, create: bool = True, command: str = "answer"):
    from .store import RepresentationStore, StoreNotFoundError
    from .store.shards import _no_store_reason

    try:
        return RepresentationStore(path, readonly=readonly, create=create)
    except StoreNotFoundError:  # said in the CLI's words, with the command that makes one
        hint = ("run `hf-readonce encode MODEL --documents FILE.jsonl --store {0}` first"
                + (", or pass --encode-missing" if command in ("answer", "summarize") else "")).format(_quoted(path))
        there = ""
        if os.path.lexists(path):  # e.g. an empty folder made where a store was: it is not one
            there = f": {_no_store_reason(Path(path))}"
            hint = f"if the store was moved, give the folder it is in now; to start one here, {hint}"
        raise CommandError(f"no store at {path}{there} ({hint}).") from None
    except (ValueError, TypeError, PermissionError) as error:
        raise _store_error(path, error) from None


def _store_error(path, error: Exception) -> CommandError:
    """The `CommandError` for an error opening the store at `path` (`--store`): the file system's refusal to read
    (a `PermissionError` with a file name, e.g. a folder without read permission) names `--store`, the file and what
    to do; any other error (the store's own, e.g. a file given as the store) keeps its message."""
    if type(error) is PermissionError and error.filename:
        return CommandError(_access_refused(error, {"--store": path}))
    return CommandError(str(error))


# the options whose values set how much memory a command's batches take, in the order they are named
MEMORY_OPTIONS = ("batch_size", "num_beams", "max_new_tokens", "max_answer_length", "n_best_size",
                  "max_document_length", "max_passage_length", "max_question_length")


def _memory_exhausted(error: BaseException) -> bool:
    """Whether `error` says an allocation failed: Python's `MemoryError`, torch's `OutOfMemoryError` (CUDA), or the
    `RuntimeError` of torch's CPU allocator (`DefaultCPUAllocator: can't allocate memory`, on Windows `not enough
    memory`)."""
    if isinstance(error, MemoryError):
        return True
    if type(error).__name__ == "OutOfMemoryError":
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text
                                                  or "out of memory" in text.lower())


def _out_of_memory(error: BaseException, args, typed: dict) -> str:
    """The one line for a command stopped by a failed allocation ([`_memory_exhausted`]): how much it tried to
    allocate when torch says so, and the options given (`typed`, `{dest: option}`) among [`MEMORY_OPTIONS`] with
    their values, to pass smaller; without any, `--batch-size` where the command has it."""
    found = re.search(r"tried to allocate (\d+) bytes", str(error), re.IGNORECASE)  # CPU: "you tried", MPS
    if found:
        detail = f" (it tried to allocate {_human_bytes(int(found.group(1)))})"
    else:  # CUDA: "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of ..."
        found = re.search(r"tried to allocate ([\d.]+ [KMGT]iB)", str(error), re.IGNORECASE)
        detail = f" (it tried to allocate {found.group(1)})" if found else ""
    given = [f"{typed[dest]} {getattr(args, dest)}" for dest in MEMORY_OPTIONS
             if dest in typed and getattr(args, dest, None) is not None]
    if given:
        advice = f"{', '.join(given)} asked for more memory than this machine has: pass smaller values"
    elif args is not None and hasattr(args, "batch_size"):
        advice = "pass a smaller --batch-size"
    else:
        advice = "free memory or use a machine with more"
    return f"out of memory{detail}; {advice}."


def _access_refused(error: PermissionError, paths: dict) -> str:
    """The one line for the file system's refusal of access (`error`, a `PermissionError` with a file name) to a
    file or folder under one of the paths the command was given: that option, its value and the file refused, e.g.
    `--store work/reps: Permission denied on work/reps/shards; ...`.

    Args:
        error (`PermissionError`): with `filename` set, as `open`, `os.scandir` and the like raise it.
        paths (`dict`): `{option: path as given}` (or a list of paths, for a repeated option), e.g.
            `{"--store": "work/reps", "--output": "p.jsonl"}`; a positional argument by its name, `{"MODEL": ...}`.

    Returns:
        `str`: the message, naming the option whose path is the refused file or the folder above it nearest to it
        (`--store MODEL/reps` for a file under `MODEL/reps`, not `MODEL`); without one, the file alone.
    """
    refused = Path(os.fsdecode(error.filename)).expanduser().absolute()
    reason = (error.strerror or "Permission denied").rstrip(".")
    best = None  # (depth, option, path as given) of the nearest folder above the refused file
    for option, values in paths.items():
        for given in values if isinstance(values, (list, tuple)) else [values]:
            if not isinstance(given, str) or not given:
                continue
            top = Path(given).expanduser().absolute()
            if refused.is_relative_to(top) and (best is None or len(top.parts) > best[0]):
                best = (len(top.parts), option, given)
    if best is not None:
        _, option, given = best
        return (f"{option} {given}: {reason} on {error.filename}; run the command as a user who may read (and, "
                f"where the command writes, write) it, or give another {option}.")
    return f"{reason}: {error.filename}; run the command as a user who may read (and, where it writes, write) it."


def _store_info(store, orphans: bool = True) -> dict:
    """`store.info()`, a store moved or removed since the command opened it said as one error line. `orphans=False`
    (a caller that prints no orphan: the summary line after `encode` and `prune`) waits for no other process's
    commit (`store_info(confirm_orphans=False)`).

    Raises:
        CommandError: no store is at the store's path any more (`StoreNotFoundError`).
    """
    from .store import StoreNotFoundError
    from .store.maintenance import store_info

    try:
        return store.info() if orphans else store_info(store, confirm_orphans=False)
    except StoreNotFoundError as error:
        raise CommandError(str(error)) from None


def _path_arguments(parser: _Parser, command: str, args) -> dict:
    """The file and folder arguments of `command` (those of type [`path_argument`], as its parser recorded them in
    `path_arguments`) as `args` holds them when parsed, i.e. as the user gave them: `{option: value}` (a list for a
    repeated option), a positional argument by its name in capitals (`MODEL`, `MODEL_DIR`); arguments not given
    (`None`) are left out."""
    paths = {}
    for dest, name in parser.commands[command].path_arguments.items():
        value = getattr(args, dest, None)
        if value is not None:
            paths[name] = list(value) if isinstance(value, list) else value
    return paths


def _distributed_state(device: str = "auto"):
    """accelerate's PartialState when launched with several processes (`accelerate launch --multi_gpu
    --num_processes N`, or `torchrun --nproc_per_node N`), else None (no process group needed).

    On a machine without CUDA, or with `--device cpu`, the processes form a gloo (multi-CPU) group: accelerate only
    does that when asked for the CPU explicitly, otherwise each process would believe it is alone."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch
    from accelerate import PartialState

    return PartialState(cpu=device == "cpu" or not torch.cuda.is_available())


def _encode_settings(args, model) -> tuple[dict, dict]:
    """The representation settings `encode` builds its adapter with for `model`: each of its family's own settings
    (the adapter's `cli_settings`) from its option when given, else the value the checkpoint records (a DeFormer's
    training windows), else the adapter's default. `args` is left as it is.

    Returns:
        `(settings, sources)`: setting name -> value (the adapter's keyword arguments), and setting name -> where the
        value came from (`"given"`, `"the checkpoint's"` or `"default"`).

    Raises:
        CommandError: an option of a setting the family does not take.
    """
    from .representations import get_adapter_class

    adapter_class = get_adapter_class(model.config.model_type)
    filled = argparse.Namespace(**vars(args))
    given = {name for name in adapter_class.cli_settings if getattr(args, name, None) is not None}
    for name in adapter_class.cli_settings:
        if getattr(filled, name, None) is None and getattr(model.config, name, None) is not None:
            setattr(filled, name, getattr(model.config, name))  # (a recorded 0, e.g. doc_stride, counts)
    sources = {name: "given" if name in given else "the checkpoint's" if getattr(filled, name, None) is not None
               else "default" for name in adapter_class.cli_settings}
    return _adapter_settings(filled, adapter_class), sources


def _encode_adapter(model, tokenizer, settings: dict, sources: dict, batch_size: int = 32):
    """The adapter `encode` writes with: the family's adapter of `model` built with `settings` and `batch_size`
    ([`_encode_settings`] gives `settings` and `sources`).

    Raises:
        CommandError: a setting's value the adapter refuses, said with where each value came from (`sources`).
    """
    from .representations import get_adapter, get_adapter_class

    try:
        return get_adapter(model, tokenizer, **settings, batch_size=batch_size)
    except (ValueError, TypeError) as error:  # a setting's value, said with where it came from
        own = get_adapter_class(model.config.model_type).cli_settings
        used = ", ".join(f"{option} {settings[name]} ({sources[name]})" for name, (option, _, _) in own.items()
                         if name in settings and settings[name] is not None)
        raise CommandError(f"{error}" + (f" (settings: {used})" if used else "")) from None


# ---------------------------------------------------------------------------------------------------------- encode
def cmd_encode(args) -> int:
    """`hf-readonce encode`: compute the representations of `args.documents` with `args.model` and store the missing
    ones in `args.store` ([`fill_store`]). Returns the exit status: 0, or 1 when every document was set aside (a store
    this call created is removed again, [`_remove_empty_store`]), when
    `--strict` meets a set-aside document or problem, or when `--repair` leaves documents missing; raises
    [`CommandError`] (printed as one line by [`main`]) for bad input, a read-only store or a model no family reads."""
    from .representations import fill_store
    from .store import ReadOnlyStoreError, RepresentationStore, space_key
    from .store.keys import printable
    from .store.maintenance import orphan_shards
    from .tasks.jsonl import iter_documents

    documents = _input_file(args.documents, "--documents", pipe=True)
    _finite(args.shard_size_mb, "--shard-size-mb", positive=True)
    if args.shard_size_mb * 1024 * 1024 >= 2 ** 63:
        raise CommandError(f"--shard-size-mb {args.shard_size_mb:g} is too large; shards of a few hundred MiB at "
                           "most are practical (default 64).")
    # recorded with the space, as typed (a shipped name, not its folder; a folder beside the store relative to it)
    model_name = _model_name(args.model, args.store)
    args.model = _resolve_model(args.model)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        _device(args.device)  # a device this machine lacks is refused before a store is created
    # the text and id fields, and that the input holds documents: one read of its first lines (a FIFO is read once,
    # by the encoder)
    args.text_field, args.id_field = _input_fields(documents, args.text_field, args.id_field)
    state = _distributed_state(args.device)
    rank, world = (state.process_index, state.num_processes) if state else (0, 1)
    main_process = rank == 0
    if args.repair and main_process:
        from .store import restore_store_marker

        try:
            if restore_store_marker(args.store):
                print(f"repair: {args.store} had a store's folders but no readable store.json: wrote a new one (an "
                      "unreadable one is kept in quarantine/)", file=sys.stderr)
        except OSError as error:
            raise _store_error(args.store, error) from None
    store_path = Path(args.store).expanduser().absolute()
    created = _missing_folders(store_path) if main_process else []
    store = _open_store(args.store) if main_process else None
    # shard files no index entry lists (a lost index), listed before any process of this run writes a shard
    unindexed = set(orphan_shards(store)) if store is not None and not args.repair else set()
    if state is not None:
        state.wait_for_everyone()  # the main process creates the store
    store = store or _open_store(args.store)
    try:
        store.check_writable(layout=not args.repair)  # before loading the model: a read-only store fails in seconds
    except ReadOnlyStoreError as error:
        raise CommandError(str(error)) from None
    device = state.device if state is not None else _device(args.device)
    try:
        model, tokenizer = load_qa_model(args.model, args.num_decomposed_layers, device, allow_readonce=True,
                                         compute_dtype=args.compute_dtype)
        settings, sources = _encode_settings(args, model)
        adapter = _encode_adapter(model, tokenizer, settings, sources, args.batch_size)
    except CommandError:
        if created:  # a store this call made, for a model that cannot encode: leave nothing behind (only while it
            _remove_empty_store(store_path, created[-1])  # is empty, under its lock: another job may write into it)
        raise

    dropped_by_space, dropped_spaces = {}, {}
    if args.repair:
        if main_process:
            # verify and repair under one lock: a shard another `encode` commits meanwhile is never an orphan
            try:
                result = store.repair()
            except OSError as error:
                if isinstance(error, ReadOnlyStoreError):  # names the store already
                    raise CommandError(f"cannot repair: {printable(error)}") from None
                raise CommandError(f"cannot repair store {store.path}: {printable(error)}") from None
            report = result["report"]
            dropped_by_space, dropped_spaces = result["dropped_by_space"], result["dropped_spaces"]
            moved = result["quarantined"]
            if report.corruptions or report.orphans or moved:
                for corruption in report.corruptions:
                    print(f"repair: {corruption.describe()}", file=sys.stderr)
                count = sum(len(hashes) for hashes in dropped_by_space.values())
                spaces = (f" in {len(dropped_by_space)} representation spaces" if len(dropped_by_space) > 1 else "")
                print(f"repair: {len(result['salvaged'])} intact document(s) rewritten, {count} dropped{spaces}, "
                      f"{_count_paths(moved, result['quarantine_folder'])} moved to quarantine/", file=sys.stderr)
                if moved:  # every path it moved (leftovers of tmp/ included): nothing is deleted
                    names = _listed([printable(rel) for rel in moved], 20)
                    print(f"repair: moved to {printable(result['quarantine_folder'])}: {names}", file=sys.stderr)
            else:
                print("repair: verify found nothing to repair", file=sys.stderr)
        if state is not None:
            state.wait_for_everyone()
            store = RepresentationStore(args.store)  # reload the index the main process repaired

    problems = []
    total = None
    if main_process and documents.is_file() and not args.no_progress:  # the bar (on the main process only) counts
        # distinct documents, as the summary does
        from .store import content_hash

        with _reading_input(documents, "--documents"):
            total = len({content_hash(text) for _, text in iter_documents(documents, text_field=args.text_field,
                                                                          id_field=args.id_field, problems=[])})
    # an I/O error while the encoder reads the file names it (and what is kept), not only its errno text
    doc_iter = _input_rows(iter_documents(documents, text_field=args.text_field, id_field=args.id_field,
                                          problems=problems),
                           documents, "--documents", "the documents committed before it are kept, re-run to finish")
    store_dtype = args.store_dtype
    adapter_space = space_key(adapter.fingerprint(), adapter.settings())
    unindexed = [rel for rel in orphan_shards(store, adapter_space) if rel in unindexed] if unindexed else []
    if unindexed:  # their documents are encoded again beside them: say so before the work, and what avoids it
        print(f"hf-readonce encode: note: {len(unindexed)} shard file(s) in this model's folder of {store.path} "
              f"(shards/{adapter_space[:24]}/) are listed by no index entry (a lost or damaged index?): this run "
              "recomputes every document the index does not list and leaves those files as they are; `hf-readonce "
              "encode ... --repair` re-indexes the intact ones instead of recomputing them (`verify` names them).",
              file=sys.stderr, flush=True)

    def committed(running) -> None:  # what this process committed (not another encode writing the same store)
        args.committed = running.encoded

    try:
        stats = fill_store(adapter, store, doc_iter, store_dtype=store_dtype,
                           shard_size_bytes=int(args.shard_size_mb * 1024 * 1024),
                           rank=rank, num_processes=world, progress=main_process and not args.no_progress,
                           total=total, on_batch=committed, model_name=model_name,
                           group_by_length=args.group_by_length)
    except (ValueError, TypeError, ReadOnlyStoreError) as error:
        raise CommandError(str(error)) from None
    except OSError as error:  # e.g. disk full: committed shards are kept, nothing half-written is left
        if _store_raised(error, store.path):
            raise CommandError(f"cannot write to store {store.path}: {error}; committed documents are kept, re-run "
                               "to finish.") from None
        raise CommandError(f"cannot encode: {_one_line(error)}; committed documents are kept, re-run to "
                           "finish.") from None
    if state is not None:
        state.wait_for_everyone()
    prefix = f"[rank {rank}/{world}] " if world > 1 else ""
    rate = stats.encoded / stats.seconds if stats.seconds > 0 else 0.0
    print(f"{prefix}encoded {stats.encoded} document(s) ({stats.tokens} tokens) in {stats.seconds:.1f} s "
          f"({rate:.2f} docs/s); already stored {stats.already_stored}, duplicates {stats.duplicates}, "
          f"other processes {stats.other_rank}", flush=True)
    status = EXIT_OK
    if main_process:
        _report_bad_lines(problems, documents)
        if stats.rejected:
            print(f"hf-readonce: {documents}: set aside {len(stats.rejected)} document(s) that cannot be encoded:",
                  file=sys.stderr)
            for doc_id, reason in stats.rejected[:20]:
                print(f"  document {printable(doc_id)}: {reason}", file=sys.stderr)
            if len(stats.rejected) > 20:
                print(f"  ... and {len(stats.rejected) - 20} more", file=sys.stderr)
        if stats.truncated:
            print(f"hf-readonce encode: note: {stats.truncated} document(s) held more than the "
                  f"{adapter.max_document_length} tokens read per document and were cut to them "
                  "(`--max-document-length` reads more, up to the model's positions)", file=sys.stderr)
        if stats.rejected and not stats.encoded and not stats.already_stored and not stats.other_rank:
            print(f"hf-readonce encode: every document of {documents} was set aside: nothing to encode.",
                  file=sys.stderr)
            status = EXIT_PROBLEMS  # the input held nothing to work on, as an empty file
            if created:  # a store this call made holds nothing: leave nothing behind, as for an empty file (only
                _remove_empty_store(store_path, created[-1])  # while empty, under its lock: another job may use it)
                return status
        store.refresh()
        info = _store_info(store, orphans=False)
        print(f"store {store.path}: {info['documents']} document(s), {info['shards']} shard(s), "
              f"{_human_bytes(info['bytes_on_disk'])}", flush=True)
        from .store.shards import resolve_dtype

        stored_as = info["spaces"].get(adapter_space, {}).get("dtypes", [])
        wanted = str(resolve_dtype(store_dtype)).removeprefix("torch.")
        other = [d for d in stored_as if d != wanted]
        if stats.already_stored and other:
            print(f"hf-readonce encode: note: {stats.already_stored} document(s) were already stored as "
                  f"{', '.join(other)} and are kept as they are; "
                  f"--store-dtype {_storage_dtype_option(args.store_dtype)} applies "
                  "to newly encoded ones "
                  "(`hf-readonce prune --space KEY` and encoding again rewrites them)", file=sys.stderr)
        if (problems or stats.rejected) and args.strict:
            status = EXIT_PROBLEMS

        for space, hashes in sorted(dropped_by_space.items()):
            if space != adapter_space:  # another model's or setting's: this run cannot recompute them
                about = f" ({dropped_spaces[space].model_type or '?'}, {dropped_spaces[space].describe()})" \
                    if space in dropped_spaces else ""
                print(f"repair: {len(hashes)} document(s) dropped from space {space[:16]}{about}, which this model "
                      "does not write (another checkpoint, compute dtype or setting): run `encode --repair` with that "
                      "model to recompute them", file=sys.stderr)
                status = EXIT_PROBLEMS
        own = dropped_by_space.get(adapter_space, [])
        still_missing = store.missing(adapter.fingerprint(), adapter.settings(), own)
        if still_missing:
            print(f"repair: {len(still_missing)} dropped document(s) are not in {documents} and stay missing: "
                  + ", ".join(h[:16] for h in still_missing[:20]), file=sys.stderr)
            status = EXIT_PROBLEMS
    return status


# ---------------------------------------------------------------------------------------------------------- answer
def _count_paths(paths, root) -> str:
    """How many of `paths` (relative to `root`) are folders and how many files (a link counts as a file: moved as a
    link), e.g. "2 file(s)", "1 file(s) and 1 folder(s)"."""
    folders = sum(1 for rel in paths
                  if root is not None and os.path.isdir(os.path.join(root, rel))
                  and not os.path.islink(os.path.join(root, rel)))
    files = len(paths) - folders
    if folders and files:
        return f"{files} file(s) and {folders} folder(s)"
    return f"{folders} folder(s)" if folders else f"{files} file(s)"


def _missing_folders(path: Path) -> list[Path]:
    """The folders that do not exist yet among `path` and its parents, deepest first: what a run that makes `path`
    creates, and what it removes again (while empty) when it fails."""
    return [p for p in (path, *path.parents) if not p.exists()]


def _remove_empty_store(path: Path, top: Path) -> None:
    """Undo the creation of a store this run made (`answer` / `summarize --encode-missing` that failed, `encode` of a
    model that cannot be loaded or of documents all set aside): only when it holds no shard and no manifest, only
    the store's own skeleton files, and only the folders this run created (`path` up to `top`). The check and the removal run under the store's
    write lock, in a folder renamed away first ([`hf_readonce.store.maintenance.remove_empty_store`]), so a shard
    another process commits into the store meanwhile keeps it, and a process that had opened it and writes
    afterwards creates it anew. Nothing a user or another process stored is ever removed."""
    from .store.maintenance import remove_empty_store

    if not remove_empty_store(path) or path == top:
        return
    folder = path.parent
    while True:
        try:
            folder.rmdir()
        except OSError:
            break
        if folder == top:
            break
        folder = folder.parent


def _undoing_an_empty_store(run):
    """`run(args)` (a command with `--encode-missing` and `--output`), removing the store it created if it fails
    before storing anything ([`_remove_empty_store`]), and the folders of `--output` it created if they are still
    empty (`_output_file` makes them before any work, so that a path that cannot be written fails first)."""

    def command(args) -> int:
        import contextlib

        store_path = Path(args.store).expanduser().absolute()
        created = _missing_folders(store_path)  # what this run would create
        output_folder = Path(args.output).absolute().parent  # as `_output_file` makes it (no `~` expansion)
        folders = _missing_folders(output_folder)
        try:
            return run(args)
        except BaseException:
            if args.encode_missing and created:
                _remove_empty_store(store_path, created[-1])
            for folder in folders:  # deepest first; a folder that holds anything stays
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise

    return command


def cmd_answer(args) -> int:
    """`hf-readonce answer`: answer `args.questions` from the representations stored in `args.store` (the family's
    store-reading task), computing the missing ones first with `--encode-missing`, and write the predictions to
    `args.output`. Returns the exit status; raises [`CommandError`] for bad input. A store this run created and left
    empty is removed ([`_undoing_an_empty_store`])."""
    return _undoing_an_empty_store(_answer)(args)


def _write_predictions(output: Path, examples, predictions, key: str = "prediction_text") -> None:
    """Write `id, <key>` lines (`key`: `prediction_text` for answers, `summary_text` for summaries) atomically
    (temporary file, rename).

    Raises:
        CommandError: one line naming the output and the OS error (disk full, a directory, no permission); the
            temporary file is removed.
    """
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            for example in examples:
                handle.write(json.dumps({"id": example["id"], key: predictions[example["id"]]},
                                        ensure_ascii=False) + "\n")
        os.replace(tmp, output)
    except OSError as error:
        raise CommandError(f"cannot write {'summaries' if key == 'summary_text' else 'predictions'} to --output "
                           f"{output}: {error.strerror or error}.") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def _output_file(path: str, reads: tuple[str, Path], store: str | None = None) -> Path:
    """`--output` as a `Path` whose folder exists (created if needed), never the input file `reads` names
    (`(option, path)`) nor a path inside the `store` folder: the command would replace what it reads, or a store's
    own files, with its output.

    Raises:
        CommandError: the path is a directory, the input file or inside the store, or its folder cannot be created.
    """
    output = Path(path)
    if output.is_dir():
        raise CommandError(f"--output {output} is a directory; give the path of a file to write.")
    option, read = reads
    if output.exists() and os.path.samefile(output, read):  # also through a link
        raise CommandError(f"--output {output} is the {option} file: it would be replaced by the output; give "
                           "another path.")
    if store is not None and output.resolve().is_relative_to(Path(store).resolve()):  # links resolved
        raise CommandError(f"--output {output} is inside --store {store}: the output would overwrite or add to the "
                           "store's own files; give a path outside it.")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CommandError(f"cannot create the folder of --output {output}: {error.strerror or error}.") from None
    return output


def _refuse_duplicate_ids(path: Path, duplicates: list, what: str, keyed: str) -> None:
    """Stop naming the ids used twice in `path` (`(id, first line, second line)` each, the first 10 listed): one output
    per id, so a second row with the same id would overwrite the first's.

    Raises:
        CommandError: when `duplicates` is not empty.
    """
    if not duplicates:
        return
    from .store.keys import printable

    listed = _listed([f"{printable(repr(i))} on lines {a} and {b}" for i, a, b in duplicates], 10, "; ")
    raise CommandError(f"{path}: duplicate {what} id(s): {listed}. {keyed} are keyed by id (compared as "
                       f"strings, so 1 and \"1\" are the same id): give each {what} its own id.")


def _open_store_to_read(args, command: str, what: str):
    """`--store`, read-only unless `--encode-missing` (then created if needed and checked writable before any model
    work).

    Raises:
        CommandError: no store (without `--encode-missing`), or one `--encode-missing` cannot write.
    """
    store = _open_store(args.store, readonly=not args.encode_missing, create=args.encode_missing, command=command)
    if args.encode_missing:
        from .store import ReadOnlyStoreError

        try:
            store.check_writable()
        except ReadOnlyStoreError as error:
            raise CommandError(f"--encode-missing writes the missing {what} into --store {args.store}, which cannot "
                               f"be written ({error}); encode them with a writable copy of the store, or {command} "
                               "without --encode-missing.") from None
    return store


def _entries_of(store, texts) -> tuple[set, int]:
    """`(hashes, count)`: the content hashes of `texts`, and how many entries of `store` (its index re-read; any
    space) hold one of them. Counted before and after `--encode-missing`, the difference is how many it encoded."""
    from .store import content_hash

    hashes = {content_hash(text) for text in texts}
    return hashes, _count_entries(store, hashes)


def _count_entries(store, hashes: set) -> int:
    store.refresh()
    return sum(1 for entry in store.entries() if entry.content_hash in hashes)


def _encoded_first(args, store, counted: tuple[set, int] | None, what: str) -> str:
    """` (--encode-missing encoded N of them first)` for the summary line of `answer` / `summarize`, from the count
    [`_entries_of`] made before; `""` without `--encode-missing`."""
    if counted is None:
        return ""
    encoded = _count_entries(store, counted[0]) - counted[1]
    return f" (--encode-missing encoded {encoded} of these {what} first)" if encoded else \
        " (none missing: --encode-missing encoded nothing)"


def _error_file(error: OSError) -> str | None:
    """The file an `OSError` names (`filename`, as `open` and `os.replace` set it), as a `str`; `None` without one
    (a failed `write` on a full disk, an error of a library that names no file)."""
    name = error.filename
    if isinstance(name, (str, bytes, os.PathLike)) and os.fspath(name):
        return os.fsdecode(name)
    return None


def _store_raised(error: OSError, store_path) -> bool:
    """Whether `error` comes from the files of the store at `store_path`: the file it names is in the store's folder
    (compared as given and with links resolved); without a file name, the innermost frame of this package it passed
    through is the store's code (`hf_readonce.store`), as for a `write` that fills the disk. An error of a model's
    forward, a tokenizer file or the Hugging Face cache is not the store's."""
    name = _error_file(error)
    if name is not None:
        file, top = Path(name).expanduser(), Path(store_path).expanduser()
        return (file.absolute().is_relative_to(top.absolute())
                or Path(os.path.realpath(file)).is_relative_to(os.path.realpath(top)))
    import traceback

    package = Path(__file__).resolve().parent
    innermost = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        code_file = Path(frame.f_code.co_filename).resolve()
        if code_file.is_relative_to(package):
            innermost = code_file
    return innermost is not None and innermost.is_relative_to(package / "store")


def _store_os_error(args, store, error: OSError, what: str, doing: str) -> CommandError:
    """The one line of `answer` / `summarize` when an `OSError` stops them. One of the store's own files
    ([`_store_raised`]: a full disk while `--encode-missing` writes, an I/O error reading a shard) is said as `encode`
    says it: the store and the cause; any other (a model's or tokenizer's file, the Hugging Face cache) names its own
    file and not the store, e.g. `cannot answer the questions: No such file or directory: /cache/tokenizer.json`
    (`doing`: `"answer the questions"`). With `--encode-missing`, either says that what it committed before is
    kept."""
    kept = (f"; the {what} --encode-missing committed before it are kept, so a re-run encodes only the rest"
            if args.encode_missing else "")
    if _store_raised(error, store.path):
        return CommandError(f"store {store.path}: {_one_line(error)}{kept}.")
    return CommandError(f"cannot {doing}: {_one_line(error)}{kept}.")


def _answer_and_write(args, answer, model, tokenizer, store, examples, options: dict, output: Path,
                      **load_kwargs) -> tuple[dict, float]:
    """Run a family's store-reading `answer(model, tokenizer, store, examples, **options)` for `answer` (extractive
    and generative alike), write its predictions to `output` and return `(predictions, seconds)`.

    Every failure is one [`CommandError`] line: a representation mismatch with the compute-dtype hint
    ([`_with_compute_dtype_hint`], given `load_kwargs` to reload the model with), a missing representation or a
    `ValueError` as its message, an `OSError` (of the store, e.g. a full disk while `--encode-missing` wrote, or of
    another file, e.g. the model's) as [`_store_os_error`] says it. `args.output_written` is set once the file is in
    place.
    """
    from .store import MissingRepresentationError, RepresentationMismatchError

    start = time.perf_counter()
    try:
        predictions = answer(model, tokenizer, store, examples, **options)
    except RepresentationMismatchError as error:  # e.g. the same weights computed in another dtype: named
        raise CommandError(_with_compute_dtype_hint(str(error), model, store, args.model, _device(args.device),
                                                    **load_kwargs)) from None
    except (MissingRepresentationError, ValueError) as error:
        raise CommandError(str(error)) from None
    except OSError as error:  # e.g. the disk filled up while --encode-missing wrote; or a model's file
        raise _store_os_error(args, store, error, "passages", "answer the questions") from None
    seconds = time.perf_counter() - start
    _write_predictions(output, examples, predictions)
    args.output_written = True  # said if the command is stopped from here on
    return predictions, seconds


def _note_cut(command: str, cut: int, total: int, what: str, length, outputs: str) -> None:
    """The note of `answer` / `summarize` on stderr: `cut` of the `total` distinct `what`s (passage, document) held
    more than the `length` tokens the stored representations read, so `outputs` (the answers, their summaries) come
    from their first tokens only."""
    print(f"hf-readonce {command}: note: {cut} of the {total} distinct {what}(s) held more than the {length} tokens "
          f"read per {what}: they were cut to them when encoded, and {outputs} come from those tokens only "
          "(`--max-document-length`, with `encode` or `--encode-missing`, reads more where the model's positions "
          "allow)", file=sys.stderr)


def _note_empty_summaries(empty: int, total: int) -> None:
    """The note of `summarize` on stderr, in [`_note_cut`]'s words: `empty` of the `total` summaries written are empty
    (the model generated nothing but special tokens or whitespace, as an undertrained checkpoint does), so the output
    holds `""` for them; nothing is said when none is."""
    if not empty:
        return
    print(f"hf-readonce summarize: note: {empty} of the {total} summaries are empty: the model generated no text "
          "for their documents (only special tokens or whitespace, as an undertrained checkpoint does), and they are "
          "written as \"\"", file=sys.stderr)


def _note_questions_cut(cut: int, total: int, length, more: str) -> None:
    """The note of `answer` on stderr, in [`_note_cut`]'s words: `cut` of the `total` questions held more than the
    `length` tokens read per question, so their answers come from their first tokens only; `more` says what reads
    more (an option, or that the model reads no more)."""
    print(f"hf-readonce answer: note: {cut} of the {total} question(s) held more than the {length} tokens read per "
          f"question: they were cut to them, and the answers come from those tokens only ({more})", file=sys.stderr)


def _answer(args) -> int:
    from .tasks.jsonl import BadLine, field_problem, iter_jsonl
    from .tasks.question_answering import passages_of, recorded_answer_settings

    _check_storage_dtype_use(args)
    questions = _input_file(args.questions, "--questions")
    output = _output_file(args.output, ("--questions", questions), store=args.store)
    args.model_as_given = args.model  # (what --encode-missing records with the spaces it writes)
    args.model = _resolve_model(args.model)
    spec = _family_of(args.model)
    generative = spec is not None and spec.answer == "generative"
    check_example = None
    if spec is not None and spec.answer is not None:
        from .representations.registry import answer_function

        try:  # a family's own rule for a row (e.g. one document per question), to set bad lines aside
            check_example = getattr(answer_function(spec), "check_example", None)
        except ValueError as error:
            raise CommandError(str(error)) from None
    if generative:
        _check_generative_answer_options(args)
    elif getattr(args, "recompute_ratio", None) is not None:
        raise CommandError(f"--recompute-ratio applies to {_generative_model_types('recompute_ratio')} models only.")
    ratio = getattr(args, "recompute_ratio", None)
    if ratio is not None and not (math.isfinite(ratio) and 0 <= ratio <= 1):
        raise CommandError(f"--recompute-ratio must be a number in [0, 1] (the fraction of passage tokens recomputed "
                           f"per layer), got {ratio}.")
    _finite(getattr(args, "null_score_diff_threshold", None), "--null-score-diff-threshold")
    problems, examples, first_line, duplicates = [], [], {}, []
    for number, row in _input_rows(iter_jsonl(questions, problems), questions, "--questions"):
        # a generative row has one passage (`context`) or several (`contexts`, or a list in `context`)
        keys = ("question",) if generative else ("question", "context")
        bad = [problem for key in keys if (problem := field_problem(row, key)) is not None]
        if generative:
            try:
                passages_of(row)
            except ValueError:
                bad.append("missing or empty context/contexts")
        if bad:
            problems.append(BadLine(number, "; ".join(bad)))
            continue
        if check_example is not None:
            try:
                check_example(row)
            except ValueError as error:
                problems.append(BadLine(number, str(error)))
                continue
        row.setdefault("id", f"line {number}")
        row["id"] = str(row["id"])
        if row["id"] in first_line:
            duplicates.append((row["id"], first_line[row["id"]], number))
            continue
        first_line[row["id"]] = number
        examples.append(row)
    _report_bad_lines(problems, questions)
    _refuse_duplicate_ids(questions, duplicates, "question", "Predictions")
    if not examples:
        if not problems or all("JSON" in p.reason or "UTF-8" in p.reason for p in problems):
            raise CommandError(_no_object_line(questions, "questions", problems), status=EXIT_PROBLEMS)
        with _reading_input(questions, "--questions"):
            first = next((row for _, row in iter_jsonl(questions, [])), {})
        needs = "'question' and 'context' (or 'contexts', a list of passages)" if generative else \
            "'question' and 'context'"
        raise CommandError(f"{questions}: no usable question (each line needs {needs}; the first "
                           f"valid line has the fields {', '.join(map(repr, first)) or 'none'}).",
                           status=EXIT_PROBLEMS)
    store = _open_store_to_read(args, "answer", "passages")
    if generative:
        return _answer_generative(args, store, examples, output)
    model, tokenizer = load_qa_model(args.model, args.num_decomposed_layers, _device(args.device),
                                     compute_dtype=args.compute_dtype)
    _named_as_encode_names_it(model, args.model_as_given, args.store)
    config = model.config
    from .representations import family_of
    from .representations.registry import answer_function

    try:
        answer = answer_function(family_of(config.model_type))
    except ValueError as error:
        raise CommandError(str(error)) from None
    accepted = inspect.signature(answer).parameters
    # options only some extractive families take (a window, a no-answer decision): refused by name elsewhere
    # the no-answer decision (and the family's settings, below): passed when the family's answering function takes
    # them, refused by name otherwise
    foreign = ["--" + name.replace("_", "-") for name in ("allow_no_answer", "null_score_diff_threshold")
               if getattr(args, name, None) is not None and name not in accepted]
    if foreign:
        raise CommandError(f"{_do_not_apply(foreign)} to {config.model_type} models.")
    family_options = _family_setting_options(args, answer, config.model_type)
    # Defaults: what the checkpoint was trained and evaluated with (recorded in its config), else the old defaults.
    recorded = recorded_answer_settings(config, args.max_question_length or None, args.allow_no_answer,
                                        args.null_score_diff_threshold)
    max_question_length = recorded["max_question_length"]
    positions = getattr(config, "max_position_embeddings", None)
    if args.max_question_length is not None and positions is not None and max_question_length > positions:
        raise CommandError(f"--max-question-length {max_question_length} does not fit the model's {positions} "
                           "positions (a question is a few dozen tokens; without the option the checkpoint's "
                           "default is used).")
    options = {"max_question_length": max_question_length, "batch_size": args.batch_size,
               "n_best_size": args.n_best_size or 20, "max_answer_length": args.max_answer_length,
               "encode_missing": args.encode_missing, "progress": not args.no_progress}
    options.update(_storage_dtype_options(args, accepted, config.model_type))
    if "allow_no_answer" in accepted:
        options.update(allow_no_answer=recorded["allow_no_answer"],
                       null_score_diff_threshold=recorded["null_score_diff_threshold"])
    options.update(family_options)
    used: dict = {}
    if "settings_used" in accepted:
        options["settings_used"] = used
    counts: dict = {}
    if "counts" in accepted:  # families that count the questions cut to max_question_length
        options["counts"] = counts
    counted = _entries_of(store, {e["context"] for e in examples}) if args.encode_missing else None
    predictions, seconds = _answer_and_write(args, answer, model, tokenizer, store, examples, options, output,
                                             num_decomposed_layers=args.num_decomposed_layers)
    passages = len({e["context"] for e in examples})
    print(f"answered {len(examples)} question(s) over {passages} stored passage(s)"
          f"{_encoded_first(args, store, counted, 'passages')} in {seconds:.2f} s "
          f"({len(examples) / max(seconds, 1e-9):.1f} questions/s); predictions written to {output}", flush=True)
    from .dtypes import dtype_name

    split = getattr(config, "num_decomposed_layers", None)
    decision = (f", allow_no_answer {options['allow_no_answer']}"
                + (f", null_score_diff_threshold {options['null_score_diff_threshold']:.3f}"
                   if options["allow_no_answer"] else "")) if "allow_no_answer" in options else ""
    read = ", ".join(f"{name} {value}" for name, value in used.items())
    print("settings: " + ("" if split is None else f"num_decomposed_layers {split}, ")
          + f"max_question_length {max_question_length}{decision}; stored states"
          + (f" of {read}" if read else "") + f", computed in {dtype_name(model.dtype)}", flush=True)
    if counts.get("questions_cut"):  # the answers (and EM/F1) come from the first tokens of these questions
        _note_questions_cut(counts["questions_cut"], counts["questions"], max_question_length,
                            "`--max-question-length` reads more, up to the model's positions")
    scored = _with_gold_answers(examples)
    if scored is not None:
        from .tasks.question_answering import format_scores, score_qa, trivial_baselines

        print(format_scores("model", score_qa(predictions, scored)), flush=True)
        for name, scores in trivial_baselines(scored).items():
            print(format_scores(f"baseline: {name.replace('_', '-')}", scores), flush=True)
    return EXIT_OK


def _with_gold_answers(examples: list[dict]) -> list[dict] | None:
    """The questions with their gold answers in SQuAD's shape (`"answers": {"text": [...], "answer_start": [...]}`)
    when every question carries gold answers, `None` (no EM/F1 printed) otherwise. A plain list of strings is read as
    the answer texts (`[]`: no answer). When some questions carry `answers` but not all in a readable shape, a note on
    stderr says why no scores follow (a silent skip looked like a missing feature)."""
    from .store.keys import printable
    from .tasks.question_answering import answer_problem

    readable, first_problem = [], None
    for example in examples:
        answers = example.get("answers")
        problem = answer_problem(example, labels=False) if isinstance(answers, dict) else None
        if isinstance(answers, dict) and "text" in answers and problem is None:
            readable.append(example)
        elif isinstance(answers, list) and all(isinstance(text, str) for text in answers):
            readable.append({**example, "answers": {"text": list(answers), "answer_start": [0] * len(answers)}})
        elif problem is not None and first_problem is None:
            first_problem = f" (question {printable(str(example.get('id', '?')))}: {problem})"
    if readable and len(readable) == len(examples):
        return readable
    carrying = sum("answers" in example for example in examples)
    if carrying:
        print(f"note: no EM/F1: {len(examples) - len(readable)} of {len(examples)} question(s) carry no gold answers "
              'in a readable shape ("answers": {"text": [...]} as in SQuAD, or a list of strings)'
              f"{first_problem or ''}.", file=sys.stderr)
    return None


def _with_compute_dtype_hint(message: str, model, store, name: str, device, **load_kwargs) -> str:
    """The reason of a representation mismatch: when the store holds this checkpoint's weights computed in another
    dtype (`hf_readonce.dtypes.compute_dtype_hint`, the checkpoint `name` reloaded in each dtype as `--compute-dtype`
    would load it, with `load_qa_model`'s other arguments `load_kwargs`), that diagnosis alone (the general `message`
    lists every possible cause and would come first); else `message` as it is."""
    from .dtypes import compute_dtype_hint, dtype_name

    def load(dtype):
        return load_qa_model(name, device=device, compute_dtype=dtype_name(dtype), notes=False, **load_kwargs)[0]

    found = compute_dtype_hint(model, {space.fingerprint for space in store.spaces()}, load=load)
    if found is None:
        return message
    return (f"store {store.path} holds this checkpoint's states computed in {dtype_name(found)}; this run computes "
            f"in {dtype_name(model.dtype)}: pass --compute-dtype {dtype_name(found)} to read them, or encode again "
            "with this compute dtype.")


def _check_generative_answer_options(args) -> None:
    """Refuse the extractive-only options of `answer` for a generative family (naming them)."""
    given = [option for option, name in (("--num-decomposed-layers", "num_decomposed_layers"),
                                         ("--max-question-length", "max_question_length"),
                                         ("--n-best-size", "n_best_size"),
                                         ("--allow-no-answer", "allow_no_answer"),
                                         ("--null-score-diff-threshold", "null_score_diff_threshold"))
             if getattr(args, name, None) is not None]
    if given:
        raise CommandError(f"{_do_not_apply(given)} to generative models ({_generative_model_types()}), "
                           "which generate answers; their options are --max-answer-length (new tokens), --batch-size "
                           "and the family's own (`hf-readonce info`).")


def _family_setting_options(args, function, model_type: str) -> dict:
    """The family's representation settings given on the command line, as `function(...)` (an answering function,
    `summarize_from_store`) takes them: by name, or all together as `settings` when its signature has that
    parameter.

    Raises:
        CommandError: a setting given that the function does not take (naming it and the family's own options).
    """
    from .representations import get_adapter_class

    accepted = inspect.signature(function).parameters
    given = {name: getattr(args, name) for name in _setting_names() if getattr(args, name, None) is not None}
    if "settings" in accepted:
        own = get_adapter_class(model_type).cli_settings
        foreign = [name for name in given if name not in own]
        packed = {"settings": {name: value for name, value in given.items() if name in own}}
    else:
        foreign = [name for name in given if name not in accepted]
        packed = {name: value for name, value in given.items() if name in accepted}
    if foreign:
        raise _foreign_settings(foreign, get_adapter_class(model_type))
    return packed


def _answer_generative(args, store, examples, output) -> int:
    """`answer` for generative families: the answering function the family's spec declares generates each row's
    answer from its passages' stored representations (composed KV caches of a causal LM, `hf_readonce.tasks.
    document_cache_qa`; a question read with a document's stored vectors, `hf_readonce.tasks.generative_qa_store`)."""
    from .representations import family_of
    from .representations.registry import answer_function
    from .tasks.question_answering import passages_of

    model, tokenizer = load_qa_model(args.model, None, _device(args.device), allow_readonce=True,
                                     compute_dtype=args.compute_dtype)
    _named_as_encode_names_it(model, args.model_as_given, args.store)
    positions = getattr(model.config, "max_position_embeddings", None)
    if positions is not None and args.max_answer_length >= positions:
        raise CommandError(f"--max-answer-length {args.max_answer_length} new tokens do not fit the model's "
                           f"{positions} positions; an answer needs a few dozen tokens (default 30).")
    try:
        answer = answer_function(family_of(model.config.model_type))
    except ValueError as error:
        raise CommandError(str(error)) from None
    accepted = inspect.signature(answer).parameters
    if args.recompute_ratio is not None and "recompute_ratio" not in accepted:
        raise CommandError(f"--recompute-ratio does not apply to {model.config.model_type} models; it applies to "
                           f"{_generative_model_types('recompute_ratio')}.")
    timings, used = {}, {}
    options = {"batch_size": args.batch_size, "max_new_tokens": args.max_answer_length,
               "encode_missing": args.encode_missing, "progress": not args.no_progress, "timings": timings,
               **_family_setting_options(args, answer, model.config.model_type)}
    options.update(_storage_dtype_options(args, accepted, model.config.model_type))
    if "recompute_ratio" in accepted:
        options["recompute_ratio"] = args.recompute_ratio or 0.0
    if "settings_used" in accepted:
        options["settings_used"] = used
    counts: dict = {}
    if "counts" in accepted:  # families that cut a passage to max_document_length tokens (or a question)
        options["counts"] = counts
    counted = _entries_of(store, {p for e in examples for p in passages_of(e)}) if args.encode_missing else None
    predictions, seconds = _answer_and_write(args, answer, model, tokenizer, store, examples, options, output,
                                             allow_readonce=True)
    passages = len({p for e in examples for p in passages_of(e)})
    print(f"answered {len(examples)} question(s) over {passages} stored passage(s)"
          f"{_encoded_first(args, store, counted, 'passages')} in {seconds:.2f} s "
          f"({len(examples) / max(seconds, 1e-9):.1f} questions/s; reading the store "
          f"{timings.get('read_seconds', 0.0):.2f} s, generating {timings.get('generate_seconds', 0.0):.2f} s); "
          f"predictions written to {output}", flush=True)
    print(f"settings: max_new_tokens {args.max_answer_length}"
          + "".join(f", {name} {value}" for name, value in used.items()), flush=True)
    if counts.get("passages_cut"):  # the answers (and EM/F1) come from the first tokens of these passages
        _note_cut("answer", counts["passages_cut"], counts["passages"], "passage", used.get("max_document_length"),
                  "the answers")
    if counts.get("questions_cut"):  # a generative family reads a fixed number of question tokens
        recorded = getattr(model.config, "max_question_length", None) is not None
        _note_questions_cut(counts["questions_cut"], counts["questions"], used.get("max_question_length"),
                            "the checkpoint was trained reading no more of a question, its max_question_length"
                            if recorded else f"{model.config.model_type} models read no more of a question")
    scored = _with_gold_answers(examples)
    if scored is not None:
        from .tasks.question_answering import format_scores, score_qa, trivial_baselines

        print(format_scores("model", score_qa(predictions, scored)), flush=True)
        # the baselines read one passage: the row's `context` when it is a str, else its first passage
        first = [{**e, "context": e["context"] if isinstance(e.get("context"), str) else passages_of(e)[0]}
                 for e in scored]
        for name, scores in trivial_baselines(first).items():
            print(format_scores(f"baseline: {name.replace('_', '-')}", scores), flush=True)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------------------- summarize
def _summarizing_model_types() -> str:
    from .tasks.summarization_store import summarizing_model_types

    return ", ".join(summarizing_model_types())


def _read_summarize_rows(path: Path, text_field: str, id_field: str) -> list[dict]:
    """The rows of `summarize`'s `--documents`: `{"id", "document", "row", "line"}` (`row`: the whole JSON object,
    `line`: its line number, from 1); bad lines are reported on stderr and set aside.

    Raises:
        CommandError: duplicate ids (status 2); the file failing to be read, naming `--documents` and the path
            ([`_reading_input`]). (That the input holds a usable document, and a given `id_field` on some line,
            the caller checks first with [`_input_fields`].)
    """
    from .tasks.jsonl import BadLine, field_problem, iter_jsonl

    problems, rows, first_line, duplicates = [], [], {}, []
    for number, row in _input_rows(iter_jsonl(path, problems), path, "--documents"):
        problem = field_problem(row, text_field)
        if problem is not None:
            problems.append(BadLine(number, problem))
            continue
        text = row[text_field]
        doc_id = str(row[id_field]) if row.get(id_field) is not None else f"line {number}"
        if doc_id in first_line:
            duplicates.append((doc_id, first_line[doc_id], number))
            continue
        first_line[doc_id] = number
        rows.append({"id": doc_id, "document": text, "row": row, "line": number})
    _report_bad_lines(problems, path)
    _refuse_duplicate_ids(path, duplicates, "document", "Summaries")
    return rows


def _document_name(row: dict, id_field: str) -> str:
    """How `summarize` names a row of `--documents` in its errors: by its id and line, as the user wrote them."""
    if row["row"].get(id_field) is None:
        return f"the document on line {row['line']}"
    return f"the document of {id_field} {row['id']!r} (line {row['line']})"


def _with_references(rows: list[dict], summary_field: str, named: bool = False) -> list[str] | None:
    """The reference summaries when every row carries one (a non-blank str in `summary_field`), else None (no ROUGE
    printed; a note on stderr when only some rows carry one, or when `--summary-field` was `named` and none does)."""
    references = [row["row"].get(summary_field) for row in rows]
    readable = [r for r in references if isinstance(r, str) and r.strip()]
    if readable and len(readable) == len(rows):
        return references
    if named and not any(summary_field in row["row"] for row in rows):
        print(f"note: no ROUGE: no document has --summary-field {summary_field!r}.", file=sys.stderr)
    elif any(summary_field in row["row"] for row in rows):
        print(f"note: no ROUGE: {len(rows) - len(readable)} of {len(rows)} document(s) carry no reference summary "
              f"(a non-empty string in {summary_field!r}).", file=sys.stderr)
    return None


def _summarize(args) -> int:
    from .representations import get_adapter_class
    from .store import MissingRepresentationError, RepresentationMismatchError
    from .tasks.summarization_store import summarize_from_store

    _check_storage_dtype_use(args)
    documents = _input_file(args.documents, "--documents")
    output = _output_file(args.output, ("--documents", documents), store=args.store)
    model_as_given = args.model  # (what --encode-missing records with the spaces it writes)
    args.model = _resolve_model(args.model)
    spec = _family_of(args.model)
    if spec is not None and not spec.summarize:
        raise CommandError(f"model {args.model!r} ({', '.join(spec.model_types)}) does not generate summaries from "
                           f"stored representations; `summarize` takes {_summarizing_model_types()} checkpoints.")
    # the input holds documents, and a given --id-field is on some line: one read of its first lines
    text_field, id_field = _input_fields(documents, args.text_field, args.id_field)
    rows = _read_summarize_rows(documents, text_field, id_field)
    store = _open_store_to_read(args, "summarize", "documents")
    device = _device(args.device)
    model, tokenizer = load_qa_model(args.model, None, device, allow_readonce=True, compute_dtype=args.compute_dtype)
    _named_as_encode_names_it(model, model_as_given, args.store)
    adapter_class = get_adapter_class(model.config.model_type)
    family_options = _family_setting_options(args, summarize_from_store, model.config.model_type)
    if args.prompt is not None and getattr(adapter_class, "summary_prompt", None) is None:
        raise CommandError(f"--prompt does not apply to {adapter_class.model_type} models: their summaries are "
                           "generated from the document alone.")
    generate = {"max_new_tokens": args.max_new_tokens, "num_beams": args.num_beams}
    used: dict = {}
    counts: dict = {}
    counted = _entries_of(store, {row["document"] for row in rows}) if args.encode_missing else None
    start = time.perf_counter()
    try:
        summaries = summarize_from_store(model, tokenizer, store, [row["document"] for row in rows],
                                         prompt=args.prompt, batch_size=args.batch_size,
                                         encode_missing=args.encode_missing,
                                         store_dtype=args.store_dtype or "float16",
                                         progress=not args.no_progress, settings_used=used, counts=counts,
                                         document_names=[_document_name(row, id_field) for row in rows],
                                         **family_options, **generate)
    except RepresentationMismatchError as error:
        raise CommandError(_with_compute_dtype_hint(str(error), model, store, args.model, device,
                                                    allow_readonce=True)) from None
    except (MissingRepresentationError, ValueError, TypeError) as error:
        message = str(error)
        options = {name: f"--{name.replace('_', '-')}" for name in ("max_new_tokens", "prompt")}
        options.update({name: option for name, (option, _, _) in adapter_class.cli_settings.items()})
        for name, option in options.items():  # summarize_from_store's and the adapter's names, said as the options
            message = message.replace(f"`{name}`", option)
        raise CommandError(message) from None
    except OSError as error:  # e.g. the disk filled up while --encode-missing wrote
        raise _store_os_error(args, store, error, "documents", "summarize the documents") from None
    seconds = time.perf_counter() - start
    _write_predictions(output, rows, {row["id"]: text for row, text in zip(rows, summaries)}, key="summary_text")
    args.output_written = True
    distinct = len({row["document"] for row in rows})
    print(f"summarized {len(rows)} document(s) ({distinct} distinct) from stored representations"
          f"{_encoded_first(args, store, counted, 'documents')} in {seconds:.2f} s "
          f"({len(rows) / max(seconds, 1e-9):.2f} documents/s); summaries written to {output}", flush=True)
    from .dtypes import dtype_name

    shown = ", ".join(f"{name} {value}" for name, value in used.items())
    prompt = args.prompt if args.prompt is not None else getattr(adapter_class, "summary_prompt", None)
    print(f"settings: max_new_tokens {args.max_new_tokens}, num_beams {args.num_beams}"
          + (f", prompt {prompt!r}" if prompt is not None else "")
          + f"; representations of {shown or 'the default settings'}, computed in {dtype_name(model.dtype)}",
          flush=True)
    if counts.get("documents_cut"):  # the summaries (and ROUGE) come from the first tokens of these documents
        _note_cut("summarize", counts["documents_cut"], counts["documents"], "document",
                  used.get("max_document_length"), "their summaries")
    _note_empty_summaries(sum(not text.strip() for text in summaries), len(summaries))
    references = _with_references(rows, args.summary_field or "summary", named=args.summary_field is not None)
    if references is not None:
        from .tasks.summarization import format_rouge, lead_baselines, rouge_scores

        texts = [row["document"] for row in rows]
        print(format_rouge("model", rouge_scores(summaries, references)), flush=True)
        for name, scores in lead_baselines(texts, references).items():
            print(format_rouge(f"baseline: {name.replace('_', '-')}", scores), flush=True)
    return EXIT_OK


def cmd_summarize(args) -> int:
    """`hf-readonce summarize`: summarize `args.documents` from their stored representations (with
    `--encode-missing`, computing the missing ones first) and write the summaries to `args.output`. Returns the exit
    status; raises [`CommandError`] for bad input. A store this run created and left empty is removed."""
    return _undoing_an_empty_store(_summarize)(args)


# ---------------------------------------------------------------------------------------------------------- info/verify
def _families_info() -> list[dict]:
    """What `hf-readonce info` (no `--store`) lists: per registered family, its model types, the checkpoint types it
    loads, Auto classes, pipelines and what the commands do with it."""
    from . import register_models
    from .representations import registered_families

    register_models()
    rows = []
    for spec in registered_families().values():
        adapter = spec.adapter
        rows.append({
            "family": spec.name, "model_types": list(spec.model_types),
            "checkpoint_model_types": list(spec.checkpoint_model_types),
            "auto_models": {head: [cls.__name__ for cls in classes] for head, classes in spec.auto_models.items()},
            "pipelines": {task: cls.__name__ for task, cls in spec.pipelines.items()},
            "encode": adapter is not None, "answer": spec.answer, "summarize": spec.summarize,
            "verify_recompute": adapter is not None,
            "representation": getattr(adapter, "representation", None),
            "encode_options": {option: {"default": default, "help": text}
                               for option, default, text in (adapter.cli_settings.values() if adapter else ())},
            "answer_options": _answer_function_options(spec),
        })
    return rows


# `answer` options that only some families' answering functions take: the option and the parameter it fills
_ANSWER_FUNCTION_OPTIONS = {"--recompute-ratio": "recompute_ratio"}


def _answer_function_options(spec) -> list[str]:
    """The options of [`_ANSWER_FUNCTION_OPTIONS`] that the family's answering function takes (none without one)."""
    from .representations.registry import answer_function

    if not spec.answer:
        return []
    parameters = inspect.signature(answer_function(spec)).parameters
    return [option for option, parameter in _ANSWER_FUNCTION_OPTIONS.items() if parameter in parameters]


# the devices whose `--compute-dtype auto` may differ (`hf_readonce.dtypes`): where `encode` computes decides its
# dtype, which most families' keys hold (in the fingerprint or the settings)
_KEY_DEVICES = (("cpu", "encode on a CPU"), ("cuda", "encode on CUDA or another accelerator"))
# the `info` arguments read with or without MODEL; every other one (the compute dtype, k, the families' settings)
# is read only with MODEL, and given when its value is not the one it has when not given (None; "auto" for these)
_INFO_ARGUMENTS = ("command", "func", "model", "store", "json", "no_progress")
_INFO_MODEL_UNSET = {"compute_dtype": "auto"}


def _short(value) -> str:
    """A setting's value in a line: JSON, a long string (a tokenizer's fingerprint) cut to its first 16 characters."""
    if isinstance(value, str) and len(value) > 24:
        return json.dumps(value[:16] + "...")
    return json.dumps(value)


def _option_words(option: str, value) -> list[str]:
    """The command-line words that give a setting `value` through `option` (`--no-X` for a false boolean)."""
    if isinstance(value, bool):
        return [option if value else "--no-" + option.removeprefix("--")]
    return [option, str(value)]


@contextlib.contextmanager
def _loading_quietly():
    """A block in which loading a checkpoint prints nothing: transformers' log below ERROR (a load report, notes on
    the config or the generation config) and Python warnings are silenced, and both are put back as they were on
    leaving it. Errors still raise. For `info MODEL`, a report: only its own lines are printed, on stdout."""
    from transformers.utils import logging as hf_logging

    from . import register_models

    register_models()  # first, outside the silence: a family of another package that fails to load is warned about
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def _model_keys(args, name: str) -> tuple[dict, list[dict]]:
    """The store keys `encode` would write `name`'s representations under, with `args`' options: one per compute
    dtype that `--compute-dtype` gives on a CPU and on CUDA (one when both are the same). The model is loaded as
    `encode` loads it ([`load_qa_model`]), on the CPU in the compute dtype of each device (a key depends on the
    weights' values and dtype, not on where they are), and keyed as `encode` keys what it writes: the fingerprint and
    settings of the adapter it builds ([`_encode_settings`], [`_encode_adapter`]). No document is read. The loading
    prints nothing ([`_loading_quietly`], and without [`load_qa_model`]'s notes, which are about answering with the
    model): `info` prints only its report (`about` says what the checkpoint is read as).

    Args:
        args: the parsed `info` arguments (`model` as typed, `compute_dtype`, `num_decomposed_layers`, the
            families' settings).
        name (`str`): the checkpoint folder or Hub id MODEL names ([`_resolve_model`]).

    Returns:
        `(about, keys)`: `about` the model (`model` as typed, `path`, `model_name`: what `encode` records with the
        spaces it writes in `args.store`, [`_model_name`]), its `model_type`, the model type and family it is read as
        (`read_as`, `family`), its `representation`, `checkpoint_dtype` and its family's own settings (`options`:
        setting -> `option`, `value`, `source`); `keys` one dict per compute dtype: `device` (`"cpu"`, `"cuda"` or
        `"any"`), `label`, `compute_dtype`, `fingerprint`, `settings`, `space`.

    Raises:
        CommandError: as [`load_qa_model`] (not a checkpoint, no adapter for its model type, ...) and `encode`'s
            settings (an option the family does not take, a value it refuses).
    """
    from transformers import AutoConfig

    from .dtypes import checkpoint_dtype, dtype_name, resolve_compute_dtype
    from .representations import family_of, get_adapter_class
    from .representations.base import current_fingerprint
    from .store import space_key

    with _loading_quietly():
        model, tokenizer = load_qa_model(name, args.num_decomposed_layers, "cpu", allow_readonce=True,
                                         compute_dtype=args.compute_dtype, notes=False)
        config = AutoConfig.from_pretrained(name)  # (load_qa_model read it: it is readable)
    saved = checkpoint_dtype(config)
    settings, sources = _encode_settings(args, model)
    adapter_class = get_adapter_class(model.config.model_type)
    keys = []
    for device, label in _KEY_DEVICES:
        dtype = resolve_compute_dtype(args.compute_dtype, device, saved)
        if any(key["compute_dtype"] == dtype_name(dtype) for key in keys):
            continue
        if dtype != model.dtype:  # as `encode` on that device loads it
            with _loading_quietly():
                model, tokenizer = load_qa_model(name, args.num_decomposed_layers, "cpu", allow_readonce=True,
                                                 compute_dtype=dtype_name(dtype), notes=False)
        adapter = _encode_adapter(model, tokenizer, settings, sources)
        fingerprint, stored_settings = current_fingerprint(adapter), adapter.settings()  # as `fill_store` keys
        keys.append({"device": device, "label": label, "compute_dtype": dtype_name(dtype),
                     "fingerprint": fingerprint, "settings": stored_settings,
                     "space": space_key(fingerprint, stored_settings)})
    if len(keys) == 1:
        keys[0].update(device="any", label="encode on any device")
    about = {"model": args.model, "path": name, "model_name": _model_name(args.model, args.store),
             "model_type": config.model_type, "read_as": adapter_class.model_type,
             "family": family_of(adapter_class.model_type).name, "representation": adapter_class.representation,
             "checkpoint_dtype": dtype_name(saved) if saved else None,
             "options": {setting: {"option": option, "value": settings.get(setting), "source": sources[setting]}
                         for setting, (option, _, _) in adapter_class.cli_settings.items()}}
    return about, keys


def _other_compute_dtypes(args, name: str, keys: list[dict]) -> list[dict]:
    """The keys of `name` in the compute dtypes `keys` leave out (of float32, float16 and bfloat16), each loaded as
    `encode --compute-dtype DTYPE` loads it ([`_model_keys`]): what tells a store written in
    another compute dtype from a stale one (asked only when no space of a store has one of `keys`). A dtype the
    checkpoint cannot be loaded in is left out."""
    probe = argparse.Namespace(**vars(args))
    found = []
    for dtype in ("float32", "float16", "bfloat16"):
        if any(key["compute_dtype"] == dtype for key in keys + found):
            continue
        probe.compute_dtype = dtype
        try:
            _, (key,) = _model_keys(probe, name)
        except CommandError:  # a dtype this checkpoint cannot be loaded in tells nothing about the store
            continue
        key.update(device=None, label=f"--compute-dtype {dtype}")
        found.append(key)
    return found


def _compare_spaces(spaces: dict, about: dict, keys: list[dict], others: list[dict] = (), *, store) -> list[dict]:
    """Each of a store's `spaces` (`store.info()["spaces"]`: space key -> its fingerprint, settings, ...) against a
    model's `keys` ([`_model_keys`], which gives `about`; `others`: its keys in other compute dtypes,
    [`_other_compute_dtypes`]); `store` is the store's folder, which names recorded relative to it are read against.

    Returns:
        `list[dict]`: per space, `space`, `model_type`, `model_names` (what `encode` recorded for it), `model_locations`
        (those names as MODEL names them from anywhere, [`_recorded_models`]), `same_model_name` (whether one of them
        names the folder or name of the model's `about["model_name"]`), `other_model_type` (whether it holds another
        model type's representations than the one the model is read as), `documents`, `dtypes` (storage), `fingerprint`,
        `match` (the `label` of the key of `keys` that is its key, else `None`), `fingerprint_of` (the `label` of a key
        with its fingerprint, else `None`), `compute_dtype` (that key's), `other_compute_dtype` (whether that key is one
        of `others`), and `differing_settings`: setting -> `{"stored": ..., "model": ...}` against that key (else
        against the key whose settings differ least).
    """
    from .store.format_check import differing_settings

    rows = []
    model = _recorded_model(about["model_name"], store)
    for key, space in spaces.items():
        locations, _ = _recorded_models(space["model_names"], store)
        same = next((k for k in (*keys, *others) if k["space"] == key), None)
        same_fingerprint = same or next((k for k in (*keys, *others) if k["fingerprint"] == space["fingerprint"]),
                                        None)
        nearest = same_fingerprint or min(keys, key=lambda k: len(differing_settings(space["settings"],
                                                                                     k["settings"])))
        rows.append({"space": key, "model_type": space["model_type"], "model_names": space["model_names"],
                     "model_locations": locations, "same_model_name": model in locations,
                     "other_model_type": space["model_type"] not in (about["read_as"], None),
                     "documents": space["documents"], "dtypes": space["dtypes"], "fingerprint": space["fingerprint"],
                     "match": same["label"] if same is not None and same in keys else None,
                     "fingerprint_of": same_fingerprint["label"] if same_fingerprint is not None else None,
                     "compute_dtype": same_fingerprint["compute_dtype"] if same_fingerprint is not None else None,
                     "other_compute_dtype": same_fingerprint is not None and same_fingerprint not in keys,
                     "differing_settings": {name: {"stored": space["settings"].get(name),
                                                   "model": nearest["settings"].get(name)}
                                            for name in differing_settings(space["settings"], nearest["settings"])}})
    return rows


def _space_line(row: dict, options: dict) -> str:
    """One space of [`_compare_spaces`] as `info MODEL --store` prints it: whether it has the model's key, and if
    not, which key fields differ (fingerprint, settings, compute dtype) and the options that key it where options can
    (`options`: setting -> its option: the model's family's, and `--compute-dtype` for a `compute_dtype` setting)."""
    from .store.keys import printable

    names = [printable(name) for name in row["model_locations"]]
    model = f"model{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else "model not recorded"
    head = (f"- space {row['space'][:16]} ({row['model_type'] or 'model type not recorded'}, {model}, "
            f"{row['documents']} document(s), stored as {', '.join(row['dtypes']) or '?'})")
    if row["match"]:
        return f"{head}: matches ({row['match']}, compute dtype {row['compute_dtype']})"
    if row["other_model_type"]:  # (its settings are another family's: no use listing them)
        return f"{head}: another model type's representations"
    differ = "; ".join(f"{name} {_short(values['stored'])} stored, {_short(values['model'])} here"
                       for name, values in row["differing_settings"].items())
    words = [word for name, values in row["differing_settings"].items() if name in options
             and values["stored"] is not None and not (row["other_compute_dtype"] and name == "compute_dtype")
             for word in _option_words(options[name], values["stored"])]
    if row["other_compute_dtype"]:
        words = ["--compute-dtype", row["compute_dtype"], *words]
        what = f"this checkpoint's weights computed in {row['compute_dtype']}"
    elif row["fingerprint_of"]:
        what = f"this model's fingerprint ({row['fingerprint_of']})"
    else:
        what = "another fingerprint (other weights, config or compute dtype)"
        if row["same_model_name"]:  # encode was given this MODEL: the checkpoint changed since
            what += ", though encode recorded this model for it (its weights or config changed since?)"
    what += f"; settings differ: {differ}" if differ else "; the same settings"
    if words and row["fingerprint_of"]:
        fixable = all(name in options for name in row["differing_settings"])
        what += f" ({'pass' if fixable else 'with'} {' '.join(words)} to key {'it' if fixable else 'those'})"
    return f"{head}: {what}"


def _info_model(args) -> int:
    """`hf-readonce info MODEL [--store STORE]`: the key `encode` would store MODEL's representations under (per
    compute dtype: fingerprint, settings, space; [`_model_keys`]) and, with `--store`, which of the store's spaces
    have it, and for the others which key fields differ ([`_compare_spaces`]); its unreadable index files and orphan
    shards (whose spaces cannot be listed), as `info --store` names them.

    Returns:
        `int`: `EXIT_OK`, or `EXIT_PROBLEMS` when `--store` holds no space under one of the model's keys.

    Raises:
        CommandError: a MODEL that is no checkpoint or has no representation adapter, a missing store, an option the
            family does not take.
    """
    name = _resolve_model(args.model)
    store = _open_store(args.store, readonly=True, create=False, command="info") if args.store is not None else None
    about, keys = _model_keys(args, name)
    rows = None
    summary = _store_info(store) if store is not None else None  # (walks the store's folder: once)
    if store is not None:
        rows = _compare_spaces(summary["spaces"], about, keys, store=store.path)
        if not any(row["match"] for row in rows) and any(
                row["fingerprint_of"] is None and row["model_type"] in (about["read_as"], None) for row in rows):
            rows = _compare_spaces(summary["spaces"], about, keys, _other_compute_dtypes(args, name, keys),
                                   store=store.path)
    matching = [row for row in rows or () if row["match"]]
    status = EXIT_PROBLEMS if store is not None and not matching else EXIT_OK
    # index files that cannot be read list no space, and the shards they listed are orphans: said as `info --store`
    # says them (a space of this model may be among them)
    damage = ({name: summary[name] for name in ("bad_manifests", "orphans", "orphans_note")} if store is not None
              else {})
    encode = None
    if store is not None:
        words = ["hf-readonce", "encode", args.model, "--documents", "FILE.jsonl", "--store", str(store.path)]
        words += ["--compute-dtype", args.compute_dtype] if args.compute_dtype != "auto" else []
        words += (["--num-decomposed-layers", str(args.num_decomposed_layers)]
                  if args.num_decomposed_layers is not None else [])
        for option in about["options"].values():
            if option["source"] == "given" and option["value"] is not None:
                words += _option_words(option["option"], option["value"])
        encode = shlex.join(words)
    if args.json:
        result = {**about, "keys": keys}
        if store is not None:
            result["store"] = {"path": str(store.path), "current": bool(matching), "spaces": rows, "encode": encode,
                               **damage}
        print(json.dumps(result, indent=2))
        return status
    read_as = f", read as {about['read_as']}" if about["read_as"] != about["model_type"] else ""
    print(f"model {about['model']}: model_type {about['model_type']}{read_as} (family {about['family']}); stores "
          f"{about['representation']}")
    if about["options"]:
        print("its family's settings: " + ", ".join(f"{o['option']} {_short(o['value'])} ({o['source']})"
                                                     for o in about["options"].values()))
    print("the store key `encode` writes and reads under (its fingerprint hashes the model's weights: they were "
          "loaded, on the CPU, to compute it; no document was read):")
    for index, key in enumerate(keys):
        dtype = key["compute_dtype"] + (" (the checkpoint's)" if key["device"] == "cuda" and args.compute_dtype ==
                                        "auto" and about["checkpoint_dtype"] == key["compute_dtype"] else "")
        same = next((other for other in keys[:index] if other["space"] == key["space"]), None)
        print(f"- {key['label']}: compute dtype {dtype}, space {key['space'][:16]}" + (
            f" (the same key as {same['label']}: this family's key leaves the compute dtype out, so both write and "
            "read one space)" if same is not None else ""))
        print(f"    fingerprint {key['fingerprint']}")
        print(f"    settings {json.dumps(key['settings'], sort_keys=True)}")
    if store is None:
        return status
    options = {setting: option["option"] for setting, option in about["options"].items()}
    options.setdefault("compute_dtype", "--compute-dtype")  # (families whose settings, not fingerprint, key it)
    print(f"store {store.path}: {len(rows)} representation space(s)")
    for row in rows:
        print(_space_line(row, options))
    if damage["bad_manifests"] or damage["orphans"]:
        from .store.keys import printable

        where = _quoted(store.path)
        if damage["bad_manifests"]:
            print(f"unreadable index files: {', '.join(printable(name) for name in damage['bad_manifests'])} (the "
                  "spaces and documents they list are not shown above)")
        if damage["orphans"]:
            print(f"orphan shard files (no index file lists them: an interrupted write or a lost or unreadable "
                  f"index): {len(damage['orphans'])}")
            if damage["orphans_note"]:
                print(f"note: {printable(damage['orphans_note'])}")
        print(f"note: the store is damaged; `hf-readonce verify --store {where}` names what, and `{encode} --repair` "
              "re-indexes its intact shards (and encodes what is missing)")
    if matching:
        print(f"current: the store holds this model's representations under the key `encode` uses ("
              f"{matching[0]['match']}: space {matching[0]['space'][:16]}, {matching[0]['documents']} document(s))")
    else:
        print(f"not current: no space of {store.path} is this model's key with these options; `{encode}` stores its "
              "representations (the other spaces are kept; `hf-readonce prune --store "
              f"{_quoted(store.path)} --space KEY` deletes one no longer needed)")
    return status


def cmd_info(args) -> int:
    """`hf-readonce info`: describe a store (its spaces, documents and bytes), a model (its family and what the CLI
    can do with it) or, with neither, the installed version and the registered families. Returns 0; raises
    [`CommandError`] for a path that is no store or a model no family reads."""
    if args.model is not None:
        restore = silence_progress_bars()  # (no weight-loading bar: a query)
        try:
            return _info_model(args)
        finally:
            restore()
    given = ["--" + dest.replace("_", "-") for dest, value in vars(args).items()
             if dest not in _INFO_ARGUMENTS and value != _INFO_MODEL_UNSET.get(dest)]
    if given:
        raise CommandError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} read only with MODEL (`hf-readonce "
                           "info MODEL [--store STORE]`: the key encode stores that model's representations under).")
    if args.store is None:  # the registered families and what each command does with them
        families = _families_info()
        if args.json:
            print(json.dumps(families, indent=2))
            return EXIT_OK
        for row in families:
            print(f"family {row['family']}: model types {', '.join(row['model_types'])} (checkpoints: "
                  f"{', '.join(row['checkpoint_model_types'])})")
            pipelines = ", ".join(f"{task} ({cls})" for task, cls in row["pipelines"].items())
            print(f"    auto classes {', '.join(row['auto_models'])}; pipelines {pipelines or 'transformers own'}")
            commands = ["publish"] + (["encode", "verify --recompute"] if row["encode"] else []) + (
                [f"answer ({'; '.join([row['answer'], *row['answer_options']])})"] if row["answer"] else []) + (
                ["summarize"] if row["summarize"] else [])
            print(f"    commands: {', '.join(commands)}"
                  + (f"; stores {row['representation']}" if row["representation"] else ""))
            for option, about in row["encode_options"].items():
                default = ", if any" if about["default"] is None else f", else {about['default']}"
                takers = ", ".join(["encode"] + (["answer"] if row["answer"] else [])
                                   + (["summarize"] if row["summarize"] else []) + ["publish"])
                print(f"    {option} ({takers}; default: the value the checkpoint records{default}): {about['help']}")
        print("A family's pipeline runs as pipeline(task, model=FOLDER, trust_remote_code=True) on a folder that "
              "`hf-readonce publish` wrote (its config declares the pipeline), or as the class itself: "
              "Class(model=model, tokenizer=tokenizer).")
        return EXIT_OK
    store = _open_store(args.store, readonly=True, create=False, command="info")
    info = _store_info(store)
    missing = {}  # per space, the local model folders it records that are not here
    for key, space in info["spaces"].items():  # (the names as recorded, and as MODEL names them from anywhere)
        space["model_locations"], missing[key] = _recorded_models(space["model_names"], store.path)
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    print(f"store {info['path']} (format version {info['format_version']})")
    print(f"documents: {info['documents']}  shards: {info['shards']}  size on disk: "
          f"{_human_bytes(info['bytes_on_disk'])}")
    if info["quarantine_files"]:
        print(f"  of which {_human_bytes(info['quarantine_bytes'])} in {info['quarantine_files']} file(s) under "
              "quarantine/: damaged files `encode --repair` moved aside, never read again (`hf-readonce prune "
              f"--store {_quoted(info['path'])} --quarantine` deletes them once you no longer need them)")
    from .store.keys import printable

    for key, space in info["spaces"].items():
        print(f"- space {key[:16]}: model_type {space['model_type']}, fingerprint {space['fingerprint']}")
        names = [printable(name) for name in space["model_locations"]]  # what `encode` was given as MODEL
        print(f"    model{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else "    model not recorded")
        if missing[key]:
            print(f"    no such folder here: {', '.join(printable(name) for name in missing[key])}")
        print(f"    settings {json.dumps(space['settings'], sort_keys=True)}")
        written = ""
        if space.get("first_written") is not None:
            first, last = (time.strftime("%Y-%m-%d %H:%M", time.localtime(space[k]))
                           for k in ("first_written", "last_written"))
            written = f", written {first}" + (f" to {last}" if last != first else "")
        print(f"    documents {space['documents']}, shards {space['shards']}, {_human_bytes(space['bytes'])}, "
              f"stored as {', '.join(space['dtypes'])}{written}")
    if any(not space["model_names"] for space in info["spaces"].values()):
        print(f"note: a space whose model is not recorded was written by an earlier release, or through the Python API "
              f"without a model_name; `hf-readonce verify --store {_quoted(info['path'])} --recompute 1 --model "
              "MODEL` names the spaces MODEL wrote")
    if any(missing.values()):
        where = _quoted(info["path"])
        print(f"note: a model folder recorded for a space is not here (the store was copied or moved without it, or "
              f"the folder was moved or removed since): `hf-readonce info MODEL --store {where}` tells whether a "
              f"checkpoint MODEL has a space's key, and `hf-readonce verify --store {where} --recompute 1 --model "
              "MODEL` recomputes the documents of the spaces it wrote")
    if info["duplicates"]:
        print(f"documents listed by two index files: {info['duplicates']} (harmless: reads use the first; a shard and "
              "its manifest copied within the store?)")
    if info["orphans"]:
        print(f"orphan shard files (no manifest lists them: an interrupted write or a lost index; `verify` says which, "
              f"and `encode --repair` re-indexes intact ones and moves the others to quarantine/): "
              f"{len(info['orphans'])}")
        if info.get("orphans_note"):
            print(f"note: {printable(info['orphans_note'])}")
    if info["bad_manifests"]:
        print(f"unreadable index files: {', '.join(info['bad_manifests'])} (run verify)")
    return EXIT_OK


def cmd_verify(args) -> int:
    """`hf-readonce verify`: check every stored document and the index against each other (and, with
    `--recompute N --model M`, N documents per space against a fresh computation). Returns 0 when all is intact,
    1 when problems were found (each printed), 2 for errors ([`CommandError`])."""
    from .store import StoreNotFoundError
    from .store.keys import printable

    if args.recompute is not None and not args.model:
        raise CommandError("--recompute needs --model MODEL: the checkpoint that wrote the stored documents (repeat "
                           "--model for a store that holds several models' representations).")
    if args.model and args.recompute is None:
        raise CommandError("--model is read only with --recompute N (recompute N stored documents with it).")
    if args.documents and args.recompute is None:
        raise CommandError("--documents is read only with --recompute N (the texts of the documents to recompute).")
    if args.recompute is not None and args.recompute < 1:
        raise CommandError(f"--recompute must be >= 1, got {args.recompute}.")
    for option, value in (("--max-kl", args.max_kl), ("--max-diff", args.max_diff)):
        if value is not None and args.recompute is None:
            raise CommandError(f"{option} is read only with --recompute N (a bound on the recomputed documents).")
        if value is not None and (not math.isfinite(value) or value < 0):
            raise CommandError(f"{option} must be a finite number >= 0, got {value}.")
    store = _open_store(args.store, readonly=True, create=False, command="verify")
    for name in args.model or ():  # a --model that names no checkpoint is said before the store is read
        _resolve_model(name)
    try:
        report = store.verify(progress=not args.no_progress)
    except StoreNotFoundError as error:  # moved or removed since it was opened
        raise CommandError(str(error)) from None
    recomputed, status = [], EXIT_OK if report.ok else EXIT_PROBLEMS
    duplicates = report.duplicates  # documents listed by two index files: harmless, said
    if args.recompute is not None:
        recomputed, recompute_status = _recompute(args, store, {e.content_hash for e in report.corrupted_documents})
        status = max(status, recompute_status)
    if args.json:
        result = {
            "ok": report.ok, "shards_checked": report.shards_checked, "documents_checked": report.documents_checked,
            "corruptions": [{"shard": c.shard, "reason": c.reason,
                             "documents": [{"content_hash": e.content_hash, "id": e.meta.get("id")}
                                           for e in c.documents]} for c in report.corruptions],
            "orphans": report.orphans, "orphans_note": report.orphans_note, "duplicates": duplicates,
            "leftovers": report.leftovers,
            "quarantine_problem": report.quarantine_problem}
        if args.recompute is not None:
            result["recompute"] = [r.as_dict() for r in recomputed]
        print(json.dumps(result, indent=2))
    else:
        for corruption in report.corruptions:
            print(corruption.describe())
        lost = {c.shard for c in report.corruptions}
        for orphan in report.orphans:
            if orphan not in lost:
                print(f"orphan shard (no index entry; its documents are stored elsewhere: harmless, but it takes "
                      f"disk space; `encode --repair` moves it to quarantine/): "
                      f"{printable(orphan)}")
        if report.orphans_note and any(orphan not in lost for orphan in report.orphans):  # (a corruption says it)
            print(f"note: {printable(report.orphans_note)}")
        if report.leftovers:
            names = _listed([printable(rel) for rel in report.leftovers], 10)
            then = " once quarantine/ is a folder again" if report.quarantine_problem else ""
            print(f"note: {_count_paths(report.leftovers, store.path)} left in tmp/ (a write stopped midway, or "
                  f"put there by hand; never read): {names}; `encode --repair` moves them to quarantine/{then}")
        if duplicates:
            print(f"note: {duplicates} document(s) are listed by two index files (a shard and its manifest "
                  "copied within the store, or a repair stopped midway): harmless, reads use the first; `hf-readonce "
                  "info` counts them too")
        if report.quarantine_problem is not None:
            print(f"PROBLEM quarantine: the store's folder quarantine/ {printable(report.quarantine_problem)}; "
                  "repair moves damaged files into it, so it must be a folder of the store: move it away (out of "
                  f"{printable(str(store.path))}); no shard or index file is affected")
        if report.ok:
            print(f"OK: {report.shards_checked} shard(s), {report.documents_checked} document(s) verified")
        elif not report.corruptions:
            print(f"FAILED: quarantine/ is not a folder of the store; {report.shards_checked} shard(s), "
                  f"{report.documents_checked} document(s) verified intact; move quarantine/ away, then run verify "
                  "again")
        else:
            first = "move quarantine/ away, then " if report.quarantine_problem is not None else ""
            print(f"FAILED: {len(report.corruptions)} corrupted shard(s) or index file(s), "
                  f"{len(report.corrupted_documents)} document(s) affected ({report.documents_checked} indexed and "
                  f"checked); {first}`hf-readonce encode MODEL --documents FILE --store {_quoted(store.path)} "
                  "--repair` keeps every intact document and recomputes the others")
            if any(c.reason.startswith("shard file is missing") for c in report.corruptions):
                print("(if you were pruning the space of a missing shard file, an interrupted `hf-readonce prune` "
                      "left it so: run the same prune again to finish it; otherwise the shard was lost: repair)")
        for space in recomputed:
            _print_recompute(space, args.max_kl, args.max_diff)
    return status


def cmd_prune(args) -> int:
    """`hf-readonce prune`: delete the named representation spaces (`--space`, repeatable) and/or the quarantined
    files (`--quarantine`) of `args.store`. Returns 0, or 1 when part of a named space was left in place (a shard
    folder that links out of the store); raises [`CommandError`] when nothing to delete is named, a named space is
    unknown or the store is read-only (nothing is deleted then)."""
    if not args.space and not args.quarantine:
        raise CommandError("name what to delete: --space KEY (repeatable; `hf-readonce info --store "
                           f"{_quoted(args.store)}` lists the spaces) and/or --quarantine.")
    store = _open_store(args.store, readonly=args.dry_run, create=False, command="prune")
    from .store import ReadOnlyStoreError
    from .store.keys import printable
    from .store.maintenance import model_names

    spaces = {space.key: space for space in store.spaces()}  # as they were before the prune
    names = model_names(store)  # every name a space's shards record, as `info` lists them
    try:
        result = store.prune(args.space, quarantine=args.quarantine, dry_run=args.dry_run)
    except ReadOnlyStoreError as error:
        if not (store.path / "store.json").exists():  # moved or removed since it was opened: no permission problem
            raise CommandError(str(error)) from None  # (it says that nothing is deleted)
        raise CommandError(f"{error} Nothing was deleted; run prune as the store's owner or on a writable mount "
                           "(`--dry-run` reads a read-only store).") from None
    except ValueError as error:
        raise CommandError(str(error)) from None
    status = EXIT_PROBLEMS if result["skipped"] else EXIT_OK  # something of a named space is left
    if args.json:
        print(json.dumps(result, indent=2))
        return status
    verb = "would delete" if args.dry_run else "deleted"
    for key in result["spaces"]:
        space = spaces.get(key)
        named = [printable(name) for name in _recorded_models(names.get(key, []), store.path)[0]]
        named = f", model{'s' if len(named) > 1 else ''} {', '.join(named)}" if named else ""
        about = (f" ({space.model_type or 'model type not recorded'}{named}, fingerprint {space.fingerprint[:16]}...)"
                 if space is not None else " (orphan shards only)")
        partly = key in result["skipped_spaces"]
        print(f"{verb} {'part of ' if partly else ''}space {key[:16]}{about}")
    if result["spaces"]:
        print(f"{verb} {result['documents']} indexed document(s), {result['shard_files']} shard file(s), "
              f"{_human_bytes(result['bytes'])}")
    for shard in result["skipped"]:
        print(f"left in place (its folder is a link out of the store; `verify` names it): {shard}")
    if result["skipped"]:
        print(f"{result['documents_left']} indexed document(s) left in {len(result['skipped'])} shard(s) behind a "
              "link: the space stays listed; replace the link by the folder itself (or delete it) and prune again")
    if args.quarantine:
        print(f"{verb} quarantine/: {_human_bytes(result['quarantine_bytes'])}")
    if not args.dry_run:
        info = _store_info(store, orphans=False)
        print(f"store {store.path}: {info['documents']} document(s), {info['shards']} shard(s), "
              f"{_human_bytes(info['bytes_on_disk'])}")
    return status


def _print_recompute(space, max_kl, max_diff=None) -> None:
    """The human-readable lines of one space's recomputation."""
    head = (f"recompute: space {space.space[:16]} ({space.model_type}, fingerprint {space.fingerprint[:16]}..., "
            f"stored as {', '.join(space.dtypes) or '?'})")
    if space.skipped:
        print(f"{head}: not recomputed: {space.skipped}")
        return
    sources = sorted({c.recomputed_from for _, _, c in space.checks})
    print(f"{head}: {len(space.checks)} of {space.stored_documents} document(s) recomputed from "
          f"{' and '.join(sources)}" + (f" ({space.unavailable} left out: no text given)" if space.unavailable else ""))
    over_diff = [name for _, name, c in space.checks if max_diff is not None and c.max_abs_diff > max_diff]
    print(f"  largest |stored - fresh|: {space.max_abs_diff:.3g}"
          + (f"; above --max-diff {max_diff:g}: {', '.join(over_diff)}" if over_diff else ""))
    kls = space.kls
    if kls:
        over = [name for _, name, c in space.checks if c.kl is not None and max_kl is not None and c.kl > max_kl]
        print(f"  KL(fresh || stored) of the {space.kl_kind}: max {max(kls):.3g} nats, mean "
              f"{sum(kls) / len(kls):.3g} nats" + (f"; above --max-kl {max_kl:g}: {', '.join(over)}" if over else ""))
    elif not space.mismatched:
        print("  no output distribution to compare for this model (no head that the stored states feed): the "
              "largest absolute difference is the only figure")
    for name, tensors in space.mismatched:
        print(f"  MISMATCH {name}: {', '.join(tensors)} differ in shape or token ids (not read the same way)")
    if any(str(name).startswith("line ") for _, name, _ in space.checks):
        print("  (a document stored without an id is named `line N`: its line in the documents file `encode` read)")


def _recompute(args, store, corrupted):
    """`verify --recompute N --model M...`: each model recomputes N documents of each space it wrote.

    Returns:
        `(reports, status)`: the [`SpaceRecomputeReport`]s of every model, and EXIT_PROBLEMS if a document was not
        read the same way, a KL is above `--max-kl` or a space was skipped, else EXIT_OK.

    Raises:
        CommandError: a model that cannot be loaded, a missing --documents file, or no space recomputed at all.
    """
    from .representations import recompute_store
    from .store import content_hash
    from .tasks.jsonl import iter_documents

    texts = {}
    if args.documents:
        documents = _input_file(args.documents, "--documents")
        # verify's 1 means a damaged store
        args.text_field, _ = _input_fields(documents, args.text_field or None, status=EXIT_ERROR)
        problems = []  # lines set aside, reported as `encode` reports them (not silently left out)
        with _reading_input(documents, "--documents"):
            texts = {content_hash(text): text for _, text in iter_documents(documents, text_field=args.text_field,
                                                                              id_field=None, problems=problems)}
        _report_bad_lines(problems, documents)
    device = _device(args.device)
    reports, covered = [], set()
    for name in args.model:
        model, tokenizer = load_qa_model(_resolve_model(name), None, device, allow_readonce=True,
                                         compute_dtype=args.compute_dtype)
        try:
            found = recompute_store(store, model, tokenizer, args.recompute, texts=texts, exclude=corrupted)
        except (TypeError, ValueError) as error:
            raise CommandError(f"cannot recompute with model {name!r}: {error}") from None
        covered.update(r.space for r in found)
        reports += found
        if not reports and len(args.model) == 1:
            message = f"no representation space of {store.path} was made by --model {name}."
            hinted = _with_compute_dtype_hint(message, model, store, _resolve_model(name), device,
                                              allow_readonce=True)
            if hinted != message:
                raise CommandError(hinted)
        del model
    others = [space for space in store.spaces() if space.key not in covered]
    if not reports:
        raise CommandError(_made_by_no_model_given(store, others, args.model))
    if others and not args.json:
        for space in others:
            print(f"recompute: space {space.key[:16]} ({space.model_type or '?'}, fingerprint "
                  f"{space.fingerprint[:16]}...) was not made by any --model given: not recomputed")
    if args.documents:
        _note_documents_not_read(reports, args.documents)
    status = EXIT_OK
    for report in reports:
        if report.mismatched or report.skipped:
            status = EXIT_PROBLEMS
        if args.max_kl is not None and any(kl > args.max_kl for kl in report.kls):
            status = EXIT_PROBLEMS
        if args.max_diff is not None and any(c.max_abs_diff > args.max_diff for _, _, c in report.checks):
            status = EXIT_PROBLEMS
    return reports, status


def _made_by_no_model_given(store, spaces, models) -> str:
    """The message of `verify --recompute` when no space of `store` was made by any of `models` (the --model
    arguments): each of its `spaces` with the model `encode` recorded for it ([`_recorded_models`]: a folder recorded
    relative to the store read where the store is now) and, where that folder is not here, that it is missing; a
    space recorded for one of `models` whose fingerprint is not that model's is said to be (the checkpoint changed
    since)."""
    from .store.keys import printable
    from .store.maintenance import model_names

    names = model_names(store)
    given = {_model_name(name) for name in models}  # (a local folder as its absolute path)
    held, changed = [], []
    for space in spaces:  # spaces of one model that differ in settings stay apart
        recorded, missing = _recorded_models(names.get(space.key, []), store.path)
        model = ", model " + ", ".join(printable(name) + (" (no such folder here)" if name in missing else "")
                                       for name in recorded) if recorded else ""
        held.append(f"{space.model_type or '?'} space {space.key[:16]} (fingerprint {space.fingerprint[:16]}..."
                    f"{model})")
        changed += [f"{printable(name)} for space {space.key[:16]}" for name in recorded if name in given]
    message = (f"no representation space of {store.path} was made by --model {', '.join(models)} (the store holds: "
               f"{'; '.join(held) or 'nothing'}); pass the checkpoint that wrote it as --model.")
    if changed:
        message += (f" encode recorded {'; '.join(changed)}, but its fingerprint is not that model's now: its weights "
                    "or config changed since the space was written.")
    return message


def _note_documents_not_read(reports, documents) -> None:
    """One note line (stderr) per recomputed space for which `--documents` was given but not read: a family whose
    stored entries keep the tokens they were read from (its adapter's `recompute_needs_text` is False) recomputes a
    document from its text only when that text is in the file, else from the stored tokens
    ([`recompute_store`]), so a file that holds none of the documents recomputed was silently ignored."""
    for report in reports:
        stored = sum(check.recomputed_from == "stored tokens" for _, _, check in report.checks)
        if report.skipped or not stored:
            continue
        what = (f"--documents {documents} was not read for space {report.space[:16]} ({report.model_type})"
                if stored == len(report.checks) else
                f"--documents {documents} was read for {len(report.checks) - stored} of the {len(report.checks)} "
                f"document(s) recomputed in space {report.space[:16]} ({report.model_type}), not for the other "
                f"{stored}")
        print(f"hf-readonce: note: {what}: its entries keep the tokens they were read from, and the texts of "
              f"{'these' if stored == len(report.checks) else 'those'} documents are not in the file (matched by "
              "content), so they were recomputed from their stored tokens.", file=sys.stderr)


def cmd_checkpoints(args) -> int:
    """`hf-readonce checkpoints [--path NAME]`: each shipped checkpoint's name, folder (or how to fetch it) and what
    it is; with `--path`, only that checkpoint's folder."""
    from .weights import SHIPPED_NAMES, shipped_checkpoint_path

    if args.path is not None:
        if args.path not in SHIPPED_NAMES:
            raise CommandError(f"--path {args.path!r}: not a shipped checkpoint; names: {', '.join(SHIPPED_NAMES)}.")
        try:
            print(shipped_checkpoint_path(args.path))
        except (FileNotFoundError, ValueError) as error:
            raise CommandError(str(error)) from None
        return EXIT_OK
    status = EXIT_OK
    for name, (checkpoint, description) in SHIPPED_NAMES.items():
        try:
            where = str(shipped_checkpoint_path(name, verify=False))
        except FileNotFoundError:
            where = f"not found: hf download {checkpoint.repo_id}"
            status = EXIT_PROBLEMS
        print(f"{name:<20} {where}\n{'':<20} {description} (Hub: {checkpoint.repo_id})")
    return status


def _publish_settings(args, model_dir) -> dict | None:
    """The representation settings `publish` declares from the command line (encode's setting options), checked in
    the CLI's words against the checkpoint's family: an option of another family, or any for a family that stores
    nothing, is refused by name.

    Raises:
        CommandError: a setting option that does not apply to this checkpoint's family.
    """
    settings = {name: getattr(args, name) for name in _setting_names() if getattr(args, name, None) is not None}
    if not settings:
        return None
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    from . import register_models
    from .representations import get_adapter_class, registered_adapters

    register_models()
    try:
        model_type = AutoConfig.from_pretrained(model_dir, trust_remote_code=False).model_type
    except (OSError, ValueError, StrictDataclassError):
        return settings  # publish() says what is wrong with the folder
    if model_type not in registered_adapters() and any(model_type in adapter.checkpoint_model_types
                                                       for adapter in registered_adapters().values()):
        return settings  # a plain checkpoint type (bert): publish() says it publishes hf-readonce models only
    try:
        adapter_class = get_adapter_class(model_type)
    except ValueError:
        raise CommandError(f"{_do_not_apply('--' + name.replace('_', '-') for name in settings)}: {model_type} "
                           "models store no representations, so there "
                           "is no representation format to declare.") from None
    foreign = [name for name in settings if name not in adapter_class.cli_settings]
    if foreign:
        raise _foreign_settings(foreign, adapter_class)
    return settings


def _recorded_card_metrics(name: str, model_dir: str, card: dict) -> tuple[str, str] | None:
    """Without `--metrics`, a shipped checkpoint named on the command line (`reference-deformer`) brings its own
    recorded evaluation: `(path of that file, the note saying so)`, with its data set filled into `card`; `None` for
    any other model, or when `--dataset-type` / `--dataset-name` were given (they describe a `--metrics` file the
    user must name). The caller prints the note (stderr) once `publish` has written the folder or uploaded it, so
    that an error (a non-empty `--local-dir`) is the only line a refused command prints."""
    from .weights import shipped_checkpoint

    checkpoint = None if Path(name).expanduser().exists() else shipped_checkpoint(name)
    if checkpoint is None or checkpoint.card_metrics is None or {"dataset_type", "dataset_name"} & set(card):
        return None
    path = Path(model_dir) / checkpoint.card_metrics
    if not path.is_file():
        return None
    card["dataset_type"], card["dataset_name"] = checkpoint.card_dataset_type, checkpoint.card_dataset_name
    return str(path), (f"card results: {name}'s recorded evaluation ({path.name}, {checkpoint.card_dataset_name}); "
                       "pass --metrics to use another file.")


# the metrics files the recipes write into a run's folder (`hf-readonce demo --output-dir`, examples/*/run_*.py),
# in the order a note names them
_RUN_METRICS_FILES = ("eval_results.json", "readonce_results.json", "readtwice_results.json", "longdoc_results.json",
                      "block_attention_qa_results.json")


def _unused_metrics_note(model_dir: str) -> str | None:
    """Without `--metrics`, the note saying that the card will hold no results although the checkpoint's folder holds
    a metrics file a recipe wrote with scores a card reads ([`~hf_readonce.hub.cards.has_card_scores`]), naming the
    options that put them on the card; `None` when the folder holds none (a Hub repo id, a folder without a run's
    results)."""
    from .hub.cards import has_card_scores

    for name in _RUN_METRICS_FILES:
        path = Path(model_dir) / name
        try:
            metrics = json.loads(path.read_text(encoding="utf-8-sig")) if path.is_file() else None
        except (ValueError, OSError):
            continue
        if isinstance(metrics, dict) and has_card_scores(metrics):
            return (f"card results: none, so the card says no evaluation was recorded; {path} holds the run's "
                    f"scores: pass `--metrics {shlex.quote(str(path))} --dataset-type ID` (the Hub id of the data set "
                    "it scored) to put them on the card.")
    return None


def cmd_publish(args) -> int:
    """`hf-readonce publish`: write a checkpoint folder ready for the Hub (weights, remote code, generated model
    card, optional metrics) and, with `--repo-id`, upload it ([`hf_readonce.hub.publish.publish`]). Returns 0;
    raises [`CommandError`] for bad input or an output folder that exists and is not empty (publish never
    overwrites it)."""
    from .hub.publish import publish

    card = {}
    for name in ("title", "summary", "base_model", "dataset_type", "dataset_name"):
        if getattr(args, name, None):
            card[name] = getattr(args, name)
    if args.dataset:
        card["datasets"] = args.dataset
    # a missing store said in the CLI's words, before the model loads; publish reads the store opened here
    store = _open_store(args.store, readonly=True, create=False, command="publish") if args.store is not None else None
    if args.store is not None and args.local_dir is not None and \
            Path(args.local_dir).expanduser().resolve().is_relative_to(Path(args.store).expanduser().resolve()):
        raise CommandError(f"--local-dir {args.local_dir} is inside --store {args.store}: the repo folder would add "
                           "files to the store's own (verify then reports them); give a folder outside it.")
    model_dir = _resolve_model(args.model_dir)
    settings = _publish_settings(args, model_dir)
    recorded = _recorded_card_metrics(args.model_dir, model_dir, card) if args.metrics is None else None
    metrics, note = recorded if recorded is not None else (args.metrics, None)
    if metrics is None:
        note = _unused_metrics_note(model_dir)
    try:
        result = publish(model_dir, args.repo_id, local_dir=args.local_dir, private=args.private,
                         store=store, metrics=metrics, card=card or None,
                         representations_repo=args.representations_repo, store_dtype=args.store_dtype,
                         representation_settings=settings or None)
    except (ValueError, TypeError, FileNotFoundError) as error:  # publish()'s argument names said as the options
        message = str(error)
        for name in ("local_dir", "repo_id", "metrics", "representations_repo", "store_dtype", "store"):
            message = message.replace(f"`{name}`", f"`--{name.replace('_', '-')}`")
        message = message.replace("pass `representation_settings`", "pass its family's setting options (`hf-readonce "
                                  "info` lists them)").replace("`model_dir`", "MODEL_DIR")
        message = message.replace("(pass check_dtype=False to accept another dtype)",  # an argument of Python only
                                  "(`--store-dtype` declares it; without --store-dtype, the dtype the store holds "
                                  "is declared where it holds one)")
        # the setting options given for a checkpoint that stores nothing (a ReadTwice of the paper's layout)
        message = re.sub(r"`settings` \[([^\]]*)\] do not apply", lambda found: _do_not_apply(
            "--" + name.strip(" '").replace("_", "-") for name in found.group(1).split(",")), message)
        raise CommandError(message) from None
    except OSError as error:  # a read-only or full --local-dir, the Hub unreachable (requests' errors are OSErrors),
        # or this machine's error while the repo folder is assembled before the upload (a full temporary folder)
        if args.local_dir:
            raise CommandError(f"cannot write the repo folder --local-dir {args.local_dir}: {_one_line(error)}; "
                               "nothing was left half-written. Pass a folder you can write to.") from None
        if not _is_hub_error(error):
            import tempfile

            raise CommandError(f"cannot assemble the repo folder to upload: {_one_line(error)} (an error of this "
                               f"machine, not the Hub's); it is assembled under {tempfile.gettempdir()} before the "
                               "upload: free space there or set TMPDIR, or pass --local-dir DIR to write it there "
                               "without uploading.") from None
        raise CommandError(_hub_error(error)) from None
    except Exception as error:
        if args.local_dir or not _is_hub_error(error):
            raise
        raise CommandError(_hub_error(error)) from None
    args.published = True  # said if the command is stopped from here on
    if note is not None:  # said once published: a refused command prints its error line only
        print(note, file=sys.stderr)
    if args.local_dir:
        print(f"wrote {len(result.files)} files to {result.folder}: {', '.join(result.files)}")
        if result.representations_dir is not None:
            print(f"wrote the stored representations to {result.representations_dir} "
                  f"(dataset repo {result.representations_repo} when uploaded)")
    else:
        print(f"uploaded {len(result.files)} files to {result.repo_url} ({result.commit_url})")
        if result.representations_repo and args.store:
            print(f"pushed the stored representations to the dataset repo {result.representations_repo}")
    return EXIT_OK


# the packages whose errors mean the Hub could not be reached or refused the upload: huggingface_hub itself, the
# HTTP clients it has used (requests up to 0.x, httpx over httpcore, and httpx2 over httpcore2 in 2.x) and hf_xet,
# its upload client
_HUB_ERROR_PACKAGES = ("huggingface_hub", "requests", "httpx", "httpx2", "httpcore", "httpcore2", "urllib3", "hf_xet")


def _is_hub_error(error: BaseException) -> bool:
    """Whether `error` says the Hub could not be reached or refused the upload: an error of a package of
    `_HUB_ERROR_PACKAGES`, known by any of its classes (huggingface_hub's HTTP errors derive from its HTTP client's),
    or a connection, network or timeout error of any origin. Not a local `OSError` (a full disk, a folder that cannot
    be read) nor huggingface_hub's strict-dataclass errors, which transformers' configs raise for a config.json field
    of the wrong type."""
    import errno
    import socket
    import ssl

    from huggingface_hub.errors import StrictDataclassError

    if isinstance(error, StrictDataclassError):
        return False
    if isinstance(error, (ConnectionError, TimeoutError, socket.gaierror, ssl.SSLError)) or getattr(
            error, "errno", None) in (errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTUNREACH, errno.EHOSTDOWN):
        return True
    return any((getattr(cls, "__module__", None) or "").split(".")[0] in _HUB_ERROR_PACKAGES
               for cls in type(error).__mro__)


def _hub_error(error: BaseException) -> str:
    offline = "offline" in str(error).lower() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false")
    hint = ("the Hub is unreachable in offline mode (HF_HUB_OFFLINE is set): unset it" if offline else
            "check the network and your token (`hf auth login`)")
    return (f"cannot upload to the Hub ({_one_line(error)}); {hint}, or pass --local-dir DIR to write the repo "
            "folder without uploading.")


# ---------------------------------------------------------------------------------------------------------- parser
def build_parser(family_options: bool = False) -> _Parser:
    """The argparse parser of every subcommand except `demo` (which parses its own arguments). With
    `family_options`, `encode`, `answer`, `summarize`, `publish` and `info` also take the option of every setting a
    registered adapter declares in its `cli_settings` that the fixed options do not cover (this loads the
    families)."""
    parser = _Parser(prog="hf-readonce", description="Read a document once, reuse it everywhere.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hf-readonce {_installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    # options every command takes (one parent parser, so they cannot drift apart: `command` adds it)
    shared = _Parser(add_help=False)
    shared.add_argument("--no-progress", action="store_true",
                        help="no progress bars (weight loading, encoding, answering, uploads; every command takes it)")

    def command(name: str, **kwargs) -> argparse.ArgumentParser:
        parser.commands[name] = sub.add_parser(name, parents=[shared], **kwargs)
        return parser.commands[name]

    parser.commands["demo"] = sub.add_parser(
        "demo", help="the shipped DeFormer answers Disfl-QA validation from cached passage states: EM/F1 beside "
                     "baselines, and the speed-up (--distill distils one here first; see `hf-readonce demo --help`)",
        add_help=False)

    compute_dtype_help = ("dtype the model computes in: auto (default) is float32 on a CPU (fast fp32 kernels; the "
                          "shipped checkpoints are saved in fp16) and the checkpoint's dtype on CUDA; bfloat16 is "
                          "fast on CPUs with AVX-512 BF16 or AMX. Stored states are keyed by it (see "
                          "hf_readonce.dtypes)")

    def model_options(p):
        p.add_argument("model", type=_path,
                       help="checkpoint folder, Hub id, or the name of a shipped checkpoint (reference-deformer, "
                            "reference-qa: `hf-readonce checkpoints`) of a registered family (`hf-readonce info` "
                            "lists them: encode takes every family with an adapter, answer those that answer)")
        p.add_argument("--store", type=_path, required=True, help="store directory")
        p.add_argument("--num-decomposed-layers", type=int, default=None,
                       help="DeFormer: override k, the lower layers that read the passage alone (default: the "
                            "checkpoint's)")
        p.add_argument("--max-passage-length", type=int, default=None,
                       help="families that read windows: window length in tokens, [SEP] included (encode default: "
                            "the checkpoint's recorded value, else the family's; `hf-readonce info` lists them)")
        p.add_argument("--doc-stride", type=int, default=None,
                       help="families that read windows: tokens shared by consecutive windows (encode default: the "
                            "checkpoint's, else the family's)")
        p.add_argument("--batch-size", type=_positive_int, default=32,
                       help="windows (encode) or features (answer) per batch (default 32)")
        p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
        p.add_argument("--compute-dtype", choices=COMPUTE_DTYPE_CHOICES, default="auto", help=compute_dtype_help)

    encode = command("encode", help="store the representations of a JSONL file's documents")
    model_options(encode)
    encode.add_argument("--documents", type=_path, required=True, help="JSONL file, one document per line")
    encode.add_argument("--max-document-length", type=int, default=None,
                        help="families that read whole documents: tokens read per document (default: the length the "
                             "checkpoint records, else the family's, as `hf-readonce info` lists them)")
    encode.add_argument("--text-field", default=None,
                        help="field holding the text (default: context, or document where no line has a context)")
    encode.add_argument("--id-field", default=None, help="field naming the document in reports (default: id)")
    encode.add_argument("--store-dtype", "--dtype", dest="store_dtype", type=_storage_dtype, default="fp16",
                        metavar=STORAGE_DTYPE_METAVAR, help="storage dtype of the states (default fp16)" + DTYPE_ALIAS)
    encode.add_argument("--shard-size-mb", type=float, default=64.0, help="shard size in MiB (default 64)")
    encode.add_argument("--repair", action="store_true",
                        help="verify first; drop corrupted documents (quarantining their shards) and recompute them")
    encode.add_argument("--strict", action="store_true", help="exit 1 if any input line was set aside")
    encode.add_argument("--group-by-length", action=argparse.BooleanOptionalAction, default=True,
                        help="read up to 50 batches of documents ahead (fewer once they hold 2^24 characters) and "
                             "encode them longest first, so a batch holds less padding; the same documents and "
                             "states are stored (default). --no-group-by-length encodes in input order, reading one "
                             "batch at a time: for documents that arrive slowly, e.g. through a pipe (Ctrl-C leaves "
                             "the documents read ahead and not yet encoded to a re-run)")
    if family_options:
        _family_options(encode, "encode")
    encode.set_defaults(func=cmd_encode)

    answer = command("answer", help="answer SQuAD-style questions from stored representations: "
                                    "extracted spans or generated answers, as the family does (`hf-readonce "
                                    "info`), EM/F1 beside the baselines when rows carry answers")
    model_options(answer)
    answer.add_argument("--questions", type=_path, required=True,
                        help="JSONL with id, question, context (answers optional)")
    answer.add_argument("--output", type=_path, required=True,
                        help="predictions JSONL (id, prediction_text); missing folders of its path are created "
                             "(and removed again if the command stops before writing it)")
    answer.add_argument("--max-question-length", type=_positive_int, default=None,
                        help="question tokens, [CLS] and [SEP] included (default: the checkpoint's, else 64)")
    answer.add_argument("--n-best-size", type=_positive_int, default=None,
                        help="start and end candidates per window (default 20)")
    answer.add_argument("--max-answer-length", type=_positive_int, default=30,
                        help="longest answer in tokens (default 30; generative models: new tokens generated at "
                             "most)")
    answer.add_argument("--allow-no-answer", action=argparse.BooleanOptionalAction, default=None,
                        help="SQuAD 2.0: answer '' when the no-answer score beats every span by the threshold. "
                             "Default: on for checkpoints trained with unanswerable questions (recorded in their "
                             "config), off otherwise; pass it for SQuAD 2.0-style data, --no-allow-no-answer to "
                             "always extract a span")
    answer.add_argument("--null-score-diff-threshold", type=float, default=None,
                        help="no-answer margin in logits (default: the checkpoint's tuned value, else 0)")
    answer.add_argument("--encode-missing", action="store_true",
                        help="encode and store passages that are not stored (otherwise an error)")
    answer.add_argument("--store-dtype", "--dtype", dest="store_dtype", type=_storage_dtype, default=None,
                        metavar=STORAGE_DTYPE_METAVAR,
                        help="with --encode-missing: storage dtype (default fp16)" + DTYPE_ALIAS)
    answer.add_argument("--max-document-length", type=int, default=None,
                        help="families that read whole documents: the stored document length to read (default: the "
                             "store's only one for the model; of several, the one `encode` writes by default, and "
                             "where none is, an error names them)")
    answer.add_argument("--recompute-ratio", type=float, default=None,
                        help="causal LMs: fraction of passage tokens whose keys and values are recomputed per layer "
                             "before the question is read (selective recompute, CacheBlend), in [0, 1]; 0 (default): "
                             "the stored caches as they are, 1: the full prompt. The store is only read")
    if family_options:
        _family_options(answer, "answer")
    answer.set_defaults(func=cmd_answer)

    summarize = command("summarize", help="summarize a JSONL file's documents from their stored "
                                          "representations (ROUGE beside lead-1 and lead-3 when they carry "
                                          "reference summaries)")
    summarize.add_argument("model", type=_path,
                           help="a checkpoint folder or Hub id of a family that summarizes from stored "
                                "representations (`hf-readonce info` lists them)")
    summarize.add_argument("--store", type=_path, required=True,
                           help="store directory (`hf-readonce encode` fills it)")
    summarize.add_argument("--documents", type=_path, required=True, help="JSONL file, one document per line")
    summarize.add_argument("--output", type=_path, required=True,
                           help="summaries JSONL (id, summary_text); missing folders of its path are created "
                                "(and removed again if the command stops before writing it)")
    summarize.add_argument("--text-field", default="document", help="field holding the text (default: document)")
    summarize.add_argument("--id-field", default=None, help="field naming the document (default: id)")
    summarize.add_argument("--summary-field", default=None,
                           help="field holding a reference summary: when every document has one, ROUGE-1/2/L is "
                                "printed beside lead-1 and lead-3 (default: summary)")
    summarize.add_argument("--prompt", default=None,
                           help="families that read a prompt with the document: the prompt, at most 32 tokens as "
                                "their pipeline reads it (default: the family's, e.g. 'summary')")
    summarize.add_argument("--max-new-tokens", type=_positive_int, default=60,
                           help="longest summary in tokens (default 60)")
    summarize.add_argument("--num-beams", type=_positive_int, default=1, help="beam search width (default 1: greedy)")
    summarize.add_argument("--batch-size", type=_positive_int, default=8, help="documents per generate() call "
                                                                               "(default 8)")
    summarize.add_argument("--max-document-length", type=int, default=None,
                           help="the stored document length to read (default: the store's only one for the model; of "
                                "several, the one `encode` writes by default, and where none is, an error names them)")
    summarize.add_argument("--encode-missing", action="store_true",
                           help="encode and store documents that are not stored (otherwise an error)")
    summarize.add_argument("--store-dtype", "--dtype", dest="store_dtype", type=_storage_dtype, default=None,
                           metavar=STORAGE_DTYPE_METAVAR,
                           help="with --encode-missing: storage dtype (default fp16)" + DTYPE_ALIAS)
    summarize.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    summarize.add_argument("--compute-dtype", choices=COMPUTE_DTYPE_CHOICES, default="auto", help=compute_dtype_help)
    if family_options:
        _family_options(summarize, "summarize")
    summarize.set_defaults(func=cmd_summarize)

    info = command("info", help="a store's documents, size on disk, and per representation space its "
                                "fingerprint, settings and the model that wrote it; without --store, the registered "
                                "model families and what each command does with them; with MODEL, the fingerprint "
                                "and settings encode keys its representations by, and with --store also whether the "
                                "store holds them")
    info.add_argument("model", type=_path, nargs="?", default=None,
                      help="a checkpoint folder, Hub id or shipped checkpoint name: print the store key `encode` "
                           "would write its representations under (model_type, fingerprint per compute dtype, "
                           "settings); the fingerprint hashes the weights, so they are loaded (on the CPU; no "
                           "document is read)")
    info.add_argument("--store", type=_path, default=None,
                      help="the store to describe (default: list the model families); with "
                           "MODEL, which of its spaces hold that model's representations "
                           "(exit 1 when none does) and what differs in the others")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.add_argument("--compute-dtype", choices=COMPUTE_DTYPE_CHOICES, default="auto",
                      help="with MODEL: the compute dtype of the encode to key (default auto: the keys of an encode "
                           "on a CPU, float32, and on CUDA, the checkpoint's dtype, where they differ)")
    info.add_argument("--num-decomposed-layers", type=int, default=None,
                      help="with MODEL: the k of a checkpoint whose config has num_decomposed_layers, as encode takes "
                           "it (default: the checkpoint's)")
    info.add_argument("--max-passage-length", type=int, default=None,
                      help="with MODEL: families that read windows: window length, as encode takes it (default: the "
                           "checkpoint's recorded value, else the family's)")
    info.add_argument("--doc-stride", type=int, default=None,
                      help="with MODEL: families that read windows: window overlap, as encode takes it (default: the "
                           "checkpoint's, else the family's)")
    info.add_argument("--max-document-length", type=int, default=None,
                      help="with MODEL: families that read whole documents: tokens read per document, as encode "
                           "takes it (default: the length the checkpoint records, else the family's)")
    if family_options:
        _family_options(info, "info")
    info.set_defaults(func=cmd_info)

    verify = command("verify", help="check every checksum and every index field; exit 1 naming corrupted "
                                    "shards, manifests and documents; "
                                    "with --recompute N --model M, recompute N documents and compare")
    verify.add_argument("--store", type=_path, required=True, help="store directory")
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.add_argument("--recompute", type=int, default=None, metavar="N",
                        help="also recompute N stored documents per representation space of --model (the first N by "
                             "content hash) and report the largest |stored - fresh| and the KL(fresh || stored) of "
                             "the model's output distribution (next token for causal LMs; answer start/end for QA "
                             "encoders; first decoder token for BART families)")
    verify.add_argument("--model", type=_path, action="append", default=None,
                        help="with --recompute: the checkpoint that wrote the store (repeat for several models)")
    verify.add_argument("--documents", type=_path, default=None,
                        help="with --recompute: JSONL of the documents' texts (needed for families whose stored "
                             "tensors keep no tokens; used for every family for the documents it holds, and a "
                             "note names a space it was not read for)")
    verify.add_argument("--text-field", default=None, help="field of --documents holding the text (default: "
                                                            "context, or document where no line has a context)")
    verify.add_argument("--max-kl", type=float, default=None,
                        help="with --recompute: exit 1 if a document's KL is above this (nats)")
    verify.add_argument("--max-diff", type=float, default=None,
                        help="with --recompute: exit 1 if a document's largest |stored - fresh| is above this (in the "
                             "states' own units; an fp16 store rounds at about 1e-3 of their size)")
    verify.add_argument("--device", default="auto", help="with --recompute: cpu, cuda, ... (default: cuda if "
                                                         "available)")
    verify.add_argument("--compute-dtype", choices=COMPUTE_DTYPE_CHOICES, default="auto",
                        help="with --recompute: " + compute_dtype_help)
    verify.set_defaults(func=cmd_verify)

    prune = command("prune", help="delete the representation spaces a store no longer needs (e.g. an old "
                                  "model's), and with --quarantine the damaged files repair set aside")
    prune.add_argument("--store", type=_path, required=True, help="store directory")
    prune.add_argument("--space", action="append", default=[], metavar="KEY",
                       help="a space to delete, as `hf-readonce info --store DIR` prints it (its first 16 "
                            "characters; any prefix of 4 or more that names one space); repeatable")
    prune.add_argument("--quarantine", action="store_true", help="also delete quarantine/ (the files `encode "
                                                                 "--repair` moved aside; never read again)")
    prune.add_argument("--dry-run", action="store_true", help="print what would be deleted and delete nothing")
    prune.add_argument("--json", action="store_true", help="machine-readable output")
    prune.set_defaults(func=cmd_prune)

    publish = command("publish", help="assemble a Hub repo (weights, code, pipeline, tokenizer, model card) "
                                      "and write it to --local-dir or upload it")
    publish.add_argument("model_dir", type=_path,
                         help="a saved hf-readonce checkpoint folder, with its tokenizer, or the name of "
                              "a shipped hf-readonce checkpoint (reference-deformer; reference-qa is a "
                              "plain BERT: load it as a family's model and save it first)")
    publish.add_argument("--repo-id", required=True, help="OWNER/NAME of the model repo")
    publish.add_argument("--local-dir", type=_path, default=None,
                         help="write the repo folder here (new or empty) and stop; "
                              "nothing is uploaded")
    publish.add_argument("--private", action="store_true", help="create the repo(s) private")
    publish.add_argument("--store", type=_path, default=None,
                         help="a store of this model's representations: exported as a "
                              "dataset (beside --local-dir, or pushed) and linked from the card")
    publish.add_argument("--representations-repo", default=None,
                         help="dataset repo of the representations (default: REPO_ID-representations)")
    publish.add_argument("--store-dtype", "--dtype", dest="store_dtype", type=_storage_dtype, default=None,
                         metavar=STORAGE_DTYPE_METAVAR,
                         help="storage dtype to declare (default: the store's, else fp16)" + DTYPE_ALIAS)
    publish.add_argument("--metrics", type=_path, default=None,
                         help="the run's metrics JSON (eval_results.json of a QA run, "
                              "or a summarization run's results with ROUGE): fills the "
                              "card's model-index and results table, baselines beside; "
                              "needs --dataset-type")
    publish.add_argument("--dataset-type", default=None, help="Hub id of the evaluation data set of --metrics "
                                                              "(e.g. quoref, EdinburghNLP/xsum)")
    publish.add_argument("--dataset-name", default=None, help="its shown name")
    publish.add_argument("--dataset", action="append", default=None, help="training data set id (repeatable)")
    publish.add_argument("--base-model", default=None, help="Hub id of the model it was made from")
    publish.add_argument("--title", default=None, help="card heading")
    publish.add_argument("--summary", default=None, help="card's first paragraph")
    for name in _SETTING_OPTIONS:  # the representation format to declare, as encode's options give it
        publish.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None,
                             help=f"representation format: {name} to declare (default: the value the checkpoint "
                                  "records, else the family's; a --store must hold it)")
    if family_options:
        _family_options(publish, "publish")
    publish.set_defaults(func=cmd_publish)

    checkpoints = command("checkpoints", help="the checkpoints shipped with hf-readonce: the names MODEL "
                                              "accepts, and their folders")
    checkpoints.add_argument("--path", metavar="NAME", default=None,
                             help="print only this checkpoint's folder (e.g. `$(hf-readonce checkpoints --path "
                                  "reference-deformer)`); exit 2 if it is not found")
    checkpoints.set_defaults(func=cmd_checkpoints)
    return parser


# the commands that take the options of the families' own settings (`_family_options`)
_FAMILY_OPTION_COMMANDS = ("encode", "answer", "summarize", "publish", "info")


def _setting_type(adapter_class, name: str, default) -> type:
    """The type of a family setting's option: its default's, else `str` where the adapter's `__init__` annotates the
    setting as a string, else `int` (a length or a ratio)."""
    if default is not None:
        return type(default)
    annotation = inspect.signature(adapter_class.__init__).parameters.get(name)
    return str if annotation is not None and "str" in str(annotation.annotation) else int


def _family_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Add to `parser`, the parser of `command`, an option for every setting (`cli_settings`) of the adapters of the
    families that `command` serves (`answer`: those that answer; `summarize`: those that summarize; `encode`,
    `publish` and `info`: every family with an adapter) that it has no option for yet."""
    from . import register_models
    from .representations import registered_families

    register_models()
    serves = {"answer": lambda spec: spec.answer is not None, "summarize": lambda spec: spec.summarize}
    taken = set(parser.option_dests)
    adapters = [spec.adapter for spec in registered_families().values()
                if spec.adapter is not None and serves.get(command, lambda spec: True)(spec)]
    for adapter_class in adapters:
        for name, (option, default, text) in adapter_class.cli_settings.items():
            if option in taken:
                continue
            taken.add(option)
            if isinstance(default, bool):
                parser.add_argument(option, dest=name, action=argparse.BooleanOptionalAction, default=None,
                                    help=f"{adapter_class.model_type}: {text}")
            else:
                said = "" if default is None else f" (default {default})"
                parser.add_argument(option, dest=name, type=_setting_type(adapter_class, name, default),
                                    default=None, help=f"{adapter_class.model_type}: {text}{said}")


def _family_warnings_in_one_line():
    """Show each [`~hf_readonce.representations.FamilyEntryPointWarning`] (a family of another installed package
    that did not load) as one line, `hf-readonce: warning: ...`, instead of Python's two, which name a line of
    hf-readonce's code; every other warning as before.

    Returns:
        the `warnings.showwarning` it replaced (to put back).
    """
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        registry = sys.modules.get("hf_readonce.representations.registry")  # (no import: loaded by the warning)
        if registry is not None and issubclass(category, registry.FamilyEntryPointWarning):
            print(f"hf-readonce: warning: {message}", file=sys.stderr if file is None else file)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    return previous


def main(argv=None) -> int:
    """Entry point of the `hf-readonce` console script and of `python -m hf_readonce.cli`.

    Args:
        argv (`list[str]`, *optional*): arguments after the program name; defaults to `sys.argv[1:]`.

    Returns:
        `int`: the exit status (0 success, 1 problems found, 2 errors; see the module docstring).
    """
    previous = _family_warnings_in_one_line()
    try:
        return _main(argv)
    finally:
        warnings.showwarning = previous


def _main(argv) -> int:
    """[`main`], its family warnings shown in one line."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, typed, paths = None, {}, {}
    if argv and argv[0] == "demo":
        # the demo parses its own arguments, `--no-progress` included (it also turns off its own bars and Trainer's)
        demo_argv = argv[1:]
        command = "demo"
        restore = None

        def run() -> int:
            from . import register_models
            from .recipes.demo import main as demo_main

            register_models()
            demo_main(demo_argv)
            return EXIT_OK
    else:
        # `encode --help` (and answer, summarize) also lists the options of the families' own settings
        wanted = next((arg for arg in argv if not arg.startswith("-")), None)
        asks_help = wanted in _FAMILY_OPTION_COMMANDS and any(arg in ("-h", "--help") for arg in argv)
        parser = build_parser(family_options=asks_help)
        args, unknown = parser.parse_known_args(argv)
        if unknown and args.command in _FAMILY_OPTION_COMMANDS:  # perhaps the option of a family's own setting
            parser = build_parser(family_options=True)
            args, unknown = parser.parse_known_args(argv)
        if unknown:  # the command's own one-line usage error, naming the command
            parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
        command = args.command
        typed = _typed_options(parser, command, argv)
        paths = _path_arguments(parser, command, args)  # as given: a command may replace MODEL by its folder
        restore = silence_progress_bars() if getattr(args, "no_progress", False) else None

        def run() -> int:
            return args.func(args)
    stops: list[int] = []  # the signals that stopped the command (SIGINT, SIGTERM), in the order received
    previous_term = _terminate_as_interrupt(stops)  # (set, previous handler)
    previous_int = _record_interrupts(stops)
    previous_hook = _hide_dropped_stops(stops)  # (set, previous hook)
    try:
        status = run()
        if stops:  # the stop landed where Python drops it (a finalizer, `__del__`): the command went on to its end
            return _report_stop(command, args, stops)
        return status
    except KeyboardInterrupt as stop:
        print(f"hf-readonce {command}: interrupted{_interrupted(command, args)}", file=sys.stderr)
        return 143 if isinstance(stop, _Terminated) else 130
    except Exception as error:
        if stops:  # a Ctrl-C or SIGTERM that a library swallowed and turned into another error (an import it stopped
            # midway fails again as a `ModuleNotFoundError` or `RecursionError`): the command was stopped, not broken
            if isinstance(error, BrokenPipeError):  # the reader of stdout was stopped too (Ctrl-C stops a pipeline)
                _silence_stdout()
                return _report_stop(command, args, stops)
            return _report_stop(command, args, stops, error)
        if isinstance(error, CommandError):  # the library names a setting by its field: the user typed an option
            print(f"hf-readonce {command}: error: {_in_option_words(str(error), typed)}", file=sys.stderr)
            return error.status
        if isinstance(error, BrokenPipeError):  # the reader of stdout stopped (`hf-readonce info | head -1`): as
            _silence_stdout()  # `head` expects, quietly
            return EXIT_BROKEN_PIPE
        # the last line of defence: a user never sees a traceback
        if os.environ.get("HF_READONCE_TRACEBACK", "") not in ("", "0"):
            raise
        if _memory_exhausted(error):  # e.g. a --num-beams or --batch-size far beyond this machine's memory
            print(f"hf-readonce {command}: error: {_out_of_memory(error, args, typed)}", file=sys.stderr)
            return EXIT_ERROR
        if type(error) is PermissionError and error.filename:  # a folder or file of the user's without permission
            print(f"hf-readonce {command}: error: {_access_refused(error, paths)}", file=sys.stderr)
            return EXIT_ERROR
        print(f"hf-readonce {command}: error: {_one_line(error)} ({type(error).__name__}; unexpected here: set "
              "HF_READONCE_TRACEBACK=1 to see where, and please report it)", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if restore is not None:
            restore()
        if previous_term[0]:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous_term[1] is None else previous_term[1])
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        if previous_hook[0]:
            sys.unraisablehook = previous_hook[1]


def _typed_options(parser: _Parser, command: str, argv) -> dict[str, str]:
    """The options of `command` that `argv` gives, by destination: `{dest: option}`, e.g. `{"max_passage_length":
    "--max-passage-length"}` (also for `--option=value`; an abbreviation argparse accepted counts as the option it
    stands for; nothing after `--`). `parser` is [`build_parser`]'s: the options of each command are those its
    parser recorded (`OneLineArgumentParser.commands` and `option_dests`)."""
    strings = parser.commands[command].option_dests
    typed = {}
    for arg in argv:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if not name.startswith("--"):
            continue
        matches = [name] if name in strings else sorted(s for s in strings if s.startswith(name))
        if len({strings[s] for s in matches}) == 1:  # one option (an ambiguous abbreviation was refused)
            typed[strings[matches[0]]] = matches[0]
    return typed


def _in_option_words(message: str, typed: dict[str, str]) -> str:
    """`message` in the words of the command line: a setting the library's errors name by its field
    (`` `max_passage_length` must be in [2, 512] ``, `` `num_decomposed_layers` must be ... ``), when its option
    was given (`typed`, see [`_typed_options`]), is named by that option, `--max-passage-length` (spelled out where
    an abbreviation was typed; a `(--option)` the message already adds after the field is not repeated). A field
    whose value came from elsewhere (the checkpoint's config, a default) keeps its name."""
    import re

    for dest, option in typed.items():
        message = re.sub(rf"`{re.escape(dest)}`(?: \({re.escape(option)}\))?", option, message)
    return message


def _interrupted(command: str, args) -> str:
    """What follows `interrupted` in the line a stopped command prints (Ctrl-C, SIGTERM): what it leaves behind, as
    each command leaves it. `args` (`None` before the arguments were parsed, and for `demo`) carries what the
    command recorded on its way: `encode`'s `committed` (documents this run committed before the stop), `answer`'s and
    `summarize`'s `output_written` (the output file is in place), `publish`'s `published` (the folder is in place, or
    the upload committed)."""
    if command == "prune":
        return ("; if it had begun deleting, the space may be partly deleted (`verify` names the shards already "
                "gone): run the same prune again to finish.")
    if command == "encode":
        committed = getattr(args, "committed", None)
        counted = f" ({committed} document(s) encoded by this run)" if committed is not None else ""
        return f"; committed shards are kept{counted}, re-run to finish."
    if command in ("answer", "summarize") and args is not None:
        what = "predictions" if command == "answer" else "summaries"
        if getattr(args, "output_written", False):
            said = f"; the {what} were written to {args.output} before the stop"
        else:  # `_write_predictions` writes a temporary file and renames it into place; the temporary file is removed
            said = (f"; no {what} were written (--output {args.output} is as it was: it is replaced only once every "
                    f"{'question is answered' if command == 'answer' else 'document is summarized'})")
        if args.encode_missing:
            said += (f"; the {'passages' if command == 'answer' else 'documents'} --encode-missing encoded are in "
                     "committed shards of --store and kept, so a re-run encodes only the rest")
        return said + "."
    if command == "publish" and args is not None:
        if getattr(args, "published", False):
            return (f"; the repo folder was written to --local-dir {args.local_dir} before the stop." if args.local_dir
                    else f"; the model repo {args.repo_id} was uploaded before the stop.")
        if args.local_dir:  # `publish` assembles the folder beside it and renames it into place only once complete
            return (f"; nothing was written to --local-dir {args.local_dir} (the folder being assembled beside it "
                    "was removed).")
        return ("; nothing was committed to the model repo (its files are uploaded in one commit; the folder "
                "assembled for it was removed), but a repo already created, or representations already pushed to "
                "the dataset repo, stay on the Hub.")
    return "."


def _report_stop(command: str, args, stops: list[int], error: Exception | None = None) -> int:
    """Print the line of a command stopped by the signals in `stops` (non-empty, in the order received) whose
    `KeyboardInterrupt` did not reach [`main`]: Python dropped it (in a finalizer) or a library caught it. `error` is
    the exception the command failed with after the stop, if any: the line names it too (with its type), since it may
    be one of its own (a disk that filled up) rather than a consequence of the stop. Returns the exit status: 143
    where the first stop was SIGTERM, else 130."""
    line = f"hf-readonce {command}: interrupted{_interrupted(command, args)}"
    if error is not None:
        line += f" After the stop it failed: {_one_line(error)} ({type(error).__name__})."
    print(line, file=sys.stderr)
    return 143 if stops[0] == getattr(signal, "SIGTERM", None) else 130


class _Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, Slurm and Kubernetes send) raised where the command runs, so it stops as Ctrl-C
    stops it: the writer's `with` blocks exit, committed shards stay, the message says what the command left
    ([`_interrupted`])."""


def _terminate_as_interrupt(stops: list[int] | None = None) -> tuple[bool, object]:
    """Make SIGTERM raise [`_Terminated`] in the main thread, appending `signal.SIGTERM` to `stops` (when given)
    first. Returns `(set, previous handler)`: `set` is False where signals cannot be set (another thread, or a
    platform without SIGTERM), and where SIGTERM is ignored (`SIG_IGN`, as the parent process left it), which stays
    ignored; a previous handler of `None` (one not installed from Python) is restored as the default action."""
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return False, None
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        return False, None

    def terminate(signum, frame):
        if stops is not None:
            stops.append(signum)
        raise _Terminated()

    return True, signal.signal(signal.SIGTERM, terminate)


def _record_interrupts(stops: list[int]):
    """Make Ctrl-C (SIGINT) append `signal.SIGINT` to `stops` before it raises `KeyboardInterrupt` as Python's own
    handler does, so that [`main`] knows the command was stopped also where a library catches that exception and
    fails otherwise. Only in the main thread, and only where Python's own handler is in place (a SIGINT ignored, as
    in a background job of a shell, stays ignored). Returns the previous handler, to restore, or `None` where nothing
    was set."""
    import threading

    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return None

    def interrupt(signum, frame):
        stops.append(signum)
        raise KeyboardInterrupt

    return signal.signal(signal.SIGINT, interrupt)


def _hide_dropped_stops(stops: list[int]) -> tuple[bool, object]:
    """Set `sys.unraisablehook` so that the `KeyboardInterrupt` of a Ctrl-C or SIGTERM recorded in `stops` that lands
    in a finalizer (an object's `__del__`, where Python drops the exception and prints `Exception ignored in ...` with
    a traceback) prints nothing: [`main`] reports the stop in its one line. Every other unraisable exception goes to
    the hook that was in place. Only in the main thread, the one signal handlers run in, so that commands run at once
    in other threads never swap the process's hook under each other. Returns `(set, previous hook)`: `set` is False
    where nothing was set (another thread); else the previous hook is to be restored."""
    import threading

    previous = sys.unraisablehook
    if threading.current_thread() is not threading.main_thread():
        return False, previous

    def hook(unraisable) -> None:
        if stops and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        previous(unraisable)

    sys.unraisablehook = hook
    return True, previous


def _silence_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of output nobody reads any more cannot
    raise `BrokenPipeError` again at exit (the recipe of Python's `signal` documentation, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (a test's StringIO)
        pass


if __name__ == "__main__":
    sys.exit(main())
