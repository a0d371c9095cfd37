"""Loopback TCP against a unix socket, for the connector's bulk loads and saves, kvd side by side with Redis.

    .venv/bin/python scripts/bench_transport.py [--size 32M] [--values 8] [--rounds 10] [--json FILE]

Starts kvd and redis-server (persistence off), each listening on a TCP port and on a unix socket, and moves the
same values through the connector's client (``connectors.client.KvdClient``: pipelined SETs, MGET received
into reused buffers) over each of the four paths, and through shared memory that kvd reads and writes itself
(loads ``KVD.GETINTO``, saves ``KVD.SETFROM``; ``connectors/shm.py``), in alternating rounds whose order flips
every round. In the same run it measures each transport's ceiling: one connection moving the same bytes with
``sendall`` (from a forked process) into ``recv_into`` and nothing else, with the kernel's default buffers.
Reports GB/s (medians over the rounds, and their range) and the ratios that answer the questions: how much
faster is the unix socket, or shared memory (for kvd, for Redis, for the bare ceiling), and where does kvd stand
against Redis and against the ceiling on each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ab import parse_size  # "32M", "256K": the other benchmarks' spelling

from connectors.client import ClientConfig, KvdClient, LoadBuffers
from connectors.shm import SharedBuffers
from connectors.testing import Server


def _send_forever(listener: socket.socket, total: int) -> None:
    """The ceiling's sender, in its own process: ``total`` bytes per request byte, until the peer closes."""
    source = memoryview(os.urandom(1 << 20) * (total >> 20))
    conn, _ = listener.accept()
    with conn:
        while conn.recv(1):
            conn.sendall(source)


def ceiling_gbps(family: int, total: int, rounds: int, path: str) -> list[float]:
    """One connection of ``family`` from a forked sender: ``sendall`` of ``total`` bytes into ``recv_into``, per
    round, in GB/s. A process of its own, as a server is, so that the two ends do not share one GIL."""
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind(path if family == socket.AF_UNIX else ("127.0.0.1", 0))
    listener.listen(1)
    sender = multiprocessing.get_context("fork").Process(target=_send_forever, args=(listener, total), daemon=True)
    sender.start()
    sink = memoryview(bytearray(total))
    rates = []
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.connect(path if family == socket.AF_UNIX else listener.getsockname())
        for i in range(rounds + 1):
            start = time.perf_counter()
            client.sendall(b"x")
            got = 0
            while got < len(sink):
                got += client.recv_into(sink[got:])
            if i:  # the first one warms the buffers
                rates.append(len(sink) / (time.perf_counter() - start) / 1e9)
    sender.join(timeout=10)
    listener.close()
    if family == socket.AF_UNIX:
        os.unlink(path)
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="32M", help="bytes per value (K, M suffixes)")
    ap.add_argument("--values", type=int, default=8, help="values per MGET and per pipelined save")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    size = parse_size(args.size)
    total = size * args.values
    keys = [f"transport:{i}" for i in range(args.values)]
    values = [os.urandom(size) for _ in range(args.values)]
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="kvd-bench-transport-") as tmp:
        servers = {}
        clients = {}
        try:
            for kind in ("kvd", "redis"):
                sock = Path(tmp) / f"{kind}.sock"
                srv = Server(Path(tmp) / kind, kind, persistence=False, maxmemory=str(4 * total), unixsocket=str(sock))
                servers[kind] = srv.start()
                for transport, url in (("tcp", srv.url), ("unix", f"unix://{sock}")):
                    clients[f"{kind} {transport}"] = (
                        KvdClient(ClientConfig(url=url, timeout_ms=60_000)),
                        LoadBuffers(),
                    )
            # kvd copies the values into and out of this process's shared memory itself (KVD.GETINTO and
            # KVD.SETFROM). The saves' values are in their slots before the clock starts: the connector gathers
            # each chunk from the GPU straight into its slot, where it would otherwise gather into a buffer.
            clients["kvd shm"] = (
                KvdClient(ClientConfig(url=f"unix://{Path(tmp) / 'kvd.sock'}", timeout_ms=60_000)),
                SharedBuffers(size, keep_bytes=total),
            )
            outgoing = SharedBuffers(size, keep_bytes=total)
            for i, value in enumerate(values):
                outgoing.view(i, size)[:] = value
            from_slots = [(key, i, size) for i, key in enumerate(keys)]
            for i in range(args.rounds):
                order = list(clients.items())
                for path, (client, buffers) in order if i % 2 == 0 else reversed(order):
                    start = time.perf_counter()
                    if path == "kvd shm":
                        written, _ = client.put_shared(from_slots, outgoing, skip_existing=False)
                    else:
                        written, _ = client.put_many(list(zip(keys, values, strict=True)), skip_existing=False)
                    saved = time.perf_counter() - start
                    assert written == args.values, f"{path}: {written} of {args.values} values saved"
                    buffers.trim()
                    start = time.perf_counter()
                    got = client.get_many(keys, size, into=buffers)
                    loaded = time.perf_counter() - start
                    assert all(v is not None and bytes(v[:64]) == w[:64] for v, w in zip(got, values, strict=True))
                    rates.setdefault(f"{path} save", []).append(total / saved / 1e9)
                    rates.setdefault(f"{path} load", []).append(total / loaded / 1e9)
                    if path == "kvd shm":
                        assert client._has_getinto and client._has_setfrom, "KVD.GETINTO or KVD.SETFROM not taken"
            rates["ceiling tcp"] = ceiling_gbps(socket.AF_INET, total, args.rounds, "")
            rates["ceiling unix"] = ceiling_gbps(socket.AF_UNIX, total, args.rounds, str(Path(tmp) / "raw.sock"))
        finally:
            if "outgoing" in locals():
                outgoing.close()
            for client, buffers in clients.values():
                client.close()
                if isinstance(buffers, SharedBuffers):
                    buffers.close()
            for srv in servers.values():
                srv.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"{args.values} x {size >> 20} MiB per pass, {args.rounds} alternating rounds; GB/s median (min-max)")
    for name, r in rates.items():
        print(f"  {name:18s} {med[name]:6.2f}  ({min(r):.2f}-{max(r):.2f})")
    ratios = {
        "ceiling: unix / tcp": med["ceiling unix"] / med["ceiling tcp"],
        "kvd load: shm / unix": med["kvd shm load"] / med["kvd unix load"],
        "kvd load: shm / tcp": med["kvd shm load"] / med["kvd tcp load"],
        "kvd save: shm / unix": med["kvd shm save"] / med["kvd unix save"],
        "kvd save: shm / tcp": med["kvd shm save"] / med["kvd tcp save"],
    }
    for op in ("load", "save"):
        for kind in ("kvd", "redis"):
            ratios[f"{kind} {op}: unix / tcp"] = med[f"{kind} unix {op}"] / med[f"{kind} tcp {op}"]
        for transport in ("tcp", "unix"):
            ratios[f"{op} over {transport}: kvd / redis"] = (
                med[f"kvd {transport} {op}"] / med[f"redis {transport} {op}"]
            )
            if op == "load":  # the ceiling moves bytes the way a load does: server to client
                ratios[f"kvd load over {transport} / its ceiling"] = (
                    med[f"kvd {transport} load"] / med[f"ceiling {transport}"]
                )
    for name, ratio in ratios.items():
        print(f"  {name:34s} {ratio:5.2f}x")
    if args.json:
        args.json.write_text(
            json.dumps({"size": size, "values": args.values, "rates": rates, "ratios": ratios}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
