"""The command-line client (submit, status, fetch, cancel, resume, delete) against a server in
a child process."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
from helpers.servers import ServerProcess, fit_spec, free_port, target_images

from diffrec import cli
from diffrec.protocol import Client, ServerUnavailable, pairing_string, write_keypair
from diffrec.protocol.keys import generate_keypair


def test_submit_wait_status_fetch(server, tmp_path, capsys, caplog):
    folder = tmp_path / "job"
    folder.mkdir()
    images = target_images(seed=11)
    np.save(folder / "images.npy", images)
    (folder / "job.json").write_text(json.dumps({"spec": fit_spec(iterations=300),
                                                 "inputs": {"images": "images.npy"}}))
    where = ["--server", server.address, "--timeout", "2"]
    assert cli.main(["submit", str(folder), "--job", "from-cli", "--wait", *where]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job from-cli: queued") and "done: manifest.json, metrics.json" in out
    assert cli.main(["status", "from-cli", *where]) == 0
    assert capsys.readouterr().out.split()[:2] == ["from-cli", "done"]
    assert cli.main(["fetch", "from-cli", "--out", str(tmp_path / "out"), *where]) == 0
    fetched = np.load(tmp_path / "out" / "texture.npy")
    np.testing.assert_allclose(fetched, images.mean(0), atol=2e-3)
    capsys.readouterr()
    assert cli.main(["fetch", "from-cli", "--only", "obj", "--out", str(tmp_path / "obj"),
                     *where]) == 0  # a role this result has no files of: said, not silent
    fetched = capsys.readouterr()
    assert fetched.out.split() == [str(tmp_path / "obj" / "manifest.json")]
    assert "the result has no obj files, so none came" in caplog.text
    assert cli.main(["submit", str(folder / "job.json"), "--job", "from-cli", *where]) == 0
    assert "(already submitted: " in capsys.readouterr().out


def test_client_errors_are_sentences(server, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # fetch's default folder is the job id, in the current one
    where = ["--server", server.address, "--timeout", "2"]
    assert cli.main(["fetch", "no-such-job", *where]) == 2
    assert "no job 'no-such-job'" in capsys.readouterr().err
    assert not (tmp_path / "no-such-job").exists(), "a failed fetch leaves no folder behind"
    (tmp_path / "job.json").write_text(json.dumps({"spec": {"task": "fit_texture"},
                                                   "inputs": {"images": "missing.npy"}}))
    assert cli.main(["submit", str(tmp_path), *where]) == 2
    assert "cannot load missing.npy" in capsys.readouterr().err


def test_a_pairing_string_without_its_key_is_said_before_any_key_pair_is_read(tmp_path,
                                                                               capsys):
    """``diffrec://HOST:PORT`` without ``?key=``, on a machine with no client key pair: the
    string's mistake is said, with the tcp:// form for a server without keys (it asked for a
    key pair that would not have helped)."""
    code = cli.main(["status", "--server", "diffrec://127.0.0.1:5557", "--timeout", "1",
                     "--data-dir", str(tmp_path / "data")])
    error = capsys.readouterr().err
    assert code == 2, error
    assert "diffrec://HOST:PORT?key=HEX" in error and "tcp://HOST:PORT" in error, error
    assert "key pair" not in error, error


@pytest.mark.parametrize("server, hint", [
    ("127.0.0.1:5557", "write tcp://127.0.0.1:5557"), ("gpubox:5557", "write tcp://gpubox:5557"),
    ("tcp://vm", "give tcp://HOST:PORT"), ("http://gpubox:5557", "give tcp://HOST:PORT")])
def test_a_server_address_of_another_form_is_refused_first(server, hint, tmp_path, capsys):
    """status, fetch and submit say the address's form in a sentence; submit before it loads
    its inputs (here a missing folder, whose error would come first otherwise)."""
    for argv in (["status"], ["fetch", "j", "--out", str(tmp_path / "j")],
                 ["submit", str(tmp_path / "missing")]):
        assert cli.main([*argv, "--server", server, "--timeout", "1"]) == 2
        error = capsys.readouterr().err
        assert f"--server {server} is not a server address: {hint}, or the pairing string" \
            in error, error
    assert not (tmp_path / "j").exists()


def test_a_server_not_reached_is_said_as_its_case(secured, tmp_path, capsys):
    """No host, nothing listening (both at once, not after three timeouts), a key the server
    does not allow, a stale pairing string and a plain address for a server with keys: each
    its own sentence."""
    server, server_key, keys = secured

    def error(address: str, key_name: str = "alice", timeout: str = "1") -> str:
        data = tmp_path / key_name
        if not (data / "keys").exists():
            shutil.copytree(server.data_dir.parent / key_name, data / "keys")
        code = cli.main(["status", "--server", address, "--timeout", timeout,
                         "--data-dir", str(data)])
        said = capsys.readouterr().err
        assert code == 2, said
        return said

    started = time.monotonic()
    closed = f"tcp://127.0.0.1:{free_port()}"
    assert f"no diffrec server at {closed}: nothing listens on port" in error(closed,
                                                                            timeout="20")
    assert "no-such-host.invalid is not known here" in error("tcp://no-such-host.invalid:5557",
                                                             timeout="20")
    assert time.monotonic() - started < 10
    pairing = pairing_string("127.0.0.1", server.port, server_key)
    refused = error(pairing, "eve")
    assert "does not answer this machine: ask its owner to allow" in refused, refused
    assert keys["eve"][0] in refused
    stale = pairing_string("127.0.0.1", server.port, generate_keypair()[0])
    assert "check that --server is the server's current pairing string" in error(stale)
    assert "something listens at tcp://127.0.0.1:" in error(server.address)
    assert cli.main(["status", "--server", pairing, "--timeout", "2",
                     "--data-dir", str(tmp_path / "alice")]) == 0


def test_a_server_on_an_ipv6_address_is_reached(tmp_path, capsys):
    server = ServerProcess(tmp_path / "data")
    server.address = f"tcp://[::1]:{server.port}"
    try:
        server.start(wait=False)
        with Client(server.address, timeout=1.0, retry_for=60.0) as client:
            assert client.ping()["protocol"]
        assert cli.main(["status", "--server", server.address, "--timeout", "2"]) == 0
        assert capsys.readouterr().out.startswith(f"no jobs of yours on {server.address}")
    finally:
        server.kill()


def test_client_key_file_problems_are_sentences(tmp_path, capsys):
    keys = tmp_path / "keys"
    write_keypair(keys, "client")
    where = ["--server", pairing_string("127.0.0.1", free_port(), generate_keypair()[0]),
             "--timeout", "1", "--data-dir", str(tmp_path)]
    (keys / "client.key_secret").chmod(0o644)
    assert cli.main(["status", *where]) == 2
    assert capsys.readouterr().err == (f"diffrec: error: {keys / 'client.key_secret'} is "
                                       "readable by others; run chmod 600 on it\n")
    (keys / "client.key_secret").chmod(0o600)
    (keys / "client.key").write_text("garbage\n")
    assert cli.main(["status", *where]) == 2
    error = capsys.readouterr().err
    assert f"{keys / 'client.key'} or {keys / 'client.key_secret'} holds no CURVE key" in error
    assert "`diffrec keys client --force`" in error


@pytest.fixture(scope="module")
def done_job(server):
    """The id of a finished job on ``server``."""
    with Client(server.address, timeout=2.0, retry_for=30.0) as client:
        client.submit("done-job", fit_spec(iterations=5), {"images": target_images()})
        assert client.wait("done-job")["kind"] == "done"
    return "done-job"


def test_fetch_where_it_cannot_write_is_a_sentence_and_leaves_nothing(server, done_job,
                                                                      tmp_path, capsys):
    where = ["--server", server.address, "--timeout", "2"]
    (tmp_path / "afile").write_text("mine")
    assert cli.main(["fetch", done_job, "--out", str(tmp_path / "afile"), *where]) == 2
    assert f"--out {tmp_path / 'afile'} is a file: give a folder" in capsys.readouterr().err
    assert cli.main(["fetch", done_job, "--out", "/proc/nope", *where]) == 2
    assert "cannot write the result files into /proc/nope: " in capsys.readouterr().err
    assert cli.main(["fetch", done_job, "--only", "nosuch.file", "--out",
                     str(tmp_path / "d"), *where]) == 2
    assert "the result has no file or role nosuch.file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_cancel_resume_and_delete_answer_one_line_each(server, capsys):
    where = ["--server", server.address, "--timeout", "2"]
    with Client(server.address, timeout=2.0, retry_for=30.0) as client:
        client.submit("long", fit_spec(iterations=100_000), {"images": target_images()})
        assert cli.main(["cancel", "long", "nosuch", *where]) == 2
        said = capsys.readouterr()
        assert said.out.split()[:2] in (["long", "cancelled"], ["long", "cancelling"]), said
        assert said.err == "diffrec: error: no job 'nosuch' (for this client key)\n"
        assert client.wait("long")["kind"] == "cancelled"
    assert cli.main(["resume", "long", *where]) == 0
    assert capsys.readouterr().out.split()[:2] in (["long", "queued"], ["long", "running"])
    assert cli.main(["delete", "long", *where]) == 0
    assert capsys.readouterr().out == "long  deleted\n"
    deadline = time.monotonic() + 20  # a running job goes once it has stopped
    while cli.main(["status", "long", *where]) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "no job 'long'" in capsys.readouterr().err


def test_resubmitting_a_job_id_says_the_first_settings_stand_and_uploads_nothing(
        server, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "job"
    folder.mkdir()
    np.save(folder / "images.npy", target_images(seed=3))
    where = ["--job", "twice", "--server", server.address, "--timeout", "2"]
    for iterations in (5, 50):
        (folder / "job.json").write_text(json.dumps({"spec": fit_spec(iterations=iterations),
                                                     "inputs": {"images": "images.npy"}}))
        assert cli.main(["submit", str(folder), *where]) == 0
        monkeypatch.setattr(Client, "submit", lambda *a, **k: pytest.fail("uploaded"))
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        "(already submitted: the first submission's inputs and settings stand; give another "
        "--job to submit new ones)")


def test_status_lines_up_its_columns_and_says_refusals_without_their_code(server, capsys):
    where = ["--server", server.address, "--timeout", "2"]
    with Client(server.address, timeout=2.0, retry_for=30.0) as client:
        for job in ("a", "a-much-longer-id"):
            client.submit(job, fit_spec(iterations=5), {"images": target_images()})
            client.wait(job)
    assert cli.main(["status", *where]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.split()[0] in ("a", "a-much-longer-id")]
    assert len(lines) == 2 and lines[0].index("done") == lines[1].index("done"), lines
    assert cli.main(["status", "nosuch", *where]) == 2
    assert capsys.readouterr().err == "diffrec: error: no job 'nosuch' (for this client key)\n"


def test_the_data_dir_help_names_every_default(capsys):
    """--data-dir's help says what ``default_data_dir`` does: $XDG_DATA_HOME included."""
    for command in ("status", "fetch", "submit", "cancel", "serve", "keys"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"] if command != "keys" else ["keys", "show", "--help"])
        assert "$DIFFREC_DATA, else $XDG_DATA_HOME/diffrec, else ~/.local/share/diffrec" in \
            " ".join(capsys.readouterr().out.split()), command


def test_the_allow_command_said_for_a_key_pastes_into_a_shell(tmp_path, capsys):
    """A Z85 key can hold ( ) < > & $ * ?: the command a client is told to hand the server's
    owner, and the one `keys client` prints, quote it, so a shell reads it as one word."""
    import shlex

    from diffrec.commands._connection import silent

    key = "/V#cr7STW7{n=@XM>z]M^?UZc/7JEfAi/(dXBk?]"
    said = silent("tcp://gpu:5557", (key, "secret"))
    command = said[said.index("`") + 1:said.rindex("`")]
    assert shlex.split(command) == ["diffrec", "keys", "allow", "--", key]
    assert cli.main(["keys", "client", "--data-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    public = printed.split("owner): ")[1].split()[0]
    allow = printed.splitlines()[-1].split("with: ")[1]
    assert shlex.split(allow) == ["diffrec", "keys", "allow", "--", public]


def test_keys_show_on_a_client_machine_asks_for_no_server_key(tmp_path, capsys):
    """A client machine's folder has a client key pair alone: ``keys show`` says what a server
    key pair is for (it told every client to run ``keys init``)."""
    assert cli.main(["keys", "client", "--data-dir", str(tmp_path)]) == 0
    public = capsys.readouterr().out.split("owner): ")[1].split()[0]
    assert cli.main(["keys", "show", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "server public key: none (this machine serves on loopback only; `diffrec keys init` "
        "makes one to serve beyond it)", f"client public key: {public}"]


def test_serve_cluster_without_ray_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    """The guide installs from a checkout (pip install -e 'backend[cluster]'); the sentence
    named only the package form, which a checkout's user cannot install."""
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert cli.main(["serve", "--cluster", "auto", "--data-dir", str(tmp_path / "data"),
                     "--bind", f"tcp://127.0.0.1:{free_port()}"]) == 2
    said = capsys.readouterr().err
    assert "--cluster needs Ray: pip install -e 'backend[cluster]'" in said, said


@pytest.mark.parametrize("lost", [ServerUnavailable("no answer from tcp://gpu:5557"),
                                  KeyboardInterrupt()], ids=["server silent", "Ctrl-C"])
def test_a_wait_given_up_says_the_job_goes_on(server, tmp_path, capsys, monkeypatch, lost):
    """`submit --wait` that stops following (the server silent past the timeout, or Ctrl-C)
    said only 'no answer' or 'interrupted', though the job runs on: it says how to find it."""
    folder = tmp_path / "job"
    folder.mkdir()
    np.save(folder / "images.npy", target_images(seed=3))
    (folder / "job.json").write_text(json.dumps({"spec": fit_spec(iterations=5),
                                                 "inputs": {"images": "images.npy"}}))

    def wait(*_, **__):
        raise lost

    monkeypatch.setattr(Client, "wait", wait)
    code = cli.main(["submit", str(folder), "--job", "followed", "--wait", "--server",
                     server.address, "--timeout", "2"])
    err = capsys.readouterr().err
    assert code == (2 if isinstance(lost, ServerUnavailable) else 130)
    assert "job followed" in err and "diffrec status followed" in err, err
    assert "(with the same --server)" in err, err
