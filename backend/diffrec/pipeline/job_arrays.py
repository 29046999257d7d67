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

Start textures (``START_TEXTURES``), each optional, each float32 [H, W, 3] over the base
mesh's UVs with rows top-down as images are (row 0 is v = 1; the backend's textures are
stored the same way, so no row is flipped here): ``start_kd`` linear base colour,
``start_ks`` occlusion (0: none), roughness, metallic (glTF's channel order), ``start_normal``
a tangent-space normal map encoded ``(n + 1) / 2`` in [0, 1] (OpenGL: +Y along increasing
v); ``start_coat`` (``START_COAT``), float32 [2], a clear coat's weight and roughness over
the whole surface; and ``start_ior`` (``START_IOR``), float32 [1], the non-metal's index of
refraction over the whole surface (none: 1.5). They become the base material
(``start_material``), which a job starts from (``settings_for_start``), whose coat it keeps
and whose IOR it starts from.

Start renders (``START_IMAGES``), optional: the base mesh with its start material rendered by
the targets' renderer, one image per target view in the targets' order and at their size,
laid out as ``images`` (``pipeline.renderer_gap``: the targets are corrected by how that
renderer shows the start). They take the targets' cameras and view names (``view_000`` ...),
so they follow the views the server holds out (``sent_start_renders``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from diffrec.errors import UserError
from diffrec.io import Material
from diffrec.io.material import check_coat, decode_normal_map, encode_normal_map
from diffrec.mesh import Mesh
from diffrec.pipeline.initial_state import CONSTANT_START
from diffrec.pipeline.views import Views, from_arrays
from diffrec.protocol.settings import Settings
from diffrec.shading.bsdf import GLASS_IOR, distinct_ior

START_TEXTURES = ("start_kd", "start_ks", "start_normal")
"""The start textures' array names, in the material's channel order (kd, ks, normal)."""
START_COAT = "start_coat"
"""The start's clear coat's array name: ``(weight, roughness)``, ``Material.coat``."""
START_IOR = "start_ior"
"""The start's index of refraction's array name: ``(ior,)``, ``Material.ior``."""
START_MATERIAL = (*START_TEXTURES, START_COAT, START_IOR)
"""Every array of the start material."""
START_IMAGES = "start_images"
"""The start renders' array name."""


def path_traced_refusal(coat: bool, ior: float) -> str | None:
    """Why the path-traced pass cannot start from a material with a clear coat (``coat``) or
    of IOR ``ior`` (it shades neither a coat nor an IOR other than glass's), in a sentence;
    None: it can."""
    if coat:
        return ("the start has a clear coat, which the path-traced pass does not shade: set "
                "renderer to rasterized, or start without the coat")
    if distinct_ior(ior) is not None:
        return (f"the start has IOR {ior:.2f}, which the path-traced pass does not shade (it "
                f"shades {GLASS_IOR}): set renderer to rasterized")
    return None


def to_job_arrays(views: Views, base_mesh: Mesh | None = None,
                  envmap: torch.Tensor | np.ndarray | None = None,
                  base_material: Material | None = None,
                  start_renders: Views | None = None) -> dict[str, np.ndarray]:
    """The wire arrays of ``views`` and, when given, the starting mesh, the HDRI, the
    starting mesh's material as start textures (a constant channel as one texel; a base
    colour's alpha is not sent) and the start renders (one per view of ``views``, in their
    order: ``renderer_gap.matching_start_renders``)."""
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
    if base_material is not None:
        for name, channel in zip(START_TEXTURES, (base_material.kd, base_material.ks,
                                                  base_material.normal), strict=True):
            if channel is not None:
                texels = channel if channel.ndim == 3 else channel[None, None]
                arrays[name] = (encode_normal_map(texels) if name == "start_normal"
                                else _float32(texels[..., :3]))
        if base_material.coat is not None:
            arrays[START_COAT] = _float32(base_material.coat)
        if base_material.ior is not None:
            arrays[START_IOR] = _float32([base_material.ior])
    if start_renders is not None:
        arrays[START_IMAGES] = _float32(start_renders.images)
    return arrays


def from_job_arrays(arrays: Mapping[str, np.ndarray]
                    ) -> tuple[Views, Mesh | None, torch.Tensor | None]:
    """``(views, base mesh or None, envmap or None)`` from a job's arrays. Raises
    ``UserError`` for arrays that make no views (see ``views.from_arrays``)."""
    views = _views(arrays, arrays["images"])
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


def check_start_images(arrays: Mapping[str, np.ndarray]) -> None:
    """Raises ``UserError`` (one sentence) unless the start renders, when sent, are one image
    per target image at the targets' size."""
    if START_IMAGES not in arrays:
        return
    start, targets = np.shape(arrays[START_IMAGES]), np.shape(arrays["images"])
    if start[0] != targets[0]:
        raise UserError(f"{start[0]} {START_IMAGES} for {targets[0]} images: send one start "
                        "render per target view, in the targets' order")
    if start[1:3] != targets[1:3]:
        raise UserError(f"the {START_IMAGES} are {start[2]}x{start[1]} but the images "
                        f"{targets[2]}x{targets[1]}: render the start at the targets' size")


def sent_start_renders(arrays: Mapping[str, np.ndarray]) -> Views | None:
    """The start renders sent (None without them) as ``Views`` with the targets' cameras and
    view names, so that ``renderer_gap.matching_start_renders`` pairs them with whichever
    views are trained on. Raises ``UserError`` as ``check_start_images`` and
    ``views.from_arrays`` do."""
    if START_IMAGES not in arrays:
        return None
    check_start_images(arrays)
    return _views(arrays, arrays[START_IMAGES])


def start_material(arrays: Mapping[str, np.ndarray]) -> Material | None:
    """The base material the start textures, coat and IOR make (None without any): a channel
    not sent is the constant start's (``initial_state.CONSTANT_START``), the normal map decoded
    to unit vectors. Raises ``UserError`` for a coat outside [0, 1] or an IOR below 1."""
    if not any(name in arrays for name in START_MATERIAL):
        return None
    kd, ks, normal = (arrays.get(name) for name in START_TEXTURES)
    coat, ior = arrays.get(START_COAT), arrays.get(START_IOR)
    return Material(
        "start textures",
        kd=_tensor(kd).float() if kd is not None else torch.tensor(CONSTANT_START["kd"]),
        ks=_tensor(ks).float() if ks is not None else torch.tensor(CONSTANT_START["ks"]),
        normal=None if normal is None else decode_normal_map(np.asarray(normal, np.float32)),
        coat=None if coat is None else check_coat(np.asarray(coat, np.float32), START_COAT),
        ior=None if ior is None else float(np.asarray(ior).reshape(-1)[0]))


def settings_for_start(settings: Settings, material: Material | None) -> Settings:
    """The settings a job with start textures (``material``, from ``start_material``) runs:
    it starts from them, its ``init_textures`` "constant" (the default) read as "base_mesh",
    and trains the normal map it was given, ``normal_map`` "auto" read as "on"; an explicit
    "random" start, or ``normal_map`` "off", is kept. ``settings`` itself without them."""
    if material is None:
        return settings
    changes = {}
    if settings.material.init_textures == "constant":
        changes["init_textures"] = "base_mesh"
    if material.normal is not None and settings.material.normal_map == "auto":
        changes["normal_map"] = "on"
    return settings.replace(**changes) if changes else settings


def _views(arrays: Mapping[str, np.ndarray], images) -> Views:
    """``images`` seen from the job's cameras (``views.from_arrays``)."""
    intrinsics = np.asarray(arrays["intrinsics"])
    return from_arrays(arrays["cameras"], intrinsics[:, :4], images,
                       near=intrinsics[:, 4].astype(np.float32),
                       far=intrinsics[:, 5].astype(np.float32))


def _float32(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=np.float32)


def _tensor(value) -> torch.Tensor:
    return torch.from_numpy(np.array(value))  # an own, writable copy


__all__ = ["START_COAT", "START_IMAGES", "START_IOR", "START_MATERIAL", "START_TEXTURES",
           "check_start_images", "from_job_arrays", "sent_start_renders", "settings_for_start",
           "start_material", "to_job_arrays"]
