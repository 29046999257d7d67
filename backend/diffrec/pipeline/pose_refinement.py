"""The training views' poses refined with the fit: a small correction per view, learned.

Poses found from photos (COLMAP, a capture tool) are off by a fraction of a degree and a
fraction of a percent of the distance; at the training size that is a pixel or more, which
blurs the textures and makes the surface lumpy (docs/BENCHMARKS.md, "Photos in, asset out").
Each training view gets a turn (a rotation vector about its own centre, world axes, radians)
and a shift of its centre (world axes, in units of the rig's radius: the views' mean distance
from their mean centre), both zero at the start and stepped by Adam with the rest. A shift of
``e`` and a turn of ``e`` radians move the object in the picture by about as much, so one
learning rate serves both.

What every view's correction shares, a rigid motion and a scale of the whole rig, moves the
world, not the views relative to one another: the surface would follow it, and the held-out
views, which are not corrected, would see the result displaced. ``settle_`` takes it out
after each step (the least-squares similarity of the corrections, to first order).
"""

from __future__ import annotations

import math

import torch

from diffrec.camera import Cameras

__all__ = ["PoseCorrections", "cross_matrices", "rotation_matrices"]


def cross_matrices(vectors: torch.Tensor) -> torch.Tensor:
    """``[N, 3, 3]``: the matrix of ``u -> v x u`` for each of ``vectors`` ``[N, 3]``."""
    x, y, z = vectors.unbind(-1)
    zero = torch.zeros_like(x)
    return torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], -1).reshape(-1, 3, 3)


def rotation_matrices(vectors: torch.Tensor) -> torch.Tensor:
    """Rotations ``[N, 3, 3]`` of the rotation vectors ``[N, 3]`` (axis times angle, radians),
    differentiable everywhere, zero included."""
    return torch.linalg.matrix_exp(cross_matrices(vectors))


def _similarity_design(relative: torch.Tensor) -> torch.Tensor:
    """``[6 N, 7]`` float64: the corrections (each view's turn, then shift, stacked) that a
    small similarity of the rig ``(w, v, s)`` makes, view ``i`` at ``relative[i]`` (``q_i``)
    about the rig's centre: turn ``w``, shift ``w x q_i + s q_i + v``."""
    count = len(relative)
    eye = torch.eye(3, dtype=torch.float64).expand(count, 3, 3)
    turn_rows = torch.cat([eye, torch.zeros(count, 3, 4, dtype=torch.float64)], -1)
    # w x q = -(q x w)
    shift_rows = torch.cat([-cross_matrices(relative), eye, relative[..., None]], -1)
    return torch.cat([turn_rows, shift_rows], 1).reshape(6 * count, 7)


class PoseCorrections(torch.nn.Module):
    """Per-view corrections of ``cameras``' poses (the training views, in their order):
    ``turn`` and ``shift`` ``[N, 3]`` parameters (see the module docstring for their units).
    ``forward(cameras, indices)``: the views at ``indices`` (int64) corrected."""

    def __init__(self, cameras: Cameras):
        super().__init__()
        centres = cameras.centers().detach().double().cpu()
        pivot = centres.mean(0)
        self.radius = float((centres - pivot).norm(dim=-1).mean().clamp(min=1e-9))
        relative = (centres - pivot) / self.radius
        # the views' centres about the rig's, in its radius: what settle_ fits against
        self.register_buffer("relative", relative.float())
        design = _similarity_design(relative)
        # settle_'s least squares, solved once: the shared similarity is solver @ corrections
        self.register_buffer("_design", design.to(cameras.device), persistent=False)
        self.register_buffer("_solver", torch.linalg.pinv(design).to(cameras.device),
                             persistent=False)
        count = len(cameras)
        self.turn = torch.nn.Parameter(torch.zeros(count, 3, device=cameras.device))
        self.shift = torch.nn.Parameter(torch.zeros(count, 3, device=cameras.device))

    def forward(self, cameras: Cameras, indices: torch.Tensor) -> Cameras:
        indices = indices.to(self.turn.device)
        return cameras.moved(rotation_matrices(self.turn[indices]),
                             self.shift[indices] * self.radius)

    def corrected(self, cameras: Cameras) -> Cameras:
        """All of ``cameras`` (the views these corrections are for) corrected, detached."""
        with torch.no_grad():
            return self(cameras, torch.arange(len(cameras), device=self.turn.device))

    @torch.no_grad()
    def settle_(self) -> None:
        """Take out of the corrections the similarity they share: the rig's turn ``w``, shift
        ``v`` and scale ``s`` that best explain them (``_similarity_design``), least
        squares."""
        values = torch.cat([self.turn, self.shift], 1).double().reshape(-1, 1)
        residual = (values - self._design @ (self._solver @ values)).reshape(-1, 6)
        self.turn.copy_(residual[:, :3])
        self.shift.copy_(residual[:, 3:])

    def summary(self) -> dict:
        """How far the views were corrected: the turns in degrees and the shifts in scene
        units, mean and largest."""
        turns = self.turn.detach().norm(dim=-1) * (180 / math.pi)
        shifts = self.shift.detach().norm(dim=-1) * self.radius
        return {"views": len(self.turn),
                "turn_degrees": {"mean": float(turns.mean()), "max": float(turns.max())},
                "shift": {"mean": float(shifts.mean()), "max": float(shifts.max())}}
