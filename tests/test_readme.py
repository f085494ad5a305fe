"""The README stays true: its quick start runs, and CI runs the README's own install and test commands."""

import re

from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2, "README lost its quick start or its store example"
    for number, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {number}", "exec"), {})


def test_ci_runs_readme_commands():
    bash = re.findall(r"```bash\n(.*?)```", README, re.S)
    install = next(line for block in bash for line in block.splitlines() if line.startswith("pip install"))
    test = next(line for block in bash for line in block.splitlines() if "pytest" in line)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert install in ci
    assert test in ci
