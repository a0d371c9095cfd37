"""Replication to a real redis-server: ``REPLICAOF`` kvd, then every kind of change kvd makes reaches the replica,
WAIT counts it, INFO, ROLE and CLIENT LIST show it, and a replica that goes away is dropped and resynchronised.

The tests without ``kvd_only`` pass with redis-server as the primary too (``KVD_TEST_TARGET=redis``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis
from support.replication import follow
from support.server import ServerProcess
from test_rdb_snapshot import fill

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

MiB = 1 << 20


@pytest.fixture
def replica(redis_server: ServerProcess) -> ServerProcess:
    return redis_server


def until(check, what: str, timeout: float = 30) -> None:
    """Poll ``check`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def same(primary, replica) -> None:
    """Every key of the primary is on the replica with the same value and deadline, and no other key."""
    assert primary.execute_command("WAIT", 1, 10_000) == 1
    keys = set(primary.keys("*"))
    assert set(replica.keys("*")) == keys
    for key in keys:
        assert replica.get(key) == primary.get(key), key
        mine, theirs = primary.pttl(key), replica.pttl(key)
        assert (mine == -1) == (theirs == -1) and abs(mine - theirs) < 2000, (key, mine, theirs)


def synced(primary, replica: ServerProcess) -> tuple[redis.Redis, redis.Redis]:
    """``primary`` filled with every kind of value (``fill``), and ``replica`` following it and holding the same:
    a client of each."""
    p = primary.client()
    fill(p)
    follow(replica, primary)
    r = replica.client()
    same(p, r)
    return p, r


def test_every_kind_of_change_reaches_a_redis_replica(server, replica):
    p, r = synced(server, replica)
    every_kind_of_change(p, r)
    assert r.dbsize() == 1


def every_kind_of_change(p, r) -> None:
    """Writes of every kind on the primary ``p`` (whose keys ``fill`` made), each time followed by ``same``."""
    p.set("s", "v")
    p.set("ex", "v", ex=500)
    p.set("px-short", "v", px=150)
    p.incr("counter")
    p.incrby("counter", 41)
    p.incrbyfloat("float", 1.5)
    p.append("s", "-appended")
    p.setrange("s", 1, "X")
    p.setbit("bits", 77, 1)
    p.mset({"m1": "a", "m2": "b", "m3": "c"})
    p.rename("m1", "renamed")
    p.copy("m2", "copied")
    p.delete("m3", "small:1")
    p.getdel("small:2")
    p.getex("small:3", ex=700)
    p.expire("small:4", 900)
    p.persist("ttl")
    p.set("big", os.urandom(5 * MiB))
    with p.pipeline(transaction=True) as tx:
        tx.set("tx1", "1").incr("tx1").delete("small:5").execute()
    time.sleep(0.3)
    assert p.get("px-short") is None  # expired on the primary: its DEL reaches the replica
    same(p, r)
    p.flushall()
    p.set("after-flush", "1")
    same(p, r)


def test_writes_during_the_first_sync_reach_the_replica(server, replica):
    """A writer keeps changing keys while the replica loads 40 MiB: what changed after the snapshot arrives
    after it, in order."""
    p = server.client()
    for i in range(40):
        p.set(b"chunk:%d" % i, os.urandom(MiB))
    stop = threading.Event()

    def writer() -> None:
        w = server.client()
        n = 0
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline and n < 20_000:
            w.set(b"chunk:%d" % (n % 40), b"v%d" % n)
            w.incr("writes")
            if n % 7 == 0:
                w.delete(b"chunk:%d" % ((n * 3) % 40))
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        follow(replica, server)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    same(p, replica.client())
    assert int(p.get("writes")) > 0


def test_info_role_client_list_and_wait_see_the_replica(server, replica):
    p = server.client()
    p.set("k", "v")
    follow(replica, server)
    assert p.execute_command("WAIT", 1, 10_000) == 1
    info = p.info("replication")
    assert info["role"] == "master" and info["connected_slaves"] == 1
    assert info["slave0"]["state"] == "online" and info["slave0"]["port"] == replica.port
    assert info["slave0"]["offset"] <= info["master_repl_offset"]
    role = p.execute_command("ROLE")
    assert (role[0] == b"master" and role[1] == info["master_repl_offset"]) or role[1] > 0
    assert [(ip, int(port)) for ip, port, _ in role[2]] == [(b"127.0.0.1", replica.port)]
    assert any(c["flags"] == "S" for c in p.client_list())
    started = time.monotonic()
    assert p.execute_command("WAIT", 2, 300) == 1  # two asked for, one there: the timeout, then the count
    assert time.monotonic() - started >= 0.25
    assert p.execute_command("WAIT", 0, 0) == 1
    listed = p.execute_command("CLIENT", "LIST", "TYPE", "replica").decode().splitlines()
    assert len(listed) == 1 and " flags=S " in listed[0]
    assert p.execute_command("CLIENT", "LIST", "TYPE", "slave").decode().splitlines() == listed
    normal = p.execute_command("CLIENT", "LIST", "TYPE", "normal").decode().splitlines()
    assert normal and all(" flags=S " not in line for line in normal)
    with pytest.raises(redis.ResponseError, match="^Unknown client type 'primary'$"):
        p.execute_command("CLIENT", "LIST", "TYPE", "primary")
    assert p.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
    follow(replica, server)  # it reconnects by itself: a new full resynchronisation
    same(p, replica.client())


def test_a_replica_that_goes_away_is_dropped_and_resynchronised_when_back(server, replica):
    p = server.client()
    p.set("before", "1")
    follow(replica, server)
    assert p.execute_command("WAIT", 1, 10_000) == 1
    replica.kill9()
    deadline = time.monotonic() + 10
    while p.info("replication")["connected_slaves"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    p.set("while-away", "2")
    replica.start()
    follow(replica, server)
    same(p, replica.client())


@pytest.mark.kvd_only  # Redis has its own limits for replicas (client-output-buffer-limit replica)
def test_a_replica_that_stops_reading_is_dropped_at_the_hard_limit_and_catches_up(server, replica):
    p = server.client()
    follow(replica, server)
    p.config_set("client-output-buffer-soft-limit", 4 * MiB)
    p.config_set("client-output-buffer-hard-limit", 8 * MiB)
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        for i in range(24):
            p.set(b"chunk:%d" % i, os.urandom(MiB))
        deadline = time.monotonic() + 10
        while p.info("replication")["connected_slaves"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert p.info("stats")["client_output_buffer_limit_disconnections"] >= 1
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while p.info("replication")["connected_slaves"] != 1:  # it reconnects by itself and resynchronises
        assert time.monotonic() < deadline
        time.sleep(0.1)
    same(p, replica.client())
    assert "dropping replica" in server.stderr_text()


@pytest.mark.kvd_only  # Redis's snapshot has no cold values to read back from disk
def test_a_replica_gets_values_that_live_only_on_disk(server_factory, replica):
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "4mb")
    p = srv.client()
    for i in range(24):
        p.set(b"chunk:%d" % i, os.urandom(MiB))
    assert p.info("kvd")["disk_only_keys"] >= 16  # most values are read back from the segments for the snapshot
    follow(replica, srv)
    same(p, replica.client())
    for i in range(0, 24, 3):
        p.set(b"chunk:%d" % i, os.urandom(MiB))
    same(p, replica.client())


@pytest.mark.kvd_only  # Redis propagates the commands themselves; kvd their effects
def test_the_stream_carries_effects_one_step_at_a_time(server):
    """What a replica reads after the snapshot: SELECT 0 first, a lone change alone, the changes of one event-loop
    step (an MSET, a RENAME) in one MULTI/EXEC, deadlines as absolute PXAT / PEXPIREAT, an expiry as DEL."""
    from support.raw import parse

    p = server.client()
    with server.raw(timeout=30) as raw:
        assert raw.command("REPLCONF", "listening-port", "1") == b"+OK\r\n"
        raw.send_command("PSYNC", "?", "-1")
        assert raw.recv_until(b"\r\n").startswith(b"+FULLRESYNC ")
        raw.recv_exact(int(raw.recv_until(b"\r\n")[1:-2]))

        def next_command() -> list[bytes]:
            return parse(raw.read_reply())

        p.set("a", "1")
        assert next_command() == [b"SELECT", b"0"]
        assert next_command() == [b"SET", b"a", b"1"]
        p.mset({"b": "2", "c": "3"})
        assert [next_command() for _ in range(4)] == [[b"MULTI"], [b"SET", b"b", b"2"], [b"SET", b"c", b"3"], [b"EXEC"]]
        p.rename("b", "d")
        assert [next_command() for _ in range(4)] == [[b"MULTI"], [b"SET", b"d", b"2"], [b"DEL", b"b"], [b"EXEC"]]
        before = int(time.time() * 1000)
        p.set("e", "5", px=100)
        command = next_command()
        assert command[:4] == [b"SET", b"e", b"5", b"PXAT"] and before + 100 <= int(command[4]) <= before + 2100
        p.expire("a", 100)
        command = next_command()
        assert command[:2] == [b"PEXPIREAT", b"a"] and int(command[2]) >= before + 100_000
        p.persist("a")
        assert next_command() == [b"PERSIST", b"a"]
        time.sleep(0.2)
        assert p.get("e") is None
        assert next_command() == [b"DEL", b"e"]
        p.incr("n")
        assert next_command() == [b"SET", b"n", b"1"]
        p.flushall()
        assert next_command() == [b"FLUSHALL"]
        p.config_set("repl-ping-replica-period", 1)
        assert raw.read_reply(timeout=5) == b"*1\r\n$4\r\nPING\r\n"  # an idle stream still speaks
        raw.send_command("REPLCONF", "ACK", "0")  # a replica's report: never answered
        assert p.info("replication")["connected_slaves"] == 1


@pytest.mark.parametrize("seed", [11, 12])
def test_random_requests_leave_the_replica_equal_to_the_primary(server, replica, seed):
    """The differential test's grammar (every string, key, expiry and bitmap command, MULTI/EXEC, errors), sent
    in pipelines of 1-30 requests so that one event-loop step often makes several changes; every few batches
    the replica must hold exactly the primary's keys, values and deadlines."""
    from support.raw import encode
    from test_differential import Grammar

    follow(replica, server)
    grammar = Grammar(seed)
    p, r = server.client(), replica.client()
    with server.raw(timeout=30) as raw:
        for batch in range(60):
            requests = [grammar.request() for _ in range(grammar.rng.randint(1, 30))]
            requests = [q for q in requests if q[0] != b"FAILOVER"] or [[b"PING"]]  # it would hand the role over
            raw.send(b"".join(encode(*request) for request in requests))
            raw.read_replies(len(requests), timeout=30)
            if batch % 15 == 14:
                same(p, r)
    same(p, r)


def reconnect_after(primary, replica: ServerProcess, change) -> None:
    """Cut the replica's link while it is stopped, make ``change`` meanwhile, let it reconnect, wait until it is
    back in step."""
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        assert primary.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
        change()
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while primary.info("replication")["connected_slaves"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_replica_that_reconnects_continues_from_the_backlog(server, replica):
    p = server.client()
    p.set("before", "1")
    follow(replica, server)
    same(p, replica.client())
    reconnect_after(p, replica, lambda: p.mset({"during": "2", "before": "changed"}) and p.delete("absent"))
    same(p, replica.client())
    stats = p.info("stats")
    # The first PSYNC was refused too: a server made a replica asks to continue its own history (its replid and
    # offset, Redis's replicationCacheMasterUsingMyself), which no primary can.
    assert (stats["sync_full"], stats["sync_partial_ok"], stats["sync_partial_err"]) == (1, 1, 1)
    info = p.info("replication")
    assert info["repl_backlog_active"] == 1 and info["repl_backlog_histlen"] > 0
    assert info["repl_backlog_first_byte_offset"] <= info["master_repl_offset"]
    assert "partial resynchronization" in replica.stderr_text().lower()


def test_a_replica_that_missed_more_than_the_backlog_gets_a_new_snapshot(server, replica):
    p = server.client()
    p.config_set("repl-backlog-size", 64 * 1024)
    follow(replica, server)
    values = {b"chunk:%d" % i: os.urandom(256 * 1024) for i in range(4)}
    reconnect_after(p, replica, lambda: p.mset(values))
    same(p, replica.client())
    stats = p.info("stats")
    assert (stats["sync_full"], stats["sync_partial_ok"], stats["sync_partial_err"]) == (2, 0, 2)


def test_the_backlog_outlives_the_last_replica_for_its_ttl_only(server, replica):
    p = server.client()
    follow(replica, server)
    p.config_set("repl-backlog-ttl", 3)  # seconds: room for the next lines on a loaded machine
    assert replica.client().replicaof("no", "one")  # the replica leaves for good
    deadline = time.monotonic() + 10
    while p.info("replication")["connected_slaves"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    before = p.info("replication")["master_repl_offset"]
    p.set("k", "v")  # while the backlog lives, changes still feed it
    assert p.info("replication")["master_repl_offset"] > before
    deadline = time.monotonic() + 20
    while p.info("replication")["repl_backlog_active"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    before = p.info("replication")["master_repl_offset"]
    p.set("k", "w")  # no replica, no backlog: nothing is recorded any more
    assert p.info("replication")["master_repl_offset"] == before


def wait_for_replica(primary, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while primary.info("replication")["connected_slaves"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.kvd_only  # kvd's segment log and its replication.id
def test_a_clean_restart_keeps_the_history_and_a_crash_does_not(server_factory, replica):
    """After SHUTDOWN the keyspace on disk is the stream's state at its end: the restarted kvd keeps its
    replication id and offset, and the replica continues without a snapshot. After kill -9 the recovered keyspace
    may lack what the replica has, so a new id and a full resynchronisation."""
    srv = server_factory("--persistence", "yes", "--appendfsync", "everysec")
    p = srv.client()
    for i in range(200):
        p.set(b"k%d" % i, b"v%d" % i)
    follow(replica, srv)
    same(p, replica.client())
    replid = p.info("replication")["master_replid"]
    srv.restart()  # SIGTERM: a clean shutdown
    p = srv.client()
    assert p.info("replication")["master_replid"] == replid
    p.set("after-restart", "1")
    wait_for_replica(p)
    same(p, replica.client())
    stats = p.info("stats")
    assert (stats["sync_full"], stats["sync_partial_ok"]) == (0, 1)
    srv.kill9()
    srv.restart()
    p = srv.client()
    assert p.info("replication")["master_replid"] != replid
    wait_for_replica(p)
    same(p, replica.client())
    assert p.info("stats")["sync_full"] == 1


@pytest.mark.kvd_only  # Redis's repl-backlog-size has a floor of 16 KiB; kvd's 0 means no backlog
def test_without_a_backlog_every_reconnection_is_a_full_resync(server, replica):
    p = server.client()
    p.config_set("repl-backlog-size", 0)
    follow(replica, server)
    reconnect_after(p, replica, lambda: p.set("during", "1"))
    same(p, replica.client())
    stats, info = p.info("stats"), p.info("replication")
    assert (stats["sync_full"], stats["sync_partial_ok"]) == (2, 0)
    assert (info["repl_backlog_active"], info["repl_backlog_histlen"]) == (0, 0)


def test_min_replicas_to_write_refuses_writes_without_good_replicas(server, replica):
    """min-replicas-to-write N: writes need N replicas that acknowledged within min-replicas-max-lag seconds;
    reads go on. A stopped replica stops acknowledging, so after the lag writes get -NOREPLICAS, until it is
    back."""
    p = server.client()
    with server.raw() as raw:
        assert raw.command("CONFIG", "SET", "min-replicas-to-write", "1") == b"+OK\r\n"
        assert raw.command("CONFIG", "SET", "min-replicas-max-lag", "2") == b"+OK\r\n"
        assert raw.command("SET", "k", "1") == b"-NOREPLICAS Not enough good replicas to write.\r\n"
        follow(replica, server)
        until(lambda: raw.command("SET", "k", "1") == b"+OK\r\n", "no good replica")  # Redis counts once a second
        assert p.info("replication")["min_slaves_good_slaves"] == 1
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            until(lambda: raw.command("SET", "k", "2") != b"+OK\r\n", "writes still taken")
            assert raw.command("SET", "k", "2") == b"-NOREPLICAS Not enough good replicas to write.\r\n"
            assert raw.command("GET", "k") in (b"$1\r\n1\r\n", b"$1\r\n2\r\n")  # reads are not refused
            assert raw.command("MULTI") == b"+OK\r\n"
            assert raw.command("SET", "k", "3").startswith(b"-NOREPLICAS")
            assert raw.command("EXEC").startswith(b"-EXECABORT")
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        until(lambda: raw.command("SET", "k", "4") == b"+OK\r\n", "the replica did not count again")
        # A transaction queued while the replica acknowledged, run after it stopped: EXEC is checked as a write.
        assert raw.command("MULTI") == b"+OK\r\n"
        assert raw.command("SET", "k", "5") == b"+QUEUED\r\n"
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            until(lambda: p.info("replication")["min_slaves_good_slaves"] == 0, "the stopped replica still counts")
            assert raw.command("EXEC") == (
                b"-EXECABORT Transaction discarded because of: NOREPLICAS Not enough good replicas to write.\r\n"
            )
            assert p.info("replication")["min_slaves_good_slaves"] == 0
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        until(lambda: raw.command("SET", "k", "4") == b"+OK\r\n", "the replica did not count again")
        assert raw.command("CONFIG", "SET", "min-replicas-to-write", "0") == b"+OK\r\n"
    assert "min_slaves_good_slaves" not in p.info("replication")


def test_a_replica_s_announced_address_is_what_the_primary_shows(server, replica):
    """A replica behind NAT (replica-announce-ip / -port) is shown, and named by FAILOVER TO, by the address it
    announces with REPLCONF ip-address and listening-port."""
    rc = replica.client()
    rc.config_set("replica-announce-ip", "10.9.9.9")
    rc.config_set("replica-announce-port", 6390)
    follow(replica, server)
    p = server.client()
    slave = p.info("replication")["slave0"]
    assert (slave["ip"], slave["port"]) == ("10.9.9.9", 6390)
    assert [tuple(x[:2]) for x in p.execute_command("ROLE")[2]] == [(b"10.9.9.9", b"6390")]
    with server.raw() as raw:  # the announced address is the one FAILOVER TO knows it by
        assert raw.command("FAILOVER", "TO", "127.0.0.1", str(replica.port)).startswith(b"-ERR FAILOVER target")


def fake_replica(raw) -> None:
    """Make a raw connection a replica (PSYNC, the snapshot read), as a Redis replica's handshake does."""
    assert raw.command("REPLCONF", "listening-port", "1") == b"+OK\r\n"
    raw.send_command("PSYNC", "?", "-1")
    assert raw.recv_until(b"\r\n").startswith(b"+FULLRESYNC ")
    raw.recv_exact(int(raw.recv_until(b"\r\n")[1:-2]))


@pytest.mark.kvd_only  # WAITAOF came with Redis 7.2; the Debian redis-server is 7.0
def test_waitaof_counts_a_replica_s_fack(server):
    """WAITAOF counts the replicas whose ``REPLCONF ACK <offset> FACK <fsynced>`` covers the writes before it (Redis's
    ``repl_aof_off``): an ACK without FACK (a replica without an AOF, or Redis 7.0's) counts for WAIT only, a FACK
    wakes a WAITAOF blocked on it, and a FACK that goes back, or does not parse, changes nothing."""
    from support.raw import parse

    p = server.client()
    with server.raw(timeout=30) as raw, server.raw() as c:
        fake_replica(raw)
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        offset = p.info("replication")["master_repl_offset"]
        raw.send_command("REPLCONF", "ACK", offset)  # no FACK
        until(lambda: p.info("replication")["slave0"]["offset"] == offset, "the ACK")
        assert c.command("WAIT", "1", "0") == b":1\r\n"
        started = time.monotonic()
        assert parse(c.command("WAITAOF", "0", "1", "300")) == [0, 0]  # the whole timeout
        assert time.monotonic() - started >= 0.25
        c.send_command("WAITAOF", "0", "1", "0")  # for ever, until a FACK covers the write
        raw.send_command("REPLCONF", "ACK", offset, "FACK", offset - 1)
        raw.send_command("REPLCONF", "ACK", offset, "FACK", "nope")
        with pytest.raises(TimeoutError):  # still blocked: neither FACK covers the write
            c.read_reply(timeout=0.3)
        raw.send_command("REPLCONF", "ACK", offset, "FACK", offset)
        assert parse(c.read_reply(timeout=5)) == [0, 1]
        raw.send_command("REPLCONF", "ACK", offset, "FACK", "1")  # going back: ignored
        time.sleep(0.1)
        assert parse(c.command("WAITAOF", "0", "1", "0")) == [0, 1]  # at once
        assert parse(c.command("WAITAOF", "0", "2", "100")) == [0, 1]
        assert c.command("SET", "k", "w") == b"+OK\r\n"  # a write the FACK does not cover
        assert parse(c.command("WAITAOF", "0", "1", "100")) == [0, 0]
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("WAITAOF", "0", "1", "0") == b"+QUEUED\r\n"
        assert parse(c.command("EXEC")) == [[0, 0]]  # never blocks inside a transaction


@pytest.mark.kvd_only  # WAITAOF came with Redis 7.2; the Debian redis-server is 7.0
@pytest.mark.parametrize("persistence", ["yes", "no"])
def test_waitaof_counts_a_kvd_replica_with_persistence_on(server_factory, persistence):
    """A kvd replica with persistence on sends FACK (kvd/replica.py): the primary's WAITAOF counts it once its log
    has fsynced the write (the replica proves that at most once a second). One without persistence sends none:
    WAITAOF answers 0 replicas at its timeout, though WAIT counts it. WAITAOF on the replica is refused."""
    primary = server_factory()
    replica = server_factory(persistence=persistence, appendfsync="everysec")
    follow(replica, primary)
    p = primary.client()
    p.set("k", "v")
    assert p.execute_command("WAIT", 1, 10_000) == 1
    started = time.monotonic()
    local, replicas = p.execute_command("WAITAOF", 0, 1, 3000)
    took = time.monotonic() - started
    assert local == 0  # the primary has no log
    if persistence == "yes":
        assert replicas == 1 and took < 2.5
    else:
        assert replicas == 0 and took >= 2.9
    with pytest.raises(redis.ResponseError, match="^WAITAOF cannot be used with replica instances"):
        replica.client().execute_command("WAITAOF", 0, 0, 0)
