"""TTL bookkeeping: which keys expire when, for the bounded background sweep.

Expired keys are never served: every read checks the entry's deadline first (lazy expiry, as in Redis's
``expireIfNeeded``). That alone would keep never-read keys in memory forever, so a background task also pops
due deadlines from a min-heap, a bounded number per tick. A key whose TTL changed leaves a stale heap item
behind; the sweep recognises it (the entry's deadline differs) and drops it. ``schedule`` rebuilds the heap
from its live items (one per key: duplicates of the same deadline go too) once it has grown past twice what the
last rebuild left plus 1024, so its size stays O(keys with a TTL) and a rebuild, O(n), comes at most once per
n + 1024 schedules: O(1) amortised.

The heap is also the set of keys with a TTL that the ``volatile-*`` eviction policies choose from
(``kvd/store/eviction.py``): ``nearest`` is the key whose deadline comes first, ``sample`` draws some at random.
Both tell live items from stale ones by the keyspace's table, and drop stale ones they meet.

Complexity: schedule O(log n) amortised; one sweep O(k log n) for k popped items, bounded by ``limit``;
nearest O(log n) per stale item dropped; sample O(k) for k items, O(n) when it has to clear out stale items first.
"""

from __future__ import annotations

import heapq
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from .lru import Entry


AVG_TTL_SAMPLES = 64  # keys with a TTL drawn for INFO keyspace's avg_ttl
REBUILD_SLACK = 1024  # stale items a heap may hold beyond twice its live ones before ``schedule`` rebuilds it


class ExpiryHeap:
    __slots__ = ("_heap", "_limit", "live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, bytes]] = []
        self._limit = REBUILD_SLACK  # the size past which ``schedule`` rebuilds the heap
        self.live = 0  # keys that currently have a TTL (maintained by the keyspace)

    def schedule(self, key: bytes, deadline_ms: int, current: dict[bytes, Entry]) -> None:
        """Add ``key``'s new deadline (its entry, in ``current``, already carries it)."""
        heap = self._heap
        heapq.heappush(heap, (deadline_ms, key))
        if len(heap) > self._limit:
            self._rebuild_live(current)

    def _rebuild_live(self, current: dict[bytes, Entry]) -> None:
        """Keep only live items, one per key, and move the next rebuild to twice what is left (plus the slack)."""
        live = self._live_item
        self._heap = list({item for item in self._heap if live(item, current) is not None})
        heapq.heapify(self._heap)
        self._limit = 2 * len(self._heap) + REBUILD_SLACK

    def due(self, now_ms: int, limit: int) -> list[tuple[int, bytes]]:
        """Pop up to ``limit`` items whose deadline has passed; the caller checks each is still current."""
        heap = self._heap
        out: list[tuple[int, bytes]] = []
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            out.append(heapq.heappop(heap))
        return out

    def overdue(self, now_ms: int) -> bool:
        """Whether a deadline has passed that no sweep has popped yet."""
        return bool(self._heap) and self._heap[0][0] <= now_ms

    def overdue_share(self, now_ms: int, samples: int = 20) -> float:
        """The share of items past their deadline, from ``samples`` random ones (Redis samples 20 keys with a TTL
        per round too). Stale items count as theirs: an estimate, for INFO expired_stale_perc."""
        heap = self._heap
        if not heap:
            return 0.0
        picked = [heap[random.randrange(len(heap))] for _ in range(min(samples, len(heap)))]
        return sum(1 for deadline, _ in picked if deadline <= now_ms) / len(picked)

    def nearest(self, current: dict[bytes, Entry]) -> Entry | None:
        """The entry whose deadline comes first (``volatile-ttl``'s victim), dropping stale items on the way."""
        heap = self._heap
        while heap:
            deadline, key = heap[0]
            entry = current.get(key)
            if entry is not None and entry.expire_at == deadline:
                return entry
            heapq.heappop(heap)
        return None

    def sample(self, current: dict[bytes, Entry], n: int) -> list[Entry]:
        """Up to ``n`` distinct live entries drawn at random (all of them when there are no more than ``n`` items).
        Empty only if no key has a TTL: when the draws meet only stale items, those are cleared out first."""
        if not self.live:
            return []
        heap = self._heap
        if len(heap) > n:
            picked: dict[int, Entry] = {}
            for _ in range(4 * n + 16):
                entry = self._live_item(heap[random.randrange(len(heap))], current)
                if entry is not None:
                    picked[id(entry)] = entry
                    if len(picked) == n:
                        break
            if picked:
                return list(picked.values())
            self._rebuild_live(current)
            heap = self._heap
        found = list({id(e): e for item in heap if (e := self._live_item(item, current)) is not None}.values())
        return found if len(found) <= n else random.sample(found, n)

    def average_ttl(self, current: dict[bytes, Entry], now_ms: int, samples: int = AVG_TTL_SAMPLES) -> int:
        """INFO keyspace's ``avg_ttl``: the mean time to live, in ms, of up to ``samples`` keys with a TTL drawn
        at random (all of them when there are no more), 0 when none has one. Redis's is a running average of the
        keys its expiry cycle samples; both are estimates."""
        ttls = [entry.expire_at - now_ms for entry in self.sample(current, samples) if entry.expire_at > now_ms]
        return sum(ttls) // len(ttls) if ttls else 0

    def holds_at_least(self, current: dict[bytes, Entry], need: int, size: Callable[[Entry], int], limit: int) -> bool:
        """Whether the live entries' ``size`` adds up to ``need`` or more, from at most ``limit`` items (True
        past that: the caller then finds out by deleting, as Redis does)."""
        total = 0
        seen: set[bytes] = set()
        for n, item in enumerate(self._heap):
            if n >= limit:
                return True
            entry = self._live_item(item, current)
            if entry is None or item[1] in seen:
                continue
            seen.add(item[1])
            total += size(entry)
            if total >= need:
                return True
        return False

    @staticmethod
    def _live_item(item: tuple[int, bytes], current: dict[bytes, Entry]) -> Entry | None:
        entry = current.get(item[1])
        return entry if entry is not None and entry.expire_at == item[0] else None

    def rebuild(self, items: list[tuple[int, bytes]]) -> None:
        self._heap = items
        heapq.heapify(self._heap)
        self._limit = 2 * len(items) + REBUILD_SLACK

    def clear(self) -> None:
        self._heap.clear()
        self._limit = REBUILD_SLACK
        self.live = 0
