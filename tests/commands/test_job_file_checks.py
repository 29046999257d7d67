"""A job file nested 100,000 deep, or naming an ``.npy`` whose header claims a huge shape, is
one sentence from ``diffrec submit``, before any connection (issue 55.7)."""

import json

import numpy as np
import pytest

from diffrec import cli
from diffrec.commands.submit import load_job
from diffrec.errors import UserError


def submit_error(job, capsys) -> str:
    code = cli.main(["submit", str(job), "--server", "tcp://127.0.0.1:9"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error and "Traceback" not in error, error
    return error


@pytest.mark.parametrize("as_folder", [True, False])
def test_a_deeply_nested_job_file_is_a_sentence(tmp_path, capsys, as_folder):
    path = tmp_path / "job.json"
    path.write_text('{"spec": {"task": "optimize", "x": ' + "[" * 100_000 + "]" * 100_000
                    + "}}")
    with pytest.raises(UserError, match="nests objects or lists more than"):
        load_job(path)
    error = submit_error(tmp_path if as_folder else path, capsys)
    assert str(path) in error and "nests objects or lists" in error


def test_a_job_input_claiming_a_huge_shape_is_refused_before_loading(tmp_path, capsys):
    with open(tmp_path / "images.npy", "wb") as stream:
        np.lib.format.write_array_header_1_0(
            stream, {"descr": "<f4", "fortran_order": False, "shape": (100_000, 100_000, 4)})
        stream.write(bytes(64))
    (tmp_path / "job.json").write_text(json.dumps({"spec": {"task": "optimize"},
                                                   "inputs": {"images": "images.npy"}}))
    error = submit_error(tmp_path, capsys)
    assert "images.npy (input 'images' of" in error and "[100000, 100000, 4]" in error
