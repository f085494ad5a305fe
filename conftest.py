"""The examples of README.md and docs/ are tests (Sybil).

- Every ```python block runs, in order, in one namespace per file.
- Every ```bash block runs in a fresh working folder per file that holds two tiny inputs, `passages.jsonl` (the
  Disfl-QA validation passages of the first 3 questions, `context`) and `questions.jsonl` (those questions, with
  answers). Its `hf-readonce ...` lines run through `hf_readonce.cli.main` in this process (one import of torch for
  every block: a process per command would cost the suite a minute); other lines, and blocks that use shell syntax
  (`$(...)`, pipes, `&&`, redirections, variables), run with `bash -euo pipefail`, where `hf-readonce` and `python`
  are this interpreter with `src/` first on `PYTHONPATH`.
- A block that cannot run here is marked just before it with `<!-- skip: next "the reason" -->`; the reason is
  printed as the skip reason (`tests/test_docs.py` checks that every skip has one).

`docs/drafts/` (notes, not part of the site) is left out. Without Sybil installed (it is in the `dev` extra) nothing
here is collected, and `tests/test_docs.py` skips saying so.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# the suite tests hf-readonce's own families: the families other installed packages declare as entry points (such as
# examples/new-family once installed) are not loaded, here nor in the processes the tests start
# (tests/test_family_package.py loads them on purpose)
os.environ["HF_READONCE_NO_ENTRY_POINTS"] = "1"

REPO_ROOT = Path(__file__).resolve().parent
DATA_DIR = Path(os.environ.get("HF_READONCE_DATA", REPO_ROOT.parent / "shared" / "data"))
EXAMPLE_FILES = ["README.md", "docs/*.md", "docs/**/*.md"]
EXCLUDED = ["docs/drafts/*", "docs/drafts/**/*"]


def _write_inputs(folder: Path) -> None:
    """`passages.jsonl` and `questions.jsonl`: the first 3 Disfl-QA validation questions and their passages."""
    rows = []
    with open(DATA_DIR / "disfl_qa" / "validation.jsonl") as handle:
        for line in handle:
            row = json.loads(line)
            if row["question"].strip():
                rows.append(row)
            if len(rows) == 3:
                break
    passages = list(dict.fromkeys(row["context"] for row in rows))
    with open(folder / "passages.jsonl", "w") as handle:
        for number, passage in enumerate(passages):
            handle.write(json.dumps({"id": f"p{number}", "context": passage}) + "\n")
    with open(folder / "questions.jsonl", "w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def _shell_setup(namespace: dict) -> None:
    folder = Path(tempfile.mkdtemp(prefix="hf-readonce-docs-"))
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    for name, command in (("hf-readonce", f'exec "{sys.executable}" -m hf_readonce.cli "$@"'),
                          ("python", f'exec "{sys.executable}" "$@"')):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{command}\n")
        script.chmod(0o755)
    namespace["_workdir"] = folder
    namespace["_env"] = dict(
        os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")) if p),
        TOKENIZERS_PARALLELISM="false")


def _shell_teardown(namespace: dict) -> None:
    folder = namespace.pop("_workdir", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


SHELL_SYNTAX = ("$(", "`", "|", "&&", ";", ">", "<", " &", "=")


def _logical_lines(block: str) -> list[str]:
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _run_cli_in_process(argv: list[str], folder: Path) -> tuple[int, str]:
    """`hf-readonce ARGS` through `hf_readonce.cli.main` in this process (one import of torch for all the blocks)."""
    import contextlib
    import io

    from hf_readonce.cli import main

    output = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return status or 0, output.getvalue()


def _run_shell(example) -> None:
    """Run a bash block: its `hf-readonce` lines in process, anything else (or a block using shell syntax beyond
    one command per line) with `bash -euo pipefail`."""
    import shlex

    namespace = example.namespace
    folder = namespace["_workdir"]
    if not (folder / "passages.jsonl").exists():
        _write_inputs(folder)
    block = example.parsed
    commands = [shlex.split(line, comments=True) for line in _logical_lines(block)]
    in_process = not any(mark in line.split("#")[0] for line in _logical_lines(block) for mark in SHELL_SYNTAX)
    if in_process:
        for argv in filter(None, commands):
            if argv[0] == "hf-readonce":
                status, output = _run_cli_in_process(argv[1:], folder)
            else:
                result = subprocess.run(argv, cwd=folder, env=namespace["_env"], capture_output=True, text=True,
                                        timeout=600)
                status, output = result.returncode, result.stdout + result.stderr
            if status != 0:
                raise AssertionError(f"`{shlex.join(argv)}` exited {status}:\n{output[-4000:]}")
        return
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=folder, env=namespace["_env"],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise AssertionError(f"shell block exited {result.returncode}:\n{block}\n--- stdout ---\n"
                             f"{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}")


try:
    from sybil import Sybil
    from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
except ImportError:  # the dev extra installs sybil; tests/test_docs.py reports the skip
    pass
else:
    def _setup(namespace):
        _shell_setup(namespace)

    def _teardown(namespace):
        _shell_teardown(namespace)

    pytest_collect_file = Sybil(
        parsers=[SkipParser(), PythonCodeBlockParser(), CodeBlockParser(language="bash", evaluator=_run_shell)],
        patterns=EXAMPLE_FILES, excludes=EXCLUDED, setup=_setup, teardown=_teardown, path=str(REPO_ROOT),
    ).pytest()
