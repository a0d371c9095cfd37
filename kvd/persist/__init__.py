"""kvd's storage engine: crash-safe append-only segment files behind the RAM keyspace.

Public API: ``SegmentLog`` (the engine), ``Location`` (where a SET record lives), ``LogOwner`` (what the keyspace
implements), ``RecoveryReport``, and the errors ``PersistError`` / ``CorruptRecord``. Module map:

* ``record.py``: the byte format, checksums and the verifying scanner;
* ``keyfilter.py``: which keys a segment may hold, for dropping tombstones;
* ``segment.py``: segment files, hint files, preads;
* ``writer.py``: the writer thread (group commit, fsync policies, error state) and the everysec fsync thread;
* ``recovery.py``: directory lock, index rebuild, torn-tail repair;
* ``maintenance.py``: compaction and the disk budget;
* ``log.py``: ``SegmentLog``, which ties them together on the event loop.
"""

from .base import Before, CorruptRecord, Location, LogOwner, PersistError, RecoveredKeys, RecoveryReport
from .log import SegmentLog

__all__ = [
    "Before",
    "CorruptRecord",
    "Location",
    "LogOwner",
    "PersistError",
    "RecoveredKeys",
    "RecoveryReport",
    "SegmentLog",
]
