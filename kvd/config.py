"""Typed settings: ``kvd.toml`` plus redis-server style ``--key value`` overrides, validated up front.

Every setting is declared once in ``SPECS`` (name, kind, default, bounds, one-line help); loading, CONFIG GET,
CONFIG SET and the shipped ``kvd.toml`` all derive from that table, so they cannot drift apart. A problem is a
``ConfigError`` whose text is one line naming the file (or flag) and the key, for example
``kvd.toml: maxmemory: expected a size like 512mb or 4GiB, got 'lots'``; the CLI prints it and exits 2.

Sizes follow Redis (``1k`` = 1000, ``1kb`` = 1024, ``1gb`` = 2^30) and also accept IEC units (``4GiB``).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class ConfigError(Exception):
    """A configuration problem, as one line that names where it came from and the key."""


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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """``"512mb"`` -> 536870912. Raises ValueError for negatives, junk and unknown units."""
    if isinstance(text, bool):
        raise ValueError(text)
    if isinstance(text, int):
        if text < 0:
            raise ValueError(text)
        return text
    match = _SIZE.match(str(text).lower())
    if not match or match.group(2) not in _UNITS:
        raise ValueError(text)
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # the redis-style key, with dashes
    kind: str  # int, size, bool, str, choice, float, list
    default: Any
    help: str
    section: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    runtime: bool = False


SPECS: tuple[Spec, ...] = (
    Spec("bind", "list", ["127.0.0.1"], "addresses to listen on", "Network"),
    Spec("port", "int", 6379, "TCP port (0 = no plain TCP listener)", "Network", 0, 65535),
    Spec(
        "protected-mode",
        "bool",
        True,
        "without requirepass, only loopback clients and addresses",
        "Network",
        runtime=True,
    ),
    Spec("tcp-backlog", "int", 511, "listen() backlog", "Network", 1, 65535),
    Spec("tcp-keepalive", "int", 300, "TCP keepalive interval in seconds (0 = off)", "Network", 0, 86400, runtime=True),
    Spec("timeout", "int", 0, "close clients idle this many seconds (0 = never)", "Network", 0, 10**9, runtime=True),
    Spec("maxclients", "int", 10000, "most simultaneous clients", "Network", 1, 10**6, runtime=True),
    Spec("requirepass", "str", "", "password of the default user (empty = no AUTH)", "Security", runtime=True),
    Spec("tls-port", "int", 0, "TLS port (0 = TLS off)", "Security", 0, 65535),
    Spec("tls-cert-file", "str", "", "server certificate (PEM)", "Security"),
    Spec("tls-key-file", "str", "", "server private key (PEM)", "Security"),
    Spec("tls-ca-cert-file", "str", "", "CA bundle that signs client certificates", "Security"),
    Spec(
        "tls-auth-clients", "choice", "no", "require client certificates", "Security", choices=("yes", "no", "optional")
    ),
    Spec(
        "maxmemory",
        "size",
        1 << 30,
        "RAM tier budget: keys, values and per-entry overhead (0 = unlimited)",
        "Memory",
        runtime=True,
    ),
    Spec(
        "maxmemory-policy",
        "choice",
        "allkeys-lru",
        "allkeys-lru demotes/evicts LRU; noeviction answers -OOM",
        "Memory",
        choices=("allkeys-lru", "noeviction"),
        runtime=True,
    ),
    Spec(
        "proto-max-bulk-len", "size", 512 << 20, "largest bulk string (value) accepted", "Limits", 1 << 20, runtime=True
    ),
    Spec(
        "client-query-buffer-limit",
        "size",
        1 << 30,
        "largest pending request per client",
        "Limits",
        1 << 20,
        runtime=True,
    ),
    Spec(
        "client-output-buffer-soft-limit",
        "size",
        64 << 20,
        "stop reading a client's requests while this much output waits",
        "Limits",
        runtime=True,
    ),
    Spec(
        "client-output-buffer-hard-limit",
        "size",
        1 << 30,
        "disconnect a client with this much output waiting (0 = never)",
        "Limits",
        runtime=True,
    ),
    Spec("persistence", "bool", True, "append every write to segment files (false = pure RAM cache)", "Persistence"),
    Spec("dir", "str", "./data", "directory of the segment files", "Persistence"),
    Spec(
        "appendfsync",
        "choice",
        "everysec",
        "always | everysec | no: when writes reach the device",
        "Persistence",
        choices=("always", "everysec", "no"),
        runtime=True,
    ),
    Spec("segment-size", "size", 256 << 20, "segments roll at this size", "Persistence", 1 << 20),
    Spec(
        "max-disk",
        "size",
        64 << 30,
        "disk tier budget; the coldest data goes first (0 = unlimited)",
        "Persistence",
        runtime=True,
    ),
    Spec(
        "compaction-dead-ratio",
        "float",
        0.5,
        "compact a sealed segment once this share of it is dead",
        "Persistence",
        0.01,
        1.0,
        runtime=True,
    ),
    Spec(
        "loglevel",
        "choice",
        "info",
        "debug | info | warning",
        "Logging",
        choices=("debug", "info", "warning"),
        runtime=True,
    ),
    Spec("logfile", "str", "", "log file (empty = stderr)", "Logging"),
)
_BY_NAME = {spec.name: spec for spec in SPECS}
RUNTIME_KEYS = frozenset(spec.name for spec in SPECS if spec.runtime)


def _field(name: str) -> str:
    return name.replace("-", "_")


Settings = dataclasses.make_dataclass(
    "Settings",
    [(_field(spec.name), Any) for spec in SPECS] + [("config_file", Any, dataclasses.field(default=None))],
    frozen=True,
    slots=True,
)
Settings.__doc__ = "The daemon's settings; one attribute per key of kvd.toml, dashes as underscores."


def _convert(spec: Spec, raw: Any, from_text: bool) -> Any:
    """Convert and validate one value; raises ValueError with what was expected."""
    kind = spec.kind
    if kind == "size":
        try:
            value = parse_size(raw)
        except ValueError:
            raise ValueError(f"expected a size like 512mb or 4GiB, got {raw!r}") from None
    elif kind == "int":
        if isinstance(raw, bool) or not (isinstance(raw, int) or (from_text and re.fullmatch(r"-?\d+", str(raw)))):
            raise ValueError(f"expected an integer, got {raw!r}")
        value = int(raw)
    elif kind == "float":
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {raw!r}") from None
    elif kind == "bool":
        if isinstance(raw, bool):
            value = raw
        elif from_text and str(raw).lower() in ("yes", "true", "1", "on"):
            value = True
        elif from_text and str(raw).lower() in ("no", "false", "0", "off"):
            value = False
        else:
            raise ValueError(f"expected true or false, got {raw!r}")
    elif kind == "list":
        if isinstance(raw, str):
            value = raw.split()
        elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            value = list(raw)
        else:
            raise ValueError(f"expected a list of addresses, got {raw!r}")
        if not value:
            raise ValueError("expected at least one address")
        return tuple(value)
    elif kind == "choice":
        if not isinstance(raw, str) or raw.lower() not in spec.choices:
            raise ValueError(f"expected one of {', '.join(spec.choices)}, got {raw!r}")
        return raw.lower()
    else:
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, got {raw!r}")
        return raw
    if spec.low is not None and value < spec.low:
        raise ValueError(f"must be at least {spec.low:g}, got {raw!r}")
    if spec.high is not None and value > spec.high:
        raise ValueError(f"must be at most {spec.high:g}, got {raw!r}")
    return value


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, list(_BY_NAME), n=1)
    return f"unknown key '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")


def _check(values: dict[str, Any], where: str) -> None:
    """Rules that involve more than one key."""
    if values["tls-port"] and not (values["tls-cert-file"] and values["tls-key-file"]):
        raise ConfigError(f"{where}: tls-port: needs tls-cert-file and tls-key-file")
    hard, soft = values["client-output-buffer-hard-limit"], values["client-output-buffer-soft-limit"]
    if hard and soft > hard:
        raise ConfigError(f"{where}: client-output-buffer-soft-limit: must not exceed client-output-buffer-hard-limit")
    if not values["port"] and not values["tls-port"]:
        raise ConfigError(f"{where}: port: 0 needs a tls-port, or nothing would listen")


def load_settings(config_path: str | None, overrides: Sequence[str] = ()) -> Any:
    """Defaults, then the TOML file, then ``--key value`` / ``--key=value`` overrides."""
    values = {spec.name: spec.default for spec in SPECS}
    where = config_path or "defaults"
    if config_path is not None:
        try:
            with open(config_path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{config_path}: no such file") from None
        except OSError as exc:
            raise ConfigError(f"{config_path}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path}: not valid TOML: {exc}") from None
        for name, raw in data.items():
            spec = _BY_NAME.get(name)
            if spec is None:
                raise ConfigError(f"{config_path}: {_unknown(name)}")
            try:
                values[name] = _convert(spec, raw, from_text=False)
            except ValueError as exc:
                raise ConfigError(f"{config_path}: {name}: {exc}") from None
    args = list(overrides)
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--"):
            raise ConfigError(f"{flag}: expected a --setting, got a stray argument")
        name, eq, raw = flag[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise ConfigError(f"--{name}: needs a value")
            raw = args[i + 1]
            i += 1
        i += 1
        spec = _BY_NAME.get(name)
        if spec is None:
            raise ConfigError(f"--{name}: {_unknown(name)}")
        try:
            values[name] = _convert(spec, raw, from_text=True)
        except ValueError as exc:
            raise ConfigError(f"--{name}: {exc}") from None
    _check(values, where if config_path is not None else "command line")
    values["bind"] = tuple(values["bind"])
    return Settings(**{_field(k): v for k, v in values.items()}, config_file=config_path)


def _display(spec: Spec, value: Any) -> str:
    if spec.kind == "bool":
        return "yes" if value else "no"
    if spec.kind == "list":
        return " ".join(value)
    if spec.kind == "float":
        return f"{value:g}"
    return str(value)


def settings_items(s: Any) -> list[tuple[str, str]]:
    """(key, value) for every setting as CONFIG GET prints it: sizes in bytes, booleans as yes/no."""
    return [(spec.name, _display(spec, getattr(s, _field(spec.name)))) for spec in SPECS]


def apply_runtime(s: Any, key: str, value: str) -> Any:
    """CONFIG SET: a new Settings with ``key`` changed; ConfigError for unknown or start-up-only keys."""
    spec = _BY_NAME.get(key)
    if spec is None:
        raise ConfigError(_unknown(key))
    if not spec.runtime:
        raise ConfigError(f"'{key}' can only be set at start-up (kvd.toml or --{key})")
    try:
        converted = _convert(spec, value, from_text=True)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    new = dataclasses.replace(s, **{_field(key): converted})
    _check({spec.name: getattr(new, _field(spec.name)) for spec in SPECS}, "CONFIG SET")
    return new


def render_toml() -> str:
    """The shipped kvd.toml: every key with its default and a one-line comment (tests compare the file)."""
    lines = [
        "# kvd configuration. Every setting, with its default. Override any of them on the command line:",
        "#   kvd --config kvd.toml --port 7000 --maxmemory 4gb",
        "",
    ]
    section = ""
    for spec in SPECS:
        if spec.section != section:
            section = spec.section
            lines += [f"# --- {section} ---", ""] if lines[-1] != "" else [f"# --- {section} ---"]
        lines.append(f"# {spec.help}")
        lines.append(f"{spec.name} = {_toml_value(spec)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _toml_value(spec: Spec) -> str:
    value = spec.default
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "list":
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if spec.kind == "size":
        for unit, factor in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
            if value and value % factor == 0:
                return f'"{value // factor}{unit}"'
        return str(value)
    if spec.kind in ("str", "choice"):
        return f'"{value}"'
    return str(value)


_ = Callable  # typing re-export for readers of this module
