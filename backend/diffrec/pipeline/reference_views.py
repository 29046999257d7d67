"""Target views rendered from a reference mesh by diffrec's own renderer under an HDRI (the
reference system's mesh mode, and ``diffrec submit --ref-mesh``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from diffrec.camera import Cameras
from diffrec.color import premultiplied_to_straight
from diffrec.errors import UserError
from diffrec.io import Asset
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh import Mesh
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.tangents import with_tangents
from diffrec.pipeline.views import Views
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh

log = logging.getLogger(__name__)

__all__ = ["ReferenceScene", "render_reference_views"]


@torch.no_grad()
def render_reference_views(
    ctx,
    asset: Asset,
    hdri_image,
    cameras: Cameras,
    spp: int = 2,
    *,
    light_resolution: int = 256,
    chunk: int = 8,
    layered: bool = True,
) -> Views:
    """Render a reference mesh with diffrec's own renderer under an HDRI (the reference
    system's mesh mode): target views with straight alpha, on ``ctx.device``.
    ``ReferenceScene.of``'s arguments, then ``ReferenceScene.render``'s.
    """
    scene = ReferenceScene.of(ctx, asset, hdri_image, light_resolution=light_resolution)
    return scene.render(cameras, spp, chunk=chunk, layered=layered)


@dataclass(frozen=True)
class ReferenceScene:
    """A reference mesh, its material and its light, made ready to render once
    (``ReferenceScene.of``), then rendered from any cameras (``render``)."""

    ctx: object
    mesh: Mesh
    shader: TextureMaterial
    light: EnvironmentLight

    @classmethod
    @torch.no_grad()
    def of(cls, ctx, asset: Asset, hdri_image, *, light_resolution: int = 256
           ) -> ReferenceScene:
        """``asset``: from ``read_obj`` / ``read_gltf``; its first material is used for the
        whole mesh (a warning when there are more); vertex normals, and tangents for a normal
        map, are computed when missing. ``hdri_image``: equirect ``[H, W, 3]`` linear
        radiance (Blender's Environment Texture mapping), turned into a
        ``light_resolution``-sized cube map."""
        return cls(ctx, *_prepared(ctx, asset, hdri_image, light_resolution))

    @torch.no_grad()
    def render(self, cameras: Cameras, spp: int = 2, *, chunk: int = 8, layered: bool = True
               ) -> Views:
        """Views with straight alpha, on the context's device. ``spp``: supersampling per
        axis; ``chunk``: cameras rendered at once (bounds memory); ``layered``: the shading
        model (``render_mesh``'s), the fit's own."""
        cameras = cameras.to(self.ctx.device)
        images = []
        for start in range(0, len(cameras), chunk):
            out = render_mesh(self.ctx, self.mesh, self.shader, cameras[start : start + chunk],
                              self.light, spp=spp, layered=layered)
            images.append(premultiplied_to_straight(torch.cat([out.color, out.alpha], -1)))
        return Views(cameras, torch.cat(images).float().contiguous())


def _prepared(ctx, asset: Asset, hdri_image, light_resolution: int
              ) -> tuple[Mesh, TextureMaterial, EnvironmentLight]:
    """``ReferenceScene.of``'s mesh (with what rendering it needs), shader and light."""
    if len(asset.materials) > 1:
        log.warning("the reference mesh has %d materials; rendering it with the first (%s) only",
                    len(asset.materials), asset.materials[0].name)
    material = asset.materials[0]
    mesh = asset.mesh
    if mesh.normals is None:
        mesh = with_vertex_normals(mesh)
    if mesh.uvs is None:
        if any(channel.ndim == 3 for channel in (material.kd, material.ks)):
            raise UserError("the reference mesh has textures but no UVs: unwrap it first")
        zeros = torch.zeros(1, 2, dtype=mesh.positions.dtype)  # constant material: any UV
        mesh = mesh.replace(uvs=zeros, uv_triangles=torch.zeros_like(mesh.triangles))
    if material.normal is not None and mesh.tangents is None:
        mesh = with_tangents(mesh)
    hdri = (hdri_image if isinstance(hdri_image, torch.Tensor)
            else torch.from_numpy(np.asarray(hdri_image, dtype=np.float32))).float()
    if hdri.ndim != 3 or hdri.shape[-1] != 3 or not torch.isfinite(hdri).all():
        raise UserError(f"the HDRI must be a finite equirect RGB image [H, W, 3], got "
                        f"{list(hdri.shape)}")
    light = EnvironmentLight.from_equirect(hdri.to(ctx.device), resolution=light_resolution)
    light.build_mips()
    return mesh.to(ctx.device), TextureMaterial.from_material(material).to(ctx.device), light
