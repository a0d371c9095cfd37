"""CONFIG REWRITE: settings changed at run time survive a restart, written into the TOML file kvd started with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kvd_only, pytest.mark.timeout(60)]  # kvd.toml, not redis.conf


def test_settings_survive_a_restart_through_config_rewrite(server_factory, tmp_path):
    config = tmp_path / "kvd.toml"
    config.write_text('# tuned by hand\nmaxmemory = "64mb"\nloglevel = "info"\n')
    srv = server_factory(config=config)
    r = srv.client()
    r.config_set("maxmemory", "128mb")
    r.config_set("slowlog-log-slower-than", "500")
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    text = config.read_text()
    assert text.startswith('# tuned by hand\nmaxmemory = "128mb"\nloglevel = "info"\n')
    assert "slowlog-log-slower-than = 500\n" in text
    assert not [p for p in tmp_path.iterdir() if "rewrite" in p.name]  # no temporary file left behind
    srv.restart()
    r = srv.client()
    assert r.config_get("maxmemory") == {"maxmemory": "134217728"}
    assert r.config_get("slowlog-log-slower-than") == {"slowlog-log-slower-than": "500"}


def test_config_rewrite_without_a_config_file_says_so(server):
    with server.raw() as c:
        assert c.command("CONFIG", "REWRITE") == b"-ERR The server is running without a config file\r\n"


def test_a_removed_config_file_is_written_anew_and_a_removed_directory_is_an_error(server_factory, tmp_path):
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    config = config_dir / "kvd.toml"
    config.write_text('maxmemory = "64mb"\n')
    srv = server_factory(config=config)
    with srv.raw() as c:
        assert c.command("CONFIG", "SET", "maxmemory", "100mb") == b"+OK\r\n"
        config.unlink()
        assert c.command("CONFIG", "REWRITE") == b"+OK\r\n"
        assert 'maxmemory = "100mb"\n' in config.read_text()
        config.unlink()
        config_dir.rmdir()
        assert c.command("CONFIG", "REWRITE") == b"-ERR Rewriting config file: No such file or directory\r\n"
        assert c.command("PING") == b"+PONG\r\n"


def test_keys_under_redis_alias_names_are_rewritten_under_the_current_name(server_factory, tmp_path):
    # A redis.conf-era file: slaveof / slave-priority. REPLICAOF NO ONE + CONFIG REWRITE must not leave the
    # slaveof line behind, or the next start is a replica again (and a full resync throws its data away).
    from support.server import free_port

    config = tmp_path / "kvd.toml"
    config.write_text(f'# by hand\nslaveof = "127.0.0.1 {free_port()}"\nslave-priority = 50\nmaxmemory = "64mb"\n')
    srv = server_factory(config=config)
    r = srv.client()
    assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    r.config_set("replica-priority", "100")
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    text = config.read_text()
    # replica-priority is back at its default (100) and replication is off: both alias lines are dropped
    assert text.startswith('# by hand\nmaxmemory = "64mb"\n')
    assert "slave" not in text and "replica" not in text
    r.config_set("replica-priority", "7")
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    assert "replica-priority = 7\n" in config.read_text()
    srv.restart()
    r = srv.client()
    assert r.execute_command("ROLE")[0] == b"master"
    assert r.config_get("replica-priority") == {"replica-priority": "7"}


def test_a_value_that_is_not_utf8_is_refused_clearly_and_the_file_kept(server_factory, tmp_path):
    config = tmp_path / "kvd.toml"
    config.write_text('maxmemory = "64mb"\n')
    srv = server_factory(config=config)
    with srv.raw() as c:
        assert c.command("CONFIG", "REWRITE") == b"+OK\r\n"
        before = config.read_text()
        assert c.command("CONFIG", "SET", "requirepass", b"p\xff") == b"+OK\r\n"
        assert c.command("AUTH", b"p\xff") == b"+OK\r\n"
        assert c.command("CONFIG", "REWRITE") == (
            b"-ERR Rewriting config file: requirepass: the value is not UTF-8 text, which a TOML file cannot hold\r\n"
        )
        assert config.read_text() == before
        assert c.command("CONFIG", "SET", "requirepass", "") == b"+OK\r\n"


def test_a_relative_config_path_is_made_absolute_and_rewritten_with_its_comments(server_factory):
    """As Redis (getAbsolutePath at start): INFO's config_file (and executable) are absolute, and CONFIG REWRITE
    writes the file kvd was started with, given relative to its working directory, with ``dir`` elsewhere. A
    changed line keeps the comment at its end."""
    srv = server_factory(start=False)
    config = srv.base / "kvd.toml"
    config.write_text('# by hand\nmaxmemory = "64mb"  # RAM tier budget\n')
    srv.config = Path("kvd.toml")  # relative: the harness starts kvd in srv.base, with --dir srv.base/data
    srv.start()
    r = srv.client()
    info = r.info("server")
    assert info["config_file"] == str(config)
    assert os.path.isabs(info["executable"]), info["executable"]
    r.config_set("maxmemory", "128mb")
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    assert config.read_text().startswith('# by hand\nmaxmemory = "128mb"  # RAM tier budget\n\n')
    srv.restart()
    assert srv.client().config_get("maxmemory") == {"maxmemory": str(128 << 20)}
