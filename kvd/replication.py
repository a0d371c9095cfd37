"""The primary's side of Redis replication: each change to the keyspace, sent to every replica as the command
that makes it, so a Redis server started with ``--replicaof`` (or sent REPLICAOF) keeps a live copy of kvd.

A replica connects with ``PSYNC``; kvd answers ``+FULLRESYNC <replid> <offset>``, streams a snapshot as an RDB file
(``kvd/commands/sync.py``) and then this stream. The last ``repl-backlog-size`` bytes of the stream are kept (the
backlog), so a replica that reconnects after a cut asks ``PSYNC <replid> <its offset + 1>`` and gets
``+CONTINUE`` and only what it missed; one that missed more than the backlog holds, or that followed another
history (after a crash kvd starts a new one: ``take_identity``), gets a new snapshot. The backlog holds the parts
as they were sent, values as views of the stored objects, so 64 MiB of backlog costs the memory of values
overwritten since, not a copy of each. It starts with the first replica and is dropped ``repl-backlog-ttl``
seconds after the last one left; while it exists the keyspace reports every change, replicas or not, as Redis
feeds its backlog.

What the stream carries. Not the commands clients sent but their effects, as the keyspace makes them
(``Keyspace.feed``): ``SET key value [PXAT ms]`` for every new value (an INCR, APPEND or SETBIT sends the whole
new value; the KV-cache chunks kvd stores are written whole anyway), ``DEL`` for a key deleted, expired or
evicted, ``PEXPIREAT`` or ``PERSIST`` for a deadline, ``FLUSHALL``. Deadlines are absolute, as Redis 7 propagates
them, so a replica that applies a change late still has the primary's deadline (a replica hides a key past it
and deletes it when the primary's DEL comes). Effects are idempotent: applying one the snapshot already holds
changes nothing.

Atomicity. The effects of one event-loop step (one or more commands that ran without any I/O between them: an
MSET, a RENAME, an EXEC, a pipeline read in one go) are sent as one ``MULTI``/``EXEC`` block at the start of the
next step, so a replica never shows a state the primary could not have shown between two steps. One effect goes
alone.

Offsets and WAIT. ``offset`` counts every byte of the stream (Redis's ``master_repl_offset``). A replica reports
what it has applied with ``REPLCONF ACK <offset>`` once a second; WAIT sends ``REPLCONF GETACK *`` so the answer
comes at once, and counts the replicas whose acknowledged offset covers every change made before the WAIT (by
any client: Redis counts the WAITing client's own last write, which is never later). A replica whose AOF (or
log) is on adds ``FACK <offset>``, how far it has fsynced the stream (Redis 7.2+, kvd with persistence on):
WAITAOF counts those in the same way. Every
``repl-ping-replica-period`` seconds (10) a ``PING`` goes down the stream, so idle replicas do not time out.

Flow control. The primary never waits for a replica: a replica's stream queues in its connection while it loads
the snapshot or reads slowly, and a replica whose queue passes ``client-output-buffer-hard-limit`` is
disconnected (it reconnects and resynchronises), as Redis drops a replica over its output buffer limit.

Cost without replicas: none; the keyspace's ``feed`` is None until the first replica attaches, and again once the
last one has left and its backlog has expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvd.persist.segment import fsync_dir

if TYPE_CHECKING:
    from kvd.connection import Client

log = logging.getLogger("kvd.replication")

Part = bytes | bytearray | memoryview
IDENTITY_FILE = "replication.id"  # in the segment directory: the replid and offset a clean shutdown left
LINK_IDENTITY_FILE = "replica-link.id"  # beside it, on a replica: the primary's replid and how far it was applied
_LARGE = 32 << 10  # an argument this long is sent as a view of the value, not copied into the header
_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_SELECT0 = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n"
_FLUSHALL = b"*1\r\n$8\r\nFLUSHALL\r\n"
_PING = b"*1\r\n$4\r\nPING\r\n"
_GETACK = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n"


class Replica:
    """One replica's connection, from its PSYNC on."""

    __slots__ = ("ack_offset", "ack_time", "aof_offset", "client", "queued", "queued_bytes", "state")

    def __init__(self, client: Client) -> None:
        self.client = client
        self.state = "send_bulk"  # Redis's words: the snapshot is on its way; then "online"
        self.queued: list[Part] = []  # the stream since the snapshot, until the snapshot has been sent
        self.queued_bytes = 0
        self.ack_offset = 0
        self.aof_offset = 0  # FACK: up to where its AOF / log is fsynced (Redis's repl_aof_off)
        self.ack_time = time.monotonic()

    @property
    def host(self) -> str:
        """The address it announced (replica-announce-ip), else the one it connected from, without the port: what
        INFO replication and ROLE show and FAILOVER TO names, as Redis's ``slave_addr``; ``/unixsocket`` for one on
        the unix socket, as Redis's connPeerToString."""
        if self.client.sync_ip_address:
            return self.client.sync_ip_address
        return "/unixsocket" if self.client.unix else self.client.addr.rsplit(":", 1)[0].strip("[]")


class ReplicationFeed:
    def __init__(self, replid: str, hard_limit: int, backlog_size: int, backlog_ttl: int, ping_period: int) -> None:
        self.replid = replid
        self.ping_period = ping_period  # repl-ping-replica-period, seconds
        self.hard_limit = hard_limit  # client-output-buffer-hard-limit: a replica queueing more is dropped
        self.backlog_size = backlog_size  # repl-backlog-size; 0 = no backlog, every resync is full
        self.backlog_ttl = backlog_ttl  # repl-backlog-ttl
        self.backlog_active = False
        self.backlog_start = 0  # the stream offset of the backlog's first byte
        self._backlog: deque[Part] = deque()
        self._backlog_bytes = 0
        self._alone_since = 0.0  # when the last replica left (monotonic)
        self.replid2 = "0" * 40  # the history this one continues (a promoted replica's primary's), up to
        self.second_offset = -1  # this offset: PSYNC with replid2 continues up to there, as Redis's
        self.sync_partial_ok = 0
        self.sync_partial_err = 0
        self.offset = 0
        self.written_offset = 0  # the stream's end after its last change (PINGs and GETACKs not counted)
        self.replicas: list[Replica] = []
        self._parts: list[Part] = []  # this step's effects, encoded
        self._effects = 0
        self._select = True  # SELECT 0 before the next effects (after a replica joins, as Redis does)
        self._scheduled = False
        self._last_ping = time.monotonic()
        self._ack_waiters: list[asyncio.Future[None]] = []

    @property
    def backlog_bytes(self) -> int:
        """What the backlog holds now (INFO's mem_replication_backlog)."""
        return self._backlog_bytes

    def change_id(self) -> None:
        """DEBUG CHANGE-REPL-ID: a new replid and no second history, as Redis's ``changeReplicationId`` and
        ``clearReplicationId2``; a replica that reconnects with the old one then gets a full resync."""
        self.replid = os.urandom(20).hex()
        self.replid2, self.second_offset = "0" * 40, -1

    # -- what the keyspace reports (Keyspace.feed) --------------------------------------------------------------

    def set(self, key: bytes, value: Part, expire_at: int) -> None:
        if expire_at:
            self._add([b"SET", key, value, b"PXAT", b"%d" % expire_at])
        else:
            self._add([b"SET", key, value])

    def delete(self, key: bytes) -> None:
        self._add([b"DEL", key])

    def expire(self, key: bytes, expire_at: int) -> None:
        self._add([b"PEXPIREAT", key, b"%d" % expire_at] if expire_at else [b"PERSIST", key])

    def flush(self) -> None:
        self._parts.append(_FLUSHALL)
        self._effects += 1
        self._schedule()

    def _add(self, args: list[Part]) -> None:
        parts = self._parts
        head = bytearray(b"*%d\r\n" % len(args))
        for arg in args:
            head += b"$%d\r\n" % len(arg)
            if len(arg) >= _LARGE:
                parts.append(bytes(head))
                parts.append(memoryview(arg))  # a stored value is never changed in place: no copy needed
                head = bytearray(b"\r\n")
            else:
                head += arg
                head += b"\r\n"
        parts.append(bytes(head))
        self._effects += 1
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush_now)

    # -- sending ------------------------------------------------------------------------------------------------

    def flush_now(self) -> None:
        """Send the effects gathered so far, one MULTI/EXEC block if there are several."""
        self._scheduled = False
        if not self._parts:
            return
        parts, self._parts = self._parts, []
        if self._effects > 1:
            parts = [_MULTI, *parts, _EXEC]
        self._effects = 0
        self._send(parts)
        self.written_offset = self.offset

    def _send(self, parts: list[Part]) -> None:
        if self._select:
            parts = [_SELECT0, *parts]
            self._select = False
        nbytes = sum(len(p) for p in parts)
        self.offset += nbytes
        if self.backlog_active:
            self._remember(parts, nbytes)
        for replica in list(self.replicas):
            if replica.state == "online":
                replica.client.send_stream(parts, self.hard_limit)
            else:
                replica.queued.extend(parts)
                replica.queued_bytes += nbytes
                if replica.queued_bytes > self.hard_limit:
                    log.warning(
                        "dropping replica %s: %d bytes of stream queued while its snapshot is sent is over "
                        "client-output-buffer-hard-limit",
                        replica.client.addr,
                        replica.queued_bytes,
                    )
                    replica.client.kill()

    def tick(self, now: float) -> None:
        """The server's background tick: a PING down the stream every ``repl-ping-replica-period`` seconds while
        replicas listen; the backlog dropped ``repl-backlog-ttl`` seconds after the last one left."""
        if self.replicas and now - self._last_ping >= self.ping_period:
            self._last_ping = now
            self.flush_now()
            self._send([_PING])
        elif self.backlog_active and not self.replicas and 0 < self.backlog_ttl <= now - self._alone_since:
            log.info("replication backlog dropped: no replica for %d seconds", self.backlog_ttl)
            self._drop_backlog()

    def take_over_history(self, replid: str, offset: int) -> list[Replica]:
        """A replica promoted (REPLICAOF NO ONE, or its primary's FAILOVER) that applied its primary's stream
        ``replid`` up to ``offset``: from now on this stream is numbered as that one, under a new replid, with the
        primary's kept as the second (Redis's ``shiftReplicationId``). So the old primary, and its other replicas
        that were as far, continue with PSYNC ``replid`` ``offset+1`` instead of a snapshot. This server's own
        replicas counted the old numbering: they are returned to be disconnected, and resynchronise."""
        self.flush_now()  # what they were owed goes out first
        dropped, self.replicas = self.replicas, []
        self.replid2, self.second_offset = replid, offset + 1
        self.replid = os.urandom(20).hex()
        self._backlog.clear()
        self._backlog_bytes = 0
        self.backlog_active = False
        self._select = True
        self.continue_history(offset)
        return dropped

    def continue_history(self, offset: int) -> None:
        """After a clean restart (``take_identity``): the stream goes on from ``offset`` under the same replid,
        with an empty backlog, so replicas that had all of it continue without a snapshot."""
        self.offset = self.written_offset = offset
        if self.backlog_size:
            self.backlog_active = True
            self.backlog_start = offset
            self._alone_since = time.monotonic()

    @property
    def needed(self) -> bool:
        """Whether the keyspace must report its changes: to replicas, or to the backlog."""
        return bool(self.replicas) or self.backlog_active

    # -- the backlog --------------------------------------------------------------------------------------------

    def _remember(self, parts: list[Part], nbytes: int) -> None:
        backlog = self._backlog
        backlog.extend(parts)
        self._backlog_bytes += nbytes
        size = self.backlog_size
        while backlog and self._backlog_bytes - len(backlog[0]) >= size:
            first = backlog.popleft()
            self._backlog_bytes -= len(first)
            self.backlog_start += len(first)
        if not size:
            self._drop_backlog()

    def _drop_backlog(self) -> None:
        self.backlog_active = False
        self._backlog.clear()
        self._backlog_bytes = 0
        self.backlog_start = self.offset

    def can_continue(self, replid: bytes, next_offset: int) -> bool:
        """PSYNC ``replid`` ``next_offset``: whether the backlog holds the stream from that byte on (Redis's
        offsets count from 1: ``next_offset`` is one past the last byte the replica applied). The caller has
        flushed the changes gathered so far."""
        missing_from = next_offset - 1
        if replid != self.replid.encode() and (replid != self.replid2.encode() or next_offset > self.second_offset):
            return False  # neither this history nor, up to where it ended, the one it continues
        return self.backlog_active and self.backlog_start <= missing_from <= self.offset

    def resume(self, client: Client, next_offset: int) -> Replica:
        """A partial resynchronisation: the backlog from ``next_offset`` on, then the stream as it comes. The
        caller has already sent ``+CONTINUE``."""
        missing_from = next_offset - 1
        tail: list[Part] = []
        at = self.backlog_start
        for part in self._backlog:
            end = at + len(part)
            if end > missing_from:
                tail.append(part if at >= missing_from else memoryview(part)[missing_from - at :])
            at = end
        replica = Replica(client)
        replica.state = "online"
        replica.ack_offset = missing_from
        self.replicas.append(replica)
        if tail:
            client.send_stream(tail, self.hard_limit)
        return replica

    # -- replicas -----------------------------------------------------------------------------------------------

    def attach(self, client: Client) -> Replica:
        """A replica from this point of the stream on: what was changed before is in the snapshot it is about
        to be sent, what changes after is queued for it."""
        self.flush_now()  # changes made before the snapshot go to the others, not to this one
        replica = Replica(client)
        self.replicas.append(replica)
        self._select = True
        if not self.backlog_active and self.backlog_size:
            self.backlog_active = True
            self.backlog_start = self.offset
        return replica

    def online(self, replica: Replica) -> None:
        """Its snapshot is sent: the stream queued meanwhile follows, and from now on goes out as it comes."""
        if replica not in self.replicas:
            return
        replica.state = "online"
        queued, replica.queued, replica.queued_bytes = replica.queued, [], 0
        if queued:
            replica.client.send_stream(queued, self.hard_limit)

    def detach(self, client: Client) -> bool:
        """The replica's connection closed. True when the keyspace need not report changes any more."""
        self.replicas = [r for r in self.replicas if r.client is not client]
        if not self.replicas:
            self._alone_since = time.monotonic()
        self._wake_ack_waiters()
        return not self.needed

    def ack(self, replica: Replica, offset: int, fsynced: int | None = None) -> None:
        """``REPLCONF ACK <offset> [FACK <fsynced>]``: both only ever move forward, as Redis's."""
        if offset > replica.ack_offset:
            replica.ack_offset = offset
        if fsynced is not None and fsynced > replica.aof_offset:
            replica.aof_offset = fsynced
        replica.ack_time = time.monotonic()
        self._wake_ack_waiters()

    def good_replicas(self, max_lag: int) -> int:
        """Replicas online that acknowledged within ``max_lag`` seconds (min-replicas-to-write counts these)."""
        now = time.monotonic()
        return sum(1 for r in self.replicas if r.state == "online" and now - r.ack_time <= max_lag)

    def acked(self, offset: int) -> int:
        """How many replicas have applied the stream up to ``offset``."""
        return sum(1 for r in self.replicas if r.state == "online" and r.ack_offset >= offset)

    def aof_acked(self, offset: int) -> int:
        """How many replicas have fsynced the stream up to ``offset`` (their FACK; Redis's
        ``replicationCountAOFAcksByOffset``)."""
        return sum(1 for r in self.replicas if r.state == "online" and r.aof_offset >= offset)

    async def wait_acks(
        self, client: Client, numreplicas: int, timeout_ms: int, target: int | None = None, aof: bool = False
    ) -> int:
        """WAIT: until ``numreplicas`` replicas acknowledge every change made before it (``target``: the stream's
        end now), or the timeout. ``aof``: WAITAOF's count, of their FACKs."""
        if target is None:
            self.flush_now()
            target = self.written_offset
        count = self.aof_acked if aof else self.acked
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
        if count(target) < numreplicas:
            self.request_acks()  # now rather than at the replicas' next second
        while count(target) < numreplicas:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._ack_waiters.append(waiter)
            left = 0 if deadline is None else max(1, round((deadline - time.monotonic()) * 1000))
            if not await client.block(waiter, left):
                break
        return count(target)

    def request_acks(self) -> None:
        """REPLCONF GETACK * to every replica: their offsets now, not at their next second."""
        if self.replicas:
            self._send([_GETACK])

    async def wait_ack(self, timeout: float) -> None:
        """Until a replica acknowledges an offset or leaves, or ``timeout`` seconds."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ack_waiters.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, timeout)

    def _wake_ack_waiters(self) -> None:
        waiters, self._ack_waiters = self._ack_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def backlog_info(self) -> list[tuple[str, Any]]:
        """INFO replication's backlog lines (Redis counts offsets from 1)."""
        return [
            ("repl_backlog_active", int(self.backlog_active)),
            ("repl_backlog_size", self.backlog_size),
            ("repl_backlog_first_byte_offset", self.backlog_start + 1 if self.backlog_active else 0),
            ("repl_backlog_histlen", self._backlog_bytes),
        ]

    def info(self) -> list[tuple[str, Any]]:
        """INFO replication's slaveN lines."""
        now = time.monotonic()
        return [
            (
                f"slave{i}",
                f"ip={r.host},port={r.client.sync_listening_port},state="
                f"{'online' if r.state == 'online' else 'send_bulk'},offset={r.ack_offset},"
                f"lag={int(now - r.ack_time)}",
            )
            for i, r in enumerate(self.replicas)
        ]


# -- the replication id across a clean restart ----------------------------------------------------------------


def save_identity(directory: str | os.PathLike[str], replid: str, offset: int, name: str = IDENTITY_FILE) -> None:
    """At a clean shutdown, once the log is flushed and fsynced: the stream's id and end. The keyspace on disk is
    then exactly the state at ``offset``, so the next start may go on with the same history (as Redis keeps its
    replid in the RDB file it saves at shutdown). ``LINK_IDENTITY_FILE``: the same for the primary's stream a
    replica applied, so that after the restart it asks the primary to continue (kvd/replica.py). Written
    beside, fsynced, renamed."""
    path = Path(directory) / name
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{replid} {offset}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_directory(path.parent)


def take_identity(directory: str | os.PathLike[str], name: str = IDENTITY_FILE) -> tuple[str, int] | None:
    """At start-up, after recovery: the id a clean shutdown left, removed at once, so that a crash later in this
    run (whose recovered keyspace may lack the last writes replicas have) can never reuse it. None if there is
    none, or it is not one (then a new id, and full resynchronisations)."""
    path = Path(directory) / name
    try:
        text = path.read_text()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    _fsync_directory(path.parent)
    found = re.fullmatch(r"([0-9a-f]{40}) (\d+)\n", text)
    if found is None:
        log.warning("ignoring %s: not a replication id and offset", path)
        return None
    return found.group(1), int(found.group(2))


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # the rename or unlink stands; only its durability is best effort
        fsync_dir(directory)
