"""The replica's side of Redis replication: ``REPLICAOF <host> <port>`` makes kvd a read-only copy of another
server, a Redis server or another kvd, kept up to date by that primary's stream.

For a KV cache this is a copy near each group of inference engines: they read chunks from the replica on their
own host while one primary takes the writes, and a replica promoted with ``REPLICAOF NO ONE`` keeps serving what
it holds. The primary's side is ``kvd/replication.py``.

The link (``ReplicaLink``) is one task and at most one connection, in the steps of Redis's ``syncWithMaster``:

    connect    TCP to the primary, ``repl-timeout`` seconds at most for this and for every reply after it
    handshake  AUTH [masteruser] masterauth when set, PING, REPLCONF listening-port (replica-announce-port, else
               its own), REPLCONF ip-address (replica-announce-ip, when set), REPLCONF capa eof capa psync2
    PSYNC      the history this replica follows and the next byte it needs, or ``? -1`` the first time:
               ``+CONTINUE [replid]``: only what was missed follows, straight to streaming;
               ``+FULLRESYNC <replid> <offset>``: a snapshot follows
    transfer   ``$<size>`` and an RDB file, or ``$EOF:<40-byte mark>``, the file, the mark (a diskless primary);
               the newlines a primary sends while it prepares the file are keep-alives. The file goes to
               ``dir/temp-replica-<pid>.rdb`` through aiofiles (writes in a thread), never into memory whole; the
               file of a process killed mid-transfer is deleted at the next start (``remove_stale_transfers``).
    check      the whole file is read once, in a thread, checksum included: a damaged snapshot is refused (and
               the link retries) before anything held is dropped
    load       the old data is flushed and the file's string keys are SET one at a time (``RdbReader``), in
               slices of ``LOAD_SLICE`` seconds so every client keeps being served; until the last key is in,
               clients get -LOADING for every command but those Redis flags ``loading`` (INFO, CONFIG, AUTH,
               HELLO, CLIENT...; not PING), as a Redis replica answers, and INFO persistence shows the progress
               (``LoadProgress``). With persistence on each slice waits
               until the log has written it, so a large load runs at the disk's pace and never queues the
               dataset in memory. Keys of other types (a Redis primary's lists, hashes...), of databases other
               than 0, and function libraries are passed over and counted in the log; keys whose deadline has
               passed are loaded too, as a Redis replica loads them (below, "Deadlines").
    streaming  the connection becomes a client (``PrimaryClient``) whose commands run like any client's and
               whose replies are dropped, except REPLCONF GETACK, answered with ``REPLCONF ACK <offset>``; the
               offset also goes to the primary once a second, which is what its WAIT counts. With persistence on
               the ACK adds ``FACK <offset>``, what the log has fsynced (``FsyncedOffset``), which a Redis 7.2+
               primary's WAITAOF counts. Its batches do not wait for the log as a client's replies do (nobody
               reads these); reading waits only while the log has ``LOG_LAG_MAX`` bytes or more left to write.
               FUNCTION and SCRIPT are passed over (a script's or function's writes come as their effects).

Offsets. ``offset`` counts the bytes of every command that reached the keyspace, as the canonical RESP size of
its arguments (primaries send commands in that form). A cut link connects again at once (then, while attempts
fail, once a second) and asks to continue from ``offset + 1``: commands received but not yet run when the link
broke were not counted, so they are sent again; a MULTI cut before its EXEC is rewound to before the MULTI. What
the replica acknowledges, and shows as ``slave_repl_offset``, is the offset its keyspace holds: before a MULTI
whose EXEC has not come (a Redis replica's ``reploff``), so a primary's WAIT never counts a write still queued.
The history is kept while the process runs and forgotten at ``REPLICAOF NO ONE`` (the replica may then take
writes the history lacks). A clean shutdown with persistence on writes it to ``dir/replica-link.id`` once the log
is flushed (``resumable``), and the next start takes it and asks to continue, so a restarted replica gets only
what it missed, as a Redis replica does from the replid its RDB file keeps; after a crash the file is not there
and the replica resynchronises fully. A replica's recovery keeps the keys past their deadline (kvd/cli.py), as a
Redis replica's rdbLoad does: the stream it continues may hold the primary's PERSIST for one.

Deadlines, as on a Redis replica: the primary expires keys and sends DEL, the replica does not expire them by its
own clock. A key past its deadline is absent to clients (GET, EXISTS, TTL, SCAN, KEYS...) but kept until the
primary's DEL, and the primary's own commands still see it (``from_primary``; Redis's expireIfNeeded for its
master client): a replica that applies the stream late (a busy replica, a slow link, a snapshot that loads for
minutes) still takes the primary's PERSIST or later deadline for a key whose first deadline has passed on its
own clock, where deleting the key itself would lose it for good. So the replica publishes no ``expired`` event
for the primary's keys, only the ``del`` of its DEL. The background sweep deletes only keys whose deadline the
replica's own clients set (a writable replica's, as Redis's ``expireSlaveKeys``). A writable replica's own write
to a key past its deadline deletes it first, with an ``expired`` event, as Redis's lookupKeyWrite does there
(``own_write``), and its own DEL deletes it and counts it, as Redis's does. A WATCHed key whose deadline passes
fails the EXEC, as in Redis, though the replica still holds it (``Keyspace.intact``).

What differs from a Redis replica: kvd holds strings only (a key the primary makes another type, by SUNIONSTORE,
RESTORE, RENAME..., is deleted on the replica: ``PrimaryClient``) and database 0 only (a Redis primary's other
databases are passed over, in the snapshot and in the stream; a MOVE, COPY or SWAPDB that brings another
database's data into database 0 costs a full resynchronisation: ``PrimaryClient._passed_over``), and the RAM
tier's eviction applies (with persistence on it only moves values to disk; without it a replica over
``maxmemory`` drops keys the primary still has). Sub-replicas of a kvd replica follow the replica's own stream
(its ``master_replid``), not the top primary's. When the replica is promoted (REPLICAOF NO ONE, its primary's
FAILOVER) with the primary's stream applied to a known offset, its stream goes on numbered as the primary's, under
a new replid with the primary's as the second (``ReplicationFeed.take_over_history``): the primary's other
replicas continue from it without a snapshot, and its own sub-replicas resynchronise; from then on it expires keys
by its own clock. With ``tls-replication`` the link is TLS, the primary verified with ``tls-ca-cert-file``
(``client_tls_context``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import ssl
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiofiles

from kvd.commands import COMMANDS
from kvd.commands.registry import ALIASES
from kvd.connection import DISCARD, Client
from kvd.notify import GENERIC, notify
from kvd.persist.dump import other_type
from kvd.persist.rdb import RdbError, RdbReader
from kvd.store.keyspace import from_primary, now_ms

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvd.config import Settings
    from kvd.failover import Failover
    from kvd.persist.log import SegmentLog
    from kvd.server import Server
    from kvd.stats import ServerStats

log = logging.getLogger("kvd.replica")

RETRY_SECONDS = 1.0  # after a failed attempt, as Redis's replicationCron retries each second (a cut link: at once)
ACK_SECONDS = 1.0
LOAD_SLICE = 0.01  # seconds of loading between two turns of the event loop
WIRE_HIGH = 4 << 20  # the handshake connection stops reading past this much unconsumed data
EOF_MARK_LEN = 40  # RDB_EOF_MARK_SIZE
_RUN_IN_MULTI = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})  # Client's: never queued
LOG_LAG_MAX = 64 << 20  # the stream is read on while the log has less than this left to write
_NO_HISTORY = "?"


@dataclasses.dataclass(slots=True)
class LoadProgress:
    """A snapshot being loaded: INFO persistence's ``loading_*`` fields, as Redis computes them."""

    total_bytes: int
    loaded_bytes: int = 0
    started: float = dataclasses.field(default_factory=time.time)

    def info(self) -> list[tuple[str, object]]:
        total, loaded = self.total_bytes, self.loaded_bytes
        elapsed = int(time.time() - self.started)
        return [
            ("loading_start_time", int(self.started)),
            ("loading_total_bytes", total),
            ("loading_rdb_used_mem", 0),  # the primary's memory, an estimate Redis uses when the size is unknown
            ("loading_loaded_bytes", loaded),
            ("loading_loaded_perc", f"{100 * loaded / total if total else 0:.2f}"),
            ("loading_eta_seconds", elapsed * (total - loaded) // (loaded + 1) if elapsed else 1),
        ]


class LinkError(Exception):
    """The attempt failed; the message says why, and the link retries."""


def command_size(argv: list[Any]) -> int:
    """Bytes of ``argv`` as a RESP array of bulk strings: what it took of the primary's stream.

    Run for every command a replica applies: a flood of small SETs spent 18 % of the replica's time here (py-spy)
    when each length's digits came from ``str``; most arguments are shorter than 100 bytes."""
    size = 3 + len(str(len(argv))) + 5 * len(argv)
    for arg in argv:
        n = len(arg)
        size += n + (1 if n < 10 else 2 if n < 100 else len(str(n)))
    return size


def encode_command(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class _Wire(asyncio.Protocol):
    """The link's connection until the stream starts: replies and byte runs on demand. What arrived beyond the
    last one asked for stays in ``buf`` for the client that takes the connection over."""

    def __init__(self, timeout: float, stats: ServerStats) -> None:
        self.timeout = timeout
        self.stats = stats
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost: BaseException | None = None
        self.last_io = time.monotonic()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.stats.net_repl_input_bytes += len(data)  # the handshake and the snapshot (INFO)
        self.buf += data
        self.last_io = time.monotonic()
        if len(self.buf) > WIRE_HIGH and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("the primary closed the connection")
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _more(self) -> None:
        if self.lost is not None:
            raise LinkError(f"connection lost: {self.lost}")
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._waiter, self.timeout)
        except TimeoutError:
            raise LinkError(f"no data from the primary for {self.timeout:g} s (repl-timeout)") from None

    def send(self, *args: bytes) -> None:
        assert self.transport is not None
        self.transport.write(encode_command(*args))

    async def line(self) -> bytes:
        """The next non-empty line, without its CRLF (empty lines are a primary's keep-alives)."""
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[:end]).rstrip(b"\r")
                del self.buf[: end + 1]
                if line:
                    return line
                continue
            if len(self.buf) > 64 << 10:
                raise LinkError("the primary sent a line over 64 KiB where a reply belongs")
            await self._more()

    async def ask(self, *args: bytes) -> bytes:
        self.send(*args)
        return await self.line()

    async def take(self, limit: int) -> bytearray:
        """At least one byte and at most ``limit`` of what has arrived (waiting for some if none has)."""
        while not self.buf:
            await self._more()
        if len(self.buf) <= limit:
            data, self.buf = self.buf, bytearray()
        else:
            data = self.buf[:limit]
            del self.buf[:limit]
        return data


class PrimaryClient(Client):
    """The primary's connection once it streams: a client whose writes are allowed on a read-only replica,
    whose replies are dropped, and which counts the bytes of the commands it runs (``link.offset``).

    A command kvd does not know or refuses before it runs (a Redis primary's LPUSH, HSET...) is logged and counted
    as every error to the primary is, and passed over; inside a MULTI it does not fail the EXEC (``Client.
    flags_transactions``), so the string writes of a transaction or script that also touched a list still
    arrive. One that leaves another type where kvd holds a string (SUNIONSTORE, RESTORE of a list's payload,
    RENAME of a list...) deletes that string instead (``_other_command``, ``_source_elsewhere``)."""

    flags_transactions = False

    def __init__(self, server: Server, link: ReplicaLink) -> None:
        super().__init__(server)
        self.link = link
        self._queued_db: int | None = None  # the database a SELECT queued in the open MULTI leaves selected
        self.set_authenticated(True)
        self.reply.out = DISCARD  # as Redis's master client: nothing goes back but REPLCONF ACK
        self.reply.on_error = self._refused
        self._offset_at_multi = -1  # link.offset before the MULTI of a transaction not yet executed
        self._running = 0  # bytes of the command running now, counted in link.offset already
        self._errors_logged_at = 0.0
        self._errors_unlogged = 0

    def _admit(self, peer: Any) -> None:
        self.server.clients[self.id] = self  # neither maxclients nor protected mode: it is the server's own

    def take_over(self, transport: asyncio.Transport, leftover: bytearray) -> None:
        """Become the protocol of the link's connection; ``leftover`` arrived with the handshake's last reply."""
        transport.pause_reading()
        transport.set_protocol(self)
        self.connection_made(transport)
        view = memoryview(leftover)
        while view and not self._closed:
            buf = self.get_buffer(len(view))
            n = min(len(buf), len(view))
            memoryview(buf)[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]
        if self._reading and not self._closed:
            transport.resume_reading()

    def _end_batch(self) -> None:
        # A client's replies wait until the log has its batch's writes; these replies are dropped, so the stream
        # need not wait (Redis's master client does not wait for its AOF either). Only a log far behind makes
        # reading wait for it, so the records queued for the writer stay bounded.
        seg_log = self.keyspace.log
        if self._log_dirty and seg_log is not None and seg_log.pending_bytes < LOG_LAG_MAX:
            self._log_dirty = False
            self._write_spans.clear()
            self._finish_batch()
            return
        super()._end_batch()

    def hold_commands(self) -> None:
        pass  # CLIENT PAUSE holds clients, never the primary's stream (Redis exempts its master too)

    def client_type(self) -> str:
        return "master"

    def _execute(self, argv: list[Any]) -> Any:
        if self._closed:
            return None  # dropped for a full resynchronisation (``_resync``): nothing more of this stream applies
        link = self.link
        counted = not self.executing_transaction  # EXEC's queued commands were counted when they were queued
        if counted:
            if len(argv) == 1 and self._multi is None and bytes(argv[0]).lower() == b"multi":
                self._offset_at_multi = link.offset
            size = command_size(argv)
            link.offset += size
            # The primary's stream is replication input, not a client's (INFO total_net_repl_input_bytes), as in
            # Redis; the read counted it as client input.
            self.stats.net_repl_input_bytes += size
            self.stats.net_input_bytes -= size
            self._running = size
        token = from_primary.set(True)  # the primary's commands see keys past their deadline (Keyspace.lookup)
        try:
            result = None if self._passed_over(argv) else super()._execute(argv)
            if asyncio.iscoroutine(result):
                result = asyncio.ensure_future(result)  # what runs after a disk read: the task copies the context
        finally:
            from_primary.reset(token)
            if counted:
                self._running = 0
        if counted and self._multi is None:
            self._offset_at_multi = -1
            self._queued_db = None
        return result

    # -- databases: kvd has database 0 only -------------------------------------------------------------------
    #
    # A Redis primary's stream names its database with SELECT, and its commands apply to that one. The link keeps
    # the primary's selected database (``ReplicaLink.db``, across a reconnection, as Redis's cached master
    # keeps it); while it is not 0 the data commands are passed over (their bytes still count in the offset),
    # FLUSHALL excepted. A command that moves data between database 0 and another (MOVE, SWAPDB, COPY ... DB)
    # is applied where kvd can apply it (MOVE out of database 0 deletes the key), and where it cannot (data
    # coming into database 0 from one kvd does not hold) the link drops and resynchronises fully (``_resync``):
    # until the new snapshot is loaded the replica serves what its primary held before that command.

    def _passed_over(self, argv: list[Any]) -> bool:
        """Whether this command of the stream is handled here (applied, or passed over) instead of being run."""
        name = argv[0]
        cmd = ALIASES.get(name) if type(name) is bytes else None
        if cmd is None:
            cmd = COMMANDS.get(bytes(name).lower())
            if cmd is None:
                return self._other_command(argv)
        if self._multi is not None and cmd.name not in _RUN_IN_MULTI:
            # Queued, and judged when EXEC runs it.
            if cmd.name == "select" and len(argv) == 2:
                self._queued_db = _db_index(argv[1])
            return False
        special = _DATABASE_COMMANDS.get(cmd.name)
        if special is not None:
            return special(self, argv)
        return self.link.db != 0 and cmd.is_write and cmd.name != "flushall"

    # -- commands kvd does not know: other types, scripting -----------------------------------------------------
    #
    # A Redis primary's commands on lists, sets, hashes... are run as sent, so kvd refuses them (logged, counted,
    # the stream goes on): kvd holds none of those keys. Those that write another type over a destination
    # whatever it held (SUNIONSTORE, ZRANGESTORE, GEOSEARCHSTORE, GEORADIUS ... STORE: ``_OVERWRITES``) delete
    # that destination instead: a string there is gone on the primary. FUNCTION and SCRIPT change no data: they
    # are passed over, said once in the log.

    def _other_command(self, argv: list[Any]) -> bool:
        name = bytes(argv[0]).lower()
        if name in _NO_DATA:
            link = self.link
            if not link.scripting_logged:
                link.scripting_logged = True
                log.info(
                    "the primary %s:%d sent %s: kvd has no scripting, and passes FUNCTION and SCRIPT over",
                    link.host,
                    link.port,
                    name.decode().upper(),
                )
            return True
        overwritten = _OVERWRITES.get(name)
        db = self.link.db
        if self._multi is not None:
            if overwritten is not None:
                self._multi.append(argv)  # queued as the primary queued it: its turn in the EXEC deletes
                return True
            # Refused now, as kvd cannot queue it (quietly when it is for another database, as a SELECT already
            # queued may say).
            return (self._queued_db if self._queued_db is not None else db) != 0
        if overwritten is None:
            return db != 0  # another type's command (LPUSH...) for another database: nothing of kvd's
        if db == 0:
            for raw in overwritten(argv):
                key = bytes(raw)
                self._delete(key, (b"del", key))
        return True

    def _restore(self, argv: list[Any]) -> bool:
        """RESTORE of a payload of another type (a list DUMPed on the primary): as for ``_OVERWRITES``, the key
        is that type now, so a string held there goes."""
        if self.link.db != 0:
            return True
        if len(argv) < 4 or other_type(argv[3]) is None:
            return False
        key = bytes(argv[1])
        self._delete(key, (b"del", key))
        return True

    def _select(self, argv: list[Any]) -> bool:
        index = _db_index(argv[1]) if len(argv) == 2 else None
        if index is None:
            return False  # the SELECT command's own error, logged as any refused command of the primary
        link = self.link
        if index and not link.other_db_logged:
            link.other_db_logged = True
            log.info(
                "the primary %s:%d writes to database %d too: kvd has database 0 only, and passes those writes over",
                link.host,
                link.port,
                index,
            )
        link.db = index
        return True

    def _move(self, argv: list[Any]) -> bool:
        target = _db_index(argv[2]) if len(argv) == 3 else None
        db = self.link.db
        if target is None or target == db:
            return False  # MOVE's own error (the primary never sends one that failed)
        if target == 0:
            self._resync(f"MOVE of a key into database 0 from database {db}")
        elif db == 0:
            self._delete(bytes(argv[1]), (b"move_from", bytes(argv[1])))  # Redis's event in database 0
        return True

    def _swapdb(self, argv: list[Any]) -> bool:
        first, second = (_db_index(argv[1]), _db_index(argv[2])) if len(argv) == 3 else (None, None)
        if first is None or second is None:
            return False
        if first != second and 0 in (first, second):
            self._resync(f"SWAPDB {first} {second}")
        return True

    def _copy(self, argv: list[Any]) -> bool:
        db = self.link.db
        target: int | None = db
        for i in range(3, len(argv) - 1):
            if bytes(argv[i]).lower() == b"db":
                target = _db_index(argv[i + 1])
        if target is None or len(argv) < 3:
            return False
        if target != 0:
            return True  # nothing of database 0 changes (or nothing kvd holds)
        if db != 0:
            self._resync(f"COPY of a key into database 0 from database {db}")
            return True
        src, dst = bytes(argv[1]), bytes(argv[2])
        return self._source_elsewhere(src, dst, (b"copy_to", dst))

    def _rename(self, argv: list[Any]) -> bool:
        if self.link.db != 0:
            return True
        if len(argv) != 3:
            return False
        src, dst = bytes(argv[1]), bytes(argv[2])
        return self._source_elsewhere(src, dst, (b"rename_from", src), (b"rename_to", dst))

    def _source_elsewhere(self, src: bytes, dst: bytes, *events: tuple[bytes, bytes]) -> bool:
        """RENAME or COPY into ``dst`` from a source kvd does not hold: on the primary it is a key of another type
        (or one this replica dropped for memory), which ``dst`` now is too. kvd passes such keys over, so it
        deletes ``dst``: a string left there would be one the primary no longer has. False (run the command as
        sent) when kvd holds the source."""
        ks = self.keyspace
        if src == dst or ks.lookup(src) is not None:
            return False
        if ks.lookup(dst) is not None:
            self._delete(dst, *events)
        return True

    def _delete(self, key: bytes, *events: tuple[bytes, bytes]) -> None:
        """Delete ``key`` for the primary, with Redis's keyspace events for the command that deleted it."""
        ks = self.keyspace
        seg_log = ks.log
        if seg_log is not None:
            refused = seg_log.misconf()
            if refused:
                self.reply.error(refused)  # logged and counted (_refused), as the command itself would be
                return
            self._log_dirty = True
        if ks.delete(key):
            for event, name in events:
                notify(ks, GENERIC, event, name)

    def _resync(self, what: str) -> None:
        """The stream changes database 0 in a way kvd cannot follow (its data comes from a database kvd does not
        hold): drop the link and ask for a full resynchronisation. The rest of what was received is not run."""
        link = self.link
        log.warning(
            "the primary %s:%d ran %s; kvd has database 0 only and cannot apply it: resynchronising fully",
            link.host,
            link.port,
            what,
        )
        link.replid, link.offset, self._offset_at_multi = _NO_HISTORY, -1, -1
        self.kill()

    def _refused(self, message: str) -> None:
        """An error reply to the primary, which nobody reads: counted as any, and logged (once a second at most),
        as Redis logs the errors its replicas send their master."""
        self.stats.count_error(message)
        now = time.monotonic()
        if now - self._errors_logged_at < 1.0:
            self._errors_unlogged += 1
            return
        more = f" ({self._errors_unlogged} more since the last report)" if self._errors_unlogged else ""
        log.warning(
            "kvd refused a command from its primary %s (%s): %s%s; the replica may now differ from it",
            self.addr,
            self.last_command,
            message[:200],
            more,
        )
        self._errors_logged_at, self._errors_unlogged = now, 0

    def rewind(self) -> None:
        """The link is cut: a transaction whose EXEC has not come is asked for again, from its MULTI."""
        if self._offset_at_multi >= 0:
            self.link.offset, self._offset_at_multi = self._offset_at_multi, -1

    def connection_lost(self, exc: Exception | None) -> None:
        self.rewind()
        super().connection_lost(exc)
        self.link.stream_ended(exc)

    def applied_offset(self) -> int:
        """How far the stream has reached the keyspace: ``link.offset`` but for a transaction whose EXEC has not
        come, whose queued commands have not run (Redis's replica leaves ``reploff`` before such a MULTI), and for
        the command running now: a REPLCONF GETACK is answered with the offset before it, as Redis's replica
        answers it before it counts the GETACK's own bytes."""
        if self._offset_at_multi >= 0:
            return self._offset_at_multi
        return self.link.offset - self._running

    def send_ack(self) -> None:
        """``REPLCONF ACK <offset>``, and with persistence on ``FACK <offset the log has fsynced>``, as a Redis 7.2
        replica with appendonly yes sends it (``replicationSendAck``; one with appendonly no sends no FACK)."""
        if self.transport is not None and not self._closed:
            ack = [b"REPLCONF", b"ACK", b"%d" % self.applied_offset()]
            if self.keyspace.log is not None:
                ack += [b"FACK", b"%d" % self.link.fsynced.offset]
            self.transport.write(encode_command(*ack))

    def ask_fsync(self) -> None:
        """Have the log prove the offset applied now fsynced (``FsyncedOffset``); a proof that takes an fsync sends
        an ACK when it is done, so the primary's WAITAOF need not wait for the next one."""
        seg_log = self.keyspace.log
        if seg_log is not None:
            self.link.fsynced.prove(seg_log, self.applied_offset(), self.send_ack)


class FsyncedOffset:
    """FACK: the offset of the primary's stream up to which the replica's log has fsynced every write (Redis 7.2's
    ``fsynced_reploff``), which a Redis 7.2+ primary's WAITAOF counts. It only ever names an offset the log has
    proven: at most once a second the link asks it (``sync_then``: an fdatasync of what was appended, the segments
    sealed before it included) to vouch for everything appended up to the offset applied then, and the offset
    becomes FACK when the fsync succeeds. Nothing appended since the last proof: the offset applied now adds no
    write, and is FACK at once. With ``appendfsync no`` the log is never asked to fsync (the policy says not to):
    FACK stays where it was, as a Redis replica's stays at its last rewrite. A write the log lost (an error) stops
    FACK until the next full synchronisation replaces the data: the offsets past it are not on disk whole."""

    __slots__ = ("_asking", "_epoch", "_failures", "_records", "offset")

    def __init__(self) -> None:
        self.offset = 0
        self._records = -1  # the log's appended_records when the last proof was asked
        self._failures = -1  # the log's failures when this history began (-1: not known yet)
        self._epoch = 0  # a proof asked before a reset is dropped
        self._asking = False

    def reset(self, seg_log: SegmentLog | None) -> None:
        """A new history (a full synchronisation's data replaces what was held): nothing of it is proven yet."""
        self.offset = 0
        self._records = -1
        self._failures = seg_log.failures if seg_log is not None else -1
        self._epoch += 1
        self._asking = False

    def prove(self, seg_log: SegmentLog, offset: int, proven: Callable[[], None]) -> None:
        if self._asking or offset <= self.offset:
            return
        if self._failures < 0:
            self._failures = seg_log.failures
        if seg_log.failures != self._failures:
            return
        records = seg_log.appended_records
        if records == self._records:  # the ACK about to go carries it
            self.offset = offset
            return
        if seg_log.appendfsync == "no":
            return
        self._asking = True
        epoch = self._epoch

        def done(ok: bool) -> None:
            if epoch != self._epoch:
                return
            self._asking = False
            if ok and seg_log.failures == self._failures and offset > self.offset:
                self.offset, self._records = offset, records
                proven()

        seg_log.sync_then(done)


_DATABASE_COMMANDS = {
    "select": PrimaryClient._select,
    "move": PrimaryClient._move,
    "swapdb": PrimaryClient._swapdb,
    "copy": PrimaryClient._copy,
    "rename": PrimaryClient._rename,
    "renamenx": PrimaryClient._rename,
    "restore": PrimaryClient._restore,
    "restore-asking": PrimaryClient._restore,
}


def _destination(argv: list[Any]) -> list[Any]:
    return argv[1:2]


def _store_option(first_option: int) -> Any:
    """GEORADIUS's and GEORADIUSBYMEMBER's destination: the key after the last STORE or STOREDIST among the
    options, which start at ``first_option`` (COUNT takes an argument), as georadiusGeneric parses them."""

    def find(argv: list[Any]) -> list[Any]:
        found = []
        i = first_option
        while i < len(argv) - 1:
            word = bytes(argv[i]).lower()
            if word == b"count":
                i += 1
            elif word in (b"store", b"storedist"):
                found = [argv[i + 1]]
                i += 1
            i += 1
        return found

    return find


# Redis's commands (7.0 to 7.4) that write a key of another type whatever the key held: Redis's key specs flag
# their destination OW (SINTERSTORE's only from 7.2 on). kvd's own commands with such a key (SET, MSET, COPY,
# RENAME, BITOP, SORT ... STORE, RESTORE) run as they are, or are handled above; tests/compat/test_replica.py
# checks that Redis has no other.
_OVERWRITES = {
    b"sunionstore": _destination,
    b"sinterstore": _destination,
    b"sdiffstore": _destination,
    b"zunionstore": _destination,
    b"zinterstore": _destination,
    b"zdiffstore": _destination,
    b"zrangestore": _destination,
    b"geosearchstore": _destination,
    b"georadius": _store_option(6),
    b"georadiusbymember": _store_option(5),
}
_NO_DATA = frozenset({b"function", b"script"})  # function libraries and the script cache


def _db_index(raw: Any) -> int | None:
    """A database index as a primary sends it (decimal, 0 to 2**31 - 1), else None."""
    text = bytes(raw)
    return int(text) if text.isdigit() and int(text) < 2**31 else None


class ReplicaLink:
    """kvd following one primary: connects, synchronises, applies its stream, and reconnects when cut."""

    def __init__(self, server: Server, host: str, port: int) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.state = "connect"  # ROLE's words: connect, connecting, handshake, sync, connected
        self.replid = _NO_HISTORY  # the primary's history this replica follows, and how far (offset)
        self.offset = -1
        self.db = 0  # the database the primary's stream has selected (its SELECT); kvd holds database 0 only
        self.other_db_logged = False
        self.scripting_logged = False
        self.sync_total = -1  # bytes of the snapshot being transferred (-1: not announced, EOF-marked)
        self.sync_read = 0
        self.down_since: float | None = None  # when the link went down; None: never up since REPLICAOF
        self.last_error = ""
        self._client: PrimaryClient | None = None
        self._wire: _Wire | None = None
        self._stream_done: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.failover: Failover | None = None  # this server ran FAILOVER: the first PSYNC says so (kvd/failover.py)
        self.fsynced = FsyncedOffset()  # what the ACKs say the log has fsynced (FACK)

    # -- life ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        """REPLICAOF NO ONE or another primary, or shutdown: drop the connection and stop retrying."""
        self._stopped = True
        self._close()
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def link_up(self) -> bool:
        return self.state == "connected"

    def resumable(self) -> bool:
        """Whether the keyspace holds exactly the primary's data at ``offset``, so that a clean restart may ask to
        continue from there: a history is known (no snapshot half-loaded) and no command of the stream is
        half-run (one waiting for a cold value when the link stops)."""
        client = self._client
        return self.replid != _NO_HISTORY and self.offset >= 0 and not (client is not None and client.busy)

    def last_io(self) -> float:
        """Seconds since the primary last sent anything (INFO's master_last_io_seconds_ago)."""
        now = time.monotonic()
        if self._client is not None:
            return self._client.idle(now)
        if self._wire is not None:
            return now - self._wire.last_io
        return -1

    async def _run(self) -> None:
        while not self._stopped:
            try:
                await self._attempt()
            except LinkError as exc:
                self._failed(str(exc))
            except OSError as exc:
                self._failed(f"cannot connect ({exc.strerror or exc})")
            except Exception:  # the link must never die silently: a bug here is logged and retried
                log.exception("replication from %s:%d failed", self.host, self.port)
            finally:
                self._close()
            if self.failover is not None:  # the FAILOVER's target was not reached: this server stays the primary
                asyncio.get_running_loop().call_soon(self.failover.abort, self.last_error or "the link failed")
                self.failover = None
            was_up = self.state == "connected"
            if was_up:
                self.down_since = time.monotonic()
            self.state = "connect"
            if not self._stopped:
                # A link that was up is connected again at once, as Redis 7's replicationHandleMasterDisconnection
                # does: a second's wait under a stream of writes can cost the backlog, and a full snapshot.
                await asyncio.sleep(0 if was_up else RETRY_SECONDS)

    def _failed(self, reason: str) -> None:
        """Log why an attempt failed: a warning when the reason is new, the same reason again only at debug level
        (a primary that is down for an hour would otherwise write 3600 lines)."""
        level = logging.DEBUG if reason == self.last_error else logging.WARNING
        self.last_error = reason
        log.log(level, "replication from %s:%d: %s; retrying every %g s", self.host, self.port, reason, RETRY_SECONDS)

    def _close(self) -> None:
        if self._wire is not None and self._wire.transport is not None and self._client is None:
            self._wire.transport.abort()
        if self._client is not None:
            self._client.rewind()
            self._client.kill()
        self._wire = self._client = None

    # -- one attempt ------------------------------------------------------------------------------------------

    async def _attempt(self) -> None:
        settings = self.server.settings
        timeout = float(settings.repl_timeout)
        self.state = "connecting"
        loop = asyncio.get_running_loop()
        tls = client_tls_context(settings) if settings.tls_replication else None
        try:
            transport, wire = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Wire(timeout, self.server.stats),
                    self.host,
                    self.port,
                    ssl=tls,
                    server_hostname=self.host if tls else None,
                ),
                timeout,
            )
        except TimeoutError:
            raise LinkError(f"connecting took over {timeout:g} s (repl-timeout)") from None
        except ssl.SSLError as exc:
            raise LinkError(f"TLS with the primary failed: {exc.reason or exc}") from None
        self._wire = wire
        self.state = "handshake"
        await self._handshake(wire)
        self.state = "sync"
        psync = [b"PSYNC", self.replid.encode(), b"%d" % (self.offset + 1 if self.offset >= 0 else -1)]
        failover = self.failover
        reply = await wire.ask(*psync, *([b"FAILOVER"] if failover is not None else []))
        if failover is not None:  # the target answered: it is the primary now, or it refused and this one stays
            self.failover = None
            if reply.startswith((b"+FULLRESYNC", b"+CONTINUE")):
                failover.completed()
            else:
                asyncio.get_running_loop().call_soon(failover.abort, f"the target refused PSYNC: {_text(reply)}")
        if reply.startswith(b"+FULLRESYNC"):
            parts = reply.split()
            if len(parts) != 3 or not parts[2].lstrip(b"-").isdigit():
                raise LinkError(f"the primary's answer to PSYNC is malformed: {reply[:80]!r}")
            await self._full_sync(wire, parts[1].decode("ascii", "replace"), int(parts[2]))
        elif reply.startswith(b"+CONTINUE"):
            parts = reply.split()
            if len(parts) > 1:
                self.replid = parts[1].decode("ascii", "replace")  # the primary's history got a new name
            log.info("replication from %s:%d continues at offset %d", self.host, self.port, self.offset + 1)
        else:
            raise LinkError(f"the primary refused PSYNC: {_text(reply)}")
        await self._stream(transport, wire)

    async def _handshake(self, wire: _Wire) -> None:
        s = self.server.settings
        if s.masterauth:
            user = (s.masteruser.encode("utf-8", "surrogateescape"),) if s.masteruser else ()
            reply = await wire.ask(b"AUTH", *user, s.masterauth.encode("utf-8", "surrogateescape"))
            if not reply.startswith(b"+"):
                raise LinkError(f"the primary refused AUTH (check masterauth / masteruser): {_text(reply)}")
        reply = await wire.ask(b"PING")
        if reply.startswith(b"-") and not reply.startswith(b"-NOPERM"):  # Redis lets a -NOPERM pass
            hint = " (set masterauth)" if reply.startswith(b"-NOAUTH") else ""
            raise LinkError(f"the primary answered PING with an error{hint}: {_text(reply)}")
        port = str(s.replica_announce_port or self.server.bound_port).encode()
        reply = await wire.ask(b"REPLCONF", b"listening-port", port)
        if reply.startswith(b"-"):
            log.info("the primary did not take REPLCONF listening-port: %s", _text(reply))
        if s.replica_announce_ip:
            reply = await wire.ask(b"REPLCONF", b"ip-address", s.replica_announce_ip.encode())
            if reply.startswith(b"-"):
                log.info("the primary did not take REPLCONF ip-address: %s", _text(reply))
        reply = await wire.ask(b"REPLCONF", b"capa", b"eof", b"capa", b"psync2")
        if reply.startswith(b"-"):
            log.info("the primary did not take REPLCONF capa: %s", _text(reply))

    async def _full_sync(self, wire: _Wire, replid: str, offset: int) -> None:
        head = await wire.line()
        if not head.startswith(b"$"):
            raise LinkError(f"expected the snapshot's size from the primary, got {_text(head)}")
        mark = None
        if head.startswith(b"$EOF:"):
            mark = head[5:]
            if len(mark) != EOF_MARK_LEN:
                raise LinkError("the primary's end-of-file mark is not 40 bytes")
            self.sync_total = -1
        elif head[1:].isdigit():
            self.sync_total = int(head[1:])
        else:
            raise LinkError(f"the primary's snapshot size is not a number: {_text(head)}")
        log.info(
            "full resynchronisation from %s:%d: %s",
            self.host,
            self.port,
            f"{self.sync_total} bytes" if mark is None else "a diskless transfer",
        )
        path = _temp_path(self.server.settings.dir)
        try:
            started = time.monotonic()
            try:
                await self._receive_file(wire, path, mark)
            except OSError as exc:  # the disk, not the network: a full disk, an unwritable dir
                raise LinkError(f"the snapshot could not be written to {path}: {exc.strerror or exc}") from None
            received = time.monotonic()
            try:  # the whole file is read once before the old data goes, as kvd-load-rdb checks its input
                checked = await asyncio.get_running_loop().run_in_executor(None, _check, path)
            except (RdbError, OSError) as exc:
                raise LinkError(f"the primary's snapshot is damaged, the data held is kept: {exc}") from None
            log.info(
                "received the primary's snapshot (%d bytes) in %.2f s, checked it in %.2f s",
                self.sync_read,
                received - started,
                time.monotonic() - received,
            )
            self.replid, self.offset = _NO_HISTORY, -1  # the old data goes now: a failed load cannot be continued
            self.fsynced.reset(self.server.keyspace.log)
            self.db = 0  # the primary's stream after a snapshot starts with a SELECT where it needs one
            await self._load(path, checked)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        self.replid, self.offset = replid, offset

    async def _receive_file(self, wire: _Wire, path: Path, mark: bytes | None) -> None:
        self.sync_read = 0
        # Created here, on the loop: an open() in aiofiles's thread would go on after a REPLICAOF NO ONE cancelled
        # its await, and could create the file after the caller's unlink. This one only opens what exists.
        path.open("wb").close()
        async with aiofiles.open(path, "r+b") as f:
            if mark is None:
                left = self.sync_total
                while left:
                    data = await wire.take(min(left, 8 << 20))
                    await f.write(data)
                    left -= len(data)
                    self.sync_read += len(data)
                return
            held = b""  # the last bytes received, which may be the mark: written once more has come
            while held != mark:  # as Redis, the mark is looked for at the end of each read
                chunk = await wire.take(8 << 20)
                if len(chunk) >= EOF_MARK_LEN:  # the common case: the chunk itself goes out, as a view
                    body = memoryview(chunk)[:-EOF_MARK_LEN]
                    await f.write(held)
                    await f.write(body)
                    self.sync_read += len(held) + len(body)
                    held = bytes(chunk[-EOF_MARK_LEN:])
                else:
                    joined = held + chunk
                    await f.write(joined[:-EOF_MARK_LEN])
                    self.sync_read += max(0, len(joined) - EOF_MARK_LEN)
                    held = bytes(joined[-EOF_MARK_LEN:])

    async def _load(self, path: Path, keys: int) -> None:
        """Replace the keyspace with the file's ``keys`` string keys, a slice at a time."""
        started = time.monotonic()
        server = self.server
        keyspace = server.keyspace
        progress = LoadProgress(path.stat().st_size)
        server.set_loading(progress)
        token = from_primary.set(True)  # this task's context: the keys are the primary's, deadlines included
        try:
            flushed = keyspace.flush()
            loaded = expired = 0
            with open(path, "rb", buffering=1 << 20) as f:
                reader = RdbReader(f, skip_other_types=True, skip_other_databases=True, skip_functions=True)
                slice_end = time.monotonic() + LOAD_SLICE
                now = now_ms()
                try:
                    for key, value, expire_at in reader:
                        # A key past its deadline is loaded too, as a Redis replica loads it (rdbLoad drops them
                        # only on a primary): the primary may have changed its deadline after the snapshot.
                        if 0 < expire_at <= now:
                            expired += 1
                        keyspace.set(key, value, expire_at)  # never refused: Redis replicas load it whole
                        loaded += 1
                        if time.monotonic() >= slice_end:
                            progress.loaded_bytes = f.tell()
                            await self._pace()
                            slice_end = time.monotonic() + LOAD_SLICE
                except (RdbError, OSError) as exc:  # it was read whole a moment ago: the file changed under kvd
                    raise LinkError(
                        f"the primary's snapshot cannot be loaded after {loaded} of {keys} keys: {exc}"
                    ) from None
                progress.loaded_bytes = progress.total_bytes
            await self._pace()
        finally:
            from_primary.reset(token)
            server.set_loading(None)
        skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(reader.skipped.items()))
        elsewhere = ", ".join(f"{n} in database {db}" for db, n in sorted(reader.other_databases.items()))
        log.info(
            "loaded the primary's snapshot in %.2f s: %d keys, %d past their deadline (%d old keys flushed%s%s%s)",
            time.monotonic() - started,
            loaded,
            expired,
            flushed,
            f"; passed over, not strings: {skipped}" if skipped else "",
            f"; passed over, kvd has database 0 only: {elsewhere}" if elsewhere else "",
            f"; passed over, kvd has no scripting: {_libraries(reader.functions)}" if reader.functions else "",
        )

    async def _pace(self) -> None:
        """Between two slices of the load: let the log catch up, then let every client have its turn."""
        seg_log = self.server.keyspace.log
        if seg_log is not None:
            written: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
            if seg_log.when_written(lambda exc: written.done() or written.set_result(exc)):
                exc = await written
                if exc is not None:
                    raise LinkError(f"the log could not write the snapshot's keys: {exc}")
        await asyncio.sleep(0)

    async def _stream(self, transport: asyncio.Transport, wire: _Wire) -> None:
        client = self._client = PrimaryClient(self.server, self)
        self._stream_done = asyncio.get_running_loop().create_future()
        client.take_over(transport, wire.buf)
        wire.buf = bytearray()
        self._wire = None
        self.state = "connected"
        self.last_error = ""
        log.info("replicating from %s:%d at offset %d", self.host, self.port, self.offset)
        client.ask_fsync()
        client.send_ack()  # a diskless primary starts the stream on the first ACK
        timeout = self.server.settings.repl_timeout
        while not self._stream_done.done():
            await asyncio.wait([self._stream_done], timeout=ACK_SECONDS)
            if self._stream_done.done():
                break
            client.ask_fsync()
            client.send_ack()
            if client.idle(time.monotonic()) > timeout:
                log.warning("no data from %s:%d for %d s (repl-timeout): reconnecting", self.host, self.port, timeout)
                client.kill()
                break
        self._client = None

    def stream_ended(self, exc: Exception | None) -> None:
        log.info("replication link to %s:%d lost%s", self.host, self.port, f": {exc}" if exc else "")
        if self._stream_done is not None and not self._stream_done.done():
            self._stream_done.set_result(None)

    def send_ack(self) -> None:
        """REPLCONF GETACK from the primary: report the offset now."""
        if self._client is not None:
            self._client.send_ack()

    # -- reports -----------------------------------------------------------------------------------------------

    def applied_offset(self) -> int:
        """The offset the keyspace holds the primary's data at (``offset`` less a transaction still open)."""
        client = self._client
        return client.applied_offset() if client is not None else self.offset

    def role(self) -> tuple[str, int, str, int]:
        """ROLE's host, port, state and processed offset (-1 until the stream flows)."""
        return self.host, self.port, self.state, self.applied_offset() if self.link_up else -1

    def info(self) -> list[tuple[str, object]]:
        """INFO replication's lines for a replica, between role and connected_slaves, as Redis 7.0 writes them."""
        rows: list[tuple[str, object]] = [
            ("master_host", self.host),
            ("master_port", self.port),
            ("master_link_status", "up" if self.link_up else "down"),
            ("master_last_io_seconds_ago", int(self.last_io())),
            ("master_sync_in_progress", int(self.state == "sync")),
            ("slave_read_repl_offset", self.offset),
            ("slave_repl_offset", self.applied_offset()),
        ]
        if self.state == "sync":
            total = self.sync_total
            rows += [
                ("master_sync_total_bytes", total),
                ("master_sync_read_bytes", self.sync_read),
                ("master_sync_left_bytes", total - self.sync_read if total >= 0 else -1),
                ("master_sync_perc", f"{100 * self.sync_read / total:.2f}" if total > 0 else "0.00"),
                ("master_sync_last_io_seconds_ago", int(self.last_io())),
            ]
        if not self.link_up:
            since = self.down_since
            rows.append(("master_link_down_since_seconds", int(time.monotonic() - since) if since is not None else -1))
        rows += [
            ("slave_priority", self.server.settings.replica_priority),
            ("slave_read_only", int(self.server.settings.replica_read_only)),
            ("replica_announced", 1),
        ]
        return rows


def client_tls_context(settings: Settings) -> ssl.SSLContext:
    """TLS to the primary (``tls-replication``): its certificate must be signed by ``tls-ca-cert-file``; the
    host name is not checked, as Redis does not check it (replicas often name their primary by address). kvd
    shows ``tls-client-cert-file``, else ``tls-cert-file``, to a primary that asks for a client certificate.
    Built per attempt, so a certificate renewed on disk is used at the next connection."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(settings.tls_ca_cert_file)
    if settings.tls_client_cert_file:
        context.load_cert_chain(settings.tls_client_cert_file, settings.tls_client_key_file)
    elif settings.tls_cert_file and settings.tls_key_file:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    return context


def _check(path: Path) -> int:
    """Read the whole file as the load will (in a thread): its string keys, or RdbError with where it is damaged."""
    with open(path, "rb", buffering=1 << 20) as f:
        return sum(1 for _ in RdbReader(f, skip_other_types=True, skip_other_databases=True, skip_functions=True))


_TEMP_PREFIX = "temp-replica-"


def _temp_dir(directory: str) -> Path:
    return Path(directory) if directory and Path(directory).is_dir() else Path(tempfile.gettempdir())


def _temp_path(directory: str) -> Path:
    return _temp_dir(directory) / f"{_TEMP_PREFIX}{os.getpid()}.rdb"


def remove_stale_transfers(directory: str) -> list[Path]:
    """Delete the snapshot files that transfers cut short by a killed process left behind, at start-up: a full
    resynchronisation of a large dataset leaves a file as large. The pid in the name tells whose it is; a live
    process's file is left alone (another kvd may share the directory). The paths removed are returned."""
    removed = []
    for path in _temp_dir(directory).glob(f"{_TEMP_PREFIX}*.rdb"):
        pid = path.name[len(_TEMP_PREFIX) : -len(".rdb")]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        pass
    return True


def _libraries(n: int) -> str:
    return f"{n} function {'library' if n == 1 else 'libraries'}"


def _text(reply: bytes) -> str:
    return reply[:200].decode("utf-8", "replace")
