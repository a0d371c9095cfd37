"""MONITOR: what a monitoring client sees, line for line as redis-server shows it (KVD_TEST_TARGET=redis runs
the same checks against it; only the cut of long values is kvd's own)."""

from __future__ import annotations

import re

import pytest
from support.raw import RawConnection

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

LINE = re.compile(rb"\+(\d+)\.(\d{6}) \[0 127\.0\.0\.1:(\d+)\] (.*)\r\n")


def monitor(server) -> RawConnection:
    conn = server.raw()
    assert conn.command("MONITOR") == b"+OK\r\n"
    return conn


def shown(conn: RawConnection, n: int, port: int) -> list[bytes]:
    """The next ``n`` lines, checked for Redis's prefix and the sender's address."""
    out = []
    for reply in conn.read_replies(n):
        m = LINE.fullmatch(reply)
        assert m, reply
        assert int(m[3]) == port
        out.append(m[4])
    return out


def test_commands_appear_as_redis_shows_them(server):
    watcher = monitor(server)
    with server.raw() as c:
        port = c.sock.getsockname()[1]
        for request in (
            ["SET", "a", 'x\ny\x01"q\\'],
            ["GET", "a"],
            ["AUTH", "pw"],  # refused (no password set), yet shown: it ran
            ["HELLO", "3", "AUTH", "default", "pw"],
            ["CONFIG", "GET", "maxmemory"],  # administrative: not shown
            ["CLIENT", "LIST"],  # administrative: not shown
            ["FOO", "bar"],  # unknown: refused before it ran, not shown
            ["GET"],  # wrong count: not shown
            ["MULTI"],
            ["SET", "b", "1"],
            ["INCR", "b"],
            ["EXEC"],
            ["CLIENT", "SETNAME", "n"],
            ["ECHO", "123"],
        ):
            c.command(*request)
        assert shown(watcher, 10, port) == [
            b'"SET" "a" "x\\ny\\x01\\"q\\\\"',
            b'"GET" "a"',
            b'"AUTH" "(redacted)"',
            b'"HELLO" "3" "AUTH" "(redacted)" "(redacted)"',
            b'"MULTI"',
            b'"SET" "b" "1"',  # the queued commands appear when EXEC runs them, EXEC last
            b'"INCR" "b"',
            b'"EXEC"',
            b'"CLIENT" "SETNAME" "n"',
            b'"ECHO" "123"',
        ]
    watcher.close()


def test_a_monitor_sees_its_own_commands_and_may_not_touch_keys(server):
    with monitor(server) as watcher:
        port = watcher.sock.getsockname()[1]
        watcher.send_command("MONITOR")  # a second MONITOR gets no reply at all, as in Redis
        assert watcher.command("PING") == b"+PONG\r\n"  # the reply, then its own line
        assert shown(watcher, 1, port) == [b'"PING"']
        for request in (["SET", "k", "v"], ["GET", "k"]):  # refused, so not shown
            assert watcher.command(*request) == b"-ERR Replica can't interact with the keyspace\r\n"
        with server.raw() as c:
            assert c.command("GET", "k") == b"$-1\r\n"
            assert shown(watcher, 1, c.sock.getsockname()[1]) == [b'"GET" "k"']
            assert watcher.command("RESET") == b"+RESET\r\n"  # no longer a monitor
            assert c.command("PING") == b"+PONG\r\n"
            assert watcher.command("GET", "k") == b"$-1\r\n"  # the first thing it reads is this reply


def test_monitor_inside_a_transaction_is_refused_at_exec(server):
    with server.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("MONITOR") == b"+QUEUED\r\n"
        assert c.command("EXEC") == b"*1\r\n-ERR MONITOR isn't allowed for DENY BLOCKING client\r\n"
        assert c.command("PING") == b"+PONG\r\n"  # not a monitor


def test_an_exec_refused_before_it_runs_is_shown(server_factory):
    """Redis's execCommandAbort shows the EXEC that processCommand refused (here for memory: its queue holds a
    SET and memory went over maxmemory meanwhile; then for its argument count), so that a monitor that saw the
    MULTI sees the transaction end; the queued commands never ran and are not shown. kvd showed nothing."""
    srv = server_factory(maxmemory="64mb", maxmemory_policy="noeviction")
    r = srv.client()
    r.set("filler", b"f" * (1 << 20))
    half = r.info("memory")["used_memory"] // 2
    with monitor(srv) as watcher, srv.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("SET", "k", "v") == b"+QUEUED\r\n"
        r.config_set("maxmemory", half)  # administrative: not shown
        assert c.command("EXEC").startswith(b"-EXECABORT Transaction discarded because of: OOM ")
        assert c.command("EXEC", "x").startswith(b"-EXECABORT Transaction discarded because of: wrong number")
        assert c.command("PING") == b"+PONG\r\n"
        assert shown(watcher, 4, c.sock.getsockname()[1]) == [b'"MULTI"', b'"EXEC"', b'"EXEC" "x"', b'"PING"']


@pytest.mark.kvd_only  # Redis quotes every byte of every argument
def test_long_arguments_are_cut(server):
    with monitor(server) as watcher, server.raw() as c:
        assert c.command("SET", "big", b"z" * 1000) == b"+OK\r\n"
        assert shown(watcher, 1, c.sock.getsockname()[1]) == [b'"SET" "big" "' + b"z" * 256 + b'... (744 more bytes)"']


@pytest.mark.kvd_only  # the disk tier
def test_exec_shows_last_when_a_command_waited_for_the_disk(server_factory):
    srv = server_factory(persistence=True, maxmemory="4mb")
    r = srv.client()
    r.set("cold", b"c" * 10)
    r.mset({f"fill{i}": b"f" * (1 << 20) for i in range(8)})  # "cold" is demoted: its GET reads the disk
    hits = r.info("kvd")["disk_hits"]
    with monitor(srv) as watcher, srv.raw() as c:
        for request in (["MULTI"], ["GET", "cold"], ["PING"]):
            c.command(*request)
        assert c.command("EXEC") == b"*2\r\n$10\r\n" + b"c" * 10 + b"\r\n+PONG\r\n"
        lines = shown(watcher, 4, c.sock.getsockname()[1])
    assert r.info("kvd")["disk_hits"] > hits
    assert lines == [b'"MULTI"', b'"GET" "cold"', b'"PING"', b'"EXEC"']
