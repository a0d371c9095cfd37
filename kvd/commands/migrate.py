"""MIGRATE: move keys to another server, Redis or kvd (Redis's ``migrateCommand`` in cluster.c).

``MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password | AUTH2 username password]
[KEYS key [key ...]]`` sends each key to the target as ``RESTORE key ttl payload [REPLACE]`` (the DUMP payload,
which Redis and kvd both load), after ``AUTH`` and ``SELECT`` where needed, all in one write; then it reads
one reply per command, and deletes each key the target acknowledged, unless COPY. With the log on the deletes
are logged, and replicas receive them as DELs (Redis propagates MIGRATE as DEL too).

Like Redis's, the transfer is synchronous: the command blocks the server, other clients included, while it
connects, writes and reads, each step bounded by ``timeout`` milliseconds (1000 when 0 or less). That is what
makes a MIGRATE atomic, in Redis and here: no other command runs between the dump of a key and its delete, so
no write to it can be lost. Values that live only on disk are read first (off the event loop, and read again if
a key changed meanwhile, as any read-then-write command does: ``values.with_all``); the blocking part starts
only when all of them are in memory.

Connections are cached per ``host:port`` (at most 64; one not used for 10 seconds is closed by the background
tick), with the database last selected on each, as Redis caches them. A connection that fails before the first
reply, not by a timeout, is reopened and the transfer tried once more (a cached connection the target closed
meanwhile). Errors are Redis's: ``IOERR error or timeout connecting to the client`` (no answer, no such host),
``... writing to target instance`` (a refused connection too, as Redis reports it), ``... reading to target
instance``, and the target's own error as ``ERR Target instance replied with error: ...`` (a key that exists there
without REPLACE: ``BUSYKEY``); each key the target took is deleted all the same, each it refused is kept.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from kvd.notify import GENERIC, notify
from kvd.persist.dump import dump_payload
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.keyspace import Value, now_ms

from .args import option, parse_int
from .registry import MOVABLEKEYS, WRITE, KeySpec, command
from .values import with_all

if TYPE_CHECKING:
    from kvd.connection import Client

CACHE_ITEMS = 64  # connections kept, as Redis's MIGRATE_SOCKET_CACHE_ITEMS
CACHE_TTL = 10.0  # seconds an unused one is kept (MIGRATE_SOCKET_CACHE_TTL)

_KEYS_WITH_KEY = "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
_KEY = KeySpec(("RW", "access", "delete"), 3, 0, 1)
_KEYS = KeySpec(("RW", "access", "delete", "incomplete"), lastkey=-1, keyword="KEYS", startfrom=-2)


class MigrateLink:
    """A blocking connection to a target, with the database last selected on it (-1: unknown)."""

    __slots__ = ("broken", "db", "last_use", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.db = -1
        self.broken = False  # failed after the target answered with an error: closed, not reused
        self.last_use = time.monotonic()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - closing a socket kvd owns
            pass


class MigrateLinks:
    """The server's cache of MIGRATE connections, by ``host:port``."""

    def __init__(self) -> None:
        self._links: dict[str, MigrateLink] = {}

    def get(self, host: str, port: int, timeout: float) -> MigrateLink:
        """A cached connection, or a new one; OSError when the target cannot be reached in ``timeout`` s."""
        name = f"{host}:{port}"
        link = self._links.get(name)
        if link is not None:
            link.last_use = time.monotonic()
            return link
        if len(self._links) >= CACHE_ITEMS:
            self._links.pop(next(iter(self._links))).close()  # the oldest (Redis drops one at random)
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = self._links[name] = MigrateLink(sock)
        return link

    def drop(self, host: str, port: int) -> None:
        link = self._links.pop(f"{host}:{port}", None)
        if link is not None:
            link.close()

    def close_idle(self, now: float) -> None:
        """Close the connections unused for ``CACHE_TTL`` seconds (the background tick's call)."""
        for name, link in list(self._links.items()):
            if now - link.last_use > CACHE_TTL:
                del self._links[name]
                link.close()

    def close_all(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()

    def __len__(self) -> int:
        return len(self._links)


class _Failed(Exception):
    """A socket error while ``writing`` or reading. ``retry``: nothing reached the keys yet and it was not a
    timeout, so a new connection may try again (the cached one was probably closed by the target)."""

    def __init__(self, writing: bool, retry: bool) -> None:
        super().__init__()
        self.writing = writing
        self.retry = retry


def _bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _read_line(sock: socket.socket, pending: bytearray) -> bytes:
    """One reply line (each reply MIGRATE reads is one: +OK or -error); ``pending`` keeps what came after it."""
    while True:
        end = pending.find(b"\r\n")
        if end >= 0:
            line = bytes(pending[:end])
            del pending[: end + 2]
            return line
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise _Failed(writing=False, retry=False) from None
        except OSError:
            raise _Failed(writing=False, retry=True) from None
        if not chunk:
            raise _Failed(writing=False, retry=True)
        pending += chunk


def _options(argv: list[Any]) -> tuple[bool, bool, bytes | None, bytes | None, int]:
    """(copy, replace, username, password, index of the first key) from MIGRATE's options, in Redis's order."""
    copy = replace = False
    username = password = None
    first = 3
    j = 6
    while j < len(argv):
        word, more = option(argv[j]), len(argv) - 1 - j
        if word == b"copy":
            copy = True
        elif word == b"replace":
            replace = True
        elif word == b"auth":
            if not more:
                raise CommandError(errors.SYNTAX)
            j += 1
            password = bytes(argv[j])
        elif word == b"auth2":
            if more < 2:
                raise CommandError(errors.SYNTAX)
            username, password = bytes(argv[j + 1]), bytes(argv[j + 2])
            j += 2
        elif word == b"keys":
            if len(argv[3]):
                raise CommandError(_KEYS_WITH_KEY)
            first = j + 1
            break
        else:
            raise CommandError(errors.SYNTAX)
        j += 1
    return copy, replace, username, password, first


def migrate_keys(argv: list[Any]) -> list[tuple[int, tuple[str, ...]]]:
    """Where MIGRATE's keys are (Redis's ``migrateGetKeys``): the key argument, or every argument after KEYS."""
    for j in range(6, len(argv)):
        if option(argv[j]) == b"keys":
            if len(argv[3]):
                return []
            return [(i, _KEY.flags) for i in range(j + 1, len(argv))]
    return [(3, _KEY.flags)]


@command(
    "migrate",
    -6,
    f"{WRITE} {MOVABLEKEYS}",
    (3, 3, 1),
    group="generic",
    since="2.6.0",
    summary="Atomically transfer a key from a Redis instance to another one.",
    usage='host port key | "" destination-db timeout [COPY] [REPLACE] [AUTH password | AUTH2 username password] '
    "[KEYS key [key ...]]",
    complexity="This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target "
    "instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two "
    "instances is performed.",
    key_specs=(_KEY, _KEYS),
    get_keys=migrate_keys,
    tips="nondeterministic_output",
)
def migrate(c: Client, argv: list[Any]) -> Any:
    copy, replace, username, password, first = _options(argv)
    timeout_ms = parse_int(argv[5])
    db = parse_int(argv[4])
    if timeout_ms <= 0:
        timeout_ms = 1000
    host = bytes(argv[1]).decode(errors="replace")
    port = parse_int(argv[2])
    keys = [bytes(k) for k in argv[first:]]

    def transfer(values: list[Value | None]) -> None:
        present = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        if not present:
            c.reply.raw(b"+NOKEY\r\n")
            return
        links: MigrateLinks = c.server.migrate_links
        for last_try in (False, True):
            try:
                link = links.get(host, port, timeout_ms / 1000)
            except ConnectionRefusedError:
                # Redis connects without blocking and counts a refused connection as connected, so its first
                # write fails: the same error, after the same one retry.
                if last_try:
                    raise CommandError("IOERR error or timeout writing to target instance") from None
                continue
            except OSError:  # no answer within the timeout, or no such host
                raise CommandError("IOERR error or timeout connecting to the client") from None
            try:
                _send(c, link, present, db, replace, copy, username, password, timeout_ms / 1000)
                return
            except CommandError:  # the target's error
                if link.broken:
                    links.drop(host, port)
                raise
            except _Failed as failed:
                links.drop(host, port)
                if last_try or not failed.retry:
                    way = "writing" if failed.writing else "reading"
                    raise CommandError(f"IOERR error or timeout {way} to target instance") from None

    return with_all(c, keys, transfer)


def _send(
    c: Client,
    link: MigrateLink,
    present: list[tuple[bytes, Value]],
    db: int,
    replace: bool,
    copy: bool,
    username: bytes | None,
    password: bytes | None,
    timeout: float,
) -> None:
    """One try: the commands in one write, then their replies; each key the target acknowledged is deleted at
    once (unless COPY). _Failed once a reply has been read is final: the deleted keys stay deleted."""
    sock = link.sock
    sock.settimeout(timeout)
    out = bytearray()
    if password is not None:
        out += _bulk(b"AUTH", username, password) if username is not None else _bulk(b"AUTH", password)
    select = link.db != db
    if select:
        out += _bulk(b"SELECT", b"%d" % db)
    now = now_ms()
    sent: list[bytes] = []
    for key, value in present:
        entry = c.keyspace.peek(key)
        ttl = 0
        if entry is not None and entry.expire_at:
            ttl = entry.expire_at - now
            if ttl < 0:
                continue  # expired while the values were read
            ttl = max(ttl, 1)
        args = [b"RESTORE", key, b"%d" % ttl, dump_payload(value)]
        if replace:
            args.append(b"REPLACE")
        out += _bulk(*args)
        sent.append(key)
    try:
        sock.sendall(out)
    except TimeoutError:
        raise _Failed(writing=True, retry=False) from None
    except OSError:
        raise _Failed(writing=True, retry=True) from None
    pending = bytearray()
    auth_reply = _read_line(sock, pending) if password is not None else b"+OK"
    select_reply = _read_line(sock, pending) if select else b"+OK"
    refused = auth_reply[:1] == b"-" or select_reply[:1] == b"-"  # then every RESTORE counts as failed
    error: bytes | None = None
    for done, key in enumerate(sent):
        try:
            reply = _read_line(sock, pending)
        except _Failed as failed:
            if error is not None:  # the target's error is the answer; the connection goes
                link.broken = True
                break
            failed.retry = failed.retry and done == 0
            raise
        if refused or reply[:1] == b"-":
            if error is None:
                error = next(line for line in (auth_reply, select_reply, reply) if line[:1] == b"-")[1:]
        elif not copy and c.keyspace.delete(key):
            notify(c.keyspace, GENERIC, b"del", key)
    if error is not None:
        link.db = -1  # SELECT again next time
        raise CommandError(f"ERR Target instance replied with error: {error.decode(errors='replace')}")
    link.db = db
    c.reply.ok()
