"""OBJ + MTL: write -> read round trips, the Y-up file space, and parsing of hand-written files."""

import numpy as np
import pytest
import torch

from diffrec.color import linear_to_srgb
from diffrec.errors import UserError
from diffrec.io import Material, read_obj, write_image, write_obj
from diffrec.mesh import Mesh


def _assert_material_close(read, written):
    """Textures within 8-bit quantisation: kd in sRGB, ks as data, normals by angle."""
    half_step = 0.5 / 255 + 1e-6
    assert read.kd.shape == written.kd.shape and read.ks.shape == written.ks.shape
    torch.testing.assert_close(
        linear_to_srgb(read.kd), linear_to_srgb(written.kd), atol=half_step, rtol=0
    )
    torch.testing.assert_close(read.ks, written.ks, atol=half_step, rtol=0)
    cosine = (read.normal * written.normal).sum(-1)
    assert cosine.min() > np.cos(np.radians(0.5))


def test_round_trip_keeps_geometry_exactly(tmp_path, textured_mesh, textured_material):
    write_obj(tmp_path / "mesh.obj", textured_mesh, textured_material)
    asset = read_obj(tmp_path / "mesh.obj")
    mesh = asset.mesh
    for name in ("positions", "triangles", "uvs", "uv_triangles", "normals", "normal_triangles"):
        torch.testing.assert_close(
            getattr(mesh, name), getattr(textured_mesh, name), rtol=0, atol=0
        )
    assert mesh.tangents is None  # OBJ has no tangents
    assert [m.name for m in asset.materials] == ["painted"]
    assert asset.material_ids.tolist() == [0] * textured_mesh.num_triangles
    _assert_material_close(asset.materials[0], textured_material)


def test_file_is_y_up(tmp_path, textured_mesh):
    write_obj(tmp_path / "mesh.obj", textured_mesh)
    rows = [line.split()[1:] for line in (tmp_path / "mesh.obj").read_text().splitlines()]
    kinds = [line.split()[0] for line in (tmp_path / "mesh.obj").read_text().splitlines()]
    v = np.array([r for r, k in zip(rows, kinds, strict=True) if k == "v"], dtype=np.float32)
    vn = np.array([r for r, k in zip(rows, kinds, strict=True) if k == "vn"], dtype=np.float32)
    # 9 significant digits: the float32 values come back exactly.
    x, y, z = textured_mesh.positions.numpy().T
    np.testing.assert_array_equal(v, np.stack([x, z, -y], 1))  # Blender's OBJ axes: -Z fwd, Y up
    nx, ny, nz = textured_mesh.normals.numpy().T
    np.testing.assert_array_equal(vn, np.stack([nx, nz, -ny], 1))


def test_constant_material_values_round_trip(tmp_path, textured_mesh):
    material = Material(
        name="flat", kd=torch.tensor([0.1, 0.2, 0.3, 0.4]), ks=torch.tensor([0.25, 0.6, 0.9])
    )
    write_obj(tmp_path / "mesh.obj", textured_mesh, material)
    read = read_obj(tmp_path / "mesh.obj").materials[0]
    torch.testing.assert_close(read.kd, material.kd)
    torch.testing.assert_close(read.ks, material.ks)
    assert read.normal is None
    assert "Ks 0.25 0.600000024 0.899999976" in (tmp_path / "mesh.mtl").read_text()
    assert "Ni" not in (tmp_path / "mesh.mtl").read_text()


def test_an_ior_is_written_as_ni_and_not_read(tmp_path, textured_mesh):
    """Other tools read ``Ni``; diffrec does not, as exporters write one for any surface."""
    write_obj(tmp_path / "mesh.obj", textured_mesh, Material(name="glaze", ior=2.25))
    assert "Ni 2.25" in (tmp_path / "mesh.mtl").read_text().splitlines()
    assert read_obj(tmp_path / "mesh.obj").materials[0].ior is None


OBJ_TEXT = """\
# every face index form, negative indices, polygons, two materials
mtllib scene.mtl
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v 0.5 1.5 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
vn 0 0 1
usemtl red
f 1/1/1 2/2/1 3/3/1 4/4/1
usemtl shiny
f -5//-1 -4//-1 -3//-1
f 4/4 3/3 5/1
f 1 2 5 4 3
"""

MTL_TEXT = """\
newmtl red
Kd 1 0 0
Ks 0 0.3 0
Pr 0.7
newmtl shiny
Kd 0.5 0.5 0.5
Tr 0.25
map_Ks -s 1 1 1 -bm 0.5 maps\\ks.png
bump -bm 2.0 normal map.png
"""


def test_hand_written_obj_with_every_face_form(tmp_path):
    (tmp_path / "scene.obj").write_text(OBJ_TEXT)
    (tmp_path / "scene.mtl").write_text(MTL_TEXT)
    (tmp_path / "maps").mkdir()
    write_image(tmp_path / "maps" / "ks.png", np.full((2, 2, 3), [0.0, 0.4, 1.0]), data=True)
    write_image(tmp_path / "normal map.png", np.full((2, 2, 3), [0.5, 1.0, 0.5]), data=True)
    asset = read_obj(tmp_path / "scene.obj")
    mesh = asset.mesh
    expected = [[0, 1, 2], [0, 2, 3], [0, 1, 2], [3, 2, 4], [0, 1, 4], [0, 4, 3], [0, 3, 2]]
    assert mesh.triangles.tolist() == expected
    # File (x, y, z) -> world (x, -z, y): the file's y = 1 becomes world z = 1.
    torch.testing.assert_close(mesh.positions[4], torch.tensor([0.5, 0.0, 1.5]))
    # Corners without vt use an extra UV (0, 0) appended after the file's four.
    assert mesh.uvs.shape == (5, 2) and mesh.uv_triangles[2].tolist() == [4, 4, 4]
    assert mesh.uv_triangles[3].tolist() == [3, 2, 0]
    assert mesh.normals is None  # only some faces have normals
    assert [m.name for m in asset.materials] == ["red", "shiny"]
    assert asset.material_ids.tolist() == [0, 0, 1, 1, 1, 1, 1]
    red, shiny = asset.materials
    torch.testing.assert_close(red.ks, torch.tensor([0.0, 0.7, 0.0]))  # Pr wins over Ks
    torch.testing.assert_close(shiny.kd, torch.tensor([0.5, 0.5, 0.5, 0.75]))  # Tr = 1 - d
    torch.testing.assert_close(shiny.ks[0, 0], torch.tensor([0.0, 0.4, 1.0]), atol=1 / 255, rtol=0)
    torch.testing.assert_close(shiny.normal[0, 0], torch.tensor([0.0, 1.0, 0.0]), atol=0.01, rtol=0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("v 0 0 0\nv 1 0 0\nf 1 2 3\n", ":3: .*out of range"),
        ("v 0 0\n", ":1: .*expected 3 numbers"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2\n", "at least 3 corners"),
        ("v 0 0 0\n", "no faces"),
    ],
)
def test_bad_obj_files_name_the_line(tmp_path, text, message):
    (tmp_path / "bad.obj").write_text(text)
    with pytest.raises(UserError, match=message):
        read_obj(tmp_path / "bad.obj")


def test_missing_material_library_falls_back_to_defaults(tmp_path):
    (tmp_path / "a.obj").write_text(
        "mtllib nowhere.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl x\nf 1 2 3\n"
    )
    asset = read_obj(tmp_path / "a.obj")
    assert asset.materials[0].name == "x"
    torch.testing.assert_close(asset.materials[0].kd, Material().kd)
    assert isinstance(asset.mesh, Mesh)
