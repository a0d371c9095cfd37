"""Publish/subscribe: who listens to which channel, and delivering a message to them (Redis's ``pubsub.c``).

Three namespaces, as in Redis: channels (SUBSCRIBE), glob patterns over channel names (PSUBSCRIBE, Redis's
glob rules from kvd/store/glob.py) and shard channels (SSUBSCRIBE; one shard here, so they behave as channels
of their own). Each maps a name to the clients that listen, in the order they subscribed (a dict used as an
ordered set); each client keeps its own names too (``Subscriptions``), so unsubscribing and disconnecting
cost O(the client's subscriptions), not O(every subscription).

PUBLISH is O(N + M): N subscribers of the channel, M patterns (each tried against the channel, as Redis
does). A message is encoded once per protocol (``*3`` for RESP2, a ``>3`` push for RESP3) and handed to each
receiver with ``Client.push``, which queues it behind the receiver's own replies and writes it with the other
replies of that loop iteration. A slow subscriber is bounded by ``client-output-buffer-hard-limit`` like any
client: past it, it is disconnected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvd.store.glob import glob_match

if TYPE_CHECKING:
    from kvd.connection import Client

CHANNEL, PATTERN, SHARD = "channel", "pattern", "shard"
_KINDS = {
    CHANNEL: (b"subscribe", b"unsubscribe"),
    PATTERN: (b"psubscribe", b"punsubscribe"),
    SHARD: (b"ssubscribe", b"sunsubscribe"),
}


class Subscriptions:
    """One client's channels, patterns and shard channels, in the order it subscribed."""

    __slots__ = ("channel", "pattern", "shard")

    def __init__(self) -> None:
        self.channel: dict[bytes, None] = {}
        self.pattern: dict[bytes, None] = {}
        self.shard: dict[bytes, None] = {}

    def of(self, kind: str) -> dict[bytes, None]:
        return getattr(self, kind)

    def count(self, kind: str) -> int:
        """The count a (un)subscribe confirmation carries: shard channels count apart, as in Redis 7.0."""
        return len(self.shard) if kind == SHARD else len(self.channel) + len(self.pattern)

    def total(self) -> int:
        return len(self.channel) + len(self.pattern) + len(self.shard)


class PubSub:
    def __init__(self) -> None:
        self._listeners: dict[str, dict[bytes, dict[Client, None]]] = {CHANNEL: {}, PATTERN: {}, SHARD: {}}

    # -- subscribing ---------------------------------------------------------------------------------------------

    def subscribe(self, client: Client, kind: str, names: Iterable[bytes]) -> None:
        """Subscribe and confirm each name (a name already subscribed is confirmed again, as in Redis)."""
        mine = _subscriptions(client).of(kind)
        table = self._listeners[kind]
        for name in names:
            if name not in mine:
                mine[name] = None
                table.setdefault(name, {})[client] = None
            self._confirm(client, _KINDS[kind][0], name, kind)
        client.update_pubsub_mode()

    def unsubscribe(self, client: Client, kind: str, names: list[bytes] | None) -> None:
        """Unsubscribe and confirm each name; ``None``: every name of this kind (one null confirmation if the
        client had none)."""
        mine = _subscriptions(client).of(kind)
        if names is None:
            names = list(mine)
            if not names:
                self._confirm(client, _KINDS[kind][1], None, kind)
        for name in names:
            self._drop(client, kind, name)
            self._confirm(client, _KINDS[kind][1], name, kind)
        client.update_pubsub_mode()

    def forget(self, client: Client) -> None:
        """A client disconnected or sent RESET: drop all of its subscriptions, confirming nothing."""
        subs = client.subscriptions
        if subs is None:
            return
        for kind in _KINDS:
            for name in list(subs.of(kind)):
                self._drop(client, kind, name)

    def _drop(self, client: Client, kind: str, name: bytes) -> None:
        mine = _subscriptions(client).of(kind)
        if name not in mine:
            return
        del mine[name]
        table = self._listeners[kind]
        listeners = table[name]
        del listeners[client]
        if not listeners:
            del table[name]

    @staticmethod
    def _confirm(client: Client, verb: bytes, name: bytes | None, kind: str) -> None:
        reply = client.reply
        muted, reply.out = reply.out, client.output  # sent under CLIENT REPLY OFF or SKIP too (CLIENT_PUSHING)
        reply.push_header(3)
        reply.bulk(verb)
        if name is None:
            reply.null()
        else:
            reply.bulk(name)
        reply.integer(_subscriptions(client).count(kind))
        reply.out = muted

    # -- publishing ----------------------------------------------------------------------------------------------

    def publish(self, channel: bytes, message: bytes, shard: bool = False) -> int:
        """Deliver ``message`` to the channel's subscribers, then to every client whose pattern matches it (a
        client with two matching patterns gets it twice); the number of deliveries."""
        encoded: dict[int, bytes] = {}
        sent = 0
        listeners = self._listeners[SHARD if shard else CHANNEL].get(channel)
        if listeners:
            verb = b"smessage" if shard else b"message"
            for client in list(listeners):
                proto = client.reply.proto
                data = encoded.get(proto)
                if data is None:
                    data = encoded[proto] = _message(proto, (verb, channel, message))
                client.push(data)
                sent += 1
        if shard:
            return sent
        for pattern, clients in list(self._listeners[PATTERN].items()):
            if not glob_match(pattern, channel):
                continue
            by_proto: dict[int, bytes] = {}
            for client in list(clients):
                proto = client.reply.proto
                data = by_proto.get(proto)
                if data is None:
                    data = by_proto[proto] = _message(proto, (b"pmessage", pattern, channel, message))
                client.push(data)
                sent += 1
        return sent

    # -- PUBSUB introspection ------------------------------------------------------------------------------------

    def channels(self, kind: str, pattern: bytes | None) -> list[bytes]:
        names = self._listeners[kind]
        return [name for name in names if pattern is None or glob_match(pattern, name)]

    def subscribers(self, kind: str, channel: bytes) -> int:
        return len(self._listeners[kind].get(channel, ()))

    def patterns(self) -> int:
        return len(self._listeners[PATTERN])

    def count(self, kind: str) -> int:
        return len(self._listeners[kind])


def _subscriptions(client: Client) -> Subscriptions:
    """The client's subscriptions, made on its first (un)subscribe: most clients never have any."""
    subs = client.subscriptions
    if subs is None:
        subs = client.subscriptions = Subscriptions()
    return subs


def _message(proto: int, parts: tuple[bytes, ...]) -> bytes:
    head = b">%d\r\n" if proto == 3 else b"*%d\r\n"
    return head % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
