"""A stand-in for a replica's primary, for the snapshots no real primary can be made to send on demand: cut short,
damaged, followed by silence, with an end-of-file mark split over reads, or large enough that its load takes
seconds; and for a stream cut where no real primary cuts it (a MULTI whose EXEC has not come). The server under
test is always the real replica."""

from __future__ import annotations

import re
import socket
import threading
import time


class FakePrimary:
    """A peer that speaks just enough of a primary's side to send the replica a chosen snapshot: it answers the
    handshake, then every PSYNC with +FULLRESYNC and ``payload``, then closes. Not a stand-in for the server
    under test: the damaged transfers it sends are what no real primary can be made to send on demand."""

    def __init__(self, payload: bytes | list[bytes], hold: float = 0, offset: int = 0) -> None:
        self.payload = [payload] if isinstance(payload, bytes) else payload  # pieces, sent 50 ms apart
        self.hold = hold  # seconds the connection stays open after the payload (``send`` streams more meanwhile)
        self.offset = offset  # the offset +FULLRESYNC announces
        self.psyncs = 0
        self.conn: socket.socket | None = None  # the connection the payload went to
        self.received = bytearray()  # what the replica sent after the payload (its REPLCONF ACKs)
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
                        conn.sendall(b"+FULLRESYNC " + b"f" * 40 + b" %d\r\n" % self.offset)
                        for piece in self.payload:
                            time.sleep(0.05)
                            conn.sendall(piece)
                        self.conn = conn
                        self._listen(conn, time.monotonic() + self.hold)
                        return
                    else:
                        conn.sendall(b"+OK\r\n")
            except (OSError, ValueError):
                pass

    def _listen(self, conn: socket.socket, until: float) -> None:
        conn.settimeout(0.05)
        while time.monotonic() < until:
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return
            self.received += data

    def send(self, *commands: list[bytes | str]) -> None:
        """Stream ``commands`` to the replica, in one write, as a primary propagates them."""
        assert self.conn is not None, "no replica is following yet"
        self.conn.sendall(b"".join(encode(*argv) for argv in commands))

    def acks(self) -> list[int]:
        """The offsets of the REPLCONF ACKs received so far, in order."""
        return [ack for ack, _ in self.facks()]

    def facks(self) -> list[tuple[int, int | None]]:
        """Each REPLCONF ACK's offset and its FACK (the offset the replica's log has fsynced; None: not sent)."""
        return [
            (int(ack), int(fack) if fack else None)
            for count, ack, fack in re.findall(
                rb"\*([35])\r\n\$8\r\nREPLCONF\r\n\$3\r\nACK\r\n\$\d+\r\n(\d+)\r\n(?:\$4\r\nFACK\r\n\$\d+\r\n(\d+)\r\n)?",
                self.received,
            )
            if (count == b"5") == bool(fack)
        ]

    def wait_ack(self, offset: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while offset not in self.acks():
            assert time.monotonic() < deadline, f"no ACK of {offset}: {self.acks()}"
            time.sleep(0.02)

    def wait_fack(self, offset: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not any(fack is not None and fack >= offset for _, fack in self.facks()):
            assert time.monotonic() < deadline, f"no FACK of {offset}: {self.facks()}"
            time.sleep(0.02)

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


def encode(*argv: bytes | str | int) -> bytes:
    """A command as a primary streams it: a RESP array of bulk strings."""
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


EMPTY_RDB = b"REDIS0009\xff" + bytes(8)  # no keys; a zero checksum means "not computed"


def small_keys_rdb(n: int) -> bytes:
    """An RDB file of ``n`` string keys ``k:NNNNNNN`` -> ``value:NNNNNNN`` (no checksum computed)."""
    out = [b"REDIS0009\xfe\x00"]
    for i in range(n):
        key, value = b"k:%07d" % i, b"value:%07d" % i
        out.append(b"\x00" + bytes([len(key)]) + key + bytes([len(value)]) + value)
    out.append(b"\xff" + bytes(8))
    return b"".join(out)
