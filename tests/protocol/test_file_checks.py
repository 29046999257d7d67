"""What a file claims is checked before it is believed (issue 55.7): JSON nested too deep,
an ``.npy`` header claiming more than the file holds, NUL characters and over-long names in
the files a dataset names; each is one sentence naming the file, through the same readers
``diffrec optimize`` and ``submit`` use."""

import json
import re

import numpy as np
import pytest

from diffrec import cli
from diffrec.protocol.captures import CaptureError, inside, read_capture, write_nerf
from diffrec.protocol.file_checks import (
    MAX_FILE_JSON_DEPTH,
    FileCheckError,
    load_npy,
    parse_json,
)

DEEP = "[" * 100_000 + "]" * 100_000


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def test_json_up_to_the_limit_is_read_and_deeper_is_a_sentence():
    assert parse_json(nested(MAX_FILE_JSON_DEPTH), "f.json") == json.loads(
        nested(MAX_FILE_JSON_DEPTH))
    for text in (nested(MAX_FILE_JSON_DEPTH + 1), DEEP):  # the second, json's RecursionError
        with pytest.raises(FileCheckError, match=r"f\.json nests objects or lists more than "):
            parse_json(text, "f.json")
    with pytest.raises(FileCheckError, match=r"f\.json is not valid JSON"):
        parse_json(b"\xff{", "f.json")


def huge_npy_header(path, shape=(100_000, 100_000, 4)):
    """A .npy whose header claims ``shape`` float32 and which holds 16 bytes of data."""
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    with open(path, "wb") as stream:
        np.lib.format.write_array_header_1_0(stream, header)
        stream.write(bytes(16))


def test_an_npy_header_is_checked_against_the_file_size(tmp_path):
    np.save(tmp_path / "whole.npy", np.arange(6.0).reshape(2, 3))
    assert np.array_equal(load_npy(tmp_path / "whole.npy"), np.arange(6.0).reshape(2, 3))
    huge_npy_header(tmp_path / "huge.npy")
    with pytest.raises(FileCheckError) as refused:
        load_npy(tmp_path / "huge.npy")
    assert "[100000, 100000, 4] (160,000,000,000 bytes)" in str(refused.value)
    assert "holds 16 bytes" in str(refused.value) and "huge.npy" in str(refused.value)
    whole = (tmp_path / "whole.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(whole[:-1])
    with pytest.raises(FileCheckError, match="cut short"):
        load_npy(tmp_path / "cut.npy")
    np.save(tmp_path / "objects.npy", np.array([{}], dtype=object), allow_pickle=True)
    with pytest.raises(FileCheckError, match="Python objects"):
        load_npy(tmp_path / "objects.npy")


def test_nul_and_over_long_names_are_refused_by_the_folder_rule(tmp_path):
    with pytest.raises(CaptureError, match="holds a NUL character"):
        inside(tmp_path, "a\0b.png", "here")
    for name in ("x" * 100_000, "x" * 256, "/".join(["y" * 200] * 30)):
        with pytest.raises(CaptureError, match="longer than a file system takes") as refused:
            inside(tmp_path, name, "here")
        assert len(str(refused.value)) < 400  # the name is quoted clipped, not whole
    assert inside(tmp_path, "x" * 255, "here") == tmp_path / ("x" * 255)


def nerf_folder(root):
    from diffrec.io import write_image

    images = [root / "train" / f"view_{i}.png" for i in range(2)]
    for image in images:
        write_image(image, np.ones((4, 4, 4), np.float32))
    write_nerf(root / "transforms_train.json", images, np.stack([np.eye(4)] * 2), 4, 4,
               (4, 4, 2, 2))
    return root


def optimize_error(folder, capsys) -> str:
    """The one line ``diffrec optimize --mode reconstruct --dataset folder`` fails with (exit
    status 2)."""
    code = cli.main(["optimize", "--mode", "reconstruct", "--dataset", str(folder),
                     "--out-dir", str(folder / "out"), "--iterations", "1"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error and "Traceback" not in error, error
    return error


@pytest.mark.parametrize("case", ["deep", "nul", "long"])
def test_a_broken_transforms_file_is_one_sentence_from_the_command_line(tmp_path, capsys, case):
    folder = nerf_folder(tmp_path)
    transforms = folder / "transforms_train.json"
    if case == "deep":
        transforms.write_text('{"frames": ' + DEEP + "}")
    else:
        document = json.loads(transforms.read_text())
        document["frames"][1]["file_path"] = "./train/a\0b" if case == "nul" else "x" * 100_000
        transforms.write_text(json.dumps(document))
    error = optimize_error(folder, capsys)
    assert str(transforms) in error
    expected = {"deep": "nests objects or lists more than", "nul": "holds a NUL character",
                "long": "longer than a file system takes"}[case]
    assert expected in error and len(error) < 600, error


def test_an_llff_capture_whose_poses_claim_a_huge_shape_is_refused(tmp_path, capsys):
    huge_npy_header(tmp_path / "poses_bounds.npy", (100_000, 100_000, 4))
    (tmp_path / "images").mkdir()
    with pytest.raises(CaptureError, match=re.escape("[100000, 100000, 4]")):
        read_capture(tmp_path)
    assert "poses_bounds.npy" in optimize_error(tmp_path, capsys)
