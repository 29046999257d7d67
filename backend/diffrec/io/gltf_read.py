"""Reading glTF 2.0 (.glb, or .gltf with embedded or neighbouring buffers) through pygltflib.

Every triangle primitive of every mesh node in the default scene is merged into one ``Mesh``
(node transforms applied), converted from Y-up to world space, v flipped back to a
bottom-left origin. glTF vertices are split at seams; with ``weld=True`` (the default) exactly
coincident positions are merged again, so the positions are shared (UV, normal and tangent
index buffers keep the glTF vertices). Materials are read as in ``gltf_write``'s docstring,
folding factors into textures: kd = baseColorFactor x baseColorTexture (sRGB), ks =
(strength x (1 - occlusion.R), roughnessFactor x G, metallicFactor x B), normal map with its
scale, ``KHR_materials_clearcoat`` as the material's uniform ``coat``, ``KHR_materials_ior`` as
its ``ior``. Only TEXCOORD_0 is
supported; Draco/meshopt compression and sparse accessors are not.
"""

from __future__ import annotations

import base64
import logging
import struct
from pathlib import Path

import cv2
import numpy as np
import pygltflib as gl
import torch

from diffrec.errors import UserError, one_line
from diffrec.geometry.cleanup import weld_vertices
from diffrec.io.gltf_write import CLEARCOAT, IOR
from diffrec.io.images import decode_image
from diffrec.io.material import Asset, Material, decode_normal_map, yup_to_blender
from diffrec.mesh import Mesh
from diffrec.protocol.captures import CaptureError, inside
from diffrec.protocol.file_checks import FileCheckError, parse_json

log = logging.getLogger(__name__)

_COMPONENTS = {
    gl.BYTE: np.int8,
    gl.UNSIGNED_BYTE: np.uint8,
    gl.SHORT: np.int16,
    gl.UNSIGNED_SHORT: np.uint16,
    gl.UNSIGNED_INT: np.uint32,
    gl.FLOAT: np.float32,
}
_WIDTHS = {gl.SCALAR: 1, gl.VEC2: 2, gl.VEC3: 3, gl.VEC4: 4, gl.MAT4: 16}


def read_gltf(path: str | Path, weld: bool = True) -> Asset:
    """Read a .glb / .gltf file into world space (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"glTF file not found: {path}")
    try:
        return _read(path, weld)
    except (ValueError, LookupError, TypeError, AttributeError, struct.error, OSError) as error:
        raise UserError(f"cannot read the glTF file {path}: {one_line(error)}; is the file "
                        "whole, and glTF 2.0?") from None


def _read(path: Path, weld: bool) -> Asset:
    """``read_gltf`` on an existing file; a malformed one raises what its parser raises."""
    gltf = _load(path)
    if gltf is None:
        raise ValueError("not a glTF file")
    reader = _Reader(gltf, path)
    parts = [
        reader.primitive(primitive, matrix)
        for node, matrix in _mesh_nodes(gltf)
        for primitive in gltf.meshes[node.mesh].primitives
    ]
    if not parts:
        raise UserError(f"{path}: no triangle meshes in the default scene")
    mesh, material_indices = _merge(parts, path)
    used = sorted(set(material_indices.tolist()))
    materials = [reader.material(index) for index in used]
    material_ids = torch.tensor([used.index(i) for i in material_indices.tolist()])
    if weld:
        positions, triangles = weld_vertices(mesh.positions, mesh.triangles)
        mesh = mesh.replace(positions=positions, triangles=triangles)
    return Asset(mesh, materials, material_ids)


def _load(path: Path) -> gl.GLTF2 | None:
    """pygltflib's reading of ``path``, its JSON checked first (``parse_json``: a nesting limit,
    so that a deeply nested file is a sentence, not a RecursionError inside pygltflib)."""
    data = path.read_bytes()
    binary = path.suffix.lower() == ".glb"
    json_length, = struct.unpack_from("<I", data, 12) if binary else (len(data),)
    try:
        parse_json(data[20:20 + json_length] if binary else data, f"the glTF file {path}")
    except FileCheckError as error:
        raise UserError(str(error)) from None
    gltf = gl.GLTF2.load_from_bytes(data) if binary else gl.GLTF2.gltf_from_json(data.decode())
    if gltf is not None:
        gltf._path, gltf._name = path.parent, path.name
    return gltf


def _mesh_nodes(gltf: gl.GLTF2):
    """(node, 4x4 float64 world matrix in file space) for every node with a mesh."""
    scene = gltf.scenes[gltf.scene or 0] if gltf.scenes else gl.Scene(nodes=[])
    stack = [(index, np.eye(4)) for index in scene.nodes]
    while stack:
        index, parent = stack.pop()
        node = gltf.nodes[index]
        matrix = parent @ _local_matrix(node)
        if node.mesh is not None:
            yield node, matrix
        stack.extend((child, matrix) for child in node.children or [])


def _local_matrix(node: gl.Node) -> np.ndarray:
    if node.matrix is not None:
        return np.array(node.matrix, dtype=np.float64).reshape(4, 4).T  # column-major
    x, y, z, w = node.rotation or [0.0, 0.0, 0.0, 1.0]
    rotation = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    matrix = np.eye(4)
    matrix[:3, :3] = rotation * np.array(node.scale or [1.0, 1.0, 1.0])
    matrix[:3, 3] = node.translation or [0.0, 0.0, 0.0]
    return matrix


class _Reader:
    def __init__(self, gltf: gl.GLTF2, path: Path):
        self.gltf, self.path = gltf, path
        self.buffers: dict[int, bytes] = {}

    def buffer(self, index: int) -> bytes:
        if index not in self.buffers:
            uri = self.gltf.buffers[index].uri
            if uri is None:
                self.buffers[index] = self.gltf.binary_blob()
            else:
                self.buffers[index] = self._uri_bytes(uri, f"buffer {index}")
        return self.buffers[index]

    def _uri_bytes(self, uri: str, what: str) -> bytes:
        """The bytes a buffer's or an image's ``uri`` names: embedded, or a file inside the
        glTF's folder (``inside``: the rule for every file an input names)."""
        if uri.startswith("data:"):
            return base64.b64decode(uri.split(",", 1)[1])
        try:
            return inside(self.path.parent, uri, f"{self.path}, {what}").read_bytes()
        except CaptureError as error:
            raise UserError(str(error)) from None

    def view_bytes(self, index: int) -> tuple[bytes, int, int | None]:
        view = self.gltf.bufferViews[index]
        return self.buffer(view.buffer), view.byteOffset or 0, view.byteStride

    def accessor(self, index: int) -> np.ndarray:
        """An accessor's values, [count] or [count, width], as float64 (normalised integers
        scaled as the spec says) or int64 for index buffers."""
        accessor = self.gltf.accessors[index]
        if accessor.sparse is not None or accessor.bufferView is None:
            raise UserError(f"{self.path}: sparse accessors are not supported")
        dtype = np.dtype(_COMPONENTS[accessor.componentType]).newbyteorder("<")
        width = _WIDTHS[accessor.type]
        data, offset, stride = self.view_bytes(accessor.bufferView)
        offset += accessor.byteOffset or 0
        stride = stride or dtype.itemsize * width
        values = np.ndarray(
            (accessor.count, width), dtype, data, offset, (stride, dtype.itemsize)
        ).copy()
        if accessor.normalized:
            limit = np.iinfo(dtype).max
            values = np.maximum(values / limit, -1.0)
        values = values.astype(np.float64 if dtype.kind == "f" or accessor.normalized else np.int64)
        return values[:, 0] if accessor.type == gl.SCALAR else values

    def primitive(self, primitive: gl.Primitive, matrix: np.ndarray) -> dict:
        if primitive.mode not in (None, gl.TRIANGLES):
            raise UserError(f"{self.path}: only triangle primitives are supported")
        if primitive.extensions:
            raise UserError(f"{self.path}: compressed primitives {list(primitive.extensions)}")
        attributes = primitive.attributes
        positions = self.accessor(attributes.POSITION)
        if primitive.indices is None:
            indices = np.arange(len(positions))
        else:
            indices = self.accessor(primitive.indices)
        linear = matrix[:3, :3]
        part = {
            "positions": positions @ linear.T + matrix[:3, 3],
            "triangles": indices.reshape(-1, 3),
            "material": primitive.material,
        }
        if attributes.NORMAL is not None:
            normals = self.accessor(attributes.NORMAL) @ np.linalg.inv(linear)
            part["normals"] = normals / np.linalg.norm(normals, axis=1, keepdims=True)
        if attributes.TANGENT is not None:
            tangents = self.accessor(attributes.TANGENT)
            xyz = tangents[:, :3] @ linear.T
            w = tangents[:, 3:] * np.sign(np.linalg.det(linear))
            part["tangents"] = np.concatenate(
                [xyz / np.linalg.norm(xyz, axis=1, keepdims=True), w], axis=1
            )
        if attributes.TEXCOORD_0 is not None:
            uvs = self.accessor(attributes.TEXCOORD_0)
            part["uvs"] = np.stack([uvs[:, 0], 1.0 - uvs[:, 1]], axis=1)
        if np.linalg.det(linear) < 0:  # a mirroring transform turns the winding around
            part["triangles"] = part["triangles"][:, ::-1]
        return part

    def image(self, texture_index: int, data: bool) -> np.ndarray:
        image = self.gltf.images[self.gltf.textures[texture_index].source]
        if image.bufferView is not None:
            raw, offset, _ = self.view_bytes(image.bufferView)
            length = self.gltf.bufferViews[image.bufferView].byteLength
            encoded = raw[offset : offset + length]
        else:
            encoded = self._uri_bytes(image.uri, f"image of texture {texture_index}")
        return decode_image(encoded, data=data, name=f"{self.path} image {texture_index}")

    def material(self, index: int) -> Material:
        """glTF material ``index`` as a ``Material`` (-1: glTF's default material)."""
        if index < 0:
            return Material(name="default", kd=torch.ones(3), ks=torch.tensor([0.0, 1.0, 1.0]))
        source = self.gltf.materials[index]
        pbr = source.pbrMetallicRoughness or gl.PbrMetallicRoughness()
        for info in (pbr.baseColorTexture, pbr.metallicRoughnessTexture, source.normalTexture):
            if info is not None and info.texCoord not in (None, 0):
                raise UserError(f"{self.path}: only TEXCOORD_0 textures are supported")
        keep_alpha = source.alphaMode not in (None, gl.OPAQUE)
        factor = np.array(pbr.baseColorFactor or [1.0, 1.0, 1.0, 1.0])
        if pbr.baseColorTexture is not None:
            kd = self.image(pbr.baseColorTexture.index, data=False)
            kd = np.concatenate([kd, np.ones_like(kd[..., :1])], -1) if kd.shape[2] == 3 else kd
            kd = kd[..., :4] * factor
        else:
            kd = factor
        kd = kd if keep_alpha else kd[..., :3]
        roughness = 1.0 if pbr.roughnessFactor is None else pbr.roughnessFactor
        metallic = 1.0 if pbr.metallicFactor is None else pbr.metallicFactor
        ks = self._ks(pbr, source.occlusionTexture, roughness, metallic)
        normal = None
        if source.normalTexture is not None:
            scale = 1.0 if source.normalTexture.scale is None else source.normalTexture.scale
            encoded = self.image(source.normalTexture.index, data=True)
            normal = decode_normal_map(encoded, scale)
        return Material(
            name=source.name or f"material{index}",
            kd=torch.from_numpy(np.ascontiguousarray(kd, dtype=np.float32)),
            ks=ks,
            normal=normal,
            coat=self._coat(source),
            ior=self._ior(source),
        )

    def _ior(self, source) -> float | None:
        """The material's ``KHR_materials_ior``, or None (none; glTF's 0, an ideal mirror's
        Fresnel, is read as none too, with a warning: diffrec's non-metals have at most
        ``shading.ranges.F0_RANGE``'s reflectance)."""
        ior = (source.extensions or {}).get(IOR, {}).get("ior")
        if ior is not None and float(ior) < 1.0:
            log.warning("%s: %s has KHR_materials_ior %s, read as 1.5", self.path,
                        source.name or "a material", ior)
            return None
        return ior

    def _coat(self, source) -> torch.Tensor | None:
        """The material's ``KHR_materials_clearcoat`` as ``(weight, roughness)``, or None
        (none, or a weight of 0). A coat's texture is read as its mean (diffrec's coats are
        uniform), times the factor; a coat normal texture is not read (the coat is shaded
        with the normal map)."""
        coat = (source.extensions or {}).get(CLEARCOAT)
        if not coat:
            return None
        values = []
        for factor, texture, channel in (("clearcoatFactor", "clearcoatTexture", 0),
                                         ("clearcoatRoughnessFactor",
                                          "clearcoatRoughnessTexture", 1)):
            value = float(coat.get(factor, 0.0))
            if coat.get(texture) is not None:
                texels = self.image(coat[texture]["index"], data=True)[..., channel]
                log.warning("%s: %s %s read as its mean (diffrec's clear coats are uniform)",
                            self.path, source.name or "a material", texture)
                value *= float(texels.mean())
            values.append(value)
        return None if values[0] <= 0 else torch.tensor(values).clamp(0, 1)

    def _ks(self, pbr, occlusion, roughness: float, metallic: float) -> torch.Tensor:
        if pbr.metallicRoughnessTexture is None and occlusion is None:
            return torch.tensor([0.0, roughness, metallic])
        size = None
        layers = [None, roughness, metallic]
        if pbr.metallicRoughnessTexture is not None:
            packed = self.image(pbr.metallicRoughnessTexture.index, data=True)
            size = packed.shape[:2]
            layers[1] = packed[..., 1] * roughness
            layers[2] = packed[..., 2] * metallic
        if occlusion is not None:
            visibility = self.image(occlusion.index, data=True)[..., 0]
            size = size or visibility.shape
            if visibility.shape != size:
                visibility = cv2.resize(visibility, (size[1], size[0]), cv2.INTER_LINEAR)
            strength = 1.0 if occlusion.strength is None else occlusion.strength
            layers[0] = strength * (1.0 - visibility)
        layers = [np.broadcast_to(np.float32(0.0) if x is None else x, size) for x in layers]
        return torch.from_numpy(np.stack(layers, axis=-1).astype(np.float32))


def _merge(parts: list[dict], path: Path) -> tuple[Mesh, torch.Tensor]:
    """One mesh from the primitives (world space) and each triangle's glTF material index."""
    offsets = np.cumsum([0] + [len(p["positions"]) for p in parts])
    triangles = np.concatenate([p["triangles"] + o for p, o in zip(parts, offsets, strict=False)])
    fields = {
        "positions": yup_to_blender(
            torch.from_numpy(np.concatenate([p["positions"] for p in parts]))
        ),
        "triangles": torch.from_numpy(triangles),
    }
    for name, index_name, fill in (
        ("uvs", "uv_triangles", [0.0, 0.0]),
        ("normals", "normal_triangles", None),
        ("tangents", "tangent_triangles", None),
    ):
        present = [name in p for p in parts]
        if all(present) or (any(present) and fill is not None):
            values = np.concatenate(
                [p.get(name, np.tile(fill, (len(p["positions"]), 1))) for p in parts]
            )
            values = torch.from_numpy(values)
            if name != "uvs":
                values = torch.cat([yup_to_blender(values[:, :3]), values[:, 3:]], dim=-1)
            fields[name] = values.float()
            fields[index_name] = fields["triangles"]
        elif any(present):
            log.warning("%s: only some primitives have %s; dropped", path, name)
    fields["positions"] = fields["positions"].float()
    material = np.concatenate(
        [
            np.full(len(p["triangles"]), -1 if p["material"] is None else p["material"])
            for p in parts
        ]
    )
    return Mesh(**fields), torch.from_numpy(material)
