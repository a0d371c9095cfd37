"""Server-assisted client-side caching: CLIENT TRACKING and its invalidation messages (Redis's ``tracking.c``).

A client that turned tracking on may keep the values it reads in its own memory; kvd tells it when one of them
changes, so that it drops its copy. Two modes, as in Redis:

* default: after each read-only command of a tracking client, the command's keys go into the tracking table,
  key -> the ids of the clients that read it. The first change to the key (a write, a delete, an expiry, an
  eviction, a new deadline) sends each of them ``invalidate [key]`` once and forgets the key, until they read it
  again. OPTIN tracks only the keys of the command after ``CLIENT CACHING yes``, OPTOUT all but those after
  ``CLIENT CACHING no``; as in Redis, "the command after" is a whole MULTI ... EXEC when MULTI follows, and a
  command that is refused, unknown or fails uses it up too (``Client._caching_used``).
* BCAST: the client names prefixes (none: every key) and hears about every changed key that starts with one, read
  or not. The keys changed during one loop iteration go out together at its end, one message per prefix.

Invalidations travel as RESP3 pushes (``>2 invalidate [keys]``), or, for a RESP2 client, as pub/sub messages on
``__redis__:invalidate`` to another connection named with REDIRECT that is in the subscribed context. A FLUSHALL
or FLUSHDB sends each tracking client one invalidation with a null instead of keys: everything. NOLOOP leaves out
the changes a client made itself. An invalidation for a client whose command is still running waits until that
command has answered (``Client.push_invalidation``), so it never arrives ahead of the reply it invalidates; this
includes a read that waits for the disk, which is what keeps a read of a cold value and a write that lands during
it from leaving a stale value in the client's cache.

Cost: nothing to clients that do not track, and to the keyspace one test of ``Keyspace.tracking`` per change
until the first client turns tracking on. With tracking on, O(keys) per read-only command of a tracking client,
O(readers + prefixes) per change. The table holds at most ``tracking-table-max-keys`` keys; past it the oldest
keys are invalidated and forgotten, as Redis evicts table entries.

kvd differs from Redis in one place: when a tracking client's own write first waits for the disk (APPEND of a
cold value, say), NOLOOP does not recognise the change as its own, and the client is told about it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvd.connection import Client

CHANNEL = b"__redis__:invalidate"
_PUSH_HEAD = b">2\r\n$10\r\ninvalidate\r\n"
_MESSAGE_HEAD = b"*3\r\n$7\r\nmessage\r\n$20\r\n" + CHANNEL + b"\r\n"
NULL = {2: b"$-1\r\n", 3: b"_\r\n"}


def _key_array(keys: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(keys) + b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in keys)


class ClientTracking:
    """One client's CLIENT TRACKING mode (None on the client while tracking is off)."""

    __slots__ = ("bcast", "broken", "caching", "noloop", "optin", "optout", "prefixes", "redirect")

    def __init__(self, redirect: int, bcast: bool, optin: bool, optout: bool, noloop: bool) -> None:
        self.redirect = redirect  # client id that receives the invalidations (0: this client)
        self.bcast = bcast
        self.optin = optin
        self.optout = optout
        self.noloop = noloop
        self.caching = False  # CLIENT CACHING yes (OPTIN) / no (OPTOUT) given for the next command
        self.broken = False  # the redirect client went away
        self.prefixes: dict[bytes, None] = {}  # BCAST prefixes, in the order given

    def tracks_next_command(self) -> bool:
        return not ((self.optin and not self.caching) or (self.optout and self.caching))

    def flags(self) -> list[bytes]:
        """CLIENT TRACKINGINFO's flags after ``on``, in Redis's order."""
        out = [b"bcast"] if self.bcast else []
        if self.optin:
            out += [b"optin", b"caching-yes"] if self.caching else [b"optin"]
        if self.optout:
            out += [b"optout", b"caching-no"] if self.caching else [b"optout"]
        if self.noloop:
            out.append(b"noloop")
        if self.broken:
            out.append(b"broken_redirect")
        return out


class _Prefix:
    """A BCAST prefix: who listens to it, and the keys changed under it in this iteration (-> their writer)."""

    __slots__ = ("clients", "keys")

    def __init__(self) -> None:
        self.clients: dict[Client, None] = {}
        self.keys: dict[bytes, Client | None] = {}


class Tracking:
    def __init__(self, clients: dict[int, Client], max_keys: int) -> None:
        self.clients = clients  # the server's id -> client map, to find readers and redirect targets
        self.max_keys = max_keys  # tracking-table-max-keys (0: no limit)
        self.table: dict[bytes, dict[int, None]] = {}  # key -> ids of the clients that read it (default mode)
        self.items = 0  # (key, client) pairs in the table: INFO tracking_total_items
        self.prefixes: dict[bytes, _Prefix] = {}
        self.tracking_clients = 0
        self.writer: Client | None = None  # the tracking client whose command is running (NOLOOP)
        self._loop = asyncio.get_running_loop()  # made by CLIENT TRACKING, on the server's loop
        self._broadcast_due = False

    # -- CLIENT TRACKING on / off ------------------------------------------------------------------------------

    def enable(self, client: Client, mode: ClientTracking, prefixes: list[bytes]) -> None:
        if client.tracking is None:
            self.tracking_clients += 1
        elif client.tracking.bcast:
            mode.prefixes = client.tracking.prefixes  # ON again in BCAST mode adds prefixes to the ones it has
        client.tracking = mode
        client.update_special()
        if mode.bcast:
            for prefix in prefixes or [b""]:
                if prefix not in mode.prefixes:
                    mode.prefixes[prefix] = None
                self.prefixes.setdefault(prefix, _Prefix()).clients[client] = None

    def disable(self, client: Client) -> None:
        """Tracking off (CLIENT TRACKING off, RESET, disconnect). The table forgets the client lazily: its id is
        skipped, and dropped with the key, at the key's next change, as Redis does."""
        mode = client.tracking
        if mode is None:
            return
        for prefix in mode.prefixes:
            state = self.prefixes.get(prefix)
            if state is not None:
                state.clients.pop(client, None)
                if not state.clients:
                    del self.prefixes[prefix]
        client.tracking = None
        client.update_special()
        self.tracking_clients -= 1

    # -- reads ---------------------------------------------------------------------------------------------------

    def remember(self, client: Client, keys: list[bytes]) -> None:
        """A default-mode client read ``keys``: tell it about their next change."""
        table = self.table
        cid = client.id
        for key in keys:
            readers = table.get(key)
            if readers is None:
                readers = table[key] = {}
            if cid not in readers:
                readers[cid] = None
                self.items += 1
        if self.max_keys and len(table) > self.max_keys:
            self._limit()

    def _limit(self) -> None:
        """Past tracking-table-max-keys: the oldest keys are invalidated for their readers and forgotten."""
        while len(self.table) > self.max_keys:
            self._invalidate_readers(next(iter(self.table)))

    # -- changes -------------------------------------------------------------------------------------------------

    def invalidate(self, key: bytes) -> None:
        """``key`` changed (Redis's ``trackingInvalidateKey``, from ``signalModifiedKey``)."""
        if self.prefixes:
            writer = self.writer
            for prefix, state in self.prefixes.items():
                if key.startswith(prefix):
                    state.keys[key] = writer
                    if not self._broadcast_due:
                        self._broadcast_due = True
                        self._loop.call_soon(self._broadcast)
        if key in self.table:
            self._invalidate_readers(key)

    def _invalidate_readers(self, key: bytes) -> None:
        readers = self.table.pop(key)
        self.items -= len(readers)
        for cid in readers:
            client = self.clients.get(cid)
            if client is None or client.tracking is None or client.tracking.bcast:
                continue  # gone, tracking off, or switched to BCAST since it read the key
            if client.tracking.noloop and client is self.writer:
                continue
            self._send(client, b"*1\r\n$%d\r\n%s\r\n" % (len(key), key))

    def flush(self) -> None:
        """FLUSHALL / FLUSHDB: every tracking client drops everything (a null instead of keys); the table empties."""
        for client in list(self.clients.values()):
            if client.tracking is not None:
                self._send(client, NULL[client.reply.proto])
        self.table.clear()
        self.items = 0

    def _broadcast(self) -> None:
        """End of the loop iteration: each BCAST prefix's changed keys to its clients, one message each."""
        self._broadcast_due = False
        for _, state in sorted(self.prefixes.items()):  # Redis walks prefixes and keys in a radix tree: sorted
            if not state.keys:
                continue
            changed, state.keys = dict(sorted(state.keys.items())), {}
            shared = _key_array(list(changed))
            for client in list(state.clients):
                if client.tracking is None:
                    continue
                if client.tracking.noloop:
                    own = [k for k, writer in changed.items() if writer is not client]
                    if own:
                        self._send(client, _key_array(own))
                else:
                    self._send(client, shared)

    def _send(self, client: Client, keys: bytes) -> None:
        """Redis's ``sendTrackingMessage``: ``keys`` (RESP: an array of keys, or a null) to the client or to its
        redirect target; nowhere for a RESP2 client without one, which has no way to receive it."""
        mode = client.tracking
        assert mode is not None
        target = client
        if mode.redirect:
            redirected = self.clients.get(mode.redirect)
            if redirected is None:
                mode.broken = True
                if client.reply.proto == 3:
                    client.push_invalidation(b">2\r\n$21\r\ntracking-redir-broken\r\n:%d\r\n" % mode.redirect)
                return
            target = redirected
        if target.reply.proto == 3:
            target.push_invalidation(_PUSH_HEAD + keys)
        elif target is not client and target.subscriptions is not None and target.subscriptions.total():
            target.push_invalidation(_MESSAGE_HEAD + keys)
