"""The one JSONL reader of hf-readonce: line by line, with bad lines set aside and reported by number instead of
failing a long run (used by the CLI, the QA helpers and the recipes)."""

from __future__ import annotations

import json
from codecs import BOM_UTF8
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class BadLine:
    """A JSONL line that was set aside: `line` (1-based number) and `reason`."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def iter_jsonl(path, problems: list | None = None) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, row)` for every JSON-object line of a JSONL file, reading line by line (FIFOs and huge
    files work). Lines that are not UTF-8, not JSON, nested too deeply, not an object, or that hold a lone
    surrogate escape (`"\\ud800"`: not valid Unicode text) are appended to `problems` as [`BadLine`] (with their
    line number) and skipped; blank lines are ignored, and so is a UTF-8 byte order mark opening the file.

    Raises:
        FileNotFoundError: if `path` does not exist. IsADirectoryError: if it is a directory.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, expected a JSONL file.")
    problems = problems if problems is not None else []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            # the first line may open with a UTF-8 byte order mark (Windows editors write one): not text
            mark = len(BOM_UTF8) if number == 1 and raw.startswith(BOM_UTF8) else 0
            try:
                line = raw[mark:].decode("utf-8")
            except UnicodeDecodeError as error:  # the byte counted in the line as it is in the file
                problems.append(BadLine(number, f"not valid UTF-8 ({error.reason} at byte {mark + error.start})"))
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                problems.append(BadLine(number, f"not valid JSON ({error.msg}, column {error.colno})"))
                continue
            except RecursionError:
                problems.append(BadLine(number, "JSON nested too deeply to read"))
                continue
            if not isinstance(row, dict):
                problems.append(BadLine(number, f"a JSON {type(row).__name__}, not an object"))
                continue
            if "\\u" in line and _has_lone_surrogate(row):
                problems.append(BadLine(number, "holds a lone UTF-16 surrogate escape (such as \\ud800): not valid "
                                                "Unicode text"))
                continue
            yield number, row


def _has_lone_surrogate(row) -> bool:
    """Whether a parsed row holds a string with an unpaired surrogate (JSON `"\\ud800"` parses to one; no tokenizer or
    UTF-8 file can hold it)."""
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except RecursionError:
        return True
    return False


def field_problem(row: dict, key: str) -> str | None:
    """Why `row[key]` is not a non-blank string, in the words a set-aside line is reported with.

    Args:
        row (`dict`): one JSONL row. key (`str`): the field read (e.g. `"context"`, `"question"`).

    Returns:
        `str` or `None`: `no 'context' field`, `'context' is null`, `'question' is of type int, not a string` or
        `'context' is blank`; `None` when the field holds a non-blank string.
    """
    if key not in row:
        return f"no {key!r} field"
    value = row[key]
    if value is None:
        return f"{key!r} is null"
    if not isinstance(value, str):
        return f"{key!r} is of type {type(value).__name__}, not a string"
    if not value.strip():
        return f"{key!r} is blank"
    return None


def iter_documents(path, text_field: str = "context", id_field: str | None = "id",
                   problems: list | None = None) -> Iterator[tuple[str, str]]:
    """Yield `(doc_id, text)` from a JSONL file; `doc_id` is the row's `id_field` (as str) or `line N`. Rows whose
    `text_field` is missing, not a string or blank are reported in `problems` (with the line number) and skipped,
    as are malformed lines (see [`iter_jsonl`]).

    Raises:
        FileNotFoundError, IsADirectoryError: as [`iter_jsonl`].
    """
    problems = problems if problems is not None else []
    for number, row in iter_jsonl(path, problems):
        problem = field_problem(row, text_field)
        if problem is not None:
            blank = isinstance(row.get(text_field), str)  # present, a string, blank
            problems.append(BadLine(number, f"empty document ({problem})" if blank else problem))
        else:
            doc_id = row.get(id_field) if id_field else None
            yield (str(doc_id) if doc_id is not None else f"line {number}"), row[text_field]


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a whole JSONL file (e.g. SQuAD-style `id, context, question, answers{text[], answer_start[]}` rows) into
    a list of dicts, strictly: unlike [`iter_jsonl`], a bad line fails the read.

    Raises:
        FileNotFoundError: if `path` does not exist.
        ValueError: naming the line number of the first line that is not UTF-8, not JSON or not a JSON object.
    """
    problems: list[BadLine] = []
    rows = [row for _, row in iter_jsonl(path, problems)]
    if problems:
        more = f" (and {len(problems) - 1} more bad line(s))" if len(problems) > 1 else ""
        raise ValueError(f"{path}: {problems[0]}{more}.")
    return rows


__all__ = ["BadLine", "field_problem", "iter_documents", "iter_jsonl", "read_jsonl"]
