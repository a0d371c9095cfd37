"""Keyspace notifications: the events each command publishes, in Redis's order and with Redis's names
(KVD_TEST_TARGET=redis runs the same script against redis-server 7.0, which is where the expectations come from)."""

from __future__ import annotations

import time

import pytest
from support.raw import RawConnection, parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

# (request, events it publishes as (event, key)); each event comes on __keyspace@0__:<key> and __keyevent@0__:<event>.
SCRIPT = [
    (["SET", "a", "1"], [("new", "a"), ("set", "a")]),
    (["SET", "a", "2", "EX", "100"], [("set", "a"), ("expire", "a")]),
    (["SET", "a", "3", "KEEPTTL"], [("set", "a")]),
    (["SET", "a", "4", "NX"], []),
    (["SETEX", "d", "100", "v"], [("new", "d"), ("set", "d"), ("expire", "d")]),
    (["GETSET", "a", "9"], [("set", "a")]),
    (["GETDEL", "d"], [("del", "d")]),
    (["GETDEL", "nope"], [("keymiss", "nope")]),
    (["GETEX", "a", "EX", "50"], [("expire", "a")]),
    (["GETEX", "a", "PERSIST"], [("persist", "a")]),
    (["MSET", "m1", "1", "m2", "2"], [("new", "m1"), ("set", "m1"), ("new", "m2"), ("set", "m2")]),
    (["APPEND", "a", "x"], [("append", "a")]),
    (["SETRANGE", "a", "1", "zz"], [("setrange", "a")]),
    (["SETRANGE", "empty", "0", ""], []),
    (["INCR", "i"], [("new", "i"), ("incrby", "i")]),
    (["DECRBY", "i", "2"], [("incrby", "i")]),
    (["INCRBYFLOAT", "f", "1.5"], [("new", "f"), ("incrbyfloat", "f")]),
    (["INCR", "a"], []),  # not an integer: nothing changed
    (["DEL", "m1", "nope"], [("del", "m1")]),
    (["EXPIRE", "m2", "100"], [("expire", "m2")]),
    (["PERSIST", "m2"], [("persist", "m2")]),
    (["PERSIST", "m2"], []),
    (["EXPIRE", "m2", "0"], [("del", "m2")]),  # a deadline in the past deletes
    (["SET", "j", "old"], [("new", "j"), ("set", "j")]),
    (["RENAME", "i", "j"], [("new", "j"), ("rename_from", "i"), ("rename_to", "j")]),  # the old j is replaced
    (["RENAMENX", "j", "f"], []),
    (["COPY", "j", "c"], [("new", "c"), ("copy_to", "c")]),
    (["COPY", "j", "c"], []),
    (["COPY", "j", "c", "REPLACE"], [("new", "c"), ("copy_to", "c")]),
    (["TOUCH", "j"], []),
    (["GET", "zz"], [("keymiss", "zz")]),
    (["MGET", "zz", "j"], [("keymiss", "zz")]),
    (["STRLEN", "zz"], [("keymiss", "zz")]),
    (["EXISTS", "zz"], [("keymiss", "zz")]),
    (["TTL", "zz"], [("keymiss", "zz")]),
    (["SETBIT", "b", "7", "1"], [("new", "b"), ("setbit", "b")]),
    (["SETBIT", "b", "7", "1"], []),  # the bit was set already
    (["SETBIT", "b", "100", "0"], [("setbit", "b")]),  # the string grew
    (["BITFIELD", "b", "SET", "u8", "0", "3"], [("setbit", "b")]),
    (["BITFIELD", "b", "GET", "u8", "0"], []),
    (["BITFIELD", "nb", "GET", "u8", "0"], [("keymiss", "nb")]),
    (["BITFIELD", "b", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "1000"], []),
    (["BITOP", "OR", "bo", "b"], [("new", "bo"), ("set", "bo")]),
    (["BITOP", "AND", "bo", "zz"], [("keymiss", "zz"), ("del", "bo")]),
    (["GETBIT", "zz", "0"], [("keymiss", "zz")]),
    (["BITCOUNT", "zz"], [("keymiss", "zz")]),
    (["BITPOS", "zz", "1"], [("keymiss", "zz")]),
    (["FLUSHALL"], []),
]
MARK = b"__keyspace@0__:~mark"


def events_until_mark(sub: RawConnection) -> list[tuple[str, str]]:
    """Pairs (event, key) from the subscriber's messages up to the driver's marker, checking both channels."""
    raw = []
    while True:
        _, _, channel, message = parse(sub.read_reply())
        if channel == MARK:
            break
        raw.append((channel.decode(), message.decode()))
    pairs = []
    for space, event in zip(raw[::2], raw[1::2], strict=True):
        key = space[0].removeprefix("__keyspace@0__:")
        assert space[1] == event[0].removeprefix("__keyevent@0__:") and event[1] == key, (space, event)
        pairs.append((space[1], key))
    return pairs


def subscriber(server) -> RawConnection:
    sub = server.raw()
    sub.send_command("PSUBSCRIBE", "__key*__:*")
    assert parse(sub.read_reply()) == [b"psubscribe", b"__key*__:*", 1]
    return sub


def test_each_command_publishes_redis_events(server_factory):
    srv = server_factory(notify_keyspace_events="KEAnm")
    with srv.raw() as driver, subscriber(srv) as sub:
        for request, expected in SCRIPT:
            driver.command(*request)
            driver.command("PUBLISH", MARK, "-")
            assert events_until_mark(sub) == expected, request


def test_expired_and_evicted_keys_are_announced(server_factory):
    srv = server_factory(notify_keyspace_events="Exe", maxmemory="2mb", maxmemory_policy="allkeys-lru")
    with srv.raw() as driver, subscriber(srv) as sub:
        assert driver.command("SET", "short", "v", "PX", "50") == b"+OK\r\n"
        time.sleep(0.3)  # the active expiry finds it
        driver.command("PUBLISH", "__keyevent@0__:~mark", "-")
        assert parse(sub.read_reply())[2:] == [b"__keyevent@0__:expired", b"short"]
        assert parse(sub.read_reply())[2] == b"__keyevent@0__:~mark"
        value = b"x" * 100_000
        for i in range(60):  # 6 MB into a 2 MB budget without persistence: keys are evicted
            assert driver.command("SET", f"big{i}", value) == b"+OK\r\n"
        stats = parse(driver.command("INFO", "stats")).decode()
        evicted = int(stats.split("evicted_keys:")[1].split()[0])
        assert evicted > 0
        driver.command("PUBLISH", "__keyevent@0__:~mark", "-")
        got = []
        while (m := parse(sub.read_reply()))[2] != b"__keyevent@0__:~mark":
            got.append(m[2:])
        assert len(got) == evicted and all(channel == b"__keyevent@0__:evicted" for channel, _ in got)
        assert len({key for _, key in got}) == evicted


def test_the_setting_is_redis_s(server):
    with server.raw() as c:
        assert parse(c.command("CONFIG", "GET", "notify-keyspace-events")) == [b"notify-keyspace-events", b""]
        assert c.command("CONFIG", "SET", "notify-keyspace-events", "KEg$x") == b"+OK\r\n"
        assert parse(c.command("CONFIG", "GET", "notify-keyspace-events"))[1] == b"g$xKE"
        assert c.command("CONFIG", "SET", "notify-keyspace-events", "KQ").startswith(
            b"-ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events')"
        )
        with subscriber(server) as sub:
            assert c.command("CONFIG", "SET", "notify-keyspace-events", "") == b"+OK\r\n"
            assert c.command("SET", "quiet", "1") == b"+OK\r\n"  # off again: nothing is published
            assert c.command("PUBLISH", MARK, "-") == b":1\r\n"
            assert parse(sub.read_reply())[2] == MARK


def test_config_get_shows_a_and_n_as_redis_does_and_new_keys_are_still_announced(server):
    """Redis 7.0 prints the classes A covers as ``A`` and leaves ``n`` out after it (``keyspaceEventsFlagsToString``),
    though the new-key events stay on: ``AKEn`` reads back as ``AKE`` and ``new`` is still published."""
    with server.raw() as c, subscriber(server) as sub:
        assert c.command("CONFIG", "SET", "notify-keyspace-events", "AKEn") == b"+OK\r\n"
        assert parse(c.command("CONFIG", "GET", "notify-keyspace-events"))[1] == b"AKE"
        assert c.command("SET", "fresh", "1") == b"+OK\r\n"
        c.command("PUBLISH", MARK, "-")
        assert events_until_mark(sub) == [("new", "fresh"), ("set", "fresh")]
        assert c.command("CONFIG", "SET", "notify-keyspace-events", "g$lshzxetdnKE") == b"+OK\r\n"
        assert parse(c.command("CONFIG", "GET", "notify-keyspace-events"))[1] == b"AKE"
        assert c.command("CONFIG", "SET", "notify-keyspace-events", "Kgn") == b"+OK\r\n"
        assert parse(c.command("CONFIG", "GET", "notify-keyspace-events"))[1] == b"gnK"
