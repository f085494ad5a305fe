"""`hf_readonce.hub.local_hub` without a server: the git mirror of a published folder, olah's configuration, the
Hub's answers for what a mirrored repo lacks, and the arguments' errors. (The server itself:
`test_local_hub_server.py`.)"""

import importlib.util
import shutil
import subprocess

import pytest
import tomllib

from hf_readonce.hub.local_hub import mirror_repo, olah_config, serve

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git executable")


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "published"
    (path / "sub").mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "sub" / "file.txt").write_text("x")
    return path


@needs_git
def test_mirror_repo_commits_the_folder_and_replaces_an_old_copy(folder, tmp_path):
    target = mirror_repo(folder, "someone/repo", tmp_path / "mirrors")
    assert target == tmp_path / "mirrors" / "models" / "someone" / "repo"
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", "main"], cwd=target, capture_output=True,
                           text=True, check=True).stdout.split()
    assert files == ["config.json", "sub/file.txt"]
    (folder / "config.json").unlink()
    mirror_repo(folder, "someone/repo", tmp_path / "mirrors")
    log = subprocess.run(["git", "log", "--format=%s", "main"], cwd=target, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert log == ["Publish with hf-readonce"] and not (target / "config.json").exists()


def test_bad_arguments_name_the_argument(folder, tmp_path):
    with pytest.raises(ValueError, match="folder .* is not a folder"):
        mirror_repo(tmp_path / "absent", "someone/repo", tmp_path / "m")
    with pytest.raises(ValueError, match="repo_id"):
        mirror_repo(folder, "no-owner", tmp_path / "m")
    with pytest.raises(ValueError, match="repo_type"):
        mirror_repo(folder, "someone/repo", tmp_path / "m", repo_type="spaces")
    for port in (0, 70000, "8090", True):
        with pytest.raises(ValueError, match="port"):
            olah_config(tmp_path, tmp_path, port=port)
    with pytest.raises(ValueError, match="mirrors_dir"):
        serve(tmp_path / "absent")


def test_olah_config_is_offline_and_serves_the_mirrors(tmp_path):
    mirrors = tmp_path / 'odd "name"'
    config = tomllib.loads(olah_config(mirrors, tmp_path / "cache", port=9001))
    assert config == {"basic": {"host": "127.0.0.1", "port": 9001, "repos-path": str(tmp_path / "cache"),
                                "mirrors-path": [str(mirrors)]}, "accessibility": {"offline": True}}


@pytest.mark.skipif(importlib.util.find_spec("olah") is not None, reason="olah is installed")
def test_serve_without_olah_says_how_to_install_it(tmp_path):
    with pytest.raises(ImportError, match=r"hf-readonce\[hub-server\]"):
        serve(tmp_path)


@needs_git
def test_hub_answers_for_what_a_mirrored_repo_lacks(folder, tmp_path):
    pytest.importorskip("git", reason="GitPython (a dependency of olah) reads the mirrored repository")
    from hf_readonce.hub.local_hub import _hub_answer

    mirrors = tmp_path / "mirrors"
    mirror_repo(folder, "someone/repo", mirrors)
    assert _hub_answer(mirrors, "/someone/repo/resolve/main/config.json") is None  # olah serves it
    assert _hub_answer(mirrors, "/someone/repo/resolve/main/sub/file.txt") is None
    kind, status, headers = _hub_answer(mirrors, "/someone/repo/resolve/main/adapter_config.json")
    assert (kind, status, headers["x-error-code"]) == ("respond", 404, "EntryNotFound") and headers["x-repo-commit"]
    assert _hub_answer(mirrors, "/someone/repo/resolve/v9/config.json")[2]["x-error-code"] == "RevisionNotFound"
    assert _hub_answer(mirrors, "/api/models/someone/repo/tree/main/absent")[2]["x-error-code"] == "EntryNotFound"
    assert _hub_answer(mirrors, "/api/models/someone/repo/tree/main/sub") is None
    assert _hub_answer(mirrors, "/api/models/someone/repo") == ("rewrite", "/api/models/someone/repo/revision/main")
    assert _hub_answer(mirrors, "/api/models/other/repo") is None  # not mirrored: olah as it is
    assert _hub_answer(mirrors, "/other/repo/resolve/main/config.json") is None


def test_the_command_without_olah_stops_before_writing(tmp_path, capsys, monkeypatch):
    """Without olah the command says what to install, in one line, and mirrors nothing first."""
    import importlib.util

    from hf_readonce.hub import local_hub

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "olah" else object())
    with pytest.raises(SystemExit) as stop:
        local_hub.main(["--mirrors", str(tmp_path / "mirrors"), "--publish", f"a/b={tmp_path}"])
    assert stop.value.code == 2 and "needs olah" in capsys.readouterr().err
    assert not (tmp_path / "mirrors").exists()
