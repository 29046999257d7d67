"""The add-on's import of a result, rendered by Cycles, against the backend's own render.

A known asset, a UV sphere with a patterned base colour, roughness, metallic and occlusion
varying over the texture, a normal map (and once again under a clear coat, and once at IOR
2.4), and the bundled forest HDRI as its light, is written by the backend's own writer
(``pipeline.outputs.write_result``) as a job's result folder and rendered by diffrec's
``render_mesh`` from a ring of cameras. In a child process with bpy
(``cycles_import_render.py``) the add-on imports that folder as the Optimize operator does,
brings the cameras in through its NeRF import, and renders them with Cycles (direct world
light, as ``cycles_reference.py``). The cameras the add-on exports must equal the backend's,
and the two renders must agree; the same comparison fails for deliberately broken imports.
"""

import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from blender_run import HERE
from helpers.cycles_compare import bundled_hdri, masked_psnr, pattern_textures

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.io import read_image, write_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.mesh.tangents import with_tangents
from diffrec.pipeline.outputs import write_result
from diffrec.pipeline.run import Result
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D
from diffrec.shading.bsdf import dielectric_f0

pytestmark = [pytest.mark.blender, pytest.mark.slow]

SIZE, VIEWS, SAMPLES = 96, 4, 64
# PSNR (dB, sRGB-encoded, over pixels both renders cover fully; cycles_compare.masked_psnr).
# Measured with bpy 5.0.1: 26.8 as imported (per view 28.9, 25.3, 25.0, 30.3; what is left is
# split-sum against path tracing, mostly on the metal bands, and Cycles' noise at 64 samples:
# 0.5 dB more at 512). Broken imports: kd read as data 18.2, roughness and metallic swapped
# 16.3, occlusion ignored 21.2 (the import before the occlusion fade), world a quarter turn
# 15.1. The multiscatter GGX the import keeps (Blender's default) scores 0.8 dB above
# single-scatter GGX here, so the import does not switch the distribution.
THRESHOLD = 25.0
COAT = torch.tensor([1.0, 0.1])
"""A clear coat over the same asset. Measured with bpy 5.0.1: 27.0 dB as imported, 23.4 with
the coat taken off in Blender."""
COATED_THRESHOLD = 25.0
GLOSSY_IOR = 2.4
"""A non-metal four times as glossy as glass over the same asset (``KHR_materials_ior``).
Measured with bpy 5.0.1: 26.5 dB as imported, 23.4 at IOR 1.5."""
BROKEN_BELOW = THRESHOLD - 2.0  # a broken import must miss by a margin, not by noise
BROKEN = ("kd read as data", "roughness and metallic swapped", "occlusion ignored",
          "world a quarter turn")


def ks_texture(size: int = 256) -> torch.Tensor:
    """(occlusion, roughness, metallic) [size, size, 3], rows top-down: roughness sweeps
    0.25..0.65 around the sphere (with u), a band at the equator and one near the south pole
    are metal, and occlusion fades the shading by up to 60 % around latitude 45 degrees north
    (v = 0.75)."""
    v, u = torch.meshgrid(torch.linspace(1, 0, size), torch.linspace(0, 1, size), indexing="ij")
    roughness = 0.45 + 0.2 * torch.sin(2 * math.pi * u)
    metallic = ((torch.sin(5 * math.pi * v) > 0.5) & (v < 0.7)).float()
    occlusion = 0.6 * torch.exp(-(((v - 0.75) / 0.1) ** 2))
    return torch.stack([occlusion, roughness, metallic], -1)


def render_both(tmp, coat: torch.Tensor | None, variants: list[str], ior: float = 1.5) -> dict:
    """The known asset (under ``coat``, if given; its non-metal parts of IOR ``ior``) written
    as a result in ``tmp``, rendered by the backend and, imported by the add-on, by Cycles
    (``variants``)."""
    mesh = with_tangents(with_vertex_normals(uv_sphere(64, 32)))
    kd, normal = pattern_textures()
    material = TextureMaterial(Texture2D(kd), Texture2D(ks_texture()), Texture2D(normal),
                               coat=coat, f0=dielectric_f0(ior))
    hdri = torch.from_numpy(read_image(bundled_hdri())[..., :3])
    light = EnvironmentLight.from_equirect(hdri, resolution=128)
    light.build_mips()
    cameras = orbit_cameras(VIEWS, radius=3.2, size=SIZE, elevations_degrees=(-20, 40))
    with torch.no_grad():
        write_result(tmp / "result", Result(mesh, material, light, {}, None))
        ours = render_mesh(raster.RasterContext("cpu", impl="torch"), mesh, material, cameras,
                           light, spp=2)
    # the cameras as a NeRF dataset whose images are the backend's renders
    frames = []
    for index, (image, pose) in enumerate(zip(ours.color, cameras.camera_to_world, strict=True)):
        write_image(tmp / "views" / f"view_{index:02d}.exr",
                    torch.cat([image, ours.alpha[index]], -1))
        frames.append({"file_path": f"./views/view_{index:02d}.exr",
                       "transform_matrix": pose.tolist()})
    angle_x = 2 * math.atan(SIZE / (2 * float(cameras.fx[0])))
    transforms = tmp / "transforms_train.json"
    transforms.write_text(json.dumps({"camera_angle_x": angle_x, "frames": frames}))

    spec = {"result_dir": str(tmp / "result"), "transforms": str(transforms), "size": SIZE,
            "samples": SAMPLES, "out_dir": str(tmp / "cycles"), "variants": variants}
    (tmp / "spec.json").write_text(json.dumps(spec))
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(HERE / "cycles_import_render.py"), "--",
                          str(tmp / "spec.json")], capture_output=True, text=True, timeout=600)
    print(f"bpy import + Cycles renders: {time.perf_counter() - start:.1f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cycles = {name: torch.from_numpy(np.load(tmp / "cycles" / f"{name}.npy"))
              for name in spec["variants"]}
    return {"cameras": cameras, "ours": ours, "cycles": cycles,
            "exported": np.load(tmp / "cycles" / "cameras.npz")}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render_both(tmp_path_factory.mktemp("cycles-import"), None, ["as imported", *BROKEN])


@pytest.fixture(scope="module")
def coated(tmp_path_factory):
    return render_both(tmp_path_factory.mktemp("cycles-import-coat"), COAT,
                       ["as imported", "coat dropped"])


@pytest.fixture(scope="module")
def glossy(tmp_path_factory):
    return render_both(tmp_path_factory.mktemp("cycles-import-ior"), None,
                       ["as imported", "glass IOR"], ior=GLOSSY_IOR)


def test_cameras_come_back_as_sent(rendered):
    cameras, exported = rendered["cameras"], rendered["exported"]
    assert np.allclose(exported["poses"], cameras.camera_to_world.numpy(), atol=1e-5)
    expected = torch.stack([cameras.fx, cameras.fy, cameras.cx, cameras.cy], -1).numpy()
    assert np.allclose(exported["intrinsics"][:, :4], expected, atol=1e-3)


LAYERS = {"clear coat": ("coated", "coat dropped", COATED_THRESHOLD),
          f"IOR {GLOSSY_IOR}": ("glossy", "glass IOR", THRESHOLD)}
"""Per layer over the asset: its fixture, the variant with the layer taken off in Blender,
the threshold as imported."""


@pytest.mark.parametrize("layer", list(LAYERS))
def test_cycles_render_of_a_layer_the_import_reads_matches_the_backend(request, layer):
    """The same asset under a clear coat (``KHR_materials_clearcoat``) and at IOR 2.4
    (``KHR_materials_ior``): Blender's glTF importer reads each into the Principled BSDF
    (Coat Weight and Coat Roughness; IOR), and Cycles renders the import as the backend
    shades it; with the layer taken off in Blender (the coat dropped, the IOR put back to
    glass's 1.5) it misses by a margin."""
    fixture, without, threshold = LAYERS[layer]
    rendered = request.getfixturevalue(fixture)
    ours, cycles = rendered["ours"], rendered["cycles"]
    score = masked_psnr(ours.color, ours.alpha, cycles["as imported"])
    off = masked_psnr(ours.color, ours.alpha, cycles[without])
    print(f"{layer}, as imported: {score:.2f} dB; {without}: {off:.2f} dB")
    assert score >= threshold, f"{score:.2f} dB"
    assert off < score - 2.0, f"{off:.2f} dB"


def test_cycles_render_of_the_import_matches_the_backend(rendered):
    ours, cycles = rendered["ours"], rendered["cycles"]
    score = masked_psnr(ours.color, ours.alpha, cycles["as imported"])
    broken = {name: masked_psnr(ours.color, ours.alpha, cycles[name]) for name in BROKEN}
    print(f"as imported: {score:.2f} dB; broken: "
          + ", ".join(f"{name} {value:.2f} dB" for name, value in broken.items()))
    assert score >= THRESHOLD, f"{score:.2f} dB"
    for name, value in broken.items():
        assert value < BROKEN_BELOW, name
