"""A stopped command says so in one line, whenever the stop comes: a Ctrl-C or SIGTERM that a library catches while
it imports (and then fails otherwise) is still reported as the interruption, and `python -m hf_readonce.cli` (as
`torchrun` and `accelerate launch` start it) defers importing the model families as the console script does, so a
Ctrl-C while it starts reaches the command's own handling instead of printing a traceback."""

import os
import signal
import subprocess
import sys

import pytest

import hf_readonce
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
    assert lines == ["hf-readonce verify: interrupted. After the stop it failed: Could not import module "
                     "'LlamaConfig' (ModuleNotFoundError)."], err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # restored


def test_an_error_of_its_own_after_a_swallowed_stop_is_named(tmp_path, monkeypatch, capsys):
    """The error a command fails with after a stop a library swallowed may be its own (the disk filled up while it
    went on): the `interrupted` line names it, so it is not lost."""
    RepresentationStore(tmp_path / "store")

    def full_disk(args):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        raise OSError(28, "No space left on device", str(tmp_path / "store" / "shard.bin"))

    monkeypatch.setattr(cli, "cmd_verify", full_disk)
    assert cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hf-readonce verify: interrupted."), err
    assert f"No space left on device: {tmp_path / 'store' / 'shard.bin'} (OSError)" in lines[0], err


def test_a_broken_pipe_after_a_stop_is_quiet(tmp_path, monkeypatch, capsys):
    """Ctrl-C stops the whole pipeline (`hf-readonce info | head`): the reader of stdout is gone too, which is no error
    of the command's; stdout is pointed at the null device so that the interpreter's last flush cannot fail again."""
    RepresentationStore(tmp_path / "store")
    silenced = []

    def stopped_pipeline(args):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_verify", stopped_pipeline)
    monkeypatch.setattr(cli, "_silence_stdout", lambda: silenced.append(True))
    assert cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.strip()] == ["hf-readonce verify: interrupted."], err
    assert silenced == [True]


def test_an_ignored_sigterm_stays_ignored(tmp_path, monkeypatch, capsys):
    """A SIGTERM the parent process set to be ignored (`SIG_IGN`, inherited across `exec`) does not stop the
    command, as an ignored Ctrl-C does not, and is still ignored afterwards."""
    RepresentationStore(tmp_path / "store")

    def terminated(args):
        signal.raise_signal(signal.SIGTERM)
        return 0

    monkeypatch.setattr(cli, "cmd_verify", terminated)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        status = cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"])
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert status == 0, capsys.readouterr().err
    assert "interrupted" not in capsys.readouterr().err


def test_a_command_run_in_another_thread_leaves_the_unraisable_hook_as_it_was(tmp_path, monkeypatch):
    """A command run in another thread while one runs in the main thread, and ending after it: the process's
    `sys.unraisablehook` is the one in place before both, not one a command left behind."""
    import threading

    started, release = threading.Event(), threading.Event()
    statuses = {}

    def command(args):
        if args.store.endswith("worker"):
            started.set()
            assert release.wait(60)  # ends after the main thread's command
        else:
            worker.start()
            assert started.wait(60)
        return 0

    def in_worker():
        statuses["worker"] = cli_main(["verify", "--store", str(tmp_path / "worker"), "--no-progress"])

    monkeypatch.setattr(cli, "cmd_verify", command)
    for name in ("main", "worker"):
        RepresentationStore(tmp_path / name)
    worker = threading.Thread(target=in_worker)
    hook = sys.unraisablehook
    try:
        statuses["main"] = cli_main(["verify", "--store", str(tmp_path / "main"), "--no-progress"])
    finally:
        release.set()
        worker.join(120)
    assert statuses == {"main": 0, "worker": 0}
    assert sys.unraisablehook is hook


def test_an_error_without_a_stop_is_still_an_error(tmp_path, monkeypatch, capsys):
    RepresentationStore(tmp_path / "store")

    def broken(args):
        raise ModuleNotFoundError("Could not import module 'LlamaConfig'.")

    monkeypatch.setattr(cli, "cmd_verify", broken)
    assert cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "error: Could not import module 'LlamaConfig' (ModuleNotFoundError" in err and "interrupted" not in err


@pytest.mark.parametrize("orig", [["python", "-m", "hf_readonce.cli", "verify", "--store", "s"],
                                  ["python", "-X", "importtime", "-um", "hf_readonce.cli", "verify", "--store", "s"],
                                  ["python", "-mhf_readonce.cli", "verify", "--store", "s"]])
def test_python_dash_m_of_the_cli_counts_as_the_console_script(monkeypatch, orig):
    """While `python -m hf_readonce.cli ARGS` imports the package, `sys.argv` is `["-m", *ARGS]`."""
    monkeypatch.setattr(sys, "argv", ["-m", "verify", "--store", "s"])
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert hf_readonce._is_console_script()


@pytest.mark.parametrize(("argv", "orig"), [
    (["-m", "verify"], ["python", "-m", "hf_readonce.recipes.demo", "verify"]),  # another module of the package
    (["-m", "hf_readonce.cli"], ["python", "-m", "mymodule", "hf_readonce.cli"]),  # the name as an argument
    (["train.py"], ["python", "train.py"]),  # a script importing hf_readonce
    (["-c"], ["python", "-c", "import hf_readonce"]),
])
def test_other_processes_register_the_families_on_import(monkeypatch, argv, orig):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert not hf_readonce._is_console_script()


def test_python_dash_m_verify_imports_no_model(tmp_path):
    """`python -m hf_readonce.cli verify` starts without importing a model family (`-X importtime` lists every
    module the process imports), as the console script does."""
    RepresentationStore(tmp_path / "store")
    src = os.path.dirname(os.path.dirname(hf_readonce.__file__))
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_readonce.cli", "verify", "--store",
                           str(tmp_path / "store"), "--no-progress"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=src))
    assert done.returncode == 0, done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")]
    assert "hf_readonce" in imported and "hf_readonce.store" in imported  # the list is read right
    assert not [m for m in imported if m.startswith(("hf_readonce.models", "transformers.models"))]


def test_a_stop_that_lands_in_a_finalizer_is_reported_once(tmp_path, monkeypatch, capsys):
    """Python drops an exception raised in `__del__` (printing `Exception ignored in ...` and a traceback) and goes
    on: a Ctrl-C landing there is still the command's one `interrupted` line and exit 130, with nothing else."""
    RepresentationStore(tmp_path / "store")

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    def finishes(args):
        Finalized()  # collected at once: the Ctrl-C lands in its finalizer
        return 0

    monkeypatch.setattr(cli, "cmd_verify", finishes)
    hook = sys.unraisablehook
    assert cli_main(["verify", "--store", str(tmp_path / "store"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.strip()] == ["hf-readonce verify: interrupted."], err
    assert sys.unraisablehook is hook
