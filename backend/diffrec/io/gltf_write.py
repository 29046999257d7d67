"""Writing glTF 2.0 binary (.glb) through pygltflib: one mesh, one metallic-roughness
material, textures embedded as PNG.

Layout: glTF has one index buffer, so each distinct (position, uv, normal, tangent) corner
becomes a glTF vertex. Coordinates are converted to Y-up (file ``(x, y, z)`` = world
``(x, z, -y)``), the v texture coordinate is stored flipped (glTF's origin is top-left).
Material: ``kd`` -> baseColorFactor or baseColorTexture (sRGB PNG; alphaMode BLEND when it has
alpha); ``ks`` -> roughness/metallic factors, or one linear PNG with R = 1 - occlusion (glTF
stores visibility), G = roughness, B = metallic, used as metallicRoughnessTexture *and*
occlusionTexture (a constant ``ks`` with non-zero occlusion becomes a 1x1 texture, since glTF
has no occlusion factor); ``normal`` -> normalTexture (``(n + 1) / 2``, +Y = increasing v, as
glTF and Blender expect); ``coat`` -> ``KHR_materials_clearcoat`` (clearcoatFactor,
clearcoatRoughnessFactor, and the normal map as clearcoatNormalTexture: the coat follows the
surface the normal map draws, as diffrec shades it); ``ior`` -> ``KHR_materials_ior``. The
material is double-sided, as diffrec shades both sides.

With ``ktx2`` ({channel: URI of its KTX2 file}), those textures also get a ``KHR_texture_basisu``
source, the KTX2 file by URI, with the PNG kept as their ``source`` (the fallback):
``KHR_texture_basisu`` is in ``extensionsUsed``, not ``extensionsRequired``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pygltflib as gl
import torch

from diffrec.io.images import encode_integer_image
from diffrec.io.material import Material, blender_to_yup, encode_normal_map, is_texture
from diffrec.mesh import Mesh
from diffrec.rows import unique_rows

BASISU = "KHR_texture_basisu"
CLEARCOAT = "KHR_materials_clearcoat"
IOR = "KHR_materials_ior"


def write_glb(path: str | Path, mesh: Mesh, material: Material | None = None, *,
              ktx2: Mapping[str, str] | None = None) -> None:
    """Write ``mesh`` with ``material`` (defaults: ``Material()``) to a .glb file; ``ktx2``
    maps texture channels ("kd", "ks", "normal") to the URIs of their KTX2 files."""
    material = material or Material()
    builder = _Builder(ktx2 or {})
    attributes, indices = _gltf_vertices(mesh)
    primitive = gl.Primitive(
        attributes=gl.Attributes(
            **{
                name: builder.accessor(values, with_bounds=name == "POSITION")
                for name, values in attributes.items()
            }
        ),
        indices=builder.accessor(indices, target=gl.ELEMENT_ARRAY_BUFFER),
        material=0,
    )
    builder.gltf.materials.append(_material(builder, material))
    builder.gltf.meshes.append(gl.Mesh(primitives=[primitive], name=material.name))
    builder.gltf.nodes.append(gl.Node(mesh=0, name="diffrec"))
    builder.gltf.scenes.append(gl.Scene(nodes=[0]))
    builder.gltf.scene = 0  # the scene a viewer shows; without one some show nothing
    builder.finish(Path(path))


def _gltf_vertices(mesh: Mesh) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Split corners into glTF vertices: attribute arrays (Y-up, v flipped) and indices."""
    buffers = [("POSITION", mesh.positions, mesh.triangles)]
    if mesh.normals is not None:
        buffers.append(("NORMAL", mesh.normals, mesh.normal_triangles))
    if mesh.tangents is not None:
        buffers.append(("TANGENT", mesh.tangents, mesh.tangent_triangles))
    if mesh.uvs is not None:
        buffers.append(("TEXCOORD_0", mesh.uvs, mesh.uv_triangles))
    keys = torch.stack([index.reshape(-1).cpu() for _, _, index in buffers], dim=-1)
    vertices, indices = unique_rows(keys)
    attributes = {}
    for column, (name, values, _) in enumerate(buffers):
        values = values.detach().cpu().double()[vertices[:, column]]
        if name == "TEXCOORD_0":
            values = torch.stack([values[:, 0], 1.0 - values[:, 1]], dim=-1)
        elif name == "TANGENT":
            values = torch.cat([blender_to_yup(values[:, :3]), values[:, 3:]], dim=-1)
        else:
            values = blender_to_yup(values)
        attributes[name] = values.numpy().astype(np.float32)
    return attributes, indices.numpy().astype(np.uint32)


def file_texture(name: str, texture: torch.Tensor) -> tuple[torch.Tensor | np.ndarray, bool]:
    """A texture of channel ``name`` ("kd", "ks", "normal"; level 0 or a mip level) laid out
    as the files store it: (values in [0, 1], whether they are data, written without the sRGB
    encoding). kd as is (sRGB-encoded on writing); ks packed (1 - occlusion, roughness,
    metallic); normal ``(n + 1) / 2``."""
    if name == "kd":
        return texture, False
    if name == "ks":
        return torch.stack([1.0 - texture[..., 0], texture[..., 1], texture[..., 2]], -1), True
    return encode_normal_map(texture), True


def _material(builder: _Builder, material: Material) -> gl.Material:
    pbr = gl.PbrMetallicRoughness()
    result = gl.Material(name=material.name, pbrMetallicRoughness=pbr, doubleSided=True)
    kd = material.kd
    if is_texture(kd):
        pbr.baseColorFactor = [1.0, 1.0, 1.0, 1.0]
        pbr.baseColorTexture = gl.TextureInfo(index=builder.texture("kd", kd))
    else:
        pbr.baseColorFactor = [*kd[:3].tolist(), float(kd[3]) if kd.shape[0] == 4 else 1.0]
    if kd.shape[-1] == 4:
        result.alphaMode = gl.BLEND
    ks = material.ks
    if not is_texture(ks) and float(ks[0]) != 0.0:
        ks = ks.expand(1, 1, 3)
    if is_texture(ks):
        index = builder.texture("ks", ks)
        pbr.metallicFactor, pbr.roughnessFactor = 1.0, 1.0
        pbr.metallicRoughnessTexture = gl.TextureInfo(index=index)
        result.occlusionTexture = gl.OcclusionTextureInfo(index=index)
    else:
        pbr.roughnessFactor, pbr.metallicFactor = float(ks[1]), float(ks[2])
    if material.normal is not None:
        index = builder.texture("normal", material.normal)
        result.normalTexture = gl.NormalMaterialTexture(index=index)
    if material.coat is not None:
        weight, roughness = material.coat.tolist()
        coat = {"clearcoatFactor": weight, "clearcoatRoughnessFactor": roughness}
        if result.normalTexture is not None:
            coat["clearcoatNormalTexture"] = {"index": result.normalTexture.index}
        result.extensions = {CLEARCOAT: coat}
        builder.uses(CLEARCOAT)
    if material.ior is not None:
        result.extensions = {**(result.extensions or {}), IOR: {"ior": material.ior}}
        builder.uses(IOR)
    return result


class _Builder:
    """Accumulates the binary chunk and the JSON objects that point into it; ``ktx2`` maps
    channels to the URIs of their KTX2 files."""

    def __init__(self, ktx2: Mapping[str, str]):
        self.ktx2 = ktx2
        self.gltf = gl.GLTF2(asset=gl.Asset(generator="diffrec", version="2.0"))
        self.gltf.samplers.append(
            gl.Sampler(magFilter=gl.LINEAR, minFilter=gl.LINEAR_MIPMAP_LINEAR)
        )
        self.chunks: list[bytes] = []
        self.length = 0

    def buffer_view(self, data: bytes, target: int | None = None) -> int:
        self.gltf.bufferViews.append(
            gl.BufferView(buffer=0, byteOffset=self.length, byteLength=len(data), target=target)
        )
        padded = data + b"\0" * (-len(data) % 4)  # keep every view 4-byte aligned
        self.chunks.append(padded)
        self.length += len(padded)
        return len(self.gltf.bufferViews) - 1

    def accessor(self, values: np.ndarray, target=gl.ARRAY_BUFFER, with_bounds=False) -> int:
        kind = {1: gl.SCALAR, 2: gl.VEC2, 3: gl.VEC3, 4: gl.VEC4}[
            1 if values.ndim == 1 else values.shape[1]
        ]
        component = gl.UNSIGNED_INT if values.dtype == np.uint32 else gl.FLOAT
        accessor = gl.Accessor(
            bufferView=self.buffer_view(np.ascontiguousarray(values).tobytes(), target),
            componentType=component,
            count=len(values),
            type=kind,
        )
        if with_bounds:  # required for POSITION
            accessor.min = values.min(0).tolist()
            accessor.max = values.max(0).tolist()
        self.gltf.accessors.append(accessor)
        return len(self.gltf.accessors) - 1

    def texture(self, name: str, texture: torch.Tensor) -> int:
        """Add channel ``name``'s texture as a PNG image (and its KTX2 file when ``ktx2`` names
        one); returns the glTF texture's index."""
        image, data = file_texture(name, texture)
        png = encode_integer_image(image, suffix=".png", data=data)
        self.gltf.images.append(gl.Image(bufferView=self.buffer_view(png), mimeType="image/png"))
        result = gl.Texture(source=len(self.gltf.images) - 1, sampler=0)
        if name in self.ktx2:
            self.gltf.images.append(gl.Image(uri=self.ktx2[name]))  # a URI needs no mimeType
            result.extensions = {BASISU: {"source": len(self.gltf.images) - 1}}
            self.uses(BASISU)
        self.gltf.textures.append(result)
        return len(self.gltf.textures) - 1

    def uses(self, extension: str) -> None:
        """List ``extension`` in ``extensionsUsed`` (once); none is required: a reader
        without it still reads the rest."""
        if extension not in self.gltf.extensionsUsed:
            self.gltf.extensionsUsed.append(extension)

    def finish(self, path: Path) -> None:
        blob = b"".join(self.chunks)
        self.gltf.buffers.append(gl.Buffer(byteLength=len(blob)))
        self.gltf.set_binary_blob(blob)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.gltf.save_binary(str(path))
