#!/usr/bin/env python
"""kvd vs redis-server vs the machine's loopback ceiling, in one run, with the same clients.

    .venv/bin/python scripts/bench_server.py --quick         # about 3-4 minutes
    .venv/bin/python scripts/bench_server.py                 # full run, about 12 minutes
    .venv/bin/python scripts/bench_server.py --profile       # also py-spy profiles of kvd (large + small values)
    .venv/bin/python scripts/plot_bench.py                   # docs/bench/results.json -> docs/bench/bench-*.png

What runs (all on 127.0.0.1, free ports, every server stopped at the end):

* servers: redis-server (Debian's; installed with apt if missing), kvd on uvloop, kvd on plain asyncio
  (``KVD_EVENT_LOOP=asyncio``, skip with ``--loops uvloop``), and the *ceiling* server of ``bench_lib.py``
  (moves the same bytes with the same request/response pattern into/out of preallocated buffers, doing nothing
  else; a process per connection), its *store* twin (the same, with as many buffers in rotation as the
  workload has keys: the memory a server that keeps its values writes and reads) and, for 4 clients, its
  one-thread twin (one ``epoll`` loop for every connection, as redis-server and kvd have). All with the same
  persistence (``--persistence off|everysec|always|no``).
* clients: a raw RESP client (``sendmsg`` of header+value, ``recv_into`` a preallocated buffer), redis-py
  with hiredis (sync, 1 client; asyncio, 4 connections as 4 tasks), redis-benchmark.
* workloads: SET/GET/MGET of 4 KiB .. 32 MiB with 1 and 4 client processes (raw) for a fixed time each;
  redis-benchmark ``-t set,get -d 64`` with and without ``-P 16``; the connector's prefix look-up of 512 keys
  (``KVD.PREFIXLEN`` in one round trip vs 512 pipelined ``EXISTS``); RSS (``VmRSS``) holding 1 GiB of 1 MiB
  values and holding 1 million small keys, each on freshly started servers.
* machine: memcpy bandwidth and ``bytearray(32 MiB)`` allocation rate.

Throughput is payload bytes (or ops) over the wall time of the slowest client; latency percentiles are over
every operation of every client. The machine has few cores shared by clients and servers: read ratios measured
in the same run, not absolute numbers.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_lib as bl

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MiB = bl.MiB
KiB = bl.KiB
SIZES = [4 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 32 * MiB]
OPS = ["SET", "GET", "MGET"]
CEILINGS = ("ceiling", "ceiling-store", "ceiling-1t", "ceiling-1t-store")  # bench_lib.py's servers
FORKED = ("ceiling", "ceiling-store")  # servers whose work is done by a child process per connection
PREFIX_KEYS = 512


def human(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


# -- servers --------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@dataclass
class Server:
    name: str
    kind: str  # kvd | redis | ceiling
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def client(self, cap: int = 1 * MiB) -> bl.RawClient:
        return bl.RawClient(self.port, cap=cap)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _wait_ready(srv: Server, timeout: float = 60.0) -> None:
    """Return once ``srv`` answers; otherwise stop it (no server outlives a failed start) and raise."""
    try:
        _poll_ready(srv, timeout)
    except BaseException:
        srv.stop()
        raise


def _poll_ready(srv: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"{srv.name} exited with {srv.proc.returncode}; log:\n{srv.log.read_text()[-3000:]}")
        if srv.kind == "ceiling":
            try:
                socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
                return
            except OSError as exc:
                last = exc
        else:
            try:
                c = srv.client()
                try:
                    if c.call(b"PING") == 0:
                        return
                finally:
                    c.close()
            except (OSError, bl.RespError) as exc:
                last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{srv.name} not ready after {timeout}s: {last}")


def ensure_redis() -> str:
    path = shutil.which("redis-server")
    if path and shutil.which("redis-benchmark"):
        return path
    print("redis-server not found: installing Debian's redis-server with apt-get")
    subprocess.run(["apt-get", "update", "-q"], check=False, timeout=300)
    subprocess.run(["apt-get", "install", "-y", "-q", "redis-server", "redis-tools"], check=True, timeout=600)
    path = shutil.which("redis-server")
    if not path:
        raise SystemExit("redis-server could not be installed")
    return path


def _pinned(cmd: list[str], cpus: str) -> list[str]:
    """``cmd`` run on the CPUs listed in ``cpus`` ("1", "0-1"; "" for wherever the scheduler puts it)."""
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


def start_kvd(
    name: str,
    loop: str,
    persistence: str,
    workdir: Path,
    variant: str = "",
    *,
    python: str = PY,
    tree: Path = ROOT,
    cpus: str = "",
) -> Server:
    """kvd from ``tree`` (another checkout: bench_ab.py) on ``python`` (another interpreter), pinned to ``cpus``."""
    port = free_port()
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    if variant:  # proposed changes applied as monkeypatches (bench_lib.VARIANTS)
        cmd = [python, str(Path(__file__).with_name("bench_lib.py")), "kvd-variant", variant.replace("+", ","), "--"]
    else:
        cmd = [python, "-m", "kvd"]
    cmd += ["--port", str(port), "--bind", "127.0.0.1", "--maxmemory", "8gb"]
    if persistence == "off":
        cmd += ["--persistence", "no"]
    else:
        cmd += ["--persistence", "yes", "--appendfsync", persistence, "--dir", str(d / "data")]
    env = dict(os.environ, KVD_EVENT_LOOP=loop)
    if tree != ROOT:
        env["PYTHONPATH"] = str(tree)
    log = d / "kvd.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(_pinned(cmd, cpus), cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT)
    srv = Server(name, "kvd", port, proc, log, {"loop": loop, "variant": variant})
    _wait_ready(srv)
    return srv


def start_redis(name: str, persistence: str, workdir: Path, *, cpus: str = "", extra: tuple[str, ...] = ()) -> Server:
    port = free_port()
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    cmd = [ensure_redis(), "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no", "--save", "", *extra]
    cmd += ["--dir", str(d), "--daemonize", "no", "--logfile", str(d / "redis.log")]
    if persistence == "off":
        cmd += ["--appendonly", "no"]
    else:
        cmd += ["--appendonly", "yes", "--appendfsync", persistence]
    log = d / "stdout.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(_pinned(cmd, cpus), cwd=d, stdout=f, stderr=subprocess.STDOUT)
    srv = Server(name, "redis", port, proc, log)
    _wait_ready(srv)
    return srv


def start_ceiling(workdir: Path, cap: int, name: str = "ceiling") -> Server:
    """``ceiling``: a process per connection; ``ceiling-store``: the same with a store's memory (rotating buffers);
    ``ceiling-1t`` and ``ceiling-1t-store``: one thread for all (``bench_lib.py``)."""
    port = free_port()
    log = workdir / f"{name}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [PY, str(Path(__file__).with_name("bench_lib.py")), name, str(port), str(cap)],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    srv = Server(name, "ceiling", port, proc, log)
    _wait_ready(srv)
    return srv


# -- running clients ------------------------------------------------------------------------------------------


def pct(values: list[int], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] / 1e6  # ns -> ms


def run_clients(
    spec: dict[str, Any], nproc: int, worker: Any = bl.sync_worker, pid: int | None = None
) -> dict[str, Any]:
    """Run ``nproc`` client processes against one server; ``pid``: also its CPU time per operation."""
    cpu0 = _cpu_seconds(pid) if pid else None
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(nproc)
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(spec, i, barrier, q), daemon=True) for i in range(nproc)]
    for p in procs:
        p.start()
    results = []
    limit = time.monotonic() + max(spec["duration"] * 4, spec["duration"] + 5) + 120
    try:
        for _ in procs:
            results.append(q.get(timeout=max(1.0, limit - time.monotonic())))
    except Exception as exc:  # queue.Empty: a worker hung
        results.append({"error": f"timeout: {exc!r}"})
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        return {"error": errors[0]}
    lat = [x for r in results for x in r["lat_ns"]]
    elapsed = max(r["elapsed"] for r in results)
    nbytes = sum(r["bytes"] for r in results)
    ops = sum(r["ops"] for r in results)
    extra: dict[str, Any] = {}
    if pid and cpu0 is not None:
        d = _cpu_seconds(pid) - cpu0
        total_ops = ops + sum(r.get("warm", 0) for r in results)
        extra["srv_cpu_us_op"] = 1e6 * (d[0] + d[1]) / max(1, total_ops)
        extra["srv_user_us_op"] = 1e6 * d[0] / max(1, total_ops)
        extra["srv_sys_us_op"] = 1e6 * d[1] / max(1, total_ops)
        extra["srv_cpu_pct"] = 100 * (d[0] + d[1]) / elapsed if elapsed else 0.0
    return {
        **extra,
        "ops": ops,
        "seconds": round(elapsed, 3),
        "gbps": nbytes / elapsed / 1e9 if elapsed else 0.0,
        "ops_s": ops / elapsed if elapsed else 0.0,
        "p50_ms": pct(lat, 50),
        "p99_ms": pct(lat, 99),
    }


def plan(size: int) -> dict[str, int]:
    size = max(size, 1)
    mget_n = max(1, min(16, (64 * MiB) // size))
    return {
        "nget": max(16, min(256, (128 * MiB) // size)),
        "nset": max(2, min(64, (64 * MiB) // size)),
        "mget_n": mget_n,
        "cap": max(size, size * mget_n) + 64 * KiB,
    }


def preload(servers: list[Server], size: int, nget: int) -> None:
    for srv in servers:
        c = srv.client(cap=1 * MiB)
        try:
            value = bl.make_value(size, 99)
            for i in range(nget):
                c.set(b"g:%d:%d" % (size, i), value)
        finally:
            c.close()


def flushall(servers: list[Server]) -> None:
    for srv in servers:
        c = srv.client()
        try:
            c.call(b"FLUSHALL")
        finally:
            c.close()


# -- benchmark sections ---------------------------------------------------------------------------------------


def bench_values(data: list[Server], ceilings: list[Server], args: argparse.Namespace, out: dict[str, Any]) -> None:
    runs = out["runs"]
    clients = [(c, n) for c, n in (("raw", 1), ("raw", 4), ("redispy", 1), ("redispy-async", 4)) if c in args.clients]
    for size in args.sizes:
        p = plan(size)
        t_size = time.monotonic()
        preload(data, size, p["nget"])
        for client, conc in clients:
            for op in OPS:
                targets: list[Server] = [s for s in data if client == "raw" or s.name in ("redis", "kvd")]
                if client == "raw":  # the one-thread ceilings only where they differ: several clients
                    targets += [c for c in ceilings if "-1t" not in c.name or conc > 1]
                best: dict[str, dict[str, Any]] = {}
                for _rep in range(args.reps):  # interleaved repetitions; the best one counts (background noise)
                    for srv in targets:
                        spec = dict(
                            p,
                            client="ceiling" if srv.kind == "ceiling" else ("raw" if client == "raw" else client),
                            port=srv.port,
                            op=op,
                            size=size,
                            duration=args.duration,
                            max_ops=200_000,
                            min_ops=3,
                            tasks=conc,
                        )
                        pid = srv.pid if srv.name not in FORKED else None  # their work is in forked children
                        if client == "redispy-async":
                            res = run_clients(spec, 1, bl.async_worker, pid)
                        else:
                            res = run_clients(spec, conc, pid=pid)
                        row = {"client": client, "op": op, "size": size, "conc": conc, "target": srv.name}
                        if op == "MGET":
                            row["mget_n"] = p["mget_n"]
                        row.update(res)
                        _progress(row)
                        prev = best.get(srv.name)
                        reps = [*(prev or {}).get("reps_gbps", []), round(res.get("gbps", 0.0), 4)]
                        if prev is None or "error" in prev or res.get("gbps", -1) > prev.get("gbps", -1):
                            best[srv.name] = row
                        best[srv.name]["reps_gbps"] = reps
                runs.extend(best.values())
        flushall(data)
        print(f"  -- {human(size)} done in {time.monotonic() - t_size:.0f} s", flush=True)


def _progress(row: dict[str, Any]) -> None:
    if "error" in row:
        msg = f"ERROR {row['error']}"
    else:
        msg = (
            f"{row['gbps']:7.3f} GB/s {row['ops_s']:9.0f} op/s p50 {row['p50_ms']:8.3f} ms p99 {row['p99_ms']:8.3f} ms"
        )
    print(
        f"  {row['client']:>13} c={row['conc']} {row['op']:<4} {human(row['size']):>7} {row['target']:<11} {msg}",
        flush=True,
    )


def bench_redis_benchmark(data: list[Server], args: argparse.Namespace, out: dict[str, Any]) -> None:
    """redis-benchmark against every server, ``--reps`` interleaved rounds (the order flips each round); the best
    round of each server and test is kept, as for the value workloads, with every round's rate in ``reps_rps``."""
    rows = out["redis_benchmark"]
    for pipeline in (1, 16):
        n = args.rb_n if pipeline == 1 else args.rb_n * 10
        best: dict[tuple[str, str], dict[str, Any]] = {}
        for rep in range(args.reps):
            for srv in data if rep % 2 == 0 else data[::-1]:
                for row in redis_benchmark_round(srv, pipeline, n):
                    key = (srv.name, row["test"])
                    prev = best.get(key)
                    rate = row.get("rps", 0.0)
                    rate = rate if rate == rate else 0.0  # NaN: a round that printed no rate
                    reps = [*(prev or {}).get("reps_rps", []), round(rate)]
                    if prev is None or rate > prev.get("rps", 0.0):
                        best[key] = row
                    best[key]["reps_rps"] = reps
        for srv in data:  # the table's order: servers as started, SET before GET
            for (name, _test), row in best.items():
                if name == srv.name:
                    rows.append(row)
                    if "rps" in row:
                        print(
                            f"  redis-benchmark -P {pipeline:<2} {row['test']:<4} {name:<11} {row['rps']:10.0f} req/s"
                            f"  (rounds {row['reps_rps']})"
                        )


def redis_benchmark_round(
    srv: Server, pipeline: int, n: int, tests: str = "set,get", command: list[str] | None = None
) -> list[dict[str, Any]]:
    """One redis-benchmark run: its tests ``-t tests -d 64``, or one ``command`` (``__rand_int__`` in it is
    replaced by a random number below 100000, as redis-benchmark does with ``-r``)."""
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(srv.port)]
    cmd += ["-n", str(n), "-c", "50", "-r", "100000", "-P", str(pipeline), "--csv"]
    cmd += command if command else ["-t", tests, "-d", "64"]
    cpu0 = _cpu_seconds(srv.pid)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        text = proc.stdout
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    d_cpu = _cpu_seconds(srv.pid) - cpu0
    requests = n * (1 if command else len(tests.split(",")))
    cpu_us = 1e6 * (d_cpu[0] + d_cpu[1]) / requests  # per request, every test together
    parsed = list(csv.reader(io.StringIO(text)))
    header = parsed[0] if parsed else []
    rows = []
    for rec in parsed[1:]:
        d = dict(zip(header, rec, strict=False))
        rows.append(
            {
                "target": srv.name,
                "pipeline": pipeline,
                "test": d.get("test", "?"),
                "rps": float(d.get("rps", "nan")),
                "p50_ms": float(d.get("p50_latency_ms", "nan")),
                "p99_ms": float(d.get("p99_latency_ms", "nan")),
                "srv_cpu_us_op": cpu_us,
                "srv_user_us_op": 1e6 * d_cpu[0] / requests,
                "srv_sys_us_op": 1e6 * d_cpu[1] / requests,
            }
        )
    if not rows:
        rows.append({"target": srv.name, "pipeline": pipeline, "test": "?", "error": text[-500:]})
    return rows


def bench_prefix(data: list[Server], args: argparse.Namespace, out: dict[str, Any]) -> None:
    rows = out["prefix"]
    for srv in data:
        c = srv.client()
        try:
            payload = b"".join(bl.encode(b"SET", b"pfx:%d" % i, b"v" * 16) for i in range(PREFIX_KEYS))
            c.pipeline(payload, PREFIX_KEYS)
        finally:
            c.close()
    for client in ("raw", "redispy"):
        for srv in data:
            ops = ["EXISTS-PIPE"] + (["PREFIXLEN"] if srv.kind == "kvd" else [])
            for op in ops:
                spec = dict(
                    client=client,
                    port=srv.port,
                    op=op,
                    size=0,
                    nkeys=PREFIX_KEYS,
                    duration=args.duration,
                    max_ops=100_000,
                    min_ops=3,
                )
                res = run_clients(spec, 1, pid=srv.pid)
                row = {"client": client, "target": srv.name, "op": op}
                row.update(res)
                rows.append(row)
                if "error" in res:
                    print(f"  prefix {client} {op} {srv.name}: ERROR {res['error']}")
                else:
                    print(
                        f"  prefix {client:<8} {op:<11} {srv.name:<11} {res['ops_s']:8.0f} look-ups/s "
                        f"p50 {res['p50_ms']:.3f} ms p99 {res['p99_ms']:.3f} ms"
                    )


def _settle_rss(srv: Server) -> int:
    time.sleep(0.5)
    return srv.rss()


def bench_memory(args: argparse.Namespace, workdir: Path, out: dict[str, Any]) -> None:
    mem = out["memory"]
    for kind in ("redis", "kvd"):
        # 1 GiB of 1 MiB values, on a fresh server
        srv = start_redis("mem-redis", args.persistence, workdir) if kind == "redis" else None
        if srv is None:
            srv = start_kvd("mem-kvd", "uvloop", args.persistence, workdir)
        try:
            base = _settle_rss(srv)
            c = srv.client()
            try:
                value = bl.make_value(MiB, 5)
                for i in range(1024):
                    c.set(b"m:%d" % i, value)
                keys = c.call(b"DBSIZE")
            finally:
                c.close()
            rss = _settle_rss(srv)
            mem[f"{kind}_large"] = {
                "base_rss": base,
                "rss": rss,
                "keys": keys,
                "payload": 1024 * MiB,
                "ratio": (rss - base) / (1024 * MiB),
            }
            print(f"  memory {kind:<5} 1 GiB of 1 MiB values: base {base / MiB:.0f} MiB, +{(rss - base) / MiB:.0f} MiB")
        finally:
            srv.stop()
        # N small keys, on a fresh server
        srv = start_redis("mem-redis2", args.persistence, workdir) if kind == "redis" else None
        if srv is None:
            srv = start_kvd("mem-kvd2", "uvloop", args.persistence, workdir)
        try:
            base = _settle_rss(srv)
            c = srv.client()
            n = args.small_keys
            t0 = time.monotonic()
            try:
                batch = 1000
                for start in range(0, n, batch):
                    stop = min(n, start + batch)
                    payload = b"".join(
                        b"*3\r\n$3\r\nSET\r\n$12\r\nkey:%08d\r\n$16\r\nvalue:%010d\r\n" % (i, i)
                        for i in range(start, stop)
                    )
                    c.pipeline(payload, stop - start)
                    if time.monotonic() - t0 > 300:
                        n = stop
                        break
                keys = c.call(b"DBSIZE")
            finally:
                c.close()
            el = time.monotonic() - t0
            rss = _settle_rss(srv)
            mem[f"{kind}_small"] = {
                "base_rss": base,
                "rss": rss,
                "keys": keys,
                "key_bytes": 12,
                "value_bytes": 16,
                "bytes_per_key": (rss - base) / max(1, keys),
                "load_keys_per_s": keys / el,
            }
            print(
                f"  memory {kind:<5} {keys} small keys: +{(rss - base) / MiB:.0f} MiB = "
                f"{(rss - base) / max(1, keys):.0f} B/key (loaded at {keys / el:.0f} keys/s, pipelined)"
            )
        finally:
            srv.stop()


# -- profiling ------------------------------------------------------------------------------------------------


def _collapse(path: Path) -> dict[str, Any]:
    """Summarise py-spy's collapsed stacks: share of samples per leaf frame and per frame anywhere on stack."""
    self_c: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        if frames[0].startswith("process ") or frames[0].startswith("thread "):
            frames = frames[1:]
        if not frames:
            continue
        self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n

    def top(c: collections.Counter[str], k: int) -> list[tuple[str, float]]:
        return [(f, round(100 * n / total, 1)) for f, n in c.most_common(k)] if total else []

    return {"samples": total, "self_pct": top(self_c, 25), "inclusive_pct": top(incl, 40)}


def bench_profile(args: argparse.Namespace, workdir: Path, out: dict[str, Any]) -> None:
    pyspy = Path(PY).with_name("py-spy")
    if not pyspy.exists():
        print("  py-spy not installed in the venv: .venv/bin/pip install py-spy")
        return
    prof = out["profile"]
    cases = [
        (loop, op, size, conc)
        for loop in ("uvloop", "asyncio")
        for size, conc in ((32 * MiB, 1), (1 * MiB, 4), (256 * KiB, 1))
        for op in ("SET", "GET")
    ]
    cases += [("uvloop", "rb-P1", 64, 0), ("uvloop", "rb-P16", 64, 0), ("asyncio", "rb-P1", 64, 0)]
    cases += [("asyncio", "rb-P16", 64, 0), ("uvloop", "PREFIXLEN", 0, 1)]
    seconds = max(4.0, args.duration * 3)
    for loop, op, size, conc in cases:
        srv = start_kvd(f"prof-{loop}", loop, args.persistence, workdir)
        try:
            p = plan(size)
            if op in ("GET", "MGET"):
                preload([srv], size, p["nget"])
            raw = workdir / f"prof-{loop}-{op}-{size}-{conc}.txt"
            rec = subprocess.Popen(
                [
                    str(pyspy),
                    "record",
                    "--pid",
                    str(srv.pid),
                    "--format",
                    "raw",
                    "--native",
                    "--rate",
                    "250",
                    "--duration",
                    str(int(seconds + 1)),
                    "-o",
                    str(raw),
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(raw.with_suffix(".log"), "wb"),  # noqa: SIM115
            )
            time.sleep(1.5)
            cpu0 = _cpu_seconds(srv.pid)
            t0 = time.monotonic()
            res: dict[str, Any] = {}
            if op.startswith("rb-"):
                pipeline = op.split("P")[1]
                cmd = ["redis-benchmark", "-p", str(srv.port), "-t", "set,get", "-d", "64", "-c", "50"]
                nreq = int(seconds * (80_000 if pipeline == "16" else 15_000))
                cmd += ["-n", str(nreq), "-P", pipeline, "-r", "100000", "--csv"]
                try:
                    text = subprocess.run(cmd, capture_output=True, text=True, timeout=int(seconds * 5)).stdout
                    res["rps"] = [float(r[1]) for r in csv.reader(io.StringIO(text)) if r and r[0] in ("SET", "GET")]
                    res["ops"] = 2 * nreq if len(res["rps"]) == 2 else 0
                except subprocess.TimeoutExpired:
                    pass
            else:
                spec = dict(p, client="raw", port=srv.port, op=op, size=size, duration=seconds, max_ops=10**6)
                if op == "PREFIXLEN":
                    c = srv.client()
                    try:
                        c.pipeline(b"".join(bl.encode(b"SET", b"pfx:%d" % i, b"v" * 16) for i in range(512)), 512)
                    finally:
                        c.close()
                    spec["nkeys"] = PREFIX_KEYS
                res = run_clients(spec, conc)
            cpu = _cpu_seconds(srv.pid) - cpu0
            wall = time.monotonic() - t0
            ops = res.get("ops", 0)
            try:
                rec.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                rec.kill()
                rec.wait(timeout=5)
            summary = _collapse(raw) if raw.exists() else {"samples": 0}
            if not summary["samples"]:
                print(raw.with_suffix(".log").read_text()[-2000:])
            summary.update(
                {
                    "loop": loop,
                    "op": op,
                    "size": size,
                    "conc": conc,
                    "kvd_cpu_pct": round(100 * (cpu[0] + cpu[1]) / wall, 1),
                    "kvd_user_pct": round(100 * cpu[0] / wall, 1),
                    "kvd_sys_pct": round(100 * cpu[1] / wall, 1),
                    "minor_faults_per_op": round(cpu[2] / ops, 1) if ops else None,
                    "cpu_ms_per_op": round(1000 * (cpu[0] + cpu[1]) / ops, 3) if ops else None,
                }
            )
            summary.update({k: res[k] for k in ("gbps", "ops_s", "p50_ms", "p99_ms", "ops", "rps") if k in res})
            prof.append(summary)
            cpu_pct = summary["kvd_cpu_pct"]
            print(
                f"  profile {loop} {op} {size} c={conc}: {summary['samples']} samples, kvd CPU {cpu_pct}% "
                f"(user {summary['kvd_user_pct']}%, sys {summary['kvd_sys_pct']}%), "
                f"{summary['minor_faults_per_op']} minor faults/op, {summary['cpu_ms_per_op']} CPU ms/op, "
                f"{res.get('gbps', 0):.2f} GB/s {res.get('rps', '')}"
            )
            for f, share in summary.get("self_pct", [])[:8]:
                print(f"      {share:5.1f}%  {f}")
        finally:
            srv.stop()


class _Cpu(tuple):
    def __sub__(self, other: tuple[float, ...]) -> tuple[float, ...]:  # type: ignore[override]
        return tuple(a - b for a, b in zip(self, other, strict=True))


def _cpu_seconds(pid: int) -> _Cpu:
    """(user s, system s, minor faults) of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return _Cpu((int(parts[11]) / tck, int(parts[12]) / tck, int(parts[7])))


# -- reporting ------------------------------------------------------------------------------------------------


def _find(runs: list[dict[str, Any]], **kw: Any) -> dict[str, Any] | None:
    for r in runs:
        if all(r.get(k) == v for k, v in kw.items()) and "error" not in r:
            return r
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return a / b


def derive(out: dict[str, Any]) -> None:
    """Ratios and the targets, stored in the JSON so the docs and the plot read the same numbers."""
    runs = out["runs"]
    for r in runs:
        if not r["target"].startswith("kvd") or "error" in r:
            continue
        key = {k: r[k] for k in ("client", "op", "size", "conc")}
        red = _find(runs, target="redis", **key)
        ceil = _find(runs, target="ceiling", **key)
        ceil_1t = _find(runs, target="ceiling-1t", **key)
        ceil_store = _find(runs, target="ceiling-store", **key)
        ceil_1t_store = _find(runs, target="ceiling-1t-store", **key)
        r["vs_redis"] = _ratio(r["gbps"], red["gbps"] if red else None)
        r["vs_ceiling"] = _ratio(r["gbps"], ceil["gbps"] if ceil else None)
        r["vs_ceiling_1t"] = _ratio(r["gbps"], ceil_1t["gbps"] if ceil_1t else None)
        r["vs_ceiling_store"] = _ratio(r["gbps"], ceil_store["gbps"] if ceil_store else None)
        r["vs_ceiling_1t_store"] = _ratio(r["gbps"], ceil_1t_store["gbps"] if ceil_1t_store else None)
        if r["target"] != "kvd":
            uv = _find(runs, target="kvd", **key)
            r["vs_uvloop"] = _ratio(r["gbps"], uv["gbps"] if uv else None)  # vs kvd as it is (uvloop)
    targets: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: float, higher: bool = True, unit: str = "x") -> None:
        met = None if value is None else (value >= goal if higher else value <= goal)
        targets.append({"target": name, "value": value, "goal": goal, "higher": higher, "unit": unit, "met": met})

    for op in ("GET", "SET"):
        for size in (s for s in SIZES if s >= 256 * KiB):
            for conc in (1, 4):
                r = _find(runs, client="raw", target="kvd", op=op, size=size, conc=conc)
                add(f"{op} {human(size)} c={conc}: kvd / redis", r and r.get("vs_redis"), 1.0)
                add(f"{op} {human(size)} c={conc}: kvd / ceiling", r and r.get("vs_ceiling"), 0.7)
                # No goal of the issue: how much of the gap to the ceiling is the memory a store writes, and
                # (4 clients) what is left once one thread does the work.
                reported = [("store ceiling", "vs_ceiling_store")]
                reported += [("1-thread store ceiling", "vs_ceiling_1t_store")] if conc > 1 else []
                for label, ratio in reported:
                    add(
                        f"{op} {human(size)} c={conc}: kvd / {label} (reported)",
                        r and r.get(ratio),
                        float("inf"),
                        False,
                    )
    for conc in (1, 4):
        r = _find(runs, client="raw", target="kvd", op="MGET", size=MiB, conc=conc)
        add(f"MGET 16 x 1 MiB c={conc}: kvd / redis", r and r.get("vs_redis"), 1.0)
    rb = out["redis_benchmark"]
    for pipeline, goal in ((1, 0.5), (16, 0.25)):
        for test in ("SET", "GET"):
            k = next((x for x in rb if x["target"] == "kvd" and x["pipeline"] == pipeline and x["test"] == test), None)
            rr = next(
                (x for x in rb if x["target"] == "redis" and x["pipeline"] == pipeline and x["test"] == test), None
            )
            add(
                f"redis-benchmark {test} -d 64 -P {pipeline}: kvd / redis",
                _ratio(k and k["rps"], rr and rr["rps"]),
                goal,
            )
    pre = out["prefix"]
    for client in ("raw", "redispy"):
        k = _find(pre, client=client, target="kvd", op="PREFIXLEN")
        rr = _find(pre, client=client, target="redis", op="EXISTS-PIPE")
        # "faster": lower p50 latency; value = redis p50 / kvd p50 (> 1 means kvd is faster)
        add(
            f"prefix look-up of 512 keys ({client}): redis 512 EXISTS p50 / kvd KVD.PREFIXLEN p50",
            _ratio(rr and rr["p50_ms"], k and k["p50_ms"]),
            1.0,
        )
    mem = out["memory"]
    if "kvd_large" in mem:
        add("RSS for 1 GiB of 1 MiB values, above the empty server (GiB)", mem["kvd_large"]["ratio"], 1.1, False, "GiB")
    if "kvd_small" in mem and "redis_small" in mem:
        add(
            "bytes per small key: kvd / redis (reported, no goal)",
            _ratio(mem["kvd_small"]["bytes_per_key"], mem["redis_small"]["bytes_per_key"]),
            float("inf"),
            False,
        )
    out["targets"] = targets


def _fmt(x: float | None, spec: str = ".2f") -> str:
    if x is None or x != x:
        return "-"
    return format(x, spec)


def tables(out: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for the console (rich) and for markdown."""
    runs = out["runs"]
    res: list[tuple[str, list[str], list[list[str]]]] = []
    have_async = any(r["target"] == "kvd-asyncio" for r in runs)
    header = ["op", "value", "c", "redis GB/s", "kvd GB/s", "kvd/redis", "ceiling GB/s", "kvd/ceiling"]
    header += ["1-thread ceiling GB/s", "kvd/1-thread ceiling"]
    header += ["store ceiling GB/s forked / 1-thread", "kvd/store ceiling forked / 1-thread"]
    header += ["redis p50/p99 ms", "kvd p50/p99 ms", "server CPU us/op redis / kvd / 1-thread ceiling"]
    if have_async:
        header += ["kvd-asyncio GB/s", "asyncio/uvloop"]
    rows = []
    for op in OPS:
        for size in SIZES:
            for conc in (1, 4):
                k = _find(runs, client="raw", target="kvd", op=op, size=size, conc=conc)
                r = _find(runs, client="raw", target="redis", op=op, size=size, conc=conc)
                c = _find(runs, client="raw", target="ceiling", op=op, size=size, conc=conc)
                c1 = _find(runs, client="raw", target="ceiling-1t", op=op, size=size, conc=conc)
                cs = _find(runs, client="raw", target="ceiling-store", op=op, size=size, conc=conc)
                c1s = _find(runs, client="raw", target="ceiling-1t-store", op=op, size=size, conc=conc)
                a = _find(runs, client="raw", target="kvd-asyncio", op=op, size=size, conc=conc)
                if not (k or r):
                    continue
                label = human(size) if op != "MGET" else f"{(k or r or {}).get('mget_n', '?')} x {human(size)}"
                row = [op, label, str(conc)]
                row += [_fmt(r and r["gbps"], ".3f"), _fmt(k and k["gbps"], ".3f"), _fmt(k and k.get("vs_redis"))]
                row += [_fmt(c and c["gbps"], ".3f"), _fmt(k and k.get("vs_ceiling"))]
                row += [_fmt(c1 and c1["gbps"], ".3f"), _fmt(k and k.get("vs_ceiling_1t"))]
                stores = [(cs, "vs_ceiling_store")] + ([(c1s, "vs_ceiling_1t_store")] if conc > 1 else [])
                row += [
                    " / ".join(_fmt(x and x["gbps"], ".3f") for x, _ in stores),
                    " / ".join(_fmt(k and k.get(ratio)) for _, ratio in stores),
                ]
                row += [
                    f"{_fmt(r and r['p50_ms'], '.3g')} / {_fmt(r and r['p99_ms'], '.3g')}",
                    f"{_fmt(k and k['p50_ms'], '.3g')} / {_fmt(k and k['p99_ms'], '.3g')}",
                    " / ".join(_fmt(x and x.get("srv_cpu_us_op"), ".0f") for x in (r, k, *([c1] if c1 else []))),
                ]
                if have_async:
                    row += [_fmt(a and a["gbps"], ".3f"), _fmt(a and a.get("vs_uvloop"))]
                rows.append(row)
    res.append(("Raw RESP client (sendmsg / recv_into): throughput of payload bytes", header, rows))

    header = ["client", "op", "value", "c", "redis GB/s", "kvd GB/s", "kvd/redis", "redis p50/p99 ms", "kvd p50/p99 ms"]
    rows = []
    for client in ("redispy", "redispy-async"):
        for op in OPS:
            for size in SIZES:
                conc = 1 if client == "redispy" else 4
                k = _find(runs, client=client, target="kvd", op=op, size=size, conc=conc)
                r = _find(runs, client=client, target="redis", op=op, size=size, conc=conc)
                if not (k or r):
                    continue
                label = human(size) if op != "MGET" else f"{(k or r or {}).get('mget_n', '?')} x {human(size)}"
                rows.append(
                    [
                        client,
                        op,
                        label,
                        str(conc),
                        _fmt(r and r["gbps"], ".3f"),
                        _fmt(k and k["gbps"], ".3f"),
                        _fmt(k and k.get("vs_redis")),
                        f"{_fmt(r and r['p50_ms'], '.3g')} / {_fmt(r and r['p99_ms'], '.3g')}",
                        f"{_fmt(k and k['p50_ms'], '.3g')} / {_fmt(k and k['p99_ms'], '.3g')}",
                    ]
                )
    res.append(("redis-py 8 + hiredis (sync: 1 client; asyncio: 4 connections on one loop)", header, rows))

    rb = out["redis_benchmark"]
    names = [n for n in ("redis", "kvd", "kvd-asyncio") if any(x["target"] == n for x in rb)]
    header = ["test", "-P"] + [f"{n} req/s" for n in names] + ["kvd/redis"]
    header += ["kvd-asyncio/kvd"] if "kvd-asyncio" in names else []
    header += [f"{n} p50/p99 ms" for n in names]
    header += ["server CPU us/req (SET+GET) " + " / ".join(names)]
    rows = []
    for pipeline in (1, 16):
        for test in ("SET", "GET"):
            got = {
                n: next((x for x in rb if x["target"] == n and x["pipeline"] == pipeline and x["test"] == test), None)
                for n in names
            }
            if not any(got.values()):
                continue
            rps = {n: (g["rps"] if g and "rps" in g else None) for n, g in got.items()}
            row = [test, str(pipeline)] + [_fmt(rps[n], ".0f") for n in names]
            row.append(_fmt(_ratio(rps.get("kvd"), rps.get("redis"))))
            if "kvd-asyncio" in names:
                row.append(_fmt(_ratio(rps.get("kvd-asyncio"), rps.get("kvd"))))
            row += [
                f"{_fmt(g and g.get('p50_ms'), '.3g')} / {_fmt(g and g.get('p99_ms'), '.3g')}" for g in got.values()
            ]
            row.append(" / ".join(_fmt(g and g.get("srv_cpu_us_op"), ".1f") for g in got.values()))
            rows.append(row)
    res.append(("redis-benchmark -t set,get -d 64 -c 50 -r 100000", header, rows))

    header = ["client", "server", "request", "look-ups/s", "p50 ms", "p99 ms", "server CPU us/look-up"]
    rows = []
    for r in out["prefix"]:
        if "error" in r:
            rows.append([r["client"], r["target"], r["op"], "error", "-", "-", "-"])
            continue
        req = "KVD.PREFIXLEN k1..k512 (1 command)" if r["op"] == "PREFIXLEN" else "512 pipelined EXISTS"
        rows.append(
            [
                r["client"],
                r["target"],
                req,
                f"{r['ops_s']:.0f}",
                f"{r['p50_ms']:.3f}",
                f"{r['p99_ms']:.3f}",
                _fmt(r.get("srv_cpu_us_op"), ".0f"),
            ]
        )
    res.append(("Prefix look-up of 512 keys, one round trip", header, rows))

    mem = out["memory"]
    header = ["server", "empty RSS MiB", "1 GiB of 1 MiB values: RSS MiB", "above empty / payload"]
    header += ["small keys", "RSS MiB", "bytes/key"]
    rows = []
    for kind in ("redis", "kvd"):
        lg, sm = mem.get(f"{kind}_large"), mem.get(f"{kind}_small")
        if not (lg or sm):
            continue
        rows.append(
            [
                kind,
                _fmt(lg and lg["base_rss"] / MiB, ".0f"),
                _fmt(lg and lg["rss"] / MiB, ".0f"),
                _fmt(lg and lg["ratio"], ".3f"),
                str(sm["keys"]) if sm else "-",
                _fmt(sm and sm["rss"] / MiB, ".0f"),
                _fmt(sm and sm["bytes_per_key"], ".0f"),
            ]
        )
    res.append(("Memory (VmRSS), fresh servers", header, rows))

    variants = sorted({r["target"] for r in runs if r["target"].startswith("kvd+")})
    variants += sorted({x["target"] for x in rb if x["target"].startswith("kvd+")} - set(variants))
    if variants:
        header = ["workload", "kvd", *variants]
        rows = []
        for r in runs:
            if r["target"] != "kvd" or r["client"] != "raw" or "error" in r:
                continue
            key = {k: r[k] for k in ("client", "op", "size", "conc")}
            row = [f"{r['op']} {human(r['size'])} c={r['conc']} (GB/s)", f"{r['gbps']:.3f}"]
            for v in variants:
                x = _find(runs, target=v, **key)
                cell = f"{x['gbps']:.3f} ({x['gbps'] / r['gbps']:.2f}x)" if x and r["gbps"] else "-"
                if x and x.get("srv_cpu_us_op") and r.get("srv_cpu_us_op"):
                    cell += f", CPU/op {x['srv_cpu_us_op'] / r['srv_cpu_us_op']:.2f}x"
                row.append(cell)
            rows.append(row)
        for x in rb:
            if x["target"] != "kvd" or "rps" not in x:
                continue
            row = [f"redis-benchmark {x['test']} -P {x['pipeline']} (req/s)", f"{x['rps']:.0f}"]
            for v in variants:
                y = next(
                    (z for z in rb if z["target"] == v and z["pipeline"] == x["pipeline"] and z["test"] == x["test"]),
                    None,
                )
                cell = f"{y['rps']:.0f} ({y['rps'] / x['rps']:.2f}x)" if y and "rps" in y and x["rps"] else "-"
                if y and y.get("srv_cpu_us_op") and x.get("srv_cpu_us_op"):
                    cell += f", CPU/op {y['srv_cpu_us_op'] / x['srv_cpu_us_op']:.2f}x"
                row.append(cell)
            rows.append(row)
        for x in out["prefix"]:
            if x["target"] != "kvd" or "error" in x:
                continue
            row = [f"prefix {x['client']} {x['op']} (p50 ms)", f"{x['p50_ms']:.3f}"]
            for v in variants:
                y = _find(out["prefix"], target=v, client=x["client"], op=x["op"])
                cell = f"{y['p50_ms']:.3f} ({x['p50_ms'] / y['p50_ms']:.2f}x faster)" if y else "-"
                if y and y.get("srv_cpu_us_op") and x.get("srv_cpu_us_op"):
                    cell += f", CPU/op {y['srv_cpu_us_op'] / x['srv_cpu_us_op']:.2f}x"
                row.append(cell)
            rows.append(row)
        res.append(("Proposed kvd changes (monkeypatched variants) against kvd as it is, same run", header, rows))

    prof = out.get("profile", [])
    if prof:
        header = ["loop", "workload", "throughput", "kvd CPU % (user+sys)", "CPU ms/op", "minor faults/op"]
        header += ["top samples (py-spy --native, share of non-idle samples)"]
        rows = []
        for x in prof:
            if x["op"].startswith("rb-"):
                work = f"redis-benchmark -d 64 -P {x['op'][4:]}"
                thr = " / ".join(f"{v / 1000:.0f}k" for v in x.get("rps", [])) + " req/s"
            elif x["op"] == "PREFIXLEN":
                work = "KVD.PREFIXLEN 512 keys"
                thr = f"{x.get('ops_s', 0):.0f} /s"
            else:
                work = f"{x['op']} {human(x['size'])} c={x['conc']}"
                thr = f"{x.get('gbps', 0):.2f} GB/s"
            merged: collections.Counter[str] = collections.Counter()
            for f, v in x.get("self_pct", []):
                merged[_short(f)] += v
            top = "; ".join(f"{f} {v:.0f}%" for f, v in merged.most_common(6))
            rows.append(
                [
                    x["loop"],
                    work,
                    thr,
                    f"{x['kvd_cpu_pct']:.0f} ({x['kvd_user_pct']:.0f}+{x['kvd_sys_pct']:.0f})",
                    _fmt(x.get("cpu_ms_per_op"), ".3f"),
                    _fmt(x.get("minor_faults_per_op"), ".1f"),
                    top,
                ]
            )
        res.append(("Where kvd's time goes (py-spy, one kvd per case)", header, rows))

    header = ["target", "value", "goal", "met"]
    rows = []
    for t in out.get("targets", []):
        goal = "-" if t["goal"] == float("inf") else ("≥ " if t["higher"] else "≤ ") + _fmt(t["goal"])
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "NO")
        if t["goal"] == float("inf"):
            met = "(report)"
        rows.append([t["target"], _fmt(t["value"]), goal, met])
    res.append(("Targets", header, rows))
    return res


_LIBC = {"0x17154a": "memset", "0x170d": "memmove", "0x170c": "memmove"}


def _short(frame: str) -> str:
    """'read (libc.so.6)' -> 'read'; 'Client._flush (kvd/connection.py:313)' -> 'Client._flush'."""
    name = frame.split(" (", 1)[0]
    if name.startswith("0x"):  # an unnamed libc address: glibc 2.36's AVX2 string functions on this machine
        off = hex(int(name, 16) & 0x1FFFFF)
        return next((v for k, v in _LIBC.items() if off.startswith(k)), "libc?")
    return name


def print_tables(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    m = out["meta"]
    console.print(
        f"[bold]machine[/]: {m['cpu']} x{m['cpus']}, {m['mem_gib']:.0f} GiB, kernel {m['kernel']}; "
        f"memcpy {m['memcpy_gbps']:.1f} GB/s, bytearray(32 MiB) {m['alloc32_gbps']:.1f} GB/s"
    )
    for title, header, rows in tables(out):
        t = Table(title=title, show_lines=False)
        for h in header:
            t.add_column(h, justify="left" if h in ("op", "client", "test", "target", "server", "request") else "right")
        for row in rows:
            style = "red" if row and row[-1] == "NO" else None
            t.add_row(*row, style=style)
        console.print(t)


def markdown(out: dict[str, Any]) -> str:
    lines = []
    for title, header, rows in tables(out):
        lines.append(f"#### {title}\n")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---" for _ in header) + "|")
        for row in rows:
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def meta(args: argparse.Namespace) -> dict[str, Any]:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30

    def out_of(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=ROOT).stdout.strip()
        except Exception:
            return "?"

    import redis
    import uvloop

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "mem_gib": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis_server": out_of(["redis-server", "--version"]),
        "redis_py": redis.__version__,
        "uvloop": uvloop.__version__,
        "kvd_commit": out_of(["git", "rev-parse", "--short", "HEAD"]),
        "kvd_tree_dirty": bool(out_of(["git", "status", "--porcelain", "--", "kvd"])),
        "persistence": args.persistence,
        "duration_s": args.duration,
        "quick": args.quick,
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "memcpy_gbps": bl.memcpy_gbps(),
        "alloc32_gbps": bl.alloc_gbps(),
    }


def save(out: dict[str, Any], args: argparse.Namespace) -> None:
    derive(out)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (about 3-4 minutes in all)")
    ap.add_argument("--persistence", choices=("off", "everysec", "always", "no"), default="off")
    ap.add_argument("--loops", default="uvloop,asyncio", help="kvd event loops to run (uvloop,asyncio)")
    ap.add_argument("--duration", type=float, help="seconds per measurement (default 0.4 quick, 1.0 full)")
    ap.add_argument("--reps", type=int, help="interleaved repetitions per measurement, best kept (1 quick, 2 full)")
    ap.add_argument(
        "--variants",
        default="",
        help="extra kvd servers with proposed patches, e.g. 'uninit,uninit+gc' (see bench_lib.VARIANTS)",
    )
    ap.add_argument("--clients", default="raw,redispy,redispy-async", help="value-workload clients to run")
    ap.add_argument("--sizes", help="comma-separated value sizes in KiB (default 4,256,1024,4096,32768)")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: values,rb,prefix,memory")
    ap.add_argument("--profile", action="store_true", help="also record py-spy profiles of kvd")
    ap.add_argument("--json", default=str(ROOT / "docs/bench/results.json"), help="where to write the results")
    ap.add_argument("--md", help="also write the tables as markdown to this file")
    ap.add_argument("--render", help="print the markdown tables of an existing results JSON and exit")
    args = ap.parse_args()
    if args.render:
        data = json.loads(Path(args.render).read_text())
        derive(data)
        print(markdown(data))
        return 0
    args.duration = args.duration or (0.4 if args.quick else 1.0)
    args.reps = args.reps or (1 if args.quick else 2)
    args.sizes = [int(s) * KiB for s in args.sizes.split(",")] if args.sizes else SIZES
    args.rb_n = 20_000 if args.quick else 60_000
    args.small_keys = 1_000_000
    skip = set(filter(None, args.skip.split(",")))
    loops = [x for x in args.loops.split(",") if x]

    out: dict[str, Any] = {"runs": [], "redis_benchmark": [], "prefix": [], "memory": {}, "profile": []}
    started = time.monotonic()
    ensure_redis()
    out["meta"] = meta(args)
    print(
        f"memcpy {out['meta']['memcpy_gbps']:.1f} GB/s, bytearray(32 MiB) {out['meta']['alloc32_gbps']:.1f} GB/s",
        flush=True,
    )
    servers: list[Server] = []
    workdir = Path(tempfile.mkdtemp(prefix="kvd-bench-"))
    try:
        redis_srv = start_redis("redis", args.persistence, workdir)
        servers.append(redis_srv)
        data = [redis_srv]
        for loop in loops:
            s = start_kvd("kvd" if loop == "uvloop" else f"kvd-{loop}", loop, args.persistence, workdir)
            servers.append(s)
            data.append(s)
        for variant in filter(None, args.variants.split(",")):
            s = start_kvd(f"kvd+{variant}", "uvloop", args.persistence, workdir, variant)
            servers.append(s)
            data.append(s)
        ceilings = [start_ceiling(workdir, 80 * MiB, name) for name in CEILINGS]
        servers += ceilings
        sections = [
            ("values", "== SET/GET/MGET", lambda: bench_values(data, ceilings, args, out)),
            ("rb", "== redis-benchmark", lambda: bench_redis_benchmark(data, args, out)),
            ("prefix", "== prefix look-up", lambda: bench_prefix(data, args, out)),
            ("stop", "", lambda: [srv.stop() for srv in servers]),
            ("memory", "== memory", lambda: bench_memory(args, workdir, out)),
            ("profile", "== py-spy profiles of kvd", lambda: bench_profile(args, workdir, out)),
        ]
        for name, title, run in sections:
            if name in skip or (name == "profile" and not args.profile):
                continue
            if title:
                print(title, flush=True)
            try:
                run()
            except Exception as exc:  # keep what the other sections measured
                import traceback

                traceback.print_exc()
                out.setdefault("errors", []).append(f"{name}: {type(exc).__name__}: {exc}")
            save(out, args)  # a checkpoint after every section
    finally:
        for s in servers:
            try:
                s.stop()
            except Exception as exc:
                print(f"could not stop {s.name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
    out["meta"]["total_s"] = round(time.monotonic() - started, 1)
    save(out, args)
    print_tables(out)
    print(f"wrote {args.json} ({out['meta']['total_s']:.0f} s)")
    if args.md:
        Path(args.md).write_text(markdown(out))
        print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
