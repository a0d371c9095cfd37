"""SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs, PUBLISH, SPUBLISH and PUBSUB (Redis ``pubsub.c``).

The registry and delivery are ``kvd/pubsub.py``; what a RESP2 client may send while subscribed is decided in
``Client._execute_pubsub``. Confirmations are replies to the command, one per name, as arrays in RESP2 and
pushes in RESP3; messages reach subscribers as pushes (``Client.push``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.pubsub import CHANNEL, PATTERN, SHARD

from .registry import FAST, LOADING, NOSCRIPT, PUBSUB, STALE, command, run_subcommand, subcommand_help

if TYPE_CHECKING:
    from kvd.connection import Client

G = "pubsub"


def _names(argv: list[Any], start: int = 1) -> list[bytes]:
    return [bytes(a) for a in argv[start:]]


@command(
    "subscribe",
    -2,
    f"{PUBSUB} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    summary="Listens for messages published to channels.",
    usage="channel [channel ...]",
    complexity="O(N) where N is the number of channels to subscribe to.",
)
def subscribe(c: Client, argv: list[Any]) -> None:
    c.server.pubsub.subscribe(c, CHANNEL, _names(argv))


@command(
    "psubscribe",
    -2,
    f"{PUBSUB} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    usage="pattern [pattern ...]",
    summary="Listens for messages published to channels that match one or more patterns.",
    complexity="O(N) where N is the number of patterns the client is already subscribed to.",
)
def psubscribe(c: Client, argv: list[Any]) -> None:
    c.server.pubsub.subscribe(c, PATTERN, _names(argv))


@command(
    "ssubscribe",
    -2,
    f"{PUBSUB} {NOSCRIPT} {LOADING} {STALE}",
    (1, -1, 1),
    group=G,
    since="7.0.0",
    usage="shardchannel [shardchannel ...]",
    summary="Listens for messages published to shard channels.",
    complexity="O(N) where N is the number of shard channels to subscribe to.",
    key_flags="not_key",
)
def ssubscribe(c: Client, argv: list[Any]) -> None:
    c.server.pubsub.subscribe(c, SHARD, _names(argv))


@command(
    "unsubscribe",
    -1,
    f"{PUBSUB} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    usage="[channel [channel ...]]",
    summary="Stops listening to messages posted to channels.",
    complexity="O(N) where N is the number of clients already subscribed to a channel.",
)
def unsubscribe(c: Client, argv: list[Any]) -> None:
    c.server.pubsub.unsubscribe(c, CHANNEL, _names(argv) or None)


@command(
    "punsubscribe",
    -1,
    f"{PUBSUB} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    usage="[pattern [pattern ...]]",
    summary="Stops listening to messages published to channels that match one or more patterns.",
    complexity="O(N+M) where N is the number of patterns the client is already subscribed and M is the number of "
    "total patterns subscribed in the system (by any client).",
)
def punsubscribe(c: Client, argv: list[Any]) -> None:
    c.server.pubsub.unsubscribe(c, PATTERN, _names(argv) or None)


@command(
    "sunsubscribe",
    -1,
    f"{PUBSUB} {NOSCRIPT} {LOADING} {STALE}",
    (1, -1, 1),
    group=G,
    since="7.0.0",
    usage="[shardchannel [shardchannel ...]]",
    summary="Stops listening to messages posted to shard channels.",
    complexity="O(N) where N is the number of clients already subscribed to a shard channel.",
    key_flags="not_key",
)
def sunsubscribe(c: Client, argv: list[Any]) -> None:
    c.server.pubsub.unsubscribe(c, SHARD, _names(argv) or None)


@command(
    "publish",
    3,
    f"{PUBSUB} {LOADING} {STALE} {FAST}",
    group=G,
    since="2.0.0",
    usage="channel message",
    summary="Posts a message to a channel.",
    complexity="O(N+M) where N is the number of clients subscribed to the receiving channel and M is the "
    "total number of subscribed patterns (by any client).",
)
def publish(c: Client, argv: list[Any]) -> None:
    c.reply.integer(c.server.pubsub.publish(bytes(argv[1]), bytes(argv[2])))


@command(
    "spublish",
    3,
    f"{PUBSUB} {LOADING} {STALE} {FAST}",
    (1, 1, 1),
    group=G,
    since="7.0.0",
    usage="shardchannel message",
    summary="Post a message to a shard channel",
    complexity="O(N) where N is the number of clients subscribed to the receiving shard channel.",
    key_flags="not_key",
)
def spublish(c: Client, argv: list[Any]) -> None:
    c.reply.integer(c.server.pubsub.publish(bytes(argv[1]), bytes(argv[2]), shard=True))


# -- PUBSUB ----------------------------------------------------------------------------------------------------


@command(
    "pubsub",
    -2,
    "",
    group=G,
    since="2.8.0",
    summary="A container for Pub/Sub commands.",
    usage="subcommand [argument ...]",
    complexity="Depends on subcommand.",
)
def pubsub(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "pubsub")


@command(
    "channels",
    -2,
    f"{PUBSUB} {LOADING} {STALE}",
    group=G,
    since="2.8.0",
    parent="pubsub",
    usage="[pattern]",
    summary="Returns the active channels.",
    complexity="O(N) where N is the number of active channels, and assuming constant time pattern "
    "matching (relatively short channels and patterns)",
)
def pubsub_channels(c: Client, argv: list[Any]) -> None:
    _channels(c, argv, CHANNEL)


@command(
    "shardchannels",
    -2,
    f"{PUBSUB} {LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="pubsub",
    usage="[pattern]",
    summary="Returns the active shard channels.",
    complexity="O(N) where N is the number of active shard channels, and assuming constant time pattern "
    "matching (relatively short shard channels).",
)
def pubsub_shardchannels(c: Client, argv: list[Any]) -> None:
    _channels(c, argv, SHARD)


def _channels(c: Client, argv: list[Any], kind: str) -> None:
    if len(argv) > 3:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "pubsub"))
    c.reply.bulk_array(c.server.pubsub.channels(kind, bytes(argv[2]) if len(argv) == 3 else None))


@command(
    "numsub",
    -2,
    f"{PUBSUB} {LOADING} {STALE}",
    group=G,
    since="2.8.0",
    parent="pubsub",
    usage="[channel [channel ...]]",
    summary="Returns a count of subscribers to channels.",
    complexity="O(N) for the NUMSUB subcommand, where N is the number of requested channels",
)
def pubsub_numsub(c: Client, argv: list[Any]) -> None:
    _numsub(c, argv, CHANNEL)


@command(
    "shardnumsub",
    -2,
    f"{PUBSUB} {LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="pubsub",
    usage="[shardchannel [shardchannel ...]]",
    summary="Returns the count of subscribers of shard channels.",
    complexity="O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels",
)
def pubsub_shardnumsub(c: Client, argv: list[Any]) -> None:
    _numsub(c, argv, SHARD)


def _numsub(c: Client, argv: list[Any], kind: str) -> None:
    """Channel, count, channel, count...: a flat array in both protocols, as Redis sends it."""
    hub = c.server.pubsub
    names = _names(argv, 2)
    c.reply.array(2 * len(names))
    for name in names:
        c.reply.bulk(name)
        c.reply.integer(hub.subscribers(kind, name))


@command(
    "numpat",
    2,
    f"{PUBSUB} {LOADING} {STALE}",
    group=G,
    since="2.8.0",
    parent="pubsub",
    summary="Returns a count of unique pattern subscriptions.",
)
def pubsub_numpat(c: Client, argv: list[Any]) -> None:
    c.reply.integer(c.server.pubsub.patterns())


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="6.2.0",
    parent="pubsub",
    summary="Returns helpful text about the different subcommands.",
)
def pubsub_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "pubsub")
