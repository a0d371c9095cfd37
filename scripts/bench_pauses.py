#!/usr/bin/env python
"""Pauses under a growing keyspace: kvd against redis-server, side by side, with the log on.

redis-benchmark writes millions of mostly new small keys (``-t set -d 64 -c 50 -P 16 -r 10000000``) into a fresh
kvd and a fresh redis-server, both ``appendfsync everysec``, one after the other, several rounds alternating.
Per run it reports throughput, the latency summary (p50, p99, the longest request), kvd's or Redis's CPU
seconds, and *stalled samples*: redis-benchmark prints its current rate four times a second, and a sample
under 1000 req/s means the server answered (almost) nothing for that quarter second. A pause that grows with
the keyspace (a full garbage collection walking every key, kvd/memory.py) shows up there and in the longest
request, long before it moves the average.

    .venv/bin/python scripts/bench_pauses.py                 # 2 rounds of 4 million SETs each, about 6 minutes
    .venv/bin/python scripts/bench_pauses.py --requests 1000000 --rounds 1
    .venv/bin/python scripts/bench_pauses.py --kvd-src /tmp/old-checkout   # kvd from another tree (A/B)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_server import ROOT, Server, _cpu_seconds, _wait_ready, free_port, start_redis  # scripts/ on sys.path


def start_kvd_from(src: Path, workdir: Path, name: str) -> Server:
    port = free_port()
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kvd", "--port", str(port), "--bind", "127.0.0.1", "--maxmemory", "8gb"]
    cmd += ["--persistence", "yes", "--appendfsync", "everysec", "--dir", str(d / "data")]
    log = d / "kvd.log"
    with open(log, "wb") as f:  # -m kvd from src: the tree's own package comes first on sys.path
        proc = subprocess.Popen(cmd, cwd=src, env=dict(os.environ, KVD_EVENT_LOOP="uvloop"), stdout=f, stderr=f)
    srv = Server(name, "kvd", port, proc, log, {"src": str(src)})
    _wait_ready(srv)
    return srv


def run(srv: Server, requests: int) -> str:
    cpu0 = sum(_cpu_seconds(srv.pid)[:2])  # user + system
    cmd = ["redis-benchmark", "-p", str(srv.port), "-t", "set", "-d", "64", "-c", "50", "-P", "16"]
    cmd += ["-n", str(requests), "-r", "10000000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout.replace("\r", "\n")
    cpu = sum(_cpu_seconds(srv.pid)[:2]) - cpu0
    rates = [float(m) for m in re.findall(r"rps=([0-9.]+)", out)]
    stalled = sum(1 for r in rates[1:] if r < 1000)  # the first sample is taken before the clients connect
    tput = re.search(r"throughput summary: ([0-9.]+) requests per second", out)
    lat = out.split("latency summary (msec):")[-1].split("\n")[2].split() if "latency summary" in out else []
    p50, p99, top = (lat[2], lat[4], lat[5]) if len(lat) >= 6 else ("?", "?", "?")
    rps = float(tput.group(1)) if tput else 0.0
    return (
        f"{srv.name:<8} {rps:9.0f} req/s  p50 {p50:>7} ms  p99 {p99:>8} ms  longest {top:>9} ms  "
        f"CPU {cpu:6.1f} s  stalled samples {stalled:3d} of {len(rates)}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kvd-src", type=Path, default=ROOT, help="the source tree kvd runs from (default: this one)")
    ap.add_argument("--skip-redis", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvd-pauses-") as tmp:
        for r in range(args.rounds):
            for kind in ("kvd", "redis"):
                if kind == "redis" and args.skip_redis:
                    continue
                if kind == "kvd":
                    srv = start_kvd_from(args.kvd_src, Path(tmp), f"kvd{r}")
                else:
                    srv = start_redis(f"redis{r}", "everysec", Path(tmp))
                try:
                    print(run(srv, args.requests), flush=True)
                finally:
                    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
