"""Shared test settings: offline, deterministic, small thread count, real data location."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("HF_READONCE_DATA", REPO_ROOT.parent / "shared" / "data"))

BLOCK_HF_READONCE = textwrap.dedent(
    """
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "hf_readonce" or name.startswith("hf_readonce."):
                raise ImportError("hf_readonce is blocked in this process")
            return None
    sys.meta_path.insert(0, _Block())
    """
)


def run_without_hf_readonce(code: str, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python process in which `import hf_readonce` raises ImportError."""
    script = BLOCK_HF_READONCE + "\n" + textwrap.dedent(code)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def data_dir() -> Path:
    if not (DATA_DIR / "quoref" / "validation.jsonl").is_file():
        pytest.skip(f"real data not found under {DATA_DIR}")
    return DATA_DIR
