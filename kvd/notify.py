"""Keyspace notifications: ``notify-keyspace-events`` and the events published for it (Redis's ``notify.c``).

With the K class a change to key ``k`` is published on ``__keyspace@0__:k`` with the event's name as the
message; with E on ``__keyevent@0__:<event>`` with the key as the message. Which events are sent is chosen by
class, with Redis's letters: g generic (del, expire, persist, rename_from, rename_to, copy_to), $ string
(set, append, setrange, incrby, incrbyfloat, setbit), x expired, e evicted, n new (a key was created), m
keymiss (a value read found no key), A every class but m and n. The letters for types kvd does not store (l s h z t) and
for modules (d) are accepted and never fire. An event is named as Redis names it for the same command, and
published once the command has changed the key, in Redis's order (``new`` before the command's own event).

What counts as eviction: a key deleted to honour ``maxmemory`` (persistence off) or ``max-disk``. A value that
moves from RAM to disk is not evicted: its key stays, and nothing is sent. ``keymiss`` is sent by every command
that looks a key up to read it and finds none, as Redis's ``lookupKeyRead`` sends it (GET, MGET, STRLEN, EXISTS,
TTL, GETBIT, BITCOUNT, BITOP's sources, a BITFIELD of GETs only, ...), not by writes. Cost when off (the
default): one test of ``Keyspace.events`` per write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvd.pubsub import PubSub


class HasEvents(Protocol):
    events: KeyspaceEvents | None


KEYSPACE, KEYEVENT = 1 << 0, 1 << 1
GENERIC, STRING, LIST, SET, HASH, ZSET = 1 << 2, 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7
EXPIRED, EVICTED, STREAM, KEY_MISS, MODULE, NEW = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 13, 1 << 14
ALL = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE

_LETTERS = {"g": GENERIC, "$": STRING, "l": LIST, "s": SET, "h": HASH, "z": ZSET, "x": EXPIRED, "e": EVICTED,
            "K": KEYSPACE, "E": KEYEVENT, "t": STREAM, "m": KEY_MISS, "d": MODULE, "n": NEW, "A": ALL}  # fmt: skip
_CLASS_ORDER = "g$lshzxetdn"  # keyspaceEventsFlagsToString's order


def parse_flags(text: str) -> int:
    """``"KEA"`` -> flags; ValueError for a letter Redis does not know."""
    flags = 0
    for letter in text:
        if letter not in _LETTERS:
            raise ValueError(f"expected event classes from 'Ag$lshzxeKEtmdn', got {text!r}")
        flags |= _LETTERS[letter]
    return flags


def format_flags(flags: int) -> str:
    """Flags as the setting keeps them (and kvd.toml's CONFIG REWRITE writes them): ``A`` for all the classes it
    covers, with ``n`` after it when on (A does not cover n), then K, E and m."""
    if flags & ALL == ALL:
        text = "A" + ("n" if flags & NEW else "")
    else:
        text = "".join(letter for letter in _CLASS_ORDER if flags & _LETTERS[letter])
    return text + "".join(letter for letter in "KEm" if flags & _LETTERS[letter])


def shown_flags(text: str) -> str:
    """The setting as CONFIG GET shows it, Redis 7.0's ``keyspaceEventsFlagsToString``: after ``A`` the ``n`` is
    left out, though new-key events are still published (``AKEn`` shows as ``AKE``)."""
    flags = parse_flags(text)
    if flags & ALL == ALL:
        flags &= ~NEW
    return format_flags(flags)


class KeyspaceEvents:
    """Publishes events for the classes in ``flags``; the keyspace holds one only while some are on."""

    def __init__(self, pubsub: PubSub, flags: int) -> None:
        self.pubsub = pubsub
        self.flags = flags

    def emit(self, kind: int, event: bytes, key: bytes) -> None:
        flags = self.flags
        if not flags & kind:
            return
        if flags & KEYSPACE:
            self.pubsub.publish(b"__keyspace@0__:" + key, event)
        if flags & KEYEVENT:
            self.pubsub.publish(b"__keyevent@0__:" + event, key)


def notify(keyspace: HasEvents, kind: int, event: bytes, key: bytes) -> None:
    """Publish ``event`` for ``key`` if its class is on: what a command calls once it changed the key."""
    events = keyspace.events
    if events is not None:
        events.emit(kind, event, key)
