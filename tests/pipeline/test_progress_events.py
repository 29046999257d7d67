"""What a run reports on its way (``diffrec.protocol.events``): the pass of all passes the job
runs, the whole job's time left, and what it does between passes."""

import pytest
import torch
from running import config, sky

from diffrec.camera import orbit_cameras
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.mip_fit import STEP_COST
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import PATH_TRACED_COST


class Recording(Reporter):
    def __init__(self):
        super().__init__()
        self.seen = []

    def progress(self, progress):
        self.seen.append(progress)

    def log(self, message, level="info", **fields):
        self.seen.append((message, fields.get("stage")))


def _targets(count=4, size=16) -> Views:
    """Grey discs in the middle of each view: what the events say does not need real
    targets, only masks that outline an object."""
    rows = torch.linspace(-1, 1, size)
    disc = ((rows[:, None] ** 2 + rows[None] ** 2) < 0.4).float()
    images = torch.cat([torch.full((count, size, size, 3), 0.5),
                        disc.expand(count, size, size)[..., None]], -1)
    return Views(orbit_cameras(count, 3.2, size, seed=1), images.contiguous())


def _run(tmp_path, mode, **overrides):
    mesh = uv_sphere(12, 6, radius=0.8)
    inputs = Inputs(_targets(), None, mesh if mode != "reconstruct" else None, sky(8, 16))
    settings = config(tmp_path, mode=mode, iterations=4, log_every=2, train_res=16, batch=1,
                      texture_res=16, dmtet_grid=8, validation=False, mip_iterations=100,
                      **overrides).settings
    reporter = Recording()
    optimize(settings, inputs, reporter, device="cpu")
    return reporter.seen


MIP_STEPS = 4
"""The mip fit's steps in these runs: ``mip_iterations`` (100) cut to the pass's 4."""


def test_a_one_pass_run_reports_pass_one_of_one_then_its_mip_fit(tmp_path):
    seen = _run(tmp_path, "materials")
    progress = [event for event in seen if not isinstance(event, tuple)]
    assert [(p.pass_name, p.pass_number, p.passes, p.iteration) for p in progress] == [
        ("textures", 1, 1, 2), ("textures", 1, 1, 4), ("mips", 1, 1, 2), ("mips", 1, 1, 4)]
    halfway = progress[0]  # 2 of 4 iterations left, then the mip fit at its step's cost
    per_iteration = halfway.eta_s / 2
    assert halfway.job_eta_s == pytest.approx(halfway.eta_s + MIP_STEPS * STEP_COST
                                              * per_iteration)
    assert all(p.job_eta_s == p.eta_s for p in progress[2:])  # the fit is the last thing
    stages = [stage for _, stage in (event for event in seen if isinstance(event, tuple))]
    assert stages[-1] == "mips" and seen.index(progress[2]) > seen.index(("fitting the "
                                                                          "textures' mip "
                                                                          "levels…", "mips"))


def test_reconstruct_reports_two_passes_a_whole_job_eta_and_the_pause_between(tmp_path):
    seen = _run(tmp_path, "reconstruct")
    progress = [event for event in seen
                if not isinstance(event, tuple) and event.pass_name != PassName.MIPS]
    assert [(p.pass_number, p.passes, p.iteration) for p in progress] == [
        (1, 2, 2), (1, 2, 4), (2, 2, 2), (2, 2, 4)]
    end_of_first = progress[1]
    assert end_of_first.eta_s == 0 and end_of_first.job_eta_s > 0, "pass 2 is still to come"
    assert progress[0].job_eta_s > progress[0].eta_s
    # between the passes: what the run does, as stages, not silence
    between = seen[seen.index(end_of_first) + 1:seen.index(progress[2])]
    assert [stage for _, stage in between] == ["unwrapping", "baking"], between


@pytest.mark.mitsuba
def test_the_path_traced_pass_counts_in_the_job_eta_at_its_own_cost(tmp_path):
    seen = [event for event in _run(tmp_path, "materials", renderer="path-traced",
                                    path_iterations=6)
            if not isinstance(event, tuple) and event.pass_name != PassName.MIPS]
    assert [(p.pass_name, p.pass_number, p.passes, p.iteration) for p in seen] == [
        ("textures", 1, 2, 2), ("textures", 1, 2, 4),
        ("path-traced", 2, 2, 2), ("path-traced", 2, 2, 4), ("path-traced", 2, 2, 6)]
    halfway = seen[0]  # 2 of 4 rasterized iterations left, 6 path-traced ones, the mip fit
    per_iteration = halfway.eta_s / 2
    assert halfway.job_eta_s == pytest.approx(
        halfway.eta_s + (6 * PATH_TRACED_COST + MIP_STEPS * STEP_COST) * per_iteration)
    traced = seen[2]  # 4 path-traced iterations left, then the fit at a traced step's share
    assert traced.job_eta_s == pytest.approx(
        traced.eta_s + MIP_STEPS * STEP_COST / PATH_TRACED_COST * traced.eta_s / 4)
