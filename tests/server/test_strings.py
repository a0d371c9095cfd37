"""String commands against a real kvd process: every SET option, the GET family, ranges and counters."""

from __future__ import annotations

import os
import random
import time

import pytest
import redis
from support.raw import encode


def test_set_get_roundtrip_binary(server):
    r = server.client()
    value = bytes(range(256)) * 64
    assert r.set(b"bin\x00key", value) is True
    assert r.get(b"bin\x00key") == value
    assert r.get("missing") is None


def test_set_nx_xx(server):
    r = server.client()
    assert r.set("k", "1", nx=True) is True
    assert r.set("k", "2", nx=True) is None
    assert r.get("k") == b"1"
    assert r.set("k", "3", xx=True) is True
    assert r.set("absent", "x", xx=True) is None
    assert r.exists("absent") == 0
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("SET", "k", "v", "NX", "XX")


def test_set_get_option_returns_old_value(server):
    r = server.client()
    assert r.set("k", "old") is True
    assert r.set("k", "new", get=True) == b"old"
    assert r.set("fresh", "v", get=True) is None
    assert r.get("fresh") == b"v"
    # NX + GET (Redis 7): not set, returns the current value
    assert r.set("k", "other", nx=True, get=True) == b"new"
    assert r.get("k") == b"new"


def test_set_expire_options(server):
    r = server.client()
    r.set("ex", "v", ex=100)
    assert 98 <= r.ttl("ex") <= 100
    r.set("px", "v", px=100_000)
    assert 98_000 <= r.pttl("px") <= 100_000
    r.set("exat", "v", exat=int(time.time()) + 50)
    assert 48 <= r.ttl("exat") <= 50
    r.set("pxat", "v", pxat=int(time.time() * 1000) + 50_000)
    assert 48 <= r.ttl("pxat") <= 50
    r.set("keep", "v", ex=100)
    r.set("keep", "v2", keepttl=True)
    assert r.ttl("keep") > 90
    r.set("keep", "v3")  # a plain SET clears the TTL
    assert r.ttl("keep") == -1
    for bad in ("0", "-5"):
        with pytest.raises(redis.ResponseError, match="^invalid expire time in 'set' command$"):
            r.execute_command("SET", "k", "v", "EX", bad)
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range$"):
        r.execute_command("SET", "k", "v", "EX", "ten")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("SET", "k", "v", "EX", "10", "PX", "100")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("SET", "k", "v", "KEEPTTL", "EX", "10")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("SET", "k", "v", "EX")


def test_ttl_expiry_is_never_served(server):
    r = server.client()
    r.set("short", "v", px=50)
    r.set("long", "v", ex=100)
    time.sleep(0.12)
    assert r.get("short") is None
    assert r.exists("short") == 0
    assert r.ttl("short") == -2
    assert r.get("long") == b"v"


def test_active_expiry_removes_unread_keys(server):
    r = server.client()
    for i in range(200):
        r.set(f"t{i}", "v", px=30)
    r.set("stay", "v")
    deadline = time.time() + 5
    while r.dbsize() > 1 and time.time() < deadline:
        time.sleep(0.05)
    assert r.dbsize() == 1  # the background sweep deleted keys nobody read


def test_hz_sets_how_often_the_expiry_sweep_runs(server):
    """The sweep takes at most 2000 due keys a tick: at hz 1, 12 000 keys due at once need six seconds of ticks;
    at hz 100, a tenth of one. (Redis's sweep is bounded by time instead, so this is kvd's alone.)"""
    r = server.client()
    assert r.config_set("hz", 1)
    with r.pipeline(transaction=False) as pipe:
        for i in range(12_000):
            pipe.set(f"due:{i}", "v", px=100)
        pipe.execute()
    time.sleep(1.5)
    swept_at_1 = r.info("stats")["expired_keys"]  # INFO reads no key: only the sweep expires them
    assert swept_at_1 <= 3 * 2000
    assert r.config_set("hz", 100)
    deadline = time.monotonic() + 10
    while r.info("stats")["expired_keys"] < 12_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.info("stats")["expired_keys"] == 12_000 and time.monotonic() < deadline


def test_mget_mset_msetnx(server):
    r = server.client()
    assert r.mset({"a": "1", "b": "2"}) is True
    assert r.mget("a", "nope", "b") == [b"1", None, b"2"]
    assert r.msetnx({"c": "3", "a": "x"}) is False
    assert r.get("c") is None
    assert r.msetnx({"c": "3", "d": "4"}) is True
    with pytest.raises(redis.ResponseError, match="^wrong number of arguments for 'mset' command$"):
        r.execute_command("MSET", "a", "1", "b")


def test_setnx_setex_getset_getdel_getex(server):
    r = server.client()
    assert r.setnx("n", "1") is True
    assert r.setnx("n", "2") is False
    assert r.execute_command("SETEX", "sx", 100, "v") is True  # the command itself; redis-py deprecates setex()
    assert 98 <= r.ttl("sx") <= 100
    assert r.psetex("psx", 100_000, "v") is True
    assert r.getset("n", "9") == b"1"
    assert r.getdel("n") == b"9"
    assert r.exists("n") == 0
    assert r.getdel("n") is None
    r.set("gx", "v")
    assert r.getex("gx", ex=100) == b"v"
    assert r.ttl("gx") > 90
    assert r.getex("gx", persist=True) == b"v"
    assert r.ttl("gx") == -1


def test_strlen_getrange(server):
    r = server.client()
    r.set("s", "This is a string")
    assert r.strlen("s") == 16
    assert r.strlen("nothing") == 0
    assert r.getrange("s", 0, 3) == b"This"
    assert r.getrange("s", -3, -1) == b"ing"
    assert r.getrange("s", 0, -1) == b"This is a string"
    assert r.getrange("s", 10, 100) == b"string"
    assert r.getrange("s", 5, 3) == b""
    assert r.getrange("s", -1, -5) == b""
    assert r.getrange("nothing", 0, 10) == b""


def test_counters_and_append(server):
    r = server.client()
    assert r.incr("c") == 1
    assert r.incrby("c", 10) == 11
    assert r.decr("c") == 10
    assert r.decrby("c", 20) == -10
    r.set("text", "abc")
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range$"):
        r.incr("text")
    assert r.append("text", "def") == 6
    assert r.get("text") == b"abcdef"
    assert r.append("newtext", "x") == 1


def test_large_values_round_trip_and_getrange_view(server):
    r = server.client()
    value = bytes(range(256)) * (4 * 4096)  # 4 MiB
    r.set("big", value)
    assert r.get("big") == value
    assert r.strlen("big") == len(value)
    assert r.getrange("big", 100_000, 100_009) == value[100_000:100_010]
    assert r.mget("big", "big") == [value, value]


@pytest.mark.parametrize("persistence", ["no", "yes"])
def test_repeated_large_sets_land_whole_and_read_back_intact(server_factory, persistence):
    """A stream of same-shape large SETs (kvd/protocol/landing.py lands each in one read), with keys of other
    lengths, other value sizes, small commands and pipelines mixed in; with persistence the replies also wait
    for the log, so landed values and the log barrier interleave."""
    srv = server_factory("--persistence", persistence)
    r = srv.client()
    size = 256 * 1024

    def val(i: int, n: int = size) -> bytes:
        return (i.to_bytes(4, "big") * (n // 4 + 1))[:n]

    expected: dict[bytes, bytes] = {}
    for i in range(40):
        key = b"chunk:%08d" % i if i % 7 else b"c%d" % i  # mostly fixed-length keys, some shorter
        n = size if i % 11 else size + 1
        assert r.set(key, val(i, n)) is True
        expected[key] = val(i, n)
        if i % 5 == 0:
            assert r.get(key) == expected[key]
    pipe = r.pipeline(transaction=False)
    for i in range(40, 60):
        key = b"chunk:%08d" % i
        expected[key] = val(i)
        pipe.set(key, expected[key])
        pipe.strlen(key)
    assert pipe.execute() == [True, size] * 20
    keys = list(expected)
    assert r.mget(keys) == [expected[k] for k in keys]
    assert r.dbsize() == len(expected)


@pytest.mark.kvd_only  # the disk tier
@pytest.mark.parametrize(
    ("request_", "results"),
    [
        (["APPEND", "c", "+"], {b"new", b"new+"}),
        (["INCR", "c"], {b"100", b"101"}),
        (["INCRBYFLOAT", "c", "0.5"], {b"100", b"100.5"}),
        (["SETRANGE", "c", "1", "x"], {b"100", b"1x0"}),
    ],
    ids=["append", "incr", "incrbyfloat", "setrange"],
)
def test_a_write_during_a_cold_read_is_not_lost(server_factory, request_, results):
    """APPEND, INCR, INCRBYFLOAT and SETRANGE read the old value first; when it is on disk, other clients run
    while it is read. A SET that lands then must survive: the result is the SET's value, or the command applied
    to it, never the command applied to the value from before the SET (a lost update, which Redis cannot have)."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    r = srv.client()
    filler = {f"fill{i}": os.urandom(1 << 20) for i in range(8)}
    new = b"new" if request_[0] == "APPEND" else b"100"
    cold_rounds = 0
    with srv.raw() as a, srv.raw() as b:
        for _ in range(30):
            r.set("c", "7")
            r.mset(filler)  # pushes "c" out of RAM: it is the least recently used
            hits = r.info("kvd")["disk_hits"]
            a.send(encode(*request_))
            b.send(encode("SET", "c", new))
            a.read_reply()
            assert b.read_reply() == b"+OK\r\n"
            cold_rounds += r.info("kvd")["disk_hits"] > hits
            assert r.get("c") in results
    assert cold_rounds >= 10  # the command did read "c" from disk


def test_lcs_subsequence_length_and_runs(server):
    r = server.client()
    r.mset({"k1": "ohmytext", "k2": "mynewtext"})
    assert r.lcs("k1", "k2") == b"mytext"
    assert r.lcs("k1", "k2", len=True) == 6
    # RESP2: the map is a flat array (redis-py leaves it so)
    assert r.lcs("k1", "k2", idx=True, minmatchlen=4, withmatchlen=True) == [
        b"matches",
        [[[4, 7], [5, 8], 4]],
        b"len",
        6,
    ]
    assert r.lcs("k1", "missing") == b""
    with pytest.raises(redis.ResponseError, match="^If you want both the length and indexes, please just use IDX.$"):
        r.execute_command("LCS", "k1", "k2", "LEN", "IDX")
    # 8 KiB against 8 KiB: a 256 MB table, filled in C; 9 KiB against 16 KiB passes proto-max-bulk-len's 512 MB
    rng = random.Random(3)
    a, b = (bytes(rng.choice(b"acgt") for _ in range(8192)) for _ in "ab")  # LCS about 0.65 of the length
    r.mset({"a": a, "b": b, "big": os.urandom(16384), "big2": os.urandom(9216)})
    length = r.lcs("a", "b", len=True)
    assert 4000 < length < 8192 and len(r.lcs("a", "b")) == length
    with pytest.raises(redis.ResponseError, match="^Insufficient memory, transient memory for LCS exceeds"):
        r.lcs("big", "big2")
