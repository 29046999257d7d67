"""Files a glTF or an OBJ names stay inside its folder, and images are refused from their
header when decoding them would take more memory than the machine has (issue 55.6, 55.7)."""

import json
import re
import struct
import zlib

import cv2
import numpy as np
import pygltflib as gl
import pytest
import torch

from diffrec.errors import UserError
from diffrec.io import (
    Material,
    image_size,
    read_gltf,
    read_image,
    read_obj,
    write_glb,
    write_image,
    write_obj,
)
from diffrec.mesh.primitives import uv_sphere

SECRET = np.arange(12, dtype=np.float32).reshape(4, 3)  # what a stray path would upload


def split_gltf(folder, buffer_uri: str, image_uri: str | None = None):
    """``folder/mesh.gltf``: a textured sphere written as a GLB, its binary buffer moved to
    ``buffer_uri`` (relative to the folder, or absolute) and, given ``image_uri``, its base
    colour image also read from that file."""
    folder.mkdir(parents=True, exist_ok=True)
    glb = folder / "mesh.glb"
    kd = np.full((4, 4, 3), 0.5, np.float32)
    write_glb(glb, uv_sphere(6, 4), Material(kd=torch.from_numpy(kd)))
    gltf = gl.GLTF2().load(str(glb))
    target = folder / buffer_uri
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(gltf.binary_blob())
    gltf._glb_data = None
    gltf.buffers[0].uri = buffer_uri
    if image_uri is not None:
        write_image(folder / image_uri, np.ones((4, 4, 3), np.float32))
        gltf.images[0].bufferView, gltf.images[0].uri = None, image_uri
    glb.unlink()
    (folder / "mesh.gltf").write_text(gltf.gltf_to_json())
    return folder / "mesh.gltf"


def test_a_gltf_reads_its_own_buffer_beside_it(tmp_path):
    reference = tmp_path / "reference.glb"
    write_glb(reference, uv_sphere(6, 4))
    asset = read_gltf(split_gltf(tmp_path / "model", "data/mesh.bin"))
    assert np.allclose(asset.mesh.positions.numpy(), read_gltf(reference).mesh.positions.numpy())


@pytest.mark.parametrize("where", ["../secret.bin", "absolute", "link.bin"])
def test_a_gltf_buffer_outside_its_folder_is_refused(tmp_path, where):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET.tobytes())
    model = tmp_path / "model"
    uri = str(secret) if where == "absolute" else where
    path = split_gltf(model, "mesh.bin")
    document = json.loads(path.read_text())
    document["buffers"][0]["uri"] = uri
    path.write_text(json.dumps(document))
    (model / "link.bin").symlink_to(secret)
    said = "is an absolute path" if where == "absolute" else "leads outside"
    with pytest.raises(UserError, match=said) as refused:
        read_gltf(path)
    assert f"{path}, buffer 0" in str(refused.value)


def test_a_gltf_image_outside_its_folder_is_refused(tmp_path):
    path = split_gltf(tmp_path / "model", "mesh.bin", image_uri="kd.png")
    assert read_gltf(path).materials[0].kd.shape[:2] == (4, 4)  # its own image is read
    write_image(tmp_path / "secret.png", np.zeros((4, 4, 3), np.float32))
    document = json.loads(path.read_text())
    document["images"][0]["uri"] = "../secret.png"
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match=re.escape("'../secret.png' leads outside")):
        read_gltf(path)


def test_a_gltf_nested_100000_deep_is_a_sentence(tmp_path):
    path = tmp_path / "deep.gltf"
    path.write_text('{"asset": {"version": "2.0"}, "extras": ' + "[" * 100_000 + "]" * 100_000
                    + "}")
    with pytest.raises(UserError, match="nests objects or lists more than 64 deep") as refused:
        read_gltf(path)
    assert str(path) in str(refused.value)


def test_obj_material_libraries_and_textures_stay_in_its_folder(tmp_path):
    write_image(tmp_path / "secret.png", np.zeros((4, 4, 3), np.float32))
    (tmp_path / "secret.mtl").write_text("newmtl stolen\nKd 1 0 0\n")
    model = tmp_path / "model"
    write_obj(model / "mesh.obj", uv_sphere(6, 4))
    obj = (model / "mesh.obj").read_text()
    (model / "outside.obj").write_text(obj.replace("mtllib mesh.mtl", "mtllib ../secret.mtl"))
    with pytest.raises(UserError, match=re.escape("'../secret.mtl' leads outside")):
        read_obj(model / "outside.obj")
    (model / "mesh.mtl").write_text("newmtl own\nKd 0 1 0\nmap_Kd ../secret.png\n")
    with pytest.raises(UserError, match=re.escape("mesh.mtl:3: '../secret.png' leads outside")):
        read_obj(model / "mesh.obj")


def png_header(width: int, height: int) -> bytes:
    """The signature and IHDR chunk of an 8-bit grey PNG of that size, and no pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk +
            struct.pack(">I", zlib.crc32(chunk)))


def test_a_30000_square_png_is_refused_from_its_header(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(png_header(30_000, 30_000))
    with pytest.raises(UserError) as refused:
        read_image(path)
    message = str(refused.value)
    assert str(path) in message and "30000 x 30000" in message
    assert f"{image_size.max_pixels():,}" in message and "memory" in message


def test_the_pixel_limit_is_sized_from_memory(monkeypatch, tmp_path):
    gib = 1 << 30
    sizes = {"SC_PHYS_PAGES": gib // 4096, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(image_size.os, "sysconf", sizes.__getitem__)
    assert image_size.max_pixels() == gib // image_size.BYTES_PER_PIXEL  # 16.8 million
    image = np.random.default_rng(0).random((48, 64, 3)).astype(np.float32)
    for suffix in (".png", ".exr", ".hdr", ".jpg"):
        write_image(tmp_path / f"small{suffix}", image)
        assert read_image(tmp_path / f"small{suffix}").shape == (48, 64, 3)
    monkeypatch.setattr(image_size, "PIXEL_CAP", 48 * 64 - 1)
    for suffix in (".png", ".exr", ".hdr", ".jpg"):
        with pytest.raises(UserError, match="64 x 48 pixels"):
            read_image(tmp_path / f"small{suffix}")


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".hdr"])
def test_header_sizes_agree_with_the_decoder(suffix):
    image = np.random.default_rng(1).random((37, 53, 3)).astype(np.float32)
    encoded = cv2.imencode(suffix, image if suffix == ".hdr" else (image * 255).astype(np.uint8)
                           )[1].tobytes()
    decoded = cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_UNCHANGED)
    assert image_size.encoded_size(encoded) == (decoded.shape[1], decoded.shape[0])
    assert image_size.encoded_size(encoded[:10]) is None  # cut short: the decoder says why


def test_opencv_is_silenced_as_either_major_version_offers_it():
    """OpenCV 5 (what pip installs beside numpy 2) has ``setLogLevel`` only in
    ``cv2.utils.logging``: importing diffrec.io there failed with an AttributeError."""
    from types import SimpleNamespace

    from diffrec.io.images import silence_opencv

    levels = []
    opencv4 = SimpleNamespace(setLogLevel=levels.append)
    opencv5 = SimpleNamespace(utils=SimpleNamespace(logging=SimpleNamespace(
        setLogLevel=levels.append)))
    silence_opencv(opencv4)
    silence_opencv(opencv5)
    assert levels == [0, 0]
