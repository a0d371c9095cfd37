"""SETs that land whole run from the read callback (``Client._run_landed`` in kvd/connection.py), and behave as
any other SET: counted, queued inside MULTI, refused with OOM, held until the log has them.

A KV-cache client repeats ``SET <key> <value of one size>``; after two such requests the C receiver lands the
next one whole in a buffer of its own (kvd/protocol/landing.py), and the connection runs it past its queue and
dispatch. Every test first checks through ``INFO kvd`` ``landed_sets`` that the path under test was taken, so
none of them can pass by going the general way."""

from __future__ import annotations

import socket

import pytest
from support.raw import encode

from kvd.protocol.receive import Receiver

pytestmark = [
    pytest.mark.kvd_only,  # INFO kvd landed_sets
    pytest.mark.skipif(Receiver is None, reason="kvd/protocol/_receive.c is not built: nothing lands"),
]

SIZE = 256 * 1024


def value_for(i: int) -> bytes:
    return bytes([i % 251]) * SIZE


def _landed(srv) -> int:
    return int(srv.client().info("kvd")["landed_sets"])


def _reply(sock: socket.socket) -> bytes:
    """One reply line, or a whole array of simple replies (EXEC's)."""
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(1)
        assert chunk, "the server closed the connection"
        data += chunk
    if data.startswith(b"*"):
        return data + b"".join(_reply(sock) for _ in range(int(data[1:-2])))
    return data


@pytest.fixture
def raw_client(server_factory, monkeypatch):
    """A socket to a fresh kvd that takes the C receive path, and the server."""
    monkeypatch.delenv("KVD_RECEIVE", raising=False)
    srv = server_factory()
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    yield sock, srv
    sock.close()


def test_landed_sets_are_stored_and_counted_like_any_set(raw_client):
    sock, srv = raw_client
    sock.sendall(encode("CLIENT", "SETNAME", "lander"))
    assert _reply(sock) == b"+OK\r\n"
    for i in range(12):
        sock.sendall(encode("SET", f"chunk:{i:03d}", value_for(i)))
        assert _reply(sock) == b"+OK\r\n"
    landed = _landed(srv)
    assert landed >= 9, f"only {landed} of 12 SETs of one shape landed (two arm it)"
    r = srv.client()
    assert [r.get(f"chunk:{i:03d}") == value_for(i) for i in range(12)] == [True] * 12
    assert r.info("commandstats")["cmdstat_set"]["calls"] == 12
    assert [c["cmd"] for c in r.client_list() if c["name"] == "lander"] == ["set"]


def test_landed_sets_inside_multi_are_queued_until_exec(raw_client):
    sock, srv = raw_client
    for i in range(3):  # arm landing
        sock.sendall(encode("SET", f"chunk:{i:03d}", value_for(i)))
        assert _reply(sock) == b"+OK\r\n"
    before = _landed(srv)
    assert before >= 1
    sock.sendall(encode("MULTI"))
    assert _reply(sock) == b"+OK\r\n"
    # Six SETs of one shape: landing is armed for most of them (two SETs of a shape arm it).
    for i in range(3, 9):
        sock.sendall(encode("SET", f"chunk:{i:03d}", value_for(i + 100)))
        assert _reply(sock) == b"+QUEUED\r\n", f"SET {i - 2} in MULTI"
    r = srv.client()
    assert r.exists(*(f"chunk:{i:03d}" for i in range(3, 9))) == 0, "a queued SET ran before EXEC"
    sock.sendall(encode("EXEC"))
    assert _reply(sock) == b"*6\r\n" + b"+OK\r\n" * 6
    assert [r.get(f"chunk:{i:03d}") == value_for(i + 100) for i in range(3, 9)] == [True] * 6
    assert _landed(srv) == before, "a SET queued in MULTI ran from the read callback"
    for i in range(9, 12):  # after EXEC, landed SETs run at once again
        sock.sendall(encode("SET", f"chunk:{i:03d}", value_for(i)))
        assert _reply(sock) == b"+OK\r\n"
    assert _landed(srv) > before


def test_a_landed_set_refused_by_noeviction_gets_oom_and_the_connection_lives(server_factory, monkeypatch):
    monkeypatch.delenv("KVD_RECEIVE", raising=False)
    srv = server_factory(maxmemory="4mb", maxmemory_policy="noeviction")
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        replies = []
        for i in range(40):  # 10 MiB into a 4 MiB budget
            sock.sendall(encode("SET", f"chunk:{i:03d}", value_for(i)))
            replies.append(_reply(sock))
        assert _landed(srv) >= 1
        assert replies[0] == b"+OK\r\n"
        oom = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
        assert replies[-1] == oom
        assert set(replies) == {b"+OK\r\n", oom}
        stored = replies.count(b"+OK\r\n")
        r = srv.client()
        assert r.dbsize() == stored
        sock.sendall(encode("PING"))
        assert _reply(sock) == b"+PONG\r\n"
    finally:
        sock.close()


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_landed_sets_acknowledged_with_the_log_on_survive_kill9(server_factory, monkeypatch, fsync):
    """The reply of a landed SET is held until the log has its record, as for every write: kill -9 right after
    the last reply loses none of them (``always``: fsynced; ``everysec``: in the page cache, which a killed
    process does not take with it)."""
    monkeypatch.delenv("KVD_RECEIVE", raising=False)
    srv = server_factory(persistence=True, appendfsync=fsync)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        for i in range(16):
            sock.sendall(encode("SET", f"chunk:{i:03d}", value_for(i)))
            assert _reply(sock) == b"+OK\r\n"
        assert _landed(srv) >= 13
    finally:
        sock.close()
    srv.kill9()
    srv.restart()
    r = srv.client()
    assert r.dbsize() == 16
    assert [r.get(f"chunk:{i:03d}") == value_for(i) for i in range(16)] == [True] * 16


def test_redis_py_pipelined_sets_are_answered_in_order(server):
    """Landed requests followed by pipelined ones in the same read take the general path: every reply comes
    back, in order, and the values are the ones sent."""
    r = server.client()
    for i in range(3):
        r.set(f"chunk:{i:03d}", value_for(i))
    pipe = r.pipeline(transaction=False)
    for i in range(3, 20):
        pipe.set(f"chunk:{i:03d}", value_for(i))
        pipe.get(f"chunk:{i - 1:03d}")
    replies = pipe.execute()
    assert replies[0::2] == [True] * 17
    assert replies[1::2] == [value_for(i - 1) for i in range(3, 20)]


def test_a_protocol_error_after_a_landed_set_comes_after_its_reply(raw_client):
    """The bytes after a landed SET are malformed: the SET is stored and answered, then the error, then the
    connection closes, as after any request that precedes bad bytes. The key is shorter than the one that armed
    landing, so the bad bytes have room to arrive in the same read as the request."""
    sock, srv = raw_client
    for i in range(3):
        sock.sendall(encode("SET", f"chunk:{i:06d}", value_for(i)))
        assert _reply(sock) == b"+OK\r\n"
    before = _landed(srv)
    sock.sendall(encode("SET", "chunk:x", value_for(7)) + b"*1\r\n$abc\r\n")
    assert _reply(sock) == b"+OK\r\n"
    assert _reply(sock) == b"-ERR Protocol error: invalid bulk length\r\n"
    assert sock.recv(1) == b"", "the connection stays open after a protocol error"
    assert _landed(srv) == before + 1, "the SET did not land: this test did not take the path it checks"
    assert srv.client().get("chunk:x") == value_for(7)
