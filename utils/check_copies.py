"""Check (or rewrite) the code that several model folders must each carry: blocks marked

    # Copied from hf_readonce.models.<family>.<module>.<name>
    # Copied from hf_readonce.models.<family>.<module>.<Class>.<method> with Deformer->ReadTwice, deformer->readtwice

must equal their source, a function, class, method or assignment of another file of `src/`, after the renames
(`A->B`, applied in order, as plain text). The block is the statement that follows the marker (decorators
included), with the comment lines between the marker and the statement; the source is the statement with the
comment lines right above it (a section rule, `# -----`, is not part of a block). Files under `models/<family>/` travel alone to the Hub (`trust_remote_code=True`), so
they cannot import a shared module: one file holds the canonical code and the others hold checked copies.

    python utils/check_copies.py            # exit 1 naming every copy that differs from its source (the copies of
                                            # src/ and of examples/, e.g. the family package examples/new-family/;
                                            # not those a build or an install writes: build/ and dist/ beside a
                                            # pyproject.toml, *.egg-info/, site-packages/, hidden folders (.venv/))
    python utils/check_copies.py --fix      # rewrite those copies from their sources
    python utils/check_copies.py --src DIR --also PKG   # the copies of DIR and of PKG, sources from DIR
    python utils/check_copies.py --strip-copies DIR   # write src/ to DIR without the checked copies (to measure
                                                      # the duplication that is left, e.g. with a duplicate finder)

The test suite runs the check (`tests/test_check_copies.py`).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "hf_readonce"
# a section rule (`# ----- models`) above a copy or its source belongs to the file, not to the block
SECTION = re.compile(r"^\s*#\s*-{3,}")
# folders of a tree that hold no code of its own, never checked nor rewritten: what building or installing a package
# writes (`build/` and `dist/` beside the project's pyproject.toml, setup.py or setup.cfg, where a non-editable
# `pip install` or `python -m build` writes them; `*.egg-info/`), virtual environments (`site-packages/`) and hidden
# folders (`.venv/`, `.tox/`); their `.py` files are stale copies of the tree's own or other packages' code. A `build`
# or `dist` folder that is a package (an `__init__.py`) or lies elsewhere is code and is checked.
BUILD_OUTPUTS = ("build", "dist")
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
MARKER = re.compile(r"^(?P<indent>\s*)# Copied from (?P<source>hf_readonce(?:\.\w+)+)(?:\s+with\s+(?P<renames>.+))?\s*$")


@dataclass
class Copy:
    """One marked copy: where it is, what it copies, and the lines it spans (0-based, end exclusive)."""

    path: Path
    marker_line: int
    source: str
    renames: list
    start: int
    end: int
    indent: str


class CopyError(Exception):
    """A marker that cannot be checked (unknown source, no statement after it, a bad rename)."""


def is_build_output(folder: Path) -> bool:
    """Whether `folder` (below a tree's root) holds no code of the tree: a hidden folder, `__pycache__/`,
    `site-packages/`, `*.egg-info/`, or `build/`/`dist/` beside a `pyproject.toml`, `setup.py` or `setup.cfg` that is
    no package (no `__init__.py`)."""
    name = folder.name
    if name.startswith(".") or name in ("__pycache__", "site-packages") or name.endswith(".egg-info"):
        return True
    return (name in BUILD_OUTPUTS and not (folder / "__init__.py").exists()
            and any((folder.parent / project).is_file() for project in PROJECT_FILES))


def python_files(tree: Path) -> list[Path]:
    """The `.py` files of `tree` that are its own code, sorted: none under a build output or a hidden folder
    ([`is_build_output`]), these folders counted from `tree` (a tree may itself lie inside one) and not walked."""
    tree = Path(tree)
    found = []
    for folder, names, files in os.walk(tree):
        names[:] = [name for name in names if not is_build_output(Path(folder) / name)]
        found += [Path(folder) / name for name in files if name.endswith(".py")]
    return sorted(found)


def _block_comment(line: str) -> bool:
    """A comment line that belongs to the block below it (not a marker, not a section rule)."""
    return line.strip().startswith("#") and not MARKER.match(line) and not SECTION.match(line)


def _renames(text: str | None, where: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if "->" not in item:
            raise CopyError(f"{where}: rename {item!r} is not `A->B`.")
        old, new = (part.strip() for part in item.split("->", 1))
        if not old:
            raise CopyError(f"{where}: rename {item!r} has nothing to replace.")
        pairs.append((old, new))
    return pairs


def _statements(tree: ast.AST):
    """Every statement of a module, with those of class bodies (methods, class attributes)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef)):
            yield from node.body


def _start(node: ast.stmt) -> int:
    """1-based first line of a statement, decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _find(body: list, name: str):
    return next((node for node in body if name in _names(node)), None)


def source_block(source: str, src: Path) -> tuple[list[str], str]:
    """The lines of `source` (a dotted path `hf_readonce.<module path>.<name>[.<member>]`) with the comment lines
    right above it, dedented; and the file it is in.

    Raises:
        CopyError: no module or no such name in it.
    """
    parts = source.split(".")
    for split in range(len(parts) - 1, 0, -1):
        path = src.joinpath(*parts[:split]).with_suffix(".py")
        if path.is_file():
            break
    else:
        raise CopyError(f"no module of {source!r} under {src}.")
    lines, tree = _parsed(path)
    body, node = tree.body, None
    for name in parts[split:]:
        node = _find(body, name)
        if node is None:
            raise CopyError(f"{source!r}: no {name!r} in {path}.")
        body = getattr(node, "body", [])
    start = _start(node) - 1
    while start > 0 and _block_comment(lines[start - 1]):
        start -= 1
    block = lines[start:node.end_lineno]
    indent = len(block[0]) - len(block[0].lstrip()) if block[0].strip() else 0
    return [line[indent:] if line.strip() else line.lstrip(" \t") for line in block], str(path)


_PARSED: dict = {}


def _parsed(path: Path) -> tuple[list[str], ast.Module]:
    """The lines and syntax tree of a source file, parsed once per content: most sources hold the blocks of several
    copies (the cache is keyed by the file's size and modification time, so a file `--fix` rewrote is read again)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        text = path.read_text()
        _PARSED[key] = (text.splitlines(keepends=True), ast.parse(text))
    return _PARSED[key]


def find_copies(path: Path) -> list[Copy]:
    """The marked copies of one file.

    Raises:
        CopyError: a marker followed by no statement at its indentation.
    """
    text = path.read_text()
    if "Copied from" not in text:  # most files: nothing to parse
        return []
    lines = text.splitlines(keepends=True)
    statements = list(_statements(ast.parse(text)))
    copies = []
    for number, line in enumerate(lines):
        match = MARKER.match(line)
        if not match:
            continue
        where = f"{path}:{number + 1}"
        following = [node for node in statements if _start(node) - 1 > number]
        node = min(following, key=_start, default=None)
        between = lines[number + 1:_start(node) - 1] if node is not None else []
        if node is None or not all(_block_comment(x) for x in between) \
                or node.col_offset != len(match["indent"]):
            raise CopyError(f"{where}: `# Copied from` must stand right above a statement at its indentation "
                            "(comment lines may come between).")
        copies.append(Copy(path, number, match["source"], _renames(match["renames"], where), number + 1,
                           node.end_lineno, match["indent"]))
    return copies


def expected_lines(copy: Copy, src: Path) -> list[str]:
    """What the copy's block must be: its source, renamed and indented as the copy."""
    block, _ = source_block(copy.source, src)
    text = "".join(block)
    for old, new in copy.renames:
        text = text.replace(old, new)
    return [copy.indent + line if line.strip() else line for line in text.splitlines(keepends=True)]


def check(src: Path, fix: bool = False, also=()) -> tuple[list[str], list[str]]:
    """Check every marked copy under `src` and under each folder of `also` (rewriting differing ones with `fix`), the
    sources always read from `src`. Build outputs and hidden folders are left out ([`python_files`]).

    Returns:
        `(differing, errors)`: one line per copy that differs from its source (rewritten with `fix`), and one per
        marker that cannot be checked (an unknown source, no statement after it, a bad rename).
    """
    problems, errors = [], []
    for path in [path for tree in (src, *also) for path in python_files(tree)]:
        try:
            copies = find_copies(path)
        except CopyError as error:
            errors.append(str(error))
            continue
        lines = path.read_text().splitlines(keepends=True)
        changed = False
        for copy in reversed(copies):  # bottom up: a rewrite does not move the copies above it
            try:
                expected = expected_lines(copy, src)
            except CopyError as error:
                errors.append(f"{path}:{copy.marker_line + 1}: {error}")
                continue
            if lines[copy.start:copy.end] != expected:
                problems.append(f"{path}:{copy.marker_line + 1}: copy of {copy.source} differs from its source"
                                + (" (rewritten)" if fix else " (python utils/check_copies.py --fix rewrites it)"))
                lines[copy.start:copy.end] = expected
                changed = True
        if fix and changed:
            path.write_text("".join(lines))
    return problems, errors


def strip_copies(src: Path, out: Path) -> int:
    """Write `src` to `out` with every checked copy (marker and block) replaced by blank lines; returns how many (as
    many as `check` reads). Build outputs and hidden folders ([`is_build_output`]) are not written: `out` holds the
    tree's own files only."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out, ignore=lambda folder, names: [
        name for name in names if Path(folder, name).is_dir() and is_build_output(Path(folder, name))])
    count = 0
    for path in python_files(out):
        copies = find_copies(path)
        if not copies:
            continue
        lines = path.read_text().splitlines(keepends=True)
        for copy in copies:
            for i in range(copy.marker_line, copy.end):
                lines[i] = "\n"
            count += 1
        path.write_text("".join(lines))
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fix", action="store_true", help="rewrite every copy that differs from its source")
    parser.add_argument("--src", type=Path, default=None, help="the source tree (default: src/)")
    parser.add_argument("--also", type=Path, action="append", default=None, metavar="DIR",
                        help="a further tree whose copies are checked against --src (repeatable; default: examples/ "
                             "when --src is not given, none otherwise)")
    parser.add_argument("--strip-copies", type=Path, default=None, metavar="DIR",
                        help="write the source tree to DIR without the checked copies and stop")
    args = parser.parse_args(argv)
    if args.also is None:
        args.also = [ROOT / "examples"] if args.src is None else []
    args.src = args.src or ROOT / "src"
    problems, errors = check(args.src, fix=args.fix and args.strip_copies is None, also=args.also)
    for line in errors + problems:
        print(line, file=sys.stderr)
    if errors or (problems and not args.fix):
        print(f"{len(problems)} copies differ from their sources, {len(errors)} markers cannot be checked.",
              file=sys.stderr)
        return 1
    if args.strip_copies is not None:
        print(f"{strip_copies(args.src, args.strip_copies)} checked copies left out of {args.strip_copies}")
        return 0
    total = sum(len(find_copies(path)) for tree in (args.src, *args.also) for path in python_files(tree))
    print(f"{total} copies checked" + (f", {len(problems)} rewritten" if problems else ", all equal their sources"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
