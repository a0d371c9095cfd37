"""Replies written together at the end of an event-loop iteration (``ReplyBatch`` in kvd/connection.py).

Batching switches itself on only when one iteration serves several clients, so every test here keeps dozens
of connections busy at once, as redis-benchmark ``-c 50`` does, and checks what each client gets back."""

from __future__ import annotations

import socket

import pytest
from support.raw import encode

pytestmark = pytest.mark.kvd_only  # INFO kvd batched_replies

CLIENTS = 40
ROUNDS = 60


def _batched(srv) -> int:
    return int(srv.client().info("kvd")["batched_replies"])


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_many_clients_get_their_own_replies_in_order(server_factory, monkeypatch, loop):
    monkeypatch.setenv("KVD_EVENT_LOOP", loop)
    srv = server_factory()
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(CLIENTS)]
    try:
        for rnd in range(1, ROUNDS + 1):
            for i, s in enumerate(socks):  # every client's request before any reply is read
                s.sendall(encode("INCR", f"counter:{i}") + encode("ECHO", f"{i}:{rnd}"))
            for i, s in enumerate(socks):
                expected = b":%d\r\n$%d\r\n%s\r\n" % (rnd, len(f"{i}:{rnd}"), f"{i}:{rnd}".encode())
                assert _read_exactly(s, len(expected)) == expected, f"client {i}, round {rnd}"
    finally:
        for s in socks:
            s.close()
    r = srv.client()
    assert [int(r.get(f"counter:{i}")) for i in range(CLIENTS)] == [ROUNDS] * CLIENTS
    assert _batched(srv) > 0, "40 clients sending at once never shared a loop iteration's write"


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_client_that_half_closes_still_gets_its_reply(server_factory, monkeypatch, loop):
    """A request and the client's FIN arrive back to back while replies are being batched: the connection
    closes after the replies, and a reply held for the end of an iteration is written before the close."""
    monkeypatch.setenv("KVD_EVENT_LOOP", loop)
    srv = server_factory()
    busy = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(CLIENTS)]
    try:
        for rnd in range(ROUNDS // 4):
            closing = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(8)]
            for s in busy:  # keep the server's iterations crowded, so replies are being batched
                s.sendall(encode("PING"))
            for i, s in enumerate(closing):
                s.sendall(encode("SET", f"k:{rnd}:{i}", "v") + encode("GET", f"k:{rnd}:{i}"))
                s.shutdown(socket.SHUT_WR)
            for s in busy:
                assert _read_exactly(s, 7) == b"+PONG\r\n"
            for i, s in enumerate(closing):
                assert _read_exactly(s, 64) == b"+OK\r\n$1\r\nv\r\n", f"round {rnd}, client {i}"
                s.close()
    finally:
        for s in busy:
            s.close()
