"""The RAM tier's byte budget and LRU order, with and without the disk tier behind it."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
import redis
from support.tools import redis_cli

MiB = 1 << 20


def _info_kvd(r: redis.Redis) -> dict:
    return r.info("kvd")


@pytest.mark.kvd_only  # kvd's allkeys-lru default and exact LRU
def test_lru_eviction_without_persistence_keeps_recent_keys(server_factory):
    srv = server_factory("--persistence", "no", "--maxmemory", "8mb")
    r = srv.client()
    value = os.urandom(MiB)
    for i in range(6):
        r.set(f"k{i}", value)
    r.get("k0")  # k0 becomes the most recently used
    for i in range(6, 12):
        r.set(f"k{i}", value)
        r.get("k0")
    info = r.info()
    assert info["used_memory"] <= 8 * MiB
    assert info["evicted_keys"] > 0
    assert r.get("k0") == value  # read all along: never the LRU victim
    assert r.get("k1") is None  # untouched since early on: evicted
    assert r.get("k11") == value  # the newest survives


@pytest.mark.kvd_only  # the disk tier
def test_eviction_with_persistence_loses_nothing(server_factory):
    srv = server_factory("--persistence", "yes", "--maxmemory", "8mb")
    r = srv.client()
    values = {f"k{i}": os.urandom(MiB) for i in range(24)}
    for key, value in values.items():
        r.set(key, value)
    info = _info_kvd(r)
    assert info["ram_evictions"] > 0
    assert info["disk_only_keys"] > 0
    assert r.info()["used_memory"] <= 8 * MiB
    for key, value in values.items():  # cold ones come back from disk, byte-identical
        assert r.get(key) == value
    assert _info_kvd(r)["disk_hits"] > 0
    assert r.mget(list(values)) == list(values.values())
    assert r.dbsize() == 24


def test_noeviction_policy_refuses_writes_with_oom(server_factory):
    srv = server_factory("--persistence", "no", "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    r = srv.client()
    value = os.urandom(MiB)
    stored = 0
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(10):
            r.set(f"k{i}", value)
            stored += 1
    assert 1 <= stored < 10
    assert r.get("k0") == value  # nothing was evicted
    assert r.dbsize() == stored


def test_an_mset_refused_for_memory_writes_none_of_its_keys(server_factory):
    """MSET and MSETNX are atomic under noeviction too: a small first key that would fit does not stay behind
    when a later one is refused (kvd once checked the room key by key and left the first ones written)."""
    srv = server_factory("--persistence", "no", "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    r = srv.client()
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(64):
            r.set(f"fill{i}", os.urandom(256 * 1024))
    for command in ("MSET", "MSETNX"):
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            r.execute_command(command, "small", "x", "large", os.urandom(MiB))
        assert r.exists("small", "large") == 0


@pytest.mark.kvd_only  # kvd evicts at once under allkeys-lru
def test_config_set_maxmemory_shrinks_now(server_factory):
    srv = server_factory("--persistence", "no", "--maxmemory", "64mb")
    r = srv.client()
    value = os.urandom(MiB)
    for i in range(20):
        r.set(f"k{i}", value)
    assert r.dbsize() == 20
    assert r.config_set("maxmemory", "5mb") is True
    assert r.config_get("maxmemory") == {"maxmemory": str(5 * MiB)}
    assert r.info()["used_memory"] <= 5 * MiB
    assert r.dbsize() < 20


@pytest.mark.kvd_only  # kvd's buffer pool
def test_config_set_maxmemory_from_unlimited_evicts_and_bounds_the_buffer_pool(server_factory):
    """0 is no limit: a first limit set at run time evicted nothing (only a lower one did), and the pool of
    recycled receive buffers kept the bound it got at start (256 MiB), here 58 MB held against 2 MB."""
    srv = server_factory("--persistence", "no", "--maxmemory", "0")
    r = srv.client()
    for n in range(3):  # overwrites: each replaced value's buffer goes to the pool
        for i in range(10):
            r.set(f"k{i}", os.urandom(500_000 + 1000 * i + n))
    assert r.memory_stats()["kvd.buffer-pool.bytes"] > 2 * MiB
    assert r.config_set("maxmemory", "2mb") is True
    assert r.info("memory")["used_memory"] <= 2 * MiB
    assert r.info("stats")["evicted_keys"] > 0
    assert r.memory_stats()["kvd.buffer-pool.bytes"] <= 2 * MiB // 16
    for i in range(40):
        r.set(f"k{i % 4}", os.urandom(500_000 + i))
    assert r.memory_stats()["kvd.buffer-pool.bytes"] <= 2 * MiB // 16


@pytest.mark.kvd_only  # the disk tier
def test_value_larger_than_ram_tier_does_not_flush_it(server_factory):
    srv = server_factory("--persistence", "yes", "--maxmemory", "8mb")
    r = srv.client()
    small = {f"s{i}": os.urandom(256 * 1024) for i in range(8)}
    r.mset(small)
    huge = os.urandom(20 * MiB)
    r.set("huge", huge)
    assert r.info("kvd")["ram_keys"] >= 8  # the hot set is still in RAM
    assert r.get("huge") == huge  # served from disk
    assert r.mget(list(small)) == list(small.values())


@pytest.mark.parametrize("persistence", ["no", "yes"])
def test_used_memory_tracks_what_small_keys_cost(server_factory, persistence):
    """maxmemory is only a bound if used_memory follows what the process really holds: for many tiny keys the
    per-key charges (kvd/store/ram.py, "Accounting") must stay within 20 % of the RSS they add, with the disk
    tier's per-key location counted when persistence is on."""
    srv = server_factory("--persistence", persistence, "--maxmemory", "1gb")
    r = srv.client()
    used0, rss0 = r.info()["used_memory"], srv.rss_bytes()
    value = b"v" * 16
    n = 300_000
    for first in range(0, n, 10_000):
        pipe = r.pipeline(transaction=False)
        for i in range(first, first + 10_000):
            pipe.set(b"key:%012d" % i, value)
        pipe.execute()
    assert r.dbsize() == n
    used = r.info()["used_memory"] - used0
    rss = srv.rss_bytes() - rss0
    assert 0.8 <= rss / used <= 1.2, f"{rss / n:.0f} B of RSS per key against {used / n:.0f} B charged"


@pytest.mark.kvd_only  # kvd's own accounting and its disk tier
def test_memory_usage_is_the_ram_tier_charge(server_factory):
    """MEMORY USAGE is what the key costs against maxmemory: its bytes, its value's while resident, and a
    fixed overhead; a value demoted to disk leaves only the key's charge. The whole keyspace adds up to
    used_memory, and redis-cli --memkeys finds the biggest key by it."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    r = srv.client()
    r.set("small", "v")
    small = r.memory_usage("small")
    assert 1 + 1 < small < 1000
    r.set("chunk", os.urandom(MiB))
    resident = r.memory_usage("chunk")
    assert MiB < resident < MiB + 1000
    assert r.memory_usage("missing") is None
    assert r.memory_usage("chunk", samples=0) == resident  # SAMPLES parses; a string has nothing to sample
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("MEMORY", "USAGE", "chunk", "SAMPLES", "-1")
    stats = r.memory_stats()
    assert stats["keys.count"] == 2
    assert stats["total.allocated"] == r.info("memory")["used_memory"] == small + resident
    assert stats["dataset.bytes"] == MiB + 1
    r.mset({f"filler{i}": os.urandom(MiB) for i in range(6)})  # pushes "chunk" out of RAM
    assert r.memory_stats()["kvd.cold-keys"] > 0
    assert r.memory_usage("chunk") < 1000  # its bytes are on disk now
    out = subprocess.run(
        [redis_cli(), "-p", str(srv.port), "--memkeys"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert re.search(r"Biggest string found '\"filler\d\"' has 10\d{5} bytes", out), out


@pytest.mark.kvd_only  # the report and help texts are kvd's own
def test_memory_doctor_purge_malloc_stats_and_help(server):
    r = server.client()
    r.set("k", "v")
    assert "RAM tier" in r.execute_command("MEMORY", "DOCTOR").decode()
    assert r.memory_purge() is True
    stats = r.execute_command("MEMORY", "MALLOC-STATS").decode()
    assert "arena:" in stats or stats == "Stats not supported for the current allocator"
    help_lines = [line.decode() for line in r.execute_command("MEMORY", "HELP")]
    assert {"USAGE key [SAMPLES count]", "STATS", "DOCTOR", "PURGE", "MALLOC-STATS"} <= set(help_lines)
    with pytest.raises(redis.ResponseError, match=r"^unknown subcommand 'foo'. Try MEMORY HELP.$"):
        r.execute_command("MEMORY", "foo")


@pytest.mark.kvd_only  # kvd's exact LRU and accounting
def test_rename_evicts_nothing(server_factory):
    """RENAME moves a value; it once charged it to the new key before the old one let go, and a value near
    the budget then evicted unrelated keys (11 of 20 in review)."""
    srv = server_factory("--persistence", "no", "--maxmemory", "2mb")
    r = srv.client()
    for i in range(20):
        r.set(f"small{i}", os.urandom(50 << 10))
    r.set("big", os.urandom(800 << 10))
    assert r.info("stats")["evicted_keys"] == 0
    assert r.rename("big", "big2") is True
    assert r.info("stats")["evicted_keys"] == 0
    assert r.exists(*[f"small{i}" for i in range(20)]) == 20


@pytest.mark.kvd_only  # kvd's LRU is exact (Redis samples), and CLIENT NO-TOUCH is Redis 7.2's
@pytest.mark.parametrize("no_touch", [False, True])
def test_client_no_touch_reads_leave_the_lru_order(server_factory, no_touch):
    """A read makes a value the most recently used, so the next eviction spares it; with CLIENT NO-TOUCH on, a
    read changes nothing and the oldest value goes first. TOUCH still touches."""
    srv = server_factory("--persistence", "no", "--maxmemory", "3mb")
    r = srv.client()
    reader = srv.client()
    value = b"x" * (512 * 1024)
    for i in range(4):
        r.set(f"k{i}", value)
    if no_touch:
        assert reader.execute_command("CLIENT", "NO-TOUCH", "ON") == b"OK"
        assert "T" in reader.client_info()["flags"]
    assert reader.get("k0") == value
    assert reader.mget("k0") == [value]
    for i in range(4, 6):
        r.set(f"k{i}", value)  # five values fit in 3 MiB: the sixth evicts the least recently used
    assert r.exists("k0") == (0 if no_touch else 1)
    assert r.exists("k1") == (1 if no_touch else 0)
    if no_touch:
        reader.touch("k1")  # TOUCH is the exception
        r.set("k6", value)
        assert r.exists("k1") == 1 and r.exists("k2") == 0
        assert reader.execute_command("CLIENT", "NO-EVICT", "ON") == b"OK"
        assert reader.client_info()["flags"] == "eT"  # Redis's letters and order
        reader.execute_command("RESET")
        assert reader.client_info()["flags"] == "N"


@pytest.mark.kvd_only  # the disk tier
@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu"])
def test_touch_of_a_value_on_disk_is_an_access(server_factory, policy):
    """TOUCH resets the idle time (under LFU: adds to the counter) of a key whose value is on disk, as Redis's
    TOUCH does any key's; it only did so for values in RAM. The value stays on disk."""
    srv = server_factory(
        "--persistence", "yes", "--maxmemory", "4mb", "--maxmemory-policy", policy,
        "--lfu-log-factor", "0", "--lfu-decay-time", "0",
    )  # fmt: skip
    r = srv.client()
    r.set("t", "small")
    time.sleep(2.5)
    r.mset({f"fill{i}": bytes([i]) * MiB for i in range(8)})  # "t", the oldest, goes to disk
    cold = r.info("kvd")["disk_only_keys"]
    assert cold >= 1
    if policy == "allkeys-lfu":
        assert r.object("freq", "t") == 5
    else:
        assert r.object("idletime", "t") >= 2
    hits = r.info("kvd")["disk_hits"]
    assert r.touch("t") == 1
    if policy == "allkeys-lfu":
        assert r.object("freq", "t") == 6
    else:
        assert r.object("idletime", "t") <= 1
    assert r.info("kvd")["disk_only_keys"] == cold  # still on disk: nothing was read
    assert r.info("kvd")["disk_hits"] == hits


@pytest.mark.kvd_only  # the disk tier
def test_object_on_values_on_disk(server_factory):
    """A value moved to disk keeps its idle time (a demotion is not an access) and its encoding: a short one is
    read from disk to tell int from embstr, and left there, its idle time as it was (OBJECT ENCODING brought it
    into RAM and reset it); a short one APPEND built stays raw, on disk and back in RAM (it came back embstr)."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb", "--enable-debug-command", "yes")
    r = srv.client()
    r.mset({"small": "12", "word": "hello", "long": "x" * 100})
    r.set("built", "x")
    assert r.append("built", "y") == 2
    time.sleep(2.2)  # the LRU clock is the server's cached one: up to a tick (or a busy loop's delay) behind
    demoted = r.info("kvd")["ram_evictions"]
    r.mset({f"fill{i}": bytes([i]) * (1 << 20) for i in range(8)})  # the four oldest values go to disk
    assert r.info("kvd")["ram_evictions"] >= demoted + 4
    idle = r.object("idletime", "small")
    assert idle >= 2
    cold = r.info("kvd")["disk_only_keys"]
    names = ("small", "word", "long", "built")
    assert [r.object("encoding", k) for k in names] == [b"int", b"embstr", b"raw", b"raw"]
    assert r.execute_command("DEBUG", "OBJECT", "word").split()[3] == b"encoding:embstr"
    assert r.object("idletime", "small") >= idle
    assert r.info("kvd")["disk_only_keys"] == cold  # read, and left on disk
    assert r.mget("small", "built") == [b"12", b"xy"]  # now in RAM
    assert r.info("kvd")["disk_only_keys"] == cold - 2
    assert [r.object("encoding", k) for k in ("small", "built")] == [b"int", b"raw"]


@pytest.mark.kvd_only  # the disk budget
@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru"])
def test_a_value_the_disk_budget_left_in_ram_only_still_leaves_ram(server_factory, policy):
    """A resident key whose record the disk budget drops (here: 600 KB, more than the half segment that is carried
    forward) lives in RAM only. Once it was the least recently used, kvd stopped demoting at it: under
    noeviction every write got -OOM with RAM full of values on disk, under volatile-* keys with a TTL were
    deleted instead. It is now written to the log again as it leaves RAM, so it also survives a restart."""
    srv = server_factory(
        "--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "1mb", "--max-disk", "8mb",
        "--maxmemory-policy", policy,
    )  # fmt: skip
    r = srv.client()
    big = os.urandom(600_000)
    r.set("k0", big)
    for i in range(3):
        r.set(f"ttl{i}", b"t", ex=3600)
    i = 1
    while (srv.dir / "0000000001.seg").exists():  # k0's segment, the oldest: retired while k0 stays resident
        assert i < 400, "the disk budget never retired the first segment"
        r.set(f"k{i}", os.urandom(100_000))
        assert r.get("k0") == big
        assert r.mget("ttl0", "ttl1", "ttl2") == [b"t"] * 3  # read: resident, carried forward, never dropped
        i += 1
        time.sleep(0.005)
    relogged = r.info("kvd").get("ram_evictions_relogged", 0)
    for j in range(1000, 1045):  # k0 is no longer read: it becomes the least recently used and must go to disk
        r.set(f"k{j}", os.urandom(100_000))  # noeviction: -OOM here
    assert r.exists("ttl0", "ttl1", "ttl2") == 3  # volatile-lru deleted them once k0 stopped the demotions
    assert r.info("kvd")["ram_evictions_relogged"] > relogged
    assert r.get("k0") == big  # from disk
    srv.restart()
    assert srv.client().get("k0") == big  # its record is back on disk


@pytest.mark.kvd_only  # the disk tier
@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru"])
def test_a_value_kept_on_disk_only_is_charged_only_its_key(server_factory, policy):
    """A value larger than half the RAM tier is stored on disk only; it used to be charged its whole length
    before it was written, so under noeviction every resident value was demoted and the write refused anyway,
    and under volatile-lru every key with a TTL was deleted first."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "1mb", "--maxmemory-policy", policy)
    r = srv.client()
    small = {f"ttl{i}": os.urandom(1000) for i in range(5)}
    for key, value in small.items():
        r.set(key, value, ex=3600)
    r.set("plain", b"p" * 1000)
    big = os.urandom(2_000_000)
    assert r.set("big", big) is True
    assert r.mset({"mid": os.urandom(600_000), "other": os.urandom(700_000)}) is True  # both on disk only
    assert r.dbsize() == 9
    assert r.info("stats")["evicted_keys"] == 0
    assert r.info("kvd")["ram_evictions"] == 3  # the three large values, none of the small ones
    assert r.get("big") == big
    assert r.mget(list(small)) == list(small.values())


@pytest.mark.kvd_only  # Redis deletes keys with a TTL and then refuses
def test_a_write_refused_for_memory_deletes_no_key_first(server_factory):
    srv = server_factory("--persistence", "no", "--maxmemory", "1mb", "--maxmemory-policy", "volatile-lru")
    r = srv.client()
    for i in range(5):
        r.set(f"ttl{i}", b"t" * 50_000, ex=3600)
    r.set("plain", b"p" * 600_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.set("more", b"m" * 500_000)  # deleting every key with a TTL (250 KB) could not make room for it
    assert r.dbsize() == 6
    assert r.info("stats")["evicted_keys"] == 0
    assert r.set("fits", b"f" * 300_000) is True  # room for this one needs some of them: they go
    assert 1 <= r.info("stats")["evicted_keys"] < 5
    assert r.info("memory")["used_memory"] <= MiB
