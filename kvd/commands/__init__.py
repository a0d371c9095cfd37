"""Command handlers, one module per family; importing this package fills the command table."""

from . import connection, diagnostics, keys, kvd_ext, memory, pubsub, replication, server, strings, transactions  # noqa: F401  (registration side effects)
from .registry import COMMANDS, Command

__all__ = ["COMMANDS", "Command"]
