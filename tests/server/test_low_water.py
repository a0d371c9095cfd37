"""The receive low-water mark (``kvd/protocol/lowat.py``): a large value that arrives in pieces wakes kvd once
per 256 KiB while much of it is missing, and the mark never holds back anything that is not part of that
value: the next small request, a client that stops halfway, a client that closes. Every test runs on both receive paths
(``kvd/protocol/receive.py``): the C receiver, which also takes the reads in the middle of a value without
calling Python, and the Python callbacks with ``lowat.ReceiveLowWater``."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from support.raw import encode
from support.server import target

from kvd.protocol import lowat

PIECES = 6


@pytest.fixture(params=["c", "python"])
def receive_path(request, monkeypatch) -> str:
    monkeypatch.setenv("KVD_RECEIVE", request.param)
    return request.param


@pytest.fixture
def server(server_factory, receive_path):
    srv = server_factory()
    if target() == "kvd":
        assert srv.client().info("server")["receive_path"] == receive_path
    return srv


def value(n: int, tag: int = 0) -> bytes:
    return (bytes([tag]) + bytes(range(255))) * (n // 256) + bytes(n % 256)


def reads(r) -> int:
    return int(r.info("stats")["total_reads_processed"])


def send_in_pieces(conn, data: bytes, pieces: int, pause: float) -> None:
    """The request in ``pieces`` writes ``pause`` apart: without the mark the server wakes for every one."""
    step = -(-len(data) // pieces)
    for i in range(0, len(data), step):
        conn.send(data[i : i + step])
        time.sleep(pause)


@pytest.mark.kvd_only
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("size", [1024 * 1024, 3 * 1024 * 1024])
def test_a_value_sent_in_pieces_is_read_in_few_wakeups(server_factory, monkeypatch, receive_path, loop, size):
    monkeypatch.setenv("KVD_EVENT_LOOP", loop)
    srv = server_factory()
    r = srv.client()
    rounds = 4
    pieces = max(PIECES, size // (64 * 1024))  # 64 KiB pieces for the largest: 48 wake-ups without the mark
    with srv.raw() as conn:
        for _ in range(3):  # the kernel opens the receive window as data flows; until then it wakes kvd early
            conn.send(encode("SET", "warm-up", value(size)))
            assert conn.read_reply() == b"+OK\r\n"
        before = reads(r)
        for i in range(rounds):
            request = encode("SET", f"chunk:{i:04d}", value(size, i))
            send_in_pieces(conn, request, pieces, pause=0.1 / pieces)
            assert conn.read_reply() == b"+OK\r\n"
        per_set = (reads(r) - before - 1) / rounds  # less the INFO request of the second client
    for i in range(rounds):
        assert r.get(f"chunk:{i:04d}") == value(size, i)
    # The header's read, one read per CHUNK the mark waits for while MIN or more is missing, one per piece of the
    # last part (under MIN, read as it arrives), and a read the event loop makes on its own when a buffer fills.
    piece = -(-len(request) // pieces)
    limit = 2 + -(-(size - lowat.MIN) // lowat.CHUNK) + -(-lowat.MIN // piece)
    assert limit < pieces  # else this would not tell the mark from none
    assert per_set <= limit, f"{per_set} reads per SET of {size} bytes sent in {pieces} pieces"
    # Reads the C receiver took without Python are counted too: the header's and at least one for the rest.
    assert per_set >= 2, f"{per_set} reads per SET of {size} bytes sent in {pieces} pieces"


def test_a_small_request_right_after_a_large_value_is_answered(server):
    """The mark is back at 1 once the value is complete: a PING in the same write, and one sent later, must not
    wait for bytes that will never come."""
    size = 512 * 1024
    with server.raw(timeout=5.0) as conn:
        conn.send(encode("SET", "k", value(size))[:1000])
        time.sleep(0.05)  # the header is parsed and the mark set for the rest
        conn.send(encode("SET", "k", value(size))[1000:] + encode("PING"))
        assert conn.read_reply() == b"+OK\r\n"
        assert conn.read_reply() == b"+PONG\r\n"
        conn.send(encode("GET", "missing"))
        assert conn.read_reply() in (b"$-1\r\n", b"_\r\n")
        conn.send(encode("STRLEN", "k"))
        assert conn.read_reply() == b":%d\r\n" % size


def test_a_value_that_stalls_halfway_then_completes_is_stored(server):
    size = 800 * 1024
    request = encode("SET", "slow", value(size, 7))
    with server.raw(timeout=5.0) as conn:
        conn.send(request[: len(request) // 2])
        time.sleep(0.3)
        conn.send(request[len(request) // 2 :])
        assert conn.read_reply() == b"+OK\r\n"
    assert server.client().get("slow") == value(size, 7)


def test_a_client_that_closes_halfway_through_a_value_is_let_go(server):
    """The peer's FIN wakes the server whatever the mark: the connection is released, nothing is stored."""
    r = server.client()
    baseline = int(r.info("clients")["connected_clients"])
    conn = server.raw()
    conn.send(encode("SET", "half", value(2 * 1024 * 1024))[: 700 * 1024])
    deadline = time.monotonic() + 5
    while int(r.info("clients")["connected_clients"]) != baseline + 1:
        assert time.monotonic() < deadline, "the half-sent connection was never accepted"
        time.sleep(0.02)
    conn.close()
    deadline = time.monotonic() + 5
    while int(r.info("clients")["connected_clients"]) != baseline:
        assert time.monotonic() < deadline, "the half-sent connection was never noticed closing"
        time.sleep(0.02)
    assert r.exists("half") == 0


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.kvd_only
@pytest.mark.parametrize("how", ["close", "reset"])
def test_the_mark_costs_no_descriptor_once_a_connection_is_gone(server, receive_path, how):
    """The C receiver sets the mark on the connection's own descriptor. Python's is set through a duplicate
    (kvd/protocol/lowat.py): one more descriptor while a connection that sent a large value is open. Either
    way none is left once the connection has closed or been reset."""
    r = server.client()
    r.ping()
    baseline = open_descriptors(server.pid)
    conns = []
    for i in range(20):
        conn = server.raw()
        send_in_pieces(conn, encode("SET", f"big:{i}", value(2 * lowat.MIN, i)), 4, pause=0.005)
        assert conn.read_reply() == b"+OK\r\n"
        conns.append(conn)
    per_connection = 1 if receive_path == "c" else 2  # its own, and Python's duplicate
    assert open_descriptors(server.pid) == baseline + per_connection * len(conns)
    for conn in conns:
        if how == "reset":  # RST instead of FIN: the connection ends with an error, not an EOF
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    deadline = time.monotonic() + 5
    while open_descriptors(server.pid) != baseline:
        assert time.monotonic() < deadline, f"{open_descriptors(server.pid) - baseline} descriptors left behind"
        time.sleep(0.02)
    assert r.strlen("big:19") == 2 * lowat.MIN


@pytest.mark.kvd_only
def test_a_value_still_arriving_keeps_its_client_from_timing_out(server_factory, receive_path):
    """``timeout 1``: a client whose 3 MiB value trickles in over 3 s is busy, not idle, though the C receiver
    takes those reads without telling Python until the value is complete (Client.idle asks it)."""
    srv = server_factory("--timeout", "1")
    size = 3 * 1024 * 1024
    with srv.raw(timeout=10.0) as conn:
        send_in_pieces(conn, encode("SET", "trickle", value(size, 3)), 24, pause=0.125)
        assert conn.read_reply() == b"+OK\r\n"
    assert srv.client().get("trickle") == value(size, 3)


@pytest.mark.kvd_only
def test_closed_connections_are_freed(server, receive_path):
    """A connection's objects go with it. The C receiver calls back into its connection, and kvd's collector
    never looks again at objects that lived through a young collection (kvd/memory.py), so a reference cycle
    between the two would keep every long-lived connection's 256 KiB receive buffer after it closed. Each round
    opens 100 connections, lets the collector freeze them, and closes them: freed, the second round reuses the
    first one's memory (kvd keeps freed heap for reuse, so RSS does not fall); leaked, it grows by 25 MiB."""
    r = server.client()
    fillers = [(f"filler:{i}", b"x" * 16) for i in range(20000)]

    def round_trip() -> None:
        conns = [server.raw() for _ in range(100)]
        try:
            for i, conn in enumerate(conns):
                conn.send(encode("SET", f"c:{i % 4}", value(300 * 1024, i % 256)))
                assert conn.read_reply() == b"+OK\r\n"
            pipe = r.pipeline(transaction=False)
            for key, small in fillers:  # allocations enough for several young collections, which freeze
                pipe.set(key, small)
            pipe.execute()
        finally:
            for conn in conns:
                conn.close()
        deadline = time.monotonic() + 5
        while int(r.info("clients")["connected_clients"]) > 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)

    round_trip()
    before = server.rss_bytes()
    round_trip()
    grown = server.rss_bytes() - before
    assert grown < 12 * 1024 * 1024, f"RSS grew by {grown >> 20} MiB over a second round of 100 connections"
