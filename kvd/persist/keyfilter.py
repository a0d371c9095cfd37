"""Which keys a segment may hold a SET record for: what decides whether a tombstone is still needed.

Compaction keeps a DEL or EXPIRE record only while an older segment may still hold a SET of its key
(maintenance.py, "Tombstones"). The answer may err towards yes: a tombstone kept one compaction too long costs a
few dozen bytes on disk, while one dropped too early would bring a deleted key back after a restart. So a
``KeyFilter`` never answers no for a key that was added, and answers yes for about 1.4 % of the others.

It keeps the keys' hashes in two forms:

* While its segment is written: ``hash(key)`` appended to an ``array('q')``. This runs in every persisted write
  on the event loop, so it has to be cheap: 8 bytes written in order, no object allocated. The ``set`` of ints
  it replaced allocated an int per record, missed the cache in a table that grows to millions of entries, took
  about 80 bytes per record, and grew in one step at every doubling (87 ms at 2.8 million keys, a stall of the
  loop); pipelined small SETs with the log on spent about 5 % of their time there.
* Once the segment is sealed: a Bloom filter, 16 bits per key with two probes cut from the 64-bit hash (false
  positives (1 - e^(-2/16))^2, about 1.4 %), 2 bytes per record. ``seal`` builds it from the array on the
  maintenance thread and drops the array. Queries before that answer yes, which is always safe; compaction only
  asks about sealed segments older than a ready one, whose seals ran first (the maintenance executor is FIFO).

``hash(bytes)`` is salted per process, so nothing here is stored: recovery rebuilds each segment's array from
its records (or its hint) and seals it again.

Complexity: ``add`` O(1) amortized; ``seal`` O(n), about 0.3 us per key in Python (0.6 s for 2 million keys, a
256 MiB segment of small records, on the maintenance thread); ``in`` O(1). The build gives the GIL back every
``SEAL_STEP`` keys: held throughout, it made the event loop wait the interpreter's 5 ms switch interval for each
turn while it ran. A loop turning as fast as it can during the build of 2 million keys, three runs each: p99 of
one turn 5.16 ms with the GIL held throughout, 0.70 ms with steps of 2048 (the build then takes 0.82 s instead of
0.56, since the loop gets its share). The daemon now also shortens the switch interval to 0.2 ms (kvd/gil.py).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable

BITS_PER_KEY = 16  # rounded up to a power of two for the whole filter
SEAL_STEP = 2048  # hashes per step of seal() (about 0.4 ms); between steps the event loop may take the GIL


class KeyFilter:
    """The hashes of the keys a segment holds SET records for; ``h in f`` may be a false positive, never a false
    negative."""

    __slots__ = ("_filter", "_hashes", "add")

    def __init__(self, hashes: Iterable[int] = ()) -> None:
        self._hashes: array[int] | None = array("q", hashes)
        self._filter: tuple[bytearray, int] | None = None  # (bits, mask), published in one assignment
        self.add = self._hashes.append  # the hot path: a C method, no Python frame

    def seal(self) -> None:
        """Build the Bloom filter and drop the hashes. Runs on the maintenance thread; ``in`` answers yes until the
        filter is published. Every key of a segment is added before it is sealed (an add racing this loop could be
        missed); one added later still lands in the filter."""
        hashes = self._hashes
        if hashes is None:
            return
        nbits = 1 << max(6, (BITS_PER_KEY * len(hashes)).bit_length())
        mask = nbits - 1
        bits = bytearray(nbits >> 3)
        for start in range(0, len(hashes), SEAL_STEP):
            for h in hashes[start : start + SEAL_STEP]:
                a = h & mask
                bits[a >> 3] |= 1 << (a & 7)
                b = (h >> 32) & mask
                bits[b >> 3] |= 1 << (b & 7)
            time.sleep(0)  # releases the GIL (see "Complexity")
        self._filter = (bits, mask)
        self.add = self._add_sealed
        self._hashes = None

    def _add_sealed(self, h: int) -> None:
        bits, mask = self._filter  # type: ignore[misc]  # set by seal() before this is bound
        a = h & mask
        bits[a >> 3] |= 1 << (a & 7)
        b = (h >> 32) & mask
        bits[b >> 3] |= 1 << (b & 7)

    def __contains__(self, h: int) -> bool:
        f = self._filter
        if f is None:
            return True  # not sealed (or not yet): the safe answer
        bits, mask = f
        a = h & mask
        b = (h >> 32) & mask
        return bool(bits[a >> 3] >> (a & 7) & 1 and bits[b >> 3] >> (b & 7) & 1)
