"""Shared vocabulary of the storage engine: record locations, errors, the recovery report and the owner protocol.

These are the only types the rest of kvd sees (re-exported by ``kvd.persist``). ``Location`` is a NamedTuple so the
keyspace can keep one per key cheaply (hashable, immutable, compared by value); it deliberately carries no key and
no checksum: ``read_value`` re-reads both from the record header on disk and verifies them there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol


class PersistError(Exception):
    """Configuration, locking or write errors. The text of write errors starts with ``MISCONF`` like Redis.
    ``written_upto``: for a failed write, the last ticket (``SegmentLog.ticket``) whose record was written before
    the failure and stays; the records after it were undone."""

    def __init__(self, message: str, written_upto: int = 0) -> None:
        super().__init__(message)
        self.written_upto = written_upto


class CorruptRecord(Exception):
    """A record failed verification (checksum, key, type, lengths) or its segment is gone: treat as a miss."""


class Location(NamedTuple):
    """Where a SET record lives."""

    segment: int  # segment id (0 = a write refused while the log was failing: never on disk)
    offset: int  # offset of the record's first byte in the segment file
    record_len: int  # total bytes of the record (header + key + value)
    value_len: int


# What recovery hands the keyspace: key -> (where its SET record lives, expire at in unix ms (0 = none), the
# LSN of that SET, the LSN of its last EXPIRE). The LSNs are recovery's own bookkeeping, left in place: a second
# dict of every key, built only to drop them, cost a tuple and a cache-missing insert per key at each restart.
RecoveredKeys = dict[bytes, tuple[Location, int, int, int]]

# A key's state before a write, which the log keeps until the write is on disk: the record that held the key
# and its TTL, or (None, 0) when it had none. If the write fails, the key goes back to it (``LogOwner.undo``).
Before = tuple[Location | None, int]


class LogOwner(Protocol):
    """Implemented by the keyspace; every call happens on the event-loop thread."""

    def live_expire(self, key: bytes, loc: Location) -> int | None: ...
    def hot_value(self, key: bytes, loc: Location) -> bytes | bytearray | memoryview | None: ...
    def relocated(self, key: bytes, old: Location, new: Location) -> None: ...
    def dropped(self, key: bytes, loc: Location) -> None: ...
    def undo(self, key: bytes, before: Before) -> bool: ...


@dataclass
class RecoveryReport:
    keys: int = 0  # live keys returned
    bytes: int = 0  # segment bytes processed (data files; hinted segments count at their size)
    seconds: float = 0.0
    segments: int = 0
    # Records recovery could not use: each damaged record (its header checks, its payload does not) counts one,
    # each unreadable region (no header in it checks; how many records it held is unknown) counts one.
    skipped_records: int = 0
    damaged_records: int = 0  # of those, the damaged records (their keys are dropped or repaired, not reverted)
    truncated_bytes: int = 0  # torn tail cut from the active segment
    hint_files_used: int = 0
    live_bytes: int = 0  # bytes of the live SET records
    expired_keys: int = 0  # keys left out because their TTL had passed
    warnings: list[str] = field(default_factory=list)
