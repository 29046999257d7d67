"""A fetched result's files on disk: the asset they hold, and the GLB copied beside the .blend."""

from __future__ import annotations

from pathlib import Path

import bpy
import numpy as np

from . import import_result


def load_result(paths: list[Path]) -> import_result.Asset | None:
    """The asset in a job's result files, or None when they hold no mesh. Files: ``mesh.npz``
    (vertices, faces, optional uvs and uv_faces) and optional ``kd.npy``, ``ks.npy``,
    ``normal.npy``, ``envmap.npy`` (float32 [H,W,3], rows top-down)."""
    by_name = {Path(path).name: Path(path) for path in paths}
    if "mesh.npz" not in by_name:
        return None
    with np.load(by_name["mesh.npz"], allow_pickle=False) as mesh:
        asset = import_result.Asset(mesh["vertices"], mesh["faces"], mesh.get("uvs"),
                                    mesh.get("uv_faces"))
    for name in ("kd", "ks", "normal", "envmap"):
        if f"{name}.npy" in by_name:
            setattr(asset, name, np.load(by_name[f"{name}.npy"], allow_pickle=False))
    return asset


def save_glb_beside_blend(paths: list[Path], name: str) -> Path | None:
    """Copy the result's mesh.glb next to the saved .blend as ``<name>.glb``."""
    glb = next((path for path in paths if path.name == "mesh.glb"), None)
    if glb is None or not bpy.data.filepath:
        return None
    target = Path(bpy.data.filepath).parent / f"{bpy.path.clean_name(name)}.glb"
    target.write_bytes(glb.read_bytes())
    return target
