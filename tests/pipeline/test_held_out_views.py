"""One held-out rule (``views.hold_out_views``): a capture without a test split of its own loses
the same views to validation whether ``diffrec optimize`` reads it or ``diffrec submit`` sends
it and the server holds out (issue 27: the two paths had a rule each)."""

import json
import threading

import pytest
import torch
from stand_ins import ring_cameras, write_nerf_folder

from diffrec import raster
from diffrec.errors import Cancelled, UserError
from diffrec.pipeline import run
from diffrec.pipeline.config import RunConfig, Sources
from diffrec.pipeline.inputs import load_inputs
from diffrec.pipeline.job_arrays import to_job_arrays
from diffrec.pipeline.views import HELD_OUT_SHARE, hold_out_views
from diffrec.protocol.settings import Settings
from diffrec.server.optimize_runner import OptimizeRunner
from diffrec.server.runner import JobContext

CPU = raster.RasterContext("cpu", impl="torch")
VIEWS = 24


def _centres(views) -> list[list[float]]:
    return sorted(views.cameras.centers().tolist())


def test_command_line_and_server_hold_out_the_same_views(tmp_path, monkeypatch):
    cameras = ring_cameras(VIEWS, 16, 16)
    images = torch.rand(VIEWS, 16, 16, 4, generator=torch.Generator().manual_seed(0))
    write_nerf_folder(tmp_path / "capture", cameras, images)  # a train split alone
    settings = Settings(mode="materials", train_res=16, test_views=5, seed=7)
    config = RunConfig(settings, Sources(dataset=str(tmp_path / "capture")))

    command_line = load_inputs(config, CPU)
    sent = load_inputs(config, CPU, hold_out=False)  # what diffrec submit sends
    assert sent.test is None and len(sent.train) == VIEWS

    received = {}

    def optimize(settings, inputs, reporter, **_):
        received["inputs"] = inputs
        raise Cancelled("enough")

    monkeypatch.setattr(run, "optimize", optimize)
    arrays = to_job_arrays(sent.train)
    arrays.update(vertices=torch.eye(3).numpy(), faces=torch.tensor([[0, 1, 2]]).int().numpy())
    job = JobContext("job", settings, arrays,
                     tmp_path / "work", tmp_path / "results", "cpu", lambda *_: None,
                     threading.Event())
    OptimizeRunner("cpu").run(job)
    server = received["inputs"]

    held = VIEWS // HELD_OUT_SHARE  # 5 asked, at most one in 8
    assert len(command_line.test) == len(server.test) == held
    assert _centres(command_line.test) == _centres(server.test)
    assert _centres(command_line.train) == _centres(server.train)
    _, expected_test = hold_out_views(sent.train, settings.size.test_views, settings.run.seed)
    assert _centres(expected_test) == _centres(server.test)


def _missing_test_image(folder):
    (folder / "test" / "r_0.png").unlink()


def _damaged_test_file(folder):
    (folder / "transforms_test.json").write_text('{"frames": [')


def _test_filenames_naming_no_frame(folder):
    train = json.loads((folder / "transforms_train.json").read_text())
    names = [frame["file_path"] for frame in train["frames"]]
    (folder / "transforms.json").write_text(json.dumps(
        {**train, "train_filenames": names[1:], "test_filenames": ["train/r_99"]}))
    (folder / "transforms_train.json").unlink()
    (folder / "transforms_test.json").unlink()


@pytest.mark.parametrize("damage, sentence", [
    (_missing_test_image, r"1 of 3 images named in transforms_test.json are missing "
                          r"\(./test/r_0\)"),
    (_damaged_test_file, r"transforms_test.json is not valid JSON"),
    (_test_filenames_naming_no_frame, r"test_filenames names 1 files that no frame has"),
], ids=["missing image", "damaged file", "unmatched test_filenames"])
def test_a_test_split_that_cannot_be_read_is_an_error_not_a_reason_to_hold_out(
        tmp_path, damage, sentence):
    """Only a capture without a test split of its own has views held out: one whose test split
    is there but cannot be read stops with that split's own sentence (it was taken for none)."""
    cameras = ring_cameras(9, 16, 16)
    images = torch.rand(9, 16, 16, 4, generator=torch.Generator().manual_seed(0))
    folder = tmp_path / "capture"
    write_nerf_folder(folder, cameras[:6], images[:6])
    write_nerf_folder(folder, cameras[6:], images[6:], "test")
    damage(folder)
    config = RunConfig(Settings(mode="materials", train_res=16), Sources(dataset=str(folder)))
    with pytest.raises(UserError, match=sentence):
        load_inputs(config, CPU)


def test_a_capture_tools_file_listing_no_test_split_has_views_held_out(tmp_path):
    cameras = ring_cameras(VIEWS, 16, 16)
    images = torch.rand(VIEWS, 16, 16, 4, generator=torch.Generator().manual_seed(0))
    folder = tmp_path / "capture"
    write_nerf_folder(folder, cameras, images)
    train = json.loads((folder / "transforms_train.json").read_text())
    (folder / "transforms_train.json").rename(folder / "transforms.json")
    (folder / "transforms.json").write_text(json.dumps(
        {**train, "train_filenames": [frame["file_path"] for frame in train["frames"]]}))
    config = RunConfig(Settings(mode="materials", train_res=16), Sources(dataset=str(folder)))
    inputs = load_inputs(config, CPU)
    assert (len(inputs.train), len(inputs.test)) == (VIEWS - VIEWS // HELD_OUT_SHARE,
                                                    VIEWS // HELD_OUT_SHARE)
