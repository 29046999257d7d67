"""A real engine draws a diffrec result (issue 51): three.js (``scripts/tools/engine_view.mjs``,
three from ``scripts/tools/node_modules``) in headless Chromium, WebGL on the CPU through
SwiftShader, everything served from localhost. It draws ``mesh.glb``, whose PNG textures get
their mip levels from WebGL (``generateMipmap``: 2x2 box averages of level 0, the engine's
own), and ``mesh_ktx2.glb``, whose KTX2 textures bring the chain the job exported (fitted or
kept box averages, ``metrics.json``'s ``mips``), both lit by the job's ``probe.hdr`` as
``scene.environment``, one sample per pixel, near and k times as far (the object about 1/k
the size on screen). The reference of each far view is ``mesh.glb`` drawn from the same camera
with k x k samples a pixel (its textures read near level 0), box-reduced.

    python scripts/engine_view.py out/fits/materials/critter/asset --out out/engine_view

Writes into ``--out``: the pictures (``png_K.png``, ``ktx2_K.png``, ``reference_K.png``),
``engine_view.json`` (settings, what three.js read for each texture, PSNR of each far view
against its reference) and ``--figure`` (default ``OUT/engine_view.png``). When something is
missing (Chromium, three.js, a file of the result) it says what in one sentence, exit status 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2

from diffrec_bench.checkout import SCRIPTS

from . import figure, needs
from .browser import run_page
from .server import PageServer

TOOLS = SCRIPTS / "tools"
MAX_CANVAS = 4096
"""The largest canvas side drawn (the reference of the farthest scale is ``size * k``)."""


def scale_list(text: str) -> list[int]:
    """``"1,2,4,8"``: distinct powers of two in increasing order, the first 1 (the near view)."""
    try:
        scales = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole numbers: {text!r}") from None
    if scales[0] != 1 or scales != sorted(set(scales)) or any(
            scale & (scale - 1) for scale in scales):
        raise argparse.ArgumentTypeError(
            f"scales are powers of two in increasing order from 1, not {text!r}")
    return scales


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/engine_view.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a diffrec result folder (mesh.glb, "
                        "mesh_ktx2.glb, texture_*.ktx2, probe.hdr)")
    parser.add_argument("--out", type=Path, default=Path("out/engine_view"))
    parser.add_argument("--figure", type=Path, help="the side-by-side picture "
                                                    "(default OUT/engine_view.png)")
    parser.add_argument("--size", type=int, default=256, help="the canvas side in pixels")
    parser.add_argument("--scales", type=scale_list, default=[1, 2, 4, 8],
                        help="how many times as far as the near view (default 1,2,4,8)")
    parser.add_argument("--azimuth", type=float, default=30.0,
                        help="camera direction about the vertical, degrees (glTF's +Z is 0)")
    parser.add_argument("--elevation", type=float, default=20.0, help="degrees above level")
    parser.add_argument("--fill", type=float, default=0.9, help="the object's bounding "
                        "sphere's share of the near view's height")
    parser.add_argument("--chromium", help="the Chromium binary (default: chromium on PATH)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the page")
    args = parser.parse_args(argv)
    if args.size % args.scales[-1] or args.size * args.scales[-1] > MAX_CANVAS:
        parser.error(f"--size must be a multiple of the largest scale ({args.scales[-1]}) and "
                     f"--size x that at most {MAX_CANVAS}")
    if not 0 < args.fill <= 1:
        parser.error("--fill is in (0, 1]")
    return args


def page_query(args: argparse.Namespace) -> str:
    """The page's query string (read by engine_view.mjs)."""
    return (f"size={args.size}&scales={','.join(map(str, args.scales))}"
            f"&azimuth={args.azimuth:g}&elevation={args.elevation:g}&fill={args.fill:g}")


def read_pictures(out: Path, names: list[str]) -> dict:
    """``{name: uint8 RGBA}`` of the page's pictures ``out/<name>.png``."""
    pictures = {}
    for name in names:
        bgra = cv2.imread(str(out / f"{name}.png"), cv2.IMREAD_UNCHANGED)
        pictures[name] = cv2.cvtColor(bgra, cv2.COLOR_BGRA2RGBA)
    return pictures


def main(argv=None) -> int:
    args = parse_args(argv)
    chromium = needs.find_chromium(args.chromium)
    lacking = needs.missing(args.result, TOOLS, chromium)
    if lacking:
        print(f"engine_view: {lacking}")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    routes = {"/page/": TOOLS, "/three/": TOOLS / "node_modules" / "three",
              "/result/": args.result}
    with PageServer(routes, args.out) as server:
        failed = run_page(chromium, server.url(f"/page/engine_view.html?{page_query(args)}"),
                          server, args.timeout, args.out / "chromium.log")
    if failed:
        print(f"engine_view: {failed}")
        if server.failure:
            print(server.failure)
        return 1
    names = [f"{row}_{scale}" for scale in args.scales for row in figure.ROWS]
    found = figure.tiles(read_pictures(args.out, names), args.size, args.scales)
    scored = figure.scores(found, args.scales)
    picture = args.figure or args.out / "engine_view.png"
    picture.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(picture), cv2.cvtColor(figure.figure(found, args.scales, args.size, scored),
                                           cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    record = {"result": str(args.result), "size": args.size, "scales": args.scales,
              "azimuth": args.azimuth, "elevation": args.elevation, "fill": args.fill,
              "page": server.description,
              "psnr_against_reference": {str(k): v for k, v in scored.items()}}
    (args.out / "engine_view.json").write_text(json.dumps(record, indent=1))
    for scale in args.scales[1:]:
        print(f"engine_view: 1/{scale}: mesh.glb {scored[scale]['png']:.2f} dB, "
              f"mesh_ktx2.glb {scored[scale]['ktx2']:.2f} dB against the reference")
    print(f"engine_view: {picture}")
    return 0
