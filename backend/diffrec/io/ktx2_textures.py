"""A ``Material``'s textures as KTX2 files, each with its whole mip chain (``io.mips``), laid
out exactly as ``gltf_write`` lays out the PNGs (``gltf_write.file_texture``): base colour
sRGB-encoded, the packed ks texture and the ``(n + 1) / 2`` normal map linear. Each level is
quantised to 8 bits like the PNG, then encoded by ``basisu`` to UASTC (``io.basisu``).

``KHR_texture_basisu`` takes only textures whose sides are multiples of 4; others stay PNG.
``write_ktx2_variant`` writes the KTX2 files and ``mesh_ktx2.glb``, a GLB that names them
through ``KHR_texture_basisu`` with its PNGs as fallback; ``read_ktx2_textures`` reads the
files' levels back into the material's conventions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from diffrec.color import srgb_to_linear
from diffrec.errors import UserError
from diffrec.io.basisu import decode_levels, encode_uastc, find_basisu, not_found_reason
from diffrec.io.gltf_write import file_texture, write_glb
from diffrec.io.images import encode_integer_image
from diffrec.io.ktx2 import SUPERCOMPRESSION_ZSTD, Ktx2, read_ktx2, write_ktx2
from diffrec.io.material import MIP_CHANNELS, Material, decode_normal_map, is_texture
from diffrec.io.mips import mip_chain
from diffrec.mesh import Mesh

VARIANT_NAME = "mesh_ktx2.glb"
KTX2_NAMES = {"kd": "texture_kd.ktx2", "ks": "texture_ks.ktx2", "normal": "texture_n.ktx2"}
"""The file each channel's KTX2 is written to."""
BLOCK = 4
"""KHR_texture_basisu's rule: a KTX2 texture's sides are multiples of this."""


def ktx2_channels(material: Material) -> tuple[list[str], list[str]]:
    """The texture channels of ``material`` that KTX2 can hold, and one sentence for each
    texture that it cannot."""
    channels, notes = [], []
    for name in MIP_CHANNELS:
        texture = getattr(material, name)
        if texture is None or not is_texture(texture):
            continue
        height, width = texture.shape[:2]
        if height % BLOCK or width % BLOCK:
            notes.append(f"the {name} texture is {height}x{width}, not a multiple of {BLOCK} on "
                         f"both sides as KTX2 with Basis Universal needs: it stays PNG only")
        else:
            channels.append(name)
    return channels, notes


def write_ktx2_textures(folder: Path, material: Material, channels: list[str],
                        basisu: Path) -> dict[str, str]:
    """Write ``KTX2_NAMES[c]`` into ``folder`` for each channel ``c`` of ``channels`` (from
    ``ktx2_channels``) with ``basisu``; returns {channel: file name}. UserError when basisu
    fails on any channel, and then nothing is written: every channel is encoded first."""
    encoded = {}
    for name in channels:
        chain = mip_chain(material, name)
        alpha, srgb = chain[0].shape[-1] == 4, name == "kd"
        pngs = []
        for level in chain:  # each level laid out and quantised as the GLB's PNG
            image, data = file_texture(name, level)
            pngs.append(encode_integer_image(image, suffix=".png", data=data))
        levels = encode_uastc(basisu, pngs, alpha=alpha, srgb=srgb)
        height, width = chain[0].shape[:2]
        texture = Ktx2(width, height, levels, SUPERCOMPRESSION_ZSTD, alpha, srgb)
        encoded[name] = write_ktx2(texture)
    for name, data in encoded.items():
        (Path(folder) / KTX2_NAMES[name]).write_bytes(data)
    return {name: KTX2_NAMES[name] for name in encoded}


def write_ktx2_variant(folder: Path, mesh: Mesh, material: Material
                       ) -> tuple[list[str], list[str]]:
    """``VARIANT_NAME`` and the KTX2 files of ``material``'s textures in ``folder``, or none
    of them when basisu is missing or fails, or when no texture can go to KTX2 (the variant
    would be ``mesh.glb`` again); returns the names written and sentences on what was left
    out and why."""
    basisu = find_basisu()
    if basisu is None:
        return [], [f"KTX2 export skipped (no {VARIANT_NAME}, no .ktx2 files): "
                    f"{not_found_reason()}"]
    channels, notes = ktx2_channels(material)
    if not channels:  # it would be mesh.glb again; an asset without textures needs no word
        said = f"no {VARIANT_NAME}: no texture of this asset can go to KTX2"
        return [], ([*notes, said] if notes else [])
    try:
        names = write_ktx2_textures(folder, material, channels, basisu)
    except UserError as error:
        return [], [*notes, f"KTX2 export skipped (no {VARIANT_NAME}): {error}"]
    write_glb(Path(folder) / VARIANT_NAME, mesh, material, ktx2=names)
    return [VARIANT_NAME, *names.values()], notes



def read_ktx2_textures(folder: Path) -> dict[str, list[torch.Tensor]]:
    """{channel: levels 0..n} of the ``KTX2_NAMES`` files in ``folder`` (those present),
    decoded by basisu and turned back into ``Material``'s conventions: kd linear (RGB, or RGBA
    where the file has alpha), ks (occlusion, roughness, metallic), normals unit vectors; as
    8-bit files hold them. UserError when basisu is missing or fails."""
    basisu = find_basisu()
    if basisu is None:
        raise UserError(f"reading KTX2 files needs basisu: {not_found_reason()}")
    channels = {}
    for name, file in KTX2_NAMES.items():
        path = Path(folder) / file
        if path.is_file():
            alpha = name == "kd" and read_ktx2(path.read_bytes(), file).alpha
            channels[name] = [_from_file(name, level, alpha)
                              for level in decode_levels(basisu, path)]
    return channels


def _from_file(name: str, level: np.ndarray, alpha: bool) -> torch.Tensor:
    """One decoded 8-bit RGBA level as channel ``name`` holds it (``file_texture`` undone)."""
    values = torch.from_numpy(level.astype(np.float32) / 255.0)
    if name == "kd":
        colour = srgb_to_linear(values[..., :3])
        return torch.cat([colour, values[..., 3:]], -1) if alpha else colour
    if name == "ks":
        return torch.stack([1.0 - values[..., 0], values[..., 1], values[..., 2]], -1)
    return decode_normal_map(values.numpy())
