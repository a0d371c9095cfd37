"""Background maintenance: compaction of dead space and the disk budget.

Both are one *job* at a time, started from a ``call_later`` tick on the loop. The decisions and the keyspace
calls happen on the loop; listing a segment's records runs in the maintenance thread and disk reads in the read
pool, so a job never blocks the loop. A job yields to client traffic after every few records and, when the
writer has more than ``PACE_BYTES`` queued, waits for it to catch up, so copying never starves appends.

Compaction. A sealed segment whose dead ratio (bytes not referenced by the keyspace / record bytes) reaches
``compaction_dead_ratio`` is compacted. Its survivors are the SETs the keyspace still points at and the
tombstones that still cancel something older (below).

* **In place** (survivors of at least 1/``IN_PLACE_FRACTION`` of a segment, the usual case): once everything
  appended so far is durable (so what made the other records dead survives a crash), the survivors are copied
  verbatim into a new file that replaces the segment under the same id (segment.py, "Rewriting in place"), and
  the keyspace is pointed at their new offsets, a few hundred keys per loop iteration. No value passes through
  the interpreter or the writer, and a record keeps its LSN, so recovery's order is exactly what it was. The new
  file gets a fresh ``Segment.key``: until every key has moved, a location in the old file still reads the old
  inode through the old ``Segment`` object, and the two can never be confused. Survivors that stay live keep
  their segment: cold data is copied when its neighbours die, then left alone while it stays live. (Appending
  survivors at the tail, as kvd did before, copied the same cold records again at every generation:
  ``scripts/bench_compaction.py``.) If the copy fails (a full disk), nothing has changed, and maintenance
  pauses for ``RETRY_AFTER_FAILURE`` seconds; client writes are not affected.
* **Carried forward** (fewer survivors): each live SET is appended again at the tail, re-validated with
  ``owner.live_expire`` right before (the key may have changed while a disk read was in flight), with the
  key's *current* TTL, its value from RAM when ``owner.hot_value`` has it and from disk otherwise; the keyspace
  is then pointed at the copy with ``owner.relocated``. When the copies are durable (written, fdatasync'ed,
  earlier seals done) the segment and its hint are unlinked; reads already in flight keep the fd, which is
  closed when the last one finishes. This threshold bounds the number of files: a file written in place holds
  at least 1/64 of a segment, and it is compacted again once half of it is dead, so a sealed segment that is
  not a candidate holds at least 1/128 of a segment of live data: at most 128 x live / segment_size of them.

Lost fsyncs. A segment in ``SegmentLog.fsync_lost`` (records a failed fsync may have left off the disk; log.py)
is compacted before anything else once writes work again, whatever its dead ratio (``_lost_job``): a strict
sync fails while the log holds one.

Tombstones. A DEL, EXPIRE or FLUSH only matters while an older segment may still hold an earlier SET of the key
(else it can be dropped), and an EXPIRE (PERSIST is one with no TTL) also while it follows the key's live SET in
the same segment: copied in place, that SET still carries the TTL it was written with. Each segment keeps a
filter of the keys it has SET records for (keyfilter.py); a tombstone whose key an older live segment may hold
(any older segment, for FLUSH) is kept: in place, or carried forward *with its original LSN*, so it still
cancels the old SET on restart but can never cancel a newer one (recovery applies records in LSN order). The
filter's false positives only keep an unneeded tombstone.

Disk budget (``max_disk`` > 0). When segment bytes exceed the budget, a compaction candidate goes first (dead
bytes are free to reclaim); if there is none, the *oldest* sealed segments are retired, as many as bring the
files back under the budget (up to ``EVICT_BATCH``) in one job, with one wait for durability. Of each,
the live records whose values RAM still holds are carried forward, up to half the segment's size (so every
eviction frees at least half a segment and RAM-resident data larger than the budget cannot churn forever);
every other live record is dropped (``owner.dropped``: a key whose only copy was there is forgotten,
a resident one becomes RAM-only, so it is lost at a restart while it stays in RAM, a clean one included; the
keyspace logs it again when it demotes it) and counted in ``disk_evictions``. Oldest-first matches the RAM tier's LRU
spirit (KV-cache chunks written long ago are the least likely to be reused) and frees a whole file at once; if
only the active segment exists it is rolled first so it can be retired. ``max_disk`` should be a few segments.
Eviction runs at the speed of sealing (an fsync per segment) and of its jobs (an fsync each); a writer faster
than that is held back by the log (``SegmentLog.when_stored``: replies wait, so clients stop sending) once the
files pass ``max_disk`` by an eighth of it or four segments, whichever is more.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .base import CorruptRecord, Location, PersistError
from .record import DEL, EXPIRE, FILE_HDR_SIZE, FLUSH, SET, Record
from .segment import Segment, list_records, rewrite

if TYPE_CHECKING:
    from .log import SegmentLog

PACE_BYTES = 64 << 20
YIELD_EVERY = 32  # records carried forward between yields to client traffic (each may read a value from disk)
SCAN_YIELD_EVERY = 512  # records checked (or moved in the index) between yields: a dict look-up each
IN_PLACE_FRACTION = 64  # survivors of at least 1/64 of a segment (4 MiB of 256) are rewritten in place
RETRY_AFTER_FAILURE = 10.0  # seconds without maintenance after a rewrite failed (a full disk, most likely)
EVICT_BATCH = 256  # segments the disk budget retires in one job at most


@dataclass
class Job:
    seg: Segment
    mode: str  # "compact" | "evict"
    more: list[Segment] = field(default_factory=list)  # evict: the next oldest segments, retired together
    aborted: bool = False
    failed: bool = False  # it could not do its work (a rewrite in place the disk refused); INFO says err
    records: int = 0  # records looked at (for the log line)
    task: asyncio.Task[None] | None = None


def request_rewrite(log: SegmentLog) -> bool:
    """BGREWRITEAOF: compact every segment that holds dead bytes now, whatever its dead ratio, once each.

    The active segment is sealed first when it has dead bytes, so it can be compacted too. The set of segments
    is fixed here, so a stream of writes cannot keep a rewrite going forever, and each is compacted once even if
    what stays in it (tombstones still needed) counts as dead. False if a rewrite is already pending."""
    if log.rewrite_pending is not None:
        return False
    active = log._active
    pending = {
        s.id
        for s in log._segments.values()
        if s is not active and s.id not in log._retiring and (s.dead > 0 or s.key in log.fsync_lost)
    }
    if active is not None and active.dead > 0:
        pending.add(active.id)
        log._roll()
    log.rewrite_pending = pending
    log.rewrites_started += 1
    return True


def _next_rewrite(log: SegmentLog) -> Job | None:
    """The next segment of a pending BGREWRITEAOF, or None; the rewrite ends when none is left."""
    pending = log.rewrite_pending
    assert pending is not None
    # By segment id: ``_segments`` is keyed by ``Segment.key``, which a rewrite in place changes.
    live: dict[int, Segment] = {}
    for seg in log._segments.values():
        if seg.id not in log._retiring and (seg.ready or seg.id not in live):
            live[seg.id] = seg
    pending.intersection_update(live)  # retired or evicted since the request
    for seg_id in sorted(pending):
        seg = live[seg_id]
        if seg.ready:  # sealed and hinted; one being sealed is picked at a later tick
            pending.discard(seg_id)
            return Job(seg, "compact")
    if not pending:
        log.rewrite_pending = None
    return None


def _lost_job(log: SegmentLog) -> Job | None:
    """The next segment in ``fsync_lost`` to rewrite, whatever its dead ratio: until the log no longer holds one,
    SAVE, BGSAVE and WAITAOF's local count fail. Runs once writes work again (``_start_job`` waits out
    ``misconf``). The active segment is rolled first, as BGREWRITEAOF does, so it can be sealed and compacted."""
    if not log.fsync_lost and not log.lost_rewrite:
        return None
    segs = log.lost_fsync_segments()
    if not segs:
        if log.lost_rewrite:
            log.lost_rewrite = False
            log.logger.warning("the records a failed fsync covered are rewritten: SAVE and WAITAOF work again")
        return None
    if not log.lost_rewrite:
        log.lost_rewrite = True
        log.logger.warning(
            "rewriting %s (a failed fsync may have left records off the disk)", ", ".join(s.path.name for s in segs)
        )
    for seg in segs:
        if seg is log._active:
            if log._tail > FILE_HDR_SIZE:
                log._roll()
            else:  # nothing in it: nothing to lose
                log.fsync_lost.discard(seg.key)
        elif seg.ready:  # one being sealed is picked at a later tick
            return Job(seg, "compact")
    return None


def pick_job(log: SegmentLog) -> Job | None:
    job = _lost_job(log)
    if job is not None:
        return job
    segs = log._segments
    ready = [s for s in segs.values() if s.ready and s is not log._active and s.id not in log._retiring]
    candidates = [s for s in ready if s.dead_ratio() >= log.compaction_dead_ratio]
    if log.max_disk and log.disk_bytes() > log.max_disk:
        if candidates:  # reclaiming dead bytes loses nothing: try that before evicting live data
            return Job(max(candidates, key=lambda s: s.dead_ratio()), "compact")
        if ready:
            return _evict_job(log, ready)
        sealing = any(s.sealed and not s.ready and s.id not in log._retiring for s in segs.values())
        if not sealing and log._active is not None and log._tail > FILE_HDR_SIZE:
            log._roll()  # only the active segment is left: seal it so it can be retired
        return None
    if log.rewrite_pending is not None:  # before the ordinary candidates, which a busy log never runs out of
        job = _next_rewrite(log)
        if job is not None:
            return job
    if candidates:
        seg = max(candidates, key=lambda s: s.dead_ratio())
        if log.rewrite_pending is not None:
            log.rewrite_pending.discard(seg.id)  # compacted now: the rewrite need not do it again
        return Job(seg, "compact")
    return None


def _evict_job(log: SegmentLog, ready: list[Segment]) -> Job:
    """The oldest ready segments that bring the files back under ``max_disk`` (at least one, at most
    ``EVICT_BATCH``): retired by one job, with one wait for durability and one pass of unlinks, where one job per
    segment fell behind a writer that filled segments faster than that (t13: 1.6 GB over an 8 MB budget)."""
    over = log.disk_bytes() - log.max_disk
    oldest = sorted(ready, key=lambda s: s.id)
    picked = [oldest[0]]
    freed = oldest[0].size
    for seg in oldest[1:EVICT_BATCH]:
        if freed >= over:
            break
        picked.append(seg)
        freed += seg.size
    return Job(picked[0], "evict", more=picked[1:])


async def run_job(log: SegmentLog, job: Job) -> None:
    loop = log._loop
    assert loop is not None
    seg = job.seg
    records = await loop.run_in_executor(log._maint, list_records, seg)
    if job.mode == "compact":
        keep = await _survivors(log, job, records)
        if keep is None:
            return
        if sum(r.record_len for r in keep) >= log.segment_size // IN_PLACE_FRACTION:
            await _rewrite_in_place(log, job, keep)
            return
        await _carry_forward(log, job, keep)
        return
    segs = [seg, *job.more]
    for n, victim in enumerate(segs):
        if n:
            records = await loop.run_in_executor(log._maint, list_records, victim)
        if not await _carry_segment(log, job, victim, records, segs):
            return
        job.records += len(records)
    await _retire(log, job, segs)


def _stop(log: SegmentLog, job: Job) -> bool:
    return job.aborted or log._refusing()


async def _survivors(log: SegmentLog, job: Job, records: list[Record]) -> list[Record] | None:
    """The records compaction must keep, in file order: live SETs and the tombstones that still cancel something
    older (see "Tombstones"). None if the job was aborted meanwhile."""
    owner = log._owner
    assert owner is not None
    seg = job.seg
    older = [s for s in log._segments.values() if s.id < seg.id and s.id not in log._retiring]
    keep: list[Record] = []
    live_here: set[bytes] = set()  # keys whose live SET is a survivor above (records come in LSN order)
    for n, r in enumerate(records):
        if n % SCAN_YIELD_EVERY == SCAN_YIELD_EVERY - 1:
            await asyncio.sleep(0)
        if r.rtype == SET:
            if owner.live_expire(r.key, Location(seg.key, r.offset, r.record_len, r.value_len)) is not None:
                keep.append(r)
                live_here.add(r.key)
        elif r.rtype == EXPIRE and r.key in live_here:
            # The TTL of a SET kept above: copied in place, the SET still carries the TTL it was written with,
            # so the EXPIRE (or PERSIST) that changed it must stay after it.
            keep.append(r)
        elif r.rtype in (DEL, EXPIRE):
            h = hash(r.key)
            if any(h in s.set_keys for s in older):
                keep.append(r)
        elif r.rtype == FLUSH and older:
            keep.append(r)
    return None if _stop(log, job) else keep


async def _rewrite_in_place(log: SegmentLog, job: Job, keep: list[Record]) -> None:
    """Replace the segment's file by its survivors (segment.py, "Rewriting in place"), then point the keyspace at
    them. Only the file changes: every record keeps its LSN and its place in recovery's order."""
    loop = log._loop
    owner = log._owner
    assert loop is not None and owner is not None
    seg = job.seg
    # Every record left out is dead because of a later record (or its TTL). Those must be on disk before the
    # segment stops holding the older ones, or a crash could lose a key whose overwrite was not yet fsynced.
    if not await log.durable(strict=False) or _stop(log, job):
        return
    ranges: list[tuple[int, int]] = []
    for r in keep:  # adjacent records are copied as one range
        if ranges and sum(ranges[-1]) == r.offset:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + r.record_len)
        else:
            ranges.append((r.offset, r.record_len))
    try:
        done = await loop.run_in_executor(log._maint, rewrite, seg, ranges, lambda: job.aborted)
    except OSError as exc:
        job.failed = True
        log.maint_resume_at = loop.time() + RETRY_AFTER_FAILURE
        log.logger.warning(
            "rewriting %s failed (%s); it stays as it was, compaction resumes in %.0f s",
            seg.path.name,
            exc.strerror or exc,
            RETRY_AFTER_FAILURE,
        )
        return
    if done is None:
        return
    fd, size = done
    if log._segments.get(seg.key) is not seg or seg.id in log._retiring:
        os.close(fd)  # FLUSHALL retired the segment meanwhile: its unlink removes the new file too
        return
    new = Segment(log.directory, seg.id, size, key=log._next_key)
    log._next_key -= 1
    new.fd = fd
    new.sealed = new.ready = True
    # Both files stay registered while the keyspace moves over: a key not moved yet still reads the old inode.
    seg.ready = False
    log._segments[new.key] = new
    log.compactions += 1
    log.rewritten_bytes += size - FILE_HDR_SIZE
    offset = FILE_HDR_SIZE
    moved: dict[Location, Location] = {}
    for n, r in enumerate(keep):
        if n % SCAN_YIELD_EVERY == SCAN_YIELD_EVERY - 1:
            await asyncio.sleep(0)
            if seg.id in log._retiring:  # FLUSHALL: every key is gone; both objects are being retired
                break
        if r.rtype == SET:
            new.set_keys.add(hash(r.key))
            old_loc = Location(seg.key, r.offset, r.record_len, r.value_len)
            new_loc = Location(new.key, offset, r.record_len, r.value_len)
            if owner.live_expire(r.key, old_loc) is not None:
                owner.relocated(r.key, old_loc, new_loc)
                new.live += r.record_len
                seg.live = max(0, seg.live - r.record_len)
            else:  # written again since the copy: if that write fails, the key comes back here (log.note_moved)
                moved[old_loc] = new_loc
        offset += r.record_len
    log.note_moved(moved)
    assert log._maint is not None
    log._maint.submit(new.set_keys.seal)  # every kept key is in; until it is built the filter answers yes
    if log._segments.get(seg.key) is seg:
        del log._segments[seg.key]
    seg.doomed = True
    log._maybe_close(seg)
    log.logger.info("compacted segment %s in place (%d of its records kept, %d bytes)", seg.path.name, len(keep), size)


async def _carry_forward(log: SegmentLog, job: Job, records: list[Record]) -> None:
    """Append the segment's live records again at the tail, then retire it (few survivors)."""
    if await _carry_segment(log, job, job.seg, records, [job.seg]):
        job.records = len(records)
        await _retire(log, job, [job.seg])


async def _carry_segment(
    log: SegmentLog, job: Job, seg: Segment, records: list[Record], retiring: list[Segment]
) -> bool:
    """Append ``seg``'s live records again at the tail (compaction: all of them; the disk budget: the values RAM
    holds, up to half the segment, and every other one is dropped). ``retiring``: the segments this job retires,
    which tombstones need not cancel. False if the job stopped."""
    owner = log._owner
    assert owner is not None
    gone = {s.id for s in retiring}
    older = [s for s in log._segments.values() if s.id < seg.id and s.id not in log._retiring and s.id not in gone]
    carried = 0
    for n, r in enumerate(records):
        if _stop(log, job):
            return False
        if n % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
            if _stop(log, job):
                return False
        if r.rtype == SET:
            loc = Location(seg.key, r.offset, r.record_len, r.value_len)
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
                if _stop(log, job):
                    return False
                expire = owner.live_expire(r.key, loc)
                if expire is None:
                    continue
            new = log._append(SET, r.key, value, expire, carried_from=loc)
            assert new is not None
            log.carried_records += 1
            owner.relocated(r.key, loc, new)
            seg.live = max(0, seg.live - r.record_len)
            carried += r.record_len
            log.compacted_bytes += r.record_len
            if log._pending_bytes > PACE_BYTES:
                fut = log.barrier()
                if fut is not None:
                    try:
                        await fut
                    except PersistError:  # the log refuses writes: the job stops where it is
                        job.failed = True
                        return False
        elif r.rtype in (DEL, EXPIRE):
            h = hash(r.key)
            if any(h in s.set_keys for s in older):
                log._append(r.rtype, r.key, b"", r.expire, lsn=r.lsn)
                log.carried_records += 1
        elif r.rtype == FLUSH and older:
            log._append(FLUSH, b"", b"", 0, lsn=r.lsn)
            log.carried_records += 1
    return not _stop(log, job)


async def _retire(log: SegmentLog, job: Job, segs: list[Segment]) -> None:
    """Once what the job appended is durable, unlink ``segs`` (their records were carried or dropped)."""
    if not await log.durable(strict=False) or job.aborted:
        return
    await log.retire(segs)
    if job.mode == "compact":
        log.compactions += 1
    log.logger.info(
        "%s segment%s %s (%d records)",
        "compacted" if job.mode == "compact" else "retired",
        "s" if len(segs) > 1 else "",
        segs[0].path.name if len(segs) == 1 else f"{segs[0].path.name}-{segs[-1].path.name} ({len(segs)})",
        job.records,
    )
