"""Every public class and function of the package, and of the family package of `examples/new-family/` (the model
family docs/contributing.md shows), has a docstring, and one that raises `ValueError`/`TypeError` itself says so (the
project's rule: shapes, defaults and the errors raised are in the docstring). Public: a name without a leading
underscore, at module level or inside a public class. The shipped checkpoint copies under `checkpoints/` are
generated and left out."""

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "src" / "hf_readonce"
# the packages walked: hf-readonce and the example family package (its pipeline hooks and adapter included)
PACKAGES = (PACKAGE, REPO_ROOT / "examples" / "new-family" / "mean_qa_family")


def _public_definitions():
    """`(where, node)` for every public class and function (methods of public classes included)."""

    def walk(body, path, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                yield f"{path.relative_to(REPO_ROOT)}:{node.lineno} {prefix}{node.name}", node
                if isinstance(node, ast.ClassDef):
                    yield from walk(node.body, path, f"{prefix}{node.name}.")

    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            if "checkpoints" not in path.relative_to(package).parts:
                yield from walk(ast.parse(path.read_text()).body, path, "")


def _raised_here(node) -> set:
    """The names of `ValueError`/`TypeError` that `node` raises itself (`raise ValueError(...)`)."""
    return {raised.exc.func.id for raised in ast.walk(node)
            if isinstance(raised, ast.Raise) and isinstance(raised.exc, ast.Call)
            and isinstance(raised.exc.func, ast.Name) and raised.exc.func.id in ("ValueError", "TypeError")}


def test_every_public_definition_has_a_docstring():
    missing = [where for where, node in _public_definitions() if not ast.get_docstring(node)]
    assert not missing, "public definitions without a docstring:\n" + "\n".join(missing)


def test_a_public_function_that_raises_says_so():
    silent = []
    for where, node in _public_definitions():
        doc = ast.get_docstring(node)
        if isinstance(node, ast.ClassDef) or not doc:
            continue
        raised = _raised_here(node)
        if raised and "Raises" not in doc and not any(name in doc for name in raised):
            silent.append(f"{where} raises {', '.join(sorted(raised))}")
    assert not silent, "docstrings that do not name the errors raised:\n" + "\n".join(silent)


def test_the_walk_sees_the_package():
    """The two checks above read something: the public API's main classes are among the definitions walked, and the
    example family's adapter, model, answering function and pipeline hooks."""
    names = {where.split(" ")[1] for where, _ in _public_definitions()}
    assert {"RepresentationStore", "DeformerBertForQuestionAnswering", "main"} <= names
    assert {"MeanQaAdapter.read", "MeanQaBertForQuestionAnswering.forward", "answer_from_store",
            "MeanQaQuestionAnsweringPipeline.preprocess", "MeanQaQuestionAnsweringPipeline.postprocess"} <= names
