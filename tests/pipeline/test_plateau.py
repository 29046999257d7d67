"""The plateau stopping rule (issue 31): a pass ends once its training PSNR, averaged over a
window, stops rising; off unless asked for (on in the ``preview`` preset)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from diffrec.light.sun import Sun
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.pass_config import pass_config
from diffrec.pipeline.plateau import Plateau
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.trainer import Pass, PassTrainer
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import PRESETS, expected_iterations, parse_settings


def rising_then_flat(iteration: int) -> float:
    """A PSNR curve (dB) that climbs 20 dB over about 100 iterations, then levels off,
    with a +-1 dB wobble from batch to batch."""
    return 30.0 - 20.0 * math.exp(-iteration / 30.0) + (1.0 if iteration % 2 else -1.0)


def test_flat_only_once_the_newer_window_gains_less_than_the_threshold():
    plateau = Plateau(window=20, min_gain_db=0.1)
    decisions = []
    for iteration in range(400):
        plateau.add(torch.tensor(rising_then_flat(iteration)))
        decisions.append(plateau.flat())
    first = decisions.index(True)
    assert not any(decisions[:40])  # two windows are needed
    assert 100 < first < 300  # not while it climbs; soon after it levels off
    assert plateau.gain_db < 0.1


def first_stop(curve, window: int, min_gain_db: float, every: int = 10) -> int | None:
    """The iteration at which a pass fed ``curve`` (dB per iteration) stops, checked every
    ``every`` iterations as the trainer checks at its progress reports; None: it ran out."""
    plateau = Plateau(window, min_gain_db)
    for iteration, psnr in enumerate(curve, start=1):
        plateau.add(torch.tensor(psnr))
        if iteration % every == 0 and iteration < len(curve) and plateau.flat():
            return iteration
    return None


def test_the_threshold_is_the_gain_of_one_window_mean_on_the_one_before():
    # on a straight line the newer window's mean is exactly slope x window above the older's
    window, slope = 50, 0.004  # dB per iteration: 0.2 dB a window
    line = [20.0 + slope * iteration for iteration in range(400)]
    assert first_stop(line, window, min_gain_db=0.25) == 2 * window  # flat once two are in
    assert first_stop(line, window, min_gain_db=0.15) is None
    plateau = Plateau(window, 0.25)
    for psnr in line[:2 * window]:
        plateau.add(torch.tensor(psnr))
    assert plateau.flat()  # the batches are float32: equal to float32's precision
    assert math.isclose(plateau.gain_db, slope * window, rel_tol=1e-6)


def test_batch_noise_neither_stops_a_rising_pass_nor_keeps_a_flat_one_going():
    noise = torch.Generator().manual_seed(0)
    wobble = torch.randn(1200, generator=noise, dtype=torch.float64)  # +-1 dB from batch to batch
    rising = [30.0 + 0.01 * iteration + float(wobble[iteration]) for iteration in range(1200)]
    flat = [40.0 + float(wobble[iteration]) for iteration in range(1200)]
    settings = parse_settings({"preset": "preview"})
    window, min_gain_db = settings.schedule.plateau_window, settings.schedule.plateau_db
    assert first_stop(rising, window, min_gain_db) is None  # 1 dB a window
    assert first_stop(flat, window, min_gain_db) == 2 * window  # at the first look


def test_the_preview_rule_stops_recorded_800_iteration_passes_where_they_level_off():
    """Four passes recorded with the rule off (tests/pipeline/plateau_curves.json, issue
    31): each climbs 2.3 to 13 dB from its first 100 iterations to its second, then levels
    off at its own pace, gaining under 0.2 dB a window by iteration 500."""
    curves = json.loads((Path(__file__).with_name("plateau_curves.json")).read_text())
    settings = parse_settings({"preset": "preview"})
    for name in ("demo", "ring", "mug", "bowl"):
        curve = curves[name]
        stop = first_stop(curve, settings.schedule.plateau_window, settings.schedule.plateau_db)
        assert stop is not None and 300 <= stop <= 450, (name, stop)
        end, at_stop = sum(curve[-100:]) / 100, sum(curve[stop - 100:stop]) / 100
        assert 0 < end - at_stop < 1.0, name  # what running on to 800 would still have gained


def test_a_window_of_zero_never_stops():
    plateau = Plateau(window=0, min_gain_db=1.0)
    for _ in range(50):
        plateau.add(torch.tensor(20.0))
    assert not plateau.flat() and len(plateau.values) == 0


def test_on_in_preview_and_standard_off_in_high():
    for preset in ("preview", "standard"):
        assert parse_settings({"preset": preset}).schedule.plateau_window > 0, preset
        assert "plateau_window" in PRESETS[preset]
    assert parse_settings({"preset": "high"}).schedule.plateau_window == 0
    assert parse_settings({"preset": "preview", "plateau_window": 0}).schedule.plateau_window == 0


def test_preview_gives_a_one_pass_run_a_longer_cap_than_each_of_reconstructs_passes():
    preview = {mode: parse_settings({"preset": "preview", "mode": mode}).size.iterations
               for mode in ("materials", "refine", "reconstruct")}
    assert preview == {"materials": 1000, "refine": 1000, "reconstruct": 300}
    assert parse_settings({"preset": "preview", "iterations": 40}).size.iterations == 40
    assert {parse_settings({"preset": "standard", "mode": mode}).size.iterations
            for mode in ("materials", "reconstruct")} == {PRESETS["standard"]["iterations"]}
    assert parse_settings({"preset": "custom", "mode": "materials"}).size.iterations == 2000


def test_a_pass_is_expected_to_end_where_recorded_passes_levelled_off():
    curves = json.loads((Path(__file__).with_name("plateau_curves.json")).read_text())
    settings = parse_settings({"preset": "preview"})
    window, min_gain_db = settings.schedule.plateau_window, settings.schedule.plateau_db
    stops = [first_stop(curves[name], window, min_gain_db)
             for name in ("demo", "ring", "mug", "bowl")]
    typical = expected_iterations(settings.size.iterations, window)
    assert min(stops) <= typical <= max(stops) < settings.size.iterations, (typical, stops)
    assert expected_iterations(300, window) == 300, "never past the cap (reconstruct's 300)"
    assert expected_iterations(1000, window, done=typical + 20) == typical + 20 + window
    assert expected_iterations(1000, 0) == 1000, "without the rule, every iteration"


class Recorder(Reporter):
    """Keeps log lines, progress iterations and the progress events."""

    def __init__(self):
        self.lines, self.iterations, self.events = [], [], []

    def log(self, message, level="info", **fields):
        self.lines.append(message)

    def progress(self, progress):
        self.iterations.append(progress.iteration)
        self.events.append(progress)


class Frozen(torch.nn.Module):
    """A geometry stand-in with nothing to train."""

    uniform_adam = False


class Sampler:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class ScriptedTrainer(PassTrainer):
    """A trainer whose steps return ``curve(iteration)`` as the PSNR instead of rendering."""

    curve = staticmethod(rising_then_flat)

    def step(self):
        zero = torch.tensor(0.0)
        return {"losses": {"total": zero, "color": zero, "alpha": zero},
                "psnr": torch.tensor(self.curve(self.iteration))}


def scripted(settings, reporter, iterations=1000, curve=rising_then_flat,
             checkpoints=None) -> ScriptedTrainer:
    light = torch.nn.Module()
    light.base = torch.nn.Parameter(torch.zeros(3))
    light.sun = Sun()
    config = pass_config(settings, name=PassName.TEXTURES, iterations=iterations,
                         learning_rate=0.01, warmup=0, learn_light=False)
    run = Pass.of(config, Frozen(), torch.nn.Linear(2, 2), light)
    trainer = ScriptedTrainer(None, run, Sampler(), reporter, checkpoints=checkpoints)
    trainer.curve = curve
    return trainer


def test_the_trainer_stops_a_converged_pass_and_a_resumed_one_stays_stopped(tmp_path):
    settings = parse_settings({"preset": "preview", "plateau_window": 50, "log_every": 10,
                               "checkpoint_every": 0})
    reporter, checkpoints = Recorder(), CheckpointStore(tmp_path)
    trainer = scripted(settings, reporter, checkpoints=checkpoints)
    trainer.train()
    assert trainer.stopped_early and 200 <= trainer.iteration < 1000
    assert trainer.iteration % 10 == 0 and reporter.iterations[-1] == trainer.iteration
    assert reporter.lines == [f"textures stopped at iteration {trainer.iteration} of 1000: "
                              f"training PSNR rose {trainer.plateau.gain_db:.3f} dB over its "
                              f"last 50 iterations (plateau_db 0.3)"]
    again = scripted(settings, reporter, checkpoints=checkpoints)
    again.resume()
    again.train()
    assert again.iteration == trainer.iteration  # not trained on from the checkpoint
    assert again.history == trainer.history != [], "the curve is kept (it came back empty)"


def test_a_pass_flat_only_at_its_last_iteration_is_not_said_to_stop_early():
    settings = parse_settings({"preset": "preview", "plateau_window": 50, "log_every": 10,
                              "checkpoint_every": 0})
    reporter = Recorder()
    trainer = scripted(settings, reporter, iterations=100, curve=lambda iteration: 25.0)
    trainer.train()  # two windows are in, and flat, first at iteration 100: the end anyway
    assert trainer.iteration == 100 and not trainer.stopped_early
    assert reporter.lines == []


def test_without_the_rule_the_pass_runs_all_its_iterations():
    settings = parse_settings({"preset": "high", "log_every": 10, "checkpoint_every": 0})
    reporter = Recorder()
    trainer = scripted(settings, reporter)
    trainer.train()
    assert not trainer.stopped_early and trainer.iteration == 1000
    assert not any("stopped" in line for line in reporter.lines)


def test_the_eta_of_a_pass_the_rule_may_end_counts_to_its_expected_end():
    settings = parse_settings({"preset": "preview", "plateau_window": 50, "log_every": 10,
                               "checkpoint_every": 0})
    reporter = Recorder()
    trainer = scripted(settings, reporter, iterations=400, curve=lambda i: 20.0 + 0.05 * i)
    trainer.train()  # rising 2.5 dB a window: runs to its last iteration
    events = {event.iteration: event for event in reporter.events}
    first, late, last = events[10], events[300], events[400]
    assert first.expected_iterations == 175 and late.expected_iterations == 350
    assert first.eta_s == first.job_eta_s == pytest.approx((175 - 10) * first.elapsed_s / 10)
    assert last.expected_iterations == 400 and last.eta_s == 0
    fractions = [event.fraction for event in reporter.events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
