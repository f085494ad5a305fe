"""The package layout's import rules (README, "Layout"): `models/` is Hub-portable and imports nothing outside
itself, configuration files import only transformers and the standard library, `store/` imports nothing from the
rest of hf-readonce, nothing imports `cli.py`, and `import hf_readonce` pulls in no Trainer, store or datasets."""

import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "hf_readonce"


def imports(path):
    """`(level, module)` of every import in a file (`module` is the dotted name, '' for `from . import x`)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or ""))
        elif isinstance(node, ast.Import):
            out += [(0, alias.name) for alias in node.names]
    return out


def test_models_import_only_torch_transformers_stdlib_and_siblings():
    families = [p for p in (PACKAGE / "models").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert {p.name for p in families} >= {"deformer_bert", "readonce_bart", "recurrent"}
    assert not list((PACKAGE / "models").glob("*.py")), "models/ holds family folders only"
    for family in families:
        for path in family.glob("*.py"):
            assert path.name.startswith(("configuration_", "modeling_", "convert_", "pipeline_")), path
            for level, module in imports(path):
                if level:
                    assert level == 1 and (family / f"{module}.py").is_file(), f"{path}: from {'.' * level}{module}"
                    if path.name.startswith("configuration_"):
                        assert module.startswith("configuration_"), f"{path} imports {module}"
                    continue
                root = module.split(".")[0]
                allowed = {"transformers"} if path.name.startswith("configuration_") else {"torch", "transformers"}
                assert root in allowed or root in sys.stdlib_module_names or root == "__future__", (
                    f"{path} imports {module}")


def test_store_imports_nothing_from_the_rest_of_the_package():
    for path in (PACKAGE / "store").glob("*.py"):
        for level, module in imports(path):
            assert level <= 1, f"{path}: from {'.' * level}{module}"
            assert not module.startswith("hf_readonce"), f"{path} imports {module}"


def test_nothing_imports_the_cli():
    for path in PACKAGE.rglob("*.py"):
        if path.name == "cli.py":
            continue
        for level, module in imports(path):
            name = module.split(".")[-1] if module else ""
            assert not (name == "cli" and (level or module.startswith("hf_readonce"))), f"{path} imports the CLI"


@pytest.mark.parametrize("folder", ["representations", "tasks", "recipes", "hub"])
def test_lower_layers_do_not_import_higher_ones(folder):
    higher = {"representations": ("tasks.question_answering_store", "recipes", "hub"), "tasks": ("recipes", "hub"),
              "recipes": ("hub",), "hub": ("recipes",)}[folder]
    for path in (PACKAGE / folder).glob("*.py"):
        for level, module in imports(path):
            if level == 2:
                assert not module.startswith(higher), f"{path} imports ..{module}"


def test_import_hf_readonce_pulls_in_no_trainer_store_or_datasets():
    code = ("import sys, hf_readonce\n"
            "print(sorted(m for m in ('transformers.trainer', 'datasets', 'hf_readonce.store', 'hf_readonce.tasks',"
            " 'hf_readonce.representations', 'torchmetrics') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", result.stdout


def test_version_is_the_one_pyproject_builds():
    import hf_readonce

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    with open(REPO_ROOT / "pyproject.toml", "rb") as handle:
        assert hf_readonce.__version__ == tomllib.load(handle)["project"]["version"]


def test_no_compat_attic():
    """The package was never released with its old module paths: no shim package, no deprecated aliases there."""
    assert not (PACKAGE / "_compat").exists()
