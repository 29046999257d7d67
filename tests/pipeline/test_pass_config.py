"""Each pass's config, built once from the settings and the mode (``pipeline.pass_config``),
and checkpoints fingerprinted with what their pass depends on (issue 53): a knob only a later
pass or stage reads keeps pass 1's checkpoint, a knob pass 1 trains with discards it."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from diffrec.light.sun import Sun
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.pass_config import (
    REPORTING_ONLY,
    PassConfig,
    moves_along_normals,
    offset_unit,
    path_traced_pass,
    surface_pass,
    textured_pass,
    vertex_pull,
)
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.trainer import Pass, PassTrainer
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import parse_settings

RECONSTRUCT = {"mode": "reconstruct", "preset": "preview", "learning_rate": [0.03, 0.01],
               "surface_learning_rate": [0.002, 0.001]}


def pass_1(**changes) -> Pass:
    """Reconstruct's pass 1 under the settings ``RECONSTRUCT`` with ``changes``, over
    stand-in modules (a checkpoint holds their state, the test looks at the iteration)."""
    geometry = torch.nn.Linear(2, 2)
    geometry.uniform_adam = False
    light = torch.nn.Module()
    light.base = torch.nn.Parameter(torch.zeros(3))
    light.sun = Sun()
    config = surface_pass(parse_settings({**RECONSTRUCT, **changes}), hull_start=True,
                          clips_white=False)
    return Pass.of(config, geometry, torch.nn.Linear(2, 2), light)


class Sampler:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def resumed_at(directory, run: Pass) -> int:
    """The iteration a trainer of ``run`` resumes at from the checkpoints in ``directory``."""
    trainer = PassTrainer(None, run, Sampler(), Reporter(),
                          checkpoints=CheckpointStore(directory))
    trainer.resume()
    return trainer.iteration


def test_pass_1_resumes_after_a_later_knob_changes_and_starts_afresh_after_its_own(tmp_path):
    trainer = PassTrainer(None, pass_1(), Sampler(), Reporter(),
                          checkpoints=CheckpointStore(tmp_path))
    trainer.iteration = 40
    trainer.save()
    assert resumed_at(tmp_path, pass_1()) == 40
    later = {"path_samples": 32, "path_iterations": 7, "unwrap_timeout_s": 5,
             "max_triangles": 900, "texture_res": 64, "learning_rate": [0.03, 0.002],
             "surface_learning_rate": [0.002, 0.01], "warmup_iterations": 3,
             "mip_iterations": 0, "laplace_scale": 5.0, "log_every": 3, "ranks": 2}
    for name, value in later.items():
        assert resumed_at(tmp_path, pass_1(**{name: value})) == 40, name
    own = {"learning_rate": [0.02, 0.01], "surface_learning_rate": [0.004, 0.001],
           "dmtet_grid": 32, "seed": 3, "train_res": 96, "light_log_rate": 0.1,
           "sdf_regularizer": 0.5, "albedo_smoothness": 0.0, "loss": "mse"}
    for name, value in own.items():
        assert resumed_at(tmp_path, pass_1(**{name: value})) == 0, name


def test_a_checkpoint_whose_optimisers_step_other_parameters_is_not_resumed(tmp_path):
    """A checkpoint made while the light's sun shone (its power, radius and direction
    stepped) does not resume a pass without one, nor the other way round: the optimisers'
    states would not fit (a checkpoint of an older diffrec, whose sun had no width)."""
    def with_sun(shines: bool) -> Pass:
        run = pass_1()
        if shines:
            run.light.sun.set_(torch.tensor([0.0, 0.0, 1.0]), torch.ones(3))
        return run

    for saved, resumed in ((True, False), (False, True)):
        trainer = PassTrainer(None, with_sun(saved), Sampler(), Reporter(),
                              checkpoints=CheckpointStore(tmp_path / str(saved)))
        trainer.iteration = 40
        trainer.save()
        assert resumed_at(tmp_path / str(saved), with_sun(saved)) == 40
        assert resumed_at(tmp_path / str(saved), with_sun(resumed)) == 0


def test_a_suns_width_is_learned_in_every_pass_but_the_one_that_shapes_the_surface():
    settings = parse_settings(RECONSTRUCT)
    second = textured_pass(settings, clips_white=False, given_start=False, later_iterations=0)
    first = pass_1()
    for run, widens in ((first, False),
                        (Pass.of(second, first.geometry, first.material, first.light), True)):
        run.light.sun.set_(torch.tensor([0.0, 0.0, 1.0]), torch.ones(3))
        trained = PassTrainer(None, run, Sampler(), Reporter()).parameters()
        assert any(p is run.light.sun.power for p in trained)
        assert any(p is run.light.sun.radius for p in trained) == widens
        assert run.light.sun.radius.requires_grad == widens


def protocol_5_tag(config) -> str:
    """What a protocol 5 server tagged the checkpoint of ``config``'s pass with: every field
    but the reporting ones, the pass named "pass1" / "pass2" / "path" with its ``index``."""
    old = {"surface": ("pass1", 0), "textures": ("pass2", 1), "path-traced": ("path", 2)}
    name, index = old[config.name]
    kept = {spec.name: getattr(config, spec.name) for spec in dataclasses.fields(PassConfig)
            if spec.name not in REPORTING_ONLY}
    return json.dumps({**kept, "name": name, "index": index}, sort_keys=True, default=str)


def save_as_protocol_5(directory, run: Pass, iteration: int) -> None:
    """A checkpoint of ``run`` at ``iteration`` as a protocol 5 server wrote it."""
    trainer = PassTrainer(None, run, Sampler(), Reporter())
    trainer.iteration = iteration
    name = {"surface": "pass1", "textures": "pass2"}[run.name]
    CheckpointStore(directory).save(name, {**trainer.state_dict(), "pass": name,
                                           "settings": protocol_5_tag(run)})


def test_a_checkpoint_written_under_protocol_5_names_is_resumed(tmp_path):
    save_as_protocol_5(tmp_path, pass_1(), 40)
    assert resumed_at(tmp_path, pass_1()) == 40
    assert resumed_at(tmp_path, pass_1(dmtet_grid=32)) == 0  # its own knob: afresh
    trainer = PassTrainer(None, pass_1(), Sampler(), Reporter(),
                          checkpoints=CheckpointStore(tmp_path))
    trainer.resume()
    trainer.iteration = 50
    trainer.save()  # under today's name, which wins over the old one from now on
    assert (tmp_path / "surface.pt").exists() and resumed_at(tmp_path, pass_1()) == 50


def test_the_pairs_go_to_their_passes():
    settings = parse_settings(RECONSTRUCT)
    first = surface_pass(settings, hull_start=True, clips_white=False)
    second = textured_pass(settings, clips_white=False, given_start=False, later_iterations=0)
    assert (first.name, first.learning_rate, first.surface_learning_rate, first.warmup) == (
        PassName.SURFACE, 0.03, 0.002, 0)
    assert (second.name, second.learning_rate, second.surface_learning_rate, second.warmup) \
        == (PassName.TEXTURES, 0.01, 0.001, settings.schedule.warmup_iterations)
    assert surface_pass(settings, hull_start=False, clips_white=False).surface_learning_rate \
        is None  # a sphere start moves at the pass's rate
    one = textured_pass(parse_settings({"mode": "materials", "learning_rate": [0.5, 0.02]}),
                        clips_white=False, given_start=False, later_iterations=0)
    assert (one.learning_rate, one.warmup, one.number, one.passes) == (0.02, 0, 1, 1), \
        "a single-pass mode runs the second of each pair, without a warm-up"


def test_refine_moves_a_start_given_with_its_textures_at_its_own_rate():
    def rate(given_start, **changes):
        settings = parse_settings({"mode": "refine", "surface_learning_rate": [0.004, 0.002],
                                   **changes})
        return textured_pass(settings, clips_white=False, given_start=given_start,
                             later_iterations=0).surface_learning_rate

    assert rate(True) == 0.0001, "a decimated and baked start is close: it moves slowly"
    assert rate(True, given_start_learning_rate=0.002) == 0.002
    assert rate(False) is None, "a bare given mesh moves at the pass's rate"
    assert rate(True, schedule="nvdiffrec") is None, "nvdiffrec moves geometry at its rate"
    materials = parse_settings({"mode": "materials"})
    assert textured_pass(materials, clips_white=False, given_start=True,
                         later_iterations=0).surface_learning_rate is None


def test_a_start_given_with_its_textures_is_a_short_pass():
    def iterations(given_start, mode="refine", **changes):
        settings = parse_settings({"mode": mode, "preset": "preview", **changes})
        return textured_pass(settings, clips_white=False, given_start=given_start,
                             later_iterations=0).iterations

    assert iterations(False) == 1000, "preview's one pass, which the stopping rule ends"
    assert iterations(True) == 50, "a decimated and baked start: given_start_iterations"
    assert iterations(True, iterations=40) == 40, "never more than iterations"
    assert iterations(True, given_start_iterations=0) == 1000, "0: as any pass"
    assert iterations(True, mode="materials") == 50, "kept as it is, as short"
    assert iterations(False, mode="materials") == 1000


def test_a_start_given_with_its_textures_moves_along_its_normals_unless_told():
    def along(given_start, **changes):
        return moves_along_normals(parse_settings({"mode": "refine", **changes}), given_start)

    assert along(True) and not along(False), "auto: a baked start's textures must not slide"
    assert not along(True, vertex_motion="free") and along(False, vertex_motion="along-normals")
    assert not along(True, large_steps=5.0), "auto leaves large steps as they are"
    assert not moves_along_normals(parse_settings({"mode": "reconstruct"}), False)


def test_a_start_given_with_its_textures_moves_in_half_diagonals_of_its_box():
    box = torch.tensor([[-1.0, 0.0, 2.0], [3.0, 3.0, 2.0], [1.0, 1.0, 14.0]])  # 4 x 3 x 12
    refine = parse_settings({"mode": "refine"})
    assert offset_unit(refine, True, box) == pytest.approx(6.5), "half of 13"
    assert offset_unit(refine, False, box) == 1.0, "other passes' rates are scene units"
    assert offset_unit(parse_settings({"mode": "refine", "large_steps": 5.0}), True, box) == 1.0
    assert offset_unit(refine, True, box[:1]) == 1.0, "a point has no size"


def test_only_a_start_given_with_its_textures_pulls_its_vertices_back():
    refine = parse_settings({"mode": "refine"})
    assert vertex_pull(refine, True) == 20.0, "the default"
    assert vertex_pull(parse_settings({"mode": "refine", "given_start_vertex_pull": 3}),
                       True) == 3.0
    assert vertex_pull(refine, False) == 0.0, "a bare given mesh moves as any"
    assert vertex_pull(parse_settings({"mode": "materials"}), True) == 0.0, "nothing moves"
    assert vertex_pull(parse_settings({"mode": "refine", "large_steps": 5.0}), True) == 0.0


def test_the_path_traced_pass_alone_depends_on_the_path_tracing_knobs():
    def fingerprints(**changes):
        settings = parse_settings({"mode": "materials", "renderer": "path-traced", **changes})
        rasterized = textured_pass(settings, clips_white=False, given_start=False,
                                   later_iterations=0)
        traced = path_traced_pass(settings, clips_white=False, later_iterations=0)
        return rasterized.fingerprint(), traced.fingerprint(), traced

    rasterized, traced, config = fingerprints()
    assert (config.path_samples, config.path_max_depth, config.renderer) == (8, 3, "path-traced")
    for name, value in {"path_samples": 2, "path_max_depth": 5, "path_res": 16,
                        "path_learning_rate": 0.5}.items():
        again, changed, _ = fingerprints(**{name: value})
        assert again == rasterized and changed != traced, name


def test_a_checkpoint_made_from_other_inputs_is_not_resumed(tmp_path):
    """The artist renders the targets again and runs the same command: the fit starts
    afresh (it resumed the old images' fit, their colours and all, before)."""
    trainer = PassTrainer(None, pass_1(), Sampler(), Reporter(),
                          checkpoints=CheckpointStore(tmp_path).for_inputs("old images"))
    trainer.iteration = 40
    trainer.save()
    for digest, iteration in (("old images", 40), ("new images", 0)):
        again = PassTrainer(None, pass_1(), Sampler(), Reporter(),
                            checkpoints=CheckpointStore(tmp_path).for_inputs(digest))
        again.resume()
        assert again.iteration == iteration, digest
