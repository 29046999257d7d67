"""What a perfect result scores: the true scene rendered again with another seed (issue 25).

Cycles renders with noise: the targets have theirs, and a result's renders their own. So even
the true scene, rendered again from the held-out cameras with another seed, does not
reproduce its targets, and how far it falls short depends on the light: at 128 samples a
pixel the gold prism scores 47 dB under its own HDRI and 38 under ``forest``, whose small
bright patches leave grain on a rough metal face. Part of a result's HDRI drop (its
fitted-light PSNR minus the relit HDRIs' mean) is that difference between the lights' floors,
which no fit can remove. ``ensure_renders`` renders the truth again under the scene's own
HDRI and each relight light (cached beside the relit targets); ``scores`` judges those
renders as a result is judged; ``drop`` is a perfect result's HDRI drop.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

import numpy as np

SEED = 7
"""Cycles' seed for the renders again (the targets are rendered with seed 0)."""
OWN = "own"
"""The renders' key for the scene's own HDRI, the light it is fitted under."""


def render_again(bl_scene, cameras, own_hdri: str, lights: list[dict],
                 size: int) -> dict[str, np.ndarray]:
    """{``OWN``: renders under ``own_hdri``, light name: renders under it} of ``bl_scene``
    (the true scene) from ``cameras`` with Cycles' seed ``SEED``, each [N, H, W, 4]."""
    from demo_lib.console import quiet_stdout

    from addon import export_scene

    from .relight import use_light

    renders, seed = {}, bl_scene.cycles.seed
    bl_scene.cycles.seed = SEED
    with quiet_stdout():
        for name, light in [(OWN, {"kind": "hdri", "hdri": own_hdri}),
                            *((light["name"], light) for light in lights)]:
            use_light(bl_scene, light)
            renders[name] = export_scene.render_views(bl_scene, cameras, (size, size))
    bl_scene.cycles.seed = seed
    return renders


def ensure_renders(dataset: Path, name: str, size: int, samples: int, lights: list[dict],
                   use_gpu: bool = False) -> tuple[dict[str, np.ndarray], bool]:
    """(``render_again``'s renders of scene ``name``, whether they were rendered now rather
    than found beside its relit targets in ``dataset``). Leaves the bpy session with the true
    scene in it when it renders."""
    from . import scenes
    from .recipes import RECIPES
    from .relight import targets_key
    from .run import held_out_cameras

    key = hashlib.sha256(f"{SEED}".encode() + inspect.getsource(render_again).encode())
    path = (Path(dataset) / f"relit-{targets_key(dataset, lights)}"
            / f"truth-again-{key.hexdigest()[:16]}.npz")
    if path.is_file():
        with np.load(path) as stored:
            return dict(stored), False
    bl_scene, _ = scenes.build(name, size, samples, use_gpu=use_gpu)
    renders = render_again(bl_scene, held_out_cameras(dataset), RECIPES[name]["hdri"], lights,
                           size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez(partial, **renders)
    partial.replace(path)  # whole or absent
    return renders, True


def scores(renders: dict[str, np.ndarray], fitted_targets: np.ndarray,
           relit_targets: dict[str, np.ndarray], names: list[str]) -> dict[str, float]:
    """{``OWN`` and each light name: mean PSNR of the truth rendered again} against the
    fitted-light targets (``fitted_targets``) and each light's relit targets."""
    from demo_lib import judge

    return {key: judge.score(images, fitted_targets if key == OWN else relit_targets[key],
                             names)["psnr_mean"]
            for key, images in renders.items()}


def drop(psnr: dict[str, float], lights: list[dict]) -> float:
    """A perfect result's HDRI drop, dB: ``scores``' own-light PSNR minus its mean over the
    HDRIs among ``lights``."""
    hdris = [psnr[light["name"]] for light in lights if light["kind"] == "hdri"]
    if not hdris:
        raise ValueError("no HDRI among the lights: nothing to compare the fitted light with")
    return psnr[OWN] - float(np.mean(hdris))
