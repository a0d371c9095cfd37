"""MIGRATE: move keys to another server, Redis or kvd (Redis's ``migrateCommand`` in cluster.c).

``MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password | AUTH2 username password]
[KEYS key [key ...]]`` sends each key to the target as ``RESTORE key ttl payload [REPLACE]`` (the DUMP payload,
which Redis and kvd both load), after ``AUTH`` and ``SELECT`` where needed, all in one write; then it reads
one reply per command, and deletes each key the target acknowledged, unless COPY. With the log on the deletes
are logged, and replicas receive them as DELs (Redis propagates MIGRATE as DEL too).

Like Redis's, the transfer is synchronous: the command blocks the server, other clients included, while it
connects, writes and reads; ``timeout`` milliseconds (1000 when 0 or less) bound the connect, each 64 KiB written
and each reply, so a large key may take longer in all, as long as the target keeps reading. That is what
makes a MIGRATE atomic, in Redis and here: no other command runs between the dump of a key and its delete, so
no write to it can be lost. Values that live only on disk are read first (off the event loop, and read again if
a key changed meanwhile, as any read-then-write command does: ``values.with_all``); the blocking part starts
only when all of them are in memory.

Connections are cached per ``host:port`` (at most 64; one not used for 10 seconds is closed by the background
tick), with the database last selected on each, as Redis caches them. A connection that fails before the first
reply, not by a timeout, is reopened and the transfer tried once more (a cached connection the target closed
meanwhile). Errors are Redis's: ``IOERR error or timeout connecting to the client`` (no such host),
``... writing to target instance`` (a refused or timed-out connection too: Redis connects without blocking and
finds out at its first write), ``... reading to target instance``, and the target's own error as ``ERR Target
instance replied with error: ...`` (a key that exists there without REPLACE: ``BUSYKEY``); each key the target
took is deleted all the same, each it refused is kept. The port is read as Redis's ``atoi`` reads it.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvd.notify import GENERIC, notify
from kvd.persist.dump import dump_payload
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.redact import migrate_options
from kvd.store.keyspace import Value, now_ms

from .args import parse_int
from .registry import MOVABLEKEYS, WRITE, KeysAndFlags, KeySpec, command
from .values import with_all

if TYPE_CHECKING:
    from kvd.connection import Client

CACHE_ITEMS = 64  # connections kept, as Redis's MIGRATE_SOCKET_CACHE_ITEMS
CACHE_TTL = 10.0  # seconds an unused one is kept (MIGRATE_SOCKET_CACHE_TTL)
WRITE_PIECE = 64 * 1024  # each piece written within the timeout, as Redis writes them
MAX_LINE = 64 * 1024  # a reply line longer than this is no Redis reply: the transfer fails, nothing is deleted
MAX_TIMEOUT = 365 * 86400.0  # seconds; more than this is "for ever" to a socket that cannot take larger values

_KEYS_WITH_KEY = "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
_KEY = KeySpec(("RW", "access", "delete"), 3, 0, 1)
_KEYS = KeySpec(("RW", "access", "delete", "incomplete"), lastkey=-1, keyword="KEYS", startfrom=-2)
_ATOI = re.compile(rb"[ \t\n\v\f\r]*([+-]?[0-9]+)")


class MigrateLink:
    """A blocking connection to a target, with the database last selected on it (-1: unknown)."""

    __slots__ = ("db", "last_use", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.db = -1
        self.last_use = time.monotonic()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - closing a socket kvd owns
            pass


class MigrateLinks:
    """The server's cache of MIGRATE connections, by the ``host:port`` as given."""

    def __init__(self) -> None:
        self._links: dict[bytes, MigrateLink] = {}

    def get(self, host: bytes, port: int, name: bytes, timeout: float) -> MigrateLink:
        """A cached connection, or a new one; OSError (or ValueError, UnicodeError for a host or port no socket
        takes) when the target cannot be reached."""
        link = self._links.get(name)
        if link is not None:
            link.last_use = time.monotonic()
            return link
        if len(self._links) >= CACHE_ITEMS:
            self._links.pop(next(iter(self._links))).close()  # the oldest (Redis drops one at random)
        sock = socket.create_connection((host, port), timeout=timeout)  # bytes: resolved as given, no IDNA
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = self._links[name] = MigrateLink(sock)
        return link

    def drop(self, name: bytes) -> None:
        link = self._links.pop(name, None)
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


@dataclass(slots=True)
class _Request:
    """One MIGRATE, parsed."""

    host: bytes
    port: int
    name: bytes  # the cache's key: host and port as given
    db: int
    timeout: float  # seconds
    copy: bool
    replace: bool
    username: bytes | None
    password: bytes | None
    keys: list[bytes]


class _Failed(Exception):
    """A socket error while ``writing`` or reading. ``retry``: nothing reached the keys yet and it was not a
    timeout, so a new connection may try again (the cached one was probably closed by the target)."""

    def __init__(self, writing: bool, retry: bool) -> None:
        super().__init__()
        self.writing = writing
        self.retry = retry


class _Refused(Exception):
    """The target answered an error; ``in_step``: every reply was read, so its connection can be used again."""

    def __init__(self, message: str, in_step: bool) -> None:
        super().__init__(message)
        self.message = message
        self.in_step = in_step


def _atoi(raw: bytes) -> int:
    """C's ``atoi`` as Redis reads the port: leading space, a sign and digits, else 0; saturated as ``strtol``
    and cut to an int as glibc's ``atoi`` does."""
    found = _ATOI.match(raw)
    if found is None:
        return 0
    n = max(min(int(found.group(1)), (1 << 63) - 1), -(1 << 63))
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


def _parse(argv: list[Any]) -> _Request:
    """MIGRATE's arguments with Redis's checks in Redis's order: the options, then the timeout, then the db."""
    copy = replace = False
    username = password = None
    keys = [bytes(argv[3])]
    for i, word in migrate_options(argv):
        more = len(argv) - 1 - i
        if word == b"copy":
            copy = True
        elif word == b"replace":
            replace = True
        elif word == b"auth":
            if not more:
                raise CommandError(errors.SYNTAX)
            password = bytes(argv[i + 1])
        elif word == b"auth2":
            if more < 2:
                raise CommandError(errors.SYNTAX)
            username, password = bytes(argv[i + 1]), bytes(argv[i + 2])
        elif word == b"keys":
            if len(argv[3]):
                raise CommandError(_KEYS_WITH_KEY)
            keys = [bytes(k) for k in argv[i + 1 :]]
        else:
            raise CommandError(errors.SYNTAX)
    timeout_ms = parse_int(argv[5])
    db = parse_int(argv[4])
    host, port = bytes(argv[1]), bytes(argv[2])
    timeout = min((timeout_ms if timeout_ms > 0 else 1000) / 1000, MAX_TIMEOUT)
    return _Request(host, _atoi(port), host + b":" + port, db, timeout, copy, replace, username, password, keys)


def migrate_keys(argv: list[Any]) -> KeysAndFlags:
    """Where MIGRATE's keys are (Redis's ``migrateGetKeys``): the key argument, or every argument after KEYS."""
    for i, word in migrate_options(argv):
        if word == b"keys":
            return [] if len(argv[3]) else [(j, _KEY.flags) for j in range(i + 1, len(argv))]
    return [(3, _KEY.flags)]


@command(
    "migrate",
    -6,
    f"{WRITE} {MOVABLEKEYS}",
    (3, 3, 1),
    group="generic",
    since="2.6.0",
    summary="Atomically transfer a key from a Redis instance to another one.",
    usage="host port key destination-db timeout [COPY] [REPLACE] [AUTH password | AUTH2 username password] "
    "[KEYS key [key ...]]",
    complexity="This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target "
    "instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two "
    "instances is performed.",
    key_specs=(_KEY, _KEYS),
    get_keys=migrate_keys,
    tips="nondeterministic_output",
)
def migrate(c: Client, argv: list[Any]) -> Any:
    request = _parse(argv)

    def transfer(values: list[Value | None]) -> None:
        present = [(k, v) for k, v in zip(request.keys, values, strict=True) if v is not None]
        if not present:
            c.reply.raw(b"+NOKEY\r\n")
            return
        links: MigrateLinks = c.server.migrate_links
        for last_try in (False, True):
            try:
                link = links.get(request.host, request.port, request.name, request.timeout)
            except (socket.gaierror, UnicodeError, ValueError, OverflowError):  # no such host, no such port
                raise CommandError("IOERR error or timeout connecting to the client") from None
            except OSError as exc:
                # Refused, unreachable, no answer in time: Redis connects without blocking and finds out when it
                # first writes, which it then retries once unless it timed out.
                if last_try or isinstance(exc, TimeoutError):
                    raise CommandError("IOERR error or timeout writing to target instance") from None
                continue
            try:
                _exchange(c, link, request, present)
                return
            except _Refused as refused:
                if not refused.in_step:
                    links.drop(request.name)
                raise CommandError(refused.message) from None
            except _Failed as failed:
                links.drop(request.name)
                if last_try or not failed.retry:
                    way = "writing" if failed.writing else "reading"
                    raise CommandError(f"IOERR error or timeout {way} to target instance") from None
            except BaseException:  # whatever else: replies may be unread, so the connection is not used again
                links.drop(request.name)
                raise

    return with_all(c, request.keys, transfer)


def _bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _commands(
    c: Client, link: MigrateLink, request: _Request, present: list[tuple[bytes, Value]]
) -> tuple[bytearray, bool, list[bytes]]:
    """What to write (AUTH and SELECT where needed, a RESTORE per key not expired meanwhile), whether AUTH and
    SELECT are in it, and the keys in the order of their RESTOREs."""
    out = bytearray()
    if request.password is not None:
        auth = (request.username, request.password) if request.username is not None else (request.password,)
        out += _bulk(b"AUTH", *auth)
    select = link.db != request.db
    if select:
        out += _bulk(b"SELECT", b"%d" % request.db)
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
        if request.replace:
            args.append(b"REPLACE")
        out += _bulk(*args)
        sent.append(key)
    return out, select, sent


def _exchange(c: Client, link: MigrateLink, request: _Request, present: list[tuple[bytes, Value]]) -> None:
    """One try: the commands in one write, then their replies; each key the target acknowledged is deleted at
    once (unless COPY). _Failed once a RESTORE reply has been read is final: the deleted keys stay deleted."""
    sock = link.sock
    sock.settimeout(request.timeout)
    out, select, sent = _commands(c, link, request, present)
    view = memoryview(out)
    try:
        for start in range(0, len(view), WRITE_PIECE):
            sock.sendall(view[start : start + WRITE_PIECE])
    except TimeoutError:
        raise _Failed(writing=True, retry=False) from None
    except OSError:
        raise _Failed(writing=True, retry=True) from None
    lines = _Lines(sock)
    auth_reply = lines.next() if request.password is not None else b"+OK"
    select_reply = lines.next() if select else b"+OK"
    refused = auth_reply[:1] == b"-" or select_reply[:1] == b"-"  # then every RESTORE counts as failed
    error: bytes | None = None
    for done, key in enumerate(sent):
        try:
            reply = lines.next()
        except _Failed as failed:
            if error is not None:  # the target's error is the answer; the connection goes
                raise _Refused(_target_error(error), in_step=False) from None
            failed.retry = failed.retry and done == 0
            raise
        if refused or reply[:1] == b"-":
            if error is None:
                error = next(line for line in (auth_reply, select_reply, reply) if line[:1] == b"-")[1:]
        elif not request.copy and c.keyspace.delete(key):
            notify(c.keyspace, GENERIC, b"del", key)
    if error is not None:
        link.db = -1  # SELECT again next time
        raise _Refused(_target_error(error), in_step=True)
    link.db = request.db
    c.reply.ok()


def _target_error(line: bytes) -> str:
    return f"ERR Target instance replied with error: {errors.c_string(line)}"


class _Lines:
    """Reply lines from the target (each reply MIGRATE reads is one line: +OK or -error), ended by LF with or
    without CR before it, as Redis's ``syncReadLine`` reads them."""

    __slots__ = ("_pending", "_scanned", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._pending = bytearray()
        self._scanned = 0  # bytes of _pending known to hold no LF

    def next(self) -> bytes:
        pending = self._pending
        while True:
            end = pending.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(pending[:end]).removesuffix(b"\r")
                del pending[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(pending)
            if len(pending) > MAX_LINE:
                raise _Failed(writing=False, retry=False)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise _Failed(writing=False, retry=False) from None
            except OSError:
                raise _Failed(writing=False, retry=True) from None
            if not chunk:
                raise _Failed(writing=False, retry=True)
            pending += chunk
