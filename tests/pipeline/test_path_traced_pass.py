"""A materials run with ``renderer: path-traced`` (the rasterized pass, then a path-traced one)
against the rasterized run alone, on targets with shadows and interreflection in them: an open
box of one grey, path-traced by Mitsuba with one bounce. The split-sum renderer lights the
inside as if open to the whole sky, so a rasterized fit paints the box's shadow into the
floor's base colour (or its occlusion); the path-traced pass takes it out again."""

import pytest
import torch
from running import config, optimize_into, sky

from diffrec import raster
from diffrec.camera import Cameras, look_at, orbit_cameras
from diffrec.io import read_gltf
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh import Mesh
from diffrec.mesh.primitives import plane
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.run import _path_traced_views
from diffrec.pipeline.unwrap import with_uvs
from diffrec.pipeline.views import Views
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

GREY = 0.6
CTX = raster.RasterContext("cpu", impl="torch")


def open_box(quads=6):
    """The cube [-1, 1]^3 without its top face, each of its five faces a grid of ``quads``^2
    quads (shading varies across a face: the fit needs vertices to follow it)."""
    face = plane(resolution=quads, size=2.0)
    turns = [torch.eye(3),  # floor at z = -1, then the four walls
             torch.tensor([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]]),
             torch.tensor([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]),
             torch.tensor([[0.0, 0, 1], [0, 1, 0], [-1, 0, 0]]),
             torch.tensor([[0.0, 0, -1], [0, 1, 0], [1, 0, 0]])]
    offsets = [(0, 0, -1), (0, 1, 0), (0, -1, 0), (1, 0, 0), (-1, 0, 0)]
    positions, triangles = [], []
    for turn, offset in zip(turns, offsets, strict=True):
        triangles.append(face.triangles + sum(len(p) for p in positions))
        positions.append(face.positions @ turn.T + torch.tensor(offset, dtype=torch.float32))
    return Mesh(torch.cat(positions), torch.cat(triangles))


def run_config(tmp_path, name, **settings):
    return config(tmp_path / name, mode="materials", iterations=150, texture_res=32, **settings)


def traced_views(mesh, cameras, light, settings) -> Views:
    """Path-traced targets (one bounce, 64 spp) of the grey box, straight alpha."""
    from diffrec.render.path_tracer import PathTracer

    textured, _ = with_uvs(mesh, settings)
    material = TextureMaterial(Texture2D(torch.full((4, 4, 3), GREY)),
                               Texture2D(torch.tensor([0.0, 0.9, 0.0]).expand(4, 4, 3).clone()))
    with torch.no_grad():
        out = PathTracer(textured, "cpu", max_depth=3).render(material, light, cameras, spp=64)
    color = out.color / out.alpha.clamp_min(1e-6)
    return Views(cameras, torch.cat([color * (out.alpha > 0), out.alpha], -1).contiguous())


def floor_albedo(out_dir) -> float:
    """The result's base colour as an artist's renderer uses it, kd x (1 - occlusion),
    averaged over the floor's middle seen from straight above."""
    asset = read_gltf(out_dir / "mesh.glb")
    material = asset.materials[0]
    kd = torch.as_tensor(material.kd[..., :3]) * (1 - torch.as_tensor(material.ks[..., :1]))
    shown = TextureMaterial(Texture2D(kd), Texture2D(torch.as_tensor(material.ks)))
    size = 48
    above = look_at([[0.0, 0.001, 6.0]], (0, 0, 0)).float()
    camera = Cameras(above, fx=size * 1.4, fy=size * 1.4, cx=size / 2, cy=size / 2,
                     width=size, height=size)
    image = render_mesh(CTX, asset.mesh, shown, camera, mode="kd").color[0].detach()
    middle = image[size // 2 - 4:size // 2 + 4, size // 2 - 4:size // 2 + 4]
    return float(middle.mean())


@pytest.mark.mitsuba
@pytest.mark.slow
def test_the_path_traced_pass_takes_the_shadow_out_of_the_base_colour(tmp_path):
    """With ``path_res`` half the views' size: the shadow is light's low frequencies."""
    box = open_box()
    light = EnvironmentLight.from_equirect(sky(), resolution=32)
    settings = run_config(tmp_path, "rasterized").settings
    train, test = (traced_views(box, orbit_cameras(count, 4.0, 48, seed=seed,
                                                   elevations_degrees=(35, 75)), light, settings)
                   for count, seed in ((12, 1), (4, 2)))
    runs = {"rasterized": {}, "path-traced at 24 px": {"renderer": "path-traced", "path_res": 24}}
    errors = {}
    for name, changes in runs.items():
        run = run_config(tmp_path, name, **changes)
        metrics = optimize_into(run, Inputs(train, test, box, sky()))
        errors[name] = abs(floor_albedo(tmp_path / name / "out") - GREY)
        print(name, metrics["psnr_mean"], errors[name])
    assert errors["path-traced at 24 px"] < 0.5 * errors["rasterized"], errors


def test_path_res_resizes_the_path_traced_views_down_never_up():
    views = Views(orbit_cameras(2, 4.0, 48), torch.rand(2, 48, 48, 4))
    assert _path_traced_views(views, 0) is views and _path_traced_views(views, 64) is views
    half = _path_traced_views(views, 24)
    assert (half.cameras.width, half.cameras.height, tuple(half.images.shape)) == (
        24, 24, (2, 24, 24, 4))
    assert torch.allclose(half.cameras.fx, views.cameras.fx / 2)
    assert torch.allclose(half.images.mean((1, 2)), views.images.mean((1, 2)), atol=0.02)
