"""The RAM tier: an exact LRU over resident values, with a byte budget.

Every key's metadata always lives in RAM (like Redis Flex, Dragonfly tiering and ElastiCache data tiering: a
look-up never touches the disk). What the tier decides is which *values* stay resident. Two ordered dicts hold
the keys: ``hot`` (value in RAM, least recently used first) and ``cold`` (value only on disk, oldest demotion
first). Reads move a key to the end of ``hot``; eviction pops from the front.

Exact rather than sampled LRU: Redis samples because its dict has no order and it cannot afford a linked list
per key in C memory terms. CPython's ``OrderedDict`` keeps a C-level linked list already, ``move_to_end`` and
``popitem(last=False)`` are O(1), and the values here are megabytes, so the per-key cost of exactness is noise
next to one value while the hit rate is the best an LRU can get.

Accounting. ``used`` counts, for every key, its length plus ``KEY_OVERHEAD`` (the Python objects that carry it:
the Entry, dict slots, the SCAN index slot) plus, with persistence on, ``LOCATION_OVERHEAD`` (its record's
``Location``), and for every resident value its length plus ``VALUE_OVERHEAD``. Without persistence their sum,
384 bytes, is close to what a million small keys really cost the process: ``scripts/bench_server.py`` measured
408-464 bytes of RSS per key for 12-byte keys with 16-byte values (docs/benchmarks.md; the spread is heap
fragmentation left by the load, which moves with the heap layout), i.e. 380-436 bytes beyond the payload. With
persistence on, a million 16-byte keys with 16-byte values cost 551 bytes per key against 454 without
(``redis-benchmark -t set -d 16 -P 16 -r 1000000000``, RSS before and after). So ``maxmemory`` bounds what the
process holds within about 15 % for tiny values, and exactly for the large values a KV cache stores.

Complexity: admit/touch/remove O(1); eviction O(1) per victim.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

KEY_OVERHEAD = 320
LOCATION_OVERHEAD = 100  # a Location (a 4-field tuple, 72 bytes, and its offset, 32) for every persisted key
VALUE_OVERHEAD = 64


class RamTier:
    __slots__ = ("budget", "cold", "hot", "key_overhead", "resident_bytes", "used")

    def __init__(self, budget: int, persisted: bool = False) -> None:
        self.budget = budget  # 0 = unlimited
        self.key_overhead = KEY_OVERHEAD + (LOCATION_OVERHEAD if persisted else 0)
        self.hot: OrderedDict[bytes, Any] = OrderedDict()
        self.cold: OrderedDict[bytes, Any] = OrderedDict()
        self.used = 0
        self.resident_bytes = 0  # value bytes only, for INFO

    def key_charge(self, key: bytes) -> int:
        return len(key) + self.key_overhead

    @staticmethod
    def value_charge(value: Any) -> int:
        return len(value) + VALUE_OVERHEAD

    def over_budget(self) -> bool:
        return self.budget > 0 and self.used > self.budget

    def add_key(self, key: bytes) -> None:
        self.used += self.key_charge(key)

    def add_keys(self, keys: list[bytes]) -> None:
        self.used += sum(map(len, keys)) + len(keys) * self.key_overhead

    def drop_key(self, key: bytes) -> None:
        self.used -= self.key_charge(key)

    def admit(self, key: bytes, entry: Any) -> None:
        """``entry.value`` became resident: a new write (the key is in neither dict) or a promotion."""
        if entry.loc is not None:  # only a key with a disk record can have been cold
            self.cold.pop(key, None)
        self.hot[key] = entry
        n = len(entry.value)
        self.used += n + VALUE_OVERHEAD
        self.resident_bytes += n

    def replace(self, key: bytes, delta: int) -> None:
        """A resident value was overwritten in place, ``delta`` bytes longer: it becomes the most recent."""
        self.hot.move_to_end(key)
        self.used += delta
        self.resident_bytes += delta

    def touch(self, key: bytes) -> None:
        self.hot.move_to_end(key)

    def release(self, key: bytes, entry: Any) -> None:
        """Forget a key (deleted, expired or overwritten); its charges must be dropped by the caller."""
        value = entry.value
        if value is not None:
            if self.hot.pop(key, None) is not None:
                n = len(value)
                self.used -= n + VALUE_OVERHEAD
                self.resident_bytes -= n
        else:
            self.cold.pop(key, None)

    def demote(self, key: bytes, entry: Any) -> None:
        """Drop a resident value that is safe on disk; the key stays, cold."""
        self.hot.pop(key, None)
        self.used -= self.value_charge(entry.value)
        self.resident_bytes -= len(entry.value)
        entry.value = None
        self.cold[key] = entry

    def oldest_hot(self) -> tuple[bytes, Any] | None:
        return next(iter(self.hot.items()), None)

    def oldest_cold(self) -> tuple[bytes, Any] | None:
        return next(iter(self.cold.items()), None)

    def clear(self) -> None:
        self.hot.clear()
        self.cold.clear()
        self.used = 0
        self.resident_bytes = 0
