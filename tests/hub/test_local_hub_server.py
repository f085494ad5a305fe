"""The read path, for real: published folders served by a local Hub-compatible server (olah, offline, on localhost)
and loaded by repo id with `HF_ENDPOINT` pointing at it, as a user would load them from the Hub:
`AutoModelForQuestionAnswering.from_pretrained(repo_id, trust_remote_code=True)` and `pipeline(..., model=repo_id,
trust_remote_code=True)` in processes where `import hf_readonce` fails, and `hf-readonce encode/answer repo_id`.

Needs `pip install "hf-readonce[hub-server]"` (olah) and the `git` executable; skipped without them."""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.hub.publish import publish
from tests.conftest import BLOCK_HF_READONCE, REPO_ROOT, tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS, package_answers
from tests.hub.test_pipeline_readonce import DOCUMENTS, TEXTS, by_hand, tiny_readonce

pytest.importorskip("olah", reason='the local Hub server needs olah: pip install "hf-readonce[hub-server]"')
if shutil.which("git") is None:
    pytest.skip("mirroring a published folder for olah needs the git executable", allow_module_level=True)

from hf_readonce.hub.local_hub import mirror_repo  # noqa: E402  (after the skips)

DEFORMER, READONCE = "someone/tiny-deformer", "someone/tiny-readonce"
SETTINGS = {"max_question_length": 16, "max_passage_length": 24, "doc_stride": 8}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tokenizer):
    """Publish a tiny DeFormer and a tiny ReadOnce BART with `publish`, mirror both as git repos and serve them with
    `python -m hf_readonce.hub.local_hub` on a free port. Yields the endpoint, the mirrors and the folders."""
    root = tmp_path_factory.mktemp("local_hub")
    deformer = tiny_model()
    for name, value in SETTINGS.items():
        setattr(deformer.config, name, value)
    deformer.save_pretrained(root / "deformer_ckpt")
    tokenizer.save_pretrained(root / "deformer_ckpt")
    tiny_readonce().save_pretrained(root / "readonce_ckpt")
    tokenizer.save_pretrained(root / "readonce_ckpt")
    folders = {DEFORMER: publish(root / "deformer_ckpt", DEFORMER, local_dir=root / "pub" / "deformer").folder,
               READONCE: publish(root / "readonce_ckpt", READONCE, local_dir=root / "pub" / "readonce").folder}
    mirrors = root / "mirrors"
    commits = {}
    for repo_id, folder in folders.items():
        repo = mirror_repo(folder, repo_id, mirrors)
        commits[repo_id] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                          check=True).stdout.strip()
    port = _free_port()
    log = open(root / "server.log", "w")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    server = subprocess.Popen([sys.executable, "-m", "hf_readonce.hub.local_hub", "--mirrors", str(mirrors),
                               "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                text = (root / "server.log").read_text()
                if "address already in use" in text.lower():
                    pytest.skip(f"the local Hub server could not bind port {port}: {text[-500:]}")
                pytest.fail(f"the local Hub server exited with status {server.returncode}:\n{text[-3000:]}")
            try:
                if _get(f"{endpoint}/api/models/{DEFORMER}/revision/main") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the local Hub server did not answer in 90 s:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"endpoint": endpoint, "root": root, "folders": folders, "commits": commits}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


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
    assert _get(f"{base}/api/models/someone/not-published/revision/main") in (401, 404)


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
    snapshot = hf_home / "hub" / "models--someone--tiny-deformer" / "snapshots" / hub["commits"][DEFORMER]
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
        answers = [a[0]["generated_text"] for a in t2t({TEXTS!r}, document={DOCUMENTS[0]!r}, max_new_tokens=5)]
        print("OUT", json.dumps(answers))
    """, _client_env(hub, tmp_path / "hf_home"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("OUT "))
    assert json.loads(line[4:]) == expected


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
