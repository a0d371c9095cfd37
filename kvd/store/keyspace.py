"""The keyspace: the one facade that commands use to read and write keys across the RAM and disk tiers.

Data flows one way: a command calls the keyspace, the keyspace updates its in-RAM index, appends the change to
the segment log (when persistence is on) and lets the RAM tier evict; it never calls back up into commands or
connections. Each key maps to an ``Entry``: the value (or None when it only lives on disk), its deadline, its
disk ``Location`` and its SCAN sequence number.

Writes. ``set`` appends the record to the log *first*, which assigns its disk location without any I/O on the
event loop (the log's writer thread does the writev), then swaps the entry in. The connection holds the reply
until the log's barrier says the bytes are written (or fsynced, with ``appendfsync always``); see
``kvd/connection.py``.

Reads. A resident value is returned as is (no copy). A cold value (evicted from RAM, still on disk) is read by
``load()`` off the event loop, checksum-verified by the log, and promoted back into RAM unless the key changed
while the read was in flight. Concurrent loads of the same record share one read. A record that fails its
checksum is never served: the key is dropped and the read is a miss.

Eviction, when ``used > maxmemory``: the least recently used resident value is demoted (its key stays and is
served from disk); only when no resident value is left, or persistence is off, are whole keys deleted, which
ones as ``maxmemory-policy`` says (``kvd/store/eviction.py``). Under ``noeviction``, and under a ``volatile-*``
policy once no key has a TTL, memory can stay over ``maxmemory``, and then commands are refused with ``-OOM``
before they run, as Redis's ``processCommand`` refuses them: every ``denyoom`` command, whatever it would add
(``guarded`` and ``out_of_memory``, asked by the connection). As Redis counts the request's arguments in its
memory, the check must find room for them (``request_charge``; an argument that will live on disk only needs
none); no key is deleted for a command that is then refused. A command that passed runs to the end, however
much it adds (a SETRANGE at a far offset): memory may then be over ``maxmemory`` until something is deleted.

Expiry: lazy on every access plus a bounded background sweep (``expire_cycle``). On a replica (``set_replica``)
deadlines are the primary's to enforce, as on a Redis replica: a key past its deadline is hidden from clients but
kept until the primary's DEL, and the primary's own commands (``from_primary``) still see it; the sweep deletes
only keys whose deadline the replica's own clients set (a writable replica's, Redis's ``expireSlaveKeys``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from kvd.notify import EVICTED, EXPIRED, KEY_MISS, NEW

from . import snapshot
from .bufpool import BufferPool
from .eviction import Policy, doomed
from .expiry import ExpiryHeap
from .lfu import LFU_INIT, LfuCounter
from .lru import Entry, LruList
from .ram import VALUE_OVERHEAD, RamTier
from .scan import ScanIndex
from .snapshot import Snapshot

if TYPE_CHECKING:
    from kvd.notify import KeyspaceEvents
    from kvd.persist import Before, Location, RecoveredKeys, SegmentLog
    from kvd.replication import ReplicationFeed
    from kvd.tracking import Tracking

log = logging.getLogger("kvd.keyspace")

Value = bytes | bytearray | memoryview
NO_RECORD: Before = (None, 0)  # a key's state before it was first written: no record, no TTL


def _untouched(entry: Entry) -> None:
    pass


# What a write does to an existing key's access history (OBJECT IDLETIME / FREQ), as Redis's commands do:
TOUCHED = 0  # the write looked the key up (Redis's lookupKeyWrite): one more access, and the history carries over
KEPT = 1  # the command counted its access when it read the value (APPEND, INCR, SETBIT): it carries over as is
FRESH = 2  # a new object replaces the key (COPY, RESTORE): the history starts anew

DELETABLE_SCAN = 4096  # TTL heap items a write refused for memory looks at before deleting keys (``_deletable``)
SMALL_VALUE = 44  # up to this size a value read from disk is kept as bytes (Redis's embstr limit, OBJECT ENCODING)


def _pool_bytes(maxmemory: int) -> int:
    """The buffer pool's bound: 1/16 of the RAM tier, at most 256 MiB (256 MiB without a budget)."""
    return min(256 << 20, maxmemory // 16) if maxmemory else 256 << 20


def lru_clock() -> int:
    """Whole seconds of the monotonic clock: the LRU clock entries are stamped with (the server's tick sets it)."""
    return int(time.monotonic())


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# Set while the code running applies a replica's primary's stream or snapshot (kvd/replica.py): on a replica it sees
# keys past their deadline, which only the primary expires (Redis's expireIfNeeded for its master client).
from_primary: ContextVar[bool] = ContextVar("from_primary", default=False)
# Set while a writable replica's own client runs a write command (kvd/connection.py): a key past its deadline that
# it looks up or overwrites is deleted first, with the ``expired`` event, as Redis's lookupKeyWrite deletes it on a
# writable replica (and as a primary deletes it at any look-up).
own_write: ContextVar[bool] = ContextVar("own_write", default=False)


_move_to_end = LruList.move_to_end  # under LFU a read skips LfuOrder's save and restore of atime


class TierStats:
    __slots__ = (
        "corrupt_reads",
        "disk_hits",
        "evicted_keys",
        "expired_keys",
        "keyspace_hits",
        "keyspace_misses",
        "promotions",
        "ram_demotions",
        "ram_hits",
        "relogged",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


class OutOfMemory(Exception):
    """Values cannot fit under maxmemory without deleting keys, and the policy forbids that (``check_room``)."""


class Keyspace:
    def __init__(
        self,
        *,
        maxmemory: int,
        policy: str = "allkeys-lru",
        seg_log: SegmentLog | None = None,
        lfu_log_factor: int = 10,
        lfu_decay_time: int = 1,
        maxmemory_samples: int = 5,
    ) -> None:
        self._entries: dict[bytes, Entry] = {}
        self.ram = RamTier(maxmemory, persisted=seg_log is not None)
        self.ram.set_clock(lru_clock())
        # A replica with replica-ignore-maxmemory (kvd/server.py): no key deleted for memory, no write refused;
        # its primary's deletes keep it in step (Redis's performEvictions returns at once on such a replica).
        self._following = False
        # Whether commands may be refused for memory (``out_of_memory``): a maxmemory is set and the policy may
        # be unable to free enough (``noeviction``, ``volatile-*``), on a server that is not ``following``. Kept
        # as one attribute: under the other policies a SET pays one read of it (kvd/connection.py).
        self.guarded = False
        # A maxmemory is set on a server that is not ``following``: the commands queued after MULTI must find room
        # under it, whatever the policy (Client._out_of_memory).
        self.limited = False
        # A replica (set_replica): keys past their deadline wait for the primary's DEL; the keys whose deadline
        # the replica's own clients set (a writable replica) it expires itself.
        self.primary_expires = False
        self.local_deadlines: set[bytes] = set()
        self.eviction = Policy(policy)  # maxmemory-policy: which keys may go, and when writes are refused
        self.samples = maxmemory_samples
        self.scan = ScanIndex()
        self.expiry = ExpiryHeap()
        self.log = seg_log
        self.stats = TierStats()
        # Dropped values are recycled as receive buffers (kvd/store/bufpool.py); bounded by 1/16 of the RAM tier.
        self.pool = BufferPool(_pool_bytes(maxmemory))
        self._loads: dict[tuple[bytes, Any], asyncio.Future[Value | None]] = {}
        # Cold entries whose value was a short bytearray when it left RAM (APPEND, SETRANGE and the bitmap
        # commands build those: Redis's raw strings, OBJECT ENCODING): read back, it is a bytearray again. Only
        # such entries pay for it (a set member while cold), where a flag in every Entry would cost 8 bytes a key.
        self._raw_cold: set[Entry] = set()
        # Keys some client WATCHes -> how many clients, and -> how many times each was changed since the first of
        # them began (Redis's touchWatchedKey): EXEC compares the count with the one its WATCH saw, so a key that
        # was changed and changed back (created then deleted, a TTL set then removed) still fails it.
        self.watched: dict[bytes, int] = {}
        self._changes: dict[bytes, int] = {}
        # A watched key's change count just after it was deleted while past its deadline (on a replica, which keeps
        # such keys for its primary's DEL): for a client that watched it already past its deadline, that delete
        # changes nothing (Redis's watchedKey.expired).
        self._stale_deleted: dict[bytes, int] = {}
        # Keyspace notifications (kvd/notify.py), None while notify-keyspace-events is empty. The keyspace sends
        # the events no command names: new, expired, evicted, keymiss; commands send their own.
        self.events: KeyspaceEvents | None = None
        # Client-side caching (kvd/tracking.py), None until a client first turns CLIENT TRACKING on: told of
        # every change to a key (Redis's signalModifiedKey), so that clients that cached it drop it.
        self.tracking: Tracking | None = None
        # How a read marks a resident entry as just used: the LRU's move to the end, or nothing while a client
        # with CLIENT NO-TOUCH on runs a command (``reading_without_touch``). A bound method kept here costs a
        # GET less than the attribute chain it replaces.
        self._touch: Callable[[Entry], None] = self.ram.hot.move_to_end
        self._touch_read = self._touch  # the policy's: what a read does to an entry when NO-TOUCH is off
        self.set_policy(policy, lfu_log_factor, lfu_decay_time, maxmemory_samples)
        # Replication (kvd/replication.py), None while no replica is attached: told of every change, as the
        # command that makes it (Redis's propagate).
        self.feed: ReplicationFeed | None = None

    # -- sizes -----------------------------------------------------------------------------------------------

    def set_maxmemory(self, maxmemory: int) -> None:
        """CONFIG SET maxmemory: the RAM tier's budget (0: none) and the buffer pool's bound, which follows it
        (buffers past the new bound are let go). The caller then calls ``evict`` if the budget shrank or a limit
        was set where there was none."""
        self.ram.budget = maxmemory
        self.pool.set_max_bytes(_pool_bytes(maxmemory))
        self._guard()

    @property
    def following(self) -> bool:
        return self._following

    @following.setter
    def following(self, following: bool) -> None:
        self._following = following
        self._guard()

    def _guard(self) -> None:
        self.limited = bool(self.ram.budget) and not self._following
        self.guarded = self.limited and self.eviction.refuses

    def evict(self) -> None:
        """Back under ``maxmemory`` now, as the policy allows (CONFIG SET maxmemory, maxmemory-policy)."""
        self._evict()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def expires_count(self) -> int:
        return self.expiry.live

    def average_ttl(self) -> int:
        """INFO keyspace's avg_ttl (ms): estimated from a sample of the keys with a TTL (``ExpiryHeap``)."""
        return self.expiry.average_ttl(self._entries, now_ms()) if self.expiry.live else 0

    # -- reading ---------------------------------------------------------------------------------------------

    def lookup(self, key: bytes, now: int | None = None) -> Entry | None:
        """The live entry for ``key`` (expired keys are removed on the spot), without touching the LRU. On a
        replica an expired key is absent without being removed, except to the primary's commands, which see it,
        and to a writable replica's own writes (``own_write``), which remove it."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expire_at and entry.expire_at <= (now or now_ms()):
            if self.primary_expires:
                if from_primary.get():
                    return entry
                if not own_write.get():
                    return None
            self._expire(key, entry)
            return None
        return entry

    def _expire(self, key: bytes, entry: Entry) -> None:
        """Delete a key whose deadline has passed, with the ``expired`` event. A primary logs no delete: recovery
        drops such a key by its deadline. A replica's recovery keeps it (the primary's DEL decides), so there the
        delete is logged."""
        self._remove(key, entry, log_delete=self.primary_expires)
        self.stats.expired_keys += 1
        if self.events is not None:
            self.events.emit(EXPIRED, b"expired", key)

    def peek(self, key: bytes) -> Entry | None:
        """The entry as stored, past its deadline or not, counting and touching nothing (DEBUG OBJECT, as Redis's
        ``dictFind``)."""
        return self._entries.get(key)

    def lookup_read(self, key: bytes, now: int | None = None, keymiss: bool = True) -> Entry | None:
        """``lookup`` for a command that reads the key (EXISTS, TYPE, TTL, STRLEN, GETEX, BITCOUNT), as Redis's
        ``lookupKeyRead``: a hit or a miss for INFO, and a miss is a keymiss event (unless ``keymiss`` is False:
        OBJECT, as Redis's LOOKUP_NONOTIFY). A command that then needs the value takes it with ``value_of``,
        which counts nothing more."""
        entry = self.lookup(key, now)
        if entry is None:
            self.stats.keyspace_misses += 1
            if keymiss and self.events is not None:
                self.events.emit(KEY_MISS, b"keymiss", key)
        else:
            self.stats.keyspace_hits += 1
        return entry

    def get(self, key: bytes) -> Value | Awaitable[Value | None] | None:
        """The value (resident), None (missing) or an awaitable (cold: read from disk, then promoted)."""
        entry = self._entries.get(key)  # lookup() inlined: this is every GET's path
        stats = self.stats
        if entry is None or (entry.expire_at and self.lookup(key) is None):
            stats.keyspace_misses += 1
            if self.events is not None:
                self.events.emit(KEY_MISS, b"keymiss", key)
            return None
        stats.keyspace_hits += 1
        value = entry.value
        if value is not None:
            stats.ram_hits += 1
            self._touch(entry)
            return value
        stats.disk_hits += 1
        return self.load(key, entry)

    def reading_without_touch(self, on: bool) -> None:
        """CLIENT NO-TOUCH: while ``on``, reads leave the LRU order as it is (TOUCH still touches; a cold value
        read from disk still joins the RAM tier, as the newest)."""
        self._touch = _untouched if on else self._touch_read

    def set_policy(self, policy: str, lfu_log_factor: int = 10, lfu_decay_time: int = 1, samples: int = 5) -> None:
        """maxmemory-policy and its settings (at start and on CONFIG SET): under the ``-lfu`` policies reads count
        each entry's accesses and values not read since they were written leave RAM first (kvd/store/lfu.py);
        which keys may be deleted is kvd/store/eviction.py's."""
        untouched = self.reads_untouched
        self.eviction = Policy(policy)
        self._guard()
        self.samples = samples
        lfu = self.ram.lfu
        if self.eviction.lfu:
            if lfu is None:
                lfu = LfuCounter()
            lfu.log_factor, lfu.decay_time = lfu_log_factor, lfu_decay_time
            self.ram.set_lfu(lfu)
            self._touch_read = self._lfu_touch
        else:
            self.ram.set_lfu(None)
            self._touch_read = self.ram.hot.move_to_end  # bound again: the list's class may have changed
        self._touch = _untouched if untouched else self._touch_read

    def _lfu_touch(self, entry: Entry) -> None:
        ram = self.ram
        state = ram.lfu.touched(entry.atime)  # type: ignore[union-attr]
        _move_to_end(ram.hot, entry)  # LruList's own: it stamps atime, which the state then replaces
        entry.atime = state

    def set_access(self, key: bytes, idle: int, freq: int) -> None:
        """RESTORE's IDLETIME (seconds, under LRU) or FREQ (a counter, under LFU), -1 for none; the other one is
        ignored, as Redis's objectSetLRUOrLFU does. The key keeps its place at the recent end of the list."""
        entry = self._entries.get(key)
        if entry is None:
            return
        lfu = self.ram.lfu
        if lfu is not None and freq >= 0:
            entry.atime = lfu.state(freq)
        elif lfu is None and idle >= 0:
            entry.atime = self.ram.clock - idle

    def access_frequency(self, entry: Entry) -> int | None:
        """OBJECT FREQ: the entry's counter as of now, None unless the policy is LFU."""
        lfu = self.ram.lfu
        return lfu.counter(entry.atime) if lfu is not None else None

    @property
    def policy(self) -> str:
        """maxmemory-policy's name (INFO)."""
        return self.eviction.name

    @property
    def reads_untouched(self) -> bool:
        return self._touch is _untouched

    def value_of(self, key: bytes, entry: Entry) -> Value | Awaitable[Value | None]:
        """The value of an entry the caller looked up itself: resident (touched, unless CLIENT NO-TOUCH) or read
        from disk. Counts only the tier's hit, not a keyspace hit: a write's look-up is no read in Redis's INFO,
        and a read's was counted by ``lookup_read``."""
        value = entry.value
        if value is not None:
            self.stats.ram_hits += 1
            self._touch(entry)
            return value
        self.stats.disk_hits += 1
        return self.load(key, entry)

    def load(self, key: bytes, entry: Entry) -> asyncio.Future[Value | None]:
        """Read a cold entry from disk once, however many clients ask for it at the same time."""
        assert self.log is not None and entry.loc is not None
        token = (key, entry.loc)
        pending = self._loads.get(token)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key, entry))
            self._loads[token] = pending
            pending.add_done_callback(lambda f: self._load_done(token, f))
        return pending

    def _load_done(self, token: tuple[bytes, Any], future: asyncio.Future[Value | None]) -> None:
        self._loads.pop(token, None)
        if not future.cancelled() and future.exception() is not None:
            # Prefetches have no waiter to raise into; a GET's waiter still sees the exception itself.
            log.warning("reading key %r from disk failed: %s", token[0][:64], future.exception())

    async def _load(self, key: bytes, entry: Entry) -> Value | None:
        """Read the value of ``entry`` (the key's when the read began, ``_read``) and promote it into RAM."""
        value, entry, loc = await self._read(key, entry)  # type: ignore[assignment]
        if loc is None:  # the key is gone, or its value is in RAM now
            return value
        value = self._as_held(entry, value)  # type: ignore[arg-type]
        # Promote only if nobody changed the key while we read (every write gives the entry a new location).
        if self._entries.get(key) is entry and entry.value is None and entry.loc == loc and self._fits(value):
            entry.value = value
            self._raw_cold.discard(entry)
            self.ram.admit(entry)
            if self.ram.lfu is not None:  # the read that promoted it is an access (under LRU, admit stamped it)
                entry.atime = self.ram.lfu.touched(entry.atime)
            self.stats.promotions += 1
            self._evict()
        return value

    async def _read(self, key: bytes, entry: Entry) -> tuple[Value | None, Entry | None, Location | None]:
        """The value of a cold ``entry``, read from disk: (value, the entry, the record it was read from), or
        (the value, its entry, None) if the key's value is in RAM by the time it is read, (None, None, None) if
        the key is gone. If that record stops being the key's before it could be read (the key's write failed
        and was undone, compaction moved the key and that copy's write failed, the disk budget retired it), the
        key is read as it is now: None only for a key that is gone; a record that is still the key's and fails
        verification drops the key."""
        from kvd.persist import CorruptRecord

        assert self.log is not None
        while True:
            loc = entry.loc  # None: a lost write's entry, undone before this task first ran
            if loc is not None:
                try:
                    return await self.log.read_value(key, loc), entry, loc
                except CorruptRecord as exc:
                    if self._entries.get(key) is entry and entry.loc == loc:
                        self.stats.corrupt_reads += 1
                        log.warning("dropping key %r: its record on disk failed verification (%s)", key[:64], exc)
                        self._remove(key, entry, log_delete=True)
                        return None, None, None
            current = self.lookup(key)
            if current is None or (current is entry and current.loc == loc):  # (a cold entry has its record)
                return None, None, None
            if current.value is not None:
                return current.value, current, None
            entry = current

    def _as_held(self, entry: Entry, value: bytearray) -> Value:
        """A value read from disk in the form RAM holds it: a short one as bytes, as short values arrive from
        clients (24 bytes smaller), unless it was a bytearray when it left RAM (``_raw_cold``)."""
        if len(value) <= SMALL_VALUE and entry not in self._raw_cold:
            return bytes(value)
        return value

    def read_untouched(self, key: bytes, entry: Entry) -> asyncio.Future[Value | None]:
        """The value of a cold ``entry``, read from disk without promoting it or counting an access (OBJECT
        ENCODING, DEBUG OBJECT, as DEBUG DIGEST reads), in the form RAM would hold it; None if the key is gone."""

        async def read() -> Value | None:
            value, current, loc = await self._read(key, entry)
            if value is None or loc is None:
                return value
            return self._as_held(current, value)  # type: ignore[arg-type]

        return asyncio.ensure_future(read())

    def prefix_length(self, keys: list[bytes], prefetch: bool = True) -> int:
        """How many leading ``keys`` exist. Hits are touched (a load usually follows), and cold ones are
        read into RAM in the background so the GETs that follow are served from memory. Prefetching stops at a
        quarter of the RAM budget, so a long cold prefix cannot flush the hot set it is about to join."""
        now = now_ms()
        count = 0
        budget = self.ram.budget // 4 if self.ram.budget else 1 << 62
        for key in keys:
            entry = self.lookup(key, now)
            if entry is None:
                break
            count += 1
            if entry.value is not None:
                self._touch(entry)
            elif prefetch and self.log is not None and entry.loc is not None and entry.loc.value_len <= budget:
                budget -= entry.loc.value_len
                self.load(key, entry)
        return count

    # -- WATCH -----------------------------------------------------------------------------------------------

    def watch(self, key: bytes) -> tuple[int, bool]:
        """Start counting the changes of ``key``. Returns the count now, and whether the key is past its deadline
        (only a replica keeps such a key), for ``intact`` to judge at EXEC."""
        self.lookup(key)  # a deadline that passed before WATCH is not a change after it
        self.watched[key] = self.watched.get(key, 0) + 1
        return self._changes.setdefault(key, 0), self._past_deadline(key)

    def unwatch(self, key: bytes) -> None:
        n = self.watched.pop(key, 0) - 1
        if n > 0:
            self.watched[key] = n
        else:
            self._changes.pop(key, None)
            self._stale_deleted.pop(key, None)

    def intact(self, key: bytes, seen: int, stale: bool) -> bool:
        """Whether ``key`` is as it was at WATCH (``seen``, ``stale``: what ``watch`` returned), as Redis's EXEC
        judges it: not written, deleted, expired or given another TTL since. A key whose deadline passes after
        WATCH is changed, also on a replica, which keeps it for its primary's DEL (isWatchedKeyExpired); for a key
        already past its deadline at WATCH (on a replica), its deletion is no change (touchWatchedKey), and any
        other change is one (Redis 7.0 lets those pass too while the key stays, a ``break`` in touchWatchedKey)."""
        self.lookup(key)  # a deadline that has passed since WATCH deletes the key on a primary: a change
        changes = self._changes.get(key, 0)
        if changes != seen:
            return stale and changes == seen + 1 and self._stale_deleted.get(key) == changes
        return stale or not self._past_deadline(key)

    def _past_deadline(self, key: bytes) -> bool:
        entry = self._entries.get(key)
        return entry is not None and 0 < entry.expire_at <= now_ms()

    def _changed(self, key: bytes) -> None:
        if key in self.watched:
            self._changes[key] += 1

    # -- writing ---------------------------------------------------------------------------------------------

    def set(
        self,
        key: bytes,
        value: Value,
        expire_at: int = 0,
        moving: bool = False,
        history: int = TOUCHED,
    ) -> None:
        """Store ``value`` (kept by reference: callers hand over ownership and never mutate it). Never refused:
        whether a command may write at all was decided before it ran (``out_of_memory``). ``moving`` is for
        ``rename``: the value is about to leave its old key, so it is no reason to evict. ``history``: what an
        overwrite does to the key's access history (TOUCHED, KEPT, FRESH above; under LRU every write makes it
        the most recent, as in Redis, so only the LFU counter differs)."""
        old = self._entries.get(key)
        if old is not None and old.expire_at and self.primary_expires and own_write.get() and old.expire_at <= now_ms():
            self._expire(key, old)  # a writable replica's own write over a key past its deadline (``own_write``)
            old = None
        seg_log = self.log
        if seg_log is not None:
            loc = seg_log.append_set(key, value, expire_at, (old.loc, old.expire_at) if old is not None else NO_RECORD)
        else:
            loc = None
        ram = self.ram
        if loc is not None and not self._fits(value):
            # Bigger than the whole RAM tier: keep it on disk only rather than flushing every other value out.
            entry = Entry(key, None, expire_at, loc, 0)
            self._swap(key, old, entry)
            ram.add_cold(entry)
            self.stats.ram_demotions += 1
        elif old is not None and (old_value := old.value) is not None and key not in self.watched:
            # Overwriting a resident value, the hot path of a cache: the entry is updated in place and keeps its
            # LRU node, which moves to the end. (A new Entry re-inserted in both dicts measured 25 % slower.)
            # A watched key takes the path below, whose _swap counts the change for EXEC.
            old_loc = old.loc
            if old.expire_at:
                self.expiry.live -= 1
            old.value = value
            old.expire_at = expire_at
            old.loc = loc
            ram.replace(old, len(value) - len(old_value))
            if old_loc is not None and seg_log is not None:
                seg_log.mark_dead(old_loc)
            self.pool.give(old_value)  # kept only if it was received in place and nothing else holds it
            entry = old
        else:
            entry = Entry(key, value, expire_at, loc, 0)
            self._swap(key, old, entry)
            ram.admit(entry)
        if ram.lfu is not None and old is not None and history != KEPT:
            if history == FRESH:
                entry.atime = ram.lfu.state(LFU_INIT)
            elif self._touch is not _untouched:  # CLIENT NO-TOUCH: a write counts no access either (Redis 7.2)
                entry.atime = ram.lfu.touched(entry.atime)
        if expire_at:
            self.expiry.live += 1
            self.expiry.schedule(key, expire_at, self._entries)
            if self.primary_expires and not from_primary.get():
                self.local_deadlines.add(key)
        if self.tracking is not None:
            self.tracking.invalidate(key)
        if self.feed is not None:
            self.feed.set(key, value, expire_at)
        if ram.budget and ram.used > ram.budget and not moving:
            self._evict()

    def request_charge(self, argv: list[Any]) -> int:
        """What a request holds in memory until it has run, as Redis's ``used_memory`` counts it (its query buffer
        and arguments): the bytes of its arguments. With the log on, an argument too large for the RAM tier
        (``_fits``: a value that will live on disk only) counts nothing: it never takes RAM once stored."""
        if self.log is None or not self.ram.budget:
            return sum(map(len, argv))
        limit = self.ram.budget // 2 - VALUE_OVERHEAD
        return sum(n for n in map(len, argv) if n <= limit)

    def out_of_memory(self, extra: int) -> bool:
        """Redis's ``performEvictions() == EVICT_FAIL`` before a command: whether the RAM tier stays over
        ``maxmemory`` with ``extra`` more bytes (the request's, ``request_charge``, or a MULTI queue's) once what
        the policy allows is freed. Asked only while ``limited``; outside MULTI only while ``guarded``."""
        return not self._make_room(extra)

    def check_room(self, pairs: list[tuple[bytes, Value]]) -> None:
        """``OutOfMemory`` unless values that are not in a request's arguments fit, once what the policy allows is
        freed: KVD.SETFROM's (copied from a client's shared memory) and DEBUG POPULATE's, all of them or none."""
        if self.guarded and not self._make_room(sum(self._charge(k, v) for k, v in pairs)):
            raise OutOfMemory

    def _charge(self, key: bytes, value: Value) -> int:
        """The room a write of ``value`` to ``key`` takes in the RAM tier: the value, and a new key's overhead. A
        value that will live on disk only (the log is on and it is larger than half the RAM tier: ``_fits``) is
        charged only its key: it never takes RAM."""
        charge = 0 if key in self._entries else self.ram.key_charge(key)
        if self.log is not None and not self._fits(value):
            return charge
        return charge + len(value)

    def unshare(self, key: bytes) -> None:
        """Redis's ``dbUnshareStringValue`` for a write that changes no byte (SETBIT of a bit that is already so):
        a resident small value becomes a bytearray of the same bytes, which OBJECT ENCODING reports as raw, as
        Redis's would be. Nothing is logged, nothing is charged: the bytes are the same."""
        entry = self._entries.get(key)
        if entry is not None and type(entry.value) is bytes:
            entry.value = bytearray(entry.value)

    def rename(self, src: bytes, dst: bytes, value: Value, expire_at: int) -> None:
        """RENAME: ``dst`` takes ``src``'s value (the same object) and deadline, and ``src`` goes. The log gets
        the new key's record before the old key's delete, so a crash between them leaves both keys, never
        neither. For that moment the value is charged twice; nothing is evicted for it (Redis's RENAME evicts
        nothing), only for what the new key's name adds. Under LFU ``dst`` carries ``src``'s counter, which the
        caller's read of the value counted (Redis's RENAME moves the object itself). Tracking clients hear of
        ``src`` before ``dst``, as Redis signals them, whatever order the log needs."""
        source = self._entries.get(src)
        tracking, self.tracking = self.tracking, None
        try:
            self.set(dst, value, expire_at, moving=True, history=FRESH)
            if source is not None and self.ram.lfu is not None:
                self._entries[dst].atime = source.atime
            self.delete(src)
        finally:
            self.tracking = tracking
        if tracking is not None:
            tracking.invalidate(src)
            tracking.invalidate(dst)
        if self.ram.budget and self.ram.used > self.ram.budget:
            self._evict()

    def _swap(self, key: bytes, old: Entry | None, entry: Entry) -> None:
        """Put ``entry`` in place of ``old`` (None: a new key), which is detached from every index."""
        if self.watched:
            self._changed(key)
        if old is not None:
            entry.atime = old.atime  # an overwrite keeps the key's frequency under LFU (LRU stamps it anew)
            self._detach(key, old)
            self.scan.replace(old, entry)
        else:
            self.scan.add(entry)
            self.ram.add_key(key)
        self._entries[key] = entry
        if old is None and self.events is not None:
            self.events.emit(NEW, b"new", key)

    def lookup_write(self, key: bytes) -> Entry | None:
        """``lookup`` for a write (EXPIRE, PERSIST, SETNX, RENAME), as Redis's ``lookupKeyWrite``: the key's
        access counts (no keyspace hit or miss)."""
        entry = self.lookup(key)
        if entry is not None:
            self.access(entry)
        return entry

    def access(self, entry: Entry) -> None:
        """Count an access to an entry the caller looked up without taking its value (STRLEN, SORT, SET NX of an
        existing key): the most recently used, one more under LFU, as Redis's ``lookupKey`` does; nothing under
        CLIENT NO-TOUCH. A cold entry stays on disk and in its list, its stamp or counter updated."""
        if entry.value is not None:
            self._touch(entry)
        elif self._touch is not _untouched:
            lfu = self.ram.lfu
            entry.atime = lfu.touched(entry.atime) if lfu is not None else self.ram.clock

    def touch(self, key: bytes) -> bool:
        """TOUCH: a live key becomes the most recently used (a cold one stays on disk, its stamp or counter
        updated, as ``access`` does); False if missing. A hit or a miss, as Redis's lookupKeyRead counts it.
        TOUCH counts as an access even under CLIENT NO-TOUCH."""
        entry = self.lookup_read(key)
        if entry is None:
            return False
        if entry.value is not None:
            self._touch_read(entry)
        else:
            lfu = self.ram.lfu
            entry.atime = lfu.touched(entry.atime) if lfu is not None else self.ram.clock
        return True

    def delete(self, key: bytes) -> bool:
        """Delete ``key``; False if it is missing. On a replica a key past its deadline is deleted too: by the
        primary's DEL, and by a writable replica's own DEL, UNLINK, GETDEL... as Redis's dbSyncDelete deletes it
        there (a DEL of such a key counts it, with a ``del`` event, not ``expired``)."""
        entry = self._entries.get(key) if self.primary_expires else self.lookup(key)
        if entry is None:
            return False
        self._remove(key, entry, log_delete=True)
        return True

    def set_expire(self, key: bytes, expire_at: int) -> bool:
        """Set (or with 0, remove) the deadline of an existing key. A past deadline deletes the key, except on a
        replica, where it is a deadline like another (Redis's checkAlreadyExpired is false on a replica)."""
        entry = self.lookup(key)
        if entry is None:
            return False
        if self.primary_expires:
            if expire_at and not from_primary.get():
                self.local_deadlines.add(key)
        elif expire_at and expire_at <= now_ms():
            self._remove(key, entry, log_delete=True)
            return True
        if self.watched:
            self._changed(key)
        if self.tracking is not None:
            self.tracking.invalidate(key)
        if self.feed is not None:
            self.feed.expire(key, expire_at)
        if self.log is not None:
            self.log.append_expire(key, expire_at, (entry.loc, entry.expire_at))
        self._set_deadline(key, entry, expire_at)
        return True

    def _set_deadline(self, key: bytes, entry: Entry, expire_at: int) -> None:
        if entry.expire_at and not expire_at:
            self.expiry.live -= 1
        elif expire_at and not entry.expire_at:
            self.expiry.live += 1
        entry.expire_at = expire_at
        if expire_at:
            self.expiry.schedule(key, expire_at, self._entries)

    def flush(self) -> int:
        """FLUSHALL. With persistence on it can be undone, as any write whose record the log could not write
        (``undo``): the entries it dropped are kept, without their values, until its FLUSH record is written, and
        put back (``_unflush``) if it never is."""
        removed = len(self._entries)
        for key in self.watched:
            entry = self._entries.get(key)
            if entry is not None:  # as Redis, a watched key that did not exist is not changed by a flush
                self._watched_deleted(key, entry)
        if self.tracking is not None:
            self.tracking.flush()
        if self.feed is not None:
            self.feed.flush()
        flushed = self._entries
        self._entries = {}
        self._clear_indexes()
        if self.log is not None:
            for entry in flushed.values():
                entry.value = None  # the memory goes now; a read in flight that held the entry reads the disk
            self.log.append_flush(lambda: self._unflush(flushed))
        return removed

    def _clear_indexes(self) -> None:
        self.ram.clear()
        self.scan.clear()
        self.expiry.clear()
        self.local_deadlines.clear()
        self.pool.clear()
        self._raw_cold.clear()

    def _unflush(self, flushed: dict[bytes, Entry]) -> None:
        """A FLUSHALL whose record was never written (its client got -MISCONF): every key it dropped is back with
        its record and TTL, cold (read from disk when next asked for), but a key whose only copy was in RAM (the
        disk budget dropped its record). What was written since is lost with it (its records come after it in
        the log) and goes; the writes before it in the lost batch are undone after this (``SegmentLog.on_failed``).
        Replicas were sent the FLUSHALL and keep it, as they keep any lost write."""
        for key in self.watched:
            if key in self._entries or key in flushed:
                self._changed(key)
        if self.tracking is not None:
            self.tracking.flush()  # what clients read meanwhile (missing keys) is stale again
        self._entries = {}
        self._clear_indexes()
        self.restore({k: (e.loc, e.expire_at, 0, 0) for k, e in flushed.items() if e.loc is not None and e.loc.segment})

    # -- iteration -------------------------------------------------------------------------------------------

    def scan_page(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        next_cursor, keys = self.scan.page(cursor, count)
        now = now_ms()
        return next_cursor, [k for k in keys if self.lookup(k, now) is not None]

    def snapshot(self) -> Snapshot:
        """Every live key as it is now, to be read out while the keyspace moves on (``kvd/store/snapshot.py``). On
        a replica, keys past their deadline too: they are its primary's until its DEL comes, which the
        replica's own replicas then get too (a Redis replica's RDB file holds them as well)."""
        return snapshot.take(self._entries, self.log, 0 if self.primary_expires else now_ms())

    def live_keys(self) -> list[bytes]:
        now = now_ms()
        return [k for k in list(self._entries) if self.lookup(k, now) is not None]

    def random_key(self) -> bytes | None:
        for _ in range(100):
            key = self.scan.random_key()
            if key is None:
                return None
            if self.lookup(key) is not None:
                return key
        return None

    # -- background ------------------------------------------------------------------------------------------

    def expire_cycle(self, limit: int = 2000) -> int:
        """Delete up to ``limit`` keys whose deadline passed; returns how many were deleted. On a replica only
        keys whose deadline its own clients set are deleted; the others wait for the primary's DEL (their items
        leave the heap, which ``set_replica`` rebuilds when the replica is a primary again)."""
        now = now_ms()
        done = 0
        for deadline, key in self.expiry.due(now, limit):
            entry = self._entries.get(key)
            if self.primary_expires:
                if key not in self.local_deadlines:
                    continue
                if entry is None or not entry.expire_at:
                    self.local_deadlines.discard(key)
                    continue
                if entry.expire_at == deadline:
                    self.local_deadlines.discard(key)
            if entry is not None and entry.expire_at == deadline:
                self._expire(key, entry)
                done += 1
        return done

    def set_replica(self, replica: bool) -> None:
        """Following a primary (REPLICAOF host port) or not. A replica leaves deadlines to its primary, as a Redis
        replica does: with the primary's stream applied late (a busy replica, a slow link), its own clock would
        delete a key before the primary's PERSIST or later deadline arrives, and that key would be gone for
        good. A primary again (REPLICAOF NO ONE), it expires every key past its deadline itself."""
        if replica == self.primary_expires:
            return
        self.primary_expires = replica
        if not replica:
            self.local_deadlines.clear()
            self.expiry.rebuild([(e.expire_at, key) for key, e in self._entries.items() if e.expire_at])

    # -- recovery --------------------------------------------------------------------------------------------

    def restore(self, recovered: RecoveredKeys) -> None:
        """Install the index rebuilt from disk: every key starts cold and is promoted on first read."""
        heap: list[tuple[int, bytes]] = []
        self.ram.add_keys(list(recovered))
        entries = self._entries
        cold: list[Entry] = []
        for key, (loc, expire_at, _, _) in recovered.items():
            entry = Entry(key, None, expire_at, loc, 0)
            entries[key] = entry
            cold.append(entry)
            if expire_at:
                heap.append((expire_at, key))
        self.scan.add_many(cold)  # in bulk: a sorted insert per key cost a third of this loop
        self.ram.cold.extend(cold)
        self.expiry.rebuild(heap)
        self.expiry.live = len(heap)

    # -- the segment log's view of the index (kvd.persist.LogOwner) --------------------------------------------

    def live_expire(self, key: bytes, loc: Location) -> int | None:
        entry = self._entries.get(key)
        return entry.expire_at if entry is not None and entry.loc == loc else None

    def hot_value(self, key: bytes, loc: Location) -> Value | None:
        entry = self._entries.get(key)
        return entry.value if entry is not None and entry.loc == loc else None

    def relocated(self, key: bytes, old: Location, new: Location) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.loc == old:
            entry.loc = new

    def dropped(self, key: bytes, loc: Location) -> None:
        """The disk budget removed this record; a cold key is gone, a resident one becomes RAM-only (logged again
        when it leaves RAM: ``_demotable``)."""
        entry = self._entries.get(key)
        if entry is None or entry.loc != loc:
            return
        if entry.value is None:
            self._remove(key, entry, log_delete=False)
            self.stats.evicted_keys += 1
            if self.events is not None:
                self.events.emit(EVICTED, b"evicted", key)
        else:
            entry.loc = None

    def undo(self, key: bytes, before: Before) -> bool:
        """Writes to ``key`` never reached the disk (their clients got -MISCONF): the key is again as it was
        before them, ``before``'s record with its TTL (the value read from disk when next asked for: what RAM
        held may have been recycled since), or gone if it had no record (a key only in RAM, after the disk budget
        dropped its record, is gone too) or one that has expired since. True if the key was put back at that
        record, which the first lost write had made dead. Replicas were sent the lost writes and keep them."""
        loc, expire_at = before
        entry = self._entries.get(key)
        if loc is None or loc.segment == 0 or (expire_at and expire_at <= now_ms()):
            if entry is not None:  # mark_dead only for the record itself (an EXPIRE lost on an expired key)
                self._remove(key, entry, log_delete=False, mark_dead=entry.loc == loc)
            return False
        if self.tracking is not None:
            self.tracking.invalidate(key)
        if entry is not None and entry.loc == loc:  # only the TTL was changed: a lost EXPIRE or PERSIST
            self._set_deadline(key, entry, expire_at)
            return False
        restored = Entry(key, None, 0, loc, 0)
        if entry is not None:
            entry.loc = None  # the lost write's record: not on disk, and off its segment's count already
        self._swap(key, entry, restored)
        self.ram.add_cold(restored)
        self._set_deadline(key, restored, expire_at)
        return True

    # -- internals -------------------------------------------------------------------------------------------

    def _detach(self, key: bytes, entry: Entry) -> None:
        """Unhook an entry that is being replaced: RAM charge, TTL count and its disk record."""
        if self._raw_cold:
            self._raw_cold.discard(entry)
        self.ram.release(entry)
        if entry.expire_at:
            self.expiry.live -= 1
        if entry.loc is not None and self.log is not None:
            self.log.mark_dead(entry.loc)
        self._recycle(entry)

    def _recycle(self, entry: Entry) -> None:
        """Offer a dropped entry's value to the buffer pool (kept only if nothing else references it)."""
        value = entry.value
        entry.value = None
        if type(value) is bytearray:  # received in place; small values are bytes and never pooled
            self.pool.give(value)

    def _demotable(self, entry: Entry) -> bool:
        """Whether a resident value can leave RAM and still be served: its record is on disk. A value the disk
        budget left in RAM only (``dropped``) is logged again first, as a SET with its TTL, unless the log refuses
        writes: else, once it was the least recently used, it would stop every demotion behind it (under
        ``noeviction`` every write got -OOM with RAM full of values on disk) or cost keys that could have gone
        to disk. It also makes that key survive a restart again. A write of it that fails (-MISCONF) loses the
        key, as it loses any RAM-only key (``undo`` of a write whose key had no record before)."""
        if entry.loc is not None:
            return True
        seg_log = self.log
        if seg_log is None or not seg_log.accepting:
            return False
        entry.loc = seg_log.append_set(entry.key, entry.value, entry.expire_at, (None, entry.expire_at))  # type: ignore[arg-type]
        self.stats.relogged += 1
        return True

    def _demote(self, entry: Entry) -> None:
        value = entry.value
        if type(value) is bytearray and len(value) <= SMALL_VALUE:
            self._raw_cold.add(entry)  # built by APPEND, SETRANGE, SETBIT: raw, also once it is read back
        self.ram.demote(entry)
        self.stats.ram_demotions += 1
        self.pool.give(value)

    def _remove(self, key: bytes, entry: Entry, *, log_delete: bool, mark_dead: bool = True) -> None:
        del self._entries[key]
        if self.watched and key in self.watched:
            self._watched_deleted(key, entry)
        if self.tracking is not None:
            self.tracking.invalidate(key)
        if self.feed is not None:
            self.feed.delete(key)
        if self._raw_cold:
            self._raw_cold.discard(entry)
        self.ram.release(entry)
        self.ram.drop_key(key)
        self.scan.remove(entry)
        if entry.expire_at:
            self.expiry.live -= 1
        if self.log is not None and entry.loc is not None:
            if mark_dead:
                self.log.mark_dead(entry.loc)
            if log_delete:
                self.log.append_delete(key, (entry.loc, entry.expire_at))
        self._recycle(entry)

    def _watched_deleted(self, key: bytes, entry: Entry) -> None:
        self._changes[key] += 1
        if 0 < entry.expire_at <= now_ms():
            self._stale_deleted[key] = self._changes[key]

    def _fits(self, value: Value) -> bool:
        return not self.ram.budget or self.ram.value_charge(value) <= self.ram.budget // 2

    def _make_room(self, extra: int) -> bool:
        """Make room for ``extra`` more bytes as the policy allows; False if there is none to make. Demotion to
        disk loses nothing and is always allowed; keys are deleted only as the policy says, and only once the keys
        it may delete are known to hold enough: a command that is refused costs no key."""
        ram = self.ram
        if ram.budget and ram.used + extra > ram.budget:
            while ram.hot and ram.used + extra > ram.budget and self.log is not None:
                entry = ram.victim()
                if entry is None or not self._demotable(entry):
                    break
                self._demote(entry)
            if ram.used + extra > ram.budget and not self._deletable(ram.used + extra - ram.budget):
                return False
            by_ram_order = self.eviction.by_ram_order
            while ram.used + extra > ram.budget:
                entry = self._doomed(ram.victim() if by_ram_order else None)  # allkeys-lru/-lfu: as _evict
                if entry is None:
                    return False
                self._evict_key(entry)
        return True

    def _deletable(self, need: int) -> bool:
        """Whether the keys the policy may delete hold ``need`` bytes of the RAM tier's count. Under an
        ``allkeys-*`` policy every key may go, so whether the RAM tier holds that much (a MULTI queue larger than
        ``maxmemory`` costs no key). Under a ``volatile-*`` policy the keys with a TTL are summed until they reach
        it; past ``DELETABLE_SCAN`` of them the answer is yes, and deleting goes on until enough is freed or none is
        left, as Redis's eviction does."""
        policy = self.eviction
        ram = self.ram
        if not policy.deletes:
            return False
        if not policy.volatile:
            return need <= ram.used
        return self.expiry.holds_at_least(
            self._entries,
            need,
            lambda e: ram.key_charge(e.key) + (ram.value_charge(e.value) if e.value is not None else 0),
            DELETABLE_SCAN,
        )

    def _evict(self) -> None:
        """Back under ``maxmemory``: demote values, then delete keys as the policy allows (it may allow none)."""
        ram = self.ram
        # Without the log no value can be demoted, and only the allkeys-lru/-lfu policies delete the RAM tier's
        # own victim: the others are not asked for one (under LFU, asking moves read values round).
        ask_ram = self.log is not None or self.eviction.by_ram_order
        while ram.over_budget():
            entry = ram.victim() if ask_ram else None
            if entry is not None and self._demotable(entry):
                self._demote(entry)
                continue
            entry = self._doomed(entry)
            if entry is None:
                return
            self._evict_key(entry)

    def _doomed(self, resident: Entry | None) -> Entry | None:
        if self.following:
            return None
        return doomed(self.eviction, resident, self.ram, self.expiry, self._entries, self.scan, self.samples)

    def _evict_key(self, entry: Entry) -> None:
        # A key with a record on disk gets a delete record too, or it would come back on restart.
        self._remove(entry.key, entry, log_delete=entry.loc is not None)
        self.stats.evicted_keys += 1
        if self.events is not None:
            self.events.emit(EVICTED, b"evicted", entry.key)
