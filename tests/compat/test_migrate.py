"""MIGRATE from the server under test to a real redis-server (and to another kvd): keys, deadlines, COPY, REPLACE,
KEYS, AUTH and AUTH2, SELECT, the target's errors, connections refused, silent targets, cached connections the
target closed, values that live on disk, and the DEL a replica receives.

Without ``kvd_only`` these pass with redis-server as the source too (``KVD_TEST_TARGET=redis``), which is how the
expected replies were checked."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis
from support.replication import follow
from support.server import ServerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

MiB = 1 << 20


@pytest.fixture
def target(redis_server: ServerProcess) -> ServerProcess:
    return redis_server


@contextmanager
def fake_target(behave: Callable[[socket.socket], None]) -> Iterator[int]:
    """A target that is no server: a listener whose first connection ``behave`` handles on a thread (silent,
    slow, babbling). Yields its port; the thread is given 10 s to finish afterwards."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                behave(conn)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield listener.getsockname()[1]
        thread.join(10)


def migrate(r: redis.Redis, to: ServerProcess, *args: object) -> object:
    return r.execute_command("MIGRATE", to.host, to.port, *args)


def error_of(r: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def test_a_key_moves_with_its_deadline(server, target):
    src, dst = server.client(), target.client()
    src.set("plain", "v1")
    src.set("expiring", os.urandom(3 * MiB), ex=500)
    value = src.get("expiring")
    assert migrate(src, target, "plain", 0, 1000) == b"OK"
    assert migrate(src, target, "expiring", 0, 1000) == b"OK"
    assert src.exists("plain", "expiring") == 0
    assert dst.get("plain") == b"v1" and dst.get("expiring") == value
    assert 490 <= dst.ttl("expiring") <= 500 and dst.ttl("plain") == -1


def test_keys_copy_replace_and_nokey(server, target):
    src, dst = server.client(), target.client()
    src.mset({"a": "1", "b": "2", "c": "3"})
    assert migrate(src, target, "", 0, 1000, "KEYS", "a", "missing", "b") == b"OK"
    assert dst.mget("a", "b") == [b"1", b"2"] and src.exists("a", "b") == 0
    assert migrate(src, target, "", 0, 1000, "KEYS", "missing", "gone") == b"NOKEY"
    assert migrate(src, target, "missing", 0, 1000) == b"NOKEY"
    assert migrate(src, target, "c", 0, 1000, "COPY") == b"OK"
    assert src.get("c") == b"3" and dst.get("c") == b"3"
    src.set("c", "new")
    assert error_of(src, "MIGRATE", target.host, target.port, "c", 0, 1000) == (
        "Target instance replied with error: BUSYKEY Target key name already exists."
    )
    assert src.get("c") == b"new"  # refused by the target: kept
    assert migrate(src, target, "c", 0, 1000, "REPLACE") == b"OK"
    assert dst.get("c") == b"new" and not src.exists("c")


def test_one_refused_key_keeps_only_itself(server, target):
    """The target refuses one RESTORE of three: the two it took leave the source, the refused one stays, and
    the reply is the target's error."""
    src, dst = server.client(), target.client()
    src.mset({"k1": "a", "k2": "b", "k3": "c"})
    dst.set("k2", "already there")
    reply = error_of(src, "MIGRATE", target.host, target.port, "", 0, 1000, "KEYS", "k1", "k2", "k3")
    assert reply.startswith("Target instance replied with error: BUSYKEY")
    assert src.keys("k*") == [b"k2"]
    assert dst.mget("k1", "k2", "k3") == [b"a", b"already there", b"c"]


def test_the_destination_database_is_selected(server, target):
    src, dst = server.client(), target.client()
    src.mset({"x": "1", "y": "2", "z": "3"})
    assert migrate(src, target, "x", 3, 1000) == b"OK"
    assert migrate(src, target, "y", 3, 1000) == b"OK"  # the cached connection is on 3 already
    assert migrate(src, target, "z", 0, 1000) == b"OK"
    assert dst.get("z") == b"3" and dst.get("x") is None
    dst.execute_command("SELECT", 3)
    assert dst.mget("x", "y") == [b"1", b"2"]
    src.set("w", "4")
    reply = error_of(src, "MIGRATE", target.host, target.port, "w", 99, 1000)
    assert reply == "Target instance replied with error: ERR DB index is out of range"
    assert src.get("w") == b"4"


def test_auth_and_auth2(server, tmp_path):
    guarded = ServerProcess(tmp_path / "guarded", kind="redis", requirepass="s3cret")
    guarded.start()
    try:
        src = server.client()
        src.mset({"one": "1", "two": "2", "three": "3"})
        assert migrate(src, guarded, "one", 0, 1000, "AUTH", "s3cret") == b"OK"
        assert migrate(src, guarded, "two", 0, 1000, "AUTH2", "default", "s3cret") == b"OK"
        reply = error_of(src, "MIGRATE", guarded.host, guarded.port, "three", 0, 1000, "AUTH", "wrong")
        assert reply.startswith("Target instance replied with error: WRONGPASS")
        assert src.get("three") == b"3"
        assert guarded.client().mget("one", "two") == [b"1", b"2"]
        slowlog_and_monitor_hide(src, guarded)
    finally:
        guarded.stop()


def slowlog_and_monitor_hide(src: redis.Redis, guarded: ServerProcess) -> None:
    """The password is redacted wherever the server shows the request back."""
    src.config_set("slowlog-log-slower-than", 0)
    src.set("four", "4")
    with src.monitor() as m:
        src.execute_command("MIGRATE", guarded.host, guarded.port, "four", 0, 1000, "AUTH2", "default", "s3cret")
        seen = next(e for e in m.listen() if "MIGRATE" in e["command"].upper())
    assert "s3cret" not in seen["command"] and "(redacted)" in seen["command"]
    logged = [e for e in src.slowlog_get(20) if b"MIGRATE" in e["command"].upper()]
    assert logged and all(b"s3cret" not in e["command"] for e in logged)
    src.config_set("slowlog-log-slower-than", 10000)


def test_a_target_that_is_not_there(server):
    """A refused connection is reported as a failed write (Redis connects without blocking, and its first
    write finds the refusal); a host that cannot be resolved as a failed connection."""
    src = server.client()
    src.set("k", "v")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: the connection is refused
        reply = error_of(src, "MIGRATE", "127.0.0.1", port, "k", 0, 500)
    assert reply == "IOERR error or timeout writing to target instance"
    reply = error_of(src, "MIGRATE", "no-such-host.invalid", 6379, "k", 0, 500)
    assert reply == "IOERR error or timeout connecting to the client"
    assert src.get("k") == b"v"


def test_a_target_that_never_answers_times_out_and_keeps_the_key(server):
    """Connected, written to, silent: after the timeout the key is still here, and so is the server."""
    src = server.client()
    src.set("k", "v")
    with fake_target(lambda conn: time.sleep(1)) as port:
        started = time.monotonic()
        reply = error_of(src, "MIGRATE", "127.0.0.1", port, "k", 0, 300)
        took = time.monotonic() - started
    assert reply == "IOERR error or timeout reading to target instance"
    assert 0.25 < took < 5
    assert src.get("k") == b"v" and src.ping()


def test_a_cached_connection_the_target_closed_is_opened_again(server, target):
    src, dst = server.client(), target.client()
    src.mset({"first": "1", "second": "2"})
    assert migrate(src, target, "first", 0, 1000) == b"OK"
    dst.client_kill_filter(_type="normal", skipme=True)  # the source's cached connection goes
    assert migrate(src, target, "second", 0, 1000) == b"OK"
    assert dst.get("second") == b"2"


def test_info_counts_the_cached_connections(server, target, server_factory):
    """INFO stats ``migrate_cached_sockets``: one per target MIGRATE reached (kvd showed 0 whatever it held)."""
    src = server.client()
    assert src.info("stats")["migrate_cached_sockets"] == 0
    src.mset({"a": "1", "b": "2", "c": "3"})
    assert migrate(src, target, "a", 0, 1000) == b"OK"
    assert migrate(src, target, "b", 0, 1000) == b"OK"  # the same connection
    assert src.info("stats")["migrate_cached_sockets"] == 1
    other = server_factory()
    assert migrate(src, other, "c", 0, 1000) == b"OK"
    assert src.info("stats")["migrate_cached_sockets"] == 2


def test_arguments_are_checked_first(server, target):
    src = server.client()
    src.set("k", "v")
    host, port = target.host, target.port
    assert error_of(src, "MIGRATE", host, port, "k", 0, 1000, "KEYS", "k") == (
        "When using MIGRATE KEYS option, the key argument must be set to the empty string"
    )
    assert error_of(src, "MIGRATE", host, port, "k", 0, 1000, "FOO") == "syntax error"
    assert error_of(src, "MIGRATE", host, port, "k", 0, 1000, "AUTH") == "syntax error"
    assert error_of(src, "MIGRATE", host, port, "k", 0, 1000, "AUTH2", "user") == "syntax error"
    assert error_of(src, "MIGRATE", host, port, "k", 0, "x") == "value is not an integer or out of range"
    assert error_of(src, "MIGRATE", host, port, "k", "x", 1000) == "value is not an integer or out of range"
    assert src.command_getkeys("MIGRATE", host, port, "", 0, 1000, "KEYS", "a", "b") == ["a", "b"]
    assert src.command_getkeys("MIGRATE", host, port, "k", 0, 1000) == ["k"]
    assert src.get("k") == b"v"


def test_a_replica_of_the_source_sees_the_keys_deleted(server, redis_server, tmp_path):
    replica = ServerProcess(tmp_path / "replica", kind="redis")
    replica.start()
    try:
        follow(replica, server)
        src = server.client()
        src.mset({"m1": "1", "m2": "2", "kept": "3"})
        assert migrate(src, redis_server, "", 0, 1000, "KEYS", "m1", "m2") == b"OK"
        assert src.execute_command("WAIT", 1, 10_000) == 1
        assert replica.client().keys("*") == [b"kept"]
    finally:
        replica.stop()


@pytest.mark.kvd_only  # kvd to kvd, values that live on disk
def test_kvd_to_kvd_with_values_on_disk(server_factory):
    src_srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    dst_srv = server_factory()
    src = src_srv.client()
    values = {f"chunk{i}": os.urandom(MiB) for i in range(8)}  # 8 MiB against 4: most live on disk only
    src.mset(values)
    hits = src.info("kvd")["disk_hits"]
    assert migrate(src, dst_srv, "", 0, 5000, "KEYS", *values) == b"OK"
    assert src.info("kvd")["disk_hits"] > hits
    assert src.dbsize() == 0
    dst = dst_srv.client()
    assert dst.mget(list(values)) == list(values.values())
    src_srv.kill9()  # the deletes were logged: nothing comes back
    src_srv.restart()
    assert src_srv.client().dbsize() == 0


def test_only_the_keys_move_never_the_arguments(server, target):
    """Keys named like MIGRATE's other arguments (the db, the timeout, an option, the password) stay where they
    are; with KEYS, a password spelled ``keys`` is still a password."""
    src, dst = server.client(), target.client()
    bystanders = {"0": "zero", "1000": "thousand", "COPY": "c", "AUTH2": "a", "default": "d", "keys": "k"}
    src.mset({**bystanders, "k": "v"})
    assert migrate(src, target, "missing", 0, 1000) == b"NOKEY"
    assert migrate(src, target, "k", 0, 1000, "COPY") == b"OK"
    assert dst.keys("*") == [b"k"]
    assert src.mget(list(bystanders)) == [v.encode() for v in bystanders.values()]
    host, port = target.host, target.port
    assert src.command_getkeys("MIGRATE", host, port, "k", 0, 0, "AUTH", "keys") == ["k"]
    assert src.command_getkeys("MIGRATE", host, port, "", 0, 0, "AUTH2", "keys", "pw", "KEYS", "a") == ["a"]


def test_the_port_is_read_as_atoi_reads_it(server, target):
    src, dst = server.client(), target.client()
    src.mset({"p1": "1", "p2": "2"})
    assert src.execute_command("MIGRATE", target.host, f"{target.port}abc", "p1", 0, 1000) == b"OK"
    assert src.execute_command("MIGRATE", target.host, f" {target.port}", "p2", 0, 1000) == b"OK"
    assert dst.mget("p1", "p2") == [b"1", b"2"]
    assert src.execute_command("MIGRATE", target.host, "abc", "missing", 0, 1000) == b"NOKEY"


def read_command(conn: socket.socket, buffer: bytearray, pace: float = 0.0, slow_bytes: int = 0) -> int:
    """Read one RESP command off ``conn`` (``buffer`` keeps what follows it), ``pace`` seconds between reads of
    256 KiB for its first ``slow_bytes``: a slow target, which then reads the rest at once (so that what the
    kernel holds in its buffers at the end does not count). Returns the bytes of its arguments."""
    taken = 0

    def need(n: int) -> None:
        nonlocal taken
        while len(buffer) < n:
            chunk = conn.recv(256 * 1024)
            assert chunk, "the source closed the connection"
            buffer.extend(chunk)
            taken += len(chunk)
            if taken < slow_bytes:
                time.sleep(pace)

    def line() -> bytes:
        while b"\r\n" not in buffer:
            need(len(buffer) + 1)
        end = buffer.index(b"\r\n")
        text = bytes(buffer[:end])
        del buffer[: end + 2]
        return text

    total = 0
    count = int(line()[1:])
    for _ in range(count):
        size = int(line()[1:])
        need(size + 2)
        del buffer[: size + 2]
        total += size
    return total


def test_a_large_key_to_a_slow_target_is_not_cut_short_by_the_timeout(server):
    """The timeout bounds each 64 KiB written, as Redis's, not the whole transfer: 16 MiB to a target that takes
    about 0.6 s to read the first 8 MiB, with a timeout of 300 ms."""
    src = server.client()
    value = os.urandom(16 * MiB)
    src.set("big", value)
    received: list[int] = []

    def slow(conn: socket.socket) -> None:
        buffer = bytearray()
        read_command(conn, buffer)  # SELECT
        received.append(read_command(conn, buffer, pace=0.02, slow_bytes=8 * MiB))  # RESTORE
        conn.sendall(b"+OK\r\n+OK\r\n")
        time.sleep(0.5)

    with fake_target(slow) as port:
        started = time.monotonic()
        assert src.execute_command("MIGRATE", "127.0.0.1", port, "big", 0, 300) == b"OK"
        took = time.monotonic() - started
    assert received and received[0] > 16 * MiB  # the key, the TTL and the payload
    assert took > 0.5 and not src.exists("big")


@pytest.mark.kvd_only  # Redis reads 1023 bytes of such a reply as a line that is not an error, and deletes the key
def test_a_target_that_answers_no_line_is_a_failed_read(server):
    src = server.client()
    src.set("k", "v")

    def babble(conn: socket.socket) -> None:
        buffer = bytearray()
        read_command(conn, buffer)  # SELECT
        read_command(conn, buffer)  # RESTORE
        conn.sendall(b"x" * (200 * 1024))
        time.sleep(1)

    with fake_target(babble) as port:
        reply = error_of(src, "MIGRATE", "127.0.0.1", port, "k", 0, 2000)
    assert reply == "IOERR error or timeout reading to target instance"
    assert src.get("k") == b"v"
