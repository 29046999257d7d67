"""Run by ``test_bench_quality_fine.py`` in a child Python with the bpy wheel: each fine-detail
scene's true base colour (emission, unlit) from one camera at ``SIZE`` pixels, and the ``dots``
scene's albedo-only targets (``bench --albedo``) built at a tiny size and found again in the
cache. Writes ``OUT/albedo.npz`` (one ``[H, W, 4]`` array per scene, and ``pixels_per_unit``
for each: scene units to pixels at the object's centre) and prints a JSON object of figures on
its last line.

Usage: python fine_detail_truth.py OUT_DIR
"""

import json
import math
import sys
from pathlib import Path

import numpy as np

from diffrec_bench.checkout import addon_module
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.demo.console import quiet_stdout
from diffrec_bench.quality import dataset, relight, scenes

export_scene = addon_module("export_scene")

SCENES, SIZE, SAMPLES = ("dots", "glyphs"), 256, 4


def base_colour(name: str) -> tuple[np.ndarray, float]:
    """(scene ``name``'s base colour from one orbit camera [SIZE, SIZE, 4], pixels per scene
    unit at the distance of the origin)."""
    bl_scene, obj = scenes.build(name, SIZE, SAMPLES)
    camera = demo_scene.orbit_cameras(1, 0.0, "fine")[0]
    for slot in obj.material_slots:
        relight.show_base_colour(slot.material)
    with quiet_stdout():
        image = export_scene.render_views(bl_scene, [camera], (SIZE, SIZE))[0]
    view = 2 * demo_scene.CAMERA_DISTANCE * math.tan(camera.data.angle / 2)
    return image, SIZE / view


def main(out: Path) -> dict:
    arrays = {}
    for name in SCENES:
        arrays[name], arrays[f"{name}_pixels_per_unit"] = base_colour(name)
    np.savez(out / "albedo.npz", **arrays)
    folder, _ = dataset.ensure_dataset(out / "cache", "dots", 32, 2, 2, SAMPLES)
    targets, built = relight.ensure_targets(folder, "dots", 32, SAMPLES, [])
    again, built_again = relight.ensure_targets(folder, "dots", 32, SAMPLES, [])
    return {"albedo_keys": sorted(targets), "built": built, "built_again": built_again,
            "same_again": bool(np.array_equal(targets["albedo"], again["albedo"]))}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
