"""What compaction costs when live data shares segments with overwritten large values.

A fresh kvd (``appendfsync everysec``, 256 MiB segments) first receives data that then stays untouched, then a
stream of large SETs that overwrite a few keys, so every segment dies except for what the first phase left in
it. Reported per scenario: throughput of the overwriting SETs, kvd's CPU per SET (all threads), and how many
bytes compaction moved while they ran: rewritten in place (``INFO persistence`` ``aof_rewritten_bytes``) and
carried forward through the log (``aof_compacted_bytes``):

* ``cold-large``: 192 values of 256 KiB (48 MiB), then 2 500 SETs of 1 MiB over 16 keys.
* ``cold-small``: 100 000 keys of 16 B, then 8 000 SETs of 256 KiB over 64 keys.
* ``fresh-large`` / ``fresh-small``: the same overwrites with nothing else stored: what the cold data adds.

Either way the cold data should be copied once, when the rest of its segment dies, then left alone
(kvd/persist/maintenance.py, "Compaction"), not again at every segment.

    .venv/bin/python scripts/bench_compaction.py            # every scenario, about 2 minutes
    .venv/bin/python scripts/bench_compaction.py cold-large

One client (redis-py with hiredis), loopback; absolute rates depend on the disk and the page cache, so compare
runs of one session, and each scenario against its own numbers from another commit.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_server import start_kvd  # scripts/ is on sys.path when this runs as a script

SCENARIOS = {
    # name: (live keys, live value size, overwriting SETs, their value size, keys they overwrite)
    "cold-large": (192, 256 << 10, 2_500, 1 << 20, 16),
    "cold-small": (100_000, 16, 8_000, 256 << 10, 64),
    "fresh-large": (0, 0, 2_500, 1 << 20, 16),
    "fresh-small": (0, 0, 8_000, 256 << 10, 64),
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(name: str, workdir: Path) -> str:
    live, live_size, sets, size, keys = SCENARIOS[name]
    server = start_kvd(name, "uvloop", "everysec", workdir)
    try:
        r = redis.Redis(port=server.port)
        pipe = r.pipeline(transaction=False)
        for i in range(live):
            pipe.set(b"live:%d" % i, b"l" * live_size)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        value = os.urandom(size)
        before = r.info("persistence")
        cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
        for i in range(sets):
            r.set(b"hot:%d" % (i % keys), value)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(server.pid) - cpu0
        after = r.info("persistence")
        assert r.dbsize() == live + keys, f"{r.dbsize()} keys, expected {live + keys}"
        carried = after["aof_compacted_bytes"] - before["aof_compacted_bytes"]
        in_place = after.get("aof_rewritten_bytes", 0) - before.get("aof_rewritten_bytes", 0)  # 0 before 2026-11
        runs = after["aof_compactions"] - before["aof_compactions"]
        return (
            f"{name:<11} {sets * size / elapsed / 1e9:6.2f} GB/s  {cpu / sets * 1e6:7.0f} us CPU/SET  "
            f"compaction: {runs:3d} runs, {in_place / 2**20:6.0f} MiB rewritten in place, "
            f"{carried / 2**20:6.0f} MiB carried (live data: {live * live_size / 2**20:.0f} MiB)"
        )
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvd-compaction-") as tmp:
        for name in args.scenarios or SCENARIOS:
            if name not in SCENARIOS:
                raise SystemExit(f"unknown scenario {name!r}: choose from {', '.join(SCENARIOS)}")
            print(run(name, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
