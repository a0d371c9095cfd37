"""TTL bookkeeping: which keys expire when, for the bounded background sweep.

Expired keys are never served: every read checks the entry's deadline first (lazy expiry, as in Redis's
``expireIfNeeded``). That alone would keep never-read keys in memory forever, so a background task also pops
due deadlines from a min-heap, a bounded number per tick. A key whose TTL changed leaves a stale heap item
behind; the sweep recognises it (the entry's deadline differs) and drops it, and the heap is rebuilt when
stale items outnumber live ones, so its size stays O(keys with a TTL).

Complexity: schedule O(log n); one sweep O(k log n) for k popped items, bounded by ``limit``.
"""

from __future__ import annotations

import heapq
import random


class ExpiryHeap:
    __slots__ = ("_heap", "live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, bytes]] = []
        self.live = 0  # keys that currently have a TTL (maintained by the keyspace)

    def schedule(self, key: bytes, deadline_ms: int) -> None:
        heapq.heappush(self._heap, (deadline_ms, key))
        if len(self._heap) > 2 * self.live + 1024:
            self._heap = [item for item in self._heap if item[0] > 0]
            heapq.heapify(self._heap)

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

    def rebuild(self, items: list[tuple[int, bytes]]) -> None:
        self._heap = items
        heapq.heapify(self._heap)

    def clear(self) -> None:
        self._heap.clear()
        self.live = 0
