"""Values that may still be on disk: ``then`` for commands that only read one, ``with_current`` for those that
read a value and then write, ``with_all`` for BITOP, which reads several and writes one.

A cold value (demoted from RAM, still on disk) is read off the event loop, and other clients run meanwhile
(``Keyspace.get``). A command that writes what it read (APPEND, INCR, SETRANGE, RENAME, COPY) must not write a
result computed from a value that another client replaced during that read: Redis, single-threaded with every
value in memory, can never do that, and a lost update is worse than a slow one. ``with_current`` reads again
when the key changed while it waited, and hands the command the value and deadline of one and the same write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvd.store.keyspace import Value

if TYPE_CHECKING:
    from kvd.connection import Client


def then(value: Any, use: Callable[[Any], None]) -> Any:
    """Call ``use`` with a value that may still be on disk. Returns None when done, or the awaitable the
    connection must wait for (cold values are read off the event loop, see ``Keyspace.get``)."""
    if value is None or isinstance(value, bytes | bytearray | memoryview):
        use(value)
        return None

    async def finish() -> None:
        use(await value)

    return finish()


def with_current(c: Client, key: bytes, use: Callable[[Value | None, int], None], read: bool = False) -> Any:
    """Call ``use(value, deadline)`` with the key's value and deadline (None, 0: missing), as one consistent pair.

    A cold value is read from disk first, and the event loop serves other clients meanwhile; if the key was
    rewritten, deleted or expired during that read, the look-up starts over, so ``use`` never pairs an old value
    with a new key. Returns None when done at once, else the awaitable the connection waits for. The look-up is
    a write's (no keyspace hit or miss in INFO), or with ``read`` a read's, as COPY's source is in Redis."""
    ks = c.keyspace
    entry = ks.lookup_read(key) if read else ks.lookup(key)
    if entry is None:
        use(None, 0)
        return None
    value = ks.value_of(key, entry)
    if isinstance(value, bytes | bytearray | memoryview):
        use(value, entry.expire_at)
        return None

    async def read_then_use() -> None:
        nonlocal entry, value
        while True:
            loc = entry.loc
            loaded = await value
            current = ks.lookup(key)
            if current is None or (current is entry and current.loc == loc and loaded is not None):
                use(loaded if current is not None else None, current.expire_at if current is not None else 0)
                return
            entry, value = current, ks.value_of(key, current)
            if isinstance(value, bytes | bytearray | memoryview):
                use(value, current.expire_at)
                return

    return read_then_use()


def with_all(c: Client, keys: list[bytes], use: Callable[[list[Value | None]], None]) -> Any:
    """Call ``use(values)`` with the values of ``keys`` (None: missing) as they all were at one moment: BITOP's
    sources, whose result is written to another key.

    Cold values are read first, concurrently; if any key was rewritten, deleted or expired while they were read,
    every key is looked up again, as ``with_current`` does for one. Each look-up counts a hit or a miss."""
    ks = c.keyspace

    def snapshot() -> tuple[list[Any], list[tuple[Any, Any]]]:
        marks = []
        for key in keys:
            entry = ks.lookup(key)
            marks.append((entry, entry.loc if entry is not None else None))
        return [ks.get(key) for key in keys], marks

    def resident(value: Any) -> bool:
        return value is None or isinstance(value, bytes | bytearray | memoryview)

    values, marks = snapshot()
    if all(resident(v) for v in values):
        use(values)
        return None

    async def read_then_use() -> None:
        nonlocal values, marks
        while True:
            pending = [v for v in values if not resident(v)]
            loaded = iter(await asyncio.gather(*pending))
            values = [v if resident(v) else next(loaded) for v in values]
            unchanged = all(
                ks.lookup(key) is entry and (entry is None or (entry.loc == loc and value is not None))
                for key, value, (entry, loc) in zip(keys, values, marks, strict=True)
            )
            if unchanged:
                use(values)
                return
            values, marks = snapshot()
            if all(resident(v) for v in values):
                use(values)
                return

    return read_then_use()
