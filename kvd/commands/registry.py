"""The command table: name, arity, flags, key positions, handler and documentation of every command.

Handlers register with ``@command(...)`` in the family modules (``strings``, ``keys``, ``connection``,
``server``, ``kvd_ext``). The connection looks a command up by its lowercased name, checks arity and the flags
(auth, writability, memory) in one place, ``dispatch()``, and calls the handler. A handler writes its reply
through ``client.reply`` and returns None, or returns an awaitable when it must wait for the disk; the
connection then suspends that client's pipeline until the awaitable is done, which keeps replies in order.

Arity follows Redis: positive = exact argument count including the name, negative = at least that many.
``usage`` is the argument syntax shown by HELP and turned into COMMAND DOCS ``arguments`` for redis-cli's
hints; see ``_parse_usage``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvd.connection import Client

Handler = Callable[["Client", list[Any]], Awaitable[None] | None]

WRITE = "write"  # changes the dataset: refused while the log is in MISCONF state
DENYOOM = "denyoom"  # may grow memory: refused when over maxmemory under noeviction
NOAUTH = "no_auth"  # allowed before AUTH
READONLY = "readonly"
FAST = "fast"
ADMIN = "admin"
LOADING = "loading"  # runs while a replica loads its primary's snapshot (others: -LOADING)
STALE = "stale"  # runs on a replica whose link is down under replica-serve-stale-data no (others: -MASTERDOWN)
NO_MULTI = "no_multi"  # refused after MULTI (and the transaction fails), as Redis refuses SAVE and SHUTDOWN


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    arity: int
    flags: frozenset[str]
    first_key: int
    last_key: int
    step: int
    handler: Handler
    group: str
    summary: str
    since: str
    complexity: str
    usage: str
    subcommands: dict[str, Command] = field(default_factory=dict)

    is_write: bool = False  # derived from flags at registration; a field so the hot path reads it directly
    # It may wait long after it started (for replicas, an fsync, a snapshot's reader): what it waits is not run
    # time, so INFO commandstats, SLOWLOG and LATENCY count only the step that started it, as Redis's call()
    # times a blocked command.
    waits: bool = False
    # The setting that lets it run, for what Redis flags PROTECTED (DEBUG: enable-debug-command); "" for the rest.
    protected: str = ""

    def arguments(self) -> list[dict[str, Any]]:
        return _parse_usage(self.usage)


COMMANDS: dict[bytes, Command] = {}
ALIASES: dict[bytes, Command] = {}  # upper-case names: clients send "SET" far more often than "set"


def command(
    name: str,
    arity: int,
    flags: str = "",
    keys: tuple[int, int, int] = (0, 0, 0),
    *,
    group: str,
    summary: str,
    usage: str = "",
    since: str = "1.0.0",
    complexity: str = "O(1)",
    parent: str | None = None,
    waits: bool = False,
    protected: str = "",
) -> Callable[[Handler], Handler]:
    """Register a handler. ``parent`` makes it a subcommand (e.g. CLIENT SETNAME) for COMMAND DOCS/INFO."""

    def register(handler: Handler) -> Handler:
        cmd = Command(
            name=name.lower(),
            arity=arity,
            flags=frozenset(flags.split()),
            first_key=keys[0],
            last_key=keys[1],
            step=keys[2],
            handler=handler,
            group=group,
            summary=summary,
            since=since,
            complexity=complexity,
            usage=usage,
            is_write=WRITE in flags.split(),
            waits=waits,
            protected=protected,
        )
        if parent is None:
            COMMANDS[cmd.name.encode()] = cmd
            ALIASES[cmd.name.upper().encode()] = cmd
        else:
            COMMANDS[parent.encode()].subcommands[cmd.name] = cmd
        return handler

    return register


# ACL categories, in Redis's order (ACL CAT, COMMAND INFO). A command's follow from its flags (read, write, fast or
# slow, admin and dangerous) and its group (keyspace, string, bitmap, pubsub, connection, transaction), as Redis
# sets the implicit ones, except where ``ACL_EXACT`` gives Redis's own.
ACL_CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap", "hyperloglog", "geo",
    "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous", "connection", "transaction", "scripting",
)  # fmt: skip
_GROUP_CATEGORY = {
    "generic": "keyspace",
    "string": "string",
    "bitmap": "bitmap",
    "pubsub": "pubsub",
    "connection": "connection",
    "transactions": "transaction",
}
# Where Redis's categories for a command are not its flags' and its group's: Redis's own, by full name
# (tests/compat/test_acl.py compares every command's with redis-server's COMMAND INFO).
ACL_EXACT: dict[str, tuple[str, ...]] = {
    "append": ("write", "string", "fast"),
    "asking": ("fast", "connection"),
    "client": ("slow",),
    "client|getname": ("slow", "connection"),
    "client|help": ("slow", "connection"),
    "client|id": ("slow", "connection"),
    "client|info": ("slow", "connection"),
    "client|no-evict": ("admin", "slow", "dangerous", "connection"),
    "client|setname": ("slow", "connection"),
    "command": ("slow", "connection"),
    "command|count": ("slow", "connection"),
    "command|docs": ("slow", "connection"),
    "command|getkeys": ("slow", "connection"),
    "command|help": ("slow", "connection"),
    "command|info": ("slow", "connection"),
    "command|list": ("slow", "connection"),
    "dbsize": ("keyspace", "read", "fast"),
    "flushall": ("keyspace", "write", "slow", "dangerous"),
    "flushdb": ("keyspace", "write", "slow", "dangerous"),
    "info": ("slow", "dangerous"),
    "keys": ("keyspace", "read", "slow", "dangerous"),
    "lastsave": ("admin", "fast", "dangerous"),
    "memory|help": ("slow",),
    "object": ("slow",),
    "pubsub": ("slow",),
    "pubsub|help": ("slow",),
    "readonly": ("fast", "connection"),
    "readwrite": ("fast", "connection"),
    "restore": ("keyspace", "write", "slow", "dangerous"),
    "role": ("admin", "fast", "dangerous"),
    "sort": ("write", "set", "sortedset", "list", "slow", "dangerous"),
    "sort_ro": ("read", "set", "sortedset", "list", "slow", "dangerous"),
    "swapdb": ("keyspace", "write", "fast", "dangerous"),
    "wait": ("slow", "connection"),
    # Redis 7.2's, for what 7.0 does not have
    "waitaof": ("slow", "connection"),
    "client|no-touch": ("slow", "connection"),
    "client|setinfo": ("slow", "connection"),
}


def acl_categories(cmd: Command, parent: Command | None = None) -> list[str]:
    """The command's ACL categories, without the @, in Redis's order."""
    exact = ACL_EXACT.get(f"{parent.name}|{cmd.name}" if parent is not None else cmd.name)
    if exact is not None:
        return list(exact)
    found = set()
    group = _GROUP_CATEGORY.get(cmd.group)
    if group is not None:
        found.add(group)
    if READONLY in cmd.flags:
        found.add("read")
    if WRITE in cmd.flags:
        found.add("write")
    found.add("fast" if FAST in cmd.flags else "slow")
    if ADMIN in cmd.flags:
        found.update(("admin", "dangerous"))
    return [name for name in ACL_CATEGORIES if name in found]


def command_keys(cmd: Command, argv: list[Any]) -> list[bytes]:
    """The key arguments of ``argv`` by the command's (first, last, step): COMMAND GETKEYS, and the keys a
    tracking client's read-only command makes kvd remember (kvd/tracking.py)."""
    if cmd.first_key == 0:
        return []
    last = cmd.last_key if cmd.last_key >= 0 else len(argv) + cmd.last_key
    return [bytes(argv[i]) for i in range(cmd.first_key, min(last, len(argv) - 1) + 1, cmd.step)]


def subcommand_error(container: Command, argv: list[Any]) -> str | None:
    """Redis's error for ``CONTAINER SUB args...`` naming no subcommand or with the wrong count, else None.

    Redis resolves the subcommand before it runs or queues anything, so after MULTI this error is the
    reply instead of ``+QUEUED`` and EXEC aborts (``commandCheckExistence`` and ``commandCheckArity``)."""
    from kvd.protocol import errors

    sub = bytes(argv[1]).lower().decode("utf-8", "replace")
    cmd = container.subcommands.get(sub)
    if cmd is None:
        return errors.unknown_subcommand(bytes(argv[1]), container.name)
    if (cmd.arity > 0 and len(argv) != cmd.arity) or (cmd.arity < 0 and len(argv) < -cmd.arity):
        return f"ERR wrong number of arguments for '{container.name}|{sub}' command"
    return None


def run_subcommand(c: Client, argv: list[Any], container: str) -> Awaitable[None] | None:
    """Dispatch ``CONTAINER SUB args...`` (CLIENT, CONFIG, COMMAND) with Redis's errors for a bad sub/arity."""
    from kvd.protocol.errors import CommandError

    parent = COMMANDS[container.encode()]
    refused = subcommand_error(parent, argv)
    if refused is not None:
        raise CommandError(refused)
    return parent.subcommands[bytes(argv[1]).lower().decode("utf-8", "replace")].handler(c, argv)


def subcommand_help(c: Client, container: str) -> None:
    """``CONTAINER HELP``: one line of usage and one of summary per subcommand, as simple strings."""
    lines = [f"{container.upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
    for name, sub in sorted(COMMANDS[container.encode()].subcommands.items()):
        lines.append(f"{name.upper()} {sub.usage}".rstrip())
        lines.append(f"    {sub.summary}")
    c.reply.array(len(lines))
    for line in lines:
        c.reply.simple(line)


# -- COMMAND DOCS argument trees ----------------------------------------------------------------------------

_TOKEN = re.compile(r"\[|\]|\||\.\.\.|[^\s\[\]|]+")


def _parse_usage(usage: str) -> list[dict[str, Any]]:
    """Turn ``key value [NX | XX] [EX seconds | PX milliseconds]`` into Redis's COMMAND DOCS argument list.

    Grammar: ``[ ... ]`` optional group, ``a | b`` one-of, ``...`` repeats the previous item, an UPPERCASE word
    is a literal token, and a lowercase word is a typed argument (``key`` -> key, ``*seconds*``/``count`` ->
    integer, else string). An UPPERCASE word directly followed by a lowercase word is a token with a value.
    """
    tokens = _TOKEN.findall(usage)
    pos = 0

    def parse_seq(stop: set[str]) -> list[dict[str, Any]]:
        nonlocal pos
        items: list[dict[str, Any]] = []
        while pos < len(tokens) and tokens[pos] not in stop:
            tok = tokens[pos]
            pos += 1
            if tok == "[":
                alternatives = [parse_seq({"|", "]"})]
                while pos < len(tokens) and tokens[pos] == "|":
                    pos += 1
                    alternatives.append(parse_seq({"|", "]"}))
                pos += 1  # ']'
                items.append(_group(alternatives, optional=True))
            elif tok == "...":
                if items:
                    items[-1].setdefault("flags", []).append("multiple")
            elif tok.isupper():
                if (
                    pos < len(tokens)
                    and tokens[pos] not in "[]|"
                    and not tokens[pos].isupper()
                    and tokens[pos] != "..."
                ):
                    value = tokens[pos]
                    pos += 1
                    items.append({"name": value, "type": _arg_type(value), "token": tok})
                else:
                    items.append({"name": tok.lower(), "type": "pure-token", "token": tok})
            else:
                items.append({"name": tok, "type": _arg_type(tok)})
        return items

    def _group(alternatives: list[list[dict[str, Any]]], optional: bool) -> dict[str, Any]:
        if len(alternatives) == 1:
            seq = alternatives[0]
            arg = seq[0] if len(seq) == 1 else {"name": "block", "type": "block", "arguments": seq}
        else:
            options = [
                seq[0] if len(seq) == 1 else {"name": "block", "type": "block", "arguments": seq}
                for seq in alternatives
            ]
            arg = {"name": "condition", "type": "oneof", "arguments": options}
        arg = dict(arg)
        if optional:
            arg["flags"] = [*arg.get("flags", []), "optional"]
        return arg

    while pos < len(tokens):
        result = parse_seq(set())
        return result
    return []


def _arg_type(name: str) -> str:
    if name in ("key", "destination", "source"):
        return "key"
    if any(
        word in name for word in ("seconds", "milliseconds", "count", "cursor", "start", "end", "index", "time", "id")
    ):
        return "integer"
    return "string"
