"""The connector's client against a real server (kvd, or redis-server): one-round-trip prefix look-ups with the
EXISTS fallback, batched loads and saves, and failures that become misses instead of exceptions."""

from __future__ import annotations

import socket
import threading
import time

import redis

from connectors.client import ClientConfig, KvdClient, LoadBuffers
from connectors.testing import Server, free_port, target_kind


def _client(url: str, **kw) -> KvdClient:
    return KvdClient(ClientConfig(url=url, **kw))


def _commands(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}


def test_prefix_len_counts_leading_present_keys(kv_url: str) -> None:
    c = _client(kv_url)
    keys = [f"kvd:t:fp:{i:032x}" for i in range(8)]
    r = c.raw()
    for k in keys[:3] + keys[4:6]:
        r.set(k, b"v")
    assert c.prefix_len(keys) == 3
    assert c.prefix_len(keys[4:]) == 2
    assert c.prefix_len(keys[3:]) == 0
    assert c.prefix_len([]) == 0
    assert c.prefix_len_multi([keys[:3], keys[:2]]) == 2
    assert c.prefix_len_multi([keys, keys[4:6]]) == 2
    c._has_prefixlen = False  # the pipelined-EXISTS path that a server without KVD.PREFIXLEN gets
    assert c.prefix_len_multi([keys[:3], keys[:2]]) == 2
    assert c.prefix_len_multi([keys, keys[4:6]]) == 2
    assert c.prefix_len_multi([keys[3:], keys]) == 0


def test_prefix_len_uses_kvd_command_or_falls_back_to_exists(kv_server: Server, kv_url: str) -> None:
    c = _client(kv_url)
    keys = [f"k{i}" for i in range(5)]
    c.raw().set("k0", b"v")
    assert c.prefix_len(keys) == 1
    if kv_server.kind == "kvd":
        assert c._has_prefixlen is True
    else:
        assert c._has_prefixlen is False  # redis-server: unknown command -> fallback, remembered
    # Forced fallback on any server: pipelined EXISTS in one round trip gives the same answer.
    c._has_prefixlen = False
    assert c.prefix_len(keys) == 1
    c.raw().set("k1", b"v")
    assert c.prefix_len(keys) == 2


def test_prefix_len_is_one_round_trip_on_redis_fallback(kv_server: Server, kv_url: str) -> None:
    # Count what the server sees for one look-up of 16 keys: one PREFIXLEN, or 16 EXISTS in one pipeline.
    c = _client(kv_url)
    keys = [f"k{i}" for i in range(16)]
    for k in keys:
        c.raw().set(k, b"v")
    c.prefix_len(keys)  # learn which path works
    c.raw().config_resetstat()
    assert c.prefix_len(keys) == 16
    calls = _commands(c.raw())
    if c._has_prefixlen:
        assert calls.get("kvd.prefixlen", calls.get("kvd|prefixlen")) == 1
    else:
        assert calls.get("exists") == 16


def test_get_many_and_put_many(kv_url: str) -> None:
    c = _client(kv_url, max_batch_bytes=3000)
    items = [(f"v{i}", memoryview(bytes([i]) * 1000)) for i in range(10)]
    assert c.put_many(items) == (10, 10_000)
    # Already present: nothing is sent again.
    assert c.put_many(items) == (0, 0)
    got = c.get_many([k for k, _ in items] + ["missing"], value_size_hint=1000)
    assert got[:10] == [bytes(v) for _, v in items]
    assert got[10] is None


def test_get_many_into_reused_buffers(kv_url: str) -> None:
    # Values land in the caller's buffers, one per position, across MGET batches; a larger value grows its
    # buffer; a missing key leaves its buffer alone; buffers past keep_bytes are let go when the caller trims.
    c = _client(kv_url, max_batch_bytes=200_000)
    sizes = [70_000, 70_000, 70_000, 70_000, 5]
    items = [(f"in{i}", memoryview(bytes([65 + i]) * n)) for i, n in enumerate(sizes)]
    assert c.put_many(items) == (5, sum(sizes))
    into = LoadBuffers(keep_bytes=10**9)
    keys = [k for k, _ in items]
    got = c.get_many([*keys[:2], "missing", *keys[2:]], value_size_hint=70_000, into=into)
    assert [None if v is None else bytes(v) for v in got] == [
        bytes(items[0][1]),
        bytes(items[1][1]),
        None,
        *(bytes(v) for _, v in items[2:]),
    ]
    assert all(type(v) is memoryview for v in got if v is not None)
    first = into.backing(0)
    assert into.backing(4) is not None and into.nbytes >= 4 * 70_002

    c.raw().set("in0", b"z" * 90_000)  # larger than the buffer it had
    again = c.get_many(keys, value_size_hint=70_000, into=into)
    assert bytes(again[0]) == b"z" * 90_000 and into.backing(0) is not first
    assert into.backing(1) is not None and bytes(again[1]) == bytes(items[1][1])
    assert bytes(again[4]) == b"E" * 5

    small = LoadBuffers(keep_bytes=100_000)
    kept = c.get_many(keys[1:4], value_size_hint=70_000, into=small)
    # Every buffer of the call stays until the caller trims: a load past keep_bytes copies out of all of them.
    assert [bytes(small.backing(i)[:70_000]) for i in range(3)] == [bytes(v) for _, v in items[1:4]]
    small.trim()
    assert small.nbytes == 70_002  # the first buffer only; the others went with the trim
    assert [bytes(v) for v in kept] == [bytes(v) for _, v in items[1:4]]  # and what was returned stays valid
    tiny = LoadBuffers(keep_bytes=1000)  # even the first buffer goes when it alone is past the limit
    assert bytes(c.get_many(keys[1:2], value_size_hint=70_000, into=tiny)[0]) == bytes(items[1][1])
    tiny.trim()
    assert tiny.nbytes == 0


def test_report_is_harmless_everywhere(kv_server: Server, kv_url: str) -> None:
    c = _client(kv_url)
    ok = c.report({"hit_tokens": 5, "zero": 0})
    if kv_server.kind == "kvd":
        assert ok
        assert "hit_tokens" in str(c.raw().execute_command("INFO", "connector"))
    else:
        assert not ok and c._has_report is False
        assert not c.report({"hit_tokens": 1})  # remembered: no more round trips


def test_dead_server_is_a_fast_miss() -> None:
    port = free_port()  # nothing listens here
    c = _client(f"redis://127.0.0.1:{port}", connect_timeout_ms=200, retry_after_s=5)
    t = time.perf_counter()
    assert c.prefix_len(["a", "b"]) == 0
    assert c.get_many(["a"]) == [None]
    assert c.put_many([("a", b"x")]) == (0, 0)
    assert not c.available
    assert time.perf_counter() - t < 2
    # While backing off, calls do not touch the network at all: a server that comes up now sees no connection.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen(8)
        listener.setblocking(False)
        for _ in range(100):
            assert c.prefix_len(["a"]) == 0
            assert c.get_many(["a"]) == [None]
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            conn = None
        assert conn is None, "a call made while backing off connected to the server"


def test_unresponsive_server_times_out_as_a_miss() -> None:
    # A socket that accepts but never answers: the look-up must give up after its timeout.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    conns = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        c = _client(f"redis://127.0.0.1:{port}", timeout_ms=150)
        t = time.perf_counter()
        assert c.prefix_len(["a"]) == 0
        assert time.perf_counter() - t < 1.0
    finally:
        stop.set()
        th.join()
        for s in conns:
            s.close()
        srv.close()


def test_server_restart_recovers_after_backoff(tmp_path) -> None:
    srv = Server(tmp_path, persistence=False).start()
    try:
        c = _client(srv.url, retry_after_s=0.2, connect_timeout_ms=200)
        c.raw().set("a", b"1")
        assert c.prefix_len(["a"]) == 1
        srv.stop()
        assert c.prefix_len(["a"]) == 0
        srv.start()
        c.raw().set("a", b"1")
        time.sleep(0.25)
        assert c.prefix_len(["a"]) == 1
    finally:
        srv.stop()


def test_a_replica_loading_its_primary_s_snapshot_is_a_miss(tmp_path) -> None:
    """While a replica loads a snapshot it holds part of its primary's data and answers -LOADING: every call is a
    miss and the client backs off as from a down server (BusyLoadingError, on the direct-read MGET path too),
    then finds the loaded keys."""
    from support.primary import FakePrimary, small_keys_rdb

    # Redis loads a snapshot from the socket (and answers -LOADING meanwhile) only when told to, and serves
    # clients between every 2 MB it loads unless told otherwise; kvd does both anyway. The snapshot comes in 20
    # pieces, 50 ms apart, so that either load outlasts the client's first calls.
    redis_opts = (
        {"repl_diskless_load": "on-empty-db", "loading_process_events_interval_bytes": "65536"}
        if target_kind() == "redis"
        else {}
    )
    srv = Server(tmp_path, persistence=False, **redis_opts).start()
    keys = 400_000
    snapshot = small_keys_rdb(keys)
    rdb = b"$%d\r\n" % len(snapshot) + snapshot
    step = len(rdb) // 20 + 1
    fake = FakePrimary([rdb[i : i + step] for i in range(0, len(rdb), step)], hold=60)
    try:
        r = srv.client()
        r.replicaof(fake.host, fake.port)
        refused = 0
        deadline = time.monotonic() + 60
        while r.info("replication")["master_link_status"] != "up":
            assert time.monotonic() < deadline
            c = _client(srv.url, retry_after_s=0.05)
            got = c.get_many(["k:0000000"], value_size_hint=1 << 20)  # received in place (_mget_into)
            if not c.available:  # it met -LOADING
                refused += 1
                assert got == [None]
                assert c.prefix_len(["k:0000000"]) == 0 and c.get_many(["k:0000000"]) == [None]
            c.close()
        assert refused > 0
        c = _client(srv.url)
        assert c.get_many(["k:0000000", "k:0399999"], value_size_hint=1 << 20) == [b"value:0000000", b"value:0399999"]
        assert c.prefix_len(["k:0000000", "k:0000001", "missing"]) == 2
    finally:
        fake.close()
        srv.stop()


def test_a_replica_that_refuses_stale_reads_is_a_miss_with_back_off(tmp_path) -> None:
    """replica-serve-stale-data no and a primary that is away: -MASTERDOWN to every read and write. The client
    treats it as a down server (one warning, then misses without a round trip until retry_after_s)."""
    srv = Server(tmp_path, persistence=False).start()
    try:
        r = srv.client()
        r.set("k", b"v")
        r.config_set("replica-serve-stale-data", "no")
        r.replicaof("127.0.0.1", free_port())  # nothing listens there
        c = _client(srv.url, retry_after_s=30)
        assert c.get_many(["k"], value_size_hint=1 << 20) == [None]  # the direct-read MGET path
        assert not c.available
        calls = _commands(r).get("mget", 0)
        assert c.get_many(["k"]) == [None] and c.prefix_len(["k"]) == 0 and c.put_many([("k2", b"x")]) == (0, 0)
        assert _commands(r).get("mget", 0) == calls  # backing off: nothing was sent
        c2 = _client(srv.url)
        assert c2.prefix_len(["k"]) == 0 and not c2.available  # KVD.PREFIXLEN, through redis-py's own parser
    finally:
        srv.stop()
