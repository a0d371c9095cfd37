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

Complexity: admit/touch/release/demote O(1); eviction O(1) per victim; clear O(n).
"""

from __future__ import annotations

from typing import Any

from .lru import Entry, LruList

KEY_OVERHEAD = 258  # 250, and 8 since the Entry carries its LRU clock stamp (OBJECT IDLETIME)
LOCATION_OVERHEAD = 100  # a Location (a 4-field tuple, 72 bytes, and its offset, 32) for every persisted key
VALUE_OVERHEAD = 64


class RamTier:
    __slots__ = ("budget", "cold", "hot", "key_overhead", "resident_bytes", "used")

    def __init__(self, budget: int, persisted: bool = False) -> None:
        self.budget = budget  # 0 = unlimited
        self.key_overhead = KEY_OVERHEAD + (LOCATION_OVERHEAD if persisted else 0)
        self.hot = LruList()  # value resident, least recently used first
        self.cold = LruList()  # value on disk only, oldest demotion first
        self.used = 0
        self.resident_bytes = 0  # value bytes only, for INFO

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
        self.hot.append(entry)
        n = len(entry.value)  # type: ignore[arg-type]
        self.used += n + VALUE_OVERHEAD
        self.resident_bytes += n

    def add_cold(self, entry: Entry) -> None:
        """A new entry whose value lives only on disk."""
        self.cold.append(entry)

    def replace(self, entry: Entry, delta: int) -> None:
        """A resident value was overwritten in place, ``delta`` bytes longer: it becomes the most recent."""
        self.hot.move_to_end(entry)
        self.used += delta
        self.resident_bytes += delta

    def touch(self, entry: Entry) -> None:
        self.hot.move_to_end(entry)

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
        """The LRU clock in whole seconds, stamped on entries as they are written or read (OBJECT IDLETIME)."""
        self.hot.now = self.cold.now = now

    @property
    def clock(self) -> int:
        return self.hot.now

    def oldest_hot(self) -> Entry | None:
        return self.hot.oldest()

    def oldest_cold(self) -> Entry | None:
        return self.cold.oldest()

    def clear(self) -> None:
        self.hot.clear()
        self.cold.clear()
        self.used = 0
        self.resident_bytes = 0
