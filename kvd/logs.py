"""Logging through rich: one readable line per notable event, on stderr or in ``logfile``.

Only events a person acts on are logged at INFO (start-up, recovery, shutdown, configuration changes, clients
closed for cause); per-request logging would cost more than the request.
"""

from __future__ import annotations

import logging
import sys

from rich.console import Console
from rich.logging import RichHandler

# Not a terminal (a service, a test): wide lines, so one event stays on one line.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def setup_logging(level: str, logfile: str = "") -> None:
    global console
    if logfile:
        console = Console(file=open(logfile, "a", buffering=1), width=160, force_terminal=False)  # noqa: SIM115
    handler = RichHandler(
        console=console,
        show_path=False,
        rich_tracebacks=False,
        markup=False,
        log_time_format="%Y-%m-%d %H:%M:%S",
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("kvd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
