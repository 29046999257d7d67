"""diffrec's renderer against Blender's Cycles: same mesh, material, HDRI and cameras.

Cycles (run in a child process by ``cycles_reference.py``, direct world light only) is an
independent path tracer reading the HDRI through its own Environment Texture node, so these
tests catch flipped axes, a wrong environment orientation, colour-space mistakes and
normal-map conventions. The thresholds are the issue's; each case also proves it can fail.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cycles_compare import bundled_hdri, masked_psnr, pattern_textures
from render_scenes import open_box

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.io import read_image, write_image
from diffrec.io.material import decode_normal_map, encode_normal_map
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.mesh.tangents import with_tangents
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D
from diffrec.shading.bsdf import dielectric_f0

pytestmark = [pytest.mark.blender, pytest.mark.slow]

SIZE, VIEWS, SAMPLES = 128, 4, 128
ADDED_BELOW_DB = 1.0  # what the layered diffuse gains on a dielectric at least
CTX = raster.RasterContext("cpu", impl="torch")


def textures(tmp: Path):
    """The test pattern (``cycles_compare.pattern_textures``) as files: albedo as an sRGB PNG,
    the normal map as a data PNG."""
    kd, normal = pattern_textures()
    write_image(tmp / "kd.png", kd.numpy())
    write_image(tmp / "normal.png", encode_normal_map(normal), data=True)
    return tmp / "kd.png", tmp / "normal.png"


def cycles_render(out_dir: Path, mesh, cameras, hdri, material: dict, samples: int,
                  **extra) -> torch.Tensor:
    """Cycles' renders ``[N, H, W, 4]`` of ``mesh`` with ``material`` under ``hdri`` from
    ``cameras``, made in ``out_dir`` by ``cycles_reference.py`` (``extra``: more of its scene
    keys, e.g. ``max_bounces``)."""
    np.savez(out_dir / "mesh.npz", positions=mesh.positions.numpy(),
             triangles=mesh.triangles.numpy(), uvs=mesh.uvs.numpy(),
             uv_triangles=mesh.uv_triangles.numpy())
    spec = {"mesh": str(out_dir / "mesh.npz"), "hdri": str(hdri), "material": material,
            "cameras": cameras.camera_to_world.tolist(), "fx": float(cameras.fx[0]),
            "size": cameras.width, "samples": samples, "out_dir": str(out_dir), **extra}
    (out_dir / "scene.json").write_text(json.dumps(spec))
    script = Path(__file__).parents[1] / "helpers" / "cycles_reference.py"
    subprocess.run([sys.executable, str(script), str(out_dir / "scene.json")], check=True,
                   capture_output=True, timeout=600)
    count = len(cameras.camera_to_world)
    return torch.from_numpy(np.stack([read_image(out_dir / f"view_{i:02d}.exr")
                                      for i in range(count)]))


CASES = {
    "rough dielectric": ({"kd": [0.8, 0.35, 0.2], "roughness": 0.7, "metallic": 0.0}, 30.0),
    "glossy metal": ({"kd": [0.95, 0.75, 0.35], "roughness": 0.3, "metallic": 1.0}, 25.0),
    "textured normal-mapped": ({"roughness": 0.5, "metallic": 0.0}, 25.0),
    "bright dielectric": ({"kd": [0.3, 0.12, 0.35], "roughness": 0.25, "metallic": 0.0,
                           "ior": 2.6}, 30.0),
}


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cycles")
    mesh = with_tangents(with_vertex_normals(uv_sphere(96, 48)))
    cams = orbit_cameras(VIEWS, radius=3.2, size=SIZE, elevations_degrees=(-25, 45))
    kd_png, normal_png = textures(tmp)
    renders = {}
    for name, (material, _) in CASES.items():
        material = dict(material)
        if name == "textured normal-mapped":
            material.update(kd_image=str(kd_png), normal_image=str(normal_png))
        out_dir = tmp / name.replace(" ", "_")
        out_dir.mkdir()
        renders[name] = cycles_render(out_dir, mesh, cams, bundled_hdri(), material, SAMPLES)
    return {"mesh": mesh, "cameras": cams, "renders": renders, "kd_png": kd_png,
            "normal_png": normal_png}


def diffrec_render(scene, material_spec, name, quarter_turns=0, flip_green=False, layered=True,
                   ior=None):
    hdri = torch.from_numpy(read_image(bundled_hdri())[..., :3])
    hdri = torch.roll(hdri, shifts=quarter_turns * hdri.shape[1] // 4, dims=1)  # about world Z
    light = EnvironmentLight.from_equirect(hdri, resolution=128)
    light.build_mips()
    if name == "textured normal-mapped":
        kd = Texture2D(torch.from_numpy(read_image(scene["kd_png"])[..., :3]))
        encoded = read_image(scene["normal_png"], data=True)[..., :3]
        if flip_green:
            encoded[..., 1] = 1.0 - encoded[..., 1]
        normal = Texture2D(decode_normal_map(encoded))
    else:
        kd, normal = Texture2D.constant(material_spec["kd"]), None
    ks = Texture2D.constant((0.0, material_spec["roughness"], material_spec["metallic"]))
    f0 = dielectric_f0(material_spec.get("ior", 1.5) if ior is None else ior)
    with torch.no_grad():
        out = render_mesh(CTX, scene["mesh"], TextureMaterial(kd, ks, normal, f0=f0),
                          scene["cameras"], light, spp=2, layered=layered)
    return out.color, out.alpha


@pytest.mark.parametrize("name", list(CASES))
def test_diffrec_agrees_with_cycles(scene, name):
    material, threshold = CASES[name]
    reference = scene["renders"][name]
    color, alpha = diffrec_render(scene, material, name)
    score = masked_psnr(color, alpha, reference)
    print(f"{name}: {score:.2f} dB against Cycles (threshold {threshold})")
    assert score >= threshold

    # a dielectric's diffuse lies under its specular coat in Cycles' Principled BSDF, as in
    # diffrec's default shading: nvdiffrec's sum of the two is further off
    if material["metallic"] == 0.0:
        added = masked_psnr(*diffrec_render(scene, material, name, layered=False), reference)
        print(f"{name}: {added:.2f} dB with the diffuse and the coat added (nvdiffrec)")
        assert score > added + ADDED_BELOW_DB

    # a dielectric brighter than glass is shaded as one: at IOR 1.5 it fails
    if "ior" in material:
        glass = masked_psnr(*diffrec_render(scene, material, name, ior=1.5), reference)
        print(f"{name}: {glass:.2f} dB shaded at IOR 1.5")
        assert glass < threshold - 3

    # the same test fails for an environment turned a quarter about Z ...
    rotated = diffrec_render(scene, material, name, quarter_turns=1)
    assert masked_psnr(*rotated, reference) < threshold - 3
    # ... and for a normal map read with the wrong (DirectX, -Y) convention
    if name == "textured normal-mapped":
        flipped = diffrec_render(scene, material, name, flip_green=True)
        assert masked_psnr(*flipped, reference) < threshold


PATH_TRACED_CASES = {"rough dielectric": 31.0, "glossy metal": 33.0}


@pytest.mark.mitsuba
@pytest.mark.parametrize("name", list(PATH_TRACED_CASES))
def test_the_path_tracer_agrees_with_cycles(scene, name):
    """The Mitsuba route on the same sphere: direct light only (max_depth 2), as Cycles here.
    Measured 31.5 and 33.6 dB (split-sum: 37.9 and 26.7): Mitsuba's Disney diffuse is a little
    brighter than Cycles' on the rough dielectric, and its sampled GGX is far closer on metal."""
    from diffrec.render.path_tracer import PathTracer

    material = CASES[name][0]
    kd = Texture2D(torch.tensor(material["kd"]).expand(4, 4, 3).clone())
    ks = Texture2D(torch.tensor([0.0, material["roughness"], material["metallic"]])
                   .expand(4, 4, 3).clone())
    light = EnvironmentLight.from_equirect(torch.from_numpy(read_image(bundled_hdri())[..., :3]),
                                           resolution=128)
    with torch.no_grad():
        out = PathTracer(scene["mesh"], "cpu", max_depth=2).render(
            TextureMaterial(kd, ks), light, scene["cameras"], spp=256)
    score = masked_psnr(out.color, out.alpha, scene["renders"][name])
    print(f"{name}, path-traced: {score:.2f} dB against Cycles")
    assert score >= PATH_TRACED_CASES[name]


@pytest.mark.mitsuba
def test_the_path_tracer_lights_a_cavity_as_cycles_does(tmp_path):
    """The open box's floor under a uniform white sky, white rough walls: Cycles with one
    bounce against the path tracer with one bounce (max_depth 3), on the patch at the floor's
    centre; the split-sum renderer, open to the whole sky there, is more than three times as
    bright."""
    from diffrec.render.path_tracer import PathTracer

    mesh, cameras, centre = open_box()
    write_image(tmp_path / "white.exr", np.ones((16, 32, 3), dtype=np.float32))
    material = {"kd": [0.8, 0.8, 0.8], "roughness": 1.0, "metallic": 0.0}
    cycles = cycles_render(tmp_path, mesh, cameras, tmp_path / "white.exr", material, 512,
                           max_bounces=1)[..., :3]
    kd = Texture2D(torch.tensor(material["kd"]).expand(4, 4, 3).clone())
    ks = Texture2D(torch.tensor([0.0, 1.0, 0.0]).expand(4, 4, 3).clone())
    light = EnvironmentLight(32, init=1.0)
    light.build_mips()
    with torch.no_grad():
        traced = PathTracer(mesh, "cpu", max_depth=3).render(TextureMaterial(kd, ks), light,
                                                             cameras, spp=512).color
        open_sky = render_mesh(CTX, mesh, TextureMaterial(kd, ks), cameras, light).color
    floor = {name: float(image[centre].mean()) for name, image in
             (("cycles", cycles), ("traced", traced), ("split-sum", open_sky))}
    print(floor)
    assert floor["traced"] == pytest.approx(floor["cycles"], rel=0.1)
    assert floor["split-sum"] > 3 * floor["cycles"]


@pytest.mark.mitsuba
def test_the_path_tracer_reads_normal_maps_as_cycles_does(scene):
    """The normal-mapped sphere path-traced: its bumps agree with Cycles' (OpenGL tangent
    space, +Y up), and read with the green channel flipped (DirectX) they do not."""
    from diffrec.render.path_tracer import PathTracer

    light = EnvironmentLight.from_equirect(torch.from_numpy(read_image(bundled_hdri())[..., :3]),
                                           resolution=128)
    tracer, reference = PathTracer(scene["mesh"], "cpu", max_depth=2), \
        scene["renders"]["textured normal-mapped"]
    kd = Texture2D(torch.from_numpy(read_image(scene["kd_png"])[..., :3]))
    ks = Texture2D.constant((0.0, 0.5, 0.0))
    ks = Texture2D(ks.data.expand(*kd.resolution, 3).clone())
    scores = []
    for flip in (False, True):
        encoded = read_image(scene["normal_png"], data=True)[..., :3]
        if flip:
            encoded[..., 1] = 1.0 - encoded[..., 1]
        material = TextureMaterial(kd, ks, Texture2D(decode_normal_map(encoded)))
        with torch.no_grad():
            out = tracer.render(material, light, scene["cameras"], spp=256)
        scores.append(masked_psnr(out.color, out.alpha, reference))
    print(f"normal-mapped, path-traced: {scores[0]:.2f} dB against Cycles, {scores[1]:.2f} "
          "with green flipped")
    assert scores[0] >= 28.0 and scores[1] < scores[0] - 2


LAMP_CASES = {"rough gold": ({"kd": [1.0, 0.71, 0.29], "roughness": 0.3, "metallic": 1.0}, 35.0),
              "rough black dielectric": ({"kd": [0.015, 0.015, 0.018], "roughness": 0.85,
                                          "metallic": 0.0}, 38.0)}


@pytest.mark.parametrize("name", list(LAMP_CASES))
def test_small_bright_lamps_shaded_as_sources_agree_with_cycles(scene, tmp_path, name):
    """Under Blender's studio HDRI (a few small lamps hold most of its power), split-sum alone
    puts rough highlights in the wrong place; with the lamps as directional sources
    (``light_sources``) the sphere agrees with Cycles. Measured on the four views: rough gold
    19.0 -> 40.2 dB, the suite bowl's black material 32.2 -> 43.6 (docs/BENCHMARKS.md, "Small
    bright lamps", on eight)."""
    material, threshold = LAMP_CASES[name]
    mesh = scene["mesh"]
    reference = cycles_render(tmp_path, mesh, scene["cameras"], bundled_hdri("studio"),
                              material, SAMPLES)
    hdri = torch.from_numpy(read_image(bundled_hdri("studio"))[..., :3])
    material_ = TextureMaterial(Texture2D.constant(material["kd"]),
                                Texture2D.constant((0.0, material["roughness"],
                                                    material["metallic"])))
    scores = {}
    for sources in (0, 64):
        light = EnvironmentLight.from_equirect(hdri, resolution=128, sources=sources)
        light.build_mips()
        with torch.no_grad():
            out = render_mesh(CTX, mesh, material_, scene["cameras"], light, spp=2)
        scores[sources] = masked_psnr(out.color, out.alpha, reference)
    print(f"{name} under studio: {scores[0]:.2f} dB split-sum alone, {scores[64]:.2f} with the "
          "lamps as sources")
    assert scores[64] >= threshold and scores[0] < threshold - 4
