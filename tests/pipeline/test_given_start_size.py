"""Refine from a start given with its textures moves its vertices in half-diagonals of the
start's box (``pipeline.pass_config.offset_unit``): the same scene modelled 10 times larger
(mesh and cameras; the light is at infinity, so the images are the same) moves its vertices
10 times as far, the same in proportion."""

import dataclasses

import torch
from running import config
from stand_ins import ball_asset, render, ring_cameras, sky

from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views

SIZE = 32


def _scaled(views: Views, factor: float) -> Views:
    """``views`` with their cameras ``factor`` times as far from the origin, same images."""
    camera_to_world = views.cameras.camera_to_world.clone()
    camera_to_world[:, :3, 3] *= factor
    return Views(dataclasses.replace(views.cameras, camera_to_world=camera_to_world),
                 views.images)


def test_a_given_start_modelled_larger_moves_as_far_in_proportion(tmp_path):
    train = ring_cameras(4, SIZE, SIZE)
    train, test = Views(train, render(train)), Views(train[:1], render(train[:1]))
    ball = ball_asset()
    start = ball.mesh.replace(positions=ball.mesh.positions * 0.9)  # inside: it grows

    def moved(factor):
        run = config(tmp_path / str(factor), mode="refine", init_textures="base_mesh",
                     train_res=SIZE, texture_res=16, iterations=3, plateau_window=0,
                     test_views=1, mip_iterations=0, given_start_learning_rate=0.01)
        scaled = start.replace(positions=start.positions * factor)
        inputs = Inputs(_scaled(train, factor), _scaled(test, factor), scaled, sky(),
                        base_material=ball.materials[0])
        result = optimize(run.settings, inputs, Reporter(), device="cpu")
        return (result.mesh.positions - scaled.positions).detach()

    small, large = moved(1.0), moved(10.0)
    assert small.norm(dim=-1).max() > 0.005, "it moved"
    torch.testing.assert_close(large, 10.0 * small, rtol=0.05, atol=1e-4)
