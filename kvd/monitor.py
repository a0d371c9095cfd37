"""MONITOR lines: every command the server runs, as Redis's ``replicationFeedMonitors`` writes it.

A line is ``+<seconds>.<microseconds> [0 <ip:port>] "arg" "arg" ...`` (``[0 unix:<path>]`` from the unix
socket): each argument quoted the way ``sdscatrepr`` quotes it (``\\"``, ``\\\\``, ``\\n``, ``\\r``, ``\\t``,
``\\a``, ``\\b``, ``\\xHH`` for any other byte outside 0x20-0x7e). What Redis leaves out is left out here too:
administrative commands (CONFIG, CLIENT LIST, SAVE, SHUTDOWN...), requests refused before they ran (unknown,
wrong count, NOAUTH), and the passwords of AUTH and HELLO ... AUTH, shown as ``"(redacted)"``. The commands of a
transaction appear when EXEC runs them, EXEC last; an EXEC refused before it ran (-EXECABORT: memory, its
argument count, a read-only replica) is shown alone, as Redis's ``execCommandAbort`` shows it.

One difference, on purpose: an argument longer than ``ARG_LIMIT`` bytes is cut there and followed by
``... (N more bytes)`` inside its quotes. Redis quotes a 32 MiB KV chunk in full, up to 4 bytes of text per
byte, to every monitor, which would turn one SET into 128 MiB of output; a monitor is for seeing which
commands arrive, and the first bytes of a value show that.

Cost when nobody monitors: one truth test of the server's (empty) set of monitors per command.
"""

from __future__ import annotations

import time
from typing import Any

from kvd.redact import secrets

ARG_LIMIT = 256
REDACTED = b'"(redacted)"'

_ESCAPES = {0x5C: b"\\\\", 0x22: b'\\"', 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t", 0x07: b"\\a", 0x08: b"\\b"}
_QUOTED = [_ESCAPES.get(b, bytes([b]) if 0x20 <= b <= 0x7E else b"\\x%02x" % b) for b in range(256)]


def quote(arg: bytes | bytearray | memoryview) -> bytes:
    """``sdscatrepr``: the argument in double quotes with C escapes, cut after ``ARG_LIMIT`` bytes."""
    data = bytes(arg[:ARG_LIMIT])
    body = b"".join(_QUOTED[b] for b in data)
    if len(arg) > ARG_LIMIT:
        body += b"... (%d more bytes)" % (len(arg) - ARG_LIMIT)
    return b'"' + body + b'"'


def line(addr: str, argv: list[Any], now_us: int | None = None) -> bytes:
    """The MONITOR line for ``argv`` sent by the client at ``addr`` (``now_us``: Unix time in microseconds)."""
    seconds, micros = divmod(time.time_ns() // 1000 if now_us is None else now_us, 1_000_000)
    secret = secrets(argv)
    quoted = [REDACTED if i in secret else quote(arg) for i, arg in enumerate(argv)]
    return b"+%d.%06d [0 %s] %s\r\n" % (seconds, micros, addr.encode(), b" ".join(quoted))
