"""What a run of ``scripts/engine_view.py`` needs (a diffrec result with its KTX2 export,
three.js in ``scripts/tools/node_modules``, the page, Chromium) and the one sentence that says
what is missing."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser")
"""Debian's package installs ``chromium``; other distributions name it ``chromium-browser``."""
RESULT_FILES = ("mesh.glb", "mesh_ktx2.glb", "probe.hdr")
PAGE_FILES = ("engine_view.html", "engine_view.mjs")
THREE_FILES = ("build/three.module.js", "examples/jsm/loaders/GLTFLoader.js",
               "examples/jsm/loaders/KTX2Loader.js", "examples/jsm/loaders/HDRLoader.js",
               "examples/jsm/libs/basis/basis_transcoder.js",
               "examples/jsm/libs/basis/basis_transcoder.wasm")
"""What the page loads from ``node_modules/three``."""


def find_chromium(given: str | None) -> str | None:
    """The Chromium binary: ``given`` (a path or a name on PATH), else the first of
    ``CHROMIUM_NAMES`` on PATH; None when there is none."""
    for name in (given,) if given else CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def ktx2_uris(glb: Path) -> list[str] | None:
    """The URIs of the images a GLB's textures name through ``KHR_texture_basisu`` (the KTX2
    files); None when it is no readable GLB."""
    data = glb.read_bytes()
    if len(data) < 20 or data[:4] != b"glTF" or data[16:20] != b"JSON":
        return None
    length = struct.unpack_from("<I", data, 12)[0]
    try:
        document = json.loads(data[20:20 + length])
    except ValueError:
        return None
    images = document.get("images", [])
    sources = [texture["extensions"]["KHR_texture_basisu"]["source"]
               for texture in document.get("textures", [])
               if "KHR_texture_basisu" in texture.get("extensions", {})]
    return [images[source]["uri"] for source in sources if "uri" in images[source]]


def missing(result: Path, tools: Path, chromium: str | None) -> str | None:
    """One sentence naming the first thing missing to draw ``result`` (a diffrec result folder)
    with the page and three.js in ``tools`` (``scripts/tools``) in ``chromium`` (a binary, or
    None when none was found); None when nothing is."""
    if not result.is_dir():
        return f"there is no result folder {result}"
    for name in RESULT_FILES:
        if not (result / name).is_file():
            return (f"{result} has no {name} (a result of a job with the KTX2 export has "
                    f"{', '.join(RESULT_FILES)})")
    uris = ktx2_uris(result / "mesh_ktx2.glb")
    if uris is None:
        return f"{result / 'mesh_ktx2.glb'} is not a GLB file"
    if not uris:
        return f"{result / 'mesh_ktx2.glb'} names no KTX2 texture"
    for uri in uris:
        if not (result / uri).is_file():
            return f"{result} has no {uri}, which mesh_ktx2.glb names"
    for name in PAGE_FILES:
        if not (tools / name).is_file():
            return f"the page's file {tools / name} is missing"
    three = tools / "node_modules" / "three"
    for name in THREE_FILES:
        if not (three / name).is_file():
            return f"three.js is not installed (no {three / name}): run scripts/install_tools"
    if chromium is None:
        return ("no Chromium found: install Debian's package (apt-get install chromium) or "
                "name the binary with --chromium")
    return None
