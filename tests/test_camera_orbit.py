"""look_at and orbit_cameras: cameras really look at their target, with +Z up."""

import math

import pytest
import torch

from diffrec.camera import look_at, orbit_cameras


def test_look_at_points_minus_z_at_the_target_with_z_up():
    eye = torch.tensor([[3.0, -4.0, 2.0]], dtype=torch.float64)
    c2w = look_at(eye, (0.0, 0.0, 0.5))[0]
    forward = -c2w[:3, 2]
    expected = torch.tensor([-3.0, 4.0, -1.5], dtype=torch.float64)
    assert torch.allclose(forward, expected / expected.norm())
    assert c2w[2, 1] > 0, "camera +Y leans towards world +Z"
    assert abs(c2w[2, 0]) < 1e-12, "camera +X stays horizontal"
    assert torch.allclose(c2w[:3, :3].T @ c2w[:3, :3], torch.eye(3, dtype=torch.float64))
    assert torch.det(c2w[:3, :3]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="parallel"):
        look_at([[0.0, 0.0, 5.0]], (0.0, 0.0, 0.0))


@pytest.mark.parametrize("seed", [None, 7])
def test_orbit_cameras_project_the_target_to_the_image_centre(seed):
    cams = orbit_cameras(6, radius=3.0, size=64, seed=seed, elevations_degrees=(-20, 40))
    centre = torch.tensor([0.0, 0.0, 0.0, 1.0])
    clip = cams.world_to_clip() @ centre
    ndc = clip[:, :2] / clip[:, 3:]
    assert torch.allclose(ndc, torch.zeros_like(ndc), atol=1e-6)
    assert torch.allclose(cams.centers().norm(dim=-1), torch.tensor(3.0), atol=1e-5)
    elevation = torch.rad2deg(torch.asin(cams.centers()[:, 2] / 3.0))
    assert (elevation >= -20 - 1e-3).all() and (elevation <= 40 + 1e-3).all()
    # a point one unit "up" in the world lands in the upper half of the image
    up_clip = cams.world_to_clip() @ torch.tensor([0.0, 0.0, 0.5, 1.0])
    assert (up_clip[:, 1] / up_clip[:, 3] > 0).all()
    assert cams.fx[0] == pytest.approx(32 / math.tan(math.radians(20)))
