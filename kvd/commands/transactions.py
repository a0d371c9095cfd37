"""MULTI / EXEC / DISCARD / WATCH / UNWATCH (Redis ``multi.c``).

redis-py's ``pipeline()`` wraps its commands in MULTI/EXEC by default, so a Redis-compatible server needs them even
when nobody asks for transactions by name. Commands after MULTI are checked (existence, arity) and queued with
``+QUEUED``; a bad one makes EXEC answer ``-EXECABORT``. Memory is checked as Redis checks it, before queueing
(every command) and before EXEC (a queue with a ``denyoom`` command), never between the commands EXEC runs: a
transaction refused for memory is refused whole (``Client._out_of_memory``). EXEC runs the queue in order with
nothing from other clients in between, with one exception: a command that reads a value from the disk tier yields
the event loop while it reads (like any cold GET), so a transaction over cold values is ordered but not isolated
from writers during that read. WATCH remembers how many times the keyspace had changed each key; every write,
delete, expiry, eviction or TTL change of a watched key counts one more (``Keyspace.intact``), so EXEC replies
with a null array if any watched key was changed since, even back to what it was (Redis's dirty flag). On a
replica, which keeps keys past their deadline until its primary's DEL, a watched key whose deadline passes fails
the EXEC too, and the DEL of one already past its deadline at WATCH does not, as in Redis 7.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol.errors import CommandError

from .registry import ALLOW_BUSY, COMMANDS, FAST, LOADING, NOSCRIPT, SKIP_SLOWLOG, STALE, command

if TYPE_CHECKING:
    from kvd.connection import Client

G = "transactions"


@command(
    "multi",
    1,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {ALLOW_BUSY}",
    group=G,
    since="1.2.0",
    summary="Starts a transaction.",
)
def multi(c: Client, argv: list[Any]) -> None:
    if c.in_multi:
        raise CommandError("ERR MULTI calls can not be nested")
    c.begin_multi()
    c.reply.ok()


@command(
    "exec",
    1,
    f"{NOSCRIPT} {LOADING} {STALE} {SKIP_SLOWLOG}",
    group=G,
    since="1.2.0",
    complexity="Depends on commands in the transaction",
    summary="Executes all commands in a transaction.",
)
def exec_(c: Client, argv: list[Any]) -> Any:
    if not c.in_multi:
        c.feed_monitors(COMMANDS[b"exec"], argv)  # it ran, so MONITOR shows it, as Redis does
        raise CommandError("ERR EXEC without MULTI")
    return c.exec_multi(argv)  # shows EXEC itself, after the commands it runs


@command(
    "discard",
    1,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {ALLOW_BUSY}",
    group=G,
    since="2.0.0",
    summary="Discards a transaction.",
    complexity="O(N), when N is the number of queued commands",
)
def discard(c: Client, argv: list[Any]) -> None:
    if not c.in_multi:
        raise CommandError("ERR DISCARD without MULTI")
    c.discard_multi()
    c.reply.ok()


@command(
    "watch",
    -2,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {ALLOW_BUSY}",
    (1, -1, 1),
    group=G,
    since="2.2.0",
    complexity="O(1) for every key.",
    summary="Monitors changes to keys to determine the execution of a transaction.",
    usage="key [key ...]",
    key_flags="RO",
)
def watch(c: Client, argv: list[Any]) -> None:
    if c.in_multi:
        raise CommandError("ERR WATCH inside MULTI is not allowed")
    c.watch([bytes(k) for k in argv[1:]])
    c.reply.ok()


@command(
    "unwatch",
    1,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {ALLOW_BUSY}",
    group=G,
    since="2.2.0",
    summary="Forgets about all watched keys of a transaction.",
)
def unwatch(c: Client, argv: list[Any]) -> None:
    c.unwatch()
    c.reply.ok()
