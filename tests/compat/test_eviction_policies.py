"""maxmemory-policy's eight policies as Redis has them: which keys go when memory is full, and when writes are
refused. Every test but the last runs against redis-server too (``KVD_TEST_TARGET=redis``); persistence is off,
so that a value leaving RAM means its key is deleted, as in Redis."""

from __future__ import annotations

import random

import pytest
import redis
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(90)]

POLICIES = (
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
)
VALUE = b"v" * (512 * 1024)
BUDGET = "8mb"  # 16 values of 512 KiB pass it on both servers (Redis counts about 1 MiB of its own)


def test_every_policy_is_accepted_and_a_wrong_one_is_refused(server):
    with server.raw() as c:
        for policy in POLICIES:
            assert c.command("CONFIG", "SET", "maxmemory-policy", policy) == b"+OK\r\n"
            assert parse(c.command("CONFIG", "GET", "maxmemory-policy")) == [b"maxmemory-policy", policy.encode()]
        reply = c.command("CONFIG", "SET", "maxmemory-policy", "volatile-oldest")
        assert reply.startswith(b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy')")
        assert all(policy.encode() in reply for policy in POLICIES), reply
        assert c.command("CONFIG", "SET", "maxmemory-samples", "10") == b"+OK\r\n"
        assert parse(c.command("CONFIG", "GET", "maxmemory-samples")) == [b"maxmemory-samples", b"10"]
        assert c.command("CONFIG", "SET", "maxmemory-samples", "0").startswith(b"-ERR CONFIG SET failed")


@pytest.mark.parametrize("policy", [p for p in POLICIES if p.startswith("volatile-")])
def test_volatile_policies_delete_only_keys_with_a_ttl_then_refuse_writes(server_factory, policy):
    r = server_factory(maxmemory=BUDGET, maxmemory_policy=policy).client()
    for i in range(4):
        r.set(f"keep:{i}", VALUE)
    for i in range(12):
        r.set(f"ttl:{i}", VALUE, ex=1000)
    assert r.info("stats")["evicted_keys"] > 0
    assert r.exists(*(f"keep:{i}" for i in range(4))) == 4  # no key without a TTL went
    assert 0 < len(r.keys("ttl:*")) < 12
    stored = 0
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(64):
            r.set(f"more:{i}", VALUE)
            stored += 1
    assert r.keys("ttl:*") == []  # every key with a TTL went before a write was refused
    assert r.dbsize() == 4 + stored
    assert r.get("keep:0") == VALUE  # reads are still served
    assert r.delete("keep:0") == 1  # and a delete frees room for a write again
    assert r.set("after", VALUE)


def test_noeviction_makes_a_write_find_room_for_what_its_request_brings(server_factory):
    """Redis refuses a command when its memory, the request's arguments included, is over maxmemory: a SET must
    find room for its whole value (an overwrite too: the new value is in memory beside the old one), while
    APPEND, SETRANGE and INCR bring a few bytes whatever the size of the value they change. kvd charged those
    the whole new value and refused them 300 KB below the limit."""
    r = server_factory(maxmemory="64mb", maxmemory_policy="noeviction").client()
    r.set("a", b"x" * 350_000)
    r.set("b", b"y" * 350_000)
    r.set("n", "1")
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 300_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.set("a", b"z" * 350_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.set("c", b"z" * 350_000)
    assert r.setrange("a", 0, "!") == 350_000
    assert r.incr("n") == 2
    assert r.append("a", "!") == 350_001  # (Redis's string may then double its allocation, so nothing follows)
    assert r.get("a") == b"!" + b"x" * 349_999 + b"!"


def test_volatile_ttl_deletes_the_nearest_deadlines_first(server_factory):
    # 64 samples: Redis then sees every key with a TTL, and its choice is exact, as kvd's always is
    r = server_factory(maxmemory=BUDGET, maxmemory_policy="volatile-ttl", maxmemory_samples=64).client()
    order = list(range(10))
    random.Random(5).shuffle(order)
    for i in order:  # written in an order unrelated to their deadlines
        r.set(f"ttl:{i}", VALUE, ex=1000 * (i + 1))
    for i in range(8):
        r.set(f"keep:{i}", VALUE)
    survivors = sorted(int(key.split(b":")[1]) for key in r.keys("ttl:*"))
    assert 0 < len(survivors) < 10
    assert survivors == list(range(10 - len(survivors), 10))  # the furthest deadlines stayed


@pytest.mark.parametrize(("policy", "setting"), [("volatile-lru", "IDLETIME"), ("volatile-lfu", "FREQ")])
def test_volatile_lru_and_lfu_delete_the_least_used_keys_with_a_ttl(server_factory, policy, setting):
    """RESTORE's IDLETIME or FREQ gives each key a known history: key i was used the most recently (LRU) or the
    most often (LFU) the higher i is, and the least used ones go first."""
    r = server_factory(maxmemory=BUDGET, maxmemory_policy=policy, maxmemory_samples=64, lfu_decay_time=0).client()
    r.set("template", VALUE)
    payload = r.dump("template")
    r.delete("template")
    order = list(range(10))
    random.Random(7).shuffle(order)
    for i in order:
        used = 10_000 - 1000 * i if setting == "IDLETIME" else 20 * (i + 1)
        assert r.execute_command("RESTORE", f"ttl:{i}", 10_000_000, payload, setting, used)
    for i in range(8):
        r.set(f"keep:{i}", VALUE)
    survivors = sorted(int(key.split(b":")[1]) for key in r.keys("ttl:*"))
    assert 0 < len(survivors) < 10
    assert survivors == list(range(10 - len(survivors), 10))  # the most recently / most often used stayed
    if policy == "volatile-lfu":  # both -lfu policies count accesses
        assert r.object("freq", "ttl:9") == 200
    else:
        assert r.object("idletime", "ttl:9") >= 1000


def test_allkeys_random_deletes_any_key_and_never_refuses_a_write(server_factory):
    r = server_factory(maxmemory=BUDGET, maxmemory_policy="allkeys-random").client()
    written = 60
    for i in range(written):
        assert r.set(f"k:{i:02}", VALUE, ex=1000 if i % 2 else None)
    kept = sorted(int(key.split(b":")[1]) for key in r.keys("k:*"))
    assert r.info("stats")["evicted_keys"] == written - len(kept) > 0
    # LRU would have kept exactly the newest ones; at random that happens about once in C(60, len(kept))
    assert kept != list(range(written - len(kept), written))
    assert any(i % 2 == 0 for i in range(written) if i not in kept)  # keys without a TTL went too


@pytest.mark.parametrize(
    ("policy", "shared"),
    [("allkeys-random", True), ("volatile-ttl", True), ("noeviction", True), ("volatile-lru", False),
     ("allkeys-lfu", False)],
)  # fmt: skip
def test_small_integers_are_shared_unless_an_lru_or_lfu_policy_has_a_limit(server_factory, policy, shared):
    r = server_factory(maxmemory="64mb", maxmemory_policy=policy).client()
    r.set("n", "42")
    assert r.object("refcount", "n") == (2147483647 if shared else 1)


@pytest.mark.kvd_only  # kvd's disk tier
@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-ttl", "allkeys-random", "noeviction"])
def test_with_the_log_values_leave_ram_for_the_disk_under_every_policy(server_factory, policy):
    """Persistence on: a value leaving RAM stays on disk, which every policy allows; no key is deleted and no
    write refused while the keys' metadata fits."""
    r = server_factory(persistence=True, maxmemory=BUDGET, maxmemory_policy=policy).client()
    values = {f"k:{i}": random.Random(i).randbytes(512 * 1024) for i in range(40)}
    for key, value in values.items():
        r.set(key, value)
    assert r.info("stats")["evicted_keys"] == 0
    assert r.info("kvd")["ram_evictions"] > 0  # values demoted to the disk tier
    assert r.mget(list(values)) == list(values.values())
