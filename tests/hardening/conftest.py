"""Fixtures for the hardening tests: real kvd processes on free loopback ports (see hardening_support.py).

Every daemon a test starts is stopped at teardown (SIGTERM, then SIGKILL after 20 s), whatever the test did.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hardening_support import Kvd


@pytest.fixture
def kvd_factory(tmp_path: Path) -> Iterator:
    """``make(*flags, data_dir=None)`` starts a kvd and returns it; all are stopped at teardown.

    A daemon that a test left running must stop cleanly (exit 0) on SIGTERM, unless the test killed it.
    """
    started: list[Kvd] = []

    def make(*args: str, data_dir: Path | None = None, start: bool = True) -> Kvd:
        d = tmp_path / f"kvd{len(started)}"
        d.mkdir()
        srv = Kvd(d, list(args), data_dir=data_dir)
        started.append(srv)
        if start:
            srv.start()
        return srv

    yield make
    problems = []
    for srv in started:
        was_alive = srv.alive()
        code = srv.stop()
        if was_alive and code != 0:
            problems.append(f"kvd on port {srv.port} exited with {code} on SIGTERM: {srv.log_tail()}")
    assert not problems, problems


@pytest.fixture
def kvd(kvd_factory) -> Kvd:
    return kvd_factory()
