"""``maxmemory-policy``: which key is deleted when the RAM tier must give up whole keys, and when writes are refused.

kvd frees RAM in two steps, and the policy governs the second. First, a resident value that the log holds is
*demoted*: it leaves RAM and is served from disk (``kvd/store/ram.py``). That loses nothing, so every policy
allows it, ``noeviction`` included, and it always takes the least recently used value (under the ``-lfu``
policies the least recent one not read since it was written, ``kvd/store/lfu.py``). Only when no value can be
demoted (persistence off, or every value already on disk and the keys' metadata alone over ``maxmemory``) does a
key have to go, and that is Redis's eviction, with Redis's eight policies:

==================  ======================================================================================
``allkeys-lru``     the least recently used key (the RAM tier's exact order)
``allkeys-lfu``     the least recent key not read since it was written (the RAM tier's LFU order)
``allkeys-random``  a key drawn at random
``volatile-lru``    of the keys with a TTL: the least recently used of ``maxmemory-samples`` drawn at random
``volatile-lfu``    of the keys with a TTL: the least frequently used of ``maxmemory-samples`` drawn
``volatile-random`` of the keys with a TTL: one drawn at random
``volatile-ttl``    of the keys with a TTL: the one whose deadline is nearest (exact: the expiry heap's top)
``noeviction``      none
==================  ======================================================================================

Under ``noeviction``, and under a ``volatile-*`` policy once no key has a TTL, a ``denyoom`` command is refused
with ``-OOM`` before it runs while memory would stay over ``maxmemory`` (``Keyspace.out_of_memory``), as Redis
refuses a command when its eviction cannot free enough. What it needs room for is what Redis's memory holds of
it before it runs, its request (``Keyspace.request_charge``): a SET's value, an APPEND's suffix, a SETRANGE's
few bytes whatever its offset. Reads are always served.

Why sampling for ``volatile-lru``/``-lfu``, where ``allkeys-*`` are exact: the RAM tier's one order runs through
every resident key; a second list of only the keys with a TTL would cost every TTL change a relink. Redis samples
for every policy (``maxmemory-samples``, 5 by default; 64 of at most 64 candidates makes it exact), and the expiry
heap already holds exactly the keys with a TTL, so drawing from it costs nothing per write.

Complexity: a victim is O(1) for ``allkeys-lru``, O(1) amortised for ``allkeys-lfu``, O(log n) for the random
policies (SCAN's index) and ``volatile-ttl`` (amortised over the stale heap items it drops), O(samples) for
``volatile-lru``/``-lfu``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .expiry import ExpiryHeap
    from .lru import Entry
    from .ram import RamTier
    from .scan import ScanIndex

# Redis's order, which CONFIG SET's error lists
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


class Policy:
    """What one ``maxmemory-policy`` name means to the keyspace."""

    __slots__ = ("by_ram_order", "deletes", "lfu", "name", "order", "refuses", "volatile")

    def __init__(self, name: str) -> None:
        if name not in POLICIES:
            raise ValueError(f"unknown maxmemory-policy {name!r}")
        self.name = name
        self.volatile = name.startswith("volatile-")
        self.order = name.partition("-")[2]  # lru, lfu, random, ttl; "" for noeviction
        self.lfu = self.order == "lfu"  # reads count accesses (OBJECT FREQ) under both -lfu policies, as in Redis
        self.deletes = name != "noeviction"
        self.by_ram_order = name in ("allkeys-lru", "allkeys-lfu")  # deletes RamTier.victim()
        # Writes may be refused with -OOM: nothing may be deleted, or only keys with a TTL, which may run out.
        self.refuses = not self.deletes or self.volatile

    @property
    def shares_integers(self) -> bool:
        """Whether Redis would share small integer values under this policy with a ``maxmemory`` set: not under
        LRU or LFU ones, whose per-object access data a shared object cannot carry (OBJECT REFCOUNT)."""
        return self.order not in ("lru", "lfu")


def doomed(
    policy: Policy,
    resident: Entry | None,
    ram: RamTier,
    expiry: ExpiryHeap,
    current: dict[bytes, Entry],
    scan: ScanIndex,
    samples: int,
) -> Entry | None:
    """The key to delete next under ``policy``, or None if it allows none. ``resident`` is the RAM tier's own
    victim (``RamTier.victim()``), which the ``allkeys-lru``/``-lfu`` policies delete when it cannot be demoted;
    ``current`` is the keyspace's table, by which stale expiry-heap items are told from live ones."""
    if not policy.deletes:
        return None
    if policy.volatile:
        if policy.order == "ttl":
            return expiry.nearest(current)
        drawn = expiry.sample(current, 1 if policy.order == "random" else samples)
        if not drawn:
            return None
        if policy.order == "lru":
            return min(drawn, key=_last_access)  # the lowest LRU stamp: the longest idle
        if policy.order == "lfu":
            lfu = ram.lfu
            assert lfu is not None  # set_policy turns the counters on with an -lfu policy
            return min(drawn, key=lambda entry: lfu.counter(entry.atime))
        return drawn[0]
    if policy.order == "random":
        return scan.random_entry()
    return resident if resident is not None else ram.oldest_cold()


def _last_access(entry: Entry) -> int:
    return entry.atime
