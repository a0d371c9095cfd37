"""kvd/store/eviction.py and the expiry heap's draws: which key each policy deletes, with stale heap items (keys
whose TTL changed or that are gone) among the live ones."""

from __future__ import annotations

import pytest

from kvd.store.eviction import POLICIES, Policy
from kvd.store.keyspace import Keyspace, OutOfMemory


def _keyspace(policy: str, samples: int = 5) -> Keyspace:
    return Keyspace(maxmemory=0, policy=policy, maxmemory_samples=samples)


def test_policy_flags():
    assert [Policy(p).refuses for p in POLICIES] == [True] * 4 + [False] * 3 + [True]
    assert [Policy(p).lfu for p in POLICIES] == [False, True, False, False, False, True, False, False]
    assert not Policy("noeviction").deletes
    with pytest.raises(ValueError, match="volatile-oldest"):
        Policy("volatile-oldest")


def test_nearest_skips_stale_items_and_drops_them():
    ks = _keyspace("volatile-ttl")
    far = 10**13
    for i in range(5):
        ks.set(b"k%d" % i, b"v", expire_at=far + i)
    ks.set(b"k0", b"v", expire_at=far + 100)  # its first heap item is now stale
    ks.delete(b"k1")  # and this one's
    entries = ks._entries
    assert ks.expiry.nearest(entries).key == b"k2"
    assert len(ks.expiry._heap) == 4  # the two stale items at the top were dropped on the way


def test_sample_returns_distinct_live_entries_and_all_of_a_small_heap():
    ks = _keyspace("volatile-lru")
    for i in range(3):
        ks.set(b"k%d" % i, b"v", expire_at=10**13)
        ks.set(b"k%d" % i, b"v", expire_at=10**13)  # the same deadline twice: two items, one key
    ks.set(b"plain", b"v")
    drawn = ks.expiry.sample(ks._entries, 5)
    assert sorted(e.key for e in drawn) == [b"k0", b"k1", b"k2"]
    for _ in range(20):
        two = ks.expiry.sample(ks._entries, 2)
        assert len(two) == 2 and two[0] is not two[1]


def test_sample_clears_out_stale_items_when_the_draws_meet_only_those():
    ks = _keyspace("volatile-random")
    for i in range(2000):
        ks.set(b"k%d" % i, b"v", expire_at=10**13)
    for i in range(1, 2000):
        ks.set_expire(b"k%d" % i, 0)  # PERSIST: its heap item is stale
    assert ks.expiry.live == 1
    drawn = ks.expiry.sample(ks._entries, 1)
    assert [e.key for e in drawn] == [b"k0"]
    assert len(ks.expiry._heap) <= 1 + 2 * ks.expiry.live + 1024


def test_no_key_with_a_ttl_means_no_victim_and_a_refused_write():
    ks = Keyspace(maxmemory=1 << 20, policy="volatile-lru")
    assert ks.guarded
    value = b"x" * (256 << 10)
    ks.set(b"a", value)
    ks.set(b"b", value)
    ks.set(b"t", value, expire_at=10**13)
    ks.set(b"c", value)  # over the budget: the only key with a TTL goes
    assert ks.lookup(b"t") is None and ks.lookup(b"a") is not None
    assert ks.out_of_memory(ks.request_charge([b"SET", b"d", value]))  # a SET of d would be refused
    assert not ks.out_of_memory(ks.request_charge([b"SET", b"d", b"v"]))  # a small one fits
    with pytest.raises(OutOfMemory):
        ks.check_room([(b"d", value)])
    assert len(ks) == 3  # nothing deleted, nothing written


def test_lru_and_lfu_choose_the_least_used_of_the_sample():
    for policy in ("volatile-lru", "volatile-lfu"):
        ks = _keyspace(policy, samples=64)
        for i in range(8):
            ks.set(b"k%d" % i, b"v", expire_at=10**13)
            ks.set_access(b"k%d" % i, idle=100 - i, freq=10 + i)
        victim = ks._doomed(None)
        assert victim is not None and victim.key == b"k0", policy
