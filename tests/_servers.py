"""Local servers for the tests (the local Hub server, the demo Space): a free port, and a process started, awaited
until a URL answers 200, and stopped."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(url: str, timeout: float = 5) -> int:
    """The HTTP status of a GET of `url` (error statuses returned, not raised).

    Raises:
        OSError: no answer (connection refused, timeout).
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@contextlib.contextmanager
def running_server(command: Sequence[str], *, ready_url: str, log_path: Path, env: Mapping[str, str], cwd,
                   timeout: float = 90, interval: float = 0.5, name: str = "the server") -> Iterator[subprocess.Popen]:
    """Start `command` (output to `log_path`), wait until `ready_url` answers 200, yield the process, and stop it
    (terminate, then kill after 20 s) on exit.

    Skips the test if the process exits saying the address is in use (another process took the free port first);
    fails it, with the log's tail, if the process exits otherwise or `ready_url` does not answer 200 within
    `timeout` seconds.
    """
    log_path = Path(log_path)
    with open(log_path, "w") as log:
        process = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                text = log_path.read_text()
                if "address already in use" in text.lower():
                    pytest.skip(f"{name} could not bind its port: {text[-500:]}")
                pytest.fail(f"{name} exited with status {process.returncode}:\n{text[-3000:]}")
            try:
                if http_status(ready_url) == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not answer in {timeout:.0f} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(interval)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
