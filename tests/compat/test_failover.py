"""FAILOVER on the server under test as the primary: the role goes to a replica (a real redis-server, or another
server like the one under test) without losing a write, writes held meanwhile are refused once it is a replica,
and a replica that never catches up, FAILOVER ABORT or an unreachable target leave it the primary, the held writes
released.

The tests without ``kvd_only`` pass with redis-server as the primary too (``KVD_TEST_TARGET=redis``)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_replication import follow, same, synced, until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def failed_over(primary, new_primary) -> bool:
    info = primary.info("replication")
    return (
        info["role"] == "slave"
        and info["master_link_status"] == "up"
        and info["master_failover_state"] == "no-failover"
        and new_primary.info("replication")["role"] == "master"
    )


def test_failover_hands_the_role_to_a_redis_replica(server, redis_server):
    p, r = synced(server, redis_server)
    try:
        with server.raw() as raw:
            assert raw.command("FAILOVER") == b"+OK\r\n"
            raw.send_command("SET", "during", "1")  # held until the role is handed over, then refused
            assert raw.read_reply() == b"-READONLY You can't write against a read only replica.\r\n"
        until(lambda: failed_over(p, r), "the failover did not finish")
        assert r.get("during") is None
        assert r.info("replication")["master_failover_state"] == "no-failover"
        assert r.info("stats")["sync_partial_ok"] >= 1  # the old primary continued its own history: no snapshot
        r.set("after", "1")
        until(lambda: p.get("after") == b"1", "the new primary's write did not reach the old one")
        assert set(p.keys("*")) == set(r.keys("*"))
    finally:
        p.replicaof("NO", "ONE")


def test_failover_to_a_named_replica_of_the_same_kind(server, server_factory):
    """TO host port: the replica named, a server like the one under test; the old primary continues its own
    history from the new one (a partial resynchronisation), which kept it as its second."""
    p = server.client()
    p.mset({f"k{i}": f"v{i}" for i in range(500)})
    other = server_factory()
    follow(other, server)
    r = other.client()
    same(p, r)
    try:
        assert p.execute_command("FAILOVER", "TO", "127.0.0.1", other.port, "TIMEOUT", 20_000) == b"OK"
        until(lambda: failed_over(p, r), "the failover did not finish")
        assert (r.info("stats")["sync_partial_ok"], r.info("stats")["sync_full"]) == (1, 0)
        r.set("after", "1")
        until(lambda: p.get("after") == b"1", "the new primary's write did not reach the old one")
        assert p.dbsize() == 501 and p.get("k499") == b"v499"
    finally:
        p.replicaof("NO", "ONE")


def test_failover_errors_as_redis_s(server, redis_server):
    p = server.client()
    follow(redis_server, server)
    with server.raw() as raw:
        assert raw.command("FAILOVER", "TO", "127.0.0.1", "1") == (
            b"-ERR FAILOVER target HOST and PORT is not a replica.\r\n"
        )
        assert raw.command("FAILOVER", "FORCE") == (
            b"-ERR FAILOVER with force option requires both a timeout and target HOST and IP.\r\n"
        )
        assert raw.command("FAILOVER", "ABORT") == b"-ERR No failover in progress.\r\n"
    assert p.info("replication")["role"] == "master"


def test_a_replica_that_never_catches_up_times_the_failover_out(server, redis_server):
    """The replica is stopped (SIGSTOP): it acknowledges nothing, so after TIMEOUT the failover is aborted and
    the writes held meanwhile run on the primary, which it still is. FAILOVER and REPLICAOF are refused while it
    waits; INFO shows the step."""
    p = server.client()
    follow(redis_server, server)
    p.set("before", "1")
    same(p, redis_server.client())
    os.kill(redis_server.pid, signal.SIGSTOP)
    try:
        with server.raw() as raw, server.raw() as other:
            p.set("unacknowledged", "1")  # the replica never acknowledges this one
            assert raw.command("FAILOVER", "TIMEOUT", "1500") == b"+OK\r\n"
            assert p.info("replication")["master_failover_state"] == "waiting-for-sync"
            assert other.command("FAILOVER") == b"-ERR FAILOVER already in progress.\r\n"
            assert other.command("REPLICAOF", "NO", "ONE") == b"-ERR REPLICAOF not allowed while failing over.\r\n"
            assert other.command("GET", "before") == b"$1\r\n1\r\n"  # reads are not held
            started = time.monotonic()
            assert raw.command("SET", "held", "1") == b"+OK\r\n"  # held until the abort, then run here
            assert time.monotonic() - started > 0.5
        info = p.info("replication")
        assert info["role"] == "master" and info["master_failover_state"] == "no-failover"
        assert p.get("held") == b"1"
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)


@contextlib.contextmanager
def failover_holding_a_write(server, redis_server) -> Iterator[tuple[Any, Any, Any]]:
    """A FAILOVER waiting for its replica, which is stopped, and a SET it holds: yields the primary's client,
    the raw connection whose SET is held and another raw connection. The replica goes on at the end."""
    p = server.client()
    follow(redis_server, server)
    os.kill(redis_server.pid, signal.SIGSTOP)
    try:
        with server.raw() as raw, server.raw() as other:
            p.set("unacknowledged", "1")  # a write the stopped replica never acknowledges
            assert raw.command("FAILOVER") == b"+OK\r\n"
            raw.send_command("SET", "held", "1")
            time.sleep(0.3)
            yield p, raw, other
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)


def test_failover_abort_releases_the_held_writes(server, redis_server):
    with failover_holding_a_write(server, redis_server) as (p, raw, other):
        assert other.command("CLIENT", "UNPAUSE") == b"+OK\r\n"  # a CLIENT PAUSE's end; not the failover's
        assert other.command("EXISTS", "held") == b":0\r\n"
        assert other.command("FAILOVER", "ABORT") == b"+OK\r\n"
        assert raw.read_reply() == b"+OK\r\n"
        assert p.info("replication")["master_failover_state"] == "no-failover"
        assert p.get("held") == b"1"


@pytest.mark.kvd_only  # what Redis does with a target that never answers is to keep waiting for it
def test_a_target_that_does_not_answer_leaves_the_server_the_primary(server, redis_server):
    """FORCE after the timeout hands over to a replica that is stopped: its PSYNC gets no answer within
    repl-timeout, so the failover is aborted and this server is the primary again, writes released."""
    p = server.client()
    p.config_set("repl-timeout", 1)
    follow(redis_server, server)
    replid = p.info("replication")["master_replid"]
    os.kill(redis_server.pid, signal.SIGSTOP)
    try:
        with server.raw() as raw:
            p.set("unacknowledged", "1")
            target = ("127.0.0.1", str(redis_server.port))
            assert raw.command("FAILOVER", "TO", *target, "TIMEOUT", "300", "FORCE") == b"+OK\r\n"
            until(lambda: p.info("replication")["master_failover_state"] == "failover-in-progress", "no hand-over")
            assert raw.command("SET", "held", "1") == b"+OK\r\n"  # after the abort
        info = p.info("replication")
        assert info["role"] == "master" and info["master_failover_state"] == "no-failover"
        assert p.get("held") == b"1" and p.get("unacknowledged") == b"1"
        assert "aborted" in server.stderr_text()
        assert info["master_replid"] == replid  # its own history goes on: nothing came from the target
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)
    same(p, redis_server.client())  # the replica, still attached, gets what it missed


@pytest.mark.kvd_only  # kvd aborts a failover when it shuts down, so the writes it held get their answers
def test_shutdown_during_a_failover_answers_the_held_writes(server, redis_server):
    with failover_holding_a_write(server, redis_server) as (_, raw, other):
        assert other.command("EXISTS", "held") == b":0\r\n"  # held, not run
        other.send_command("SHUTDOWN", "NOSAVE")
        assert raw.read_reply() == b"+OK\r\n"  # answered before the connection closed
        assert server.proc.wait(30) == 0
        assert "aborted: the server is shutting down" in server.stderr_text()
