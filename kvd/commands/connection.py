"""Connection commands: the handshake (HELLO, AUTH), identity (CLIENT ...), PING/ECHO, SELECT, QUIT, RESET.

The handshake is what every client library runs first, so shapes matter more than anywhere else: HELLO's reply
is a map with bulk-string keys, a bulk-string ``version`` and an integer ``proto`` (redis-cli asserts the
types; redis-py checks ``proto``). Passwords are compared with ``hmac.compare_digest`` so the time taken does not
reveal how much of a guess was right.
"""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.protocol.reply import PONG, Pairs

from .args import check_db_index, lower, parse_int, parse_timeout_ms, text
from .registry import (
    ADMIN,
    ALLOW_BUSY,
    FAST,
    LOADING,
    NOAUTH,
    NOSCRIPT,
    STALE,
    command,
    run_subcommand,
    subcommand_help,
)

if TYPE_CHECKING:
    from kvd.connection import Client

G = "connection"
REDIS_COMPAT_VERSION = "7.2.0"


def _refused(c: Client, command: Any, user: bytes | None) -> None:
    """A failed authentication: counted (INFO ``acl_access_denied_auth``), logged for ACL LOG, answered."""
    c.server.stats.auth_failures += 1
    context = "multi" if c.executing_transaction else "toplevel"
    c.server.acl_log.denied_auth(context, bytes(command), user if user is not None else b"default", c.describe())
    raise CommandError(errors.WRONGPASS)


def check_password(c: Client, user: bytes | None, password: bytes) -> bool:
    required = c.server.settings.requirepass.encode("utf-8", "surrogateescape")
    user_ok = user is None or lower(user) == b"default"
    # Always run the comparison, even for a wrong user name, so timing says nothing about which part failed.
    return hmac.compare_digest(password, required) and user_ok


@command(
    "ping",
    -1,
    FAST,
    group=G,
    summary="Returns the server's liveliness response.",
    usage="[message]",
    tips="request_policy:all_shards response_policy:all_succeeded",
)
def ping(c: Client, argv: list[Any]) -> None:
    if len(argv) > 2:
        raise CommandError(errors.wrong_arity("ping"))
    if c.in_pubsub_resp2:  # Redis answers a subscribed RESP2 client with an array, like a message
        c.reply.array(2)
        c.reply.bulk(b"pong")
        c.reply.bulk(argv[1] if len(argv) == 2 else b"")
    elif len(argv) == 2:
        c.reply.bulk(argv[1])
    else:
        c.reply.raw(PONG)


@command("echo", 2, f"{FAST} {LOADING} {STALE}", group=G, summary="Returns the given string.", usage="message")
def echo(c: Client, argv: list[Any]) -> None:
    c.reply.bulk(argv[1])


@command(
    "auth",
    -2,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {NOAUTH} {ALLOW_BUSY}",
    group=G,
    summary="Authenticates the connection.",
    usage="[username] password",
    complexity="O(N) where N is the number of passwords defined for the user",
)
def auth(c: Client, argv: list[Any]) -> None:
    if len(argv) > 3:
        raise CommandError(errors.SYNTAX)
    if not c.server.settings.requirepass and len(argv) == 2:
        raise CommandError(errors.AUTH_NOT_CONFIGURED)
    # With no password configured, "AUTH default <anything>" succeeds (Redis 6+ semantics), other users fail.
    user = bytes(argv[1]) if len(argv) == 3 else None
    if c.server.settings.requirepass and not check_password(c, user, bytes(argv[-1])):
        _refused(c, argv[0], user)
    if not c.server.settings.requirepass and user is not None and lower(user) != b"default":
        _refused(c, argv[0], user)
    c.set_authenticated(True)
    c.reply.ok()


@command(
    "hello",
    -1,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {NOAUTH} {ALLOW_BUSY}",
    group=G,
    since="6.0.0",
    summary="Handshakes with the Redis server.",
    usage="[protover [AUTH username password] [SETNAME clientname]]",
)
def hello(c: Client, argv: list[Any]) -> None:
    proto = c.reply.proto
    if len(argv) >= 2:
        try:
            proto = parse_int(argv[1], "ERR Protocol version is not an integer or out of range")
        except CommandError:
            raise
        if proto not in (2, 3):
            raise CommandError(errors.NOPROTO)
    i = 2
    auth_pair: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    while i < len(argv):
        opt = lower(argv[i])
        if opt == b"auth" and i + 2 < len(argv):
            auth_pair = (bytes(argv[i + 1]), bytes(argv[i + 2]))
            i += 3
        elif opt == b"setname" and i + 1 < len(argv):
            name = bytes(argv[i + 1])
            i += 2
        else:
            raise CommandError(f"ERR Syntax error in HELLO option '{errors.c_string(argv[i])}'")
    if auth_pair is not None:
        user, password = auth_pair
        if c.server.settings.requirepass:
            if not check_password(c, user, password):
                _refused(c, argv[0], user)
        elif lower(user) != b"default":
            _refused(c, argv[0], user)
        c.set_authenticated(True)
    if not c.authenticated:
        raise CommandError(errors.HELLO_NOAUTH)
    if name is not None:
        _validate_name(name)
        c.name = name
    c.reply.proto = proto
    c.update_pubsub_mode()  # a RESP3 subscriber that goes back to RESP2 enters the pub/sub context
    c.reply.str_map(
        [
            ("server", "redis"),
            ("version", REDIS_COMPAT_VERSION),
            ("proto", proto),
            ("id", c.id),
            ("mode", "standalone"),
            ("role", "master" if c.server.link is None else "replica"),
            ("modules", []),
        ]
    )


@command("select", 2, f"{FAST} {LOADING} {STALE}", group=G, summary="Changes the selected database.", usage="index")
def select(c: Client, argv: list[Any]) -> None:
    check_db_index(argv[1])
    c.reply.ok()


@command(
    "quit", -1, f"{NOSCRIPT} {LOADING} {STALE} {FAST} {NOAUTH} {ALLOW_BUSY}", group=G, summary="Closes the connection."
)
def quit_(c: Client, argv: list[Any]) -> None:
    c.reply.ok()
    c.close_after_reply = True


@command(
    "reset",
    1,
    f"{NOSCRIPT} {LOADING} {STALE} {FAST} {NOAUTH} {ALLOW_BUSY}",
    group=G,
    since="6.2.0",
    summary="Resets the connection.",
)
def reset(c: Client, argv: list[Any]) -> None:
    c.set_reply_mode(b"on")
    c.reply.proto = 2
    c.name = b""
    if c.in_multi:
        c.discard_multi()
    c.unwatch()
    c.set_authenticated(not c.server.settings.requirepass)
    if c.monitoring:  # as Redis's RESET: no longer a monitor
        c.monitoring = False
        c.server.monitors.discard(c)
    if c.subscriptions is not None:  # and subscribed to nothing
        c.server.pubsub.forget(c)
    c.update_pubsub_mode()
    if c.tracking is not None:  # and no longer tracking keys
        c.server.client_tracking().disable(c)
    c.no_touch = c.no_evict = False
    c.update_special()
    c.reply.raw(b"+RESET\r\n")


# -- CLIENT --------------------------------------------------------------------------------------------------


def _validate_name(name: bytes, what: str = "Client names") -> None:
    if any(b < 33 or b > 126 for b in name):
        raise CommandError(f"ERR {what} cannot contain spaces, newlines or special characters.")


@command(
    "client",
    -2,
    "",
    group=G,
    since="2.4.0",
    summary="A container for client connection commands.",
    usage="subcommand [argument ...]",
    complexity="Depends on subcommand.",
)
def client(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "client")


@command(
    "id",
    2,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="5.0.0",
    parent="client",
    summary="Returns the unique client ID of the connection.",
)
def client_id(c: Client, argv: list[Any]) -> None:
    c.reply.integer(c.id)


@command(
    "setname",
    3,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.6.9",
    parent="client",
    summary="Sets the connection name.",
    usage="connection-name",
)
def client_setname(c: Client, argv: list[Any]) -> None:
    name = bytes(argv[2])
    _validate_name(name)
    c.name = name
    c.reply.ok()


@command(
    "getname",
    2,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.6.9",
    parent="client",
    summary="Returns the name of the connection.",
)
def client_getname(c: Client, argv: list[Any]) -> None:
    if c.name:
        c.reply.bulk(c.name)
    else:
        c.reply.null()


@command(
    "setinfo",
    4,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="7.2.0",
    parent="client",
    summary="Sets information specific to the client or connection.",
    usage="LIB-NAME libname | LIB-VER libver",
)
def client_setinfo(c: Client, argv: list[Any]) -> None:
    attr = lower(argv[2])
    value = bytes(argv[3])
    if attr not in (b"lib-name", b"lib-ver"):
        raise CommandError(f"ERR Unrecognized option '{errors.c_string(argv[2])}'")
    _validate_name(value, text(argv[2]))
    if attr == b"lib-name":
        c.lib_name = value
    else:
        c.lib_ver = value
    c.reply.ok()


@command(
    "info",
    2,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.2.0",
    parent="client",
    summary="Returns information about the connection.",
    tips="nondeterministic_output",
)
def client_info(c: Client, argv: list[Any]) -> None:
    c.reply.verbatim(c.describe() + "\n")


@command(
    "list",
    -2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.4.0",
    parent="client",
    summary="Lists open connections.",
    usage="[TYPE NORMAL] [ID client-id [client-id ...]]",
    tips="nondeterministic_output",
    complexity="O(N) where N is the number of client connections",
)
def client_list(c: Client, argv: list[Any]) -> None:
    if len(argv) > 3 and lower(argv[2]) == b"id":
        # In the order asked for, a client asked for twice listed twice, as Redis does
        ids = [parse_int(a, "ERR Invalid client ID") for a in argv[3:]]
        clients = c.server.clients
        c.reply.verbatim("".join(clients[i].describe() + "\n" for i in ids if i in clients))
        return
    ids: set[int] | None = None
    if len(argv) > 2:
        if lower(argv[2]) == b"type" and len(argv) == 4:
            kind = _client_type(argv[3])
            ids = {cl.id for cl in c.server.clients.values() if cl.client_type() == kind}
        else:
            raise CommandError(errors.SYNTAX)
    lines = [cl.describe() + "\n" for cl in c.server.clients.values() if ids is None or cl.id in ids]
    c.reply.verbatim("".join(lines))


def _client_type(raw: bytes) -> str:
    """CLIENT LIST's and CLIENT KILL's TYPE, with Redis's names (``slave`` is ``replica``)."""
    kind = lower(raw).decode("utf-8", "replace")
    kind = "replica" if kind == "slave" else kind
    if kind not in ("normal", "replica", "pubsub", "master"):
        raise CommandError(f"ERR Unknown client type '{bytes(raw).decode('utf-8', 'replace')}'")
    return kind


@command(
    "kill",
    -3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.4.0",
    parent="client",
    summary="Terminates open connections.",
    usage="ID client-id | ADDR ip:port | LADDR ip:port | USER username | TYPE NORMAL|REPLICA|PUBSUB|MASTER | "
    "SKIPME yes|no",
    complexity="O(N) where N is the number of client connections",
)
def client_kill(c: Client, argv: list[Any]) -> None:
    """Redis 7.0's two forms: ``CLIENT KILL addr`` (OK, or "No such client"; may name the caller), and filters
    that must all match (the count of clients killed; the caller is skipped unless ``SKIPME no``). The caller,
    when killed, gets its reply first and is closed after it."""
    old_form = len(argv) == 3
    if old_form:
        wanted_addr: str | None = text(argv[2])
        tests: list[Any] = [lambda cl: cl.addr == wanted_addr]
        skipme = False
    else:
        if len(argv) % 2 != 0:
            raise CommandError(errors.SYNTAX)
        tests = []
        skipme = True
        for i in range(2, len(argv), 2):
            opt, value = lower(argv[i]), argv[i + 1]
            if opt == b"id":
                wanted_id = parse_int(value, "ERR client-id should be greater than 0")
                if wanted_id < 1:
                    raise CommandError("ERR client-id should be greater than 0")
                tests.append(lambda cl, v=wanted_id: cl.id == v)
            elif opt == b"type":
                tests.append(lambda cl, v=_client_type(value): cl.client_type() == v)
            elif opt == b"addr":
                tests.append(lambda cl, v=text(value): cl.addr == v)
            elif opt == b"laddr":
                tests.append(lambda cl, v=text(value): cl.laddr == v)
            elif opt == b"user":
                if bytes(value) != b"default":  # kvd's one user (ACL LIST)
                    raise CommandError(f"ERR No such user '{text(value)}'")
            elif opt == b"skipme":
                if lower(value) not in (b"yes", b"no"):
                    raise CommandError(errors.SYNTAX)
                skipme = lower(value) == b"yes"
            else:
                raise CommandError(errors.SYNTAX)
    victims = [cl for cl in c.server.clients.values() if all(t(cl) for t in tests) and not (skipme and cl is c)]
    for cl in victims:
        if cl is c:
            c.close_after_reply = True
        else:
            cl.kill()
    if not old_form:
        c.reply.integer(len(victims))
    elif victims:
        c.reply.ok()
    else:
        raise CommandError("ERR No such client")


@command(
    "unblock",
    -3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="5.0.0",
    parent="client",
    summary="Unblocks a client blocked by a blocking command from a different connection.",
    usage="client-id [TIMEOUT | ERROR]",
    complexity="O(log N) where N is the number of client connections",
)
def client_unblock(c: Client, argv: list[Any]) -> None:
    """End another client's WAIT or WAITAOF now: as at its timeout, or with an UNBLOCKED error. 1 if it was
    blocked, else 0."""
    if len(argv) > 4:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "client"))
    error = None
    if len(argv) == 4:
        reason = lower(argv[3])
        if reason == b"error":
            error = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
        elif reason != b"timeout":
            raise CommandError("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
    target = c.server.clients.get(parse_int(argv[2]))
    c.reply.integer(int(target is not None and target.unblock(error)))


@command(
    "reply",
    3,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="3.2.0",
    parent="client",
    summary="Instructs the server whether to reply to commands.",
    usage="ON | OFF | SKIP",
)
def client_reply(c: Client, argv: list[Any]) -> None:
    """OFF and SKIP are not answered (their reply would be the first one dropped); ON answers OK."""
    mode = lower(argv[2])
    if mode not in (b"on", b"off", b"skip"):
        raise CommandError(errors.SYNTAX)
    c.set_reply_mode(mode)
    if mode == b"on":
        c.reply.ok()


@command(
    "pause",
    -3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.9.50",
    parent="client",
    summary="Suspends commands processing.",
    usage="timeout [WRITE | ALL]",
)
def client_pause(c: Client, argv: list[Any]) -> None:
    """Hold every client's commands (ALL, the default) or those that write (WRITE) for ``timeout`` ms; they
    run, in order, when it ends or at CLIENT UNPAUSE. Clients are not refused, only kept waiting."""
    if len(argv) > 4:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "client"))
    mode = "all"
    if len(argv) == 4:
        mode = lower(argv[3]).decode("latin-1")
        if mode not in ("write", "all"):
            raise CommandError("ERR CLIENT PAUSE mode must be WRITE or ALL")
    c.server.pause_clients(mode, parse_timeout_ms(argv[2]))
    c.reply.ok()


@command(
    "unpause",
    2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.2.0",
    parent="client",
    summary="Resumes processing commands from paused clients.",
    complexity="O(N) Where N is the number of paused clients",
)
def client_unpause(c: Client, argv: list[Any]) -> None:
    c.server.unpause_clients()
    c.reply.ok()


@command(
    "no-evict",
    3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="client",
    summary="Set client eviction mode for the current connection.",
    usage="ON | OFF",
)
def client_no_evict(c: Client, argv: list[Any]) -> None:
    """Redis exempts such a client from client eviction (maxmemory-clients). kvd evicts no clients, only keys,
    so every client is exempt; the flag is kept for CLIENT LIST ('e')."""
    switch = lower(argv[2])
    if switch not in (b"on", b"off"):
        raise CommandError(errors.SYNTAX)
    c.no_evict = switch == b"on"
    c.reply.ok()


@command(
    "no-touch",
    3,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="7.2.0",
    parent="client",
    summary="Controls whether commands sent by the client affect the LRU/LFU of accessed keys.",
    usage="ON | OFF",
)
def client_no_touch(c: Client, argv: list[Any]) -> None:
    """ON: this client's reads no longer make a value the most recently used one, so a scan or a monitoring
    tool does not keep what it looks at in RAM (TOUCH still touches)."""
    switch = lower(argv[2])
    if switch not in (b"on", b"off"):
        raise CommandError(errors.SYNTAX)
    c.no_touch = switch == b"on"
    c.update_special()
    c.reply.ok()


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="5.0.0",
    parent="client",
    summary="Returns helpful text about the different subcommands.",
)
def client_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "client")


def uptime_seconds(c: Client) -> int:
    return int(time.time() - c.server.started_at)


_ = Pairs  # re-exported for handlers building maps
