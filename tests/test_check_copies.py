"""`utils/check_copies.py`: every `# Copied from hf_readonce...` block of `src/` equals its source; an edited copy
fails the check (naming the file and the source), `--fix` rewrites it, renames (`with A->B`) apply, and a marker
that cannot be resolved is an error."""

import importlib.util
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "utils" / "check_copies.py"


def load():
    spec = importlib.util.spec_from_file_location("check_copies", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_every_copy_in_src_equals_its_source():
    module = load()
    differing, errors = module.check(REPO_ROOT / "src")
    assert differing == [] and errors == []
    copies = [c for path in (REPO_ROOT / "src").rglob("*.py") for c in module.find_copies(path)]
    sources = {c.source.rsplit(".", 1)[-1] for c in copies}
    # the fingerprint policy, the cache-argument shim, the misspelled-keyword check and the QA pipelines' shared steps
    # each have one source
    assert {"_FINGERPRINT_IGNORED_FIELDS", "_config_fingerprint", "CACHE_NAME", "_best_answers",
            "tokenizer_fingerprint", "_accepted_keywords", "_check_keyword_arguments"} <= sources
    # every modeling file that fingerprints a config (each family with an adapter) holds the checked copy, or is
    # the source: no second implementation to drift, however many families there are
    source = next(c.source for c in copies if c.source.endswith("._config_fingerprint"))
    source_file = REPO_ROOT / "src" / (source.rsplit(".", 1)[0].replace(".", "/") + ".py")
    defining = {path for path in (REPO_ROOT / "src").rglob("modeling_*.py") if "def _config_fingerprint" in
                path.read_text()}
    copied = {c.path for c in copies if c.source == source}
    assert len(defining) >= 2 and defining == copied | {source_file}, defining ^ (copied | {source_file})


@pytest.fixture
def tree(tmp_path):
    shutil.copytree(REPO_ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "src"


def test_an_edited_copy_fails_and_fix_rewrites_it(tree):
    path = tree / "hf_readonce" / "models" / "readtwice_bert" / "modeling_readtwice_bert.py"
    original = path.read_text()
    assert original.count('"classifier_dropout", ') == 1
    path.write_text(original.replace('"classifier_dropout", ', ""))  # a drifted ignored-field list
    result = run("--src", tree)
    assert result.returncode == 1
    assert ("modeling_readtwice_bert.py" in result.stderr and "copy of hf_readonce.models.deformer_bert."
            "modeling_deformer_bert._FINGERPRINT_IGNORED_FIELDS differs from its source" in result.stderr)
    fixed = run("--src", tree, "--fix")
    assert fixed.returncode == 0 and "1 rewritten" in fixed.stdout
    assert path.read_text() == original and run("--src", tree).returncode == 0


def test_an_edited_source_fails_every_copy(tree):
    path = tree / "hf_readonce" / "models" / "deformer_bert" / "pipeline_deformer_bert.py"
    text = path.read_text()
    path.write_text(text.replace('raise ValueError(f"`{name}` must be >= {low}, got {value}.")',
                                 'raise ValueError(f"`{name}` is below {low}: {value}.")'))
    result = run("--src", tree)
    assert result.returncode == 1
    assert result.stderr.count("pipeline_deformer_bert._check_int differs from its source") == 3


def test_renames_and_unresolvable_markers(tmp_path):
    package = tmp_path / "src" / "hf_readonce"
    package.mkdir(parents=True)
    (package / "a.py").write_text("# how a Foo is made\ndef make_foo(x):\n    return Foo(x)  # a Foo\n")
    copy = ("# Copied from hf_readonce.a.make_foo with Foo->Bar, foo->bar\n# how a Bar is made\n"
            "def make_bar(x):\n    return Bar(x)  # a Bar\n")
    (package / "b.py").write_text(copy)
    assert run("--src", tmp_path / "src").returncode == 0
    (package / "b.py").write_text(copy.replace("Bar(x)", "Bar(x + 1)"))
    assert run("--src", tmp_path / "src").returncode == 1
    (package / "b.py").write_text("# Copied from hf_readonce.a.make_baz\ndef make_baz():\n    pass\n")
    result = run("--src", tmp_path / "src")
    assert result.returncode == 1 and "no 'make_baz'" in result.stderr
    (package / "b.py").write_text("# Copied from hf_readonce.a.make_foo\n\nx = 1\n")
    result = run("--src", tmp_path / "src", "--fix")
    assert result.returncode == 1 and "must stand right above a statement" in result.stderr


def test_strip_copies_leaves_the_sources(tree, tmp_path):
    module = load()
    count = module.strip_copies(tree, tmp_path / "stripped")
    assert count == sum(len(module.find_copies(path)) for path in tree.rglob("*.py")) > 0
    stripped = (tmp_path / "stripped" / "hf_readonce" / "models" / "readonce_bart" / "modeling_readonce_bart.py")
    assert "_config_fingerprint(config, config_class)" not in stripped.read_text()
    source = tmp_path / "stripped" / "hf_readonce" / "models" / "deformer_bert" / "modeling_deformer_bert.py"
    assert "def _config_fingerprint(config, config_class)" in source.read_text()


def test_the_copies_of_examples_are_checked_too(tmp_path):
    """The family package of `examples/new-family/` holds copies of the fingerprint policy: the default run checks
    them against `src/` (as `--src SRC --also PACKAGE` checks another package's), and an edited one fails."""
    module = load()
    assert module.check(REPO_ROOT / "src", also=[REPO_ROOT / "examples"]) == ([], [])
    copies = [c for path in (REPO_ROOT / "examples").rglob("*.py") for c in module.find_copies(path)]
    assert {"_config_fingerprint", "_weights_fingerprint"} <= {c.source.rsplit(".", 1)[-1] for c in copies}
    package = tmp_path / "new-family"
    shutil.copytree(REPO_ROOT / "examples" / "new-family", package, ignore=shutil.ignore_patterns("__pycache__"))
    path = package / "mean_qa_family" / "models" / "mean_qa" / "modeling_mean_qa.py"
    path.write_text(path.read_text().replace('"classifier_dropout", ', ""))
    result = run("--src", REPO_ROOT / "src", "--also", package)
    assert result.returncode == 1 and "modeling_mean_qa.py" in result.stderr and "_FINGERPRINT_IGNORED_FIELDS" in \
        result.stderr, result.stderr
    in_src = sum(len(module.find_copies(path)) for path in module.python_files(REPO_ROOT / "src"))
    in_examples = sum(len(module.find_copies(path)) for path in module.python_files(REPO_ROOT / "examples"))
    default = run()
    assert default.returncode == 0 and default.stdout.startswith(f"{in_src + in_examples} copies checked"), default


def test_build_outputs_and_hidden_folders_are_left_out(tmp_path):
    """What building or installing a family package writes beside its code (`build/lib/` of a non-editable
    `pip install`, `dist/`, `*.egg-info/`, a virtual environment's `site-packages/`, hidden folders such as `.venv/`)
    holds stale copies of its files: they are neither checked, nor counted, nor rewritten by `--fix`. The folders are
    counted from the tree, so a package that itself lies in a hidden folder is checked."""
    module = load()
    package = tmp_path / ".work" / "new-family"
    shutil.copytree(REPO_ROOT / "examples" / "new-family", package,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info", ".*"))
    modeling = package / "mean_qa_family" / "models" / "mean_qa" / "modeling_mean_qa.py"
    own = sum(len(module.find_copies(path)) for path in package.rglob("*.py"))
    assert own >= 2
    stale = modeling.read_text().replace('"classifier_dropout", ', "")
    outputs = ["build/lib/mean_qa_family/models/mean_qa", "dist", "mean_qa_family.egg-info",
               ".venv/lib/python3.11/site-packages/mean_qa_family/models/mean_qa",
               "venv/lib/python3.11/site-packages/mean_qa_family/models/mean_qa", ".tox/py311/src"]
    for folder in outputs:
        (package / folder).mkdir(parents=True)
        (package / folder / "modeling_mean_qa.py").write_text(stale)
    assert module.check(REPO_ROOT / "src", also=[package]) == ([], [])
    in_src = sum(len(module.find_copies(path)) for path in module.python_files(REPO_ROOT / "src"))
    result = run("--src", REPO_ROOT / "src", "--also", package)
    assert result.returncode == 0 and result.stdout.startswith(f"{in_src + own} copies checked"), result
    fixed = run("--src", REPO_ROOT / "src", "--also", package, "--fix")
    assert fixed.returncode == 0 and "rewritten" not in fixed.stdout, fixed
    assert all((package / folder / "modeling_mean_qa.py").read_text() == stale for folder in outputs)
    modeling.write_text(stale)  # the package's own copy is checked, though the package lies in `.work/`
    result = run("--src", REPO_ROOT / "src", "--also", package)
    assert result.returncode == 1 and result.stderr.count("differs from its source") == 1, result.stderr
    assert str(modeling) in result.stderr


def test_a_package_named_build_or_dist_is_checked(tmp_path):
    """Only what a build writes is left out: a `build/` or `dist/` folder that is a package (an `__init__.py`), or
    that lies elsewhere than beside the project's pyproject.toml, is code of the tree, and its stale copy fails the
    check (a silent "all equal" otherwise), run on the project or on its package alone."""
    module = load()
    src = tmp_path / "src"
    (src / "hf_readonce").mkdir(parents=True)
    (src / "hf_readonce" / "a.py").write_text("def make_foo(x):\n    return Foo(x)\n")
    stale = "# Copied from hf_readonce.a.make_foo\ndef make_foo(x):\n    return Foo(x + 1)\n"
    project = tmp_path / "project"
    package = project / "family_pkg"
    folders = [project / "build", package / "dist", package / "build", package / "models" / "dist"]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "copy.py").write_text(stale)
    (project / "pyproject.toml").write_text('[project]\nname = "family-pkg"\n')
    for folder in folders[1:3]:
        (folder / "__init__.py").write_text("")
    stale_copies = {str(folder / "copy.py") for folder in folders[1:]}  # `build/` beside pyproject.toml: an output
    for tree in (project, package):
        differing, errors = module.check(src, also=[tree])
        assert errors == [] and {line.split(":")[0] for line in differing} == stale_copies, differing
    (project / "build" / "__init__.py").write_text("")  # a package named `build` beside pyproject.toml: code
    differing, _ = module.check(src, also=[project])
    assert {line.split(":")[0] for line in differing} == stale_copies | {str(project / "build" / "copy.py")}


def test_strip_copies_writes_the_tree_without_its_build_outputs(tree, tmp_path):
    """`--strip-copies` reads the files `check` reads: a hidden folder or a `site-packages/` of the tree (stale
    copies of its code) is not written, and the copies stripped are those checked."""
    module = load()
    source = tree / "hf_readonce" / "models" / "readonce_bart" / "modeling_readonce_bart.py"
    for folder in (".venv/lib/python3.11/site-packages/hf_readonce", "venv/lib/python3.11/site-packages/x"):
        (tree / folder).mkdir(parents=True)
        shutil.copy(source, tree / folder / "modeling_readonce_bart.py")
    count = module.strip_copies(tree, tmp_path / "stripped")
    assert count == sum(len(module.find_copies(path)) for path in module.python_files(tree)) > 0
    assert not (tmp_path / "stripped" / ".venv").exists()
    assert not (tmp_path / "stripped" / "venv" / "lib" / "python3.11" / "site-packages").exists()
    assert (tmp_path / "stripped" / "hf_readonce" / "models" / "readonce_bart" / "modeling_readonce_bart.py").is_file()
