"""CLUSTER, READONLY, READWRITE and ASKING: what Redis answers when it runs without cluster support.

kvd is one server (INFO says ``cluster_enabled:0``). A cluster client pointed at it (redis-py's ``RedisCluster``,
``redis-cli --cluster``, a proxy) starts with ``CLUSTER SLOTS``, ``NODES`` or ``SHARDS``, and a client reading
from replicas sends ``READONLY``. Redis started without ``cluster-enabled`` answers every one of them, HELP
included, with "This instance has cluster support disabled"; kvd now does the same where it answered "unknown
command", so the client's message names the real cause. The table is Redis 7.0's (arity and flags, as COMMAND
INFO shows them), so a wrong count or an unknown subcommand gets Redis's error first, and a loading or stale
replica refuses them as Redis does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol.errors import CommandError

from .registry import ADMIN, FAST, LOADING, NO_ASYNC_LOADING, NOSCRIPT, STALE, command, run_subcommand

if TYPE_CHECKING:
    from kvd.connection import Client

G = "cluster"
DISABLED = "ERR This instance has cluster support disabled"
_CHANGES = f"{ADMIN} {STALE} {NO_ASYNC_LOADING}"  # the subcommands that change a node's cluster state
# The subcommands whose answer Redis marks as varying between calls (COMMAND INFO's tips).
_NONDETERMINISTIC = {"bumpepoch", "count-failure-reports", "getkeysinslot", "info", "links", "nodes", "replicas"}
_NONDETERMINISTIC |= {"shards", "slaves", "slots"}
# COMMAND DOCS: Redis's complexity where it is not O(1), and the deprecated subcommands (since, replaced by).
_COMPLEXITY = {
    "addslots": "O(N) where N is the total number of hash slot arguments",
    "addslotsrange": "O(N) where N is the total number of the slots between the start slot and end slot arguments.",
    "count-failure-reports": "O(N) where N is the number of failure reports",
    "delslots": "O(N) where N is the total number of hash slot arguments",
    "delslotsrange": "O(N) where N is the total number of the slots between the start slot and end slot arguments.",
    "getkeysinslot": "O(log(N)) where N is the number of requested keys",
    "keyslot": "O(N) where N is the number of bytes in the key",
    "links": "O(N) where N is the total number of Cluster nodes",
    "nodes": "O(N) where N is the total number of Cluster nodes",
    "reset": "O(N) where N is the number of known nodes. The command may execute a FLUSHALL as a side effect.",
    "shards": "O(N) where N is the total number of cluster nodes",
    "slots": "O(N) where N is the total number of Cluster nodes",
}
_DEPRECATED = {"slaves": ("5.0.0", "`CLUSTER REPLICAS`"), "slots": ("7.0.0", "`CLUSTER SHARDS`")}


def _disabled(c: Client, argv: list[Any]) -> None:
    raise CommandError(DISABLED)


@command(
    "cluster",
    -2,
    "",
    group=G,
    since="3.0.0",
    complexity="Depends on subcommand.",
    summary="A container for Redis Cluster commands.",
    usage="subcommand [argument ...]",
)
def cluster_(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "cluster")


for _name, _arity, _flags, _since, _summary in (
    ("addslots", -3, _CHANGES, "3.0.0", "Assigns new hash slots to a node."),
    ("addslotsrange", -4, _CHANGES, "7.0.0", "Assigns new hash slot ranges to a node."),
    ("bumpepoch", 2, _CHANGES, "3.0.0", "Advances the cluster config epoch."),
    ("count-failure-reports", 3, f"{ADMIN} {STALE}", "3.0.0", "Returns the number of active failure reports."),
    ("countkeysinslot", 3, STALE, "3.0.0", "Returns the number of keys in a hash slot."),
    ("delslots", -3, _CHANGES, "3.0.0", "Sets hash slots as unbound for a node."),
    ("delslotsrange", -4, _CHANGES, "7.0.0", "Sets hash slot ranges as unbound for a node."),
    ("failover", -2, _CHANGES, "3.0.0", "Forces a replica to perform a manual failover of its master."),
    ("flushslots", 2, _CHANGES, "3.0.0", "Deletes all slots information from a node."),
    ("forget", 3, _CHANGES, "3.0.0", "Removes a node from the nodes table."),
    ("getkeysinslot", 4, STALE, "3.0.0", "Returns the key names in a hash slot."),
    ("help", 2, f"{LOADING} {STALE}", "5.0.0", "Returns helpful text about the different subcommands."),
    ("info", 2, STALE, "3.0.0", "Returns information about the state of a node."),
    ("keyslot", 3, STALE, "3.0.0", "Returns the hash slot for a key."),
    ("links", 2, STALE, "7.0.0", "Returns a list of all TCP links to and from peer nodes."),
    ("meet", -4, _CHANGES, "3.0.0", "Forces a node to handshake with another node."),
    ("myid", 2, STALE, "3.0.0", "Returns the ID of a node."),
    ("nodes", 2, STALE, "3.0.0", "Returns the cluster configuration for a node."),
    ("replicas", 3, f"{ADMIN} {STALE}", "5.0.0", "Lists the replica nodes of a master node."),
    ("replicate", 3, _CHANGES, "3.0.0", "Configure a node as replica of a master node."),
    ("reset", -2, f"{ADMIN} {NOSCRIPT} {STALE}", "3.0.0", "Resets a node."),
    ("saveconfig", 2, _CHANGES, "3.0.0", "Forces a node to save the cluster configuration to disk."),
    ("set-config-epoch", 3, _CHANGES, "3.0.0", "Sets the configuration epoch for a new node."),
    ("setslot", -4, _CHANGES, "3.0.0", "Binds a hash slot to a node."),
    ("shards", 2, STALE, "7.0.0", "Returns the mapping of cluster slots to shards."),
    ("slaves", 3, f"{ADMIN} {STALE}", "3.0.0", "Lists the replica nodes of a master node."),
    ("slots", 2, STALE, "3.0.0", "Returns the mapping of cluster slots to nodes."),
):  # fmt: skip
    _tips = "nondeterministic_output" if _name in _NONDETERMINISTIC else ""
    _deprecated_since, _replaced_by = _DEPRECATED.get(_name, ("", ""))
    command(
        _name,
        _arity,
        _flags,
        group=G,
        since=_since,
        parent="cluster",
        summary=_summary,
        tips=_tips,
        complexity=_COMPLEXITY.get(_name, "O(1)"),
        doc_flags="deprecated" if _deprecated_since else "",
        deprecated_since=_deprecated_since,
        replaced_by=_replaced_by,
    )(_disabled)

for _name, _flags, _summary in (
    ("readonly", f"{FAST} {LOADING} {STALE}", "Enables read-only queries on a cluster replica's connection."),
    ("readwrite", f"{FAST} {LOADING} {STALE}", "Enables read-write queries on a cluster replica's connection."),
    ("asking", FAST, "Signals that a cluster client is following an -ASK redirect."),
):  # fmt: skip
    command(_name, 1, _flags, group=G, since="3.0.0", summary=_summary)(_disabled)
