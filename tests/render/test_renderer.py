"""render_mesh and render_uv: orientation, energy, reflections, layers and gradients."""

import importlib

import pytest
import torch
import torch.nn.functional as F
from render_scenes import constant_material, front_camera, interior, sphere

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.light.brdf_lut import brdf_lut
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.mesh import Mesh
from diffrec.neural import NeuralMaterial
from diffrec.render import renderer
from diffrec.render.backgrounds import background_for
from diffrec.render.gbuffer import kept_first
from diffrec.render.losses import image_loss
from diffrec.render.material import NeuralSurface, SurfaceSample, TextureMaterial
from diffrec.render.renderer import render_mesh, render_uv, shade_surface, surface_layers
from diffrec.render.texture2d import Texture2D
from diffrec.shading.bsdf import lookup_brdf_lut

CTX = raster.RasterContext("cpu", impl="torch")


def test_image_rows_are_top_down_and_columns_left_to_right():
    out = render_mesh(CTX, sphere(), constant_material(), front_camera(), mode="kd",
                      buffers=("position",))
    position = out.buffers["position"][0]  # the sphere spans about 15 pixels from the centre
    centre = position.shape[0] // 2
    assert position[centre - 10, centre, 2] > 0.5, "the top rows show world +Z"
    assert position[centre + 10, centre, 2] < -0.5
    assert position[centre, centre + 10, 0] > 0.5, "the right columns show world +X"
    assert position[centre, centre - 10, 0] < -0.5


def test_texture_orientation_follows_uv_origin_bottom_left():
    # texture rows are stored top-down: the top half (v > 0.5, the north hemisphere) is red
    data = torch.zeros(8, 8, 3)
    data[:4, :, 0] = 1.0
    data[4:, :, 2] = 1.0
    material = TextureMaterial(Texture2D(data), Texture2D.constant((0, 0.5, 0)))
    out = render_mesh(CTX, sphere(), material, front_camera(), mode="kd")
    image = out.color[0]
    assert image[10, 24, 0] > 0.9 and image[10, 24, 2] < 0.1
    assert image[-11, 24, 2] > 0.9 and image[-11, 24, 0] < 0.1


def test_white_furnace_shading_only_is_one():
    light = EnvironmentLight(resolution=32, init=1.0)
    light.build_mips()
    out = render_mesh(CTX, sphere(), constant_material(), orbit_cameras(3, 4.0, 48),
                      light, mode="shading-only")
    inside = interior(out)
    assert inside.sum() > 500
    torch.testing.assert_close(out.color[inside], torch.ones_like(out.color[inside]),
                               atol=2e-3, rtol=0)
    assert (out.color[out.alpha[..., 0] == 0] == 0).all(), "background stays black"


@pytest.mark.parametrize("roughness", [0.2, 0.8])
def test_white_furnace_pbr_adds_the_split_sum_specular(roughness):
    light = EnvironmentLight(resolution=32, init=1.0)
    light.build_mips()
    cams = orbit_cameras(2, 4.0, 48)
    material = constant_material(ks=(0.0, roughness, 0.0))
    added = render_mesh(CTX, sphere(), material, cams, light, buffers=("normal", "position"),
                        layered=False)
    view = F.normalize(cams.centers()[:, None, None] - added.buffers["position"], dim=-1)
    n_dot_v = (added.buffers["normal"] * view).sum(-1, keepdim=True).clamp(1e-4, 1)
    a, b = lookup_brdf_lut(brdf_lut(), n_dot_v, torch.full_like(n_dot_v, roughness), ctx=CTX)
    inside = interior(added)
    # nvdiffrec's sum: diffuse 1 (kd = 1, m = 0) + specular f0 A + B
    torch.testing.assert_close(added.color[inside], (1.0 + 0.04 * a + b).expand_as(
        added.color)[inside], atol=5e-3, rtol=0)
    # Blender's layers (the default): the coat reflects 0.04 A + B, the diffuse the rest
    layered = render_mesh(CTX, sphere(), material, cams, light)
    torch.testing.assert_close(layered.color[inside], torch.ones_like(layered.color[inside]),
                               atol=5e-3, rtol=0)


def test_mirror_sphere_reflects_the_expected_directions():
    # environment radiance encodes the direction: L(d) = (1 + d) / 2
    image = (1.0 + equirect_pixel_directions(64, 128).float()) / 2
    light = EnvironmentLight.from_equirect(image, resolution=64)
    light.build_mips()
    cams = orbit_cameras(4, 4.0, 64, elevations_degrees=(-30, 40))
    out = render_mesh(CTX, sphere(96, 48), constant_material(ks=(0.0, 0.0, 1.0)), cams, light,
                      buffers=("normal", "position"))
    n = out.buffers["normal"]
    v = F.normalize(cams.centers()[:, None, None] - out.buffers["position"], dim=-1)
    n_dot_v = (n * v).sum(-1, keepdim=True)
    reflect = F.normalize(2 * n_dot_v * n - v, dim=-1)
    a, b = lookup_brdf_lut(brdf_lut(), n_dot_v.clamp(1e-4, 1), torch.zeros_like(n_dot_v),
                           ctx=CTX)
    expected = (1.0 + reflect) / 2 * (a + b)  # metallic, kd = 1: spec_col = 1
    sel = interior(out) & (n_dot_v[..., 0] > 0.4)
    error = (out.color - expected).abs()[sel]
    assert sel.sum() > 1000
    assert error.mean() < 0.01 and error.max() < 0.06


def test_depth_peeled_layers_composite_front_to_back():
    # a half-transparent red quad in front of an opaque blue one, both filling the view
    quad = torch.tensor([[-3.0, 0.0, -3.0], [3.0, 0.0, -3.0], [3.0, 0.0, 3.0], [-3.0, 0.0, 3.0]])
    positions = torch.cat([quad + torch.tensor([0.0, -1.0, 0.0]), quad])
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    mesh = Mesh(positions, torch.cat([faces, faces + 4]),
                uvs=torch.tensor([[0.25, 0.5], [0.75, 0.5]]),  # the two texel centres
                uv_triangles=torch.tensor([[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]]))
    kd = torch.tensor([[[1.0, 0.0, 0.0, 0.5], [0.0, 0.0, 1.0, 1.0]]])  # red half-transparent, blue
    material = TextureMaterial(Texture2D(kd), Texture2D.constant((0, 0.5, 0)))
    cam = front_camera(size=16, distance=4.0)
    one = render_mesh(CTX, mesh, material, cam, mode="kd", layers=1)
    two = render_mesh(CTX, mesh, material, cam, mode="kd", layers=2)
    centre = (slice(None), slice(4, 12), slice(4, 12))
    torch.testing.assert_close(one.color[centre], torch.tensor([0.5, 0.0, 0.0]).expand(1, 8, 8, 3))
    torch.testing.assert_close(one.alpha[centre], torch.full((1, 8, 8, 1), 0.5))
    torch.testing.assert_close(two.color[centre], torch.tensor([0.5, 0.0, 0.5]).expand(1, 8, 8, 3))
    torch.testing.assert_close(two.alpha[centre], torch.ones(1, 8, 8, 1))


def test_render_uv_gives_the_world_position_of_each_texel():
    # a quad on z = 0 whose UVs are (x + 1) / 2, (y + 1) / 2
    positions = torch.tensor([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [1.0, 1.0, 0.0],
                              [-1.0, 1.0, 0.0]])
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    mesh = Mesh(positions, faces, uvs=(positions[:, :2] + 1) / 2, uv_triangles=faces)
    position, mask = render_uv(CTX, mesh, 8)
    assert mask.all()
    centres = (torch.arange(8) + 0.5) / 8 * 2 - 1
    torch.testing.assert_close(position[0, 0, :, 0], centres)  # u grows along columns
    torch.testing.assert_close(position[0, :, 0, 1], centres.flip(0))  # row 0 is v = 1


def test_every_trainable_quantity_gets_a_gradient_that_matches_finite_differences():
    gen = torch.Generator().manual_seed(0)
    mesh = sphere(16, 8)
    mesh = mesh.replace(positions=mesh.positions.clone().requires_grad_())
    material = TextureMaterial(
        Texture2D(torch.rand(8, 8, 3, generator=gen)),
        Texture2D(torch.rand(8, 8, 3, generator=gen) * 0.8 + 0.1),
        Texture2D(torch.tensor([0.1, -0.1, 0.95]).expand(8, 8, 3)),
    )
    light = EnvironmentLight(base=torch.rand(6, 32, 32, 3, generator=gen))
    cams = orbit_cameras(2, 4.0, 24)
    target = torch.rand(2, 24, 24, 3, generator=gen)

    def loss():
        light.build_mips()
        out = render_mesh(CTX, mesh, material, cams, light, background=(0.5, 0.5, 0.5))
        return image_loss(out.color, target, "mse")

    params = {"positions": mesh.positions, "kd": material.kd.data, "ks": material.ks.data,
              "normal": material.normal.data, "light": light.base}
    grads = dict(zip(params, torch.autograd.grad(loss(), list(params.values())), strict=True))
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), name
        assert grad.abs().sum() > 0, f"{name} receives no gradient"

    # finite differences along each gradient (float32, central, relative tolerance): the
    # steepest direction, so the difference stands well above float32's rounding of the loss
    # (along a random direction kd's is a few 1e-6, at that rounding's level)
    for name in ("kd", "ks", "light"):
        direction = grads[name] / grads[name].norm()
        eps = 1e-2
        with torch.no_grad():
            params[name] += eps * direction
            plus = loss().item()
            params[name] -= 2 * eps * direction
            minus = loss().item()
            params[name] += eps * direction
        numeric = (plus - minus) / (2 * eps)
        analytic = (grads[name] * direction).sum().item()
        assert analytic == pytest.approx(numeric, rel=0.03), name


def _textured_sphere(seed: int):
    """A sphere with random kd and ks textures and a tilted normal map, and a random light
    with its mips built: (mesh, material, light)."""
    gen = torch.Generator().manual_seed(seed)
    material = TextureMaterial(Texture2D(torch.rand(8, 8, 3, generator=gen)),
                               Texture2D(torch.rand(8, 8, 3, generator=gen) * 0.8 + 0.1),
                               Texture2D(torch.tensor([0.2, -0.1, 0.95]).expand(8, 8, 3)))
    light = EnvironmentLight(base=torch.rand(6, 32, 32, 3, generator=gen))
    light.build_mips()
    return sphere(16, 8), material, light


@pytest.mark.parametrize("spp", [1, 2])
def test_g_buffers_made_once_shade_as_render_mesh_does_where_no_edge_is(spp):
    mesh, material, light = _textured_sphere(seed=1)
    cams = orbit_cameras(3, 4.0, 24)
    turn = cams.world_to_camera()[:, :3, :3]  # a light that turns with each camera
    pick = torch.tensor([2, 0])
    whole = render_mesh(CTX, mesh, material, cams[pick], light, spp=spp, light_rotation=turn[pick])
    surface = surface_layers(CTX, mesh, cams, spp=spp).selected(pick)
    shaded = shade_surface(surface, material, light, light_rotation=turn[pick])
    # antialiasing changes the silhouette's pixels only (their coverage falls below 1)
    inside = (whole.alpha == 1.0).expand_as(whole.color)
    assert inside.sum() > 0.3 * inside.numel()
    torch.testing.assert_close(shaded.color[inside], whole.color[inside])
    assert bool((shaded.alpha[inside[..., :1]] == 1.0).all())
    # and the same gradients to the material from those pixels
    grads = [torch.autograd.grad((out.color * inside).square().sum(), material.kd.data)[0]
             for out in (render_mesh(CTX, mesh, material, cams[pick], light, spp=spp,
                                     light_rotation=turn[pick]),
                         shade_surface(surface, material, light, light_rotation=turn[pick]))]
    torch.testing.assert_close(grads[1], grads[0])


def test_kept_first_pads_each_row_with_its_own_kept_indices_in_turn():
    keep = torch.tensor([[0, 1, 0, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]],
                        dtype=torch.bool)
    order, weight = kept_first(keep)
    assert order.tolist() == [[1, 3, 4, 5], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert weight.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]]
    order, _ = kept_first(torch.tensor([[1, 1, 1, 1, 1, 0], [0, 0, 1, 0, 1, 0]],
                                       dtype=torch.bool))
    assert order[1].tolist() == [2, 4, 2, 4, 2]  # no one index read many times over


def test_only_covered_pixels_are_shaded_with_the_values_and_gradients_of_whole_images(
        monkeypatch):
    """``render_mesh`` and ``shade_surface`` shade the pixels a triangle covers and no
    other (views of different coverage in one batch): RGBA, buffers and gradients are those
    of every pixel shaded (``_shaded``) on the covered pixels, and 0 elsewhere; and where
    every covered pixel reads a level of the textures above 0, no atlas packs level 0."""
    gen = torch.Generator().manual_seed(4)
    material = TextureMaterial(Texture2D(torch.rand(256, 256, 3, generator=gen)),
                               Texture2D(torch.rand(256, 256, 3, generator=gen) * 0.8 + 0.1),
                               Texture2D(F.normalize(torch.rand(256, 256, 3, generator=gen)
                                                     + torch.tensor([0.0, 0.0, 2.0]), dim=-1)))
    light = EnvironmentLight(base=torch.rand(6, 32, 32, 3, generator=gen))
    light.build_mips()
    mesh = sphere(16, 8)
    cams = orbit_cameras(2, 4.0, 12)
    cams = cams.moved(torch.eye(3).expand(2, 3, 3), torch.stack(  # one view nearer
        [torch.zeros(3), -0.4 * cams.centers()[1]]))
    seen, packed = [], []  # the coverage of what the material is given; atlases' level 0
    forward = TextureMaterial.forward
    monkeypatch.setattr(TextureMaterial, "forward",
                        lambda self, gb: seen.append(gb.mask) or forward(self, gb))
    module = importlib.import_module("diffrec.raster._torch.texture")
    build = module.build_atlas
    monkeypatch.setattr(module, "build_atlas", lambda levels, mode: packed.append(
        tuple(levels[0].shape[-3:-1])) or build(levels, mode))
    gb = surface_layers(CTX, mesh, cams).layers[0]
    covered = gb.mask > 0
    assert covered.sum() > 20 and covered[0].sum() != covered[1].sum()
    lut = renderer._brdf_table(gb.mask.device)
    rgba, buffers = renderer._shaded_where_covered(gb, material, light, lut, "pbr", True,
                                                   ("kd", "normal"))
    assert bool(torch.cat(seen).bool().all())  # covered pixels alone, repeats as padding
    assert packed and (256, 256) not in packed
    whole_rgba, values = renderer._shaded(gb, material, light, lut, "pbr", True)
    assert (256, 256) in packed  # the uncovered pixels read level 0
    for mine, theirs in ((rgba, whole_rgba), (buffers["kd"], values["kd"]),
                         (buffers["normal"], values["normal"])):
        torch.testing.assert_close(mine, torch.where(covered, theirs, 0.0))
    weights = torch.rand(rgba.shape, generator=gen)
    grads = [torch.autograd.grad((image * weights).sum(), material.kd.data)[0]
             for image in (rgba, whole_rgba)]
    torch.testing.assert_close(grads[0], grads[1])
    # and render_mesh is made of it: the covered colours of a batch of one view are those
    # of the same view in a batch with another
    alone = render_mesh(CTX, mesh, material, cams[1:], light)
    together = render_mesh(CTX, mesh, material, cams, light)
    torch.testing.assert_close(together.color[1:], alone.color)


def test_pixels_picked_from_g_buffers_shade_as_they_do_in_the_whole_images():
    """``SurfaceLayers.pixels``: each view's chosen pixels in one row (a different count a
    view, as a fit padding to the longest picks them) shade to the values and gradients those
    pixels have in the whole images, under a light that turns with each camera."""
    mesh, material, light = _textured_sphere(seed=2)
    gen = torch.Generator().manual_seed(3)
    cams = orbit_cameras(2, 4.0, 24)
    turn = cams.world_to_camera()[:, :3, :3]
    surface = surface_layers(CTX, mesh, cams)
    covered = surface.layers[0].mask[..., 0].flatten(1) > 0
    index = torch.stack([torch.nonzero(row)[:40, 0] for row in covered])  # 40 covered each
    index[1, 30:] = index[1, :10]  # the second view repeats some: padding reads real pixels
    whole = shade_surface(surface, material, light, light_rotation=turn)
    picked = shade_surface(surface.pixels(index), material, light, light_rotation=turn)
    assert picked.color.shape == (2, 1, 40, 3)
    raster_rows = whole.color.flip(1).reshape(2, -1, 3)  # shade_surface returns rows top-down
    expected = raster_rows.gather(1, index[..., None].expand(-1, -1, 3))
    torch.testing.assert_close(picked.color[:, 0], expected)
    assert bool((picked.alpha == 1.0).all())
    assert not torch.allclose(expected[0], expected[1])  # the views differ
    weights = torch.rand(2, 40, 3, generator=gen)
    grads = [torch.autograd.grad((colour * weights).sum(), material.kd.data)[0]
             for colour in (shade_surface(surface, material, light, light_rotation=turn)
                            .color.flip(1).reshape(2, -1, 3)
                            .gather(1, index[..., None].expand(-1, -1, 3)),
                            shade_surface(surface.pixels(index), material, light,
                                          light_rotation=turn).color[:, 0])]
    torch.testing.assert_close(grads[1], grads[0])
    with pytest.raises(ValueError, match="one sample per pixel"):
        surface_layers(CTX, mesh, cams, spp=2).pixels(index)


class _EveryPixel(torch.nn.Module):
    """The neural field evaluated at every pixel it is given (the reference)."""

    def __init__(self, field):
        super().__init__()
        self.field = field

    def forward(self, gb):
        sample = self.field(gb.position)
        return SurfaceSample(sample.kd, sample.ks, sample.normal)


def test_the_neural_surface_evaluates_covered_pixels_only_and_renders_as_every_pixel_would():
    field = NeuralMaterial([-1.5] * 3, [1.5] * 3, impl="torch", device="cpu")
    with torch.no_grad():  # a field that varies: random parameters, not the tiny initial ones
        for module in (field.encoding, field.mlp):
            module.params.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(3))
    light = EnvironmentLight(base=torch.rand(6, 32, 32, 3, generator=torch.Generator()
                                             .manual_seed(4)))
    light.build_mips()
    cams = orbit_cameras(2, 4.0, 24)
    target = torch.rand(2, 24, 24, 3, generator=torch.Generator().manual_seed(5))
    counted = []
    field.register_forward_pre_hook(lambda module, args: counted.append(args[0].shape[:-1].numel()))

    def render(material):
        out = render_mesh(CTX, sphere(16, 8), material, cams, light, background=(0.5, 0.5, 0.5),
                          buffers=("mask",))
        params = [field.encoding.params, field.mlp.params]
        return out, torch.autograd.grad(image_loss(out.color, target, "mse"), params)

    (covered, covered_grads), (every, every_grads) = render(NeuralSurface(field)), \
        render(_EveryPixel(field))
    assert counted == [covered.buffers["mask"].sum().item()] * 2  # the renderer picks them
    assert 0 < counted[0] < 2 * 24 * 24
    torch.testing.assert_close(covered.color, every.color, rtol=0, atol=1e-6)
    for mine, reference in zip(covered_grads, every_grads, strict=True):
        assert reference.abs().sum() > 0
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-7)


def test_random_background_is_one_colour_per_image_and_reported():
    targets = torch.zeros(3, 24, 24, 4)
    random = background_for("random", targets, torch.Generator().manual_seed(0))
    out = render_mesh(CTX, sphere(), constant_material(), orbit_cameras(3, 4.0, 24), mode="kd",
                      background=random)
    assert out.background.shape == (3, 1, 1, 3)
    corner = out.color[:, 0, 0]  # background only
    torch.testing.assert_close(corner, out.background[:, 0, 0])
    assert not torch.allclose(corner[0], corner[1])


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="needs a light"):
        render_mesh(CTX, sphere(), constant_material(), front_camera())
    with pytest.raises(ValueError, match="unknown buffers"):
        render_mesh(CTX, sphere(), constant_material(), front_camera(), mode="kd",
                    buffers=("depth",))
    for background in ((1.0, 0.0), "white", "random"):
        with pytest.raises(ValueError, match="background"):
            render_mesh(CTX, sphere(), constant_material(), front_camera(), mode="kd",
                        background=background)


def test_a_render_takes_every_engine_choice_from_its_context(monkeypatch):
    """Rasterize, interpolate, antialias and every texture lookup (material textures, the
    light, the BRDF table) run on the render's context: each asks that context for its engine
    (none can fall back to another, which could be another engine on a CUDA machine)."""
    gen = torch.Generator().manual_seed(0)
    normal_map = F.normalize(torch.rand(8, 8, 3, generator=gen) + torch.tensor([0, 0, 2.0]),
                             dim=-1)
    material = TextureMaterial(Texture2D(torch.rand(8, 8, 3, generator=gen)),
                               Texture2D.constant((0.0, 0.4, 0.5)), Texture2D(normal_map))
    sky = 0.2 + torch.rand(16, 32, 3, generator=gen)
    light = EnvironmentLight.from_equirect(sky, resolution=32)
    light.build_mips()
    camera = front_camera(32)
    turn = torch.eye(3)[None]

    def renders():
        return [render_mesh(CTX, sphere(16, 8), material, camera, light, mode=mode, spp=2,
                            layers=2, light_rotation=turn).color
                for mode in ("pbr", "shading-only")]

    asked = []
    engine = raster._engine

    def recording(ctx, operation):
        asked.append((ctx, operation))
        return engine(ctx, operation)

    monkeypatch.setattr(raster, "_engine", recording)
    renders()
    assert {ctx for ctx, _ in asked} == {CTX}
    assert {"DepthPeeler", "interpolate", "texture", "antialias"} <= {op for _, op in asked}
