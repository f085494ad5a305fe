"""A stopped command says so in one line, whenever the stop comes: a Ctrl-C or SIGTERM that a library catches while
it imports (and then fails otherwise) is still reported as the interruption."""

import signal

import pytest

import hf_readonce.cli as cli
from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "term"])
def test_a_stop_that_a_library_swallows_is_still_an_interrupt(tmp_path, monkeypatch, capsys, signum, status):
    """A Ctrl-C that lands in an import which catches it leaves that import half done, and the next import fails
    (`ModuleNotFoundError: Could not import module 'LlamaConfig'`, from transformers): the command stopped, so it
    says `interrupted` with its exit status, not an unexpected error to report."""
    RepresentationStore(tmp_path / "store")

    def stopped_import(args):
        try:
            signal.raise_signal(signum)  # the stop, while a library imports ...
        except KeyboardInterrupt:
            pass  # ... which catches it
        raise ModuleNotFoundError("Could not import module 'LlamaConfig'.")

    monkeypatch.setattr(cli, "cmd_verify", stopped_import)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"]) == status
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["hf-readonce verify: interrupted."], err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # restored


def test_an_error_without_a_stop_is_still_an_error(tmp_path, monkeypatch, capsys):
    RepresentationStore(tmp_path / "store")

    def broken(args):
        raise ModuleNotFoundError("Could not import module 'LlamaConfig'.")

    monkeypatch.setattr(cli, "cmd_verify", broken)
    assert cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "error: Could not import module 'LlamaConfig' (ModuleNotFoundError" in err and "interrupted" not in err
