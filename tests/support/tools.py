"""Where the external tools live: redis-cli, redis-benchmark, the redis-py client matrix, the vLLM python.

scripts/test.sh installs all of them. When one is missing the test is skipped on a developer machine and fails
under CI (``CI`` set), so a broken set-up never passes silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / ".cache" / "clients"
NOHIREDIS = Path(__file__).resolve().parent / "nohiredis"
REDIS_PY_MAJORS = (5, 6, 7, 8)


def _missing(what: str) -> None:
    msg = f"{what} is missing (scripts/test.sh installs it)"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def find_tool(name: str) -> str:
    """Path of redis-cli / redis-benchmark / redis-server."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if path is None:
        _missing(name)
    return path


def redis_cli() -> str:
    return find_tool("redis-cli")


def redis_benchmark() -> str:
    return find_tool("redis-benchmark")


def redis_py_dir(major: int) -> Path:
    """The --target directory holding redis-py ``major``.x."""
    d = CLIENTS / f"redis{major}"
    if not (d / "redis" / "__init__.py").exists():
        _missing(f"redis-py {major}.x in {d}")
    return d


def client_env(major: int, hiredis: bool) -> dict[str, str]:
    """Environment for a client subprocess: redis-py ``major``.x first on the path, hiredis hidden if asked."""
    paths = [str(redis_py_dir(major))]
    if not hiredis:
        paths.insert(0, str(NOHIREDIS))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def vllm_python() -> str:
    """The vLLM environment's python (scripts/vllm_env.sh, exported by scripts/test.sh as KVD_VLLM_PYTHON)."""
    p = os.environ.get("KVD_VLLM_PYTHON", "")
    if not p or not os.access(p, os.X_OK):
        if os.environ.get("KVD_SKIP_VLLM"):
            pytest.skip("KVD_SKIP_VLLM is set")
        _missing("the vLLM environment (KVD_VLLM_PYTHON)")
    return p


def run(cmd: list[str], *, timeout: float, input: bytes | None = None, env: dict[str, str] | None = None, **kw):
    """subprocess.run with a hard timeout, captured output and no inherited stdin."""
    return subprocess.run(
        cmd,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        env=env,
        **kw,
    )
