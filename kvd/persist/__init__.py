"""The disk tier: append-only, checksummed segment files with crash recovery (see ``log.py``)."""

from .log import CorruptRecord, LogOwner, PersistError, SegmentLog
from .record import Location
from .recovery import RecoveryReport

__all__ = ["CorruptRecord", "Location", "LogOwner", "PersistError", "RecoveryReport", "SegmentLog"]
