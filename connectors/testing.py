"""Support shared by the connector's tests and benchmarks: a real kvd (or redis-server) process, never a mock,
and the settings of the offline vLLM engine subprocesses they run.

``KVD_TEST_TARGET=kvd`` (default) runs ``python -m kvd --bind 127.0.0.1 --port P --dir D`` when kvd is installed
(``import kvd.server`` works and ``python -m kvd --help`` exits 0); otherwise, and with ``KVD_TEST_TARGET=redis``,
Debian's ``redis-server --save '' --appendonly no``. The connector must work against both. Ready when PING answers.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.config import KVTransferConfig

_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_stragglers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_REPO = Path(__file__).resolve().parents[1]


def engine_env(work: Path, *paths: Path) -> dict[str, str]:
    """Environment of a vLLM engine subprocess: offline, the engine core in-process, one OpenMP thread (the
    machine is shared with kvd and the client), its own TMPDIR under ``work``, the repository (and ``paths``)
    importable, the compile cache shared across runs, and no inherited PYTHONHASHSEED (the chunk hashes must
    not depend on it; tests check that)."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        OMP_NUM_THREADS="1",
        TMPDIR=str(work / "tmp"),
        PYTHONPATH=os.pathsep.join(str(p) for p in (_REPO, *paths)),
        VLLM_CACHE_ROOT=str(_REPO / ".cache" / "vllm-cache"),
    )
    env.pop("PYTHONHASHSEED", None)
    return env


def kv_transfer_config(
    extra: dict[str, object], connector: str = "KvdConnector", module: str = "connectors.vllm"
) -> KVTransferConfig:
    """vLLM's KVTransferConfig for ``connector`` with ``extra`` as its extra config; failed loads recompute.
    Imported lazily: only engine processes (in the vLLM environment) call this."""
    from vllm.config import KVTransferConfig

    return KVTransferConfig(
        kv_connector=connector,
        kv_connector_module_path=module,
        kv_role="kv_both",
        kv_connector_extra_config=extra,
        kv_load_failure_policy="recompute",
    )


def server_python() -> str:
    """The Python that runs kvd: ``KVD_SERVER_PYTHON``, else the repo's .venv (scripts in the vLLM environment
    have kvd importable but not its dependencies), else this interpreter."""
    env = os.environ.get("KVD_SERVER_PYTHON")
    if env:
        return env
    venv = _REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


@functools.cache
def kvd_available(python: str | None = None) -> bool:
    """``import kvd.server`` works and ``python -m kvd --help`` exits 0, in the Python that would run kvd."""
    python = python or server_python()
    try:
        ok = subprocess.run([python, "-c", "import kvd.server"], capture_output=True, timeout=60).returncode == 0
        return ok and subprocess.run([python, "-m", "kvd", "--help"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def target_kind() -> str:
    """'kvd' or 'redis': what KVD_TEST_TARGET asks for, falling back to redis while kvd cannot run."""
    want = os.environ.get("KVD_TEST_TARGET", "kvd").strip().lower() or "kvd"
    if want not in ("kvd", "redis"):
        raise ValueError(f"KVD_TEST_TARGET must be kvd or redis, not {want!r}")
    if want == "kvd" and not kvd_available():
        return "redis"
    return want


class Server:
    """One server process on a fixed port and directory; ``restart`` keeps both (kvd then recovers from disk)."""

    def __init__(self, directory: Path, kind: str | None = None, *, persistence: bool = True, **opts: str) -> None:
        self.kind = kind or target_kind()
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.persistence = persistence
        self.opts = opts
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "server.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        data = self.dir / "data"
        data.mkdir(exist_ok=True)
        if self.kind == "redis":
            exe = shutil.which("redis-server") or "/usr/sbin/redis-server"
            cmd = [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(data)]
            cmd += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
            for k, v in self.opts.items():
                cmd += [f"--{k.replace('_', '-')}", v]
            return cmd
        cmd = [server_python(), "-m", "kvd", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(data)]
        cmd += ["--persistence", "yes" if self.persistence else "no"]
        for k, v in self.opts.items():
            cmd += [f"--{k.replace('_', '-')}", v]
        return cmd

    def start(self, timeout: float = 30.0) -> Server:
        import redis

        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        _LIVE.add(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not answer PING within {timeout}s")

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _LIVE.discard(self.proc)
        self.proc = None

    def restart(self) -> Server:
        self.stop()
        return self.start()

    def client(self):  # -> redis.Redis
        import redis

        return redis.Redis(port=self.port, socket_timeout=30)
