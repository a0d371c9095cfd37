"""ROLE, WAIT, WAITAOF, REPLICAOF and FAILOVER: Redis's replication commands.

ROLE and WAIT see the replicas attached with PSYNC (kvd/replication.py): WAIT blocks until enough of them have
acknowledged every write before it, or its timeout. WAITAOF counts, the same way, the replicas whose ``FACK``
(``REPLCONF ACK <offset> FACK <fsynced offset>``) covers every write before it: Redis 7.2+ replicas with
appendonly yes and kvd replicas with persistence on send one; Redis 7.0's, and replicas without an AOF, send
none and are never counted. On a replica WAITAOF is refused, as Redis refuses it.

REPLICAOF <host> <port> makes kvd a read-only replica of that server, Redis or kvd (kvd/replica.py: the link
connects in the background, so the reply is +OK at once, as Redis's); REPLICAOF NO ONE makes it a primary again
with the data it holds. On a replica ROLE answers ``slave``, its primary, the link's state and offset, and WAIT is
refused as Redis refuses it. FAILOVER hands a primary's role to one of its replicas without losing a write
(kvd/failover.py), with Redis's checks, errors and steps.

A WAIT or WAITAOF that asks for more replicas than will answer blocks until its timeout (0 = for ever), as on a
Redis primary. The wait blocks only its own client; CLIENT UNBLOCK, a disconnect or SHUTDOWN ends it early.

WAITAOF's local part is real: ``WAITAOF 1 0 timeout`` returns ``[1, 0]`` once everything acknowledged to this
client so far is fsynced. With ``appendfsync always`` that is already so (a write's reply waits for its fsync,
and WAITAOF's reply leaves after the replies before it); otherwise it asks the log for an fsync of everything
appended so far (kvd/persist/saves.py: concurrent requests share one) and answers when it completes, or with
a local count of 0 at the timeout, or at once if that fsync failed (``SegmentLog.sync_then``). The replicas are
waited for (a FACK wakes the waiters) after the local part, within the same timeout. Inside MULTI nothing
blocks: the counts are answered as they are.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kvd.failover import Failover
from kvd.protocol import errors
from kvd.protocol.errors import CommandError

from .args import lower, parse_int, parse_timeout_ms
from .registry import ADMIN, FAST, LOADING, NO_ASYNC_LOADING, NOSCRIPT, STALE, command

if TYPE_CHECKING:
    from kvd.connection import Client

_FOREVER_MS = 1 << 41  # about 70 years: longer is "no limit" to the event loop's timers too


@command(
    "role",
    1,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST}",
    group="server",
    since="2.8.12",
    summary="Returns the replication role.",
)
def role(c: Client, argv: list[Any]) -> None:
    link = c.server.link
    if link is not None:
        host, port, state, offset = link.role()
        c.reply.array(5)
        c.reply.bulk(b"slave")
        c.reply.bulk(host.encode())
        c.reply.integer(port)
        c.reply.bulk(state.encode())
        c.reply.integer(offset)
        return
    feed = c.server.replication
    c.reply.array(3)
    c.reply.bulk(b"master")
    c.reply.integer(feed.offset)
    online = [r for r in feed.replicas if r.state == "online"]
    c.reply.array(len(online))
    for r in online:  # ip, listening port, acknowledged offset: strings, as Redis sends them
        c.reply.bulk_array([r.host.encode(), b"%d" % r.client.sync_listening_port, b"%d" % r.ack_offset])


@command(
    "wait",
    3,
    NOSCRIPT,
    group="generic",
    since="3.0.0",
    summary="Blocks until the asynchronous replication of all preceding write commands sent by the connection "
    "is completed.",
    usage="numreplicas timeout",
    complexity="O(1)",
    waits=True,
    tips="request_policy:all_shards response_policy:agg_min",
)
def wait(c: Client, argv: list[Any]) -> Any:
    if c.server.link is not None:
        raise CommandError(
            "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is "
            "configured to be writable (which is not the default) writes to replicas are just local and are not "
            "propagated."
        )
    numreplicas = parse_int(argv[1])
    timeout = _timeout_ms(argv[2])
    feed = c.server.replication
    feed.flush_now()
    acked = feed.acked(feed.written_offset)
    if acked >= numreplicas or c.executing_transaction:
        c.reply.integer(acked)
        return None
    return _wait_replicas(c, numreplicas, timeout)


async def _wait_replicas(c: Client, numreplicas: int, timeout: int) -> None:
    acked = await c.server.replication.wait_acks(c, numreplicas, timeout)
    _raise_unblock_error(c)
    c.reply.integer(acked)


@command(
    "waitaof",
    4,
    NOSCRIPT,
    group="generic",
    since="7.2.0",
    summary="Blocks until all of the preceding write commands sent by the connection are written to the "
    "append-only file of the primary and/or replicas.",
    usage="numlocal numreplicas timeout",
    waits=True,
    tips="request_policy:all_shards response_policy:agg_min",
)
def waitaof(c: Client, argv: list[Any]) -> Any:
    numlocal = parse_int(argv[1])
    if not 0 <= numlocal <= 1:
        raise CommandError("ERR value is out of range, value must between 0 and 1")
    numreplicas = parse_int(argv[2])
    if numreplicas < 0:
        raise CommandError("ERR value is out of range, must be positive")
    timeout = _timeout_ms(argv[3])
    if c.server.link is not None:
        raise CommandError(
            "ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just "
            "local and are not propagated."
        )
    if numlocal and c.keyspace.log is None:
        raise CommandError("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
    feed = c.server.replication
    feed.flush_now()
    target = feed.written_offset
    local = _fsynced(c)
    replicas = feed.aof_acked(target)
    if (local >= numlocal and replicas >= numreplicas) or c.executing_transaction:
        _reply_acks(c, local, replicas)
        return None
    return _wait_fsync(c, numlocal, numreplicas, timeout, local, target)


def _fsynced(c: Client) -> int:
    """WAITAOF's local count: 1 when everything appended so far is fsynced (as far as it is known without asking
    the log), 0 otherwise and without persistence."""
    seg_log = c.keyspace.log
    if seg_log is None:
        return 0
    return int(seg_log.appendfsync == "always" or not c.server.saves.changes_since_last_save())


async def _wait_fsync(c: Client, numlocal: int, numreplicas: int, timeout: int, local: int, target: int) -> None:
    feed = c.server.replication
    deadline = time.monotonic() + timeout / 1000
    if numreplicas and feed.aof_acked(target) < numreplicas:
        feed.request_acks()  # their FACKs come back while the local fsync runs
    if numlocal and not local:
        save = c.server.saves.save()
        local = int(await c.block(save, timeout) and save.result())
        _raise_unblock_error(c)
    if numreplicas and (local or not numlocal):  # (a local fsync that failed or timed out: answered now)
        left = max(1, round((deadline - time.monotonic()) * 1000)) if timeout else 0
        await feed.wait_acks(c, numreplicas, left, target, aof=True)
        _raise_unblock_error(c)
    _reply_acks(c, max(local, _fsynced(c)), feed.aof_acked(target))


def _reply_acks(c: Client, local: int, replicas: int) -> None:
    c.reply.array(2)
    c.reply.integer(local)
    c.reply.integer(replicas)


def _raise_unblock_error(c: Client) -> None:
    if c.unblock_error is not None:
        error, c.unblock_error = c.unblock_error, None
        raise CommandError(error)


def _timeout_ms(raw: bytes) -> int:
    """The timeout in milliseconds; 0 means no limit, and so does one longer than the loop's timers take."""
    ms = parse_timeout_ms(raw)
    return 0 if ms >= _FOREVER_MS else ms


@command(
    "replicaof",
    3,
    f"{ADMIN} {NOSCRIPT} {STALE} {NO_ASYNC_LOADING}",
    group="server",
    since="5.0.0",
    summary="Configures a server as replica of another, or promotes it to a primary.",
    usage="host port",
)
def replicaof(c: Client, argv: list[Any]) -> None:
    server = c.server
    if server.failover is not None:
        raise CommandError("ERR REPLICAOF not allowed while failing over.")
    if lower(argv[1]) == b"no" and lower(argv[2]) == b"one":
        server.stop_replicating()  # a primary already: nothing to do, as Redis answers one
        c.reply.ok()
        return
    if c.replica is not None:
        raise CommandError("ERR Command is not valid when client is a replica.")
    port = parse_int(argv[2], "ERR Invalid master port")
    if not 0 <= port <= 65535:
        raise CommandError("ERR Invalid master port")
    host = bytes(argv[1]).decode("utf-8", "replace")
    link = server.link
    if link is not None and link.host.lower() == host.lower() and link.port == port:
        c.reply.raw(b"+OK Already connected to specified master\r\n")
        return
    server.replicate_from(host, port)
    c.reply.ok()


@command(
    "slaveof",
    3,
    f"{ADMIN} {NOSCRIPT} {STALE} {NO_ASYNC_LOADING}",
    group="server",
    since="1.0.0",
    summary="REPLICAOF's old name.",
    usage="host port",
    doc_flags="deprecated",
    deprecated_since="5.0.0",
    replaced_by="`REPLICAOF`",
)
def slaveof(c: Client, argv: list[Any]) -> None:
    replicaof(c, argv)


@command(
    "failover",
    -1,
    f"{ADMIN} {NOSCRIPT} {STALE}",
    group="server",
    since="6.2.0",
    summary="Starts a coordinated failover from a server to one of its replicas.",
    usage="[TO host port [FORCE]] [ABORT] [TIMEOUT milliseconds]",
)
def failover(c: Client, argv: list[Any]) -> None:
    server = c.server
    if len(argv) == 2 and lower(argv[1]) == b"abort":
        if server.failover is None:
            raise CommandError("ERR No failover in progress.")
        server.failover.abort("Failover manually aborted")
        c.reply.ok()
        return
    timeout = 0
    target: tuple[str, int] | None = None
    force = False
    j = 1
    while j < len(argv):  # Redis's parse: each option once, its values checked as it goes
        option = lower(argv[j])
        if option == b"timeout" and j + 1 < len(argv) and timeout == 0:
            timeout = parse_int(argv[j + 1])
            if timeout <= 0:
                raise CommandError("ERR FAILOVER timeout must be greater than 0")
            j += 2
        elif option == b"to" and j + 2 < len(argv) and target is None:
            target = (bytes(argv[j + 1]).decode("utf-8", "replace"), parse_int(argv[j + 2]))
            j += 3
        elif option == b"force" and not force:
            force = True
            j += 1
        else:
            raise CommandError(errors.SYNTAX)
    if server.failover is not None:
        raise CommandError("ERR FAILOVER already in progress.")
    if server.link is not None:
        raise CommandError("ERR FAILOVER is not valid when server is a replica.")
    feed = server.replication
    if not feed.replicas:
        raise CommandError("ERR FAILOVER requires connected replicas.")
    if force and (not timeout or target is None):
        raise CommandError("ERR FAILOVER with force option requires both a timeout and target HOST and IP.")
    if target is not None:
        replica = next((r for r in feed.replicas if (r.host, r.client.sync_listening_port) == target), None)
        if replica is None:
            raise CommandError("ERR FAILOVER target HOST and PORT is not a replica.")
        if replica.state != "online":
            raise CommandError("ERR FAILOVER target replica is not online.")
    server.failover = Failover(server, target, timeout, force)
    server.failover.start()
    c.reply.ok()
