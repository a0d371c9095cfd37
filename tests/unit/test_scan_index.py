"""ScanIndex: SCAN's guarantees while keys are added and removed between pages."""

from __future__ import annotations

import random

from kvd.store.lru import Entry
from kvd.store.scan import ScanIndex


def add(index: ScanIndex, key: bytes) -> Entry:
    entry = Entry(key, b"", 0, None, 0)
    index.add(entry)
    return entry


def test_full_iteration_returns_every_stable_key_once_under_churn() -> None:
    rnd = random.Random(7)
    for trial in range(30):
        index = ScanIndex()
        live: dict[bytes, Entry] = {}
        for i in range(rnd.randrange(0, 400)):
            key = b"k%d" % i
            live[key] = add(index, key)
        ever = set(live)
        stable = set(live)  # keys present from the first page to the last unless removed below
        seen: list[bytes] = []
        cursor, n = 0, 0
        while True:
            cursor, keys = index.page(cursor, rnd.randrange(1, 40))
            seen.extend(keys)
            for _ in range(rnd.randrange(0, 12)):  # churn between pages: new keys, and removals of any key
                if live and rnd.random() < 0.45:
                    key = rnd.choice(sorted(live))
                    index.remove(live.pop(key))
                    stable.discard(key)
                else:
                    key = b"t%d:%d" % (trial, n)
                    n += 1
                    live[key] = add(index, key)
                    ever.add(key)
            if cursor == 0:
                break
        assert len(seen) == len(set(seen)), "a key came back twice"
        assert stable <= set(seen), f"missed {sorted(stable - set(seen))[:5]}"
        assert set(seen) <= ever, "a key that was never added"
        assert len(index) == len(live)


def test_keys_added_and_removed_between_pages() -> None:
    index = ScanIndex()
    assert index.page(0, 10) == (0, [])
    assert index.random_key() is None
    first = add(index, b"a")
    assert index.page(0, 10) == (0, [b"a"])
    second = add(index, b"b")
    third = add(index, b"c")
    index.remove(second)  # removed before any page saw it: never returned
    assert len(index) == 2
    assert index.page(0, 10) == (0, [b"a", b"c"])
    index.remove(first)  # removed after a page returned it
    assert index.page(0, 10) == (0, [b"c"])
    assert index.random_key() == b"c"
    index.remove(third)
    assert len(index) == 0 and index.random_key() is None
    assert first.seq < second.seq < third.seq
    index.remove(third)  # twice: nothing happens
    assert len(index) == 0
    add(index, b"d")
    index.clear()
    assert len(index) == 0 and index.page(0, 10) == (0, [])


def test_cursor_resumes_after_keys_added_past_it() -> None:
    index = ScanIndex()
    for i in range(10):
        add(index, b"%d" % i)
    cursor, keys = index.page(0, 4)
    assert keys == [b"0", b"1", b"2", b"3"] and cursor
    add(index, b"new")  # above every cursor position: returned, since the iteration has not finished
    rest: list[bytes] = []
    while cursor:
        cursor, keys = index.page(cursor, 4)
        rest.extend(keys)
    assert rest == [b"4", b"5", b"6", b"7", b"8", b"9", b"new"]


def test_bulk_load_then_churn() -> None:
    """add_many (a recovered keyspace) numbers keys as add would, in order, and SCAN keeps its promise after."""
    index = ScanIndex()
    keys = [b"r%d" % i for i in range(5000)]
    entries = [Entry(k, None, 0, None, 0) for k in keys]
    index.add_many(entries)
    assert len(index) == 5000
    assert [e.seq for e in entries] == list(range(entries[0].seq, entries[0].seq + 5000))
    later = add(index, b"after")
    assert later.seq == entries[0].seq + 5000, "a key added after the bulk load is numbered after it"
    index.remove(entries[10])  # r10
    newer = Entry(b"r11", b"v2", 0, None, 0)
    index.replace(entries[11], newer)  # an overwrite that made a new entry keeps its place
    assert newer.seq == entries[11].seq
    cursor, seen = 0, []
    while True:
        cursor, page = index.page(cursor, 97)
        seen.extend(page)
        if cursor == 0:
            break
    assert seen == [k for k in keys if k != b"r10"] + [b"after"]
    index.add_many([])
    assert add(index, b"last").seq == later.seq + 1 and len(index) == 5001
