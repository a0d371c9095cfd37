"""Values that may still be on disk: ``then`` for commands that only read one, ``with_current`` for those that
read a value and then write.

A cold value (demoted from RAM, still on disk) is read off the event loop, and other clients run meanwhile
(``Keyspace.get``). A command that writes what it read (APPEND, INCR, SETRANGE, RENAME, COPY) must not write a
result computed from a value that another client replaced during that read: Redis, single-threaded with every
value in memory, can never do that, and a lost update is worse than a slow one. ``with_current`` reads again
when the key changed while it waited, and hands the command the value and deadline of one and the same write.
"""

from __future__ import annotations

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


def with_current(c: Client, key: bytes, use: Callable[[Value | None, int], None]) -> Any:
    """Call ``use(value, deadline)`` with the key's value and deadline (None, 0: missing), as one consistent pair.

    A cold value is read from disk first, and the event loop serves other clients meanwhile; if the key was
    rewritten, deleted or expired during that read, the look-up starts over, so ``use`` never pairs an old value
    with a new key. Returns None when done at once, else the awaitable the connection waits for."""
    ks = c.keyspace
    entry = ks.lookup(key)
    if entry is None:
        use(None, 0)
        return None
    value = ks.get(key)
    if value is None or isinstance(value, bytes | bytearray | memoryview):
        use(value, entry.expire_at if value is not None else 0)  # None: it expired in between
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
            entry, value = current, ks.get(key)
            if value is None or isinstance(value, bytes | bytearray | memoryview):
                use(value, current.expire_at if value is not None else 0)
                return

    return read_then_use()
