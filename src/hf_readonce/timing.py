"""How busy the machine was while a speed-up was timed, and when that makes the figure unreliable.

The demo and the recipes record [`machine_load`] beside their timings; the demo's last lines and the model cards
generated from a run's metrics ([`hf_readonce.hub.cards.card_from_metrics_file`]) both call a speed-up unreliable by
the same rule, [`busy_machine_reasons`]. Standard library only.
"""

import os
from collections.abc import Mapping


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS reports one, else `os.cpu_count()`, else 1)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_load() -> dict:
    """`{"speed_load_average": 1-minute load average (rounded to 2 decimals), "speed_cpus": usable CPUs}`, read
    right after the timing; `{"speed_cpus": ...}` alone where the OS has no load average (`os.getloadavg`)."""
    out = {"speed_cpus": usable_cpus()}
    try:
        out["speed_load_average"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        pass
    return out


# a speed-up measured while the machine was busy: the spread of the rounds (max / min) beyond this is flagged
BUSY_RANGE_RATIO = 1.5
# ... or a 1-minute load average beyond this many times the usable CPUs: the timed paths' own threads make up to one
# per CPU, so on an idle machine the load sits near the CPU count; past 1.5x, other work shared the cores
BUSY_LOAD_FACTOR = 1.5


def busy_machine_reasons(metrics: Mapping) -> list[str]:
    """What says the measured speed-ups of `metrics` are unreliable (the clauses [`busy_machine_note`] joins): the
    1-minute load average against the usable CPUs, and each speed-up whose rounds spread wide; empty when nothing
    does.

    Args:
        metrics (`Mapping`): what the DeFormer recipe's `run` returns (or a metrics file a card reads) (`speedup_*_range`, `speed_load_average`, `speed_cpus`, each
            optional; missing or non-numeric values are not counted).
    """
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    reasons = []
    load, cpus = metrics.get("speed_load_average"), metrics.get("speed_cpus")
    if number(load) and isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 \
            and load > BUSY_LOAD_FACTOR * cpus:
        reasons.append(f"1-minute load average {load:.2f} on {cpus} usable CPU{'s' if cpus != 1 else ''}")
    for name, what in (("precomputed", "with passages precomputed"), ("including_encoding", "including encoding")):
        spread = metrics.get(f"speedup_{name}_range")
        low, high = spread[:2] if isinstance(spread, (list, tuple)) and len(spread) >= 2 else (None, None)
        if number(low) and number(high) and low > 0 and high / low > BUSY_RANGE_RATIO:
            reasons.append(f"the rounds' speed-ups {what} range {low:.2f}-{high:.2f}x")
    return reasons


def busy_machine_note(metrics: Mapping) -> str | None:
    """One line saying the measured speed-ups are unreliable, or `None` when nothing suggests so.

    A figure is flagged when a speed-up's per-round ratios spread wide (max / min > `BUSY_RANGE_RATIO`, 1.5) or the
    1-minute load average after the timing exceeded 1.5 times the usable CPUs (`speed_load_average` >
    `BUSY_LOAD_FACTOR * speed_cpus`, as [`machine_load`] records them; the timed paths' own threads account for up
    to one per CPU, so beyond that other work shared the cores with them).

    Args:
        metrics (`Mapping`): as [`busy_machine_reasons`] reads it (`speedup_*_range`, `speed_load_average`, `speed_cpus`, each
            optional).
    """
    reasons = busy_machine_reasons(metrics)
    if not reasons:
        return None
    return (f"The machine was busy while timing ({'; '.join(reasons)}): the speed-up is unreliable; rerun on an "
            "idle machine for a figure to quote.")
