"""The command-line client (submit, status, fetch) against a server in a child process."""

from __future__ import annotations

import json

import numpy as np
from helpers.servers import fit_spec, target_images

from diffrec import cli


def test_submit_wait_status_fetch(server, tmp_path, capsys):
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
    assert cli.main(["submit", str(folder / "job.json"), "--job", "from-cli", *where]) == 0
    assert "(already submitted)" in capsys.readouterr().out


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
