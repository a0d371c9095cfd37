"""Access frequency for ``maxmemory-policy allkeys-lfu``: Redis's logarithmic counter, decaying with time.

Under an LFU policy an entry's ``atime`` slot holds its frequency state instead of its LRU stamp, as Redis reuses
its 24 ``lru`` bits: the minute of the last access (16 bits, wrapping) and an 8-bit counter. Every read makes the
counter grow with probability ``1 / ((counter - 5) * lfu-log-factor + 1)``, so it counts up to millions of
accesses in 255 steps; every ``lfu-decay-time`` minutes without an access take one off. A new key starts at 5
(``LFU_INIT``), so that it is not the first to go before it had a chance to be read (Redis's LFU_INIT_VAL). The
numbers are Redis's, so OBJECT FREQ answers what Redis would and ``redis-cli --hotkeys`` works.

The state carries a marker bit above Redis's 24: an ``atime`` without it is an LRU stamp (a key written under
``allkeys-lru`` before a CONFIG SET switched policies, or never read) and reads as a new key's state. Switching
back leaves LFU states in the slot until each entry is next stamped: as in Redis, "LRU and LFU data will take
some time to adjust".

Which value leaves RAM: the RAM tier keeps its recency list under LFU too, and the victim is the least
frequently used of the ``WINDOW`` least recently used resident values (the oldest of them on a tie). Redis picks
the least frequent of a few sampled keys; taking the sample from the cold end of the list means a one-off value
never outlives a popular one that merely went unread for a while, and a popular value still leaves once its
counter has decayed below the newcomers'. Writes keep a key's frequency (an overwrite does not count as an
access, unlike Redis): a KV cache writes each chunk once and reads it many times.

Complexity: touch O(1); a victim O(WINDOW).
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
            elapsed = self.minutes - last if self.minutes >= last else _MINUTES - last + self.minutes
            counter = max(counter - elapsed // self.decay_time, 0)
        return counter

    def touched(self, state: int) -> int:
        """The state after one more access: decayed, then grown logarithmically (Redis's updateLFU)."""
        counter = self.counter(state)
        if counter < 255 and random.random() < 1.0 / (max(counter - LFU_INIT, 0) * self.log_factor + 1):
            counter += 1
        return self.state(counter)

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
    """The victim: the lowest counter among the ``WINDOW`` least recently used entries, the oldest on a tie."""
    best: Entry | None = None
    best_counter = 256
    for n, entry in enumerate(order):
        counter = lfu.counter(entry.atime)
        if counter < best_counter:
            best, best_counter = entry, counter
        if n + 1 >= WINDOW:
            break
    return best
