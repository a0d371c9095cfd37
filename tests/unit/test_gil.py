"""kvd.gil.tune_switch_interval: the daemon shortens the interpreter's switch interval at start-up, and only then."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from kvd import gil


@pytest.fixture
def restored() -> Iterator[float]:
    before = sys.getswitchinterval()
    try:
        yield before
    finally:
        sys.setswitchinterval(before)


def test_tune_sets_the_interval(restored: float) -> None:
    gil.tune_switch_interval()
    assert sys.getswitchinterval() == pytest.approx(gil.SWITCH_INTERVAL)
    assert restored > gil.SWITCH_INTERVAL  # shorter than CPython's default of 5 ms


def test_importing_the_daemon_leaves_the_interval_alone() -> None:
    # A fresh interpreter: tests and benchmarks that import kvd's modules keep their own setting.
    code = "import sys; a = sys.getswitchinterval(); import kvd.cli, kvd.gil; print(a, sys.getswitchinterval())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1] == "0.005"
