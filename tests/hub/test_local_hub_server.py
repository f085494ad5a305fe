"""The read path, for real: published folders of every model family served by a local Hub-compatible server (olah,
offline, on localhost) and loaded by repo id with `HF_ENDPOINT` pointing at it, as a user would load them from the
Hub: `AutoModel*.from_pretrained(repo_id, trust_remote_code=True)` and `pipeline(task, model=repo_id,
trust_remote_code=True)` in processes where `import hf_readonce` fails, and `hf-readonce encode/answer repo_id`.

Needs `pip install "hf-readonce[hub-server]"` (olah) and the `git` executable; skipped without them."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from hf_readonce.cli import main as cli_main
from tests._servers import free_port, http_status, running_server
from tests.conftest import BLOCK_HF_READONCE, REPO_ROOT, tiny_model
from tests.hub.family_cases import CASES, assert_same_as_in_process, load_without_hf_readonce, publish_all
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS, package_answers
from tests.hub.test_pipeline_readonce import DOCUMENTS, TEXTS, by_hand, tiny_readonce

pytest.importorskip("olah", reason='the local Hub server needs olah: pip install "hf-readonce[hub-server]"')
if shutil.which("git") is None:
    pytest.skip("mirroring a published folder for olah needs the git executable", allow_module_level=True)

from hf_readonce.hub.local_hub import mirror_repo  # noqa: E402  (after the skips)

DEFORMER, READONCE = "someone/tiny-deformer-bert", "someone/tiny-readonce-bart"  # as `publish_all` names them


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tokenizer):
    """Publish a tiny model of every family with `publish` (`family_cases.publish_all`: the DeFormer is
    `tiny_model()` with recorded windows, the ReadOnce BART `tiny_readonce()`), mirror each as a git repo and serve
    them with `python -m hf_readonce.hub.local_hub` on a free port. Yields the endpoint, the folders, the served
    commits and what `publish_all` computed in-process."""
    root = tmp_path_factory.mktemp("local_hub")
    published = publish_all(root, tokenizer)
    folders = {entry["repo_id"]: entry["folder"] for entry in published.values()}
    assert DEFORMER in folders and READONCE in folders
    mirrors = root / "mirrors"
    commits = {}
    for repo_id, folder in folders.items():
        repo = mirror_repo(folder, repo_id, mirrors)
        commits[repo_id] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                          check=True).stdout.strip()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    with running_server([sys.executable, "-m", "hf_readonce.hub.local_hub", "--mirrors", str(mirrors), "--port",
                         str(port)], ready_url=f"{endpoint}/api/models/{DEFORMER}/revision/main",
                        log_path=root / "server.log", env=env, cwd=root, timeout=90, name="the local Hub server"):
        yield {"endpoint": endpoint, "root": root, "folders": folders, "commits": commits, "published": published}


def _client_env(hub, hf_home: Path, pythonpath: str = "") -> dict:
    """A user's environment: the Hub endpoint is the local server, online, an empty cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=hub["endpoint"], HF_HOME=str(hf_home), HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=pythonpath)
    return env


def _run_blocked(code: str, env: dict, cwd) -> subprocess.CompletedProcess:
    """`code` in a fresh process where `import hf_readonce` raises ImportError (huggingface_hub reads HF_ENDPOINT
    at import, so the endpoint is set before the process starts)."""
    return subprocess.run([sys.executable, "-c", BLOCK_HF_READONCE + "\n" + textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_server_answers_as_the_hub(hub):
    """Repo info, files, and the Hub's 404 (`EntryNotFound`, `RevisionNotFound`) for what a repo lacks: the answers
    transformers depends on."""
    base = hub["endpoint"]
    with urllib.request.urlopen(f"{base}/api/models/{DEFORMER}") as response:
        info = json.load(response)
    assert info["id"] == DEFORMER and info["sha"] == hub["commits"][DEFORMER]
    with urllib.request.urlopen(f"{base}/{DEFORMER}/resolve/main/config.json") as response:
        assert json.load(response) == json.loads((hub["folders"][DEFORMER] / "config.json").read_text())
    with urllib.request.urlopen(urllib.request.Request(f"{base}/{DEFORMER}/resolve/main/model.safetensors",
                                                       method="HEAD")) as response:
        assert response.headers["x-repo-commit"] == hub["commits"][DEFORMER]
        size = (hub["folders"][DEFORMER] / "model.safetensors").stat().st_size
        assert int(response.headers["content-length"]) == size
    for url, code in ((f"{base}/{DEFORMER}/resolve/main/adapter_config.json", "EntryNotFound"),
                      (f"{base}/{DEFORMER}/resolve/nobranch/config.json", "RevisionNotFound")):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"))
        assert caught.value.code == 404 and caught.value.headers["x-error-code"] == code
    assert http_status(f"{base}/api/models/someone/not-published/revision/main") in (401, 404)


def test_deformer_loads_by_repo_id_without_hf_readonce(hub, tokenizer, tmp_path):
    """`from_pretrained(repo_id, trust_remote_code=True)` gives the published weights (downloaded from the server
    into the Hub cache at the served commit) and `pipeline("question-answering", model=repo_id,
    trust_remote_code=True)` the package's answers, where hf_readonce cannot be imported."""
    model = tiny_model()
    expected = {}
    for context, questions in zip(CONTEXTS, QUESTIONS):
        for question, answer in zip(questions, package_answers(model, tokenizer, questions, context, 15, False)[0]):
            expected[question] = answer
    (tmp_path / "cases.json").write_text(json.dumps({"contexts": CONTEXTS, "questions": QUESTIONS}))
    hf_home = tmp_path / "hf_home"
    result = _run_blocked(f"""
        import json
        try:
            import hf_readonce
            raise SystemExit("hf_readonce was importable")
        except ImportError:
            pass
        from safetensors.torch import save_file
        from transformers import AutoModelForQuestionAnswering, pipeline
        model = AutoModelForQuestionAnswering.from_pretrained({DEFORMER!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        save_file({{k: v.contiguous() for k, v in model.state_dict().items()}}, "loaded.safetensors")
        qa = pipeline("question-answering", model={DEFORMER!r}, trust_remote_code=True)
        assert type(qa).__name__ == "DeformerQuestionAnsweringPipeline" and "hf_readonce" not in type(qa).__module__
        cases = json.load(open("cases.json"))
        answers = {{}}
        for context, questions in zip(cases["contexts"], cases["questions"]):
            for question, answer in zip(questions, qa(question=questions, context=context)):
                answers[question] = answer["answer"]
        print("ANSWERS", json.dumps(answers))
    """, _client_env(hub, hf_home), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("ANSWERS "))
    assert json.loads(line[len("ANSWERS "):]) == expected
    from safetensors.torch import load_file

    loaded, reference = load_file(tmp_path / "loaded.safetensors"), model.state_dict()
    assert loaded.keys() == reference.keys() and all(torch.equal(loaded[k], reference[k]) for k in reference)
    snapshot = hf_home / "hub" / f"models--{DEFORMER.replace('/', '--')}" / "snapshots" / hub["commits"][DEFORMER]
    assert (snapshot / "model.safetensors").is_file() and (snapshot / "pipeline_deformer_bert.py").is_file()


def test_readonce_pipeline_by_repo_id_without_hf_readonce(hub, tokenizer, tmp_path):
    """`pipeline("text2text-generation", model=repo_id, trust_remote_code=True)` from the server gives the
    generations of `encode_documents` + `generate` by hand, where hf_readonce cannot be imported."""
    expected = by_hand(tiny_readonce(), tokenizer, TEXTS, DOCUMENTS[0])
    result = _run_blocked(f"""
        import json
        from transformers import pipeline
        t2t = pipeline("text2text-generation", model={READONCE!r}, trust_remote_code=True)
        assert "hf_readonce" not in type(t2t).__module__
        answers = [a["generated_text"] for a in t2t({TEXTS!r}, document={DOCUMENTS[0]!r}, max_new_tokens=5)]
        print("OUT", json.dumps(answers))
    """, _client_env(hub, tmp_path / "hf_home"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("OUT "))
    assert json.loads(line[4:]) == expected


@pytest.fixture(scope="module")
def by_repo_id(hub, tmp_path_factory):
    """Every family loaded by repo id from the server (an empty Hub cache) in one process without hf_readonce."""
    workdir = tmp_path_factory.mktemp("by_repo_id")
    hf_home = workdir / "hf_home"
    results = load_without_hf_readonce({name: entry["repo_id"] for name, entry in hub["published"].items()}, workdir,
                                       env=_client_env(hub, hf_home))
    return results, hf_home


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_family_loads_by_repo_id_without_hf_readonce(name, hub, by_repo_id):
    """`AutoModel*.from_pretrained(repo_id, trust_remote_code=True)` gives the in-process model's outputs exactly and
    `pipeline(task, model=repo_id, trust_remote_code=True)` the in-process pipeline's outputs, for every family, with
    the files downloaded from the server into the Hub cache at the served commit."""
    results, hf_home = by_repo_id
    entry = hub["published"][name]
    assert_same_as_in_process(name, results[name], entry)
    snapshot = (hf_home / "hub" / f"models--{entry['repo_id'].replace('/', '--')}" / "snapshots"
                / hub["commits"][entry["repo_id"]])
    assert (snapshot / "model.safetensors").is_file() and (snapshot / "config.json").is_file()


def test_cli_encodes_and_answers_by_repo_id(hub, tmp_path):
    """`hf-readonce encode REPO_ID` and `hf-readonce answer REPO_ID` (a fresh process whose Hub is the local server)
    store and answer as the same commands on the published folder do."""
    docs, questions = tmp_path / "docs.jsonl", tmp_path / "questions.jsonl"
    docs.write_text("".join(json.dumps({"id": str(i), "context": c}) + "\n" for i, c in enumerate(CONTEXTS)))
    questions.write_text("".join(json.dumps({"id": f"{i}-{j}", "question": q, "context": c}) + "\n"
                                 for i, (c, qs) in enumerate(zip(CONTEXTS, QUESTIONS)) for j, q in enumerate(qs)))
    env = _client_env(hub, tmp_path / "hf_home", pythonpath=str(REPO_ROOT / "src"))
    for command in (["encode", DEFORMER, "--store", "hub_store", "--documents", str(docs)],
                    ["answer", DEFORMER, "--store", "hub_store", "--questions", str(questions), "--output",
                     "hub.jsonl"]):
        result = subprocess.run([sys.executable, "-m", "hf_readonce.cli", *command, "--no-progress"], env=env,
                                cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    folder = str(hub["folders"][DEFORMER])
    assert cli_main(["encode", folder, "--store", str(tmp_path / "dir_store"), "--documents", str(docs),
                     "--no-progress"]) == 0
    assert cli_main(["answer", folder, "--store", str(tmp_path / "dir_store"), "--questions", str(questions),
                     "--output", str(tmp_path / "dir.jsonl"), "--no-progress"]) == 0
    by_id = [(tmp_path / name).read_text().splitlines() for name in ("hub.jsonl", "dir.jsonl")]
    assert len(by_id[0]) == sum(map(len, QUESTIONS)) and by_id[0] == by_id[1]
