"""TLS: certificates made by the test with the openssl CLI, kvd's TLS port used by redis-cli and redis-py.

Skipped (with the reason) when openssl or a TLS-enabled redis-cli is missing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import redis
from hardening_support import free_port, recv_until_closed

from kvd.persist.rdb import RdbReader

MiB = 1 << 20

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl CLI is not installed")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)  # fmt: skip


def make_cert(d: Path, ca: str, name: str, cn: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=d)  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    make_ca(d, "ca")
    make_ca(d, "otherca")
    make_cert(
        d, "ca", "server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    make_cert(d, "ca", "client", "client", "extendedKeyUsage=clientAuth\n")
    make_cert(d, "otherca", "stranger", "stranger", "extendedKeyUsage=clientAuth\n")
    return d


def start_tls(kvd_factory, certs: Path, auth_clients: str):
    tls_port = free_port()
    srv = kvd_factory(
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(certs / "server.crt"),
        "--tls-key-file", str(certs / "server.key"),
        "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", auth_clients,
    )  # fmt: skip
    srv.tls_port = tls_port
    return srv


def redis_cli(port: int, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("redis-cli")
    if exe is None:
        pytest.skip("redis-cli is not installed")
    return subprocess.run(
        [exe, "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True, timeout=timeout
    )


def test_tls_without_client_certificates(kvd_factory, certs):
    srv = start_tls(kvd_factory, certs, "no")
    done = redis_cli(srv.tls_port, "--tls", "--cacert", str(certs / "ca.crt"), "ping")
    if "Unrecognized option" in done.stderr or ("--tls" in done.stderr and "not" in done.stderr):
        pytest.skip(f"redis-cli has no TLS support: {done.stderr.strip()}")
    assert done.returncode == 0 and done.stdout.strip() == "PONG", (done.stdout, done.stderr)
    # redis-py over rediss://, a 4 MiB value both ways
    value = bytes(range(256)) * (4 * MiB // 256)
    r = redis.Redis.from_url(
        f"rediss://127.0.0.1:{srv.tls_port}", ssl_ca_certs=str(certs / "ca.crt"), socket_timeout=30
    )
    assert r.set("tls:big", value)
    assert r.get("tls:big") == value
    # repeated same-shape SETs land whole (kvd/protocol/landing.py), here through the TLS transport's buffers
    chunks = {f"tls:chunk:{i:04d}": bytes([i]) * (256 * 1024) for i in range(8)}
    for key, chunk in chunks.items():
        assert r.set(key, chunk)
    assert r.mget(list(chunks)) == list(chunks.values())
    # the same key is visible on the plain port
    assert srv.client().get("tls:big") == value
    # a backup over TLS: redis-cli --rdb streams the snapshot through the TLS transport
    backup = certs / f"backup-{srv.tls_port}.rdb"
    done = redis_cli(srv.tls_port, "--tls", "--cacert", str(certs / "ca.crt"), "--rdb", str(backup), timeout=60)
    assert done.returncode == 0 and "Transfer finished with success" in done.stderr, done.stderr
    with open(backup, "rb") as f:
        assert dict((k, v) for k, v, _ in RdbReader(f))[b"tls:big"] == value
    # the server certificate does not verify against another CA
    bad = redis.Redis.from_url(
        f"rediss://127.0.0.1:{srv.tls_port}", ssl_ca_certs=str(certs / "otherca.crt"), socket_timeout=10
    )
    with pytest.raises(redis.ConnectionError):
        bad.ping()
    r.close()


def test_tls_auth_clients_yes(kvd_factory, certs):
    srv = start_tls(kvd_factory, certs, "yes")
    base = ["--tls", "--cacert", str(certs / "ca.crt")]
    done = redis_cli(srv.tls_port, *base, "--cert", str(certs / "client.crt"), "--key", str(certs / "client.key"),
                     "ping")  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "PONG", (done.stdout, done.stderr)
    # without a client certificate: refused (redis-cli prints an error, never PONG)
    done = redis_cli(srv.tls_port, *base, "ping")
    assert "PONG" not in done.stdout, done.stdout
    # a certificate from another CA: refused
    done = redis_cli(srv.tls_port, *base, "--cert", str(certs / "stranger.crt"), "--key",
                     str(certs / "stranger.key"), "ping")  # fmt: skip
    assert "PONG" not in done.stdout, done.stdout
    # redis-py with and without a client certificate
    good = redis.Redis(
        host="127.0.0.1", port=srv.tls_port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
        ssl_certfile=str(certs / "client.crt"), ssl_keyfile=str(certs / "client.key"), socket_timeout=30,
    )  # fmt: skip
    value = b"\x00\xff" * (2 * MiB)
    assert good.set("tls:v", value) and good.get("tls:v") == value
    anonymous = redis.Redis(
        host="127.0.0.1", port=srv.tls_port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"), socket_timeout=10
    )
    with pytest.raises(redis.ConnectionError):
        anonymous.ping()
    assert srv.alive() and srv.client().ping()
    good.close()


def test_tls_auth_clients_optional(kvd_factory, certs):
    srv = start_tls(kvd_factory, certs, "optional")
    base = ["--tls", "--cacert", str(certs / "ca.crt")]
    assert redis_cli(srv.tls_port, *base, "ping").stdout.strip() == "PONG"
    done = redis_cli(srv.tls_port, *base, "--cert", str(certs / "client.crt"), "--key", str(certs / "client.key"),
                     "ping")  # fmt: skip
    assert done.stdout.strip() == "PONG", done.stderr
    # optional still verifies a certificate that is presented
    done = redis_cli(srv.tls_port, *base, "--cert", str(certs / "stranger.crt"), "--key",
                     str(certs / "stranger.key"), "ping")  # fmt: skip
    assert "PONG" not in done.stdout, done.stdout


def test_plaintext_and_junk_on_the_tls_port(kvd_factory, certs):
    """Plain RESP or random bytes on the TLS port are refused; the server keeps serving TLS and TCP."""
    srv = start_tls(kvd_factory, certs, "no")
    for junk in (b"PING\r\n", b"*1\r\n$4\r\nPING\r\n", b"\x16\x03\x01\x00\x05hello", bytes(range(256)) * 4):
        with socket.create_connection(("127.0.0.1", srv.tls_port), timeout=5) as s:
            try:
                s.sendall(junk)
            except OSError:
                continue
            data, closed = recv_until_closed(s, timeout=5)
            assert b"PONG" not in data
            assert closed, junk[:20]
    # a TLS client that connects and then stalls mid-handshake does not block others
    stalled = socket.create_connection(("127.0.0.1", srv.tls_port), timeout=5)
    try:
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        with (
            socket.create_connection(("127.0.0.1", srv.tls_port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"PING\r\n")
            assert tls.recv(100) == b"+PONG\r\n"
    finally:
        stalled.close()
    assert srv.client().ping()


async def test_the_tls_port_accepts_once_the_tcp_port_does(certs, monkeypatch):
    """Every listener is bound before any accepts, so a client that saw PONG on the TCP port is not refused on the
    TLS port. The resolver is slowed (as a hostname in ``bind`` can make it) to widen the window in which the TCP
    port used to serve alone; the probe connects to the TCP port until it is accepted, then at once to TLS."""
    from kvd.config import load_settings
    from kvd.server import Server
    from kvd.store.keyspace import Keyspace

    port, tls_port = free_port(), free_port()
    flags = ["--persistence", "no", "--bind", "localhost", "--port", str(port), "--tls-port", str(tls_port),
             "--tls-cert-file", str(certs / "server.crt"), "--tls-key-file", str(certs / "server.key"),
             "--tls-auth-clients", "no"]  # fmt: skip
    settings = load_settings(None, flags)
    server = Server(settings, Keyspace(maxmemory=settings.maxmemory, policy=settings.maxmemory_policy))
    loop = asyncio.get_running_loop()
    resolve = loop.getaddrinfo

    async def slow_getaddrinfo(*args, **kwargs):
        await asyncio.sleep(0.3)
        return await resolve(*args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", slow_getaddrinfo)
    starting = asyncio.create_task(server.start())
    try:
        for _ in range(500):  # bounded: 5 s at 10 ms a probe
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.01)
                continue
            writer.close()
            _, tls_writer = await asyncio.open_connection("127.0.0.1", tls_port)  # refused = the bug
            tls_writer.close()
            break
        else:
            pytest.fail("the TCP port never accepted")
        await starting
    finally:
        starting.cancel()
        await server.stop()


def _wait_link(r: redis.Redis, srv, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while r.info("replication")["master_link_status"] != "up":
        assert time.monotonic() < deadline, srv.log_tail()
        time.sleep(0.05)


def test_a_replica_follows_its_primary_over_tls(kvd_factory, certs):
    """tls-replication: the replica reaches the primary's TLS port, shows its client certificate to a primary that
    requires one, takes the snapshot and then the stream."""
    primary = start_tls(kvd_factory, certs, "yes")
    replica = kvd_factory(
        "--tls-replication", "yes",
        "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-client-cert-file", str(certs / "client.crt"),
        "--tls-client-key-file", str(certs / "client.key"),
    )  # fmt: skip
    p = primary.client()
    big = os.urandom(3 * MiB)
    p.set("big", big)
    p.mset({f"k{i}": f"v{i}" for i in range(200)})
    r = replica.client()
    r.replicaof("127.0.0.1", primary.tls_port)
    _wait_link(r, replica)
    assert r.get("big") == big and r.get("k199") == b"v199"
    p.set("streamed", big[:MiB])
    deadline = time.monotonic() + 20
    while r.get("streamed") is None:
        assert time.monotonic() < deadline, replica.log_tail()
        time.sleep(0.05)
    assert r.get("streamed") == big[:MiB]
    assert p.info("replication")["connected_slaves"] == 1


def test_a_tls_primary_whose_certificate_is_not_trusted_is_not_followed(kvd_factory, certs):
    primary = start_tls(kvd_factory, certs, "no")
    primary.client().set("secret", "1")
    replica = kvd_factory("--tls-replication", "yes", "--tls-ca-cert-file", str(certs / "otherca.crt"))
    r = replica.client()
    r.replicaof("127.0.0.1", primary.tls_port)
    deadline = time.monotonic() + 10
    while "TLS with the primary failed" not in replica.log_tail():
        assert time.monotonic() < deadline, replica.log_tail()
        time.sleep(0.1)
    assert "CERTIFICATE_VERIFY_FAILED" in replica.log_tail()
    assert r.info("replication")["master_link_status"] == "down" and r.get("secret") is None
    r.replicaof("NO", "ONE")
