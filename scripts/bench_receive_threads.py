#!/usr/bin/env python
"""Would helper threads give a one-thread server a second core for large SETs? Measured on the ceiling, not kvd.

The four-client SET cells of ``bench_server.py`` miss 70 % of the forked ceiling, and a single-threaded server
that keeps its values cannot reach it here (docs/benchmarks.md, "What the ceiling's cells measure"). The lever
left is a second core inside the server: hand each large payload's receive to a thread (``recv_into`` releases
the GIL), as some servers hand their socket I/O to threads. This script measures that lever on the cheapest
possible server, so that no kvd code is in the way: the one-thread store ceiling of ``bench_lib.py`` (one
``selectors`` loop, SETs landing in rotating pre-faulted buffers), with 0, 1 or 2 helper threads that receive
every payload of at least 256 KiB and wake the loop through a pipe when it is in.

    .venv/bin/python scripts/bench_receive_threads.py                    # 1 MiB and 256 KiB, 4 clients, 3 rounds
    .venv/bin/python scripts/bench_receive_threads.py --sizes 1024 --clients 4 --rounds 5

Each round starts one server per helper count and drives it with the ceiling protocol's clients
(``bench_lib.sync_worker``) for 1.5 s; the servers take turns, so slow spells of the machine hit each alike.
The result on the AMD EPYC host (2026-11-26) is in docs/benchmarks.md: helpers made it slower.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import select
import selectors
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_lib as bl  # scripts/ is on sys.path when this runs as a script

MiB = 1 << 20
HELPED_FROM = 256 * 1024  # payloads at least this large go to a helper thread


def serve(port: int, helpers: int, lifetime: float) -> None:
    """The one-thread store ceiling, with ``helpers`` threads receiving large payloads."""
    sel = selectors.DefaultSelector()
    srv = socket.create_server(("127.0.0.1", port))
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ, "accept")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    jobs: queue.SimpleQueue[tuple[socket.socket, memoryview, int]] = queue.SimpleQueue()
    done: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
    rotations: dict[socket.socket, bl._Rotation] = {}
    state: dict[socket.socket, list] = {}  # header bytes so far, destination, received, length

    def helper() -> None:
        while True:
            sock, dest, n = jobs.get()
            poll = select.poll()
            poll.register(sock.fileno(), select.POLLIN)
            got = 0
            try:
                while got < n:
                    try:
                        r = sock.recv_into(dest[got:n])
                    except BlockingIOError:
                        poll.poll()
                        continue
                    if not r:
                        break
                    got += r
                sock.send(b"+OK\r\n")
            except OSError:
                pass
            done.put(sock)
            os.write(wake_w, b"x")

    for _ in range(helpers):
        threading.Thread(target=helper, daemon=True).start()
    deadline = time.monotonic() + lifetime
    while time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            if key.data == "accept":
                conn, _ = srv.accept()
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sel.register(conn, selectors.EVENT_READ, "conn")
                rotations[conn], state[conn] = bl._Rotation(), [bytearray(), None, 0, 0]
                continue
            if key.data == "wake":
                os.read(wake_r, 4096)
                while True:
                    try:
                        sock = done.get_nowait()
                    except queue.Empty:
                        break
                    state[sock][1] = None
                    sel.register(sock, selectors.EVENT_READ, "conn")
                continue
            sock = key.fileobj
            st = state[sock]
            try:
                while True:
                    if st[1] is None:
                        r = sock.recv(bl._CEIL_HDR.size - len(st[0]))
                        if not r:
                            sel.unregister(sock)
                            sock.close()
                            break
                        st[0] += r
                        if len(st[0]) < bl._CEIL_HDR.size:
                            continue
                        op, n = bl._CEIL_HDR.unpack(st[0])
                        st[0] = bytearray()
                        st[1], st[2], st[3] = rotations[sock].next(op, n), 0, n
                        if helpers and n >= HELPED_FROM:
                            sel.unregister(sock)
                            jobs.put((sock, st[1], n))
                            break
                    r = sock.recv_into(st[1][st[2] : st[3]])
                    if not r:
                        sel.unregister(sock)
                        sock.close()
                        break
                    st[2] += r
                    if st[2] == st[3]:
                        st[1] = None
                        sock.send(b"+OK\r\n")
                        break
            except BlockingIOError:
                pass


def drive(port: int, size: int, clients: int, duration: float) -> float:
    """GB/s of SET payload from ``clients`` forked ceiling clients."""
    spec = {"op": "SET", "size": size, "client": "ceiling", "port": port, "duration": duration, "max_ops": 10**6}
    spec.update(nset=8, cap=MiB)
    barrier, results = mp.Barrier(clients), mp.Queue()
    procs = [mp.Process(target=bl.sync_worker, args=(spec, i, barrier, results)) for i in range(clients)]
    for proc in procs:
        proc.start()
    rows = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join()
    errors = [r["error"] for r in rows if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    return sum(r["bytes"] for r in rows) / max(r["elapsed"] for r in rows) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024,256", help="KiB, comma-separated")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=1.5)
    args = ap.parse_args()
    for size in (int(s) * 1024 for s in args.sizes.split(",")):
        rates: dict[int, list[float]] = {0: [], 1: [], 2: []}
        for _ in range(args.rounds):
            for helpers in rates:
                port = _free_port()
                proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(helpers)])
                try:
                    _wait(port)
                    rates[helpers].append(drive(port, size, args.clients, args.duration))
                finally:
                    proc.kill()
                    proc.wait()
        for helpers, got in rates.items():
            shown = ", ".join(f"{g:.2f}" for g in got)
            print(f"SET {size >> 10:>5} KiB  c={args.clients}  helpers={helpers}  GB/s: {shown}", flush=True)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]), lifetime=120.0)
        sys.exit(0)
    sys.exit(main())
