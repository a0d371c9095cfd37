"""Server-wide counters and the INFO report.

Counters are plain integer attributes bumped on the hot path (an attribute increment is the cheapest thing
CPython can do); INFO assembles them, with the keyspace's tier counters and the segment log's own stats, into
Redis's ``# Section`` / ``field:value`` text. Field names follow Redis where a Redis field means the same
thing (so dashboards and ``redis-cli --stat`` work); kvd-specific ones live in the ``kvd`` and ``connector``
sections.
"""

from __future__ import annotations

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

if TYPE_CHECKING:
    from kvd.server import Server

SECTIONS = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "kvd",
    "connector",
)
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ("commandstats",))


class ServerStats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started = time.monotonic()
        self.connections_received = 0
        self.rejected_connections = 0
        self.commands_processed = 0
        self.unknown_commands = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.reads_processed = 0  # buffer_updated calls: one per successful read from a client socket
        self.writes_processed = 0  # reply flushes handed to the transport
        self.batched_replies = 0  # clients whose replies left with others at the end of a loop iteration
        self.landed_sets = 0  # SETs received whole in a buffer of their own, run from the read callback
        self.auth_failures = 0
        self.output_limit_disconnections = 0
        self.prefix_lookups = 0
        self.prefix_keys_hit = 0
        self.prefix_keys_missed = 0
        self.calls: dict[str, int] = {}
        self.connector: dict[str, int] = getattr(self, "connector", {})

    def count_command(self, name: str) -> None:
        calls = self.calls
        calls[name] = calls.get(name, 0) + 1


def _human(n: float) -> str:
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.2f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1024
    return f"{n}"


def render_info(server: Server, sections: list[str]) -> str:
    wanted = list(DEFAULT_SECTIONS) if not sections or sections[0] in ("default", "all", "everything") else sections
    if sections and sections[0] in ("all", "everything"):
        wanted.append("commandstats")
    parts = []
    for name in wanted:
        builder = _BUILDERS.get(name)
        if builder is None:
            continue
        lines = builder(server)
        parts.append(
            f"# {name.capitalize() if name not in ('kvd',) else 'Kvd'}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in lines)
        )
    return "\r\n".join(parts)


def _server(s: Server) -> list[tuple[str, object]]:
    uptime = int(time.time() - s.started_at)
    return [
        ("redis_version", "7.2.0"),
        ("kvd_version", kvd.__version__),
        ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64 if sys.maxsize > 2**32 else 32),
        ("multiplexing_api", s.loop_name),
        ("python_version", platform.python_version()),
        ("python_switch_interval_us", round(sys.getswitchinterval() * 1e6)),  # kvd/gil.py
        ("buffer_calls", buffers.IMPLEMENTATION),  # kvd/buffers.py: c, ctypes or python
        ("receive_path", receive.PATH),  # kvd/protocol/receive.py: c or python
        ("request_parser", parser.SMALL_REQUESTS),  # kvd/protocol/parser.py: c, hiredis or python
        ("record_packer", "python" if writer.pack_run is None else "c"),  # kvd/persist/writer.py
        ("process_id", os.getpid()),
        ("run_id", s.run_id),
        ("tcp_port", s.bound_port),
        ("server_time_usec", time.time_ns() // 1000),
        ("uptime_in_seconds", uptime),
        ("uptime_in_days", uptime // 86400),
        ("executable", sys.argv[0]),
        ("config_file", s.settings.config_file or ""),
    ]


def _clients(s: Server) -> list[tuple[str, object]]:
    return [
        ("connected_clients", len(s.clients)),
        ("maxclients", s.settings.maxclients),
        ("blocked_clients", 0),
        ("clients_waiting_on_disk", sum(1 for c in s.clients.values() if c.busy)),
    ]


def _memory(s: Server) -> list[tuple[str, object]]:
    ram = s.keyspace.ram
    rss = memory.rss_bytes()
    return [
        ("used_memory", ram.used),
        ("used_memory_human", _human(ram.used)),
        ("used_memory_rss", rss),
        ("used_memory_rss_human", _human(rss)),
        ("used_memory_dataset", ram.resident_bytes),
        ("maxmemory", ram.budget),
        ("maxmemory_human", _human(ram.budget)),
        ("maxmemory_policy", s.keyspace.policy),
        ("mem_allocator", "libc"),
    ]


def _persistence(s: Server) -> list[tuple[str, object]]:
    seg_log = s.keyspace.log
    rows: list[tuple[str, object]] = [
        ("loading", 0),
        ("async_loading", 0),
        ("rdb_changes_since_last_save", s.saves.changes_since_last_save()),
        ("rdb_bgsave_in_progress", int(s.saves.in_progress)),
        ("rdb_last_save_time", s.saves.last_save),
        ("rdb_last_bgsave_status", "ok" if s.saves.last_ok else "err"),
        ("aof_enabled", 1 if seg_log is not None else 0),
        ("appendfsync", s.settings.appendfsync if seg_log is not None else "off"),
    ]
    if seg_log is not None:
        rows.extend((f"aof_{k}" if not k.startswith("aof_") else k, v) for k, v in seg_log.stats().items())
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
    return rows


def _stats(s: Server) -> list[tuple[str, object]]:
    st = s.stats
    ks = s.keyspace.stats
    return [
        ("total_connections_received", st.connections_received),
        ("total_commands_processed", st.commands_processed),
        ("instantaneous_ops_per_sec", 0),
        ("total_net_input_bytes", st.net_input_bytes),
        ("total_net_output_bytes", st.net_output_bytes),
        ("total_reads_processed", st.reads_processed),
        ("total_writes_processed", st.writes_processed),
        ("rejected_connections", st.rejected_connections),
        ("expired_keys", ks.expired_keys),
        ("evicted_keys", ks.evicted_keys),
        ("keyspace_hits", ks.keyspace_hits),
        ("keyspace_misses", ks.keyspace_misses),
        ("total_error_replies", st.unknown_commands),
        ("unexpected_error_replies", 0),
        ("client_output_buffer_limit_disconnections", st.output_limit_disconnections),
        ("acl_access_denied_auth", st.auth_failures),
    ]


def _replication(s: Server) -> list[tuple[str, object]]:
    return [
        ("role", "master"),
        ("connected_slaves", 0),
        ("master_failover_state", "no-failover"),
        ("master_replid", s.run_id),
        ("master_repl_offset", 0),
        ("repl_backlog_active", 0),
    ]


def _cpu(s: Server) -> list[tuple[str, object]]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return [("used_cpu_sys", f"{usage.ru_stime:.6f}"), ("used_cpu_user", f"{usage.ru_utime:.6f}")]


def _cluster(s: Server) -> list[tuple[str, object]]:
    return [("cluster_enabled", 0)]


def _keyspace(s: Server) -> list[tuple[str, object]]:
    n = len(s.keyspace)
    return [("db0", f"keys={n},expires={s.keyspace.expires_count},avg_ttl=0")] if n else []


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
    ]


def _connector(s: Server) -> list[tuple[str, object]]:
    return [(f"connector_{k}", v) for k, v in sorted(s.stats.connector.items())]


def _empty(s: Server) -> list[tuple[str, object]]:
    return []


def _commandstats(s: Server) -> list[tuple[str, object]]:
    return [(f"cmdstat_{name}", f"calls={n},usec=0,usec_per_call=0.00") for name, n in sorted(s.stats.calls.items())]


_BUILDERS = {
    "server": _server,
    "clients": _clients,
    "memory": _memory,
    "persistence": _persistence,
    "stats": _stats,
    "replication": _replication,
    "cpu": _cpu,
    "modules": _empty,
    "errorstats": _empty,
    "cluster": _cluster,
    "keyspace": _keyspace,
    "kvd": _kvd,
    "connector": _connector,
    "commandstats": _commandstats,
}
