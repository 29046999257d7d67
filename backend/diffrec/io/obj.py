"""Wavefront OBJ + MTL reading and writing.

Geometry: ``v`` (x y z; extra values such as w or vertex colours are ignored), ``vt`` (u v),
``vn``, ``f`` with any index form (``v``, ``v/vt``, ``v//vn``, ``v/vt/vn``; negative indices
count back from the latest element), polygons fan-triangulated (convex polygons are meant),
``usemtl`` / ``mtllib``. Lines, points, groups and smoothing groups are ignored. Files are
Y-up: positions and normals are converted to world space (Blender, Z up) on reading and back
on writing. OBJ UVs already have their origin at the bottom-left, as in memory. If only some
faces give ``vt``, the others get UV (0, 0); if only some give ``vn``, normals are dropped.

Materials (MTL), diffrec's and nvdiffrec's layout: ``Kd`` (linear base colour), ``d``
(alpha), ``Ks`` = (occlusion, roughness, metallic) (not a specular colour),
``Pr`` / ``Pm`` (roughness / metallic, the PBR extension Blender's OBJ exporter writes; these
win over ``Ks``), ``map_Kd`` (sRGB image), ``map_Ks`` (linear image, same layout as ``Ks``),
``bump`` / ``map_bump`` / ``norm`` (tangent-space normal map, OpenGL convention). Texture
options such as ``-bm 1`` are skipped. ``Ni`` (the index of refraction) is written where the
material has one (``Material.ior``) and not read: exporters write it whatever the surface.
Tangents are not stored: recompute them. Material libraries and textures must lie inside the
folder of the file that names them (``inside``).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import torch

from diffrec.errors import UserError
from diffrec.io.images import read_image, write_image
from diffrec.io.material import (
    Asset,
    Material,
    blender_to_yup,
    decode_normal_map,
    encode_normal_map,
    is_texture,
    yup_to_blender,
)
from diffrec.mesh import Mesh
from diffrec.protocol.captures import CaptureError, inside

log = logging.getLogger(__name__)

_NORMAL_MAP_KEYS = ("bump", "map_bump", "map_Bump", "norm")


def write_obj(
    path: str | Path,
    mesh: Mesh,
    material: Material | None = None,
    texture_stem: str | None = None,
) -> None:
    """Write ``mesh`` to ``path`` (.obj), with ``<stem>.mtl`` and the textures as
    ``<texture_stem>_kd.png`` (sRGB), ``<texture_stem>_ks.png`` (linear) and
    ``<texture_stem>_n.png`` beside it (``texture_stem`` defaults to the OBJ's stem)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    material = material or Material()
    out = io.StringIO()
    out.write(f"# diffrec\nmtllib {path.stem}.mtl\n")
    _write_rows(out, "v", blender_to_yup(mesh.positions.detach().cpu().double()))
    corners = [mesh.triangles]
    if mesh.uvs is not None:
        _write_rows(out, "vt", mesh.uvs.detach().cpu().double())
        corners.append(mesh.uv_triangles)
    if mesh.normals is not None:
        _write_rows(out, "vn", blender_to_yup(mesh.normals.detach().cpu().double()))
        corners.append(mesh.normal_triangles)
    out.write(f"usemtl {material.name}\n")
    indices = torch.stack([c.cpu() for c in corners], -1).numpy() + 1  # [T, 3, k], 1-based
    if mesh.uvs is None and mesh.normals is not None:
        corner_format = "{}//{}"
        indices = indices[..., [0, -1]]
    else:
        corner_format = "/".join(["{}"] * indices.shape[-1])
    face_format = "f " + " ".join([corner_format] * 3) + "\n"
    out.writelines(face_format.format(*row) for row in indices.reshape(len(indices), -1))
    path.write_text(out.getvalue())
    _write_mtl(path.with_suffix(".mtl"), material, texture_stem or path.stem)


def read_obj(path: str | Path) -> Asset:
    """Read an OBJ file (and the MTL files it names) into world space."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"OBJ file not found: {path}")
    v, vt, vn = [], [], []
    faces = []  # (position, uv or None, normal or None, material name) per triangle corner list
    materials: dict[str, Material] = {}
    current = None
    for number, line, key, args in _statements(path):
        try:
            if key == "v":
                v.append(_floats(args, 3))
            elif key == "vt":
                vt.append(_floats([*args[:1], *args[1:2], "0"], 2))
            elif key == "vn":
                vn.append(_floats(args, 3))
            elif key == "f":
                corners = [_parse_corner(a, len(v), len(vt), len(vn)) for a in args]
                if len(corners) < 3:
                    raise ValueError("a face needs at least 3 corners")
                for k in range(1, len(corners) - 1):
                    faces.append((corners[0], corners[k], corners[k + 1], current))
            elif key == "usemtl":
                current = " ".join(args)
            elif key == "mtllib":
                for name in " ".join(args).split():
                    materials.update(_read_mtl(inside(path.parent, name, f"{path}:{number}")))
        except CaptureError as error:  # a file named outside the folder: its own sentence
            raise UserError(str(error)) from None
        except (ValueError, IndexError) as error:
            raise UserError(f"{path}:{number}: cannot read {line.strip()!r}: {error}") from None
    if not faces:
        raise UserError(f"{path}: no faces")
    return _assemble(path, v, vt, vn, faces, materials)


def _statements(path: Path):
    """``(line number, line, keyword, arguments)`` for each non-empty line, comments removed."""
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        parts = line.split("#", 1)[0].split()
        if parts:
            yield number, line, parts[0], parts[1:]


def _floats(args: list[str], count: int) -> list[float]:
    if len(args) < count:
        raise ValueError(f"expected {count} numbers")
    return [float(a) for a in args[:count]]


def _parse_corner(token: str, nv: int, nvt: int, nvn: int) -> tuple[int, int | None, int | None]:
    fields = token.split("/")
    if len(fields) > 3:
        raise ValueError(f"bad face corner {token!r}")
    fields += [""] * (3 - len(fields))
    resolved = []
    for text, count in zip(fields, (nv, nvt, nvn), strict=True):
        if not text:
            resolved.append(None)
            continue
        index = int(text)
        index = index - 1 if index > 0 else count + index
        if not 0 <= index < count:
            raise ValueError(f"index {text} out of range (1..{count})")
        resolved.append(index)
    if resolved[0] is None:
        raise ValueError(f"face corner {token!r} has no vertex index")
    return tuple(resolved)


def _assemble(path, v, vt, vn, faces, materials) -> Asset:
    corners = [corner for face in faces for corner in face[:3]]
    positions = yup_to_blender(torch.tensor(v, dtype=torch.float64)).float()
    triangles = torch.tensor([c[0] for c in corners]).reshape(-1, 3)
    fields = {}
    uv_index = [c[1] for c in corners]
    if any(i is not None for i in uv_index):
        missing = len(vt)  # index of an extra UV (0, 0) for corners without one
        extra = [[0.0, 0.0]] if any(i is None for i in uv_index) else []
        fields["uvs"] = torch.tensor([*vt, *extra], dtype=torch.float32)
        fields["uv_triangles"] = torch.tensor(
            [missing if i is None else i for i in uv_index]
        ).reshape(-1, 3)
    normal_index = [c[2] for c in corners]
    if all(i is not None for i in normal_index):
        fields["normals"] = yup_to_blender(torch.tensor(vn, dtype=torch.float64)).float()
        fields["normal_triangles"] = torch.tensor(normal_index).reshape(-1, 3)
    elif any(i is not None for i in normal_index):
        log.warning("%s: only some faces have normals; normals dropped", path)
    names = [face[3] for face in faces]
    order = list(dict.fromkeys(names))
    material_list = [materials.get(name) or Material(name=name or "default") for name in order]
    for name in order:
        if name is not None and name not in materials:
            log.warning("%s: material %r is not defined; using defaults", path, name)
    material_ids = torch.tensor([order.index(name) for name in names])
    return Asset(Mesh(positions, triangles, **fields), material_list, material_ids)


def read_mtl(path: str | Path) -> list[Material]:
    """The materials of an MTL file, in file order (textures relative to it)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"material file not found: {path}")
    materials = list(_read_mtl(path).values())
    if not materials:
        raise UserError(f"{path} defines no material (no newmtl statement)")
    return materials


def _read_mtl(path: Path) -> dict[str, Material]:
    if not path.is_file():
        log.warning("material library not found: %s", path)
        return {}
    found: dict[str, dict] = {}
    values: dict = {}
    for number, line, key, args in _statements(path):
        try:
            if key == "newmtl":
                values = found.setdefault(" ".join(args), {})
            elif key in ("Kd", "Ks"):
                values[key] = [float(a) for a in args[:3]]
            elif key in ("d", "Pr", "Pm"):
                values[key] = float(args[0])
            elif key == "Tr":
                values["d"] = 1.0 - float(args[0])
            elif key in ("map_Kd", "map_Ks", *_NORMAL_MAP_KEYS):
                values["bump" if key in _NORMAL_MAP_KEYS else key] = inside(
                    path.parent, _map_file(args), f"{path}:{number}")
        except CaptureError as error:  # a file named outside the folder: its own sentence
            raise UserError(str(error)) from None
        except (ValueError, IndexError) as error:
            raise UserError(f"{path}:{number}: cannot read {line.strip()!r}: {error}") from None
    return {name: _material(name, values) for name, values in found.items()}


def _map_file(args: list[str]) -> str:
    """The file name of a texture statement, skipping options like ``-bm 1.0`` or ``-s 1 1 1``."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest.pop(0)
        while rest and _is_number(rest[0]):
            rest.pop(0)
    if not rest:
        raise ValueError("no texture file name")
    return " ".join(rest).replace("\\", "/")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _material(name: str, values: dict) -> Material:
    material = Material(name=name)
    if "map_Kd" in values:
        kd = torch.from_numpy(read_image(values["map_Kd"]))
    elif "Kd" in values:
        kd = torch.tensor(values["Kd"] + ([values["d"]] if values.get("d", 1.0) < 1.0 else []))
    else:
        kd = material.kd
    if "map_Ks" in values:
        ks = torch.from_numpy(read_image(values["map_Ks"], data=True)[..., :3])
    else:
        ks = torch.tensor(values.get("Ks", material.ks.tolist()))
        ks[1] = values.get("Pr", float(ks[1]))
        ks[2] = values.get("Pm", float(ks[2]))
    normal = None
    if "bump" in values:
        normal = decode_normal_map(read_image(values["bump"], data=True))
    return Material(name=name, kd=kd, ks=ks, normal=normal)


def _write_mtl(path: Path, material: Material, stem: str) -> None:
    lines = [f"newmtl {material.name}"]
    if is_texture(material.kd):
        write_image(path.parent / f"{stem}_kd.png", material.kd)
        lines.append(f"map_Kd {stem}_kd.png")
    else:
        lines.append("Kd " + " ".join(f"{x:.9g}" for x in material.kd[:3].tolist()))
        if material.kd.shape[0] == 4:
            lines.append(f"d {float(material.kd[3]):.9g}")
    if is_texture(material.ks):
        write_image(path.parent / f"{stem}_ks.png", material.ks, data=True)
        lines.append(f"map_Ks {stem}_ks.png")
    else:
        occlusion, roughness, metallic = material.ks.tolist()
        lines.append(f"Ks {occlusion:.9g} {roughness:.9g} {metallic:.9g}")
        lines += [f"Pr {roughness:.9g}", f"Pm {metallic:.9g}"]
    if material.normal is not None:
        write_image(path.parent / f"{stem}_n.png", encode_normal_map(material.normal), data=True)
        lines.append(f"bump {stem}_n.png")
    if material.ior is not None:
        lines.append(f"Ni {material.ior:.9g}")
    path.write_text("\n".join(lines) + "\n")


def _write_rows(out: io.StringIO, key: str, rows: torch.Tensor) -> None:
    """One ``key x y ...`` line per row, 9 significant digits (float32 round-trips exactly)."""
    np.savetxt(out, rows.numpy(), fmt=" ".join([key] + ["%.9g"] * rows.shape[1]))
