"""An asset's truth, cached by content: the reference rendered by Cycles for training and for
judging, and the judge's noise ceiling.

``ensure_truth`` writes, in ``<cache>/<asset>-<key>/``:

- the training views (``job.samples``) and the held-out views (``job.judge_samples``) under
  the fitted HDRI in the NeRF-synthetic layout (``transforms_train.json`` + ``train/``,
  ``transforms_test.json`` + ``test/``; ``diffrec_bench.quality.dataset.write_split``): what
  ``diffrec optimize`` reads (it validates on the held-out views, never trains on them);
- ``targets.npz``: the held-out cameras (as the add-on's NeRF import brings them back)
  rendered under each judging light and as base colour (``relight.render_relit``, seed 0,
  ``job.judge_samples``);
- ``ceiling.json``: the same scene rendered again with the judge's seed
  (``run.JUDGE_SEED``) and scored against ``targets.npz`` per light: the best any result can
  score, the targets' own noise;
- ``truth.json`` last (its presence marks a complete folder): the asset, its triangles, sizes.

The key hashes the asset, the sizes, the samples, the lights and the source of every module
that builds or renders the truth, so a changed asset is rendered again and an unchanged one
is not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from diffrec_bench.checkout import addon_module
from diffrec_bench.demo import judge
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.quality import dataset as datasets
from diffrec_bench.quality import relight
from diffrec_bench.quality.judging import JUDGE_SEED, held_out_cameras

from . import assets, catalogue
from . import lights as judging_lights
from .jobs import PeerJob

export_scene = addon_module("export_scene")


def truth_key(job: PeerJob) -> str:
    """16 hex digits of SHA-256 over what the truth depends on (module docstring)."""
    digest = hashlib.sha256(json.dumps(
        {"asset": job.asset, "size": job.size, "views": job.views, "holdout": job.holdout,
         "samples": job.samples, "judge_samples": job.judge_samples, "lights": job.lights()},
        sort_keys=True).encode())
    for module in (assets, catalogue, judging_lights, datasets, relight, demo_scene,
                   export_scene):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def reference_scene(job: PeerJob, seed: int = 0, samples: int | None = None) -> tuple:
    """A factory-fresh Cycles scene (``job.size`` px, ``samples`` spp, ``job.samples`` when
    None, ``seed``) lit by the asset's fitted HDRI, with the asset in it: (scene, reference
    object)."""
    bl_scene = demo_scene.empty_scene(job.size, samples or job.samples, use_gpu=_cuda(job))
    bl_scene.cycles.seed = seed
    demo_scene.set_world(bl_scene, demo_scene.bundled_hdri(catalogue.ASSETS[job.asset]["hdri"]))
    return bl_scene, assets.build(job.asset)


def ensure_truth(job: PeerJob) -> tuple[Path, bool]:
    """(the asset's truth folder, whether it was rendered now rather than found cached)."""
    folder = Path(job.cache) / f"{job.asset}-{truth_key(job)}"
    if (folder / "truth.json").is_file():
        return folder, False
    lights = job.lights()
    bl_scene, reference = reference_scene(job)
    triangles = assets.triangles(reference)
    splits = {"train": demo_scene.orbit_cameras(job.views, 0.0, "train"),
              "test": demo_scene.orbit_cameras(job.holdout, datasets.HELD_OUT_OFFSET, "test")}
    for split, cameras in splits.items():
        bl_scene.cycles.samples = job.samples if split == "train" else job.judge_samples
        datasets.write_split(folder, split, bl_scene, cameras, job.size)
    targets = relight.render_relit(bl_scene, held_out_cameras(folder), lights, job.size)
    np.savez(folder / "targets.npz", **targets)
    # render_relit showed the base colour for good: the ceiling's renders need a fresh scene
    bl_scene, _ = reference_scene(job, seed=JUDGE_SEED, samples=job.judge_samples)
    cameras = held_out_cameras(folder)
    again = relight.render_relit(bl_scene, cameras, lights, job.size)
    names = [camera.name for camera in cameras]
    ceiling = {light["name"]: judge.score(again[light["name"]], targets[light["name"]], names)
               for light in lights}
    (folder / "ceiling.json").write_text(json.dumps(ceiling, indent=2))
    info = {"asset": job.asset, "key": folder.name, "triangles": triangles, "size": job.size,
            "views": job.views, "holdout": job.holdout, "samples": job.samples,
            "judge_samples": job.judge_samples,
            "lights": lights}
    (folder / "truth.json").write_text(json.dumps(info, indent=2))
    return folder, True


def load_truth(folder: Path) -> tuple[dict, dict[str, np.ndarray], dict]:
    """(``truth.json``, the targets by light name and ``albedo``, the ceiling's scores)."""
    with np.load(folder / "targets.npz") as stored:
        targets = dict(stored)
    return (json.loads((folder / "truth.json").read_text()), targets,
            json.loads((folder / "ceiling.json").read_text()))


def _cuda(job: PeerJob) -> bool:
    return bool(job.device and job.device.startswith("cuda"))
