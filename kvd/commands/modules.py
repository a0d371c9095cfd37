"""MODULE: Redis's module commands, for a server that loads none.

Tools ask ``MODULE LIST`` to learn what a server can do (RedisInsight, redis-om, RediSearch and RedisJSON
clients check for their module before they use it), and Redis 7 answers it whatever its settings; kvd answers
an empty list, so they find no module rather than an unknown command. ``LOAD``, ``LOADEX`` and ``UNLOAD`` are
what Redis 7 guards with ``enable-module-command``, which is ``no`` by default; in kvd it is fixed at ``no``
(``kvd/config.py``, ``FIXED``: kvd has no module API), so they get Redis's refusal, before NOAUTH and before
MULTI queues them, as Redis refuses them (``Client._may_run_protected``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError

from .registry import ADMIN, LOADING, STALE, command, run_subcommand, subcommand_help

if TYPE_CHECKING:
    from kvd.connection import Client

G = "server"
GUARD = "enable-module-command"


@command(
    "module",
    -2,
    "",
    group=G,
    since="4.0.0",
    complexity="Depends on subcommand.",
    summary="A container for module commands.",
    usage="subcommand [argument ...]",
    protected=GUARD,
)
def module_(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "module")


@command(
    "list",
    2,
    f"{ADMIN} noscript",
    group=G,
    since="4.0.0",
    parent="module",
    complexity="O(N) where N is the number of loaded modules.",
    summary="Returns all loaded modules.",
    tips="nondeterministic_output_order",
)
def module_list(c: Client, argv: list[Any]) -> None:
    c.reply.array(0)


def _refuse(c: Client, argv: list[Any]) -> None:
    """Reached only if the guard let it through, which the fixed setting never does: the same refusal."""
    raise CommandError(errors.not_allowed("MODULE", GUARD))


for _name, _arity, _usage, _summary, _since in (
    ("load", -3, "path [arg ...]", "Loads a module.", "4.0.0"),
    ("loadex", -3, "path [CONFIG name value ...] [ARGS args ...]", "Loads a module using extended parameters.",
     "7.0.0"),
    ("unload", 3, "name", "Unloads a module.", "4.0.0"),
):  # fmt: skip
    command(
        _name,
        _arity,
        f"{ADMIN} noscript no_async_loading",
        group=G,
        since=_since,
        parent="module",
        usage=_usage,
        summary=_summary,
        protected=GUARD,
    )(_refuse)


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="5.0.0",
    parent="module",
    summary="Returns helpful text about the different subcommands.",
)
def module_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "module")
