"""Per-pixel surface attributes from one rasterized layer (the geometry buffer).

Everything here is in raster layout (row 0 at the bottom); ``render_mesh`` flips the final
images to the wire's top-down rows once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from diffrec import raster
from diffrec.mesh import Mesh
from diffrec.mesh.normals import face_normals, safe_normalize


@dataclass
class GBuffer:
    """Surface attributes per pixel, ``[B, H, W, C]``; zero where ``mask`` is 0."""

    rast: torch.Tensor  # (u, v, z/w, triangle id + 1)
    mask: torch.Tensor  # [B, H, W, 1], 1 where a triangle covers the pixel
    position: torch.Tensor  # world space, metres
    normal: torch.Tensor  # unit, interpolated vertex normal (geometric if the mesh has none)
    face_normal: torch.Tensor  # unit, the triangle's own normal (counter-clockwise = front)
    view: torch.Tensor  # unit, from the surface towards the camera
    ctx: raster.RasterContext  # the context it was made with: materials sample their
    # textures with its engine
    uv: torch.Tensor | None = None  # bottom-left origin
    uv_da: torch.Tensor | None = None  # (du/dX, du/dY, dv/dX, dv/dY) per pixel
    tangent: torch.Tensor | None = None  # unit xyz; bitangent = sign * cross(normal, tangent)
    tangent_sign: torch.Tensor | None = None  # [B, H, W, 1], +-1

    def selected(self, index: torch.Tensor) -> GBuffer:
        """The images at ``index`` (int64 ``[K]``) of the batch, every attribute alike."""
        return self._mapped(lambda value: value[index])

    def pixels(self, index: torch.Tensor) -> GBuffer:
        """The pixels at ``index`` (int64 ``[B, P]``, row-major into each image's ``H x W``)
        of every image, laid out as one row: every attribute ``[B, 1, P, C]``."""
        return self._mapped(lambda value: pixels_of(value, index))

    def _mapped(self, change) -> GBuffer:
        """A GBuffer of ``change(attribute)`` for every tensor attribute."""
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        return GBuffer(**{name: change(value) if torch.is_tensor(value) else value
                          for name, value in values.items()})


def pixels_of(images: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The pixels at ``index`` (int64 ``[B, P]``, row-major into each image's ``H x W``) of
    ``images`` ``[B, H, W, C]``, laid out as one row: ``[B, 1, P, C]``."""
    flat = images.reshape(images.shape[0], -1, images.shape[-1])
    return flat.gather(1, index[..., None].expand(-1, -1, flat.shape[-1])).unsqueeze(1)


def kept_first(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``keep`` ``[N, M]`` (bool): ``[N, P]`` indices, each row's kept ones (in order)
    padded to the most kept in any row (at least 1) with its kept ones again, in turn (index
    0 where it keeps none); and ``[N, P]`` weights, 1 on the kept ones, 0 on the padding.
    What reads the indices reads kept entries alone, and no one entry many times over (where
    a row keeps any)."""
    counts = keep.sum(1)
    width = max(int(counts.max()) if len(counts) else 0, 1)
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)[:, :width]
    position = torch.arange(width, device=keep.device)
    kept = position < counts[:, None]
    again = order.gather(1, position % counts.clamp(min=1)[:, None])
    return torch.where(kept, order, again), kept.float()


def _interpolate(ctx, values, rast, triangles, rast_db=None, diff=False):
    return raster.interpolate(
        values.contiguous(), rast, triangles.to(torch.int32).contiguous(), rast_db=rast_db,
        diff_attrs="all" if diff else None, ctx=ctx,
    )


def build_gbuffer(ctx: raster.RasterContext, mesh: Mesh, rast, rast_db,
                  camera_centers: torch.Tensor) -> GBuffer:
    """Interpolate ``mesh``'s attributes over ``rast`` (made with ``ctx``, whose engine
    interpolates too); ``camera_centers`` is ``[B, 3]``."""
    mask = (rast[..., 3:4] > 0).to(rast.dtype)
    position, _ = _interpolate(ctx, mesh.positions, rast, mesh.triangles)
    tri_id = (rast[..., 3].long() - 1).clamp(min=0)
    face_normal = face_normals(mesh.positions, mesh.triangles)[tri_id] * mask
    if mesh.normals is not None:
        normal = safe_normalize(_interpolate(ctx, mesh.normals, rast, mesh.normal_triangles)[0])
    else:  # flat shading
        normal = face_normal
    view = safe_normalize(camera_centers[:, None, None, :] - position) * mask

    gb = GBuffer(rast=rast, mask=mask, position=position, normal=normal,
                 face_normal=face_normal, view=view, ctx=ctx)
    if mesh.uvs is not None:
        gb.uv, gb.uv_da = _interpolate(ctx, mesh.uvs, rast, mesh.uv_triangles, rast_db, diff=True)
    if mesh.tangents is not None:
        tangent, _ = _interpolate(ctx, mesh.tangents, rast, mesh.tangent_triangles)
        gb.tangent = safe_normalize(tangent[..., :3])
        gb.tangent_sign = torch.where(tangent[..., 3:4] < 0, -1.0, 1.0).to(rast.dtype)
    return gb
