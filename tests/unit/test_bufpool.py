"""The value-buffer pool recycles only buffers nothing else can see, within its byte budget."""

from __future__ import annotations

from kvd.buffers import uninitialized
from kvd.store.bufpool import MIN_SIZE, BufferPool


def test_unreferenced_buffer_is_recycled_and_reused_exactly_once():
    pool = BufferPool(max_bytes=1 << 20)
    buf = bytearray(MIN_SIZE)
    ident = id(buf)
    pool.give(buf)
    del buf
    assert pool.held == MIN_SIZE
    got = pool.take(MIN_SIZE)
    assert got is not None and id(got) == ident
    assert pool.take(MIN_SIZE) is None


def test_referenced_buffers_are_never_recycled():
    pool = BufferPool(max_bytes=1 << 20)
    value = bytearray(MIN_SIZE)
    in_flight = memoryview(value)  # e.g. a reply still queued in a transport
    alias = value  # e.g. a pending disk write
    pool.give(value)
    assert pool.held == 0
    del in_flight, alias


def test_small_values_bytes_and_budget():
    pool = BufferPool(max_bytes=2 * MIN_SIZE, per_size=8)
    pool.give(bytearray(MIN_SIZE - 1))  # below the in-place receive size
    pool.give(bytes(MIN_SIZE))  # immutable values are never buffers
    for _ in range(3):
        pool.give(bytearray(MIN_SIZE))
    assert pool.held == 2 * MIN_SIZE and pool.recycled == 2
    assert pool.take(MIN_SIZE + 1) is None


def test_values_with_memory_in_front_are_left_to_malloc():
    """A value that landed with its request header (kvd/protocol/landing.py) has its start moved into its
    allocation; it can only be reused at its full size, so the pool must not hand it out as a value buffer."""
    pool = BufferPool(max_bytes=1 << 20)
    landed = bytearray(MIN_SIZE + 100)
    del landed[:60]
    del landed[MIN_SIZE:]
    assert len(landed) == MIN_SIZE
    pool.give(landed)
    assert pool.held == 0 and pool.take(MIN_SIZE) is None
    exact = uninitialized(MIN_SIZE)
    pool.give(exact)
    assert pool.held == MIN_SIZE


def test_an_overwritten_value_goes_back_to_the_pool():
    """The keyspace's overwrite of a resident value (updated in place) hands the old buffer to the pool, and a
    value still referenced elsewhere (a reply in flight) is not taken."""
    from kvd.store.keyspace import Keyspace

    ks = Keyspace(maxmemory=1 << 30, policy="allkeys-lru", seg_log=None)
    ks.set(b"k", bytearray(MIN_SIZE))
    ks.set(b"k", bytearray(MIN_SIZE))
    assert ks.pool.recycled == 1 and ks.pool.held == MIN_SIZE
    in_flight = ks.lookup(b"k").value
    ks.set(b"k", bytearray(MIN_SIZE))
    assert ks.pool.recycled == 1, "a buffer something else still holds must not be recycled"
    assert len(in_flight) == MIN_SIZE


def test_a_lower_bound_lets_the_largest_buffers_go_first():
    pool = BufferPool(max_bytes=1 << 30, per_size=8)
    for size in (MIN_SIZE, 2 * MIN_SIZE, 4 * MIN_SIZE):
        for _ in range(2):
            pool.give(bytearray(size))
    assert pool.held == 14 * MIN_SIZE
    pool.set_max_bytes(5 * MIN_SIZE)  # CONFIG SET maxmemory
    assert pool.held <= 5 * MIN_SIZE and pool.max_bytes == 5 * MIN_SIZE
    assert pool.take(4 * MIN_SIZE) is None
    assert pool.take(MIN_SIZE) is not None
    pool.give(bytearray(8 * MIN_SIZE))  # past the new bound: not kept
    assert pool.take(8 * MIN_SIZE) is None
