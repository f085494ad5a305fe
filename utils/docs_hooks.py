"""MkDocs hooks of the documentation site (`mkdocs.yml` names this file under `hooks:`).

The pages hold placeholders that these hooks replace at build time, so that nothing measured or declared
elsewhere is retyped in the docs:

- `<!-- generated: cli -->`: every command and option of `hf-readonce`, from the argparse parsers themselves
  (`hf_readonce.cli.build_parser(family_options=True)` and the demo's parser);
- `<!-- generated: benchmarks -->`: one table per `benchmarks/results/*.json` file (and per results file of
  `benchmarks/results/reproduce/`), flattened from the JSON as it is;
- `<!-- generated: benchmark NAME -->`: the table of one results file (`NAME` relative to `benchmarks/results/`).

It also adds the figures under `benchmarks/results/` (`*.png`) to the site as `results/<path>`, so model pages show
the plots the benchmarks wrote, and lists every `docs/models/*.md` page under "Model families" in the navigation
(`model_pages_nav`: a new family's page needs no line in `mkdocs.yml`). `render_cli_reference()` and
`render_benchmark_tables()` are importable for tests.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
PLACEHOLDER = re.compile(r"<!-- generated: (cli|benchmarks|benchmark (?P<name>[^ ]+)) -->")


# ------------------------------------------------------------------------------------------------------------ CLI
class _Captured(Exception):
    def __init__(self, parser):
        super().__init__("parser captured")
        self.parser = parser


def _demo_parser() -> argparse.ArgumentParser:
    """The parser `hf-readonce demo` builds inside its `main` (captured at `parse_args`, nothing runs)."""
    from hf_readonce.recipes import demo

    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        demo.main(["--help"])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise RuntimeError("hf-readonce demo did not build an argument parser")


def _escape(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue  # hidden options stay hidden
        if action.option_strings:
            name = ", ".join(f"`{option}`" for option in action.option_strings)
            if action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction):
                metavar = action.metavar or (action.dest.upper() if not action.choices else None)
                if action.choices:
                    name += " `{" + ",".join(str(c) for c in action.choices) + "}`"
                elif metavar:
                    name += f" `{metavar}`"
        else:
            name = f"`{action.metavar or action.dest}`"
        default = action.default
        if default in (None, argparse.SUPPRESS, False) or action.nargs == 0:
            default_text = ""
        else:
            default_text = f"`{default}`"
        help_text = (action.help or "") % {"default": action.default, "prog": parser.prog} \
            if action.help and "%(" in action.help else (action.help or "")
        if "default" in help_text:  # the help says it in its own words (a value computed here would be this machine's)
            default_text = ""
        required = "yes" if action.required else ""
        rows.append(f"| {name} | {required} | {_escape(default_text)} | {_escape(help_text)} |")
    return rows


def render_cli_reference() -> str:
    """Markdown for every `hf-readonce` command: its help line and a table of its arguments and options."""
    from hf_readonce.cli import build_parser

    parser = build_parser(family_options=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    lines = []
    for name, command in sub.choices.items():
        if name == "demo":
            command = _demo_parser()
        lines += [f"## `hf-readonce {name}`", "", _escape(helps.get(name, "")), ""]
        if command.description and name == "demo":
            lines += [_escape(command.description.strip().split("\n\n")[0]), ""]
        rows = _option_rows(command)
        if rows:
            lines += ["| argument | required | default | meaning |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------- benchmarks
def _format(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:,.4f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(_format(v) for v in value)
    return _escape(value if not isinstance(value, (dict, list)) else json.dumps(value))


def _flatten(value, prefix="") -> dict:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; lists of scalars stay values, lists of dicts are left to the caller."""
    out = {}
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(item, dict):
                out.update(_flatten(item, name))
            else:
                out[name] = item
    else:
        out[prefix or "value"] = value
    return out


def _row_table(rows: list[dict]) -> list[str]:
    flat = [_flatten(row) for row in rows]
    columns = []
    for row in flat:
        for key, value in row.items():
            if key not in columns and not isinstance(value, list) or (
                    key not in columns and all(not isinstance(v, (dict, list)) for v in value)):
                columns.append(key)
    lines = ["| " + " | ".join((f"`{c}`" if c else " ") for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in flat:
        lines.append("| " + " | ".join(_format(row[c]) if c in row else "" for c in columns) + " |")
    return lines


HARNESS_SCHEMA = "hf-readonce-bench/1"


def _harness_table(data: dict) -> list[str]:
    """A results file of `benchmarks/harness.py`: one row per measurement (median [min-max] over its repeats, the
    bound beside), then the machine, versions and settings as one key/value table."""
    lines = ["| measurement | median [min–max] | n | unit | bound | how the bound was derived |",
             "|---|---|---|---|---|---|"]
    for m in data.get("measurements", []):
        bound = m.get("bound") or {}
        shown = "" if bound.get("value") is None else f"{_format(bound['value'])} ({bound.get('kind', '')})"
        params = ", ".join(f"{k}={_format(v)}" for k, v in (m.get("params") or {}).items())
        name = f"{m['name']}" + (f" ({params})" if params else "")
        lines.append(f"| {name} | {_format(m['median'])} [{_format(m['min'])}–{_format(m['max'])}] | {m.get('n', '')} "
                     f"| {m.get('unit', '')} | {shown} | {bound.get('derivation', '')} |")
    scalars = {}
    for key in ("hardware", "versions", "settings", "extra"):
        scalars.update(_flatten(data.get(key, {}), key))
    lines += ["", "| field | value |", "|---|---|"] + [f"| `{k}` | {_format(v)} |" for k, v in scalars.items()]
    return lines


def _table_for(data) -> list[str]:
    """Tables for one results file: a row table per list of records, a key/value table for everything else."""
    if isinstance(data, dict) and data.get("schema") == HARNESS_SCHEMA:
        return _harness_table(data)
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        return _row_table(data)
    lines, scalars = [], {}
    for key, value in (data.items() if isinstance(data, dict) else [("value", data)]):
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            lines += ["", f"`{key}`:", "", *_row_table(value)]
        elif isinstance(value, dict) and value and all(
                isinstance(v, dict) and v and all(not isinstance(x, (dict, list)) for x in v.values())
                for v in value.values()):
            # e.g. {"full_ttft": {"median": ..., "min": ..., "max": ...}, ...}: one row per entry
            lines += ["", f"`{key}`:", "", *_row_table([{"": name, **stats} for name, stats in value.items()])]
        elif isinstance(value, dict) and value and all(isinstance(v, list) and v and all(isinstance(r, dict) for r in v)
                                                        for v in value.values()):
            for inner, records in value.items():
                lines += ["", f"`{key}.{inner}`:", "", *_row_table(records)]
        else:
            scalars.update(_flatten(value, str(key)))
    if scalars:
        head = ["| field | value |", "|---|---|"] + [f"| `{k}` | {_format(v)} |" for k, v in scalars.items()]
        lines = head + lines
    return lines


# results files that are no benchmark: code-layout counts (duplicates, import cycles), kept for the maintainers
NOT_BENCHMARKS = {"issue32_layout.json"}


def results_files() -> list[Path]:
    """Every results file the benchmarks page shows: `benchmarks/results/*.json`, then the reproduce tables."""
    files = sorted(RESULTS_DIR.glob("*.json")) + sorted((RESULTS_DIR / "reproduce").glob("*/*.json"))
    return [path for path in files if path.name not in NOT_BENCHMARKS]


def render_benchmark(name: str) -> str:
    path = RESULTS_DIR / name
    data = json.loads(path.read_text())
    return "\n".join(_table_for(data)) + "\n"


def render_benchmark_tables() -> str:
    """One section per results file: its path, the command it records (if any) and its table."""
    parts = []
    for path in results_files():
        name = path.relative_to(RESULTS_DIR).as_posix()
        data = json.loads(path.read_text())
        parts += [f"### `{name}`", ""]
        command = data.get("command") if isinstance(data, dict) else None
        if command:
            parts += [f"Command: `{_escape(command)}`", ""]
        parts += [*_table_for(data), ""]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------------- mkdocs hooks
def model_pages_nav(nav: list, docs_dir: Path) -> list:
    """`nav` with every `models/*.md` page that the "Model families" section does not list yet appended to it,
    titled by the page's first `# ` heading: a new family's page needs no line in `mkdocs.yml`. `nav` without that
    section is returned unchanged."""
    for entry in nav:
        if isinstance(entry, dict) and "Model families" in entry:
            section = entry["Model families"]
            listed = {value for item in section if isinstance(item, dict) for value in item.values()}
            for page in sorted((docs_dir / "models").glob("*.md")):
                uri = f"models/{page.name}"
                if uri not in listed:
                    heading = next((line[2:].strip() for line in page.read_text().splitlines()
                                    if line.startswith("# ")), page.stem)
                    section.append({heading: uri})
    return nav


def on_config(config, **kwargs):
    src = str(REPO_ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    if config.get("nav"):
        config["nav"] = model_pages_nav(config["nav"], Path(config["docs_dir"]))
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    for path in sorted([*RESULTS_DIR.rglob("*.png"), *RESULTS_DIR.rglob("*.svg")]):
        uri = "results/" + path.relative_to(RESULTS_DIR).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files, **kwargs):
    def replace(match):
        if match.group(1) == "cli":
            return render_cli_reference()
        if match.group(1) == "benchmarks":
            return render_benchmark_tables()
        return render_benchmark(match.group("name"))

    return PLACEHOLDER.sub(replace, markdown)
