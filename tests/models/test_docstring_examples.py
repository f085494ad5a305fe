"""The docstring examples of the files that travel with a checkpoint (`models/*/configuration_*.py`, `modeling_*.py`,
`pipeline_*.py`, copied into every saved folder and Hub repo) speak to users who have transformers and no hf_readonce:
they never import the package, and what they print is what the class gives."""

import doctest
import importlib
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_without_hf_readonce

MODELS = REPO_ROOT / "src" / "hf_readonce" / "models"
REMOTE_CODE = sorted(p for pattern in ("configuration_*.py", "modeling_*.py", "pipeline_*.py")
                     for p in MODELS.glob(f"*/{pattern}"))


def _example_lines(path: Path) -> list[tuple[int, str]]:
    return [(number, line) for number, line in enumerate(path.read_text().splitlines(), 1)
            if re.match(r"\s*(>>>|\.\.\.) ", line)]


def test_no_example_of_a_remote_code_file_imports_hf_readonce():
    assert len(REMOTE_CODE) >= 15  # every family's files were found
    imports = [f"{path.relative_to(MODELS)}:{number}: {line.strip()}" for path in REMOTE_CODE
               for number, line in _example_lines(path) if "hf_readonce" in line]
    assert not imports, imports


@pytest.mark.parametrize("path", [p for p in sorted(MODELS.glob("*/configuration_*.py")) if ">>> " in p.read_text()],
                         ids=lambda p: p.stem)
def test_configuration_examples_print_what_they_say(path):
    """Each config class's example, run as a doctest in its own module (the line that loads the class from a
    checkpoint is skipped: the module defines it)."""
    module = importlib.import_module(f"hf_readonce.models.{path.parent.name}.{path.stem}")
    runner, parser = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS), doctest.DocTestParser()
    for found in doctest.DocTestFinder().find(module):
        # the docstring's ``` fences end an expected output, as transformers' doc tests read them
        text = "\n".join(line for line in found.docstring.splitlines() if line.strip() != "```python"
                         and line.strip() != "```")
        runner.run(parser.get_doctest(text, dict(vars(module)), found.name, str(path), 0))
    results = runner.summarize(verbose=False)
    assert results.failed == 0 and results.attempted >= 3


def test_the_deformer_config_example_runs_without_hf_readonce():
    """The shipped DeFormer checkpoint carries `configuration_deformer_bert.py`: its example, with the shipped folder
    for the Hub repo, runs where `import hf_readonce` fails."""
    from hf_readonce.weights import shipped_checkpoint_path

    folder = shipped_checkpoint_path("reference-deformer", verify=False)
    lines = [line.strip() for _, line in _example_lines(Path(folder) / "configuration_deformer_bert.py")]
    code = "\n".join(re.sub(r"^(>>>|\.\.\.) ", "", line).replace("  # doctest: +SKIP", "") for line in lines
                     if line.startswith((">>> ", "... ")))
    code = code.replace('"hf-readonce/deformer-minilm-qa-reference"', repr(str(folder)))
    assert "trust_remote_code=True" in code and "hf_readonce" not in code.replace(repr(str(folder)), "")
    result = run_without_hf_readonce(code.replace("config.num_decomposed_layers", "print(config.num_decomposed_layers)")
                                     + "\nprint(type(config).__module__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "4" and "configuration_deformer_bert" in result.stdout, result.stdout
