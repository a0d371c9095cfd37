"""SLOWLOG and LATENCY: which commands were slow, and when the server stalled (Redis ``slowlog.c``, ``latency.c``).

The data lives in ``kvd/slowlog.py``, ``kvd/latency.py`` and the per-command histograms of ``kvd/stats.py``;
the connection feeds them after every command. These handlers only read, reset and format it, with Redis's
reply shapes, so redis-cli, redis_exporter and other monitoring tools read kvd as they read Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError

from .args import parse_int, text
from .registry import ADMIN, COMMANDS, LOADING, NOSCRIPT, STALE, command, run_subcommand, subcommand_help

if TYPE_CHECKING:
    from kvd.connection import Client

G = "server"
_COUNT_RANGE = "ERR count should be greater than or equal to -1"

# -- SLOWLOG -------------------------------------------------------------------------------------------------


@command(
    "slowlog",
    -2,
    "",
    group=G,
    since="2.2.12",
    summary="A container for slow log commands.",
    usage="subcommand [argument ...]",
    complexity="Depends on subcommand.",
)
def slowlog(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "slowlog")


@command(
    "get",
    -2,
    f"{ADMIN} {LOADING} {STALE}",
    group=G,
    since="2.2.12",
    parent="slowlog",
    summary="Returns the slow log's entries.",
    usage="[count]",
    complexity="O(N) where N is the number of entries returned",
    tips="request_policy:all_nodes nondeterministic_output",
)
def slowlog_get(c: Client, argv: list[Any]) -> None:
    count = 10
    if len(argv) == 3:
        count = parse_int(argv[2], _COUNT_RANGE)  # Redis gives the range's message for "x" too
        if count < -1:
            raise CommandError(_COUNT_RANGE)
    elif len(argv) > 3:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "slowlog"))
    entries = c.server.slowlog.latest(count)
    reply = c.reply
    reply.array(len(entries))
    for entry in entries:
        reply.array(6)
        reply.integer(entry.id)
        reply.integer(entry.time)
        reply.integer(entry.duration_us)
        reply.bulk_array(entry.args)
        reply.bulk(entry.peer.encode())
        reply.bulk(entry.name)


@command(
    "len",
    2,
    f"{ADMIN} {LOADING} {STALE}",
    group=G,
    since="2.2.12",
    parent="slowlog",
    summary="Returns the number of entries in the slow log.",
    tips="request_policy:all_nodes response_policy:agg_sum nondeterministic_output",
)
def slowlog_len(c: Client, argv: list[Any]) -> None:
    c.reply.integer(len(c.server.slowlog))


@command(
    "reset",
    2,
    f"{ADMIN} {LOADING} {STALE}",
    group=G,
    since="2.2.12",
    parent="slowlog",
    summary="Clears all entries from the slow log.",
    tips="request_policy:all_nodes response_policy:all_succeeded",
    complexity="O(N) where N is the number of entries in the slowlog",
)
def slowlog_reset(c: Client, argv: list[Any]) -> None:
    c.server.slowlog.reset()
    c.reply.ok()


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="6.2.0",
    parent="slowlog",
    summary="Shows helpful text about the different subcommands.",
)
def slowlog_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "slowlog")


# -- LATENCY -------------------------------------------------------------------------------------------------


@command(
    "latency",
    -2,
    "",
    group=G,
    since="2.8.13",
    summary="A container for latency diagnostics commands.",
    usage="subcommand [argument ...]",
    complexity="Depends on subcommand.",
)
def latency(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "latency")


@command(
    "latest",
    2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="latency",
    summary="Returns the latest latency samples for all events.",
    tips="nondeterministic_output request_policy:all_nodes response_policy:special",
)
def latency_latest(c: Client, argv: list[Any]) -> None:
    rows = c.server.latency.latest()
    reply = c.reply
    reply.array(len(rows))
    for event, when, ms, max_ms in rows:
        reply.array(4)
        reply.bulk(event.encode())
        reply.integer(when)
        reply.integer(ms)
        reply.integer(max_ms)


@command(
    "history",
    3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="latency",
    summary="Returns timestamp-latency samples for an event.",
    usage="event",
    tips="nondeterministic_output request_policy:all_nodes response_policy:special",
)
def latency_history(c: Client, argv: list[Any]) -> None:
    samples = c.server.latency.history(text(argv[2]))
    reply = c.reply
    reply.array(len(samples))
    for when, ms in samples:
        reply.array(2)
        reply.integer(when)
        reply.integer(ms)


@command(
    "graph",
    3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="latency",
    summary="Returns a latency graph for an event.",
    usage="event",
    tips="nondeterministic_output request_policy:all_nodes response_policy:special",
)
def latency_graph(c: Client, argv: list[Any]) -> None:
    event = text(argv[2])
    graph = c.server.latency.graph(event)
    if graph is None:
        raise CommandError(f"ERR No samples available for event '{event}'")
    c.reply.verbatim(graph)


@command(
    "doctor",
    2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="latency",
    summary="Returns a human-readable latency analysis report.",
    tips="nondeterministic_output request_policy:all_nodes response_policy:special",
)
def latency_doctor(c: Client, argv: list[Any]) -> None:
    c.reply.verbatim(c.server.latency.doctor(c.server.settings.slowlog_log_slower_than))


@command(
    "reset",
    -2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="latency",
    summary="Resets the latency data for one or more events.",
    usage="[event [event ...]]",
    tips="request_policy:all_nodes response_policy:all_succeeded",
)
def latency_reset(c: Client, argv: list[Any]) -> None:
    events = [text(a) for a in argv[2:]] or None
    c.reply.integer(c.server.latency.reset(events))


@command(
    "histogram",
    -2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="latency",
    summary="Returns the cumulative distribution of latencies of a subset or all commands.",
    usage="[command [command ...]]",
    tips="nondeterministic_output request_policy:all_nodes response_policy:special",
    complexity="O(N) where N is the number of commands with latency information being retrieved.",
)
def latency_histogram(c: Client, argv: list[Any]) -> None:
    """Every command (and subcommand) with calls, or those named; an unknown name is skipped, as in Redis."""
    table = c.server.stats.commands
    if len(argv) == 2:
        names = [name for name, stat in table.items() if stat.calls]
    else:
        names = []
        for raw in argv[2:]:
            name = text(raw).lower()
            cmd = COMMANDS.get(name.encode())
            if cmd is None:
                continue
            for full in (name, *(f"{name}|{sub}" for sub in cmd.subcommands)):
                stat = table.get(full)
                if stat is not None and stat.calls and full not in names:
                    names.append(full)
    reply = c.reply
    reply.map(len(names))
    for name in names:
        stat = table[name]
        reply.bulk(name.encode())
        reply.map(2)
        reply.bulk(b"calls")
        reply.integer(stat.calls)
        reply.bulk(b"histogram_usec")
        rows = stat.histogram_usec()
        reply.map(len(rows))
        for usec, cumulative in rows:
            reply.integer(usec)
            reply.integer(cumulative)


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="latency",
    summary="Shows helpful text about the different subcommands.",
)
def latency_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "latency")
