"""The C packer of small records (kvd/persist/_records.c) against the format's Python definition: for any run of
records it appends exactly record.py's header + key + value and segment.py's hint entry + key, and it stops,
leaving the entry to the writer's Python loop, at everything that is not a plain small record in place."""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from kvd.persist import writer
from kvd.persist.record import DEL, EXPIRE, HDR_SIZE, SET, decode_header, encode_header

pack_run = writer.pack_run
pytestmark = pytest.mark.skipif(pack_run is None, reason="kvd.persist._records was not built")

HINT_ENT = struct.Struct("<BIQQIqQ")  # segment.py's _HINT_ENT (the test spells the format out on purpose)
SMALL = writer.SMALL_RECORD
SEG, START = 7, 4096


def entry(ticket: int, offset: int, rtype: int, key: bytes, value: object, expire: int = 0, lsn: int = 1) -> tuple:
    rec_len = HDR_SIZE + len(key) + len(value)  # type: ignore[arg-type]
    return (writer.OP_REC, ticket, SEG, offset, rtype, key, value, expire, lsn, rec_len, None, None)


def expected(records: list[tuple[int, bytes, bytes, int, int]], offset: int) -> tuple[bytes, bytes]:
    data, hint = bytearray(), bytearray()
    for rtype, key, value, expire, lsn in records:
        kv = key + bytes(value)
        rec = encode_header(rtype, len(key), len(value), expire, lsn, xxhash.xxh3_64_intdigest(kv)) + kv
        hint += HINT_ENT.pack(rtype, len(key), offset, len(rec), len(value), expire, lsn) + key
        data += rec
        offset += len(rec)
    return bytes(data), bytes(hint)


records = st.lists(
    st.tuples(
        st.sampled_from([SET, DEL, EXPIRE]),
        st.binary(max_size=40),
        st.one_of(
            st.binary(max_size=300), st.binary(max_size=300).map(bytearray), st.just(bytes(range(256)) * (SMALL // 256))
        ),
        st.one_of(st.just(0), st.integers(-(1 << 63), (1 << 63) - 1)),
        st.integers(0, (1 << 64) - 1),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(records)
def test_packs_the_same_bytes_as_the_format(recs: list[tuple[int, bytes, bytes, int, int]]) -> None:
    batch, offset = [], START
    for ticket, (rtype, key, value, expire, lsn) in enumerate(recs, 1):
        batch.append(entry(ticket, offset, rtype, key, value, expire, lsn))
        offset += HDR_SIZE + len(key) + len(value)
    staged, hint = bytearray(b"before"), bytearray(b"hint")
    nxt, ticket, added = pack_run(batch, 0, SEG, START, staged, hint, SMALL, 1 << 30)
    data, hint_bytes = expected(recs, START)
    assert (nxt, ticket, added) == (len(recs), len(recs), len(data))
    assert staged == b"before" + data
    assert hint == b"hint" + hint_bytes
    first = decode_header(staged, len(b"before"))
    assert first is not None and first[:3] == (recs[0][0], len(recs[0][1]), len(recs[0][2]))


def test_without_a_hint_only_the_records() -> None:
    batch = [entry(5, START, SET, b"k", b"v")]
    staged = bytearray()
    assert pack_run(batch, 0, SEG, START, staged, None, SMALL, 1 << 20) == (1, 5, HDR_SIZE + 2)
    assert bytes(staged) == expected([(SET, b"k", b"v", 0, 1)], START)[0]


@pytest.mark.parametrize(
    "stopper",
    [
        pytest.param(lambda off: entry(9, off, SET, b"big", b"x" * (SMALL + 1)), id="value over SMALL_RECORD"),
        pytest.param(lambda off: entry(9, off, SET, b"mv", memoryview(b"abc")), id="memoryview value"),
        pytest.param(lambda off: entry(9, off + 1, SET, b"k", b"v"), id="offset out of place"),
        pytest.param(
            lambda off: (*entry(9, off, SET, b"k", b"v")[:2], SEG + 1, *entry(9, off, SET, b"k", b"v")[3:]),
            id="another segment",
        ),
        pytest.param(lambda off: (writer.OP_SYNC, print), id="another op"),
        pytest.param(lambda off: entry(9, off, SET, bytearray(b"k"), b"v"), id="bytearray key"),
        pytest.param(lambda off: entry(9, off, SET, b"k", b"v", lsn=-1), id="negative lsn"),
        pytest.param(lambda off: entry(9, off, 256, b"k", b"v"), id="type out of range"),
        pytest.param(lambda off: (1 << 70, *entry(9, off, SET, b"k", b"v")[1:]), id="op too large for a C long"),
    ],
)
def test_stops_at_what_the_python_loop_handles(stopper) -> None:  # type: ignore[no-untyped-def]
    first = entry(1, START, SET, b"a", b"1")
    after = START + HDR_SIZE + 2
    batch = [first, stopper(after), entry(3, after, SET, b"c", b"3")]
    staged, hint = bytearray(), bytearray()
    assert pack_run(batch, 0, SEG, START, staged, hint, SMALL, 1 << 20) == (1, 1, HDR_SIZE + 2)
    assert (bytes(staged), bytes(hint)) == expected([(SET, b"a", b"1", 0, 1)], START)
    # Starting at the stopper packs nothing and touches nothing.
    assert pack_run(batch, 1, SEG, after, staged, hint, SMALL, 1 << 20) == (1, -1, 0)
    assert len(staged) == HDR_SIZE + 2


def test_limit_bounds_one_call_and_the_next_call_goes_on() -> None:
    batch, offset = [], START
    for t in range(10):
        batch.append(entry(t, offset, SET, b"k%d" % t, b"v" * 1000))
        offset += HDR_SIZE + 2 + 1000
    staged = bytearray()
    nxt, ticket, added = pack_run(batch, 0, SEG, START, staged, None, SMALL, 2500)
    assert (nxt, ticket) == (3, 2)  # the record that crosses the limit is the last one packed
    nxt2, ticket2, added2 = pack_run(batch, nxt, SEG, START + added, staged, None, SMALL, 1 << 20)
    assert (nxt2, ticket2) == (10, 9)
    assert added + added2 == offset - START == len(staged)


def test_bad_arguments_raise() -> None:
    with pytest.raises(TypeError):
        pack_run((), 0, SEG, START, bytearray(), None, SMALL, 1)
    with pytest.raises(TypeError):
        pack_run([], 0, SEG, START, b"", None, SMALL, 1)
    with pytest.raises(TypeError):
        pack_run([], 0, SEG, START, bytearray())
