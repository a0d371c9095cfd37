"""SYNC, PSYNC and REPLCONF: a snapshot of the keyspace as an RDB file, for ``redis-cli --rdb`` and for replicas.

``redis-cli --rdb backup.rdb`` is how Redis users take a backup of a running server, and the file it writes
loads into any Redis (and back into kvd with ``kvd-load-rdb``). It sends ``REPLCONF capa eof``, ``REPLCONF
rdb-only 1`` and ``SYNC``, and reads ``$<length>\\r\\n`` and the file. kvd answers exactly that: it takes a
snapshot (``kvd/store/snapshot.py``: one pass over the keys, the only pause), announces the file's exact size,
then streams it (``kvd/persist/rdb.py``) while every other client is served, and closes the connection at the
end, as Redis closes an rdb-only replica's. A replica's ``PSYNC <replid> <offset>`` that the backlog can serve
gets ``+CONTINUE`` and the stream it missed (``kvd/replication.py``); any other gets ``+FULLRESYNC <replid>
<offset>``, then the snapshot.

A SYNC or PSYNC without ``rdb-only`` is a replica's (a Redis server's after REPLICAOF, or ``redis-cli --replica``):
it is attached to the replication stream (``kvd/replication.py``) in the same event-loop step as its snapshot is
taken, so the stream starts exactly where the snapshot ends, and after the file the connection stays open for
the stream. ``+FULLRESYNC`` then names the stream's offset at that point.

Flow control. The stream yields to the event loop after each piece, and keeps at most ``STREAM_HIGH`` bytes
queued in the connection's transport: then it waits for the client to read them down to ``STREAM_LOW``
(``Client.drained``), so a slow reader costs a few MiB, never a copy of the dataset. Entries below ``PIECE``
bytes are gathered into pieces of about that size or ``PIECE_KEYS`` keys (one CRC call, one write each); a
larger value goes out as its own memoryview, and from ``OFFLOAD`` bytes up its CRC is computed in a thread (the
C loop releases the GIL), so the event loop keeps serving while 32 MiB are summed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from itertools import islice
from typing import TYPE_CHECKING, Any

import kvd
from kvd.persist import rdb
from kvd.persist.dump import crc64_update
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.snapshot import Snapshot

from .args import lower, parse_int
from .connection import REDIS_COMPAT_VERSION
from .registry import ADMIN, ALLOW_BUSY, LOADING, NO_ASYNC_LOADING, NO_MULTI, NOSCRIPT, STALE, command

if TYPE_CHECKING:
    from kvd.connection import Client
    from kvd.replication import Replica

log = logging.getLogger("kvd.sync")

PIECE = 256 << 10
PIECE_KEYS = 1000  # a piece of tiny keys ends here too: about 2 ms of the event loop, then others' turn
OFFLOAD = 1 << 20
STREAM_HIGH = 8 << 20
STREAM_LOW = 2 << 20


@command(
    "replconf",
    -1,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE} {ALLOW_BUSY}",
    group="server",
    since="3.0.0",
    summary="An internal command for configuring the replication stream.",
    usage="option value [option value ...]",
    doc_flags="syscmd",
)
def replconf(c: Client, argv: list[Any]) -> None:
    if len(argv) % 2 == 0:
        raise CommandError(errors.SYNTAX)
    for i in range(1, len(argv), 2):
        option, value = lower(argv[i]), argv[i + 1]
        if option == b"listening-port":
            c.sync_listening_port = parse_int(value)
        elif option == b"ip-address":
            if len(value) >= 46:  # NET_HOST_STR_LEN
                raise CommandError(
                    f"ERR REPLCONF ip-address provided by replica instance is too long: {len(value)} bytes"
                )
            c.sync_ip_address = bytes(value).decode("utf-8", "replace")  # replica-announce-ip: INFO, ROLE, FAILOVER
        elif option == b"capa":
            pass  # capabilities this server does not use are ignored, as Redis ignores unknown ones
        elif option == b"ack":
            # A replica's report of what it has applied (once a second, or after GETACK), and with ``FACK`` what
            # it has fsynced (WAITAOF counts that): never answered. A malformed offset is ignored, as Redis does.
            if c.replica is not None:
                with contextlib.suppress(CommandError):
                    offset = parse_int(value)
                    fsynced = None
                    if len(argv) > i + 3 and lower(argv[i + 2]) == b"fack":
                        with contextlib.suppress(CommandError):
                            fsynced = parse_int(argv[i + 3])
                    c.server.replication.ack(c.replica, offset, fsynced)
            return
        elif option == b"getack":
            if c.link is not None:  # from this replica's primary: the offset, now (kvd/replica.py)
                c.link.send_ack()
            return  # anyone else: Redis answers nothing either
        elif option == b"rdb-only":
            flag = parse_int(value)
            if flag not in (0, 1):
                raise CommandError("ERR value is out of range, value must between 0 and 1")
            c.sync_rdb_only = flag == 1
        elif option == b"rdb-filter-only":
            filters = _split_args(value)
            for name in filters:
                if name.lower() != "functions":
                    raise CommandError(f"ERR Unsupported rdb-filter-only option: {name}")
            c.sync_keys = False  # functions only (redis-cli --functions-rdb): kvd has none, so no keys either
        else:
            raise CommandError(f"ERR Unrecognized REPLCONF option: {bytes(argv[i]).decode('utf-8', 'replace')}")
    c.reply.ok()


@command(
    "sync",
    1,
    f"{ADMIN} {NOSCRIPT} {NO_ASYNC_LOADING} {NO_MULTI}",
    group="server",
    since="1.0.0",
    summary="Internal command used for replication: a snapshot of the keyspace as an RDB file, then the stream.",
    complexity="",
    waits=True,
)
def sync(c: Client, argv: list[Any]) -> Any:
    return _start(c, psync=False)


@command(
    "psync",
    -3,
    f"{ADMIN} {NOSCRIPT} {NO_ASYNC_LOADING} {NO_MULTI}",
    group="server",
    since="2.8.0",
    summary="Internal command used for replication: continues from the backlog, or a full resynchronisation.",
    usage="replicationid offset",
    complexity="",
    waits=True,
)
def psync(c: Client, argv: list[Any]) -> Any:
    if c.replica is not None:
        return None  # a replica already: Redis ignores it, without a reply
    if len(argv) > 3 and lower(argv[3]) == b"failover":
        _take_over(c, bytes(argv[1]))
    next_offset = parse_int(argv[2])
    link = c.server.link
    if c.replica is None and not c.pending_output() and not c.sync_rdb_only and (link is None or link.link_up):
        feed = c.server.replication
        feed.flush_now()  # the changes so far are in the backlog before it is read
        if feed.can_continue(bytes(argv[1]), next_offset):
            c.reply.raw(b"+CONTINUE %s\r\n" % feed.replid.encode())
            c.flush_replies()  # ahead of the backlog, which goes straight to the transport
            c.server.resume_replica(c, next_offset)
            feed.sync_partial_ok += 1
            return None
        if bytes(argv[1]) != b"?":
            feed.sync_partial_err += 1  # it asked to continue and could not: a full resync follows
    return _start(c, psync=True)


def _take_over(c: Client, replid: bytes) -> None:
    """PSYNC ... FAILOVER: this replica's primary ran FAILOVER and asks to become this server's replica, so this
    server becomes the primary, if the primary is the one it follows (the history it names is this link's)."""
    link = c.server.link
    if link is None:
        raise CommandError("ERR PSYNC FAILOVER can't be sent to a master.")
    if replid.decode("ascii", "replace") != link.replid:
        raise CommandError("ERR PSYNC FAILOVER replid must match my replid.")
    log.warning("failover requested by %s (id=%d): a primary from now on", c.addr, c.id)
    c.server.stop_replicating()


def _start(c: Client, psync: bool) -> Any:
    if c.replica is not None:
        return None  # a replica already: Redis ignores it, without a reply
    link = c.server.link
    if link is not None and not link.link_up:  # a replica's data may be partial or stale; Redis refuses too
        raise CommandError("NOMASTERLINK Can't SYNC while not connected with my master")
    if c.pending_output():
        raise CommandError("ERR SYNC and PSYNC are invalid with pending output")
    replica = None if c.sync_rdb_only else c.server.attach_replica(c)  # before the snapshot, in the same step
    started = time.perf_counter()
    snap = c.keyspace.snapshot() if c.sync_keys else Snapshot.empty()
    c.server.stats.sync_full += 1
    log.info(
        "%s %s (id=%d) asks for a snapshot: %d keys, taken in %.0f ms",
        "client" if replica is None else "replica",
        c.addr,
        c.id,
        len(snap),
        (time.perf_counter() - started) * 1000,
    )
    if psync:
        c.reply.raw(b"+FULLRESYNC %s %d\r\n" % (c.server.replication.replid.encode(), c.server.replication.offset))
    return _stream(c, snap, replica)


async def _stream(c: Client, snap: Snapshot, replica: Replica | None) -> None:
    """Write ``$<size>\\r\\n`` and the RDB file of ``snap``; then close, or for a replica start its stream."""
    loop = asyncio.get_running_loop()
    c.limit_output(STREAM_HIGH, STREAM_LOW)
    sent = 0
    try:
        head = rdb.preamble(len(snap), snap.expires, _aux(c))
        total = await _file_size(snap, len(head))
        c.reply.raw(b"$%d\r\n" % total)
        crc = 0
        piece = bytearray(head)
        keys = 0  # in the piece being gathered
        async for key, value, expire_at in snap.items():
            piece += rdb.key_header(key, len(value), expire_at)
            keys += 1
            if len(value) < PIECE:
                piece += value
                if len(piece) < PIECE and keys < PIECE_KEYS:
                    continue
            keys = 0
            crc = crc64_update(piece, crc)
            c.reply.raw(piece)  # type: ignore[arg-type]
            sent += len(piece)
            piece = bytearray()
            if len(value) >= PIECE:
                view = memoryview(value)
                if len(view) >= OFFLOAD:
                    crc = await loop.run_in_executor(None, crc64_update, view, crc)
                else:
                    crc = crc64_update(view, crc)
                c.reply.raw(view)  # type: ignore[arg-type]  (flush_replies sends a memoryview without copying)
                sent += len(view)
            c.flush_replies()
            await asyncio.sleep(0)  # other clients' turn, even while the socket takes everything at once
            if not await c.drained():
                log.info(
                    "snapshot for client %s (id=%d) ended after %d of %d bytes: the connection closed",
                    c.addr,
                    c.id,
                    sent,
                    total,
                )
                return
        piece += rdb.EOF
        crc = crc64_update(piece, crc)
        piece += rdb.trailer(crc)
        sent += len(piece)
        c.reply.raw(piece)  # type: ignore[arg-type]
        if sent != total:  # the size announced is a promise the bytes must keep: never send a wrong file
            log.error("snapshot for client %s (id=%d) came to %d bytes, not %d: closing", c.addr, c.id, sent, total)
            c.kill()
            return
        log.info("snapshot sent to %s (id=%d): %d bytes", c.addr, c.id, total)
        if replica is None:
            c.close_after_reply = True  # Redis closes an rdb-only replica's connection once the file is sent
            return
        c.flush_replies()
        c.limit_output()  # the stream is never paused for the replica (the hard limit drops it instead)
        c.server.replication.online(replica)
    except Exception:
        log.exception("snapshot for client %s (id=%d) failed after %d bytes: closing", c.addr, c.id, sent)
        c.kill()  # a truncated file, never a wrong one: redis-cli reports the I/O error
    finally:
        snap.close()


async def _file_size(snap: Snapshot, head: int) -> int:
    """The RDB file's size, announced before its first byte. Summed in steps: a million keys would otherwise
    hold the event loop for 0.6 s."""
    total = head + len(rdb.EOF) + 8
    layout = snap.layout()
    while chunk := list(islice(layout, 10_000)):
        total += sum(rdb.entry_size(k, n, e) for k, n, e in chunk)
        await asyncio.sleep(0)
    return total


def _aux(c: Client) -> list[tuple[bytes, bytes]]:
    return [
        (b"redis-ver", REDIS_COMPAT_VERSION.encode()),
        (b"redis-bits", b"64"),
        (b"ctime", b"%d" % int(time.time())),
        (b"used-mem", b"%d" % c.keyspace.ram.used),
        (b"kvd-ver", kvd.__version__.encode()),
    ]


def _split_args(raw: bytes | bytearray) -> list[str]:
    try:
        return shlex.split(bytes(raw).decode("utf-8", "replace"))
    except ValueError:
        raise CommandError("ERR Missing rdb-filter-only values") from None
