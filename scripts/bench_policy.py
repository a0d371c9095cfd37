#!/usr/bin/env python
"""Which chunks a full RAM tier keeps: allkeys-lru against allkeys-lfu, kvd and redis-server, on a prefix cache.

    .venv/bin/python scripts/bench_policy.py                  # about 1-2 minutes
    .venv/bin/python scripts/bench_policy.py --requests 400 --ram 64mb

The workload is what a KV-cache store sees from engines serving many distinct long prompts on top of a few
shared prefixes (system prompts, few-shot examples): every request reads the chunks of one of ``--prefixes``
shared prefixes (``--prefix-chunks`` chunks each, one MGET, chosen at random) and then writes
``--new-chunks`` chunks of its own prompt that nobody reads again. The shared chunks fit in RAM, but between
two reads of one prefix the one-off writes pass through RAM several times over, so an LRU tier lets them push
the shared chunks out; an LFU tier keeps the chunks that were read before.

Servers, started fresh for each policy with ``--ram`` of ``maxmemory``:

* kvd with its log (``appendfsync everysec``): a chunk that leaves RAM is demoted to disk and read back from
  there, so the measure is the share of shared-chunk reads served from RAM (INFO ``ram_hits`` against
  ``disk_hits``), and the request time, whose disk reads are what the policy saves;
* redis-server without persistence: a chunk that leaves RAM is gone, so the measure is the share of shared
  chunks still there (a miss is a recompute for the engine).

The first ``--prefixes`` requests read each prefix once (warm-up) and are not counted. Ratios within one run
only; absolute times on a shared 2-core host are noise.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import ROOT, Server, _wait_ready, free_port, start_redis  # scripts/ is on sys.path

PY = sys.executable
KiB = 1 << 10


def start_kvd(workdir: Path, ram: str, policy: str) -> Server:
    import subprocess

    port = free_port()
    d = workdir / f"kvd-{policy}"
    d.mkdir(parents=True, exist_ok=True)
    cmd = [PY, "-m", "kvd", "--port", str(port), "--bind", "127.0.0.1", "--maxmemory", ram]
    cmd += ["--maxmemory-policy", policy, "--persistence", "yes", "--appendfsync", "everysec"]
    cmd += ["--dir", str(d / "data")]
    log = d / "kvd.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    srv = Server(f"kvd-{policy}", "kvd", port, proc, log)
    _wait_ready(srv)
    return srv


def run(srv: Server, args: argparse.Namespace, chunk: bytes) -> dict[str, float]:
    import redis

    r = redis.Redis(port=srv.port, socket_timeout=60)
    rng = random.Random(args.seed)
    prefixes = [[b"shared:%03d:%03d" % (p, i) for i in range(args.prefix_chunks)] for p in range(args.prefixes)]
    for keys in prefixes:
        r.mset(dict.fromkeys(keys, chunk))
    order = list(range(args.prefixes)) + [rng.randrange(args.prefixes) for _ in range(args.requests)]
    found = reads = 0
    kvd_before: dict[str, int] = {}
    started = 0.0
    for n, p in enumerate(order):
        if n == args.prefixes:  # warm-up done: every prefix was read once
            if srv.kind == "kvd":
                kvd_before = r.info("kvd")
            started = time.perf_counter()
        values = r.mget(prefixes[p])
        if n >= args.prefixes:
            reads += len(values)
            found += sum(v is not None for v in values)
        with r.pipeline(transaction=False) as pipe:
            for i in range(args.new_chunks):
                pipe.set(b"once:%06d:%03d" % (n, i), chunk)
            pipe.execute()
    elapsed = time.perf_counter() - started
    result = {"found": found / reads, "ms_per_request": 1000 * elapsed / args.requests}
    if srv.kind == "kvd":
        after = r.info("kvd")
        ram = after["ram_hits"] - kvd_before["ram_hits"]
        disk = after["disk_hits"] - kvd_before["disk_hits"]
        result["from_ram"] = ram / (ram + disk) if ram + disk else 0.0
    r.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ram", default="48mb", help="maxmemory of every server")
    ap.add_argument("--chunk-kib", type=int, default=256)
    ap.add_argument("--prefixes", type=int, default=16)
    ap.add_argument("--prefix-chunks", type=int, default=6)
    ap.add_argument("--new-chunks", type=int, default=16)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    chunk = random.Random(0).randbytes(args.chunk_kib * KiB)
    shared_mib = args.prefixes * args.prefix_chunks * args.chunk_kib / 1024
    print(
        f"RAM {args.ram}; {args.prefixes} shared prefixes x {args.prefix_chunks} chunks of {args.chunk_kib} KiB "
        f"({shared_mib:.0f} MiB shared); each request reads one prefix and writes {args.new_chunks} new chunks "
        f"({args.new_chunks * args.chunk_kib / 1024:.0f} MiB); {args.requests} requests counted"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvd-bench-policy-") as tmp:
        workdir = Path(tmp)
        for kind in ("kvd", "redis"):
            for policy in ("allkeys-lru", "allkeys-lfu"):
                if kind == "kvd":
                    srv = start_kvd(workdir, args.ram, policy)
                else:
                    extra = ("--maxmemory", args.ram, "--maxmemory-policy", policy)
                    srv = start_redis(f"redis-{policy}", "off", workdir, extra=extra)
                try:
                    rows.append((kind, policy, run(srv, args, chunk)))
                finally:
                    srv.stop()
    print(f"\n{'server':8} {'policy':12} {'shared found':>13} {'from RAM':>9} {'ms/request':>11}")
    for kind, policy, res in rows:
        ram = f"{res['from_ram']:.0%}" if "from_ram" in res else "-"
        print(f"{kind:8} {policy:12} {res['found']:>13.0%} {ram:>9} {res['ms_per_request']:>11.1f}")
    by = {(k, p): res for k, p, res in rows}
    lru, lfu = by[("kvd", "allkeys-lru")], by[("kvd", "allkeys-lfu")]
    print(f"\nkvd allkeys-lfu / allkeys-lru: request time {lfu['ms_per_request'] / lru['ms_per_request']:.2f}x")


if __name__ == "__main__":
    main()
