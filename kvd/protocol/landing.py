"""Landing a whole repeated request in one read: the shape of the last large SET predicts the next one.

A SET of a 256 KiB value received the general way costs three reads: a 16 KiB window that brings the header and
the start of the value, the rest of the value straight into its own buffer, then the two-byte terminator. Each
read is a system call and two Python callbacks (``get_buffer``, ``buffer_updated``) that run with caches the
kernel's copy has just flushed. Redis gets by with one read because its query buffer grows to hold the whole
request and then becomes the value object.

A KV-cache client repeats one shape: ``SET <key> <value of fixed length>``. After two requests of that shape
in a row (three arguments, the last one large, same name and value length), the parser offers the next read
a buffer the size of such a request with a key up to ``KEY_SLACK`` bytes longer. If the bytes that arrive
have that shape, the value is already in a buffer of its own, behind a header whose length the parser now
knows: the front and the tail are cut off without copying (``del buf[:n]`` only advances CPython's
``ob_start``, and a small shrink keeps the allocation), so the value is received with no user-space copy and
in one read. Bytes that came after the request (a shorter key, pipelined requests) are moved to the receive
buffer first.

The cut happens in the read callback itself, so the command runs in the same loop step. That needs one thing
the buffer protocol does not give: uvloop holds its view of the buffer it read into until ``buffer_updated``
returns, and a bytearray with a live view cannot be resized. So the event loop is handed an *unpinned* view
(``unpinned_view`` in ``kvd/buffers.py``): a memoryview made with ``PyMemoryView_FromMemory`` over the
bytearray's memory, which does not export the bytearray. It is safe because the parser keeps the bytearray
referenced and does not resize it until the read into that view has been reported, and the event loop writes
only in the read that directly follows ``get_buffer`` (uvloop, asyncio's selector and SSL transports all do).
Deferring the cut one loop step instead cost an extra loop iteration per request (a ``call_soon`` and an
``epoll_wait``).

A request of another shape is detected from its first bytes. What landed becomes the receive buffer until it
is parsed (or, if only a few bytes arrived, is copied into it), and landing stays off until two large requests
of one shape re-arm it. So a mismatch costs at most one copy of the value that did arrive (the general path
copies the part of a large value that came with its header), never a wrong parse.

Measured (256 KiB SETs from one client over loopback, kvd with and without landing alternated second by
second, medians of 12): 6 % less server CPU per request, 4 % more requests per second. Modest, because the
kernel's copy and the wake-ups dominate a large SET.

The header check (``match_header_python`` below) has a twin in C, ``kvd/protocol/_receive.c``, used where it was
built (``kvd/protocol/receive.py``): the dozen steps here cost about 4 us in the running server, where each
runs right after the value's copy has gone through the caches; the C call is one. tests/unit/test_landing_match.py
checks that both give the same verdict on every prefix of valid, foreign and damaged headers.

Complexity: O(header) per check; arming and trimming are O(1).
"""

from __future__ import annotations

Match = tuple[int, bytes] | bool | None  # (header length, key) | False: another shape | None: not all in yet

LANDING_MAX = 4 << 20  # above this the two extra reads are noise next to the copy itself
KEY_SLACK = 64  # keys up to this much longer than the one that armed the template still land


class Template:
    """``<name> <key> <value>`` with a fixed name and value length, and a key of any length up to ``key_max``."""

    __slots__ = ("key_max", "name", "prefix", "size", "suffix", "value_len")

    def __init__(self, name: bytes, key_len: int, value_len: int) -> None:
        self.name = name
        self.value_len = value_len
        self.key_max = key_len + KEY_SLACK
        self.prefix = b"*3\r\n$%d\r\n%b\r\n$" % (len(name), name)  # then the key's length
        self.suffix = b"\r\n$%d\r\n" % value_len  # after the key
        # The buffer offered: room for the longest key, the value and its CRLF (skipped unread, as Redis does).
        self.size = len(self.prefix) + len(b"%d\r\n" % self.key_max) + self.key_max + len(self.suffix) + value_len + 2


def match_header_python(buf: bytearray, filled: int, prefix: bytes, suffix: bytes, key_max: int) -> Match:
    """How the first ``filled`` bytes of ``buf`` start, against a template's ``prefix``, ``suffix`` and
    ``key_max``: ``(header length, key)`` once all of a header of that shape is there, None while what arrived
    is an unfinished request of that shape, False for anything else (which the general parser then reads, with
    its exact errors)."""
    n = len(prefix)
    if filled < n:
        return None if prefix.startswith(buf[:filled]) else False
    if not buf.startswith(prefix):
        return False
    nl = buf.find(b"\r\n", n, filled)
    if nl < 0:
        return None if filled - n <= 20 else False
    digits = buf[n:nl]
    # Canonical decimal only (no sign, no leading zero): anything else is the general parser's to judge.
    if not digits.isdigit() or (digits[0] == 48 and len(digits) > 1) or len(digits) > 20:
        return False
    key_len = int(digits)
    if key_len > key_max:
        return False
    key_end = nl + 2 + key_len
    if filled <= key_end:
        return None
    if filled < key_end + len(suffix):
        return None if suffix.startswith(buf[key_end:filled]) else False
    if not buf.startswith(suffix, key_end):
        return False
    return key_end + len(suffix), bytes(buf[nl + 2 : key_end])
