"""Run by ``test_bench_quality_relight.py`` in a child Python with the bpy wheel: the ``box``
scene's relit targets built at a tiny size, found again in the cache, and the true scene
itself judged against them. Prints one JSON object of figures on its last line.

Usage: python relight_truth.py CACHE_DIR
"""

import json
import sys
from pathlib import Path

import cv2
import numpy as np

from diffrec_bench.demo import judge, report
from diffrec_bench.quality import dataset, relight, scenes
from diffrec_bench.quality.judging import JUDGE_SEED, held_out_cameras
from diffrec_bench.quality.lights import relight_lights

SCENE, SIZE, SAMPLES = "box", 32, 8


def main(cache: Path) -> dict:
    folder, _ = dataset.ensure_dataset(cache, SCENE, SIZE, 2, 2, SAMPLES)
    lights = relight_lights(SCENE)
    targets, built = relight.ensure_targets(folder, SCENE, SIZE, SAMPLES, lights)
    again, built_again = relight.ensure_targets(folder, SCENE, SIZE, SAMPLES, lights)
    names = [light["name"] for light in lights]
    bl_scene, _ = scenes.build(SCENE, SIZE, SAMPLES)
    picture = cache / "relit.png"
    truth = relight.judge(bl_scene, held_out_cameras(folder), lights, targets, SIZE, picture)
    bl_scene, _ = scenes.build(SCENE, SIZE, SAMPLES)  # judging changed the materials
    bl_scene.cycles.seed = JUDGE_SEED  # as results are judged: noise of its own
    own_noise = relight.judge(bl_scene, held_out_cameras(folder), lights, targets, SIZE)
    shown = cv2.imread(str(picture))[report.HEADER_PX:]  # rows of target | result | error
    tile = shown.shape[1] // 3
    albedo = targets["albedo"]
    covered = albedo[..., 3] > judge.COVERED
    return {
        "built": built, "built_again": built_again,
        "same_again": all(np.array_equal(targets[key], again[key]) for key in targets),
        "keys": sorted(targets),
        "truth_psnr": {name: truth["lights"][name]["psnr_mean"] for name in names},
        "truth_psnr_judge_seed": {name: own_noise["lights"][name]["psnr_mean"]
                                  for name in names},
        "truth_albedo": truth["albedo"],
        # how alike two different lights' targets are: low when the lights really differ
        "between_lights_psnr": judge.score(targets[names[0]], targets[names[2]],
                                           ["a", "b"])["psnr_mean"],
        "albedo_pixels": albedo[covered][:, :3].tolist(),
        "picture_rows": shown.shape[0] / tile,
        "picture_error_max": int(shown[:, 2 * tile:].max()),
        "picture_target_max": int(shown[:, :tile].max()),
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
