"""kvd/restart.py closes the process's listening sockets before its other descriptors, so that a client
reconnecting while a restart closes everything is refused (and retries) rather than queued on a listener that
closes a moment later and reset. Run in a child process: the function closes every listener of its process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, socket
from kvd.restart import _close_listeners

listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
client = socket.create_connection(("127.0.0.1", port))
accepted, _ = listener.accept()
r, w = os.pipe()
_close_listeners()

def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False

print(is_open(listener.fileno()), is_open(accepted.fileno()), is_open(client.fileno()), is_open(r), is_open(w))
try:
    socket.create_connection(("127.0.0.1", port), timeout=2)
    print("accepted")
except ConnectionRefusedError:
    print("refused")
listener.detach()  # its descriptor is already closed
"""


def test_only_the_listening_sockets_are_closed():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=30, check=True
    )
    opened, verdict = out.stdout.split("\n")[:2]
    assert opened == "False True True True True", out.stdout + out.stderr
    assert verdict == "refused"
