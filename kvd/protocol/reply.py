"""RESP2/RESP3 reply encoding into a list of buffers, never joining a large value into a new object.

Handlers write replies through a ``ReplyWriter`` bound to the connection's protocol version. Small replies are
built as ``bytes`` (one allocation each). A bulk string of ``BIG_REPLY`` bytes or more is appended as three
parts, header, ``memoryview(value)`` and CRLF, so the stored value itself is handed to the transport: the
connection coalesces the small parts and writes large views separately (``Client.flush_replies`` in
kvd/connection.py), and the only copy left is the kernel's. Stored values are never mutated after they are
stored, which is what makes handing out views safe.

RESP3 differences handled here: nulls are ``_`` instead of ``$-1``/``*-1``, maps are ``%`` instead of flat
arrays, sets ``~``, booleans ``#t``/``#f``, doubles ``,``, and verbatim strings ``=`` (used by INFO). Attribute
replies (``|``) are never sent: redis-py's pure-Python RESP3 parser cannot read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .errors import scrub

BIG_REPLY = 16 * 1024

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
QUEUED = b"+QUEUED\r\n"
CRLF = b"\r\n"
NULL_BULK = b"$-1\r\n"
NULL_ARRAY = b"*-1\r\n"
NULL3 = b"_\r\n"
EMPTY_ARRAY = b"*0\r\n"
ZERO = b":0\r\n"
ONE = b":1\r\n"

_SMALL_INTS = [b":%d\r\n" % i for i in range(-2, 1024)]

Buffer = bytes | bytearray | memoryview


class ReplyWriter:
    """Appends encoded replies to ``out``. ``proto`` is 2 or 3 and may change (HELLO). ``errors`` counts the
    error replies written (a command that adds to it failed: INFO commandstats), and ``on_error`` sees each
    one's message (the server's INFO errorstats); it must not refer back to the connection, or the two would
    form a cycle that outlives the socket until the garbage collector runs."""

    __slots__ = ("errors", "on_error", "out", "proto")

    def __init__(self, out: list[Buffer], proto: int = 2, on_error: Callable[[str], None] | None = None) -> None:
        self.out = out
        self.proto = proto
        self.errors = 0
        self.on_error = on_error

    def raw(self, data: bytes) -> None:
        self.out.append(data)

    def ok(self) -> None:
        self.out.append(OK)

    def simple(self, text: str) -> None:
        self.out.append(b"+" + scrub(text).encode() + CRLF)

    def error(self, message: str) -> None:
        self.errors += 1
        if self.on_error is not None:
            self.on_error(message)
        self.out.append(b"-" + scrub(message).encode("utf-8", "surrogateescape") + CRLF)

    def integer(self, n: int) -> None:
        if -2 <= n < 1024:
            self.out.append(_SMALL_INTS[n + 2])
        else:
            self.out.append(b":%d\r\n" % n)

    def bulk(self, value: Buffer) -> None:
        n = len(value)
        if n < BIG_REPLY:
            self.out.append(b"$%d\r\n%s\r\n" % (n, value))
        else:
            self.out.append(b"$%d\r\n" % n)
            self.out.append(value if isinstance(value, memoryview) else memoryview(value))
            self.out.append(CRLF)

    def text(self, value: str) -> None:
        self.bulk(value.encode("utf-8", "surrogateescape"))

    def null(self) -> None:
        """A missing value: ``$-1`` in RESP2, ``_`` in RESP3."""
        self.out.append(NULL3 if self.proto == 3 else NULL_BULK)

    def null_array(self) -> None:
        self.out.append(NULL3 if self.proto == 3 else NULL_ARRAY)

    def array(self, n: int) -> None:
        self.out.append(b"*%d\r\n" % n)

    def push_header(self, n: int) -> None:
        """An out-of-band message of ``n`` parts (pub/sub): a RESP3 push, a plain array in RESP2."""
        self.out.append(b">%d\r\n" % n if self.proto == 3 else b"*%d\r\n" % n)

    def map(self, n: int) -> None:
        """Header of a map of ``n`` pairs: ``%n`` in RESP3, a flat array of 2n in RESP2."""
        self.out.append(b"%%%d\r\n" % n if self.proto == 3 else b"*%d\r\n" % (2 * n))

    def set(self, n: int) -> None:
        self.out.append(b"~%d\r\n" % n if self.proto == 3 else b"*%d\r\n" % n)

    def boolean(self, value: bool) -> None:
        if self.proto == 3:
            self.out.append(b"#t\r\n" if value else b"#f\r\n")
        else:
            self.out.append(ONE if value else ZERO)

    def double(self, value: float) -> None:
        text = _format_double(value)
        if self.proto == 3:
            self.out.append(b"," + text + CRLF)
        else:
            self.bulk(text)

    def verbatim(self, text: str, fmt: bytes = b"txt") -> None:
        """Verbatim string (RESP3, how Redis sends INFO), or a plain bulk string in RESP2."""
        data = text.encode("utf-8", "surrogateescape")
        if self.proto == 3:
            self.out.append(b"=%d\r\n%s:%s\r\n" % (len(data) + 4, fmt, data))
        else:
            self.bulk(data)

    def bulk_array(self, items: Iterable[Buffer | None]) -> None:
        items = list(items)
        self.array(len(items))
        for item in items:
            if item is None:
                self.null()
            else:
                self.bulk(item)

    def str_map(self, pairs: list[tuple[str, object]]) -> None:
        """A map with bulk-string keys; values may be str, int, bytes, None, list or nested pair lists."""
        self.map(len(pairs))
        for key, value in pairs:
            self.text(key)
            self.value(value)

    def value(self, value: object) -> None:
        """Encode a Python value: str/bytes -> bulk, int -> integer, None -> null, list -> array,
        ``Pairs`` -> map."""
        if isinstance(value, bool):
            self.boolean(value)
        elif isinstance(value, int):
            self.integer(value)
        elif isinstance(value, str):
            self.text(value)
        elif isinstance(value, bytes | bytearray | memoryview):
            self.bulk(value)
        elif value is None:
            self.null()
        elif isinstance(value, Status):
            self.simple(value.text)
        elif isinstance(value, Pairs):
            self.str_map(value.items)
        elif isinstance(value, float):
            self.double(value)
        else:
            items = list(value)  # type: ignore[call-overload]
            self.array(len(items))
            for item in items:
                self.value(item)


class Status:
    """A simple-string (``+text``) value inside a nested reply; redis-cli requires these for doc flags."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Pairs:
    """Marks a list of (name, value) pairs to be encoded as a map (RESP3) or flat array (RESP2)."""

    __slots__ = ("items",)

    def __init__(self, items: list[tuple[str, object]]) -> None:
        self.items = items


def _format_double(value: float) -> bytes:
    if value != value:
        return b"nan"
    if value in (float("inf"), float("-inf")):
        return b"inf" if value > 0 else b"-inf"
    return repr(value).encode()
