"""Differentiable path tracing of a fixed mesh through Mitsuba 3: the object's shadows on
itself and the light it bounces onto itself, which the split-sum renderer leaves out.

``PathTracer(mesh, device)`` builds the Mitsuba scene once (the mesh never moves: materials
mode); ``render`` hands the material's textures and the light to Mitsuba through Dr.Jit's
torch interop (``drjit.wrap``) and path-traces each camera with the ``prb`` integrator (path
replay backpropagation), so the returned images carry gradients back to the torch tensors:
base colour, roughness and metallic textures, and the light's cube map.

The surface is Mitsuba's ``principled`` BSDF, two-sided as the rasterizer shades, with
``specular`` 0.5 (F0 = 0.04 for dielectrics), ``kd`` as base colour and ``ks``'s roughness
and metallic channels, under a ``normalmap`` adapter reading the tangent-space normal map
(OpenGL convention: Mitsuba's tangent follows +u and its bitangent is n x t, which with ``v``
flipped is ours for charts that are not mirrored): the same metallic-roughness material
``diffrec.shading.bsdf`` shades, but for the occlusion channel, left out because light
transport computes occlusion. Textures are read bilinearly, without mipmaps.
``max_depth`` is Mitsuba's: 2 is direct light with shadows, 3 adds one bounce between the
object's own surfaces.

Images come out as ``render_mesh``'s do: ``[B, H, W, C]`` rows top-down, scene-linear, colour
over the background and alpha the pixel's coverage (box-filtered samples).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.light.cube import apply_taps, bilinear_taps
from diffrec.mesh import Mesh
from diffrec.render.mitsuba_bridge import (
    ENVMAP_TO_WORLD,
    envmap_directions,
    load_mitsuba,
    seamless_arrays,
    sensor_dict,
)
from diffrec.render.renderer import RenderOutput, composite_over

__all__ = ["DEFAULT_MAX_DEPTH", "TEXTURE_KEYS", "PathTracer"]

DEFAULT_MAX_DEPTH = 3
TEXTURE_KEYS = {**{name: f"obj.bsdf.brdf_0.nested_bsdf.{name}.data" for name in
                ("base_color", "roughness", "metallic")},
             "normal_map": "obj.bsdf.brdf_0.normalmap.data"}
"""The scene parameter of each texture the material hands Mitsuba (``render``'s inputs)."""
_ENVMAP = "emitter.data"


def _mip(texture: torch.Tensor, level: int) -> torch.Tensor:
    """``[H, W, C]`` box-averaged over ``2^level``-texel squares (level 0: itself)."""
    if level == 0:
        return texture
    factor = 1 << level
    if texture.shape[0] % factor or texture.shape[1] % factor:
        raise ValueError(f"a {texture.shape[0]}x{texture.shape[1]} texture has no mip level "
                         f"{level}")
    return F.avg_pool2d(texture.permute(2, 0, 1)[None], factor)[0].permute(1, 2, 0)


class PathTracer:
    """Path-traces ``mesh`` (positions, triangles, and the UVs and normals it has) on
    ``device``'s Mitsuba variant (see ``diffrec.render.mitsuba_bridge``); ``max_depth`` as
    Mitsuba's (the module docstring)."""

    def __init__(self, mesh: Mesh, device: torch.device | str = "cpu",
                 max_depth: int = DEFAULT_MAX_DEPTH):
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        if mesh.uvs is None:
            raise ValueError("path tracing needs a mesh with UVs (its textures are read there)")
        self.device = torch.device(device)
        self.mi, self.dr = load_mitsuba(self.device)
        self._sensors: dict[tuple, object] = {}
        self._envmap_grid: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        self.scene = self._scene(mesh, max_depth)
        self.params = self.mi.traverse(self.scene)
        self.params.keep([*TEXTURE_KEYS.values(), _ENVMAP])

    def _scene(self, mesh: Mesh, max_depth: int):
        mi = self.mi
        arrays = seamless_arrays(mesh)
        def texture(channels: int) -> dict:
            return {"type": "bitmap", "bitmap": mi.Bitmap(torch.zeros(2, 2, channels).numpy()),
                    "raw": True, "filter_type": "bilinear", "wrap_mode": "clamp"}

        principled = {"type": "principled", "specular": 0.5, "base_color": texture(3),
                      "roughness": texture(1), "metallic": texture(1)}
        bsdf = {"type": "normalmap", "normalmap": texture(3), "bsdf": principled}
        props = mi.Properties()
        props["bsdf"] = mi.load_dict({"type": "twosided", "material": bsdf})
        shape = mi.Mesh("obj", len(arrays["positions"]), len(arrays["faces"]), props=props,
                        has_vertex_normals="normals" in arrays,
                        has_vertex_texcoords=True)
        buffers = mi.traverse(shape)
        buffers["vertex_positions"] = self.dr.ravel(mi.Point3f(arrays["positions"].T))
        buffers["faces"] = self.dr.ravel(mi.Vector3u(arrays["faces"].T))
        buffers["vertex_texcoords"] = self.dr.ravel(mi.Point2f(arrays["uvs"].T))
        buffers.update()
        if "normals" in arrays:  # after the positions: their update recomputes Mitsuba's own
            buffers["vertex_normals"] = self.dr.ravel(mi.Normal3f(arrays["normals"].T))
            buffers.update()
        return mi.load_dict({
            "type": "scene",
            "integrator": {"type": "prb", "max_depth": max_depth, "hide_emitters": True},
            "emitter": {"type": "envmap", "bitmap": mi.Bitmap(torch.ones(4, 8, 3).numpy()),
                        "to_world": mi.ScalarTransform4f(list(map(list, ENVMAP_TO_WORLD)))},
            "obj": shape,
        })

    def sensor(self, cameras: Cameras, index: int, spp: int):
        """Mitsuba's sensor for camera ``index`` of ``cameras`` at ``spp`` (made once, kept)."""
        key = (cameras.camera_to_world[index].detach().cpu().numpy().tobytes(),
               *(float(getattr(cameras, name)[index]) for name in ("fx", "fy", "cx", "cy")),
               cameras.width, cameras.height, spp)
        if key not in self._sensors:
            spec = sensor_dict(cameras, index, spp)
            spec["to_world"] = self.mi.ScalarTransform4f(spec["to_world"])
            self._sensors[key] = self.mi.load_dict(spec)
        return self._sensors[key]

    def envmap(self, light) -> torch.Tensor:
        """The light's cube map sampled on Mitsuba's envmap grid, first column repeated at
        the end, ``[H, W + 1, 3]`` (differentiable with respect to ``light.radiance()``)."""
        radiance = light.radiance()
        size = radiance.shape[1]
        if size not in self._envmap_grid:
            height, width = 2 * size, 4 * size
            index, weight = bilinear_taps(envmap_directions(height, width).reshape(-1, 3), size)
            self._envmap_grid[size] = (index, weight.float(), height)
        index, weight, height = self._envmap_grid[size]
        base = radiance.reshape(-1, 3)
        image = apply_taps(base, index.to(base.device), weight.to(base.device))
        image = image.reshape(height, -1, 3)
        return torch.cat([image, image[:, :1]], 1).contiguous()

    def render(self, material, light, cameras: Cameras, *, spp: int = 16, seed: int = 0,
               background=None, texture_level: int = 0) -> RenderOutput:
        """Path-trace ``cameras`` with ``spp`` samples per pixel, Mitsuba seeds ``seed``,
        ``seed + 1``, ... per image; ``material`` a ``TextureMaterial`` or ``CorrectedMaterial``
        (its ``texture_data()``: base colour, roughness, metallic and normal map), read at mip
        ``texture_level`` (2^level-texel box averages: each texel of that level gets samples
        of its own, and gradients reach every texel under it); ``light`` an
        ``EnvironmentLight``; ``background`` as ``render_mesh``'s. Differentiable with
        respect to the textures and the light's ``radiance()``."""
        if spp < 1 or texture_level < 0:
            raise ValueError(f"need spp >= 1 and texture_level >= 0, got {spp}, {texture_level}")
        sensors = [self.sensor(cameras, i, spp) for i in range(len(cameras))]
        kd, ks, normal = (_mip(data, texture_level) for data in material.texture_data())
        inputs = {"envmap": self.envmap(light), "base_color": kd[..., :3].contiguous(),
                  "roughness": ks[..., 1:2].contiguous(), "metallic": ks[..., 2:3].contiguous(),
                  "normal_map": (F.normalize(normal, dim=-1) * 0.5 + 0.5).contiguous()}
        mi, dr, params, scene = self.mi, self.dr, self.params, self.scene

        @dr.wrap(source="torch", target="drjit")
        def trace(values):
            params[_ENVMAP] = values["envmap"]
            for name, key in TEXTURE_KEYS.items():
                params[key] = values[name]
            params.update()
            return [mi.render(scene, params, sensor=sensor, spp=spp, seed=seed + i)
                    for i, sensor in enumerate(sensors)]

        rgba = torch.stack(trace(inputs)).to(self.device)  # [B, H, W, 4], colour premultiplied
        return composite_over(rgba, background)
