"""Small scenes the renderer's tests share: a smooth sphere, a constant material, a camera in
front of the origin and the fully covered pixels of a render."""

import torch.nn.functional as F

from diffrec.camera import Cameras, look_at
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
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
