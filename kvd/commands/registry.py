"""The command table: name, arity, flags, key positions, handler and documentation of every command.

Handlers register with ``@command(...)`` in the family modules (``strings``, ``keys``, ``connection``,
``server``, ``kvd_ext``). The connection looks a command up by its lowercased name, checks arity and the flags
(auth, writability, memory: ``denyoom`` commands are refused while memory is over ``maxmemory``, as Redis's
processCommand refuses them) in one place, ``Client._execute``, and calls the handler. A handler writes its reply
through ``client.reply`` and returns None, or returns an awaitable when it must wait for the disk; the
connection then suspends that client's pipeline until the awaitable is done, which keeps replies in order.

Arity follows Redis: positive = exact argument count including the name, negative = at least that many.
``usage`` is the argument syntax shown by HELP. COMMAND DOCS' ``arguments`` (redis-cli's hints, GUI tools) are
Redis 7.0.15's own trees from ``docs.py`` for every command Redis has; kvd's own commands' are derived from
``usage`` by ``_parse_usage``. COMMAND DOCS gives Redis's since, group, complexity, doc flags and deprecation
from each ``@command`` declaration, kvd's own summary, and no ``history``.

Keys are described twice, as Redis 7 describes them: the legacy (first, last, step) triple that COMMAND INFO
still prints and client-side tracking uses, and the key specifications (``KeySpec``: where each group of keys
starts, how far it runs, and what the command does to those keys: RO/RW/OW/RM, access/update/insert/delete).
COMMAND GETKEYS and GETKEYSANDFLAGS read the specs; a command whose keys or flags depend on its arguments
(SET ... GET, BITFIELD, SORT ... STORE) names a ``get_keys`` function instead, as Redis's getkeys_proc.
Flags and tips that only describe (``noscript``, ``allow_busy``, ``request_policy:...``) are carried so that
COMMAND INFO is Redis's byte for byte; tests/compat/test_command.py compares every command with redis-server's.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import docs

if TYPE_CHECKING:
    from kvd.connection import Client

Handler = Callable[["Client", list[Any]], Awaitable[None] | None]

WRITE = "write"  # changes the dataset: refused while the log is in MISCONF state
DENYOOM = "denyoom"  # may grow memory: refused while memory is over maxmemory and eviction cannot bring it under
NOAUTH = "no_auth"  # allowed before AUTH
READONLY = "readonly"
FAST = "fast"
ADMIN = "admin"
LOADING = "loading"  # runs while a replica loads its primary's snapshot (others: -LOADING)
STALE = "stale"  # runs on a replica whose link is down under replica-serve-stale-data no (others: -MASTERDOWN)
NO_MULTI = "no_multi"  # refused after MULTI (and the transaction fails), as Redis refuses SAVE and SHUTDOWN
SKIP_SLOWLOG = "skip_slowlog"  # never in SLOWLOG (EXEC: the commands it ran are there)
PUBSUB = "pubsub"
ASKING = "asking"  # runs on a cluster node that does not own the slot, after ASKING (kvd: no cluster, no effect)
MOVABLEKEYS = "movablekeys"  # its keys are found by ``get_keys``, not by position alone
# Described, with no effect in kvd: it runs no scripts (noscript, allow_busy) and never loads while serving
# (no_async_loading).
NOSCRIPT = "noscript"
ALLOW_BUSY = "allow_busy"
NO_ASYNC_LOADING = "no_async_loading"

# The order COMMAND INFO lists flags in (Redis's addReplyFlagsForCommand).
FLAG_ORDER = (
    "write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking", "loading", "stale",
    "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth", "no_mandatory_keys", "no_async_loading",
    "no_multi", "movablekeys", "allow_busy",
)  # fmt: skip
# What a command does to a key, in the order Redis lists them (its addReplyFlagsForKeyArgs).
KEY_FLAG_ORDER = (
    "RO", "RW", "OW", "RM", "access", "update", "insert", "delete", "not_key", "incomplete", "variable_flags",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One group of a command's keys (a Redis 7 key specification): it begins at argument ``index`` and runs
    to ``lastkey`` (relative to ``index``; negative: counted from the end of the arguments) in steps of
    ``keystep``. ``index`` 0 is Redis's "unknown" search (SORT's BY and STORE keys, which ``get_keys`` finds).
    ``flags``: what the command does to these keys, from ``KEY_FLAG_ORDER``. ``keyword``: the search begins
    after that word instead (MIGRATE's KEYS), looked for from argument ``startfrom`` (negative: from the end,
    backwards); such a command finds its keys with ``get_keys``."""

    flags: tuple[str, ...]
    index: int = 0
    lastkey: int = 0
    keystep: int = 1
    notes: str = ""
    keyword: str = ""
    startfrom: int = 0


KeysAndFlags = list[tuple[int, tuple[str, ...]]]  # argument positions of keys, each with its key flags


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
    denyoom: bool = False  # likewise: refused up front while memory is over maxmemory (Client._out_of_memory)
    # It may wait long after it started (for replicas, an fsync, a snapshot's reader): what it waits is not run
    # time, so INFO commandstats, SLOWLOG and LATENCY count only the step that started it, as Redis's call()
    # times a blocked command.
    waits: bool = False
    # The setting that lets it run, for what Redis flags PROTECTED (DEBUG: enable-debug-command); "" for the rest.
    protected: str = ""
    key_specs: tuple[KeySpec, ...] = ()
    # Where the keys are when the specs cannot say (Redis's getkeys_proc): argv -> positions and flags.
    get_keys: Callable[[list[Any]], KeysAndFlags] | None = None
    tips: tuple[str, ...] = ()  # COMMAND INFO's hints to proxies and clients (request_policy:..., ...)
    parent: str = ""  # the container's name for a subcommand (CLIENT for CLIENT KILL), else ""
    # COMMAND DOCS' ``doc_flags`` (deprecated, syscmd) and, for a deprecated command, since when and what instead
    doc_flags: tuple[str, ...] = ()
    deprecated_since: str = ""
    replaced_by: str = ""

    @property
    def full_name(self) -> str:
        """``get``, or ``client|kill`` for a subcommand: how COMMAND LIST, INFO and DOCS name it."""
        return f"{self.parent}|{self.name}" if self.parent else self.name

    def arguments(self) -> Sequence[dict[str, Any]]:
        """COMMAND DOCS' argument tree: Redis's (``docs.py``), or for a kvd-only command its ``usage``'s."""
        found = docs.arguments(self.full_name)
        return found if found is not None else _parse_usage(self.usage)


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
    key_flags: str = "",
    key_specs: tuple[KeySpec, ...] = (),
    get_keys: Callable[[list[Any]], KeysAndFlags] | None = None,
    tips: str = "",
    doc_flags: str = "",
    deprecated_since: str = "",
    replaced_by: str = "",
) -> Callable[[Handler], Handler]:
    """Register a handler. ``parent`` makes it a subcommand (e.g. CLIENT SETNAME) for COMMAND DOCS/INFO.
    ``since``, ``complexity`` (``""``: Redis gives none), ``doc_flags`` (``deprecated``, ``syscmd``),
    ``deprecated_since`` and ``replaced_by`` are Redis's documentation of the command, for COMMAND DOCS.

    ``key_flags`` describes the one group of keys that ``keys`` locates (``"RW access update"``); a command
    with several groups gives ``key_specs`` instead."""
    if key_flags:
        assert not key_specs and keys[0] > 0, name
        first, last, step = keys
        key_specs = (KeySpec(tuple(key_flags.split()), first, last - first if last >= 0 else last, step),)
    for spec in key_specs:
        assert all(flag in KEY_FLAG_ORDER for flag in spec.flags), (name, spec.flags)
    assert all(flag in FLAG_ORDER for flag in flags.split()), (name, flags)

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
            denyoom=DENYOOM in flags.split(),
            waits=waits,
            protected=protected,
            key_specs=key_specs,
            get_keys=get_keys,
            tips=tuple(tips.split()),
            parent=parent or "",
            doc_flags=tuple(doc_flags.split()),
            deprecated_since=deprecated_since,
            replaced_by=replaced_by,
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
    "hyperloglog": "hyperloglog",
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
    "command|getkeysandflags": ("slow", "connection"),
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
    "restore-asking": ("keyspace", "write", "slow", "dangerous"),
    "migrate": ("keyspace", "write", "slow", "dangerous"),
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
    """The key arguments of ``argv`` by the command's (first, last, step): the keys a tracking client's
    read-only command makes kvd remember (kvd/tracking.py)."""
    if cmd.first_key == 0:
        return []
    last = cmd.last_key if cmd.last_key >= 0 else len(argv) + cmd.last_key
    return [bytes(argv[i]) for i in range(cmd.first_key, min(last, len(argv) - 1) + 1, cmd.step)]


def keys_and_flags(cmd: Command, argv: list[Any]) -> KeysAndFlags | None:
    """Where ``argv``'s keys are and what ``cmd`` does to each (COMMAND GETKEYS and GETKEYSANDFLAGS), or None
    when the arguments are too few for the specs. As Redis's getKeysUsingKeySpecs: every spec in turn,
    ``not_key`` ones (SPUBLISH's channel) skipped; ``get_keys`` where the specs cannot tell."""
    if cmd.get_keys is not None:
        return cmd.get_keys(argv)
    found: KeysAndFlags = []
    argc = len(argv)
    for spec in cmd.key_specs:
        if "not_key" in spec.flags:
            continue
        first = spec.index
        last = first + spec.lastkey if spec.lastkey >= 0 else argc + spec.lastkey
        if last >= argc or last < first or first >= argc:
            return None
        found.extend((i, spec.flags) for i in range(first, last + 1, spec.keystep))
    return found


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
_ARG_FLAG_ORDER = ("optional", "multiple", "multiple_token")  # as Redis lists an argument's flags


def _parse_usage(usage: str) -> list[dict[str, Any]]:
    """Turn a kvd-only command's ``usage`` (``key value [NX | XX] [EX seconds | PX milliseconds]``) into a
    COMMAND DOCS argument list shaped as Redis shapes its own.

    Grammar: ``[ ... ]`` optional, ``a | b`` one of (at any level, the top included), ``...`` repeats the previous
    item, an UPPERCASE word is a literal token, a lowercase word a typed argument (``key`` -> key, a count, time
    or number -> integer, else string), and an UPPERCASE word directly followed by a lowercase one a token with a
    value. Redis's ``key [key ...]`` and ``counter increment [counter increment ...]`` are one repeated argument
    (a block for several). A one-of or block is named after its parts (``on_off``, ``counter_increment``), as
    Redis names most of its own. Trees are built on each call (COMMAND DOCS is rare), so callers may keep them.
    """
    tokens = _TOKEN.findall(usage)
    pos = 0

    def alternatives(stop: set[str]) -> list[list[dict[str, Any]]]:
        nonlocal pos
        found = [sequence(stop | {"|"})]
        while pos < len(tokens) and tokens[pos] == "|":
            pos += 1
            found.append(sequence(stop | {"|"}))
        return found

    def sequence(stop: set[str]) -> list[dict[str, Any]]:
        nonlocal pos
        items: list[dict[str, Any]] = []
        while pos < len(tokens) and tokens[pos] not in stop:
            tok = tokens[pos]
            pos += 1
            if tok == "[":
                inner = alternatives({"]"})
                pos += 1  # ']'
                if not _repeats(items, inner):
                    items.append(_flagged(_group(inner), "optional"))
            elif tok == "...":
                if items:
                    items[-1] = _flagged(items[-1], "multiple")
            elif tok.isupper():
                if pos < len(tokens) and tokens[pos] not in ("[", "]", "|", "...") and not tokens[pos].isupper():
                    value = tokens[pos]
                    pos += 1
                    items.append({"name": value, "type": _arg_type(value), "token": tok})
                else:
                    items.append({"name": tok.lower(), "type": "pure-token", "token": tok})
            else:
                items.append({"name": tok, "type": _arg_type(tok)})
        return items

    found = alternatives(set())
    return [] if found == [[]] else found[0] if len(found) == 1 else [_group(found)]


def _repeats(items: list[dict[str, Any]], inner: list[list[dict[str, Any]]]) -> bool:
    """``a b [a b ...]``: make the ``a b`` already in ``items`` one repeated argument (a block for several) and
    say so; anything else is an ordinary optional group."""
    if len(inner) != 1 or not inner[0] or "multiple" not in inner[0][-1].get("flags", ()):
        return False
    names = [arg["name"] for arg in inner[0]]
    if len(items) < len(names) or [arg["name"] for arg in items[-len(names) :]] != names:
        return False
    repeated = items[-len(names) :]
    del items[-len(names) :]
    items.append(_flagged(_group([repeated]), "multiple"))
    return True


def _group(alternatives: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """One argument for a bracketed group: itself when alone, else a block (parts in a row) or a one-of."""
    options = [
        seq[0] if len(seq) == 1 else {"name": "_".join(a["name"] for a in seq), "type": "block", "arguments": seq}
        for seq in alternatives
        if seq
    ]
    if len(options) == 1:
        return options[0]
    return {"name": "_".join(a["name"] for a in options), "type": "oneof", "arguments": options}


def _flagged(arg: dict[str, Any], flag: str) -> dict[str, Any]:
    """``arg`` with ``flag`` added, its flags in Redis's order and before its nested ``arguments``."""
    flags = {*arg.get("flags", ()), flag}
    fields = {key: value for key, value in arg.items() if key not in ("flags", "arguments")}
    fields["flags"] = [name for name in _ARG_FLAG_ORDER if name in flags]
    if "arguments" in arg:
        fields["arguments"] = arg["arguments"]
    return fields


# Words of an argument's name that make it an integer (``client-id``, ``timeout``, ``start-slot``).
_INTEGER_WORDS = frozenset(
    ("seconds", "milliseconds", "count", "cursor", "start", "end", "index", "time", "timeout", "id", "offset",
     "length", "increment", "port", "slot", "db")
)  # fmt: skip


def _arg_type(name: str) -> str:
    """A kvd-only argument's type, guessed from its name."""
    if name in ("key", "destination", "source", "destkey", "sourcekey"):
        return "key"
    words = re.split(r"[-_]", name)
    if any(word in _INTEGER_WORDS or word.startswith("num") for word in words):
        return "integer"
    return "string"
