"""Writing a finished run: the asset (OBJ + MTL + textures, GLB, probe.hdr), validation
images and metrics.json.

Layout of ``out_dir``: ``mesh.obj``, ``mesh.mtl``, ``texture_kd.png`` (sRGB),
``texture_ks.png`` and ``texture_n.png`` (linear), ``mesh.glb`` (the same asset),
``probe.hdr`` (512 x 1024 equirectangular, mapped like Blender's Environment Texture),
``validation/view_NN.png`` (target | result | error, sRGB) and ``metrics.json``; and the
exact float arrays in Blender's world frame (what the add-on imports): ``mesh.npz``
(vertices [V,3], faces [F,3], uvs [U,2], uv_faces [F,3]), ``kd.npy``, ``ks.npy`` (textures
[H,W,3], rows top-down, linear), ``normal.npy`` (the tangent-space normal map encoded as
``(n + 1) / 2`` in [0, 1], as in ``texture_n.png``) and ``envmap.npy`` (the probe).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from diffrec.io import Material, write_glb, write_image, write_obj
from diffrec.io.material import encode_normal_map
from diffrec.render.metrics import display


def textures_to_material(material) -> Material:
    """A ``render.material.TextureMaterial`` as a ``diffrec.io.Material`` (numpy arrays)."""
    kd = material.kd.data.detach().cpu().numpy()
    ks = material.ks.data.detach().cpu().numpy()
    normal = None
    if material.normal is not None:
        normal = F.normalize(material.normal.data.detach().cpu(), dim=-1).numpy()
    return Material(name="diffrec", kd=kd, ks=ks, normal=normal)


def write_asset(out_dir: Path, mesh, material, light) -> None:
    """mesh.obj/.mtl + texture_*.png, mesh.glb and probe.hdr."""
    out_dir.mkdir(parents=True, exist_ok=True)
    io_material = textures_to_material(material)
    mesh = mesh.to("cpu")
    write_obj(out_dir / "mesh.obj", mesh, io_material, texture_stem="texture")
    write_glb(out_dir / "mesh.glb", mesh, io_material)
    probe = light.to_equirect(512, 1024).detach().cpu().numpy()
    write_image(out_dir / "probe.hdr", probe)
    np.savez(out_dir / "mesh.npz", vertices=mesh.positions.detach().numpy(),
             faces=mesh.triangles.numpy().astype(np.int32), uvs=mesh.uvs.detach().numpy(),
             uv_faces=mesh.uv_triangles.numpy().astype(np.int32))
    arrays = {"kd": io_material.kd, "ks": io_material.ks}
    if io_material.normal is not None:
        arrays["normal"] = encode_normal_map(io_material.normal)
    for name, value in arrays.items():
        np.save(out_dir / f"{name}.npy", np.ascontiguousarray(value[..., :3], np.float32))
    np.save(out_dir / "envmap.npy", probe.astype(np.float32))


def write_validation(out_dir: Path, renders: torch.Tensor, targets: torch.Tensor,
                     names: list[str]) -> list[Path]:
    """One PNG per view: target | result | |error| x 4, all sRGB-encoded."""
    folder = out_dir / "validation"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, (render, target) in enumerate(zip(renders, targets, strict=True)):
        shown_render, shown_target = display(render[None])[0], display(target[None])[0]
        error = ((shown_render - shown_target).abs() * 4).clamp(0, 1)
        panel = torch.cat([shown_target, shown_render, error], dim=1).cpu().numpy()
        path = folder / f"view_{index:02d}.png"
        write_image(path, np.ascontiguousarray(panel), data=True)
        paths.append(path)
    (folder / "names.json").write_text(json.dumps(names))
    return paths


def write_metrics(out_dir: Path, metrics: dict) -> None:
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))


def write_result(out_dir: Path, result) -> None:
    """A ``pipeline.run.Result`` into ``out_dir``: the validation images (when it has them),
    the asset, then metrics.json."""
    if result.validation is not None:
        validation = result.validation
        write_validation(out_dir, validation.renders, validation.targets, validation.names)
    write_asset(out_dir, result.mesh, result.material, result.light)
    write_metrics(out_dir, result.metrics)
