"""The BCC tet grid: a conforming, positively oriented tessellation of the unit cube."""

import itertools
import math

import numpy as np
import pytest

from diffrec.geometry import tetgrid
from diffrec.geometry.tetgrid import generate_bcc_grid, tet_grid


def _signed_volumes(vertices, tets):
    p = vertices.astype(np.float64)[tets]
    return np.einsum("ti,ti->t", p[:, 1] - p[:, 0],
                     np.cross(p[:, 2] - p[:, 0], p[:, 3] - p[:, 0])) / 6.0


@pytest.fixture(scope="module", params=[2, 8, 12])
def grid(request):
    return request.param, *generate_bcc_grid(request.param)


def test_sizes_match_the_bcc_counts(grid):
    resolution, vertices, tets, _ = grid
    n = resolution // 2
    assert len(vertices) == (n + 1) ** 3 + n**3 + 6 * n**2
    assert len(tets) == 12 * n**3 + 12 * n**2
    assert vertices.dtype == np.float32 and tets.dtype == np.int64


def test_vertices_are_unique_used_and_on_the_lattice(grid):
    resolution, vertices, tets, _ = grid
    assert len(np.unique(vertices, axis=0)) == len(vertices)
    assert np.array_equal(np.unique(tets), np.arange(len(vertices)))
    steps = (vertices.astype(np.float64) + 0.5) * resolution
    assert np.allclose(steps, np.round(steps), atol=1e-4)
    assert steps.min() >= -1e-4 and steps.max() <= resolution + 1e-4


def test_volumes_are_positive_and_fill_the_cube(grid):
    _, vertices, tets, _ = grid
    volumes = _signed_volumes(vertices, tets)
    assert volumes.min() > 0
    assert math.isclose(volumes.sum(), 1.0, rel_tol=1e-9)


def test_faces_are_shared_by_two_tets_except_on_the_cube_surface(grid):
    _, vertices, tets, _ = grid
    owners = {}
    for t, tet in enumerate(tets.tolist()):
        for opposite in range(4):
            face = tuple(sorted(tet[:opposite] + tet[opposite + 1:]))
            owners.setdefault(face, []).append((t, tet[opposite]))
    v = vertices.astype(np.float64)
    boundary_area = 0.0
    for face, tets_of_face in owners.items():
        p = v[list(face)]
        on_surface = any(np.all(np.abs(p[:, axis] - side) < 1e-7)
                         for axis in range(3) for side in (-0.5, 0.5))
        normal = np.cross(p[1] - p[0], p[2] - p[0])
        if len(tets_of_face) == 1:
            assert on_surface, f"boundary face {face} inside the cube"
            boundary_area += 0.5 * np.linalg.norm(normal)
        else:
            assert len(tets_of_face) == 2, f"face {face} shared by {len(tets_of_face)} tets"
            assert not on_surface
            # The two tets lie on opposite sides of their shared face (no overlap).
            sides = [np.dot(normal, v[apex] - p[0]) for _, apex in tets_of_face]
            assert sides[0] * sides[1] < 0
    assert math.isclose(boundary_area, 6.0, rel_tol=1e-9)
    num_faces = len(owners)
    # Euler characteristic of a ball, with the grid's own edge list.
    _, _, _, edges = grid
    assert len(vertices) - len(edges) + num_faces - len(tets) == 1


def test_edges_are_exactly_the_tet_edges(grid):
    _, _, tets, edges = grid
    expected = {tuple(sorted(pair)) for tet in tets.tolist()
                for pair in itertools.combinations(tet, 2)}
    assert edges.dtype == np.int64
    assert [tuple(e) for e in edges.tolist()] == sorted(expected)


def test_interior_tets_are_congruent_bcc_tets():
    vertices, tets, _ = generate_bcc_grid(8)
    cell = 2.0 / 8
    p = vertices.astype(np.float64)[tets]
    lengths = np.stack([np.linalg.norm(p[:, a] - p[:, b], axis=1)
                        for a, b in itertools.combinations(range(4), 2)], 1)
    interior = np.isclose(_signed_volumes(vertices, tets), cell**3 / 12)
    assert interior.sum() == 12 * 4**3 - 12 * 4**2  # 4 per interior face
    assert np.allclose(np.sort(lengths[interior], axis=1),
                       [[cell * math.sqrt(3) / 2] * 4 + [cell] * 2])


def test_cache_round_trip_is_identical_and_skips_generation(tmp_path, monkeypatch):
    first = tet_grid(6, cache_dir=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["bcc_6_v1.npz"]

    def fail(_):
        raise AssertionError("regenerated although cached")

    monkeypatch.setattr(tetgrid, "generate_bcc_grid", fail)
    second = tet_grid(6, cache_dir=tmp_path)
    for a, b in ((first.vertices, second.vertices), (first.tets, second.tets),
                 (first.edges, second.edges)):
        assert a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    assert second.tets.dtype == second.edges.dtype == first.tets.dtype


def test_corrupt_cache_is_regenerated_and_default_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tmp_path / "diffrec" / "tets" / "bcc_4_v1.npz"
    assert tetgrid.default_cache_dir() == path.parent
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an npz")
    grid = tet_grid(4)
    reference = generate_bcc_grid(4)
    assert np.array_equal(grid.tets.numpy(), reference[1])
    assert np.load(path)["vertices"].shape == reference[0].shape
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp files left


@pytest.mark.parametrize("bad", [0, 3, -2, 2.0, True])
def test_bad_resolution_is_rejected(bad):
    with pytest.raises((ValueError, TypeError), match="resolution"):
        generate_bcc_grid(bad)
