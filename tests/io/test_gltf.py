"""GLB: write -> read round trips, a second reader (trimesh), and files from another writer."""

import numpy as np
import pygltflib
import pytest
import torch
import trimesh

from diffrec.color import linear_to_srgb
from diffrec.errors import UserError
from diffrec.io import Material, blender_to_yup, read_gltf, write_glb
from diffrec.mesh.primitives import cube

HALF_STEP = 0.5 / 255 + 1e-6


_INDEX = {"uvs": "uv_triangles", "normals": "normal_triangles", "tangents": "tangent_triangles"}


def test_round_trip_keeps_every_corner(tmp_path, textured_mesh, textured_material):
    write_glb(tmp_path / "a.glb", textured_mesh, textured_material)
    asset = read_gltf(tmp_path / "a.glb")
    mesh = asset.mesh
    # Welded again: the same shared positions and triangles as the original.
    assert mesh.num_vertices == textured_mesh.num_vertices
    torch.testing.assert_close(
        mesh.corner_positions(), textured_mesh.corner_positions(), rtol=0, atol=0
    )
    for name, index in _INDEX.items():
        torch.testing.assert_close(
            getattr(mesh, name)[getattr(mesh, index)],
            getattr(textured_mesh, name)[getattr(textured_mesh, index)],
            rtol=0,
            atol=1e-7,
        )
    read = asset.materials[0]
    assert read.name == "painted"
    torch.testing.assert_close(
        linear_to_srgb(read.kd), linear_to_srgb(textured_material.kd), atol=HALF_STEP, rtol=0
    )
    torch.testing.assert_close(read.ks, textured_material.ks, atol=HALF_STEP, rtol=0)
    assert (read.normal * textured_material.normal).sum(-1).min() > np.cos(np.radians(0.5))


def test_constant_materials_round_trip(tmp_path, textured_mesh):
    plain = Material(kd=torch.tensor([0.2, 0.4, 0.6]), ks=torch.tensor([0.0, 0.3, 0.7]))
    write_glb(tmp_path / "a.glb", textured_mesh, plain)
    read = read_gltf(tmp_path / "a.glb").materials[0]
    torch.testing.assert_close(read.kd, plain.kd)
    torch.testing.assert_close(read.ks, plain.ks)
    assert read.normal is None
    # Occlusion has no factor in glTF: it travels as a 1x1 texture; alpha makes it BLEND.
    occluded = Material(kd=torch.tensor([0.2, 0.4, 0.6, 0.5]), ks=torch.tensor([0.4, 0.3, 0.7]))
    write_glb(tmp_path / "b.glb", textured_mesh, occluded)
    read = read_gltf(tmp_path / "b.glb").materials[0]
    torch.testing.assert_close(read.kd, occluded.kd)
    torch.testing.assert_close(read.ks, occluded.ks.expand(1, 1, 3), atol=HALF_STEP, rtol=0)
    assert pygltflib.GLTF2().load(str(tmp_path / "b.glb")).materials[0].alphaMode == "BLEND"


def test_a_clear_coat_round_trips_as_khr_materials_clearcoat(tmp_path, textured_mesh,
                                                            textured_material):
    """Material.coat is written as KHR_materials_clearcoat (listed as used, the normal map as
    the coat's normals) and read back; a coat's textures are read as their means times the
    factors; no coat, or a weight of 0, reads as None."""
    coated = Material(kd=textured_material.kd, ks=textured_material.ks,
                      normal=textured_material.normal, coat=(0.75, 0.125))
    write_glb(tmp_path / "coat.glb", textured_mesh, coated)
    gltf = pygltflib.GLTF2().load(str(tmp_path / "coat.glb"))
    extension = gltf.materials[0].extensions["KHR_materials_clearcoat"]
    assert gltf.extensionsUsed == ["KHR_materials_clearcoat"]
    assert extension["clearcoatNormalTexture"]["index"] == gltf.materials[0].normalTexture.index
    torch.testing.assert_close(read_gltf(tmp_path / "coat.glb").materials[0].coat,
                               torch.tensor([0.75, 0.125]))
    # textures: the ks texture's mean R (1 - occlusion) as the weight, its G as the roughness
    extension["clearcoatTexture"] = {"index": 1}
    extension["clearcoatRoughnessTexture"] = {"index": 1}
    gltf.save_binary(str(tmp_path / "textured.glb"))
    packed = torch.stack([1 - textured_material.ks[..., 0], textured_material.ks[..., 1]], -1)
    expected = torch.tensor([0.75, 0.125]) * packed.mean((0, 1))
    torch.testing.assert_close(read_gltf(tmp_path / "textured.glb").materials[0].coat, expected,
                               atol=2 / 255, rtol=0)
    extension.pop("clearcoatTexture")
    extension["clearcoatFactor"] = 0.0
    gltf.save_binary(str(tmp_path / "none.glb"))
    assert read_gltf(tmp_path / "none.glb").materials[0].coat is None
    write_glb(tmp_path / "plain.glb", textured_mesh, textured_material)
    assert read_gltf(tmp_path / "plain.glb").materials[0].coat is None
    assert pygltflib.GLTF2().load(str(tmp_path / "plain.glb")).extensionsUsed == []


def test_an_ior_round_trips_as_khr_materials_ior(tmp_path, textured_mesh, textured_material,
                                                  caplog):
    """Material.ior is written as KHR_materials_ior (listed as used) and read back; none
    writes no extension; glTF's ior 0 reads as none, with a warning; an IOR below 1 or not a
    number is refused."""
    glossy = Material(kd=textured_material.kd, ks=textured_material.ks, ior=2.25)
    write_glb(tmp_path / "ior.glb", textured_mesh, glossy)
    gltf = pygltflib.GLTF2().load(str(tmp_path / "ior.glb"))
    assert gltf.extensionsUsed == ["KHR_materials_ior"]
    assert gltf.materials[0].extensions == {"KHR_materials_ior": {"ior": 2.25}}
    assert read_gltf(tmp_path / "ior.glb").materials[0].ior == 2.25
    gltf.materials[0].extensions["KHR_materials_ior"]["ior"] = 0.0
    gltf.save(str(tmp_path / "zero.glb"))
    assert read_gltf(tmp_path / "zero.glb").materials[0].ior is None
    assert "KHR_materials_ior 0.0, read as 1.5" in caplog.text
    write_glb(tmp_path / "plain.glb", textured_mesh, textured_material)
    assert read_gltf(tmp_path / "plain.glb").materials[0].ior is None
    for ior in (0.9, float("nan")):
        with pytest.raises(UserError, match="IOR must be a number of at least 1"):
            Material(ior=ior)


@pytest.mark.parametrize("coat", [(1.2, 0.1), (0.5, -0.1), (0.5,), (float("nan"), 0.1)])
def test_a_coat_outside_its_range_is_refused(coat):
    with pytest.raises(UserError, match="material coat"):
        Material(coat=coat)


def test_trimesh_reads_the_same_vertices_and_textures(tmp_path, textured_mesh, textured_material):
    write_glb(tmp_path / "a.glb", textured_mesh, textured_material)
    scene = trimesh.load(tmp_path / "a.glb", process=False)
    (geometry,) = scene.geometry.values()
    # trimesh keeps the file's Y-up space: file (x, y, z) = world (x, z, -y).
    x, y, z = textured_mesh.corner_positions().unbind(-1)
    np.testing.assert_allclose(
        geometry.vertices[geometry.faces], torch.stack([x, z, -y], -1).numpy(), atol=1e-6
    )
    # trimesh flips v back to a bottom-left origin, like diffrec.
    uv = textured_mesh.uvs[textured_mesh.uv_triangles].numpy()
    np.testing.assert_allclose(geometry.visual.uv[geometry.faces], uv, atol=1e-6)
    pbr = geometry.visual.material
    base = np.asarray(pbr.baseColorTexture.convert("RGB"), dtype=np.float64) / 255
    np.testing.assert_allclose(base, linear_to_srgb(textured_material.kd.numpy()), atol=HALF_STEP)
    packed = np.asarray(pbr.metallicRoughnessTexture.convert("RGB"), dtype=np.float64) / 255
    ks = textured_material.ks.numpy()
    np.testing.assert_allclose(packed[..., 1:], ks[..., 1:], atol=HALF_STEP)  # G rough, B metal
    np.testing.assert_allclose(packed[..., 0], 1 - ks[..., 0], atol=HALF_STEP)  # R visibility
    normal = np.asarray(pbr.normalTexture.convert("RGB"), dtype=np.float64) / 255 * 2 - 1
    np.testing.assert_allclose(normal, textured_material.normal.numpy(), atol=2.5 / 255)


def test_a_known_point_lands_where_blender_expects_it(tmp_path):
    # Blender's glTF importer maps file (x, y, z) to world (x, -z, y); so must the file hold
    # world (1, 2, 3) as (1, 3, -2).
    mesh = cube()
    mesh = mesh.replace(positions=mesh.positions * torch.tensor([1.0, 2.0, 3.0]))
    write_glb(tmp_path / "a.glb", mesh)
    (geometry,) = trimesh.load(tmp_path / "a.glb", process=False).geometry.values()
    assert [1.0, 3.0, -2.0] in geometry.vertices.tolist()
    np.testing.assert_allclose(
        geometry.vertices[geometry.faces], blender_to_yup(mesh.corner_positions()).numpy()
    )


def test_files_from_another_writer_with_node_transforms(tmp_path):
    box = trimesh.creation.box(extents=[1.0, 2.0, 3.0])
    transform = trimesh.transformations.rotation_matrix(0.5, [0, 1, 0])
    transform[:3, 3] = [4.0, 5.0, 6.0]
    scene = trimesh.Scene()
    scene.add_geometry(box, transform=transform)
    scene.export(tmp_path / "box.glb")
    mesh = read_gltf(tmp_path / "box.glb").mesh
    file_space = trimesh.transform_points(box.vertices, transform)
    expected = torch.from_numpy(file_space[box.faces]).float()
    x, y, z = expected.unbind(-1)
    torch.testing.assert_close(
        mesh.corner_positions(), torch.stack([x, -z, y], -1), atol=1e-5, rtol=0
    )
    assert mesh.num_vertices == 8  # welded


def test_bad_files_get_clear_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_gltf(tmp_path / "missing.glb")
    scene = trimesh.Scene()
    scene.add_geometry(trimesh.PointCloud(np.random.default_rng(0).random((5, 3))))
    scene.export(tmp_path / "points.glb")
    with pytest.raises(UserError, match="triangle"):
        read_gltf(tmp_path / "points.glb")


def test_a_read_only_normal_map_decodes_without_torchs_warning():
    """Decoded images may be read-only arrays: torch warned on every job's base mesh."""
    import warnings

    from diffrec.io.material import decode_normal_map

    encoded = np.full((4, 4, 3), [0.5, 0.5, 1.0], np.float32)
    encoded.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        normals = decode_normal_map(encoded)
    torch.testing.assert_close(normals, torch.tensor([0.0, 0.0, 1.0]).expand(4, 4, 3))
