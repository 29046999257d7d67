"""FlexiCubes: closed oriented manifolds (also on random fields), weights, gradients."""

import itertools
import math

import pytest
import torch

from diffrec.geometry import flexicubes as fc
from diffrec.geometry.dmtet import sdf_regularizer_weight
from diffrec.geometry.flexicubes import (
    FlexiCubesGeometry,
    cube_grid_edges,
    cube_grid_vertices,
    flexicubes,
)


def _unit_weights(n, dtype=torch.float32):
    return (torch.ones(n**3, 8, dtype=dtype), torch.ones(n**3, 12, dtype=dtype),
            torch.ones(n**3, dtype=dtype))


def _random_weights(n, gen, dtype=torch.float32):
    return tuple(0.5 + torch.rand(shape, generator=gen, dtype=dtype)
                 for shape in ((n**3, 8), (n**3, 12), (n**3,)))


@pytest.mark.parametrize("training", [False, True])
def test_sphere_is_a_closed_outward_sphere(training, mesh_checks):
    assert_closed_oriented_manifold, signed_volume = mesh_checks
    n, radius = 16, 0.3
    grid = cube_grid_vertices(n)
    vertices, triangles = flexicubes(grid, grid.norm(dim=1) - radius, n, *_unit_weights(n),
                                     training=training)
    assert assert_closed_oriented_manifold(vertices, triangles) == 2
    # Dual (and centre) vertices are convex combinations of crossings inside the ball: they
    # lie inside it, no deeper than the sag of a chord across two cube diagonals.
    distance = vertices.double().norm(dim=1) - radius
    sag = (2 * math.sqrt(3) / n) ** 2 / (8 * radius)
    assert distance.max() <= 1e-6 and distance.min() >= -sag
    centroids = vertices[triangles].mean(1)
    normals = torch.linalg.cross(vertices[triangles[:, 1]] - vertices[triangles[:, 0]],
                                 vertices[triangles[:, 2]] - vertices[triangles[:, 0]], dim=-1)
    assert bool(((normals * centroids).sum(1) > 0).all()), "a triangle faces inwards"
    ratio = signed_volume(vertices, triangles) / (4 / 3 * math.pi * radius**3)
    assert 0.9 < ratio <= 1.0


@pytest.mark.parametrize("training", [False, True])
def test_random_fields_and_weights_give_closed_oriented_manifolds(training, mesh_checks):
    """Random signs make every ambiguous face configuration; without the face flips about
    four in ten of these fields give edges shared by four triangles."""
    assert_closed_oriented_manifold, _ = mesh_checks
    n = 6
    grid = cube_grid_vertices(n)
    boundary = (grid.abs() == 0.5).any(1)
    for seed in range(12):
        gen = torch.Generator().manual_seed(seed)
        sdf = torch.randn(len(grid), generator=gen)
        sdf[boundary] = 1.0
        vertices, triangles = flexicubes(grid, sdf, n, *_random_weights(n, gen),
                                         training=training)
        assert assert_closed_oriented_manifold(vertices, triangles) % 2 == 0


def test_generated_patches_match_marching_cubes_counts():
    """Independent facts about the 256 sign configurations with unflipped faces: the number
    of crossed edges is the number of cube edges with different signs at their ends, and a
    configuration with a single inside (or outside) corner has one patch of three edges."""
    patch_table, _ = fc._tables()
    assert patch_table.max() < fc.MAX_PATCHES  # also with flipped faces
    for config in range(256):
        inside = [config >> c & 1 for c in range(8)]
        crossed = sum(inside[a] != inside[b] for a, b in fc.CUBE_EDGES)
        patches = patch_table[config, 0]
        assert (patches >= 0).sum() == crossed
        if sum(inside) in (1, 7):
            assert sorted(patches.tolist()) == [-1] * 9 + [0] * 3
        # Each patch is a loop of at least three crossed edges.
        ids = patches[patches >= 0]
        assert all((ids == p).sum() >= 3 for p in set(ids.tolist()))
    # Two diagonal corners of one face inside: two separate triangles (not one quad).
    assert patch_table[0b1001, 0].max() == 1


def test_plane_is_flat_and_faces_the_positive_side():
    n = 12
    grid = cube_grid_vertices(n)
    normal = torch.tensor([0.2, -0.3, 1.0]) / math.sqrt(1.13)
    vertices, triangles = flexicubes(grid, grid @ normal - 0.05, n, *_unit_weights(n))
    assert bool(((vertices @ normal - 0.05).abs() < 1e-6).all())
    tri_normals = torch.linalg.cross(vertices[triangles[:, 1]] - vertices[triangles[:, 0]],
                                     vertices[triangles[:, 2]] - vertices[triangles[:, 0]],
                                     dim=-1)
    assert (tri_normals @ normal / tri_normals.norm(dim=1)).min() > 1 - 1e-4


@pytest.mark.parametrize("training", [False, True])
def test_weights_place_vertices_as_the_paper_defines(training, mesh_checks):
    """Grid 2^3 with only the centre vertex inside: each of the 8 cubes has one patch of three
    crossings; its dual vertex is their beta-weighted mean, with alpha-weighted crossings.
    In training, each quad's centre is the gamma-weighted mean of its diagonals' midpoints."""
    assert_closed_oriented_manifold, _ = mesh_checks
    gen = torch.Generator().manual_seed(2)
    grid = cube_grid_vertices(2).double()
    centre = 13  # lattice (1, 1, 1)
    sdf = 0.5 + torch.rand(27, generator=gen, dtype=torch.float64)
    sdf[centre] = -0.7
    alpha, beta, gamma = _random_weights(2, gen, torch.float64)
    vertices, triangles = flexicubes(grid, sdf, 2, alpha, beta, gamma, training=training)
    assert assert_closed_oriented_manifold(vertices, triangles) == 2
    assert len(triangles) == (24 if training else 12)

    def lattice_index(i, j, k):
        return (i * 3 + j) * 3 + k

    expected = {}
    for i, j, k in itertools.product(range(2), repeat=3):
        cube = (i * 2 + j) * 2 + k
        inner = (1 - i) | (1 - j) << 1 | (1 - k) << 2  # the cube's corner at the centre
        total, weight = 0, 0
        for axis in range(3):
            other = inner ^ 1 << axis
            o = lattice_index(i + (other & 1), j + (other >> 1 & 1), k + (other >> 2 & 1))
            s_in, s_out = sdf[centre] * alpha[cube, inner], sdf[o] * alpha[cube, other]
            crossing = (s_in * grid[o] - s_out * grid[centre]) / (s_in - s_out)
            b = beta[cube, fc.CUBE_EDGES.index(tuple(sorted((inner, other))))]
            total, weight = total + b * crossing, weight + b
        expected[(i, j, k)] = (total / weight, gamma[cube])

    # Dual vertices are in three quads (six triangles in training), quad centres in four.
    incidence = torch.bincount(triangles.reshape(-1), minlength=len(vertices))
    dual = [n for n in range(len(vertices)) if not training or incidence[n] == 6]
    octant = {tuple((vertices[n] > 0).long().tolist()): n for n in dual}
    assert sorted(octant) == sorted(expected)
    for key, (position, _) in expected.items():
        assert torch.allclose(vertices[octant[key]], position, atol=1e-12)
    if not training:
        return
    # Centre vertices: the extra six, each surrounded by its quad's four dual vertices.
    cube_of = {n: expected[key][1] for key, n in octant.items()}
    for c in set(range(len(vertices))) - set(octant.values()):
        ring = {int(t[0]): int(t[1]) for t in triangles if int(t[2]) == c}
        q = [next(iter(ring))]
        while len(q) < 4:
            q.append(ring[q[-1]])
        v, g = [vertices[x] for x in q], [cube_of[x] for x in q]
        w02, w13 = g[0] * g[2], g[1] * g[3]
        mid = (w02 * (v[0] + v[2]) / 2 + w13 * (v[1] + v[3]) / 2) / (w02 + w13)
        assert torch.allclose(vertices[c], mid, atol=1e-12)


def test_gradients_match_finite_differences():
    n = 3
    gen = torch.Generator().manual_seed(5)
    grid = cube_grid_vertices(n).double()
    grid = grid + 0.03 * torch.randn(grid.shape, generator=gen, dtype=torch.float64)
    sdf = grid.norm(dim=1) - 0.3 + 0.05 * torch.randn(len(grid), generator=gen,
                                                       dtype=torch.float64)
    assert sdf.abs().min() > 1e-4
    weights = _random_weights(n, gen, torch.float64)
    inputs = [t.clone().requires_grad_(True) for t in (grid, sdf, *weights)]
    for training in (False, True):
        def surface(v, s, a, b, g, training=training):
            return flexicubes(v, s, n, a, b, g, training=training)[0]

        assert len(surface(*inputs)) > 8
        # Every input along random directions ...
        assert torch.autograd.gradcheck(surface, inputs, eps=1e-6, atol=1e-6, fast_mode=True)
        # ... and input by input for SDF values and split weights, through a linear loss.
        w = torch.randn(surface(*inputs).shape, generator=gen, dtype=torch.float64)
        assert torch.autograd.gradcheck(
            lambda s, g, surface=surface, w=w: (
                surface(inputs[0], s, inputs[2], inputs[3], g) * w).sum(),
            (inputs[1], inputs[4]), eps=1e-6, atol=1e-6)


def test_bad_inputs_are_rejected():
    n = 2
    grid = cube_grid_vertices(n)
    sdf = grid.norm(dim=1) - 0.3
    alpha, beta, gamma = _unit_weights(n)
    with pytest.raises(ValueError, match="positive"):
        flexicubes(grid, sdf, n, alpha, beta, gamma * 0)
    with pytest.raises(ValueError, match="beta"):
        flexicubes(grid, sdf, n, alpha, beta[:, :8], gamma)
    with pytest.raises(ValueError, match="finite"):
        flexicubes(grid, sdf * torch.nan, n, alpha, beta, gamma)
    with pytest.raises(ValueError, match="resolution"):
        cube_grid_vertices(0)


def test_geometry_module_trains_all_parameters_and_switches_split(mesh_checks):
    assert_closed_oriented_manifold, _ = mesh_checks
    geometry = FlexiCubesGeometry(8, 2.0, generator=torch.Generator().manual_seed(0))
    assert len(geometry.edges) == 3 * 8 * 9**2 == len(cube_grid_edges(8))
    assert sorted(geometry.state_dict()) == ["alpha_raw", "beta_raw", "deform", "gamma_raw",
                                             "sdf"]
    vertices, triangles = geometry.extract()  # training mode: four-triangle split
    assert assert_closed_oriented_manifold(vertices, triangles) == 2
    (vertices.square().sum() + geometry.sdf_regularizer()).backward()
    for name, parameter in geometry.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    geometry.eval()
    vertices_eval, triangles_eval = geometry.extract()
    assert len(triangles_eval) == len(triangles) // 2
    assert assert_closed_oriented_manifold(vertices_eval, triangles_eval) == 2


def test_gradient_descent_moves_the_surface_to_a_target_sphere(mesh_checks):
    assert_closed_oriented_manifold, _ = mesh_checks
    geometry = FlexiCubesGeometry(8, 2.0, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(geometry.parameters(), lr=0.01)
    target = 0.65  # initial radius 0.5; cells are 0.25
    for iteration in range(40):
        vertices, _ = geometry.extract()
        error = vertices.norm(dim=1) - target
        if iteration == 0:
            initial = float(error.detach().abs().mean())
        weight = sdf_regularizer_weight(iteration, 40)
        loss = (error**2).mean() + weight * geometry.sdf_regularizer()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    geometry.eval()
    vertices, triangles = geometry.extract()
    assert initial > 0.15
    assert float((vertices.norm(dim=1) - target).detach().abs().mean()) < initial / 8
    assert assert_closed_oriented_manifold(vertices, triangles) == 2


@pytest.mark.gpu
def test_cuda_extraction_matches_cpu():
    n = 16
    grid = cube_grid_vertices(n)
    gen = torch.Generator().manual_seed(0)
    inputs = (grid, grid.norm(dim=1) - 0.3, *_random_weights(n, gen))
    for training in (False, True):
        cpu = flexicubes(*inputs[:2], n, *inputs[2:], training=training)
        cuda = flexicubes(*(t.cuda() for t in inputs[:2]), n, *(t.cuda() for t in inputs[2:]),
                          training=training)
        assert torch.equal(cpu[1], cuda[1].cpu())
        assert torch.allclose(cpu[0], cuda[0].cpu(), atol=1e-6)
