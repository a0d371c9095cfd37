"""MEMORY: what a key and the server cost in RAM (Redis ``object.c``, ``memoryCommand``).

The numbers are the RAM tier's own accounting (``kvd/store/ram.py``), the same that ``maxmemory`` is checked
against and INFO's ``used_memory`` reports: a key is charged its bytes plus a fixed per-entry overhead, and
its value its bytes plus a fixed overhead while it is resident. A value demoted to the disk tier costs RAM
only for its key, so MEMORY USAGE of a cold key is small: its bytes are on disk (``redis-cli --memkeys``
reports RAM, as it does against Redis). MEMORY STATS carries Redis's field names where kvd has the quantity,
zero where kvd has no such part (replication, scripting, cluster), and a few of kvd's own (``kvd.*``).
MEMORY PURGE empties the buffer pool and asks glibc to return free heap pages; MALLOC-STATS is glibc's
``mallinfo2``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd import memory
from kvd.protocol import errors
from kvd.protocol.errors import CommandError

from .args import lower, parse_int
from .registry import LOADING, READONLY, STALE, command, run_subcommand, subcommand_help

if TYPE_CHECKING:
    from kvd.connection import Client

G = "server"


@command(
    "memory",
    -2,
    "",
    group=G,
    since="4.0.0",
    summary="A container for memory diagnostics commands.",
    usage="subcommand [argument ...]",
    complexity="Depends on subcommand.",
)
def memory_(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "memory")


@command(
    "usage",
    -3,
    READONLY,
    (2, 2, 1),
    group=G,
    since="4.0.0",
    parent="memory",
    summary="Estimates the memory usage of a key.",
    usage="key [SAMPLES count]",
    key_flags="RO",
    complexity="O(N) where N is the number of samples.",
)
def memory_usage(c: Client, argv: list[Any]) -> None:
    i = 3
    while i < len(argv):  # Redis checks the options before it looks at the key
        if lower(argv[i]) == b"samples" and i + 1 < len(argv):
            if parse_int(argv[i + 1]) < 0:
                raise CommandError(errors.SYNTAX)
            i += 2  # a string has nothing to sample
        else:
            raise CommandError(errors.SYNTAX)
    key = bytes(argv[2])
    entry = c.keyspace.lookup(key)
    if entry is None:
        c.reply.null()
        return
    ram = c.keyspace.ram
    c.reply.integer(ram.key_charge(key) + (ram.value_charge(entry.value) if entry.value is not None else 0))


@command(
    "stats",
    2,
    "",
    group=G,
    since="4.0.0",
    parent="memory",
    summary="Returns details about memory usage.",
    tips="nondeterministic_output request_policy:all_shards response_policy:special",
)
def memory_stats(c: Client, argv: list[Any]) -> None:
    ks = c.keyspace
    ram = ks.ram
    keys = len(ks)
    rss = memory.rss_bytes()
    seg_log = ks.log
    c.reply.str_map(
        [
            ("total.allocated", ram.used),
            ("replication.backlog", 0),
            ("clients.slaves", 0),
            ("clients.normal", c.server.clients_output_bytes()),
            ("cluster.links", 0),
            ("aof.buffer", seg_log.stats()["pending_bytes"] if seg_log is not None else 0),
            ("lua.caches", 0),
            ("functions.caches", 0),
            ("overhead.total", ram.overhead),
            ("keys.count", keys),
            ("keys.bytes-per-key", ram.used // keys if keys else 0),
            ("dataset.bytes", ram.resident_bytes),
            ("dataset.percentage", 100.0 * ram.resident_bytes / ram.used if ram.used else 0.0),
            ("rss-overhead.ratio", rss / ram.used if ram.used else 0.0),
            ("rss-overhead.bytes", rss - ram.used),
            ("kvd.maxmemory", ram.budget),
            ("kvd.cold-keys", len(ram.cold)),
            ("kvd.buffer-pool.bytes", ks.pool.held),
        ]
    )


@command(
    "doctor",
    2,
    "",
    group=G,
    since="4.0.0",
    parent="memory",
    summary="Outputs a memory problems report.",
    tips="nondeterministic_output request_policy:all_shards response_policy:special",
)
def memory_doctor(c: Client, argv: list[Any]) -> None:
    ks = c.keyspace
    ram = ks.ram
    rss = memory.rss_bytes()
    lines = [f"RAM tier: {ram.used} bytes accounted for {len(ks)} keys ({len(ram.cold)} of them cold, on disk)."]
    if ram.budget:
        lines.append(f"maxmemory {ram.budget} bytes: {100 * ram.used / ram.budget:.1f}% used.")
        if ks.stats.evicted_keys:
            lines.append(
                f"{ks.stats.evicted_keys} keys were evicted: raise maxmemory, or turn persistence on so that values "
                "are demoted to disk instead of deleted."
            )
    else:
        lines.append("No maxmemory: the RAM tier grows without bound; set one to keep kvd within the machine.")
    if ram.used and rss > 2 * ram.used + (256 << 20):
        lines.append(
            f"The process holds {rss} bytes, more than twice what the keys and values account for: buffers of "
            f"replies and requests in flight, the buffer pool ({ks.pool.held} bytes) or freed heap kept for "
            "reuse. MEMORY PURGE returns the last two to the system."
        )
    else:
        lines.append(f"The process holds {rss} bytes: no sign of memory kept beyond the dataset.")
    c.reply.verbatim("\n".join(lines) + "\n")


@command(
    "purge",
    2,
    "",
    group=G,
    since="4.0.0",
    parent="memory",
    summary="Empties the buffer pool and asks the allocator to release free memory.",
    tips="request_policy:all_shards response_policy:all_succeeded",
    complexity="Depends on how much memory is allocated, could be slow",
)
def memory_purge(c: Client, argv: list[Any]) -> None:
    c.keyspace.pool.clear()
    memory.release_free_memory()
    c.reply.ok()


@command(
    "malloc-stats",
    2,
    "",
    group=G,
    since="4.0.0",
    parent="memory",
    summary="Returns the allocator's statistics.",
    tips="nondeterministic_output request_policy:all_shards response_policy:special",
    complexity="Depends on how much memory is allocated, could be slow",
)
def memory_malloc_stats(c: Client, argv: list[Any]) -> None:
    stats = memory.allocator_stats()
    if stats is None:
        c.reply.text("Stats not supported for the current allocator")  # Redis's words without jemalloc
        return
    c.reply.verbatim("".join(f"{name}: {value}\n" for name, value in stats.items()))


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="4.0.0",
    parent="memory",
    summary="Returns helpful text about the different subcommands.",
)
def memory_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "memory")
