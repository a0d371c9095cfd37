"""The server: listeners, the client registry, background jobs and graceful shutdown.

One process, one event loop, one keyspace. Each accepted socket gets its own ``Client`` protocol object
(``kvd/connection.py``); there is no other per-connection state and no global. Background work is a single
tick, ``hz`` times a second (10, as Redis's): the bounded TTL sweep and the idle-client timeout. The segment
log runs its own writer thread.

Shutdown (SIGTERM, SIGINT or SHUTDOWN): stop accepting, stop reading from every client, let replies in flight
(including those waiting on the log) go out, close the sockets, then drain and fsync the log and exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import os
import ssl
import time
from typing import TYPE_CHECKING, Any

from kvd import unixsocket
from kvd.acllog import AclLog
from kvd.commands.migrate import MigrateLinks
from kvd.commands.registry import LOADING, STALE
from kvd.config import ConfigError, Settings
from kvd.connection import Client, ReplyBatch
from kvd.failover import Failover
from kvd.latency import LatencyMonitor
from kvd.logs import python_level
from kvd.notify import KEYEVENT, KEYSPACE, KeyspaceEvents, parse_flags
from kvd.persist.saves import Saves
from kvd.protocol import errors
from kvd.pubsub import PubSub
from kvd.replica import LoadProgress, ReplicaLink
from kvd.replication import LINK_IDENTITY_FILE, Replica, ReplicationFeed, save_identity
from kvd.shm import Copier
from kvd.slowlog import SlowLog
from kvd.stats import ServerStats, render_info
from kvd.store.keyspace import now_ms
from kvd.supervise import Supervisor
from kvd.tracking import Tracking

if TYPE_CHECKING:
    from kvd.commands.registry import Command
    from kvd.persist import RecoveryReport
    from kvd.store.keyspace import Keyspace

log = logging.getLogger("kvd.server")

SHUTDOWN_GRACE_SECONDS = 10.0


class ListenError(Exception):
    """A listener could not be opened: ``where`` names it (address and port, or the socket's path), ``reason``
    says why in the system's words."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"cannot listen on {where}: {reason}")
        self.where = where
        self.reason = reason


class Server:
    def __init__(
        self,
        settings: Settings,
        keyspace: Keyspace,
        recovery: RecoveryReport | None = None,
        replication_identity: tuple[str, int] | None = None,
        link_identity: tuple[str, int] | None = None,
    ) -> None:
        self.settings = settings
        self.keyspace = keyspace
        self.recovery = recovery
        self.clients: dict[int, Client] = {}
        self.monitors: set[Client] = set()  # clients that sent MONITOR (kvd/monitor.py)
        self.pubsub = PubSub()  # channels, patterns and their subscribers (kvd/pubsub.py)
        self.tracking: Tracking | None = None  # client-side caching, from the first CLIENT TRACKING on
        keyspace.events = _events(self.pubsub, settings)
        self.stats = ServerStats()
        self.replies = ReplyBatch(self.stats)  # replies written together at the end of each loop iteration
        self.started_at = time.time()
        self.saves = Saves(keyspace.log, self.started_at)  # SAVE, BGSAVE, LASTSAVE (kvd/persist/saves.py)
        self.slowlog = SlowLog(settings.slowlog_log_slower_than, settings.slowlog_max_len)
        self.acl_log = AclLog(settings.acllog_max_len)  # refused authentications (ACL LOG)
        self.latency = LatencyMonitor(settings.latency_monitor_threshold)
        if keyspace.log is not None:
            keyspace.log.watch_latency(self.latency.add)
        self.watch_ns = _watch_ns(settings)  # a command this slow goes to SLOWLOG and/or the latency monitor
        # Clients' commands held: "write" or "all", the stricter of a CLIENT PAUSE (until _pause_end, loop time)
        # and a FAILOVER's hold on writes (kvd/failover.py), each ended by its own owner.
        self.paused: str | None = None
        self.active_expire = True  # DEBUG SET-ACTIVE-EXPIRE 0 turns the sweep off; reads still drop expired keys
        self.restart_delay_ms: int | None = None  # DEBUG RESTART: execute again this long after the stop
        self.exit_status = 0  # what the process exits with after a stop: 1 if the log could not be made durable
        self.supervisor = Supervisor("no")  # the service manager told of readiness and stops (kvd/cli.py sets it)
        self._client_pause: str | None = None
        self._failover_hold = False
        self._pause_end = 0.0
        self._pause_timer: asyncio.TimerHandle | None = None
        self.run_id = os.urandom(20).hex()
        # The stream to replicas (kvd/replication.py); the keyspace reports to it only while one is attached.
        # The replication id is this run's unless a clean shutdown left one for the same keyspace (replication.py).
        self.replication = ReplicationFeed(
            replication_identity[0] if replication_identity else self.run_id,
            settings.client_output_buffer_hard_limit,
            settings.repl_backlog_size,
            settings.repl_backlog_ttl,
            settings.repl_ping_replica_period,
        )
        if replication_identity is not None:
            self.replication.continue_history(replication_identity[1])
            keyspace.feed = self.replication if self.replication.needed else None
        self.link: ReplicaLink | None = None  # following a primary (REPLICAOF host port; kvd/replica.py)
        self._link_identity = link_identity  # how far a clean shutdown had applied the primary's stream
        # What a client may run (Client._execute asks refusal() only while gated is set, so a primary's commands
        # pay one attribute test): writes are refused on a read-only replica and on a primary short of
        # min-replicas-to-write good replicas, most commands while a snapshot loads, and most while the link is
        # down if stale data must not be served; a writable replica's writes run with ``own_write``.
        self.read_only = False
        self.loading: LoadProgress | None = None  # a replica loading its primary's snapshot (kvd/replica.py)
        self.gated = False
        self.min_replicas = 0  # min-replicas-to-write on a primary (0: off): writes need that many good replicas
        self.failover: Failover | None = None  # FAILOVER on this primary, until the role is handed over
        self.bound_port = settings.port
        self._unix_identity: unixsocket.Identity | None = None  # the socket file bound, removed at shutdown
        self.copier = Copier()  # KVD.GETINTO's and SETFROM's copies to and from clients' shared memory (kvd/shm.py)
        self.migrate_links = MigrateLinks()  # MIGRATE's connections to its targets, cached for 10 s as Redis's
        self.loop_name = "asyncio"
        self._next_id = 0
        self._listeners: list[asyncio.AbstractServer] = []
        self._stopping = asyncio.Event()
        self._tick: asyncio.Task[None] | None = None

    # -- clients -----------------------------------------------------------------------------------------------

    def client_tracking(self) -> Tracking:
        """The tracking table, made when a client first turns CLIENT TRACKING on (kvd/tracking.py)."""
        if self.tracking is None:
            self.tracking = Tracking(self.clients, self.settings.tracking_table_max_keys)
            self.keyspace.tracking = self.tracking
        return self.tracking

    def next_client_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def clients_output_bytes(self) -> int:
        """Reply bytes the transports still hold, all clients together (INFO mem_clients_normal, MEMORY STATS)."""
        return sum(client.output_bytes() for client in self.clients.values())

    def register(self, client: Client) -> bool:
        self.stats.connections_received += 1
        if len(self.clients) >= self.settings.maxclients or self._stopping.is_set():
            self.stats.rejected_connections += 1
            return False
        self.clients[client.id] = client
        if self.paused is not None:  # created before a CLIENT PAUSE that ran before it was registered
            client.hold_commands()
        return True

    def attach_replica(self, client: Client) -> Replica:
        """``client`` sent PSYNC or SYNC: from now on the keyspace's changes are streamed to it."""
        self.keyspace.feed = self.replication
        client.replica = self.replication.attach(client)
        log.info("replica %s (id=%d) attached", client.addr, client.id)
        return client.replica

    def resume_replica(self, client: Client, next_offset: int) -> Replica:
        """``client`` continues from the backlog (PSYNC's +CONTINUE)."""
        self.keyspace.feed = self.replication
        client.replica = self.replication.resume(client, next_offset)
        log.info("replica %s (id=%d) continues from offset %d", client.addr, client.id, next_offset)
        return client.replica

    def detach_replica(self, client: Client) -> None:
        if self.replication.detach(client):
            self.keyspace.feed = None  # no replica and no backlog: changes cost nothing more
        log.info("replica %s (id=%d) detached", client.addr, client.id)

    # -- replicating from a primary (kvd/replica.py) -------------------------------------------------------------

    def replicate_from(
        self, host: str, port: int, history: tuple[str, int] | None = None, failover: Failover | None = None
    ) -> None:
        """REPLICAOF host port: follow that primary from now on (the connection is made in the background).
        ``history``: the primary's replid and the offset the keyspace is at (a clean restart's, or this server's
        own stream when a FAILOVER hands the role to that replica: ``failover``), to continue."""
        db = 0
        if self.link is not None:
            self.link.stop()
            history = (self.link.replid, self.link.offset)  # another primary of the same history may continue it
            db = self.link.db
        self.link = ReplicaLink(self, host, port)
        if history is not None:
            self.link.replid, self.link.offset = history
            self.link.db = db
        self.link.failover = failover
        self._set_replicaof(f"{host} {port}")
        self.link.start()
        log.info("replicating from %s:%d from now on", host, port)

    def stop_replicating(self) -> None:
        """REPLICAOF NO ONE (or the primary's FAILOVER): a primary again, with the data it holds. If it holds
        exactly the primary's data at a known offset, its stream goes on from there as the primary's did
        (``ReplicationFeed.take_over_history``), so the primary's other replicas can follow it without a
        snapshot; its own replicas, which counted its old stream, resynchronise."""
        link = self.link
        if link is None:
            return
        resumable = link.resumable()  # judged before stopping half-run commands
        link.stop()  # a transaction whose EXEC has not come is rewound to before its MULTI: it never ran
        history = (link.replid, link.offset) if resumable else None
        if history == (self.replication.replid, self.replication.offset):
            history = None  # its own stream (an aborted FAILOVER): nothing came from elsewhere, nothing to take over
        log.info("no longer replicating from %s:%d: a primary now", link.host, link.port)
        self.link = None
        self._set_replicaof("")
        if history is not None:
            for replica in self.replication.take_over_history(*history):
                replica.client.kill()
            self.keyspace.feed = self.replication if self.replication.needed else None

    def _set_replicaof(self, value: str) -> None:
        self.settings = dataclasses.replace(self.settings, replicaof=value)  # CONFIG GET and REWRITE show it
        self._update_gate()

    def set_loading(self, progress: LoadProgress | None) -> None:
        """A replica's snapshot load began (its progress) or ended (None)."""
        self.loading = progress
        self._update_gate()

    def _update_gate(self) -> None:
        s = self.settings
        replica = self.link is not None
        self.read_only = replica and s.replica_read_only
        self.keyspace.set_replica(replica)  # deadlines are the primary's to enforce (kvd/store/keyspace.py)
        following = replica and s.replica_ignore_maxmemory
        if self.keyspace.following != following:
            self.keyspace.following = following
            if not following:
                self.keyspace._evict()  # its own maxmemory-policy again, at once
        self.min_replicas = 0 if replica or not s.min_replicas_max_lag else s.min_replicas_to_write
        # A writable replica too: its clients' writes delete keys past their deadline first (Client._own_write).
        self.gated = replica or self.loading is not None or self.min_replicas > 0

    def refusal(self, cmd: Command, argv: list[Any], writes: bool) -> str:
        """The error a client's command gets instead of running, or '' if it may run; asked only while ``gated``.
        The checks and their order are Redis's processCommand: a write on a primary with fewer good replicas than
        min-replicas-to-write, a write on a read-only replica, then a command without the ``stale`` flag while
        the link is down and replica-serve-stale-data is off, then a command without the ``loading`` flag while
        a snapshot loads. ``writes``: the command writes, or it is an EXEC whose queue does (so min-replicas-
        to-write is checked again when the transaction runs, as in Redis). A subcommand has its own flags: CLIENT
        LIST runs while a snapshot loads, MEMORY USAGE does not."""
        if writes:
            if self.min_replicas and self.replication.good_replicas(self.settings.min_replicas_max_lag) < (
                self.min_replicas
            ):
                return errors.NOREPLICAS  # a primary without enough replicas that acknowledged lately
            if self.read_only:
                return errors.READONLY  # a replica takes writes from its primary only
        if cmd.subcommands and len(argv) > 1:  # it exists: Client._execute checked
            cmd = cmd.subcommands.get(bytes(argv[1]).lower().decode("utf-8", "replace"), cmd)
        link = self.link
        stale = link is not None and not link.link_up and not self.settings.replica_serve_stale_data
        if stale and STALE not in cmd.flags:
            return errors.MASTERDOWN
        if self.loading is not None and LOADING not in cmd.flags:
            return errors.LOADING  # the keys so far are a part of the primary's: neither old data nor new
        return ""

    def unregister(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        self.monitors.discard(client)

    # -- INFO / CONFIG -----------------------------------------------------------------------------------------

    def info_text(self, sections: list[str]) -> str:
        return render_info(self, sections)

    def apply_settings(self, new: Settings) -> None:
        """CONFIG SET: adopt run-time changes (only keys in config.RUNTIME_KEYS can differ)."""
        old, self.settings = self.settings, new
        ks = self.keyspace
        ks.set_maxmemory(new.maxmemory)
        ks.set_policy(new.maxmemory_policy, new.lfu_log_factor, new.lfu_decay_time, new.maxmemory_samples)
        limited = new.maxmemory and (not old.maxmemory or new.maxmemory < old.maxmemory)  # 0 is no limit
        if limited or new.maxmemory_policy != old.maxmemory_policy:
            ks.evict()
            if ks.guarded and ks.ram.over_budget():  # Redis's warning, once eviction has done what it may
                log.warning(
                    "maxmemory (%d) is smaller than what the RAM tier holds after eviction (%d): under "
                    "maxmemory-policy %s commands that may grow memory get -OOM until keys are deleted",
                    new.maxmemory,
                    ks.ram.used,
                    new.maxmemory_policy,
                )
        if new.notify_keyspace_events != old.notify_keyspace_events:
            ks.events = _events(self.pubsub, new)
        self.slowlog.configure(new.slowlog_log_slower_than, new.slowlog_max_len)
        self.acl_log.max_len = new.acllog_max_len
        if self.tracking is not None:
            self.tracking.max_keys = new.tracking_table_max_keys
        self.latency.threshold_ms = new.latency_monitor_threshold
        feed = self.replication
        feed.hard_limit = new.client_output_buffer_hard_limit
        feed.backlog_size, feed.backlog_ttl = new.repl_backlog_size, new.repl_backlog_ttl
        feed.ping_period = new.repl_ping_replica_period
        self.watch_ns = _watch_ns(new)
        self._update_gate()
        if ks.log is not None and new.appendfsync != old.appendfsync:
            ks.log.set_appendfsync(new.appendfsync)
        if ks.log is not None:  # both [runtime] settings, which CONFIG SET once accepted and ignored
            if new.max_disk != old.max_disk:
                ks.log.set_max_disk(new.max_disk)  # the next maintenance tick evicts down to it
            ks.log.compaction_dead_ratio = new.compaction_dead_ratio
        for client in self.clients.values():
            client.parser.set_limits(new.proto_max_bulk_len, new.client_query_buffer_limit)
            client.set_watch_ns(self.watch_ns)
        logging.getLogger("kvd").setLevel(python_level(new.loglevel))
        changed = [k for k in type(new).__dataclass_fields__ if getattr(old, k) != getattr(new, k)]
        if changed:
            log.info("configuration changed: %s", ", ".join(k.replace("_", "-") for k in changed))

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT: what Redis 7.0's resetServerStats zeroes, wherever kvd keeps it."""
        self.stats.reset()
        self.stats.connector.clear()
        tier = self.keyspace.stats  # kept on the Keyspace, next to its tier counters (which stay)
        tier.keyspace_hits = tier.keyspace_misses = tier.expired_keys = tier.evicted_keys = 0
        self.replication.sync_partial_ok = self.replication.sync_partial_err = 0

    # -- CLIENT PAUSE ------------------------------------------------------------------------------------------

    def pause_clients(self, mode: str, timeout_ms: int) -> None:
        """Hold clients' commands for ``timeout_ms``: every command ("all") or those that write ("write"). A
        second pause keeps the later end and the stricter mode, as Redis's ``pauseClients``. Active expiry
        stops meanwhile; a pause of 0 ms ends at once."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_ms / 1000
        if self._client_pause is not None:
            end = max(end, self._pause_end)
            mode = "all" if "all" in (mode, self._client_pause) else "write"
        if end <= loop.time():
            return
        self._client_pause, self._pause_end = mode, end
        if self._pause_timer is not None:
            self._pause_timer.cancel()
        self._pause_timer = loop.call_at(end, self.unpause_clients)
        self._update_pause()
        log.info("clients paused (%s) for %d ms", mode, timeout_ms)

    def unpause_clients(self) -> None:
        """CLIENT UNPAUSE, or the pause's end. A FAILOVER's hold on writes stays until the failover ends."""
        if self._client_pause is None:
            return
        self._client_pause = None
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        self._update_pause()
        log.info("clients unpaused")

    def hold_writes_for_failover(self, hold: bool) -> None:
        self._failover_hold = hold
        self._update_pause()

    def _update_pause(self) -> None:
        modes = (self._client_pause, "write" if self._failover_hold else None)
        mode = "all" if "all" in modes else ("write" if "write" in modes else None)
        before, self.paused = self.paused, mode
        if mode == before:
            return
        if mode is not None and (before is None or mode == "all"):
            for client in self.clients.values():
                client.hold_commands()
        else:  # none, or writes only after all: what no longer waits runs
            for client in list(self.clients.values()):
                client.resume_commands()

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind every listener, then start accepting on all of them at once.

        ``create_server`` yields to the loop while it resolves the address, so a listener that served as soon
        as it was bound would answer on the TCP port while the TLS port was still closed, and a client that
        took the first PONG as "ready" could be refused on the other port.
        """
        loop = asyncio.get_running_loop()
        self.loop_name = type(loop).__module__.split(".")[0]
        s = self.settings
        if s.port:
            self.bound_port = (await self._bind(s.port))[0].sockets[0].getsockname()[1]
        if s.tls_port:
            await self._bind(s.tls_port, build_tls_context(s), what="TLS port")
        if s.unixsocket:
            await self._bind_unix(s.unixsocket)
        # Each start_serving() listens, then yields once; as tasks of one gather, every listen() runs in the
        # same loop pass, before the loop polls for its first connection.
        await asyncio.gather(*(server.start_serving() for server in self._listeners))
        self._tick = asyncio.create_task(self._background())
        if s.replicaof:
            host, port = s.replicaof.split()
            self.replicate_from(host, int(port), self._link_identity)
        self._link_identity = None  # taken: it describes the keyspace only until the first change

    async def _bind(
        self, port: int, context: ssl.SSLContext | None = None, what: str = "port"
    ) -> list[asyncio.AbstractServer]:
        """One listener per ``bind`` address on ``port``, bound and listening only once ``start`` says so."""
        loop = asyncio.get_running_loop()
        s = self.settings
        bound = []
        for address in s.bind:
            try:
                server = await loop.create_server(
                    lambda: Client(self),
                    host=address,
                    port=port,
                    backlog=s.tcp_backlog,
                    ssl=context,
                    reuse_address=True,
                    start_serving=False,
                )
            except OSError as exc:
                raise ListenError(f"{address} {what} {port}", exc.strerror or str(exc)) from None
            bound.append(server)
        self._listeners += bound
        return bound

    async def _bind_unix(self, path: str) -> None:
        """The unix socket listener (``kvd/unixsocket.py`` decides what happens to a file already there)."""
        try:
            sock, self._unix_identity = unixsocket.bind(path, self.settings.unixsocketperm)
        except OSError as exc:
            raise ListenError(f"unix socket {path}", exc.strerror or str(exc)) from None
        server = await asyncio.get_running_loop().create_unix_server(
            lambda: Client(self), sock=sock, backlog=self.settings.tcp_backlog, start_serving=False
        )
        self._listeners.append(server)

    async def serve_until_stopped(self) -> None:
        await self._stopping.wait()
        await self.stop()

    def request_restart(self, delay_ms: int) -> None:
        """DEBUG RESTART: a graceful stop, then ``kvd/restart.py`` executes the process again."""
        self.restart_delay_ms = delay_ms
        self.request_shutdown("DEBUG RESTART")

    def request_shutdown(self, reason: str) -> None:
        if not self._stopping.is_set():
            log.info("shutting down (%s): finishing replies in flight", reason)
            if self.restart_delay_ms is None:  # DEBUG RESTART's image says READY again: the service goes on
                self.supervisor.stopping()
            self._stopping.set()

    async def stop(self) -> None:
        for server in self._listeners:
            server.close()
        if self._unix_identity is not None and unixsocket.remove(self.settings.unixsocket, self._unix_identity):
            log.info("removed the unix socket %s", self.settings.unixsocket)
        if self.failover is not None:
            self.failover.abort("the server is shutting down")  # the held writes run (or are refused) first
        link = self.link
        # Judged before stopping half-run commands. The primary's selected database is not saved: a stream that
        # had another than 0 selected resynchronises fully after the restart (kvd/replica.py, "databases").
        resumable = link is not None and link.resumable() and link.db == 0
        if link is not None:
            link.stop()  # the setting stays: a restart follows the same primary
            await link.wait_stopped()
        self.replication.flush_now()  # the last changes reach the replicas before their connections close
        if self._tick is not None:
            self._tick.cancel()
        for client in list(self.clients.values()):
            client.close_gracefully()
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        while self.clients and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            for client in list(self.clients.values()):
                if not client.busy:
                    client.close_gracefully()
        for client in list(self.clients.values()):
            client.kill()
        for server in self._listeners:
            await server.wait_closed()
        self.copier.close()  # copies in flight finish into memory their clients still map
        self.migrate_links.close_all()
        if self.keyspace.log is not None:
            if not await self.keyspace.log.close():
                self.exit_status = 1  # the supervisor hears of it; the log's error names the file
            feed = self.replication
            if feed.backlog_active:  # the keyspace on disk is the stream's state at its end: the next start goes on
                try:
                    save_identity(self.settings.dir, feed.replid, feed.offset)
                except OSError as exc:
                    log.warning("replication id not saved (%s): replicas will resynchronise fully", exc)
            if link is not None and resumable:  # the keyspace on disk is the primary's at link.offset
                try:
                    save_identity(self.settings.dir, link.replid, link.offset, LINK_IDENTITY_FILE)
                except OSError as exc:
                    log.warning("primary's replication id not saved (%s): the next start resynchronises", exc)
        if self.exit_status:
            log.error(
                "bye: %d keys; the log's last fsync failed, its last writes may not be durable", len(self.keyspace)
            )
        else:
            log.info("bye: %d keys, log flushed", len(self.keyspace))

    def _expire_cycle(self, started: float) -> None:
        """One sweep of due deadlines, and what INFO says of it: its time, and whether keys are still due after it
        (it stopped at its limit), with the share of keys with a TTL that are past it then."""
        keyspace = self.keyspace
        keyspace.expire_cycle()
        st = self.stats
        now = now_ms()
        if keyspace.expiry.overdue(now):
            st.expire_cycles_capped += 1
            st.expired_stale_perc = 100 * keyspace.expiry.overdue_share(now)
        else:
            st.expired_stale_perc = 0.0
        st.expire_cycle_seconds += time.monotonic() - started

    async def _background(self) -> None:
        last_idle_check = last_rate_sample = 0.0
        while True:
            await asyncio.sleep(1 / self.settings.hz)  # hz: 10 by default, as Redis's
            try:
                started = time.monotonic()
                if self.paused is None and self.active_expire:  # as Redis: none while clients are paused
                    self._expire_cycle(started)
                now = time.monotonic()
                self.keyspace.ram.set_clock(int(now))
                self.stats.sample_memory(self.keyspace.ram.used)
                self.latency.add("expire-cycle", now - started)
                if self.migrate_links:
                    self.migrate_links.close_idle(now)
                if self.keyspace.feed is not None:
                    self.replication.tick(now)
                    if not self.replication.needed:
                        self.keyspace.feed = None
                st = self.stats
                if now - last_rate_sample >= 0.1:  # every 100 ms whatever hz, as Redis's run_with_period(100)
                    last_rate_sample = now
                    st.ops_per_sec.sample(
                        now,
                        st.commands_processed(),
                        st.net_input_bytes,
                        st.net_output_bytes,
                        st.net_repl_input_bytes,
                        st.net_repl_output_bytes,
                    )
                if self.settings.timeout and now - last_idle_check >= 1.0:
                    last_idle_check = now
                    for client in list(self.clients.values()):
                        if client.times_out() and client.idle(now) > self.settings.timeout:
                            log.debug("closing idle client %s (id=%d)", client.addr, client.id)
                            client.kill()
            except Exception:  # the tick must never die
                log.exception("background tick failed")


def _events(pubsub: PubSub, s: Settings) -> KeyspaceEvents | None:
    """The keyspace's notifier for notify-keyspace-events; None when no event would be published."""
    flags = parse_flags(s.notify_keyspace_events)
    return KeyspaceEvents(pubsub, flags) if flags & (KEYSPACE | KEYEVENT) and flags & ~(KEYSPACE | KEYEVENT) else None


def _watch_ns(s: Settings) -> int:
    """The shortest command duration that SLOWLOG or the latency monitor wants to see (ns; huge when neither)."""
    limits = []
    if s.slowlog_log_slower_than >= 0:
        limits.append(s.slowlog_log_slower_than * 1000)
    if s.latency_monitor_threshold > 0:
        limits.append(s.latency_monitor_threshold * 1_000_000)
    return min(limits, default=1 << 62)


def is_loopback_address(address: str) -> bool:
    if address in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(address.lstrip("-").split("%")[0]).is_loopback
    except ValueError:
        return False


def build_tls_context(s: Settings) -> ssl.SSLContext:
    """The TLS port's context; ConfigError naming the key and the file that cannot be read or loaded (checked
    at start-up, kvd/cli.py, before recovery)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for key, path in (("tls-cert-file", s.tls_cert_file), ("tls-key-file", s.tls_key_file)):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise ConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        context.load_cert_chain(s.tls_cert_file, s.tls_key_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ConfigError(
            f"tls-cert-file: {s.tls_cert_file} with tls-key-file {s.tls_key_file} is not a certificate and its "
            f"private key: {exc}"
        ) from None
    if s.tls_ca_cert_file:
        try:
            context.load_verify_locations(s.tls_ca_cert_file)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ConfigError(f"tls-ca-cert-file: cannot load {s.tls_ca_cert_file}: {reason}") from None
    mode: dict[str, Any] = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}
    context.verify_mode = mode[s.tls_auth_clients]
    return context
