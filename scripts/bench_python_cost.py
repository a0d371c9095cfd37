"""kvd's interpreter cost per request: the protocol objects driven in-process, without sockets.

``bench_server.py`` measures kvd as clients see it: kernel copies, wake-ups and Python together. This script
isolates the last part. It builds the real ``Server``/``Keyspace``/``Client`` objects, hands each client a
transport that only counts writes, and feeds ready-made requests through ``get_buffer``/``buffer_updated``
exactly as the event loop would after a ``recv_into``. What it times is therefore parsing, dispatch, the
command, the RAM tier and the reply path, per request:

* small ``SET``/``GET`` (64 B values, keys drawn from 100 000 like ``redis-benchmark -r 100000``, all of them
  stored first, so a GET finds its value and a SET overwrites one), one request per read (``-P 1``) and 16 per
  read (``-P 16``), 50 connections, 8 of them served per loop iteration;
* a repeated 256 KiB ``SET`` (64 keys in rotation), which lands in one buffer
  (``kvd/protocol/landing.py``). The harness copies only each request's header into the buffer kvd offers and
  reports the whole request as received: the value's bytes are whatever the buffer held, which kvd neither
  reads nor checks (the two bytes after a bulk are skipped unread, as Redis does). So no copy of the value is
  timed. (It used to copy the whole request and subtract a separately timed copy, which on these hosts varied
  between runs by more than the Python it was meant to leave: 13-25 us.)

The loop iteration itself (``await asyncio.sleep(0)``, which also runs the reply flushes that ``ReplyBatch``
schedules) is timed empty and subtracted too. In the running daemon the same Python costs 2-3x more, because
it runs with caches the kernel's copies have just flushed (docs/benchmarks.md, "Where the time goes").

    .venv/bin/python scripts/bench_python_cost.py                # every workload, about 10 s
    .venv/bin/python scripts/bench_python_cost.py --profile      # + the top cProfile entries of each
                                                                 # (PROF_N=30 for more than 12)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import random
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_lib import encode  # scripts/ is on sys.path when this runs as a script

from kvd.config import load_settings  # after the sys.path line: the repository root
from kvd.connection import Client
from kvd.persist import SegmentLog
from kvd.protocol import receive
from kvd.server import Server
from kvd.store.keyspace import Keyspace, now_ms


class CountingTransport:
    """The part of a transport kvd's ``Client`` uses; writes are counted and dropped."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: object) -> None:
        self.writes += 1

    def writelines(self, parts: object) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_server(log_dir: str | None = None) -> Server:
    """A server without persistence, or with a real segment log (``appendfsync everysec``) in ``log_dir``."""
    settings = load_settings(None, ["--persistence", "no", "--maxmemory", "8gb"])
    seg_log = None
    if log_dir is not None:
        seg_log = SegmentLog(log_dir, appendfsync="everysec")
        seg_log.recover(now_ms())
    keyspace = Keyspace(maxmemory=settings.maxmemory, policy=settings.maxmemory_policy, seg_log=seg_log)
    if seg_log is not None:
        seg_log.start(asyncio.get_running_loop(), keyspace)
    return Server(settings, keyspace)


def connect(server: Server, n: int) -> list[tuple[Client, CountingTransport]]:
    pairs = []
    for _ in range(n):
        client, transport = Client(server), CountingTransport()
        client.connection_made(transport)
        pairs.append((client, transport))
    return pairs


def deliver_header(client: Client, data: bytes, value_len: int) -> None:
    """A landing request whose value the kernel would copy: only its header is written into the buffer kvd
    offers, and the whole request is reported. A request kvd does not offer a landing buffer for raises, so the
    landed-SET workload cannot quietly time the general path instead."""
    buf = client.get_buffer(-1)
    if len(buf) < len(data):
        raise AssertionError(f"no landing buffer: {len(buf)} bytes offered for a {len(data)}-byte request")
    head = len(data) - value_len - 2
    buf[:head] = memoryview(data)[:head]
    client.buffer_updated(len(data))


def deliver(client: Client, data: bytes) -> None:
    """What the event loop does for bytes that arrived: fill the buffer the client offers, report, repeat."""
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        buf = client.get_buffer(-1)
        n = min(len(buf), len(data) - pos)
        buf[:n] = view[pos : pos + n]
        client.buffer_updated(n)
        pos += n


async def timed(
    reads: list[tuple[Client, bytes]],
    per_iteration: int,
    profile: bool,
    send: Callable[[Client, bytes], None] = deliver,
) -> tuple[float, float]:
    """Seconds for delivering every read (``per_iteration`` reads per loop iteration), and for the same number
    of empty loop iterations."""
    n_iter = len(reads) // per_iteration
    start = time.perf_counter()
    for _ in range(n_iter):
        await asyncio.sleep(0)
    empty = time.perf_counter() - start
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    start = time.perf_counter()
    for i in range(n_iter):
        for client, data in reads[i * per_iteration : (i + 1) * per_iteration]:
            send(client, data)
        await asyncio.sleep(0)
    total = time.perf_counter() - start
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(int(os.environ.get("PROF_N", 12)))
    return total, empty


async def small(op: bytes, pipeline: int, requests: int, profile: bool, log_dir: str | None = None) -> float:
    server = make_server(log_dir)
    pairs = connect(server, 50)
    rnd = random.Random(1)
    value = b"v" * 64

    def one() -> bytes:
        key = b"key:%012d" % rnd.randrange(100_000)
        return encode(b"SET", key, value) if op == b"SET" else encode(b"GET", key)

    # Every key exists, as after redis-benchmark's SET rounds: GETs find their values, SETs overwrite.
    fill = pairs[0][0]
    for first in range(0, 100_000, 1000):
        deliver(fill, b"".join(encode(b"SET", b"key:%012d" % k, value) for k in range(first, first + 1000)))
        await asyncio.sleep(0)
    assert len(server.keyspace) == 100_000, "the key space was not filled"
    n_reads = requests // pipeline
    reads = [(pairs[i % len(pairs)][0], b"".join(one() for _ in range(pipeline))) for i in range(n_reads)]
    await timed(reads[: n_reads // 10], 8, False)  # warm-up
    total, empty = await timed(reads, 8, profile)
    if server.keyspace.log is not None:
        await server.keyspace.log.close()
    assert sum(t.writes for _, t in pairs) >= len(pairs), "no replies were written"
    return (total - empty) / (n_reads * pipeline)


async def large(size: int, requests: int, profile: bool) -> float:
    server = make_server()
    ((client, transport),) = connect(server, 1)
    value = os.urandom(size)
    reqs = [encode(b"SET", b"chunk:%d:%d" % (size, k), value) for k in range(64)]
    reads = [(client, reqs[i % len(reqs)]) for i in range(requests)]
    await timed(reads[:200], 1, False)  # the second request of one shape arms landing; fill the keys
    landed = server.stats.landed_sets
    writes = transport.writes
    total, empty = await timed(reads, 1, profile, lambda c, data: deliver_header(c, data, size))
    assert server.stats.landed_sets - landed == requests, "not every request ran as a landed SET"
    assert transport.writes - writes >= requests, f"{transport.writes - writes} replies for {requests} requests"
    return (total - empty) / requests


async def main(args: argparse.Namespace) -> None:
    print(f"Python {sys.version.split()[0]}, loop {type(asyncio.get_running_loop()).__module__}")
    print(f"{'workload':<26} {'us/request':>10}")
    for pipeline in (1, 16):
        for op in (b"SET", b"GET"):
            cost = await small(op, pipeline, 40_000, args.profile)
            print(f"{op.decode()} 64 B -P {pipeline:<13} {cost * 1e6:10.2f}")
    for pipeline in (1, 16):
        with tempfile.TemporaryDirectory(prefix="kvd-cost-") as log_dir:
            cost = await small(b"SET", pipeline, 40_000, args.profile, log_dir)
        print(f"SET 64 B -P {pipeline:<2} everysec    {cost * 1e6:10.2f}")
    for size in (256 << 10,):
        if receive.PATH != "c":  # without the C receiver landed requests take the general path (receive.py)
            print(f"SET {size >> 10} KiB landed{'':<11} {'-':>10}   (not measured: receive_path {receive.PATH})")
            continue
        python = await large(size, 3000, args.profile)
        print(f"SET {size >> 10} KiB landed{'':<11} {python * 1e6:10.2f}   (header copied, value not)")


def run(entry: Callable[[], object]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(entry())  # type: ignore[arg-type]
    else:
        uvloop.run(entry())  # type: ignore[arg-type]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--profile", action="store_true", help="print the top cProfile entries of each workload (PROF_N, default 12)"
    )
    parsed = ap.parse_args()
    run(lambda: main(parsed))
