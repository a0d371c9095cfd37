"""Telling a service manager when kvd is ready and when it stops: ``supervised``, as redis-server's.

A unit of ``Type=notify`` (Debian's redis-server.service runs ``redis-server --supervised systemd``) waits for
the service to say ``READY=1`` on the datagram socket named by ``$NOTIFY_SOCKET`` (sd_notify(3); a name starting
with ``@`` is in the abstract namespace). kvd says it once it listens, which is after recovery: a unit that
starts after kvd's finds every acknowledged key there. A clean stop says ``STOPPING=1``. Upstart's ``expect
stop`` waits for the process to stop itself with SIGSTOP, which kvd does at the same point (Redis does it before
loading its data) and then forgets ``$UPSTART_JOB``, so that the processes it starts do not stop too.

``auto`` picks upstart where ``$UPSTART_JOB`` is set, else systemd where ``$NOTIFY_SOCKET`` is, else nothing, as
Redis's ``redisIsSupervised``. Asked for and not possible (no ``$NOTIFY_SOCKET``, no ``$UPSTART_JOB``): one
warning, and kvd runs unsupervised (INFO server ``process_supervised:no``), as Redis does. A message that cannot
be sent is a warning too: the service manager then decides (for systemd, the unit's TimeoutStartSec), kvd serves.

No libsystemd: sd_notify's protocol is one ``sendto`` of ``KEY=value`` lines, done here with the socket module.
"""

from __future__ import annotations

import logging
import os
import signal
import socket

log = logging.getLogger("kvd.supervise")


class Supervisor:
    """The service manager kvd reports to (``mode``: "systemd", "upstart" or "no" when there is none)."""

    def __init__(self, requested: str) -> None:
        self.mode = _resolve(requested)

    def ready(self, replica: bool) -> None:
        """kvd listens, its data recovered."""
        if self.mode == "systemd":
            status = "Ready to accept connections"
            if replica:
                status += " in read-only mode. Waiting for MASTER <-> REPLICA sync"
            self._notify(f"STATUS={status}\nREADY=1\n")
        elif self.mode == "upstart":
            log.info("supervised by upstart: stopping to signal readiness")
            os.environ.pop("UPSTART_JOB", None)
            os.kill(os.getpid(), signal.SIGSTOP)

    def stopping(self) -> None:
        """A clean stop has begun."""
        if self.mode == "systemd":
            self._notify("STOPPING=1\n")

    def _notify(self, message: str) -> None:
        address = os.environ.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message.encode(), address)
        except OSError as exc:
            log.warning("systemd supervision error: cannot notify %s: %s", address.lstrip("\0"), exc.strerror or exc)


def _resolve(requested: str) -> str:
    mode = requested
    if mode == "auto":
        mode = "upstart" if "UPSTART_JOB" in os.environ else "systemd" if "NOTIFY_SOCKET" in os.environ else "no"
    if mode == "systemd" and not os.environ.get("NOTIFY_SOCKET"):
        log.warning("systemd supervision requested, but NOTIFY_SOCKET is not set: running unsupervised")
        return "no"
    if mode == "upstart" and "UPSTART_JOB" not in os.environ:
        log.warning("upstart supervision requested, but UPSTART_JOB is not set: running unsupervised")
        return "no"
    return mode
