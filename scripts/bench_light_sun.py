#!/usr/bin/env python3
"""Does a learned light find the sun? A ball rendered by diffrec's own renderer (no Blender)
under a sky with a sun, then a materials run with ``light`` "learn" as a real run makes it;
printed: the angle between the learned light's brightest direction and the sun's (both
blurred a little, ``diffrec.light.measure``), the power within ``CONE_DEGREES`` of the sun
(learned / true), the peaks, and the held-out PSNR.

The synthetic sky (``sun_sky``): a smooth gradient, and a sun disc ``SUN_DEGREES`` wide whose
radiance is ``SUN_RATIO`` (50) times the sky's mean radiance (the mean over the sphere,
weighted by solid angle, of the sky without the sun) -- "a sun 50x brighter than the rest", as
the suite's sunset light (its sun 54.8 at the light's resolution over a sky of about 1). Its
sun carries 2.4 % of the light's power. ``--hdri NAME`` lights the ball with one of Blender's
bundled HDRIs instead (e.g. sunrise.exr: a sun carrying half its power), its sun the
brightest blurred direction.

The ball: a UV sphere in coloured bands, rough dielectric (roughness 0.6) but for one glossy
band (0.2), seen by ``--views`` training and 4 held-out cameras around it.

    scripts/bench_light_sun.py [--size 64] [--views 16] [--hdri sunrise.exr] [--set K=V ...]
        [--truth-res 128]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.commands.optimize import TerminalReporter
from diffrec.io import Asset, Material, read_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.light.measure import angle_degrees, brightest_direction, cone_power
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.run import optimize
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import parse_settings

SUN_RATIO = 50.0
"""The sun disc's radiance over the sky's mean radiance."""
SUN_DEGREES = 5.0
"""The sun disc's angular diameter."""
SUN_DIRECTION = (math.cos(math.radians(35)) * math.cos(math.radians(40)),
                 math.cos(math.radians(35)) * math.sin(math.radians(40)),
                 math.sin(math.radians(35)))
"""Where the sun stands: elevation 35 degrees, azimuth 40 degrees from +X towards +Y."""
CONE_DEGREES = 10.0
"""The half-angle of the cone around the sun whose power is compared."""
TRUTH_RESOLUTION = 128
"""The side of the cube map the targets are rendered with and the truth is measured on
(``--truth-res``)."""
RADIUS = 0.8


def sun_sky(height: int = 256, direction=SUN_DIRECTION, degrees: float = SUN_DEGREES,
            ratio: float = SUN_RATIO) -> torch.Tensor:
    """An equirect ``[height, 2 height, 3]`` sky (linear): brighter overhead and towards +X,
    slightly warm, with a white sun disc ``degrees`` wide at ``direction`` whose radiance is
    ``ratio`` times the sky's solid-angle-weighted mean (of R, G and B)."""
    d = equirect_pixel_directions(height, 2 * height)
    sky = (0.6 + 0.5 * d[..., 2:3] + 0.4 * d[..., 0:1]).clamp(min=0.1) * torch.tensor(
        [1.0, 0.95, 0.9], dtype=d.dtype)
    weight = torch.sqrt((1 - d[..., 2:3] ** 2).clamp(min=0))  # sin(polar angle): solid angle
    mean = float((sky.mean(-1, keepdim=True) * weight).sum() / weight.sum())
    towards = d @ torch.as_tensor(direction, dtype=d.dtype)
    disc = (towards >= math.cos(math.radians(degrees / 2)))[..., None]
    return torch.where(disc, torch.full_like(sky, ratio * mean), sky).float()


def ball() -> Asset:
    """A UV sphere of ``RADIUS`` in four colour bands, roughness 0.6 but 0.2 in the third."""
    kd = torch.empty(16, 16, 3)
    ks = torch.tensor([0.0, 0.6, 0.0]).repeat(16, 16, 1)
    for band, colour in enumerate(((0.7, 0.25, 0.15), (0.2, 0.55, 0.25), (0.8, 0.75, 0.3),
                                   (0.2, 0.3, 0.7))):
        kd[4 * band : 4 * band + 4] = torch.tensor(colour)
    ks[8:12, :, 1] = 0.2
    mesh = uv_sphere(48, 24)
    mesh = mesh.replace(positions=mesh.positions * RADIUS)
    return Asset(mesh, [Material(kd=kd.numpy(), ks=ks.numpy())], torch.zeros(0, dtype=torch.long))


def views(sky: torch.Tensor, count: int, size: int, seed: int,
          truth_res: int = TRUTH_RESOLUTION):
    """``count`` straight-alpha views of ``ball()`` under ``sky`` from random cameras, lit by
    a cube map of side ``truth_res``."""
    cameras = orbit_cameras(count, 3.2, size, seed=seed, elevations_degrees=(-20, 60))
    return render_reference_views(raster.RasterContext("cpu", impl="torch"), ball(), sky,
                                  cameras, spp=2, light_resolution=truth_res)


def settings_for(size: int, **values):
    """A materials run at ``preview`` that learns the light, at ``size`` px."""
    return parse_settings({"mode": "materials", "preset": "preview", "light": "learn",
                           "train_res": size, "texture_res": 64, "checkpoint_every": 0,
                           "log_every": 50, **values})


def learn(sky: torch.Tensor, size: int, count: int, stream=None,
          truth_res: int = TRUTH_RESOLUTION, **values) -> tuple[EnvironmentLight, dict]:
    """The light and metrics of a materials run on ``count`` views of the ball under
    ``sky`` (4 held out; ``views``, at ``truth_res``), with ``settings_for(size, **values)``;
    progress lines on ``stream`` (None: silent)."""
    inputs = Inputs(views(sky, count, size, seed=1, truth_res=truth_res),
                    views(sky, 4, size, seed=2, truth_res=truth_res), ball().mesh)
    result = optimize(settings_for(size, **values), inputs,
                      TerminalReporter(".", stream=stream), device="cpu")
    return result.light, result.metrics


def sun_report(truth: torch.Tensor, learned: torch.Tensor, sun=None) -> dict:
    """The learned cube map ``learned`` against the true one ``truth``: the angle (degrees)
    between their brightest directions (the truth's taken for the sun unless ``sun`` is
    given), the power within ``CONE_DEGREES`` of the sun (learned / true) and each one's
    largest texel (mean of R, G and B)."""
    sun = brightest_direction(truth) if sun is None else torch.as_tensor(sun, dtype=torch.float64)
    return {"angle_deg": angle_degrees(brightest_direction(learned), sun),
            "cone_ratio": cone_power(learned, sun, CONE_DEGREES)
            / cone_power(truth, sun, CONE_DEGREES),
            "peak_learned": float(learned.detach().mean(-1).max()),
            "peak_true": float(truth.mean(-1).max())}


def bundled_hdri(name: str) -> Path:
    """A path to ``name``, or to the HDRI of that name among Blender's studio lights."""
    if Path(name).is_file():
        return Path(name)
    from diffrec_bench.demo.scene import bundled_hdri as in_blender  # imports bpy: only when asked

    return in_blender(name)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64, help="image side, px")
    parser.add_argument("--views", type=int, default=16, help="training views")
    parser.add_argument("--hdri", help="a bundled HDRI's name (sunrise.exr) or a file")
    parser.add_argument("--save", help="write the learned cube map here (torch.save)")
    parser.add_argument("--truth-res", type=int, default=TRUTH_RESOLUTION,
                        help="cube map side of the targets' light and of the truth (32: a "
                        "smoke run)")
    parser.add_argument("--set", nargs="*", default=[], metavar="K=V",
                        help="settings for the run (JSON values), e.g. iterations=500")
    args = parser.parse_args(argv)
    values = {k: json.loads(v) if v[:1] in "0123456789-[{tf" else v
              for k, v in (item.split("=", 1) for item in args.set)}
    if args.hdri:
        sky = torch.from_numpy(np.ascontiguousarray(read_image(bundled_hdri(args.hdri))[..., :3]))
        sun, name = None, args.hdri
    else:
        sky, sun, name = sun_sky(), SUN_DIRECTION, f"sky + sun {SUN_RATIO:g}x"
    torch.manual_seed(0)
    started = time.monotonic()
    light, metrics = learn(sky.float(), args.size, args.views, sys.stderr, args.truth_res,
                           **values)
    if args.save:
        torch.save(light.base.detach().cpu(), args.save)
    truth = EnvironmentLight.from_equirect(sky.float(), args.truth_res).base.detach()
    report = sun_report(truth, light.base, sun)
    stopped = metrics["stopped_early"].get(PassName.TEXTURES, {}).get("iteration",
                                                                      metrics["iterations"])
    print("| light | settings | angle, deg | cone power, learned/true | peak learned / true | "
          "held-out PSNR, dB | iterations | time, s |\n| --- | --- | --- | --- | --- | --- | "
          "--- | --- |")
    print(f"| {name} | {' '.join(args.set) or 'defaults'} | {report['angle_deg']:.1f} | "
          f"{report['cone_ratio']:.2f} | {report['peak_learned']:.2f} / "
          f"{report['peak_true']:.1f} | {metrics['psnr_mean']:.2f} | {stopped} | "
          f"{time.monotonic() - started:.0f} |")


if __name__ == "__main__":
    main()
