#!/usr/bin/env python3
"""Does a learned light find the sun? A ball rendered by diffrec's own renderer (no Blender)
under a sky with a sun, then a materials run with ``light`` "learn" as a real run makes it;
printed: the angle between the learned light's brightest direction and the sun's (both
blurred a little, ``diffrec.light.measure``), the power within ``CONE_DEGREES`` of the sun
(learned / true), the peaks, the held-out PSNR, and the held-out PSNR of the fitted ball
relit under a sun from elsewhere (``RELIGHT_RATIO``, ``OTHER_SUN_DIRECTION``) against the
true ball under it.

The synthetic sky (``diffrec_bench.sun_scene.sun_sky``): a smooth gradient, and a sun disc
5 degrees wide whose radiance is ``--ratio`` (50) times the sky's mean radiance -- "a sun 50x
brighter than the rest", as the suite's sunset light (its sun 54.8 at the light's resolution
over a sky of about 1). At 50 the sun carries 2.4 % of the light's power; ``--ratio 0`` is the
sky alone. ``--hdri NAME`` lights the ball with one of Blender's bundled HDRIs instead (e.g.
sunrise.exr: a sun carrying half its power), its sun the brightest blurred direction.

The ball (``diffrec_bench.sun_scene.ball``): a UV sphere in coloured bands, rough dielectric
(roughness 0.6) but for one glossy band (0.2) below its equator, seen by ``--views`` training
and 4 held-out cameras around it at ``--elevations`` (-20 to 60 degrees: from there a sun above
20 degrees never reflects in the glossy band). The figures also give the share of each
light's power near the sun (learned / true), which a light and a base colour scaled inversely
leave as it is.

    scripts/bench_light_sun.py [--size 64] [--views 16] [--hdri sunrise.exr | --ratio 50]
        [--set K=V ...] [--truth-res 128] [--elevations -20 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from diffrec import raster
from diffrec.commands.optimize import TerminalReporter
from diffrec.io import read_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.measure import angle_degrees, brightest_direction, cone_power, cone_share
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.run import optimize
from diffrec.pipeline.scoring import score_views
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import parse_settings
from diffrec_bench.sun_scene import (
    ELEVATIONS,
    OTHER_SUN_DIRECTION,
    SUN_DIRECTION,
    SUN_RATIO,
    TRUTH_RESOLUTION,
    ball,
    sun_sky,
    views,
)

CONE_DEGREES = 10.0
"""The half-angle of the cone around the sun whose power is compared."""
RELIGHT_RATIO = 500.0
"""The sun of the light the fit is judged under too: ``sun_sky`` at ``OTHER_SUN_DIRECTION``
with a sun this many times its mean (about a fifth of its power)."""


def settings_for(size: int, **values):
    """A materials run at ``preview`` that learns the light, at ``size`` px."""
    return parse_settings({"mode": "materials", "preset": "preview", "light": "learn",
                           "train_res": size, "texture_res": 64, "checkpoint_every": 0,
                           "log_every": 50, **values})


def learn(sky: torch.Tensor, size: int, count: int, stream=None,
          truth_res: int = TRUTH_RESOLUTION, elevations=ELEVATIONS, **values
          ) -> tuple[EnvironmentLight, dict]:
    """The light and metrics of a materials run on ``count`` views of the ball under
    ``sky`` (4 held out; ``views``, at ``truth_res`` and ``elevations``), with
    ``settings_for(size, **values)``;
    progress lines on ``stream`` (None: silent). The metrics add ``relit_psnr_mean``: the
    fitted ball under ``sun_sky`` at ``OTHER_SUN_DIRECTION`` with ``RELIGHT_RATIO`` against
    the true ball under it, on the held-out cameras."""
    settings = settings_for(size, **values)
    inputs = Inputs(views(sky, count, size, seed=1, truth_res=truth_res, elevations=elevations),
                    views(sky, 4, size, seed=2, truth_res=truth_res, elevations=elevations),
                    ball().mesh)
    result = optimize(settings, inputs, TerminalReporter(".", stream=stream), device="cpu")
    other = sun_sky(direction=OTHER_SUN_DIRECTION, ratio=RELIGHT_RATIO)
    relit, _, _ = score_views(raster.RasterContext("cpu"), result.mesh, result.material,
                              EnvironmentLight.from_equirect(other, truth_res),
                              views(other, 4, size, seed=2, truth_res=truth_res,
                                    elevations=elevations), settings)
    return result.light, {**result.metrics, "relit_psnr_mean": relit["psnr_mean"]}


def sun_report(truth: torch.Tensor, learned: torch.Tensor, sun=None) -> dict:
    """The learned cube map ``learned`` against the true one ``truth``: the angle (degrees)
    between their brightest directions (the truth's taken for the sun unless ``sun`` is
    given), the power within ``CONE_DEGREES`` of the sun (learned / true), the share of each
    light's power that lies there (learned / true: a light and a base colour scaled
    inversely look the same, so the share is what the images fix) and each one's largest
    texel (mean of R, G and B)."""
    sun = brightest_direction(truth) if sun is None else torch.as_tensor(sun, dtype=torch.float64)
    return {"angle_deg": angle_degrees(brightest_direction(learned), sun),
            "cone_ratio": cone_power(learned, sun, CONE_DEGREES)
            / cone_power(truth, sun, CONE_DEGREES),
            "share_ratio": cone_share(learned, sun, CONE_DEGREES)
            / cone_share(truth, sun, CONE_DEGREES),
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
    parser.add_argument("--ratio", type=float, default=SUN_RATIO,
                        help="the synthetic sun's radiance over the sky's mean (0: no sun)")
    parser.add_argument("--elevations", type=float, nargs=2, default=ELEVATIONS,
                        metavar=("LOW", "HIGH"),
                        help="the views' elevations, degrees (default %(default)s: a sun "
                        "above 20 degrees never reflects in the glossy band from there)")
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
        sky, sun, name = sun_sky(ratio=args.ratio), SUN_DIRECTION, f"sky + sun {args.ratio:g}x"
    if tuple(args.elevations) != tuple(ELEVATIONS):
        name += f", views at {args.elevations[0]:g} to {args.elevations[1]:g} degrees"
    torch.manual_seed(0)
    started = time.monotonic()
    light, metrics = learn(sky.float(), args.size, args.views, sys.stderr, args.truth_res,
                           args.elevations, **values)
    if args.save:
        torch.save(light.radiance().detach().cpu(), args.save)
    truth = EnvironmentLight.from_equirect(sky.float(), args.truth_res).base.detach()
    report = sun_report(truth, light.radiance(), sun)
    stopped = metrics["stopped_early"].get(PassName.TEXTURES, {}).get("iteration",
                                                                      metrics["iterations"])
    print("| light | settings | angle, deg | cone power, learned/true | power share, "
          "learned/true | peak learned / true | held-out PSNR, dB | relit PSNR, dB | "
          "iterations | time, s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {name} | {' '.join(args.set) or 'defaults'} | {report['angle_deg']:.1f} | "
          f"{report['cone_ratio']:.2f} | {report['share_ratio']:.2f} | "
          f"{report['peak_learned']:.2f} / "
          f"{report['peak_true']:.1f} | {metrics['psnr_mean']:.2f} | "
          f"{metrics['relit_psnr_mean']:.2f} | {stopped} | "
          f"{time.monotonic() - started:.0f} |")


if __name__ == "__main__":
    main()
