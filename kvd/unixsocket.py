"""The unix socket listener's file: what to do with one already at the path, its permissions, its removal.

``unixsocket /path`` makes kvd listen there as well as on TCP (or instead, with ``port 0``), as Redis does. For a
client on the same host it skips TCP: no segments, checksums or ACKs, and no Nagle or delayed-ACK to tune; the
kernel copies each send straight into the receiver's queue (docs/benchmarks.md measures what that buys).

A socket's file outlives the process that bound it, so start-up usually finds one: the last run's, left by a
crash (a clean shutdown removes it). Redis unlinks whatever is at the path before binding, which also takes the
name from a server still running there (its clients reconnect to the newcomer) and deletes a regular file
configured by mistake. kvd replaces only a socket that nobody accepts on (a connect to it is refused), and
refuses to start, saying why, when the path is a live socket or not a socket at all.

Removal is as careful: at shutdown kvd unlinks the path only if it is still the socket it bound (same device and
inode), not one another process put there since.
"""

from __future__ import annotations

import errno
import os
import socket
import stat

# (st_dev, st_ino) of the file a bind made: what ``remove`` checks before unlinking
Identity = tuple[int, int]


def bind(path: str, perm: int) -> tuple[socket.socket, Identity]:
    """A bound (not yet listening) unix stream socket at ``path``, with ``perm`` applied when non-zero.

    Raises OSError saying why (the caller names the path): a live socket or a non-socket there, or the bind's
    own failure (a missing directory, no permission)."""
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        if perm:
            os.chmod(path, perm)  # after bind and before listen, as Redis: no client connects in between
        st = os.stat(path)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock, (st.st_dev, st.st_ino)


def remove(path: str, identity: Identity) -> bool:
    """Unlink ``path`` if it is still the socket ``bind`` made; whether it did."""
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) != identity:
            return False
        os.unlink(path)
    except OSError:
        return False
    return True


def _clear_stale(path: str) -> None:
    """Remove a socket at ``path`` that nobody accepts on; leave anything else and say why."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, "the path exists and is not a socket (kvd does not remove it)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):  # stale: the process that bound it is gone
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    except OSError:
        pass  # a full backlog (EAGAIN) or a timeout: someone is there
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, "another server accepts connections on it")
