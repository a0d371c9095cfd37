"""Helpers for the hardening tests: a real kvd process, raw-socket reads, RSS probes.

Readiness is a raw-socket PING (works with requirepass: ``-NOAUTH`` also proves the server is up).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import redis

# KVD_SOURCE_ROOT runs the daemon from another checkout (e.g. an older commit, to see a test fail there).
ROOT = Path(os.environ.get("KVD_SOURCE_ROOT") or Path(__file__).resolve().parents[2])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux only)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def recv_until_closed(
    sock: socket.socket, timeout: float = 5.0, limit: int = 1 << 20, marker: bytes | None = None
) -> tuple[bytes, bool]:
    """Read until EOF/reset, ``timeout``, ``limit`` bytes or, with ``marker``, data that ends with it; returns
    (bytes, closed)."""
    sock.settimeout(0.05)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(data) < limit:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return bytes(data), True
        if not chunk:
            return bytes(data), True
        data += chunk
        if marker is not None and data.endswith(marker):
            break
    return bytes(data), False


def read_reply_line(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Read one CRLF-terminated line (for simple replies); b'' if the peer closed first."""
    sock.settimeout(timeout)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\r\n") and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1)
        except (ConnectionResetError, BrokenPipeError):
            return b""
        if not chunk:
            return bytes(data)
        data += chunk
    return bytes(data)


class Kvd:
    """One kvd process. ``args`` are extra ``--key value`` flags."""

    def __init__(self, directory: Path, args: list[str], *, data_dir: Path | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.dir = directory
        self.data_dir = data_dir or directory / "data"
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = directory / "kvd.log"
        self.password: str | None = None
        if "--requirepass" in args:
            self.password = args[args.index("--requirepass") + 1]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        cmd = [
            sys.executable,
            "-m",
            "kvd",
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
        ]
        if "--persistence" not in self.args:
            cmd += ["--persistence", "no"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd + self.args, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvd exited with {self.proc.returncode}: {self.log_tail()}")
            if self.ping_raw(timeout=1.0):
                return
            time.sleep(0.05)
        raise RuntimeError(f"kvd did not become ready in {timeout} s: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def connect(self, timeout: float = 10.0) -> socket.socket:
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def ping_raw(self, timeout: float = 2.0) -> bool:
        """True when a fresh connection gets +PONG (or -NOAUTH, which also means the server is serving)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                s.sendall(b"PING\r\n")
                line = read_reply_line(s, timeout)
                return line in (b"+PONG\r\n", b"-NOAUTH Authentication required.\r\n")
        except OSError:
            return False

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("socket_timeout", 30)
        if self.password is not None:
            kw.setdefault("password", self.password)
        return redis.Redis(host=self.host, port=self.port, **kw)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def kill9(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextlib.contextmanager
def closing_all(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()
