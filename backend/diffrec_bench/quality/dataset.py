"""A scene's targets on disk, in the NeRF-synthetic layout, cached by content.

``ensure_dataset`` builds scene ``name`` with bpy, renders its training and held-out cameras
with Cycles and writes, in ``<cache>/<name>-<key>/``:

- ``transforms_train.json`` + ``train/r_<i>.png`` and ``transforms_test.json`` +
  ``test/r_<i>.png`` (8-bit sRGB RGBA, straight alpha; camera-to-world matrices in Blender's
  camera convention, as NeRF's): held-out cameras sit between the training ones and training
  never reads them (``diffrec optimize`` only validates on ``transforms_test.json``);
- ``true_mesh.obj``: the true surface, triangulated, in world units, Y-up as OBJ files are
  (``diffrec.io.read_obj`` and Blender's importer both give back world coordinates), with
  the normals Cycles shaded it with (flat faces and sharp edges as the add-on sends them):
  what the geometry metrics compare against, and the starting mesh of ``materials`` mode;
- ``scene.json`` (last, so its presence marks a complete folder): the recipe, the key, sizes.

The key hashes the recipe, the image size, the view counts, the samples and the source of
every module that builds the scene, so a changed scene is rebuilt and an unchanged one is not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import bpy
import numpy as np
import torch

from diffrec.io import write_image
from diffrec.io.obj import write_obj
from diffrec.mesh import Mesh
from diffrec.protocol.captures import write_nerf
from diffrec_bench.checkout import addon_module
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.demo.console import quiet_stdout

from . import materials, recipes, scenes, shapes

export_scene = addon_module("export_scene")

HELD_OUT_OFFSET = 0.37  # turns the held-out spiral so its cameras fall between training ones


def cache_key(name: str, size: int, views: int, holdout: int, samples: int) -> str:
    """16 hex digits of SHA-256 over the recipe, the sizes and the scene-building source."""
    digest = hashlib.sha256(json.dumps(
        {"recipe": recipes.RECIPES[name], "size": size, "views": views, "holdout": holdout,
         "samples": samples}, sort_keys=True).encode())
    for module in (shapes, materials, recipes, scenes, demo_scene):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def ensure_dataset(cache: Path, name: str, size: int, views: int, holdout: int,
                   samples: int, use_gpu: bool = False) -> tuple[Path, bool]:
    """(the scene's folder, whether it was built now rather than found in ``cache``)."""
    folder = Path(cache) / f"{name}-{cache_key(name, size, views, holdout, samples)}"
    if (folder / "scene.json").is_file():
        return folder, False
    bl_scene, obj = scenes.build(name, size, samples, use_gpu=use_gpu)
    splits = {"train": demo_scene.orbit_cameras(views, 0.0, "train"),
              "test": demo_scene.orbit_cameras(holdout, HELD_OUT_OFFSET, "test")}
    for split, cameras in splits.items():
        write_split(folder, split, bl_scene, cameras, size)
    arrays = export_scene.export_mesh(obj, bpy.context.evaluated_depsgraph_get())
    write_obj(folder / "true_mesh.obj", Mesh(
        torch.from_numpy(arrays.vertices), torch.from_numpy(arrays.faces),
        normals=torch.from_numpy(arrays.normals),
        normal_triangles=torch.from_numpy(arrays.normal_faces)))
    info = {"name": name, "recipe": recipes.RECIPES[name], "key": folder.name, "size": size,
            "views": views, "holdout": holdout, "samples": samples,
            "triangles": len(arrays.faces)}
    (folder / "scene.json").write_text(json.dumps(info, indent=2))
    return folder, True


def write_split(folder: Path, split: str, bl_scene, cameras, size: int) -> None:
    """Render ``cameras`` and write ``<split>/r_<i>.png`` with ``transforms_<split>.json``."""
    (folder / split).mkdir(parents=True, exist_ok=True)
    with quiet_stdout():
        images = export_scene.render_views(bl_scene, cameras, (size, size))
    paths = []
    for index, image in enumerate(images):
        path = folder / split / f"r_{index}.png"
        write_image(path, np.ascontiguousarray(image))
        paths.append(path)
    poses, intrinsics = export_scene.export_cameras(cameras, bl_scene, (size, size))
    write_nerf(folder / f"transforms_{split}.json", paths, poses, size, size, intrinsics[0, :4])
