"""scripts/bench_ab.py, the before/after harness the docs' side-by-side numbers come from: it must keep working
(a smoke run against real servers), not be fast."""

from __future__ import annotations

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
