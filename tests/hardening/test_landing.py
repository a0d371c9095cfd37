"""Landing (``kvd/protocol/landing.py``): after a large ``SET``, the next request of that shape arrives whole in
one buffer that becomes its value. These tests drive the parser the way the event loop does and check that
every shape and every split of the input parses exactly as the general path would, landed or not."""

from __future__ import annotations

import asyncio
import ctypes
import re
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_parser_properties import RECEIVE_PATHS, SETTINGS, Receiver, drive, multibulk, new_parser

import kvd.protocol.parser as parser_module
from kvd import buffers
from kvd.protocol.errors import ProtocolError
from kvd.protocol.landing import KEY_SLACK
from kvd.protocol.parser import BIG_ARG

N = 3 * BIG_ARG + 5


def value(tag: int, n: int = N) -> bytes:
    """``n`` bytes that differ between tags from the first byte on."""
    return (bytes([tag % 251]) * 7 + bytes(range(256)) * (n // 256 + 1))[:n]


def set_request(key: bytes, val: bytes, name: bytes = b"SET") -> bytes:
    return multibulk([name, key, val])


def feed_one(parser, data: bytes, out: list) -> int:
    """One read of as much of ``data`` as the offered buffer takes; returns the bytes consumed."""
    buf = parser.get_buffer()
    n = min(len(buf), len(data))
    buf[:n] = data[:n]
    parser.feed(n, out)  # with the view still held, as uvloop holds it during buffer_updated
    buf.release()
    return n


@pytest.fixture(params=["c", "ctypes"])
def buffer_calls(request):
    """The parser with each implementation of kvd/buffers.py that can load here: the compiled extension, and the
    ctypes calls kvd falls back to where it was not built."""
    found = {"c": buffers._from_extension, "ctypes": buffers._from_ctypes}[request.param]()
    if found is None:
        pytest.skip(f"{request.param} buffer calls not available here")
    with (
        mock.patch.object(parser_module, "uninitialized", found[0]),
        mock.patch.object(parser_module, "unpinned_view", found[1]),
    ):
        yield request.param


def test_a_repeated_shape_lands_whole_in_one_read_and_becomes_the_value(buffer_calls):
    p = new_parser()
    out: list = []
    first = set_request(b"key:0001", value(1)) + set_request(b"key:0009", value(9))
    second = set_request(b"key:0002", value(2))
    consumed = 0
    while consumed < len(first):  # the general path: header window, value tail, CRLF (twice: that arms it)
        consumed += feed_one(p, first[consumed:], out)
    assert [[bytes(a) for a in c] for c in out] == [[b"SET", b"key:0001", value(1)], [b"SET", b"key:0009", value(9)]]
    out.clear()
    buf = p.get_buffer()
    assert len(buf) >= len(second), "after a large SET the next read should be offered room for a whole one"
    buf[: len(second)] = second
    held = memoryview(buf)  # the event loop's export of the view, held until buffer_updated returns
    p.feed(len(second), out)
    assert len(out) == 1 and out[0][0] == b"SET" and out[0][1] == b"key:0002"
    landed = out[0][2]
    assert type(landed) is bytearray and landed == value(2), "the header must be cut off while the loop holds its view"
    header_len = len(second) - N - 2
    assert address(landed) == address(held) + header_len, "the value must be the very buffer that was read into"
    held.release()
    buf.release()


def address(buf) -> int:
    probe = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(probe)
    finally:
        del probe


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@pytest.mark.parametrize("key_len", [0, 1, 7, 8, 9, 8 + KEY_SLACK, 9 + KEY_SLACK, 500])
@pytest.mark.parametrize("sizes", [None, [1], [5, 4096], [17, N // 2, 3]])
def test_keys_of_other_lengths_and_pipelined_requests(key_len, sizes, receive):
    key = b"k" * key_len
    data = (
        set_request(b"key:0001", value(1))
        + set_request(b"key:0000", value(0))
        + set_request(key, value(2))
        + multibulk([b"GET", key])
        + set_request(b"key:0003", value(3))
        + set_request(b"key:0004", value(4))
        + b"PING\r\n"
    )
    expected = [
        [b"SET", b"key:0001", value(1)],
        [b"SET", b"key:0000", value(0)],
        [b"SET", key, value(2)],
        [b"GET", key],
        [b"SET", b"key:0003", value(3)],
        [b"SET", b"key:0004", value(4)],
        [b"PING"],
    ]
    assert drive(new_parser(), data, sizes, receive=receive) == expected


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@pytest.mark.parametrize(
    "follower",
    [
        set_request(b"key:0002", value(2, N + 1)),  # another value length
        set_request(b"key:0002", value(2, 100)),  # a small value
        multibulk([b"SETEX", b"key:0002", b"10", value(2)]),  # another arity
        set_request(b"key:0002", value(2), name=b"set"),  # the name in another case
        multibulk([b"GET", b"key:0001"]) * 50,
        b"GET key:0001\r\n",  # inline
        b"*3\r\n$3\r\nSET\r\n$8\r\nkey:0002\r\n$%d\r\n%b\r\n" % (N, value(2)),  # the same shape, spelled out
    ],
)
@pytest.mark.parametrize("sizes", [None, [1], [3, 100_000], [N + 40]])
def test_another_request_after_a_large_set_parses_as_usual(follower, sizes, receive):
    lead = set_request(b"key:0001", value(1)) * 2
    data = lead + follower + lead
    with mock.patch.object(parser_module, "LANDING_MAX", 0):  # the oracle: the general path alone
        expected = drive(new_parser(), data)
    assert len(expected) >= 3
    assert drive(new_parser(), data, sizes, receive=receive) == expected


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"*3\r\n$3\r\nSET\r\n$08\r\nkey:0002\r\n", "invalid bulk length"),  # leading zero
        (b"*3\r\n$3\r\nSET\r\n$-8\r\n", "invalid bulk length"),
        (b"*3\r\n$3\r\nSET\r\n$8\r\nkey:0002\r\n$0%d\r\n" % N, "invalid bulk length"),
        (b"*3\r\n$3\r\nSET\r\n:8\r\n", "expected '$', got ':'"),
    ],
)
def test_malformed_headers_get_the_general_paths_errors(bad, message, receive):
    data = set_request(b"key:0001", value(1)) * 2 + bad + b"x" * 64
    for sizes in (None, [1], [7, 300]):
        with pytest.raises(ProtocolError, match=re.escape(message)) as info:
            drive(new_parser(), data, sizes, receive=receive)
        assert info.value.parser_commands == [[b"SET", b"key:0001", value(1)]] * 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@SETTINGS
@given(
    keys=st.lists(st.binary(min_size=0, max_size=90), min_size=1, max_size=5),
    lengths=st.lists(st.sampled_from([N, N, N, N + 1, 40]), min_size=1, max_size=5),
    sizes=st.one_of(st.none(), st.lists(st.integers(min_value=1, max_value=2 * N), min_size=1, max_size=4)),
)
def test_any_mix_of_set_shapes_parses_like_the_general_path(keys, lengths, sizes, receive):
    requests = [[b"SET", key, value(i, lengths[i % len(lengths)])] for i, key in enumerate(keys * 2)]
    data = b"".join(multibulk(r) for r in requests)
    assert drive(new_parser(), data, sizes, receive=receive) == requests


def test_without_the_c_api_landing_is_off_and_every_request_still_parses():
    """kvd/buffers.py's last resort (neither the extension nor ctypes' C API): ``bytearray`` allocates and there is
    no unpinned view, so a repeated shape never arms landing and goes the general way."""
    with (
        mock.patch.object(parser_module, "uninitialized", bytearray),
        mock.patch.object(parser_module, "unpinned_view", None),
    ):
        p = new_parser()
        out: list = []
        for i in range(4):  # one request at a time, as a client waiting for each reply sends them
            request = set_request(b"key:%04d" % i, value(i))
            consumed = 0
            while consumed < len(request):
                assert len(p.get_buffer()) < N, "landing must stay off without an unpinned view"
                consumed += feed_one(p, request[consumed:], out)
    assert [[bytes(a) for a in c] for c in out] == [[b"SET", b"key:%04d" % i, value(i)] for i in range(4)]


def test_no_landing_before_auth_or_above_the_bulk_limit():
    p = new_parser(authenticated=False)
    out: list = []
    feed_one(p, b"AUTH x\r\n", out)
    assert len(p.get_buffer()) < BIG_ARG  # nothing armed, and the unauthenticated limits apply
    p = new_parser()
    lead = set_request(b"key:0001", value(1)) * 2
    consumed = 0
    while consumed < len(lead):
        consumed += feed_one(p, lead[consumed:], out)
    p.max_bulk = N - 1  # CONFIG SET proto-max-bulk-len below the armed value length
    assert len(p.get_buffer()) < N, "landing must not accept a value the current limit refuses"


def test_varying_value_sizes_do_not_arm_landing():
    """Landing arms only after two large requests of one shape in a row: a client whose sizes vary would
    otherwise pay a mismatch per request."""
    p = new_parser()
    out: list = []
    data = set_request(b"key:0001", value(1)) + set_request(b"key:0002", value(2, N + 1))
    consumed = 0
    while consumed < len(data):
        consumed += feed_one(p, data[consumed:], out)
    assert len(out) == 2
    assert len(p.get_buffer()) < N, "two different sizes in a row must not arm landing"


@pytest.mark.skipif(Receiver is None, reason="_receive not built")
def test_with_the_c_receiver_a_landing_request_runs_python_once_and_becomes_the_value():
    """kvd/protocol/_receive.c lands the request itself: no Python between its first read and its last, and
    the value is the buffer the loop read into, its header cut off."""
    p = new_parser()
    out: list = []
    calls: list[tuple] = []

    def updated(nbytes: int, reads: int = 1, land: bytearray | None = None) -> None:
        calls.append((nbytes, reads, land is not None))
        p.feed(nbytes, out, land)

    receiver = p.receiver = Receiver(p.get_buffer, updated, 1, 1 << 30)
    lead = set_request(b"key:0001", value(1)) * 2
    pos = 0
    while pos < len(lead):  # the general path, which arms landing after the second
        with receiver.get_buffer(-1) as buf:
            n = min(len(buf), len(lead) - pos)
            buf[:n] = lead[pos : pos + n]
        receiver.buffer_updated(n)
        pos += n
    assert receiver.armed and len(out) == 2
    calls.clear()
    request = set_request(b"key:0002", value(2))
    first = receiver.get_buffer(-1)
    addr = address(first)
    first.release()
    for start in range(0, len(request), 4096):
        with receiver.get_buffer(-1) as buf:
            piece = request[start : start + 4096]
            buf[: len(piece)] = piece
        receiver.buffer_updated(len(piece))
    assert calls == [(len(request), -(-len(request) // 4096), True)]
    landed = out[2][2]
    assert out[2][:2] == [b"SET", b"key:0002"] and landed == value(2)
    assert address(landed) == addr + len(request) - N - 2, "the value must be the very buffer read into"
    assert receiver.armed, "still armed for the next one"
    p.set_limits(N - 1, p.query_limit)  # CONFIG SET proto-max-bulk-len below the armed value length
    assert not receiver.armed
    p.set_limits(N, p.query_limit)
    assert receiver.armed
    p.set_authenticated(False)
    assert not receiver.armed


class _Transport:
    """What kvd's Client uses of a transport; replies are kept."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data) -> None:
        self.out.append(bytes(data))

    def writelines(self, parts) -> None:
        self.out.append(b"".join(bytes(p) for p in parts))

    def get_extra_info(self, name: str, default=None):
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.mark.skipif(Receiver is None, reason="_receive not built")
async def test_the_connection_lands_repeated_sets_in_c_and_stores_the_landed_buffer():
    """kvd/connection.py's wiring, not a copy of it: the real Client, parser and keyspace. After two SETs of one
    shape, the third is taken by the receiver without running Python until it is whole (the connection's read
    count moves only then), and the stored value is the landed buffer itself."""
    from kvd.config import load_settings
    from kvd.connection import Client
    from kvd.server import Server
    from kvd.store.keyspace import Keyspace

    settings = load_settings(None, ["--persistence", "no"])
    server = Server(settings, Keyspace(maxmemory=settings.maxmemory, policy=settings.maxmemory_policy))
    client, transport = Client(server), _Transport()
    client.connection_made(transport)

    def send(data: bytes, piece: int) -> None:
        pos = 0
        while pos < len(data):
            with client.get_buffer(-1) as buf:
                n = min(len(buf), len(data) - pos, piece)
                buf[:n] = data[pos : pos + n]
            client.buffer_updated(n)
            pos += n

    for i in (1, 2):
        send(set_request(b"key:%04d" % i, value(i)), 16 * 1024)
    assert client._receiver.armed, "two SETs of one shape must arm the receiver"
    request = set_request(b"key:0003", value(3))
    half = len(request) // 2
    reads = server.stats.reads_processed
    send(request[:half], 4096)
    assert server.stats.reads_processed == reads, "Python ran before the landing request was whole"
    first = client.get_buffer(-1)
    addr = address(first) - half  # where the landing buffer starts
    first.release()
    send(request[half:], 4096)
    assert server.stats.reads_processed == reads + -(-half // 4096) + -(-(len(request) - half) // 4096)
    await asyncio.sleep(0)  # the replies of this iteration
    assert transport.out[-1] == b"+OK\r\n"
    stored = server.keyspace.lookup(b"key:0003").value
    assert stored == value(3)
    assert address(stored) == addr + len(request) - N - 2, "the stored value must be the buffer read into"


@pytest.mark.skipif(Receiver is None, reason="_receive not built")
def test_an_unfinished_request_reported_as_landed_goes_to_the_general_parser():
    """The receiver reports a landing only whole or as another shape; should a part of one reach the parser
    anyway (the parser's ``_unfinished_landing``), it is read the general way and nothing is lost."""
    p = new_parser()
    lead = set_request(b"key:0001", value(1)) * 2
    assert drive(p, lead, receive="c") == [[b"SET", b"key:0001", value(1)]] * 2  # arms landing
    out: list = []
    p.receiver = receiver = Receiver(p.get_buffer, lambda n, reads=1, land=None: p.feed(n, out, land), 1, 1 << 30)
    request = set_request(b"key:0002", value(2))
    part = bytearray(request[:5000]) + bytearray(100)
    p.feed(5000, out, part)  # as if landed, but unfinished
    pos = 5000
    for _ in range(len(request)):  # bounded: each read moves at least one byte
        if pos == len(request):
            break
        with receiver.get_buffer(-1) as buf:
            n = min(len(buf), len(request) - pos)
            buf[:n] = request[pos : pos + n]
        receiver.buffer_updated(n)
        pos += n
    assert [[bytes(a) for a in c] for c in out] == [[b"SET", b"key:0002", value(2)]]
