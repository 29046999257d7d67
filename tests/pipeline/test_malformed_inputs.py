"""Issue 26.4 and 26.5: malformed inputs and paths out of a dataset's folder, as ``diffrec
optimize`` / ``submit`` read them. Each file of a small valid set is truncated, replaced by
garbage or given a semantic fault; reading it must succeed or raise one ``UserError`` whose
message is one line naming the file, never another exception (IndexError, LinAlgError,
cv2.error, RuntimeError, UnicodeDecodeError, JSONDecodeError were met before)."""

import json
import re
import shutil

import numpy as np
import pytest
from view_helpers import quaternion

from diffrec import cli
from diffrec.camera import look_at
from diffrec.commands.submit import load_job
from diffrec.errors import UserError
from diffrec.io import read_gltf, read_image, read_obj, write_glb, write_image, write_obj
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.loading import load_dataset
from diffrec.protocol.captures import write_llff, write_nerf

SIZE = 8
VIEWS = 3


def poses() -> np.ndarray:
    eyes = [[3.0, 0.0, 0.5], [0.0, 3.0, -0.5], [-3.0, 0.0, 0.5]]
    return look_at(eyes, (0.0, 0.0, 0.0)).numpy()


def write_images(folder, suffix=".png") -> list:
    """Noise with alpha (noise without would have masks made for it, which noise has none of)."""
    images = np.random.default_rng(3).random((VIEWS, SIZE, SIZE, 4))
    paths = [folder / f"view_{i}{suffix}" for i in range(VIEWS)]
    for path, image in zip(paths, images, strict=True):
        write_image(path, image.astype(np.float32))
    return paths


def nerf_folder(root):
    folder = root / "nerf"
    paths = write_images(folder / "train")
    write_nerf(folder / "transforms_train.json", paths, poses(), SIZE, SIZE, (10, 10, 4, 4))
    return folder


def llff_folder(root):
    folder = root / "llff"
    write_images(folder / "images")
    write_llff(folder, poses(), SIZE, SIZE, 10.0, np.full(VIEWS, 2.0), np.full(VIEWS, 4.0))
    return folder


def colmap_folder(root, camera_id=1, names=None):
    """A text COLMAP model of one PINHOLE camera and the three views."""
    folder = root / "colmap"
    write_images(folder / "images")
    model = folder / "sparse" / "0"
    model.mkdir(parents=True)
    (model / "cameras.txt").write_text(f"1 PINHOLE {SIZE} {SIZE} 10 10 4 4\n")
    rows = []
    for index, matrix in enumerate(poses()):
        rotation = (matrix[:3, :3] @ np.diag([1.0, -1.0, -1.0])).T
        translation = -rotation @ matrix[:3, 3]
        name = (names or {}).get(index, f"view_{index}.png")
        numbers = " ".join(repr(float(v)) for v in (*quaternion(rotation), *translation))
        rows += [f"{index + 1} {numbers} {camera_id} {name}", ""]
    (model / "images.txt").write_text("\n".join(rows) + "\n")
    (model / "points3D.txt").write_text("")
    return folder


def assert_sentence_or_success(read, path, named=None):
    """``read()`` succeeds or raises a one-line UserError naming ``named`` (default: the
    file's name)."""
    try:
        read()
    except UserError as error:
        message = str(error)
        assert "\n" not in message, message
        assert (named or path.name) in message, message


def mangled(data: bytes) -> dict[str, bytes]:
    garbage = np.random.default_rng(len(data)).bytes(max(len(data), 64))
    return {"empty": b"", "one byte": data[:1], "half": data[:len(data) // 2],
            "all but one": data[:-1], "garbage": garbage, "magic then garbage": data[:8] + garbage}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("valid")
    image = np.random.default_rng(1).random((SIZE, SIZE, 4)).astype(np.float32)
    for suffix in (".png", ".exr", ".jpg"):
        write_image(root / f"image{suffix}", image[..., :3] if suffix == ".jpg" else image)
    mesh = uv_sphere(6, 4)
    write_glb(root / "mesh.glb", mesh)
    write_obj(root / "mesh.obj", mesh)
    return root


@pytest.mark.parametrize("name", ["image.png", "image.exr", "image.jpg", "mesh.glb",
                                  "mesh.obj"])
def test_truncated_or_garbage_files_get_a_sentence_naming_them(files, tmp_path, name):
    reader = {".glb": read_gltf, ".obj": read_obj}.get(files.joinpath(name).suffix, read_image)
    for case, data in mangled(files.joinpath(name).read_bytes()).items():
        path = tmp_path / case.replace(" ", "_") / name
        path.parent.mkdir()
        path.write_bytes(data)
        assert_sentence_or_success(lambda path=path: reader(path), path)


@pytest.mark.parametrize("layout", ["nerf", "llff", "colmap"])
def test_every_dataset_file_mangled_gets_a_sentence_naming_it(tmp_path, layout):
    if layout == "colmap":
        pytest.importorskip("pycolmap")
    valid = {"nerf": nerf_folder, "llff": llff_folder, "colmap": colmap_folder}[layout](
        tmp_path / "valid")
    load_dataset(valid)  # the valid folder reads
    files = sorted(p for p in valid.rglob("*") if p.is_file())
    images = [p for p in files if p.suffix == ".png"]
    for number, file in enumerate([p for p in files if p not in images] + images[:1]):
        for case, data in mangled(file.read_bytes()).items():
            folder = tmp_path / f"{number}-{case.replace(' ', '_')}"
            shutil.copytree(valid, folder)
            broken = folder / file.relative_to(valid)
            broken.write_bytes(data)
            assert_sentence_or_success(lambda folder=folder: load_dataset(folder), broken,
                                       named=broken.name)


def dataset_error(folder) -> str:
    with pytest.raises(UserError) as caught:
        load_dataset(folder)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_semantic_faults_are_sentences(tmp_path):
    pytest.importorskip("pycolmap")
    colmap = colmap_folder(tmp_path / "camera", camera_id=99)
    message = dataset_error(colmap)
    assert "99" in message and "cameras.txt, images.txt" in message

    llff = llff_folder(tmp_path / "rotation")
    table = np.load(llff / "poses_bounds.npy")
    table[1, :15].reshape(3, 5)[:, :3] = 0.0
    np.save(llff / "poses_bounds.npy", table)
    assert "row 1's pose has no rotation" in dataset_error(llff)

    nerf = nerf_folder(tmp_path / "matrix")
    transforms = json.loads((nerf / "transforms_train.json").read_text())
    transforms["frames"][0]["transform_matrix"] = np.zeros((4, 4)).tolist()
    (nerf / "transforms_train.json").write_text(json.dumps(transforms))
    assert "transforms_train.json" in dataset_error(nerf)


@pytest.fixture
def secret(tmp_path):
    """A file outside every dataset folder that a dataset must not reach."""
    path = tmp_path / "secret" / "photo.png"
    write_image(path, np.ones((SIZE, SIZE, 4), np.float32))
    return path


def test_nerf_paths_out_of_the_folder_are_refused_naming_the_frame(tmp_path, secret):
    for number, file_path in enumerate(["../secret/photo", str(secret), "link"]):
        folder = nerf_folder(tmp_path / str(number))
        (folder / "link.png").symlink_to(secret)
        transforms = json.loads((folder / "transforms_train.json").read_text())
        transforms["frames"][1]["file_path"] = file_path
        (folder / "transforms_train.json").write_text(json.dumps(transforms))
        message = dataset_error(folder)
        said = "is an absolute path" if file_path == str(secret) else "leads outside"
        assert f"frame 1 ({file_path})" in message and said in message, message


def test_colmap_and_llff_images_out_of_the_folder_are_refused(tmp_path, secret):
    pytest.importorskip("pycolmap")
    colmap = colmap_folder(tmp_path, names={2: "../../secret/photo.png"})
    assert "'../../secret/photo.png' leads outside" in dataset_error(colmap)
    llff = llff_folder(tmp_path)
    (llff / "images" / "view_2.png").unlink()
    (llff / "images" / "view_2.png").symlink_to(secret)
    assert "leads outside" in dataset_error(llff)


def test_job_file_inputs_out_of_its_folder_are_refused(tmp_path, capsys):
    np.save(tmp_path / "secret.npy", np.zeros(3))
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.json").write_text(json.dumps({"spec": {"task": "optimize"},
                                              "inputs": {"images": "../secret.npy"}}))
    with pytest.raises(UserError, match=re.escape("'../secret.npy' leads outside")):
        load_job(job)
    assert cli.main(["submit", str(job), "--server", "tcp://127.0.0.1:9"]) == 2
    assert "leads outside" in capsys.readouterr().err


def test_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    folder = nerf_folder(tmp_path)
    (folder / "train" / "view_1.png").write_bytes(b"")
    code = cli.main(["optimize", "--mode", "reconstruct", "--dataset", str(folder),
                     "--out-dir", str(tmp_path / "out"), "--iterations", "1"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "view_1.png" in error and "\n" not in error, error

