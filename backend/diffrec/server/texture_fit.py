"""``fit_texture``: a small, fast optimisation job for trying a client or the server (the
reconstruction itself is the ``optimize`` task, ``optimize_runner``; docs/protocol.md, "Tasks").

It fits one texture ``T`` (S, S, C), bilinearly resampled to the image size, to all target
images at once with Adam on the mean squared error (learning rate decaying exponentially to
1 % of ``lr``); the optimum is the least-squares texture,
i.e. the per-pixel mean of the targets when S equals the image size. It reports real loss and
PSNR, sends previews, checkpoints (texture and Adam state) and resumes from its checkpoint.

Spec: ``{"task": "fit_texture", "iterations": int = 500, "texture_size": int = 64,
"lr": float = 0.05, "checkpoint_every": int = 100, "preview_every": int = 250}``.
Inputs: ``images`` (N, H, W, 3|4) float, scene-linear. Results: ``texture.npy`` (S, S, C)
float32, ``render.npy`` (H, W, C) float32 (role ``data``), ``metrics.json`` and, last,
``manifest.json`` (``diffrec.protocol.manifest``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from diffrec.pipeline.optimizers import Adam
from diffrec.protocol import events
from diffrec.protocol.manifest import write_manifest

from .runner import JobContext, JobFailed, Runner

PREVIEW_PIXELS = 64
PROGRESS_INTERVAL_S = 0.2
LR_FINAL_FRACTION = 0.01
LIMITS = {  # name: (default, low, high, type)
    "iterations": (500, 1, 1_000_000, int),
    "texture_size": (64, 1, 4096, int),
    "lr": (0.05, 1e-6, 1.0, float),
    "checkpoint_every": (100, 1, 1_000_000, int),
    "preview_every": (250, 1, 1_000_000, int),
}


def _render(texture: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(C, S, S) texture → (C, H, W) image by bilinear resampling."""
    return F.interpolate(texture[None], size=(height, width), mode="bilinear",
                         align_corners=False)[0]


def _preview(image: torch.Tensor) -> np.ndarray:
    """(C, H, W) → (h, w, 3) float32 (colour only) no larger than PREVIEW_PIXELS on a side."""
    step = max(1, math.ceil(max(image.shape[1:]) / PREVIEW_PIXELS))
    return image[:3, ::step, ::step].permute(1, 2, 0).detach().cpu().numpy().astype(np.float32)


class TextureFitRunner(Runner):
    task = "fit_texture"

    def parse(self, spec: Mapping) -> dict:
        """{name: value} for every name of LIMITS (defaults filled in), or ``JobFailed``."""
        unknown = set(spec) - set(LIMITS) - {"task"}
        if unknown:
            raise JobFailed(f"fit_texture does not know the settings {sorted(unknown)}")
        settings = {}
        for name, (default, low, high, kind) in LIMITS.items():
            value = spec.get(name, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise JobFailed(f"setting {name!r} must be a number")
            if not low <= value <= high or (kind is int and value != int(value)):
                article = "an integer" if kind is int else "a number"
                raise JobFailed(f"setting {name!r} must be {article} in [{low}, {high}], "
                                f"got {value}")
            settings[name] = kind(value)
        return settings

    def check_inputs(self, settings: dict, inputs: Mapping[str, np.ndarray]) -> None:
        if set(inputs) != {"images"}:
            raise JobFailed(f"fit_texture takes exactly one input, 'images'; got {sorted(inputs)}")
        if inputs["images"].dtype.kind != "f":
            raise JobFailed("fit_texture needs float images (scene-linear)")

    def iterations(self, settings: dict) -> int:
        return settings["iterations"]

    def output_bytes(self, settings: dict, inputs: Mapping[str, np.ndarray]) -> int:
        """texture.npy, render.npy and metrics, and two checkpoints (the old one stays until
        the new one is in place) of the texture and Adam's two moments; float32."""
        _, height, width, channels = inputs["images"].shape
        texels = settings["texture_size"] ** 2
        return 4 * channels * (texels + height * width + 2 * 3 * texels) + 64 * 1024

    def run(self, ctx: JobContext) -> None:
        settings = ctx.settings
        device = torch.device(ctx.device)
        targets = torch.from_numpy(np.array(ctx.inputs["images"], dtype=np.float32))
        targets = targets.permute(0, 3, 1, 2).to(device)  # (N, C, H, W)
        _, channels, height, width = targets.shape
        size = settings["texture_size"]
        texture = torch.full((channels, size, size), 0.5, device=device, requires_grad=True)
        optimizer = Adam([texture], lr=settings["lr"])
        start = self._restore(ctx, texture, optimizer)

        total = settings["iterations"]
        began, last_report, mse = time.monotonic(), 0.0, float("nan")
        for iteration in range(start, total):
            if ctx.should_stop():
                return
            for group in optimizer.param_groups:  # decays to 1 % by the end: Adam settles
                group["lr"] = settings["lr"] * LR_FINAL_FRACTION ** (iteration / total)
            optimizer.zero_grad()
            render = _render(texture, height, width)
            loss = F.mse_loss(render[None].expand_as(targets), targets)
            loss.backward()
            optimizer.step()
            mse = loss.item()
            if not math.isfinite(mse):
                raise JobFailed("the loss became NaN or infinite; lower the learning rate 'lr'")
            done = iteration + 1
            now = time.monotonic()
            if now - last_report >= PROGRESS_INTERVAL_S or done == total:
                last_report = now
                rate = (done - start) / max(now - began, 1e-9)
                eta = (total - done) / rate
                ctx.emit(events.Progress(
                    pass_name=events.PassName.FIT, iteration=done, iterations=total,
                    losses={"mse": mse}, psnr=_psnr(mse), elapsed_s=now - began, eta_s=eta,
                    job_eta_s=eta))
            if done % settings["preview_every"] == 0 or done == total:
                ctx.emit(events.Preview(events.PassName.FIT, done, images={
                    "render": _preview(render.detach()), "target": _preview(targets[0])}))
            if done % settings["checkpoint_every"] == 0 and done < total:
                self._save(ctx, texture, optimizer, done, total)
        self._write_results(ctx, texture, height, width, total, mse)

    @staticmethod
    def _save(ctx: JobContext, texture: torch.Tensor, optimizer, iteration: int,
              total: int) -> None:
        ctx.checkpoints.save("fit", {"texture": texture.detach().cpu(), "iteration": iteration,
                                     "optimizer": optimizer.state_dict()},
                             where=f"iteration {iteration} of {total}")

    @staticmethod
    def _restore(ctx: JobContext, texture: torch.Tensor, optimizer) -> int:
        checkpoint = ctx.checkpoints.load("fit")
        if checkpoint is None:
            return 0
        if checkpoint["texture"].shape != texture.shape:
            raise JobFailed("the checkpoint does not match this job's texture size")
        with torch.no_grad():
            texture.copy_(checkpoint["texture"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        iteration = int(checkpoint["iteration"])
        ctx.emit(events.Log(f"resumed from the checkpoint at iteration {iteration}",
                            resumed_from=iteration))
        return iteration

    @staticmethod
    def _write_results(ctx, texture, height, width, iterations, mse) -> None:
        with torch.no_grad():
            render = _render(texture, height, width)
        np.save(ctx.results_dir / "texture.npy", texture.detach().permute(1, 2, 0).cpu().numpy())
        np.save(ctx.results_dir / "render.npy", render.permute(1, 2, 0).cpu().numpy())
        metrics = {"iterations": iterations, "mse": mse, "psnr": _psnr(mse)}
        (ctx.results_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
        write_manifest(ctx.results_dir,
                       {"texture.npy": "data", "render.npy": "data", "metrics.json": "metrics"})


def _psnr(mse: float) -> float:
    """PSNR in dB for a peak of 1 (capped at 100 dB for a perfect fit)."""
    return 100.0 if mse <= 1e-10 else -10.0 * math.log10(mse)
