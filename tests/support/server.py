"""A real server process per test: kvd (``python -m kvd``) or, with ``KVD_TEST_TARGET=redis``, Debian's
redis-server, on a free loopback port with its own directory. Never a mock.

kvd's command-line contract used here::

    python -m kvd [--config FILE] --bind 127.0.0.1 --port P --dir D [--persistence yes|no] [--<key> value ...]

Ready when PING answers (``+PONG``, or ``-NOAUTH`` when a password is set); SIGTERM exits 0 after the replies
in flight. Every process started here is registered and killed at interpreter exit if a test left it running.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .raw import RawConnection

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


def target() -> str:
    t = os.environ.get("KVD_TEST_TARGET", "kvd").strip().lower() or "kvd"
    if t not in ("kvd", "redis"):
        raise pytest.UsageError(f"KVD_TEST_TARGET must be kvd or redis, not {t!r}")
    return t


def free_port() -> int:
    """A port nothing listens on right now (the start retries on the rare race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_stragglers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)
        _LIVE.discard(proc)


def _opt_value(v: Any) -> str:
    if v is True:
        return "yes"
    if v is False:
        return "no"
    return str(v)


def normalize_options(args: list[str] | tuple[str, ...], kwargs: dict[str, Any]) -> dict[str, str]:
    """``("--maxmemory", "64mb")`` and ``maxmemory="64mb"`` / ``appendfsync="always"`` / ``persistence=True``
    into one ordered ``{"maxmemory": "64mb", ...}``; keyword names use ``_`` for ``-``."""
    opts: dict[str, str] = {}
    args = list(args)
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or i + 1 >= len(args):
            raise ValueError(f"server arguments must be '--key value' pairs, got {args!r}")
        opts[a[2:]] = str(args[i + 1])
        i += 2
    for k, v in kwargs.items():
        opts[k.replace("_", "-")] = _opt_value(v)
    return opts


# kvd setting -> how to say it to redis-server (None: pass it through unchanged)
_REDIS_PASSTHROUGH = {
    "requirepass",
    "maxmemory",
    "maxmemory-policy",
    "maxmemory-samples",
    "lfu-decay-time",
    "lfu-log-factor",
    "appendfsync",
    "proto-max-bulk-len",
    "client-query-buffer-limit",
    "maxclients",
    "timeout",
    "tcp-keepalive",
    "protected-mode",
    "databases",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "notify-keyspace-events",
    "enable-debug-command",
    "unixsocket",
    "unixsocketperm",
    "pidfile",
    "supervised",
}
_REDIS_LOGLEVEL = {"debug": "debug", "info": "notice", "warning": "warning", "notice": "notice"}


def redis_server_args(opts: dict[str, str]) -> list[str]:
    """kvd options translated for redis-server; an option with no Redis equivalent skips the test."""
    out: list[str] = []
    for k, v in opts.items():
        if k in _REDIS_PASSTHROUGH:
            out += [f"--{k}", v]
        elif k == "persistence":
            out += ["--appendonly", "yes" if v in ("yes", "true", "1") else "no"]
        elif k == "loglevel":
            out += ["--loglevel", _REDIS_LOGLEVEL.get(v, v)]
        else:
            pytest.skip(f"kvd option --{k} has no redis-server equivalent (KVD_TEST_TARGET=redis)")
    return out


class ServerProcess:
    """One server process. ``args``/``options`` are kvd settings; ``dir`` holds its data and logs."""

    def __init__(
        self,
        directory: Path,
        args: list[str] | tuple[str, ...] = (),
        *,
        kind: str | None = None,
        port: int | None = None,
        config: Path | None = None,
        **options: Any,
    ) -> None:
        self.kind = kind or target()
        self.host = "127.0.0.1"
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self.base = Path(directory)
        self.base.mkdir(parents=True, exist_ok=True)
        self.dir = self.base / "data"
        self.config = config
        self.args = list(args)
        self.options = normalize_options(self.args, options)
        self.options.setdefault("persistence", "no")
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False
        self.starts = 0
        self.stderr_path = self.base / "server.stderr"

    # -- properties ---------------------------------------------------------------------------------------
    @property
    def password(self) -> str | None:
        return self.options.get("requirepass") or None

    @property
    def url(self) -> str:
        auth = f"default:{self.password}@" if self.password else ""  # redis-cli 7.0 ignores ":pw@"
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command_line(self) -> list[str]:
        if self.kind == "redis":
            exe = shutil.which("redis-server") or "/usr/bin/redis-server"
            return [
                exe,
                "--bind",
                self.host,
                "--port",
                str(self.port),
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                "",
                *redis_server_args(self.options),
            ]
        cmd = [sys.executable, "-m", "kvd"]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        cmd += ["--bind", self.host, "--port", str(self.port), "--dir", str(self.dir)]
        for k, v in self.options.items():
            cmd += [f"--{k}", v]
        return cmd

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        assert not self.running, "already running"
        self.dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            try:
                self._start_once()
                return
            except _PortInUse:
                if self._fixed_port or attempt == 2:
                    raise RuntimeError(f"port {self.port} in use:\n{self.stderr_text()[-3000:]}") from None
                self.port = free_port()

    def _start_once(self) -> None:
        cmd = self.command_line()
        self.starts += 1
        self.killed = False
        with open(self.stderr_path, "ab") as err:
            err.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                cwd=self.base,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        _LIVE.add(self.proc)
        self._stderr_offset = 0
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            code = self.proc.poll()
            if code is not None:
                _LIVE.discard(self.proc)
                text = self.stderr_text()
                if "in use" in text.lower().rsplit("===== start", 1)[-1]:
                    raise _PortInUse()
                raise RuntimeError(f"{self.kind} exited with {code} during start-up:\n{text[-4000:]}")
            if self._answers_ping():
                return
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"{self.kind} not ready within {READY_TIMEOUT} s:\n{self.stderr_text()[-4000:]}")
            time.sleep(0.05)

    def _answers_ping(self) -> bool:
        try:
            with RawConnection(self.host, self.port, timeout=2) as c:
                reply = c.command("PING")
        except (OSError, TimeoutError, Exception):
            return False
        return reply == b"+PONG\r\n" or reply.startswith(b"-NOAUTH")

    def stop(self, expect_code: int | None = 0) -> int:
        """SIGTERM and wait; assert the exit status (None: any). Returns the status (-9 if it was killed)."""
        assert self.proc is not None, "never started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                _LIVE.discard(self.proc)
                raise AssertionError(
                    f"{self.kind} did not exit within {STOP_TIMEOUT} s of SIGTERM:\n{self.stderr_text()[-4000:]}"
                ) from None
        _LIVE.discard(self.proc)
        code = self.proc.returncode
        if expect_code is not None and not self.killed:
            assert code == expect_code, (
                f"{self.kind} exited with {code}, expected {expect_code}:\n" + (self.stderr_text()[-4000:])
            )
        return code

    def kill9(self) -> None:
        assert self.proc is not None, "never started"
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        _LIVE.discard(self.proc)
        self.killed = True

    def restart(self, extra_args: list[str] | None = None) -> None:
        """Stop (cleanly unless it is already dead) and start again on the same port and directory."""
        if self.running:
            self.stop()
        if extra_args:
            self.args += list(extra_args)
            self.options.update(normalize_options(extra_args, {}))
        self._fixed_port = True
        self.start()

    # -- clients --------------------------------------------------------------------------------------------
    def client(self, **kw: Any):
        """A redis-py client (the .venv's redis 8, RESP3 by default) with bytes replies unless told otherwise."""
        import redis

        kw.setdefault("decode_responses", False)
        kw.setdefault("socket_timeout", 30)
        kw.setdefault("socket_connect_timeout", 10)
        if self.password and "password" not in kw:
            kw["password"] = self.password
        return redis.Redis(host=self.host, port=self.port, **kw)

    def raw(self, timeout: float = 10.0) -> RawConnection:
        return RawConnection(self.host, self.port, timeout=timeout)

    # -- introspection ---------------------------------------------------------------------------------------
    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def rss_bytes(self) -> int:
        assert self.running, "not running"
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def __repr__(self) -> str:
        return f"<ServerProcess {self.kind} {self.host}:{self.port} {'running' if self.running else 'stopped'}>"


class ServerFactory:
    """Starts servers under one base directory; ``close()`` stops them all, asserting clean exits."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.started: list[ServerProcess] = []
        self._n = itertools.count()

    def __call__(self, *args: str, start: bool = True, **options: Any) -> ServerProcess:
        srv = ServerProcess(self.base / f"server{next(self._n)}", list(args), **options)
        self.started.append(srv)
        if start:
            srv.start()
        return srv

    def close(self) -> None:
        errors = []
        for srv in self.started:
            if srv.proc is None:
                continue
            try:
                srv.stop(expect_code=None if srv.killed else 0)
            except BaseException as e:  # keep stopping the others
                errors.append(e)
        if errors:
            raise errors[0]


class _PortInUse(Exception):
    pass
