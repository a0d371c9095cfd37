"""Shared fixtures: real server processes on free loopback ports, each with its own directory.

``KVD_TEST_TARGET=kvd`` (default) starts ``python -m kvd``; ``KVD_TEST_TARGET=redis`` starts Debian's
redis-server with the same options translated, so the compatibility tests can be checked against the real thing.
Tests of kvd-only behaviour carry ``@pytest.mark.kvd_only`` and are skipped on redis.

Fixtures: ``server`` (fresh, persistence off), ``module_server`` (one per module, for tests that only read or
use their own keys), ``server_factory(*args, **options)`` (more or custom servers; all stopped at teardown,
asserting a clean exit unless killed), ``redis_server`` (a redis-server whatever the target), ``tmp_dir``,
``target``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.server import ServerFactory, ServerProcess, target
from support.tools import find_tool


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kvd_only: tests of kvd's own behaviour; skipped with KVD_TEST_TARGET=redis")
    config.addinivalue_line("markers", "compat: client compatibility tests (redis-cli, redis-py, glide, benchmark)")


def pytest_report_header(config: pytest.Config) -> str:
    return f"kvd test target: {target()} (KVD_TEST_TARGET)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if target() != "redis":
        return
    skip = pytest.mark.skip(reason="kvd-only behaviour (KVD_TEST_TARGET=redis)")
    for item in items:
        if item.get_closest_marker("kvd_only"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def target_kind() -> str:
    return target()


@pytest.fixture
def tmp_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    factory = ServerFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    return server_factory()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A Debian redis-server of the test's own, whatever ``KVD_TEST_TARGET`` says: a replica to follow the server
    under test, or the maker of an RDB file."""
    find_tool("redis-server")
    srv = ServerProcess(tmp_path / "redis", kind="redis")
    srv.start()
    yield srv
    if srv.running:
        srv.stop(expect_code=None)


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    factory = ServerFactory(tmp_path_factory.mktemp("module_server"))
    srv = factory()
    yield srv
    factory.close()
