"""The visual hull that pass 1 starts from: masks rendered by diffrec's rasterizer from a
torus (genus 1) seen from around and above, then points tested against it."""

import math

import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.mesh import Mesh
from diffrec.pipeline.visual_hull import outside_hull

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
    outside = outside_hull(torch.cat([inside_tube, hole, around, unseen]), cameras, alpha)
    assert outside.tolist() == [False] * 3 + [True] * 2 + [True] * 3 + [True]


def test_a_flipped_mask_carves_the_object_away():
    """The rows' direction matters: with the masks upside down the tube (raised above the
    cameras' target, so it sits in the upper half of every image) is carved."""
    lift = torch.tensor([0.0, 0.0, 0.5])
    raised = torus()
    mesh = Mesh(raised.positions + lift, raised.triangles)
    cameras = orbit_cameras(24, 3.0, SIZE, seed=1, elevations_degrees=(-10, 30))
    alpha = masks(mesh, cameras)
    points = torch.tensor([[0.6, 0.0, 0.0], [-0.6, 0.0, 0.0], [0.0, 0.6, 0.0]]) + lift
    assert not outside_hull(points, cameras, alpha).any()
    assert outside_hull(points, cameras, alpha.flip(1)).any()
