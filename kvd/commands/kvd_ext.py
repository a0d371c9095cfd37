"""kvd's own commands for KV-cache clients, in the ``KVD.`` namespace like a Redis module's.

``KVD.PREFIXLEN key [key ...]`` answers the scheduler's question, "how many leading chunks of this prompt are
cached?", in one round trip: the count of leading keys that exist. LMCache's Redis path spends one EXISTS round
trip per chunk for the same answer. As a side effect the hits are touched in the LRU and cold ones start
loading from disk into RAM, so the GETs that follow a positive answer are served from memory.

``KVD.REPORT name value [name value ...]`` lets connectors add their client-side counters (hit tokens, load
time, ...) to the ``# Connector`` section of INFO, so one INFO shows both sides of the cache.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kvd.protocol.errors import CommandError

from .args import parse_int
from .registry import FAST, LOADING, READONLY, STALE, command

if TYPE_CHECKING:
    from kvd.connection import Client

_COUNTER = re.compile(rb"^[a-z][a-z0-9_]{0,63}$")
MAX_COUNTERS = 64


@command(
    "kvd.prefixlen",
    -2,
    f"{READONLY} {FAST}",
    (1, -1, 1),
    group="kvd",
    since="0.1.0",
    complexity="O(N)",
    summary="Returns how many leading keys of the list exist (the cached prefix length).",
    usage="key [key ...]",
    key_flags="RO",  # reads whether each exists, as EXISTS, not the values
)
def prefixlen(c: Client, argv: list[Any]) -> None:
    found = c.keyspace.prefix_length([bytes(k) for k in argv[1:]])
    stats = c.server.stats
    stats.prefix_lookups += 1
    stats.prefix_keys_hit += found
    stats.prefix_keys_missed += len(argv) - 1 - found
    c.reply.integer(found)


@command(
    "kvd.report",
    -3,
    f"{FAST} {LOADING} {STALE}",  # the connector reports while a replica loads
    group="kvd",
    since="0.1.0",
    complexity="O(N)",
    summary="Adds client-side counters to the Connector section of INFO.",
    usage="counter increment [counter increment ...]",
)
def report(c: Client, argv: list[Any]) -> None:
    if len(argv) % 2 == 0:
        raise CommandError("ERR wrong number of arguments for 'kvd.report' command")
    counters = c.server.stats.connector
    updates = []
    for i in range(1, len(argv), 2):
        name = bytes(argv[i]).lower()
        if not _COUNTER.match(name):
            raise CommandError("ERR counter names are 1-64 characters of a-z, 0-9 and _, starting with a letter")
        updates.append((name.decode(), parse_int(argv[i + 1])))
    for name, value in updates:
        if name not in counters and len(counters) >= MAX_COUNTERS:
            raise CommandError(f"ERR too many connector counters (at most {MAX_COUNTERS})")
        counters[name] = counters.get(name, 0) + value
    c.reply.ok()
