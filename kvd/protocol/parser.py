"""Incremental RESP request parser that receives large arguments in place.

A request is either a multibulk (``*<n>\\r\\n`` followed by n ``$<len>\\r\\n<bytes>\\r\\n``) or an inline line
(telnet style, split with Redis's quoting rules). Bytes arrive in arbitrary pieces; the parser keeps exactly
enough state to resume at any byte boundary.

Receiving in place. The hot path of kvd is a SET of a 1-32 MiB KV chunk. A parser that appends every read to a
bytearray and slices the value out copies each value at least twice. Instead this parser drives an asyncio
``BufferedProtocol``: ``get_buffer()`` hands the event loop the memory to ``recv_into``. Small requests go into
one reusable receive buffer. When a bulk header announces an argument of ``BIG_ARG`` bytes or more (Redis uses
the same 32 KiB threshold, ``PROTO_MBULK_BIG_ARG``), the parser allocates a bytearray of exactly that length,
moves the few bytes already received into it, and from then on ``get_buffer()`` returns the unfilled tail of
that bytearray. The kernel copies the value straight into its final home, and the keyspace stores that object
as is: zero user-space copies between socket and RAM tier. With the C receiver (``kvd/protocol/receive.py``)
the parser tells it once where the rest goes (``receiver.expect``), and it takes those reads without calling
back until the value is in. It also lands requests itself: after each read the parser arms it with the shape the
next request may land as (``receiver.land``), and it reports a landing request only once it is whole.

Limits (Redis's, ``networking.c``): header and inline lines up to 64 KiB; a multibulk count up to INT_MAX, with
no up-front allocation for it (args are appended as they arrive, so ``*1000000000`` costs nothing); a bulk up
to ``proto-max-bulk-len``; the bytes of one pending command up to ``client-query-buffer-limit``. Before AUTH
the limits are tighter (10 arguments, 16 KiB per bulk, 1 MiB per command), the defence Redis added for
CVE-2021-32675. A violation raises ``ProtocolError`` (reply, then close) or ``DropConnection`` (close).

Landing. After a ``<name> <key> <large value>`` request the next read is offered a buffer the size of such a
request; if the same shape arrives, it is received whole, in one read, into a buffer that becomes the value once
its header is cut off (``kvd/protocol/landing.py``). Anything else is parsed as below.

Like Redis (``processMultibulkBuffer``), the two bytes after a bulk's payload are skipped without being read:
``$4\r\nPINGxx`` is ``PING``. The paths that take whole small requests (``_multibulk.c``, or without it hiredis
and two patterns) do the same, so every path and every split of the input agrees.

Complexity: O(bytes received) per request, with one ``find`` per header line; commands are yielded in order.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

try:  # a declared dependency; without it the pure-Python paths below parse everything, only slower
    import hiredis
except ImportError:  # pragma: no cover
    hiredis = None

from kvd.buffers import uninitialized, unpinned_view

from .errors import DropConnection, ProtocolError, scrub
from .landing import LANDING_MAX, Template
from .receive import match_header

try:  # kvd/protocol/_multibulk.c, where it was built: whole small requests in one C call per read
    from ._multibulk import parse_requests
except ImportError:  # pragma: no cover - no C compiler at install time
    parse_requests = None

# Which path takes whole small requests (INFO server ``request_parser``).
SMALL_REQUESTS = "c" if parse_requests is not None else "hiredis" if hiredis is not None else "python"

if TYPE_CHECKING:
    from hiredis import Reader

    from kvd.protocol._receive import Receiver
    from kvd.store.bufpool import BufferPool

BIG_ARG = 32 * 1024
BIG_UPFRONT = 32 * 1024 * 1024
INLINE_MAX = 64 * 1024
RECV_BUFFER = 256 * 1024
RECV_WINDOW = 16 * 1024
INT_MAX = 2**31 - 1
UNAUTH_MAX_ARGS = 10
UNAUTH_MAX_BULK = 16 * 1024
UNAUTH_MAX_QUERY = 1024 * 1024

_SPACE = b" \t\n\r\v\f"
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_HEX = b"0123456789abcdefABCDEF"

Args = list[bytes | bytearray]

# Whole small requests, where kvd/protocol/_multibulk.c is built: one C call per read takes every whole request of
# bulks below _SMALL_BULK and stops before anything else, which the general path reads (and answers with Redis's
# exact errors). It replaced, per read, the guard pattern, two feeds, three gets and a join of the batch path below
# (a single unpipelined request paid all of them): in-process SET 64 B -P 1 about 9.5 -> 6.2 us, and
# redis-benchmark -P 1 SET with appendfsync everysec 0.47x -> 0.58x of redis-server (docs/benchmarks.md). Where it
# is not built, the two paths below take small requests.
#
# The fast path: a whole small multibulk already in the buffer, matched with two compiled patterns instead of a
# byte-level state machine. Anything else (partial input, large or malformed bulks, unauthenticated clients)
# takes the general path, which produces Redis's exact errors. Measured: about 2x fewer CPU cycles per small
# pipelined command than the general path alone.
_FAST_MULTIBULK = re.compile(rb"\*([1-9][0-9]{0,4})\r\n")
_FAST_BULK = re.compile(rb"\$(0|[1-9][0-9]{0,4})\r\n")
_FAST_MAX_ARGS = 1024
_SMALL_BULK = BIG_ARG  # parse_requests (C) takes bulks below this; larger ones are received in place

# The batch path: runs of small pipelined requests are parsed by hiredis's C reader (about 15x fewer cycles per
# command than Python). Its result is used only when it means exactly what the general path would have
# produced; otherwise the same bytes go through the paths below, which give Redis's exact errors.
# hiredis refuses the number formats Redis refuses (leading zeros, '+', spaces, "-0") and, like Redis, skips
# the two bytes after a bulk unread. What it does differently is guarded here: it allocates an aggregate's list
# as soon as it reads the count, and it reads simple ('+') and verbatim ('=') strings and big numbers ('(') as
# bytes, where Redis answers "expected '$'". Every header inside a run of requests follows a CRLF, so one
# pattern anchored on the literal "\r\n" finds both: a count or length of 5+ digits, or such an element. Other
# element types (nulls, integers, nested aggregates) come back as non-bytes and are refused after parsing. A
# value that happens to contain such bytes is a false alarm that only costs speed. The literal prefix lets sre
# skip from CRLF to CRLF: measured 6x faster than scanning every '$'/'*' with an alternation.
_RISKY = re.compile(rb"\r\n(?:[$*%~>|][0-9]{5}|[+=(])")
_RISKY_FIRST = re.compile(rb"\*[0-9]{5}")  # the first request's count has no CRLF before it


def _hiredis_parse(reader: Reader, buf: bytearray, pos: int, stop: int) -> tuple[list[Args], int] | None:
    """The requests in buf[pos:stop] if all of them are complete multibulks of bulk strings, else None.

    Completeness: once hiredis has returned every whole request, ``*0\r\n`` is fed as a probe. With nothing
    pending it parses as a top-level empty array; inside a partial request it becomes (part of) an element,
    so the reply is incomplete, a non-empty array, or an error. (hiredis itself refuses the number formats Redis
    refuses, such as leading zeros or '+', and the guard above keeps out the shapes it would read differently.)"""
    reader.feed(buf, pos, stop - pos)
    commands: list[Args] = []
    join = b"".join
    try:
        while True:
            request = reader.gets()
            if request is False:
                break
            if type(request) is not list or not request:
                return None
            join(request)  # TypeError unless every element is a bulk string (bytes): one C call per request
            commands.append(request)
        reader.feed(b"*0\r\n")
        if reader.gets() != []:
            return None
    except (hiredis.ProtocolError, TypeError):
        return None
    return (commands, stop - pos) if commands else None


class RequestParser:
    """Turns received bytes into argument lists. One instance per connection; not thread-safe."""

    __slots__ = (
        "_argc",
        "_args",
        "_armed",
        "_big",
        "_big_filled",
        "_big_len",
        "_buf",
        "_bulk_len",
        "_end",
        "_land",
        "_land_filled",
        "_land_header",
        "_land_key",
        "_need_crlf",
        "_offered",
        "_pending_bytes",
        "_reader",
        "_shape",
        "_start",
        "_template",
        "_window",
        "authenticated",
        "held_back",
        "max_bulk",
        "pool",
        "query_limit",
        "receiver",
    )

    def __init__(
        self, *, max_bulk: int, query_limit: int, authenticated: bool = True, pool: BufferPool | None = None
    ) -> None:
        self.pool = pool  # recycled value buffers (kvd/store/bufpool.py), skipping zero-fill and page faults
        self.max_bulk = max_bulk
        self.query_limit = query_limit
        self.authenticated = authenticated
        self._buf = bytearray(RECV_BUFFER)
        self._start = 0  # first unparsed byte in _buf
        self._end = 0  # end of received bytes in _buf
        self._argc = -1  # arguments still expected by the current multibulk; -1: between commands
        self._args: Args = []
        self._bulk_len = -1  # length of the bulk whose header was read; -1: expecting a header
        self._big: bytearray | None = None  # in-place destination of a large bulk
        self._big_filled = 0
        self._big_len = 0  # declared length of the large bulk (its buffer may still be growing towards it)
        self._need_crlf = False  # a large bulk is complete; its trailing CRLF is next in _buf
        self._pending_bytes = 0  # bytes of the arguments of the command in progress
        self._window = RECV_WINDOW  # how much of the receive buffer the next read may fill
        self._reader: Reader | None = None  # hiredis reader for the batch path, kept while it holds no input
        self._offered = 0  # the size of the last buffer handed out (a full read means more is waiting)
        self._template: Template | None = None  # the shape of the last large request: what the next may land as
        self._shape: tuple[bytes, int] | None = None  # (name, value length) of the last large request
        self._land: bytearray | None = None  # the buffer a whole request is landing in
        # Unauthenticated, the parser stops after each request: the next one is read under the limits the first
        # leaves (an AUTH lifts them), as Redis reads one request at a time. ``feed(0, ...)`` parses the rest.
        self.held_back = False
        self._land_filled = 0
        self._land_header = 0  # the landing request's header length, once all of it matched the template
        self._land_key = b""  # and its key
        self.receiver: Receiver | None = None  # kvd/protocol/_receive.c, set by the connection where it is built
        self._armed: Template | None = None  # the shape the receiver lands the next request as (land())

    # -- the BufferedProtocol side -------------------------------------------------------------------------

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Memory for the next ``recv_into``: the tail of a large bulk, or free space in the receive buffer.

        ``sizehint`` (asyncio's BufferedProtocol argument) is ignored: the parser knows better what comes next."""
        land = self._land
        if land is not None:
            return unpinned_view(land, self._land_filled)
        big = self._big
        if big is not None:
            if self._big_filled == len(big):  # a declared length above BIG_UPFRONT: grow by doubling
                big.extend(bytes(min(len(big), self._big_len - len(big))))
            return memoryview(big)[self._big_filled :]
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = 0
            if len(self._buf) > RECV_BUFFER:  # a landing buffer or a long line took its place: let it go
                self._buf = bytearray(RECV_BUFFER)
            if self.receiver is None:  # a receiver lands requests itself (land(), armed by feed)
                template = self._landing_template()
                if template is not None:
                    land = self._land = uninitialized(template.size)
                    self._land_filled = 0
                    return unpinned_view(land, 0)
        elif len(self._buf) - end < BIG_ARG:
            # Slide the unparsed tail to the front. Never resize _buf in place: the event loop may still hold
            # a view of it from the previous read, and a resize with live exports raises BufferError.
            tail = len(self._buf) - end
            if start > 0 and start + tail >= BIG_ARG:
                self._buf[: end - start] = self._buf[start:end]
            else:  # a header/inline line longer than the buffer: grow (bounded by INLINE_MAX checks)
                grown = bytearray(len(self._buf) * 2)
                grown[: end - start] = self._buf[start:end]
                self._buf = grown
            self._start, self._end = 0, end - start
        end = self._end
        view = memoryview(self._buf)[end : end + self._window]
        self._offered = len(view)
        return view

    def missing(self) -> int:
        """Bytes still to come before the large argument being received is complete (its CRLF included), or 0
        between large arguments. The connection sets the socket's receive low-water mark from it."""
        if self._big is not None:
            return self._big_len - self._big_filled + 2
        if self._land_header:
            assert self._template is not None
            return self._land_header + self._template.value_len + 2 - self._land_filled
        return 0

    def feed(self, nbytes: int, out: list[Args], land: bytearray | None = None) -> None:
        """Account for ``nbytes`` received into the last buffer and append complete commands to ``out``.
        ``land``: the receiver landed a request in this buffer of its own (``nbytes`` from its start).

        Raises ProtocolError/DropConnection after appending every command that preceded the bad bytes.
        """
        if land is not None:
            self._land = land
            self._land_filled = self._land_header = 0
        if self._land is not None:
            if self._receive_landing(nbytes, out):
                self._parse(out)
        elif (big := self._big) is not None:
            self._big_filled += nbytes
            if self._big_filled < self._big_len:
                self._hand_over_big()  # a value above BIG_UPFRONT, grown to here
            else:
                self._big = None
                self._args.append(big)
                self._bulk_len = -1
                self._argc -= 1
                self._need_crlf = True
                self._parse(out)
        else:
            self._end += nbytes
            if nbytes == self._offered and self._window < RECV_BUFFER:
                self._window *= 2  # the sender is ahead of us: bigger reads amortise the per-read work
            self._parse(out)
        if self.receiver is not None:
            # Re-arm only when something that decides it changed: the common case, a landed request followed by
            # nothing, costs these few loads instead of two calls. (Authentication and limits re-arm themselves.)
            armed = self._armed
            if self._template is not armed or (armed is not None and (self._start != self._end or self._argc >= 0)):
                self._arm()

    def set_authenticated(self, value: bool) -> None:
        self.authenticated = value
        self._arm()

    def set_limits(self, max_bulk: int, query_limit: int) -> None:
        """``proto-max-bulk-len`` and ``client-query-buffer-limit`` changed (CONFIG SET)."""
        self.max_bulk = max_bulk
        self.query_limit = query_limit
        self._arm()

    def _landing_template(self) -> Template | None:
        """The shape the next request may land as: there is one, the parser is between requests with nothing
        unparsed, and such a request passes the connection's limits."""
        template = self._template
        if (
            template is not None
            and self._start == self._end
            and self._argc < 0  # between requests
            and self.authenticated
            and template.value_len <= self.max_bulk
            and template.size <= self.query_limit
        ):
            return template
        return None

    def _arm(self) -> None:
        """Tell the receiver which shape, if any, the next request may land as (one C call when it changes)."""
        if self.receiver is not None:
            template = self._landing_template()
            if template is not self._armed:
                self._armed = template
                self.receiver.land(template)

    def _hand_over_big(self) -> None:
        """With the C receiver, the reads until ``_big`` is full go to it, not through ``get_buffer``/``feed``."""
        big = self._big
        if self.receiver is not None and big is not None and self._big_filled < len(big):
            self.receiver.expect(big, self._big_filled, len(big))

    # -- landing (kvd/protocol/landing.py) ---------------------------------------------------------------------

    def _receive_landing(self, nbytes: int, out: list[Args]) -> bool:
        """Account for bytes that arrived in the landing buffer. True if the receive buffer now holds bytes for
        the general parser: another request than expected, or what followed the landed one."""
        land = self._land
        template = self._template
        assert land is not None and template is not None
        filled = self._land_filled = self._land_filled + nbytes
        header_len = self._land_header
        if not header_len:
            verdict = match_header(land, filled, template.prefix, template.suffix, template.key_max)
            if verdict is False:
                self._abandon_landing()
                return True
            if verdict is None:
                return self._unfinished_landing()
            header_len, self._land_key = verdict  # type: ignore[misc]
            self._land_header = header_len
        value_len = template.value_len
        end = header_len + value_len + 2
        if filled < end:
            return self._unfinished_landing()
        self._land = None
        self._land_header = 0
        key = self._land_key
        extra = filled - end
        if extra:  # what followed the request (pipelined bytes) goes to the receive buffer before the cut
            if extra > len(self._buf):
                self._buf = bytearray(extra)
            self._buf[:extra] = memoryview(land)[end:filled]
            self._start, self._end = 0, extra
        del land[:header_len]  # O(1): CPython advances the bytearray's start
        del land[value_len:]  # a shrink by the CRLF and the key slack keeps the allocation
        out.append([template.name, key, land])
        return bool(extra)

    def _unfinished_landing(self) -> bool:
        """Part of a landing request is in. Without a receiver, the next read continues it. A receiver reports
        only whole requests or other shapes, so from it this is a request it did not take for the template (its
        shape changed while it was arriving): the general parser reads it, as any other."""
        if self.receiver is None:
            return False
        self._abandon_landing()
        return True

    def _abandon_landing(self) -> None:
        """Not the expected request: what landed is parsed by the general path, and landing stays off until the
        next large request re-arms it."""
        land, filled = self._land, self._land_filled
        assert land is not None
        self._land = None
        self._land_header = 0
        self._template = None
        if filled <= len(self._buf) // 4:
            self._buf[:filled] = memoryview(land)[:filled]  # a few bytes (a small request): keep the buffer
        else:
            self._buf = land  # most of a request: parse it where it is rather than copy it
        self._start, self._end = 0, filled

    # -- parsing ----------------------------------------------------------------------------------------------

    def _parse(self, out: list[Args]) -> None:
        buf = self._buf
        pos = self._start
        end = self._end
        before = len(out)
        self.held_back = False
        try:
            while True:
                if not self.authenticated and len(out) > before:
                    self.held_back = pos < end
                    break
                if self._need_crlf:
                    if end - pos < 2:
                        break
                    pos += 2  # the bulk's terminator: skipped unread, as Redis does
                    self._need_crlf = False
                    if self._argc == 0:
                        self._finish(out)
                    continue
                if self._argc < 0:
                    if pos >= end:
                        break
                    if parse_requests is not None:
                        if buf[pos] == 42 and self.authenticated:
                            used = parse_requests(buf, pos, end, out, _FAST_MAX_ARGS, _SMALL_BULK)
                            if used:
                                pos += used
                                continue
                        # else: partial, large or unusual requests: the general path below
                    elif buf[pos] == 42 and self.authenticated and end - pos > 64 and hiredis is not None:
                        batch = self._batch(buf, pos, end)
                        if batch is not None:
                            out.extend(batch[0])
                            pos += batch[1]
                            continue
                        # else: partial, large or unusual requests: the general path below, which also sends
                        # a large bulk straight to its own buffer (the pattern path would just give up on it)
                    elif buf[pos] == 42 and self.authenticated:
                        m = _FAST_MULTIBULK.match(buf, pos, end)
                        if m is not None and (count := int(m.group(1))) <= _FAST_MAX_ARGS:
                            args: Args = []
                            p = m.end()
                            bulk = _FAST_BULK.match
                            for _ in range(count):
                                m = bulk(buf, p, end)
                                if m is None:
                                    break
                                start = m.end()
                                stop = start + int(m.group(1))
                                if stop + 2 > end:
                                    break
                                args.append(bytes(buf[start:stop]))
                                p = stop + 2
                            else:
                                out.append(args)
                                pos = p
                                continue
                    if buf[pos] == 42:  # '*'
                        nl = buf.find(b"\r\n", pos, end)
                        if nl < 0:
                            if end - pos > INLINE_MAX:
                                raise ProtocolError("too big mbulk count string")
                            break
                        count = _to_int(buf, pos + 1, nl)
                        if count is None or count > INT_MAX:
                            raise ProtocolError("invalid multibulk length")
                        if not self.authenticated and count > UNAUTH_MAX_ARGS:
                            raise ProtocolError("unauthenticated multibulk length")
                        pos = nl + 2
                        if count > 0:  # Redis treats *0 and negative counts as an empty request
                            self._argc = count
                            self._args = []
                            self._pending_bytes = 0
                        continue
                    nl = buf.find(b"\n", pos, end)
                    if nl < 0:
                        if end - pos > INLINE_MAX:
                            raise ProtocolError("too big inline request")
                        break
                    line_end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                    args = split_inline(bytes(buf[pos:line_end]))
                    pos = nl + 1
                    if args:
                        out.append(args)
                    continue
                # inside a multibulk: a bulk header, then its payload
                if self._bulk_len < 0:
                    if pos >= end:
                        break
                    if buf[pos] != 36:  # '$'
                        raise ProtocolError(_expected_dollar(buf[pos]))
                    nl = buf.find(b"\r\n", pos, end)
                    if nl < 0:
                        if end - pos > INLINE_MAX:
                            raise ProtocolError("too big bulk count string")
                        break
                    length = _to_int(buf, pos + 1, nl)
                    if length is None or length < 0 or length > self.max_bulk:
                        raise ProtocolError("invalid bulk length")
                    if not self.authenticated and length > UNAUTH_MAX_BULK:
                        raise ProtocolError("unauthenticated bulk length")
                    self._pending_bytes += length
                    limit = self.query_limit if self.authenticated else UNAUTH_MAX_QUERY
                    if self._pending_bytes > limit:
                        raise DropConnection("query buffer limit reached")
                    pos = nl + 2
                    self._bulk_len = length
                length = self._bulk_len
                avail = end - pos
                if avail < length + 2:
                    if length >= BIG_ARG:
                        # Up to BIG_UPFRONT the value's final buffer is allocated at once (KV chunks, the hot
                        # path); a larger declared length gets BIG_UPFRONT now and grows as bytes arrive, so a
                        # client that declares 512 MiB and sends 2 bytes does not cost 512 MiB of RSS.
                        big = (self.pool.take(length) if self.pool is not None else None) or uninitialized(
                            min(length, max(BIG_UPFRONT, avail))
                        )
                        self._big_len = length
                        self._window = RECV_WINDOW  # the next value's header should bring little of it along
                        take = min(avail, length)
                        big[:take] = memoryview(buf)[pos : pos + take]  # one copy, not slice + copy
                        pos += take
                        self._big = big
                        self._big_filled = take
                        if take == length:  # everything but the CRLF is here
                            self._big = None
                            self._args.append(big)
                            self._bulk_len = -1
                            self._argc -= 1
                            self._need_crlf = True
                            continue
                        self._hand_over_big()
                    break
                self._args.append(bytes(buf[pos : pos + length]))
                pos += length + 2
                self._bulk_len = -1
                self._argc -= 1
                if self._argc == 0:
                    self._finish(out)
        finally:
            self._start = pos

    # -- the batch path (hiredis) -----------------------------------------------------------------------------

    def _batch(self, buf: bytearray, pos: int, end: int) -> tuple[list[Args], int] | None:
        """Complete requests at the start of buf[pos:end] and the bytes they span, or None to use the slow path."""
        if _RISKY_FIRST.match(buf, pos):
            return None
        risky = _RISKY.search(buf, pos, end)
        if risky is None:
            # Usually a read ends on a request boundary: parse it all.
            batch = self._hiredis(buf, pos, end)
            if batch is not None:
                return batch
            limit = end
        else:
            limit = risky.start()  # hiredis may only see the requests that end before the first risky header
        # The last request is partial, or risky: parse up to the last request start before it. What is left goes
        # to the general path, one request at a time, and the next call batches the rest (so a false alarm deep
        # in a long pipeline costs one request, not a rescan per request).
        cut = buf.rfind(b"\r\n*", pos, limit)
        return self._hiredis(buf, pos, cut + 2) if cut > pos else None

    def _hiredis(self, buf: bytearray, pos: int, stop: int) -> tuple[list[Args], int] | None:
        # The reader is reused while a parse leaves it holding no input (a new one costs ~0.4 us per read).
        reader = self._reader or hiredis.Reader()
        self._reader = None
        batch = _hiredis_parse(reader, buf, pos, stop)
        if batch is not None:
            self._reader = reader
        return batch

    def _finish(self, out: list[Args]) -> None:
        args = self._args
        out.append(args)
        if len(args) == 3 and type(value := args[2]) is bytearray and len(value) <= LANDING_MAX and unpinned_view:
            # Arm on the second large request of one shape in a row, so that a client whose value sizes vary
            # does not pay for a mismatch on every request.
            shape = (args[0], len(value))
            template = self._template
            if template is None or shape != (template.name, template.value_len) or len(args[1]) > template.key_max:
                self._template = Template(bytes(args[0]), len(args[1]), len(value)) if shape == self._shape else None
            self._shape = shape
        self._args = []
        self._argc = -1
        self._pending_bytes = 0


def _to_int(buf: bytearray, start: int, stop: int) -> int | None:
    """Strict decimal (optional '-'); None for anything else, including '+', spaces and empty."""
    text = buf[start:stop]
    if not text or len(text) > 20:
        return None
    digits = text[1:] if text[0] == 45 else text
    # Redis's string2ll: digits only, no '+', no leading zeros, no "-0".
    if not digits or not digits.isdigit() or (digits[0] == 48 and (len(digits) > 1 or text[0] == 45)):
        return None
    return int(text)


def split_inline(line: bytes) -> list[bytes]:
    """Split an inline request like Redis's ``sdssplitargs``: quotes, ``\\xHH`` and C escapes.

    Raises ProtocolError("unbalanced quotes in request") for an unterminated quote or a closing quote that is
    not followed by a space or the end of the line.
    """
    if b'"' not in line and b"'" not in line:
        return line.split()
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        current = bytearray()
        in_dq = in_sq = False
        while True:
            if in_dq:
                if i >= n:
                    raise ProtocolError("unbalanced quotes in request")
                c = line[i]
                if c == 92 and i + 3 < n and line[i + 1] == 120 and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    current.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 92 and i + 1 < n:
                    i += 1
                    current.append(_ESCAPES.get(line[i], line[i]))
                elif c == 34:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise ProtocolError("unbalanced quotes in request")
                    i += 1
                    break
                else:
                    current.append(c)
            elif in_sq:
                if i >= n:
                    raise ProtocolError("unbalanced quotes in request")
                c = line[i]
                if c == 92 and i + 1 < n and line[i + 1] == 39:
                    i += 1
                    current.append(39)
                elif c == 39:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise ProtocolError("unbalanced quotes in request")
                    i += 1
                    break
                else:
                    current.append(c)
            else:
                if i >= n or line[i] in _SPACE:
                    break
                c = line[i]
                if c == 34:
                    in_dq = True
                elif c == 39:
                    in_sq = True
                else:
                    current.append(c)
            i += 1
        args.append(bytes(current))


def _expected_dollar(byte: int) -> str:
    """Redis's text for a bulk header that does not start with '$': the byte as it is (``%c``), where a line
    break becomes a space like any in an error. A NUL is the exception: Redis never answers it (its ``strchr``
    for the header's CR stops at the NUL, so it waits for more), and kvd shows it as ``\\x00``."""
    if byte == 0:
        return "expected '$', got '\\x00'"
    return f"expected '$', got '{scrub(bytes([byte]).decode('utf-8', 'surrogateescape'))}'"
