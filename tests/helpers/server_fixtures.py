"""Fixtures for tests that talk to a server: servers in child processes on 127.0.0.1 with random
ports, and clients for them. A pytest plugin of the root ``conftest.py``, so any test folder
can use them (the server, protocol, commands and pipeline tests do)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diffrec import cli
from diffrec.protocol import Client, read_keypair, write_keypair
from helpers.servers import ServerProcess


@pytest.fixture
def start_server(tmp_path):
    """start_server(*extra_args, data_dir=None, port=None) → a running ServerProcess, killed
    after the test."""
    servers: list[ServerProcess] = []

    def start(*extra: str, data_dir: Path | None = None, port: int | None = None, wait=True):
        server = ServerProcess(data_dir or tmp_path / "data", *extra, port=port)
        servers.append(server)
        return server.start(wait)

    yield start
    for server in servers:
        server.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> ServerProcess:
    """One server shared by a module's tests (they use distinct job ids)."""
    server = ServerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield server
    server.kill()


def curve_server(root: Path, *extra: str) -> tuple[ServerProcess, str, dict]:
    """A started CURVE server on loopback (--curve, and ``extra`` flags) with clients 'alice'
    and 'bob' allowed: (server, its public key, {name: key pair}); 'eve' has a key pair but
    is not allowed."""
    data = root / "data"
    assert cli.main(["keys", "init", "--data-dir", str(data), "--host", "127.0.0.1"]) == 0
    keys = {name: write_keypair(root / name, "client") for name in ("alice", "bob", "eve")}
    for name in ("alice", "bob"):
        # "--": a Z85 key may start with "-" (one in 85), which argparse takes for an option
        assert cli.main(["keys", "allow", "--data-dir", str(data), "--", keys[name][0]]) == 0
    server = ServerProcess(data, "--curve", *extra)
    server_key = read_keypair(data / "keys", "server")[0]
    server.start(wait=False)
    server.wait_ready(server_key=server_key, client_keypair=keys["alice"])
    return server, server_key, keys


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """``curve_server`` shared by a module's tests."""
    server, server_key, keys = curve_server(tmp_path_factory.mktemp("secure"))
    yield server, server_key, keys
    server.kill()


@pytest.fixture
def connect():
    """connect(server, **kwargs) → a Client closed on teardown (short timeouts for tests)."""
    clients: list[Client] = []

    def make(server: ServerProcess, **kwargs) -> Client:
        kwargs = {"timeout": 2.0, "retry_for": 30.0, **kwargs}
        client = Client(server.address, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
