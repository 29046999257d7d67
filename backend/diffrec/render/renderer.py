"""Differentiable rendering of a textured mesh under an environment light.

``render_mesh`` rasterizes a batch of cameras, shades every covered pixel (and no other) with
the material and the split-sum light, antialiases silhouettes, composites depth-peeled layers
front to back and lays the result over a background. Images come out in the wire's layout:
``[B, H, W, C]``, rows top-down, scene-linear. The flip from the rasterizer's bottom-up rows
happens here, once.

``surface_layers`` and ``shade_surface`` split ``render_mesh`` in two for fits whose mesh and
cameras stay: the G-buffers made once, then shaded as often as the material or light changes.

``render_uv`` rasterizes the mesh in UV space instead: the world position of every texel, for
baking a material into textures.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from diffrec import raster
from diffrec.camera import Cameras
from diffrec.light.brdf_lut import brdf_lut
from diffrec.mesh import Mesh
from diffrec.render.gbuffer import GBuffer, build_gbuffer, kept_first
from diffrec.shading.bsdf import shade, shading_normal

BUFFERS = ("kd", "ks", "normal", "position", "mask")


@dataclass
class RenderOutput:
    """``color`` [B, H, W, 3] over the background; ``alpha`` [B, H, W, 1] coverage;
    ``background`` the background used (broadcastable to ``color``), to composite targets the
    same way; ``buffers`` maps names from ``BUFFERS`` to [B, H, W, C] images of the nearest
    layer, 0 where it covers no pixel."""

    color: torch.Tensor
    alpha: torch.Tensor
    background: torch.Tensor
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)


class RotatedLight:
    """A light looked up through per-image rotations ``[B, 3, 3]``: directions ``d`` of image
    b (``[B, ...]``, 3 last) read the light at ``R_b d``."""

    def __init__(self, light, rotation: torch.Tensor):
        self.light, self.rotation = light, rotation

    def _turn(self, directions: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bij,b...j->b...i", self.rotation, directions)

    def diffuse(self, normal: torch.Tensor, *, ctx) -> torch.Tensor:
        return self.light.diffuse(self._turn(normal), ctx=ctx)

    def specular(self, reflect: torch.Tensor, roughness: torch.Tensor, *, ctx
                 ) -> torch.Tensor:
        return self.light.specular(self._turn(reflect), roughness, ctx=ctx)

    def source_specular(self, normal, view, spec_col, roughness, covered=None):
        return self.light.source_specular(self._turn(normal), self._turn(view), spec_col,
                                          roughness, covered)


def clip_positions(positions: torch.Tensor, cameras: Cameras) -> torch.Tensor:
    """World positions [V, 3] -> clip space [B, V, 4] for every camera."""
    homogeneous = torch.cat([positions, torch.ones_like(positions[:, :1])], -1)
    return (homogeneous @ cameras.world_to_clip().transpose(1, 2)).contiguous()


def _background(background, batch: int, height: int, width: int, like: torch.Tensor):
    if background is None:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    if isinstance(background, str):
        raise ValueError(f"background must be None, a colour or images, not {background!r} "
                         "(diffrec.render.backgrounds.background_for makes the named kinds)")
    bg = torch.as_tensor(background, dtype=like.dtype, device=like.device)
    if bg.shape in ((3,), (batch, 1, 1, 3), (batch, height, width, 3)):
        return bg
    raise ValueError(f"background must be an RGB colour [3], one per image [{batch}, 1, 1, 3] "
                     f"or images [{batch}, {height}, {width}, 3], got shape {tuple(bg.shape)}")


def _downsample(image: torch.Tensor, factor: int) -> torch.Tensor:
    """Box-filter ``[B, H*f, W*f, C]`` down to ``[B, H, W, C]``."""
    if factor == 1:
        return image
    return F.avg_pool2d(image.permute(0, 3, 1, 2), factor).permute(0, 2, 3, 1)


def render_mesh(
    ctx: raster.RasterContext,
    mesh: Mesh,
    material,
    cameras: Cameras,
    light=None,
    *,
    spp: int = 1,
    layers: int = 1,
    background=None,
    mode: str = "pbr",
    buffers: tuple[str, ...] = (),
    topology_hash=None,
    light_rotation: torch.Tensor | None = None,
    layered: bool = True,
) -> RenderOutput:
    """Render ``mesh`` with ``material`` (``diffrec.render.material``) from ``cameras``.

    ``light``: an ``EnvironmentLight`` with its mips built (needed by "pbr" and
    "shading-only"); ``spp``: samples per pixel along each axis (renders at ``spp`` times the
    size and box-filters down); ``layers``: depth-peeled layers composited front to back (for
    kd with alpha); ``background``: None (black), an RGB colour [3], one colour per image
    [B, 1, 1, 3] or images [B, H, W, 3] (the settings' named kinds, "random" among them, come
    from ``diffrec.render.backgrounds.background_for``);
    ``mode``: "pbr", "kd", "ks", "normal" or "shading-only"; ``buffers``: names from
    ``BUFFERS`` to return as well. ``topology_hash`` may be passed to reuse the antialias
    topology of a mesh whose triangles do not change. ``light_rotation`` ``[B, 3, 3]``: the
    light is looked up in directions ``R d`` for image b's world directions ``d`` (the
    world-to-camera rotations keep the light fixed to each camera); None: as it is.
    ``layered``: "pbr" shades the diffuse under the specular coat, as Blender's Principled
    BSDF (False: the two added, as nvdiffrec; ``diffrec.shading.bsdf``).
    """
    if spp < 1 or layers < 1:
        raise ValueError("spp and layers must be at least 1")
    unknown = set(buffers) - set(BUFFERS)
    if unknown:
        raise ValueError(f"unknown buffers {sorted(unknown)}; choose from {BUFFERS}")
    if light is None and mode in ("pbr", "shading-only"):
        raise ValueError(f"mode {mode!r} needs a light")
    height, width = cameras.height, cameras.width
    clip = clip_positions(mesh.positions, cameras)
    tri = mesh.triangles.to(torch.int32).contiguous()
    if topology_hash is None:
        topology_hash = raster.antialias_construct_topology_hash(tri, ctx=ctx)
    lut = _brdf_table(clip.device) if mode == "pbr" else None
    centers = cameras.centers().to(clip)
    light = _oriented(light, light_rotation, clip)

    premultiplied, remaining, nearest = 0.0, 1.0, {}
    with raster.DepthPeeler(ctx, clip, tri, (height * spp, width * spp)) as peeler:
        for layer in range(layers):
            rast, rast_db = peeler.rasterize_next_layer()
            gb = build_gbuffer(ctx, mesh, rast, rast_db, centers)
            rgba, values = _shaded_where_covered(gb, material, light, lut, mode, layered,
                                                 buffers if layer == 0 else ())
            rgba = raster.antialias(rgba, rast, clip, tri, topology_hash=topology_hash, ctx=ctx)
            premultiplied = premultiplied + remaining * rgba
            remaining = remaining * (1.0 - rgba[..., 3:4])
            if layer == 0:
                nearest = values

    out = composite_over(_downsample(premultiplied, spp).flip(1), background)
    out.buffers = {name: _downsample(value, spp).flip(1) for name, value in nearest.items()}
    return out


def _oriented(light, light_rotation: torch.Tensor | None, like: torch.Tensor):
    """``light``, read through ``light_rotation`` (``render_mesh``'s) when one is given."""
    if light_rotation is None or light is None:
        return light
    return RotatedLight(light, light_rotation.to(like))


def _shaded(gb: GBuffer, material, light, lut, mode: str, layered: bool
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One layer shaded: premultiplied RGBA ``[B, H, W, 4]`` (not antialiased) and the
    surface's values (``BUFFERS``), raster layout."""
    surface = material(gb)
    kd = surface.kd[..., :3]
    opacity = surface.kd[..., 3:4] if surface.kd.shape[-1] == 4 else 1.0
    sign = gb.tangent_sign if gb.tangent_sign is not None else 1.0
    normal = shading_normal(gb.view, gb.normal, gb.face_normal, gb.tangent, surface.normal, sign)
    color = shade(mode, light, lut, kd, surface.ks, normal, gb.view, ctx=gb.ctx,
                  layered=layered, covered=gb.mask[..., 0] > 0, coat=surface.coat,
                  f0=surface.f0)
    alpha = gb.mask * opacity
    values = {"kd": kd, "ks": surface.ks, "normal": normal, "position": gb.position,
              "mask": gb.mask}
    return torch.cat([color * alpha, alpha], -1).contiguous(), values


def _shaded_where_covered(gb: GBuffer, material, light, lut, mode: str, layered: bool,
                          buffers: tuple[str, ...] = ()
                          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``_shaded`` on the pixels a triangle covers only, spread over the image: RGBA and the
    ``buffers`` named, 0 on every other pixel (where ``_shaded``'s RGBA is 0 too: its alpha
    is). The material and the light, and their backward passes, see the covered pixels
    alone: on a CPU, shading costs by the pixel. G-buffers of covered pixels alone (a fit's
    picked pixels) are shaded as they are."""
    covered = gb.mask[..., 0].flatten(1) > 0
    if bool(covered.all()):
        rgba, values = _shaded(gb, material, light, lut, mode, layered)
        return rgba, {name: values[name] for name in buffers}
    batch, height, width = gb.mask.shape[:3]
    order, kept = kept_first(covered)
    rgba, values = _shaded(gb.pixels(order), material, light, lut, mode, layered)
    slot = torch.where(kept > 0, order, height * width)  # the padding's: a slot dropped

    def spread(value: torch.Tensor) -> torch.Tensor:
        image = value.new_zeros(batch, height * width + 1, value.shape[-1])
        image = image.scatter(1, slot[..., None].expand(-1, -1, value.shape[-1]), value[:, 0])
        return image[:, :-1].view(batch, height, width, -1)

    return spread(rgba), {name: spread(values[name]) for name in buffers}


@dataclass(frozen=True)
class SurfaceLayers:
    """A mesh's depth-peeled G-buffers (front to back) from a batch of cameras, made once by
    ``surface_layers`` and shaded many times by ``shade_surface``: for fits where the mesh and
    the cameras stay and only the material or the light changes."""

    layers: tuple[GBuffer, ...]
    spp: int

    def selected(self, index: torch.Tensor) -> SurfaceLayers:
        """The cameras at ``index`` (int64 ``[K]``)."""
        return SurfaceLayers(tuple(gb.selected(index) for gb in self.layers), self.spp)

    def pixels(self, index: torch.Tensor) -> SurfaceLayers:
        """The pixels at ``index`` (``GBuffer.pixels``) of every layer, one row per image;
        made at one sample per pixel only (``spp`` 1)."""
        if self.spp != 1:
            raise ValueError("pixels are picked from G-buffers made at one sample per pixel")
        return SurfaceLayers(tuple(gb.pixels(index) for gb in self.layers), 1)


@torch.no_grad()
def surface_layers(ctx: raster.RasterContext, mesh: Mesh, cameras: Cameras, *, spp: int = 1,
                   layers: int = 1) -> SurfaceLayers:
    """``render_mesh``'s G-buffers of ``mesh`` from ``cameras`` (``spp`` and ``layers`` as
    there), without gradients: the mesh and the cameras are constants of what shades them."""
    clip = clip_positions(mesh.positions, cameras)
    tri = mesh.triangles.to(torch.int32).contiguous()
    centers = cameras.centers().to(clip)
    size = (cameras.height * spp, cameras.width * spp)
    with raster.DepthPeeler(ctx, clip, tri, size) as peeler:
        return SurfaceLayers(tuple(build_gbuffer(ctx, mesh, *peeler.rasterize_next_layer(),
                                                 centers) for _ in range(layers)), spp)


def shade_surface(surface: SurfaceLayers, material, light, *,
                  light_rotation: torch.Tensor | None = None, layered: bool = True
                  ) -> RenderOutput:
    """``render_mesh``'s "pbr" image of G-buffers made by ``surface_layers``, over black,
    without antialiasing: the same colour on every pixel that no edge crosses (silhouettes
    and the edges where one part hides another are left as the rasterizer covers them).
    Differentiable in the material and the light."""
    mask = surface.layers[0].mask
    lut = _brdf_table(mask.device)
    light = _oriented(light, light_rotation, mask)
    premultiplied, remaining = 0.0, 1.0
    for gb in surface.layers:
        rgba, _ = _shaded_where_covered(gb, material, light, lut, "pbr", layered)
        premultiplied = premultiplied + remaining * rgba
        remaining = remaining * (1.0 - rgba[..., 3:4])
    return composite_over(_downsample(premultiplied, surface.spp).flip(1))


@functools.lru_cache(maxsize=4)
def _brdf_table(device: torch.device) -> torch.Tensor:
    """The split-sum BRDF table on ``device``, read from its cache once per process."""
    return brdf_lut(device=device)


def composite_over(premultiplied: torch.Tensor, background=None) -> RenderOutput:
    """Premultiplied RGBA images ``[B, H, W, 4]`` laid over ``background`` (as
    ``render_mesh``'s) as a ``RenderOutput`` without buffers."""
    batch, height, width = premultiplied.shape[:3]
    alpha = premultiplied[..., 3:4]
    bg = _background(background, batch, height, width, premultiplied)
    color = premultiplied[..., :3] + (1.0 - alpha) * bg
    return RenderOutput(color=color, alpha=alpha, background=bg)


def render_uv(ctx: raster.RasterContext, mesh: Mesh, resolution: int):
    """World position [1, R, R, 3] and coverage [1, R, R, 1] of every texel of ``mesh``'s UV
    layout, rows top-down as textures are stored (row 0 is v = 1)."""
    if mesh.uvs is None:
        raise ValueError("render_uv needs a mesh with UVs")
    uv_clip = torch.cat(
        [mesh.uvs * 2.0 - 1.0, torch.zeros_like(mesh.uvs[:, :1]), torch.ones_like(mesh.uvs[:, :1])],
        -1,
    )[None].contiguous()
    rast, _ = raster.rasterize(ctx, uv_clip, mesh.uv_triangles.to(torch.int32).contiguous(),
                               (resolution, resolution), grad_db=False)
    position, _ = raster.interpolate(mesh.positions.contiguous(), rast,
                                     mesh.triangles.to(torch.int32).contiguous(), ctx=ctx)
    mask = (rast[..., 3:4] > 0).to(position.dtype)
    return position.flip(1), mask.flip(1)
