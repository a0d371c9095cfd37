"""``kvd --config kvd.toml [--port 7000 ...]``: load settings, recover the disk tier, serve, stop cleanly.

Exit codes: 0 after a clean shutdown (SIGTERM, SIGINT, SHUTDOWN), 1 if its last fsync of the log failed; 2 for
a configuration problem (a bad file, an unknown key, an impossible value, an unusable ``dir``, a non-loopback
bind without a password under protected mode, a redis-server mode such as ``--test-memory`` or ``--sentinel``),
always as one line naming the key; 1 when the server cannot start for another reason (the port is taken).

Start-up order: settings -> logging -> recover the segment log (a rich progress bar, then one summary line) ->
stop signals -> listen -> ``pidfile`` -> ``supervised`` (kvd/supervise.py). kvd listens only after recovery, so
a client never sees a half-loaded keyspace: it cannot connect until every acknowledged key is back (redis-py
retries the refused connection; a supervisor sees the port open, the pid file appear or READY=1 only when the
data is ready). A clean stop removes the
pid file (if it still holds this process's id); a crash leaves it, and the next start overwrites it.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

import kvd
from kvd import logs
from kvd.config import ConfigError, Settings, format_size, load_settings
from kvd.logs import setup_logging
from kvd.restart import RestartRequested, exec_again
from kvd.supervise import Supervisor

log = logging.getLogger("kvd")

USAGE = """\
usage: kvd [--config FILE] [--<setting> VALUE ...]

  --config FILE   read settings from a TOML file (see the shipped kvd.toml for every key)
  --<setting> V   override any setting, redis-server style: --port 7000 --maxmemory 4gb
                  --bind 127.0.0.1 --requirepass s3cret --dir ./data --appendfsync always
  --version       print the version and exit
  --help          print this help and exit
"""


def main(argv: Sequence[str] | None = None) -> int:
    # A crash report, as Redis prints one: on SIGSEGV, SIGBUS, SIGFPE or SIGABRT the Python stack of every
    # thread goes to stderr before the process dies, so a crash in a C extension or the interpreter names where.
    faulthandler.enable(all_threads=True)
    args = list(sys.argv[1:] if argv is None else argv)
    asked = _info_request(args)
    if asked == "help":
        print(USAGE, end="")
        return 0
    if asked == "version":
        print(f"kvd {kvd.__version__}")
        return 0
    refused = _redis_mode(args)
    if refused:
        print(f"kvd: {refused}", file=sys.stderr)
        return 2
    config_path: str | None = None
    given = [a for a in args if a.startswith("--config=")]
    if args.count("--config") + len(given) > 1:
        print("kvd: --config given more than once: one file, whose keys later flags override", file=sys.stderr)
        return 2
    if "--config" in args:
        i = args.index("--config")
        if i + 1 >= len(args) or args[i + 1].startswith("--"):
            print("kvd: --config needs a file name", file=sys.stderr)
            return 2
        config_path = args[i + 1]
        del args[i : i + 2]
    elif given:  # --config=kvd.toml, as every other flag takes --key=value
        config_path = given[0].removeprefix("--config=")
        args.remove(given[0])
        if not config_path:
            print("kvd: --config needs a file name", file=sys.stderr)
            return 2
    elif args and not args[0].startswith("--"):  # `kvd kvd.toml`, like `redis-server redis.conf`
        config_path = args.pop(0)
    try:
        settings = load_settings(config_path, args)
        check_startup(settings)
        try:
            setup_logging(settings.loglevel, settings.logfile)
        except OSError as exc:
            raise ConfigError(f"logfile: cannot open {settings.logfile}: {exc.strerror or exc}") from None
    except ConfigError as exc:
        print(f"kvd: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(settings)
    except KeyboardInterrupt:
        return 0
    except RestartRequested as restart:  # DEBUG RESTART: stopped cleanly, now the same command line again
        exec_again(restart.delay_ms)


_INFO_FLAGS = {"--help": "help", "-h": "help", "--version": "version", "-v": "version"}
# redis-server's modes other than serving: refused in one line rather than read as settings
_REDIS_MODES = {
    "--test-memory": "a redis-server mode kvd does not have (redis-server --test-memory or memtester test RAM)",
    "--check-system": "a redis-server mode kvd does not have",
    "--sentinel": "kvd has no Sentinel mode (redis-sentinel runs Sentinel)",
    "-": "kvd does not read settings from stdin: give a TOML file (--config FILE)",
}


def _at_flag(args: list[str], i: int) -> bool:
    """Whether ``args[i]`` stands where a flag does, not as the value of the flag before it (``--requirepass
    --help`` sets a password, as redis-server reads it; ``--save`` followed by a flag takes no value)."""
    if i == 0:
        return True
    before = args[i - 1]
    return not before.startswith("--") or "=" in before or before == "--save"


def _info_request(args: list[str]) -> str | None:
    """What the command line asks for instead of a server, "help" or "version": ``-h`` and ``-v`` as its first
    word (as redis-server reads them), ``--help`` and ``--version`` wherever a flag stands."""
    for i, word in enumerate(args):
        what = _INFO_FLAGS.get(word)
        if what is not None and (i == 0 or (word.startswith("--") and _at_flag(args, i))):
            return what
    return None


def _redis_mode(args: list[str]) -> str | None:
    """The one-line refusal of a redis-server mode asked for (``--test-memory 4096``, ``--sentinel``, ``-``)."""
    for i, word in enumerate(args):
        why = _REDIS_MODES.get(word)
        if why is not None and (i == 0 or (word == "--sentinel" and _at_flag(args, i))):
            return f"{word}: {why}"
    return None


def check_startup(s: Settings) -> None:
    """Refuse what Redis's protected mode would refuse, and TLS files that do not load, before anything is
    opened (recovery included)."""
    from kvd.server import is_loopback_address

    if s.tls_port:
        from kvd.server import build_tls_context

        build_tls_context(s)  # ConfigError naming the key and the file, before recovery rather than after it

    if s.protected_mode and not s.requirepass:
        exposed = [a for a in s.bind if not is_loopback_address(a)]
        if exposed:
            raise ConfigError(
                f"bind: refusing to listen on {' '.join(exposed)} without requirepass while protected-mode is on "
                "(set requirepass, or protected-mode no if every host that can reach it is trusted)"
            )


def _run(settings: Settings) -> int:
    from kvd.gil import tune_switch_interval
    from kvd.memory import tune_allocator, tune_collector

    tune_allocator()
    tune_collector()  # before recovery, which builds the keyspace
    tune_switch_interval()  # the persistence threads get the GIL back within 0.2 ms (kvd/gil.py)
    try:
        import uvloop  # measured faster for small requests; see docs/benchmarks.md
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        uvloop = None
    if uvloop is not None and os.environ.get("KVD_EVENT_LOOP", "uvloop") == "uvloop":
        runner = uvloop.run
    else:
        runner = asyncio.run
    return runner(_serve(settings))


async def _serve(settings: Settings) -> int:
    from kvd.server import ListenError, Server
    from kvd.store.keyspace import Keyspace, now_ms

    seg_log = None
    report = None
    started = time.monotonic()
    # As redis-server (initServer): a closed terminal's SIGHUP must not kill the server, recovery included
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if settings.persistence:
        from kvd.persist import PersistError, SegmentLog

        try:
            seg_log = SegmentLog(
                settings.dir,
                segment_size=settings.segment_size,
                appendfsync=settings.appendfsync,
                max_disk=settings.max_disk,
                compaction_dead_ratio=settings.compaction_dead_ratio,
                logger=logging.getLogger("kvd.persist"),
            )
            seg_log.open_directory()
            # A replica keeps the keys past their deadline, as a Redis replica's rdbLoad does: the primary's DEL
            # decides, and its stream, continued after a clean restart, may hold a PERSIST for one of them.
            now = 0 if settings.replicaof else now_ms()
            recovered, report = await asyncio.to_thread(_recover_with_progress, seg_log, now)
        except PersistError as exc:
            print(f"kvd: dir: {exc}", file=sys.stderr)
            return 2
    keyspace = Keyspace(
        maxmemory=settings.maxmemory,
        policy=settings.maxmemory_policy,
        seg_log=seg_log,
        lfu_log_factor=settings.lfu_log_factor,
        lfu_decay_time=settings.lfu_decay_time,
        maxmemory_samples=settings.maxmemory_samples,
    )
    if settings.replicaof:
        keyspace.set_replica(True)  # before the first key: one past its deadline is hidden, never deleted
    identity = link_identity = None
    if seg_log is not None:
        from kvd.replication import LINK_IDENTITY_FILE, take_identity

        keyspace.restore(recovered)
        seg_log.start(asyncio.get_running_loop(), keyspace)
        identity = take_identity(settings.dir)  # a clean shutdown's replication id: replicas continue
        link_identity = take_identity(settings.dir, LINK_IDENTITY_FILE)  # and its primary's: it continues
    from kvd.replica import remove_stale_transfers

    for path in remove_stale_transfers(settings.dir):
        log.info("removed %s, the snapshot of a transfer whose process was killed", path)
    server = Server(settings, keyspace, report, identity, link_identity)
    server.supervisor = Supervisor(settings.supervised)
    # The stop signals are the server's before it listens: a SIGTERM sent as soon as the port answers (or the pid
    # file appears) is a clean shutdown, not the default action's death.
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, server.request_shutdown, signal.Signals(sig).name)
    # A process that executed itself again (kvd/restart.py) starts with them blocked: a stop asked meanwhile is
    # pending and is taken now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        await server.start()
    except (ListenError, OSError, ConfigError) as exc:
        log.error("%s", f"cannot listen: {exc.strerror or exc}" if isinstance(exc, OSError) else exc)
        if seg_log is not None:
            await seg_log.close()
        return 1
    pidfile = settings.pidfile if settings.pidfile and write_pidfile(settings.pidfile) else ""
    _banner(settings, server, len(keyspace), time.monotonic() - started)
    server.supervisor.ready(replica=bool(settings.replicaof))
    await server.serve_until_stopped()
    if pidfile:  # a clean stop, DEBUG RESTART's included (the new image writes it again), as Redis's
        remove_pidfile(pidfile)
    if server.restart_delay_ms is not None:
        raise RestartRequested(server.restart_delay_ms)
    return server.exit_status


def write_pidfile(path: str) -> bool:
    """Write this process's id into ``path`` (whatever was there, a crashed server's file included, is replaced),
    as redis-server's createPidFile; a file that cannot be written is a warning, and kvd serves all the same."""
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    except OSError as exc:
        log.warning("cannot write the pid file %s: %s", path, exc.strerror or exc)
        return False
    return True


def remove_pidfile(path: str) -> None:
    """Remove the pid file at a clean exit, unless it no longer holds this process's id (another process wrote
    it since: its file is left alone)."""
    try:
        with open(path, "rb") as f:
            holds = f.read(64).strip()
    except OSError:
        return
    if holds != str(os.getpid()).encode():
        log.warning(
            "pid file %s holds %r, not this process's id: left in place", path, holds.decode("ascii", "replace")
        )
        return
    with contextlib.suppress(OSError):
        os.unlink(path)
        log.info("removed the pid file %s", path)


def _recover_with_progress(seg_log: object, now: int) -> tuple[dict, object]:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("[bold]recovering segments"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=logs.console,
        transient=True,
        disable=not logs.console.is_terminal,  # in a log file the summary line below says it all
    )
    with progress:
        task = progress.add_task("recover", total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        recovered, report = seg_log.recover(now, update)  # type: ignore[attr-defined]
    log.info(
        "recovered %d keys, %s in %.2f s (%s segments, %d hint files used); skipped %d damaged records and "
        "unreadable regions (%d damaged records: their keys dropped or repaired), truncated %d torn bytes",
        report.keys,
        format_size(report.bytes),
        report.seconds,
        report.segments,
        report.hint_files_used,
        report.skipped_records,
        report.damaged_records,
        report.truncated_bytes,
    )
    for warning in report.warnings:
        log.warning("%s", warning)
    return recovered, report


def _banner(settings: Settings, server: object, keys: int, seconds: float) -> None:
    from rich.panel import Panel
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan")
    table.add_column()
    table.add_row("version", kvd.__version__)
    table.add_row("config", settings.config_file or "(defaults)")
    places = [f"{a}:{server.bound_port}" for a in settings.bind] if settings.port else []  # type: ignore[attr-defined]
    if settings.tls_port:
        places.append(f"tls:{settings.tls_port}")
    if settings.unixsocket:
        places.append(f"unix:{settings.unixsocket}")
    table.add_row("listening", "  ".join(places))
    table.add_row("memory", f"{format_size(settings.maxmemory) if settings.maxmemory else 'unlimited'} RAM tier")
    if settings.persistence:
        disk = format_size(settings.max_disk) if settings.max_disk else "unlimited"
        table.add_row("tiers", f"ram -> disk ({settings.dir}, {disk}, appendfsync {settings.appendfsync})")
    else:
        table.add_row("tiers", "ram only (persistence off)")
    table.add_row("auth", "requirepass set" if settings.requirepass else "none (loopback only)")
    table.add_row("pid", str(os.getpid()))
    table.add_row("ready", f"{keys} keys in {seconds:.2f} s, loop {server.loop_name}")  # type: ignore[attr-defined]
    logs.console.print(Panel(table, title="[bold]kvd[/] - KV-cache server", expand=False))
    if settings.port:
        log.info("ready to accept connections on port %d", server.bound_port)  # type: ignore[attr-defined]
    if settings.tls_port:
        log.info("ready to accept TLS connections on port %d", settings.tls_port)
    if settings.unixsocket:
        log.info("ready to accept connections at %s", settings.unixsocket)


if __name__ == "__main__":
    sys.exit(main())
