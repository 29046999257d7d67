"""Servers in child processes on 127.0.0.1 with random ports, and clients for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_helpers import ServerProcess

from diffrec.protocol import Client


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
