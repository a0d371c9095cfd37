"""Helpers for ``scripts/bench_server.py``: a fast raw RESP client, the loopback ceiling server, client workers.

Everything here is a *client* of kvd/redis-server (or of the ceiling server), so it can run in forked worker
processes. The raw client is written so that it is not the bottleneck for large values: a request is one
``sendmsg`` of [header, value, CRLF] (no join, no copy of the value), and a reply lands with ``recv_into`` in a
preallocated, pre-faulted buffer that is parsed in place (only the RESP header lines are looked at).

The ceiling server (``python scripts/bench_lib.py ceiling PORT``) moves the same bytes with the same
request/response pattern and no work at all: a "SET" is received with ``recv_into`` into one preallocated
buffer and answered ``+OK``, a "GET" is answered by ``sendall`` of a preallocated buffer. It is what a server
that does nothing but copy bytes between the socket and memory it already owns could reach on this machine.
It forks a process per connection, so with several clients it uses every core.

The one-thread ceiling (``python scripts/bench_lib.py ceiling-1t PORT``) answers the same requests from a
single thread that serves every connection from one ``epoll`` loop, as redis-server and kvd do. With several
clients it is the most a single-threaded server could move here; the gap between the two ceilings is what
only more threads or processes could win.

The store ceiling (``python scripts/bench_lib.py ceiling-store PORT``) is the forked ceiling with one change: its
memory is a store's. Each connection's SETs land in as many buffers, in rotation, as that client has keys in
the workload (``store_slots``: 64 MiB of them, as ``bench_server.plan``'s ``nset``), and its GETs are sent from
as many buffers as the workload reads (128 MiB of them, as ``nget``), where the other ceilings reuse one
buffer that stays in the core's caches. A server that keeps what it receives cannot do that: every SET of a
rotating key set writes memory that left the caches since it was last written. So the gap between the forked
ceiling and this one is what keeping the values costs on this machine, before any server code runs.
``ceiling-1t-store`` is the one-thread ceiling with the same memory: the most a single-threaded server that
keeps its values could move here.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

MiB = 1 << 20
KiB = 1 << 10
CRLF = b"\r\n"
_CEIL_HDR = struct.Struct("<cxxxxxxxQ")  # op (b"S" / b"G"), payload bytes


class RespError(Exception):
    pass


def encode(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def sendmsg_all(sock: socket.socket, parts: list[Any]) -> None:
    """Send every byte of ``parts`` (bytes/bytearray/memoryview) with scatter/gather, no joining."""
    total = 0
    for p in parts:
        total += len(p)
    sent = sock.sendmsg(parts)
    if sent == total:
        return
    views = [memoryview(p).cast("B") for p in parts]
    while sent < total:
        while sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        views[0] = views[0][sent:]
        total = sum(len(v) for v in views)
        sent = sock.sendmsg(views)


def make_value(size: int, seed: int = 0) -> bytes:
    block = bytes((i * 131 + seed * 7) & 0xFF for i in range(4096))
    return (block * (size // 4096 + 1))[:size]


class RawClient:
    """Blocking RESP client: one ``sendmsg`` per request, replies parsed in a preallocated buffer."""

    def __init__(self, port: int, cap: int = 1 * MiB, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(cap + 64 * KiB)  # zero-filled: pages are touched once, here, not in the timed loop
        self.mv = memoryview(self.buf)
        self.pos = 0
        self.end = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- replies ----------------------------------------------------------------------------------------------

    def _recv(self) -> None:
        if self.end == len(self.buf):
            if self.pos == 0:
                raise RespError("reply larger than the client buffer")
            rest = self.end - self.pos
            self.buf[:rest] = self.buf[self.pos : self.end]
            self.pos, self.end = 0, rest
        n = self.sock.recv_into(self.mv[self.end :])
        if not n:
            raise ConnectionError("server closed the connection")
        self.end += n

    def _line(self) -> tuple[int, int]:
        buf = self.buf
        while True:
            i = buf.find(CRLF, self.pos, self.end)
            if i >= 0:
                s = self.pos
                self.pos = i + 2
                return s, i
            self._recv()

    def read_reply(self) -> int:
        """One reply; returns payload bytes of bulks (summed over an array) or the integer of ``:n``."""
        if self.pos == self.end:
            self.pos = self.end = 0
        s, e = self._line()
        t = self.buf[s]
        if t == 36:  # $
            n = int(self.buf[s + 1 : e])
            if n < 0:
                return 0
            need = self.pos + n + 2
            if need > len(self.buf):
                rest = self.end - s
                self.buf[:rest] = self.buf[s : self.end]
                self.pos, self.end = self.pos - s, rest
                need = self.pos + n + 2
            while self.end < need:
                self._recv()
            self.pos = need
            return n
        if t == 42:  # *
            total = 0
            for _ in range(int(self.buf[s + 1 : e])):
                total += self.read_reply()
            return total
        if t == 58:  # :
            return int(self.buf[s + 1 : e])
        if t in (43, 95):  # + or RESP3 null
            return 0
        raise RespError(bytes(self.buf[s:e]).decode(errors="replace"))

    # -- requests ---------------------------------------------------------------------------------------------

    def call(self, *args: bytes) -> int:
        self.sock.sendall(encode(*args))
        return self.read_reply()

    def set(self, key: bytes, value: Any) -> int:
        sendmsg_all(self.sock, [b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value)), value, CRLF])
        return self.read_reply()

    def get(self, key: bytes) -> int:
        self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        return self.read_reply()

    def mget(self, keys: list[bytes]) -> int:
        self.sock.sendall(encode(b"MGET", *keys))
        return self.read_reply()

    def pipeline(self, payload: bytes, replies: int) -> int:
        self.sock.sendall(payload)
        total = 0
        for _ in range(replies):
            total += self.read_reply()
        return total

    # -- the ceiling protocol ----------------------------------------------------------------------------------

    def ceil_set(self, value: Any) -> int:
        sendmsg_all(self.sock, [_CEIL_HDR.pack(b"S", len(value)), value])
        return self.read_reply()

    def ceil_get(self, n: int) -> int:
        self.sock.sendall(_CEIL_HDR.pack(b"G", n))
        got = 0
        mv = self.mv
        sock = self.sock
        while got < n:
            r = sock.recv_into(mv[got:n])
            if not r:
                raise ConnectionError("ceiling server closed the connection")
            got += r
        return n


# -- the ceiling server ---------------------------------------------------------------------------------------


def store_slots(op: bytes, n: int) -> int:
    """How many distinct buffers the store ceiling rotates over for requests of ``n`` payload bytes: the number of
    keys one client of ``bench_server.py`` writes (SET: 64 MiB of values), or that the clients read (GET and MGET:
    128 MiB)."""
    n = max(n, 1)
    if op == b"S":
        return max(2, min(64, (64 * MiB) // n))
    return max(2, min(256, (128 * MiB) // n))


class _Rotation:
    """The store ceiling's memory: per payload size, ``store_slots`` pre-faulted buffers used in turn."""

    def __init__(self) -> None:
        self.rings: dict[tuple[bytes, int], tuple[list[memoryview], list[int]]] = {}

    def next(self, op: bytes, n: int) -> memoryview:
        ring = self.rings.get((op, n))
        if ring is None:
            bufs = [memoryview(bytearray(b"\x01") * n) for _ in range(store_slots(op, n))]  # written: faulted in
            ring = self.rings[(op, n)] = (bufs, [0])
        bufs, at = ring
        at[0] = (at[0] + 1) % len(bufs)
        return bufs[at[0]]


def _ceil_handle(conn: socket.socket, cap: int, store: bool = False) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rotation = _Rotation() if store else None
    buf = bytearray(cap if not store else 0)
    mv = memoryview(buf)
    hdr = bytearray(_CEIL_HDR.size)
    hmv = memoryview(hdr)
    try:
        while True:
            got = 0
            while got < len(hdr):
                r = conn.recv_into(hmv[got:])
                if not r:
                    return
                got += r
            op, n = _CEIL_HDR.unpack(hdr)
            if n > cap:
                return
            if rotation is not None:
                mv = rotation.next(op, n)
            if op == b"S":
                got = 0
                while got < n:
                    r = conn.recv_into(mv[got:n])
                    if not r:
                        return
                    got += r
                conn.sendall(b"+OK\r\n")
            else:
                conn.sendall(mv[:n])
    except OSError:
        pass
    finally:
        conn.close()


def ceiling_server(port: int, cap: int, lifetime: float, store: bool = False) -> None:
    """A process per connection (no GIL between connections); exits after ``lifetime`` seconds at most. ``store``:
    the store ceiling (rotating buffers, module docstring)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    srv.settimeout(0.5)
    deadline = time.monotonic() + lifetime
    children: set[int] = set()
    try:
        while time.monotonic() < deadline:
            for pid in list(children):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            pid = os.fork()
            if pid == 0:
                srv.close()
                conn.settimeout(None)
                try:
                    _ceil_handle(conn, cap, store)
                finally:
                    os._exit(0)
            children.add(pid)
            conn.close()
    finally:
        srv.close()
        for pid in children:
            try:
                os.kill(pid, 15)
                os.waitpid(pid, 0)
            except OSError:
                pass


class _CeilConn:
    """One connection of the one-thread ceiling: reading a header, reading a payload, or writing a reply."""

    __slots__ = ("dest", "got", "hdr", "need", "out", "rotation", "sock")

    def __init__(self, sock: socket.socket, store: bool) -> None:
        self.sock = sock
        self.rotation = _Rotation() if store else None
        self.dest: memoryview | None = None  # where the SET being received lands
        self.hdr = bytearray(_CEIL_HDR.size)
        self.got = 0
        self.need = -1  # payload bytes of the SET being received; -1: reading a header
        self.out: memoryview | None = None


def ceiling_one_thread_server(port: int, cap: int, lifetime: float, store: bool = False) -> None:
    """Every connection served by one thread (non-blocking sockets, one epoll loop); exits after ``lifetime``.
    ``store``: a store's memory, as the store ceiling's (module docstring)."""
    sel = selectors.DefaultSelector()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ, None)
    mv = memoryview(bytearray(cap))  # every SET lands here, every GET is sent from here
    ok = memoryview(b"+OK\r\n")
    deadline = time.monotonic() + lifetime

    def close(c: _CeilConn) -> None:
        sel.unregister(c.sock)
        c.sock.close()

    def send(c: _CeilConn) -> None:
        assert c.out is not None
        while c.out:
            try:
                c.out = c.out[c.sock.send(c.out) :]
            except BlockingIOError:
                sel.modify(c.sock, selectors.EVENT_WRITE, c)  # clients send nothing until the reply is in
                return
        c.out = None
        sel.modify(c.sock, selectors.EVENT_READ, c)

    def receive(c: _CeilConn) -> None:
        while True:
            if c.need < 0:
                r = c.sock.recv_into(memoryview(c.hdr)[c.got :])
                if not r:
                    return close(c)
                c.got += r
                if c.got < len(c.hdr):
                    continue
                op, n = _CEIL_HDR.unpack(c.hdr)
                c.got = 0
                if n > cap:
                    return close(c)
                buf = mv if c.rotation is None else c.rotation.next(op, n)
                if op == b"G":
                    c.out = buf[:n]
                    return send(c)
                c.need = n
                c.dest = buf
            assert c.dest is not None
            r = c.sock.recv_into(c.dest[c.got : c.need])
            if not r:
                return close(c)
            c.got += r
            if c.got == c.need:
                c.got, c.need, c.out = 0, -1, ok
                return send(c)

    try:
        while time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                c = key.data
                if c is None:
                    conn, _ = srv.accept()
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sel.register(conn, selectors.EVENT_READ, _CeilConn(conn, store))
                    continue
                try:
                    if c.out is not None:
                        send(c)
                    else:
                        receive(c)
                except BlockingIOError:
                    pass
                except OSError:
                    close(c)
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        sel.close()


# -- machine measurements -------------------------------------------------------------------------------------


def memcpy_gbps(size: int = 64 * MiB, seconds: float = 0.5) -> float:
    """libc memcpy (``ctypes.memmove``) between two pre-faulted buffers."""
    a = bytearray(size)
    b = bytearray(size)
    ca = (ctypes.c_char * size).from_buffer(a)
    cb = (ctypes.c_char * size).from_buffer(b)
    ctypes.memmove(cb, ca, size)
    n = 0
    t0 = time.perf_counter()
    while True:
        ctypes.memmove(cb, ca, size)
        n += 1
        el = time.perf_counter() - t0
        if el > seconds or n >= 1000:
            return n * size / el / 1e9


def alloc_gbps(size: int = 32 * MiB, seconds: float = 0.5, keep: int = 4) -> float:
    """``bytearray(size)`` (allocation + zero-fill + first touch) with ``keep`` live, like a SET stream."""
    live: list[bytearray] = []
    n = 0
    t0 = time.perf_counter()
    while True:
        live.append(bytearray(size))
        if len(live) > keep:
            live.pop(0)
        n += 1
        el = time.perf_counter() - t0
        if el > seconds or n >= 1000:
            return n * size / el / 1e9


# -- workers --------------------------------------------------------------------------------------------------


def _keys(prefix: bytes, n: int) -> list[bytes]:
    return [prefix + b":%d" % i for i in range(n)]


def _make_op(client: Any, spec: dict[str, Any], widx: int) -> tuple[Any, int]:
    """A zero-argument callable doing one operation, and the payload bytes it moves."""
    op = spec["op"]
    size = spec["size"]
    kind = spec["client"]
    if op == "SET":
        value = make_value(size, widx)
        keys = _keys(b"s:%d:%d" % (size, widx), spec["nset"])
        it = [0]

        if kind == "ceiling":
            return (lambda: client.ceil_set(value)), size

        def one_set() -> Any:
            i = it[0] = it[0] + 1
            return client.set(keys[i % len(keys)], value)

        return one_set, size
    if op == "GET":
        keys = _keys(b"g:%d" % size, spec["nget"])
        it = [widx * 7]
        if kind == "ceiling":
            return (lambda: client.ceil_get(size)), size

        def one_get() -> Any:
            i = it[0] = it[0] + 1
            return client.get(keys[i % len(keys)])

        return one_get, size
    if op == "MGET":
        k = spec["mget_n"]
        keys = _keys(b"g:%d" % size, spec["nget"])
        groups = [keys[i : i + k] for i in range(0, len(keys) - k + 1, k)] or [keys[:k]]
        it = [widx]
        if kind == "ceiling":
            return (lambda: client.ceil_get(size * k)), size * k
        if kind == "raw":

            def one_mget() -> Any:
                i = it[0] = it[0] + 1
                return client.mget(groups[i % len(groups)])

        else:

            def one_mget() -> Any:
                i = it[0] = it[0] + 1
                return client.mget(*groups[i % len(groups)])

        return one_mget, size * k
    if op == "PREFIXLEN":
        keys = _keys(b"pfx", spec["nkeys"])
        if kind == "raw":
            payload = encode(b"KVD.PREFIXLEN", *keys)
            return (lambda: client.pipeline(payload, 1)), 0
        return (lambda: client.execute_command("KVD.PREFIXLEN", *keys)), 0
    if op == "EXISTS-PIPE":
        keys = _keys(b"pfx", spec["nkeys"])
        if kind == "raw":
            payload = b"".join(encode(b"EXISTS", k) for k in keys)
            return (lambda: client.pipeline(payload, len(keys))), 0

        def one_exists() -> Any:
            p = client.pipeline(transaction=False)
            for k in keys:
                p.exists(k)
            return p.execute()

        return one_exists, 0
    raise ValueError(op)


def _timed_loop(fn: Any, nbytes: int, duration: float, max_ops: int, min_ops: int) -> dict[str, Any]:
    lat: list[int] = []
    clock = time.perf_counter_ns
    t0 = clock()
    stop = t0 + int(duration * 1e9)
    hard = t0 + int(max(duration * 4, duration + 5) * 1e9)  # min_ops may extend the run, but only this far
    n = 0
    while n < max_ops:
        a = clock()
        if (a >= stop and n >= min_ops) or a >= hard:
            break
        fn()
        lat.append(clock() - a)
        n += 1
    el = (clock() - t0) / 1e9
    return {"ops": n, "bytes": n * nbytes, "elapsed": el, "lat_ns": lat}


def sync_worker(spec: dict[str, Any], widx: int, barrier: Any, q: Any) -> None:
    """One client process: connect, warm up, wait for the others, run the timed loop, report."""
    client: Any = None
    try:
        if spec.get("cpus"):  # bench_ab.py --pin: clients on one core, servers on the other
            os.sched_setaffinity(0, spec["cpus"])
        kind = spec["client"]
        if kind in ("raw", "ceiling"):
            client = RawClient(spec["port"], cap=spec.get("cap", 1 * MiB))
        elif kind == "redispy":
            import redis

            client = redis.Redis(host="127.0.0.1", port=spec["port"], socket_timeout=120)
        else:
            raise ValueError(kind)
        fn, nbytes = _make_op(client, spec, widx)
        for _ in range(spec.get("warmup", 2)):
            fn()
        barrier.wait(timeout=120)
        res = _timed_loop(fn, nbytes, spec["duration"], spec["max_ops"], spec.get("min_ops", 3))
        res["warm"] = spec.get("warmup", 2)
        q.put(res)
    except BaseException as exc:  # report, never hang the parent
        try:
            barrier.abort()
        except Exception:
            pass
        q.put({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:
                pass


def async_worker(spec: dict[str, Any], widx: int, barrier: Any, q: Any) -> None:
    """redis-py asyncio: ``spec['tasks']`` connections driven by as many tasks on one event loop."""

    async def main() -> dict[str, Any]:
        import redis.asyncio as aredis

        ntasks = spec["tasks"]
        clients = [aredis.Redis(host="127.0.0.1", port=spec["port"], socket_timeout=120) for _ in range(ntasks)]
        size = spec["size"]
        op = spec["op"]
        try:
            k = spec.get("mget_n", 1)
            nbytes = size * k if op == "MGET" else size
            gkeys = _keys(b"g:%d" % size, spec["nget"])
            groups = [gkeys[i : i + k] for i in range(0, len(gkeys) - k + 1, k)] or [gkeys[:k]]

            def op_for(t: int) -> Any:
                if op == "SET":
                    value = make_value(size, t)
                    skeys = _keys(b"s:%d:a%d" % (size, t), spec["nset"])
                    return lambda i: clients[t].set(skeys[i % len(skeys)], value)
                if op == "GET":
                    return lambda i: clients[t].get(gkeys[(i + 7 * t) % len(gkeys)])
                return lambda i: clients[t].mget(*groups[(i + t) % len(groups)])

            ops = [op_for(t) for t in range(ntasks)]
            for t in range(ntasks):
                await ops[t](0)
            barrier.wait(timeout=120)
            duration, max_ops, min_ops = spec["duration"], spec["max_ops"], spec.get("min_ops", 3)
            lat: list[int] = []
            clock = time.perf_counter_ns
            t0 = clock()
            stop = t0 + int(duration * 1e9)
            hard = t0 + int(max(duration * 4, duration + 5) * 1e9)
            count = [0]

            async def runner(t: int) -> None:
                fn = ops[t]
                i = 0
                while count[0] < max_ops:
                    a = clock()
                    if (a >= stop and count[0] >= min_ops) or a >= hard:
                        return
                    await fn(i)
                    lat.append(clock() - a)
                    count[0] += 1
                    i += 1

            await asyncio.gather(*(runner(t) for t in range(ntasks)))
            el = (clock() - t0) / 1e9
            return {"ops": count[0], "bytes": count[0] * nbytes, "elapsed": el, "lat_ns": lat, "warm": ntasks}
        finally:
            for c in clients:
                await c.aclose()

    try:
        q.put(asyncio.run(main()))
    except BaseException as exc:
        try:
            barrier.abort()
        except Exception:
            pass
        q.put({"error": f"{type(exc).__name__}: {exc}"})


# -- kvd variants: proposed hot-path changes, applied as monkeypatches so they can be measured before adoption --

VARIANTS = {
    # Candidates measured and not adopted (docs/benchmarks.md, "Where the time goes"). Adopted ones (the CRLF-anchored
    # batch guard, 16 KiB receive window, one-copy moves, early return while a large value arrives, writelines
    # of replies) are part of kvd now and were removed from this list.
    "uninit": "values >= 32 KiB are received into an uninitialised bytearray (PyByteArray_FromStringAndSize(NULL, n))"
    " instead of bytearray(n), which zero-fills",
    "gc": "gc.freeze() after imports and gc.set_threshold(50_000, 20, 100)",
}


def run_kvd_variant(names: list[str], argv: list[str]) -> None:
    """``python scripts/bench_lib.py kvd-variant uninit,gc -- --port ...``: kvd with the named patches."""
    import gc

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import kvd.protocol.parser as parser

    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    if "uninit" in names:
        new = ctypes.pythonapi.PyByteArray_FromStringAndSize
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
        builtin = bytearray

        def alloc(*args: Any) -> bytearray:
            if len(args) == 1 and type(args[0]) is int and args[0] >= 32 * KiB:
                return new(None, args[0])
            return builtin(*args)

        parser.bytearray = alloc  # type: ignore[attr-defined]  (module global shadows the builtin)
    if "gc" in names:
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
    from kvd.cli import main

    sys.argv = ["kvd", *argv]
    sys.exit(main())


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "kvd-variant":
        rest = sys.argv[3:]
        run_kvd_variant([v for v in sys.argv[2].split(",") if v], rest[1:] if rest[:1] == ["--"] else rest)
    elif len(sys.argv) >= 3 and sys.argv[1] == "ceiling":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        ceiling_server(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 80 * MiB, 3600.0)
    elif len(sys.argv) >= 3 and sys.argv[1] == "ceiling-store":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        ceiling_server(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 80 * MiB, 3600.0, store=True)
    elif len(sys.argv) >= 3 and sys.argv[1] in ("ceiling-1t", "ceiling-1t-store"):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        cap = int(sys.argv[3]) if len(sys.argv) > 3 else 80 * MiB
        ceiling_one_thread_server(int(sys.argv[2]), cap, 3600.0, store=sys.argv[1].endswith("-store"))
    else:
        print(f"memcpy {memcpy_gbps():.1f} GB/s, bytearray(32 MiB) {alloc_gbps():.1f} GB/s (pid {os.getpid()})")
