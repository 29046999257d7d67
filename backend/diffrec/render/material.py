"""Surface materials the renderer can sample: textures over UVs, or a neural field over space.

A material is a module called with a ``GBuffer`` that returns a ``SurfaceSample``:
``kd`` (base colour, linear, ``[..., 3]`` or ``[..., 4]`` with straight alpha), ``ks``
(occlusion, roughness, metallic), ``normal`` (tangent-space normal-map value in [-1, 1]^3,
OpenGL convention, or None for the unperturbed normal), ``coat`` (a clear coat
``(weight, roughness)`` ``[2]`` over the whole surface, ``diffrec.shading.bsdf``; or None) and
``f0`` (the non-metal's reflectance at normal incidence, a scalar tensor; or None for 0.04).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from diffrec import raster
from diffrec.io.material import check_coat
from diffrec.mesh import uv_seams
from diffrec.render.gbuffer import GBuffer
from diffrec.render.texture2d import Texture2D
from diffrec.shading.bsdf import DIELECTRIC_F0, dielectric_f0, distinct_ior, ior_of
from diffrec.shading.ranges import F0_RANGE, KD_RANGE, KS_RANGE, NORMAL_RANGE

FLAT_NORMAL = torch.tensor([0.0, 0.0, 1.0])  # tangent space: the surface's own normal


@dataclass
class SurfaceSample:
    kd: torch.Tensor
    ks: torch.Tensor
    normal: torch.Tensor | None = None
    coat: torch.Tensor | None = None
    f0: torch.Tensor | None = None


def material_f0(material) -> float:
    """The non-metal's reflectance at normal incidence a ``diffrec.io.Material`` gives: its
    IOR's, or ``DIELECTRIC_F0`` (IOR 1.5) where it has none."""
    return DIELECTRIC_F0 if material.ior is None else dielectric_f0(material.ior)


class TextureMaterial(torch.nn.Module):
    """kd / ks / normal textures sampled at the mesh's UVs, mipmapped by the UV footprint:
    the level is log2 of a pixel's footprint in texels plus ``mip_bias`` (levels; negative
    reads finer levels, -16 or below the full-resolution texture only).

    ``mips``: {"kd" | "ks" | "normal": levels 1..n ``[h, w, C]``} read instead of the
    textures' 2x2 box averages (``pipeline.mip_fit``); a channel absent from it, or None, is
    box-averaged.

    ``coat``: a clear coat ``(weight, roughness)`` over the whole surface
    (``diffrec.io.Material.coat``), or None; it is given, not trained, and moves with the
    module (a buffer outside the state dict).

    ``f0``: the non-metal's reflectance at normal incidence over the whole surface (its IOR,
    ``diffrec.shading.bsdf``), a parameter in ``F0_RANGE`` trained where ``learn_f0``."""

    def __init__(self, kd: Texture2D, ks: Texture2D, normal: Texture2D | None = None,
                 mip_bias: float = 0.0, coat: torch.Tensor | None = None,
                 f0: float = DIELECTRIC_F0, learn_f0: bool = False):
        super().__init__()
        self.kd, self.ks, self.normal = kd, ks, normal
        self.mip_bias = float(mip_bias)
        self.register_buffer("coat", None if coat is None else check_coat(coat),
                             persistent=False)
        self.f0 = torch.nn.Parameter(torch.tensor(float(f0)).clamp(*F0_RANGE),
                                     requires_grad=learn_f0)
        self.mips: dict[str, list[torch.Tensor]] | None = None
        self._seams_of: torch.Tensor | None = None  # the UV index buffer ``_seams`` are of
        self._seams: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_material(cls, material, ks_min=KS_RANGE[0], ks_max=KS_RANGE[1]) -> TextureMaterial:
        """Trainable textures from a ``diffrec.io.Material`` (constants become 1x1 textures),
        reading its mip levels where it has them; its coat and IOR kept (not trained)."""

        def texture(value, low, high):
            data = torch.as_tensor(np.asarray(value, dtype=np.float32))
            if data.ndim == 1:
                data = data[None, None]
            channels = data.shape[-1]
            return Texture2D(data, min_value=list(low)[:channels] + [0.0] * (channels - 3),
                             max_value=list(high)[:channels] + [1.0] * (channels - 3))

        kd = texture(material.kd, *KD_RANGE)
        ks = texture(material.ks, ks_min, ks_max)
        normal = None if material.normal is None else texture(material.normal, *NORMAL_RANGE)
        shader = cls(kd, ks, normal, coat=material.coat, f0=material_f0(material))
        if material.mips is not None:
            shader.mips = {name: [torch.as_tensor(level, dtype=torch.float32) for level in levels]
                           for name, levels in material.mips.items()}
        return shader

    @property
    def ior(self) -> float:
        """The index of refraction ``f0`` stands for (``shading.bsdf.ior_of``)."""
        return ior_of(float(self.f0.detach()))

    @property
    def distinct_ior(self) -> float | None:
        """``ior`` where it is not glass's 1.5 (glTF's and Blender's default, to 1e-4), else
        None: what a file has to carry (``shading.bsdf.distinct_ior``)."""
        return distinct_ior(self.ior)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """``Module.load_state_dict``; a state without ``f0`` (a checkpoint of a diffrec
        before the IOR was a parameter) keeps this module's."""
        if "f0" not in state_dict:
            state_dict = {**state_dict, "f0": self.f0.detach().clone()}
        return super().load_state_dict(state_dict, strict, assign)

    def _apply(self, fn, recurse=True):
        """``Module.to`` and the like move ``mips`` too (plain tensors, not buffers)."""
        super()._apply(fn, recurse)
        if self.mips is not None:
            self.mips = {name: [fn(level) for level in levels]
                         for name, levels in self.mips.items()}
        return self

    def footprint(self, gb: GBuffer) -> torch.Tensor | None:
        """``gb``'s UV derivatives with the mip bias applied (scaling the footprint by
        2^bias adds bias to its log2, the mip level)."""
        if gb.uv is None:
            raise ValueError("a texture material needs a mesh with UVs")
        if gb.uv_da is None or not self.mip_bias:
            return gb.uv_da
        return gb.uv_da * 2.0 ** self.mip_bias

    def texture_data(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The kd, ks and normal-map texels, ``[H, W, C]`` each (what a renderer without this
        module's sampling reads; a flat normal map of kd's size where there is none)."""
        normal = self.normal.data if self.normal is not None else \
            FLAT_NORMAL.to(self.kd.data).expand(*self.kd.resolution, 3)
        return self.kd.data, self.ks.data, normal

    def forward(self, gb: GBuffer) -> SurfaceSample:
        uv_da = self.footprint(gb)
        mips = self.mips or {}

        def sample(name: str) -> torch.Tensor:
            return getattr(self, name).sample(gb.uv, uv_da, ctx=gb.ctx, mip=mips.get(name))

        normal = None
        if self.normal is not None and gb.tangent is not None:
            normal = sample("normal")
        return SurfaceSample(kd=sample("kd"), ks=sample("ks"), normal=normal, coat=self.coat,
                             f0=self.f0)

    @torch.no_grad()
    def fold_occlusion_(self) -> None:
        """Move the occlusion channel into the base colour (``kd *= 1 - occlusion``, ks's R
        set to 0 and held there by its range), in place: for a renderer that computes
        occlusion itself. Needs kd and ks of one size."""
        if self.kd.resolution != self.ks.resolution:
            raise ValueError(f"kd {self.kd.resolution} and ks {self.ks.resolution} differ in "
                             "size")
        occlusion = self.ks.data[..., :1]
        self.kd.data[..., :3] *= 1.0 - occlusion
        occlusion.zero_()
        channels = self.ks.data.shape[-1]
        for name, unbounded in (("min_value", -math.inf), ("max_value", math.inf)):
            bound = getattr(self.ks, name)
            bound = torch.full((channels,), unbounded, device=occlusion.device) \
                if bound is None else bound.clone()
            bound[0] = 0.0
            setattr(self.ks, name, bound)

    def clamp_(self) -> None:
        for texture in (self.kd, self.ks, self.normal):
            if texture is not None:
                texture.clamp_()
        with torch.no_grad():
            self.f0.clamp_(*F0_RANGE)

    def smoothness(self, mesh, generator: torch.Generator, points: int = 4096,
                   std: float = 0.005, *, ctx: raster.RasterContext
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean ``|kd(p) - kd(q)|``, the same of ks) over pairs of neighbouring surface
        points, sampled with ``ctx``: ``points`` random texture coordinates ``p`` with
        ``q = p + eps``, ``eps ~ N(0, std)`` in UV units (nvdiffrec's smoothness terms for
        textures), and one random point along each of ``mesh``'s UV seams, read on both sides
        (the charts' edges, which jitter inside a chart never ties together)."""
        device = self.kd.data.device
        uv = torch.rand(points, 2, generator=generator).to(device)
        jitter = (torch.randn(points, 2, generator=generator) * std).to(device)
        side_a, side_b = self._seam_points(mesh, generator)
        p = torch.cat([uv, side_a])[None, :, None]
        q = torch.cat([uv + jitter, side_b])[None, :, None]
        return tuple((texture.sample(q, ctx=ctx) - texture.sample(p, ctx=ctx)).abs().mean()
                     for texture in (self.kd, self.ks))

    def _seam_points(self, mesh, generator: torch.Generator
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """A random point along each UV seam of ``mesh`` as each side maps it, ``[S, 2]``
        twice (none for a mesh without UVs). The seams are found once per UV index buffer."""
        if mesh.uv_triangles is None:
            empty = mesh.positions.new_zeros(0, 2)
            return empty, empty
        if self._seams_of is not mesh.uv_triangles:
            self._seams_of = mesh.uv_triangles  # held: its identity is the cache's key
            self._seams = uv_seams(mesh.triangles, mesh.uv_triangles)
        along = torch.rand(len(self._seams[0]), 1, generator=generator).to(mesh.uvs.device)
        return tuple(torch.lerp(ends[:, 0], ends[:, 1], along).detach()
                     for ends in (mesh.uvs[side] for side in self._seams))  # [S, 2 ends, 2]


class NeuralSurface(torch.nn.Module):
    """Adapts a ``diffrec.neural.NeuralMaterial`` (a field over world space) to the renderer.

    The field is evaluated at the covered pixels only (one wait for the device: their count).
    Uncovered pixels, which the renderer gives zero alpha, get the channels' lowest values
    and the flat normal, with no gradient: evaluating them would put every background pixel
    in the grid cell of the origin, and the hash grid's backward pass would add all their
    zero gradients into that one cell (on a GPU, the contended atomic adds were most of
    pass 1's time, docs/BENCHMARKS.md).
    """

    def __init__(self, field):
        super().__init__()
        self.field = field

    def forward(self, gb: GBuffer) -> SurfaceSample:
        covered = gb.mask.reshape(-1).nonzero().squeeze(1)
        sample = self.field(gb.position.reshape(-1, 3)[covered])
        shape = gb.position.shape
        kd, ks, normal = (
            fill.expand(shape[:-1].numel(), 3).index_put((covered,), values).view(shape)
            for values, fill in zip(sample, self._uncovered(), strict=True)
        )
        return SurfaceSample(kd=kd, ks=ks, normal=normal if gb.tangent is not None else None)

    def _uncovered(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """kd, ks and normal of a pixel no triangle covers: in range, finite to shade."""
        low = self.field.out_min
        return low[0:3], low[3:6], FLAT_NORMAL.to(low)

    def smoothness(self, mesh, generator: torch.Generator, points: int = 4096,
                   std: float = 0.01, *, ctx: raster.RasterContext
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean ``|kd(x + eps) - kd(x)|``, the same of ks) over random surface vertices,
        ``eps ~ N(0, std)`` in world units (nvdiffrec's smoothness terms for the neural
        material; ``ctx`` as for textures, unused: the field samples no texture)."""
        pick = torch.randint(len(mesh.positions), (points,), generator=generator)
        surface = mesh.positions.detach()[pick.to(mesh.positions.device)]
        per_point = self.field.smoothness(surface, std=std, generator=generator)
        return tuple(value.mean() / 3.0 for value in per_point)

