"""Logging through rich: one readable line per notable event, on stderr or in ``logfile``.

Only events a person acts on are logged at INFO (start-up, recovery, shutdown, configuration changes, clients
closed for cause); per-request logging would cost more than the request.
"""

from __future__ import annotations

import faulthandler
import logging
import sys

from rich.console import Console
from rich.logging import RichHandler

# Not a terminal (a service, a test): wide lines, so one event stays on one line.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


# Redis's loglevel names that Python's logging lacks: verbose (between debug and notice) logs as debug, notice
# (Redis's default) as info.
_PYTHON_LEVEL = {"verbose": "DEBUG", "notice": "INFO"}


def python_level(loglevel: str) -> str:
    """The ``logging`` level for the ``loglevel`` setting."""
    return _PYTHON_LEVEL.get(loglevel, loglevel.upper())


def setup_logging(level: str, logfile: str = "") -> None:
    global console
    if logfile:
        log_file = open(logfile, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
        console = Console(file=log_file, width=160, force_terminal=False)
        # A crash's report (kvd/cli.py enables it on stderr) goes where the log goes, as Redis writes its crash
        # report into its log: a service's stderr is often nowhere anyone looks.
        faulthandler.enable(file=log_file, all_threads=True)
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
    root.setLevel(python_level(level))
    root.propagate = False
