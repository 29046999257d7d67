"""Small scenes the renderer's tests share: a smooth sphere, a constant material, a camera in
front of the origin, an open box seen from above and the fully covered pixels of a render."""

import torch
import torch.nn.functional as F

from diffrec.camera import Cameras, look_at
from diffrec.mesh import Mesh
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import plane, uv_sphere
from diffrec.mesh.tangents import with_tangents
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D


def sphere(segments=48, rings=24):
    return with_tangents(with_vertex_normals(uv_sphere(segments, rings)))


def constant_material(kd=(1.0, 1.0, 1.0), ks=(0.0, 0.5, 0.0)):
    return TextureMaterial(Texture2D.constant(kd), Texture2D.constant(ks))


def front_camera(size=48, distance=4.0):
    """A camera on -Y looking at the origin: image right = world +X, image up = world +Z."""
    focal = size * 1.2
    return Cameras(look_at([[0.0, -distance, 0.0]], (0, 0, 0)).float(), fx=focal, fy=focal,
                   cx=size / 2, cy=size / 2, width=size, height=size)


def interior(out, erode=2):
    """Pixels fully covered, away from silhouettes: [B, H, W] bool."""
    covered = (out.alpha[..., 0] > 0.999).float()[:, None]
    kept = -F.max_pool2d(-covered, 2 * erode + 1, stride=1, padding=erode)
    return kept[:, 0] > 0.5


def open_box():
    """The cube [-1, 1]^3 without its top (its floor split finely, so that the floor's centre
    lies inside triangles), seen from straight above; returns the mesh, the camera and the
    pixel mask [1, H, W] of a small patch at the floor's centre."""
    floor = plane(resolution=8, size=2.0)
    positions, triangles = [floor.positions + torch.tensor([0.0, 0.0, -1.0])], [floor.triangles]
    corners = torch.tensor([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]])
    count = len(floor.positions)
    for side in range(4):  # each wall its own four vertices: flat however a renderer smooths
        (x0, y0), (x1, y1) = corners[side], corners[(side + 1) % 4]
        positions.append(torch.tensor([[x0, y0, -1.0], [x1, y1, -1.0], [x1, y1, 1.0],
                                       [x0, y0, 1.0]]))
        triangles.append(torch.tensor([[0, 1, 2], [0, 2, 3]]) + count)
        count += 4
    positions, triangles = torch.cat(positions), torch.cat(triangles)
    mesh = Mesh(positions, triangles, uvs=positions[:, :2] / 4 + 0.5, uv_triangles=triangles)
    size = 48
    camera = look_at([[0.0, 0.001, 6.0]], (0, 0, 0)).float()
    cameras = Cameras(camera, fx=size * 1.4, fy=size * 1.4, cx=size / 2, cy=size / 2,
                      width=size, height=size)
    rows, cols = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    centre = ((rows - size / 2).abs() < size * 0.08) & ((cols - size / 2).abs() < size * 0.08)
    return mesh, cameras, centre[None]
