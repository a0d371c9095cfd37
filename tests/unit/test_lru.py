"""LruList: the RAM tier's recency order, checked against an OrderedDict doing the same operations."""

from __future__ import annotations

import random
import sys
from collections import OrderedDict

from kvd.store.lru import Entry, LruList


def _entry(key: bytes) -> Entry:
    return Entry(key, b"v", 0, None, 0)


def test_random_operations_keep_the_order_an_ordered_dict_keeps() -> None:
    rnd = random.Random(11)
    for _ in range(20):
        lru, model = LruList(), OrderedDict[bytes, Entry]()
        entries: dict[bytes, Entry] = {}
        for step in range(rnd.randrange(1, 600)):
            op = rnd.random()
            if op < 0.35 or not model:
                key = b"k%d" % step
                entries[key] = entry = _entry(key)
                lru.append(entry)
                model[key] = entry
            elif op < 0.65:
                key = rnd.choice(list(model))
                lru.move_to_end(entries[key])
                model.move_to_end(key)
            elif op < 0.9:
                key = rnd.choice(list(model))
                entry = entries.pop(key)
                lru.remove(entry)
                del model[key]
                assert entry.prev is None and entry.next is None
            else:
                batch = [_entry(b"b%d.%d" % (step, i)) for i in range(rnd.randrange(0, 5))]
                lru.extend(batch)
                for entry in batch:
                    entries[entry.key] = model[entry.key] = entry
            assert len(lru) == len(model) and bool(lru) == bool(model)
            assert [e.key for e in lru] == list(model)
            oldest = lru.oldest()
            assert (oldest.key if oldest is not None else None) == next(iter(model), None)


def test_an_empty_list_has_no_oldest_and_moving_the_newest_changes_nothing() -> None:
    lru = LruList()
    assert lru.oldest() is None and not lru and list(lru) == []
    a, b = _entry(b"a"), _entry(b"b")
    lru.append(a)
    lru.append(b)
    lru.move_to_end(b)
    assert [e.key for e in lru] == [b"a", b"b"]
    lru.move_to_end(a)
    assert [e.key for e in lru] == [b"b", b"a"]


def test_removed_and_cleared_entries_are_left_with_no_references_from_the_list() -> None:
    # kvd freezes long-lived objects out of the cyclic collector (kvd/memory.py): an entry that left the keyspace
    # must be freed by reference counting alone, so nothing on the list may still point at it.
    lru = LruList()
    entries = [_entry(b"k%d" % i) for i in range(10)]
    unlinked = [sys.getrefcount(e) for e in entries]
    lru.extend(entries)
    assert [sys.getrefcount(e) for e in entries] != unlinked
    lru.remove(entries[3])
    assert sys.getrefcount(entries[3]) == unlinked[3]
    assert entries[2].next is entries[4] and entries[4].prev is entries[2]
    lru.clear()
    assert not lru and lru.oldest() is None and list(lru) == []
    assert [sys.getrefcount(e) for e in entries] == unlinked
    assert all(e.prev is None and e.next is None for e in entries)
