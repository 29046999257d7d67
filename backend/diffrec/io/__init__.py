"""File I/O at the boundary between diffrec and other tools.

- ``read_obj(path) -> Asset``, ``write_obj(path, mesh, material=None)``: OBJ + MTL + PNGs
- ``read_gltf(path, weld=True) -> Asset``, ``write_glb(path, mesh, material=None)``: glTF 2.0
- ``ktx2_textures.write_ktx2_variant(folder, mesh, material)``: the textures' mip chains
  (``mips``) as KTX2 files (``ktx2``, encoded by ``basisu``) and a GLB naming them
- ``read_image(path, data=False)``, ``write_image(path, image, data=False, bit_depth=8)``:
  PNG 8/16, JPEG, EXR, Radiance HDR as float32 [H, W, C] numpy arrays
- ``Material``, ``Asset`` and the Y-up conversions ``blender_to_yup`` / ``yup_to_blender``

Mesh files are Y-up (file (x, y, z) = world (x, -z, y)); everything in memory is in
Blender's world space, UV origin bottom-left, images rows top-down and linear.
"""

from diffrec.io.gltf_read import read_gltf
from diffrec.io.gltf_write import write_glb
from diffrec.io.images import decode_image, encode_integer_image, read_image, write_image
from diffrec.io.material import Asset, Material, blender_to_yup, yup_to_blender
from diffrec.io.obj import read_mtl, read_obj, write_obj

__all__ = [
    "Asset",
    "Material",
    "blender_to_yup",
    "decode_image",
    "encode_integer_image",
    "read_gltf",
    "read_image",
    "read_mtl",
    "read_obj",
    "write_glb",
    "write_image",
    "write_obj",
    "yup_to_blender",
]
