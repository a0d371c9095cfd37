"""SLOWLOG: the last commands that ran longer than ``slowlog-log-slower-than`` microseconds, newest first.

An entry is what Redis's ``slowlogCreateEntry`` keeps: a unique id, the Unix time the command finished, its
duration in microseconds, its arguments, the client's address and its name. Arguments are copied, never kept
by reference (a request's buffers are recycled, and a 32 MiB value must not stay alive because it was slow):
at most ``MAX_ARGS`` of them, the last replaced by ``... (N more arguments)`` when there were more, each cut
at ``MAX_STRING`` bytes and followed by ``... (N more bytes)``; secrets are ``(redacted)`` (kvd/redact.py).
EXEC is not logged, the commands it ran are (Redis's ``CMD_SKIP_SLOWLOG``).

Duration: the time the handler ran on the event loop, plus, for a command that read a cold value, the wait
for the disk; Redis never waits, kvd's clients do. ``slowlog-log-slower-than`` 0 logs every command, a
negative value none. ``slowlog-max-len`` bounds the entries (a ``deque`` with ``maxlen``: O(1) per entry).

Cost on the hot path: none here. The connection compares each command's duration with ``watch_ns`` (the
smaller of this threshold and the latency monitor's) and calls in only when it is reached.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Any

from kvd.redact import REDACTED, secrets

MAX_ARGS = 32
MAX_STRING = 128


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    time: int  # Unix seconds
    duration_us: int
    args: list[bytes]
    peer: str
    name: bytes


class SlowLog:
    def __init__(self, slower_than_us: int, max_len: int) -> None:
        self._entries: deque[Entry] = deque(maxlen=max_len)
        self._next_id = 0
        self.slower_than_us = slower_than_us

    def configure(self, slower_than_us: int, max_len: int) -> None:
        self.slower_than_us = slower_than_us
        if max_len != self._entries.maxlen:
            self._entries = deque(islice(self._entries, max_len), maxlen=max_len)  # the newest, still first

    def threshold_ns(self) -> int | None:
        """The duration from which a command is logged, or None when the log is off."""
        return None if self.slower_than_us < 0 else self.slower_than_us * 1000

    def push(self, argv: list[Any], duration_ns: int, peer: str, name: bytes) -> None:
        if self.slower_than_us < 0 or duration_ns < self.slower_than_us * 1000:
            return
        entry = Entry(self._next_id, int(time.time()), duration_ns // 1000, _copy_args(argv), peer, name)
        self._next_id += 1
        self._entries.appendleft(entry)

    def latest(self, count: int) -> list[Entry]:
        """The newest ``count`` entries (all of them for -1)."""
        entries = self._entries
        if count < 0 or count >= len(entries):
            return list(entries)
        return [entries[i] for i in range(count)]

    def reset(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _copy_args(argv: list[Any]) -> list[bytes]:
    secret = secrets(argv)
    kept = len(argv) if len(argv) <= MAX_ARGS else MAX_ARGS - 1
    args = [REDACTED if i in secret else _cut(argv[i]) for i in range(kept)]
    if kept < len(argv):
        args.append(b"... (%d more arguments)" % (len(argv) - kept))
    return args


def _cut(arg: Any) -> bytes:
    if len(arg) <= MAX_STRING:
        return bytes(arg)
    return bytes(arg[:MAX_STRING]) + b"... (%d more bytes)" % (len(arg) - MAX_STRING)
