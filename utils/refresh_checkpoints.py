"""Keep the model code and `config.json` of the shipped reference checkpoints (`checkpoints/`) current.

A checkpoint folder that loads with `trust_remote_code=True` carries a copy of its family's `configuration_*.py` and
`modeling_*.py` and an `auto_map` naming their classes. When that code changes, the folder's copies must follow, or
a user loading the folder without hf-readonce runs older code than the package tests. This script loads each shipped
checkpoint whose config names hf-readonce code, saves it with `save_pretrained` into a temporary folder, and copies
the saved `config.json` and code files over the shipped ones; the weights and tokenizer are left as they are, and
`checksums.json` is rewritten (`hf_readonce.weights.write_checksums`).

    python utils/refresh_checkpoints.py           # refresh, naming each file that changed
    python utils/refresh_checkpoints.py --check   # exit 1 naming each file that would change

`tests/test_weights.py` runs the check.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stale_files(folder: Path, write: bool = False) -> list[str]:
    """Names of the files of `folder` (a shipped checkpoint) that differ from what the current code saves.

    Args:
        folder (`Path`): the checkpoint folder. write (`bool`, defaults to `False`): copy the current files over the
            stale ones and rewrite `checksums.json`.

    Returns:
        `list[str]`: the stale file names (`[]` for a checkpoint without hf-readonce code, e.g. a plain BERT), with
        `checksums.json` when it lists another SHA-256 for a code file or `config.json` than the file has.
    """
    import hf_readonce
    from hf_readonce.weights import CHECKSUMS_FILE, sha256_file, write_checksums

    config = json.loads((folder / "config.json").read_text())
    if not config.get("auto_map"):
        return []
    model_class = getattr(hf_readonce, config["architectures"][0])  # the class it was saved from
    with tempfile.TemporaryDirectory() as saved:
        model_class.from_pretrained(folder).save_pretrained(saved)
        stale = []
        for path in sorted(Path(saved).iterdir()):
            if path.suffix != ".py" and path.name != "config.json":
                continue  # the weights stay as exported
            fresh = path.read_text()
            if path.name == "config.json":  # the version that saved it is not a difference
                ours = json.loads((folder / path.name).read_text())
                theirs = json.loads(fresh)
                differs = {k: v for k, v in ours.items() if k != "transformers_version"} != {
                    k: v for k, v in theirs.items() if k != "transformers_version"}
            else:
                differs = not (folder / path.name).is_file() or (folder / path.name).read_text() != fresh
            if differs:
                stale.append(path.name)
                if write:
                    (folder / path.name).write_text(fresh)
        # the listing must follow the refreshed files too: a merge can keep a `checksums.json` older than its code
        listed = json.loads((folder / CHECKSUMS_FILE).read_text())["files"] if (folder / CHECKSUMS_FILE).is_file() \
            else {}
        refreshed = [p.name for p in sorted(Path(saved).iterdir()) if p.suffix == ".py" or p.name == "config.json"]
        if any(listed.get(name) != sha256_file(folder / name) for name in refreshed if (folder / name).is_file()):
            stale.append(CHECKSUMS_FILE)
        if stale and write:
            write_checksums(folder)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Refresh (or with `--check`, check) every folder of `checkpoints/`; exit 1 when `--check` finds stale files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only name the stale files; exit 1 if there are any")
    parser.add_argument("--checkpoints", type=Path, default=ROOT / "checkpoints")
    args = parser.parse_args(argv)
    found = False
    for folder in sorted(p for p in args.checkpoints.iterdir() if (p / "config.json").is_file()):
        stale = stale_files(folder, write=not args.check)
        found |= bool(stale)
        for name in stale:
            print(f"{folder.name}/{name}: " + ("differs from what the current code saves" if args.check
                                               else "refreshed"))
    if args.check and found:
        print("run `python utils/refresh_checkpoints.py` to refresh them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
