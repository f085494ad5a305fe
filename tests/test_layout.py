"""The package layout's import rules (README, "Layout"): `models/` is Hub-portable and imports nothing outside
itself, configuration files import only transformers and the standard library, `store/` imports nothing from the
rest of hf-readonce, nothing imports `cli.py`, and `import hf_readonce` pulls in no Trainer, store or datasets."""

import ast
import re
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
    """The files of `models/<family>/`, here and in the family packages of `examples/`, travel alone to the Hub."""
    families = [p for p in (PACKAGE / "models").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert {p.name for p in families} >= {"deformer_bert", "readonce_bart", "recurrent"}
    assert not list((PACKAGE / "models").glob("*.py")), "models/ holds family folders only"
    examples = [p for p in REPO_ROOT.glob("examples/*/*/models/*") if p.is_dir() and p.name != "__pycache__"]
    assert {p.name for p in examples} >= {"mean_qa"}
    families += examples
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


# Layers, lowest first (docs/drafts/i32.md, "Layout"): a module imports only modules of its own folder and of lower
# layers, never a higher layer or another folder of its own layer. `tasks/` sits above `representations/`: the adapters
# define how documents become stored tensors; the tasks (QA, LM, answering from a store) use them.
# `arguments` (the argument handling the CLI and the demo share) sits just below the recipes and the CLI.
LAYERS = {"models": 0, "weights": 0, "dtypes": 0, "timing": 0, "store": 1, "representations": 2, "tasks": 3, "": 4, "arguments": 4,
          "recipes": 5, "hub": 5, "cli": 6}


def module_graph() -> dict[str, set[str]]:
    """`hf_readonce` module name -> the package modules it imports, at module level or inside functions (an import
    deferred into a function is still a dependency)."""
    def name_of(path):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(module_graph()) == []


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_go_down_the_layers():
    assert set(LAYERS) >= {_layer(m) for m in module_graph()}, "a new top-level module needs a layer"
    wrong = []
    for module, targets in module_graph().items():
        for target in targets:
            here, there = _layer(module), _layer(target)
            if here != there and LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, wrong


def test_import_hf_readonce_pulls_in_no_trainer_store_or_datasets():
    """`import hf_readonce` imports the family files of `representations/` (their `register_family` calls register
    the models with the Auto classes) but none of the store, the tasks, a Trainer or `datasets`."""
    code = ("import sys, hf_readonce\n"
            "print(sorted(m for m in ('transformers.trainer', 'datasets', 'hf_readonce.store', 'hf_readonce.tasks',"
            " 'hf_readonce.representations.fill', 'hf_readonce.representations.recompute', 'torchmetrics')"
            " if m in sys.modules), 'hf_readonce.representations.registry' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[] True", result.stdout


def test_version_is_the_one_pyproject_builds():
    import hf_readonce

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    with open(REPO_ROOT / "pyproject.toml", "rb") as handle:
        assert hf_readonce.__version__ == tomllib.load(handle)["project"]["version"]


def test_no_compat_attic():
    """The package was never released: no shim package for old module paths, and no deprecated or kept alias of a
    name, keyword or option that no release had. (transformers' own deprecations, such as its renamed cache
    argument, are followed in the comments of models/; the files 0.1.0 wrote still load: tests/test_backward_compat.)"""
    assert not (PACKAGE / "_compat").exists()
    attic = re.compile(r"DeprecationWarning|0\.1\.0 (name|spelling|import path)|its old name|\(kept\)|, kept\)"
                       r"|kept as an alias|kept for callers|first name for")
    found = [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}" for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if attic.search(line)]
    assert not found, found


def _aliases(path) -> list[str]:
    """The second names `path` gives to something, whatever its comments say: a module-level `Old = New` of a class
    or function of the module, a method whose one statement (its docstring and a `warnings.warn` aside) returns
    another method of `self` called without arguments, a property that returns another attribute of `self`, and an
    option hidden from `--help` (`help=argparse.SUPPRESS`)."""
    tree = ast.parse(path.read_text())
    own = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    found = [f"{node.targets[0].id} = {node.value.id}" for node in tree.body
             if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
             and isinstance(node.value, ast.Name) and node.value.id in own]
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for method in (node for node in cls.body if isinstance(node, ast.FunctionDef)):
            body = [s for s in method.body if not (isinstance(s, ast.Expr) and (
                isinstance(s.value, ast.Constant) or (isinstance(s.value, ast.Call)
                                                       and getattr(s.value.func, "attr", None) == "warn")))]
            if method.name.startswith("__") or len(body) != 1 or not isinstance(body[0], ast.Return):
                continue
            value = body[0].value
            if isinstance(value, ast.Call) and not value.args and not value.keywords:
                value = value.func
            elif not any(getattr(d, "id", None) == "property" for d in method.decorator_list):
                continue
            if isinstance(value, ast.Attribute) and getattr(value.value, "id", None) == "self" \
                    and value.attr != method.name:
                found.append(f"{cls.name}.{method.name} -> self.{value.attr}")
    found += [f"line {node.lineno}: an option hidden from --help" for node in ast.walk(tree)
              if isinstance(node, ast.keyword) and node.arg == "help" and isinstance(node.value, ast.Attribute)
              and node.value.attr == "SUPPRESS"]
    return found


def test_no_alias_whatever_its_comment_says():
    """`test_no_compat_attic` reads the words that describe an alias; this finds the alias itself (each kind the
    package once carried: `ReadOnceRepresentations = ReadOnceDocumentEncoderOutput`, `fingerprint()` returning
    `self.representation_fingerprint()`, the `RecurrentCache.memory` property, the hidden `answer --n-best`)."""
    found = {str(path.relative_to(PACKAGE)): names for path in sorted(PACKAGE.rglob("*.py")) if (names := _aliases(path))}
    assert not found, found


def _family_words() -> dict[str, set[str]]:
    """family -> the words that name it in code: its name, model types and config class stems (lower case)."""
    from hf_readonce.representations import registered_families

    return {spec.name: {w.lower() for w in (spec.name, *spec.model_types,
                                            *(c.__name__.removesuffix("Config") for c in spec.configs))}
            for spec in registered_families().values()}


def named_families(path, words) -> set[str]:
    """The families whose words appear in the code of `path` (names and strings; docstrings and comments aside)."""
    import io
    import tokenize

    source = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                      str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    tokens = [t.string.lower().replace("hf_readonce", "").replace("hf-readonce", "")
              for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type in (tokenize.NAME, tokenize.STRING) and t.start[0] not in docstrings]
    return {family for family, names in words.items() if any(w in t for t in tokens for w in names)}


GENERIC = ["store/*.py", "hub/*.py", "cli.py", "__init__.py", "representations/__init__.py",
           "representations/registry.py", "representations/base.py", "representations/fill.py",
           "representations/recompute.py"]


def test_generic_modules_name_no_family_and_no_module_names_two():
    words = _family_words()
    assert len(words) >= 6
    generic = {path for pattern in GENERIC for path in PACKAGE.glob(pattern)}
    assert len(generic) > 15
    for path in generic:
        assert not named_families(path, words), (path, named_families(path, words))
    for path in PACKAGE.rglob("*.py"):
        assert len(named_families(path, words)) <= 1, (path, named_families(path, words))
    # the scan sees a family where one is named
    assert named_families(PACKAGE / "representations" / "deformer_bert.py", words) == {"deformer_bert"}
