"""A stable SCAN cursor over a changing keyspace.

Redis promises that a full SCAN iteration returns every key that was present from its start to its end, and that
a key is never returned twice unless it was deleted and added again in between. Redis gets this from a reverse
binary cursor over a power-of-two hash table; a Python ``dict`` cannot be iterated across mutations at all.

Here every key gets a sequence number when it is added (an overwrite keeps it; a delete frees it and a later
re-add gets a new, higher one). The index maps sequence number -> key in a ``SortedDict``, and the cursor is
simply "the next sequence number to visit". Sequence numbers only grow, so a key present for the whole iteration
sits at one fixed position that the cursor passes exactly once: the guarantee is exact, not probabilistic, and
duplicates never happen. Keys added during the iteration get numbers above every existing one and are returned
if the cursor has not finished, which SCAN allows.

Complexity (n keys): add O(log n), add_many of m keys O(n + m) (one merge of sorted runs; m < n/4 are added one
by one, O(m log n)), remove O(log n), one SCAN page O(log n + count), random key O(log n).
"""

from __future__ import annotations

import random

from sortedcontainers import SortedDict


class ScanIndex:
    __slots__ = ("_by_seq", "_next_seq")

    def __init__(self) -> None:
        self._by_seq: SortedDict = SortedDict()
        self._next_seq = 1  # 0 is the cursor that starts and ends an iteration

    def __len__(self) -> int:
        return len(self._by_seq)

    def add(self, key: bytes) -> int:
        seq = self._next_seq
        self._next_seq += 1
        self._by_seq[seq] = key
        return seq

    def add_many(self, keys: list[bytes]) -> int:
        """Index ``keys`` in this order, the i-th with sequence number ``first + i``; returns ``first``. One bulk
        load (``SortedDict.update`` sorts once, and the numbers arrive sorted) instead of a sorted insert per key:
        a recovered keyspace is indexed this way."""
        first = self._next_seq
        self._next_seq += len(keys)
        self._by_seq.update(zip(range(first, first + len(keys)), keys, strict=True))
        return first

    def remove(self, seq: int) -> None:
        self._by_seq.pop(seq, None)

    def clear(self) -> None:
        self._by_seq.clear()

    def page(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        """Up to ``count`` keys from ``cursor`` on, and the cursor to continue from (0 when done)."""
        keys: list[bytes] = []
        by_seq = self._by_seq
        last = 0
        for seq in by_seq.irange(minimum=max(cursor, 1)):
            keys.append(by_seq[seq])
            last = seq
            if len(keys) >= count:
                break
        else:
            return 0, keys
        # There may be more: continue after the last key returned, unless it was the last one.
        return (0 if last == by_seq.peekitem(-1)[0] else last + 1), keys

    def random_key(self) -> bytes | None:
        if not self._by_seq:
            return None
        return self._by_seq.peekitem(random.randrange(len(self._by_seq)))[1]
