"""DMTet: initial sphere, bounded deformation, SDF regulariser and its weight schedule."""

import math

import pytest
import torch

from diffrec.geometry.dmtet import DMTetGeometry, sdf_regularizer_weight, sdf_sign_change_loss
from diffrec.geometry.tetgrid import tet_grid


@pytest.fixture
def geometry(tmp_path):
    return DMTetGeometry(16, 2.0, generator=torch.Generator().manual_seed(0), cache_dir=tmp_path)


def test_initial_surface_is_the_noisy_sphere(geometry):
    vertices, triangles = geometry.extract()
    radius = 0.25 * 2.0
    noise_bound = 5 * 0.05 * 2.0 / 16  # 5 standard deviations of the noise
    cell = 2 * 2.0 / 16
    distance = vertices.norm(dim=1) - radius
    assert distance.abs().max() < noise_bound + cell**2 / (4 * radius)
    v = vertices.detach().double()[triangles]
    volume = float((v[:, 0] * torch.linalg.cross(v[:, 1], v[:, 2], dim=-1)).sum() / 6)
    assert volume == pytest.approx(4 / 3 * math.pi * radius**3, rel=0.08)
    edges = triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2).sort(1).values
    _, counts = torch.unique(edges, dim=0, return_counts=True)
    assert bool((counts == 2).all())  # closed
    assert len(vertices) - len(counts) + len(triangles) == 2  # one sphere, no floaters


def test_same_generator_same_field_and_state_dict_holds_only_parameters(tmp_path):
    make = lambda: DMTetGeometry(8, 1.5, generator=torch.Generator().manual_seed(7),  # noqa: E731
                                 cache_dir=tmp_path)
    a, b = make(), make()
    assert torch.equal(a.sdf, b.sdf)
    assert sorted(a.state_dict()) == ["deform", "sdf"]
    with torch.no_grad():
        a.sdf.add_(0.01 * torch.randn_like(a.sdf))
        a.deform.normal_()
    b.load_state_dict(a.state_dict())
    for x, y in zip(a.extract(), b.extract(), strict=True):
        assert torch.equal(x, y)


def test_deformation_is_bounded_and_gradients_reach_both_parameters(geometry):
    with torch.no_grad():
        geometry.deform.normal_(std=100.0)
    moved = (geometry.deformed_vertices() - geometry.grid_vertices).abs()
    bound = 0.25 * (2 / 16) * 2.0
    assert geometry.max_deformation == pytest.approx(bound)
    assert moved.max() <= bound and moved.max() > 0.9 * bound
    with torch.no_grad():
        geometry.deform.normal_(std=0.3)
    vertices, _ = geometry.extract()
    (vertices.sum() + geometry.sdf_regularizer()).backward()
    assert geometry.sdf.grad.abs().sum() > 0 and geometry.deform.grad.abs().sum() > 0


def test_regularizer_known_value():
    sdf = torch.tensor([-1.0, 2.0, 3.0], dtype=torch.float64)
    edges = torch.tensor([[0, 1], [1, 2]])
    # Only edge (0, 1) changes sign: BCE(sigmoid(-1), 1) and BCE(sigmoid(2), 0).
    expected = (math.log1p(math.e) + math.log1p(math.e**2)) / 2
    assert float(sdf_sign_change_loss(sdf, edges)) == pytest.approx(expected, rel=1e-12)


def test_regularizer_is_zero_without_sign_change_and_positive_with(geometry):
    edges = geometry.edges
    for field in (torch.rand(len(geometry.sdf)) + 0.1, -torch.rand(len(geometry.sdf)) - 0.1):
        field.requires_grad_(True)
        loss = sdf_sign_change_loss(field, edges)
        assert float(loss.detach()) == 0.0
        loss.backward()
        assert float(field.grad.abs().sum()) == 0.0
    assert float(geometry.sdf_regularizer().detach()) > 0


def test_regularizer_gradient_matches_finite_differences():
    edges = tet_grid(4, use_cache=False).edges
    gen = torch.Generator().manual_seed(1)
    sdf = torch.randn(int(edges.max()) + 1, generator=gen, dtype=torch.float64)
    sdf = (sdf + 0.05 * sdf.sign()).requires_grad_(True)  # keep clear of zero
    assert torch.autograd.gradcheck(lambda s: sdf_sign_change_loss(s, edges), (sdf,),
                                    eps=1e-6, atol=1e-8)


def test_regularizer_weight_schedule():
    assert sdf_regularizer_weight(0, 1000) == pytest.approx(0.2)
    assert sdf_regularizer_weight(125, 1000) == pytest.approx(0.105)  # halfway down
    assert sdf_regularizer_weight(250, 1000) == pytest.approx(0.01)
    assert sdf_regularizer_weight(999, 1000) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="total_iterations"):
        sdf_regularizer_weight(0, 0)


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="scale"):
        DMTetGeometry(8, 0.0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="resolution"):
        DMTetGeometry(7, 1.0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="sdf"):
        sdf_sign_change_loss(torch.zeros(3, 1), torch.zeros(1, 2, dtype=torch.int64))


def test_gradient_descent_moves_the_surface_to_a_target_sphere(geometry):
    """SDF values and deformations trained through extraction: the surface moves beyond its
    initial cells (signs flip) and ends up a closed sphere of the target radius."""
    target = 0.65  # initial radius 0.5; cells are 0.25
    optimizer = torch.optim.Adam(geometry.parameters(), lr=0.01)
    errors = []
    for iteration in range(40):
        vertices, _ = geometry.extract()
        error = vertices.norm(dim=1) - target
        errors.append(float(error.detach().abs().mean()))
        weight = sdf_regularizer_weight(iteration, 40)
        loss = (error**2).mean() + weight * geometry.sdf_regularizer()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    vertices, triangles = geometry.extract()
    assert errors[0] > 0.14 and errors[-1] < errors[0] / 10
    edges = triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2).sort(1).values
    _, counts = torch.unique(edges, dim=0, return_counts=True)
    assert bool((counts == 2).all())
    assert len(vertices) - len(counts) + len(triangles) == 2
