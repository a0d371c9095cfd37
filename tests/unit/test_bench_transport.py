"""scripts/bench_transport.py, where the docs' TCP / unix socket / shared-memory numbers come from: a smoke run
against real servers (kvd and redis-server) that must keep working, not be fast. The script itself checks every
value it loads and that KVD.GETINTO and KVD.SETFROM were taken."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_short_run_reports_every_path_and_ratio(tmp_path: Path) -> None:
    out = tmp_path / "transport.json"
    cmd = [sys.executable, str(REPO / "scripts" / "bench_transport.py"), "--size", "1M", "--values", "2"]
    proc = subprocess.run([*cmd, "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    paths = {f"{k} {t} {op}" for k in ("kvd", "redis") for t in ("tcp", "unix") for op in ("save", "load")}
    assert set(result["rates"]) == paths | {"kvd shm load", "kvd shm save", "ceiling tcp", "ceiling unix"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["rates"].values())
    for ratio in ("kvd load: shm / unix", "kvd save: shm / unix", "kvd load over unix / its ceiling"):
        assert ratio in result["ratios"]
