"""The ``optimize`` task's input arrays (docs/protocol.md, section 8) to and from the
pipeline's ``Views``, base ``Mesh`` and environment map.

``to_job_arrays`` is what ``diffrec submit`` sends for a dataset folder or a config;
``from_job_arrays`` is how the server's optimize runner reads any client's arrays (the
Blender add-on's included) back. Conventions, both ways: ``images`` float32 [N, H, W, 4]
scene-linear with straight alpha, rows top-down; ``cameras`` float32 [N, 4, 4]
camera-to-world (Blender's: looks down -Z, +Y up); ``intrinsics`` float32 [N, 6] fx, fy,
cx, cy (pixels, origin at the top-left corner), near, far; ``vertices`` float32 [V, 3],
``faces`` int32 [F, 3], optional ``uvs`` float32 [U, 2] (origin bottom-left) with
``uv_faces`` int32 [F, 3] and ``normals`` float32 [N, 3] with ``normal_faces`` int32 [F, 3],
in Blender's world; ``envmap`` float32 [H, W, 3] equirectangular linear radiance.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from diffrec.mesh import Mesh
from diffrec.pipeline.views import Views, from_arrays


def to_job_arrays(views: Views, base_mesh: Mesh | None = None,
                  envmap: torch.Tensor | np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The wire arrays of ``views`` and, when given, the starting mesh and the HDRI."""
    cameras = views.cameras.to("cpu")
    intrinsics = torch.stack([cameras.fx, cameras.fy, cameras.cx, cameras.cy,
                              cameras.near, cameras.far], -1)
    arrays = {
        "images": _float32(views.images),
        "cameras": _float32(cameras.camera_to_world),
        "intrinsics": _float32(intrinsics),
    }
    if base_mesh is not None:
        arrays["vertices"] = _float32(base_mesh.positions)
        arrays["faces"] = base_mesh.triangles.detach().cpu().numpy().astype(np.int32)
        for values, index, triangles in (("uvs", "uv_faces", "uv_triangles"),
                                         ("normals", "normal_faces", "normal_triangles")):
            if getattr(base_mesh, values) is not None:
                arrays[values] = _float32(getattr(base_mesh, values))
                arrays[index] = (getattr(base_mesh, triangles).detach().cpu().numpy()
                                 .astype(np.int32))
    if envmap is not None:
        arrays["envmap"] = _float32(envmap[..., :3])
    return arrays


def from_job_arrays(arrays: Mapping[str, np.ndarray]
                    ) -> tuple[Views, Mesh | None, torch.Tensor | None]:
    """``(views, base mesh or None, envmap or None)`` from a job's arrays. Raises
    ``UserError`` for arrays that make no views (see ``views.from_arrays``)."""
    intrinsics = np.asarray(arrays["intrinsics"])
    views = from_arrays(arrays["cameras"], intrinsics[:, :4], arrays["images"],
                        near=intrinsics[:, 4].astype(np.float32),
                        far=intrinsics[:, 5].astype(np.float32))
    base = None
    if "vertices" in arrays:
        uvs, normals = arrays.get("uvs"), arrays.get("normals")
        base = Mesh(_tensor(arrays["vertices"]).float(), _tensor(arrays["faces"]).long(),
                    uvs=None if uvs is None else _tensor(uvs).float(),
                    uv_triangles=None if uvs is None else _tensor(arrays["uv_faces"]).long(),
                    normals=None if normals is None else _tensor(normals).float(),
                    normal_triangles=(None if normals is None
                                      else _tensor(arrays["normal_faces"]).long()))
    envmap = arrays.get("envmap")
    return views, base, None if envmap is None else _tensor(envmap).float()


def _float32(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=np.float32)


def _tensor(value) -> torch.Tensor:
    return torch.from_numpy(np.array(value))  # an own, writable copy


__all__ = ["from_job_arrays", "to_job_arrays"]
