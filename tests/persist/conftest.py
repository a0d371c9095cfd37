"""Fixtures for the storage-engine tests (helpers live in persist_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def seg_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
