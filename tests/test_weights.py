"""Where the reference checkpoints are found (checkout, $HF_READONCE_CHECKPOINTS, Hub cache) and how a missing or
damaged one is reported."""

import json
import shutil

import pytest

from hf_readonce import weights


def _copy_small(source, target):
    """A copy of a reference folder whose 'weights' are a small file, with a fresh checksums.json."""
    target.mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(source / name, target / name)
    (target / "model.safetensors").write_bytes(b"not really weights")
    weights.write_checksums(target)
    return target


def test_source_checkout_holds_both_reference_checkpoints():
    assert weights.reference_qa_path(verify=False) == weights.SOURCE_CHECKPOINTS_DIR / "minilm-qa-reference"
    assert weights.reference_deformer_path(verify=False).name == "deformer-minilm-qa-reference"
    assert (weights.SOURCE_CHECKPOINTS_DIR.parent / "pyproject.toml").is_file()


def test_shipped_checkpoints_carry_the_current_model_code_and_auto_map(tmp_path):
    """The shipped DeFormer's code files are the package's current ones (so `trust_remote_code=True` runs the code
    the package tests) and its `auto_map` is what `save_pretrained` writes now (`AutoModel` included):
    `utils/refresh_checkpoints.py --check`; and the check sees a stale copy (in a copy of the folder)."""
    import sys

    from tests.conftest import REPO_ROOT

    sys.path.insert(0, str(REPO_ROOT / "utils"))
    try:
        import refresh_checkpoints
    finally:
        sys.path.remove(str(REPO_ROOT / "utils"))
    shipped = weights.reference_deformer_path()
    assert refresh_checkpoints.stale_files(shipped) == []
    assert refresh_checkpoints.stale_files(weights.reference_qa_path()) == []  # a plain BERT carries no code
    copy = tmp_path / "checkpoints" / shipped.name
    shutil.copytree(shipped, copy)
    (copy / "modeling_deformer_bert.py").write_text((copy / "modeling_deformer_bert.py").read_text() + "# edited\n")
    assert refresh_checkpoints.main(["--check", "--checkpoints", str(copy.parent)]) == 1
    assert refresh_checkpoints.main(["--checkpoints", str(copy.parent)]) == 0
    assert refresh_checkpoints.stale_files(copy) == [] and weights.verify_checksums(copy) is None
    # current code under a listing of older code (what a merge that kept one side's checksums.json leaves)
    listing = json.loads((copy / "checksums.json").read_text())
    listing["files"]["modeling_deformer_bert.py"] = "0" * 64
    (copy / "checksums.json").write_text(json.dumps(listing))
    assert refresh_checkpoints.stale_files(copy) == ["checksums.json"]
    assert refresh_checkpoints.main(["--check", "--checkpoints", str(copy.parent)]) == 1
    assert refresh_checkpoints.main(["--checkpoints", str(copy.parent)]) == 0
    assert refresh_checkpoints.stale_files(copy) == [] and weights.verify_checksums(copy) is None


def test_environment_folder_comes_first(tmp_path, monkeypatch):
    folder = _copy_small(weights.SOURCE_CHECKPOINTS_DIR / weights.REFERENCE_QA.name, tmp_path / "minilm-qa-reference")
    monkeypatch.setenv(weights.CHECKPOINTS_ENV, str(tmp_path))
    assert weights.reference_qa_path() == folder


def test_damaged_file_is_named(tmp_path, monkeypatch):
    folder = _copy_small(weights.SOURCE_CHECKPOINTS_DIR / weights.REFERENCE_QA.name, tmp_path / "minilm-qa-reference")
    (folder / "model.safetensors").write_bytes(b"changed")
    monkeypatch.setenv(weights.CHECKPOINTS_ENV, str(tmp_path))
    with pytest.raises(ValueError, match="model.safetensors") as error:
        weights.reference_qa_path()
    listed = json.loads((folder / "checksums.json").read_text())["files"]["model.safetensors"]
    # both digests and what to do
    assert listed in str(error.value) and weights.sha256_file(folder / "model.safetensors") in str(error.value)
    assert "reinstall it" in str(error.value)


def test_missing_everywhere_names_repo_and_command(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "SOURCE_CHECKPOINTS_DIR", tmp_path / "no-checkout")
    monkeypatch.delenv(weights.CHECKPOINTS_ENV, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(FileNotFoundError) as error:
        weights.reference_deformer_path()
    assert "hf-readonce/deformer-minilm-qa-reference" in str(error.value)
    assert "`hf download hf-readonce/deformer-minilm-qa-reference --revision main`" in str(error.value)


def test_unknown_name():
    with pytest.raises(ValueError, match="checkpoint"):
        weights.resolve_reference_checkpoint("nope")


def test_shipped_names(tmp_path, monkeypatch):
    """The names the CLI accepts for the shipped checkpoints (`hf-readonce checkpoints`), resolved like their path
    functions (so $HF_READONCE_CHECKPOINTS comes first there too)."""
    assert weights.shipped_checkpoint_path("reference-deformer", verify=False) == \
        weights.reference_deformer_path(verify=False)
    assert weights.shipped_checkpoint_path("minilm-qa-reference", verify=False) == weights.reference_qa_path(verify=False)
    assert weights.shipped_checkpoint_path("runs/demo") is None
    folder = _copy_small(weights.SOURCE_CHECKPOINTS_DIR / weights.REFERENCE_QA.name, tmp_path / "minilm-qa-reference")
    monkeypatch.setenv(weights.CHECKPOINTS_ENV, str(tmp_path))
    assert weights.shipped_checkpoint_path("reference-qa") == folder


def test_hub_cache_is_used_offline_when_no_local_copy(tmp_path, monkeypatch):
    """Outside a checkout (the wheel), a checkpoint downloaded once is found in the Hub cache by repo id and
    revision, offline, and its checksums are still verified."""
    from huggingface_hub import constants

    checkpoint = weights.REFERENCE_DEFORMER
    repo_folder = tmp_path / "hub" / f"models--{checkpoint.repo_id.replace('/', '--')}"
    commit = "0" * 40
    _copy_small(weights.SOURCE_CHECKPOINTS_DIR / weights.REFERENCE_DEFORMER.name, repo_folder / "snapshots" / commit)
    (repo_folder / "refs").mkdir()
    (repo_folder / "refs" / checkpoint.revision).write_text(commit)
    monkeypatch.setattr(weights, "SOURCE_CHECKPOINTS_DIR", tmp_path / "no-checkout")
    monkeypatch.delenv(weights.CHECKPOINTS_ENV, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    folder = weights.reference_deformer_path()
    assert folder == repo_folder / "snapshots" / commit
    (folder / "model.safetensors").write_bytes(b"damaged in the cache")
    with pytest.raises(ValueError, match="model.safetensors"):
        weights.reference_deformer_path()
