"""ExplicitGeometry with large steps: it starts at the given mesh, its regulariser still sees
the offset, a loss pulls it smoothly where plain offsets go rough, and the trainer steps it
with UniformAdam."""

import pytest
import torch

from diffrec.light.sun import Sun
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.geometry_models import ExplicitGeometry, uniform_laplacian
from diffrec.pipeline.optimizers import Adam, UniformAdam
from diffrec.pipeline.pass_config import pass_config
from diffrec.pipeline.trainer import Pass, PassTrainer
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import Settings, SettingsError, parse_settings

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")


def test_large_steps_start_at_the_mesh_and_regularise_the_offset():
    sphere = uv_sphere(16, 8)
    geometry = ExplicitGeometry(sphere, True, "relative", 100.0, large_steps=10.0)
    assert geometry.uniform_adam and [name for name, _ in geometry.named_parameters()] == ["u"]
    assert torch.equal(geometry.mesh().positions, sphere.positions)  # solved from them
    assert geometry.regularizer(0.0).item() == 0
    with torch.no_grad():
        geometry.u[0] += 0.5
    regularizer = geometry.regularizer(0.5)
    offset = geometry.mesh().positions - sphere.positions
    assert offset.abs().max() > 1e-3
    expected = 100.0 * 0.5 * uniform_laplacian(offset, geometry.edges).square().mean()
    assert regularizer.item() == pytest.approx(expected.item(), rel=1e-6)
    regularizer.backward()
    assert geometry.u.grad.abs().sum() > 0
    plain = ExplicitGeometry(sphere, True, "relative", 100.0)
    assert not plain.uniform_adam and [name for name, _ in plain.named_parameters()] == ["offset"]
    fixed = ExplicitGeometry(sphere, False, large_steps=10.0)
    assert not fixed.uniform_adam and not any(p.requires_grad for p in fixed.parameters())


def test_the_positions_are_solved_once_per_value_of_u():
    geometry = ExplicitGeometry(uv_sphere(16, 8), True, large_steps=10.0)
    first = geometry.positions()
    assert geometry.positions() is first, "mesh() and regularizer() share one solve"
    with torch.no_grad():
        geometry.u.add_(0.01)
    assert geometry.positions() is not first


def pulled(geometry, optimizer, target, seen, steps=25):
    """``geometry`` after ``steps`` steps pulling the ``seen`` vertices onto ``target``;
    returns (final loss / first loss, roughness: mean |Laplacian of the displacement| over
    mean |displacement|)."""
    losses = []
    for _ in range(steps):
        loss = (geometry.positions() - target)[seen].square().sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        moved = geometry.positions() - geometry.initial_positions
        rough = uniform_laplacian(moved, geometry.edges).norm(dim=1).mean() / moved.norm(
            dim=1).mean()
    return losses[-1] / losses[0], rough.item()


def test_a_loss_on_half_the_vertices_moves_a_large_steps_mesh_smoothly(one_thread):
    sphere = uv_sphere(16, 8)
    target = 1.2 * sphere.positions
    seen = torch.rand(sphere.num_vertices, generator=torch.Generator().manual_seed(0)) < 0.5
    plain = ExplicitGeometry(sphere, True, laplace_scale=0.0)
    plain_loss, plain_rough = pulled(plain, torch.optim.Adam(plain.parameters(), lr=0.02),
                                     target, seen)
    smooth = ExplicitGeometry(sphere, True, laplace_scale=0.0, large_steps=10.0)
    smooth_loss, smooth_rough = pulled(smooth, UniformAdam(smooth.parameters(), lr=0.02),
                                       target, seen)
    # measured: losses to 0.02 and 0.43 of the first, roughness 0.96 and 0.07
    assert plain_loss < 0.1 and smooth_loss < 0.6, (plain_loss, smooth_loss)  # both pulled
    assert smooth_rough < 0.3 * plain_rough, (smooth_rough, plain_rough)


MATERIAL = torch.nn.Linear(2, 2)  # a stand-in: two trainable tensors at the pass's rate


def pass_trainer(geometry, surface_rate=None) -> PassTrainer:
    """A pass-2 trainer over ``geometry`` and ``MATERIAL`` at 0.01, the light held fixed
    (only its optimisers are looked at)."""
    light = torch.nn.Module()
    light.base = torch.nn.Parameter(torch.zeros(3))
    light.sun = Sun()
    config = pass_config(Settings(), name=PassName.TEXTURES, iterations=10, learning_rate=0.01,
                         warmup=0, learn_light=False, surface_learning_rate=surface_rate)
    return PassTrainer(None, Pass.of(config, geometry, MATERIAL, light), None, None)


def test_the_trainer_steps_a_large_steps_geometry_with_uniform_adam():
    sphere = uv_sphere(8, 4)
    smooth = ExplicitGeometry(sphere, True, large_steps=10.0)
    optimizers = pass_trainer(smooth).optimizers
    assert [type(o) for o in optimizers] == [Adam, UniformAdam]
    assert optimizers[1].param_groups[0]["params"] == [smooth.u]
    assert optimizers[1].param_groups[0]["lr"] == 0.01
    adam = [p for group in optimizers[0].param_groups for p in group["params"]]
    assert all(p is not smooth.u for p in adam) and len(adam) == 2  # the material's
    plain = ExplicitGeometry(sphere, True)
    assert [type(o) for o in pass_trainer(plain).optimizers] == [Adam]


def test_the_geometry_trains_at_its_own_rate_when_the_pass_gives_one():
    """``Pass.surface_learning_rate`` (the setting of that name) reaches the
    geometry's parameters alone, for plain offsets and large steps alike; None: the pass's."""
    sphere = uv_sphere(8, 4)

    def rates(geometry, surface_rate):
        return {id(p): group["lr"]
                for optimizer in pass_trainer(geometry, surface_rate).optimizers
                for group in optimizer.param_groups for p in group["params"]}

    for geometry in (ExplicitGeometry(sphere, True), ExplicitGeometry(sphere, True,
                                                                      large_steps=10.0)):
        (moving,) = geometry.parameters()
        given = rates(geometry, 0.001)
        assert given[id(moving)] == 0.001
        assert {given[id(p)] for p in MATERIAL.parameters()} == {0.01}
        assert rates(geometry, None)[id(moving)] == 0.01


def test_along_normals_each_vertex_moves_on_its_radius_of_a_sphere():
    """A pull along +x moves a sphere's vertices only along their normals, which on a sphere
    about the origin lie within a degree or so of the radius: Adam's first step moves each
    that the pull reaches by the rate, towards -x."""
    sphere = uv_sphere(16, 8)
    geometry = ExplicitGeometry(sphere, True, laplace_scale=0.0, along_normals=True)
    optimizer = torch.optim.Adam(geometry.parameters(), lr=0.01)
    geometry.positions()[:, 0].sum().backward()
    optimizer.step()
    moved = (geometry.positions() - geometry.initial_positions).detach()
    radial = torch.nn.functional.normalize(geometry.initial_positions, dim=-1)
    sideways = torch.linalg.cross(moved, radial).norm(dim=-1)
    assert (sideways <= 0.03 * moved.norm(dim=-1) + 1e-9).all(), "only along the normal"
    pulled = radial[:, 0].abs() > 0.05  # Adam steps a gradient of 1e-9 too, by a part of lr
    assert torch.allclose(moved.norm(dim=-1)[pulled], torch.full((int(pulled.sum()),), 0.01),
                          rtol=1e-3)
    assert (moved[pulled, 0] < 0).all(), "down the pull's gradient"
    with pytest.raises(ValueError, match="large_steps"):
        ExplicitGeometry(sphere, True, large_steps=10.0, along_normals=True)
    with pytest.raises(SettingsError, match="large_steps 0"):
        parse_settings({"vertex_motion": "along-normals", "large_steps": 5.0})


def test_the_meshs_own_normals_are_kept_fixed_and_moving():
    """A flat-shaded box (a normal per face, as its file gives it) stays flat: a fixed mesh
    shades with its normals as they are, a moving one with normals recomputed per face; a
    mesh without normals is shaded smooth."""
    from diffrec.mesh import face_normals, with_vertex_normals
    from diffrec.mesh.primitives import cube

    box = cube()
    flat = box.replace(normals=face_normals(box.positions, box.triangles)[:6],
                       normal_triangles=torch.arange(6).repeat(2)[:, None].expand(12, 3))
    fixed = ExplicitGeometry(flat, False).mesh()
    torch.testing.assert_close(fixed.normals[fixed.normal_triangles],
                               flat.normals[flat.normal_triangles])
    moving = ExplicitGeometry(flat, True)
    with torch.no_grad():
        moving.offset += box.positions * torch.tensor([2.0, 0.0, -0.5])  # stretched, planar
    moved = moving.mesh()
    expected = face_normals(moved.positions, moved.triangles)[:, None].expand(-1, 3, -1)
    torch.testing.assert_close(moved.normals[moved.normal_triangles], expected)
    smooth = ExplicitGeometry(box, False).mesh()
    torch.testing.assert_close(smooth.normals, with_vertex_normals(box).normals)


@pytest.mark.parametrize("kind", ["dmtet", "flexicubes"])
def test_the_random_start_is_the_reference_systems_uniform_sdf(kind):
    from diffrec.pipeline.geometry_models import IsosurfaceGeometry

    geometry = IsosurfaceGeometry(kind, 16, 2.1, (0.0, 0.0, 0.0), "cpu")
    sphere_triangles = len(geometry.mesh().triangles)
    geometry.start_random(seed=3)
    sdf = geometry.surface.sdf.detach()
    assert sdf.min() > -0.9 and sdf.max() <= 0.1
    assert (sdf < 0).float().mean().item() == pytest.approx(0.9, abs=0.03)  # inside: 9 in 10
    assert len(geometry.mesh().triangles) > 3 * sphere_triangles  # fragments all over the box
    again = IsosurfaceGeometry(kind, 16, 2.1, (0.0, 0.0, 0.0), "cpu")
    again.start_random(seed=3)
    assert torch.equal(again.surface.sdf, geometry.surface.sdf)
    again.start_random(seed=4)
    assert not torch.equal(again.surface.sdf, geometry.surface.sdf)


@pytest.mark.parametrize("along_normals", [False, True])
def test_offsets_in_a_unit_move_a_larger_object_as_far_in_proportion(along_normals):
    """The same sphere modelled 10 times larger, with a unit 10 times longer, under a loss
    that reads only its shape (positions over its size): Adam moves it 10 times as far in
    scene units, the same in proportion, and the regulariser weighs the two alike."""
    sphere = uv_sphere(16, 8)
    target = sphere.positions * torch.tensor([1.2, 1.1, 0.9]) + 0.05  # no zero gradient

    def fitted(size):
        geometry = ExplicitGeometry(sphere.replace(positions=sphere.positions * size), True,
                                    laplace_scale=100.0, along_normals=along_normals, unit=size)
        optimizer = Adam(geometry.parameters(), lr=0.01)
        for _ in range(5):
            loss = (geometry.positions() / size - target).square().sum()
            optimizer.zero_grad()
            (loss + geometry.regularizer(0.2)).backward()
            optimizer.step()
        return geometry.positions().detach() - geometry.initial_positions, \
            geometry.regularizer(0.2).item()

    moved, regularizer = fitted(1.0)
    moved_large, regularizer_large = fitted(10.0)
    assert moved.norm(dim=-1).max() > 0.02, "it moved"
    torch.testing.assert_close(moved_large, 10.0 * moved, rtol=1e-4, atol=1e-5)
    assert regularizer > 0 and regularizer_large == pytest.approx(regularizer, rel=1e-4)
    with pytest.raises(ValueError, match="positive length"):
        ExplicitGeometry(sphere, True, unit=0.0)
    with pytest.raises(ValueError, match="large_steps"):
        ExplicitGeometry(sphere, True, large_steps=10.0, unit=2.0)


def test_the_pull_is_the_weighted_mean_absolute_offset_and_its_gradient_its_sign():
    sphere = uv_sphere(16, 8)
    geometry = ExplicitGeometry(sphere, True, laplace_scale=0.0, along_normals=True, unit=4.0,
                                pull=2.0)
    assert geometry.regularizer(0.5).item() == 0.0
    with torch.no_grad():
        geometry.offset[3] = 0.5
        geometry.offset[7] = -0.25
    count = geometry.offset.numel()
    value = geometry.regularizer(0.9)  # the pass's progress does not weaken it
    assert value.item() == pytest.approx(2.0 * 0.75 / count)
    value.backward()
    expected = torch.zeros_like(geometry.offset)
    expected[3], expected[7] = 2.0 / count, -2.0 / count
    torch.testing.assert_close(geometry.offset.grad, expected)
    with pytest.raises(ValueError, match="at least 0"):
        ExplicitGeometry(sphere, True, pull=-1.0)
    with pytest.raises(ValueError, match="large_steps"):
        ExplicitGeometry(sphere, True, large_steps=10.0, pull=1.0)


def _walked(pull: float, push: float, steps: int = 200) -> torch.Tensor:
    """How far (in the unit) each vertex of a sphere ends from its start after Adam on a data
    term that pushes vertex 0 outwards with strength ``push`` and every vertex by small noise
    (what a view that barely sees it gives), plus the pull of ``pull``."""
    sphere = uv_sphere(16, 8)
    geometry = ExplicitGeometry(sphere, True, laplace_scale=0.0, along_normals=True, pull=pull)
    optimizer = Adam(geometry.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    count = geometry.offset.numel()
    for _ in range(steps):
        noise = 1e-3 * torch.randn(geometry.offset.shape, generator=generator) / count
        data = -(geometry.offset * noise).sum() - push * geometry.offset[0, 0] / count
        optimizer.zero_grad()
        (data + geometry.regularizer(0.5)).backward()
        optimizer.step()
    return geometry.offset.detach()[:, 0].abs()


def test_under_adam_noise_moves_no_vertex_and_a_strong_push_still_moves_one():
    free = _walked(0.0, 0.0)
    assert free.mean() > 0.05, "Adam walks every vertex on noise alone"
    held = _walked(1.0, 0.0)
    assert held.max() < 0.02, held.max()
    pushed = _walked(1.0, 5.0)
    assert pushed[0] > 0.5 and pushed[1:].max() < 0.02


def test_a_surface_that_vanished_is_a_sentence_naming_the_box_and_mesh_scale():
    """An SDF with no zero crossing (no part of the box inside the object) is the user's
    box to fix, said as such: not a RuntimeError traceback."""
    from diffrec.errors import UserError
    from diffrec.pipeline.geometry_models import IsosurfaceGeometry

    geometry = IsosurfaceGeometry("dmtet", 16, 0.05, (1.0, 0.0, 2.0), "cpu")
    with torch.no_grad():
        geometry.surface.sdf.fill_(1.0)  # outside everywhere
    with pytest.raises(UserError, match=r"box of side 0\.05 around \(1, 0, 2\).*mesh_scale"):
        geometry.mesh()
