"""Background maintenance: compaction of dead space and the disk budget.

Both are one *job* at a time, started from a ``call_later`` tick on the loop. The decisions and the keyspace
calls happen on the loop; listing a segment's records runs in the maintenance thread and disk reads in the read
pool, so a job never blocks the loop. A job yields to client traffic after every few records and, when the
writer has more than ``PACE_BYTES`` queued, waits for it to catch up, so copying never starves appends.

Compaction. A sealed segment whose dead ratio (bytes not referenced by the keyspace / record bytes) reaches
``compaction_dead_ratio`` has its live records appended again at the tail. Each SET is re-validated with
``owner.live_expire`` right before it is re-appended (the key may have changed while a disk read was in
flight), carries the key's *current* TTL, takes the value from RAM when ``owner.hot_value`` has it and reads it
from disk otherwise; the keyspace is then pointed at the copy with ``owner.relocated``. When the copies are
durable (written, fdatasync'ed, earlier seals done) the segment and its hint are unlinked; reads already in
flight keep the fd, which is closed when the last one finishes.

Cold survivors. Records still live when their segment is compacted are old, and mostly stay live. Appended among
new writes, they made the new segment a compaction candidate as soon as those writes died, and were copied
again, at every generation. So when a segment of large values (at most ``SEPARATE_MAX_RECORDS`` records) has
survivors of at least 1/``SEPARATE_FRACTION`` of a segment, the active segment is rolled before the first copy
and again after the last: the survivors share a segment only with the client writes that arrive while they are
copied, and it becomes a candidate again only once they die. Smaller survivor sets are appended among new
writes (copied again later, but no extra files). Segments of many small records are not separated: copying
100 000 of them takes long enough that client writes fill the separate segment too, and rolling only spread
the survivors over more segments. Those are still copied at every generation; the fix is to rewrite a segment
in place (its survivors into a new file with the same id, as Kafka's log cleaner does), not done yet.
Measured with ``scripts/bench_compaction.py`` (docs/benchmarks.md): 48 MiB of 256 KiB values, then 2 500 SETs
of 1 MiB over 16 keys: 528-529 MiB copied by compaction before, 48-59 MiB after; 1148-1304 -> 976-1068 us of
server CPU per SET (two runs each).

Tombstones. A DEL, EXPIRE or FLUSH only matters while an older segment may still hold an earlier SET of the key
(else it can be dropped). Each segment keeps the hashes of the keys it has SET records for; a tombstone whose
key hash appears in an older live segment (any older segment, for FLUSH) is carried forward *with its original
LSN*, so it still cancels the old SET on restart but can never cancel a newer one (recovery applies records in
LSN order). Hash collisions only carry an unneeded tombstone.

Disk budget (``max_disk`` > 0). When segment bytes exceed the budget, a compaction candidate goes first (dead
bytes are free to reclaim); if there is none, the *oldest* sealed segment is retired:
its live records whose values RAM still holds are carried forward, up to half the segment's size (so every
eviction frees at least half a segment and RAM-resident data larger than the budget cannot churn forever);
every other live record is dropped (``owner.dropped``: a key whose only copy was there is forgotten,
a resident one becomes RAM-only) and counted in ``disk_evictions``. Oldest-first matches the RAM tier's LRU
spirit (KV-cache chunks written long ago are the least likely to be reused) and frees a whole file at once; if
only the active segment exists it is rolled first so it can be retired. ``max_disk`` should be a few segments.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import CorruptRecord, Location, PersistError
from .record import DEL, EXPIRE, FILE_HDR_SIZE, FLUSH, SET
from .segment import Segment, list_records

if TYPE_CHECKING:
    from .log import SegmentLog

PACE_BYTES = 64 << 20
YIELD_EVERY = 32
SEPARATE_FRACTION = 64  # survivors of at least 1/64 of a segment (4 MiB of 256) get a segment of their own ...
SEPARATE_MAX_RECORDS = 4096  # ... if their segment is one of large values (see "Cold survivors")


@dataclass
class Job:
    seg: Segment
    mode: str  # "compact" | "evict"
    aborted: bool = False
    task: asyncio.Task[None] | None = None


def pick_job(log: SegmentLog) -> Job | None:
    segs = log._segments
    ready = [s for s in segs.values() if s.ready and s is not log._active and s.id not in log._retiring]
    candidates = [s for s in ready if s.dead_ratio() >= log.compaction_dead_ratio]
    if log.max_disk and log.disk_bytes() > log.max_disk:
        if candidates:  # reclaiming dead bytes loses nothing: try that before evicting live data
            return Job(max(candidates, key=lambda s: s.dead_ratio()), "compact")
        if ready:
            return Job(min(ready, key=lambda s: s.id), "evict")
        sealing = any(s.sealed and not s.ready and s.id not in log._retiring for s in segs.values())
        if not sealing and log._active is not None and log._tail > FILE_HDR_SIZE:
            log._roll()  # only the active segment is left: seal it so it can be retired
        return None
    if candidates:
        return Job(max(candidates, key=lambda s: s.dead_ratio()), "compact")
    return None


async def run_job(log: SegmentLog, job: Job) -> None:
    loop = log._loop
    owner = log._owner
    assert loop is not None and owner is not None
    seg = job.seg
    records = await loop.run_in_executor(log._maint, list_records, seg)
    older = [s for s in log._segments.values() if s.id < seg.id and s.id not in log._retiring]

    carried = 0
    # Survivors worth a segment of their own get one: the active segment is rolled before the first copy and
    # after the last, so they do not share a segment with new writes. Mixed in with those, the same cold records
    # were copied again at every compaction of every later segment (see "Cold survivors" above).
    separate = len(records) <= SEPARATE_MAX_RECORDS and seg.live >= log.segment_size // SEPARATE_FRACTION
    rolled = False

    def stop() -> bool:
        return job.aborted or log._refusing()

    for n, r in enumerate(records):
        if stop():
            return
        if n % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
            if stop():
                return
        if r.rtype == SET:
            loc = Location(seg.id, r.offset, r.record_len, r.value_len)
            expire = owner.live_expire(r.key, loc)
            if expire is None:
                continue
            value = owner.hot_value(r.key, loc)
            if job.mode == "evict" and (value is None or carried + r.record_len > seg.size // 2):
                owner.dropped(r.key, loc)
                seg.live = max(0, seg.live - r.record_len)
                log.disk_evictions += 1
                continue
            if value is None:
                try:
                    value = await log.read_value(r.key, loc)
                except CorruptRecord:
                    if owner.live_expire(r.key, loc) is not None:
                        owner.dropped(r.key, loc)
                        seg.live = max(0, seg.live - r.record_len)
                    continue
                if stop():
                    return
                expire = owner.live_expire(r.key, loc)
                if expire is None:
                    continue
            if separate and not rolled:
                log.roll_if_used()
                rolled = True
            new = log._append(SET, r.key, value, expire, carried_from=loc)
            assert new is not None
            owner.relocated(r.key, loc, new)
            seg.live = max(0, seg.live - r.record_len)
            carried += r.record_len
            log.compacted_bytes += r.record_len
            if log._pending_bytes > PACE_BYTES:
                fut = log.barrier()
                if fut is not None:
                    try:
                        await fut
                    except PersistError:
                        return
        elif r.rtype in (DEL, EXPIRE):
            h = hash(r.key)
            if any(h in s.set_keys for s in older):
                log._append(r.rtype, r.key, b"", r.expire, lsn=r.lsn)
        elif r.rtype == FLUSH and older:
            log._append(FLUSH, b"", b"", 0, lsn=r.lsn)
    if stop():
        return
    if rolled:
        log.roll_if_used()
    if not await log.durable() or job.aborted:
        return
    await log.retire([seg])
    if job.mode == "compact":
        log.compactions += 1
    log.logger.info(
        "%s segment %s (%d records)",
        "compacted" if job.mode == "compact" else "retired",
        seg.path.name,
        len(records),
    )
