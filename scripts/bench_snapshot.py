#!/usr/bin/env python
"""Backups side by side: ``redis-cli --rdb`` against kvd and redis-server, and ``kvd-load-rdb`` back into each.

    .venv/bin/python scripts/bench_snapshot.py                       # 512 x 1 MiB and 200 000 small keys
    .venv/bin/python scripts/bench_snapshot.py --values 1024 --small 1000000

Servers, all with persistence on (``appendfsync everysec``) and started fresh for each dataset:

* ``redis``: Debian's redis-server, which forks a child that writes the RDB file to disk, then sends it;
* ``kvd``: every value resident in RAM (``maxmemory`` above the dataset);
* ``kvd-cold``: a RAM tier of 64 MiB, so almost every value of the large dataset is read from the segment files
  while it is sent.

For each it reports the wall time of ``redis-cli --rdb`` (SYNC to the last byte written to the file) and its
payload rate, the pause the snapshot cost the server (kvd: the one pass over the keys, from its log; Redis: the
fork, ``latest_fork_usec``), the latency of small GETs another client sends every millisecond during the dump
(p50, p99, max), and the wall time of ``kvd-load-rdb`` writing the file into a fresh server of the same kind.
Ratios are kvd against redis-server from the same run; absolute times on a shared 2-core host are noise.

Then it checks the copy the way an operator would: ``DEBUG DIGEST`` of the server that was dumped and of the one
the file was loaded into must be equal, and equal across servers (kvd signs a dataset as Redis does). The time
of that DIGEST and the GET latency during it are reported too: Redis computes it in one blocking pass, kvd from a
snapshot while other clients are served.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import ROOT, Server, _wait_ready, free_port, start_redis  # scripts/ is on sys.path

MiB = 1 << 20
PY = sys.executable


def start_kvd(name: str, workdir: Path, maxmemory: str) -> Server:
    port = free_port()
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    cmd = [PY, "-m", "kvd", "--port", str(port), "--bind", "127.0.0.1", "--maxmemory", maxmemory]
    cmd += ["--persistence", "yes", "--appendfsync", "everysec", "--dir", str(d / "data")]
    cmd += ["--enable-debug-command", "local"]
    log = d / "kvd.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    srv = Server(name, "kvd", port, proc, log)
    _wait_ready(srv)
    return srv


def start(kind: str, workdir: Path) -> Server:
    if kind == "redis":
        debug = ("--enable-debug-command", "local")
        return start_redis(f"redis-{time.monotonic_ns()}", "everysec", workdir, extra=debug)
    return start_kvd(f"{kind}-{time.monotonic_ns()}", workdir, "64mb" if kind == "kvd-cold" else "16gb")


def fill(port: int, dataset: str, n: int) -> int:
    """Write the dataset with pipelined SETs; returns the payload bytes."""
    import redis

    c = redis.Redis(port=port)
    pipe = c.pipeline(transaction=False)
    total = 0
    value = bytes(range(256)) * (MiB // 256)
    for i in range(n):
        key = b"chunk:%08d" % i if dataset == "large" else b"k:%08d" % i
        v = value[i % 256 :] + value[: i % 256] if dataset == "large" else b"v%013d" % i
        pipe.set(key, v)
        total += len(key) + len(v)
        if len(pipe) >= (16 if dataset == "large" else 2000):
            pipe.execute()
    pipe.execute()
    c.close()
    return total


class Prober(threading.Thread):
    """GET of a small key every millisecond on its own connection: what the dump costs other clients."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(b"*3\r\n$3\r\nSET\r\n$5\r\nprobe\r\n$1\r\nx\r\n")
        assert self.sock.recv(64) == b"+OK\r\n"
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$5\r\nprobe\r\n")
            got = b""
            while not got.endswith(b"x\r\n"):
                got += self.sock.recv(64)
            self.latencies.append((time.perf_counter() - t) * 1000)
            time.sleep(0.001)


def probed(srv: Server, args: list[str]) -> tuple[float, str, dict[str, float]]:
    """Run ``redis-cli -p PORT *args`` while a Prober measures GETs: wall time, output, GET latencies (ms)."""
    prober = Prober(srv.port)
    prober.start()
    t = time.perf_counter()
    r = subprocess.run(["redis-cli", "-p", str(srv.port), *args], capture_output=True, timeout=1800)
    wall = time.perf_counter() - t
    prober.stop.set()
    prober.join()
    if r.returncode != 0 or re.match(rb"[A-Z]+ ", r.stdout):  # redis-cli prints an error reply as "CODE text"
        raise RuntimeError(f"redis-cli {' '.join(args)} against {srv.name} failed: {r.stdout + r.stderr!r}"[-500:])
    lat = sorted(prober.latencies)
    return (
        wall,
        r.stdout.decode().strip(),
        {
            "p50": statistics.median(lat),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "max": lat[-1],
            "probes": len(lat),
        },
    )


def pause_ms(srv: Server) -> float:
    if srv.kind == "redis":
        out = subprocess.run(["redis-cli", "-p", str(srv.port), "info", "stats"], capture_output=True, text=True)
        return int(re.search(r"latest_fork_usec:(\d+)", out.stdout).group(1)) / 1000
    found = re.findall(r"taken in (\d+) ms", srv.log.read_text())
    return float(found[-1]) if found else float("nan")


def digest(srv: Server) -> str:
    out = subprocess.run(["redis-cli", "-p", str(srv.port), "debug", "digest"], capture_output=True, timeout=1800)
    text = out.stdout.decode().strip()
    if not re.fullmatch(r"[0-9a-f]{40}", text):
        raise RuntimeError(f"DEBUG DIGEST against {srv.name}: {text or out.stderr.decode()}"[-500:])
    return text


def load(kind: str, workdir: Path, path: Path) -> tuple[float, str]:
    """Load the file into a fresh server of ``kind``: the wall time, and that server's DEBUG DIGEST."""
    srv = start(kind, workdir)
    try:
        t = time.perf_counter()
        cmd = [PY, "-m", "kvd.tools.load_rdb", str(path), "--port", str(srv.port)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800, cwd=ROOT)
        return time.perf_counter() - t, digest(srv)
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--values", type=int, default=512, help="1 MiB values in the large dataset")
    ap.add_argument("--small", type=int, default=200_000, help="keys in the small dataset (16-byte values)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kvd-bench-snapshot-"))
    rows = []
    digests: dict[str, str] = {}
    try:
        for dataset, n in (("large", args.values), ("small", args.small)):
            kinds = ["redis", "kvd", "kvd-cold"] if dataset == "large" else ["redis", "kvd"]
            for kind in kinds:
                srv = start(kind, workdir)
                try:
                    payload = fill(srv.port, dataset, n)
                    path = workdir / f"{kind}-{dataset}.rdb"
                    wall, _, lat = probed(srv, ["--rdb", str(path)])
                    pause = pause_ms(srv)
                    # The prober's key is in the file and in the digest alike.
                    signed, source, signed_lat = probed(srv, ["debug", "digest"])
                finally:
                    srv.stop()
                loaded, copy = load(kind, workdir, path)
                path.unlink()
                if copy != source:
                    raise RuntimeError(f"{dataset} {kind}: the loaded copy's digest {copy}, the source's {source}")
                digests.setdefault(dataset, source)
                if digests[dataset] != source:
                    raise RuntimeError(f"{dataset} {kind}: digest {source}, redis-server's was {digests[dataset]}")
                rows.append((dataset, n, kind, payload, wall, pause, lat, loaded, signed, signed_lat))
                print(
                    f"{dataset} {kind}: dump {wall:.2f} s, pause {pause:.0f} ms, load {loaded:.2f} s, "
                    f"digest {signed:.2f} s ({source}, the copy's the same)",
                    flush=True,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(
        "| dataset | server | redis-cli --rdb s | GB/s | kvd / redis | pause ms | GET p50 / p99 / max ms during "
        "the dump | kvd-load-rdb s | kvd / redis | DEBUG DIGEST s | kvd / redis | GET max ms during it |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = {(r[0]): r for r in rows if r[2] == "redis"}
    for dataset, n, kind, payload, wall, pause, lat, loaded, signed, signed_lat in rows:
        ref = base[dataset]
        what = f"{n} x 1 MiB" if dataset == "large" else f"{n} x 16 B"
        speed = "-" if kind == "redis" else f"{ref[4] / wall:.2f}x"
        load_ratio = "-" if kind == "redis" else f"{ref[7] / loaded:.2f}x"
        sign_ratio = "-" if kind == "redis" else f"{ref[8] / signed:.2f}x"
        print(
            f"| {what} | {kind} | {wall:.2f} | {payload / wall / 1e9:.2f} | {speed} | {pause:.0f} | "
            f"{lat['p50']:.2f} / {lat['p99']:.2f} / {lat['max']:.1f} | {loaded:.2f} | {load_ratio} | "
            f"{signed:.2f} | {sign_ratio} | {signed_lat['max']:.1f} |"
        )
    print(f"\nDEBUG DIGEST, equal on every server and on every loaded copy: {digests}")


if __name__ == "__main__":
    main()
