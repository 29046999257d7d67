"""Security over real sockets: CURVE with a pinned server key and an allow-list."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.servers import fit_spec, free_port, open_client, target_images

from diffrec import cli
from diffrec.protocol import (
    PROTOCOL_VERSION,
    Client,
    ServerError,
    ServerUnavailable,
)
from diffrec.protocol.keys import generate_keypair

SILENCE = {"timeout": 0.5, "retry_for": 1.0}


def test_the_pairing_string_reaches_the_server(secured):
    server, _, keys = secured
    log = server.log.read_text()
    pairing = next(line.split(": ", 1)[1] for line in log.splitlines() if "pairing" in line)
    with Client.from_pairing(pairing, keys["alice"], timeout=2.0, retry_for=10.0) as client:
        assert client.ping()["protocol"] == PROTOCOL_VERSION


def test_unknown_key_wrong_server_key_and_plain_text_get_nothing(secured):
    server, server_key, keys = secured
    strangers = [
        open_client(server, server_key, keys["eve"], **SILENCE),  # not on the allow-list
        open_client(server, generate_keypair()[0], keys["alice"], **SILENCE),  # wrong pin
        Client(server.address, **SILENCE),  # plain text
    ]
    for client in strangers:
        with client, pytest.raises(ServerUnavailable):
            client.ping()
    with open_client(server, server_key, keys["alice"]) as alice:
        # the server is there, and answers allowed keys
        assert alice.ping()["protocol"] == PROTOCOL_VERSION


def test_another_key_cannot_see_fetch_or_cancel_your_job(secured):
    server, server_key, keys = secured
    with open_client(server, server_key, keys["alice"]) as alice:
        alice.submit("alices", fit_spec(iterations=20), {"images": target_images()})
        assert alice.wait("alices")["kind"] == "done"
    with open_client(server, server_key, keys["bob"]) as bob:
        assert [job["job"] for job in bob.list_jobs()] == []
        for attempt in (bob.status, bob.attach, bob.cancel, bob.delete,
                        lambda job: bob.fetch(job, "unused"),
                        lambda job: bob.call("read", {"job": job, "file": "metrics.json",
                                                      "offset": 0, "length": 10})):
            with pytest.raises(ServerError) as info:
                attempt("alices")
            assert info.value.code == "not_found"
        with pytest.raises(ServerError) as info:
            bob.submit("alices", fit_spec(), {"images": target_images()})
        assert info.value.code == "conflict"
    with open_client(server, server_key, keys["alice"]) as alice:
        assert alice.status("alices")["state"] == "done"


def test_a_revoked_key_gets_nothing(secured):
    server, server_key, keys = secured
    data = str(server.data_dir)
    assert cli.main(["keys", "revoke", "--data-dir", data, "--", keys["bob"][0]]) == 0
    try:
        with open_client(server, server_key, keys["bob"], **SILENCE) as bob:
            with pytest.raises(ServerUnavailable):
                bob.ping()
    finally:
        assert cli.main(["keys", "allow", "--data-dir", data, "--", keys["bob"][0]]) == 0


def test_a_public_bind_without_keys_refuses_to_start(tmp_path):
    command = [sys.executable, "-m", "diffrec", "serve", "--bind", f"tcp://0.0.0.0:{free_port()}",
               "--data-dir", str(tmp_path / "data"), "--device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "refusing to listen" in done.stderr and "diffrec keys init" in done.stderr
