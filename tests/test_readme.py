"""The README stays short and true: CI runs its own install and test commands, and its headline figure is the one in
the results file it cites. (Its examples run as tests through Sybil: see the repository's conftest.py.)"""

import json
import re

from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_readme_is_short_and_tells_no_history():
    assert len(README.splitlines()) <= 250
    assert not re.search(r"\bissue\s*#?\d", README, re.I)
    assert len(re.findall(r"```python\n", README)) >= 2, "README lost its quick start or its store example"


def test_ci_runs_readme_commands():
    bash = re.findall(r"```bash\n(.*?)```", README, re.S)
    install = next(line for block in bash for line in block.splitlines() if line.startswith("pip install"))
    test = next(line for block in bash for line in block.splitlines() if "pytest" in line)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert install in ci
    assert test in ci


def test_headline_figure_is_the_results_file():
    results = json.loads((REPO_ROOT / "benchmarks" / "results" / "bench_kv_cache_smollm2.json").read_text())
    assert results["schema"] == "hf-readonce-bench/1"
    ratio = next(m for m in results["measurements"] if m["name"] == "ttft speed-up (cold store read)")
    expected = (f"**{ratio['median']:.1f}x sooner**", f"medians over {ratio['n']} questions",
                f"(range {ratio['min']:.1f}–{ratio['max']:.1f}x)", f"FLOP bound {ratio['bound']['value']:.1f}x",
                "`benchmarks/results/bench_kv_cache_smollm2.json`")
    flat = " ".join(README.split())
    for text in expected:
        assert text in flat, text
