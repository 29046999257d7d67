"""Running the pipeline in tests as ``diffrec optimize`` does: checkpoints and outputs in the
config's ``out_dir``; the settings, sky and rendered scenes of the small runs."""

from pathlib import Path

import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.commands.optimize import TerminalReporter, checkpoint_store
from diffrec.io import Asset, Material
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.pipeline.config import RunConfig, build_config
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.outputs import write_result
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.run import optimize

SIZE = 48
"""Training resolution of the small runs (px)."""


def optimize_into(config: RunConfig, inputs: Inputs, reporter=None) -> dict:
    """Optimise ``inputs`` with ``config``'s settings on its device, write the result into
    ``config.out_dir``; return the metrics. ``reporter``: a silent ``TerminalReporter`` of
    ``out_dir`` unless given."""
    reporter = reporter or TerminalReporter(config.out_dir, stream=None)
    result = optimize(config.settings, inputs, reporter,
                      checkpoints=checkpoint_store(config.out_dir), device=config.device)
    write_result(Path(config.out_dir), result, export_obj=config.settings.reporting.export_obj)
    return result.metrics


class Lines(Reporter):
    """The log lines a run reports."""

    def __init__(self):
        self.lines = []

    def log(self, message: str, level: str = "info", **fields) -> None:
        self.lines.append(message)


def sky(height=32, width=64):
    """A smooth HDR sky: bright overhead and towards +X, dim below (linear RGB)."""
    d = equirect_pixel_directions(height, width).float()
    return (0.6 + 0.5 * d[..., 2:3] + 0.4 * d[..., 0:1]).clamp(min=0.1) * torch.tensor(
        [1.0, 0.95, 0.9])


def config(tmp_path, **values):
    """A preview run on the CPU at ``SIZE`` px under a fixed light, without the mip fit (80
    steps of about half an iteration each, ``mip_fit.STEP_COST``; its own tests ask for
    it), into ``tmp_path / "out"``; ``values`` override any setting."""
    settings = {"preset": "preview", "device": "cpu", "out_dir": str(tmp_path / "out"),
                "train_res": SIZE, "texture_res": 32, "light_res": 32, "batch": 4,
                "light": "fixed", "log_every": 1000, "checkpoint_every": 0,
                "mip_iterations": 0, **values}
    return build_config(settings)


def albedo(size=32):
    """Truth texture: red rises with u, green with v, a little blue."""
    v, u = torch.meshgrid(torch.linspace(1, 0, size), torch.linspace(0, 1, size), indexing="ij")
    return torch.stack([0.15 + 0.7 * u, 0.15 + 0.7 * v, torch.full_like(u, 0.3)], -1)


def scene(mesh, count, seed, kd=None, size=SIZE, ks=(0.0, 0.6, 0.0), light=None):
    """``count`` straight-alpha views of ``mesh`` (base colour ``kd``, default ``albedo()``;
    one ``ks``) under ``light`` (default ``sky()``)."""
    asset = Asset(mesh, [Material(kd=(albedo() if kd is None else kd).numpy(),
                                  ks=torch.tensor(ks).numpy())],
                  torch.zeros(mesh.num_triangles, dtype=torch.long))
    cameras = orbit_cameras(count, 3.2, size, seed=seed, elevations_degrees=(-20, 50))
    ctx = raster.RasterContext("cpu", impl="torch")
    return render_reference_views(ctx, asset, sky() if light is None else light, cameras,
                                  spp=2)
