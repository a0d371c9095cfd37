"""ACL: what Redis's ACL commands answer on a server whose only user is ``default``, with ``requirepass``.

kvd has no users besides ``default``, and that user may run everything (``on``, ``~*``, ``&*``, ``+@all``); its
password is ``requirepass`` (none: ``nopass``). The commands that read the ACL state answer exactly as Redis does
for that configuration, so tools that ask who they are (WHOAMI), list users (USERS, LIST, GETUSER), check a
command (DRYRUN), list categories (CAT, from ``registry.acl_categories``), generate a password (GENPASS) or audit
refused logins (LOG, ``kvd/acllog.py``) work unchanged. The commands that would change users (SETUSER, DELUSER of
``default``, LOAD, SAVE) are refused with an error that says what to use instead.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.protocol.reply import Pairs

from .args import lower, parse_int
from .registry import (
    ACL_CATEGORIES,
    ADMIN,
    COMMANDS,
    LOADING,
    NOSCRIPT,
    STALE,
    acl_categories,
    command,
    run_subcommand,
    subcommand_help,
)

if TYPE_CHECKING:
    from kvd.connection import Client

G = "server"
DEFAULT = b"default"
_NO_ACL_FILE = (
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL "
    "SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order "
    "to store users in the Redis configuration."
)


@command("acl", -2, "", group=G, since="6.0.0", summary="A container for Access List Control commands.",
    complexity="Depends on subcommand.",
         usage="subcommand [argument ...]")  # fmt: skip
def acl(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "acl")


@command("whoami", 2, f"{NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
         summary="Returns the authenticated username of the current connection.")  # fmt: skip
def acl_whoami(c: Client, argv: list[Any]) -> None:
    c.reply.bulk(DEFAULT)


@command(
    "users",
    2,
    f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.0.0",
    parent="acl",
    summary="Lists all ACL users.",
    complexity="O(N). Where N is the number of configured users.",
)
def acl_users(c: Client, argv: list[Any]) -> None:
    c.reply.bulk_array([DEFAULT])


@command("list", 2, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(N). Where N is the number of configured users.",
         summary="Dumps the effective rules in ACL file format.")  # fmt: skip
def acl_list(c: Client, argv: list[Any]) -> None:
    password = _password_rule(c)
    c.reply.bulk_array([b"user default on %s ~* &* +@all" % password])


@command("getuser", 3, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(N). Where N is the number of password, command and pattern rules that the user has.",
         summary="Lists the ACL rules of a user.", usage="username")  # fmt: skip
def acl_getuser(c: Client, argv: list[Any]) -> None:
    if bytes(argv[2]) != DEFAULT:
        c.reply.null()
        return
    digest = _password_digest(c)
    r = c.reply
    r.map(6)
    r.bulk(b"flags")
    flags = [b"on"] if digest else [b"on", b"nopass"]
    r.set(len(flags))  # a set in RESP3, as Redis sends it
    for flag in flags:
        r.bulk(flag)
    r.bulk(b"passwords")
    r.bulk_array([digest] if digest else [])
    for name, rule in ((b"commands", b"+@all"), (b"keys", b"~*"), (b"channels", b"&*")):
        r.bulk(name)
        r.bulk(rule)
    r.bulk(b"selectors")
    r.array(0)


@command("cat", -2, f"{NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(1) since the categories and commands are a fixed set.",
         summary="Lists the ACL categories, or the commands inside a category.", usage="[category]")  # fmt: skip
def acl_cat(c: Client, argv: list[Any]) -> None:
    if len(argv) == 2:
        c.reply.bulk_array([name.encode() for name in ACL_CATEGORIES])
        return
    if len(argv) > 3:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "acl"))
    category = lower(argv[2]).decode("utf-8", "replace")
    if category not in ACL_CATEGORIES:
        raise CommandError(f"ERR Unknown category '{bytes(argv[2]).decode('utf-8', 'replace')}'")
    names: list[bytes] = []
    for cmd in COMMANDS.values():
        if cmd.subcommands:
            names += [b"%s|%s" % (cmd.name.encode(), s.name.encode()) for s in cmd.subcommands.values()
                      if category in acl_categories(s, cmd)]  # fmt: skip
        elif category in acl_categories(cmd):
            names.append(cmd.name.encode())
    c.reply.bulk_array(names)


@command("genpass", -2, f"{NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
         summary="Generates a pseudorandom, secure password that can be used to identify ACL users.",
         usage="[bits]")  # fmt: skip
def acl_genpass(c: Client, argv: list[Any]) -> None:
    bits = 256
    if len(argv) > 3:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "acl"))
    if len(argv) == 3:
        bits = parse_int(argv[2])
        if not 0 < bits <= 4096:
            raise CommandError(
                "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number "
                "up to 4096"
            )
    elif len(argv) > 3:
        raise CommandError(errors.wrong_arity("acl|genpass"))
    chars = (bits + 3) // 4
    c.reply.bulk(secrets.token_hex((chars + 1) // 2)[:chars].encode())


@command("dryrun", -4, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="7.0.0", parent="acl",
         summary="Simulates the execution of a command by a user, without executing the command.",
    complexity="O(1).",
         usage="username command [arg ...]")  # fmt: skip
def acl_dryrun(c: Client, argv: list[Any]) -> None:
    user = bytes(argv[2])
    if user != DEFAULT:
        raise CommandError(f"ERR User '{user.decode('utf-8', 'replace')}' not found")
    args = argv[3:]
    cmd = COMMANDS.get(lower(args[0]))
    full = cmd.name if cmd is not None else ""
    if cmd is not None and cmd.subcommands and len(args) > 1:  # Redis's lookupCommand: CONFIG GET, not CONFIG
        sub = cmd.subcommands.get(lower(args[1]).decode("utf-8", "replace"))
        full, cmd = f"{cmd.name}|{sub.name}" if sub is not None else "", sub
    if cmd is None:
        raise CommandError(f"ERR Command '{bytes(args[0]).decode('utf-8', 'replace')}' not found")
    if (cmd.arity > 0 and len(args) != cmd.arity) or len(args) < -cmd.arity:
        raise CommandError(errors.wrong_arity(full))
    c.reply.ok()  # default may run every command


@command("log", -2, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(N) with N being the number of entries shown.",
         summary="Lists recent security events generated due to ACL rules.", usage="[count | RESET]")  # fmt: skip
def acl_log(c: Client, argv: list[Any]) -> None:
    log = c.server.acl_log
    count = 10
    if len(argv) == 3:
        if lower(argv[2]) == b"reset":
            log.reset()
            c.reply.ok()
            return
        count = max(0, parse_int(argv[2]))
    elif len(argv) > 3:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "acl"))
    now = int(time.time() * 1000)
    entries = log.entries[:count]
    c.reply.array(len(entries))
    for entry in entries:
        c.reply.value(Pairs(entry.fields(now)))


@command("setuser", -3, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
         summary="Creates and modifies an ACL user and its rules (kvd: one user, default).",
    complexity="O(N). Where N is the number of rules provided.",
         usage="username [rule [rule ...]]")  # fmt: skip
def acl_setuser(c: Client, argv: list[Any]) -> None:
    raise CommandError(
        "ERR kvd has one user, 'default', who may run every command; its password is requirepass "
        "(CONFIG SET requirepass <password>)"
    )


@command("deluser", -3, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(1) amortized time considering the typical user.",
         summary="Deletes ACL users, and terminates their connections.", usage="username [username ...]")  # fmt: skip
def acl_deluser(c: Client, argv: list[Any]) -> None:
    if any(bytes(name) == DEFAULT for name in argv[2:]):
        raise CommandError("ERR The 'default' user cannot be removed")
    c.reply.integer(0)  # no such users


@command("load", 2, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(N). Where N is the number of configured users.",
         summary="Reloads the rules from the configured ACL file.")  # fmt: skip
def acl_load(c: Client, argv: list[Any]) -> None:
    raise CommandError(_NO_ACL_FILE)


@command("save", 2, f"{ADMIN} {NOSCRIPT} {LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
    complexity="O(N). Where N is the number of configured users.",
         summary="Saves the effective ACL rules in the configured ACL file.")  # fmt: skip
def acl_save(c: Client, argv: list[Any]) -> None:
    raise CommandError(_NO_ACL_FILE)


@command("help", 2, f"{LOADING} {STALE}", group=G, since="6.0.0", parent="acl",
         summary="Returns helpful text about the different subcommands.")  # fmt: skip
def acl_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "acl")


def _password_digest(c: Client) -> bytes:
    password = c.server.settings.requirepass
    return hashlib.sha256(password.encode("utf-8", "surrogateescape")).hexdigest().encode() if password else b""


def _password_rule(c: Client) -> bytes:
    digest = _password_digest(c)
    return b"#" + digest if digest else b"nopass"
