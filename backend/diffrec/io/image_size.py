"""An image's size from its header, before decoding, and the pixel count a decode may reach.

``check_pixels`` refuses an image whose header claims more pixels than ``max_pixels()``
(a decompression-bomb guard: a 3 MiB PNG can claim 30,000 x 30,000 pixels, about 14 GiB once
decoded to float RGBA). The limit is sized from the machine's memory and capped at
``PIXEL_CAP``, above any texture or photo diffrec needs.
"""

from __future__ import annotations

import os
import re
import struct

from diffrec.errors import UserError

PIXEL_CAP = 1 << 28
"""At most 268 million pixels (16,384 x 16,384) on any machine."""
BYTES_PER_PIXEL = 64
"""Memory one decoded pixel may take while it is read: float32 RGBA (16 bytes), the raw
decode, and the copies colour conversion makes."""
FALLBACK_MEMORY = 8 << 30  # where the platform does not say (Windows)
_JPEG_FRAMES = {*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), *range(0xCD, 0xD0)}
_HDR_HEADER_BYTES = 1 << 16  # a Radiance header and its resolution line end before this
_HDR_SIZE = re.compile(rb"\n([-+][XY]) (\d+) ([-+][XY]) (\d+)\s")


def max_pixels() -> int:
    """The most pixels an image may have to be decoded here: ``PIXEL_CAP``, or fewer where
    the machine's memory holds fewer at ``BYTES_PER_PIXEL``."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        memory = FALLBACK_MEMORY
    return min(PIXEL_CAP, memory // BYTES_PER_PIXEL)


def check_pixels(width: int, height: int, name: str) -> None:
    """UserError naming ``name`` if a ``width`` x ``height`` image is over ``max_pixels()``."""
    limit = max_pixels()
    if width * height > limit:
        raise UserError(f"{name} is {width} x {height} pixels ({width * height:,}), over the "
                        f"{limit:,} this machine decodes (sized from its memory): give a "
                        "smaller image")


def encoded_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of PNG, JPEG or Radiance HDR bytes; None where the
    header is not one of those or is cut short (the decoder then says what is wrong)."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
        if data[:2] == b"#?":
            return _hdr_size(data)
    except (struct.error, IndexError, ValueError):
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The size in the first frame header (SOFn) of a JPEG's segments."""
    offset = 2
    while offset + 4 <= len(data):
        if data[offset] != 0xFF:
            return None
        marker = data[offset + 1]
        if marker == 0xFF:  # fill byte
            offset += 1
            continue
        length, = struct.unpack(">H", data[offset + 2:offset + 4])
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[offset + 5:offset + 9])
            return width, height
        offset += 2 + length
    return None


def _hdr_size(data: bytes) -> tuple[int, int] | None:
    """The size on a Radiance file's resolution line (``-Y 512 +X 1024``), after its
    header's blank line."""
    head = data[:_HDR_HEADER_BYTES]
    match = _HDR_SIZE.search(head, head.find(b"\n\n"))
    if match is None:
        return None
    sizes = {match.group(1)[1:]: int(match.group(2)), match.group(3)[1:]: int(match.group(4))}
    return sizes.get(b"X", 0), sizes.get(b"Y", 0)
