"""diffrec.mesh.rays: shadow rays, Embree against the brute-force reference."""

import pytest
import torch

from diffrec.mesh.primitives import cube
from diffrec.mesh.rays import occluded
from diffrec.optional import optional_module

ENGINES = ["brute-force", pytest.param("embree", marks=pytest.mark.skipif(
    optional_module("embreex") is None, reason="the visibility extra (embreex) is not installed"))]


@pytest.mark.parametrize("engine", ENGINES)
def test_rays_from_inside_a_closed_cube_always_hit_and_rays_outside_hit_only_towards_it(engine):
    box = cube()
    directions = torch.randn(200, 3, generator=torch.Generator().manual_seed(1))
    inside = occluded(box.positions, box.triangles, torch.zeros(200, 3), directions,
                      engine=engine)
    assert inside.all()
    origin = torch.tensor([[0.0, 0.0, 3.0]]).expand(4, 3)
    towards = torch.tensor([[0.0, 0.0, -1.0], [0.1, 0.1, -1.0], [0.0, 0.0, 1.0], [1.0, 0, 0]])
    hits = occluded(box.positions, box.triangles, origin, towards, engine=engine)
    assert hits.tolist() == [True, True, False, False]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_triangle_behind_the_origin_does_not_count(engine):
    positions = torch.tensor([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0]])
    triangles = torch.tensor([[0, 1, 2]])
    origins = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    up = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    assert occluded(positions, triangles, origins, up, engine=engine).tolist() == [False, True]


@pytest.mark.skipif(optional_module("embreex") is None, reason="embreex is not installed")
def test_embree_agrees_with_brute_force_on_a_random_soup():
    generator = torch.Generator().manual_seed(0)
    positions = torch.randn(40, 3, generator=generator)
    triangles = torch.randint(0, 40, (60, 3), generator=generator)
    origins = 2 * torch.randn(4000, 3, generator=generator)
    directions = torch.randn(4000, 3, generator=generator)
    embree = occluded(positions, triangles, origins, directions, engine="embree")
    brute = occluded(positions, triangles, origins, directions, engine="brute-force")
    assert 0.05 < embree.float().mean() < 0.95
    assert (embree != brute).sum() <= 2  # float32 against float64 at grazing edges


def test_bad_rays_are_refused_in_one_sentence():
    box = cube()
    with pytest.raises(ValueError, match="must both be"):
        occluded(box.positions, box.triangles, torch.zeros(3, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="engine"):
        occluded(box.positions, box.triangles, torch.zeros(3, 3), torch.ones(3, 3), engine="x")
