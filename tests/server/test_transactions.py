"""MULTI/EXEC/DISCARD/WATCH against a real kvd: redis-py's default (transactional) pipeline must just work."""

from __future__ import annotations

import os

import pytest
import redis


def test_default_redis_py_pipeline_is_a_transaction(server):
    r = server.client()
    with r.pipeline() as pipe:  # transaction=True: MULTI ... EXEC
        pipe.set("a", "1").incr("a").get("a").mget("a", "missing")
        assert pipe.execute() == [True, 2, b"2", [b"2", None]]


def test_multi_queues_and_exec_runs_in_order(server):
    r = server.client()
    conn = r.connection_pool.get_connection()
    try:
        for command, expected in (
            (("MULTI",), b"OK"),
            (("SET", "k", "v"), b"QUEUED"),
            (("GET", "k"), b"QUEUED"),
        ):
            conn.send_command(*command)
            assert conn.read_response() == expected
        conn.send_command("EXEC")
        assert conn.read_response() == [b"OK", b"v"]
    finally:
        r.connection_pool.release(conn)


def test_errors_inside_multi_abort_exec(server):
    r = server.client()
    conn = r.connection_pool.get_connection()
    try:
        conn.send_command("MULTI")
        assert conn.read_response() == b"OK"
        conn.send_command("SET", "k")  # wrong arity: refused at queue time
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            conn.read_response()
        conn.send_command("SET", "k", "v")
        assert conn.read_response() == b"QUEUED"
        conn.send_command("EXEC")
        with pytest.raises(redis.ResponseError, match="^Transaction discarded because of previous errors.$"):
            conn.read_response()
    finally:
        r.connection_pool.release(conn)
    assert r.get("k") is None


def test_a_bad_subcommand_is_refused_at_queue_time(server):
    """Redis resolves CLIENT/CONFIG/COMMAND subcommands before queueing: a bad one is an error, not QUEUED."""
    with server.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("CLIENT", "FOO") == b"-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"
        assert c.command("CONFIG", "RESETSTAT", "x") == (
            b"-ERR wrong number of arguments for 'config|resetstat' command\r\n"
        )
        assert c.command("CONFIG", "GET", "maxmemory") == b"+QUEUED\r\n"
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"


def test_save_and_shutdown_are_refused_inside_multi(server):
    """Redis's no-multi commands: refused at queue time, and the transaction fails (the server stays up)."""
    with server.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        for command in ("SAVE", "SHUTDOWN"):
            assert c.command(command) == b"-ERR Command not allowed inside a transaction\r\n"
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.command("PING") == b"+PONG\r\n"


def test_exec_with_arguments_discards_the_transaction(server):
    """A refused EXEC aborts the transaction it would have run, as Redis's execCommandAbort does."""
    with server.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("SET", "k", "v") == b"+QUEUED\r\n"
        assert c.command("EXEC", "now") == (
            b"-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
        )
        assert c.command("GET", "k") == b"$-1\r\n"  # not queued: the transaction is gone
        assert c.command("EXEC") == b"-ERR EXEC without MULTI\r\n"


def test_exec_discard_without_multi_and_nesting(server):
    r = server.client()
    with pytest.raises(redis.ResponseError, match="^EXEC without MULTI$"):
        r.execute_command("EXEC")
    with pytest.raises(redis.ResponseError, match="^DISCARD without MULTI$"):
        r.execute_command("DISCARD")


def test_watch_detects_a_concurrent_write(server):
    r = server.client()
    other = server.client()
    r.set("balance", "10")
    with r.pipeline() as pipe:
        pipe.watch("balance")
        assert pipe.get("balance") == b"10"
        other.set("balance", "99")  # another client writes between WATCH and EXEC
        pipe.multi()
        pipe.set("balance", "11")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get("balance") == b"99"
    with r.pipeline() as pipe:  # untouched: the transaction goes through
        pipe.watch("balance")
        pipe.multi()
        pipe.set("balance", "100")
        assert pipe.execute() == [True]
    assert r.get("balance") == b"100"


def test_watch_survives_another_watcher_letting_go(server):
    """Two clients WATCH one key; after one of them unwatches (or disconnects) the other still sees a write.
    (Overwrites of unwatched keys update the entry in place, so the server must count watchers exactly.)"""
    a, b, writer = server.client(), server.client(), server.client()
    writer.set("k", "1")
    with a.pipeline() as pa, b.pipeline() as pb:
        pa.watch("k")
        pb.watch("k")
        pa.unwatch()
        writer.set("k", "2")
        pb.multi()
        pb.set("k", "from-b")
        with pytest.raises(redis.WatchError):
            pb.execute()
    lone = server.client()
    with lone.pipeline() as pl:
        pl.watch("k")
        gone = server.client()
        gone.execute_command("WATCH", "k")
        gone.close()  # a watcher that disconnects must not leave the key counted, nor uncount ``lone``
        writer.set("k", "3")
        pl.multi()
        pl.set("k", "from-lone")
        with pytest.raises(redis.WatchError):
            pl.execute()
    assert writer.get("k") == b"3"


@pytest.mark.kvd_only  # the disk tier
def test_transaction_over_cold_values_reads_them_from_disk(server_factory):
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    r = srv.client()
    values = {f"k{i}": os.urandom(1 << 20) for i in range(10)}
    r.mset(values)
    with r.pipeline() as pipe:
        for key in values:
            pipe.get(key)
        pipe.set("after", "1")
        assert pipe.execute() == [*values.values(), True]
    assert r.info("kvd")["disk_hits"] > 0
