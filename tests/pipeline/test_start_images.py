"""Start renders on the wire (``job_arrays``' ``start_images``): sent with the targets, one per
view, they reach the server's run paired with the views it trains on, whichever views it holds
out; a count or size other than the targets', or a reconstruction, is refused with a
sentence."""

import re
import threading

import numpy as np
import pytest
import torch
from stand_ins import ring_cameras, write_nerf_folder

from diffrec import raster
from diffrec.errors import Cancelled, UserError
from diffrec.pipeline import run
from diffrec.pipeline.config import RunConfig, Sources
from diffrec.pipeline.inputs import load_inputs
from diffrec.pipeline.job_arrays import (
    START_IMAGES,
    from_job_arrays,
    sent_start_renders,
    to_job_arrays,
)
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import Settings
from diffrec.server.optimize_runner import OptimizeRunner
from diffrec.server.runner import JobContext, JobFailed

CPU = raster.RasterContext("cpu", impl="torch")
VIEWS, SIZE = 12, 16
TRIANGLE = {"vertices": np.eye(3, dtype=np.float32), "faces": np.int32([[0, 1, 2]])}


def _numbered(first: float) -> torch.Tensor:
    """``VIEWS`` opaque images, view i a flat grey of ``first + i / 40``: each its own."""
    grey = first + torch.arange(VIEWS, dtype=torch.float32) / 40
    images = grey[:, None, None, None].expand(VIEWS, SIZE, SIZE, 3)
    return torch.cat([images, torch.ones(VIEWS, SIZE, SIZE, 1)], -1).contiguous()


def _received(tmp_path, monkeypatch, settings: Settings, arrays) -> object:
    """The ``Inputs`` the server's optimize runner hands the pipeline for ``arrays``."""
    received = {}

    def optimize(settings, inputs, reporter, **_):
        received["inputs"] = inputs
        raise Cancelled("enough")

    monkeypatch.setattr(run, "optimize", optimize)
    OptimizeRunner("cpu").run(JobContext("job", settings, arrays, tmp_path / "work",
                                         tmp_path / "results", "cpu", lambda *_: None,
                                         threading.Event()))
    return received["inputs"]


def test_each_training_view_reaches_the_run_with_its_own_start_render(tmp_path, monkeypatch):
    """A capture and its start renders read as ``diffrec submit --start-renders`` reads them,
    sent, and held out by the server: every training target is paired with the start render
    made from its camera (found by its grey, independently of names and order)."""
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    write_nerf_folder(tmp_path / "capture", cameras, _numbered(0.1))
    write_nerf_folder(tmp_path / "start", cameras, _numbered(0.5))
    settings = Settings(mode="materials", train_res=SIZE, test_views=3, seed=7)
    sources = Sources(dataset=str(tmp_path / "capture"), start_renders=str(tmp_path / "start"))
    sent = load_inputs(RunConfig(settings, sources), CPU, hold_out=False)
    arrays = {**to_job_arrays(sent.train, start_renders=sent.start_renders), **TRIANGLE}
    assert arrays[START_IMAGES].shape == arrays["images"].shape

    server = _received(tmp_path, monkeypatch, settings, arrays)
    assert len(server.test) == 1 and len(server.start_renders) == len(server.train) == VIEWS - 1
    for target, start in zip(server.train.images, server.start_renders.images, strict=True):
        view = int(torch.argmin((sent.train.images - target).abs().flatten(1).amax(1)))
        torch.testing.assert_close(target, sent.train.images[view])
        torch.testing.assert_close(start, sent.start_renders.images[view])


def _arrays_with_start_images() -> dict[str, np.ndarray]:
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    views = Views(cameras, _numbered(0.1))
    return {**to_job_arrays(views, start_renders=Views(cameras, _numbered(0.5))), **TRIANGLE}


@pytest.mark.parametrize(("change", "sentence"), [
    (lambda images: images[:-1], "11 start_images for 12 images: send one start render per "
     "target view, in the targets' order"),
    (lambda images: images[:, :8], "the start_images are 16x8 but the images 16x16: render "
     "the start at the targets' size"),
])
def test_start_images_of_another_count_or_size_are_refused(change, sentence):
    arrays = _arrays_with_start_images()
    arrays[START_IMAGES] = change(arrays[START_IMAGES])
    with pytest.raises(UserError, match=re.escape(sentence)):
        sent_start_renders(arrays)
    runner = OptimizeRunner("cpu")
    with pytest.raises(JobFailed, match=re.escape(sentence)):
        runner.check_inputs(Settings(mode="materials", train_res=SIZE), arrays)


def test_start_images_in_a_reconstruction_are_refused():
    with pytest.raises(JobFailed, match="mode 'reconstruct' finds its own surface"):
        OptimizeRunner("cpu").check_inputs(Settings(mode="reconstruct", train_res=SIZE),
                                           _arrays_with_start_images())


def test_start_images_without_the_material_they_show_are_refused():
    """Start renders show the start in a material; a job sent none starts from a grey
    levelled to the targets instead, which they do not show: refused, and so with an explicit
    random start; with start textures they are taken."""
    runner, arrays = OptimizeRunner("cpu"), _arrays_with_start_images()
    materials = Settings(mode="materials", train_res=SIZE)
    with pytest.raises(JobFailed, match="start renders need the material they show"):
        runner.check_inputs(materials, arrays)
    given = {**arrays, "uvs": np.float32([[0, 0], [1, 0], [0, 1]]),
             "uv_faces": np.int32([[0, 1, 2]]), "start_kd": np.full((4, 4, 3), 0.5, np.float32)}
    runner.check_inputs(materials, given)
    with pytest.raises(JobFailed, match="init_textures not 'random'"):
        runner.check_inputs(materials.replace(init_textures="random"), given)
    coat_alone = {**given, "start_coat": np.float32([1.0, 0.1])}
    del coat_alone["start_kd"]  # the start's base colour would be an unlevelled grey
    with pytest.raises(JobFailed, match="start renders need the material they show"):
        runner.check_inputs(materials, coat_alone)


def test_start_images_are_read_as_the_targets_are():
    """8-bit start images are sRGB-decoded as 8-bit targets are: the same bytes sent as both
    read back the same, on the targets' cameras."""
    arrays = _arrays_with_start_images()
    encoded = (np.random.default_rng(0).random(arrays["images"].shape) * 255).astype(np.uint8)
    arrays["images"] = arrays[START_IMAGES] = encoded
    start, targets = sent_start_renders(arrays), from_job_arrays(arrays)[0]
    torch.testing.assert_close(start.images, targets.images)
    assert start.names == targets.names
    torch.testing.assert_close(start.cameras.camera_to_world, targets.cameras.camera_to_world)
