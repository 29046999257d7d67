"""Writing a finished run: one result folder, described by its manifest.

Layout of ``out_dir`` (every file listed in ``manifest.json``, with its role):

- ``mesh.glb`` (mesh): the mesh in Blender's world frame (stored Y-up, as glTF wants) with a
  metallic-roughness material: ``kd`` the base colour texture (sRGB), ``ks`` one linear
  texture used as metallic-roughness and occlusion texture (R = 1 - occlusion, G = roughness,
  B = metallic), the tangent-space normal map, and a clear coat the start gave
  (``KHR_materials_clearcoat``); what Blender's own glTF importer reads.
- ``probe.hdr`` (light): the environment light, 512 x 1024 equirectangular, linear Radiance
  HDR, mapped like Blender's Environment Texture.
- ``validation_view_NN.png`` (validation): held-out view NN, target | result | error x 4,
  sRGB; the view's name is ``metrics.json``'s ``views[NN].name``.
- ``metrics.json`` (metrics): validation figures, timings, the settings and the loss history.
- only when asked (``export_obj``): ``mesh.obj``, ``mesh.mtl``, ``texture_kd.png`` (sRGB),
  ``texture_ks.png`` and ``texture_n.png`` (linear) (obj), as nvdiffrec writes them (without
  a clear coat, which MTL cannot hold: a warning says so).
- ``manifest.json``, written last (``diffrec.protocol.manifest``): its presence means the
  result is complete. Anything else in ``out_dir`` (checkpoints, previews) is not part of the
  result; the files of an earlier result there that this one does not write are removed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from diffrec.io import Material, write_glb, write_image, write_obj
from diffrec.io.ktx2_textures import write_ktx2_variant
from diffrec.io.material import is_texture
from diffrec.protocol.manifest import (
    MANIFEST_NAME,
    earlier_entries,
    remove_stale,
    write_manifest,
)
from diffrec.render.metrics import display

PROBE_SIZE = (512, 1024)
"""probe.hdr's (height, width) in pixels."""
log = logging.getLogger(__name__)


def textures_to_material(material) -> Material:
    """A ``render.material.TextureMaterial`` as a ``diffrec.io.Material`` (numpy arrays), its
    fitted mip levels (``mips``, where it has them), its clear coat and its IOR (where not 1.5)
    included, normal levels renormalised."""
    kd = material.kd.data.detach().cpu().numpy()
    ks = material.ks.data.detach().cpu().numpy()
    normal = None
    if material.normal is not None:
        normal = F.normalize(material.normal.data.detach().cpu(), dim=-1).numpy()
    mips = {name: [(F.normalize(level.detach().cpu(), dim=-1) if name == "normal"
                    else level.detach().cpu()).numpy() for level in levels]
            for name, levels in (getattr(material, "mips", None) or {}).items()}
    coat = getattr(material, "coat", None)
    return Material(name="diffrec", kd=kd, ks=ks, normal=normal, mips=mips or None,
                    coat=None if coat is None else coat.detach().cpu(),
                    ior=material.distinct_ior)


def write_result(out_dir: Path, result, *, export_obj: bool = False) -> Path:
    """Write a ``pipeline.run.Result`` as the result folder described above and return its
    manifest's path; ``export_obj`` adds the OBJ files. A manifest of an earlier run in
    ``out_dir`` is removed first, so until this returns the folder has none; once the new
    one is written, the earlier result's files it does not list are removed too."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_entries(out_dir)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    roles, warnings = {}, []
    if result.validation is not None:
        validation = result.validation
        roles.update(dict.fromkeys(write_validation(out_dir, validation.renders,
                                                    validation.targets), "validation"))
    roles.update(write_asset(out_dir, result.mesh, result.material, result.light,
                             export_obj=export_obj, warnings=warnings))
    metrics = result.metrics
    if warnings:
        metrics = {**metrics, "warnings": [*metrics.get("warnings", []), *warnings]}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    roles["metrics.json"] = "metrics"
    manifest = write_manifest(out_dir, roles)
    if removed := remove_stale(out_dir, earlier, roles):
        log.info("removed the earlier result's %s from %s", ", ".join(removed), out_dir)
    return manifest


def write_asset(out_dir: Path, mesh, material, light, *, export_obj: bool = False,
                warnings: list[str] | None = None) -> dict[str, str]:
    """mesh.glb, the KTX2 variant and probe.hdr (and the OBJ files when ``export_obj``) in
    ``out_dir``; returns {file name: manifest role} of what it wrote. What it could not
    write is logged and said in sentences appended to ``warnings``."""
    io_material = textures_to_material(material)
    mesh = mesh.to("cpu")
    write_glb(out_dir / "mesh.glb", mesh, io_material)
    probe = light.to_equirect(*PROBE_SIZE).detach().cpu().numpy()
    write_image(out_dir / "probe.hdr", probe)
    roles = {"mesh.glb": "mesh", "probe.hdr": "light"}
    ktx2_files, notes = write_ktx2_variant(out_dir, mesh, io_material)
    roles.update(dict.fromkeys(ktx2_files, "ktx2"))
    for note in notes:
        log.warning("%s", note)
    if warnings is not None:
        warnings.extend(notes)
    if export_obj:
        write_obj(out_dir / "mesh.obj", mesh, io_material, texture_stem="texture")
        if io_material.coat is not None:
            notes = ["mesh.obj has no clear coat (MTL cannot hold one): mesh.glb has it"]
            log.warning("%s", notes[0])
            if warnings is not None:
                warnings.extend(notes)
        textures = {"kd": io_material.kd, "ks": io_material.ks, "n": io_material.normal}
        roles.update(dict.fromkeys(
            ["mesh.obj", "mesh.mtl", *(f"texture_{suffix}.png" for suffix, value
                                       in textures.items()
                                       if value is not None and is_texture(value))], "obj"))
    return roles


def write_validation(out_dir: Path, renders: torch.Tensor, targets: torch.Tensor) -> list[str]:
    """``validation_view_NN.png`` per view: target | result | |error| x 4, all sRGB-encoded;
    returns the file names."""
    names = []
    for index, (render, target) in enumerate(zip(renders, targets, strict=True)):
        shown_render, shown_target = display(render[None])[0], display(target[None])[0]
        error = ((shown_render - shown_target).abs() * 4).clamp(0, 1)
        panel = torch.cat([shown_target, shown_render, error], dim=1).cpu().numpy()
        names.append(f"validation_view_{index:02d}.png")
        write_image(out_dir / names[-1], np.ascontiguousarray(panel), data=True)
    return names
