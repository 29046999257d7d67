"""Image files <-> float32 arrays ``[H, W, C]`` (rows top-down, C = 1..4, channels R, G, B, A).

Formats and libraries:
- PNG (8 and 16 bit), JPEG (8 bit), Radiance ``.hdr``: OpenCV (``opencv-python-headless``).
  One well-kept wheel with no runtime downloads that reads and writes 16-bit RGB(A) PNG
  (Pillow cannot write 16-bit colour PNG) and RGBE ``.hdr`` (imageio only reaches ``.hdr``
  through its FreeImage plugin, which downloads a binary at run time: not allowed here).
  OpenCV orders channels B, G, R(, A); this module converts at the call, nowhere else.
- OpenEXR ``.exr``: the ASWF ``OpenEXR`` bindings (the format's reference implementation).
  OpenCV's EXR codec is disabled in its wheels unless an environment variable is set before
  import, which is too fragile to rely on.

Colour: 8/16-bit images hold sRGB-encoded colour; ``read_image`` returns scene-linear values
unless ``data=True`` (normal maps, roughness/metallic, masks), and ``write_image`` encodes the
same way. Alpha (channel 4, or 2 for grey+alpha) is always linear. Float formats (EXR, HDR)
store linear values as they are; ``data`` does not change them.
An image is refused from its header, before decoding, when it has more pixels than this
machine's memory allows (``image_size.max_pixels``).
Values written to 8/16-bit files are clipped to [0, 1] (after encoding) and rounded.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import OpenEXR

from diffrec.color import linear_to_srgb, srgb_to_linear
from diffrec.errors import UserError, one_line
from diffrec.io.image_size import check_pixels, encoded_size

INTEGER_SUFFIXES = (".png", ".jpg", ".jpeg")
FLOAT_SUFFIXES = (".exr", ".hdr")
_EXR_CHANNELS = {1: "Y", 3: "RGB", 4: "RGBA"}


def silence_opencv(module=cv2) -> None:
    """OpenCV's own log silent (a file it cannot decode is one sentence here; its log repeats
    it): ``cv2.setLogLevel`` in OpenCV 4, ``cv2.utils.logging.setLogLevel`` in OpenCV 5 (what
    pip installs beside numpy 2); level 0 is silent in both."""
    set_level = getattr(module, "setLogLevel", None)
    if set_level is None:
        set_level = module.utils.logging.setLogLevel
    set_level(0)


silence_opencv()


def read_image(path: str | Path, *, data: bool = False) -> np.ndarray:
    """Read PNG / JPEG / EXR / HDR into float32 ``[H, W, C]``, rows top-down, RGB(A) order.

    8/16-bit files are scaled to [0, 1] and, unless ``data``, sRGB-decoded to linear.
    """
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise UserError(f"image file not found: {path}")
    try:
        if suffix == ".exr":
            return _read_exr(path)
        return decode_image(path.read_bytes(), data=data, name=str(path))
    except (cv2.error, RuntimeError, ValueError, OSError) as error:  # the decoders' complaints
        raise UserError(f"cannot read the image {path}: {one_line(error)}; is the file whole, "
                        f"and a {suffix[1:].upper()} image?") from None


def write_image(path: str | Path, image, *, data: bool = False, bit_depth: int = 8) -> None:
    """Write float ``[H, W, C]`` (or ``[H, W]``) to PNG / JPEG / EXR (float32) / HDR (RGB).

    ``bit_depth`` (8 or 16) applies to PNG only. Unless ``data``, colour channels are
    sRGB-encoded for PNG/JPEG. Radiance HDR holds exactly 3 non-negative channels.
    """
    path = Path(path)
    suffix = _suffix(path)
    image = _as_image(image)
    if suffix == ".exr":
        _write_exr(path, image)
        return
    if suffix == ".hdr":
        if image.shape[2] != 3:
            raise UserError(f"Radiance .hdr holds 3 channels (RGB), got {image.shape[2]}")
        if (image < 0).any():
            raise UserError("Radiance .hdr cannot hold negative values")
        encoded = _encode(".hdr", image)
    else:
        encoded = encode_integer_image(image, suffix=suffix, data=data, bit_depth=bit_depth)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoded)


def decode_image(buffer: bytes, *, data: bool = False, name: str = "image") -> np.ndarray:
    """Decode PNG / JPEG / HDR bytes (as embedded in a GLB) like ``read_image`` reads a file;
    UserError naming ``name`` if the header claims more pixels than ``max_pixels()``."""
    size = encoded_size(buffer)
    if size is not None:
        check_pixels(*size, name)
    raw = (cv2.imdecode(np.frombuffer(buffer, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
           if len(buffer) else None)
    if raw is None:
        raise UserError(f"cannot decode {name}: damaged (cut short?) or not a PNG, JPEG or "
                        "Radiance HDR image")
    raw = raw[..., None] if raw.ndim == 2 else raw
    image = _from_cv_order(raw)
    if raw.dtype == np.uint8 or raw.dtype == np.uint16:
        image = image.astype(np.float32) / np.iinfo(raw.dtype).max
        if not data:
            colour = 1 if image.shape[2] <= 2 else 3
            image[..., :colour] = srgb_to_linear(image[..., :colour])
    return np.ascontiguousarray(image, dtype=np.float32)


def encode_integer_image(
    image, *, suffix: str = ".png", data: bool = False, bit_depth: int = 8
) -> bytes:
    """Encode float ``[H, W, C]`` in [0, 1] as PNG (8/16 bit) or JPEG (8 bit) bytes."""
    image = _as_image(image).copy()
    if bit_depth not in (8, 16) or (bit_depth == 16 and suffix != ".png"):
        raise UserError(f"bit depth {bit_depth} is not available for {suffix} (PNG: 8 or 16)")
    if image.shape[2] == 2:
        raise UserError("grey+alpha images are not written; expand to RGBA (4 channels)")
    if not data:
        colour = 1 if image.shape[2] == 1 else 3
        image[..., :colour] = linear_to_srgb(image[..., :colour])
    dtype = np.uint8 if bit_depth == 8 else np.uint16
    scale = np.iinfo(dtype).max
    quantised = np.round(np.clip(image, 0.0, 1.0) * scale).astype(dtype)
    return _encode(suffix, quantised)


def _encode(suffix: str, image: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(suffix, _to_cv_order(image))
    if not ok:
        raise UserError(f"OpenCV could not encode a {image.shape} {image.dtype} image as {suffix}")
    return encoded.tobytes()


def _read_exr(path: Path) -> np.ndarray:
    with OpenEXR.File(str(path), header_only=True) as exr:
        (left, top), (right, bottom) = exr.header()["dataWindow"]
    check_pixels(int(right - left + 1), int(bottom - top + 1), str(path))
    with OpenEXR.File(str(path)) as exr:
        channels = exr.channels()
        for key in ("RGBA", "RGB", "Y"):
            if key in channels:
                pixels = channels[key].pixels
                break
        else:
            if len(channels) != 1:
                raise UserError(
                    f"{path}: cannot tell which EXR layer to read among {sorted(channels)}"
                )
            pixels = next(iter(channels.values())).pixels
    pixels = pixels[..., None] if pixels.ndim == 2 else pixels
    return np.ascontiguousarray(pixels, dtype=np.float32)


def _write_exr(path: Path, image: np.ndarray) -> None:
    if image.shape[2] not in _EXR_CHANNELS:
        raise UserError(f"EXR images are written with 1, 3 or 4 channels, got {image.shape[2]}")
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    pixels = image[..., 0] if image.shape[2] == 1 else image
    channels = {_EXR_CHANNELS[image.shape[2]]: np.ascontiguousarray(pixels, dtype=np.float32)}
    path.parent.mkdir(parents=True, exist_ok=True)
    OpenEXR.File(header, channels).write(str(path))


def _as_image(image) -> np.ndarray:
    """Validate and convert to float32 ``[H, W, C]``; accepts numpy arrays and torch tensors."""
    if hasattr(image, "detach"):
        image = image.detach().cpu().numpy()
    image = np.asarray(image)
    if not (np.issubdtype(image.dtype, np.floating) or np.issubdtype(image.dtype, np.integer)):
        raise UserError(f"image must hold numbers, got dtype {image.dtype}")
    image = image[..., None] if image.ndim == 2 else image
    if image.ndim != 3 or not 1 <= image.shape[2] <= 4 or image.shape[0] * image.shape[1] == 0:
        raise UserError(f"image must be [H, W] or [H, W, 1..4] and non-empty, got {image.shape}")
    image = image.astype(np.float32)
    if not np.isfinite(image).all():
        raise UserError("image holds NaN or infinite values")
    return image


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in INTEGER_SUFFIXES + FLOAT_SUFFIXES:
        raise UserError(f"{path}: unknown image format (use .png, .jpg, .exr or .hdr)")
    return suffix


def _to_cv_order(image: np.ndarray) -> np.ndarray:
    if image.shape[2] >= 3:
        image = image[..., [2, 1, 0, 3][: image.shape[2]]]
    return np.ascontiguousarray(image)


_from_cv_order = _to_cv_order  # swapping R and B is its own inverse
