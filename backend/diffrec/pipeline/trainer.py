"""One optimisation pass: render batches of views, compare with the targets, step Adam.

The schedule follows the reference system: Adam (0.9, 0.999) (``UniformAdam`` for a geometry
that asks for it, large steps, on the same schedule); the learning rate warms up
linearly over ``warmup`` iterations (pass 2) and decays exponentially to a tenth over the pass
(nvdiffrec's ``10^(-0.0002 it)`` over its 5000 iterations, rescaled to the pass; with
``schedule`` "nvdiffrec", its own formula whatever the pass length); after each step the
material is clamped into range and the light to >= 0; the light's gradients are scaled up.
A learned light steps in log radiance (``LogAdam`` at ``light_log_rate``, on the same
schedule), so a sun can grow by orders of magnitude within a pass; at ``light_log_rate`` 0 it
steps with the rest, as nvdiffrec's.
With ``schedule`` "nvdiffrec" the training targets are composited over per-pixel noise, as
nvdiffrec trains (``background`` then applies to validation only).

Losses (``x`` render, ``y`` target, both composited over the same background, see
``diffrec.render.backgrounds``):
the colour loss on pixels the target covers, MSE on coverage, plus the geometry's regulariser,
albedo and ks smoothness (ramped in over 500 iterations), visibility on ks.r, mostly metal
on ks.b (``partial_metal``, ramped in over the pass), light white balance and, from a given
start, the pull back to it (``Pass.start_prior``). With
``ks_gradient_blur`` the ks texture's gradient is blurred before each step; with
``clipped_white`` the render is held to at most the target where the target's own colour
is white (a clipped highlight: the scene was at least that bright) before the colour loss.
A path-traced pass (``Pass.renderer``) compares with ``PATH_TRACED_LOSS`` instead of the
settings' loss: its renders are Monte Carlo estimates, and only a loss quadratic in the render
keeps their noise from biasing the fit (``diffrec.render.losses``).
All randomness comes from generators saved in checkpoints, so a resumed pass is exact.

Over several ranks (``pipeline.distributed``) each renders its share of the batch; the colour
loss, a mean over the covered pixels of the whole batch, is weighted by the rank's part of
them, and the other image terms are means over equal shares; the gradients are averaged
before the step, so every rank steps as one process with the whole batch would.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, fields

import torch

from diffrec.errors import Cancelled, UserError
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.distributed import SINGLE, World
from diffrec.pipeline.optimizers import Adam, AdamBase, LogAdam, Schedule, UniformAdam
from diffrec.pipeline.pass_config import PassConfig
from diffrec.pipeline.plateau import Plateau
from diffrec.pipeline.pose_refinement import PoseCorrections
from diffrec.pipeline.reporter import PreviewFrame, Progress, Reporter
from diffrec.pipeline.start_prior import StartPrior
from diffrec.protocol import events
from diffrec.protocol.settings import expected_iterations
from diffrec.render.backgrounds import background_for, composite
from diffrec.render.footprint import nearest_level, seen_texture_level
from diffrec.render.losses import clipped_like, image_loss
from diffrec.render.material import TextureMaterial
from diffrec.render.metrics import display, psnr
from diffrec.render.path_tracer import PathTracer
from diffrec.render.renderer import RenderOutput, render_mesh

log = logging.getLogger(__name__)

SMOOTHNESS_RAMP_ITERATIONS = 500
SUN_TURN_RATE = 0.01
"""Adam's step on a learned light's sun direction (a unit vector: about half a degree)."""
SUN_LOG_RATE = 0.03
"""``LogAdam``'s step on a learned light's sun power and radius (about 3 % a step), the rate
at which ``light_log_rate`` brought found suns' power closest (docs/BENCHMARKS.md, "Learning
a sun")."""
PATH_TRACED_LOSS = "logl2_linearized"  # unbiased under the renders' sampling noise


def light_rotation(cameras, camera_space: bool) -> torch.Tensor | None:
    """Per-view rotations ``[B, 3, 3]`` that turn the light with each camera (world to
    camera) when ``camera_space`` (the setting ``camera_space_light``), else None (the light
    is fixed to the world)."""
    return cameras.world_to_camera()[:, :3, :3] if camera_space else None


def partial_metal(metallic: torch.Tensor, covered: torch.Tensor) -> torch.Tensor:
    """Mean over the covered pixels (``metallic`` ``[..., H, W]``, ``covered`` ``[..., H, W, 1]``
    bool) of ``m (1 - m)``, each ``m`` taken as at least 1/2: in [0, 1/4], 0 where every point
    is all metal. Its gradient, ``1 - 2 m`` past 1/2 and 0 up to it, pulls each point that is
    mostly metal to 1 and leaves the others where the views put them (0 when nothing is
    covered)."""
    mask = covered[..., 0].to(metallic.dtype)  # no branch: no device sync on the hot path
    mostly = metallic.clamp(min=0.5)
    return (mostly * (1.0 - mostly) * mask).sum() / mask.sum().clamp(min=1.0)


@dataclass(frozen=True, kw_only=True)
class Pass(PassConfig):
    """What one pass optimises: its config (``pipeline.pass_config``, the trainer's only
    source of settings) and its modules. ``geometry``: a ``geometry_models`` module;
    ``material``: a ``render.material`` module; ``light``: an ``EnvironmentLight`` (trained
    if ``learn_light``); ``poses``: the training views' ``PoseCorrections``, applied to every
    batch and trained at ``pose_learning_rate`` (None: the poses as given). A path-traced
    pass (``renderer``) keeps its mesh fixed and reads the textures at the mip level the views
    see, with ``PATH_TRACED_LOSS``."""

    geometry: torch.nn.Module
    material: torch.nn.Module
    light: torch.nn.Module
    poses: PoseCorrections | None = None

    @classmethod
    def of(cls, config: PassConfig, geometry: torch.nn.Module, material: torch.nn.Module,
           light: torch.nn.Module, poses: PoseCorrections | None = None) -> Pass:
        """The pass ``config`` describes, over these modules."""
        values = {spec.name: getattr(config, spec.name) for spec in fields(PassConfig)}
        return cls(**values, geometry=geometry, material=material, light=light, poses=poses)

    @property
    def trains_poses(self) -> bool:
        """Whether this pass steps its pose corrections."""
        return self.poses is not None and self.pose_learning_rate > 0


def learning_rate_factor(iteration: int, iterations: int, warmup: int,
                         schedule: str = "diffrec") -> float:
    """The learning rate's factor at ``iteration``: "diffrec", a warm-up ramp times the decay
    to 0.1 at the end of the pass; "nvdiffrec", its ``it / warmup`` during the warm-up, then
    ``10^(-0.0002 (it - warmup))`` (0.66 at 1000 iterations, 0.1 at 5000)."""
    if schedule == "nvdiffrec":
        if iteration < warmup:
            return iteration / warmup
        return 10.0 ** (-0.0002 * (iteration - warmup))
    ramp = min(1.0, (iteration + 1) / warmup) if warmup > 0 else 1.0
    return ramp * 10.0 ** (-iteration / max(iterations, 1))


class StopCost:
    """The longest a stop asked now may take to return with its checkpoint written: the
    slowest iteration of the pass so far (a stop is seen between iterations) plus the latest
    checkpoint's write, both measured. Told to ``reporter.stop_takes`` whenever it grows by
    more than GROWTH, so that the job server waits that long before killing a job it asked to
    stop (``server.executor.StopGrace``)."""

    GROWTH = 1.25

    def __init__(self, reporter: Reporter, clock=time.monotonic):
        self.reporter, self.clock = reporter, clock
        self.slowest = self.told = 0.0
        self._lap_began = clock()

    def lap(self, save_s: float) -> None:
        """An iteration ended; ``save_s``: the latest checkpoint's write, in seconds."""
        now = self.clock()
        self.slowest = max(self.slowest, now - self._lap_began)
        self._lap_began = now
        cost = self.slowest + save_s
        if cost > self.told * self.GROWTH:
            self.reporter.stop_takes(cost)
            self.told = cost


class PassTrainer:
    """Runs a ``Pass`` on batches from ``sampler`` (a ``pipeline.sampler.ViewSampler``),
    reporting to ``reporter``: a ``Progress`` every ``log_every`` iterations and at the end,
    a ``PreviewFrame`` every ``preview_every`` (when set; with the current mesh when the geometry
    moves); ``should_stop`` is polled every iteration. Every knob comes from the pass's config
    (``Pass``, a ``pipeline.pass_config.PassConfig``), none from the settings. Checkpoints (see
    ``state_dict``) go to ``checkpoints`` (a ``CheckpointStore``; None: none kept) every
    ``checkpoint_every`` iterations, on a stop and at the end, tagged with the pass's
    fingerprint (``PassConfig.fingerprint``); ``resume`` starts from one made with the same.
    ``history`` holds each progress report's loss and PSNR; ``elapsed_s`` the seconds
    ``train`` took. A pass whose training PSNR has stopped rising ends early
    (``pipeline.plateau``, ``plateau_window``; ``stopped_early`` says why, else None).

    ``world``: this rank's ``pipeline.distributed.World`` (a single process by default), the
    sampler giving this rank's share of each batch; every rank must run the same trainer.
    Losses and PSNR reported are the whole batch's; stops, checkpoints and previews are
    rank 0's (give the other ranks a silent reporter, ``distributed.main_only``, and no
    checkpoints).
    """

    def __init__(self, ctx, run: Pass, sampler, reporter: Reporter, world: World = SINGLE, *,
                 checkpoints: CheckpointStore | None = None):
        self.ctx, self.run, self.sampler = ctx, run, sampler
        self.reporter, self.world, self.checkpoints = reporter, world, checkpoints
        self.iteration = 0
        self.history: list[dict] = []
        self.elapsed_s = 0.0
        self.save_s = 0.0  # seconds the latest checkpoint took to write
        self._fingerprint = run.fingerprint()
        self._last_views = None
        self.plateau = Plateau(run.plateau_window, run.plateau_db)
        self.stopped_early: str | None = None  # why the plateau rule ended the pass, if it did;
        # a resumed pass stays stopped
        self.generator = torch.Generator().manual_seed(run.seed * 7919 + run.seed_offset)
        self.optimizers = self._optimizers(run)
        self.start_prior = StartPrior(run.material, run.start_prior) if run.start_prior else None
        self.tracer, self.texture_level = None, 0
        if run.renderer == "path-traced":
            self.tracer, self.texture_level = self._path_tracing(run, sampler.views)
        self.schedulers = [Schedule(optimizer, lambda it: learning_rate_factor(
            it, run.iterations, run.warmup, run.schedule)) for optimizer in self.optimizers]

    @staticmethod
    def _optimizers(run: Pass) -> list[AdamBase]:
        """Adam (0.9, 0.999) over what ``run`` trains; ``LogAdam`` over a learned light
        (``light_log_rate`` > 0) and over its sun's power and radius (``SUN_LOG_RATE``; its
        direction in Adam at ``SUN_TURN_RATE``) where it has one (not the radius while the
        surface pass shapes the surface: a lobe free to widen there took the blur of a surface
        still forming, docs/BENCHMARKS.md, "Learning a sun, round six") and, when the geometry
        asks for it (``uniform_adam``), ``UniformAdam`` over the geometry's parameters instead."""
        surface_rate = run.surface_learning_rate
        geometry = {"params": [p for p in run.geometry.parameters() if p.requires_grad],
                    "lr": run.learning_rate if surface_rate is None else surface_rate}
        param_groups = [{"params": [p for p in run.material.parameters() if p.requires_grad],
                         "lr": run.learning_rate}]
        optimizers = []
        if run.learn_light:
            run.light.base.requires_grad_(True)
            run.light.base.register_hook(lambda grad: grad * run.light_gradient_scale)
            if run.light_log_rate:
                optimizers.append(LogAdam([run.light.base], lr=run.light_log_rate))
            else:
                param_groups.append({"params": [run.light.base], "lr": run.learning_rate})
            sun = run.light.sun
            if sun.shines():
                sun.requires_grad_(True)
                sun.radius.requires_grad_(run.name != events.PassName.SURFACE)
                optimizers.append(LogAdam([p for p in (sun.power, sun.radius)
                                           if p.requires_grad], lr=SUN_LOG_RATE))
                param_groups.append({"params": [sun.direction], "lr": SUN_TURN_RATE})
        else:
            run.light.requires_grad_(False)
        if run.poses is not None:
            run.poses.requires_grad_(run.trains_poses)
            if run.trains_poses:
                param_groups.append({"params": list(run.poses.parameters()),
                                     "lr": run.pose_learning_rate})
        if run.geometry.uniform_adam:
            optimizers.append(UniformAdam([geometry], betas=(0.9, 0.999)))
        else:
            param_groups.insert(0, geometry)
        param_groups = [group for group in param_groups if group["params"]]
        if param_groups:
            optimizers.insert(0, Adam(param_groups, betas=(0.9, 0.999)))
        if not optimizers:
            raise ValueError(f"pass '{run.name}' has nothing to optimise")
        return optimizers

    def _path_tracing(self, run: Pass, views) -> tuple[PathTracer, int]:
        """The pass's path tracer and the mip level its textures are read at: the level the
        training views read (``seen_texture_level``, rounded, at least 0)."""
        mesh = run.geometry.mesh()
        if any(p.requires_grad for p in run.geometry.parameters()):
            raise ValueError(f"pass '{run.name}' path-traces a fixed mesh only")
        texture_res = run.material.texture_data()[0].shape[0]
        level = seen_texture_level(self.ctx, mesh, views.cameras, texture_res)
        return PathTracer(mesh, self.ctx.device, run.path_max_depth), nearest_level(level)

    def _render(self, mesh, cameras, background) -> RenderOutput:
        """The training batch: path-traced (``run.renderer``; Mitsuba's seeds drawn from the
        pass's generator, apart per rank), else rasterized with the ``ks`` buffer."""
        run = self.run
        if self.tracer is not None:
            seed = int(torch.randint(1 << 30, (), generator=self.generator))
            return self.tracer.render(run.material, run.light, cameras,
                                      spp=run.path_samples, background=background,
                                      seed=seed + self.world.rank * len(cameras),
                                      texture_level=self.texture_level)
        return render_mesh(self.ctx, mesh, run.material, cameras, run.light, spp=run.spp,
                           layers=run.layers, background=background, buffers=("ks",),
                           light_rotation=light_rotation(cameras, run.camera_space_light),
                           layered=run.layered_bsdf)

    def parameters(self) -> list[torch.Tensor]:
        """Every tensor the pass trains, in the optimisers' order."""
        return [p for optimizer in self.optimizers for group in optimizer.param_groups
                for p in group["params"]]

    def state_dict(self) -> dict:
        return {
            "pass": str(self.run.name), "iteration": self.iteration,
            "geometry": self.run.geometry.state_dict(), "material": self.run.material.state_dict(),
            "light": self.run.light.state_dict(),
            "poses": self.run.poses.state_dict() if self.run.poses is not None else None,
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
            "sampler": self.sampler.state_dict(),
            "generator": self.generator.get_state(),
            "stopped_early": self.stopped_early, "history": self.history,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["pass"] not in (self.run.name, self.run.protocol_5_name):
            raise ValueError(f"checkpoint is for pass {state['pass']!r}, not '{self.run.name}'")
        self.run.geometry.load_state_dict(state["geometry"])
        self.run.material.load_state_dict(state["material"])
        self.run.light.load_state_dict(state["light"])
        if self.run.poses is not None and state.get("poses") is not None:
            self.run.poses.load_state_dict(state["poses"])
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for scheduler, saved in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        self.sampler.load_state_dict(state["sampler"])
        self.generator.set_state(state["generator"])
        self.iteration = state["iteration"]
        self.stopped_early = state.get("stopped_early")
        self.history = list(state.get("history", []))  # older checkpoints kept none

    def step(self) -> dict:
        """One iteration; returns its losses and the batch PSNR as 0-d tensors on the device
        (see ``_checked``)."""
        run, device = self.run, self.ctx.device
        indices = self.sampler.next_indices()
        cameras, targets = self.sampler.views.batch(indices)
        cameras, targets = cameras.to(device), targets.to(device)
        if run.poses is not None:
            cameras = run.poses(cameras, indices)
        kind = "noise" if run.schedule == "nvdiffrec" else run.background
        background = background_for(kind, targets, self.generator,
                                    (self.sampler.rows, self.sampler.batch_size))
        target_alpha = targets[..., 3:4]
        target = composite(targets, background)

        run.light.build_mips()
        mesh = run.geometry.mesh()
        out = self._render(mesh, cameras, background)
        progress = self.iteration / max(run.iterations - 1, 1)
        covered = target_alpha > 0
        loss = run.loss if self.tracer is None else PATH_TRACED_LOSS
        render = (clipped_like(out.color, target, targets[..., :3]) if self.run.clips_white
                  else out.color)
        # this rank's share of the batch's covered pixels: its means over them, so weighted,
        # average over the ranks to the whole batch's
        share = self.world.batch_weight(covered.sum())
        color = image_loss(render, target, loss, mask=covered) * share
        alpha = (out.alpha - target_alpha).square().mean()
        geometry = run.geometry.regularizer(progress)
        ramp = min(1.0, self.iteration / SMOOTHNESS_RAMP_ITERATIONS)
        kd_roughness, ks_roughness = run.material.smoothness(mesh, self.generator, ctx=self.ctx)
        smoothness = ramp * (run.albedo_smoothness * kd_roughness
                             + run.ks_smoothness * ks_roughness)
        # the occlusion regulariser (a path-traced run holds occlusion at 0: no buffer)
        visibility = (run.visibility * out.buffers["ks"][..., 0].mean()
                      if "ks" in out.buffers else 0.0)
        # ramped in over the pass: metallic first goes where the views take it
        metal = (progress * run.mostly_metal * share
                 * partial_metal(out.buffers["ks"][..., 2], covered)
                 if run.mostly_metal and "ks" in out.buffers else 0.0)
        white = run.white_balance * run.light.white_balance_loss() if run.learn_light else 0.0
        anchor = self.start_prior() if self.start_prior is not None else 0.0
        total = color + alpha + geometry + smoothness + visibility + metal + white + anchor

        for optimizer in self.optimizers:
            optimizer.zero_grad()
        total.backward()
        stats = torch.stack([total.detach(), color.detach(), alpha.detach(),
                             psnr(out.color.detach(), target).mean()])
        stats = self.world.average_gradients(self.parameters(), stats)  # the whole batch's
        if run.ks_gradient_blur and isinstance(run.material, TextureMaterial):
            ks = run.material.ks
            ks.blur_gradient_(run.ks_gradient_blur * max(ks.resolution))
        for optimizer, scheduler in zip(self.optimizers, self.schedulers, strict=True):
            optimizer.step()
            scheduler.step()
        with torch.no_grad():
            if hasattr(run.material, "clamp_"):
                run.material.clamp_()
            if run.learn_light:  # a fixed light stays as it is, its prefiltered levels kept
                run.light.clamp_()
            if run.trains_poses:
                run.poses.settle_()
        self._last_views = (out.color[0].detach(), target[0].detach(), mesh,
                            cameras[0:1].detached())
        return {"losses": {"total": stats[0], "color": stats[1], "alpha": stats[2]},
                "psnr": stats[3]}

    def _checked(self, stats: dict) -> dict:
        """``stats`` of the latest ``step`` as Python floats, read from the device only here
        (at report time: a read waits for the device, so ``step`` itself never does). Raises
        UserError when the loss is not finite."""
        losses = {name: float(value) for name, value in stats["losses"].items()}
        if not math.isfinite(losses["total"]):
            raise UserError(f"the loss became {losses['total']} by iteration {self.iteration} "
                            f"of pass '{self.run.name}'; try a lower learning rate")
        return {"losses": losses, "psnr": float(stats["psnr"])}

    def resume(self) -> None:
        """Continue from this pass's checkpoint, when one was made with the same
        fingerprint (else start afresh, with a warning); every rank resumes from rank 0's."""
        state = self.world.from_main(self._own_checkpoint)
        if state is None:
            return
        self.load_state_dict(state)
        self.reporter.log(f"resumed from its checkpoint at {self.where()}",
                          resumed_from=self.iteration)

    def _own_checkpoint(self) -> dict | None:
        """This pass's checkpoint if it was made with this fingerprint; else one a server of
        protocol 5 wrote under the pass's name then, with the same config
        (``PassConfig.fingerprints``); either only if it was made from these inputs
        (``CheckpointStore.made_from``) and its optimisers step as many parameters as this
        pass's (an older diffrec's may not: before suns had a width, a sun's power was
        stepped alone)."""
        if self.checkpoints is None:
            return None
        run = self.run
        for name, fingerprint in zip((run.name, run.protocol_5_name), run.fingerprints(),
                                     strict=True):
            state = self.checkpoints.load(name)
            if state is None:
                continue
            if state.get("settings") != fingerprint:
                log.warning("ignoring the checkpoint of %s: it was made with other settings",
                            run.name)
                return None
            if not self.checkpoints.made_from(state):
                log.warning("ignoring the checkpoint of %s: it was made from other inputs "
                            "(images, cameras, start mesh or light)", run.name)
                return None
            saved = state["optimizers"]
            if len(saved) != len(self.optimizers) or not all(
                    optimizer.fits(one)
                    for optimizer, one in zip(self.optimizers, saved, strict=True)):
                log.warning("ignoring the checkpoint of %s: it was made by a diffrec that "
                            "trained other parameters in this pass", run.name)
                return None
            return state
        return None

    def where(self) -> str:
        """Where the pass stands: "iteration 10 of 200", with "of pass 1 of 2" when the job
        runs several passes."""
        run = self.run
        of_pass = f" of pass {run.number} of {run.passes}" if run.passes > 1 else ""
        return f"iteration {self.iteration} of {run.iterations}{of_pass}"

    def save(self) -> None:
        """Keep the current state as this pass's checkpoint (none without ``checkpoints``),
        timing the write (``save_s``, for ``StopCost``)."""
        if self.checkpoints is not None:
            began = time.monotonic()
            self.checkpoints.save(self.run.name,
                                  {**self.state_dict(), "settings": self._fingerprint},
                                  self.where())
            self.save_s = time.monotonic() - began

    def train(self) -> None:
        """Run the remaining iterations, reporting progress and checkpointing."""
        started, first = time.monotonic(), self.iteration
        run, reporter = self.run, self.reporter
        if self.checkpoints is not None and self.iteration == 0:
            self.save()  # a stop in the first iteration loses nothing; the write is timed
        stop_cost = StopCost(reporter)
        while self.iteration < self.run.iterations and not self.stopped_early:
            if self.world.main_says(reporter.should_stop()):
                self.save()
                raise Cancelled(f"stopped at iteration {self.iteration} of {self.run.name}")
            stats = self.step()
            self.plateau.add(stats["psnr"])
            self.iteration += 1
            if self.iteration % run.log_every == 0 or self.iteration == run.iterations:
                stats = self._checked(stats)
                elapsed = time.monotonic() - started  # now that the device has caught up
                self._report(stats, elapsed, elapsed / (self.iteration - first))
            if (run.preview_every and self.iteration % run.preview_every == 0
                    and self.world.is_main):
                reporter.preview(self._preview())
            if (run.checkpoint_every and self.iteration % run.checkpoint_every == 0
                    and self.iteration < self.run.iterations):
                self.save()
            if (self.iteration % run.log_every == 0 and self.iteration < self.run.iterations
                    and self.plateau.flat()):
                self.stopped_early = self.plateau.why()
                reporter.log(f"{self.run.name} stopped at iteration {self.iteration} of "
                             f"{self.run.iterations}: {self.stopped_early}")
            stop_cost.lap(self.save_s)
        self.elapsed_s = time.monotonic() - started
        self.save()

    def _report(self, stats: dict, elapsed: float, per_iteration: float) -> None:
        """Report progress (``per_iteration``: seconds per iteration so far); the whole job's
        ETA adds the passes still to come (``Pass.later_iterations``) at this pass's speed.
        Passes the stopping rule may end are counted to their expected end
        (``expected_iterations``), not to ``iterations``."""
        run = self.run
        window = run.plateau_window
        self.history.append({"pass": run.name, "iteration": self.iteration,
                             "loss": stats["losses"]["total"], "psnr": stats["psnr"]})
        expected = expected_iterations(run.iterations, window, self.iteration)
        eta = (expected - self.iteration) * per_iteration
        later = (run.later_iterations if run.later_iterations is not None else
                 (run.passes - run.number) * expected_iterations(run.iterations, window))
        self.reporter.progress(Progress(
            pass_name=run.name, pass_number=run.number,
            passes=run.passes, iteration=self.iteration, iterations=run.iterations,
            expected_iterations=expected, losses=stats["losses"], psnr=stats["psnr"],
            elapsed_s=elapsed, eta_s=eta, job_eta_s=eta + later * per_iteration))

    def _preview(self) -> PreviewFrame:
        render, target, mesh, camera = self._last_views
        panels = self._panels(mesh, camera, render.shape[:2]) if self.run.display else {}
        moving = any(p.requires_grad for p in self.run.geometry.parameters())
        event = events.Preview(self.run.name, self.iteration, self.run.number, self.run.passes)
        return PreviewFrame(event, render.cpu(), target.cpu(), panels,
                       mesh.positions.detach().cpu() if moving else None,
                       mesh.triangles.cpu() if moving else None)

    @torch.no_grad()
    def _panels(self, mesh, camera, size) -> dict[str, torch.Tensor]:
        """``display``'s panels for the preview's view, ``[H, W, 3]`` ready to show
        (colour sRGB-encoded, data as it is): "latlong" the light as an equirect image at the
        preview's height; "kd", "ks", "normal", "shading-only" the renderer's display modes."""
        panels = {}
        for name in self.run.display:
            if name == "latlong":
                image = display(self.run.light.to_equirect(size[0], 2 * size[0]))
            else:
                turn = light_rotation(camera, self.run.camera_space_light)
                out = render_mesh(self.ctx, mesh, self.run.material, camera, self.run.light,
                                  mode=name, light_rotation=turn)
                image = out.color[0] if name in ("ks", "normal") else display(out.color)[0]
            panels[name] = image.cpu()
        return panels
