"""Which commands count as an access to a key, as Redis's look-ups do: OBJECT IDLETIME under an LRU policy and
OBJECT FREQ under an LFU one (``lfu-log-factor 0``: every access adds one) after each command, against
redis-server too. Writes look the key up (Redis's ``lookupKeyWrite``) and count, as reads do; an overwrite carries
the counter over; EXISTS, TYPE, TTL and OBJECT do not count; a copy or a restored key starts anew."""

from __future__ import annotations

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

# command, whether it makes "k" (or RENAME's "k2") the most recent (None: the key is gone), its LFU counter after
# it from 5 (Redis 7.0's answers)
CASES = [
    ("SET k new", True, 6),
    ("SET k new KEEPTTL", True, 6),
    ("APPEND k x", True, 6),
    ("SETRANGE k 1 x", True, 6),
    ("EXPIRE k 100", True, 6),
    ("PERSIST k", True, 6),
    ("GETSET k n", True, 7),
    ("SETNX k n", True, 6),
    ("GETDEL k", None, None),
    ("GETEX k EX 100", True, 6),
    ("STRLEN k", True, 6),
    ("EXISTS k", False, 5),
    ("TYPE k", False, 5),
    ("TTL k", False, 5),
    ("DUMP k", True, 6),
    ("SETBIT k 1 1", True, 6),
    ("GETRANGE k 0 1", True, 6),
    ("MSET k n", True, 6),
    ("COPY k k2", True, 6),
    ("RENAME k k2", True, 6),
    ("INCR k", True, 6),
    ("INCRBY k 2", True, 6),
    ("DECR k", True, 6),
    ("INCRBYFLOAT k 1.5", True, 6),
    ("GET k", True, 6),
    ("MGET k", True, 6),
    ("SET k n NX", True, 6),
    ("SET k n XX", True, 6),
    ("SET k n EX 100", True, 6),
    ("MSETNX k n", True, 6),
    ("BITCOUNT k", True, 6),
    ("GETBIT k 1", True, 6),
    ("BITPOS k 1", True, 6),
    ("BITFIELD k GET u8 0", True, 6),
    ("SUBSTR k 0 1", True, 6),
    ("LCS k k", True, 7),
    ("EXPIRETIME k", False, 5),
    ("PTTL k", False, 5),
    ("TOUCH k", True, 6),
    ("UNLINK k", None, None),
    ("DEL k", None, None),
    ("SORT k", True, 6),
    ("RENAMENX k k2", None, None),
    ("SETEX k 100 v", True, 6),
    ("PSETEX k 100000 v", True, 6),
    ("PEXPIRE k 100000", True, 6),
    ("EXPIRE k 100 NX", True, 6),
    ("OBJECT FREQ k", False, 5),
    ("COPY k k2 REPLACE", True, 6),
    ("OBJECT ENCODING k", False, 5),
    ("SET k new GET", True, 7),
    ("PEXPIREAT k 99999999999999", True, 6),
]


@pytest.mark.parametrize(("command", "touched", "freq"), CASES, ids=[case[0] for case in CASES])
def test_what_counts_as_an_access(server, command, touched, freq):
    argv = command.split()
    key = "k2" if argv[0] == "RENAME" else "k"
    with server.raw() as c:
        assert c.command("SET", "template", "12") == b"+OK\r\n"
        payload = parse(c.command("DUMP", "template"))
        assert c.command("RESTORE", "k", "0", payload, "IDLETIME", "1000") == b"+OK\r\n"
        c.command(*argv)
        idle = parse(c.command("OBJECT", "IDLETIME", key))
        for setting, value in (("maxmemory-policy", "allkeys-lfu"), ("lfu-decay-time", "0"), ("lfu-log-factor", "0")):
            assert c.command("CONFIG", "SET", setting, value) == b"+OK\r\n"
        c.command("DEL", "k", "k2")
        assert c.command("RESTORE", "k", "0", payload, "FREQ", "5") == b"+OK\r\n"
        c.command(*argv)
        assert parse(c.command("OBJECT", "FREQ", key)) == freq
    if touched is None:
        assert idle is None
    else:
        assert (idle <= 2) if touched else (idle >= 1000), idle


def test_a_copy_and_a_restored_key_start_a_new_history(server):
    with server.raw() as c:
        for setting, value in (("maxmemory-policy", "allkeys-lfu"), ("lfu-decay-time", "0"), ("lfu-log-factor", "0")):
            assert c.command("CONFIG", "SET", setting, value) == b"+OK\r\n"
        assert c.command("SET", "src", "v") == b"+OK\r\n"
        payload = parse(c.command("DUMP", "src"))
        assert c.command("RESTORE", "dst", "0", payload, "FREQ", "100") == b"+OK\r\n"
        assert c.command("RESTORE", "src", "0", payload, "REPLACE", "FREQ", "50") == b"+OK\r\n"
        assert c.command("COPY", "src", "dst", "REPLACE") == b":1\r\n"
        assert parse(c.command("OBJECT", "FREQ", "src")) == 51  # the copy read its source
        assert parse(c.command("OBJECT", "FREQ", "dst")) == 5  # and made a new object
        assert c.command("RESTORE", "dst", "0", payload, "REPLACE") == b"+OK\r\n"
        assert parse(c.command("OBJECT", "FREQ", "dst")) == 5
        assert c.command("RENAME", "src", "moved") == b"+OK\r\n"
        assert parse(c.command("OBJECT", "FREQ", "moved")) == 52  # the object itself moves, and was read


@pytest.mark.kvd_only  # CLIENT NO-TOUCH is Redis 7.2's; Debian's redis-server is 7.0
def test_under_client_no_touch_a_write_counts_no_access_either(server):
    """Redis 7.2 makes every look-up of a NO-TOUCH client untouching, a write's too: an overwrite keeps the
    counter as it was (it still carries over), where without NO-TOUCH it adds one."""
    with server.raw() as c:
        for setting, value in (("maxmemory-policy", "allkeys-lfu"), ("lfu-decay-time", "0"), ("lfu-log-factor", "0")):
            assert c.command("CONFIG", "SET", setting, value) == b"+OK\r\n"
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        assert c.command("SET", "k", "w") == b"+OK\r\n"
        assert parse(c.command("OBJECT", "FREQ", "k")) == 6
        assert c.command("CLIENT", "NO-TOUCH", "ON") == b"+OK\r\n"
        assert c.command("SET", "k", "x") == b"+OK\r\n"
        assert c.command("EXPIRE", "k", "100") == b":1\r\n"
        assert parse(c.command("OBJECT", "FREQ", "k")) == 6
        assert c.command("CLIENT", "NO-TOUCH", "OFF") == b"+OK\r\n"
        assert c.command("SET", "k", "y") == b"+OK\r\n"
        assert parse(c.command("OBJECT", "FREQ", "k")) == 7
