"""scripts/bench_ab.py, the before/after harness the docs' side-by-side numbers come from: it must keep working
(a smoke run against real servers), not be fast."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_ab  # noqa: E402  (scripts/ is not a package)


@pytest.mark.parametrize(
    ("target", "parts"),
    [
        ("redis", ("redis", "", "")),
        ("kvd", ("kvd", "", "")),
        ("kvd=/tmp/base", ("kvd", "/tmp/base", "")),
        ("kvd@/usr/bin/python3.11", ("kvd", "", "/usr/bin/python3.11")),
        ("kvd=/tmp/base@/usr/bin/python3.11", ("kvd", "/tmp/base", "/usr/bin/python3.11")),
    ],
)
def test_targets_name_a_checkout_and_an_interpreter(target, parts):
    assert bench_ab.parse_target(target) == parts


@pytest.mark.parametrize("target", ["memcached", "redis@/usr/bin/python3", "redis=/tmp/x"])
def test_an_unknown_target_is_refused(target):
    with pytest.raises(SystemExit, match="unknown target"):
        bench_ab.parse_target(target)


def test_one_round_against_redis_and_kvd_reports_both():
    options = ["--size", "4096", "--rounds", "1", "--duration", "0.2"]
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_ab.py"), *options, "redis", f"kvd={REPO}"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rows = dict(re.findall(r"^(\d:\S+)\s+(\d+) ", run.stdout, re.MULTILINE))
    assert set(rows) == {"0:redis", f"1:kvd={REPO}"}, run.stdout
    assert all(int(ops) > 0 for ops in rows.values()), run.stdout


def _processes_in(directory: Path) -> list[str]:
    """Processes whose command line or working directory names ``directory`` (redis-server rewrites its command
    line to "redis-server HOST:PORT", but works in its --dir)."""
    found = []
    for pid in Path("/proc").iterdir():
        try:
            cmdline = (pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(pid / "cwd")
        except OSError:
            continue  # gone, not a process, or not ours to look at
        if str(directory) in cmdline or cwd.startswith(str(directory)):
            found.append(f"{pid.name}: {cmdline} (in {cwd})")
    return found


def test_a_target_that_fails_to_start_leaves_no_server_running(tmp_path):
    """redis starts, then kvd on an interpreter that exits at once: the run fails and stops redis too."""
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_ab.py"), "--rounds", "1", "redis", "kvd@/bin/false"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # every server's --dir is under it
    )
    assert run.returncode != 0 and "exited with" in run.stderr, run.stderr[-2000:]
    assert _processes_in(tmp_path) == []


def test_a_server_that_never_answers_is_stopped(tmp_path):
    import bench_server

    proc = subprocess.Popen(["sleep", "30"])
    srv = bench_server.Server("silent", "kvd", bench_server.free_port(), proc, tmp_path / "log")
    try:
        with pytest.raises(RuntimeError, match="not ready"):
            bench_server._wait_ready(srv, timeout=0.5)
        assert proc.poll() is not None  # stopped, not left behind
    finally:
        proc.kill()
        proc.wait()
