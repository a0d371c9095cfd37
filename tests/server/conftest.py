"""Fixtures of the server tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.shm import SHM


@pytest.fixture
def shm_file() -> Iterator[Path]:
    """A zeroed 4096-byte ``/dev/shm/kvd-test-*`` file (KVD.GETINTO, KVD.SETFROM), removed afterwards."""
    path = SHM / f"kvd-test-{os.getpid()}-{secrets.token_hex(4)}"
    path.write_bytes(bytes(4096))
    yield path
    path.unlink(missing_ok=True)
