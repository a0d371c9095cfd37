#!/usr/bin/env python
"""Replication, kvd against redis-server in one run: what a replica costs its primary, and how fast each follows one.

    .venv/bin/python scripts/bench_replication.py                 # both parts, about 3 minutes
    .venv/bin/python scripts/bench_replication.py --part primary  # or --part replica

For each primary (Debian's redis-server, kvd; persistence off on both) it measures writes without a replica and
with one attached (a redis-server started with ``--replicaof``), and reports each figure with a replica as a
ratio to the same primary without one, and kvd against Redis:

* small writes: ``redis-benchmark -t set -d 64 -P 16 -c 50 -r 100000`` (requests per second);
* large writes: SET of 1 MiB values from one redis-py client for a fixed time (GB/s);
* the replica's lag at the end: how long ``WAIT 1`` took after the last write.

The replica part: one redis-server primary (persistence off, its default diskless transfer, without its 5 s
delay) holding 512 random 1 MiB values and 200 000 small keys; a replica of each kind (redis-server, kvd with
persistence off, kvd with the log on at ``everysec``) is pointed at it with REPLICAOF in turn and timed until its
link is up with every key loaded (the full resynchronisation); then, with that replica attached, the primary
takes 1 MiB SETs and small pipelined SETs as above, and ``WAIT 1`` after the last write says how far the replica
was behind; from it, the rate at which the replica applied the flood (its SETs over the flood and the wait).
``--base DIR`` adds a kvd replica run from another checkout (``git worktree add DIR <commit>``), to compare.

Each ``WAIT`` goes out on a new connection: Redis waits for the offset after the client's previous command, and
on a connection whose last command was an earlier ``WAIT`` it would wait for nothing.

Every load loop is bounded in time and count; every server is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import ROOT, Server, _wait_ready, ensure_redis, free_port, start_kvd, start_redis  # scripts/ on path

MiB = 1 << 20


def start_replica(workdir: Path, primary: Server) -> Server:
    port = free_port()
    d = workdir / f"replica-{port}"
    d.mkdir(parents=True)
    cmd = [ensure_redis(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    cmd += ["--dir", str(d), "--replicaof", "127.0.0.1", str(primary.port), "--logfile", str(d / "redis.log")]
    log = d / "stdout.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    srv = Server(f"replica-{port}", "redis", port, proc, log)
    _wait_ready(srv)
    r = redis.Redis(port=port)
    deadline = time.monotonic() + 60
    while r.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not come up")
        time.sleep(0.05)
    return srv


def small_write_count(seconds: float) -> int:
    return int(seconds * 400_000)  # bounded in count as in time: redis-benchmark stops at -n


def small_writes(port: int, seconds: float) -> float:
    n = small_write_count(seconds)
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-d", "64", "-P", "16", "-c", "50", "-r", "100000",
         "-n", str(n), "-q"],
        capture_output=True, text=True, timeout=seconds * 20 + 60,
    )  # fmt: skip
    found = re.findall(r"SET: ([\d.]+) requests per second", out.stdout)
    if not found:
        raise RuntimeError(f"redis-benchmark: {out.stdout[-500:]} {out.stderr[-500:]}")
    return float(found[-1])


def large_writes(port: int, seconds: float, replicated: bool) -> tuple[float, float]:
    c = redis.Redis(port=port)
    value = bytes(range(256)) * (MiB // 256)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and done < 100_000:
        c.set(b"chunk:%d" % (done % 256), value)
        done += 1
    elapsed = time.perf_counter() - start
    t = time.perf_counter()
    if replicated:
        c.execute_command("WAIT", 1, 10_000)
    return done * MiB / elapsed / 1e9, (time.perf_counter() - t) * 1000 if replicated else 0.0


def fill_primary(port: int, large: int, small: int) -> None:
    """Random 1 MiB values (KV-cache chunks do not compress; a repeated pattern would reach the replica as a few
    KiB of LZF) and small keys; no delay before a diskless transfer (Redis waits 5 s by default)."""
    c = redis.Redis(port=port)
    c.config_set("repl-diskless-sync-delay", 0)
    with c.pipeline(transaction=False) as pipe:
        for i in range(large):
            pipe.set(b"chunk:%d" % i, os.urandom(MiB))
            if i % 16 == 15:
                pipe.execute()
        pipe.execute()
    for start in range(0, small, 10_000):
        c.mset({b"small:%08d" % i: b"v" * 16 for i in range(start, min(small, start + 10_000))})


def follow_time(replica: Server, primary: Server) -> float:
    """Seconds from REPLICAOF until the link is up and every key is there."""
    keys = redis.Redis(port=primary.port).dbsize()
    r = redis.Redis(port=replica.port)
    start = time.perf_counter()
    r.replicaof("127.0.0.1", primary.port)
    deadline = time.monotonic() + 300
    while r.info("replication").get("master_link_status") != "up" or r.dbsize() != keys:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{replica.name} did not catch up: {replica.log.read_text()[-2000:]}")
        time.sleep(0.01)
    return time.perf_counter() - start


def wait_for_replica(port: int, timeout_ms: int = 60_000) -> float:
    """Milliseconds until one replica acknowledged every write so far (``WAIT`` on a new connection; see above);
    infinity if none did within ``timeout_ms``."""
    t = time.perf_counter()
    acked = redis.Redis(port=port).execute_command("WAIT", 1, timeout_ms)
    return (time.perf_counter() - t) * 1000 if acked >= 1 else float("inf")


def replica_part(workdir: Path, seconds: float, base: Path | None) -> None:
    large, small = 512, 200_000
    primary = start_redis("primary", "off", workdir)
    results: dict[str, tuple[float, float, float, float, float]] = {}
    names = ["redis", "kvd", "kvd-everysec"] + (["kvd-base"] if base else [])
    try:
        fill_primary(primary.port, large, small)
        for name in names:
            if name == "redis":
                replica = start_redis(f"replica-{name}", "off", workdir)
            else:
                fsync = "everysec" if "everysec" in name else "off"
                tree = base if name == "kvd-base" and base else ROOT
                replica = start_kvd(f"replica-{name}", "uvloop", fsync, workdir, tree=tree)
            try:
                sync_s = follow_time(replica, primary)
                gbps, lag_large = large_writes(primary.port, seconds, True)
                ops = small_writes(primary.port, seconds)
                lag_small = wait_for_replica(primary.port)
            finally:
                replica.stop()
            results[name] = (sync_s, gbps, lag_large, ops, lag_small)
            print(f"replica {name}: full sync {sync_s:.2f} s, primary {gbps:.2f} GB/s of 1 MiB SETs (WAIT "
                  f"after {lag_large:.1f} ms), {ops:.0f} SET/s -P 16 (WAIT after {lag_small:.1f} ms)",
                  flush=True)  # fmt: skip
    finally:
        primary.stop()
    print()
    print(f"redis-server primary, {large} x 1 MiB + {small} small keys (+ redis-benchmark's 100 000 after the first "
          "round); the replica is:")  # fmt: skip
    print()
    if base:
        print(f"(kvd-base: the kvd of {base}, persistence off.)")
        print()
    print("| replica | full sync s | redis / it | primary's SET 1 MiB GB/s | WAIT 1 after, ms | primary's SET -d 64 "
          "-P 16 req/s | WAIT 1 after, ms | replica applied, SET/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    redis_sync = results["redis"][0]
    n = small_write_count(seconds)
    for name, (sync_s, gbps, lag_large, ops, lag_small) in results.items():
        applied = n / (n / ops + lag_small / 1000)  # every SET, over the flood and the wait for the replica
        shown = f"{applied:.0f}" if applied else "- (WAIT timed out)"
        print(f"| {name} | {sync_s:.2f} | {redis_sync / sync_s:.2f}x | {gbps:.2f} | {lag_large:.1f} | {ops:.0f} | "
              f"{lag_small:.1f} | {shown} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    ap.add_argument("--part", choices=("primary", "replica", "both"), default="both")
    ap.add_argument("--base", type=Path, help="replica part: also a kvd replica from this checkout (a git worktree)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kvd-bench-repl-"))
    if args.part in ("replica", "both"):
        try:
            replica_part(workdir, args.seconds, args.base)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if args.part == "replica":
            return
        workdir = Path(tempfile.mkdtemp(prefix="kvd-bench-repl-"))
    results: dict[tuple[str, bool], tuple[float, float, float]] = {}
    try:
        for kind in ("redis", "kvd"):
            for with_replica in (False, True):
                name = f"{kind}-{'replica' if with_replica else 'alone'}"
                if kind == "redis":
                    primary = start_redis(name, "off", workdir)
                else:
                    primary = start_kvd(name, "uvloop", "off", workdir)
                replica = start_replica(workdir, primary) if with_replica else None
                try:
                    ops = small_writes(primary.port, args.seconds)
                    gbps, lag = large_writes(primary.port, args.seconds, replica is not None)
                finally:
                    if replica is not None:
                        replica.stop()
                    primary.stop()
                results[(kind, with_replica)] = (ops, gbps, lag)
                print(f"{name}: {ops:.0f} SET/s (-P 16), {gbps:.2f} GB/s (1 MiB SETs), WAIT after {lag:.1f} ms",
                      flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(
        "| primary | replica | SET -d 64 -P 16 req/s | with / without | SET 1 MiB GB/s | with / without | WAIT 1 "
        "after the last write, ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for (kind, with_replica), (ops, gbps, lag) in results.items():
        base = results[(kind, False)]
        print(f"| {kind} | {'yes' if with_replica else 'no'} | {ops:.0f} | "
              f"{ops / base[0]:.2f}x | {gbps:.2f} | {gbps / base[1]:.2f}x | {lag:.1f} |")  # fmt: skip
    for with_replica in (False, True):
        k, r = results[("kvd", with_replica)], results[("redis", with_replica)]
        print(f"kvd / redis {'with' if with_replica else 'without'} a replica: small {k[0] / r[0]:.2f}x, "
              f"1 MiB {k[1] / r[1]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
