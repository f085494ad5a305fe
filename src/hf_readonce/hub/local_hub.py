"""Serve published folders from a local Hub-compatible server, so that a repo can be loaded by its id exactly as
a user would load it from the Hub (`HF_ENDPOINT=http://127.0.0.1:PORT`), before or instead of uploading it.

The server is [olah](https://pypi.org/project/olah/) (a self-hosted Hugging Face mirror; `pip install
"hf-readonce[hub-server]"`), run offline. olah serves local git repositories found under its `mirrors-path`
(`<mirrors>/models/<owner>/<name>`, one commit per publish here) through the Hub's routes (`/api/models/<id>/revision/
<rev>`, `/<id>/resolve/<rev>/<file>`). One gap is closed here: for a file that a local repository does not have, olah
0.5.4 offline answers `401 Repository not found` (it falls back to its upstream cache), where huggingface.co answers
`404` with `X-Error-Code: EntryNotFound`. transformers probes optional files (`adapter_config.json`, tokenizer extras)
and treats "repository not found" as fatal, so [`serve`] adds one middleware that answers those requests as the Hub
does (also for a folder the repo lacks, listed with `/api/models/<id>/tree/<rev>/<folder>`, and for the repo's info
without a revision, `/api/models/<id>`, which olah offline also answers 401). Everything else is olah's.

    python -m hf_readonce.hub.local_hub --mirrors runs/mirrors --publish someone/tiny-deformer=runs/published/tiny
    HF_ENDPOINT=http://127.0.0.1:8090 python -c "from transformers import pipeline; pipeline('question-answering', \
        model='someone/tiny-deformer', trust_remote_code=True)"
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .publish import check_repo_id

REPO_TYPES = ("models", "datasets")
_RESOLVE = re.compile(r"^/(?:(?P<type>datasets|spaces)/)?(?P<org>[^/]+)/(?P<name>[^/]+)/resolve/(?P<rev>[^/]+)/"
                      r"(?P<file>.+)$")
_TREE = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<org>[^/]+)/(?P<name>[^/]+)/tree/(?P<rev>[^/]+)"
                   r"(?:/(?P<file>.*))?$")
_INFO = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<org>[^/]+)/(?P<name>[^/]+)/?$")


def mirror_repo(folder, repo_id: str, mirrors_dir, *, repo_type: str = "models",
                message: str = "Publish with hf-readonce") -> Path:
    """Copy a published folder into `mirrors_dir/<repo_type>/<owner>/<name>` as a git repository with one commit
    (replacing an earlier copy), the layout olah's `mirrors-path` serves.

    Args:
        folder (`str` or `Path`): the folder `publish(..., local_dir=...)` wrote.
        repo_id (`str`): `OWNER/NAME`, the id clients will load.
        mirrors_dir (`str` or `Path`): the server's mirrors folder (created if absent).
        repo_type (`str`, *optional*, defaults to `"models"`): `"models"` or `"datasets"`.
        message (`str`, *optional*): the commit message.

    Returns:
        `Path`: the git repository's folder.

    Raises:
        ValueError: if `folder` is not a folder, `repo_id` is not `OWNER/NAME` or `repo_type` is unknown.
        RuntimeError: if the `git` executable is missing or a git command fails.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} is not a folder.")
    repo_id = check_repo_id(repo_id)
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}.")
    if shutil.which("git") is None:
        raise RuntimeError("mirror_repo needs the `git` executable on PATH.")
    owner, name = repo_id.split("/")
    target = Path(mirrors_dir) / repo_type / owner / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(".git", ".cache"))
    identity = ["-c", "user.name=hf-readonce", "-c", "user.email=hf-readonce@localhost", "-c", "commit.gpgsign=false"]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], [*identity, "commit", "-q", "-m", message]):
        result = subprocess.run(["git", *command], cwd=target, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"git {' '.join(command)} failed in {target}: {result.stderr.strip()}")
    return target


def olah_config(mirrors_dir, cache_dir, *, host: str = "127.0.0.1", port: int = 8090) -> str:
    """The TOML configuration of an offline olah serving `mirrors_dir`.

    Args:
        mirrors_dir (`str` or `Path`): the folder holding `models/<owner>/<name>` git repositories.
        cache_dir (`str` or `Path`): olah's own cache folder (`repos-path`; offline it stays empty).
        host (`str`, *optional*): the address to listen on.
        port (`int`, *optional*): the port to listen on.

    Returns:
        `str`: the TOML text.

    Raises:
        ValueError: if `port` is not an integer in 1..65535.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}.")
    return "\n".join([
        "[basic]",
        f"host = {json.dumps(str(host))}",  # a JSON string is a TOML basic string
        f"port = {port}",
        f"repos-path = {json.dumps(str(Path(cache_dir).absolute()))}",
        f"mirrors-path = [{json.dumps(str(Path(mirrors_dir).absolute()))}]",
        "",
        "[accessibility]",
        "offline = true",
        "",
    ])


def _local_repo(mirrors_dir: Path, repo_type, org: str, name: str):
    """The GitPython repository of a mirrored repo, or None when olah would not serve it from `mirrors_dir`."""
    repo_dir = mirrors_dir / (repo_type or "models") / org / name
    if not (repo_dir / ".git").exists():
        return None
    import git  # GitPython, a dependency of olah

    return git.Repo(repo_dir)


def _hub_answer(mirrors_dir: Path, path: str):
    """How the Hub answers a request that olah 0.5.4 offline gets wrong for a mirrored repo: `("respond", status,
    headers)` for a file, folder or revision the repository lacks (the Hub's 404 with `X-Error-Code`), `("rewrite",
    path)` for the repo's info without a revision (olah looks it up in its empty upstream cache; the Hub gives the
    default branch's), else None (olah answers as it is)."""
    from urllib.parse import unquote

    match = _RESOLVE.match(path) or _TREE.match(path)
    if match is None:
        info = _INFO.match(path)
        if info is not None and _local_repo(mirrors_dir, info["type"], info["org"], info["name"]) is not None:
            return "rewrite", path.rstrip("/") + "/revision/main"
        return None
    repo = _local_repo(mirrors_dir, match["type"], match["org"], match["name"])
    if repo is None:
        return None
    import git

    revision, file = unquote(match["rev"]), unquote(match["file"] or "").strip("/")
    try:
        commit = repo.commit(revision)
    except (git.BadName, ValueError):
        return "respond", 404, {"x-error-code": "RevisionNotFound", "x-error-message": f"Invalid rev id: {revision}"}
    if not file:
        return None
    try:
        commit.tree[file]
    except KeyError:
        return "respond", 404, {"x-error-code": "EntryNotFound", "x-repo-commit": commit.hexsha,
                                "x-error-message": f'{file} does not exist on "{revision}"'}
    return None


def serve(mirrors_dir, *, host: str = "127.0.0.1", port: int = 8090, work_dir=None) -> None:
    """Run olah offline on `host:port`, serving the git repositories under `mirrors_dir` (blocks until stopped).

    Args:
        mirrors_dir (`str` or `Path`): the folder [`mirror_repo`] writes to.
        host (`str`, *optional*): the address to listen on (defaults to localhost only).
        port (`int`, *optional*): the port.
        work_dir (`str` or `Path`, *optional*): where olah's configuration, (empty) cache and logs go; defaults to
            `mirrors_dir/.olah`.

    Raises:
        ImportError: if olah is not installed (`pip install "hf-readonce[hub-server]"`).
        ValueError: if `mirrors_dir` is not a folder or `port` is not a port number.
    """
    mirrors_dir = Path(mirrors_dir).absolute()
    if not mirrors_dir.is_dir():
        raise ValueError(f"mirrors_dir {str(mirrors_dir)!r} is not a folder.")
    try:
        import olah.server
    except ImportError as error:
        raise ImportError('serving a local Hub needs olah: pip install "hf-readonce[hub-server]"') from error
    from starlette.responses import Response

    work_dir = Path(work_dir) if work_dir is not None else mirrors_dir / ".olah"
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "olah.toml"
    config.write_text(olah_config(mirrors_dir, work_dir / "cache", host=host, port=port))

    @olah.server.app.middleware("http")
    async def entry_not_found(request, call_next):
        answer = _hub_answer(mirrors_dir, request.url.path) if request.method in ("GET", "HEAD") else None
        if answer is not None and answer[0] == "respond":
            return Response(status_code=answer[1], headers=answer[2])
        if answer is not None:  # "rewrite": olah serves the same request at the revision route
            request.scope["path"], request.scope["raw_path"] = answer[1], answer[1].encode()
        return await call_next(request)

    argv = sys.argv
    sys.argv = ["olah-cli", "--config", str(config), "--log-path", str(work_dir / "logs")]
    try:
        args = olah.server.init()
    finally:
        sys.argv = argv
    olah.server.run_server(args)


def main(argv=None) -> int:
    """`python -m hf_readonce.hub.local_hub`: mirror published folders and serve them (see the module docstring).

    Args:
        argv (`list[str]`, *optional*): the arguments (default: `sys.argv[1:]`).

    Returns:
        `int`: the exit status (the server runs until interrupted).
    """
    parser = argparse.ArgumentParser(prog="python -m hf_readonce.hub.local_hub",
                                     description="Serve published folders from a local Hub-compatible server (olah).")
    parser.add_argument("--mirrors", required=True, help="folder of git repositories, models/<owner>/<name>")
    parser.add_argument("--publish", action="append", default=[], metavar="OWNER/NAME=FOLDER",
                        help="copy a published folder into the mirrors as a git repository first (repeatable)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    import importlib.util

    if importlib.util.find_spec("olah") is None:  # before anything is written
        parser.exit(2, f"{parser.prog}: error: serving a local Hub needs olah: pip install "
                       "\"hf-readonce[hub-server]\" (and git).\n")
    Path(args.mirrors).mkdir(parents=True, exist_ok=True)
    for item in args.publish:
        repo_id, sep, folder = item.partition("=")
        if not sep:
            parser.error(f"--publish {item!r}: expected OWNER/NAME=FOLDER")
        try:
            print(f"mirrored {repo_id} at {mirror_repo(folder, repo_id, args.mirrors)}", flush=True)
        except (ValueError, RuntimeError) as error:
            parser.error(f"--publish {item!r}: {error}")
    serve(args.mirrors, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
