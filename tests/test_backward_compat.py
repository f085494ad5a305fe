"""Format compatibility: checkpoints and stores written by hf-readonce 0.1.0 (`tests/fixtures/v0_1_0`, made by
`tests/fixtures/make_v0_1_0_fixtures.py` at the 0.1.0 layout) still load, verify and give the same outputs, in
process and through `trust_remote_code` without hf-readonce. (0.1.0 was never released, so its import paths are not
kept: only the files it wrote are.)"""

import shutil

import pytest
import torch
from safetensors.torch import load_file

import hf_readonce  # noqa: F401  (registers the Auto classes)
from tests.conftest import REPO_ROOT, run_without_hf_readonce

from .compat_check import check

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "v0_1_0"
EXPECTED = load_file(FIXTURES / "expected.safetensors")
NAMES = ["deformer_bert", "readonce_bart", "recurrent_gpt2", "recurrent_llama"]


@pytest.mark.parametrize("name", NAMES)
def test_v0_1_0_checkpoint_loads_in_process(name):
    check(name, FIXTURES / name, FIXTURES / "expected.safetensors", remote_code=False)


@pytest.mark.parametrize("name", NAMES)
def test_v0_1_0_checkpoint_loads_with_remote_code(name, tmp_path):
    shutil.copytree(FIXTURES / name, tmp_path / name)
    result = run_without_hf_readonce(f"""
        import sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        import torch, transformers
        from tests.compat_check import check
        check({name!r}, {str(tmp_path / name)!r}, {str(FIXTURES / "expected.safetensors")!r})
        print("OK")
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


def test_v0_1_0_store_opens_and_verifies(tmp_path):
    from hf_readonce.store import RepresentationStore

    shutil.copytree(FIXTURES / "store", tmp_path / "store")
    store = RepresentationStore(tmp_path / "store", readonly=True, create=False)
    assert len(store) == 3 and len(store.spaces()) == 2
    report = store.verify()
    assert report.ok and report.documents_checked == 3
    settings = {"representation": "test/v1", "k": 2}
    for space in store.spaces():
        for entry in store.entries(space.fingerprint, settings):
            got = store.get(space.fingerprint, settings, entry.content_hash)["hidden_states"].float()
            want = EXPECTED[f"store.{entry.content_hash}.hidden_states"]
            torch.testing.assert_close(got, want, atol=2e-3, rtol=1e-3)  # one space was written in fp16
    writable = RepresentationStore(tmp_path / "store")
    assert writable.put("a" * 64, settings, "c" * 64, {"hidden_states": torch.zeros(2, 4)})
    assert RepresentationStore(tmp_path / "store").verify().ok

