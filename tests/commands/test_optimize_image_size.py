"""``diffrec optimize`` refuses images too small to score once it has read them, before it
trains (issue 56.9): a 16:9 dataset at --train-res 16 is 16x9 pixels, under SSIM's window."""

import numpy as np

from diffrec import cli
from diffrec.camera import look_at
from diffrec.io import write_image
from diffrec.protocol.captures import write_nerf

WIDTH, HEIGHT = 32, 18


def wide_dataset(root):
    """Three 32x18 views of noise around the origin, NeRF-style."""
    folder = root / "wide"
    images = np.random.default_rng(3).random((3, HEIGHT, WIDTH, 4)).astype(np.float32)
    paths = [folder / "train" / f"view_{i}.png" for i in range(3)]
    for path, image in zip(paths, images, strict=True):
        write_image(path, image)
    eyes = [[3.0, 0.0, 0.5], [0.0, 3.0, -0.5], [-3.0, 0.0, 0.5]]
    write_nerf(folder / "transforms_train.json", paths, look_at(eyes, (0.0, 0.0, 0.0)).numpy(),
               WIDTH, HEIGHT, (20, 20, WIDTH / 2, HEIGHT / 2))
    return folder


def test_images_too_small_to_score_are_refused_before_training(tmp_path, capsys):
    out = tmp_path / "out"
    status = cli.main(["optimize", "--mode", "reconstruct", "--dataset",
                       str(wide_dataset(tmp_path)), "--train-res", "16", "--iterations", "1",
                       "--out-dir", str(out)])
    error = capsys.readouterr().err
    assert status != 0
    assert ("train_res 16 makes the images 16x9 pixels, and a run's score needs at least 11 on "
            "each side: raise train_res to 19 or more") in error, error
    assert not list(out.glob("*.pt")) and not (out / "manifest.json").exists()
