"""SYNC for ``redis-cli --rdb``: a snapshot of the keyspace as an RDB file that Redis itself loads, taken at one
instant while the server goes on changing, and what REPLCONF, SYNC and PSYNC answer around it.

The tests without ``kvd_only`` pass against redis-server too (``KVD_TEST_TARGET=redis``)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from support.server import ServerProcess
from support.tools import find_tool, redis_cli, run

from kvd.persist.rdb import RdbReader

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

MiB = 1 << 20
TTL_S = 1000


def fill(client) -> dict[bytes, tuple[bytes, bool]]:
    """Keys of every shape an RDB writer meets; returns key -> (value, has a TTL)."""
    values = {
        b"int": b"12345",
        b"neg": b"-7",
        b"zero-padded": b"007",
        b"empty": b"",
        b"short": b"hello",
        b"bin\x00key\xff": os.urandom(100),
        b"len63": b"a" * 63,
        b"len64": b"b" * 64,
        b"len16384": os.urandom(16384),
        b"compressible": b"kv-cache " * 150_000,
        b"random": os.urandom(3 * MiB),
        b"above-offload": os.urandom(5 * MiB),
    }
    values.update({b"small:%d" % i: b"v%d" % i * 7 for i in range(3000)})
    pipe = client.pipeline(transaction=False)
    for key, value in values.items():
        pipe.set(key, value)
    pipe.execute()
    client.set(b"ttl", b"expiring", ex=TTL_S)
    out = {k: (v, False) for k, v in values.items()}
    out[b"ttl"] = (b"expiring", True)
    return out


def contents(client) -> dict[bytes, tuple[bytes, bool]]:
    out = {}
    for key in client.scan_iter(count=1000):
        ttl = client.pttl(key)
        assert ttl == -1 or (TTL_S - 120) * 1000 < ttl <= TTL_S * 1000, (key, ttl)
        out[key] = (client.get(key), ttl != -1)
    return out


def rdb_keys(data: bytes) -> dict[bytes, bytes]:
    import io

    return {key: value for key, value, _ in RdbReader(io.BytesIO(data))}


def start_sync(raw) -> int:
    """REPLCONF rdb-only 1, SYNC, and the file's announced size (Redis may send newlines while it saves)."""
    assert raw.command("REPLCONF", "rdb-only", "1") == b"+OK\r\n"
    raw.send(b"SYNC\r\n")
    line = raw.recv_until(b"\r\n", timeout=60).lstrip(b"\n")
    assert line[:1] == b"$", line
    return int(line[1:-2])


def test_redis_cli_rdb_backup_loads_into_redis_server(server_factory, tmp_path: Path):
    src = server_factory()
    expected = fill(src.client())
    path = tmp_path / "backup.rdb"
    r = run([redis_cli(), "-h", src.host, "-p", str(src.port), "--rdb", str(path)], timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"Transfer finished with success" in r.stderr
    check = run([find_tool("redis-check-rdb"), str(path)], timeout=60)
    assert check.returncode == 0 and b"RDB looks OK" in check.stdout, check.stdout[-2000:]
    assert b"%d keys read" % len(expected) in check.stdout
    redis = ServerProcess(tmp_path / "redis", kind="redis")
    redis.dir.mkdir(parents=True)
    shutil.copy(path, redis.dir / "dump.rdb")
    redis.start()
    try:
        assert contents(redis.client()) == expected
    finally:
        redis.stop()


def test_the_file_is_the_dataset_of_the_instant_sync_arrived(server_factory):
    """40 MiB are on their way (far more than the stream may queue) while every key is overwritten or deleted
    and FLUSHALL runs: the file still holds what was there when SYNC arrived, as Redis's forked child would."""
    src = server_factory()
    c = src.client()
    values = {b"chunk:%d" % i: os.urandom(MiB) for i in range(40)}
    for key, value in values.items():
        c.set(key, value)
    with src.raw(timeout=60) as raw:
        size = start_sync(raw)
        head = raw.recv_exact(64 * 1024)
        for i, key in enumerate(values):
            if i % 2:
                c.set(key, b"new")
            else:
                c.delete(key)
        c.set("added", "later")
        c.flushall()
        data = head + raw.recv_exact(size - len(head), timeout=60)
        assert raw.is_closed(timeout=10)  # an rdb-only client is closed once it has its file
    assert rdb_keys(data) == values


def test_replconf_answers_as_redis_does(server):
    with server.raw() as raw:
        assert raw.command("REPLCONF", "listening-port", "6380", "capa", "eof", "capa", "psync2") == b"+OK\r\n"
        assert raw.command("REPLCONF", "listening-port") == b"-ERR syntax error\r\n"
        assert raw.command("REPLCONF", "nosuch", "1") == b"-ERR Unrecognized REPLCONF option: nosuch\r\n"
        assert raw.command("REPLCONF", "rdb-only", "2") == b"-ERR value is out of range, value must between 0 and 1\r\n"
        assert raw.command("REPLCONF", "rdb-only", "x") == b"-ERR value is not an integer or out of range\r\n"
        assert raw.command("REPLCONF", "listening-port", "x") == b"-ERR value is not an integer or out of range\r\n"
        raw.send_command("REPLCONF", "ACK", "100")  # a replica's: no reply at all
        assert raw.command("PING") == b"+PONG\r\n"
        assert raw.command("MULTI") == b"+OK\r\n"
        assert raw.command("SYNC") == b"-ERR Command not allowed inside a transaction\r\n"
        assert raw.command("DISCARD") == b"+OK\r\n"
        assert raw.command("REPLCONF", "rdb-only", "1") == b"+OK\r\n"
        raw.send(b"PING\r\nSYNC\r\n")  # SYNC while PING's reply is still unsent
        assert raw.read_replies(2) == [b"+PONG\r\n", b"-ERR SYNC and PSYNC are invalid with pending output\r\n"]


@pytest.mark.kvd_only  # the replication id and offset are Redis's own
def test_psync_answers_a_full_resync_then_the_file(server):
    c = server.client()
    c.set("k", "v")
    run_id = c.info("server")["run_id"]
    with server.raw() as raw:
        assert raw.command("REPLCONF", "rdb-only", "1") == b"+OK\r\n"
        raw.send_command("PSYNC", "?", "-1")
        assert raw.recv_until(b"\r\n") == b"+FULLRESYNC %s 0\r\n" % run_id.encode()
        size = int(raw.recv_until(b"\r\n")[1:-2])
        assert rdb_keys(raw.recv_exact(size)) == {b"k": b"v"}
    with server.raw() as raw:
        assert raw.command("REPLCONF", "rdb-only", "1", "rdb-filter-only", "functions") == b"+OK\r\n"
        size = start_sync(raw)
        assert rdb_keys(raw.recv_exact(size)) == {}  # functions only: kvd has none
    assert c.info("stats")["sync_full"] == 2


def deleted_open_files(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.endswith("(deleted)"):
            out.append(target)
    return out


def wait_rewrite(c) -> None:
    deadline = time.monotonic() + 30
    while c.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.info("persistence")["aof_rewrite_in_progress"] == 0


@pytest.mark.kvd_only  # segments, compaction and pins are kvd's
def test_cold_values_come_from_segments_compaction_unlinks_during_the_stream(server_factory):
    """With most values only on disk, every key is overwritten and BGREWRITEAOF unlinks the segments that held
    the old values while the stream is paused on a client that does not read: the pinned files stay open and
    the file holds the old values. Once the stream ends, no unlinked segment stays open."""
    srv = server_factory(
        "--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "2mb", "--appendfsync", "always"
    )
    c = srv.client()
    values = {b"chunk:%d" % i: os.urandom(MiB) for i in range(24)}
    for key, value in values.items():
        c.set(key, value)
    assert c.info("persistence")["aof_segments"] >= 8
    with srv.raw(timeout=60) as raw:
        size = start_sync(raw)
        head = raw.recv_exact(64 * 1024)
        time.sleep(0.3)  # the stream fills what it may queue for a reader that does not read, and waits
        line = next(cl for cl in c.client_list() if cl["cmd"] == "sync")
        assert int(line["omem"]) <= 9 * MiB, line  # STREAM_HIGH (8 MiB) and at most one value above it
        for key in values:
            c.set(key, b"overwritten")
        assert c.bgrewriteaof()
        wait_rewrite(c)
        assert deleted_open_files(srv.pid), "compaction unlinked no pinned segment: the test proves nothing"
        data = head + raw.recv_exact(size - len(head), timeout=60)
    assert rdb_keys(data) == values
    assert c.info("persistence")["aof_corrupt_reads"] == 0
    deadline = time.monotonic() + 10
    while deleted_open_files(srv.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert deleted_open_files(srv.pid) == []
    assert c.get(b"chunk:3") == b"overwritten"


@pytest.mark.kvd_only
def test_a_client_that_leaves_mid_stream_releases_its_snapshot(server_factory):
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "2mb")
    c = srv.client()
    for i in range(24):
        c.set(b"chunk:%d" % i, os.urandom(MiB))
    with srv.raw(timeout=60) as raw:
        start_sync(raw)
        raw.recv_exact(MiB)
    for i in range(24):
        c.set(b"chunk:%d" % i, b"x")
    assert c.bgrewriteaof()
    wait_rewrite(c)
    deadline = time.monotonic() + 10
    while deleted_open_files(srv.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert deleted_open_files(srv.pid) == []
    assert c.ping() and c.info("stats")["sync_full"] == 1
    assert "snapshot for client" in srv.stderr_text()  # the log says the stream ended early


def test_time_spent_waiting_is_not_run_time(server):
    """WAIT's wait for replicas and SYNC's stream to a slow reader are not the server's work: SLOWLOG and INFO
    commandstats time only the step that started them, as Redis's call() times a blocked command."""
    c = server.client()
    c.config_set("slowlog-log-slower-than", 100_000)  # 100 ms
    c.slowlog_reset()
    for i in range(24):
        c.set(b"chunk:%d" % i, os.urandom(MiB))
    assert c.execute_command("WAIT", 1, 300) == 0  # no replicas: blocks 300 ms
    with server.raw(timeout=60) as raw:
        size = start_sync(raw)
        got = 0
        while got < size:  # a reader slow enough that the stream lasts over half a second
            got += len(raw.recv_exact(min(4 * MiB, size - got)))
            time.sleep(0.05)
    assert [e["command"] for e in c.slowlog_get()] == []
    stats = c.info("commandstats")
    assert stats["cmdstat_wait"]["usec"] < 100_000 and stats["cmdstat_sync"]["usec"] < 100_000, stats


def test_replicaof_and_failover_answer_as_a_primary_without_replicas(server):
    with server.raw() as raw:
        assert raw.command("REPLICAOF", "NO", "ONE") == b"+OK\r\n"
        assert raw.command("SLAVEOF", "no", "one") == b"+OK\r\n"
        assert raw.command("REPLICAOF", "127.0.0.1", "x") == b"-ERR Invalid master port\r\n"
        assert raw.command("REPLICAOF", "127.0.0.1", "70000") == b"-ERR Invalid master port\r\n"
        assert raw.command("FAILOVER") == b"-ERR FAILOVER requires connected replicas.\r\n"
        assert raw.command("FAILOVER", "ABORT") == b"-ERR No failover in progress.\r\n"
        assert raw.command("FAILOVER", "TIMEOUT", "0") == b"-ERR FAILOVER timeout must be greater than 0\r\n"
        assert raw.command("FAILOVER", "TO", "h", "x") == b"-ERR value is not an integer or out of range\r\n"
        assert raw.command("FAILOVER", "FORCE", "FORCE") == b"-ERR syntax error\r\n"
        assert raw.command("FAILOVER", "TO", "h", "1", "FORCE") == b"-ERR FAILOVER requires connected replicas.\r\n"
        assert raw.command("ROLE") == b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
