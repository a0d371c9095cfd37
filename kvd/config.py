"""Typed settings: ``kvd.toml`` plus redis-server style ``--key value`` overrides, validated up front.

Design. ``Settings`` is a frozen dataclass with one typed field per key, and each field carries its own
``Spec`` (kind, bounds, one-line help, section, whether CONFIG SET may change it) in its metadata. Loading,
CONFIG GET (``settings_items``), CONFIG SET (``apply_runtime``) and the shipped ``kvd.toml`` (``render_toml``)
all derive from that one declaration, so they cannot drift apart; ``Settings()`` is the defaults.

Errors. Every problem is a ``ConfigError`` whose text is one line naming where the value came from (the file,
the ``--flag``) and the key, e.g. ``kvd.toml: maxmemory: expected a size like 512mb or 4GiB, got 'lots'``. The
CLI prints it and exits 2, so nothing here may leak a traceback or a multi-line message.

Trade-offs. The file is strict (TOML types must match: ``port = "6379"`` is an error, booleans are
``true``/``false``) because a typo there is silent otherwise; the command line is text, so it is converted
(``yes``/``no``/``1``/``0`` booleans, sizes with units). Values are checked once, at load or CONFIG SET, so the
hot paths read plain attributes. Sizes follow Redis (``1k`` = 1000, ``1kb`` = 1024, ``1gb`` = 2^30) and also
take IEC units (``4GiB``) and decimals (``1.5gb``, rounded down to whole bytes).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kvd.store.eviction import POLICIES

__all__ = [
    "FIXED",
    "RUNTIME_KEYS",
    "SPECS",
    "SYNONYMS",
    "ConfigError",
    "Settings",
    "Spec",
    "apply_runtime",
    "format_size",
    "is_setting",
    "load_settings",
    "parse_size",
    "redis_items",
    "render_toml",
    "settings_items",
]


class ConfigError(Exception):
    """A configuration problem, as one line that names where it came from and the key."""


# -- sizes ---------------------------------------------------------------------------------------------------

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000**2,
    "mb": 1024**2,
    "g": 1000**3,
    "gb": 1024**3,
    "t": 1000**4,
    "tb": 1024**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)", re.ASCII)
_MAX_SIZE = 2**63 - 1  # sizes reach C APIs (mmap, setsockopt, struct packing): keep them in an int64


def parse_size(text: str | int) -> int:
    """``"512mb"`` -> 536870912, ``"1k"`` -> 1000, ``"4GiB"`` -> 4294967296, ``1024`` -> 1024.

    Raises ValueError for negatives, junk, unknown units and values beyond 2^63-1.
    """
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.fullmatch(text.strip().lower())
        if not match or match.group(2) not in _UNITS:
            raise ValueError(f"not a size: {text!r}")
        value = int(Fraction(match.group(1)) * _UNITS[match.group(2)])  # exact: no float rounding
    if not 0 <= value <= _MAX_SIZE:
        raise ValueError(f"size out of range: {text!r}")
    return value


def format_size(n: int) -> str:
    """Human form for logs: ``512 B``, ``1.50 KiB``, ``1.00 GiB``."""
    if n < 0:
        return "-" + format_size(-n)
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.2f} {unit}"


def _size_text(n: int) -> str:
    """The shortest exact Redis-style spelling, for messages and kvd.toml: 1073741824 -> '1gb'."""
    for unit, factor in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


# -- the declaration ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spec:
    """How one key is read, checked, shown and documented."""

    name: str  # the redis-style key, with dashes
    kind: str  # int | octal | size | bool | str | choice | float | list | events
    default: Any
    help: str
    section: str
    low: float | None = None  # inclusive, except for floats where it is exclusive
    high: float | None = None
    choices: tuple[str, ...] = ()
    runtime: bool = False  # CONFIG SET may change it
    clamp: tuple[int, int] | None = None  # an int accepted in low-high and then brought into this range (Redis's hz)


def _key(kind: str, default: Any, help: str, section: str, **extra: Any) -> Any:
    """A dataclass field whose metadata holds its Spec (the name is filled in from the field below)."""
    return field(default=default, metadata={"spec": (kind, help, section, extra)})


@dataclass(frozen=True, slots=True)
class Settings:
    """The daemon's settings; one attribute per key of kvd.toml, dashes as underscores."""

    # Network
    bind: tuple[str, ...] = _key(
        "list", ("127.0.0.1",), "addresses to listen on (list, or one space-separated string)", "Network"
    )
    port: int = _key(
        "int", 6379, "TCP port (0 = no plain TCP listener, only TLS or the unix socket)", "Network", low=0, high=65535
    )
    unixsocket: str = _key(
        "str",
        "",
        "path of a unix socket to listen on as well, for clients on this host (empty = none); a stale socket "
        "left there is replaced, and the file is removed at shutdown",
        "Network",
    )
    unixsocketperm: int = _key(
        "octal", 0, "the unix socket's permissions, in octal as redis.conf (700; 0 = as the umask leaves them)",
        "Network", low=0, high=0o777,
    )  # fmt: skip
    protected_mode: bool = _key(
        "bool",
        True,
        "without requirepass, serve loopback clients only and refuse to bind elsewhere",
        "Network",
        runtime=True,
    )
    tcp_backlog: int = _key("int", 511, "listen() backlog", "Network", low=1, high=65535)
    tcp_keepalive: int = _key(
        "int", 300, "TCP keepalive interval in seconds (0 = off)", "Network", low=0, high=2**31 - 1, runtime=True
    )
    timeout: int = _key(
        "int",
        0,
        "close clients idle this many seconds (0 = never; never replicas, monitors, subscribers, waiting clients)",
        "Network",
        low=0,
        high=2**31 - 1,
        runtime=True,
    )
    maxclients: int = _key("int", 10000, "most simultaneous clients", "Network", low=1, high=2**32 - 1, runtime=True)
    hz: int = _key(
        "int",
        10,
        "background ticks per second: active expiry, the LRU clock, idle timeouts, replication pings (as Redis: "
        "any value is brought into 1-500)",
        "Network",
        low=0,
        high=(1 << 31) - 1,
        clamp=(1, 500),
        runtime=True,
    )
    # Security
    requirepass: str = _key("str", "", "password of the default user (empty = no AUTH)", "Security", runtime=True)
    tls_port: int = _key("int", 0, "TLS port (0 = TLS off)", "Security", low=0, high=65535)
    tls_cert_file: str = _key("str", "", "server certificate chain (PEM); needed when tls-port is set", "Security")
    tls_key_file: str = _key("str", "", "server private key (PEM); needed when tls-port is set", "Security")
    tls_ca_cert_file: str = _key(
        "str", "", "CA bundle that signs client certificates, and a TLS primary's (tls-replication)", "Security"
    )
    tls_auth_clients: str = _key(
        "choice",
        "no",
        "yes | no | optional: require client certificates",
        "Security",
        choices=("yes", "no", "optional"),
    )
    tls_client_cert_file: str = _key(
        "str", "", "certificate (PEM) a replica shows its TLS primary (empty = tls-cert-file, if any)", "Security"
    )
    tls_client_key_file: str = _key("str", "", "private key of tls-client-cert-file (PEM)", "Security")
    # Memory
    maxmemory: int = _key(
        "size", 1 << 30, "RAM tier budget: keys, values and per-entry overhead (0 = unlimited)", "Memory", runtime=True
    )
    maxmemory_policy: str = _key(
        "choice",
        "allkeys-lru",
        "which keys may be deleted when values cannot leave RAM for the disk: allkeys-* any, volatile-* only keys "
        "with a TTL (-OOM once none is left), noeviction none (-OOM); by least recent use (lru), least frequent "
        "use (lfu), at random, or nearest deadline (volatile-ttl)",
        "Memory",
        choices=POLICIES,
        runtime=True,
    )
    maxmemory_samples: int = _key(
        "int",
        5,
        "volatile-lru and volatile-lfu: keys with a TTL drawn per victim (Redis's)",
        "Memory",
        low=1,
        runtime=True,
    )
    lfu_log_factor: int = _key(
        "int",
        10,
        "the -lfu policies: how slowly a key's access counter grows (Redis's)",
        "Memory",
        low=0,
        runtime=True,
    )
    lfu_decay_time: int = _key(
        "int",
        1,
        "the -lfu policies: minutes without access that take one off a counter (0 = never)",
        "Memory",
        low=0,
        runtime=True,
    )
    # Limits
    proto_max_bulk_len: int = _key(
        "size", 512 << 20, "largest bulk string (value) accepted", "Limits", low=1 << 20, runtime=True
    )
    client_query_buffer_limit: int = _key(
        "size", 1 << 30, "largest pending request per client", "Limits", low=1 << 20, runtime=True
    )
    client_output_buffer_soft_limit: int = _key(
        "size", 64 << 20, "stop reading a client's requests while this much output waits", "Limits", runtime=True
    )
    client_output_buffer_hard_limit: int = _key(
        "size", 1 << 30, "disconnect a client with this much output waiting (0 = never)", "Limits", runtime=True
    )
    hll_sparse_max_bytes: int = _key(
        "size",
        3000,
        "a HyperLogLog stays in the sparse encoding up to this many bytes, then turns dense (12 KiB)",
        "Limits",
        low=0,
        runtime=True,
    )
    # Persistence
    persistence: bool = _key(
        "bool", True, "append every write to segment files (false = pure RAM cache)", "Persistence"
    )
    dir: str = _key("str", "./data", "directory of the segment files", "Persistence")
    appendfsync: str = _key(
        "choice",
        "everysec",
        "always | everysec | no: when writes are fsynced to the device",
        "Persistence",
        choices=("always", "everysec", "no"),
        runtime=True,
    )
    segment_size: int = _key("size", 256 << 20, "segments roll over at this size", "Persistence", low=1 << 20)
    max_disk: int = _key(
        "size", 64 << 30, "disk tier budget; the coldest data goes first (0 = unlimited)", "Persistence", runtime=True
    )
    compaction_dead_ratio: float = _key(
        "float",
        0.5,
        "compact a sealed segment once this share of it is dead, in (0, 1]",
        "Persistence",
        low=0.0,
        high=1.0,
        runtime=True,
    )
    # Logging
    loglevel: str = _key(
        "choice",
        "info",
        "debug | info | warning; Redis's verbose and notice log as debug and info (CONFIG GET shows the name given)",
        "Logging",
        choices=("debug", "verbose", "info", "notice", "warning"),
        runtime=True,
    )
    logfile: str = _key("str", "", "log file (empty = stderr)", "Logging")
    pidfile: str = _key(
        "str",
        "",
        "write the process id here once listening, removed at a clean exit (empty = none; a file left by a crash "
        "is overwritten)",
        "Logging",
    )
    supervised: str = _key(
        "choice",
        "no",
        "no | systemd | upstart | auto: tell the service manager when kvd is ready (listening, data recovered) and "
        "when it stops, as redis-server's supervised (systemd: READY=1 and STOPPING=1 on $NOTIFY_SOCKET, for a unit "
        "of Type=notify; upstart: SIGSTOP once ready; auto: whichever the environment names)",
        "Logging",
        choices=("no", "systemd", "upstart", "auto"),
    )
    # Notifications
    notify_keyspace_events: str = _key(
        "events",
        "",
        "keyspace events published to pub/sub: classes from 'Ag$xenmKE' as in redis.conf (empty = none)",
        "Notifications",
        runtime=True,
    )
    # Client-side caching
    tracking_table_max_keys: int = _key(
        "int",
        1_000_000,
        "CLIENT TRACKING remembers this many keys at most; past it the oldest are invalidated (0 = no limit)",
        "Client-side caching",
        low=0,
        runtime=True,
    )
    # Replication
    repl_backlog_size: int = _key(
        "size",
        64 << 20,
        "recent replication stream kept, so a replica that reconnects gets only what it missed (0 = none)",
        "Replication",
        runtime=True,
    )
    replica_announce_ip: str = _key(
        "str", "", "address a replica gives its primary for INFO, ROLE and FAILOVER (behind NAT; empty = its own)",
        "Replication", runtime=True,
    )  # fmt: skip
    replica_announce_port: int = _key(
        "int", 0, "port a replica gives its primary (0 = the port it listens on)", "Replication", low=0, high=65535,
        runtime=True,
    )  # fmt: skip
    replica_priority: int = _key(
        "int", 100, "INFO's slave_priority, which Sentinel reads to choose a replica to promote (0 = never)",
        "Replication", low=0, runtime=True,
    )  # fmt: skip
    min_replicas_to_write: int = _key(
        "int",
        0,
        "a primary refuses writes (-NOREPLICAS) unless this many replicas acknowledged within min-replicas-max-lag "
        "seconds (0 = off)",
        "Replication",
        low=0,
        runtime=True,
    )
    min_replicas_max_lag: int = _key(
        "int", 10, "seconds since a replica's last acknowledgement for it to count as good (0 = off)", "Replication",
        low=0, runtime=True,
    )  # fmt: skip
    repl_ping_replica_period: int = _key(
        "int", 10, "seconds between the PINGs sent down the replication stream", "Replication", low=1, runtime=True
    )
    repl_backlog_ttl: int = _key(
        "int",
        3600,
        "seconds the backlog is kept after the last replica left (0 = for ever)",
        "Replication",
        low=0,
        runtime=True,
    )
    replicaof: str = _key(
        "str",
        "",
        "'host port' of the primary this server replicates from, read-only (empty = a primary; REPLICAOF changes it)",
        "Replication",
    )
    masterauth: str = _key("str", "", "password this replica sends to its primary (AUTH)", "Replication", runtime=True)
    masteruser: str = _key(
        "str",
        "",
        "user this replica authenticates as at its primary (empty = AUTH with the password only)",
        "Replication",
        runtime=True,
    )
    replica_read_only: bool = _key(
        "bool", True, "a replica refuses writes from its own clients (-READONLY)", "Replication", runtime=True
    )
    replica_ignore_maxmemory: bool = _key(
        "bool",
        True,
        "a replica deletes no key for memory and refuses none of its primary's writes (it still moves values to "
        "disk): the primary's deletes keep it in step, as in Redis",
        "Replication",
        runtime=True,
    )
    replica_serve_stale_data: bool = _key(
        "bool",
        True,
        "a replica whose link to its primary is down still serves what it holds (no: -MASTERDOWN but for INFO, "
        "REPLICAOF and the other commands Redis flags stale)",
        "Replication",
        runtime=True,
    )
    tls_replication: bool = _key(
        "bool",
        False,
        "a replica connects to its primary's TLS port over TLS, verifying it with tls-ca-cert-file",
        "Replication",
        runtime=True,
    )
    repl_timeout: int = _key(
        "int",
        60,
        "seconds a replica waits for its primary (connecting, each reply, silence in the stream) before reconnecting",
        "Replication",
        low=1,
        runtime=True,
    )
    # Diagnostics
    acllog_max_len: int = _key(
        "int", 128, "ACL LOG keeps this many refused authentications", "Diagnostics", low=0, runtime=True
    )
    slowlog_log_slower_than: int = _key(
        "int",
        10000,
        "SLOWLOG keeps commands that took this many microseconds or more (0 = every command, -1 = none)",
        "Diagnostics",
        low=-1,
        runtime=True,
    )
    slowlog_max_len: int = _key("int", 128, "SLOWLOG keeps this many entries", "Diagnostics", low=0, runtime=True)
    latency_monitor_threshold: int = _key(
        "int",
        0,
        "LATENCY records events that took this many milliseconds or more (0 = off)",
        "Diagnostics",
        low=0,
        runtime=True,
    )
    enable_debug_command: str = _key(
        "choice",
        "no",
        "no | yes | local: who may run DEBUG (local = clients from 127.0.0.1, ::1 or the unix socket), as redis.conf; "
        "DEBUG SEGFAULT and PANIC stop the server",
        "Diagnostics",
        choices=("no", "yes", "local"),
    )
    # Not a key: the file the settings came from, as an absolute path (None = defaults and command line only).
    config_file: str | None = None


def _name(attr: str) -> str:
    return attr.replace("_", "-")


def _attr(name: str) -> str:
    return name.replace("-", "_")


SPECS: tuple[Spec, ...] = tuple(
    Spec(_name(f.name), kind, f.default, help, section, **extra)
    for f in dataclasses.fields(Settings)
    if "spec" in f.metadata
    for kind, help, section, extra in [f.metadata["spec"]]
)
_BY_NAME: dict[str, Spec] = {spec.name: spec for spec in SPECS}
RUNTIME_KEYS: frozenset[str] = frozenset(spec.name for spec in SPECS if spec.runtime)

# Redis's names for what kvd configures otherwise, so that a Redis user's ``--appendonly no`` or a tool's
# ``CONFIG SET save ""`` works as it means. A synonym is the kvd key itself (a start-up key stays one: CONFIG SET
# takes only its current value). A fixed name is something kvd does not have (scheduled RDB snapshots: every
# write is in the log, and SAVE and BGSAVE fsync it on demand; databases other than 0): CONFIG GET shows the value that
# says so, and only that value is accepted.
SYNONYMS: dict[str, str] = {
    "appendonly": "persistence",
    # Redis's deprecated names, which redis.conf files, Sentinel-era tools and old clients still send
    "slaveof": "replicaof",
    "slave-read-only": "replica-read-only",
    "slave-serve-stale-data": "replica-serve-stale-data",
    "slave-priority": "replica-priority",
    "slave-announce-ip": "replica-announce-ip",
    "slave-announce-port": "replica-announce-port",
    "slave-ignore-maxmemory": "replica-ignore-maxmemory",
    "min-slaves-to-write": "min-replicas-to-write",
    "min-slaves-max-lag": "min-replicas-max-lag",
    "repl-ping-slave-period": "repl-ping-replica-period",
}
FIXED: dict[str, str] = {"save": "", "databases": "1", "enable-module-command": "no", "daemonize": "no"}
_FIXED_WHY = {
    "save": "kvd takes no scheduled snapshots (every write is in its log; SAVE and BGSAVE fsync it on demand)",
    "databases": "kvd has one database (0)",
    "enable-module-command": "kvd loads no modules (MODULE LIST answers an empty list)",
    "daemonize": "kvd stays in the foreground (run it under a supervisor, or in the background with pidfile set)",
}
# The fixed names Redis cannot change at run time either: CONFIG SET refuses them whatever the value, as Redis does.
_FIXED_IMMUTABLE = {"databases", "enable-module-command", "daemonize"}


# -- conversion -----------------------------------------------------------------------------------------------

_INT = re.compile(r"[+-]?\d+", re.ASCII)
_OCTAL = re.compile(r"[0-7]{1,12}", re.ASCII)
UNIX_PATH_MAX = 108  # sockaddr_un's sun_path on Linux, its terminating NUL included
_TRUE = ("yes", "true", "1", "on")
_FALSE = ("no", "false", "0", "off")


def _convert(spec: Spec, raw: Any, from_text: bool) -> Any:
    """One value, converted and range-checked; ValueError says what was expected (without the key)."""
    kind, low, high = spec.kind, spec.low, spec.high
    if kind == "int":
        value: int | None = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
        if from_text and isinstance(raw, str) and _INT.fullmatch(raw.strip()) and len(raw.strip()) <= 20:
            value = int(raw)  # (longer text is no 64-bit integer, and past CPython's digit limit for int())
        if value is None or (low is not None and value < low) or (high is not None and value > high):
            bounds = f" {low:.0f}-{high:.0f}" if high is not None else f" >= {low:.0f}" if low is not None else ""
            raise ValueError(f"expected an integer{bounds}, got {raw!r}")
        if spec.clamp is not None:
            value = min(max(value, spec.clamp[0]), spec.clamp[1])
        return value
    if kind == "octal":  # Redis's OCTAL_CONFIG: "700" is rwx------
        if not isinstance(raw, str):  # a TOML 700 is seven hundred, and 0o700 arrives as 448: neither says it
            raise ValueError(f'expected an octal number as a string, such as "700", got {raw!r}')
        if not _OCTAL.fullmatch(raw.strip()):
            raise ValueError(f"expected an octal number such as 700, got {raw!r}")
        value = int(raw.strip(), 8)
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"expected an octal number between {int(low or 0):o} and {int(high or 0):o}, got {raw!r}")
        return value
    if kind == "size":
        if isinstance(raw, str) and raw.strip().startswith("-"):
            raise ValueError(f"expected a size like 512mb or 4GiB (not negative), got {raw!r}")
        try:
            value = parse_size(raw)
        except ValueError:
            raise ValueError(f"expected a size like 512mb or 4GiB, got {raw!r}") from None
        if low is not None and value < low:
            raise ValueError(f"expected a size of at least {_size_text(int(low))}, got {raw!r}")
        return value
    if kind == "float":
        value = None
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            value = float(raw)
        elif from_text and isinstance(raw, str):
            try:
                value = float(raw)
            except ValueError:
                value = None
        # low is exclusive for floats: the only float key is a ratio in (0, 1]
        if value is None or value != value or not (low is None or value > low) or not (high is None or value <= high):
            raise ValueError(f"expected a number in ({low:g}, {high:g}], got {raw!r}")
        return value
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if from_text and isinstance(raw, str) and raw.strip().lower() in _TRUE + _FALSE:
            return raw.strip().lower() in _TRUE
        raise ValueError(f"expected {'yes or no' if from_text else 'true or false'}, got {raw!r}")
    if kind == "list":
        if isinstance(raw, str):
            items = raw.split()
        elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            items = [x.strip() for x in raw]
        else:
            raise ValueError(f"expected a list of addresses, got {raw!r}")
        if not items or not all(items) or any(len(x.split()) != 1 for x in items):
            raise ValueError(f"expected one or more addresses without spaces, got {raw!r}")
        return tuple(items)
    if kind == "events":
        from kvd.notify import format_flags, parse_flags

        if not isinstance(raw, str):
            raise ValueError(f"expected event classes such as KEA, got {raw!r}")
        return format_flags(parse_flags(raw))
    if kind == "choice":
        if not isinstance(raw, str) or raw.strip().lower() not in spec.choices:
            raise ValueError(f"expected one of {', '.join(spec.choices)}, got {raw!r}")
        return raw.strip().lower()
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {raw!r}")
    if "\x00" in raw:
        raise ValueError("must not contain NUL bytes")
    return raw


def _fixed(name: str, raw: Any) -> None:
    """A FIXED name given a value: nothing to set; ValueError unless it is the one value kvd has."""
    if name == "daemonize" and (raw is False or (isinstance(raw, str) and raw.strip().lower() in _FALSE)):
        return  # a yes/no key: `daemonize = false` in the file, `--daemonize no` as redis-server takes it
    if str(raw).strip() != FIXED[name]:
        shown = FIXED[name] or '""'
        raise ValueError(f"{_FIXED_WHY[name]}: only {shown} is accepted, got {raw!r}")


def _assign(values: dict[str, Any], given: str, raw: Any, from_text: bool) -> bool:
    """Set the key ``given`` names (kvd's, or one of Redis's names for it) in ``values``; False if there is no such
    key, ValueError if it does not take ``raw``."""
    name = SYNONYMS.get(given, given)
    if name in FIXED:
        _fixed(name, raw)
        return True
    spec = _BY_NAME.get(name)
    if spec is None:
        return False
    values[name] = _convert(spec, raw, from_text=from_text)
    return True


# The keys whose value may be any text, so may start with '--' on the command line, as redis-server takes the
# word after a flag whatever it is: a password. Only as one word (`--requirepass --port 7000` is refused, as
# redis-server refuses it: two words for one value).
_DASHED_VALUES = frozenset({"requirepass", "masterauth"})


def _unknown(name: str, flag: bool = False) -> str:
    close = difflib.get_close_matches(name.replace("_", "-").lower(), list(_BY_NAME), n=1, cutoff=0.6)
    dash = "--" if flag else ""
    hint = f" (did you mean '{dash}{close[0]}'?)" if close else ""
    return f"unknown key '{dash}{name}'{hint}"


def _cross_check(v: dict[str, Any]) -> str | None:
    """Rules that involve more than one key; returns 'key: problem' or None."""
    if v["tls-port"]:
        missing = [k for k in ("tls-cert-file", "tls-key-file") if not v[k]]
        if missing:
            return f"tls-port: TLS needs {' and '.join(missing)}"
        if v["tls-port"] == v["port"]:
            return f"tls-port: must differ from port ({v['port']})"
        if v["tls-auth-clients"] != "no" and not v["tls-ca-cert-file"]:
            return f"tls-auth-clients: '{v['tls-auth-clients']}' needs tls-ca-cert-file to verify client certificates"
    elif not v["port"] and not v["unixsocket"]:
        return "port: 0 turns plain TCP off, so tls-port or unixsocket must be set or nothing would listen"
    if len(os.fsencode(v["unixsocket"])) >= UNIX_PATH_MAX:
        return f"unixsocket: path too long ({len(os.fsencode(v['unixsocket']))} bytes), must be under {UNIX_PATH_MAX}"
    if v["tls-replication"] and not v["tls-ca-cert-file"]:
        return "tls-replication: needs tls-ca-cert-file to verify the primary's certificate"
    if bool(v["tls-client-cert-file"]) != bool(v["tls-client-key-file"]):
        return "tls-client-cert-file: needs tls-client-key-file, and the other way round"
    soft, hard = v["client-output-buffer-soft-limit"], v["client-output-buffer-hard-limit"]
    if hard and soft > hard:
        return (
            f"client-output-buffer-soft-limit: {soft} must not exceed client-output-buffer-hard-limit ({hard}; "
            "0 = no hard limit)"
        )
    if v["replicaof"].strip():
        parts = v["replicaof"].split()
        if len(parts) != 2 or not parts[1].isdigit() or not 0 < int(parts[1]) <= 65535:
            return f"replicaof: '{v['replicaof']}' is not 'host port' (e.g. '10.0.0.5 6379')"
    if v["persistence"] and not v["dir"].strip():
        return "dir: must not be empty while persistence is on"
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(_one_line(f"{where}: {message}" if where else message))


# -- public API -----------------------------------------------------------------------------------------------


def load_settings(config_path: str | None, overrides: Sequence[str] = ()) -> Settings:
    """Defaults, then the TOML file (if any), then ``--key value`` / ``--key=value`` overrides (last wins).

    As with redis-server, words after a flag's value that do not start with ``--`` join it, so
    ``--bind 127.0.0.1 ::1`` and ``--bind "127.0.0.1 ::1"`` are the same. A value that starts with ``--`` is
    refused (a forgotten value), except a password's (one word) and ``--save``'s (then ``""``, as in Redis);
    ``--key=--value`` gives one.
    """
    values: dict[str, Any] = {spec.name: spec.default for spec in SPECS}
    if config_path is not None:
        for name, raw in _read_toml(config_path).items():
            try:
                known = _assign(values, name, raw, from_text=False)
            except ValueError as exc:
                raise _fail(config_path, f"{name}: {exc}") from None
            if not known:
                table = " (all keys are top-level; tables are not used)" if isinstance(raw, dict) else ""
                raise _fail(config_path, _unknown(name) + table)
    args = [str(a) for a in overrides]
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--") or flag == "--":
            raise _fail(repr(flag), "expected --<key> <value>")
        name, eq, raw = flag[2:].partition("=")
        i += 1
        if not eq and SYNONYMS.get(name, name) == "save" and (i >= len(args) or args[i].startswith("--")):
            raw = ""  # Redis's one exception: `--save` then another flag (or nothing) is `--save ""`
        elif not eq:
            if i >= len(args):
                raise _fail(f"--{name}", "needs a value")
            dashed = args[i].startswith("--")
            if dashed and SYNONYMS.get(name, name) not in _DASHED_VALUES:
                # A forgotten value must not take the next flag as its own (`--port --bind ::1` would start on
                # the default port). A value that starts with '--' is given as --key=--value.
                raise _fail(
                    f"--{name}",
                    f"needs a value, got the flag {args[i]!r} (a value that starts with '--': --{name}=<value>)",
                )
            words = [args[i]]
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                if dashed:  # a password '--...' is one word: `--requirepass --port 7000` forgot the password
                    raise _fail(f"--{name}", f"needs a value, got the flag {words[0]!r} (then {args[i]!r})")
                words.append(args[i])
                i += 1
            raw = " ".join(words)
        try:
            known = _assign(values, name, raw, from_text=True)
        except ValueError as exc:
            raise _fail(f"--{name}", str(exc)) from None
        if not known:
            raise _fail(f"--{name}", _unknown(name, flag=True))
    problem = _cross_check(values)
    if problem:
        if config_path is None:
            where = "command line"
        else:
            where = config_path + (" (with command-line overrides)" if args else "")
        raise _fail(where, problem)
    # Absolute, as Redis makes it at start (getAbsolutePath): INFO shows it, and CONFIG REWRITE and DEBUG RESTART
    # find the same file whatever the working directory (kvd never changes it; Redis moves into dir).
    config_file = os.path.abspath(config_path) if config_path is not None else None
    return Settings(**{_attr(k): v for k, v in values.items()}, config_file=config_file)


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, not a TOML file") from None
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _fail(path, "not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise _fail(path, f"not valid TOML: {exc}") from None


def _display(spec: Spec, value: Any) -> str:
    if spec.kind == "events":
        from kvd.notify import shown_flags

        return shown_flags(value)
    if spec.kind == "octal":
        return f"{value:o}"
    if spec.kind == "bool":
        return "yes" if value else "no"
    if spec.kind == "list":
        return " ".join(value)
    if spec.kind == "float":
        return f"{value:g}"
    return str(value)


def settings_items(s: Settings) -> list[tuple[str, str]]:
    """(key, value) for every key as CONFIG GET prints it: sizes in bytes, booleans yes/no, lists space-separated."""
    return [(spec.name, _display(spec, getattr(s, _attr(spec.name)))) for spec in SPECS]


def redis_items(s: Settings) -> list[tuple[str, str]]:
    """CONFIG GET's Redis names (SYNONYMS, FIXED) with their values, after ``settings_items``."""
    synonyms = [(alias, _display(_BY_NAME[name], getattr(s, _attr(name)))) for alias, name in SYNONYMS.items()]
    return synonyms + list(FIXED.items())


def is_setting(key: str) -> bool:
    """Whether ``key`` names a setting (CONFIG SET checks every name before it changes anything)."""
    key = key.lower()
    return key in _BY_NAME or key in SYNONYMS or key in FIXED


def apply_runtime(s: Settings, key: str, value: str) -> Settings:
    """CONFIG SET: a new Settings with ``key`` changed; ConfigError for unknown, start-up-only or bad values.

    The message carries no file name (the caller wraps it in Redis's ``ERR CONFIG SET failed ...``).
    """
    given = key.strip().lower()
    name = SYNONYMS.get(given, given)
    if name in _FIXED_IMMUTABLE:
        raise _fail("", "can't set immutable config")
    if name in FIXED:
        try:
            _fixed(name, value)
        except ValueError as exc:
            raise _fail(name, str(exc)) from None
        return s
    spec = _BY_NAME.get(name)
    if spec is None:
        raise _fail("", _unknown(key))
    if name == "replicaof":  # immutable to CONFIG SET in Redis too; its command changes it
        raise _fail(given, "CONFIG SET cannot change it: REPLICAOF host port (or REPLICAOF NO ONE) does, at run time")
    start_up_only = f"cannot be changed at run time (set it in the config file or with --{name} at start-up)"
    if not spec.runtime and given == name:
        raise _fail(name, start_up_only)
    try:
        converted = _convert(spec, value, from_text=True)
    except ValueError as exc:
        raise _fail(given, str(exc)) from None
    if not spec.runtime:  # a synonym of a start-up key: its current value is all it takes
        if converted == getattr(s, _attr(name)):
            return s  # CONFIG SET appendonly yes on a server that logs: already so
        raise _fail(given, f"is kvd's {name}, which {start_up_only}")
    new = dataclasses.replace(s, **{_attr(name): converted})
    problem = _cross_check({sp.name: getattr(new, _attr(sp.name)) for sp in SPECS})
    if problem:
        raise _fail("", problem)
    return new


_DEFAULT: Any = object()


def render_toml() -> str:
    """The shipped kvd.toml: every key with its default and a one-line comment (a test keeps the file equal)."""
    lines = [
        "# kvd configuration: every setting with its default. Keys are top-level, spelled as in redis.conf.",
        "# Any of them can be overridden on the command line: kvd --config kvd.toml --port 7000 --maxmemory 4gb",
        "# Sizes: 100 (bytes), 1k = 1000, 1kb = 1024, 512mb, 4gb, 4GiB. Keys marked [runtime] take CONFIG SET.",
    ]
    section = ""
    for spec in SPECS:
        if spec.section != section:
            section = spec.section
            lines += ["", f"# --- {section} ---"]
        lines += ["", f"# {spec.help}{' [runtime]' if spec.runtime else ''}", f"{spec.name} = {_toml_value(spec)}"]
    return "\n".join(lines) + "\n"


def _toml_value(spec: Spec, value: Any = _DEFAULT) -> str:
    """``value`` (the key's default when not given) as kvd.toml spells it; strings as TOML basic strings."""
    if value is _DEFAULT:
        value = spec.default
    for text in value if spec.kind == "list" else (value,):
        if isinstance(text, str) and not _is_utf8(text):
            # CONFIG SET takes any bytes (a password, say), kept as surrogate escapes; a TOML file is UTF-8 text.
            raise ValueError(f"{spec.name}: the value is not UTF-8 text, which a TOML file cannot hold")
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "list":
        return "[" + ", ".join(_toml_string(v) for v in value) + "]"
    if spec.kind == "size":
        return f'"{_size_text(value)}"'
    if spec.kind in ("str", "choice", "events"):
        return _toml_string(value)
    if spec.kind == "float":
        return repr(float(value))
    if spec.kind == "octal":
        return f'"{value:o}"'
    return str(value)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _toml_string(text: str) -> str:
    # JSON's escapes (\" \\ \n \uXXXX) are TOML basic-string escapes too.
    return json.dumps(text, ensure_ascii=False)


# -- CONFIG REWRITE ---------------------------------------------------------------------------------------------

REWRITE_MARK = "# Generated by CONFIG REWRITE"


def rewrite_toml(text: str, s: Settings) -> str:
    """The config file ``text`` with every key set to its value in ``s``, as Redis's CONFIG REWRITE edits
    redis.conf: comments, blank lines and the order of the file stay; a key's line (or lines, for a value that
    spans several) is replaced in place when its value changed; a key the file lacks is appended under
    ``REWRITE_MARK`` when it differs from its default. Raises ValueError if the result would not load back."""
    lines = text.splitlines()
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*([A-Za-z0-9_-]+)\s*=", line)
        key = m.group(1) if m else ""
        spec = _BY_NAME.get(SYNONYMS.get(key, key)) if m else None
        if spec is None:
            out.append(line)
            i += 1
            continue
        end = i + 1  # a value may span lines (a list): take lines until they parse on their own
        while end < len(lines) and not _parses("\n".join(lines[i:end])):
            end += 1
        current = getattr(s, _attr(spec.name))
        try:
            unchanged = _convert(spec, tomllib.loads("\n".join(lines[i:end]))[key], from_text=False) == current
        except (tomllib.TOMLDecodeError, ValueError, KeyError):
            unchanged = False
        if spec.name in seen:
            pass  # a duplicate key (or a key and its Redis alias): keep only the first
        elif key != spec.name:
            # A Redis alias (slaveof, slave-priority, ...), as redis-server does: the line is rewritten under the
            # current name, or dropped when the key is back at its default (REPLICAOF NO ONE drops slaveof).
            if current != spec.default:
                out.append(f"{spec.name} = {_toml_value(spec, current)}{_trailing_comment(lines[i:end])}")
        elif unchanged:
            out.extend(lines[i:end])
        else:
            out.append(f"{spec.name} = {_toml_value(spec, current)}{_trailing_comment(lines[i:end])}")
        seen.add(spec.name)
        i = end
    extra = [
        f"{spec.name} = {_toml_value(spec, getattr(s, _attr(spec.name)))}"
        for spec in SPECS
        if spec.name not in seen and getattr(s, _attr(spec.name)) != spec.default
    ]
    if extra:
        if REWRITE_MARK not in out:
            out += ["", REWRITE_MARK]
        out += extra
    result = "\n".join(out) + "\n"
    loaded = tomllib.loads(result)  # ValueError (TOMLDecodeError) if a value cannot be written as TOML
    for key, raw in loaded.items():
        spec = _BY_NAME.get(SYNONYMS.get(key, key))
        if spec is not None and _convert(spec, raw, from_text=False) != getattr(s, _attr(spec.name)):
            raise ValueError(f"{spec.name} would not read back as written")
    return result


def _trailing_comment(lines: list[str]) -> str:
    """The comment that ends a key's last line (``  # RAM tier budget``, with the blanks before it), or "": a
    rewritten line keeps it. A '#' inside a string is no comment: the comment starts at the first '#' before which
    the lines still read as the same key and value. Comments inside a value that spans lines are not kept."""
    *head, last = lines
    start = 0
    while (hash_at := last.find("#", start)) >= 0:
        fragment = "\n".join([*head, last[:hash_at]])
        if _parses(fragment) and tomllib.loads(fragment) == tomllib.loads("\n".join(lines)):
            code = last[:hash_at]
            return (code[len(code.rstrip()) :] or " ") + last[hash_at:].rstrip()
        start = hash_at + 1
    return ""


def _parses(fragment: str) -> bool:
    try:
        tomllib.loads(fragment)
    except tomllib.TOMLDecodeError:
        return False
    return True


if __name__ == "__main__":  # python -m kvd.config > kvd.toml
    print(render_toml(), end="")
