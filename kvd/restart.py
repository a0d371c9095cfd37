"""Restarting the process in place, as Redis's ``restartServer``: DEBUG RESTART and DEBUG CRASH-AND-RECOVER.

The new process is this one: ``execv`` of the same interpreter with the same command line (``sys.orig_argv``)
in the same working directory, so the same PID, the same settings file and command-line flags, the same port.
Every descriptor above stderr is closed first (listening sockets, client connections, segment files, the lock
on ``dir``), as Redis closes them, so that nothing of the old image is held when the new one starts; a
``delay`` is slept after that, with the port free. The listening sockets go first: Redis closes descriptors in
numeric order, so a client that sees its connection close and connects again at once can be queued on a
listener that closes a moment later, and is reset (seen in kvd's CI); refused, it simply tries again. The new
process recovers from the log like any start.

RESTART stops gracefully first (``Server.request_restart``: the shutdown path, so the log is drained and
fsynced, replicas get the last changes), after CONFIG REWRITE of the settings file if kvd was started with one;
CRASH-AND-RECOVER does not: what it loses is what a crash loses (docs/operations.md). If ``execv`` fails the
process exits with status 1, as Redis's does: there is no image left to go back to.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from typing import NoReturn

log = logging.getLogger("kvd.server")


class RestartRequested(Exception):
    """Raised out of the event loop once a graceful stop for DEBUG RESTART is complete."""

    def __init__(self, delay_ms: int) -> None:
        super().__init__(f"restart after {delay_ms} ms")
        self.delay_ms = delay_ms


def cannot_restart() -> str | None:
    """Why this process could not execute itself again, or None."""
    if not os.access(sys.executable, os.X_OK):
        return f"this process has no permission to execute {sys.executable}"
    if not sys.orig_argv:
        return "the original command line is unknown"
    return None


def exec_again(delay_ms: int) -> NoReturn:
    log.warning("restarting: %s", " ".join(sys.orig_argv))
    for handler in logging.getLogger("kvd").handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # A SIGTERM or SIGINT from here on would reach the event loop's handler through a wakeup fd that is about to
    # close, and be lost (seen once in CI: the restarted server then ignored its stop). Recorded here instead, it
    # stops the process rather than letting it start again; acknowledged writes are already in the log.
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    _close_listeners()
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    if delay_ms > 0:
        time.sleep(delay_ms / 1000)
    if stop:
        os._exit(0)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # pending across execv (cli.py)
    try:
        os.execv(sys.executable, sys.orig_argv)
    finally:
        os._exit(1)


def _close_listeners() -> None:
    """Close the listening sockets among this process's descriptors (Linux's ``/proc/self/fd``; elsewhere they
    go with the rest)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd < 3:
            continue
        try:
            dup = os.dup(fd)
        except OSError:  # already closed: the listdir's own descriptor
            continue
        try:
            probe = socket.socket(fileno=dup)
        except OSError:  # not a socket
            os.close(dup)
            continue
        with probe:
            listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if listening:
            os.close(fd)
