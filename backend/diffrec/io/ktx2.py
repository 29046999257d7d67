"""The KTX 2.0 container (Khronos KTX File Format Specification, version 2) for Basis
Universal UASTC textures, as ``KHR_texture_basisu`` asks for them.

What is written: a 2D texture (no layers, one face), ``vkFormat`` 0 (VK_FORMAT_UNDEFINED, as
Basis Universal requires), ``typeSize`` 1, the levels' data as given (each level
supercompressed on its own: scheme 2 = Zstandard, or 0 = none), a basic data format
descriptor with colour model UASTC (166), one sample (RGB, or RGBA) of 128 bits per 4x4
block, BT.709 primaries with the sRGB transfer for colour data and unspecified primaries with
the linear transfer for the others, straight alpha; key/value data ``KTXwriter``. Levels are
listed largest first in the level index and stored smallest first, as the format requires.
Multi-byte fields are little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from diffrec.errors import UserError

IDENTIFIER = b"\xabKTX 20\xbb\r\n\x1a\n"
SUPERCOMPRESSION_NONE, SUPERCOMPRESSION_ZSTD = 0, 2
MODEL_UASTC = 166
PRIMARIES_UNSPECIFIED, PRIMARIES_BT709 = 0, 1
TRANSFER_LINEAR, TRANSFER_SRGB = 1, 2
CHANNEL_UASTC_RGB, CHANNEL_UASTC_RGBA = 0, 3
UASTC_BLOCK_BYTES = 16
_HEADER = struct.Struct("<12s9I")  # identifier .. supercompressionScheme
_INDEX = struct.Struct("<4I2Q")  # dfd offset, length, kvd offset, length, sgd offset, length
_LEVEL = struct.Struct("<3Q")  # byteOffset, byteLength, uncompressedByteLength
_WRITER = "diffrec"


@dataclass(frozen=True)
class Level:
    """One mip level's stored bytes and their length before supercompression."""

    data: bytes
    uncompressed_length: int


@dataclass(frozen=True)
class Ktx2:
    """What a UASTC KTX2 file holds: level 0's size, the levels (0 first), the
    supercompression scheme, whether it has alpha and whether its colour is sRGB."""

    width: int
    height: int
    levels: list[Level]
    supercompression: int
    alpha: bool
    srgb: bool


def write_ktx2(texture: Ktx2) -> bytes:
    """The bytes of a KTX2 file holding ``texture`` (UASTC)."""
    dfd = _uastc_dfd(texture.alpha, texture.srgb, texture.supercompression)
    key, value = b"KTXwriter", _WRITER.encode()
    kvd = _key_value(key, value)
    levels = texture.levels
    index_end = _HEADER.size + _INDEX.size + _LEVEL.size * len(levels)
    dfd_offset = index_end
    kvd_offset = dfd_offset + len(dfd)
    data_start = kvd_offset + len(kvd)
    # Stored smallest first, each aligned to lcm(16, 4) bytes unless supercompressed.
    alignment = 1 if texture.supercompression != SUPERCOMPRESSION_NONE else UASTC_BLOCK_BYTES
    body, offsets, position = [], {}, data_start
    for index in reversed(range(len(levels))):
        padding = -position % alignment
        body.append(b"\0" * padding)
        position += padding
        offsets[index] = position
        body.append(levels[index].data)
        position += len(levels[index].data)
    header = _HEADER.pack(IDENTIFIER, 0, 1, texture.width, texture.height, 0, 0, 1,
                          len(levels), texture.supercompression)
    index = _INDEX.pack(dfd_offset, len(dfd), kvd_offset, len(kvd), 0, 0)
    level_index = b"".join(_LEVEL.pack(offsets[i], len(level.data), level.uncompressed_length)
                           for i, level in enumerate(levels))
    return header + index + level_index + dfd + kvd + b"".join(body)


def read_ktx2(data: bytes, what: str = "KTX2 data") -> Ktx2:
    """The texture in the bytes of a UASTC KTX2 file (2D, one face, no layers); UserError
    naming ``what`` for anything else."""
    if len(data) < _HEADER.size + _INDEX.size or not data.startswith(IDENTIFIER):
        raise UserError(f"{what} is not a KTX2 file")
    (_, vk_format, _, width, height, depth, layers, faces, level_count,
     supercompression) = _HEADER.unpack_from(data, 0)
    if vk_format != 0 or depth or layers or faces != 1:
        raise UserError(f"{what} is not a 2D Basis Universal texture (vkFormat {vk_format}, "
                        f"depth {depth}, layers {layers}, faces {faces})")
    dfd_offset, dfd_length, _, _, _, _ = _INDEX.unpack_from(data, _HEADER.size)
    model, transfer, channel = _dfd_fields(data, dfd_offset, dfd_length, what)
    if model != MODEL_UASTC or channel not in (CHANNEL_UASTC_RGB, CHANNEL_UASTC_RGBA):
        raise UserError(f"{what} holds colour model {model} channel {channel}, not UASTC")
    levels = []
    for index in range(max(1, level_count)):
        offset, length, uncompressed = _LEVEL.unpack_from(
            data, _HEADER.size + _INDEX.size + _LEVEL.size * index)
        if offset + length > len(data):
            raise UserError(f"{what} is cut short in level {index}")
        levels.append(Level(bytes(data[offset:offset + length]), uncompressed))
    return Ktx2(width, height, levels, supercompression, channel == CHANNEL_UASTC_RGBA,
                transfer == TRANSFER_SRGB)


def _uastc_dfd(alpha: bool, srgb: bool, supercompression: int) -> bytes:
    """The data format descriptor: its total size, then one basic descriptor block (bytes per
    block plane 0, "unsized", when the levels are supercompressed)."""
    primaries = PRIMARIES_BT709 if srgb else PRIMARIES_UNSPECIFIED
    transfer = TRANSFER_SRGB if srgb else TRANSFER_LINEAR
    channel = CHANNEL_UASTC_RGBA if alpha else CHANNEL_UASTC_RGB
    plane_bytes = UASTC_BLOCK_BYTES if supercompression == SUPERCOMPRESSION_NONE else 0
    sample = struct.pack("<HBB4B2I", 0, UASTC_BLOCK_BYTES * 8 - 1, channel, 0, 0, 0, 0,
                         0, 0xFFFFFFFF)
    block_size = 24 + len(sample)
    block = struct.pack("<IHH4B4B8B", 0, 2, block_size, MODEL_UASTC, primaries, transfer, 0,
                        3, 3, 0, 0, plane_bytes, *([0] * 7)) + sample
    return struct.pack("<I", 4 + len(block)) + block


def _dfd_fields(data: bytes, offset: int, length: int, what: str) -> tuple[int, int, int]:
    """(colour model, transfer function, first sample's channel) of the first DFD block."""
    if length < 4 + 24 + 16 or offset + length > len(data):
        raise UserError(f"{what} has no readable data format descriptor")
    model, transfer = data[offset + 12], data[offset + 14]
    channel = data[offset + 4 + 24 + 3] & 0x0F
    return model, transfer, channel


def _key_value(key: bytes, value: bytes) -> bytes:
    """One key/value entry (NUL-terminated key and value), padded to 4 bytes."""
    pair = key + b"\0" + value + b"\0"
    entry = struct.pack("<I", len(pair)) + pair
    return entry + b"\0" * (-len(entry) % 4)
