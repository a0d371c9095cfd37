"""kvd/protocol/_multibulk.c: takes exactly the whole requests of small bulk strings at the start of the input, and
stops before the first request it must leave to the parser's general path (partial, malformed, unusual, large).
The parser's property tests (tests/hardening/test_parser_properties.py) run every split with and without it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvd.protocol import parser

parse_requests = parser.parse_requests
pytestmark = pytest.mark.skipif(parse_requests is None, reason="kvd.protocol._multibulk was not built")

MAX_ARGS, MAX_BULK = 1024, parser.BIG_ARG


def multibulk(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def parse(data: bytes, pos: int = 0, end: int | None = None) -> tuple[int, list[list[bytes]]]:
    out: list[list[bytes]] = []
    used = parse_requests(bytearray(data), pos, len(data) if end is None else end, out, MAX_ARGS, MAX_BULK)
    assert all(type(a) is bytes for cmd in out for a in cmd)
    return used, out


requests = st.lists(st.lists(st.binary(max_size=60), min_size=1, max_size=6), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(requests, st.data())
def test_takes_every_whole_request_and_stops_before_a_partial_one(reqs: list[list[bytes]], data) -> None:
    wire = [multibulk(r) for r in reqs]
    stream = b"".join(wire)
    assert parse(stream) == (len(stream), reqs)
    cut = data.draw(st.integers(0, len(stream) - 1))  # the stream cut anywhere inside its last bytes
    whole = 0
    taken = []
    for w, r in zip(wire, reqs, strict=True):
        if whole + len(w) > cut:
            break
        whole += len(w)
        taken.append(r)
    assert parse(stream[:cut]) == (whole, taken)


@pytest.mark.parametrize(
    "bad",
    [
        b"*0\r\n",  # empty request: the general path drops it
        b"*-1\r\n",
        b"*01\r\n$1\r\nx\r\n",  # leading zero (Redis's string2ll refuses it)
        b"*+1\r\n$1\r\nx\r\n",
        b"*1 \r\n$1\r\nx\r\n",
        b"*1\n$1\r\nx\r\n",  # LF without CR
        b"*1\r\n$01\r\nx\r\n",
        b"*1\r\n$-1\r\n",  # a null bulk
        b"*1\r\n+x\r\n",  # not a bulk: "expected '$'" comes from the general path
        b"*1\r\n:1\r\n",
        b"*1025\r\n" + b"$1\r\nx\r\n" * 1025,  # over max_args
        multibulk([b"SET", b"k", b"v" * MAX_BULK]),  # a large bulk: received in place by the general path
        b"*99999999999\r\n",  # a count that is too long to be a number here
        b"PING\r\n",  # inline
    ],
)
def test_stops_before_what_the_general_path_reads(bad: bytes) -> None:
    first = multibulk([b"GET", b"a"])
    after = multibulk([b"GET", b"b"])
    assert parse(first + bad + after) == (len(first), [[b"GET", b"a"]])
    assert parse(bad + after) == (0, [])


def test_the_two_bytes_after_a_payload_are_skipped_unread_as_redis_does() -> None:
    assert parse(b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n") == (28, [[b"PING"], [b"PING"]])


def test_empty_bulks_and_the_largest_small_bulk() -> None:
    args = [b"SET", b"", b"v" * (MAX_BULK - 1)]
    assert parse(multibulk(args)) == (len(multibulk(args)), [args])


def test_pos_and_end_bound_what_is_read() -> None:
    one, two = multibulk([b"GET", b"a"]), multibulk([b"GET", b"b"])
    data = b"junk" + one + two
    assert parse(data, 4, 4 + len(one)) == (len(one), [[b"GET", b"a"]])
    assert parse(data, 4 + len(one)) == (len(two), [[b"GET", b"b"]])
    with pytest.raises(ValueError):
        parse(data, 0, len(data) + 1)
    with pytest.raises(ValueError):
        parse(data, 5, 4)
    with pytest.raises(TypeError):
        parse_requests(bytearray(data), 0, len(data), (), MAX_ARGS, MAX_BULK)
