"""A plain-socket RESP client for byte-exact protocol tests.

``read_reply()`` returns the exact bytes of one complete reply (RESP2 or RESP3, aggregates included), so tests
compare what the server wrote, not what a client library made of it. ``parse()`` turns such bytes into Python
values when the shape matters more than the bytes. Every wait is bounded by ``timeout``.
"""

from __future__ import annotations

import socket
import time
from typing import Any

CRLF = b"\r\n"


class ConnectionClosed(Exception):
    """The server closed the connection before a complete reply arrived."""


def encode(*args: bytes | str | int) -> bytes:
    """One request as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n" % len(a))
        out.append(bytes(a))
        out.append(CRLF)
    return b"".join(out)


class RawConnection:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    # -- context manager ----------------------------------------------------------------------------------
    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending --------------------------------------------------------------------------------------------
    def send(self, data: bytes | bytearray | memoryview) -> None:
        self.sock.sendall(data)

    def send_command(self, *args: bytes | str | int) -> None:
        self.send(encode(*args))

    def command(self, *args: bytes | str | int) -> bytes:
        """Send one request, return the exact bytes of its reply."""
        self.send_command(*args)
        return self.read_reply()

    def inline(self, line: bytes) -> bytes:
        """Send an inline (telnet-style) command line, return the exact bytes of its reply."""
        self.send(line + CRLF)
        return self.read_reply()

    # -- receiving ------------------------------------------------------------------------------------------
    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete reply within {self.timeout} s; have {bytes(self.buf[:200])!r}")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            raise TimeoutError(f"no complete reply within {self.timeout} s; have {bytes(self.buf[:200])!r}") from None
        except ConnectionResetError as e:
            raise ConnectionClosed(f"connection reset; have {bytes(self.buf[:200])!r}") from e
        if not chunk:
            raise ConnectionClosed(f"connection closed; have {bytes(self.buf[:200])!r}")
        self.buf += chunk

    def recv_exact(self, n: int, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def recv_until(self, delim: bytes = CRLF, timeout: float | None = None) -> bytes:
        """Bytes up to and including ``delim``."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        start = 0
        while True:
            i = self.buf.find(delim, start)
            if i >= 0:
                out = bytes(self.buf[: i + len(delim)])
                del self.buf[: i + len(delim)]
                return out
            start = max(0, len(self.buf) - len(delim) + 1)
            self._fill(deadline)

    def read_reply(self, timeout: float | None = None) -> bytes:
        """The exact bytes of one complete reply."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        end = None
        while True:
            end = reply_end(self.buf, 0)
            if end is not None:
                break
            self._fill(deadline)
        out = bytes(self.buf[:end])
        del self.buf[:end]
        return out

    def read_value(self, timeout: float | None = None) -> Any:
        return parse(self.read_reply(timeout))

    def read_replies(self, n: int, timeout: float | None = None) -> list[bytes]:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        out = []
        for _ in range(n):
            out.append(self.read_reply(max(0.001, deadline - time.monotonic())))
        return out

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True if the server closes the connection (EOF or reset) within ``timeout`` after any pending data."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
            self.buf += chunk
        return False


def reply_end(buf: bytes | bytearray, pos: int) -> int | None:
    """Index just past the reply starting at ``pos``, or None if ``buf`` does not hold all of it yet."""
    nl = buf.find(CRLF, pos)
    if nl < 0:
        return None
    kind = buf[pos : pos + 1]
    head = bytes(buf[pos + 1 : nl])
    after = nl + 2
    if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return after
    if kind in (b"$", b"!", b"="):
        n = int(head)
        if n < 0:
            return after
        return after + n + 2 if len(buf) >= after + n + 2 else None
    if kind in (b"*", b"~", b">", b"%", b"|"):
        n = int(head)
        if n < 0:
            return after
        if kind in (b"%", b"|"):
            n *= 2
        p = after
        for _ in range(n):
            p = reply_end(buf, p)
            if p is None:
                return None
        if kind == b"|":  # an attribute is followed by the reply it annotates
            return reply_end(buf, p)
        return p
    raise ValueError(f"not a RESP reply type byte: {bytes(buf[pos : pos + 40])!r}")


class Error(str):
    """An error reply (``-`` or ``!``), kept apart from simple strings."""


def parse(data: bytes) -> Any:
    """Decode one complete reply: bulk -> bytes, simple -> str, error -> Error, map -> dict, set -> set."""
    value, end = _parse(data, 0)
    if end != len(data):
        raise ValueError(f"trailing bytes after reply: {data[end : end + 40]!r}")
    return value


def _parse(buf: bytes, pos: int) -> tuple[Any, int]:
    nl = buf.index(CRLF, pos)
    kind = buf[pos : pos + 1]
    head = buf[pos + 1 : nl]
    after = nl + 2
    if kind == b"+":
        return head.decode(), after
    if kind == b"-":
        return Error(head.decode()), after
    if kind == b":" or kind == b"(":
        return int(head), after
    if kind == b"_":
        return None, after
    if kind == b",":
        return float(head), after
    if kind == b"#":
        return head == b"t", after
    if kind in (b"$", b"!", b"="):
        n = int(head)
        if n < 0:
            return None, after
        body = buf[after : after + n]
        if kind == b"!":
            return Error(body.decode()), after + n + 2
        return body, after + n + 2
    if kind in (b"*", b"~", b">"):
        n = int(head)
        if n < 0:
            return None, after
        items = []
        p = after
        for _ in range(n):
            v, p = _parse(buf, p)
            items.append(v)
        if kind == b"~" and all(isinstance(v, (bytes, int, str, float, type(None))) for v in items):
            return set(items), p
        return items, p  # an array, push, or a set of maps (COMMAND INFO's key specs)
    if kind in (b"%", b"|"):
        n = int(head)
        d = {}
        p = after
        for _ in range(n):
            k, p = _parse(buf, p)
            v, p = _parse(buf, p)
            d[k] = v
        if kind == b"|":
            return _parse(buf, p)
        return d, p
    raise ValueError(f"not a RESP reply type byte: {buf[pos : pos + 40]!r}")
