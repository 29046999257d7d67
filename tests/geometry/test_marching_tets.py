"""Marching tets: closed oriented manifolds, exact planes, gradients against finite differences."""

import math

import pytest
import torch

from diffrec.geometry.marching_tets import marching_tets
from diffrec.geometry.tetgrid import tet_grid


@pytest.fixture(scope="module")
def grid24():
    return tet_grid(24, use_cache=False)


def _areas(vertices, triangles):
    v = vertices.double()[triangles]
    return 0.5 * torch.linalg.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0], dim=-1).norm(dim=-1)


def _directed_edges(triangles):
    t = triangles.tolist()
    return {(a, b) for tri in t for a, b in ((tri[0], tri[1]), (tri[1], tri[2]), (tri[2], tri[0]))}


def test_sphere_is_a_closed_outward_sphere(grid24, mesh_checks):
    assert_closed_oriented_manifold, signed_volume = mesh_checks
    radius = 0.3
    sdf = grid24.vertices.double().norm(dim=1).float() - radius
    vertices, triangles = marching_tets(grid24.vertices, sdf, grid24.tets)
    assert vertices.dtype == torch.float32 and triangles.dtype == torch.int64
    assert assert_closed_oriented_manifold(vertices, triangles) == 2  # Euler characteristic
    # |x| is convex, so its chord overestimates it: vertices lie inside the sphere, at most
    # cell^2 / (4 r) below it (chord sag L^2 / (8 r) over edges L <= cell, slope >= 1/2).
    cell = grid24.cell_size
    distance = vertices.double().norm(dim=1) - radius
    assert distance.max() <= 1e-6 and distance.min() >= -cell**2 / (4 * radius)
    centroids = vertices[triangles].mean(1)
    normals = torch.linalg.cross(vertices[triangles[:, 1]] - vertices[triangles[:, 0]],
                                 vertices[triangles[:, 2]] - vertices[triangles[:, 0]], dim=-1)
    assert bool(((normals * centroids).sum(1) > 0).all()), "a triangle faces inwards"
    ratio = signed_volume(vertices, triangles) / (4 / 3 * math.pi * radius**3)
    assert 0.97 < ratio <= 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_fields_give_closed_oriented_manifolds(seed, mesh_checks):
    """All 16 sign cases and both quad splits occur; the result must still be a closed,
    consistently oriented 2-manifold (the grid's boundary vertices are kept outside)."""
    grid = tet_grid(8, use_cache=False)
    gen = torch.Generator().manual_seed(seed)
    sdf = torch.randn(len(grid.vertices), generator=gen)
    sdf[(grid.vertices.abs() == 0.5).any(1)] = 1.0
    vertices, triangles = marching_tets(grid.vertices, sdf, grid.tets)
    assert len(triangles) > 100
    assert_closed_oriented_manifold, signed_volume = mesh_checks
    assert assert_closed_oriented_manifold(vertices, triangles) % 2 == 0
    # Signed volume equals the inside volume of the piecewise-linear field, which is positive.
    assert signed_volume(vertices, triangles) > 0


@pytest.mark.parametrize("offset", [0.0, 0.123])
def test_plane_gives_the_flat_cross_section(grid24, offset):
    """sdf = n.x - offset; offset 0 puts the plane through grid vertices (exact zeros)."""
    normal = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    normal /= normal.norm()
    sdf = (grid24.vertices.double() @ normal - offset).float()
    vertices, triangles = marching_tets(grid24.vertices, sdf, grid24.tets)
    assert bool(((vertices.double() @ normal - offset).abs() < 1e-6).all())
    tri_normals = torch.linalg.cross(vertices[triangles[:, 1]] - vertices[triangles[:, 0]],
                                     vertices[triangles[:, 2]] - vertices[triangles[:, 0]],
                                     dim=-1).double()
    cosines = tri_normals @ normal / tri_normals.norm(dim=1)
    assert cosines.min() > 1 - 1e-4  # flat, facing +n (the positive side)
    # Cross-section of the unit cube by z = (offset*|n| - 0.3 y)/1 (cuts only the y and x
    # walls): its area is 1 / n_z.
    assert math.isclose(float(_areas(vertices, triangles).sum()), 1 / float(normal[2]),
                        rel_tol=1e-5)
    directed = _directed_edges(triangles)
    assert len(directed) == 3 * len(triangles)  # no edge twice in the same direction
    for a, b in directed:
        if (b, a) not in directed:  # a boundary edge: on the cube's surface
            ends = vertices[[a, b]].abs()
            assert bool(((ends >= 0.5 - 1e-6).all(0)).any())


def test_gradients_match_finite_differences():
    """float64 autograd against central differences w.r.t. grid positions and SDF values:
    a random linear loss input by input, the whole output along random directions."""
    grid = tet_grid(6, use_cache=False)
    gen = torch.Generator().manual_seed(3)
    noise = torch.randn(len(grid.vertices), 4, generator=gen, dtype=torch.float64)
    positions = grid.vertices.double() + 0.02 * noise[:, :3]
    sdf = positions.norm(dim=1) - 0.31 + 0.03 * noise[:, 3]
    assert sdf.abs().min() > 1e-4  # finite differences must not flip a sign
    positions.requires_grad_(True)
    sdf.requires_grad_(True)

    def surface(p, s):
        return marching_tets(p, s, grid.tets)[0]

    weights = torch.randn(surface(positions, sdf).shape, generator=gen, dtype=torch.float64)
    assert len(weights) > 50
    assert torch.autograd.gradcheck(lambda p, s: (surface(p, s) * weights).sum(),
                                    (positions, sdf), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(surface, (positions, sdf), eps=1e-6, atol=1e-6,
                                    fast_mode=True)


def test_no_sign_change_gives_an_empty_mesh(grid24):
    for value in (1.0, -1.0):
        vertices, triangles = marching_tets(grid24.vertices,
                                            torch.full((len(grid24.vertices),), value),
                                            grid24.tets)
        assert vertices.shape == (0, 3) and triangles.shape == (0, 3)


def test_bad_inputs_are_rejected(grid24):
    v, t = grid24.vertices, grid24.tets
    sdf = v.norm(dim=1) - 0.3
    with pytest.raises(ValueError, match="finite"):
        marching_tets(v, torch.where(sdf > 0.4, torch.nan, sdf), t)
    with pytest.raises(ValueError, match="sdf"):
        marching_tets(v, sdf[:-1], t)
    with pytest.raises(ValueError, match="tets"):
        marching_tets(v, sdf, t.float())
    with pytest.raises(ValueError, match="tet indices"):
        marching_tets(v[:10], sdf[:10], t)


@pytest.mark.gpu
def test_cuda_extraction_matches_cpu(grid24):
    sdf = grid24.vertices.norm(dim=1) - 0.3
    cpu = marching_tets(grid24.vertices, sdf, grid24.tets)
    cuda = marching_tets(grid24.vertices.cuda(), sdf.cuda(), grid24.tets.cuda())
    assert torch.equal(cpu[1], cuda[1].cpu())
    assert torch.allclose(cpu[0], cuda[0].cpu(), atol=1e-6)
