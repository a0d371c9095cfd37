"""The RAM tier: an exact LRU over resident values, with a byte budget.

Every key's metadata always lives in RAM (like Redis Flex, Dragonfly tiering and ElastiCache data tiering: a
look-up never touches the disk). What the tier decides is which *values* stay resident. Two lists order the
entries (``kvd/store/lru.py``, linked through the entries themselves): ``hot`` (value in RAM, least recently
used first) and ``cold`` (value only on disk, oldest demotion first). Reads move an entry to the end of
``hot``; eviction takes from the front.

Exact rather than sampled LRU: Redis samples because its dict has no order and it cannot afford a linked list
per key in C memory terms. Here the links are two pointers in an object every key has anyway, a move to the
end is O(1), and the hit rate is the best an LRU can get.

Accounting. ``used`` counts, for every key, its length plus ``KEY_OVERHEAD`` (the Python objects that carry it:
the Entry with its LRU links, the dict slot, the SCAN index slot) plus, with persistence on,
``LOCATION_OVERHEAD`` (its record's ``Location``), and for every resident value its length plus
``VALUE_OVERHEAD``. Without persistence their sum, 322 bytes, is close to what small keys really cost the
process: a million 16-byte keys with 16-byte values, written by redis-py in pipelines of 10 000, added 328-342
bytes of RSS per key (about 300 beyond the payload), and 463-468 with persistence on (2026-11-23; 426-453 and
560 while the LRU order was an ``OrderedDict`` and SCAN's index a ``SortedDict``). The figure moves by a few
percent with heap fragmentation left by the load. So ``maxmemory`` bounds what the process holds within about
5 % for tiny values (``test_used_memory_tracks_what_small_keys_cost`` holds it to 20 %), and exactly for the
large values a KV cache stores.

Under the ``-lfu`` maxmemory policies the lists keep their order, and the victim is the least recent value not
read since it was written; read ones met on the way go round to the recent end (``kvd/store/lfu.py``).

Complexity: admit/release/demote O(1); eviction O(1) per victim (amortised, under LFU); clear O(n).
"""

from __future__ import annotations

import time
from typing import Any

from .lfu import LfuCounter, LfuOrder, least_frequent
from .lru import Entry, LruList

KEY_OVERHEAD = 258  # 250, and 8 since the Entry carries its LRU clock stamp (OBJECT IDLETIME)
LOCATION_OVERHEAD = 100  # a Location (a 4-field tuple, 72 bytes, and its offset, 32) for every persisted key
VALUE_OVERHEAD = 64


class RamTier:
    __slots__ = ("budget", "cold", "hot", "key_overhead", "lfu", "resident_bytes", "used")

    def __init__(self, budget: int, persisted: bool = False) -> None:
        self.budget = budget  # 0 = unlimited
        self.key_overhead = KEY_OVERHEAD + (LOCATION_OVERHEAD if persisted else 0)
        self.hot = LruList()  # value resident, least recently used first
        self.cold = LruList()  # value on disk only, oldest demotion first
        self.used = 0
        self.resident_bytes = 0  # value bytes only, for INFO
        self.lfu: LfuCounter | None = None  # under an -lfu policy: entries' atime holds frequencies (kvd/store/lfu.py)

    def set_lfu(self, lfu: LfuCounter | None) -> None:
        """Choose victims by frequency (``lfu``) or by recency (None). The lists change class in place: the same
        links, but linking no longer stamps ``atime``, which now holds each entry's frequency."""
        self.lfu = lfu
        order = LfuOrder if lfu is not None else LruList
        self.hot.__class__ = self.cold.__class__ = order
        if lfu is not None:
            lfu.set_clock(time.time())

    def key_charge(self, key: bytes) -> int:
        return len(key) + self.key_overhead

    @staticmethod
    def value_charge(value: Any) -> int:
        return len(value) + VALUE_OVERHEAD

    @property
    def overhead(self) -> int:
        """What is accounted beyond the values' bytes: keys and the fixed charges per entry and value."""
        return self.used - self.resident_bytes

    def over_budget(self) -> bool:
        return self.budget > 0 and self.used > self.budget

    def add_key(self, key: bytes) -> None:
        self.used += self.key_charge(key)

    def add_keys(self, keys: list[bytes]) -> None:
        self.used += sum(map(len, keys)) + len(keys) * self.key_overhead

    def drop_key(self, key: bytes) -> None:
        self.used -= self.key_charge(key)

    def admit(self, entry: Entry) -> None:
        """``entry.value`` became resident: a new write (on no list) or a promotion (on ``cold``)."""
        if entry.prev is not None:
            self.cold.remove(entry)
        elif self.lfu is not None:
            self.lfu.stamp_new(entry)
        self.hot.append(entry)
        n = len(entry.value)  # type: ignore[arg-type]
        self.used += n + VALUE_OVERHEAD
        self.resident_bytes += n

    def add_cold(self, entry: Entry) -> None:
        """A new entry whose value lives only on disk."""
        if self.lfu is not None:
            self.lfu.stamp_new(entry)
        self.cold.append(entry)

    def replace(self, entry: Entry, delta: int) -> None:
        """A resident value was overwritten in place, ``delta`` bytes longer: it becomes the most recent."""
        self.hot.move_to_end(entry)
        self.used += delta
        self.resident_bytes += delta

    def release(self, entry: Entry) -> None:
        """Forget an entry (deleted, expired or overwritten); its key's charge must be dropped by the caller."""
        if entry.prev is None:
            return
        value = entry.value
        if value is not None:
            self.hot.remove(entry)
            n = len(value)
            self.used -= n + VALUE_OVERHEAD
            self.resident_bytes -= n
        else:
            self.cold.remove(entry)

    def demote(self, entry: Entry) -> None:
        """Drop a resident value that is safe on disk; the key stays, cold (and as idle as it was)."""
        atime = entry.atime
        self.release(entry)
        entry.value = None
        self.cold.append(entry)
        entry.atime = atime

    def set_clock(self, now: int) -> None:
        """The LRU clock in whole seconds, stamped on entries as they are written or read (OBJECT IDLETIME), and
        under LFU the minute its counters decay by (Redis's, from the wall clock)."""
        self.hot.now = self.cold.now = now
        if self.lfu is not None:
            self.lfu.set_clock(time.time())

    @property
    def clock(self) -> int:
        return self.hot.now

    def victim(self) -> Entry | None:
        """The resident value to leave RAM first: the least recently used, or under LFU the least recent one not
        read since it was written (``lfu.least_frequent``)."""
        if self.lfu is not None:
            return least_frequent(self.hot, self.lfu)
        return self.hot.oldest()

    def oldest_cold(self) -> Entry | None:
        return self.cold.oldest()

    def clear(self) -> None:
        self.hot.clear()
        self.cold.clear()
        self.used = 0
        self.resident_bytes = 0
