"""Server-wide counters and the INFO report.

Counters are plain integer attributes bumped on the hot path (an attribute increment is the cheapest thing
CPython can do); INFO assembles them, with the keyspace's tier counters and the segment log's own stats, into
Redis's ``# Section`` / ``field:value`` text. Field names follow Redis where a Redis field means the same
thing (so dashboards and ``redis-cli --stat`` work); kvd-specific ones live in the ``kvd`` and ``connector``
sections.
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import sys
import time
from typing import TYPE_CHECKING

import kvd
from kvd import buffers, memory
from kvd.persist import writer
from kvd.protocol import parser, receive
from kvd.store.lru import LRU_CLOCK_MAX

if TYPE_CHECKING:
    from kvd.server import Server

# In Redis 7's order, which INFO keeps whatever order the sections are asked in; kvd's own two come last.
SECTIONS = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "commandstats",
    "errorstats",
    "latencystats",
    "cluster",
    "keyspace",
    "kvd",
    "connector",
)
LATENCY_PERCENTILES = (50, 99, 99.9)  # Redis's latency-tracking-info-percentiles default
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ("commandstats", "latencystats"))
_TITLES = {"cpu": "CPU"}  # a section's header is its name capitalised, but for these (Redis's "# CPU")


class ServerStats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started = time.monotonic()
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.reads_processed = 0  # buffer_updated calls: one per successful read from a client socket
        self.writes_processed = 0  # reply flushes handed to the transport
        self.batched_replies = 0  # clients whose replies left with others at the end of a loop iteration
        self.landed_sets = 0  # SETs received whole in a buffer of their own, run from the read callback
        self.auth_failures = 0
        self.output_limit_disconnections = 0
        self.sync_full = 0  # snapshots asked for with SYNC or PSYNC (kvd/commands/sync.py)
        self.net_repl_output_bytes = 0  # the replication stream sent to replicas (kvd/replication.py)
        self.net_repl_input_bytes = 0  # what kvd as a replica read from its primary (kvd/replica.py)
        self.expire_cycle_seconds = 0.0  # the background sweep's time (expire_cycle_cpu_milliseconds)
        self.expire_cycles_capped = 0  # sweeps that stopped at their limit with keys still due
        self.expired_stale_perc = 0.0  # of keys with a TTL, the share past it after the last sweep (sampled)
        self.prefix_lookups = 0
        self.prefix_keys_hit = 0
        self.prefix_keys_missed = 0
        self.shm_loaded_bytes = 0  # copied into clients' shared memory (KVD.GETINTO)
        self.shm_saved_bytes = 0  # copied out of it (KVD.SETFROM)
        # By Redis's full name ("get", "client|list"). Cleared, not replaced: every client holds this dict.
        self.commands: dict[str, CommandStats] = getattr(self, "commands", {})
        self.commands.clear()
        self.error_replies = 0  # every error reply, as Redis's total_error_replies
        self.errors: dict[str, int] = {}  # error replies by their first word: "ERR", "WRONGTYPE", "NOAUTH"
        self.ops_per_sec = OpsRate()
        self.used_memory_peak = 0  # the RAM tier's largest accounting seen (sample_memory)
        self.connector: dict[str, int] = getattr(self, "connector", {})

    def sample_memory(self, used: int) -> int:
        """Note the RAM tier's accounting (on every background tick and at INFO); returns the peak so far."""
        if used > self.used_memory_peak:
            self.used_memory_peak = used
        return self.used_memory_peak

    def commands_processed(self) -> int:
        """Commands run (refused ones are not), as Redis's total_commands_processed: the sum of their calls."""
        return sum(stat.calls for stat in self.commands.values())

    def command(self, name: str) -> CommandStats:
        """The counters of ``name``, created on its first call (INFO commandstats lists called commands only)."""
        found = self.commands.get(name)
        if found is None:
            found = self.commands[name] = CommandStats()
        return found

    def count_error(self, message: str) -> None:
        """One error reply; ``message`` starts with its code, as every error kvd writes does."""
        self.error_replies += 1
        space = message.find(" ", 0, 31)  # Redis looks at the reply's first 32 bytes, its "-" included
        code = message[:space] if space > 0 else "ERR"
        errors = self.errors
        errors[code] = errors.get(code, 0) + 1


class CommandStats:
    """One command's line of INFO commandstats and latencystats, and its LATENCY HISTOGRAM.

    ``ns`` is the time its handler ran, and for a command that waited for the disk (a cold value) the wait too:
    what the client saw, where Redis, which never waits, counts CPU. ``hist`` counts durations in power-of-two
    buckets, ``hist[k]`` those below ``1024 << k`` ns: the buckets LATENCY HISTOGRAM reports, as Redis's
    ``hdr_iter_log_init(1024, 2)``. Redis keeps a 2-significant-digit HDR histogram; here a percentile is
    interpolated inside its bucket, so INFO latencystats is exact to the bucket (a factor of 2) and smooth
    within it. One list index per command keeps the hot path at one more increment."""

    __slots__ = ("calls", "failed", "hist", "ns", "rejected")

    BUCKETS = 42  # up to 2^51 ns: 26 days

    def __init__(self) -> None:
        self.calls = 0
        self.ns = 0
        self.rejected = 0  # refused before it ran: arity, NOAUTH, MISCONF, OOM, a refusal inside MULTI
        self.failed = 0  # ran and answered an error
        self.hist = [0] * self.BUCKETS

    def render(self) -> str:
        usec = self.ns // 1000
        per_call = usec / self.calls if self.calls else 0.0
        return (
            f"calls={self.calls},usec={usec},usec_per_call={per_call:.2f},"
            f"rejected_calls={self.rejected},failed_calls={self.failed}"
        )

    def histogram_usec(self) -> list[tuple[int, int]]:
        """(bucket's upper bound in whole microseconds, calls up to it) for every non-empty bucket."""
        rows, total = [], 0
        for k, n in enumerate(self.hist):
            if n:
                total += n
                rows.append(((1024 << k) // 1000, total))
        return rows

    def percentile_usec(self, p: float) -> float:
        """The ``p``-th percentile of the durations, interpolated inside its power-of-two bucket."""
        total = sum(self.hist)
        if not total:
            return 0.0
        rank = total * p / 100
        seen = 0
        for k, n in enumerate(self.hist):
            if n and seen + n >= rank:
                low = 0 if k == 0 else 512 << k
                return (low + ((1024 << k) - low) * (rank - seen) / n) / 1000
            seen += n
        return (1024 << (self.BUCKETS - 1)) / 1000


class OpsRate:
    """instantaneous_ops_per_sec and the kbps fields: the mean of the last 16 samples of the counters' rates,
    one sample every 100 ms (every tick of the server's background task below hz 10), as Redis's
    ``trackInstantaneousMetric``.
    The counters: commands, client input and output bytes, replication input and output bytes."""

    SAMPLES = 16

    def __init__(self) -> None:
        self._last: tuple[float, tuple[int, ...]] | None = None
        self._rates: list[tuple[float, ...]] = []

    def sample(self, now: float, *counters: int) -> None:
        last = self._last
        self._last = (now, counters)
        if last is None or now <= last[0]:
            return
        span = now - last[0]
        rates = self._rates
        rates.append(tuple((new - old) / span for new, old in zip(counters, last[1], strict=True)))
        if len(rates) > self.SAMPLES:
            del rates[0]

    def current(self) -> tuple[int, float, float, float, float]:
        """(ops per second, input, output, replication input, replication output KiB/s)."""
        n = len(self._rates)
        if not n:
            return 0, 0.0, 0.0, 0.0, 0.0
        ops, *kbytes = (sum(r[i] for r in self._rates) / n for i in range(5))
        return round(ops), *(rate / 1024 for rate in kbytes)


def _human(n: float) -> str:
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.2f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1024
    return f"{n}"


def render_info(server: Server, sections: list[str]) -> str:
    """INFO's text for the (lowercased) section names asked, as Redis 7 selects them: none is ``default``;
    ``all`` and ``everything`` are every section; ``default`` can be combined with more; unknown names are
    skipped; the sections come in ``SECTIONS`` order, however they were asked."""
    wanted: set[str] = set()
    for name in sections or ["default"]:
        if name in ("all", "everything"):
            wanted.update(SECTIONS)
        elif name == "default":
            wanted.update(DEFAULT_SECTIONS)
        else:
            wanted.add(name)
    parts = []
    for name in SECTIONS:
        if name in wanted:
            lines = _BUILDERS[name](server)
            title = _TITLES.get(name, name.capitalize())
            parts.append(f"# {title}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in lines))
    return "\r\n".join(parts)


# The build kvd reports where Redis reports its own: no git revision is known to a running kvd (Redis prints
# 00000000 then too), the id stands for kvd's version on this interpreter, and the compiler is the one that built
# the interpreter (kvd's C extensions are built with the same toolchain at install). No atomicvar_api: kvd's
# threads share nothing but queues under the interpreter's lock.
_BUILD_ID = hashlib.sha1(f"{kvd.__version__} {sys.version}".encode()).hexdigest()[:16]
_COMPILER = platform.python_compiler().removeprefix("GCC ").split()[0] if platform.python_compiler() else "0.0.0"


def _server(s: Server) -> list[tuple[str, object]]:
    uptime = int(time.time() - s.started_at)
    return [
        ("redis_version", "7.2.0"),
        ("kvd_version", kvd.__version__),
        ("redis_git_sha1", "00000000"),
        ("redis_git_dirty", 0),
        ("redis_build_id", _BUILD_ID),
        ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64 if sys.maxsize > 2**32 else 32),
        ("monotonic_clock", "POSIX clock_gettime"),  # time.monotonic: CLOCK_MONOTONIC
        ("multiplexing_api", s.loop_name),
        ("gcc_version", _COMPILER),
        ("python_version", platform.python_version()),
        ("python_switch_interval_us", round(sys.getswitchinterval() * 1e6)),  # kvd/gil.py
        ("buffer_calls", buffers.IMPLEMENTATION),  # kvd/buffers.py: c, ctypes or python
        ("receive_path", receive.PATH),  # kvd/protocol/receive.py: c or python
        ("request_parser", parser.SMALL_REQUESTS),  # kvd/protocol/parser.py: c, hiredis or python
        ("record_packer", "python" if writer.pack_run is None else "c"),  # kvd/persist/writer.py
        ("process_id", os.getpid()),
        ("process_supervised", s.supervisor.mode),  # kvd/supervise.py
        ("run_id", s.run_id),
        ("tcp_port", s.bound_port),
        ("server_time_usec", time.time_ns() // 1000),
        ("uptime_in_seconds", uptime),
        ("uptime_in_days", uptime // 86400),
        ("hz", s.settings.hz),
        ("configured_hz", s.settings.hz),
        ("lru_clock", s.keyspace.ram.clock & LRU_CLOCK_MAX),
        ("executable", os.path.abspath(sys.argv[0])),  # absolute, as Redis makes it at start
        ("config_file", s.settings.config_file or ""),
        ("io_threads_active", 0),
    ]


def _clients(s: Server) -> list[tuple[str, object]]:
    """Redis 7.0's fields in its order. The largest input and output buffers are now's (Redis keeps the largest
    of the last few seconds). ``blocked_clients`` counts what Redis blocks: clients in WAIT or WAITAOF and clients
    whose command CLIENT PAUSE holds; ``clients_in_timeout_table`` those of the first with a timeout. A client
    that waits for a disk read is kvd's own: ``clients_waiting_on_disk``."""
    clients = s.clients.values()
    return [
        ("connected_clients", len(s.clients)),
        ("cluster_connections", 0),
        ("maxclients", s.settings.maxclients),
        ("client_recent_max_input_buffer", max((c.input_bytes() for c in clients), default=0)),
        ("client_recent_max_output_buffer", max((c.output_bytes() for c in clients), default=0)),
        ("blocked_clients", sum(1 for c in clients if c.is_blocked)),
        ("tracking_clients", s.tracking.tracking_clients if s.tracking is not None else 0),
        ("clients_in_timeout_table", sum(1 for c in clients if c.blocked is not None and c.blocked_until)),
        ("clients_waiting_on_disk", sum(1 for c in clients if c.busy)),
    ]


def _memory(s: Server) -> list[tuple[str, object]]:
    """Redis's fields, in its order, for what kvd has: ``used_memory`` is the RAM tier's accounting (keys, values
    and a fixed charge per entry: what ``maxmemory`` limits), so kvd has no start-up baseline in it (0) and its
    overhead is the keys' and entries' share. What kvd does not have (Lua, functions, cluster links, lazy free)
    is 0, as Redis shows it with none. No ``mem_fragmentation_ratio`` (nor the allocator_* and rss_overhead_*
    fields it is made of): Redis divides RSS by everything it allocated, kvd's accounting leaves the interpreter
    out, and an idle kvd would show a ratio in the thousands that alert rules read as fragmentation."""
    ram = s.keyspace.ram
    rss = memory.rss_bytes()
    used = ram.used
    peak = s.stats.sample_memory(used)
    system = memory.total_system_memory()
    seg_log = s.keyspace.log
    replicas_out = sum(c.output_bytes() for c in s.clients.values() if c.replica is not None)
    return [
        ("used_memory", used),
        ("used_memory_human", _human(used)),
        ("used_memory_rss", rss),
        ("used_memory_rss_human", _human(rss)),
        ("used_memory_peak", peak),
        ("used_memory_peak_human", _human(peak)),
        ("used_memory_peak_perc", f"{100 * used / peak if peak else 100:.2f}%"),
        ("used_memory_overhead", ram.overhead),
        ("used_memory_startup", 0),
        ("used_memory_dataset", ram.resident_bytes),
        ("used_memory_dataset_perc", f"{100 * ram.resident_bytes / used if used else 0:.2f}%"),
        ("total_system_memory", system),
        ("total_system_memory_human", _human(system)),
        ("used_memory_lua", 0),
        ("used_memory_vm_eval", 0),
        ("used_memory_lua_human", "0B"),
        ("used_memory_scripts_eval", 0),
        ("number_of_cached_scripts", 0),
        ("number_of_functions", 0),
        ("number_of_libraries", 0),
        ("used_memory_vm_functions", 0),
        ("used_memory_vm_total", 0),
        ("used_memory_vm_total_human", "0B"),
        ("used_memory_functions", 0),
        ("used_memory_scripts", 0),
        ("used_memory_scripts_human", "0B"),
        ("maxmemory", ram.budget),
        ("maxmemory_human", _human(ram.budget)),
        ("maxmemory_policy", s.keyspace.policy),
        ("mem_not_counted_for_evict", 0),
        ("mem_replication_backlog", s.replication.backlog_bytes),
        ("mem_total_replication_buffers", s.replication.backlog_bytes + replicas_out),
        ("mem_clients_slaves", replicas_out),
        ("mem_clients_normal", s.clients_output_bytes() - replicas_out),
        ("mem_cluster_links", 0),
        ("mem_aof_buffer", seg_log.pending_bytes if seg_log is not None else 0),
        ("mem_allocator", "libc"),
        ("active_defrag_running", 0),
        ("lazyfree_pending_objects", 0),
        ("lazyfreed_objects", 0),
    ]


# What Redis 7.0 prints in Persistence when it has no AOF, for what kvd's log has no part in (no fork, so no
# copy-on-write; no RDB loaded at start-up; no modules).
_NO_FORK: tuple[tuple[str, object], ...] = (
    ("current_cow_peak", 0),
    ("current_cow_size", 0),
    ("current_cow_size_age", 0),
    ("current_fork_perc", "0.00"),
    ("current_save_keys_processed", 0),
    ("current_save_keys_total", 0),
)
_NO_AOF: dict[str, object] = {
    "aof_rewrite_in_progress": 0,
    "aof_rewrite_scheduled": 0,
    "aof_last_rewrite_time_sec": -1,
    "aof_current_rewrite_time_sec": -1,
    "aof_last_bgrewrite_status": "ok",
    "aof_rewrites": 0,
    "aof_rewrites_consecutive_failures": 0,
    "aof_last_write_status": "ok",
}
_AOF_ONLY = ("aof_current_size", "aof_base_size", "aof_pending_rewrite", "aof_buffer_length")
_AOF_ONLY += ("aof_pending_bio_fsync", "aof_delayed_fsync")
# The log's counters that Redis's fields above already show: aof_current_size, aof_buffer_length, aof_delayed_fsync.
_SHOWN_BY_REDIS_NAME = {"aof_disk_bytes", "aof_pending_bytes", "aof_delayed_fsyncs"}


def _persistence(s: Server) -> list[tuple[str, object]]:
    """Redis 7.0's fields in its order (a SAVE is an fsync of the log, a maintenance job of the log a rewrite:
    ``SegmentLog.redis_stats``), then kvd's own: the log's segments and counters, and recovery's report."""
    seg_log = s.keyspace.log
    saves = s.saves
    aof = seg_log.redis_stats() if seg_log is not None else _NO_AOF
    rows: list[tuple[str, object]] = [
        ("loading", int(s.loading is not None)),
        ("async_loading", 0),
        *_NO_FORK,
        ("rdb_changes_since_last_save", saves.changes_since_last_save()),
        ("rdb_bgsave_in_progress", int(saves.in_progress)),
        ("rdb_last_save_time", saves.last_save),
        ("rdb_last_bgsave_status", "ok" if saves.last_ok else "err"),
        ("rdb_last_bgsave_time_sec", saves.last_seconds),
        ("rdb_current_bgsave_time_sec", saves.running_seconds()),
        ("rdb_saves", saves.done),
        ("rdb_last_cow_size", 0),
        ("rdb_last_load_keys_expired", 0),
        ("rdb_last_load_keys_loaded", 0),
        ("aof_enabled", 1 if seg_log is not None else 0),
        *((name, aof[name]) for name in _NO_AOF),
        ("aof_last_cow_size", 0),
        ("module_fork_in_progress", 0),
        ("module_fork_last_cow_size", 0),
    ]
    if seg_log is not None:
        rows.extend((name, aof[name]) for name in _AOF_ONLY)
    rows.append(("appendfsync", s.settings.appendfsync if seg_log is not None else "off"))
    if seg_log is not None:
        shown = {name for name, _ in rows} | _SHOWN_BY_REDIS_NAME
        for k, v in seg_log.stats().items():
            name = k if k.startswith("aof_") else f"aof_{k}"
            if name not in shown:
                rows.append((name, v))
    if s.recovery is not None:
        r = s.recovery
        rows.extend(
            [
                ("recovery_keys", r.keys),
                ("recovery_bytes", r.bytes),
                ("recovery_seconds", f"{r.seconds:.3f}"),
                ("recovery_skipped_records", r.skipped_records),
                ("recovery_truncated_bytes", r.truncated_bytes),
            ]
        )
    if s.loading is not None:
        rows.extend(s.loading.info())  # last in the section, as Redis writes them
    return rows


def _stats(s: Server) -> list[tuple[str, object]]:
    """Redis 7.0's fields in its order. The expiry sweep is exact (a heap of deadlines, kvd/store/expiry.py), so
    keys stay past their deadline only when a sweep stops at its limit: ``expired_time_cap_reached_count`` counts
    those sweeps and ``expired_stale_perc`` estimates, after the last one, the share of keys with a TTL that are
    past it. What kvd does not do (defragmentation, resizing reply buffers, evicting over the limit for a while:
    eviction is synchronous) is 0."""
    st = s.stats
    ks = s.keyspace.stats
    ops, kbps_in, kbps_out, kbps_repl_in, kbps_repl_out = st.ops_per_sec.current()
    return [
        ("total_connections_received", st.connections_received),
        ("total_commands_processed", st.commands_processed()),
        ("instantaneous_ops_per_sec", ops),
        ("total_net_input_bytes", st.net_input_bytes),
        ("total_net_output_bytes", st.net_output_bytes),
        ("total_net_repl_input_bytes", st.net_repl_input_bytes),
        ("total_net_repl_output_bytes", st.net_repl_output_bytes),
        ("instantaneous_input_kbps", f"{kbps_in:.2f}"),
        ("instantaneous_output_kbps", f"{kbps_out:.2f}"),
        ("instantaneous_input_repl_kbps", f"{kbps_repl_in:.2f}"),
        ("instantaneous_output_repl_kbps", f"{kbps_repl_out:.2f}"),
        ("rejected_connections", st.rejected_connections),
        ("sync_full", st.sync_full),
        ("sync_partial_ok", s.replication.sync_partial_ok),
        ("sync_partial_err", s.replication.sync_partial_err),
        ("expired_keys", ks.expired_keys),
        ("expired_stale_perc", f"{st.expired_stale_perc:.2f}"),
        ("expired_time_cap_reached_count", st.expire_cycles_capped),
        ("expire_cycle_cpu_milliseconds", round(st.expire_cycle_seconds * 1000)),
        ("evicted_keys", ks.evicted_keys),
        ("evicted_clients", 0),  # no maxmemory-clients
        ("total_eviction_exceeded_time", 0),
        ("current_eviction_exceeded_time", 0),
        ("keyspace_hits", ks.keyspace_hits),
        ("keyspace_misses", ks.keyspace_misses),
        ("pubsub_channels", s.pubsub.count("channel")),
        ("pubsub_patterns", s.pubsub.count("pattern")),
        ("pubsubshard_channels", s.pubsub.count("shard")),  # Redis 7.0 and 7.2 spell it so
        ("latest_fork_usec", 0),  # kvd never forks: a snapshot is a pass over the keys (kvd/store/snapshot.py)
        ("total_forks", 0),
        ("migrate_cached_sockets", len(s.migrate_links)),  # MIGRATE's connections, cached for 10 s
        ("slave_expires_tracked_keys", 0),
        ("active_defrag_hits", 0),
        ("active_defrag_misses", 0),
        ("active_defrag_key_hits", 0),
        ("active_defrag_key_misses", 0),
        ("total_active_defrag_time", 0),
        ("current_active_defrag_time", 0),
        ("tracking_total_keys", len(s.tracking.table) if s.tracking is not None else 0),
        ("tracking_total_items", s.tracking.items if s.tracking is not None else 0),
        ("tracking_total_prefixes", len(s.tracking.prefixes) if s.tracking is not None else 0),
        ("unexpected_error_replies", 0),
        ("total_error_replies", st.error_replies),
        ("dump_payload_sanitizations", 0),  # a string payload has no inner structure to sanitize deeply
        ("total_reads_processed", st.reads_processed),
        ("total_writes_processed", st.writes_processed),
        ("io_threaded_reads_processed", 0),
        ("io_threaded_writes_processed", 0),
        ("reply_buffer_shrinks", 0),
        ("reply_buffer_expands", 0),
        ("client_output_buffer_limit_disconnections", st.output_limit_disconnections),  # Redis 7.2's
        ("acl_access_denied_auth", st.auth_failures),  # Redis 7.2's
    ]


def _replication(s: Server) -> list[tuple[str, object]]:
    feed = s.replication
    link = s.link
    return [
        ("role", "master" if link is None else "slave"),
        *(link.info() if link is not None else ()),
        ("connected_slaves", len(feed.replicas)),
        *((("min_slaves_good_slaves", feed.good_replicas(s.settings.min_replicas_max_lag)),) if s.min_replicas else ()),
        *feed.info(),
        ("master_failover_state", s.failover.state if s.failover is not None else "no-failover"),
        ("master_replid", feed.replid),
        ("master_replid2", feed.replid2),
        ("master_repl_offset", feed.offset),
        ("second_repl_offset", feed.second_offset),
        *feed.backlog_info(),
    ]


def _cpu(s: Server) -> list[tuple[str, object]]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # kvd forks none: 0 unless something else did
    main = resource.getrusage(resource.RUSAGE_THREAD)  # INFO runs on the event loop's thread
    return [
        ("used_cpu_sys", f"{usage.ru_stime:.6f}"),
        ("used_cpu_user", f"{usage.ru_utime:.6f}"),
        ("used_cpu_sys_children", f"{children.ru_stime:.6f}"),
        ("used_cpu_user_children", f"{children.ru_utime:.6f}"),
        ("used_cpu_sys_main_thread", f"{main.ru_stime:.6f}"),
        ("used_cpu_user_main_thread", f"{main.ru_utime:.6f}"),
    ]


def _cluster(s: Server) -> list[tuple[str, object]]:
    return [("cluster_enabled", 0)]


def _keyspace(s: Server) -> list[tuple[str, object]]:
    ks = s.keyspace
    n = len(ks)
    return [("db0", f"keys={n},expires={ks.expires_count},avg_ttl={ks.average_ttl()}")] if n else []


def _kvd(s: Server) -> list[tuple[str, object]]:
    ks = s.keyspace
    st = ks.stats
    ram = ks.ram
    seg_log = ks.log
    disk = seg_log.stats() if seg_log is not None else {}
    return [
        ("tiers", "ram,disk" if seg_log is not None else "ram"),
        ("ram_keys", len(ram.hot)),
        ("ram_bytes", ram.resident_bytes),
        ("ram_hits", st.ram_hits),
        ("ram_evictions", st.ram_demotions),
        # Of those, values whose record the disk budget had dropped: written to the log again as they left RAM.
        ("ram_evictions_relogged", st.relogged),
        # Every key while the log is on: the keys the disk tier holds, save those whose record the disk budget
        # dropped while their value was in RAM (docs/operations.md); counting those would need a count per write.
        ("disk_keys", len(ks) if seg_log is not None else 0),
        ("disk_only_keys", len(ram.cold)),
        ("disk_live_bytes", disk.get("live_bytes", 0)),
        ("disk_bytes", disk.get("disk_bytes", 0)),
        ("disk_hits", st.disk_hits),
        ("disk_evictions", disk.get("disk_evictions", 0)),
        ("disk_corrupt_reads", st.corrupt_reads),
        ("promotions", st.promotions),
        ("recycled_buffers", ks.pool.recycled),
        ("reused_buffers", ks.pool.reused),
        ("misses", st.keyspace_misses),
        ("evicted_keys", st.evicted_keys),
        ("expired_keys", st.expired_keys),
        ("batched_replies", s.stats.batched_replies),
        ("landed_sets", s.stats.landed_sets),
        ("prefix_lookups", s.stats.prefix_lookups),
        ("prefix_keys_hit", s.stats.prefix_keys_hit),
        ("prefix_keys_missed", s.stats.prefix_keys_missed),
        ("shm_loaded_bytes", s.stats.shm_loaded_bytes),
        ("shm_saved_bytes", s.stats.shm_saved_bytes),
    ]


def _connector(s: Server) -> list[tuple[str, object]]:
    return [(f"connector_{k}", v) for k, v in sorted(s.stats.connector.items())]


def _empty(s: Server) -> list[tuple[str, object]]:
    return []


def _commandstats(s: Server) -> list[tuple[str, object]]:
    return [(f"cmdstat_{name}", stat.render()) for name, stat in sorted(s.stats.commands.items())]


def _latencystats(s: Server) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for name, stat in sorted(s.stats.commands.items()):
        if stat.calls:
            p = ",".join(f"p{q:g}={stat.percentile_usec(q):.3f}" for q in LATENCY_PERCENTILES)
            rows.append((f"latency_percentiles_usec_{name}", p))
    return rows


def _errorstats(s: Server) -> list[tuple[str, object]]:
    return [(f"errorstat_{code}", f"count={n}") for code, n in sorted(s.stats.errors.items())]


_BUILDERS = {
    "server": _server,
    "clients": _clients,
    "memory": _memory,
    "persistence": _persistence,
    "stats": _stats,
    "replication": _replication,
    "cpu": _cpu,
    "modules": _empty,
    "errorstats": _errorstats,
    "latencystats": _latencystats,
    "cluster": _cluster,
    "keyspace": _keyspace,
    "kvd": _kvd,
    "connector": _connector,
    "commandstats": _commandstats,
}
