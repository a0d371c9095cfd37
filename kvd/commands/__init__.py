"""Command handlers, one module per family; importing this package fills the command table."""

from . import (  # noqa: F401  (registration side effects)
    acl,
    bitmaps,
    cluster,
    connection,
    debug,
    diagnostics,
    hyperloglog,
    keys,
    kvd_ext,
    lcs,
    lolwut,
    memory,
    migrate,
    modules,
    objects,
    pubsub,
    replication,
    server,
    sort,
    strings,
    sync,
    tracking,
    transactions,
)
from .registry import COMMANDS, Command

__all__ = ["COMMANDS", "Command"]
