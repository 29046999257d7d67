"""Our scene in Mitsuba 3's terms: the package loaded for a device, cameras as sensors, the
environment light as an ``envmap`` emitter, a mesh as per-vertex arrays.

Conventions (each checked by a test against our rasterizer or split-sum renderer):

- **Variant**: ``cuda_ad_rgb`` for a CUDA device, ``llvm_ad_rgb`` (Dr.Jit's LLVM backend,
  which needs LLVM's shared library, ``libLLVM``) everywhere else.
- **Sensors**: a Mitsuba camera looks down its local +Z with +Y up and +X to the *left*; ours
  (Blender's) looks down -Z with +X to the right, so ``to_world = camera_to_world @
  diag(-1, 1, -1, 1)``. The horizontal field of view is ``2 atan(W / 2 fx)`` (square pixels
  only) and the principal point offsets are ``-(cx - W/2) / W`` and ``-(cy - H/2) / H``.
- **Light**: Mitsuba's ``envmap`` reads its lat-long image at ``u = atan2(l.x, -l.z) / 2 pi``,
  ``v = acos(l.y) / pi`` of the local direction ``l``; ``ENVMAP_TO_WORLD`` makes ``l = (d.y,
  d.z, d.x)`` for a world direction ``d``, which puts Blender's equirect mapping
  (``diffrec.light.equirect``) on it. Its grid has texel centres at ``u = (j + 1/2) / W`` and
  rows *on* the poles, ``v = i / (H - 1)``, plus a copy of the first column at the end:
  ``envmap_directions`` gives that grid's world directions, so the cube map is sampled where
  Mitsuba reads (no resampling of an equirect image).
- **Meshes**: attributes are per vertex, so corners are split where their UV or normal index
  differs (``seamless_arrays``); Mitsuba's texture ``v`` runs down the image, ours up, so
  ``v`` is flipped. A mesh without normals is shaded flat, as ``render_mesh`` shades it.
"""

from __future__ import annotations

import functools
import math
import os
from types import ModuleType

import numpy as np
import torch

from diffrec.camera import Cameras
from diffrec.errors import UserError, one_line
from diffrec.mesh import Mesh
from diffrec.optional import optional_module
from diffrec.render.mitsuba_check import cpu_backend_problem

__all__ = ["ENVMAP_TO_WORLD", "envmap_directions", "load_mitsuba", "seamless_arrays",
           "sensor_dict"]

ENVMAP_TO_WORLD = ((0.0, 0.0, 1.0, 0.0), (1.0, 0.0, 0.0, 0.0), (0.0, 1.0, 0.0, 0.0),
                   (0.0, 0.0, 0.0, 1.0))
_CAMERA_FLIP = torch.diag(torch.tensor([-1.0, 1.0, -1.0, 1.0], dtype=torch.float64))
_INSTALL = "pip install 'diffrec[pathtracing]'"


def _variant_for(device: torch.device) -> str:
    return "cuda_ad_rgb" if device.type == "cuda" else "llvm_ad_rgb"


@functools.cache
def _load(variant: str) -> tuple[ModuleType, ModuleType]:
    mitsuba, drjit = optional_module("mitsuba"), optional_module("drjit")
    if mitsuba is None or drjit is None:
        raise UserError(f"path tracing runs on Mitsuba 3, which is not installed: {_INSTALL}")
    try:
        mitsuba.set_variant(variant)
    except (ImportError, AttributeError, RuntimeError) as exc:
        if variant.startswith("llvm"):
            raise UserError(
                "Mitsuba's CPU backend needs LLVM's shared library (libLLVM, e.g. the Debian or "
                "Ubuntu package libllvm14, or Homebrew's llvm); point DRJIT_LIBLLVM_PATH at it "
                f"if it is installed somewhere unusual ({one_line(exc)})") from exc
        raise UserError(f"Mitsuba cannot run on the GPU here ({one_line(exc)})") from exc
    problem = cpu_backend_problem() if variant.startswith("llvm") else None
    if problem:
        raise UserError(f"{problem}: path tracing cannot run here; train with renderer: "
                        "rasterized, or point DRJIT_LIBLLVM_PATH at another libLLVM")
    return mitsuba, drjit


def load_mitsuba(device: torch.device | str) -> tuple[ModuleType, ModuleType]:
    """``(mitsuba, drjit)`` with the variant for ``device`` set and Dr.Jit's CPU threads
    matched to torch's. Raises UserError, in one sentence, when Mitsuba or LLVM is missing, or
    when Dr.Jit's CPU backend crashes on a test render (``mitsuba_check``: a child process, a
    few seconds, once per process)."""
    device = torch.device(device)
    mitsuba, drjit = _load(_variant_for(device))
    if device.type != "cuda" and "DRJIT_NUM_THREADS" not in os.environ:
        drjit.set_thread_count(torch.get_num_threads())
    return mitsuba, drjit


def sensor_dict(cameras: Cameras, index: int, spp: int) -> dict:
    """A Mitsuba ``perspective`` sensor (box-filtered RGBA film) for camera ``index``, with
    ``to_world`` as nested lists (make it a ``ScalarTransform4f`` before loading)."""
    width, height = cameras.width, cameras.height
    fx, fy = float(cameras.fx[index]), float(cameras.fy[index])
    if abs(fx - fy) > 1e-3 * fx:
        raise UserError(f"path tracing needs square pixels; camera {index} has fx {fx:.3f} and "
                        f"fy {fy:.3f}")
    to_world = cameras.camera_to_world[index].detach().cpu().double() @ _CAMERA_FLIP
    near, far = float(cameras.near[index]), float(cameras.far[index])
    return {
        "type": "perspective",
        "fov": math.degrees(2 * math.atan(width / (2 * fx))), "fov_axis": "x",
        "principal_point_offset_x": -(float(cameras.cx[index]) - width / 2) / width,
        "principal_point_offset_y": -(float(cameras.cy[index]) - height / 2) / height,
        "near_clip": near, "far_clip": far,
        "to_world": to_world.tolist(),
        "film": {"type": "hdrfilm", "width": width, "height": height, "pixel_format": "rgba",
                 "rfilter": {"type": "box"}},
        "sampler": {"type": "independent", "sample_count": spp},
    }


def envmap_directions(height: int, width: int) -> torch.Tensor:
    """World directions ``[height, width, 3]`` (float64) of Mitsuba's envmap grid without its
    repeated last column: row ``i`` at polar angle ``pi i / (height - 1)`` from +Z, column
    ``j`` at Blender's ``u = (j + 1/2) / width`` (see the module docstring)."""
    theta = math.pi * torch.arange(height, dtype=torch.float64) / (height - 1)
    phi = 2 * math.pi * (torch.arange(width, dtype=torch.float64) + 0.5) / width
    theta, phi = torch.meshgrid(theta, phi, indexing="ij")
    local = torch.stack([phi.sin() * theta.sin(), theta.cos(), -phi.cos() * theta.sin()], -1)
    return local @ torch.tensor(ENVMAP_TO_WORLD, dtype=torch.float64)[:3, :3].T


def seamless_arrays(mesh: Mesh) -> dict[str, np.ndarray]:
    """``mesh`` as per-vertex arrays: ``positions`` [N, 3] float32, ``faces`` [T, 3] uint32,
    and ``normals`` [N, 3] and ``uvs`` [N, 2] (``v`` flipped for Mitsuba) where the mesh has
    them; a corner gets a vertex of its own per distinct (position, uv, normal) index."""
    columns = [mesh.triangles]
    if mesh.uvs is not None:
        columns.append(mesh.uv_triangles)
    if mesh.normals is not None:
        columns.append(mesh.normal_triangles)
    corners = torch.stack([c.reshape(-1).cpu() for c in columns], -1)  # [T*3, k]
    unique, faces = torch.unique(corners, dim=0, return_inverse=True)
    arrays = {"positions": mesh.positions.detach().cpu()[unique[:, 0]],
              "faces": faces.reshape(-1, 3)}
    if mesh.uvs is not None:
        uv = mesh.uvs.detach().cpu()[unique[:, 1]]
        arrays["uvs"] = torch.stack([uv[:, 0], 1.0 - uv[:, 1]], -1)
    if mesh.normals is not None:
        arrays["normals"] = mesh.normals.detach().cpu()[unique[:, -1]]
    return {name: value.numpy().astype(np.uint32 if name == "faces" else np.float32)
            for name, value in arrays.items()}
