"""``supervised``, as redis-server's (KVD_TEST_TARGET=redis runs the systemd checks against Debian's, which is
built with libsystemd): READY=1 on ``$NOTIFY_SOCKET`` once the server listens, STOPPING=1 at a clean stop, INFO
``process_supervised``; asked for without the environment it needs, a warning and no supervision. Upstart's
SIGSTOP is kvd's alone here (Redis stops before it listens, which the harness cannot wait for)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest
from support.raw import parse
from support.server import free_port

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def _messages(sock: socket.socket, until: str, timeout: float = 15) -> list[str]:
    """The datagrams received until one holds the line ``until`` (or the timeout: then the test's assert says)."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            break
        if until in got[-1].splitlines():
            break
    return got


@pytest.fixture
def notify_socket(monkeypatch):
    """A datagram socket in the abstract namespace, named in ``$NOTIFY_SOCKET`` as systemd names its own."""
    name = f"kvd-test-notify-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    yield sock
    sock.close()


@pytest.mark.parametrize("mode", ["systemd", "auto"])
def test_systemd_hears_ready_once_listening_and_stopping_at_a_clean_stop(server_factory, notify_socket, mode):
    srv = server_factory(supervised=mode)
    got = "".join(_messages(notify_socket, "READY=1")).splitlines()
    assert "READY=1" in got and "STATUS=Ready to accept connections" in got, got
    with srv.raw() as c:
        assert c.command("SET", "k", "v") == b"+OK\r\n"  # listening by then: READY=1 came after the listen
        info = parse(c.command("INFO", "server")).decode()
        assert "process_supervised:systemd\r\n" in info
        c.send_command("SHUTDOWN", "NOSAVE")
        assert c.is_closed(timeout=30)
    assert "STOPPING=1" in "".join(_messages(notify_socket, "STOPPING=1")).splitlines()
    assert srv.proc.wait(30) == 0


def test_supervised_systemd_without_notify_socket_serves_unsupervised(server_factory, monkeypatch, target_kind):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("UPSTART_JOB", raising=False)
    srv = server_factory(supervised="systemd")
    with srv.raw() as c:
        assert "process_supervised:no\r\n" in parse(c.command("INFO", "server")).decode()
        assert parse(c.command("CONFIG", "GET", "supervised")) == [b"supervised", b"systemd"]
    if target_kind == "kvd":
        assert "systemd supervision requested, but NOTIFY_SOCKET is not set" in srv.stderr_text()
    assert srv.stop() == 0


@pytest.mark.kvd_only
def test_upstart_sees_kvd_stop_itself_once_ready(tmp_path, monkeypatch):
    """Upstart's ``expect stop``: kvd stops itself with SIGSTOP once it listens and drops ``$UPSTART_JOB``; upstart
    then sends SIGCONT, and kvd serves."""
    monkeypatch.setenv("UPSTART_JOB", "kvd")
    port = free_port()
    cmd = [sys.executable, "-m", "kvd", "--port", str(port), "--persistence", "no", "--supervised", "upstart"]
    with open(tmp_path / "stderr", "ab") as err:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=err, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while _state(proc.pid) != "T":
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()[-2000:]
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it stopped after it listened: the kernel takes the connection
        os.kill(proc.pid, signal.SIGCONT)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"PING\r\n")
            assert s.recv(16) == b"+PONG\r\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(10)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("State:"):
                return line.split()[1]
    return ""
