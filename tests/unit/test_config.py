"""kvd.config: defaults, the shipped kvd.toml, sizes, one-line errors, overrides, CONFIG GET/SET helpers."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvd.config import (
    FIXED,
    RUNTIME_KEYS,
    SPECS,
    ConfigError,
    Settings,
    apply_runtime,
    format_size,
    is_setting,
    load_settings,
    parse_size,
    redis_items,
    render_toml,
    rewrite_toml,
    settings_items,
)

ROOT = Path(__file__).resolve().parents[2]
KVD_TOML = ROOT / "kvd.toml"


def write(tmp_path: Path, body: str, name: str = "kvd.toml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def error_of(path: str | None, *overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path, list(overrides))
    text = str(info.value)
    assert "\n" not in text
    return text


# -- defaults and the shipped file ---------------------------------------------------------------------------


def test_defaults() -> None:
    s = load_settings(None)
    assert s == Settings()
    assert s.config_file is None
    assert s.bind == ("127.0.0.1",)
    assert s.port == 6379
    assert s.protected_mode is True
    assert s.requirepass == ""
    assert (s.maxclients, s.timeout, s.tcp_keepalive, s.tcp_backlog) == (10000, 0, 300, 511)
    assert s.maxmemory == 1 << 30
    assert s.maxmemory_policy == "allkeys-lru"
    assert s.proto_max_bulk_len == 512 << 20
    assert s.client_query_buffer_limit == 1 << 30
    assert s.client_output_buffer_soft_limit == 64 << 20
    assert s.client_output_buffer_hard_limit == 1 << 30
    assert s.persistence is True
    assert s.dir == "./data"
    assert s.appendfsync == "everysec"
    assert s.segment_size == 256 << 20
    assert s.max_disk == 64 << 30
    assert s.compaction_dead_ratio == 0.5
    assert (s.tls_port, s.tls_cert_file, s.tls_key_file, s.tls_ca_cert_file) == (0, "", "", "")
    assert s.tls_auth_clients == "no"
    assert (s.loglevel, s.logfile) == ("info", "")


def test_every_field_is_a_key() -> None:
    fields = [f.name for f in dataclasses.fields(Settings) if f.name != "config_file"]
    assert [spec.name.replace("-", "_") for spec in SPECS] == fields
    assert {spec.name for spec in SPECS} >= RUNTIME_KEYS
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().port = 1  # type: ignore[misc]


def test_shipped_kvd_toml_loads_to_the_defaults() -> None:
    s = load_settings(str(KVD_TOML))
    assert s == Settings(config_file=str(KVD_TOML))
    assert dataclasses.replace(s, config_file=None) == load_settings(None)


def test_shipped_kvd_toml_documents_every_key() -> None:
    lines = KVD_TOML.read_text().splitlines()
    keys = {}
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            key = line.split("=")[0].strip()
            keys[key] = i
            assert lines[i - 1].startswith("# ") and len(lines[i - 1]) > 4, f"{key} has no comment above it"
    assert list(keys) == [spec.name for spec in SPECS]
    assert "# --- Network ---" in lines
    assert KVD_TOML.read_text() == render_toml(), "regenerate with: .venv/bin/python -m kvd.config > kvd.toml"


# -- sizes ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100", 100),
        (1024, 1024),
        (0, 0),
        ("0", 0),
        ("10b", 10),
        ("1k", 1000),
        ("1kb", 1024),
        ("1m", 1_000_000),
        ("1mb", 1 << 20),
        ("512mb", 512 << 20),
        ("1g", 1_000_000_000),
        ("1gb", 1 << 30),
        ("4gb", 4 << 30),
        ("1t", 10**12),
        ("1tb", 1 << 40),
        ("1KiB", 1024),
        ("2MiB", 2 << 20),
        ("4GiB", 4 << 30),
        ("1TiB", 1 << 40),
        ("4GB", 4 << 30),
        ("4Gb", 4 << 30),
        (" 64 mb ", 64 << 20),
        ("1.5gb", 3 << 29),
        ("0.5k", 500),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "lots", "-1", -1, "1 2", "1xb", "1.2.3gb", "gb", "1e9", True, 1.5, "٣mb", "9" * 30]
)
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_size(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (1 << 20, "1.00 MiB"), (1 << 30, "1.00 GiB")]
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


def test_sizes_in_the_file_take_every_unit(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        maxmemory = "512mb"
        max-disk = "4GiB"
        segment-size = 2097152
        proto-max-bulk-len = "2m"
        client-output-buffer-soft-limit = "1k"
        client-output-buffer-hard-limit = 0
        """,
    )
    s = load_settings(path)
    assert (s.maxmemory, s.max_disk, s.segment_size) == (512 << 20, 4 << 30, 2 << 20)
    assert (s.proto_max_bulk_len, s.client_output_buffer_soft_limit, s.client_output_buffer_hard_limit) == (
        2_000_000,
        1000,
        0,
    )
    assert s.config_file == path


# -- errors: one line, naming file and key ------------------------------------------------------------------


def test_bad_size_message(tmp_path: Path) -> None:
    path = write(tmp_path, 'maxmemory = "lots"\n')
    assert error_of(path) == f"{path}: maxmemory: expected a size like 512mb or 4GiB, got 'lots'"


def test_unknown_key_suggests(tmp_path: Path) -> None:
    path = write(tmp_path, 'maxmemroy = "1gb"\n')
    assert error_of(path) == f"{path}: unknown key 'maxmemroy' (did you mean 'maxmemory'?)"


def test_unknown_key_without_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "zzzqqq = 1\n")
    assert error_of(path) == f"{path}: unknown key 'zzzqqq'"


def test_tables_are_not_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[network]\nport = 7000\n")
    assert "unknown key 'network'" in error_of(path) and "top-level" in error_of(path)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('port = "6379"', "port: expected an integer 0-65535, got '6379'"),
        ("port = true", "port: expected an integer 0-65535, got True"),
        ("port = 70000", "port: expected an integer 0-65535, got 70000"),
        ("port = -1", "port: expected an integer 0-65535, got -1"),
        ("maxclients = 0", "maxclients: expected an integer 1-4294967295, got 0"),
        ("maxclients = 4294967296", "maxclients: expected an integer 1-4294967295, got 4294967296"),
        ("timeout = -5", "timeout: expected an integer 0-2147483647, got -5"),
        ('appendfsync = "maybe"', "appendfsync: expected one of always, everysec, no, got 'maybe'"),
        (
            'maxmemory-policy = "volatile-oldest"',
            "maxmemory-policy: expected one of volatile-lru, volatile-lfu, volatile-random, volatile-ttl, "
            "allkeys-lru, allkeys-lfu, allkeys-random, noeviction, got 'volatile-oldest'",
        ),
        ('protected-mode = "yes"', "protected-mode: expected true or false, got 'yes'"),
        ("persistence = 1", "persistence: expected true or false, got 1"),
        ('maxmemory = "-1gb"', "maxmemory: expected a size like 512mb or 4GiB (not negative), got '-1gb'"),
        ("maxmemory = -1", "maxmemory: expected a size like 512mb or 4GiB, got -1"),
        ("maxmemory = 1.5", "maxmemory: expected a size like 512mb or 4GiB, got 1.5"),
        ('proto-max-bulk-len = "512kb"', "proto-max-bulk-len: expected a size of at least 1mb, got '512kb'"),
        ('segment-size = "1kb"', "segment-size: expected a size of at least 1mb"),
        ("compaction-dead-ratio = 0", "compaction-dead-ratio: expected a number in (0, 1], got 0"),
        ("compaction-dead-ratio = 1.5", "compaction-dead-ratio: expected a number in (0, 1], got 1.5"),
        ('compaction-dead-ratio = "half"', "compaction-dead-ratio: expected a number in (0, 1], got 'half'"),
        ("bind = []", "bind: expected one or more addresses"),
        ("bind = [1, 2]", "bind: expected a list of addresses, got [1, 2]"),
        ('loglevel = "loud"', "loglevel: expected one of debug, verbose, info, notice, warning, got 'loud'"),
        ("requirepass = 123", "requirepass: expected a string, got 123"),
        ('tls-auth-clients = "sometimes"', "tls-auth-clients: expected one of yes, no, optional"),
    ],
)
def test_wrong_type_or_impossible_value(tmp_path: Path, body: str, fragment: str) -> None:
    path = write(tmp_path, body + "\n")
    assert error_of(path).startswith(f"{path}: {fragment}")


def test_compaction_ratio_accepts_one_as_integer(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "compaction-dead-ratio = 1\n")).compaction_dead_ratio == 1.0


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("tls-port = 6380", "tls-port: TLS needs tls-cert-file and tls-key-file"),
        ('tls-port = 6380\ntls-cert-file = "c.pem"', "tls-port: TLS needs tls-key-file"),
        ('tls-port = 6379\ntls-cert-file = "c.pem"\ntls-key-file = "k.pem"', "tls-port: must differ from port"),
        (
            'tls-port = 6380\ntls-cert-file = "c.pem"\ntls-key-file = "k.pem"\ntls-auth-clients = "yes"',
            "tls-auth-clients: 'yes' needs tls-ca-cert-file",
        ),
        ("port = 0", "port: 0 turns plain TCP off, so tls-port or unixsocket must be set"),
        (
            'client-output-buffer-soft-limit = "2gb"\nclient-output-buffer-hard-limit = "1gb"',
            "client-output-buffer-soft-limit: 2147483648 must not exceed client-output-buffer-hard-limit",
        ),
        ('dir = ""', "dir: must not be empty while persistence is on"),
        ("tls-replication = true", "tls-replication: needs tls-ca-cert-file to verify the primary's certificate"),
        ('tls-client-cert-file = "c.pem"', "tls-client-cert-file: needs tls-client-key-file"),
    ],
)
def test_cross_field_rules(tmp_path: Path, body: str, fragment: str) -> None:
    path = write(tmp_path, body + "\n")
    assert error_of(path).startswith(f"{path}: {fragment}")


def test_cross_field_rules_that_pass(tmp_path: Path) -> None:
    s = load_settings(
        write(
            tmp_path,
            """
            port = 0
            tls-port = 6380
            tls-cert-file = "c.pem"
            tls-key-file = "k.pem"
            tls-ca-cert-file = "ca.pem"
            tls-auth-clients = "optional"
            client-output-buffer-soft-limit = "2gb"
            client-output-buffer-hard-limit = 0
            persistence = false
            dir = ""
            """,
        )
    )
    assert (s.port, s.tls_port, s.tls_auth_clients, s.persistence) == (0, 6380, "optional", False)


def test_file_problems(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    assert error_of(missing) == f"{missing}: no such file"
    assert error_of(str(tmp_path)) == f"{tmp_path}: is a directory, not a TOML file"
    broken = write(tmp_path, "port = \n[[[\n")
    assert error_of(broken).startswith(f"{broken}: not valid TOML: ")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"port = \xff\xfe\n")
    assert error_of(str(binary)).startswith(f"{binary}: not valid")


# -- command-line overrides ---------------------------------------------------------------------------------


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'port = 7000\nmaxmemory = "1mb"\nappendfsync = "no"\n')
    s = load_settings(
        path,
        ["--port", "7001", "--maxmemory", "512mb", "--appendfsync", "always", "--bind", "127.0.0.1 ::1"],
    )
    assert (s.port, s.maxmemory, s.appendfsync, s.bind) == (7001, 512 << 20, "always", ("127.0.0.1", "::1"))
    assert s.config_file == path


def test_redis_s_deprecated_names_in_the_file_and_on_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'slaveof = "10.0.0.5 6379"\nslave-read-only = false\nmin-slaves-max-lag = 20\n')
    s = load_settings(path, ["--slave-priority", "7", "--repl-ping-slave-period=3", "--hz", "1000"])
    assert (s.replicaof, s.replica_read_only, s.min_replicas_max_lag) == ("10.0.0.5 6379", False, 20)
    assert (s.replica_priority, s.repl_ping_replica_period) == (7, 3)
    assert s.hz == 500  # brought into 1-500, as Redis does


def test_equals_form_and_later_flags_win() -> None:
    s = load_settings(None, ["--port=7000", "--maxmemory=4GiB", "--port", "7002", "--requirepass="])
    assert (s.port, s.maxmemory, s.requirepass) == (7002, 4 << 30, "")


def test_redis_style_multi_word_values() -> None:
    assert load_settings(None, ["--bind", "127.0.0.1", "::1", "--port", "7000"]).bind == ("127.0.0.1", "::1")


def test_value_may_start_with_dashes() -> None:
    assert load_settings(None, ["--requirepass", "--secret--"]).requirepass == "--secret--"
    assert load_settings(None, ["--masterauth", "--x", "--port", "7000"]).masterauth == "--x"
    assert load_settings(None, ["--logfile=--odd.log"]).logfile == "--odd.log"


def test_a_flag_without_its_value_does_not_take_the_next_flag() -> None:
    # as redis-server refuses `--requirepass --port 7000` (two words for one value); kvd started on 6379 with
    # the password "--port 7000"
    assert error_of(None, "--requirepass", "--port", "7000") == (
        "--requirepass: needs a value, got the flag '--port' (then '7000')"
    )
    assert error_of(None, "--logfile", "--port", "7000") == (
        "--logfile: needs a value, got the flag '--port' (a value that starts with '--': --logfile=<value>)"
    )
    assert error_of(None, "--port") == "--port: needs a value"


def test_save_then_another_flag_is_an_empty_save_as_in_redis() -> None:
    assert load_settings(None, ["--save", "--port", "7000"]).port == 7000
    assert load_settings(None, ["--port", "7000", "--save"]).port == 7000


@pytest.mark.parametrize(
    ("word", "expected"), [("yes", True), ("no", False), ("true", True), ("FALSE", False), ("1", True), ("0", False)]
)
def test_command_line_booleans(word: str, expected: bool) -> None:
    assert load_settings(None, ["--protected-mode", word]).protected_mode is expected
    assert load_settings(None, [f"--persistence={word}"]).persistence is expected


def test_command_line_values_are_converted_like_toml() -> None:
    s = load_settings(None, ["--compaction-dead-ratio", "0.25", "--timeout", "+30", "--maxclients", " 5 "])
    assert (s.compaction_dead_ratio, s.timeout, s.maxclients) == (0.25, 30, 5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "--port: expected an integer 0-65535, got '99999'"),
        (["--port", "12ab"], "--port: expected an integer 0-65535, got '12ab'"),
        (["--port", "7000", "extra"], "--port: expected an integer 0-65535, got '7000 extra'"),
        (["--maxmemroy", "1gb"], "--maxmemroy: unknown key '--maxmemroy' (did you mean '--maxmemory'?)"),
        (["--max_disk", "1gb"], "--max_disk: unknown key '--max_disk' (did you mean '--max-disk'?)"),
        (["--appendfsync", "maybe"], "--appendfsync: expected one of always, everysec, no, got 'maybe'"),
        (["--protected-mode", "perhaps"], "--protected-mode: expected yes or no, got 'perhaps'"),
        (["--maxmemory", "-5"], "--maxmemory: expected a size like 512mb or 4GiB (not negative), got '-5'"),
        (["--port"], "--port: needs a value"),
        (["port", "7000"], "'port': expected --<key> <value>"),
        (["--bind="], "--bind: expected one or more addresses without spaces, got ''"),
        (["--tls-port", "6380"], "command line: tls-port: TLS needs tls-cert-file and tls-key-file"),
    ],
)
def test_command_line_errors(args: list[str], message: str) -> None:
    assert error_of(None, *args) == message


def test_cross_field_error_with_file_and_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, 'client-output-buffer-hard-limit = "100mb"\n')
    message = error_of(path, "--client-output-buffer-soft-limit", "200mb")
    assert message.startswith(f"{path} (with command-line overrides): client-output-buffer-soft-limit:")


# -- CONFIG GET / CONFIG SET helpers ------------------------------------------------------------------------


def test_settings_items_formatting() -> None:
    s = load_settings(None, ["--bind", "127.0.0.1 ::1", "--protected-mode", "no", "--maxmemory", "512mb"])
    items = settings_items(s)
    assert [k for k, _ in items] == [spec.name for spec in SPECS]
    got = dict(items)
    assert got["bind"] == "127.0.0.1 ::1"
    assert got["protected-mode"] == "no"
    assert got["persistence"] == "yes"
    assert got["maxmemory"] == str(512 << 20)
    assert got["max-disk"] == str(64 << 30)
    assert got["port"] == "6379"
    assert got["compaction-dead-ratio"] == "0.5"
    assert got["appendfsync"] == "everysec"
    assert got["requirepass"] == ""
    assert all(isinstance(v, str) for _, v in items)


def test_runtime_keys() -> None:
    expected = {
        "maxmemory",
        "maxmemory-policy",
        "maxmemory-samples",
        "requirepass",
        "maxclients",
        "hz",
        "timeout",
        "appendfsync",
        "proto-max-bulk-len",
        "client-query-buffer-limit",
        "client-output-buffer-soft-limit",
        "client-output-buffer-hard-limit",
        "repl-backlog-size",
        "repl-backlog-ttl",
        "repl-ping-replica-period",
        "masterauth",
        "masteruser",
        "replica-read-only",
        "replica-serve-stale-data",
        "replica-ignore-maxmemory",
        "tls-replication",
        "min-replicas-to-write",
        "min-replicas-max-lag",
        "replica-announce-ip",
        "replica-announce-port",
        "replica-priority",
        "repl-timeout",
        "acllog-max-len",
        "loglevel",
        "max-disk",
        "compaction-dead-ratio",
        "protected-mode",
        "tcp-keepalive",
        "slowlog-log-slower-than",
        "slowlog-max-len",
        "latency-monitor-threshold",
        "notify-keyspace-events",
        "tracking-table-max-keys",
        "lfu-log-factor",
        "lfu-decay-time",
        "hll-sparse-max-bytes",
    }
    assert expected == RUNTIME_KEYS


def test_apply_runtime_returns_a_new_settings() -> None:
    s = Settings()
    t = apply_runtime(s, "maxmemory", "2gb")
    t = apply_runtime(t, "MAXMEMORY-POLICY", "noeviction")
    t = apply_runtime(t, "appendfsync", "always")
    t = apply_runtime(t, "protected-mode", "no")
    t = apply_runtime(t, "requirepass", "s3cret")
    t = apply_runtime(t, "compaction-dead-ratio", "0.75")
    assert s == Settings()  # the original is untouched
    assert (t.maxmemory, t.maxmemory_policy, t.appendfsync) == (2 << 30, "noeviction", "always")
    assert (t.protected_mode, t.requirepass, t.compaction_dead_ratio) == (False, "s3cret", 0.75)
    assert dict(settings_items(t))["maxmemory"] == str(2 << 30)


@pytest.mark.parametrize("key", sorted({spec.name for spec in SPECS} - RUNTIME_KEYS))
def test_apply_runtime_refuses_start_up_keys(key: str) -> None:
    value = dict(settings_items(Settings()))[key]
    with pytest.raises(ConfigError, match="cannot change it: REPLICAOF" if key == "replicaof" else "at run time"):
        apply_runtime(Settings(), key, value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("maxmemroy", "1gb", "unknown key 'maxmemroy' (did you mean 'maxmemory'?)"),
        ("maxmemory", "lots", "maxmemory: expected a size like 512mb or 4GiB, got 'lots'"),
        ("maxclients", "0", "maxclients: expected an integer 1-4294967295, got '0'"),
        ("slowlog-log-slower-than", "-2", "slowlog-log-slower-than: expected an integer >= -1, got '-2'"),
        ("appendfsync", "maybe", "appendfsync: expected one of always, everysec, no, got 'maybe'"),
        ("proto-max-bulk-len", "1kb", "proto-max-bulk-len: expected a size of at least 1mb, got '1kb'"),
        (
            "client-output-buffer-soft-limit",
            "2gb",
            "client-output-buffer-soft-limit: 2147483648 must not exceed client-output-buffer-hard-limit",
        ),
    ],
)
def test_apply_runtime_rejects(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_runtime(Settings(), key, value)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_apply_runtime_hard_limit_zero_lifts_the_soft_cap() -> None:
    t = apply_runtime(Settings(), "client-output-buffer-hard-limit", "0")
    assert apply_runtime(t, "client-output-buffer-soft-limit", "4gb").client_output_buffer_soft_limit == 4 << 30


# -- what the CLI will print --------------------------------------------------------------------------------


def test_bad_file_gives_a_single_line_without_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, 'maxmemory = "lots"\n')
    script = textwrap.dedent(
        """
        import sys
        from kvd.config import ConfigError, load_settings
        try:
            load_settings(sys.argv[1])
        except ConfigError as exc:
            print(f"kvd: {exc}", file=sys.stderr)
            sys.exit(2)
        """
    )
    venv_python = ROOT / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    proc = subprocess.run(
        [python, "-c", script, path], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"kvd: {path}: maxmemory: expected a size like 512mb or 4GiB, got 'lots'"]
    assert "Traceback" not in proc.stderr


def test_rewrite_keeps_the_file_and_changes_only_what_changed() -> None:
    from kvd.config import REWRITE_MARK, apply_runtime, rewrite_toml

    text = '# my settings\nport = 7000  \n\nbind = [\n  "127.0.0.1",\n  "::1",\n]\nmaxmemory = "1gb"  # the RAM tier\n'
    s = load_settings_from_text(text)
    s = apply_runtime(s, "maxmemory", "2gb")
    s = apply_runtime(s, "requirepass", 'p"w\\x')
    s = apply_runtime(s, "slowlog-max-len", "7")
    out = rewrite_toml(text, s)
    assert out.startswith('# my settings\nport = 7000  \n\nbind = [\n  "127.0.0.1",\n  "::1",\n]\n')
    assert 'maxmemory = "2gb"  # the RAM tier\n' in out  # changed: the line is replaced, its comment kept
    tail = out.split(REWRITE_MARK + "\n", 1)[1]
    assert tail == 'requirepass = "p\\"w\\\\x"\nslowlog-max-len = 7\n'  # not in the file and not default
    assert load_settings_from_text(out) == s  # and it reads back as the running settings
    assert rewrite_toml(out, s) == out  # a second rewrite changes nothing


def test_rewrite_keeps_the_comment_at_the_end_of_a_changed_line() -> None:
    from kvd.config import apply_runtime, rewrite_toml

    text = (
        'maxmemory = "1gb"  # RAM tier budget\n'
        'requirepass = "a#b" # not the comment: the string\'s\n'
        "hz=10#no blank before it\n"
        "slave-priority = 50   # an alias, renamed\n"
        'bind = [\n  "127.0.0.1", # only the last line\'s comment stays\n]  # listen here\n'
    )
    s = load_settings_from_text(text)
    for key, value in (("maxmemory", "2gb"), ("requirepass", "c#d"), ("hz", "20"), ("replica-priority", "7")):
        s = apply_runtime(s, key, value)
    s = dataclasses.replace(s, bind=("127.0.0.1", "::1"))
    out = rewrite_toml(text, s)
    assert out == (
        'maxmemory = "2gb"  # RAM tier budget\n'
        'requirepass = "c#d" # not the comment: the string\'s\n'
        "hz = 20 #no blank before it\n"
        "replica-priority = 7   # an alias, renamed\n"
        'bind = ["127.0.0.1", "::1"]  # listen here\n'
    )
    assert load_settings_from_text(out) == s


def test_config_file_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As Redis's getAbsolutePath at start: INFO config_file, CONFIG REWRITE and DEBUG RESTART use this path.
    write(tmp_path, "port = 7000\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_settings("kvd.toml").config_file == str(tmp_path / "kvd.toml")
    assert load_settings("./sub/../kvd.toml").config_file == str(tmp_path / "kvd.toml")
    assert error_of("nope.toml") == "nope.toml: no such file"  # messages name the file as it was given


def test_pidfile(tmp_path: Path) -> None:
    assert Settings().pidfile == ""
    assert load_settings(None, ["--pidfile", "/run/kvd.pid"]).pidfile == "/run/kvd.pid"
    assert load_settings(write(tmp_path, 'pidfile = "kvd.pid"\n')).pidfile == "kvd.pid"
    assert dict(settings_items(Settings(pidfile="/run/kvd.pid")))["pidfile"] == "/run/kvd.pid"
    with pytest.raises(ConfigError, match=r"^pidfile: cannot be changed at run time"):
        apply_runtime(Settings(), "pidfile", "/tmp/x.pid")


def test_daemonize(tmp_path: Path) -> None:
    # daemonize: Redis's name, accepted at the one value kvd has (kvd stays in the foreground)
    for no in ("no", "NO", "false", "0"):
        assert load_settings(None, ["--daemonize", no]) == Settings()
    assert load_settings(write(tmp_path, "daemonize = false\n", name="d.toml")) == Settings(
        config_file=str(tmp_path / "d.toml")
    )
    assert load_settings(write(tmp_path, 'daemonize = "no"\n', name="e.toml")).port == 6379
    assert error_of(None, "--daemonize", "yes") == (
        "--daemonize: kvd stays in the foreground (run it under a supervisor, or in the background with pidfile "
        "set): only no is accepted, got 'yes'"
    )
    assert error_of(write(tmp_path, "daemonize = true\n", name="f.toml")).endswith("got True")
    assert dict(redis_items(Settings()))["daemonize"] == "no"
    with pytest.raises(ConfigError, match=r"^can't set immutable config$"):
        apply_runtime(Settings(), "daemonize", "no")


def load_settings_from_text(text: str) -> Settings:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kvd.toml"
        path.write_text(text)
        return dataclasses.replace(load_settings(str(path)), config_file=None)


# -- Redis's names for kvd's keys ----------------------------------------------------------------------------


def test_redis_names_on_the_command_line_and_in_the_file(tmp_path: Path) -> None:
    assert load_settings(None, ["--appendonly", "no", "--save", "", "--databases", "1"]).persistence is False
    path = write(tmp_path, 'appendonly = false\nsave = ""\ndatabases = 1\n')
    assert load_settings(path).persistence is False
    assert error_of(None, "--appendonly", "maybe") == "--appendonly: expected yes or no, got 'maybe'"
    assert error_of(None, "--save", "900 1") == (
        "--save: kvd takes no scheduled snapshots (every write is in its log; SAVE and BGSAVE fsync it on "
        "demand): only \"\" is accepted, got '900 1'"
    )
    assert error_of(path, "--databases", "16") == (
        "--databases: kvd has one database (0): only 1 is accepted, got '16'"
    )
    bad = write(tmp_path, 'save = "3600 1"\n', name="bad.toml")
    assert error_of(bad).startswith(f"{bad}: save: kvd takes no scheduled snapshots")
    typo = write(tmp_path, 'appendonly = "yes"\n', name="typo.toml")
    assert error_of(typo) == f"{typo}: appendonly: expected true or false, got 'yes'"


def test_redis_names_at_run_time() -> None:
    s = Settings()  # persistence on
    assert apply_runtime(s, "appendonly", "yes") is s
    assert apply_runtime(s, "save", "") is s
    for immutable in ("databases", "enable-module-command", "daemonize"):  # as Redis: even at their one value
        with pytest.raises(ConfigError, match=r"^can't set immutable config$"):
            apply_runtime(s, immutable, FIXED[immutable])
    assert all(is_setting(name) for name in ("appendonly", "SAVE", "databases"))
    with pytest.raises(ConfigError, match=r"^appendonly: is kvd's persistence, which cannot be changed at run time"):
        apply_runtime(s, "appendonly", "no")
    with pytest.raises(ConfigError, match=r"^save: kvd takes no scheduled snapshots .* got '900 1'$"):
        apply_runtime(s, "save", "900 1")
    items = dict(redis_items(s))
    assert {k: items[k] for k in ("appendonly", "save", "databases", "enable-module-command")} == {
        "appendonly": "yes",
        "save": "",
        "databases": "1",
        "enable-module-command": "no",
    }
    assert items["slave-read-only"] == "yes" and items["min-slaves-max-lag"] == "10" and items["slaveof"] == ""
    assert apply_runtime(s, "slave-priority", "5").replica_priority == 5
    for name in ("replicaof", "slaveof"):  # the REPLICAOF command's, not CONFIG SET's
        with pytest.raises(ConfigError, match=rf"^{name}: CONFIG SET cannot change it: REPLICAOF host port"):
            apply_runtime(s, name, "127.0.0.1 7000")


def test_the_guards_of_debug_and_module() -> None:
    """enable-debug-command takes Redis's three values at start-up only; enable-module-command only its default,
    since kvd loads no modules."""
    assert Settings().enable_debug_command == "no"
    assert load_settings(None, ["--enable-debug-command", "local"]).enable_debug_command == "local"
    assert error_of(None, "--enable-debug-command", "always") == (
        "--enable-debug-command: expected one of no, yes, local, got 'always'"
    )
    with pytest.raises(ConfigError, match=r"^enable-debug-command: cannot be changed at run time"):
        apply_runtime(Settings(), "enable-debug-command", "yes")
    assert load_settings(None, ["--enable-module-command", "no"]) == Settings()
    assert error_of(None, "--enable-module-command", "yes") == (
        "--enable-module-command: kvd loads no modules (MODULE LIST answers an empty list): only no is accepted, "
        "got 'yes'"
    )


def test_unixsocketperm_is_octal_in_every_form(tmp_path: Path) -> None:
    """As Redis's OCTAL_CONFIG: read, shown by CONFIG GET, and written back by CONFIG REWRITE as octal digits."""
    s = load_settings(None, ["--unixsocket", "/tmp/kvd-octal.sock", "--unixsocketperm", "0750"])
    assert s.unixsocketperm == 0o750
    assert dict(settings_items(s))["unixsocketperm"] == "750"
    conf = tmp_path / "kvd.toml"
    conf.write_text(rewrite_toml("", s))
    assert 'unixsocketperm = "750"' in conf.read_text().splitlines()
    assert load_settings(str(conf)) == dataclasses.replace(s, config_file=str(conf))
    with pytest.raises(ConfigError, match="expected an octal number such as 700, got '7a'"):
        load_settings(None, ["--unixsocketperm", "7a"])
