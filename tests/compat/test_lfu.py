"""maxmemory-policy allkeys-lfu: OBJECT FREQ, the counter's growth, RESTORE ... FREQ and redis-cli --hotkeys as
on Redis (every test but the last runs against redis-server too), and what the policy keeps in RAM."""

from __future__ import annotations

import pytest
from support.raw import parse
from support.tools import redis_cli, run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

IDLE_ERROR = (
    b"-ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between "
    b"policies at runtime LRU and LFU data will take some time to adjust.\r\n"
)
FREQ_ERROR = (
    b"-ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching "
    b"between policies at runtime LRU and LFU data will take some time to adjust.\r\n"
)


def test_object_freq_counts_reads_as_redis_does(server):
    with server.raw() as c:
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        assert c.command("OBJECT", "FREQ", "k") == FREQ_ERROR
        assert c.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu") == b"+OK\r\n"
        assert c.command("CONFIG", "SET", "lfu-decay-time", "0") == b"+OK\r\n"  # no decay during the test
        assert c.command("SET", "n", "v") == b"+OK\r\n"
        assert c.command("OBJECT", "FREQ", "n") == b":5\r\n"  # a new key starts at 5 (LFU_INIT_VAL)
        assert c.command("GET", "n") == b"$1\r\nv\r\n"
        assert c.command("OBJECT", "FREQ", "n") == b":6\r\n"  # the first read always counts
        assert c.command("OBJECT", "IDLETIME", "n") == IDLE_ERROR
        assert c.command("OBJECT", "FREQ", "missing") in (b"$-1\r\n", b"_\r\n")
        assert c.command("CONFIG", "SET", "lfu-log-factor", "0") == b"+OK\r\n"  # then every read counts
        for _ in range(10):
            c.command("GET", "n")
        assert c.command("OBJECT", "FREQ", "n") == b":16\r\n"
        assert c.command("CONFIG", "GET", "lfu-log-factor") == b"*2\r\n$14\r\nlfu-log-factor\r\n$1\r\n0\r\n"
        assert c.command("CONFIG", "SET", "lfu-log-factor", "-1").startswith(b"-ERR CONFIG SET failed")
        payload = parse(c.command("DUMP", "n"))
        assert c.command("RESTORE", "r", "0", payload, "FREQ", "100") == b"+OK\r\n"
        assert c.command("OBJECT", "FREQ", "r") == b":100\r\n"
        assert c.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru") == b"+OK\r\n"
        assert c.command("OBJECT", "FREQ", "n") == FREQ_ERROR


def test_redis_cli_hotkeys_names_the_most_read_key(server):
    with server.raw() as c:
        assert c.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu") == b"+OK\r\n"
        assert c.command("CONFIG", "SET", "lfu-log-factor", "0") == b"+OK\r\n"
        assert c.command("CONFIG", "SET", "lfu-decay-time", "0") == b"+OK\r\n"  # no minute may pass mid-test
        for name, reads in (("cold", 0), ("warm", 3), ("hot", 40)):
            c.command("SET", name, "v")
            for _ in range(reads):
                c.command("GET", name)
    out = run([redis_cli(), "-h", server.host, "-p", str(server.port), "--hotkeys"], timeout=30).stdout.decode()
    found = [line for line in out.splitlines() if "hot key found with counter" in line]
    assert found and found[0].endswith('"hot"') and "counter: 45" in found[0], out


@pytest.mark.kvd_only  # which values kvd's RAM tier keeps (Redis samples keys at random)
@pytest.mark.parametrize("policy", ["allkeys-lfu", "allkeys-lru"])
def test_a_popular_value_outlives_a_flood_of_one_off_writes_under_lfu(server_factory, policy):
    """Persistence off, a 2 MiB budget: a key read twenty times, then 1000 new 8 KiB values written and never
    read. Under LRU the popular key is the oldest and goes first; under LFU the newcomers go instead."""
    r = server_factory(maxmemory="2mb", maxmemory_policy=policy, lfu_decay_time=0).client()
    r.set("popular", b"p" * 8192)
    for _ in range(20):
        assert r.get("popular") == b"p" * 8192
    for i in range(1000):
        r.set(f"once:{i}", b"x" * 8192)
    assert r.info("stats")["evicted_keys"] > 500
    assert (r.get("popular") is not None) == (policy == "allkeys-lfu")
    assert r.get("once:999") == b"x" * 8192  # the newest survive either way


@pytest.mark.kvd_only  # kvd's tiers
@pytest.mark.parametrize("policy", ["allkeys-lfu", "allkeys-lru"])
def test_with_the_log_lfu_keeps_the_popular_value_in_ram_and_demotes_the_rest(server_factory, policy):
    """Persistence on: nothing is lost either way, values leave RAM for the disk. Under LFU the popular value is
    still resident after the flood (its read is a RAM hit), under LRU it was demoted (a disk hit)."""
    r = server_factory(persistence=True, maxmemory="2mb", maxmemory_policy=policy, lfu_decay_time=0).client()
    r.set("popular", b"p" * 8192)
    for _ in range(20):
        assert r.get("popular") == b"p" * 8192
    for i in range(1000):
        r.set(f"once:{i}", b"x" * 8192)
    before = r.info("kvd")["disk_hits"]
    assert r.get("popular") == b"p" * 8192 and r.get("once:0") == b"x" * 8192  # nothing lost
    disk_reads = r.info("kvd")["disk_hits"] - before
    assert disk_reads == (1 if policy == "allkeys-lfu" else 2)  # once:0 comes from disk; popular too under LRU
    assert r.info("stats")["evicted_keys"] == 0


def test_restore_idletime_is_what_object_idletime_answers(server):
    """Under an LRU policy RESTORE ... IDLETIME sets the key's idle time (and FREQ is ignored), as in Redis."""
    with server.raw() as c:
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        payload = parse(c.command("DUMP", "k"))
        assert c.command("RESTORE", "idle", "0", payload, "IDLETIME", "1000") == b"+OK\r\n"
        idle = parse(c.command("OBJECT", "IDLETIME", "idle"))
        assert 1000 <= idle <= 1002
        assert c.command("RESTORE", "freq", "0", payload, "FREQ", "7") == b"+OK\r\n"
        assert parse(c.command("OBJECT", "IDLETIME", "freq")) <= 2


def test_touch_counts_as_an_access_under_lfu(server):
    """TOUCH reads the key as Redis's lookupKeyRead does: the counter grows, as for a GET."""
    with server.raw() as c:
        for setting, value in (("maxmemory-policy", "allkeys-lfu"), ("lfu-log-factor", "0"), ("lfu-decay-time", "0")):
            assert c.command("CONFIG", "SET", setting, value) == b"+OK\r\n"
        assert c.command("SET", "t", "v") == b"+OK\r\n"
        assert c.command("TOUCH", "t", "t", "missing") == b":2\r\n"
        assert c.command("OBJECT", "FREQ", "t") == b":7\r\n"


@pytest.mark.kvd_only  # kvd's disk tier
def test_a_read_that_brings_a_value_back_from_disk_counts_under_lfu(server_factory):
    r = server_factory(persistence=True, maxmemory="2mb", maxmemory_policy="allkeys-lfu", lfu_log_factor=0,
                       lfu_decay_time=0).client()  # fmt: skip
    r.set("k", b"k" * 8192)
    for i in range(400):  # never read: k, the oldest of them, leaves RAM first
        r.set(f"once:{i}", b"x" * 8192)
    disk_hits = r.info("kvd")["disk_hits"]
    assert r.get("k") == b"k" * 8192
    assert r.info("kvd")["disk_hits"] == disk_hits + 1  # it came from disk
    assert r.object("freq", "k") == 6  # and that read counted, as a read from RAM does
