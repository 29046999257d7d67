"""The visual hull that pass 1 starts from: masks rendered by diffrec's rasterizer from a
torus (genus 1) seen from around and above, then points tested against it."""

import math

import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.mesh import Mesh
from diffrec.pipeline.visual_hull import UNSEEN, hull_distance, signed_pixel_distance

SIZE = 64


def torus(major=0.6, minor=0.2, rings=48, sides=16) -> Mesh:
    """A torus around +Z (the cameras' up axis), hole along Z."""
    u = torch.arange(rings) * 2 * math.pi / rings
    v = torch.arange(sides) * 2 * math.pi / sides
    uu, vv = torch.meshgrid(u, v, indexing="ij")
    radius = major + minor * torch.cos(vv)
    points = torch.stack([radius * torch.cos(uu), radius * torch.sin(uu), minor * torch.sin(vv)],
                         -1).reshape(-1, 3)
    i, j = torch.meshgrid(torch.arange(rings), torch.arange(sides), indexing="ij")
    a, b = i * sides + j, ((i + 1) % rings) * sides + j
    c, d = ((i + 1) % rings) * sides + (j + 1) % sides, i * sides + (j + 1) % sides
    triangles = torch.cat([torch.stack([a, b, c], -1), torch.stack([a, c, d], -1)]).reshape(-1, 3)
    return Mesh(points.float(), triangles.int())


def masks(mesh: Mesh, cameras) -> torch.Tensor:
    """Alpha ``[N, H, W]``, rows top-down as the renderer (and every image) has them."""
    ctx = raster.RasterContext("cpu", impl="torch")
    homogeneous = torch.cat([mesh.positions, torch.ones(len(mesh.positions), 1)], -1)
    clip = (homogeneous @ cameras.world_to_clip().transpose(1, 2)).contiguous()
    rast, _ = raster.rasterize(ctx, clip, mesh.triangles.int(), (SIZE, SIZE))
    return (rast[..., 3] > 0).float().flip(1)


def test_the_hull_keeps_the_object_and_opens_its_hole():
    mesh = torus()
    cameras = orbit_cameras(24, 3.0, SIZE, seed=1, elevations_degrees=(-20, 80))
    alpha = masks(mesh, cameras)
    inside_tube = torch.tensor([[0.6, 0.0, 0.0], [0.0, -0.6, 0.05], [-0.45, 0.45, 0.0]])
    hole = torch.tensor([[0.0, 0.0, 0.0], [0.1, -0.1, 0.0]])
    around = torch.tensor([[0.0, 0.0, 0.6], [1.0, 0.0, 0.0], [0.6, 0.0, 0.4]])
    unseen = torch.tensor([[40.0, 0.0, 0.0]])  # in no image: no evidence of the object
    distance = hull_distance(torch.cat([inside_tube, hole, around, unseen]), cameras, alpha)
    assert (distance > 0).tolist() == [False] * 3 + [True] * 2 + [True] * 3 + [True]
    assert distance[-1] == UNSEEN


def test_a_flipped_mask_carves_the_object_away():
    """The rows' direction matters: with the masks upside down the tube (raised above the
    cameras' target, so it sits in the upper half of every image) is carved."""
    lift = torch.tensor([0.0, 0.0, 0.5])
    raised = torus()
    mesh = Mesh(raised.positions + lift, raised.triangles)
    cameras = orbit_cameras(24, 3.0, SIZE, seed=1, elevations_degrees=(-10, 30))
    alpha = masks(mesh, cameras)
    points = torch.tensor([[0.6, 0.0, 0.0], [-0.6, 0.0, 0.0], [0.0, 0.6, 0.0]]) + lift
    assert (hull_distance(points, cameras, alpha) < 0).all()
    assert (hull_distance(points, cameras, alpha.flip(1)) > 0).any()


def test_the_distance_is_the_distance_to_the_silhouette_near_the_outline():
    """Off the torus's outer equator, radially, the hull's boundary is the torus itself
    (every view's silhouette touches it there): the signed distance must match the offset to
    a fraction of a pixel (a pixel spans about 0.05 here), inside and out, and grow with it."""
    mesh = torus(rings=96, sides=32)
    cameras = orbit_cameras(24, 3.0, SIZE, seed=1, elevations_degrees=(-20, 80))
    alpha = masks(mesh, cameras)
    offsets = torch.tensor([-0.08, -0.04, 0.0, 0.04, 0.08, 0.16])
    angles = torch.tensor([0.3, 1.9, 4.1])
    radius = 0.8 + offsets[:, None]
    points = torch.stack([radius * torch.cos(angles), radius * torch.sin(angles),
                          torch.zeros(len(offsets), len(angles))], -1).reshape(-1, 3)
    distance = hull_distance(points, cameras, alpha).reshape(len(offsets), len(angles))
    pixel = 3.0 / cameras.fx[0].item()  # world units a pixel spans at the object's distance
    assert (distance - offsets[:, None]).abs().max() < 0.6 * pixel
    assert (distance.diff(dim=0) > 0).all()


def test_the_pixel_distance_follows_antialiased_edges():
    """A vertical edge 10.3 pixels from the left: pixels left of it covered (alpha 1), the
    edge pixel covered 0.3, the rest empty: each pixel centre's signed distance to x = 10.3,
    and +-0.5 at a hard edge (no coverage between) beside it, on every row."""
    alpha = torch.zeros(1, 8, 24)
    alpha[..., :10] = 1.0
    alpha[..., 10] = 0.3
    alpha[..., 20:] = 1.0  # and a hard edge at x = 20
    distance = signed_pixel_distance(alpha)[0]
    columns = [7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21]  # 15: as near either edge
    expected = torch.tensor([-2.8, -1.8, -0.8, 0.2, 1.2, 2.2, 3.2, 4.2,
                             3.5, 2.5, 1.5, 0.5, -0.5, -1.5])
    assert torch.allclose(distance[:, columns], expected.expand(8, -1), atol=1e-5)
