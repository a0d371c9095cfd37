"""Fixtures for the storage-engine tests (helpers live in persist_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvd.persist import writer


@pytest.fixture
def seg_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(autouse=True, params=["c", "python"])
def record_packer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every engine test runs with the writer's C packer of small records (``_records.c``) and without it, as
    on a machine where it was not built."""
    if request.param == "c" and writer.pack_run is None:
        pytest.skip("kvd.persist._records was not built")
    if request.param == "python":
        monkeypatch.setattr(writer, "pack_run", None)
    return str(request.param)
