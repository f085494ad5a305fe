"""The wheel holds code only: no weights (the reference checkpoints live in `checkpoints/` or the Hub cache), and at
most 5 MB. Built from a copy of the sources, so the checkout gets no `build/` or `*.egg-info`."""

import importlib.util
import shutil
import subprocess
import sys
import zipfile

from tests.conftest import REPO_ROOT

MAX_WHEEL_BYTES = 5 * 1000 * 1000


def test_wheel_is_small_and_holds_no_weights(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(REPO_ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(tmp_path / "dist")]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(4, "--no-build-isolation")   # seconds instead of a fresh build environment
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "dist").glob("hf_readonce-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel.stat().st_size <= MAX_WHEEL_BYTES, f"{wheel.name}: {wheel.stat().st_size:,} bytes"
    assert not [n for n in names if n.endswith((".safetensors", ".bin", ".gguf", ".pt"))]
    assert "hf_readonce/cli.py" in names and "hf_readonce/weights.py" in names
    assert any(n.startswith("hf_readonce/models/deformer_bert/") for n in names)
