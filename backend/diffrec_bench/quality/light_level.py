"""How much of a relit PSNR drop the lights' brightness alone explains (issue 25).

PSNR is taken on sRGB-encoded images with peak 1, so the same relative colour error costs more
dB under a brighter light: the critter, fitted under the dim ``night`` HDRI, has object pixels
about 4.5x darker (linear) than under ``city``. ``expected_drop`` measures that effect on the
targets themselves: every target's colour is made ``RELATIVE_ERROR`` too bright, each such copy
is scored against its target by ``diffrec_bench.demo.judge.score``, and the fitted light's
PSNR minus the mean over the relit HDRIs is the drop an asset with that one uniform error
would show. A result's measured drop minus this is the part its light transport (baked
shading, shadows, reflections) is responsible for.
"""

from __future__ import annotations

import numpy as np

from diffrec_bench.demo import judge

RELATIVE_ERROR = 0.1  # a 10 % colour error; the suite's expected drops move < 0.3 dB in 5-20 %


def uniform_error_psnr(targets: np.ndarray, relative_error: float = RELATIVE_ERROR) -> float:
    """Mean PSNR (dB) of ``targets`` ([N, H, W, 4], linear, straight alpha) against a copy
    whose colour is ``1 + relative_error`` times theirs."""
    off = np.array(targets, np.float32, copy=True)
    off[..., :3] *= 1.0 + relative_error
    return judge.score(off, targets, [str(i) for i in range(len(targets))])["psnr_mean"]


def expected_drop(fitted: np.ndarray, relit: dict[str, np.ndarray], lights: list[dict],
                  relative_error: float = RELATIVE_ERROR) -> float:
    """dB: ``uniform_error_psnr`` under the fitted light minus its mean over the HDRIs among
    ``lights`` (``relit`` holds their targets by light name); positive when they are brighter."""
    hdris = [relit[light["name"]] for light in lights if light["kind"] == "hdri"]
    if not hdris:
        raise ValueError("no HDRI among the lights: nothing to compare the fitted light with")
    return uniform_error_psnr(fitted, relative_error) - float(
        np.mean([uniform_error_psnr(images, relative_error) for images in hdris]))
