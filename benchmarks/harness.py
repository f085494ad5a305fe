"""The one benchmark harness of `benchmarks/`: timing, interleaving, cold reads and one results schema.

Every script under `benchmarks/` times through [`interleave`] (or [`time_once`] for a call that cannot repeat, such
as a whole CLI run measured by its own wall clock) and writes its figures through [`Results`], so that every results
file has the same fields, checked by [`validate`] (and by `tests/benchmarks/test_harness.py` on every file under
`benchmarks/results/` that a script of this folder writes):

    {"schema": "hf-readonce-bench/1",
     "benchmark": "bench_longdoc",                      # the script's name
     "command": "python benchmarks/bench_longdoc.py --lengths 4096 ...",   # exactly as run
     "created": "2026-11-25T15:10:00+00:00",
     "hardware": {"cpu_model": "AMD EPYC ...", "logical_cpus": 2, "torch_threads": 2, "dtype": "float32",
                  "note": "2 cores shared with other jobs"},
     "versions": {"python": "3.12.3", "torch": "2.13.0", "transformers": "5.24.0", ...},
     "settings": {...},                                 # the script's arguments
     "measurements": [
        {"name": "forward neighborhood / full @4096",   # unique within the file
         "unit": "x",                                   # "s", "x" (a ratio), "MiB", "bytes", "questions", ...
         "median": 1.71, "min": 1.62, "max": 1.74,       # of `repeats`
         "repeats": [1.62, 1.70, ...], "n": 5,           # every value, in measurement order
         "bound": {"kind": "flop", "value": 1.81,        # "flop", "memory" or "none"
                   "derivation": "8nd^2 + 4ndf + 4n(2r+1)d per layer ..."},
         "params": {"length": 4096, ...}},               # what the measurement depends on
        ...],
     "extra": {...}}                                    # anything else the script reports (counts, sizes, notes)

Timing: [`interleave`] runs the callables round robin (A B A B ...) in this process, `warmup` untimed rounds then
`repeats` timed rounds (default 5), each call timed by a `torch.utils.benchmark.Timer` (with the process's torch
thread count: `Timer` would otherwise pin 1 thread) through its measurement step `Timer._timeit(number)`:
`Timer.timeit` first runs the statement twice more as its own warm-up before every measurement, which would triple
the cost of a 16k-token forward and warm a cold read just before it is timed; the harness's warm-up rounds take
that role instead. A ratio is formed per round
([`paired_ratios`]): round i's baseline time over round i's method time, so slow phases of a shared machine hit
both sides of a ratio alike; its median, min and max are those of the per-round ratios.

Cold reads: [`drop_page_cache`] fsyncs each file then asks the kernel to drop its cached pages
(`os.posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`), so the next read comes from storage (Linux; where the call
is missing the function returns False and a "cold" figure must not be reported as cold).

FLOP bounds: [`count_flops`] runs a callable once, untimed, under `torch.utils.flop_counter.FlopCounterMode` (with
the CPU SDPA kernel that torch's table lacks) and returns its forward FLOPs. A bound is either that count on the
timed calls themselves (`bench_break_even`, `bench_readonce`, `bench_readtwice`) or a formula that a test compares
with it (`bench_kv_cache.prefill_flops`, `bench_selective_recompute.selective_flops`, `bench_longdoc`,
`bench_longdoc_reuse`, `bench_deformer`).

Bad input: [`fail`] exits with status 2 and a message naming the option (`--lengths: ...`), no traceback.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

SCHEMA = "hf-readonce-bench/1"
BOUND_KINDS = ("flop", "memory", "none")
REQUIRED = ("schema", "benchmark", "command", "created", "hardware", "versions", "settings", "measurements")
HARDWARE_FIELDS = ("cpu_model", "logical_cpus", "torch_threads", "dtype")
MEASUREMENT_FIELDS = ("name", "unit", "median", "min", "max", "repeats", "n", "bound", "params")
MIN_REPEATS = 5


class BenchmarkInputError(SystemExit):
    """Raised by [`fail`]: a `SystemExit(2)` whose message names the bad option (printed by Python, no traceback)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2
        self.message = message

    def __str__(self) -> str:
        return self.message


def fail(option: str, message: str) -> BenchmarkInputError:
    """The exception a script raises for a bad option: `raise fail("--lengths", "16385 exceeds ...")` prints
    `bench_x: --lengths: 16385 exceeds ...` on stderr and exits with status 2 (argparse's status for bad usage).

    Args:
        option: the command-line option, e.g. `"--lengths"`.
        message: what is wrong and what is allowed.
    """
    script = Path(sys.argv[0]).stem or "benchmark"
    print(f"{script}: {option}: {message}", file=sys.stderr)
    return BenchmarkInputError(f"{option}: {message}")


# ----------------------------------------------------------------------------------------------------- environment
def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else `platform.processor()`, else "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def hardware(dtype: str = "float32", note: str | None = None) -> dict:
    """`{"cpu_model", "logical_cpus", "torch_threads", "dtype", "platform", "note"}` of this process, plus
    `"omp_wait_policy"` where the `OMP_WAIT_POLICY` environment variable is set.

    On cores shared with other jobs, OpenMP threads that spin while they wait (the default) can slow each call
    ten-fold or more whenever another process holds a core; `OMP_WAIT_POLICY=PASSIVE` makes them sleep instead, so
    the results record it.

    Args:
        dtype: the compute dtype of the measured models (a string, e.g. `"float32"`).
        note: free text, e.g. that the cores were shared with other jobs.
    """
    import torch

    out = {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "dtype": dtype, "platform": platform.platform(), "note": note}
    if os.environ.get("OMP_WAIT_POLICY"):
        out["omp_wait_policy"] = os.environ["OMP_WAIT_POLICY"]
    return out


def add_threads_argument(parser, default: int | None = None) -> None:
    """Add `--threads N` to a benchmark's `argparse` parser (`default` None: torch's own count, the machine's cores);
    read it with [`set_threads`], so that every results file states the threads it ran with
    (`hardware.torch_threads`). A count below 1 exits with status 2, naming `--threads`."""
    def positive(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"a positive whole number of threads, got {text!r}")
        return value

    parser.add_argument("--threads", type=positive, default=default,
                        help="torch threads for the timed work and OMP_NUM_THREADS for the processes it starts "
                        + ("(default: torch's own count)" if default is None else f"(default: {default})"))


def set_threads(threads: int | None) -> int:
    """Use `threads` torch threads in this process and `OMP_NUM_THREADS=threads` in the processes it starts.

    Args:
        threads: a positive count, or None to keep torch's default.

    Returns:
        The thread count in use.

    Raises:
        ValueError: `threads` not a positive whole number.
    """
    import torch

    if threads is None:
        return torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"--threads must be a positive whole number, got {threads!r}.")
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    return threads


def versions() -> dict:
    """Versions of Python and of the libraries the benchmarks use (None where not installed)."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "safetensors", "hf-readonce", "accelerate", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def command_line(script: str, argv: Iterable[str] | None) -> str:
    """`python benchmarks/<script>.py <args>`, the arguments quoted as a shell would need them."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", f"benchmarks/{script}.py", *(shlex.quote(a) for a in args)])


# ------------------------------------------------------------------------------------------------------------ timing
def _timer(fn: Callable[[], object]):
    import torch
    import torch.utils.benchmark as benchmark

    return benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())


def _measure(timer, number: int) -> float:
    """Seconds per call: one measurement of `number` calls, without `Timer.timeit`'s extra warm-up calls (see the
    module docstring)."""
    return timer._timeit(number) / number


def time_once(fn: Callable[[], object], number: int = 1) -> float:
    """Seconds per call of `fn`, one measurement of `number` calls through `torch.utils.benchmark.Timer` (no
    warm-up: call it once first where first-call costs must not count)."""
    return _measure(_timer(fn), number)


def interleave(fns: dict[str, Callable[[], object]], repeats: int = MIN_REPEATS, warmup: int = 1, number: int = 1,
               before: Callable[[str], object] | None = None,
               after: Callable[[str, int], object] | None = None) -> dict[str, list[float]]:
    """Time every callable of `fns` round robin (A B A B ...): `warmup` untimed rounds, then `repeats` timed ones.

    Args:
        fns: name -> callable without arguments (the baseline first, by convention).
        repeats: timed rounds (>= 1; results files under benchmarks/results need >= 5).
        warmup: untimed rounds first (first-call allocations, kernel selection, lazy imports).
        number: calls per timed measurement (the reported time is per call).
        before: called with the name before every call, timed or not, outside the timed region (e.g. to drop the
            page cache for a cold read).
        after: called with the name and the round index (0-based, warm-up rounds first) after every call, outside
            the timed region (e.g. to read a peak-memory counter that `before` reset).

    Returns:
        name -> `repeats` seconds per call, in round order.

    Raises:
        ValueError: `repeats < 1`, `warmup < 0` or `number < 1`.
    """
    if repeats < 1 or warmup < 0 or number < 1:
        raise ValueError(f"repeats >= 1, warmup >= 0, number >= 1 needed, got {repeats}, {warmup}, {number}.")
    timers = {name: _timer(fn) for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(warmup + repeats):
        for name, fn in fns.items():
            if before is not None:
                before(name)
            if round_ < warmup:
                fn()
            else:
                times[name].append(_measure(timers[name], number))
            if after is not None:
                after(name, round_)
    return times


def summarize(values: list[float]) -> dict:
    """`{"median", "min", "max", "repeats", "n"}` of `values` (every value kept, in order).

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("no values to summarize.")
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "repeats": values,
            "n": len(values)}


def paired_ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    """Round-by-round ratios `numerator[i] / denominator[i]` (e.g. baseline time / method time = speed-up).

    Raises:
        ValueError: lists of different lengths.
    """
    if len(numerator) != len(denominator):
        raise ValueError(f"paired ratios need equal lengths, got {len(numerator)} and {len(denominator)}.")
    return [a / b for a, b in zip(numerator, denominator)]


def bound(kind: str = "none", value: float | None = None, derivation: str = "") -> dict:
    """A measurement's bound: `kind` "flop" (a ratio the FLOP counts allow), "memory" (bytes moved or held), or
    "none" (then `derivation` says why there is none).

    Raises:
        ValueError: an unknown kind, or a "flop"/"memory" bound without value or derivation.
    """
    if kind not in BOUND_KINDS:
        raise ValueError(f"bound kind must be one of {BOUND_KINDS}, got {kind!r}.")
    if kind != "none" and (value is None or not derivation):
        raise ValueError(f"a {kind} bound needs a value and a derivation.")
    return {"kind": kind, "value": value, "derivation": derivation}


NO_BOUND = "a time, not a ratio: its bound is on the ratio it enters"


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args, out_shape=None,
                    **kwargs) -> int:
    """FLOPs of `aten._scaled_dot_product_flash_attention_for_cpu` (what `F.scaled_dot_product_attention` runs on
    the CPU), counted like torch's own SDPA formula: `2 d` per (query, key) pair for the scores plus `2 d_v` for the
    weighted sum, per batch row and head. Pairs: every `s_q x s_k` pair under an explicit mask (the kernel computes
    masked scores too); with `is_causal=True` only the causal ones, `min(i + 1, s_k)` for query i (torch's top-left
    alignment), as the kernel skips the blocks above the diagonal."""
    *batch, query_length, head_dim = query_shape
    key_length, value_dim = key_shape[-2], value_shape[-1]
    if is_causal:
        kept = min(query_length, key_length)
        pairs = kept * (kept + 1) // 2 + (query_length - kept) * key_length
    else:
        pairs = query_length * key_length
    return 2 * math.prod(batch) * pairs * (head_dim + value_dim)


def count_flops(fn: Callable[[], object]) -> int:
    """Forward FLOPs of one call of `fn`, counted by `torch.utils.flop_counter.FlopCounterMode` (no hand formula):
    every matrix product (`2 m n k`, a multiply-add counted as 2) and every attention kernel torch's counter knows,
    plus the CPU SDPA kernel (`_cpu_sdpa_flops`), which torch's table lacks. Element-wise work (norms, activations,
    softmax) is not counted, as in torch's counter. The call runs once, untimed; use it for a ratio's FLOP bound.

    Returns:
        `int`, FLOPs (not FLOP/s).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        fn()
    return int(counter.get_total_flops())


# ----------------------------------------------------------------------------------------------------- cold reads
def drop_page_cache(paths: Iterable[str | os.PathLike]) -> bool:
    """fsync every file under `paths` (files or folders, recursively), then drop its pages from the OS page cache
    (`posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`), so that the next read of it comes from storage.

    Returns:
        True if the advice was given for every file; False where the platform lacks `posix_fadvise` (the reads
        that follow are then not cold).
    """
    if not hasattr(os, "posix_fadvise"):
        return False
    for file in _files(paths):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def cached_fraction(paths: Iterable[str | os.PathLike]) -> float | None:
    """Fraction of the pages of the files under `paths` resident in the OS page cache (`mincore` on a private
    mapping, through ctypes; Linux), or None where it cannot be checked. Checks that [`drop_page_cache`] worked."""
    import ctypes
    import mmap

    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    page, resident, total = mmap.PAGESIZE, 0, 0
    for file in _files(paths):
        size = file.stat().st_size
        if size == 0:
            continue
        pages = (size + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        with open(file, "rb") as handle, mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
            anchor = ctypes.c_char.from_buffer(mapped)  # no page is touched: only its address is taken
            status = mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec)
            del anchor
        if status != 0:
            return None
        resident += sum(v & 1 for v in vec)
        total += pages
    return resident / total if total else None


def _files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file()))
        elif path.is_file():
            files.append(path)
    return files


# --------------------------------------------------------------------------------------------------------- results
class Results:
    """The results of one benchmark run, written in the harness schema (see the module docstring).

    Args:
        benchmark: the script's name, e.g. `"bench_longdoc"`.
        argv: the script's arguments (None: `sys.argv[1:]`), recorded as the exact command.
        settings: the parsed arguments (e.g. `vars(args)`).
        dtype: compute dtype of the measured models.
        note: hardware note (e.g. "2 cores shared with 3 other sessions").
    """

    def __init__(self, benchmark: str, argv: Iterable[str] | None = None, settings: dict | None = None,
                 dtype: str = "float32", note: str | None = None):
        self.doc = {"schema": SCHEMA, "benchmark": benchmark, "command": command_line(benchmark, argv),
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "hardware": hardware(dtype, note), "versions": versions(),
                    "settings": _jsonable(settings or {}), "measurements": [], "extra": {}}

    def add(self, name: str, values: list[float], unit: str = "s", bound: dict | None = None,
            params: dict | None = None) -> dict:
        """Record one measurement: `values` (every repeat), its unit, bound (default: none, with [`NO_BOUND`] as the
        reason) and params. Returns the recorded entry.

        Raises:
            ValueError: a name already recorded, or no values.
        """
        if any(m["name"] == name for m in self.doc["measurements"]):
            raise ValueError(f"measurement {name!r} recorded twice.")
        entry = {"name": name, "unit": unit, **summarize(values),
                 "bound": bound or globals()["bound"]("none", derivation=NO_BOUND), "params": _jsonable(params or {})}
        self.doc["measurements"].append(entry)
        return entry

    def add_ratio(self, name: str, numerator: list[float], denominator: list[float], bound: dict | None = None,
                  params: dict | None = None) -> dict:
        """Record the per-round ratios numerator / denominator (unit "x"); see [`paired_ratios`]."""
        return self.add(name, paired_ratios(numerator, denominator), "x", bound, params)

    def get(self, name: str) -> dict:
        """The recorded measurement called `name` (KeyError if none)."""
        for m in self.doc["measurements"]:
            if m["name"] == name:
                return m
        raise KeyError(name)

    @property
    def extra(self) -> dict:
        """Free-form script-specific figures (counts, sizes, notes), stored under `"extra"`."""
        return self.doc["extra"]

    def write(self, path: str | os.PathLike | None) -> dict:
        """Validate and write the JSON to `path` (folders created; nothing written when `path` is None).
        Returns the document.

        Raises:
            ValueError: the document does not have the schema (a bug in the script).
        """
        self.doc["extra"] = _jsonable(self.doc["extra"])
        problems = validate(self.doc)
        if problems:
            raise ValueError("results do not have the harness schema: " + "; ".join(problems))
        if path is not None:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.doc, indent=2) + "\n")
        return self.doc

    def table(self) -> str:
        """The measurements as aligned text lines: name, median [min-max] unit, n, bound."""
        lines = []
        for m in self.doc["measurements"]:
            b = m["bound"]
            shown = f"{b['kind']} {b['value']:.3g}" if b["value"] is not None else "-"
            lines.append(f"{m['name']:58s} {_num(m['median']):>10s} [{_num(m['min'])}-{_num(m['max'])}] "
                         f"{m['unit']:5s} n={m['n']:<3d} bound {shown}")
        return "\n".join(lines)


def _num(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.3e}"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def validate(doc: dict, min_repeats: int = 1) -> list[str]:
    """Problems of `doc` against the harness schema (an empty list: it has the schema).

    Args:
        doc: a loaded results JSON.
        min_repeats: the fewest repeats a timing (unit "s") or ratio (unit "x") may have; files under
            `benchmarks/results/` are checked with [`MIN_REPEATS`].
    """
    problems = [f"missing field {k!r}" for k in REQUIRED if k not in doc]
    if problems:
        return problems
    if doc["schema"] != SCHEMA:
        problems.append(f"schema is {doc['schema']!r}, not {SCHEMA!r}")
    if not str(doc["command"]).startswith("python benchmarks/"):
        problems.append(f"command {doc['command']!r} does not start with 'python benchmarks/'")
    problems += [f"hardware lacks {k!r}" for k in HARDWARE_FIELDS if k not in doc["hardware"]]
    if not doc["versions"].get("torch"):
        problems.append("versions lack torch")
    names = set()
    if not doc["measurements"]:
        problems.append("no measurements")
    for m in doc["measurements"]:
        missing = [k for k in MEASUREMENT_FIELDS if k not in m]
        if missing:
            problems.append(f"measurement {m.get('name')!r} lacks {missing}")
            continue
        label = m["name"]
        if label in names:
            problems.append(f"measurement {label!r} appears twice")
        names.add(label)
        values = m["repeats"]
        if not isinstance(values, list) or len(values) != m["n"] or not values:
            problems.append(f"{label!r}: repeats do not match n")
            continue
        if m["unit"] in ("s", "x") and m["n"] < min_repeats:
            problems.append(f"{label!r}: {m['n']} repeats, fewer than {min_repeats}")
        if not (m["min"] == min(values) and m["max"] == max(values)
                and math.isclose(m["median"], statistics.median(values), rel_tol=1e-9, abs_tol=1e-12)):
            problems.append(f"{label!r}: median/min/max do not match its repeats")
        b = m["bound"]
        if not isinstance(b, dict) or b.get("kind") not in BOUND_KINDS or "derivation" not in b:
            problems.append(f"{label!r}: bound must be {{kind, value, derivation}} with kind in {BOUND_KINDS}")
        elif b["kind"] != "none" and (b.get("value") is None or not b["derivation"]):
            problems.append(f"{label!r}: a {b['kind']} bound needs a value and a derivation")
        elif b["kind"] == "none" and not b["derivation"]:
            problems.append(f"{label!r}: a missing bound needs its reason in 'derivation'")
    return problems
