"""The demo's NeRF-style dataset: the training views the add-on rendered for Optimize and the
held-out views, written as ``train`` and ``test`` splits for ``diffrec optimize --dataset``."""

from __future__ import annotations

import contextlib
from pathlib import Path

from diffrec_bench.checkout import addon_module

export_scene = addon_module("export_scene")
nerf_io = addon_module("nerf_io")
submission = addon_module("submission")


@contextlib.contextmanager
def keep_targets():
    """Within, the targets the add-on's Optimize builds are kept: the yielded list gets each
    submission's (images [N,H,W,4] linear, poses [N,4,4], intrinsics [N,6]) once complete."""
    kept = []
    builder = submission.SubmissionBuilder
    original = builder._next_targets

    def recording(self):
        targets = original(self)
        if targets is not None:
            kept.append(targets)
        return targets

    builder._next_targets = recording
    try:
        yield kept
    finally:
        builder._next_targets = original


def write(folder: Path, train, scene, held_out, held_out_images) -> None:
    """``folder/transforms_train.json`` + ``train/`` from ``train`` (``keep_targets``' tuple)
    and ``transforms_test.json`` + ``test/`` from the held-out cameras and their renders."""
    images, poses, intrinsics = train
    nerf_io.write_dataset(folder, "train", images, poses, intrinsics)
    size = (held_out_images.shape[2], held_out_images.shape[1])
    nerf_io.write_dataset(folder, "test", held_out_images,
                          *export_scene.export_cameras(held_out, scene, size))
