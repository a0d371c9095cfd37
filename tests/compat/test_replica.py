"""The server under test as a replica: ``REPLICAOF`` a real redis-server (or another kvd), then the primary's
snapshot and stream reach it, its own clients may only read, INFO, ROLE and CLIENT LIST show the link, WAIT on
the primary counts it, a cut link continues from the backlog, and ``REPLICAOF NO ONE`` makes it a primary again.

The tests without ``kvd_only`` pass with redis-server as the replica too (``KVD_TEST_TARGET=redis``)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from support.primary import EMPTY_RDB, FakePrimary, encode, small_keys_rdb
from support.raw import parse
from support.server import ServerProcess
from test_rdb_snapshot import fill

# same: WAIT counts the replica, then it equals the primary
from test_replication import every_kind_of_change, same, until
from test_replication import follow as follow_primary

from kvd.persist import rdb
from kvd.persist.dump import crc64_update

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

MiB = 1 << 20


def follow(replica: ServerProcess, primary: ServerProcess) -> redis.Redis:
    """REPLICAOF the primary, wait until the link is up, and return a client of the replica."""
    follow_primary(replica, primary)
    return replica.client()


def wait_link(r: redis.Redis, replica: ServerProcess, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while r.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, replica.stderr_text()[-3000:]
        time.sleep(0.05)


@pytest.mark.parametrize("diskless", ["yes", "no"])
def test_a_redis_primary_s_snapshot_and_stream_reach_the_replica(server, redis_server, diskless):
    """Both transfer forms: a diskless primary's EOF-marked stream, and a file announced with its size; Redis's
    integer and LZF encodings in the file; then every kind of write as a Redis primary propagates it."""
    p = redis_server.client()
    p.config_set("repl-diskless-sync", diskless)
    p.config_set("repl-diskless-sync-delay", 0)
    values = fill(p)
    r = follow(server, redis_server)
    same(p, r)
    assert r.get(b"above-offload") == values[b"above-offload"][0]
    every_kind_of_change(p, r)
    assert r.dbsize() == 1


def test_a_kvd_primary_s_snapshot_and_stream_reach_a_kvd_replica(server_factory):
    primary = server_factory()
    replica = server_factory()
    p = primary.client()
    p.set("big", os.urandom(4 * MiB))
    p.mset({f"k{i}": f"v{i}" for i in range(500)})
    p.set("ttl", "v", px=60_000)
    r = follow(replica, primary)
    same(p, r)
    p.set("later", os.urandom(MiB))
    p.delete("k1")
    p.expire("k2", 500)
    same(p, r)
    # The link's bytes are replication traffic on both ends (INFO stats), as on Redis: the replica's client
    # input is only what the test's own requests sent it.
    sent, got = p.info("stats"), r.info("stats")
    assert got["total_net_repl_input_bytes"] > 5 * MiB and sent["total_net_repl_output_bytes"] > MiB
    assert got["total_net_input_bytes"] < MiB


def test_the_replica_s_clients_may_only_read(server, redis_server):
    p = redis_server.client()
    p.set("k", "v")
    r = follow(server, redis_server)
    same(p, r)
    assert r.get("k") == b"v"
    with pytest.raises(redis.ReadOnlyError, match="You can't write against a read only replica."):
        r.set("k", "mine")
    with pytest.raises(redis.ReadOnlyError):
        r.delete("k")
    with pytest.raises(redis.ReadOnlyError, match="Command # 2"), r.pipeline(transaction=True) as tx:
        tx.get("k").set("k", "mine").execute()  # refused when queued: EXEC then aborts
    assert r.get("k") == b"v"
    r.config_set("replica-read-only", "no")
    assert r.info("replication")["slave_read_only"] == 0
    assert r.set("local", "1")  # a writable replica takes it, and the primary never hears of it
    assert p.get("local") is None
    r.config_set("replica-read-only", "yes")
    with pytest.raises(redis.ReadOnlyError):
        r.set("local", "2")


def test_info_role_and_client_list_show_the_link(server, redis_server):
    p = redis_server.client()
    p.set("k", "v")
    r = follow(server, redis_server)
    same(p, r)
    p.set("k2", "v2")
    same(p, r)
    info = r.info("replication")
    assert info["role"] == "slave"
    assert (info["master_host"], info["master_port"]) == (redis_server.host, redis_server.port)
    assert info["master_link_status"] == "up"
    assert info["master_sync_in_progress"] == 0
    assert info["slave_read_only"] == 1
    assert info["slave_repl_offset"] == p.info("replication")["master_repl_offset"]
    role = r.role()
    assert role[:4] == [b"slave", redis_server.host.encode(), redis_server.port, b"connected"]
    assert role[4] == info["slave_repl_offset"]
    assert r.execute_command("HELLO", 3)[b"role"] == b"replica"
    masters = [c for c in r.client_list() if "M" in c["flags"]]
    assert len(masters) == 1
    primary_role = p.role()
    assert primary_role[0] == b"master" and len(primary_role[2]) == 1
    assert int(primary_role[2][0][1]) == server.port  # REPLCONF listening-port reached the primary
    with pytest.raises(redis.exceptions.ResponseError, match="WAIT cannot be used with replica instances"):
        r.execute_command("WAIT", 0, 0)
    assert (
        r.execute_command("REPLICAOF", redis_server.host, redis_server.port)
        == b"OK Already connected to specified master"
    )


def test_a_cut_link_continues_from_the_backlog(server, redis_server):
    p = redis_server.client()
    p.set("before", "1")
    r = follow(server, redis_server)
    same(p, r)
    full = p.info("stats")["sync_full"]
    assert r.client_kill_filter(_type="master") == 1
    p.set("during", os.urandom(MiB))
    with p.pipeline(transaction=True) as tx:
        tx.set("tx", "1").incr("tx").execute()
    wait_link(r, server)
    same(p, r)
    stats = p.info("stats")
    assert stats["sync_full"] == full  # no new snapshot: only what was missed
    assert stats["sync_partial_ok"] >= 1


def test_a_primary_that_goes_away_is_followed_again_when_it_is_back(server, redis_server):
    p = redis_server.client()
    p.set("k", "v")
    r = follow(server, redis_server)
    same(p, r)
    redis_server.stop(expect_code=None)
    deadline = time.monotonic() + 10
    while r.info("replication")["master_link_status"] != "down":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    info = r.info("replication")
    assert info["master_link_down_since_seconds"] >= 0
    assert r.role()[3] in (b"connect", b"connecting")
    assert r.get("k") == b"v"  # the data stays readable while the primary is away
    redis_server.start()  # a new history (no persistence): a full resync replaces the data
    p = redis_server.client()
    p.set("new", "1")
    wait_link(r, server)
    same(p, r)
    assert r.get("k") is None


def test_replicaof_no_one_makes_a_primary_that_keeps_its_data(server, redis_server):
    p = redis_server.client()
    p.mset({"a": "1", "b": "2"})
    r = follow(server, redis_server)
    same(p, r)
    assert r.replicaof("NO", "ONE")
    assert r.info("replication")["role"] == "master"
    assert r.role()[0] == b"master"
    assert r.mget("a", "b") == [b"1", b"2"]
    assert r.set("c", "3")
    p.set("a", "changed")
    time.sleep(0.3)
    assert r.get("a") == b"1"  # no longer following
    assert r.config_get("replicaof")["replicaof"] == ""


def test_masterauth_and_masteruser(server, server_factory, redis_server):
    p = redis_server.client()
    p.config_set("requirepass", "s3cret")
    p = redis.Redis(host=redis_server.host, port=redis_server.port, password="s3cret")
    p.set("k", "v")
    r = server.client()
    r.replicaof(redis_server.host, redis_server.port)
    time.sleep(1.5)
    assert r.info("replication")["master_link_status"] == "down"  # NOAUTH: it keeps trying
    r.config_set("masteruser", "default")
    r.config_set("masterauth", "s3cret")
    wait_link(r, server)
    same(p, r)


@pytest.mark.kvd_only  # what kvd does with a Redis primary's other types, and its log
def test_keys_of_other_types_are_passed_over(server, redis_server):
    p = redis_server.client()
    p.set("s", "v")
    p.rpush("list", "a", "b")
    p.hset("hash", mapping={"f": "v"})
    r = follow(server, redis_server)
    time.sleep(0.2)
    assert set(r.keys("*")) == {b"s"}
    assert "passed over, not strings: 1 hash, 1 list" in " ".join(server.stderr_text().split())
    p.set("s2", "v2")
    p.rpush("list", "c")  # kvd refuses it, says so, and goes on with the stream
    p.set("s3", "v3")
    assert p.execute_command("WAIT", 1, 10_000) == 1
    assert r.mget("s2", "s3") == [b"v2", b"v3"]
    assert "kvd refused a command from its primary" in server.stderr_text()


@pytest.mark.kvd_only  # kvd's segment log: the replica's copy survives its own restart
def test_a_persistent_replica_restarts_as_a_replica_with_its_data(server_factory, redis_server):
    replica = server_factory("--persistence", "yes", "--appendfsync", "everysec")
    p = redis_server.client()
    p.set("big", os.urandom(2 * MiB))
    p.mset({f"k{i}": f"v{i}" for i in range(300)})
    r = follow(replica, redis_server)
    same(p, r)
    assert r.config_get("replicaof")["replicaof"] == f"{redis_server.host} {redis_server.port}"
    redis_server.stop(expect_code=None)  # the primary is away while the replica restarts
    replica.kill9()
    replica.restart(["--replicaof", f"{redis_server.host} {redis_server.port}"])
    r = replica.client()
    assert r.info("replication")["role"] == "slave"
    assert r.get("k7") == b"v7" and len(r.get("big")) == 2 * MiB  # recovered from its own log
    with pytest.raises(redis.ReadOnlyError):
        r.set("k7", "mine")
    redis_server.start()
    p = redis_server.client()
    p.set("fresh", "1")
    wait_link(r, replica)
    same(p, r)


@pytest.mark.kvd_only  # a Redis replica keeps its primary's replid in the RDB file it saves, not kvd's way
def test_a_cleanly_restarted_replica_continues_without_a_snapshot(server_factory, redis_server):
    """SIGTERM: the log is flushed and the primary's replid and offset saved, so the next start asks to continue
    and gets only what it missed (the primary counts a partial sync, not a full one). kill -9 saves nothing:
    the next start resynchronises fully."""
    replica = server_factory("--persistence", "yes", "--appendfsync", "everysec")
    p = redis_server.client()
    p.set("big", os.urandom(2 * MiB))
    p.mset({f"k{i}": f"v{i}" for i in range(300)})
    r = follow(replica, redis_server)
    with p.pipeline(transaction=True) as tx:  # a transaction in the stream before the restart
        tx.incr("counter").set("after-tx", "1")
        tx.execute()
    same(p, r)
    full, partial = p.info("stats")["sync_full"], p.info("stats")["sync_partial_ok"]
    replica.stop()
    assert (replica.dir / "replica-link.id").exists()
    p.set("while-away", "1")
    p.incr("counter")
    replica.restart(["--replicaof", f"{redis_server.host} {redis_server.port}"])
    r = replica.client()
    wait_link(r, replica)
    same(p, r)
    assert r.get("while-away") == b"1" and r.get("counter") == b"2" and len(r.get("big")) == 2 * MiB
    stats = p.info("stats")
    assert (stats["sync_full"], stats["sync_partial_ok"]) == (full, partial + 1)
    assert not (replica.dir / "replica-link.id").exists()  # taken at start: a crash now cannot reuse it

    replica.kill9()
    p.set("after-crash", "1")
    replica.restart()
    r = replica.client()
    wait_link(r, replica)
    same(p, r)
    assert p.info("stats")["sync_full"] == full + 1


def test_a_redis_replica_of_the_replica_gets_the_same_data(server, redis_server, server_factory):
    """A chain: redis-server -> the server under test -> another redis-server."""
    from support.server import ServerProcess as Proc

    p = redis_server.client()
    p.set("k", "v")
    r = follow(server, redis_server)
    tail = Proc(server.base / "tail", kind="redis")
    tail.start()
    try:
        t = follow(tail, server)
        p.set("k2", os.urandom(MiB))
        same(p, r)
        deadline = time.monotonic() + 10
        while t.get("k2") != p.get("k2"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert t.get("k") == b"v"
    finally:
        tail.stop(expect_code=None)


def test_replicaof_checks_its_port(server):
    r = server.client()
    with pytest.raises(redis.exceptions.ResponseError, match="Invalid master port"):
        r.execute_command("REPLICAOF", "127.0.0.1", "70000")
    with pytest.raises(redis.exceptions.ResponseError, match="Invalid master port"):
        r.execute_command("REPLICAOF", "127.0.0.1", "port")
    assert r.info("replication")["role"] == "master"


def test_a_transfer_cut_short_keeps_the_data_held(server):
    r = server.client()
    r.set("mine", "1")
    fake = FakePrimary(b"$100000\r\nREDIS0009")  # then the connection closes
    try:
        r.replicaof(fake.host, fake.port)
        fake.wait_psyncs(2)  # it failed, and tried again
        assert r.info("replication")["master_link_status"] == "down"
        assert r.get("mine") == b"1"
    finally:
        r.replicaof("NO", "ONE")
        fake.close()


@pytest.mark.kvd_only  # Redis flushes before it finds the damage
def test_a_damaged_snapshot_is_refused_before_the_data_held_goes(server):
    r = server.client()
    r.set("mine", "1")
    rdb = b"REDIS0009\xfe\x00\x00\x01k\x01v\xff" + b"\x01" * 8  # one key, and a checksum that does not match
    fake = FakePrimary(b"$%d\r\n" % len(rdb) + rdb)
    try:
        r.replicaof(fake.host, fake.port)
        fake.wait_psyncs(2)
        assert r.get("mine") == b"1" and r.get("k") is None
        assert "the primary's snapshot is damaged, the data held is kept: checksum mismatch" in server.stderr_text()
        r.replicaof("NO", "ONE")  # the link retries meanwhile: a transfer may be under way until it stops
        until(lambda: not list(server.dir.glob("temp-replica-*")), "the transfer's file stays behind", 10)
    finally:
        r.replicaof("NO", "ONE")
        fake.close()


def test_a_transfer_killed_midway_leaves_no_file_after_a_restart(server):
    r = server.client()
    fake = FakePrimary(b"$100000000\r\nREDIS0009" + b"\0" * 100_000, hold=60)  # 100 MB promised, 100 kB sent
    try:
        r.replicaof(fake.host, fake.port)
        until(lambda: list(server.dir.glob("temp-replica-*.rdb")), "no transfer started", 10)
        (left,) = server.dir.glob("temp-replica-*.rdb")
        server.kill9()
        assert left.exists()
        server.restart()
        assert not left.exists()
        assert f"removed {left}, the snapshot of a transfer whose process was killed" in server.stderr_text()
    finally:
        server.client().replicaof("NO", "ONE")
        fake.close()


def test_a_replica_of_itself_never_comes_up_and_keeps_serving(server):
    """Its own PSYNC meets its own link, which is down: NOMASTERLINK, as Redis answers, and no loop."""
    r = server.client()
    r.set("mine", "1")
    r.replicaof(server.host, server.port)
    time.sleep(2.5)
    assert r.info("replication")["master_link_status"] == "down"
    assert r.get("mine") == b"1"
    with pytest.raises(redis.exceptions.ResponseError, match="NOMASTERLINK Can't SYNC while not connected"):
        r.execute_command("PSYNC", "?", "-1")
    r.replicaof("NO", "ONE")
    assert r.info("replication")["role"] == "master"


def test_failover_from_a_redis_primary_hands_the_role_to_the_replica(server, redis_server):
    p = redis_server.client()
    p.mset({"a": "1", "b": "2"})
    r = follow(server, redis_server)
    same(p, r)
    assert p.execute_command("FAILOVER", "TIMEOUT", 10_000) == b"OK"
    deadline = time.monotonic() + 30
    while r.info("replication")["role"] != "master" or p.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, server.stderr_text()[-3000:]
        time.sleep(0.05)
    assert p.info("replication")["master_port"] == server.port  # the old primary follows the new one
    assert r.set("c", "3")
    same(r, p)
    assert p.mget("a", "b", "c") == [b"1", b"2", b"3"]


@pytest.mark.kvd_only  # kvd's segment log
def test_a_persistent_replica_logs_a_write_flood_and_keeps_it_across_a_clean_restart(server_factory, redis_server):
    """The stream is not held back for the log, as clients' replies are: the log still gets every write."""
    replica = server_factory("--persistence", "yes", "--appendfsync", "everysec")
    p = redis_server.client()
    r = follow(replica, redis_server)
    with p.pipeline(transaction=False) as pipe:
        for i in range(30_000):
            pipe.set(b"flood:%d" % i, b"v%d" % i)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
    p.set("big", os.urandom(3 * MiB))
    same(p, r)
    redis_server.stop(expect_code=None)
    replica.restart()  # SIGTERM: the log is drained and fsynced
    r = replica.client()
    assert r.dbsize() == 30_001
    assert r.get("flood:29999") == b"v29999" and len(r.get("big")) == 3 * MiB


def test_a_silent_primary_is_dropped_after_repl_timeout(server):
    """An empty snapshot, then nothing at all: after repl-timeout the replica gives up on the link and connects
    again, rather than waiting for ever on a primary that hung."""
    r = server.client()
    r.config_set("repl-timeout", 2)
    empty = b"REDIS0009\xff" + bytes(8)  # no keys; a zero checksum means "not computed"
    fake = FakePrimary(b"$%d\r\n" % len(empty) + empty, hold=30)
    try:
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)  # the empty snapshot loaded: the link is up, then silence
        started = time.monotonic()
        fake.wait_psyncs(2, timeout=15)
        assert 1.5 < time.monotonic() - started < 10
    finally:
        r.replicaof("NO", "ONE")
        fake.close()


def test_an_eof_marked_snapshot_whose_mark_arrives_in_pieces(server):
    """A diskless primary's transfer ends with a 40-byte mark, which may come split over reads."""
    r = server.client()
    rdb = b"REDIS0009\xfe\x00\x00\x03key\x05value\xff" + bytes(8)  # one key; no checksum computed
    mark = b"m" * 40
    pieces = [b"$EOF:" + mark + b"\r\n" + rdb[:-10], rdb[-10:] + mark[:20], mark[20:35], mark[35:]]
    fake = FakePrimary(pieces, hold=5)
    try:
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)
        assert r.get("key") == b"value"
        assert r.dbsize() == 1
    finally:
        r.replicaof("NO", "ONE")
        fake.close()


def test_clients_get_loading_while_the_primary_s_snapshot_loads(server):
    """Between the flush and the last key a replica holds part of its primary's data: it answers -LOADING to
    every command but those Redis flags ``loading`` (INFO, CONFIG, AUTH, HELLO...; not PING), and INFO
    persistence shows the load."""
    r = server.client()
    r.set("old", "1")
    keys = 400_000
    rdb = small_keys_rdb(keys)
    fake = FakePrimary(b"$%d\r\n" % len(rdb) + rdb, hold=60)
    raw = server.raw()
    try:
        r.replicaof(fake.host, fake.port)
        refused, infos, pings = 0, [], set()
        deadline = time.monotonic() + 60
        while r.info("replication")["master_link_status"] != "up":
            assert time.monotonic() < deadline, server.stderr_text()[-3000:]
            got = raw.command("GET", "k:0000000")
            if got.startswith(b"-LOADING "):
                refused += 1
                pings.add(raw.command("PING")[:9])
                info = raw.command("INFO", "persistence")
                if b"loading:1" in info:
                    infos.append(info)
            else:
                assert got in (b"$-1\r\n", b"$13\r\nvalue:0000000\r\n"), got  # before the load, or after it
        assert refused > 0 and b"-LOADING " in pings and pings <= {b"-LOADING ", b"+PONG\r\n"}, (refused, pings)
        assert infos and all(b"loading_total_bytes:%d" % len(rdb) in i for i in infos), infos[:1]
        assert r.dbsize() == keys and r.get("old") is None
        assert r.info("persistence")["loading"] == 0
    finally:
        raw.close()
        r.replicaof("NO", "ONE")
        fake.close()


def test_replica_serve_stale_data_no_refuses_reads_while_the_link_is_down(server):
    """With replica-serve-stale-data no, a replica whose primary cannot be reached answers -MASTERDOWN, except
    to the commands Redis flags ``stale`` (INFO, CONFIG, REPLICAOF...); with yes it serves what it holds."""
    import socket

    r = server.client()
    r.set("held", "1")
    with socket.socket() as probe:  # a port with nothing behind it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    raw = server.raw()
    try:
        r.config_set("replica-serve-stale-data", "no")
        r.replicaof("127.0.0.1", port)
        assert raw.command("GET", "held") == (
            b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n"
        )
        assert raw.command("DBSIZE").startswith(b"-MASTERDOWN ")
        assert b"master_link_status:down" in raw.command("INFO", "replication")
        assert raw.command("CONFIG", "SET", "replica-serve-stale-data", "yes") == b"+OK\r\n"
        assert raw.command("GET", "held") == b"$1\r\n1\r\n"
    finally:
        raw.close()
        r.replicaof("NO", "ONE")
        r.config_set("replica-serve-stale-data", "yes")
    assert r.get("held") == b"1"


@pytest.mark.kvd_only  # compares kvd's table with redis-server's
def test_every_command_has_redis_s_loading_and_stale_flags(server, redis_server):
    """Which commands a loading or stale replica still runs is Redis's per command (and per subcommand), as its
    COMMAND INFO flags ``loading`` and ``stale`` say: kvd's flags are compared for every command both have."""
    from support.raw import parse

    marks = {b"loading", b"stale"}
    with server.raw() as kvd, redis_server.raw() as redis:
        compared = 0
        for name in sorted(parse(kvd.command("COMMAND", "LIST"))):
            mine = parse(kvd.command("COMMAND", "INFO", name))[0]
            theirs = parse(redis.command("COMMAND", "INFO", name))[0]
            if theirs is None:  # kvd's own, and what Redis 7.2 added to Debian's 7.0
                continue
            assert set(mine[2]) & marks == set(theirs[2]) & marks, name
            subs = {s[0]: set(s[2]) & marks for s in mine[9]}
            for sub in theirs[9]:
                if sub[0] in subs:
                    assert subs[sub[0]] == set(sub[2]) & marks, sub[0]
                    compared += 1
            compared += 1
        assert compared > 150


def test_a_replica_announces_the_address_and_priority_it_is_configured_with(server, redis_server):
    """replica-announce-ip and -port (a replica behind NAT): the primary shows them in INFO and ROLE instead of the
    address it sees; replica-priority is INFO's slave_priority."""
    r = server.client()
    r.config_set("replica-announce-ip", "10.1.2.3")
    r.config_set("replica-announce-port", 7777)
    r.config_set("replica-priority", 42)
    try:
        follow(server, redis_server)
        p = redis_server.client()
        assert p.info("replication")["slave0"]["ip"] == "10.1.2.3"
        assert p.info("replication")["slave0"]["port"] == 7777
        assert p.execute_command("ROLE")[2] == [[b"10.1.2.3", b"7777", p.execute_command("ROLE")[2][0][2]]]
        assert r.info("replication")["slave_priority"] == 42
    finally:
        r.replicaof("NO", "ONE")
        r.config_set("replica-announce-ip", "")
        r.config_set("replica-announce-port", 0)


def test_a_promoted_replica_continues_its_primary_s_history(server, redis_server, server_factory):
    """REPLICAOF NO ONE on a replica that has all of its primary's stream: the primary's other replica, pointed at
    it, continues (a partial resynchronisation, no snapshot), because the promoted one keeps the primary's
    history as its second (INFO master_replid2, second_repl_offset), as a promoted Redis replica does."""
    from support.server import ServerProcess as Proc

    p = redis_server.client()
    p.mset({f"k{i}": f"v{i}" for i in range(200)})
    r = follow(server, redis_server)
    other = Proc(server.base / "other", kind="redis")
    other.start()
    try:
        o = follow(other, redis_server)
        p.set("last", os.urandom(MiB))
        assert p.execute_command("WAIT", 2, 10_000) == 2
        old_replid = p.info("replication")["master_replid"]
        deadline = time.monotonic() + 10  # the same offset on both replicas (WAIT counted both, GETACK went on)
        while r.info("replication")["slave_repl_offset"] != o.info("replication")["slave_repl_offset"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert r.replicaof("NO", "ONE")
        info = r.info("replication")
        assert info["master_replid2"] == old_replid and info["master_replid"] != old_replid
        full = r.info("stats")["sync_full"]
        o.replicaof(server.host, server.port)
        wait_link(o, other)
        stats = r.info("stats")
        assert stats["sync_partial_ok"] == 1 and stats["sync_full"] == full
        r.set("from-the-new-primary", "1")
        assert r.execute_command("WAIT", 1, 10_000) == 1
        assert o.get("from-the-new-primary") == b"1" and o.get("last") == p.get("last")
    finally:
        other.stop(expect_code=None)


@pytest.mark.parametrize("policy", ["noeviction", "allkeys-lru", "volatile-ttl"])
def test_a_replica_ignores_maxmemory_unless_told_otherwise(server_factory, redis_server, policy):
    """replica-ignore-maxmemory (yes by default): the replica holds every key its primary writes, twice its own
    maxmemory here, deleting none and refusing none; with ``no`` it applies its own policy again."""
    replica = server_factory(maxmemory="4mb", maxmemory_policy=policy)  # persistence off: no disk tier to use
    r = follow(replica, redis_server)
    assert r.config_get("replica-ignore-maxmemory") == {"replica-ignore-maxmemory": "yes"}
    p = redis_server.client()
    value = b"v" * (512 * 1024)
    for i in range(16):
        p.set(f"k{i}", value, ex=1000 if i % 2 else None)
    assert p.wait(1, 10_000) == 1
    until(lambda: r.dbsize() == 16, "the replica to hold every key")
    assert r.get("k0") == value and r.info("stats")["evicted_keys"] == 0
    assert "errorstat_OOM" not in r.info("errorstats")
    assert r.config_set("replica-ignore-maxmemory", "no")
    p.set("one-more", value)
    assert p.wait(1, 10_000) == 1
    if policy == "noeviction":  # the primary's write is refused: the replica now differs from it
        until(lambda: "errorstat_OOM" in r.info("errorstats"), "the replica to refuse its primary's write")
        assert r.dbsize() == 16 and not r.exists("one-more")
    else:
        until(lambda: r.info("stats")["evicted_keys"] > 0, "the replica to evict by its own policy")
        assert r.dbsize() < 17


def test_the_idle_timeout_spares_the_link_to_a_primary_and_a_replica(server):
    """``timeout`` closes idle clients, not replication links (Redis's clientsCronHandleTimeout): the link to a
    primary that sends nothing after its snapshot, and a replica that never acknowledges, both stay up."""
    r = server.client()
    r.config_set("timeout", 1)
    empty = b"REDIS0009\xff" + bytes(8)
    fake = FakePrimary(b"$%d\r\n" % len(empty) + empty, hold=30)
    try:
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)
        time.sleep(3.5)  # three and a half timeouts of silence from the primary
        assert r.info("replication")["master_link_status"] == "up"
        assert fake.psyncs == 1  # never dropped and connected again
    finally:
        r.replicaof("NO", "ONE")
        fake.close()
    address = (server.host, server.port)
    with socket.create_connection(address, timeout=10) as quiet_replica, socket.create_connection(address) as idle:
        quiet_replica.sendall(b"PSYNC ? -1\r\n")
        idle.sendall(b"PING\r\n")
        time.sleep(3.5)
        flags = [c["flags"] for c in r.client_list()]
        assert flags.count("S") == 1, flags  # the replica is still connected
        idle.settimeout(1)
        data = idle.recv(4096)
        assert data.startswith(b"+PONG") and idle.recv(4096) == b""  # the ordinary idle client was closed


@contextlib.contextmanager
def linked_to_fake_primary(server: ServerProcess, offset: int) -> Iterator[tuple[redis.Redis, FakePrimary]]:
    """The server as the replica of a FakePrimary whose empty snapshot ends at ``offset``: linked, and that
    offset acknowledged. Yields a client of the server and the primary; leaves the server a primary again."""
    r = server.client()
    fake = FakePrimary(b"$%d\r\n" % len(EMPTY_RDB) + EMPTY_RDB, hold=60, offset=offset)
    try:
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)
        fake.wait_ack(offset)
        yield r, fake
    finally:
        r.replicaof("NO", "ONE")
        fake.close()


def test_an_open_transaction_is_not_acknowledged_nor_taken_over(server):
    """A MULTI whose EXEC has not come has not reached the keyspace: the replica's ACKs and INFO leave it out (its
    offset stays before the MULTI, as a Redis replica's reploff), and REPLICAOF NO ONE, which drops it, continues
    the primary's history from before it."""
    with linked_to_fake_primary(server, offset=1000) as (r, fake):
        fake.send(["SET", "before", "1"])
        done = 1000 + len(encode("SET", "before", "1"))
        fake.wait_ack(done)
        fake.send(["MULTI"], ["SET", "inside", "1"])
        time.sleep(2.5)  # two of the replica's once-a-second ACKs at least
        assert max(fake.acks()) == done, fake.acks()
        assert r.info("replication")["slave_repl_offset"] == done
        assert r.get("inside") is None and r.get("before") == b"1"
        fake.send(["EXEC"])
        whole = done + len(encode("MULTI") + encode("SET", "inside", "1") + encode("EXEC"))
        fake.wait_ack(whole)
        assert r.get("inside") == b"1"
        fake.send(["MULTI"], ["SET", "cut", "1"])
        time.sleep(0.3)
        r.replicaof("NO", "ONE")
        info = r.info("replication")
        assert (info["master_replid2"], info["second_repl_offset"]) == ("f" * 40, whole + 1)
        assert info["master_repl_offset"] == whole
        assert r.get("cut") is None


def test_replconf_getack_is_answered_with_the_offset_before_it(server):
    """Redis's replica answers REPLCONF GETACK with its offset before the GETACK's own 37 bytes, which count from
    the next ACK on: two GETACKs after a write are answered with the write's offset, then that plus 37."""
    with linked_to_fake_primary(server, offset=500) as (_, fake):
        getack = ["REPLCONF", "GETACK", "*"]
        fake.send(["SET", "k", "v"], getack, getack)
        written = 500 + len(encode("SET", "k", "v"))
        fake.wait_ack(written + len(encode(*getack)))
        assert written in fake.acks() and len(encode(*getack)) == 37
        fake.wait_ack(written + 2 * 37, timeout=5)  # the next ACK counts both


@pytest.mark.kvd_only
@pytest.mark.parametrize("appendfsync", ["always", "everysec", "no", "off"])
def test_a_persistent_replica_s_acks_say_what_its_log_has_fsynced(server_factory, appendfsync):
    """With persistence on, each REPLCONF ACK carries ``FACK <offset>``, the offset up to which the log has fsynced
    the primary's writes (what a Redis 7.2+ primary's WAITAOF counts), never past the ACK's own offset nor going
    back. With appendfsync always or everysec the write is fsynced within about a second and FACK reaches it;
    with no the log is never made to fsync, so FACK stays before the write; without persistence (a Redis
    replica with appendonly no) the ACKs carry no FACK."""
    options = {"persistence": "no"} if appendfsync == "off" else {"persistence": "yes", "appendfsync": appendfsync}
    with linked_to_fake_primary(server_factory(**options), offset=1000) as (_, fake):
        fake.send(["SET", "k", "v"])
        written = 1000 + len(encode("SET", "k", "v"))
        fake.wait_ack(written)
        if appendfsync in ("always", "everysec"):
            fake.wait_fack(written, timeout=5)
        else:
            time.sleep(2.5)  # two of the replica's once-a-second ACKs at least
        facks = fake.facks()
        if appendfsync == "off":
            assert {fack for _, fack in facks} == {None}, facks
            return
        assert all(fack is not None and fack <= ack for ack, fack in facks), facks
        assert [fack for _, fack in facks] == sorted(fack for _, fack in facks), facks
        if appendfsync == "no":
            assert max(fack for _, fack in facks) < written, facks


def test_a_redis_7_0_primary_takes_a_persistent_replica_s_acks(server_factory, redis_server):
    """A persistent kvd replica's ACKs carry FACK, which Debian's Redis 7.0 does not know: its REPLCONF ACK reads
    the offset and returns before the rest, so WAIT counts the replica and the stream flows as without it."""
    replica = server_factory(persistence="yes", appendfsync="everysec")
    p = redis_server.client()
    values = fill(p)
    r = follow(replica, redis_server)
    same(p, r)
    assert r.get(b"above-offload") == values[b"above-offload"][0]
    every_kind_of_change(p, r)
    offset = p.info("replication")["master_repl_offset"]
    until(lambda: p.info("replication")["slave0"]["offset"] == offset, "the replica's ACK of the last write", 5)


def test_a_cut_link_is_connected_again_at_once(server, redis_server):
    """Redis 7 reconnects to its primary as soon as the link drops (replicationHandleMasterDisconnection), not at
    the next once-a-second cron: under a stream of writes a second's wait may outrun the backlog."""
    p = redis_server.client()
    p.set("k", "v")
    r = follow(server, redis_server)
    same(p, r)
    partial = p.info("stats")["sync_partial_ok"]
    started = time.monotonic()
    assert p.client_kill_filter(_type="replica") == 1
    until(lambda: p.info("stats")["sync_partial_ok"] > partial, "the replica to continue", 10)
    assert time.monotonic() - started < 0.8
    p.set("k2", "v2")
    same(p, r)


def test_a_transaction_of_the_primary_with_commands_the_replica_refuses_still_applies_the_rest(server, redis_server):
    """A MULTI/EXEC, or a script (propagated as one), that writes strings and a list: the strings reach the
    replica. (kvd stores strings only: it passes the list's commands over, logged, without failing the EXEC.)"""
    p = redis_server.client()
    r = follow(server, redis_server)
    with p.pipeline(transaction=True) as tx:
        tx.set("s1", "v1").lpush("l1", "x").set("s2", "v2").execute()
    p.eval("redis.call('SET', 's3', 'v3'); redis.call('RPUSH', 'l2', 'y'); redis.call('SET', 's4', 'v4')", 0)
    p.set("after", "1")
    assert p.execute_command("WAIT", 1, 10_000) == 1
    assert r.mget("s1", "s2", "s3", "s4", "after") == [b"v1", b"v2", b"v3", b"v4", b"1"]
    assert r.info("replication")["slave_repl_offset"] == p.info("replication")["master_repl_offset"]


def test_a_snapshot_with_keys_in_other_databases_loads_database_0(server, redis_server):
    """A Redis primary whose dataset uses databases 1 and 5 too: the replica's database 0 is the primary's (kvd,
    which has database 0 only, passes the others over and says so in its log); the sync is not refused."""
    p = redis_server.client()
    p.config_set("repl-diskless-sync-delay", 0)
    p.mset({"a": "1", "b": "2"})
    p1 = redis_server.client(db=1)
    p1.mset({"a": "db1", "only1": "x"})
    p1.rpush("list1", "x")
    redis_server.client(db=5).set("five", "5")
    r = follow(server, redis_server)
    same(p, r)
    assert r.mget("a", "b", "only1", "five") == [b"1", b"2", None, None]
    if server.kind == "kvd":
        logged = " ".join(server.stderr_text().split())  # the log's lines are wrapped
        assert "passed over, kvd has database 0 only: 3 in database 1, 1 in database 5" in logged


def test_writes_to_other_databases_leave_database_0_alone(server, redis_server):
    """A Redis primary's stream names the database of each write with SELECT: writes, a FLUSHDB and a transaction
    in database 1 (its SELECT inside the MULTI too) change nothing in the replica's database 0, and the writes to
    database 0 around them all arrive. (kvd, which has database 0 only, passes the others over, without errors.)"""
    p = redis_server.client()
    r = follow(server, redis_server)
    errors = r.info("stats")["total_error_replies"]
    p.mset({"k": "db0", "keep": "1"})
    p1 = redis_server.client(db=1)
    p1.set("k", "db1")
    p1.set("only1", "x", ex=100)
    p1.rpush("list1", "x")
    p1.delete("keep")
    with p1.pipeline(transaction=True) as tx:
        tx.set("t1", "1").incr("t2").execute()
    p1.flushdb()
    with redis_server.raw() as raw:  # a transaction over both databases: SELECT 1 travels inside the MULTI
        for command in (["MULTI"], ["SET", "both0", "a"], ["SELECT", "1"], ["SET", "both1", "b"], ["EXEC"]):
            raw.command(*command)
    p.set("after", "1")
    same(p, r)
    assert r.mget("k", "keep", "only1", "t1", "both0", "both1", "after") == [b"db0", b"1", None, None, b"a", None, b"1"]
    assert r.info("stats")["total_error_replies"] == errors, r.info("errorstats")


def test_move_and_swapdb_on_the_primary_reach_database_0(server, redis_server):
    """MOVE out of database 0 takes the key from the replica; MOVE into it, and SWAPDB with it, bring data the
    replica's database 0 must now hold (kvd, holding database 0 only, resynchronises fully for those)."""
    p = redis_server.client()
    p.config_set("repl-diskless-sync-delay", 0)
    p.mset({"m": "1", "s": "1"})
    r = follow(server, redis_server)
    p1 = redis_server.client(db=1)
    assert p.move("m", 1)
    same(p, r)
    assert r.get("m") is None and r.get("s") == b"1"
    p1.set("from1", "x")
    assert p1.move("from1", 0)
    until(lambda: r.get("from1") == b"x", "the moved key to reach the replica")
    same(p, r)
    p1.set("one", "1")
    p.swapdb(0, 1)
    until(lambda: set(r.keys("*")) == {b"m", b"one"}, "the swapped database to reach the replica")
    same(p, r)
    p.set("later", "1")
    same(p, r)


@pytest.mark.kvd_only  # kvd passes keys of other types over; a Redis replica holds them
def test_a_rename_or_copy_of_another_type_over_a_string_removes_it(server, redis_server):
    """RENAME, RENAMENX and COPY REPLACE of a list onto a string key: the string is gone on the primary (the key is
    a list now), so the replica, which holds strings only, must not keep it."""
    p = redis_server.client()
    r = follow(server, redis_server)
    p.mset({"s1": "v", "s2": "v", "s3": "v", "keep": "v"})
    p.rpush("l1", "x")
    p.rpush("l2", "x")
    p.rpush("l3", "x")
    p.rename("l1", "s1")
    p.copy("l2", "s2", replace=True)
    p.delete("s3")
    p.renamenx("l3", "s3")
    p.set("mark", "1")
    assert p.execute_command("WAIT", 1, 10_000) == 1
    assert r.mget("s1", "s2", "s3", "keep", "mark") == [None, None, None, b"v", b"1"]


@pytest.mark.kvd_only  # kvd's replica-link.id
def test_a_clean_restart_with_another_database_selected_resynchronises(server_factory, redis_server):
    """The primary's selected database is not saved with its offset: a replica stopped while the stream had
    database 1 selected does not continue (the stream after it would apply to database 1), it resynchronises."""
    replica = server_factory("--persistence", "yes", "--appendfsync", "everysec")
    p = redis_server.client()
    p.set("k", "v")
    r = follow(replica, redis_server)
    redis_server.client(db=1).set("in1", "x")
    same(p, r)
    full = p.info("stats")["sync_full"]
    replica.stop()
    assert not (replica.dir / "replica-link.id").exists()
    redis_server.client(db=1).set("in1-later", "y")
    replica.restart(["--replicaof", f"{redis_server.host} {redis_server.port}"])
    r = replica.client()
    wait_link(r, replica)
    same(p, r)
    assert r.get("in1-later") is None and p.info("stats")["sync_full"] == full + 1


def test_a_lagging_replica_keeps_a_key_its_primary_made_persistent_in_time(server_factory, redis_server):
    """The replica is busy for 0.6 s while the primary writes two keys with a 200 ms deadline and, 100 ms later,
    makes one persistent and gives the other a later deadline. When the replica applies the stream both deadlines
    have passed by its clock, yet it must end as the primary: the primary's commands see keys past their deadline
    on a replica, which only the primary expires (a replica that expired them itself lost both keys for good)."""
    replica = server_factory(enable_debug_command="yes")
    p = redis_server.client()
    r = follow(replica, redis_server)
    busy = threading.Thread(target=lambda: replica.client().execute_command("DEBUG", "SLEEP", "0.6"))
    busy.start()
    time.sleep(0.05)
    p.set("k", "v", px=200)
    p.set("j", "v", px=200)
    time.sleep(0.1)
    p.persist("k")
    p.pexpire("j", 100_000)
    busy.join()
    same(p, r)
    assert r.get("k") == b"v" and r.ttl("k") == -1 and r.get("j") == b"v" and r.ttl("j") > 90


def _rdb_with(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    body = rdb.preamble(len(entries), sum(1 for e in entries if e[2]), [])
    for key, value, expire_at in entries:
        body += rdb.key_header(key, len(value), expire_at) + value
    body += rdb.EOF
    return body + rdb.trailer(crc64_update(body, 0))


def test_keys_past_their_deadline_wait_for_the_primary_s_del(server):
    """As a Redis replica: a key past its deadline (loaded with the snapshot, or written by the stream) is absent
    to clients but kept, without an ``expired`` event, until the primary's DEL (a ``del`` event) or a PERSIST; a
    writable replica expires the keys its own clients gave a deadline; promoted, it expires every key itself."""
    r = server.client()
    r.config_set("notify-keyspace-events", "KEA")
    now = int(time.time() * 1000)
    snapshot = _rdb_with([(b"old", b"v", now - 10_000), (b"live", b"v", 0)])
    fake = FakePrimary(b"$%d\r\n" % len(snapshot) + snapshot, hold=60)
    sub = server.raw()
    try:
        sub.send_command("PSUBSCRIBE", "__keyevent@0__:*")
        sub.read_reply()
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)
        assert (r.get("old"), r.exists("old"), r.ttl("old"), r.keys("*"), r.dbsize()) == (None, 0, -2, [b"live"], 2)
        fake.send(["PERSIST", "old"])  # the primary's stream, applied after the deadline it removes
        until(lambda: r.get("old") == b"v", "PERSIST to reach a key past its deadline")
        assert r.ttl("old") == -1
        fake.send(["SET", "e", "v", "PXAT", int(time.time() * 1000) + 150])
        time.sleep(0.5)
        assert (r.get("e"), r.exists("e"), r.dbsize()) == (None, 0, 3)
        r.config_set("replica-read-only", "no")
        r.set("mine", "1", px=100)  # a deadline the replica's own client set: the replica expires it
        until(lambda: r.dbsize() == 3 and r.get("e") is None, "the writable replica to expire its own key")
        fake.send(["DEL", "e"])
        until(lambda: r.dbsize() == 2, "the primary's DEL")
        fake.send(["SET", "f", "v", "PXAT", int(time.time() * 1000) + 100])
        until(lambda: r.dbsize() == 3, "the last key")
        time.sleep(0.3)
        assert r.dbsize() == 3
        r.replicaof("NO", "ONE")  # a primary now: it expires by its own clock
        until(lambda: r.dbsize() == 2, "the promoted replica to expire the key past its deadline")
        r.publish("__keyevent@0__:~mark", "-")
        events = []
        while (message := parse(sub.read_reply()))[2] != b"__keyevent@0__:~mark":
            events.append((message[2].removeprefix(b"__keyevent@0__:").decode(), message[3].decode()))
        assert ("expired", "e") not in events and ("del", "e") in events, events
        assert ("expired", "mine") in events and ("expired", "f") in events, events
        assert events.index(("expired", "mine")) < events.index(("del", "e")) < events.index(("expired", "f"))
    finally:
        sub.close()
        r.replicaof("NO", "ONE")
        r.config_set("replica-read-only", "yes")
        fake.close()


def test_a_primary_s_function_libraries_neither_stop_the_sync_nor_the_stream(server, redis_server):
    """A Redis 7 primary puts its function libraries in every snapshot, and sends FUNCTION LOAD, DELETE, FLUSH and
    RESTORE down its stream: the replica syncs and follows, and counts no error for them (kvd, which has no
    scripting, passes them over and says so in its log)."""
    p = redis_server.client()
    p.config_set("repl-diskless-sync-delay", 0)
    p.set("before", "1")
    p.function_load("#!lua name=lib1\nredis.register_function('f1', function() return 1 end)")
    r = follow(server, redis_server)
    same(p, r)
    errors = r.info("stats")["total_error_replies"]
    p.function_load("#!lua name=lib2\nredis.register_function('f2', function() return 2 end)")
    dump = p.function_dump()
    p.function_delete("lib2")
    p.function_flush()
    p.function_restore(dump)
    p.set("after", "2")
    same(p, r)
    assert r.mget("before", "after") == [b"1", b"2"]
    assert r.info("stats")["total_error_replies"] == errors, r.info("errorstats")
    if server.kind == "kvd":
        logged = " ".join(server.stderr_text().split())
        assert "passed over, kvd has no scripting: 1 function library" in logged
        assert "kvd has no scripting, and passes FUNCTION and SCRIPT over" in logged
        assert "kvd refused a command from its primary" not in logged


@pytest.mark.kvd_only  # kvd passes keys of other types over; a Redis replica holds them
def test_a_command_that_writes_another_type_over_a_string_removes_it(server, redis_server):
    """Every Redis command that writes a set, sorted set or list over a destination whatever it held (the STORE
    family, GEORADIUS ... STORE, RESTORE of a set's payload, SORT ... STORE), also inside a transaction in its
    turn: the string there is gone on the primary, so the replica, which holds strings only, must not keep it. A
    string such a command only reads stays, and a string written there later arrives."""
    p = redis_server.client()
    r = follow(server, redis_server)
    dests = [f"d{i}" for i in range(1, 14)]
    p.mset({**{d: "v" for d in dests}, "keep": "v", "t1": "v", "t2": "v", "t3": "v"})
    p.sadd("set", "x")
    p.zadd("zset", {"x": 1})
    p.geoadd("geo", (13.361389, 38.115556, "palermo"))
    p.rpush("list", "b", "a")
    assert p.execute_command("WAIT", 1, 10_000) == 1
    errors = r.info("stats")["total_error_replies"]  # kvd refused those four
    p.sunionstore("d1", ["set"])
    p.sinterstore("d2", ["set"])
    p.sdiffstore("d3", ["set"])
    p.zunionstore("d4", ["zset"])
    p.zinterstore("d5", ["zset"])
    p.zdiffstore("d6", ["zset"])
    p.zrangestore("d7", "zset", 0, -1)
    p.geosearchstore("d8", "geo", longitude=13.36, latitude=38.11, radius=100, unit="km")
    p.execute_command("GEORADIUS", "geo", 13.36, 38.11, 100, "km", "COUNT", 1, "STORE", "keep", "STORE", "d9")
    p.execute_command("GEORADIUSBYMEMBER", "geo", "palermo", 100, "km", "STOREDIST", "d10")
    p.restore("d11", 0, p.dump("set"), replace=True)
    p.sort("list", get="keep", alpha=True, store="d12")  # reads the string "keep", writes a list over d12
    p.sunionstore("d13", ["no-such-set"])  # an empty result: the primary deletes the destination
    with p.pipeline(transaction=True) as tx:  # in its turn: after the SET queued before it, before the one after
        tx.set("t1", "new").sunionstore("t1", ["set"]).sunionstore("t2", ["set"]).set("t2", "new").execute()
    with redis_server.raw() as raw:  # in database 1: database 0's t3 stays
        for command in (["MULTI"], ["SELECT", "1"], ["SUNIONSTORE", "t3", "set"], ["EXEC"]):
            raw.command(*command)
    assert p.execute_command("WAIT", 1, 10_000) == 1
    assert r.mget(*dests) == [None] * len(dests)
    assert p.get("keep") == r.get("keep") == b"v"  # GEORADIUS's first STORE: the last one wins
    assert r.mget("t1", "t2", "t3") == [None, b"new", b"v"]
    assert r.info("stats")["total_error_replies"] == errors  # none of them was refused
    p.set("d1", "back")
    assert p.execute_command("WAIT", 1, 10_000) == 1
    assert r.get("d1") == b"back"


@pytest.mark.kvd_only  # compares kvd's table with redis-server's
def test_every_redis_command_that_overwrites_another_type_is_known(redis_server):
    """Redis's key specs flag OW the keys a command writes whatever they held: each such command is either kvd's
    own (it runs as sent) or one the replica turns into a delete (``kvd/replica.py``'s ``_OVERWRITES``)."""
    from kvd.commands import COMMANDS
    from kvd.replica import _OVERWRITES

    with redis_server.raw() as raw:
        table = parse(raw.command("COMMAND"))
    overwriting = set()
    for entry in table:
        for spec in entry[8]:
            flags = spec[spec.index(b"flags") + 1]
            if "OW" in flags:  # simple strings parse to str
                overwriting.add(entry[0].lower())
    assert len(overwriting) > 15
    missing = {name for name in overwriting if name not in COMMANDS and name not in _OVERWRITES}
    assert not missing


def test_a_writable_replica_s_own_writes_delete_keys_past_their_deadline_first(server):
    """As Redis 7.0's lookupKeyWrite on a writable replica: a client's write to a key past its deadline (which the
    primary has not yet deleted) deletes it first, with an ``expired`` event, then writes (SET, APPEND, SETNX), or
    finds it missing (EXPIRE, PERSIST: 0); a DEL deletes it and counts it, with a ``del`` event (Redis's
    dbSyncDelete); reads only hide it."""
    r = server.client()
    r.config_set("notify-keyspace-events", "KEA")
    past = int(time.time() * 1000) - 10_000
    snapshot = _rdb_with([(b"k%d" % i, b"v", past) for i in range(1, 7)])
    fake = FakePrimary(b"$%d\r\n" % len(snapshot) + snapshot, hold=60)
    sub = server.raw()
    try:
        r.config_set("replica-read-only", "no")
        sub.send_command("PSUBSCRIBE", "__keyevent@0__:*")
        sub.read_reply()
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)
        expired = r.info("stats")["expired_keys"]
        assert (r.dbsize(), r.get("k1"), r.exists("k2")) == (6, None, 0)
        assert r.set("k1", "mine")
        assert r.delete("k2") == 1
        assert r.append("k3", "x") == 1 and r.get("k3") == b"x"
        assert r.setnx("k4", "1")
        assert r.expire("k5", 100) is False
        assert r.persist("k6") is False
        assert (r.dbsize(), r.info("stats")["expired_keys"] - expired) == (3, 5)
        r.publish("__keyevent@0__:~mark", "-")
        events = []
        while (message := parse(sub.read_reply()))[2] != b"__keyevent@0__:~mark":
            events.append((message[2].removeprefix(b"__keyevent@0__:").decode(), message[3].decode()))
        assert events == [
            ("expired", "k1"),
            ("set", "k1"),
            ("del", "k2"),
            ("expired", "k3"),
            ("append", "k3"),
            ("expired", "k4"),
            ("set", "k4"),
            ("expired", "k5"),
            ("expired", "k6"),
        ], events
    finally:
        sub.close()
        r.replicaof("NO", "ONE")
        r.config_set("replica-read-only", "yes")
        fake.close()


def test_watch_on_a_replica_sees_deadlines_pass(server):
    """As Redis 7: a watched key whose deadline passes after WATCH fails the EXEC, also on a replica that keeps it
    until its primary's DEL (isWatchedKeyExpired); a key already past its deadline at WATCH does not, and neither
    does the primary's DEL of it (no logical change), but its DEL then a new value does."""
    r = server.client()
    now = int(time.time() * 1000)
    keys = [(b"soon", b"v", now + 1500), (b"gone", b"v", now - 10_000), (b"reborn", b"v", now - 10_000)]
    snapshot = _rdb_with([*keys, (b"plain", b"v", 0)])
    fake = FakePrimary(b"$%d\r\n" % len(snapshot) + snapshot, hold=60)
    pipes = {name: server.client().pipeline() for name in ("soon", "gone", "reborn", "plain")}
    try:
        r.replicaof(fake.host, fake.port)
        wait_link(r, server, timeout=10)
        for name, pipe in pipes.items():
            pipe.watch(name)
        fake.send(["DEL", "gone"], ["DEL", "reborn"], ["SET", "reborn", "new"])
        until(lambda: r.get("reborn") == b"new", "the primary's writes")
        until(lambda: r.get("soon") is None, "the deadline of soon to pass", 10)
        results = {}
        for name, pipe in pipes.items():
            pipe.multi()
            pipe.ping()
            try:
                results[name] = pipe.execute()
            except redis.WatchError:
                results[name] = None
        assert results == {"soon": None, "gone": [True], "reborn": None, "plain": [True]}
    finally:
        for pipe in pipes.values():
            pipe.reset()
        r.replicaof("NO", "ONE")
        fake.close()


@pytest.mark.kvd_only  # kvd's segment log and replica-link.id
def test_a_restarted_replica_keeps_keys_past_their_deadline_for_its_primary(server_factory, redis_server):
    """As a Redis replica's rdbLoad: a persistent replica's recovery keeps the keys past their deadline (hidden from
    clients), since the primary decides. Here the primary made a key persistent while the replica was stopped, and
    the replica restarts after the key's first deadline: the PERSIST it then gets from the primary's backlog finds
    the key, which a recovery that dropped it would have lost for good."""
    replica = server_factory("--persistence", "yes", "--appendfsync", "everysec")
    p = redis_server.client()
    r = follow(replica, redis_server)
    p.set("k", "v", px=4000)
    p.set("j", "v", px=4000)
    deadline = time.monotonic() + 4
    same(p, r)
    partial = p.info("stats")["sync_partial_ok"]
    replica.stop()
    assert time.monotonic() < deadline - 0.5, "too slow to stop before the deadline"
    p.persist("k")
    time.sleep(max(0.0, deadline - time.monotonic()) + 0.5)
    replica.restart(["--replicaof", f"{redis_server.host} {redis_server.port}"])
    r = replica.client()
    wait_link(r, replica)
    assert p.info("stats")["sync_partial_ok"] == partial + 1
    same(p, r)
    assert r.get("k") == b"v" and r.ttl("k") == -1 and r.get("j") is None
