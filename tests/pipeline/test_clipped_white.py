"""Targets clipped at white (8-bit photos and renders): ``clipped_white``."""

import stand_ins
import torch

from diffrec import raster
from diffrec.io import Asset, Material
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings


def test_auto_takes_white_as_clipped_only_when_no_target_is_brighter():
    def clips(mode, brightest):
        return parse_settings({"clipped_white": mode}).clips_white(brightest)

    assert clips("auto", 1.0) and not clips("auto", 1.5)
    assert clips("on", 1.5) and not clips("off", 1.0)


def test_the_true_material_matches_its_clipped_views_only_when_they_are_taken_as_clipped():
    """The ball's true material under a bright sky, its views clipped at white as an 8-bit
    file stores them: taken as clipped, the first step's loss is that of the edges alone
    (as for views that were never clipped); taken as exact, the highlights cost it."""
    sky = 4.0 * stand_ins.sky()
    truth = Material(kd=torch.tensor([0.7, 0.6, 0.5]), ks=torch.tensor([0.0, 0.3, 0.0]))
    mesh = stand_ins.ball_asset().mesh
    cameras = stand_ins.ring_cameras(4, 16, 16)
    images = render_reference_views(raster.RasterContext("cpu", impl="torch"),
                                    Asset(mesh, [truth], torch.zeros(0, dtype=torch.long)),
                                    sky, cameras, spp=2, light_resolution=32).images
    clipped = torch.cat([images[..., :3].clamp(max=1.0), images[..., 3:]], -1)
    assert (clipped[..., :3] < images[..., :3]).any(-1).float().mean() > 0.1
    first_loss = {}
    for name, views, mode in (("never clipped", images, "off"), ("as clipped", clipped, "on"),
                              ("as exact", clipped, "off")):
        settings = parse_settings({"mode": "materials", "iterations": 1, "log_every": 1,
                                   "batch": 4, "train_res": 16, "texture_res": 8,
                                   "light": "fixed", "light_res": 32, "spp": 2,
                                   "init_textures": "base_mesh", "clipped_white": mode,
                                   "validation": False, "checkpoint_every": 0})
        train = Views(cameras, views)
        inputs = Inputs(train, train, mesh, envmap=sky, base_material=truth)
        history = optimize(settings, inputs, device="cpu").metrics["history"]
        first_loss[name] = history[0]["loss"]
    edges = first_loss["never clipped"]
    assert first_loss["as clipped"] < 1.5 * edges + 1e-4, first_loss
    assert first_loss["as exact"] > 3.0 * edges + 1e-3, first_loss
