"""One job over several ranks (``pipeline.distributed``), checked on this CPU with gloo.

A 2-rank run of a tiny ``materials`` job must end where a single process with the same total
batch and seed ends (up to the order of floating-point sums), and only rank 0 may write.
"""

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from stand_ins import (
    ball_asset,
    render,
    ring_cameras,
    sky,
    write_mesh_and_sky,
    write_nerf_folder,
)
from view_helpers import toy_views

from diffrec import raster
from diffrec.commands.optimize import optimize_rank, ranks_asked
from diffrec.errors import Cancelled, UserError
from diffrec.pipeline import distributed
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.config import build_config
from diffrec.pipeline.geometry_models import ExplicitGeometry
from diffrec.pipeline.initial_state import initial_textures, make_light
from diffrec.pipeline.inputs import load_inputs
from diffrec.pipeline.pass_config import pass_config
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.run import optimize
from diffrec.pipeline.sampler import ViewSampler
from diffrec.pipeline.trainer import Pass, PassTrainer
from diffrec.pipeline.views import Views
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import Settings

GRADIENT_TOLERANCE = 1e-5  # of each tensor's largest gradient; measured <= 6.3e-7
LOSS_TOLERANCE = 1e-5  # relative; measured 1.6e-6 (the alpha loss, 2.2e-4, with torch's AVX2
# kernels: ATEN_CPU_CAPABILITY=avx2), below 1e-6 with its AVX-512 ones
ITERATIONS = 6
# Adam divides each gradient by its running magnitude plus eps (1e-8): where a texel's
# gradient is about eps, a difference of rounding size (1e-10) moves it by a few percent of a
# step. After 6 steps at a learning rate of 0.01, measured: kd and ks within 1.2e-7, 2 of 768
# normal texels and 17 of 18432 light texels beyond 1e-5, the largest 4.8e-5; since antialias
# blends along each edge's major axis only, 1 normal and 4 light texels beyond 1e-5, the
# largest 2.6e-4 and 3.0e-4 in two runs.
TOLERANCE = 5e-4  # every trained value: 5 % of one step
CLOSE = 1e-5  # 99 % of each tensor's values


def test_rank_shares_together_are_the_single_process_batch():
    views = toy_views(7)  # batches straddle epochs
    single = ViewSampler(views, 6, seed=3)
    ranks = [ViewSampler(views, 6, seed=3, rank=r, ranks=3) for r in range(3)]
    for _ in range(5):
        shares = [sampler.next_indices() for sampler in ranks]
        assert all(len(share) == 2 for share in shares)
        assert torch.equal(torch.cat(shares), single.next_indices())
    assert all(torch.equal(s.state_dict()["order"], single.state_dict()["order"]) for s in ranks)
    with pytest.raises(UserError, match="does not split evenly over 4 ranks"):
        ViewSampler(views, 6, seed=3, rank=0, ranks=4)


def test_gpus_are_refused_where_there_are_none_and_ranks_need_the_cpu(monkeypatch):
    config = build_config({"device": "auto", "batch": 4})
    cpu = build_config({"device": "cpu", "batch": 4})

    def asked(gpus=None, ranks=None, run_config=config):
        return ranks_asked(SimpleNamespace(gpus=gpus, ranks=ranks), run_config)

    assert asked() == (1, "")
    if torch.cuda.device_count() < 2:
        with pytest.raises(UserError, match=r"--gpus 2 needs 2 CUDA devices.*--ranks 2 --device"):
            asked(gpus=2)
    with monkeypatch.context() as gpu_machine:  # where "auto" is a GPU, --ranks needs the CPU
        gpu_machine.setattr(torch.cuda, "is_available", lambda: True)
        with pytest.raises(UserError, match="give --device cpu"):
            asked(ranks=2)
    with pytest.raises(UserError, match="leave out --device cpu"):
        asked(gpus=2, run_config=cpu)
    assert asked(ranks=2, run_config=cpu) == (2, "cpu")
    with pytest.raises(UserError, match="does not split evenly over 3 ranks"):
        asked(ranks=3, run_config=cpu)
    for flags in ({"ranks": 0}, {"ranks": 65}, {"gpus": 65}):  # the ranks setting's range too
        with pytest.raises(UserError, match=r"must be 1 to 64, got (0|65)"):
            asked(run_config=cpu, **flags)


def _raises_on_rank_one(world):
    torch.distributed.barrier()
    if world.rank == 1:
        raise ValueError("rank 1 cannot go on")


def test_a_rank_that_raises_is_reported_with_its_error():
    # a rank that finished ends without the interpreter's finalization; one that raised must
    # still come back as its traceback
    with pytest.raises(torch.multiprocessing.ProcessRaisedException,
                       match="ValueError: rank 1 cannot go on"):
        distributed.spawn(_raises_on_rank_one, 2, "cpu", timeout_s=120)


def _one_step(world, settings, train, mesh, sky, out):
    """One refine step a third into a pass (every loss term non-zero: the Laplacian, albedo
    smoothness, white balance and, on the random textures' metal, mostly metal too); rank 0
    saves the gradients the step took and its reported losses into ``out``."""
    ctx = raster.RasterContext("cpu", impl="torch")
    geometry = ExplicitGeometry(mesh, True, "absolute", settings.surface.laplace_scale)
    config = pass_config(settings, name=PassName.TEXTURES, iterations=300, learning_rate=0.01,
                         warmup=0, learn_light=True)
    run = Pass.of(config, geometry, initial_textures(settings, "cpu"),
                  make_light(settings, sky, "cpu"))
    sampler = ViewSampler(train, settings.size.batch, seed=5, rank=world.rank, ranks=world.size)
    trainer = PassTrainer(ctx, run, sampler, Reporter(), world)
    trainer.iteration = 100
    stats = trainer.step()
    if world.is_main:
        parameters = trainer.parameters()
        losses = {name: float(value) for name, value in stats["losses"].items()}
        torch.save({"grads": [p.grad for p in parameters], "losses": losses,
                    "psnr": float(stats["psnr"])}, out)


def test_two_ranks_take_the_gradient_of_the_whole_batch(runs):
    runs, _ = runs
    one, two = torch.load(runs / "step_one.pt"), torch.load(runs / "step_two.pt")
    assert len(one["grads"]) == len(two["grads"]) == 5  # positions, kd, ks, normal, light
    for a, b in zip(one["grads"], two["grads"], strict=True):
        scale = a.abs().max().item()
        assert scale > 0
        assert (a - b).abs().max().item() <= GRADIENT_TOLERANCE * scale
    assert two["psnr"] == pytest.approx(one["psnr"], rel=1e-6)
    for name, value in one["losses"].items():  # float32 means of half batches, averaged
        assert two["losses"][name] == pytest.approx(value, rel=LOSS_TOLERANCE), name


def _config(folder, views: Views, out: str):
    """A materials job on the stand-in ball seen in ``views`` (one held out), a batch of 4,
    every kind of trained value (textures from random, a normal map, the light from the
    HDRI)."""
    ball, hdri = write_mesh_and_sky(folder)
    write_nerf_folder(folder / "capture", views.cameras, views.images)
    return build_config({
        "mode": "materials", "preset": "preview", "device": "cpu", "out_dir": str(folder / out),
        "dataset": str(folder / "capture"), "base_mesh": str(ball), "envmap": str(hdri),
        "test_views": 1, "train_res": 24, "texture_res": 16, "light_res": 32, "batch": 4,
        "iterations": ITERATIONS, "checkpoint_every": 2, "preview_every": 3, "log_every": 2,
        "light": "learn-from-envmap", "init_textures": "random", "normal_map": "on"})


class _StopsAtIterationThree(Reporter):
    def __init__(self):
        super().__init__()
        self.polls = 0

    def should_stop(self):
        self.polls += 1  # once an iteration (the ball's own UVs: no unwrapping to poll)
        return self.polls > 3


def _stopped(world, config):
    """The job again, rank 0's reporter asking to stop at iteration 3; each rank writes what
    it raised into ``stopped<rank>.txt`` beside ``out_dir``."""
    inputs = load_inputs(config, raster.RasterContext("cpu", impl="torch"))
    try:
        optimize(config.settings, inputs, _StopsAtIterationThree(), device="cpu", world=world)
    except Cancelled as stopped:
        (Path(config.out_dir).parent / f"stopped{world.rank}.txt").write_text(str(stopped))


def _all(world, step_arguments, step_out, config):
    """``_one_step``, what ``diffrec optimize --ranks 2`` runs in each rank (an ``out_dir``
    per rank), then ``_stopped``: one spawn for all, starting ranks takes most of the time."""
    _one_step(world, *step_arguments, step_out)
    optimize_rank(world, dataclasses.replace(config, out_dir=f"{config.out_dir}{world.rank}"),
                  quiet=True)
    _stopped(world, config)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """In one process and over 2 ranks: ``_one_step`` into ``step_one.pt`` and
    ``step_two.pt``, the job of ``_config`` into ``one/`` and ``two0/``, ``two1/``; over 2
    ranks ``_stopped``; returns the folder and the job's settings."""
    folder = tmp_path_factory.mktemp("ranks")
    cameras = ring_cameras(7, 24, 24)  # 24 pixels
    views = Views(cameras, render(cameras))
    config = _config(folder, views, "one")
    step_arguments = (Settings(mode="refine", preset="preview", batch=4, texture_res=16,
                               light_res=32, light="learn-from-envmap", init_textures="random"),
                      views, ball_asset().mesh, sky())
    _one_step(distributed.SINGLE, *step_arguments, folder / "step_one.pt")
    optimize_rank(distributed.SINGLE, config, quiet=True)
    two = dataclasses.replace(config, out_dir=str(folder / "two"))
    distributed.spawn(_all, 2, "cpu", (step_arguments, folder / "step_two.pt", two),
                      timeout_s=120)
    return folder, config.settings


def test_two_ranks_end_where_one_process_ends(runs):
    runs, settings = runs
    one = CheckpointStore(runs / "one" / "checkpoints").load(PassName.TEXTURES)
    two = CheckpointStore(runs / "two0" / "checkpoints").load(PassName.TEXTURES)
    assert one["iteration"] == two["iteration"] == ITERATIONS
    assert one["sampler"]["position"] == two["sampler"]["position"]
    trained = {"kd": one["material"]["kd.data"], "ks": one["material"]["ks.data"],
               "normal": one["material"]["normal.data"], "light": one["light"]["base"]}
    theirs = {"kd": two["material"]["kd.data"], "ks": two["material"]["ks.data"],
              "normal": two["material"]["normal.data"], "light": two["light"]["base"]}
    for name, value in trained.items():
        difference = (value - theirs[name]).abs()
        assert difference.max() <= TOLERANCE, (name, difference.max())
        assert (difference > CLOSE).float().mean() <= 0.01, name
    start = initial_textures(settings, "cpu").kd.data
    assert (trained["kd"] - start).abs().max() > 20 * TOLERANCE, "the textures trained (a step)"


def test_a_stop_asked_of_rank_zero_stops_every_rank_at_the_same_iteration(runs):
    runs, _ = runs
    for rank in (0, 1):
        assert (runs / f"stopped{rank}.txt").read_text() == "stopped at iteration 3 of textures"


def test_only_rank_zero_writes(runs):
    runs, _ = runs
    assert not (runs / "two1").exists(), "rank 1 wrote into its out_dir"
    written = sorted(p.relative_to(runs / "two0").as_posix()
                     for p in (runs / "two0").rglob("*") if p.is_file())
    expected = sorted(p.relative_to(runs / "one").as_posix()
                      for p in (runs / "one").rglob("*") if p.is_file())
    assert written == expected
    assert "checkpoints/textures.pt" in written and "previews/textures_000003.png" in written
    ranks = {folder: json.loads((runs / folder / "metrics.json").read_text())["settings"]["ranks"]
             for folder in ("one", "two0")}
    assert ranks == {"one": 1, "two0": 2}, "metrics.json records the ranks the job ran on"
