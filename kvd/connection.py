"""One protocol object per client connection: receive, execute in order, reply, with explicit flow control.

The life of a request, in this file:

1. ``get_buffer``/``buffer_updated`` (asyncio ``BufferedProtocol``): the event loop ``recv_into``s memory the
   parser hands out, so a 32 MiB SET value lands in its final bytearray (``kvd/protocol/parser.py``), or a
   whole repeated SET lands in one buffer that becomes its value (``kvd/protocol/landing.py``). Once the rest
   of a large value is all that can come, the C receiver (``kvd/protocol/receive.py``) takes those reads
   without calling Python and reports them here as one; a landing request it takes whole, first read
   included, and reports with its buffer.
2. ``_run``: complete commands are executed strictly in order. A handler writes its reply into ``_out`` (a list
   of buffers) and returns None, or returns an awaitable when it needs the disk. Then the pipeline of this
   client is suspended (reading paused) until it completes; other clients carry on. A SET that landed whole
   is run from the read callback itself (``_run_landed``) when nothing is queued before it.
3. ``_end_batch``: once the received bytes are used up, replies go out in one go. If the batch wrote to the
   segment log, replies are held until the log's barrier says the records are written (``everysec``/``no``)
   or fsynced (``always``), so an acknowledged write survives ``kill -9``. All clients' writes in one loop
   iteration share one ``writev``: group commit. The log's report calls ``_release`` directly, and the replies
   of every client it releases leave together at the end of that iteration. If the write failed, the write
   replies of that batch become ``-MISCONF`` errors.
4. ``flush_replies``, at the end of the event-loop iteration (``ReplyBatch``): the replies of every client served
   in one iteration leave together, as Redis writes them in ``beforeSleep``. Small replies are joined into one
   ``bytes``; large values go to the transport as the stored object's ``memoryview``, never joined into a new
   buffer, all in one ``writelines`` (one ``writev``) where the transport gathers instead of joining.

Flow control (what uvicorn's protocols do): reading pauses when requests arrive while a command awaits the
disk or held replies wait for the log (not before: a client waiting for its reply should not cost two
``epoll_ctl`` calls per request), and while the transport's write buffer is above
``client-output-buffer-soft-limit`` (``pause_writing``). A client whose pending output passes the hard limit
is disconnected. So a client that sends but never reads can grow kvd's memory by at most one batch of replies
beyond the soft limit.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from kvd import monitor
from kvd.commands import COMMANDS
from kvd.commands.registry import (
    ADMIN,
    ALIASES,
    FAST,
    NO_MULTI,
    NOAUTH,
    READONLY,
    SKIP_SLOWLOG,
    command_keys,
    subcommand_error,
)
from kvd.config import FIXED
from kvd.protocol import errors, lowat
from kvd.protocol.errors import CommandError, DropConnection, ProtocolError
from kvd.protocol.lowat import ReceiveLowWater
from kvd.protocol.parser import RequestParser
from kvd.protocol.receive import Receiver
from kvd.protocol.reply import Buffer, ReplyWriter
from kvd.store.keyspace import OutOfMemory, own_write

if TYPE_CHECKING:
    from kvd.pubsub import Subscriptions
    from kvd.replica import ReplicaLink
    from kvd.replication import Replica
    from kvd.server import Server
    from kvd.shm import SharedMemory
    from kvd.stats import CommandStats, ServerStats
    from kvd.tracking import ClientTracking

log = logging.getLogger("kvd.client")

_SECURITY_ATTACK = (b"post", b"host:")
_monotonic = time.monotonic
_clock = time.perf_counter_ns
_SET = COMMANDS[b"set"]  # what a landed request may run as from the read callback (it never awaits the disk)
# Held by CLIENT PAUSE WRITE, as Redis's may-replicate commands (PFCOUNT may store its cached count)
_MAY_REPLICATE = frozenset({"publish", "spublish", "pfcount"})
_PUBSUB_CONTEXT = frozenset(
    {"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "ping", "quit", "reset"}
)
_RUN_IN_MULTI = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})  # not queued after MULTI
# A client that has yet to AUTH may leave this much of its replies unread, then it is closed: Redis's fix of
# CVE-2025-21605 (7.0.15 and later), without which a client that never authenticates and never reads holds up to
# client-output-buffer-soft-limit of kvd's memory (its -NOAUTH errors) for as long as it stays connected.
UNAUTH_MAX_OUTPUT = 1024
_OOM_EXEMPT_IN_MULTI = frozenset({"exec", "discard", "quit", "reset"})  # never refused for memory after MULTI


class _Discard(list):  # type: ignore[type-arg]
    """Where a muted client's replies go (CLIENT REPLY OFF / SKIP): nowhere."""

    def append(self, item: object) -> None:
        pass


DISCARD = _Discard()


def _lookup(argv: list[Any]) -> Any:
    """The command a queued request names (it was found when it was queued)."""
    return COMMANDS.get(bytes(argv[0]).lower())


def _request_bytes(argv: list[Any]) -> int:
    """The bytes of a request's arguments: what a queued command holds in RAM until EXEC."""
    return sum(map(len, argv))


def _full_name(cmd: Any, argv: list[Any]) -> str:
    """``config|get`` for CONFIG GET, as CLIENT LIST's cmd= names it; "NULL" for a subcommand that does not exist
    (Redis finds no command for it)."""
    sub = bytes(argv[1]).lower().decode("utf-8", "replace")
    return f"{cmd.name}|{sub}" if sub in cmd.subcommands else "NULL"


class Client(asyncio.BufferedProtocol):
    """A connected client: its protocol state, auth state, name and reply stream."""

    link: ReplicaLink | None = None  # set on the primary's connection of a replica only (kvd/replica.py)
    # A command refused or unknown while a transaction is open fails its EXEC (Redis's flagTransaction); the
    # primary's connection passes such a command over instead (kvd/replica.py).
    flags_transactions = True

    def __init__(self, server: Server) -> None:
        self.server = server
        self.keyspace = server.keyspace
        self.stats = server.stats
        self._replies = server.replies
        self._monitors = server.monitors  # the server's set, shared: empty unless someone sent MONITOR
        self.id = server.next_client_id()
        self._out: list[Buffer] = []
        self.reply = ReplyWriter(self._out, 2, server.stats.count_error)
        self._command_table = server.stats.commands  # the server's, cached: read once per command
        self._watch_ns = server.watch_ns  # SLOWLOG / latency monitor threshold (set_watch_ns on CONFIG SET)
        self._reply_skip = 0  # CLIENT REPLY SKIP: commands left before replies resume (set_reply_mode)
        settings = server.settings
        self.authenticated = not settings.requirepass
        self.parser = RequestParser(
            max_bulk=settings.proto_max_bulk_len,
            query_limit=settings.client_query_buffer_limit,
            authenticated=self.authenticated,
            pool=server.keyspace.pool,
        )
        # BufferedProtocol's two calls per read. With the C receiver they go to it: it takes the reads in the
        # middle of a large value itself and passes the others on to the parser's get_buffer and to this class's
        # buffer_updated. Without it, get_buffer is the parser's own, bound here to save a frame per read.
        self._receiver = None
        if Receiver is not None:
            receiver = self._receiver = Receiver(self.parser.get_buffer, self.buffer_updated, lowat.MIN, lowat.CHUNK)
            self.parser.receiver = receiver  # which tells it where the rest of each large value goes
            self.get_buffer = receiver.get_buffer
            self.buffer_updated = receiver.buffer_updated  # type: ignore[method-assign]
        else:
            self.get_buffer = self.parser.get_buffer
        self.name = b""
        self.lib_name = b""
        self.lib_ver = b""
        self.addr = "?"
        self.laddr = "?"
        self.unix = False  # connected through the unix socket (CLIENT LIST's flag U)
        self.shared_memory: SharedMemory | None = None  # files KVD.GETINTO/SETFROM mapped for this client (kvd/shm.py)
        self.created = time.monotonic()
        self.last_active = self.created
        self.last_command = "NULL"
        self.close_after_reply = False
        self.transport: asyncio.Transport | None = None
        self._vectored = False  # transport.writelines() is one writev, not a join
        self._low_water: ReceiveLowWater | None = None  # TCP without TLS: wake once a large value is in
        self._parsed: list[list[Any]] = []
        self._queue: deque[list[Any]] = deque()
        self._busy = False  # a command or the log barrier is being awaited
        self._write_paused = False  # the transport asked us to stop producing
        self._held = False  # run nothing now: _write_paused, or CLIENT PAUSE (_hold_here; Server.register)
        self._reading = True
        self._eof = False
        self._closed = False
        self._protocol_error: ProtocolError | None = None
        self._task: asyncio.Future[None] | None = None  # the awaited command, kept referenced
        self._log_dirty = False  # this batch appended to the segment log
        # Reply ranges of write commands in _out, each with the log's ticket once it ran: on a failed write those
        # whose records were all written keep their replies (_release)
        self._write_spans: list[tuple[int, int, int]] = []
        self._multi: list[list[Any]] | None = None  # commands queued since MULTI
        self._multi_error = False  # a queued command was refused: EXEC answers EXECABORT
        self._multi_charge = self._multi_counted = 0  # the queue's bytes so far (_queued_bytes)
        # key -> its change count at WATCH, and whether it was past its deadline then (Keyspace.intact)
        self._watched: dict[bytes, tuple[int, bool]] = {}
        self.executing_transaction = False  # EXEC is running the queue (MONITOR refuses to start then)
        self.monitoring = False  # sent MONITOR: sees every command, may not touch the keyspace
        self.blocked: asyncio.Future[bool] | None = None  # what a blocked WAIT / WAITAOF waits on (``block``)
        self.blocked_until = False  # that wait has a timeout (INFO's clients_in_timeout_table)
        self.subscriptions: Subscriptions | None = None  # channels and patterns, once it subscribes (pubsub.py)
        self._pubsub_resp2 = False  # subscribed with RESP2: only the commands Redis allows there (_execute_pubsub)
        self.unblock_error: str | None = None
        self.tracking: ClientTracking | None = None  # CLIENT TRACKING on (kvd/tracking.py)
        self._held_invalidations: list[bytes] | None = None  # while a tracking client's command runs
        self.no_touch = False  # CLIENT NO-TOUCH on: its reads leave the LRU order alone
        self.no_evict = False  # CLIENT NO-EVICT on: shown in CLIENT LIST (kvd evicts no clients, only keys)
        self._special = False  # tracking or no_touch: commands run through _call_special
        self.sync_rdb_only = False  # REPLCONF rdb-only 1: SYNC sends a snapshot and closes (kvd/commands/sync.py)
        self.sync_keys = True  # REPLCONF rdb-filter-only: a snapshot without keys
        self.sync_listening_port = 0  # REPLCONF listening-port: where a replica says it listens (INFO, ROLE)
        self.sync_ip_address = ""  # REPLCONF ip-address: the address a replica announces instead of its own
        self.replica: Replica | None = None  # after PSYNC/SYNC: this connection is a replica (kvd/replication.py)
        self._drain_waiter: asyncio.Future[None] | None = None  # ``drained`` waits on it

    # -- asyncio protocol callbacks ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's transports are not asyncio subclasses)
        self._vectored = _writes_vectored(transport)
        peer = transport.get_extra_info("peername")
        settings = self.server.settings
        sock = transport.get_extra_info("socket")
        self.unix = sock is not None and sock.family == socket.AF_UNIX
        if self.unix:  # as Redis: the socket's path and port 0, for both ends
            self.addr = self.laddr = f"{settings.unixsocket}:0"
            _widen_send_buffer(sock)
        else:
            self.addr = _format_addr(peer)
            self.laddr = _format_addr(transport.get_extra_info("sockname"))
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            _set_keepalive(sock, settings.tcp_keepalive)
            if transport.get_extra_info("sslcontext") is None:
                if self._receiver is not None:
                    self._receiver.use_fd(sock.fileno())
                else:
                    self._low_water = ReceiveLowWater(sock.fileno())
        soft = settings.client_output_buffer_soft_limit
        if soft:
            transport.set_write_buffer_limits(high=soft, low=soft // 2)
        self._admit(peer)

    def _admit(self, peer: Any) -> None:
        """Register the connection, or refuse it: maxclients, or protected mode and a peer not on loopback."""
        settings = self.server.settings
        if not self.server.register(self):
            self._reject(errors.MAX_CLIENTS)
            return
        if settings.protected_mode and not settings.requirepass and not _is_loopback(peer):
            self.server.stats.rejected_connections += 1
            self._reject(errors.DENIED)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.unblock()
        self._wake_drain_waiter()
        self._leave()
        if self._receiver is not None:
            self._receiver.close()
        if self._low_water is not None:
            self._low_water.close()
        if self.shared_memory is not None:
            self.shared_memory.close()

    def _leave(self) -> None:
        """Everything other clients and the server see of this client goes: its entry in CLIENT LIST, its
        subscriptions, its replica role, its WATCHes and tracking. When it is killed, at once (as Redis frees a
        client: a PUBLISH or ROLE later in the killer's pipeline no longer counts it), and again when the
        connection is lost (each step finds nothing left to do, or what was attached since: a replica role)."""
        replica, self.replica = self.replica, None
        if replica is not None:
            self.server.detach_replica(self)
        if self.subscriptions is not None:
            self.server.pubsub.forget(self)
        self.unwatch()
        if self.tracking is not None:
            self.server.tracking.disable(self)
        self.server.unregister(self)

    def buffer_updated(self, nbytes: int, reads: int = 1, land: bytearray | None = None) -> None:
        """``nbytes`` arrived in the last buffer handed out; from the C receiver, in ``reads`` reads, and in
        ``land``, a buffer of its own, when it landed a request whole."""
        self.last_active = _monotonic()
        stats = self.stats
        stats.net_input_bytes += nbytes
        stats.reads_processed += reads
        parsed = self._parsed
        if not self._feed(nbytes, land):
            return
        if parsed:
            if land is not None and len(parsed) == 1 and self._run_landed(parsed[0]):
                parsed.clear()
                return
            self._queue.extend(parsed)
            parsed.clear()
        if self._queue or self._protocol_error is not None:  # else a large value is still arriving: no batch
            if not self._busy:
                self._run()
            elif self._reading:
                # More requests while a command or the log is awaited: keep them queued and stop reading until
                # the batch completes. Pausing only now (not when the wait starts) spares a client that waits for
                # its reply two epoll_ctl calls per request; the cost is at most one read of queued requests.
                self._set_reading(False)
        if self._low_water is not None:
            # The Python receive path's mark (the C receiver keeps its own): after the replies, so that its
            # system call is not on the client's round trip (Linux signals readiness at once if the next
            # request is already queued when the mark drops).
            self._low_water.follow(self.parser.missing())

    def eof_received(self) -> bool:
        # Keep the transport open for replies to commands already received; close when they are sent.
        self._eof = True
        if not self._busy and not self._queue:  # commands held by CLIENT PAUSE still run, then it closes
            self._close_after_flush()
        return True

    def pause_writing(self) -> None:
        self._write_paused = self._held = True
        self._set_reading(False)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain_waiter()
        self.resume_commands()

    async def drained(self) -> bool:
        """For a command that streams (a snapshot): wait while the transport holds more than its high-water mark,
        until it is down to the low one. False once the connection is closed."""
        while self._write_paused and not self._closed:
            waiter = self._drain_waiter = asyncio.get_running_loop().create_future()
            await waiter
        return not self._closed

    def _wake_drain_waiter(self) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def limit_output(self, high: int | None = None, low: int | None = None) -> None:
        """Set this connection's write-buffer marks (a snapshot holds its own output to a few MiB); without
        arguments, back to ``client-output-buffer-soft-limit``'s."""
        if self.transport is None:
            return
        if high is None:
            soft = self.server.settings.client_output_buffer_soft_limit
            high, low = (soft, soft // 2) if soft else (None, None)
        self.transport.set_write_buffer_limits(high=high, low=low)

    def hold_commands(self) -> None:
        """CLIENT PAUSE began: commands not yet run wait (``_hold_here`` says which)."""
        self._held = True

    def resume_commands(self) -> None:
        """The transport drained, or a CLIENT PAUSE ended: run what waited."""
        self._held = self._write_paused or self.server.paused is not None
        if (self._queue or self.parser.held_back) and not self._busy and not self._closed:
            self.last_active = _monotonic()  # its wait was no idleness: as Redis, the command runs now
            self._run()
        elif not self._closed:
            self._update_reading()

    # -- executing ---------------------------------------------------------------------------------------------

    def _run(self) -> None:
        queue = self._queue
        out = self._out
        while not self._closed:
            if not queue and not (self.parser.held_back and self._parse_held_back()):
                break
            if self._held and self._hold_here(queue[0]):
                if self._write_paused:
                    return  # resume_writing() picks the pipeline up again once the client reads
                break  # CLIENT PAUSE: the replies so far go out, the rest waits (and reading stops)
            # Chosen per command: a SUBSCRIBE (or the last UNSUBSCRIBE) changes what the next one may do.
            result = (self._execute_pubsub if self._pubsub_resp2 else self._execute)(queue.popleft())
            if self.close_after_reply:
                queue.clear()  # Redis runs nothing after QUIT, even if it was pipelined
                break
            if result is not None:
                self._busy = True  # reading pauses if the client sends more before this completes
                self._task = asyncio.ensure_future(self._resume_after(result))
                return
            if len(out) > 2 and type(out[-2]) is memoryview and not self._log_dirty:
                self.flush_replies()  # a large value: hand it over now, so flow control sees it before the next one
        if self._log_dirty:
            self._end_batch()
        else:
            self._finish_batch()

    def _feed(self, nbytes: int, land: bytearray | None = None) -> bool:
        """Parse ``nbytes`` more (0: what the parser held back) into ``_parsed``; a protocol error is kept for
        after the requests before it. False if the connection was dropped (past a limit)."""
        try:
            self.parser.feed(nbytes, self._parsed, land)
        except ProtocolError as exc:
            self._protocol_error = exc
            self._set_reading(False)
        except DropConnection as exc:
            log.warning("closing client %s (id=%d): %s", self.addr, self.id, exc)
            self._queue.clear()
            self.kill()
            return False
        return True

    def _parse_held_back(self) -> bool:
        """Unauthenticated, the parser stops after each request (RequestParser.held_back): parse the next ones,
        under the limits the last one left (after AUTH, none of the unauthenticated ones). True if any came."""
        if not self._feed(0):
            return False
        self._queue.extend(self._parsed)
        self._parsed.clear()
        return bool(self._queue)

    def _execute(self, argv: list[Any]) -> Any:
        name = argv[0]
        cmd = ALIASES.get(name) if type(name) is bytes else None
        if cmd is None:
            name = bytes(name).lower()
            cmd = COMMANDS.get(name)
            if cmd is None:
                self.last_command = "NULL"  # CLIENT LIST's cmd=, as Redis's for a command it does not know
                return self._unknown_command(name, argv)
        self.last_command = cmd.name if not cmd.subcommands or len(argv) < 2 else _full_name(cmd, argv)
        arity = cmd.arity
        if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
            return self._refuse(cmd, errors.wrong_arity(cmd.name), argv)
        if cmd.subcommands and len(argv) > 1:
            # As Redis's processCommand: an unknown subcommand or its wrong count before anything else (NOAUTH,
            # queueing after MULTI); the handler then only dispatches.
            refused = subcommand_error(cmd, argv)
            if refused is not None:
                return self._refuse(cmd, refused, argv)
        if cmd.protected and not self._may_run_protected(cmd, argv):  # as Redis: before NOAUTH and MULTI
            return self._refuse(cmd, errors.not_allowed(cmd.name.upper(), cmd.protected), argv)
        if not self.authenticated and NOAUTH not in cmd.flags and self._auth_required():
            return self._refuse(cmd, errors.NOAUTH, argv)
        multi = self._multi
        if multi is not None or cmd.denyoom:  # a GET pays these two tests, a SET one more (Keyspace.guarded)
            if multi is not None and NO_MULTI in cmd.flags:  # as Redis: before memory
                return self._refuse(cmd, "ERR Command not allowed inside a transaction", argv)
            if (multi is not None or self.keyspace.guarded) and self._out_of_memory(cmd, argv):
                return self._refuse(cmd, errors.OOM, argv)
        if self._monitors and self.monitoring and (cmd.is_write or READONLY in cmd.flags):
            return self._refuse(cmd, "ERR Replica can't interact with the keyspace", argv)  # Redis's words
        if self.server.gated and self.link is None:  # kvd/server.py; a replica's primary's commands pass
            writes = cmd.is_write or (cmd.name == "exec" and self._queues_write())
            refused = self.server.refusal(cmd, argv, writes)
            if refused:
                return self._refuse(cmd, refused, argv)
            if cmd.is_write and multi is None and self.keyspace.primary_expires and not own_write.get():
                return self._own_write(argv)
        if multi is not None and cmd.name not in _RUN_IN_MULTI:
            multi.append(argv)
            self.reply.raw(b"+QUEUED\r\n")
            if self._reply_skip:
                self._command_done()
            return None
        seg_log = self.keyspace.log
        logged = cmd.is_write and seg_log is not None
        if logged:
            refused = seg_log.misconf()
            if refused:
                return self._refuse(cmd, refused, argv, in_multi=False)
            start = len(self._out)
        errors_before = self.reply.errors
        started = _clock()
        try:
            result = self._call_special(cmd, argv) if self._special else cmd.handler(self, argv)
        except Exception as exc:
            if self._command_failed(cmd.name, exc):  # OOM of KVD.SETFROM or DEBUG POPULATE: a refusal
                self._log_dirty = self._log_dirty or logged
                return self._refuse(cmd, "", argv, in_multi=False, replied=True)
            result = None
        if result is None:
            # INFO commandstats, SLOWLOG and the latency monitor, inline: this runs for every command (about
            # 0.3 us, half of it the two clock reads; docs/operations.md, "Diagnostics").
            elapsed = _clock() - started
            stat = self._command_table.get(cmd.name) if not cmd.subcommands else None
            if stat is None:
                stat = self._command_stats(cmd, argv)
            if stat is not None:
                stat.calls += 1
                stat.ns += elapsed
                stat.hist[(elapsed >> 10).bit_length()] += 1
                if self.reply.errors != errors_before:
                    stat.failed += 1
            if elapsed >= self._watch_ns:
                self._slow(cmd, argv, elapsed)
        else:  # it waits for the disk first (a cold value): accounted, and a write's reply marked, when done
            result = self._finish_after(result, cmd, argv, started, errors_before, logged)
        if logged:
            self._log_dirty = True
            if result is None:
                self._write_spans.append((start, len(self._out), seg_log.ticket))
        if self._monitors and cmd.name != "exec":  # after it ran, as Redis's call(); EXEC feeds itself
            self.feed_monitors(cmd, argv)
        return result

    def _out_of_memory(self, cmd: Any, argv: list[Any]) -> bool:
        """Whether the command is refused with -OOM before it runs or is queued, as Redis's processCommand refuses
        it: memory is over ``maxmemory`` with the request in it, and the policy cannot free enough
        (``Keyspace.out_of_memory``). Checked for a ``denyoom`` command, after MULTI for every command but EXEC,
        DISCARD, QUIT and RESET (a queue may not grow without bound), and for an EXEC whose queue holds a
        ``denyoom`` command; the queued commands count as requests still in memory, so a transaction that does
        not fit is refused whole (-EXECABORT) and never half applied. Inside EXEC nothing is checked again.
        A queued command counts all its bytes (``_queued_bytes``), even an argument that ``request_charge`` lets
        pass because it will live on disk only: queued, it stays in RAM until EXEC. The queue is checked under
        every policy (``Keyspace.limited``): under the ``allkeys-*`` ones eviction makes room for it, and a queue
        that does not fit even with every key gone is refused, as Redis refuses it once nothing is left to evict
        (kvd deletes no key for it)."""
        ks = self.keyspace
        if self.executing_transaction:
            return False
        queued = self._multi
        if queued is None:
            return ks.out_of_memory(ks.request_charge(argv))  # asked only while guarded (_execute)
        if not ks.limited:
            return False
        if cmd.name in _OOM_EXEMPT_IN_MULTI:
            if cmd.name != "exec" or not any(c is not None and c.denyoom for c in map(_lookup, queued)):
                return False
            return ks.out_of_memory(self._queued_bytes())
        return ks.out_of_memory(self._queued_bytes() + _request_bytes(argv))

    def _queued_bytes(self) -> int:
        """The bytes of the commands queued after MULTI, summed as far as they were asked for."""
        queued = self._multi or []
        if self._multi_counted < len(queued):
            self._multi_charge += sum(map(_request_bytes, queued[self._multi_counted :]))
            self._multi_counted = len(queued)
        return self._multi_charge

    def _own_write(self, argv: list[Any]) -> Any:
        """A writable replica's client's write: run with ``own_write`` set, so the keys past their deadline that it
        looks up are deleted first, with the ``expired`` event, as Redis's lookupKeyWrite does on a writable
        replica (a read-only one's clients cannot write, and the primary's commands see such keys)."""
        token = own_write.set(True)
        try:
            result = self._execute(argv)
            if asyncio.iscoroutine(result):
                result = asyncio.ensure_future(result)  # what runs after a disk read: the task copies the context
            return result
        finally:
            own_write.reset(token)

    def _may_run_protected(self, cmd: Any, argv: list[Any]) -> bool:
        """Whether the setting that guards ``cmd`` (or, for a container such as MODULE, the subcommand in
        ``argv``) lets this client run it: yes, no, or local (a client from 127.0.0.1 or ::1, or a unix socket),
        as Redis's ``allowProtectedAction``."""
        if cmd.subcommands:
            cmd = cmd.subcommands.get(bytes(argv[1]).lower().decode("utf-8", "replace"))
            if cmd is None or not cmd.protected:
                return True
        allowed = FIXED.get(cmd.protected) or getattr(self.server.settings, cmd.protected.replace("-", "_"))
        if allowed == "local":
            return self.local
        return allowed == "yes"

    @property
    def local(self) -> bool:
        """Redis's islocalClient: the unix socket, or TCP from exactly 127.0.0.1 or ::1."""
        if self.transport is None:
            return False
        peer = self.transport.get_extra_info("peername")
        return self.unix or not isinstance(peer, tuple) or peer[0] in ("127.0.0.1", "::1")

    @property
    def output_mark(self) -> int:
        """Where the next reply will start in this client's output (for ``hold_for_log``)."""
        return len(self._out)

    def hold_for_log(self, start: int) -> None:
        """Make the replies written since ``start`` a write's: held until the log has this batch's records, and
        turned into MISCONF if it fails. ``_execute`` does this for commands flagged write; this is for one whose
        flags do not say it writes (DEBUG POPULATE)."""
        self._log_dirty = True
        seg_log = self.keyspace.log
        self._write_spans.append((start, len(self._out), seg_log.ticket if seg_log is not None else 0))

    @property
    def closed(self) -> bool:
        """The connection is gone: work done for it from now on reaches no one."""
        return self._closed

    async def _finish_after(
        self, pending: Any, cmd: Any, argv: list[Any], started: int, errors_before: int, logged: bool
    ) -> None:
        """Await a command that first read a cold value, make a failure its reply, and account for it as
        ``_execute`` does for the others. A write's reply is marked as a write's, so that a failed log write
        turns it into -MISCONF like any other (``_release``)."""
        out_start = len(self._out)
        step_end = _clock()  # what a command that ``waits`` is timed by
        try:
            await pending
        except Exception as exc:
            if self._command_failed(cmd.name, exc):
                self._refuse(cmd, "", argv, replied=True)
                return
        else:
            if logged and len(self._out) > out_start:
                seg_log = self.keyspace.log
                assert seg_log is not None  # logged: the command appended to it
                self._write_spans.append((out_start, len(self._out), seg_log.ticket))
        elapsed = (step_end if cmd.waits else _clock()) - started
        stat = self._command_stats(cmd, argv)
        if stat is not None:
            stat.calls += 1
            stat.ns += elapsed
            stat.hist[min((elapsed >> 10).bit_length(), stat.BUCKETS - 1)] += 1
            if self.reply.errors != errors_before:
                stat.failed += 1
        if elapsed >= self._watch_ns:
            self._slow(cmd, argv, elapsed)

    # -- CLIENT TRACKING and NO-TOUCH ---------------------------------------------------------------------------

    def update_special(self) -> None:
        """After CLIENT TRACKING, NO-TOUCH or RESET: whether commands go through ``_call_special``."""
        self._special = self.tracking is not None or self.no_touch

    def _call_special(self, cmd: Any, argv: list[Any]) -> Any:
        """Run a command of a client with CLIENT NO-TOUCH or TRACKING on. NO-TOUCH: its reads do not touch the
        LRU (TOUCH excepted). TRACKING (kvd/tracking.py): the keys it reads are remembered, a change it makes is
        known as its own (NOLOOP), and the invalidations meant for it while it runs wait until it has answered,
        as Redis sends them after the reply. EXEC runs its queue through here too: the outermost call delivers."""
        ks = self.keyspace
        untouched = self.no_touch and cmd.name != "touch" and not ks.reads_untouched  # EXEC's queue: EXEC's call
        if untouched:
            self.keyspace.reading_without_touch(True)
        try:
            if self.tracking is None:
                return cmd.handler(self, argv)
            return self._call_tracked(cmd, argv)
        finally:
            if untouched:
                ks.reading_without_touch(False)

    def _call_tracked(self, cmd: Any, argv: list[Any]) -> Any:
        tracking = self.server.tracking
        assert tracking is not None
        outer = self._held_invalidations is None
        if outer:
            self._held_invalidations = []
        tracking.writer = self
        try:
            result = cmd.handler(self, argv)
        except BaseException:
            self._caching_used(cmd.name)
            if outer:  # only a write that failed half-way (MSET out of memory) has any: before its error reply
                self._deliver_invalidations()
            raise
        finally:
            tracking.writer = None
        mode = self.tracking  # the command may have been CLIENT TRACKING off or RESET
        if mode is not None and READONLY in cmd.flags and not mode.bcast and mode.tracks_next_command():
            # Also when the value is still being read from disk: a change during that read is then held here
            # and sent after the reply, so the reply never outlives its invalidation.
            keys = command_keys(cmd, argv)
            if keys:
                tracking.remember(self, keys)
        if not outer:
            return result
        if result is None:
            if self.tracking is not None:
                self._caching_used(cmd.name)
            self._deliver_invalidations()
            return None
        return self._deliver_after(result, cmd.name)

    async def _deliver_after(self, pending: Any, name: str) -> None:
        try:
            await pending
        finally:
            self._caching_used(name)  # an EXEC's: once its last queued command has run
            self._deliver_invalidations()

    def _caching_used(self, name: str) -> None:
        """A command is done with, run or not (refused, unknown, failed): a CLIENT CACHING given before it no longer
        counts, as Redis's resetClient clears it. Not while a transaction is open (MULTI and the commands it
        queues keep it for the EXEC, whose commands all use it), nor after a CLIENT command (CACHING itself)."""
        mode = self.tracking
        if (
            mode is not None
            and mode.caching
            and name != "client"
            and self._multi is None
            and (name == "exec" or not self.executing_transaction)
        ):
            mode.caching = False

    def _deliver_invalidations(self) -> None:
        held, self._held_invalidations = self._held_invalidations, None
        for data in held or ():
            self.push(data)

    def push_invalidation(self, data: bytes) -> None:
        """An invalidation message for this client: now, or after the command it is running has answered."""
        if self._held_invalidations is not None:
            self._held_invalidations.append(data)
        else:
            self.push(data)

    def _command_stats(self, cmd: Any, argv: list[Any]) -> CommandStats | None:
        """The counters for ``argv``: a subcommand's own (``client|list``) as in Redis; None for an unknown
        subcommand, which Redis counts under no command."""
        if cmd.subcommands and len(argv) > 1:
            sub = bytes(argv[1]).lower().decode("utf-8", "replace")
            if sub not in cmd.subcommands:
                return None
            return self.stats.command(f"{cmd.name}|{sub}")
        return self.stats.command(cmd.name)

    def _slow(self, cmd: Any, argv: list[Any], elapsed: int) -> None:
        """A command that reached ``_watch_ns``: to SLOWLOG (EXEC excepted: the commands it ran are there) and
        to the latency monitor, each if it reached that one's own threshold. While CLIENT REPLY SKIP counts
        down, ``_watch_ns`` is -1 so that every command passes here, at no cost to the others."""
        server = self.server
        if self._reply_skip:
            self._command_done()
        if SKIP_SLOWLOG not in cmd.flags:
            server.slowlog.push(argv, elapsed, self.addr, self.name)
        server.latency.add("fast-command" if FAST in cmd.flags else "command", elapsed / 1e9)

    def set_watch_ns(self, watch_ns: int) -> None:
        self._watch_ns = -1 if self._reply_skip else watch_ns

    # -- CLIENT REPLY ------------------------------------------------------------------------------------------

    def set_reply_mode(self, mode: bytes) -> None:
        """CLIENT REPLY ``on``, ``off``, or ``skip`` (no reply to the next command; ignored while off, and a
        SKIP skipped by an earlier one arms a new skip, as in Redis). Muting points the ReplyWriter at a list
        that drops everything, so the reply path itself checks nothing."""
        writer = self.reply
        if mode == b"skip":
            if writer.out is self._out or self._reply_skip:  # a SKIP while one counts down skips anew; OFF wins
                writer.out = DISCARD
                self._reply_skip = 2  # this command, then the next one
                self._watch_ns = -1  # every command goes past _slow, which counts them down
            return
        writer.out = self._out if mode == b"on" else DISCARD
        self._reply_skip = 0
        self._watch_ns = self.server.watch_ns

    def _command_done(self) -> None:
        """A command was answered (or refused, or queued) while CLIENT REPLY SKIP counts down."""
        self._reply_skip -= 1
        if not self._reply_skip:
            self.reply.out = self._out
            self._watch_ns = self.server.watch_ns

    def _run_landed(self, argv: list[Any]) -> bool:
        """Run a SET that the C receiver landed whole (``kvd/protocol/landing.py``) from the read callback itself,
        past the queue and ``_run``'s loop. True if it ran; False leaves it to ``_run``.

        This is the KV-cache client's write, one per read callback. Its Python runs right after the kernel has
        copied the value through the caches, so every frame and object it touches is a cache miss: measured in
        docs/benchmarks.md, "Where the time goes". The request goes through ``_execute`` like any other; what
        it skips is the queue, ``_run``'s loop and ReplyBatch's wait. A request that ``_run`` would not run now
        (one queued before it, a command or the log awaited, MULTI, paused writes, a closing client) goes
        there; what follows the command (held replies, a protocol error after it, paused reading) is
        ``_end_batch``'s and ``_finish_batch``'s, as after ``_run``."""
        if (
            ALIASES.get(argv[0]) is not _SET
            or self._queue
            or self._busy
            or self._multi is not None
            or self._held
            or self._pubsub_resp2
            or self.close_after_reply
            or self._closed
        ):
            return False
        self.stats.landed_sets += 1
        self._execute(argv)  # never awaits: SET does not touch the disk
        if self._log_dirty:
            self._end_batch()  # held until the log has the record, as for every write
        else:
            self._finish_batch(at_once=True)  # nothing to gain from ReplyBatch's wait for one large write
        return True

    def _unknown_command(self, name: bytes, argv: list[Any]) -> None:
        if name in _SECURITY_ATTACK:
            log.warning("possible SECURITY ATTACK detected from %s: %r as a command; closing", self.addr, name)
            self._queue.clear()
            self.kill()
            return None
        if self._multi is not None and self.flags_transactions:
            self._multi_error = True
        self.reply.error(errors.unknown_command(bytes(argv[0]), argv[1:]))
        if self._reply_skip:
            self._command_done()
        if self.tracking is not None:
            self._caching_used("")
        return None

    def _refuse(self, cmd: Any, message: str, argv: list[Any], in_multi: bool = True, replied: bool = False) -> None:
        """A command refused before it runs or is queued (Redis's ``rejectCommand``): counted in its
        ``rejected_calls``; it makes a transaction fail at EXEC, and a refused EXEC itself discards the transaction
        and is shown to MONITOR clients (``execCommandAbort``). ``in_multi`` False: refused when it was to run, not
        to be queued (MISCONF: Redis checks it before queueing too, kvd when the command runs, EXEC's included; the
        -OOM of KVD.SETFROM's and DEBUG POPULATE's room for values that are not in the request). ``replied``: the
        error is already written."""
        stat = self._command_stats(cmd, argv)
        if stat is not None:
            stat.rejected += 1
        if not replied:
            if cmd.name == "exec":
                self.discard_multi()
                message = f"EXECABORT Transaction discarded because of: {message.removeprefix('ERR ')}"
                self.feed_monitors(cmd, argv)  # execCommandAbort shows it: monitors saw the MULTI
            elif self._multi is not None and in_multi and self.flags_transactions:
                self._multi_error = True
            self.reply.error(message)
        if self._reply_skip:
            self._command_done()
        if self.tracking is not None:
            self._caching_used(cmd.name)
        return None

    def _command_failed(self, name: str, exc: Exception) -> bool:
        """A handler raised: a refusal becomes its error reply; a bug costs one reply, not the connection.
        True for OOM, which Redis counts as a rejection (it refuses before running the command)."""
        if isinstance(exc, CommandError):
            self.reply.error(exc.message)
        elif isinstance(exc, OutOfMemory):
            self.reply.error(errors.OOM)
            return True
        else:
            log.error("internal error in %s", name, exc_info=exc)
            self.reply.error(f"ERR internal error in '{name}': {type(exc).__name__}")
        return False

    async def _settle(self, pending: Any) -> None:
        """Await a command that waited for the disk. ``_finish_after`` has already made its failure its reply, so
        what escapes here is a bug in the bookkeeping after that reply: logged, never a second reply to the
        same request, and the client's pipeline goes on."""
        try:
            await pending
        except Exception:
            log.exception("internal error after %s from client %s (id=%d)", self.last_command, self.addr, self.id)

    async def _resume_after(self, pending: Any) -> None:
        await self._settle(pending)
        self._busy = False
        if not self._closed:
            if not self._log_dirty:
                self.flush_replies()  # replies of awaited commands go out as they complete (bounded by flow control)
            self._run()

    def _end_batch(self) -> None:
        if self._log_dirty:
            self._log_dirty = False
            seg_log = self.keyspace.log
            if seg_log is not None and seg_log.when_stored(self._release):
                self._busy = True  # reading pauses if the client sends more before the log confirms
                return
        self._write_spans.clear()
        self._finish_batch()

    def _release(self, exc: BaseException | None) -> None:
        """The log has this batch's writes (``exc`` None): send the held replies. Called by the log's report,
        often from the very callback that wrote the batch; on failure the replies of the writes whose records did
        not all reach the disk (the log undid them) become MISCONF errors, and those of the earlier writes in the
        batch, written before the failure and kept, stay as they were."""
        if exc is not None:
            message = getattr(exc, "message", None) or str(exc)
            written = getattr(exc, "written_upto", 0)
            out = self._out
            for start, end, ticket in reversed(self._write_spans):
                if end > start and ticket > written:  # empty when CLIENT REPLY muted the reply
                    out[start:end] = [b"-" + errors.scrub(message).encode() + b"\r\n"]
                    self.stats.count_error(message)
        self._write_spans.clear()
        self._busy = False
        if self._closed:
            return
        self._finish_batch(True)
        if (self._queue or self.parser.held_back) and not self._busy:
            self._run()

    def _finish_batch(self, released: bool = False, at_once: bool = False) -> None:
        if self._reading and not (self._protocol_error or self.close_after_reply or self._eof or self._held):
            # The common case: replies handed over, now or with the others at the iteration's end (ReplyBatch).
            if at_once:
                self.flush_replies()
            else:
                self._replies.add(self, released)
            return
        self.flush_replies()
        if self._protocol_error is not None and self.close_after_reply:
            self._protocol_error = None  # after QUIT (or a kill): Redis reads nothing past it, bad bytes included
        if self._protocol_error is not None:
            error, self._protocol_error = self._protocol_error, None
            log.info("protocol error from client %s (id=%d): %s", self.addr, self.id, error.message)
            self.reply.error(error.message)
            self.flush_replies()
            self.close_after_reply = True
        if self.close_after_reply or (self._eof and not (self._held and self._queue)):
            self._close_after_flush()
        else:
            self._update_reading()

    def flush_replies(self) -> None:
        """Hand the replies written so far to the transport (ReplyBatch calls it for the clients it held)."""
        out = self._out
        if not out or self._closed or self.transport is None:
            out.clear()
            return
        transport = self.transport
        if len(out) == 1:  # one small reply: the common case of unpipelined requests
            part = out[0]
            transport.write(part)
            sent = len(part)
        else:
            # Small replies are joined into one bytes; a large stored value goes to the transport as the
            # object's own memoryview. With scatter/gather writes (uvloop, asyncio on 3.12+) all of it leaves in
            # one writelines() = one writev; otherwise each large view is its own write, never joined.
            parts: list[Buffer] = []
            small: list[Buffer] = []
            sent = 0
            for part in out:
                sent += len(part)
                if type(part) is memoryview:
                    if small:
                        parts.append(small[0] if len(small) == 1 else b"".join(small))
                        small.clear()
                    parts.append(part)
                else:
                    small.append(part)
            if small:
                parts.append(small[0] if len(small) == 1 else b"".join(small))
            if len(parts) == 1:
                transport.write(parts[0])
            elif self._vectored:
                transport.writelines(parts)
            else:
                for part in parts:
                    transport.write(part)
        out.clear()
        stats = self.stats
        stats.net_output_bytes += sent
        stats.writes_processed += 1
        hard = self.server.settings.client_output_buffer_hard_limit
        unauthenticated = not self.authenticated and self._auth_required()
        if unauthenticated:
            hard = UNAUTH_MAX_OUTPUT  # Redis's fix of CVE-2025-21605: one that must still AUTH and does not read
        if hard and transport.get_write_buffer_size() > hard:
            log.warning(
                "closing client %s (id=%d): output buffer %d bytes is over %s",
                self.addr,
                self.id,
                transport.get_write_buffer_size(),
                "the unauthenticated limit (1 KiB)" if unauthenticated else "client-output-buffer-hard-limit",
            )
            self.server.stats.output_limit_disconnections += 1
            self.kill()

    # -- state used by commands --------------------------------------------------------------------------------

    def set_authenticated(self, value: bool) -> None:
        self.authenticated = value
        self.parser.set_authenticated(value)

    def _auth_required(self) -> bool:
        """For a client that has not authenticated: whether it must still, as Redis's authRequired (the default
        user has a password). Once requirepass is cleared it need not, and the parser's unauthenticated limits
        lift with it; they return, and so does NOAUTH, if a password is set again before it authenticates."""
        required = bool(self.server.settings.requirepass)
        if self.parser.authenticated == required:
            self.parser.set_authenticated(not required)
        return required

    def kill(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.abort()
            self._leave()  # now, not when the loop reports the connection lost

    def feed_monitors(self, cmd: Any, argv: list[Any]) -> None:
        """Show ``argv`` to every MONITOR client, unless Redis would not (an administrative command)."""
        if not self._monitors or ADMIN in cmd.flags:
            return
        if cmd.subcommands and len(argv) > 1:
            sub = cmd.subcommands.get(bytes(argv[1]).lower().decode("utf-8", "replace"))
            if sub is not None and ADMIN in sub.flags:
                return
        # Redis names a socket client unix:PATH here, where CLIENT LIST and SLOWLOG show PATH:0
        addr = f"unix:{self.server.settings.unixsocket}" if self.unix else self.addr
        data = monitor.line(addr, argv)
        for client in list(self._monitors):
            client.push(data)

    @property
    def output(self) -> list[Buffer]:
        """Where replies go whatever CLIENT REPLY says: for what Redis sends a muted client (CLIENT_PUSHING)."""
        return self._out

    def push(self, data: bytes) -> None:
        """Data that is not a reply to this client's own request (a MONITOR line). It goes out at the end of
        this loop iteration, or with this client's own replies when they are being held (for the log, or a
        batch being served), so it never pushes a held write reply out early."""
        if self._closed:
            return
        self._out.append(data)  # past CLIENT REPLY OFF: Redis delivers pushes to a muted client (CLIENT_PUSHING)
        if not (self._busy or self._log_dirty or self._write_spans):
            self._replies.add(self, together=True)

    def send_stream(self, parts: list[Any], hard_limit: int) -> None:
        """Replication stream for this replica, straight to the transport (never held with replies): values go
        as the views they came as. Past ``hard_limit`` bytes queued the replica is dropped, as Redis drops one
        over its output buffer limit; the primary never waits for it."""
        transport = self.transport
        if self._closed or transport is None:
            return
        if self._vectored:
            transport.writelines(parts)
        else:
            for part in parts:
                transport.write(part)
        self.stats.net_repl_output_bytes += sum(len(p) for p in parts)
        if hard_limit and transport.get_write_buffer_size() > hard_limit:
            log.warning(
                "dropping replica %s (id=%d): %d bytes of stream queued is over client-output-buffer-hard-limit",
                self.addr,
                self.id,
                transport.get_write_buffer_size(),
            )
            self.server.stats.output_limit_disconnections += 1
            self.kill()

    def pending_output(self) -> bool:
        """Replies not yet handed to the socket: written into this batch or still in the transport."""
        return bool(self._out) or self.output_bytes() > 0

    def input_bytes(self) -> int:
        """Request bytes received and not yet parsed (CLIENT LIST's rbs, INFO client_recent_max_input_buffer)."""
        return len(self.parser._buf)

    def output_bytes(self) -> int:
        """Reply bytes the transport still holds for this client (CLIENT LIST's omem, MEMORY STATS)."""
        return self.transport.get_write_buffer_size() if self.transport and not self._closed else 0

    def client_type(self) -> str:
        """Redis's client type: "replica", "pubsub" (subscribed to anything) or "normal"."""
        if self.replica is not None:
            return "replica"
        return "pubsub" if self.subscriptions and self.subscriptions.total() else "normal"

    def _flags(self) -> str:
        """CLIENT LIST's flags in Redis's order: O a monitor or S a replica, M the primary, P subscribed, x in MULTI,
        b blocked, t tracking (R its redirection broken, B broadcasting), U the unix socket, e no-evict, T no-touch;
        N for none."""
        flags = "O" if self.monitoring else "S" if self.replica is not None else ""
        flags += "M" if self.link is not None else ""
        flags += "P" if self.subscriptions and self.subscriptions.total() else ""
        flags += "x" if self._multi is not None else ""
        flags += "b" if self.is_blocked else ""
        mode = self.tracking
        if mode is not None:
            flags += "t" + ("R" if mode.broken else "") + ("B" if mode.bcast else "")
        flags += ("U" if self.unix else "") + ("e" if self.no_evict else "") + ("T" if self.no_touch else "")
        return flags or "N"

    def describe(self) -> str:
        subs = self.subscriptions
        now = time.monotonic()
        out_size = self.output_bytes()
        redirect = self.tracking.redirect if self.tracking is not None else -1
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd=-1 name={self.name.decode(errors='replace')} "
            f"age={int(now - self.created)} idle={int(self.idle(now))} flags={self._flags()} db=0 "
            f"sub={len(subs.channel) if subs else 0} psub={len(subs.pattern) if subs else 0} "
            f"ssub={len(subs.shard) if subs else 0} multi={len(self._multi) if self._multi is not None else -1} "
            f"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs={self.input_bytes()} rbp=0 obl=0 oll=0 "
            f"omem={out_size} tot-mem={out_size + self.input_bytes()} events=r cmd={self.last_command} "
            f"user=default redir={redirect} resp={self.reply.proto} lib-name={self.lib_name.decode(errors='replace')} "
            f"lib-ver={self.lib_ver.decode(errors='replace')}"
        )

    # -- publish/subscribe (kvd/pubsub.py) ----------------------------------------------------------------------

    def update_pubsub_mode(self) -> None:
        """After (un)subscribing, HELLO or RESET: a RESP2 client with subscriptions is in Redis's pub/sub
        context, where ``_execute_pubsub`` refuses most commands; a RESP3 one may run anything."""
        subs = self.subscriptions
        self._pubsub_resp2 = subs is not None and subs.total() > 0 and self.reply.proto == 2

    @property
    def in_pubsub_resp2(self) -> bool:
        return self._pubsub_resp2

    def _execute_pubsub(self, argv: list[Any]) -> Any:
        """``_execute`` for a RESP2 client in the pub/sub context: after the checks Redis makes first (unknown
        command or subcommand, arity, NOAUTH), only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET."""
        name = argv[0]
        cmd = COMMANDS.get(bytes(name).lower())
        if cmd is None or cmd.name in _PUBSUB_CONTEXT:
            return self._execute(argv)
        arity = cmd.arity
        if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
            return self._execute(argv)
        full = cmd.name
        if cmd.subcommands and len(argv) > 1:
            if subcommand_error(cmd, argv) is not None:
                return self._execute(argv)
            full = f"{cmd.name}|{bytes(argv[1]).lower().decode('utf-8', 'replace')}"
        if not self.authenticated and NOAUTH not in cmd.flags and self._auth_required():
            return self._execute(argv)
        if cmd.protected and not self._may_run_protected(cmd, argv):  # Redis's order: the guard's refusal first
            return self._execute(argv)
        self.last_command = full
        return self._refuse(
            cmd,
            f"ERR Can't execute '{full}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are "
            "allowed in this context",
            argv,
        )

    # -- transactions (kvd/commands/transactions.py) ------------------------------------------------------------

    @property
    def in_multi(self) -> bool:
        return self._multi is not None

    def begin_multi(self) -> None:
        self._multi = []
        self._multi_error = False
        self._multi_charge = self._multi_counted = 0  # _queued_bytes's running sum

    def discard_multi(self) -> None:
        self._multi = None
        self._multi_error = False
        self.unwatch()

    def watch(self, keys: list[bytes]) -> None:
        for key in keys:
            if key not in self._watched:  # watching a key again keeps the first count, as in Redis
                self._watched[key] = self.keyspace.watch(key)

    def unwatch(self) -> None:
        if self._watched:
            for key in self._watched:
                self.keyspace.unwatch(key)
            self._watched.clear()

    def exec_multi(self, exec_argv: list[Any]) -> Any:
        """EXEC's work: the queue in order, or EXECABORT, or a null array for a changed WATCHed key. MONITOR
        shows ``exec_argv`` after the commands it ran, also when one of them waited for the disk."""
        queued, aborted = self._multi or [], self._multi_error
        intact = all(self.keyspace.intact(key, seen, stale) for key, (seen, stale) in self._watched.items())
        self.discard_multi()
        if aborted or not intact:
            if aborted:
                self.reply.error("EXECABORT Transaction discarded because of previous errors.")
            else:
                self.reply.null_array()
            self.feed_monitors(COMMANDS[b"exec"], exec_argv)
            return None
        self.reply.array(len(queued))
        self.executing_transaction = True
        errors_before = self.reply.errors
        for i, argv in enumerate(queued):
            pending = self._execute(argv)
            if pending is not None:
                return self._exec_rest(pending, queued[i + 1 :], exec_argv, errors_before)
        self.reply.errors = errors_before  # the commands' errors are theirs: EXEC itself did not fail (commandstats)
        self.executing_transaction = False
        self.last_command = "exec"
        self.feed_monitors(COMMANDS[b"exec"], exec_argv)
        return None

    async def _exec_rest(self, pending: Any, rest: list[list[Any]], exec_argv: list[Any], errors_before: int) -> None:
        """The part of an EXEC after a command that had to wait for the disk. Every queued command gets a reply,
        whatever fails, so the array EXEC announced is complete."""
        try:
            while True:
                await self._settle(pending)
                pending = None
                while rest and pending is None:
                    pending = self._execute(rest.pop(0))
                if pending is None:
                    return
        finally:
            self.reply.errors = errors_before
            self.executing_transaction = False
            self.last_command = "exec"
            self.feed_monitors(COMMANDS[b"exec"], exec_argv)

    # -- blocking commands (WAIT, WAITAOF; kvd/commands/replication.py) ----------------------------------------

    async def block(self, done: asyncio.Future[Any] | None, timeout_ms: int) -> bool:
        """Wait for ``done`` (None: for nothing that will come) at most ``timeout_ms`` (0: no limit). True if it
        completed; False on timeout, CLIENT UNBLOCK, disconnect or shutdown (then ``unblock_error`` says which
        error, if any, to answer). ``done`` itself is left alone: others may share it (a save)."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.blocked, self.blocked_until, self.unblock_error = waiter, timeout_ms > 0, None
        if done is not None:
            done.add_done_callback(lambda _: None if waiter.done() else waiter.set_result(True))
        try:
            return await asyncio.wait_for(waiter, timeout_ms / 1000 if timeout_ms else None)
        except TimeoutError:
            return False
        finally:
            self.blocked = None

    def unblock(self, error: str | None = None) -> bool:
        """End a blocked command now, as if it timed out, or with ``error`` as its reply (CLIENT UNBLOCK)."""
        waiter = self.blocked
        if waiter is None or waiter.done():
            return False
        self.unblock_error = error
        waiter.set_result(False)
        return True

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def is_blocked(self) -> bool:
        """Blocked as Redis counts it (INFO's blocked_clients, CLIENT LIST's flag b): in a WAIT or WAITAOF, or with
        a command held by CLIENT PAUSE."""
        return self.blocked is not None or (self._held and bool(self._queue) and not (self._busy or self._write_paused))

    def times_out(self) -> bool:
        """Whether ``timeout`` may close this client once it is idle: not the link to a primary, a replica, a
        monitor, a subscriber, nor a client waiting (a blocked command, CLIENT PAUSE), as Redis's
        clientsCronHandleTimeout spares them."""
        return not (
            self.link is not None
            or self._busy
            or (self.server.paused is not None and self._queue)  # held by CLIENT PAUSE (Redis: postponed)
            or self.replica is not None
            or self.monitoring
            or (self.subscriptions is not None and self.subscriptions.total() > 0)
        )

    def idle(self, now: float) -> float:
        """Seconds since this client last sent anything (reads the C receiver took count too)."""
        last = self.last_active
        if self._receiver is not None:
            last = max(last, self._receiver.last_read)
        return now - last

    def close_gracefully(self) -> None:
        """Shutdown: stop reading; close once replies in flight are sent (a blocked WAIT answers now)."""
        self._set_reading(False)
        self.unblock()
        if not self._busy:
            self._close_after_flush()
        else:
            self.close_after_reply = True

    # -- internals ---------------------------------------------------------------------------------------------

    def _reject(self, message: str) -> None:
        assert self.transport is not None
        self.transport.write(b"-" + message.encode() + b"\r\n")
        self._closed = True
        self.transport.close()

    def _close_after_flush(self) -> None:
        if self.transport is not None and not self._closed:
            self.flush_replies()  # replies still waiting for the end of the iteration
            self._closed = True
            self.transport.close()  # sends what is buffered, then closes

    def _set_reading(self, wanted: bool) -> None:
        if wanted == self._reading or self.transport is None or self._closed:
            return
        self._reading = wanted
        if wanted:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()

    def _update_reading(self) -> None:
        self._set_reading(
            not (self._busy or self._write_paused or self._protocol_error is not None or (self._held and self._queue))
        )

    def _hold_here(self, argv: list[Any]) -> bool:
        """Whether the next command must wait: the transport is full, or CLIENT PAUSE holds it (ALL: every
        command; WRITE: commands that change the dataset, and an EXEC whose queue holds one), as Redis's
        ``processCommand`` postpones them. Clears ``_held`` once nothing holds the client any more."""
        if self._write_paused:
            return True
        mode = self.server.paused
        if mode is None:
            self._held = False
            return False
        if mode == "all":
            return True
        name = argv[0]
        cmd = (ALIASES.get(name) if type(name) is bytes else None) or COMMANDS.get(bytes(name).lower())
        if cmd is None:
            return False
        if cmd.is_write or cmd.name in _MAY_REPLICATE:
            return True
        queued = self._multi if cmd.name == "exec" else None
        return bool(queued) and any(self._is_write(q) for q in queued)

    def _queues_write(self) -> bool:
        """A transaction whose queue holds a write: its EXEC is checked as a write, as Redis checks it."""
        return any(self._is_write(q, may_replicate=False) for q in self._multi or ())

    @staticmethod
    def _is_write(argv: list[Any], may_replicate: bool = True) -> bool:
        """A write (CLIENT PAUSE WRITE also holds PUBLISH, which may replicate; ``may_replicate`` False: not)."""
        cmd = COMMANDS.get(bytes(argv[0]).lower())
        return cmd is not None and (cmd.is_write or (may_replicate and cmd.name in _MAY_REPLICATE))


class ReplyBatch:
    """Replies of the clients served in one event-loop iteration, written together at its end when that pays.

    A client served in the middle of an iteration used to write its reply at once. Over loopback each write
    wakes the client's process, and when the next reply comes a few microseconds of Python later that process
    has gone back to sleep, so nearly every write paid for a wake-up (an inter-processor interrupt, a VM exit
    on a virtual machine): ``perf`` put 30 % of kvd's CPU under redis-benchmark ``-c 50`` in that wake-up.
    Written back to back, as Redis writes them in ``beforeSleep``, the replies find the processes still awake.
    ``call_soon`` runs after the I/O callbacks of the current iteration, so no reply waits for ``epoll_wait``.

    Waiting costs one more loop iteration, which is all loss when an iteration serves one client (a lone
    client, or a few clients sending large values): then replies go out at once, and one in ``PROBE`` is held
    to see whether iterations have become busy again. Only a batch of two or more clients keeps batching on.
    Replies that the segment log's report releases (every client whose writes it covers, in one callback) always
    wait for the end of the iteration: written at once they were spaced by each client's release work, and
    redis-benchmark ``-P 1`` SET with ``everysec`` swung between 31k and 45k req/s from run to run.
    ``add`` is O(1); a flush is O(clients held). INFO kvd ``batched_replies`` counts the clients whose replies
    left in a batch of two or more.
    """

    PROBE = 64

    __slots__ = ("_batching", "_clients", "_countdown", "_stats")

    def __init__(self, stats: ServerStats) -> None:
        self._clients: list[Client] = []
        self._batching = False
        self._countdown = self.PROBE
        self._stats = stats

    def add(self, client: Client, together: bool = False) -> None:
        """Write ``client``'s replies now, or with the others at the end of this iteration (always, if
        ``together``: replies the log's report releases for many clients at once)."""
        clients = self._clients
        if not clients:
            if not (self._batching or together):
                self._countdown -= 1
                if self._countdown:
                    client.flush_replies()
                    return
                self._countdown = self.PROBE
            asyncio.get_running_loop().call_soon(self._flush_all)
        clients.append(client)  # twice in one iteration is harmless: the second flush finds nothing to write

    def _flush_all(self) -> None:
        clients, self._clients = self._clients, []
        self._batching = len(clients) > 1
        if self._batching:
            self._stats.batched_replies += len(clients)
        for client in clients:
            if not client.busy:  # it began a batch since it was added: that batch's end flushes it, held or not
                client.flush_replies()


def _writes_vectored(transport: Any) -> bool:
    """Whether ``writelines`` sends its buffers with one scatter/gather call instead of joining them (a copy of
    every large value). uvloop's transports do; asyncio's selector transport does from Python 3.12; TLS never."""
    if transport.get_extra_info("sslcontext") is not None:
        return False
    if type(transport).__module__.startswith("uvloop"):
        return True
    return sys.version_info >= (3, 12) and type(transport).__name__ == "_SelectorSocketTransport"


def _format_addr(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr) if addr else "?"


def _is_loopback(peer: Any) -> bool:
    if not isinstance(peer, tuple):
        return True  # unix sockets are local by definition
    try:
        ip = ipaddress.ip_address(peer[0].split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


UNIX_SEND_BUFFER = 4 << 20


def _widen_send_buffer(sock: socket.socket) -> None:
    """Ask for a 4 MiB send buffer on a unix socket connection (the kernel caps it at ``net.core.wmem_max``).

    A unix socket starts with ``net.core.wmem_default`` (208 KiB) and keeps it, where loopback TCP grows its own
    to ``tcp_wmem``'s 4 MiB: with the default, a large reply reaches the client about 200 KiB per wake-up of
    either side. Measured with the connector's MGET into reused buffers (Intel host, 12 alternating rounds,
    medians): 1 MiB values 3.92 -> 4.22 GB/s, 32 MiB values 4.73 -> 4.95 GB/s (loopback TCP: 3.55, 3.70)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SEND_BUFFER)
    except OSError:
        pass  # the default buffer works, only slower


def _set_keepalive(sock: socket.socket, interval: int) -> None:
    if interval <= 0:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, interval)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(interval // 3, 1))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except OSError:
        pass  # (Linux takes TCP_KEEPIDLE up to 32767 s): the connection works without, as Redis's anetKeepAlive
