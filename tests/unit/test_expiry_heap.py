"""kvd/store/expiry.py: the TTL heap stays O(keys with a TTL) however often deadlines change, and rebuilding it
costs O(1) per schedule amortised (a rebuild that kept every stale item made each EXPIRE O(n) once stale items
passed 2 x live + 1024)."""

from __future__ import annotations

import heapq

import pytest

from kvd.store import expiry
from kvd.store.keyspace import Keyspace, now_ms

FAR = 10**13  # a deadline in the year 2286: nothing expires during the test


@pytest.fixture
def heapify_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    heapify = heapq.heapify

    def counting(items: list) -> None:
        calls.append(len(items))
        heapify(items)

    monkeypatch.setattr(expiry.heapq, "heapify", counting)
    return calls


def test_refreshing_one_keys_ttl_leaves_a_bounded_heap(heapify_calls):
    ks = Keyspace(maxmemory=0)
    ks.set(b"other", b"v", expire_at=FAR)
    ks.set(b"k", b"v", expire_at=FAR + 1)
    for i in range(20_000):  # EXPIRE k <a new deadline each time>: the item before goes stale
        ks.set_expire(b"k", FAR + 2 + i)
    assert ks.expiry.live == 2
    assert len(ks.expiry._heap) <= 2 * 2 + expiry.REBUILD_SLACK + 1
    # each rebuild dropped at least REBUILD_SLACK stale items, and saw only the live ones plus those
    assert len(heapify_calls) <= 20_000 // expiry.REBUILD_SLACK + 1
    assert sum(heapify_calls) <= 2 * (2 + 1) * len(heapify_calls)
    assert ks.expiry.nearest(ks._entries).key == b"other"


def test_the_same_deadline_set_again_and_again_is_kept_once(heapify_calls):
    ks = Keyspace(maxmemory=0)
    for _ in range(20_000):  # SET k v PXAT <the same>: every item is live, and all but one are duplicates
        ks.set(b"k", b"v", expire_at=FAR)
    assert len(ks.expiry._heap) <= 2 + expiry.REBUILD_SLACK + 1
    assert len(heapify_calls) <= 20_000 // expiry.REBUILD_SLACK + 1


def test_many_live_keys_rebuild_geometrically_and_stale_ones_go(heapify_calls):
    ks = Keyspace(maxmemory=0)
    n = 50_000
    for i in range(n):
        ks.set(b"k%d" % i, b"v", expire_at=FAR + i)
    assert len(ks.expiry._heap) == n  # nothing stale, nothing dropped
    assert len(heapify_calls) <= 7  # 1024, 3072, 7168, ... : each rebuild doubles the next one's threshold
    for i in range(n):
        ks.set_expire(b"k%d" % i, FAR + n + i)  # every item goes stale once
    assert len(ks.expiry._heap) <= 2 * n + expiry.REBUILD_SLACK + 1
    assert ks.expiry.live == n


def test_average_ttl_of_a_few_keys_is_exact_and_of_many_an_estimate():
    ks = Keyspace(maxmemory=0)
    assert ks.average_ttl() == 0
    ks.set(b"plain", b"v")
    now = now_ms()
    for i in range(40):  # fewer than the sample: every one counts
        ks.set(b"k%d" % i, b"v", expire_at=now + (1_000_000 if i % 2 else 3_000_000))
    assert 1_990_000 < ks.average_ttl() <= 2_000_000
    for i in range(40, 4000):
        ks.set(b"k%d" % i, b"v", expire_at=now + (1_000_000 if i % 2 else 3_000_000))
    for i in range(0, 4000, 3):
        ks.set_expire(b"k%d" % i, now + 2_000_000)  # stale items among the live ones
    estimates = [ks.average_ttl() for _ in range(20)]
    assert all(1_400_000 < e < 2_600_000 for e in estimates)  # 64 draws of 1000 s or 3000 s: sd 125 s
    assert 1_800_000 < sum(estimates) / len(estimates) < 2_200_000
