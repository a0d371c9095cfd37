"""Fixtures for the server tests: a real kvd process per test, on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kvd:
    def __init__(self, directory: Path, args: list[str]) -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.dir = directory
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = directory / "kvd.log"

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "kvd",
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--dir",
            str(self.dir / "data"),
        ]
        if "--persistence" not in self.args:
            cmd += ["--persistence", "no"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd + self.args, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with redis.Redis(host=self.host, port=self.port, socket_timeout=1, protocol=2) as probe:
                    if probe.ping():
                        return
            except redis.AuthenticationError:
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("kvd did not become ready in 30 s")

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("socket_timeout", 30)
        return redis.Redis(host=self.host, port=self.port, **kw)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator:
    started: list[Kvd] = []

    def make(*args: str) -> Kvd:
        d = tmp_path / f"kvd{len(started)}"
        d.mkdir()
        srv = Kvd(d, list(args))
        srv.start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        code = srv.stop()
        assert code in (0, -9), srv.log.read_text()[-2000:]


@pytest.fixture
def server(server_factory) -> Kvd:
    return server_factory()
