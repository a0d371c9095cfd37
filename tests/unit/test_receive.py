"""kvd/protocol/_receive.c: the Receiver that takes the reads in the middle of a large value without calling
Python, driven here the way an event loop drives a BufferedProtocol, and its low-water mark on a real TCP socket.
The set-up must build it: without it every such read runs two Python callbacks."""

from __future__ import annotations

import gc
import os
import socket
import time
import weakref
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from kvd.protocol import lowat
from kvd.protocol.landing import Template

try:
    from kvd.protocol._receive import Receiver
except ImportError:  # tests/unit/test_buffers.py fails the set-up for it; these have nothing to test
    Receiver = None
pytestmark = pytest.mark.skipif(Receiver is None, reason="kvd.protocol._receive was not built")


class Python:
    """The Python side a Receiver passes calls on to: a fixed receive buffer and a log of what it was told."""

    def __init__(self) -> None:
        self.buf = bytearray(64)
        self.updates: list[tuple[int, ...]] = []

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int, reads: int = 1, land: bytearray | None = None) -> None:
        self.updates.append((nbytes, reads) if land is None else (nbytes, reads, bytes(land[:nbytes])))


@pytest.fixture
def py() -> Python:
    return Python()


@pytest.fixture
def receiver(py: Python) -> Receiver:
    return Receiver(py.get_buffer, py.buffer_updated, lowat.MIN, lowat.CHUNK)


def read(receiver: Receiver, data: bytes) -> None:
    """One read as an event loop makes it: get_buffer, copy into it, release, buffer_updated."""
    with receiver.get_buffer(-1) as view:
        view[: len(data)] = data
    receiver.buffer_updated(len(data))


def test_between_values_both_calls_go_to_python(py, receiver):
    read(receiver, b"PING\r\n")
    assert py.buf.startswith(b"PING\r\n")
    assert py.updates == [(6, 1)]
    assert not receiver.filling


def test_the_rest_of_a_value_is_reported_once_with_its_reads(py, receiver):
    value = bytearray(100)
    receiver.expect(value, 10, 100)
    assert receiver.filling
    read(receiver, b"a" * 30)
    read(receiver, b"b" * 40)
    assert py.updates == []  # Python hears nothing until the value is complete
    read(receiver, b"c" * 20)
    assert py.updates == [(90, 3)]
    assert value == bytes(10) + b"a" * 30 + b"b" * 40 + b"c" * 20
    assert not receiver.filling
    read(receiver, b"x")  # and the next read is Python's again
    assert py.updates == [(90, 3), (1, 1)]


def test_the_buffer_is_offered_to_its_end_and_a_read_past_the_value_completes_it(py, receiver):
    """A landing buffer has room for a longer key after the request: a read may run into it (the parser moves
    those bytes on), and offering the room lets a short read tell the event loop that the socket is drained."""
    buf = bytearray(50)
    receiver.expect(buf, 0, 40)
    with receiver.get_buffer(-1) as view:
        assert len(view) == 50
    read(receiver, b"z" * 45)
    assert py.updates == [(45, 1)]


def test_views_do_not_pin_the_buffer(receiver):
    """The parser cuts a landed request's header off the buffer while the event loop may still hold its view."""
    buf = bytearray(b"header" + bytes(100))
    receiver.expect(buf, 6, 106)
    view = receiver.get_buffer(-1)
    view[:100] = b"v" * 100
    receiver.buffer_updated(100)
    del buf[:6]  # would raise BufferError if the view exported buf
    assert buf == b"v" * 100
    view.release()


def test_python_may_expect_the_next_value_while_told_of_the_last(py):
    """Pipelined large values: the parser hands over the next one from inside the report of the last."""
    second = bytearray(30)

    def buffer_updated(nbytes: int, reads: int = 1) -> None:
        py.updates.append((nbytes, reads))
        if len(py.updates) == 1:
            receiver.expect(second, 0, 30)

    receiver = Receiver(py.get_buffer, buffer_updated, lowat.MIN, lowat.CHUNK)
    receiver.expect(bytearray(10), 0, 10)
    read(receiver, b"1" * 10)
    assert receiver.filling
    read(receiver, b"2" * 30)
    assert py.updates == [(10, 1), (30, 1)]
    assert second == b"2" * 30


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((b"not a bytearray", 0, 5), TypeError),
        ((bytearray(10), 5, 5), ValueError),  # nothing left to fill
        ((bytearray(10), 0, 11), ValueError),  # past the buffer
        ((bytearray(10), -1, 5), ValueError),
    ],
)
def test_expect_refuses_what_it_cannot_fill(receiver, args, error):
    with pytest.raises(error):
        receiver.expect(*args)
    assert not receiver.filling


def test_expect_refuses_a_second_value_and_a_read_larger_than_its_view(receiver):
    receiver.expect(bytearray(10), 0, 10)
    with pytest.raises(RuntimeError):
        receiver.expect(bytearray(10), 0, 10)
    with pytest.raises(ValueError, match="do not fit"):
        receiver.buffer_updated(11)


def test_close_drops_the_value_and_the_callbacks(py, receiver):
    receiver.expect(bytearray(10), 0, 10)
    receiver.close()
    assert not receiver.filling
    with pytest.raises(RuntimeError, match="after close"):
        receiver.get_buffer(-1)
    with pytest.raises(RuntimeError, match="after close"):
        receiver.buffer_updated(1)
    assert py.updates == []


class Connection:
    """What kvd's Client does: it holds its Receiver, and the Receiver calls its methods."""

    def __init__(self) -> None:
        self.receiver = Receiver(self.get_buffer, self.buffer_updated, lowat.MIN, lowat.CHUNK)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(bytearray(8))

    def buffer_updated(self, nbytes: int, reads: int = 1) -> None:
        pass


def test_close_lets_the_connection_go_without_a_collection():
    """kvd's collector never looks again at objects that survived a young collection (kvd/memory.py), so a
    closed connection must be freed by reference counting alone: close() drops the callbacks."""
    gc.disable()
    try:
        conn = Connection()
        gone = weakref.ref(conn)
        conn.receiver.close()
        del conn
        assert gone() is None
        kept = Connection()  # without close() only a collection frees the pair, through tp_traverse
        gone = weakref.ref(kept)
        del kept
        assert gone() is not None
        gc.collect()
        assert gone() is None
    finally:
        gc.enable()


def test_python_may_close_the_receiver_from_its_own_callback(py):
    def buffer_updated(nbytes: int, reads: int = 1) -> None:
        py.updates.append((nbytes, reads))
        receiver.close()

    receiver = Receiver(py.get_buffer, buffer_updated, lowat.MIN, lowat.CHUNK)
    receiver.expect(bytearray(8), 0, 8)
    read(receiver, b"12345678")
    assert py.updates == [(8, 1)]
    with pytest.raises(RuntimeError, match="after close"):
        receiver.get_buffer(-1)
    with pytest.raises(RuntimeError, match="after close"):
        receiver.buffer_updated(1)


def test_errors_of_python_reach_the_event_loop(py):
    def buffer_updated(nbytes: int, reads: int = 1) -> None:
        raise KeyError("from Python")

    receiver = Receiver(py.get_buffer, buffer_updated, lowat.MIN, lowat.CHUNK)
    with pytest.raises(KeyError):
        read(receiver, b"x")
    receiver.expect(bytearray(4), 0, 4)
    with pytest.raises(KeyError):
        read(receiver, b"abcd")
    assert not receiver.filling


def test_last_read_follows_the_reads_it_takes(receiver):
    """The idle timeout and CLIENT LIST count these reads as activity (Client.idle)."""
    assert receiver.last_read == 0.0
    receiver.expect(bytearray(10), 0, 10)
    read(receiver, b"x")
    assert abs(receiver.last_read - time.monotonic()) < 1.0


# -- the low-water mark on a real TCP connection -------------------------------------------------------------


@pytest.fixture
def tcp() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        with client, server:
            yield server


def mark(sock: socket.socket) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def test_the_mark_follows_what_is_missing_and_returns_to_one(py, receiver, tcp):
    receiver.use_fd(tcp.fileno())
    size = lowat.MIN + 2 * lowat.CHUNK + 1000
    receiver.expect(bytearray(size), 0, size)
    assert mark(tcp) == receiver.mark == lowat.CHUNK  # at most CHUNK at a time
    read(receiver, bytes(2 * lowat.CHUNK))
    assert mark(tcp) == min(lowat.MIN + 1000, lowat.CHUNK)  # still MIN or more missing: waited for
    read(receiver, bytes(1010))
    assert mark(tcp) == 1  # under MIN left: read as it arrives
    read(receiver, bytes(lowat.MIN - 20))
    assert mark(tcp) == 1
    read(receiver, bytes(10))
    assert py.updates == [(size, 4)]
    assert mark(tcp) == 1


def test_a_value_under_min_is_read_as_it_arrives(py, receiver, tcp):
    """Waiting would serialise kvd's copy after the client's; under MIN the wake-ups cost less than that."""
    receiver.use_fd(tcp.fileno())
    size = lowat.MIN - 1
    receiver.expect(bytearray(size), 0, size)
    assert mark(tcp) == receiver.mark == 1
    read(receiver, bytes(size // 2))
    assert mark(tcp) == 1 and py.updates == []
    read(receiver, bytes(size - size // 2))
    assert py.updates == [(size, 2)]


def test_the_mark_goes_back_to_one_only_after_python_has_run(py, tcp):
    """The reply to the completed value goes out before the mark's system call."""
    seen: list[int] = []

    def buffer_updated(nbytes: int, reads: int = 1) -> None:
        seen.append(mark(tcp))

    receiver = Receiver(py.get_buffer, buffer_updated, lowat.MIN, lowat.CHUNK)
    receiver.use_fd(tcp.fileno())
    receiver.expect(bytearray(lowat.MIN * 2), 0, lowat.MIN * 2)
    read(receiver, bytes(lowat.MIN * 2))
    assert seen == [min(lowat.MIN * 2, lowat.CHUNK)]  # still the mark set for the value when Python runs
    assert mark(tcp) == 1


def test_a_descriptor_that_refuses_the_mark_turns_it_off(py, receiver):
    """Not a socket (setsockopt fails): no error, the reads simply wake up for every piece."""
    r, w = os.pipe()
    try:
        receiver.use_fd(r)
        receiver.expect(bytearray(lowat.MIN * 2), 0, lowat.MIN * 2)
        assert receiver.mark == 1
        read(receiver, bytes(lowat.MIN * 2))
        assert py.updates == [(lowat.MIN * 2, 1)]
    finally:
        os.close(r)
        os.close(w)


# -- landing: whole requests of an armed shape -----------------------------------------------------------------


def landing_request(key: bytes, value: bytes) -> bytes:
    return b"*3\r\n$3\r\nSET\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(key), key, len(value), value)


@pytest.fixture
def armed(receiver: Receiver) -> Receiver:
    receiver.land(Template(b"SET", 8, 1000))
    return receiver


def test_an_armed_receiver_lands_a_whole_request_and_reports_it_once(py, armed):
    assert armed.armed and not armed.filling
    request = landing_request(b"key:0001", bytes(range(200)) * 5)
    with armed.get_buffer(-1) as view:
        assert len(view) == Template(b"SET", 8, 1000).size  # its own buffer, the size of such a request
    for start in range(0, len(request), 97):  # the header arrives in pieces too
        read(armed, request[start : start + 97])
    assert py.updates == [(len(request), -(-len(request) // 97), request)]
    assert armed.armed and not armed.filling  # stays armed; the next read gets a new buffer


def test_a_request_of_another_shape_is_handed_over_as_soon_as_its_header_shows_it(py, armed):
    other_length = b"*3\r\n$3\r\nSET\r\n$8\r\nkey:0001\r\n$999\r\n"
    read(armed, other_length)
    assert py.updates == [(len(other_length), 1, other_length)]
    read(armed, b"*2\r\n$3\r\nGET")  # another command: known at its second byte
    assert py.updates[-1] == (11, 1, b"*2\r\n$3\r\nGET")
    read(armed, b"*3\r\n$3\r\nSE")  # could still be one: wait
    assert len(py.updates) == 2 and armed.filling


def test_the_mark_waits_for_the_rest_once_the_header_has_matched(py, tcp):
    receiver = Receiver(py.get_buffer, py.buffer_updated, lowat.MIN, lowat.CHUNK)
    receiver.use_fd(tcp.fileno())
    value_len = lowat.MIN + lowat.CHUNK
    receiver.land(Template(b"SET", 8, value_len))
    request = landing_request(b"key:0001", b"v" * value_len)
    read(receiver, request[:10])
    assert receiver.mark == 1  # the header is not all in: how much is missing is not known
    read(receiver, request[:100][10:])
    expected = min(len(request) - 100, lowat.CHUNK)
    assert receiver.mark == expected == tcp.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
    read(receiver, request[100:])
    assert receiver.mark == 1 and py.updates == [(len(request), 3, request)]


def test_disarming_keeps_a_landing_that_began_and_stops_the_next(py, armed):
    request = landing_request(b"key:0001", b"x" * 1000)
    read(armed, request[:20])
    armed.land(None)
    assert not armed.armed and armed.filling
    read(armed, request[20:])
    assert py.updates == [(len(request), 2, request)]
    read(armed, b"PING\r\n")  # Python's get_buffer again
    assert py.updates[-1] == (6, 1) and py.buf.startswith(b"PING\r\n")


def test_a_shape_armed_mid_request_applies_from_the_next_one(py, armed):
    """The request under way keeps the shape its buffer was made for: a header of the new shape (a longer value,
    which would not fit that buffer) is another shape to it, handed over."""
    header = b"*3\r\n$3\r\nSET\r\n$8\r\nkey:0001\r\n$5000\r\n"
    read(armed, header[:21])
    armed.land(Template(b"SET", 8, 5000))
    read(armed, header[21:])
    assert py.updates == [(len(header), 2, header)]
    request = b"*3\r\n$3\r\nSET\r\n$8\r\nkey:0002\r\n$5000\r\n" + b"v" * 5000 + b"\r\n"
    read(armed, request)  # the next one lands as the new shape
    assert py.updates[-1] == (len(request), 1, request)


@pytest.mark.parametrize(
    ("template", "error"),
    [
        (object(), AttributeError),
        (SimpleNamespace(prefix=b"x", suffix="y", key_max=1, value_len=1, size=10), ValueError),
        (SimpleNamespace(prefix=b"x", suffix=b"y", key_max=1, value_len=1, size=0), ValueError),
        (SimpleNamespace(prefix=b"x", suffix=b"y", key_max=-1, value_len=1, size=10), ValueError),
        (SimpleNamespace(prefix=b"x", suffix=b"y", key_max=1, value_len=2**70, size=10), OverflowError),
    ],
)
def test_land_refuses_what_is_not_a_template(receiver, template, error):
    with pytest.raises(error):
        receiver.land(template)
    assert not receiver.armed


def test_close_drops_a_landing_and_the_shape(py, armed):
    read(armed, b"*3\r\n$3\r\nSET\r\n")
    armed.close()
    assert not armed.filling and not armed.armed
