"""Access frequency for the ``-lfu`` maxmemory policies (``allkeys-lfu``, ``volatile-lfu``): Redis's logarithmic
counter, decaying with time.

Under an LFU policy an entry's ``atime`` slot holds its frequency state instead of its LRU stamp, as Redis reuses
its 24 ``lru`` bits: the minute of the last access (16 bits, wrapping) and an 8-bit counter. Every read makes the
counter grow with probability ``1 / ((counter - 5) * lfu-log-factor + 1)``, so it counts up to millions of
accesses in 255 steps; every ``lfu-decay-time`` minutes without an access take one off. A new key starts at 5
(``LFU_INIT``, Redis's LFU_INIT_VAL) as of the minute it was written. The numbers are Redis's, so OBJECT FREQ
answers what Redis would and ``redis-cli --hotkeys`` works.

The state carries a marker bit above Redis's 24: an ``atime`` without it is an LRU stamp (a key written under
``allkeys-lru`` before a CONFIG SET switched policies) and reads as a new key's state. Switching
back leaves LFU states in the slot until each entry is next stamped: as in Redis, "LRU and LFU data will take
some time to adjust".

Which value leaves RAM: the RAM tier keeps its recency list under LFU too. The victim is the least recent value
whose counter is at most ``LFU_INIT``: one not read since it was written, or whose counter decayed back. A more
frequently read value found at the old end on the way gets a second chance: it goes round to the recent end,
its counter unchanged, up to ``WINDOW`` of them per victim; if all were, the least frequent of them goes. So a
flood of chunks written once and never read leaves before any chunk that was read, however long ago (only its
decay, one per ``lfu-decay-time`` minutes, brings a chunk back down), where LRU lets the flood push everything
out (``scripts/bench_policy.py``: 99 % of shared-prefix reads from RAM against 45 % under LRU; docs/benchmarks.md).
Redis instead evicts the least frequent of a few sampled keys (56 % of those chunks kept in the same run). What
counts as an access is Redis's: reads, and writes that look the key up (an overwrite counts one and carries the
counter over; a copy or a restored key starts at ``LFU_INIT``): ``Keyspace.set``'s ``history``.

Complexity: touch O(1); a victim O(1) amortised (a value goes round once per pass over the list), O(WINDOW) at
most. Cost: a read under LFU runs about 0.45 us more Python than under LRU (``Keyspace.get`` of a resident
16-byte value, timeit, Intel host: 0.75-0.77 against 0.29-0.44 us), nothing next to a large value's copy.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from .lru import LruList

if TYPE_CHECKING:
    from .lru import Entry

LFU_INIT = 5
WINDOW = 16
_MARK = 1 << 40  # far above any LRU stamp (monotonic seconds)
_MINUTES = 0xFFFF
_random = random.random


class LfuCounter:
    """The policy's two settings and the clock in minutes (set by the server's tick, as Redis's unixtime)."""

    __slots__ = ("decay_time", "log_factor", "minutes")

    def __init__(self, log_factor: int = 10, decay_time: int = 1, minutes: int = 0) -> None:
        self.log_factor = log_factor
        self.decay_time = decay_time
        self.minutes = minutes & _MINUTES

    def set_clock(self, unix_seconds: float) -> None:
        """The minute counters decay by: Redis's ``(unixtime / 60) & 65535``."""
        self.minutes = (int(unix_seconds) // 60) & _MINUTES

    def counter(self, state: int) -> int:
        """The counter as of now: decayed by the periods since the last access (Redis's LFUDecrAndReturn)."""
        if state < _MARK:
            return LFU_INIT
        counter = state & 255
        if self.decay_time:
            last = (state >> 8) & _MINUTES
            now = self.minutes
            if now != last:  # most reads come within the minute of the last one
                periods = (now - last if now > last else _MINUTES - last + now) // self.decay_time
                counter = counter - periods if periods < counter else 0
        return counter

    def touched(self, state: int) -> int:
        """The state after one more access: decayed, then grown logarithmically (Redis's updateLFU)."""
        counter = self.counter(state)
        # Grows with probability 1 / ((counter - LFU_INIT) * lfu-log-factor + 1): 1 up to LFU_INIT, no draw needed.
        base = counter - LFU_INIT
        if base <= 0 or (counter < 255 and _random() * (base * self.log_factor + 1) < 1.0):
            counter += 1
        return _MARK | self.minutes << 8 | counter  # self.state(counter), one call less on every read

    def stamp_new(self, entry: Entry) -> None:
        """A key written now: LFU_INIT as of this minute, so that it decays like Redis's if never read; a key that
        kept its predecessor's frequency (an overwrite) keeps it."""
        if entry.atime < _MARK:
            entry.atime = self.state(LFU_INIT)

    def state(self, counter: int) -> int:
        """The state of ``counter`` accessed now (RESTORE ... FREQ sets one)."""
        return _MARK | self.minutes << 8 | counter


class LfuOrder(LruList):
    """The RAM tier's recency list under an LFU policy: linking keeps the entry's frequency state in ``atime``
    instead of stamping it. The tier switches its lists between the two classes in place (``__class__``), as
    both have the same layout: no entry is relinked when the policy changes."""

    __slots__ = ()

    def append(self, entry: Entry) -> None:
        state = entry.atime
        LruList.append(self, entry)
        entry.atime = state

    def move_to_end(self, entry: Entry) -> None:
        state = entry.atime
        LruList.move_to_end(self, entry)
        entry.atime = state


def least_frequent(order: LruList, lfu: LfuCounter) -> Entry | None:
    """The victim: the least recent entry whose counter is at most ``LFU_INIT`` (not read since it was written, or
    decayed back), passing over up to ``WINDOW`` more frequently used ones, which go round to the recent end (a
    second chance); if all of those were, the least frequent of them."""
    best: Entry | None = None
    best_counter = 256
    for _ in range(WINDOW):
        entry = order.oldest()
        if entry is None:
            break
        counter = lfu.counter(entry.atime)
        if counter <= LFU_INIT:
            return entry
        if counter < best_counter:
            best, best_counter = entry, counter
        order.move_to_end(entry)  # keeps its counter: the list is an LfuOrder
    return best
