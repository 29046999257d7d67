"""diffrec.pipeline.shadows: when the self-shadowing table is cast again, and how it follows a
mesh whose vertices change."""

import pytest
import torch

from diffrec.pipeline import shadows
from diffrec.pipeline.shadows import VisibilityCache, nearest_rows


@pytest.fixture
def casts(monkeypatch):
    """Stands in for the ray caster: each cast returns the vertex's x coordinate in every
    column, and is counted."""
    made = []

    def cast(positions, triangles):
        made.append(len(positions))
        return positions[:, :1].expand(-1, 6).clone()

    monkeypatch.setattr(shadows, "vertex_visibility", cast)
    return made


def test_nearest_rows_follow_the_nearest_source_point():
    generator = torch.Generator().manual_seed(0)
    sources = torch.rand(50, 3, generator=generator)
    targets = torch.rand(30, 3, generator=generator)
    table = torch.arange(50.0)[:, None].expand(-1, 4)
    expected = [min(range(50), key=lambda i: float((sources[i] - t).norm())) for t in targets]
    assert nearest_rows(table, sources, targets)[:, 0].tolist() == expected


def test_a_fixed_mesh_is_cast_once(casts):
    cache = VisibilityCache(refresh_every=10)
    positions, triangles = torch.rand(20, 3), torch.zeros(1, 3, dtype=torch.long)
    for iteration in range(40):
        table = cache.table(positions, triangles, iteration, moving=False)
    assert casts == [20]
    assert torch.equal(table[:, 0], positions[:, 0])


def test_a_moving_mesh_is_recast_every_n_iterations_and_carried_in_between(casts):
    cache = VisibilityCache(refresh_every=10)
    triangles = torch.zeros(1, 3, dtype=torch.long)
    start = torch.rand(20, 3, generator=torch.Generator().manual_seed(1))
    for iteration in range(25):
        moved = start + 1e-4 * iteration
        table = cache.table(moved, triangles, iteration, moving=True)
    assert casts == [20, 20, 20]  # at iterations 0, 10 and 20
    cast_at_20 = start + 20e-4
    assert torch.equal(table[:, 0], cast_at_20[:, 0]), "each vertex keeps its own row"
    fewer = cache.table(start[:5] + 24e-4, triangles, 25, moving=True)
    assert torch.equal(fewer[:, 0], cast_at_20[:5, 0])


def test_refresh_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        VisibilityCache(0)


def test_a_materials_run_casts_once_for_training_and_once_for_validation(tmp_path, monkeypatch):
    """On a convex sphere nothing is shadowed: the run with self-shadowing scores as the run
    without it, and the rays were cast for the fixed mesh once, plus once for validation."""
    from running import config, optimize_into, scene, sky

    from diffrec.mesh.primitives import uv_sphere
    from diffrec.pipeline import scoring
    from diffrec.pipeline.inputs import Inputs

    counted = []

    def counting(original):
        def cast(positions, triangles):
            counted.append(len(positions))
            return original(positions, triangles, engine="brute-force")
        return cast

    monkeypatch.setattr(shadows, "vertex_visibility", counting(shadows.vertex_visibility))
    monkeypatch.setattr(scoring, "vertex_visibility", counting(scoring.vertex_visibility))
    mesh = uv_sphere(16, 8)
    inputs = Inputs(scene(mesh, 8, seed=1), scene(mesh, 2, seed=2), mesh, sky())
    scores = {}
    for on in (False, True):
        metrics = optimize_into(config(tmp_path / str(on), mode="materials", iterations=10,
                                       self_shadowing=on), inputs)
        scores[on] = metrics["psnr_mean"]
    assert counted == [len(mesh.positions)] * 2
    assert scores[True] == pytest.approx(scores[False], abs=0.3)
