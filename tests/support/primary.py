"""A stand-in for a replica's primary, for the snapshots no real primary can be made to send on demand: cut short,
damaged, followed by silence, with an end-of-file mark split over reads, or large enough that its load takes
seconds. The server under test is always the real replica."""

from __future__ import annotations

import socket
import threading
import time


class FakePrimary:
    """A peer that speaks just enough of a primary's side to send the replica a chosen snapshot: it answers the
    handshake, then every PSYNC with +FULLRESYNC and ``payload``, then closes. Not a stand-in for the server
    under test: the damaged transfers it sends are what no real primary can be made to send on demand."""

    def __init__(self, payload: bytes | list[bytes], hold: float = 0) -> None:
        self.payload = [payload] if isinstance(payload, bytes) else payload  # pieces, sent 50 ms apart
        self.hold = hold  # seconds the connection stays open, silent, after the payload
        self.psyncs = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.host = "127.0.0.1"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn) -> None:
        with conn, conn.makefile("rb") as f:
            try:
                while True:
                    argv = self._command(f)
                    name = argv[0].lower()
                    if name == b"ping":
                        conn.sendall(b"+PONG\r\n")
                    elif name == b"psync":
                        self.psyncs += 1
                        conn.sendall(b"+FULLRESYNC " + b"f" * 40 + b" 0\r\n")
                        for piece in self.payload:
                            time.sleep(0.05)
                            conn.sendall(piece)
                        time.sleep(self.hold)
                        return
                    else:
                        conn.sendall(b"+OK\r\n")
            except (OSError, ValueError):
                pass

    @staticmethod
    def _command(f) -> list[bytes]:
        head = f.readline()
        if not head.startswith(b"*"):
            raise ValueError(head)
        argv = []
        for _ in range(int(head[1:])):
            n = int(f.readline()[1:])
            argv.append(f.read(n + 2)[:-2])
        return argv

    def wait_psyncs(self, n: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.psyncs < n:
            assert time.monotonic() < deadline, f"{self.psyncs} PSYNC so far"
            time.sleep(0.05)

    def close(self) -> None:
        self.sock.close()


def small_keys_rdb(n: int) -> bytes:
    """An RDB file of ``n`` string keys ``k:NNNNNNN`` -> ``value:NNNNNNN`` (no checksum computed)."""
    out = [b"REDIS0009\xfe\x00"]
    for i in range(n):
        key, value = b"k:%07d" % i, b"value:%07d" % i
        out.append(b"\x00" + bytes([len(key)]) + key + bytes([len(value)]) + value)
    out.append(b"\xff" + bytes(8))
    return b"".join(out)
