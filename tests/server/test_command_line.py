"""kvd's command line beyond settings: --help and --version where a flag stands (not as a password that reads
like them), redis-server's other modes and ``daemonize yes`` refused in one line with exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kvd

pytestmark = [pytest.mark.kvd_only, pytest.mark.timeout(60)]


def run_kvd(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvd", *args], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )


def test_help_and_version_wherever_a_flag_stands(tmp_path):
    for args in (["--version"], ["-v"], ["--port", "7000", "--version"], ["--save", "--version"]):
        done = run_kvd(tmp_path, *args)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"kvd {kvd.__version__}\n", ""), args
    for args in (["--help"], ["-h"], ["--bind", "127.0.0.1", "::1", "--help"], ["--port=7000", "--help"]):
        done = run_kvd(tmp_path, *args)
        assert done.returncode == 0 and done.stdout.startswith("usage: kvd [--config FILE]"), args


def test_a_password_that_reads_like_help_or_version_is_a_password(server_factory):
    # redis-server reads -h and -v only as its first word, and takes the word after --requirepass whatever it
    # is; kvd printed its usage (or version) and exited 0 instead of serving.
    srv = server_factory("--requirepass", "-h", "--masterauth", "--version")
    r = srv.client(password="-h")
    assert r.ping() is True
    assert r.config_get("masterauth") == {"masterauth": "--version"}


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--test-memory", "1024"], "--test-memory: a redis-server mode kvd does not have"),
        (["--check-system"], "--check-system: a redis-server mode kvd does not have"),
        (["--port", "7000", "--sentinel"], "--sentinel: kvd has no Sentinel mode (redis-sentinel runs Sentinel)"),
        (["-"], "-: kvd does not read settings from stdin: give a TOML file (--config FILE)"),
        (["--daemonize", "yes"], "--daemonize: kvd stays in the foreground (run it under a supervisor"),
    ],
)
def test_redis_server_modes_are_refused_in_one_line(tmp_path, args, line):
    done = run_kvd(tmp_path, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(f"kvd: {line}"), done.stderr
    assert not (tmp_path / "data").exists()


def test_daemonize_no_is_accepted(server_factory):
    srv = server_factory("--daemonize", "no")  # CONFIG GET and SET of it: tests/compat/test_pidfile.py
    assert srv.client().ping() is True


def test_config_given_twice_is_refused_in_one_line(tmp_path):
    (tmp_path / "a.toml").write_text("port = 7001\n")
    for args in (["--config", "a.toml", "--config", "a.toml"], ["--config=a.toml", "--config", "a.toml"]):
        done = run_kvd(tmp_path, *args)
        assert (done.returncode, done.stdout) == (2, ""), args
        assert done.stderr == "kvd: --config given more than once: one file, whose keys later flags override\n"
