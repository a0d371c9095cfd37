"""Fixtures for the connector's unit tests: a real server process (kvd, or redis-server; see connectors.testing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.testing import Server, target_kind


def pytest_report_header(config: pytest.Config) -> str:
    return f"connector tests talk to: {target_kind()}"


@pytest.fixture(scope="module")
def kv_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(Path(tmp_path_factory.mktemp("kvserver")), persistence=False).start()
    yield srv
    srv.stop()


@pytest.fixture
def kv_url(kv_server: Server) -> str:
    kv_server.client().flushall()
    return kv_server.url
