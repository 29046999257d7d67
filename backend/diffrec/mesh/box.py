"""Bounding boxes and the similarity transform that fits a mesh into a centred cube."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffrec.errors import UserError
from diffrec.mesh.mesh import Mesh


def bounding_box(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Axis-aligned box of points [N, 3]: ``(lower, upper)``, [3] each."""
    if positions.ndim != 2 or positions.shape[1] != 3 or positions.shape[0] == 0:
        raise UserError(f"bounding box needs points [N>0, 3], got {tuple(positions.shape)}")
    return positions.amin(0), positions.amax(0)


@dataclass(frozen=True)
class BoxTransform:
    """``normalized = (p - center) * scale``; ``center`` [3] float64 tensor, ``scale`` > 0."""

    center: torch.Tensor
    scale: float

    def apply(self, points: torch.Tensor) -> torch.Tensor:
        """Original space -> normalised space, points [..., 3] (dtype and device kept)."""
        center = self.center.to(points)
        return (points - center) * self.scale

    def invert(self, points: torch.Tensor) -> torch.Tensor:
        """Normalised space -> original space, points [..., 3]."""
        return points / self.scale + self.center.to(points)

    def matrix(self) -> torch.Tensor:
        """The 4x4 float64 matrix of ``apply`` (column vectors: ``M @ [p, 1]``)."""
        m = torch.eye(4, dtype=torch.float64)
        m[:3, :3] *= self.scale
        m[:3, 3] = -self.center.double().cpu() * self.scale
        return m


def fit_to_box(mesh: Mesh, size: float = 2.0) -> tuple[Mesh, BoxTransform]:
    """Centre the mesh's bounding box at the origin and scale uniformly so that its longest
    side is ``size`` (default 2: the box [-1, 1]^3). Normals and tangents are unchanged.
    Returns the new mesh and the transform (``transform.invert`` maps results back)."""
    lower, upper = bounding_box(mesh.positions.detach().double())
    extent = float((upper - lower).max())
    if not extent > 0.0:
        raise UserError("cannot fit a mesh whose vertices all coincide into a box")
    transform = BoxTransform(center=((lower + upper) / 2).cpu(), scale=size / extent)
    return mesh.replace(positions=transform.apply(mesh.positions)), transform
