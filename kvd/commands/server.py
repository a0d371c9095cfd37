"""Server commands: INFO, CONFIG, COMMAND, TIME, SHUTDOWN.

COMMAND DOCS is what redis-cli reads on start to build its interactive help and argument hints, and COMMAND
INFO is what client libraries use for key positions; both are generated from the command table so they can
never disagree with what the server actually accepts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvd.config import ConfigError, Settings, redis_items, rewrite_toml, settings_items
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.glob import glob_match

from .args import lower, text
from .registry import (
    ADMIN,
    ALLOW_BUSY,
    COMMANDS,
    FAST,
    FLAG_ORDER,
    LOADING,
    NO_ASYNC_LOADING,
    NO_MULTI,
    NOSCRIPT,
    STALE,
    Command,
    KeySpec,
    acl_categories,
    command,
    keys_and_flags,
    run_subcommand,
    subcommand_help,
)

if TYPE_CHECKING:
    from kvd.connection import Client

G = "server"
log = logging.getLogger("kvd.server")


@command(
    "info",
    -1,
    f"{LOADING} {STALE}",
    group=G,
    summary="Returns information and statistics about the server.",
    usage="[section [section ...]]",
    tips="nondeterministic_output request_policy:all_shards response_policy:special",
)
def info(c: Client, argv: list[Any]) -> None:
    sections = [text(a).lower() for a in argv[1:]]
    c.reply.verbatim(c.server.info_text(sections))


@command(
    "time",
    1,
    f"{FAST} {LOADING} {STALE}",
    group=G,
    since="2.6.0",
    summary="Returns the server time.",
    tips="nondeterministic_output",
)
def time_(c: Client, argv: list[Any]) -> None:
    now = time.time_ns() // 1000
    c.reply.array(2)
    c.reply.bulk(b"%d" % (now // 1_000_000))
    c.reply.bulk(b"%d" % (now % 1_000_000))


@command(
    "shutdown",
    -1,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE} {NO_MULTI} {ALLOW_BUSY}",
    group=G,
    summary="Synchronously flushes the log and shuts down the server.",
    usage="[NOSAVE | SAVE] [NOW] [FORCE] [ABORT]",
    complexity="O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise "
    "O(1)",
)
def shutdown(c: Client, argv: list[Any]) -> None:
    flags = {lower(raw) for raw in argv[1:]}
    if not flags <= {b"nosave", b"save", b"now", b"force", b"abort"}:
        raise CommandError(errors.SYNTAX)
    if (b"abort" in flags and len(flags) > 1) or {b"nosave", b"save"} <= flags:  # Redis's illegal combinations
        raise CommandError(errors.SYNTAX)
    if b"abort" in flags:
        # Redis's ABORT cancels a shutdown that waits for lagging replicas; kvd's never waits once it has begun.
        raise CommandError("ERR No shutdown in progress.")
    c.server.request_shutdown("SHUTDOWN command")
    c.close_after_reply = True  # Redis sends no reply on success; the connection just closes.


@command(
    "monitor",
    1,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    summary="Listens for all requests received by the server in real-time (kvd/monitor.py: long values cut).",
    complexity="",
)
def monitor_(c: Client, argv: list[Any]) -> None:
    if c.executing_transaction:
        raise CommandError("ERR MONITOR isn't allowed for DENY BLOCKING client")  # Redis's words, inside EXEC
    if c.monitoring:
        return  # as Redis: a second MONITOR gets no reply
    c.monitoring = True
    c.server.monitors.add(c)
    c.reply.ok()


# -- SAVE, BGSAVE, LASTSAVE (kvd/persist/saves.py) -------------------------------------------------------------

_NOTHING_TO_SAVE = "ERR persistence is off: kvd writes nothing to disk (start it with --persistence yes)"
_SAVE_FAILED = "ERR the log could not be fsynced: see kvd's log"


@command(
    "save",
    1,
    f"{ADMIN} {NOSCRIPT} {NO_ASYNC_LOADING} {NO_MULTI}",
    group=G,
    summary="Makes everything written so far durable: the log is fsynced (kvd blocks only the caller).",
    complexity="O(N) where N is the total number of keys in all databases",
)
def save(c: Client, argv: list[Any]) -> Any:
    saves = c.server.saves
    if saves.log is None:
        raise CommandError(_NOTHING_TO_SAVE)
    pending = saves.save()

    async def reply() -> None:
        if not await pending:
            raise CommandError(_SAVE_FAILED)
        c.reply.ok()

    return reply()


@command(
    "bgsave",
    -1,
    f"{ADMIN} {NOSCRIPT} {NO_ASYNC_LOADING}",
    group=G,
    summary="Makes everything written so far durable in the background; LASTSAVE tells when it is done.",
    usage="[SCHEDULE]",
)
def bgsave(c: Client, argv: list[Any]) -> None:
    schedule = len(argv) == 2 and lower(argv[1]) == b"schedule"
    if len(argv) > 2 or (len(argv) == 2 and not schedule):
        raise CommandError(errors.SYNTAX)
    saves = c.server.saves
    if saves.log is None:
        raise CommandError(_NOTHING_TO_SAVE)
    if saves.in_progress:
        if not schedule:
            raise CommandError("ERR Background save already in progress")
        saves.save()
        c.reply.simple("Background saving scheduled")
        return
    saves.save()
    c.reply.simple("Background saving started")


@command(
    "bgrewriteaof",
    1,
    f"{ADMIN} {NOSCRIPT} {NO_ASYNC_LOADING}",
    group=G,
    summary="Compacts every segment of the log that holds dead bytes, now rather than at its dead-ratio threshold.",
)
def bgrewriteaof(c: Client, argv: list[Any]) -> None:
    seg_log = c.keyspace.log
    if seg_log is None:
        raise CommandError(_NOTHING_TO_SAVE)
    if not seg_log.rewrite():
        raise CommandError("ERR Background append only file rewriting already in progress")
    c.reply.simple("Background append only file rewriting started")


@command(
    "lastsave",
    1,
    f"{FAST} {LOADING} {STALE}",
    group=G,
    summary="Returns the Unix time of the last completed SAVE or BGSAVE (or of the start).",
    tips="nondeterministic_output",
)
def lastsave(c: Client, argv: list[Any]) -> None:
    c.reply.integer(c.server.saves.last_save)


# -- CONFIG --------------------------------------------------------------------------------------------------


def config_pairs(c: Client) -> list[tuple[str, str]]:
    settings = c.server.settings
    return settings_items(settings) + redis_items(settings)


@command(
    "config",
    -2,
    "",
    group=G,
    since="2.0.0",
    summary="A container for server configuration commands.",
    usage="subcommand [argument ...]",
    complexity="Depends on subcommand.",
)
def config(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "config")


@command(
    "get",
    -3,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    parent="config",
    summary="Returns the effective values of configuration parameters.",
    usage="parameter [parameter ...]",
    complexity="O(N) when N is the number of configuration parameters provided",
)
def config_get(c: Client, argv: list[Any]) -> None:
    """As Redis's configGetCommand: a name without glob characters is looked up and answered as it was written
    (``CONFIG GET MAXMEMORY`` -> ``MAXMEMORY``), a pattern is matched against every name; each setting once."""
    pairs = config_pairs(c)
    values: dict[str, str] = {}
    for name, value in pairs:
        values.setdefault(name, value)
    found: dict[str, tuple[str, str]] = {}  # lowercase name -> (name as answered, value)
    for raw in argv[2:]:
        pattern = bytes(raw)
        if not any(ch in pattern for ch in b"[*?"):
            written = pattern.decode("utf-8", "replace")
            name = written.lower()
            if name in values and name not in found:
                found[name] = (written, values[name])
            continue
        for name, value in pairs:
            if name not in found and glob_match(pattern, name.encode(), nocase=True):
                found[name] = (name, value)
    c.reply.str_map(list(found.values()))


@command(
    "set",
    -4,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    parent="config",
    summary="Sets configuration parameters in-flight.",
    usage="parameter value [parameter value ...]",
    tips="request_policy:all_nodes response_policy:all_succeeded",
    complexity="O(N) when N is the number of configuration parameters provided",
)
def config_set(c: Client, argv: list[Any]) -> None:
    if len(argv) % 2 != 0:  # a parameter without its value
        raise CommandError(errors.SYNTAX)
    settings = c.server.settings
    from kvd.config import apply_runtime, is_setting

    seen: set[str] = set()
    for i in range(2, len(argv), 2):  # every name before any value, in order, as Redis's configSetCommand
        name, given = text(argv[i]).lower(), errors.c_string(argv[i])  # " maxmemory" is no name, as in Redis
        if not is_setting(name):
            raise CommandError(f"ERR Unknown option or number of arguments for CONFIG SET - '{given}'")
        if name in seen:
            raise CommandError(f"ERR CONFIG SET failed (possibly related to argument '{given}') - duplicate parameter")
        seen.add(name)
    for i in range(2, len(argv), 2):
        name = text(argv[i]).lower()
        try:
            settings = apply_runtime(settings, name, text(argv[i + 1]))
        except ConfigError as exc:
            raise CommandError(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {exc}") from exc
    c.server.apply_settings(settings)
    c.reply.ok()


@command(
    "rewrite",
    2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.8.0",
    parent="config",
    summary="Persists the effective configuration to file.",
)
def config_rewrite(c: Client, argv: list[Any]) -> None:
    """Write the running settings into the TOML file kvd was started with (``kvd.config.rewrite_toml``): a
    new file beside it, fsynced, renamed over it, directory fsynced, so a crash leaves the old file or the new
    one, never a torn one."""
    if not c.server.settings.config_file:
        raise CommandError("ERR The server is running without a config file")
    rewrite_config(c.server.settings)
    log.info("CONFIG REWRITE executed with success")
    c.reply.ok()


def rewrite_config(settings: Settings) -> None:
    """CONFIG REWRITE's work on ``settings.config_file`` (DEBUG RESTART does it too); CommandError if it fails."""
    path = settings.config_file
    assert path
    try:
        try:
            with open(path, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""  # removed since start-up: written anew, as Redis does
        _replace_file(path, rewrite_toml(current, settings))
    except OSError as exc:
        raise CommandError(f"ERR Rewriting config file: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CommandError(f"ERR Rewriting config file: {exc}") from exc


def _replace_file(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.rewrite.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@command(
    "resetstat",
    2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="2.0.0",
    parent="config",
    summary="Resets the server's statistics.",
)
def config_resetstat(c: Client, argv: list[Any]) -> None:
    c.server.reset_stats()
    c.reply.ok()


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="5.0.0",
    parent="config",
    summary="Returns helpful text about the different subcommands.",
)
def config_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "config")


# -- COMMAND -------------------------------------------------------------------------------------------------


@command(
    "command",
    -1,
    f"{LOADING} {STALE}",
    group=G,
    since="2.8.13",
    complexity="O(N) where N is the total number of Redis commands",
    summary="Returns detailed information about all commands.",
    usage="[subcommand [argument ...]]",
    tips="nondeterministic_output_order",
)
def command_(c: Client, argv: list[Any]) -> Any:
    if len(argv) == 1:
        cmds = sorted(COMMANDS.values(), key=lambda cmd: cmd.name)
        c.reply.array(len(cmds))
        for cmd in cmds:
            _command_info(c, cmd)
        return None
    return run_subcommand(c, argv, "command")


def _lookup(name: bytes) -> tuple[Command, Command | None] | None:
    """A command by name, or a subcommand by its full name (``client|list``), with its container."""
    raw = lower(name)
    if b"|" in raw:
        parent, _, sub = raw.partition(b"|")
        container = COMMANDS.get(parent)
        cmd = container.subcommands.get(sub.decode("utf-8", "replace")) if container else None
        return (cmd, container) if cmd is not None else None
    cmd = COMMANDS.get(raw)
    return (cmd, None) if cmd is not None else None


def _full_name(cmd: Command, parent: Command | None) -> str:
    return f"{parent.name}|{cmd.name}" if parent else cmd.name


def _command_info(c: Client, cmd: Command, parent: Command | None = None) -> None:
    r = c.reply
    r.array(10)
    r.text(_full_name(cmd, parent))
    r.integer(cmd.arity)
    _flag_set(c, [flag for flag in FLAG_ORDER if flag in cmd.flags])
    r.integer(cmd.first_key)
    r.integer(cmd.last_key)
    r.integer(cmd.step)
    categories = acl_categories(cmd, parent)
    r.set(len(categories))
    for category in categories:
        r.simple(f"@{category}")
    r.set(len(cmd.tips))
    for tip in cmd.tips:
        r.text(tip)
    r.set(len(cmd.key_specs))
    for spec in cmd.key_specs:
        _key_spec(c, spec)
    subs = sorted(cmd.subcommands.values(), key=lambda s: s.name)
    r.set(len(subs))
    for sub in subs:
        _command_info(c, sub, cmd)


def _flag_set(c: Client, flags: list[str] | tuple[str, ...]) -> None:
    c.reply.set(len(flags))
    for flag in flags:
        c.reply.simple(flag)


def _key_spec(c: Client, spec: KeySpec) -> None:
    """One key specification as Redis's addReplyCommandKeySpecs writes it."""
    r = c.reply
    r.map(4 if spec.notes else 3)
    if spec.notes:
        r.text("notes")
        r.text(spec.notes)
    r.text("flags")
    _flag_set(c, spec.flags)
    r.text("begin_search")
    r.map(2)
    r.text("type")
    if spec.keyword:
        r.text("keyword")
        r.text("spec")
        r.map(2)
        r.text("keyword")
        r.text(spec.keyword)
        r.text("startfrom")
        r.integer(spec.startfrom)
    elif spec.index == 0:
        r.text("unknown")
        r.text("spec")
        r.map(0)
    else:
        r.text("index")
        r.text("spec")
        r.map(1)
        r.text("index")
        r.integer(spec.index)
    r.text("find_keys")
    r.map(2)
    r.text("type")
    if spec.index == 0 and not spec.keyword:
        r.text("unknown")
        r.text("spec")
        r.map(0)
        return
    r.text("range")
    r.text("spec")
    r.map(3)
    for name, value in (("lastkey", spec.lastkey), ("keystep", spec.keystep), ("limit", 0)):  # no kvd spec limits
        r.text(name)
        r.integer(value)


@command(
    "count",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="command",
    summary="Returns a count of commands.",
)
def command_count(c: Client, argv: list[Any]) -> None:
    c.reply.integer(len(COMMANDS))


@command(
    "list",
    -2,
    f"{LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="command",
    summary="Returns a list of command names.",
    usage="[FILTERBY MODULE module-name | ACLCAT category | PATTERN pattern]",
    tips="nondeterministic_output_order",
    complexity="O(N) where N is the total number of Redis commands",
)
def command_list(c: Client, argv: list[Any]) -> None:
    """Every command and, as Redis 7 lists them, every subcommand by its full name (``client|list``); a filter
    applies to each on its own (a pattern matches the full name, a category the subcommand's own)."""
    listed = [
        (_full_name(cmd, parent), cmd, parent)
        for top in COMMANDS.values()
        for cmd, parent in [(top, None), *((sub, top) for sub in top.subcommands.values())]
    ]
    if len(argv) > 2:
        if len(argv) != 5 or lower(argv[2]) != b"filterby":
            raise CommandError(errors.SYNTAX)
        kind, value = lower(argv[3]), bytes(argv[4])
        if kind == b"pattern":
            listed = [item for item in listed if glob_match(value, item[0].encode(), nocase=True)]
        elif kind == b"aclcat":
            category = value.decode("utf-8", "replace").lstrip("@").lower()
            listed = [item for item in listed if category in acl_categories(item[1], item[2])]
        elif kind == b"module":
            listed = []
        else:
            raise CommandError(errors.SYNTAX)
    c.reply.bulk_array(sorted(name.encode() for name, _, _ in listed))


@command(
    "info",
    -2,
    f"{LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="command",
    summary="Returns information about one, multiple or all commands.",
    usage="[command-name [command-name ...]]",
    tips="nondeterministic_output_order",
    complexity="O(N) where N is the number of commands to look up",
)
def command_info(c: Client, argv: list[Any]) -> None:
    if len(argv) == 2:
        command_(c, argv[:1])
        return
    c.reply.array(len(argv) - 2)
    for name in argv[2:]:
        found = _lookup(bytes(name))
        if found is None:
            c.reply.null()  # Redis's addReplyNull: $-1 in RESP2, not a null array
        else:
            _command_info(c, *found)


@command(
    "docs",
    -2,
    f"{LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="command",
    summary="Returns documentary information about one, multiple or all commands.",
    usage="[command-name [command-name ...]]",
    tips="nondeterministic_output_order",
    complexity="O(N) where N is the number of commands to look up",
)
def command_docs(c: Client, argv: list[Any]) -> None:
    if len(argv) == 2:
        cmds = [(cmd, None) for cmd in sorted(COMMANDS.values(), key=lambda cmd: cmd.name)]
    else:
        cmds = []
        for name in argv[2:]:
            found = _lookup(bytes(name))
            if found is not None:
                cmds.append(found)
    c.reply.map(len(cmds))
    for cmd, parent in cmds:
        c.reply.text(_full_name(cmd, parent))
        _command_docs(c, cmd)


def _command_docs(c: Client, cmd: Command) -> None:
    """One command's documentation in Redis's order (addReplyCommandDocs): flags as sets of simple strings, no
    ``history``."""
    r = c.reply
    fields: list[tuple[str, str]] = [("summary", cmd.summary), ("since", cmd.since), ("group", cmd.group)]
    if cmd.complexity:  # Redis leaves it out where its table has none (LOLWUT, MONITOR)
        fields.append(("complexity", cmd.complexity))
    arguments = cmd.arguments()
    r.map(
        len(fields)
        + bool(cmd.doc_flags)
        + bool(cmd.deprecated_since)
        + bool(cmd.replaced_by)
        + bool(arguments)
        + bool(cmd.subcommands)
    )
    for name, value in fields:
        r.text(name)
        r.text(value)
    if cmd.doc_flags:
        r.text("doc_flags")
        _flag_set(c, cmd.doc_flags)
    for name, value in (("deprecated_since", cmd.deprecated_since), ("replaced_by", cmd.replaced_by)):
        if value:
            r.text(name)
            r.text(value)
    if arguments:
        r.text("arguments")
        _argument_list(c, arguments)
    if cmd.subcommands:
        r.text("subcommands")
        r.map(len(cmd.subcommands))
        for sub in sorted(cmd.subcommands.values(), key=lambda s: s.name):
            r.text(sub.full_name)
            _command_docs(c, sub)


def _argument_list(c: Client, arguments: Sequence[dict[str, Any]]) -> None:
    """An argument tree as Redis's addReplyCommandArgList writes it: each argument's fields in the order its
    dict has them (Redis's), ``flags`` as a set, ``arguments`` nested."""
    r = c.reply
    r.array(len(arguments))
    for arg in arguments:
        r.map(len(arg))
        for name, value in arg.items():
            r.text(name)
            if name == "flags":
                _flag_set(c, value)
            elif name == "arguments":
                _argument_list(c, value)
            elif isinstance(value, int):
                r.integer(value)
            else:
                r.text(value)


@command(
    "getkeys",
    -4,
    f"{LOADING} {STALE}",
    group=G,
    since="2.8.13",
    parent="command",
    summary="Extracts the key names from an arbitrary command.",
    usage="command [arg [arg ...]]",
    complexity="O(N) where N is the number of arguments to the command",
)
def command_getkeys(c: Client, argv: list[Any]) -> None:
    _getkeys(c, argv, with_flags=False)


@command(
    "getkeysandflags",
    -4,
    f"{LOADING} {STALE}",
    group=G,
    since="7.0.0",
    parent="command",
    summary="Extracts the key names and access flags for an arbitrary command.",
    usage="command [arg [arg ...]]",
    complexity="O(N) where N is the number of arguments to the command",
)
def command_getkeysandflags(c: Client, argv: list[Any]) -> None:
    _getkeys(c, argv, with_flags=True)


def _getkeys(c: Client, argv: list[Any], with_flags: bool) -> None:
    """COMMAND GETKEYS / GETKEYSANDFLAGS: Redis's checks in Redis's order (the command or subcommand, whether it
    has keys at all, its arity), then the keys its specs find."""
    args = argv[2:]
    cmd = COMMANDS.get(lower(args[0]))
    if cmd is not None and cmd.subcommands and len(args) > 1:
        cmd = cmd.subcommands.get(bytes(args[1]).lower().decode("utf-8", "replace"))
    if cmd is None:
        raise CommandError("ERR Invalid command specified")
    if cmd.get_keys is None and all("not_key" in spec.flags for spec in cmd.key_specs):
        raise CommandError("ERR The command has no key arguments")
    if (cmd.arity > 0 and len(args) != cmd.arity) or len(args) < -cmd.arity:
        raise CommandError("ERR Invalid number of arguments specified for command")
    found = keys_and_flags(cmd, args)
    if not found:
        raise CommandError("ERR Invalid arguments specified for command")
    r = c.reply
    r.array(len(found))
    for position, flags in found:
        if with_flags:
            r.array(2)
            r.bulk(args[position])
            _flag_set(c, flags)
        else:
            r.bulk(args[position])


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="5.0.0",
    parent="command",
    summary="Returns helpful text about the different subcommands.",
)
def command_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "command")
