"""Security over real sockets: CURVE with a pinned server key and an allow-list; the key
files' faults and the pairing host as sentences; the data directory private to its user."""

from __future__ import annotations

import logging
import stat
import subprocess
import sys

import numpy as np
import pytest
from helpers.servers import fit_spec, free_port, open_client, target_images

from diffrec import cli
from diffrec.errors import UserError
from diffrec.protocol import (
    PROTOCOL_VERSION,
    Client,
    ServerError,
    ServerUnavailable,
)
from diffrec.protocol.keys import generate_keypair
from diffrec.protocol.limits import MIB
from diffrec.server.app import Server

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


@pytest.fixture
def keyed(tmp_path):
    """A data directory with a server key pair made by `diffrec keys init`."""
    data = tmp_path / "data"
    assert cli.main(["keys", "init", "--data-dir", str(data)]) == 0
    return data


@pytest.mark.parametrize("name", ["server.key", "server.key_secret"])
def test_a_damaged_server_key_is_a_sentence_saying_how_to_make_another(keyed, name):
    (keyed / "keys" / name).write_bytes(b"\xffnot a key\n")
    with pytest.raises(UserError) as info:
        Server(f"tcp://127.0.0.1:{free_port()}", keyed, curve=True)
    said = str(info.value)
    assert f"{keyed / 'keys' / name} is damaged" in said, said
    assert f"diffrec keys init --force --data-dir {keyed}" in said and "pair again" in said


def test_the_no_client_key_warning_names_the_data_directory(keyed, caplog):
    caplog.set_level(logging.WARNING, "diffrec.server.security")
    Server(f"tcp://127.0.0.1:{free_port()}", keyed, curve=True).close()
    assert f"run `diffrec keys allow --data-dir {keyed} -- KEY`" in caplog.text, caplog.text


def test_the_server_pairs_with_the_host_chosen_at_keys_init(tmp_path):
    data = str(tmp_path / "data")
    assert cli.main(["keys", "init", "--data-dir", data, "--host", "gpubox"]) == 0
    server = Server(f"tcp://127.0.0.1:{free_port()}", data, curve=True)
    try:
        assert server.pairing.startswith("diffrec://gpubox:"), server.pairing
    finally:
        server.close()
    assert cli.main(["keys", "init", "--data-dir", data, "--force"]) == 0  # back to the default
    server = Server(f"tcp://127.0.0.1:{free_port()}", data, curve=True)
    try:
        assert server.pairing.startswith("diffrec://127.0.0.1:"), server.pairing
    finally:
        server.close()


def test_what_the_server_writes_is_its_users_alone(start_server, connect, tmp_path):
    """Uploads over one hash block, results, records: files 0600, folders 0700 (before, big
    blobs and results were 0644 in 0755 folders, readable by other users of the machine); a
    data directory made before is made private too."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data").chmod(0o755)
    server = start_server(data_dir=tmp_path / "data")
    client = connect(server, timeout=10.0)
    client.upload(np.random.default_rng(6).bytes(5 * MIB))
    client.submit("mine", fit_spec(iterations=10, checkpoint_every=5), {"images": target_images()})
    assert client.wait("mine")["kind"] == "done"
    shared = {str(path): oct(stat.S_IMODE(path.stat().st_mode))
              for path in [server.data_dir, *server.data_dir.rglob("*")]
              if stat.S_IMODE(path.stat().st_mode) & 0o077}
    assert not shared
    assert list((server.data_dir / "jobs" / "mine" / "results").iterdir())
