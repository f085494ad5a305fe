"""Publish an hf-readonce checkpoint to the Hugging Face Hub (or to a local folder laid out as a Hub repo).

[`publish`] assembles exactly what the repo needs: safetensors weights, `config.json` with `auto_map` (and
`custom_pipelines` where the family has a pipeline), the model's code files (and the pipeline's), the tokenizer
files, `generation_config.json` where the model generates, `representation_format.json` where the family stores
representations, and `README.md`, a model card built from the run's metrics file. With `local_dir` it writes the
folder and stops; otherwise it creates the repo and uploads the folder in one commit (`HfApi.create_repo`,
`HfApi.upload_folder`). With `store` it also exports the stored representations of this model as a dataset
(`export_to_dataset`), writes it beside the folder or pushes it to a dataset repo, and links it from the card.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..dtypes import takes_store_dtype

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")

FINGERPRINT_SCHEME = "{model_type}.representation_fingerprint/sha256-v1"


@dataclass
class PublishResult:
    """What [`publish`] did.

    Attributes:
        folder (`Path`): the assembled repo folder (`local_dir`, or a temporary folder removed after the upload).
        files (`list[str]`): its files, relative, sorted.
        repo_id (`str`): the model repo. repo_url (`str`, *optional*): as returned by `create_repo` (uploads only).
        commit_url (`str`, *optional*): the upload's commit (uploads only).
        representations_repo (`str`, *optional*): the dataset repo id of the exported representations.
        representations_dir (`Path`, *optional*): where they were written (with `local_dir`).
        representation_format (`dict`, *optional*): the `representation_format.json` written.
    """

    folder: Path
    files: list = field(default_factory=list)
    repo_id: str = ""
    repo_url: str | None = None
    commit_url: str | None = None
    representations_repo: str | None = None
    representations_dir: Path | None = None
    representation_format: dict | None = None


def check_repo_id(repo_id, name: str = "repo_id") -> str:
    """Return `repo_id` if it is `owner/name` as the Hub spells ids.

    Raises:
        TypeError: not a str. ValueError: not `owner/name` (naming the argument).
    """
    if not isinstance(repo_id, str):
        raise TypeError(f"`{name}` must be a str 'owner/name', got {type(repo_id).__name__}.")
    if not _REPO_ID.match(repo_id) or ".." in repo_id or repo_id.endswith((".git", ".")):
        raise ValueError(f"`{name}` must be 'owner/name' (letters, digits, '-', '_', '.'), got {repo_id!r}.")
    return repo_id


def _own_settings_hint(store, representation_format: Mapping) -> str:
    """Where `store` holds a space of the declared fingerprint that differs from the format only in the family's
    own settings (`cli_settings`: a window length chosen at encode time), the sentence that says how to publish it:
    declare those settings (`representation_settings=`, the same options as `encode` on the command line)."""
    from ..representations import get_adapter_class
    from ..store.format_check import declared_fingerprints, differing_settings

    try:
        own = get_adapter_class(representation_format["model_type"]).cli_settings
    except (KeyError, ValueError):
        return ""
    declared, wanted = declared_fingerprints(representation_format), representation_format["settings"]
    for space in store.spaces():
        differing = differing_settings(space.settings, wanted)
        if space.fingerprint in declared and differing and set(differing) <= set(own):
            given = {name: space.settings.get(name) for name in differing}
            options = " ".join(f"{own[name][0]} {value}" for name, value in given.items())
            return (f" Or publish what it holds: this checkpoint's representations with {given}, declared with "
                    f"`representation_settings={given}` (on the command line `{options}`) or recorded in the "
                    "checkpoint's config.")
    return ""


@takes_store_dtype
def representation_format_for(model, tokenizer, *, store_dtype: str = "float16",
                              settings: Mapping | None = None) -> dict | None:
    """The representation format of `model` (see `hf_readonce.store.format_check`): its family's adapter settings
    (k or compression ratio, window and stride or document length, tokenizer fingerprint) with the checkpoint's
    recorded values as defaults (as `hf-readonce encode` uses them), its fingerprint, the fingerprint scheme, the
    storage dtype (`store_dtype`, declared as the format's `dtype` field) and the store format version. `None` for
    models that store no representations: those of a family without an adapter, and those whose adapter says they have
    none to store (`stores_representations`, e.g. a ReadTwice checkpoint that reads the question in its first read).

    Args:
        model, tokenizer: the checkpoint's model and fast tokenizer.
        store_dtype (`str`, defaults to `"float16"`): storage dtype of the representations (fp32, fp16, bf16).
        settings (`Mapping`, *optional*): adapter settings that override the checkpoint's recorded ones (e.g.
            `{"max_passage_length": 128, "doc_stride": 32}`).

    Raises:
        ValueError: settings the adapter rejects (naming them); a `store_dtype` that is not a floating dtype name.
        TypeError: a `dtype=` keyword (the storage dtype is `store_dtype`).
    """
    from ..representations import get_adapter_class, registered_adapters
    from ..store import FORMAT_VERSION
    from ..store.format_check import REPRESENTATION_FORMAT_NAME, REPRESENTATION_FORMAT_VERSION
    from ..store.shards import FORMAT_NAME, resolve_dtype

    model_type = model.config.model_type
    if model_type not in registered_adapters():
        if settings:
            raise ValueError(f"`settings` {sorted(settings)} do not apply: {model_type} models store no "
                             "representations.")
        return None
    adapter_class = get_adapter_class(model_type)
    stores = getattr(adapter_class, "stores_representations", None)  # an adapter need not inherit AdapterBase
    if stores is not None and not stores(model):
        if settings:
            raise ValueError(f"`settings` {sorted(settings)} do not apply: this {model_type} model stores no "
                             "representations.")
        return None
    chosen = {}
    for name, (_, default, _) in adapter_class.cli_settings.items():
        recorded = getattr(model.config, name, None)
        chosen[name] = recorded if recorded is not None else default  # a recorded 0 (a doc_stride) counts
    unknown = sorted(set(settings or {}) - set(chosen))
    if unknown:
        raise ValueError(f"`settings` {unknown} do not apply to {model_type} models; they take {sorted(chosen)}.")
    chosen.update(settings or {})
    try:
        adapter = adapter_class(model, tokenizer, **chosen)
    except (ValueError, TypeError) as error:
        raise ValueError(f"cannot declare the representation format of this {model_type} model with settings "
                         f"{chosen}: {error} Record the settings in its config.json (as training does) or pass "
                         "`representation_settings`.") from None
    dtype_name = str(resolve_dtype(store_dtype, "store_dtype")).removeprefix("torch.")
    return {
        "format": REPRESENTATION_FORMAT_NAME,
        "format_version": REPRESENTATION_FORMAT_VERSION,
        "model_type": model_type,
        "representation": adapter.settings().get("representation"),
        "fingerprint_scheme": FINGERPRINT_SCHEME.format(model_type=model_type),
        "fingerprint": adapter.fingerprint(),
        "settings": adapter.settings(),
        "dtype": dtype_name,
        "model_dtype": str(model.dtype).removeprefix("torch."),
        "store_format": FORMAT_NAME,
        "store_format_version": FORMAT_VERSION,
    }


def _saved_model_type(model_dir: Path):
    """The `model_type` recorded in `model_dir/config.json`, or None where it cannot be read."""
    try:
        return json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def _check_code_travels(model) -> None:
    """Raise unless `save_pretrained` writes `model`'s code files and `auto_map` (its config class and its own class
    called `register_for_auto_class`), which a published checkpoint needs to load with `trust_remote_code=True`.

    Raises:
        ValueError: naming the classes that did not, and the lines that make them do it.
    """
    classes = (type(model.config), type(model))
    lacking = [cls for cls in classes if getattr(cls, "_auto_class", None) is None]
    if lacking:
        from ..representations import family_of

        head = family_of(model.config.model_type).auto_class
        lines = [f"{cls.__name__}.register_for_auto_class({'' if cls is classes[0] else repr(head)})" for cls in lacking]
        raise ValueError(f"{', '.join(cls.__name__ for cls in lacking)} never called `register_for_auto_class`, so "
                         "`save_pretrained` writes neither their code files nor `auto_map` and the published "
                         "checkpoint would not load with `trust_remote_code=True`: end the family's modeling file with "
                         f"{'; '.join(f'`{line}`' for line in lines)}.")


def _load(model_dir: Path):
    import transformers
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoTokenizer

    from .. import register_models
    from ..representations import registered_families
    from ..weights import load_quietly

    register_models()
    known = sorted(t for s in registered_families().values() for t in s.model_types)
    try:
        # never the custom code a folder carries (nor transformers' prompt to run it): a family is an installed one
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    except (OSError, ValueError, StrictDataclassError) as error:  # the last: a field of the wrong type
        from transformers import CONFIG_MAPPING

        from ..representations.registry import entry_point_failures_note

        saved_type = _saved_model_type(model_dir)
        if isinstance(saved_type, str) and saved_type and saved_type not in CONFIG_MAPPING:
            failed = entry_point_failures_note()
            raise ValueError(f"`model_dir` {str(model_dir)!r} holds a {saved_type!r} model, which no installed "
                             f"hf-readonce family registers; publish takes hf-readonce models: {known} (a family of "
                             "another package is registered by installing that package: its `hf_readonce.families` "
                             f"entry point){failed}.") from None
        raise ValueError(f"`model_dir` {str(model_dir)!r} is not a loadable checkpoint: "
                         f"{' '.join(str(error).split())}") from None
    spec = next((s for s in registered_families().values() if config.model_type in s.model_types), None)
    if spec is None:
        loaders: dict[str, list[str]] = {}
        for s in registered_families().values():
            for t in s.checkpoint_model_types:
                if t not in s.model_types:
                    loaders.setdefault(t, []).append(s.model_types[0])
        hint = (f" (load a {config.model_type} checkpoint as a {' or '.join(sorted(loaders[config.model_type]))} "
                "model and save it first)" if config.model_type in loaders else "")
        raise ValueError(f"`model_dir` {str(model_dir)!r} holds a {config.model_type!r} model; publish takes "
                         f"hf-readonce models: {known}{hint}.")
    try:
        model = load_quietly(getattr(transformers, spec.auto_class).from_pretrained, model_dir, dtype="auto").eval()
    except OSError as error:  # no weights file, or one that cannot be read: the folder's problem, not the output's
        reason = " ".join(str(error).split()).rstrip(".")
        raise ValueError(f"`model_dir` {str(model_dir)!r} has no loadable weights ({reason}); a published model needs "
                         "config.json and its weights (model.safetensors) as `save_pretrained` writes them.") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, TypeError) as error:
        reason = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        raise ValueError(f"`model_dir` {str(model_dir)!r} has no loadable tokenizer ({reason.rstrip('.')}); a "
                         "published model needs one: save the tokenizer next to the weights.") from None
    return model, tokenizer


def _declare_every_head(folder: Path, heads: dict) -> None:
    """Add to the saved `config.json`'s `auto_map` every Auto class of the family's model type whose class is in a
    code file of the folder (`save_pretrained` declares only the saved class's own), so that
    `AutoModel.from_pretrained(repo, trust_remote_code=True)` loads the bare model of a checkpoint published from a
    task head, as it does for transformers' own architectures."""
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    auto_map = config.setdefault("auto_map", {})
    for head, cls in heads.items():
        module = cls.__module__.rsplit(".", 1)[-1]
        if head not in auto_map and (folder / f"{module}.py").is_file():
            auto_map[head] = f"{module}.{cls.__name__}"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _model_computing_like(store, model, model_dir: Path):
    """`model`, or the checkpoint loaded to compute in the dtype whose fingerprint the store holds: the compute
    dtype is part of a representation's fingerprint, and `hf-readonce encode` computes in float32 on a CPU whatever
    dtype the checkpoint is saved in (`hf_readonce.dtypes`), so the declared format must be that dtype's to match
    the published representations. The weights published are `model`'s either way."""
    import transformers

    from ..dtypes import compute_dtype_hint
    from ..representations import family_of
    from ..weights import load_quietly

    auto_class = getattr(transformers, family_of(model.config.model_type).auto_class)

    loaded = {}

    def load(dtype):
        loaded[dtype] = load_quietly(auto_class.from_pretrained, model_dir, dtype=dtype).eval()
        return loaded[dtype]

    fingerprints = {space.fingerprint for space in store.spaces()}
    if not hasattr(model, "representation_fingerprint") or model.representation_fingerprint() in fingerprints:
        return model
    found = compute_dtype_hint(model, fingerprints, load=load)
    return loaded[found] if found is not None else model


def _fingerprints_per_compute_dtype(model_dir: Path, model, format_model, tokenizer, settings) -> dict[str, str]:
    """Compute dtype -> representation fingerprint, for the dtypes `--compute-dtype auto` picks: float32 (on a CPU)
    and the checkpoint's saved dtype (on CUDA), and `format_model`'s own. A store encoded with the checkpoint on either
    device then fits the published format (it declared the saved dtype's alone, which no CPU store matched)."""
    import transformers

    from ..representations import family_of
    from ..weights import load_quietly

    def fingerprint(loaded) -> str:
        return representation_format_for(loaded, tokenizer, settings=settings)["fingerprint"]

    out = {str(format_model.dtype).removeprefix("torch."): fingerprint(format_model)}
    auto_class = getattr(transformers, family_of(model.config.model_type).auto_class)
    for dtype in ("float32", str(model.dtype).removeprefix("torch.")):
        if dtype not in out:
            loaded = model if str(model.dtype).removeprefix("torch.") == dtype else load_quietly(
                auto_class.from_pretrained, model_dir, dtype=dtype).eval()
            out[dtype] = fingerprint(loaded)
    return out


def _read_metrics_card(metrics, model, repo_id, representation_format, representations_repo, card):
    from ..representations import registered_cards
    from .cards import build_model_card, card_from_metrics_file

    model_type = model.config.model_type
    method = registered_cards()[model_type].title
    base = {"repo_id": repo_id, "model_type": model_type,
            "title": f"{repo_id.split('/')[1]} ({method}, hf-readonce)",
            "summary": f"A `{type(model).__name__}` ({method}) published with hf-readonce.",
            "representation_format": representation_format, "representations_repo": representations_repo}
    base.update(card or {})
    if metrics is None:
        given = [name for name in ("dataset_type", "dataset_name", "prefix") if name in base]
        if given:
            raise ValueError(f"card fields {given} describe the evaluation in a metrics file: pass `metrics` "
                             "(`--metrics FILE`) with them, or leave them out.")
        return build_model_card(**base)
    dataset_type = base.pop("dataset_type", None)
    dataset_name = base.pop("dataset_name", None)
    return card_from_metrics_file(metrics, dataset_type=dataset_type, dataset_name=dataset_name,
                                  prefix=base.pop("prefix", None), **base)


@takes_store_dtype
def publish(model_dir, repo_id: str, *, local_dir=None, private: bool = False, store=None, metrics=None,
            card: Mapping | None = None, representations_repo: str | None = None, store_dtype: str | None = None,
            representation_settings: Mapping | None = None,
            commit_message: str = "Upload hf-readonce model", token: str | None = None, api=None) -> PublishResult:
    """Assemble a Hub repo folder for the checkpoint in `model_dir` and write it to `local_dir` or upload it.

    Args:
        model_dir (`str` or `os.PathLike`): a saved checkpoint of a registered hf-readonce family (any model type
            of `hf_readonce.representations.registered_families()`) with its tokenizer.
        repo_id (`str`): `owner/name` of the model repo.
        local_dir (`str` or `os.PathLike`, *optional*): write the folder here (new or empty) and stop: nothing is
            uploaded. With `store`, the representations go to `<local_dir>-representations/` (new or empty too) as
            Parquet + a dataset card. Both are written into temporary folders beside them and renamed into place
            once complete, so a failure leaves neither half-written.
        private (`bool`, defaults to `False`): create the repo(s) private.
        store (`str`, `os.PathLike` or [`RepresentationStore`], *optional*): a store holding representations of this
            model; they are checked against the model's representation format, exported with `export_to_dataset`
            and linked from the card.
        metrics (`str` or `os.PathLike`, *optional*): the run's metrics JSON (see
            [`hf_readonce.hub.cards.card_from_metrics_file`]); its results fill the card's model-index.
        card (`Mapping`, *optional*): extra [`build_model_card`] arguments (`title`, `summary`, `base_model`,
            `datasets`, `training`, `limitations`, `dataset_type`, `dataset_name`, `prefix`, ...).
        representations_repo (`str`, *optional*): dataset repo id; defaults to `<repo_id>-representations`.
        store_dtype (`str`, *optional*): the representations' storage dtype to declare; defaults to the store's, else
            `"float16"` (the default of `hf-readonce encode`).
        representation_settings (`Mapping`, *optional*): adapter settings overriding the checkpoint's recorded
            ones (see [`representation_format_for`]).
        commit_message (`str`): the upload's commit message. token (`str`, *optional*): Hub token for `HfApi`.
        api (`huggingface_hub.HfApi`, *optional*): the client to use (tests pass a mock); a new `HfApi(token=token)`
            otherwise.

    Returns:
        [`PublishResult`].

    Raises:
        ValueError: a bad `repo_id`, a `model_dir` that is not an hf-readonce checkpoint or lacks its weights or a
            tokenizer, a model whose config or model class never called `register_for_auto_class` (its code would
            not travel), a non-empty `local_dir` (or, with `store`, a non-empty `<local_dir>-representations/`), a store without this model's representations (`RepresentationMismatchError`, a
            `ValueError`, naming what differs), a `metrics` path that is a directory.
        TypeError: arguments of the wrong type (naming them); a `dtype=` keyword (the storage dtype is
            `store_dtype`).
        FileNotFoundError: a missing `model_dir`, `metrics` file or store.
    """
    check_repo_id(repo_id)
    if representations_repo is not None:
        check_repo_id(representations_repo, "representations_repo")
    if not isinstance(model_dir, (str, os.PathLike)):
        raise TypeError(f"`model_dir` must be a path, got {type(model_dir).__name__}.")
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"`model_dir` {str(model_dir)!r} has no config.json: not a saved checkpoint.")
    if metrics is not None and Path(metrics).is_dir():
        raise ValueError(f"`metrics` {str(metrics)!r} is a directory; pass the metrics JSON file itself (e.g. "
                         "its eval_results.json).")
    if metrics is not None and not Path(metrics).is_file():
        raise FileNotFoundError(f"`metrics` file {str(metrics)!r} does not exist.")
    if card is not None and not isinstance(card, Mapping):
        raise TypeError(f"`card` must be a mapping of build_model_card arguments, got {type(card).__name__}.")
    if local_dir is not None:
        if not isinstance(local_dir, (str, os.PathLike)):
            raise TypeError(f"`local_dir` must be a path, got {type(local_dir).__name__}.")
        local_dir = Path(local_dir).expanduser().absolute()
        if not _is_new_or_empty(local_dir):
            raise ValueError(f"`local_dir` {str(local_dir)!r} exists and is not an empty directory; pass a new one.")
        if store is not None and not _is_new_or_empty(_representations_dir(local_dir)):
            raise ValueError(f"the representations folder {str(_representations_dir(local_dir))!r} beside `local_dir` "
                             "exists and is not empty; publish never overwrites it: move it away or pass another "
                             "`local_dir`.")
    store_obj = None
    if store is not None:
        from ..store import RepresentationStore

        store_obj = store if isinstance(store, RepresentationStore) else RepresentationStore(
            store, create=False, readonly=True)

    model, tokenizer = _load(model_dir)
    _check_code_travels(model)
    format_model = _model_computing_like(store_obj, model, model_dir) if store_obj is not None else model
    representation_format = representation_format_for(format_model, tokenizer,
                                                      store_dtype=store_dtype or "float16",
                                                      settings=representation_settings)
    if representation_format is not None:
        representation_format["fingerprints"] = _fingerprints_per_compute_dtype(
            model_dir, model, format_model, tokenizer, representation_settings)
    space = None
    if store_obj is not None:
        if representation_format is None:
            raise ValueError(f"`store` given, but this {model.config.model_type} model stores no representations.")
        from ..store import RepresentationMismatchError
        from ..store.format_check import check_store_format
        from ..store.keys import space_key

        key = space_key(representation_format["fingerprint"], representation_format["settings"])
        if store_dtype is None:  # declare the dtype the store holds (checked below, like every other field)
            dtypes = {info.get("dtype") for entry in store_obj.entries() if entry.space == key
                      for info in entry.tensors.values()} & {"float32", "float16", "bfloat16"}
            if len(dtypes) == 1:
                representation_format["dtype"] = dtypes.pop()
        try:
            space = check_store_format(store_obj, representation_format)
        except RepresentationMismatchError as error:
            raise RepresentationMismatchError(f"{error}{_own_settings_hint(store_obj, representation_format)}") \
                from None
        representations_repo = representations_repo or f"{repo_id}-representations"

    # Everything is written into temporary folders first (beside `local_dir`, so that renaming them into place is
    # atomic), and renamed into place only once complete: a failure (a corrupted store, a full disk) leaves nothing
    # half-written.
    created_parents = []
    if local_dir is not None:
        created_parents = [p for p in reversed(local_dir.parents) if not p.exists()]
        local_dir.parent.mkdir(parents=True, exist_ok=True)
        cleanup = _Staging(local_dir.parent, local_dir.name)
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="hf-readonce-publish-")
    folder = Path(cleanup.name)
    _honour_umask(folder)
    staged_representations = None
    try:
        from ..representations import family_of

        spec = family_of(model.config.model_type)
        if spec.pipelines:
            import shutil
            import sys

            for pipeline_class in spec.pipelines.values():
                pipeline_class(model=model, tokenizer=tokenizer)  # the pipelines accept this model
            # what `Pipeline.save_pretrained` writes, for every pipeline of the family (it writes only its own task)
            model.config.custom_pipelines = {
                task: {"impl": f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}", "pt": [spec.auto_class],
                       "type": "text"} for task, cls in spec.pipelines.items()}
            for module in dict.fromkeys(cls.__module__ for cls in spec.pipelines.values()):
                path = Path(sys.modules[module].__file__)
                shutil.copy(path, folder / path.name)
        model.save_pretrained(folder)  # config (auto_map), code files, safetensors; generation_config if it generates
        _declare_every_head(folder, spec.model_classes(model.config.model_type))
        tokenizer.save_pretrained(folder)
        _drop_local_settings(folder / "tokenizer_config.json")
        if representation_format is not None:
            (folder / "representation_format.json").write_text(json.dumps(representation_format, indent=2) + "\n")
        model_card = _read_metrics_card(metrics, model, repo_id, representation_format, representations_repo, card)
        model_card.save(str(folder / "README.md"))
        _honour_umask_files(folder)
        result = PublishResult(folder=folder, repo_id=repo_id, representations_repo=representations_repo,
                               representation_format=representation_format)
        if store_obj is not None:
            from ..store import export_to_dataset

            dataset = export_to_dataset(store_obj, space.fingerprint, space.settings)
            if local_dir is not None:
                staged_representations = _Staging(local_dir.parent, _representations_dir(local_dir).name)
                target = Path(staged_representations.name)
                _honour_umask(target)
                (target / "data").mkdir(parents=True, exist_ok=True)
                dataset.to_parquet(str(target / "data" / "train-00000-of-00001.parquet"))
                (target / "README.md").write_text(_dataset_card(repo_id, representations_repo, representation_format,
                                                                len(dataset)))
                result.representations_dir = _representations_dir(local_dir)
            else:
                dataset.push_to_hub(representations_repo, private=private, token=token,
                                    commit_message=f"Representations of {repo_id}")
        result.files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if local_dir is not None:
            # into place: the representations first, then the repo folder (undone if the second rename fails)
            if staged_representations is not None:
                staged_representations.move_to(_representations_dir(local_dir))
            try:
                cleanup.move_to(local_dir)
            except BaseException:
                if staged_representations is not None:
                    staged_representations.move_back()
                raise
            result.folder = local_dir
        if local_dir is None:
            if api is None:
                from huggingface_hub import HfApi

                api = HfApi(token=token)
            result.repo_url = str(api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model"))
            commit = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                                       commit_message=commit_message)
            result.commit_url = str(getattr(commit, "commit_url", commit))
        return result
    except BaseException:
        cleanup.cleanup()
        if staged_representations is not None:
            staged_representations.cleanup()
        for parent in reversed(created_parents):  # folders this call made for `local_dir`, if still empty
            try:
                parent.rmdir()
            except OSError:
                break
        raise
    finally:
        cleanup.cleanup()
        if staged_representations is not None:
            staged_representations.cleanup()


def _is_new_or_empty(path: Path) -> bool:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        return False
    return not path.exists() or not any(path.iterdir())


def _representations_dir(local_dir: Path) -> Path:
    """Where `publish(..., local_dir=..., store=...)` writes the exported representations: beside `local_dir`."""
    return local_dir.parent / f"{local_dir.name}-representations"


def _honour_umask(folder: Path) -> None:
    """Give a folder made by `tempfile` (mode 0o700) the mode a plain `mkdir` would have (0o777 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)


def _honour_umask_files(folder: Path) -> None:
    """Give every file of `folder` the mode a plain `open` would (0o666 less the umask): `save_pretrained` writes
    the weights through a temporary file of mode 0o600, which a Hub repo folder or a shared disk must not keep."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~umask)


def _drop_local_settings(path: Path) -> None:
    """Remove from a saved `tokenizer_config.json` what describes this machine's loading, not the tokenizer
    (`local_files_only`, written as true when publishing with `HF_HUB_OFFLINE=1`, would make every user's load
    offline)."""
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.pop("local_files_only", None) is not None:
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


class _Staging:
    """A temporary folder beside `name` in `parent`, renamed to its destination once complete ([`move_to`]);
    [`cleanup`] removes it unless it was moved. Only a new or empty destination is ever replaced."""

    def __init__(self, parent: Path, name: str):
        self.name = tempfile.mkdtemp(prefix=f".{name}.publish-", dir=parent)
        self.moved_to: Path | None = None

    def move_to(self, destination: Path) -> None:
        if destination.is_dir() and not destination.is_symlink():
            if any(destination.iterdir()):
                raise ValueError(f"{destination} is no longer empty; nothing was written into it.")
            destination.rmdir()
        os.replace(self.name, destination)
        self.moved_to = destination

    def move_back(self) -> None:
        if self.moved_to is not None:
            os.replace(self.moved_to, self.name)
            self.moved_to = None

    def cleanup(self) -> None:
        import shutil

        if self.moved_to is None:
            shutil.rmtree(self.name, ignore_errors=True)


def _dataset_card(repo_id: str, dataset_repo: str, representation_format: Mapping, rows: int) -> str:
    settings = {k: v for k, v in representation_format["settings"].items() if k != "tokenizer"}
    return (
        "---\nlicense: apache-2.0\ntags:\n- hf-readonce\n- representations\n---\n\n"
        f"# Stored representations of [{repo_id}](https://huggingface.co/{repo_id})\n\n"
        f"{rows} documents exported from an hf-readonce `RepresentationStore` with `export_to_dataset` "
        f"(`{representation_format['representation']}`, settings `{json.dumps(settings, sort_keys=True)}`, "
        f"dtype `{representation_format['dtype']}`, fingerprint `{representation_format['fingerprint'][:16]}...`). "
        "Import them into a store with `hf_readonce.store.import_from_dataset(store, load_dataset("
        f"\"{dataset_repo}\", split=\"train\"))`; each row's SHA-256 is re-checked.\n"
    )


__all__ = ["PublishResult", "check_repo_id", "publish", "representation_format_for"]
