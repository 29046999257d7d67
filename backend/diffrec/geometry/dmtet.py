"""DMTet geometry (Shen et al., NeurIPS 2021) over diffrec's BCC tet grid.

Trainable parameters: one SDF value per grid vertex and one deformation per grid vertex.
The grid spans the cube ``[-scale/2, scale/2]^3`` (nvdiffrec's ``mesh_scale``).

Initialisation (the reference starts from uniform random SDF values; diffrec starts from a
shape instead, so the first extracted mesh is a closed surface and not a cloud of
fragments): ``sdf = |x| - init_radius * scale + noise``, a sphere whose radius is
``init_radius`` (default 0.25) of the box's side, with Gaussian noise of standard deviation
``init_noise`` (default 0.05) times the lattice step ``scale / grid_res``, to break the
lattice's symmetry. The noise is small enough not to change signs away from the sphere.
Deformations start at zero and are bounded: ``x = x_grid + max_deformation * tanh(d)``
with ``max_deformation = deform_fraction * cell_size`` (default a quarter of the cubic
cell's edge ``2 * scale / grid_res``, i.e. half the spacing of the lattice planes). The BCC
tets' smallest altitude is 0.71 cell inside the grid and 0.35 cell at its boundary, so
only neighbours pushed hard towards each other can invert a tet; inverted tets give locally
flipped triangles.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from diffrec.geometry.marching_tets import marching_tets
from diffrec.geometry.tetgrid import tet_grid


def sdf_sign_change_loss(sdf: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """DMTet's SDF regulariser: binary cross-entropy across edges whose ends differ in sign.

    For each edge ``(a, b)`` with ``(sdf_a < 0) != (sdf_b < 0)``, the terms
    ``BCE(sigmoid(sdf_a), [sdf_b >= 0])`` and ``BCE(sigmoid(sdf_b), [sdf_a >= 0])`` push each
    end towards the other's sign, which removes surface that no loss supports (floaters,
    internal sheets). Returns the mean over those ``2 * E_changing`` terms, a scalar; exactly
    0 (still attached to the graph) when no edge changes sign. ``sdf`` float ``[V]``,
    ``edges`` integer ``[E, 2]``.
    """
    if sdf.ndim != 1 or not sdf.is_floating_point():
        raise ValueError(f"sdf must be float [V], got {sdf.dtype} {tuple(sdf.shape)}")
    if edges.ndim != 2 or edges.shape[1] != 2 or edges.is_floating_point():
        raise ValueError(f"edges must be integer [E, 2], got {edges.dtype} {tuple(edges.shape)}")
    s_a, s_b = sdf[edges[:, 0]], sdf[edges[:, 1]]
    changing = (s_a < 0) != (s_b < 0)
    if not bool(changing.any()):
        return sdf.sum() * 0.0
    s_a, s_b = s_a[changing], s_b[changing]
    logits = torch.cat((s_a, s_b))
    targets = torch.cat((s_b >= 0, s_a >= 0)).to(sdf.dtype)
    return F.binary_cross_entropy_with_logits(logits, targets)


def sdf_regularizer_weight(iteration: int, total_iterations: int, start: float = 0.2,
                           end: float = 0.01) -> float:
    """The SDF regulariser's weight: linear from ``start`` at iteration 0 to ``end`` at a
    quarter of ``total_iterations``, then constant ``end``:
    ``start + (end - start) * min(1, 4 * iteration / total_iterations)``.
    """
    if total_iterations <= 0:
        raise ValueError(f"total_iterations must be positive, got {total_iterations}")
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    return start + (end - start) * min(1.0, 4.0 * iteration / total_iterations)


def initial_sphere_sdf(vertices: torch.Tensor, radius: float, noise_std: float,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """``|x| - radius`` plus Gaussian noise of ``noise_std`` at ``vertices [V, 3]``: the
    starting SDF ``[V]`` (the noise is drawn on the CPU, so a seeded ``generator`` gives the
    same field on every device)."""
    if not radius > 0 or noise_std < 0:
        raise ValueError(f"need radius > 0 and noise_std >= 0, got {radius}, {noise_std}")
    noise = torch.randn(len(vertices), generator=generator).to(vertices.device)
    return vertices.norm(dim=1) - radius + noise_std * noise.to(vertices.dtype)


class DMTetGeometry(nn.Module):
    """Trainable SDF and vertex deformations on a BCC tet grid; ``extract()`` gives a mesh.

    ``grid_res``: the tet grid's lattice resolution (even; see ``diffrec.geometry.tetgrid``;
    ``grid_res / 2`` cubic cells per axis). ``scale``: side of the cube the grid spans,
    centred at the origin. Only ``sdf [V]`` and ``deform [V, 3]`` are parameters (and in the
    state dict); the grid itself is rebuilt from the cache.
    """

    def __init__(self, grid_res: int, scale: float, device: torch.device | str = "cpu", *,
                 init_radius: float = 0.25, init_noise: float = 0.05,
                 deform_fraction: float = 0.25, generator: torch.Generator | None = None,
                 cache_dir=None):
        super().__init__()
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        if not 0 < init_radius < 0.5:
            raise ValueError(f"init_radius must lie in (0, 0.5), got {init_radius}")
        if init_noise < 0 or deform_fraction < 0:
            raise ValueError("init_noise and deform_fraction must be >= 0")
        grid = tet_grid(grid_res, device=device, cache_dir=cache_dir)
        self.grid_res, self.scale = grid.resolution, float(scale)
        self.max_deformation = deform_fraction * grid.cell_size * self.scale
        self.register_buffer("grid_vertices", grid.vertices * self.scale, persistent=False)
        self.register_buffer("tets", grid.tets, persistent=False)
        self.register_buffer("edges", grid.edges, persistent=False)

        self.sdf = nn.Parameter(initial_sphere_sdf(
            self.grid_vertices, init_radius * self.scale, init_noise * self.scale / grid_res,
            generator))
        self.deform = nn.Parameter(torch.zeros_like(self.grid_vertices))

    def deformed_vertices(self) -> torch.Tensor:
        """Grid vertex positions after the bounded deformation, float32 ``[V, 3]``."""
        return self.grid_vertices + self.max_deformation * torch.tanh(self.deform)

    def extract(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The surface ``(vertices float32 [S, 3], triangles int64 [F, 3])``, outward wound,
        differentiable w.r.t. ``sdf`` and ``deform``."""
        return marching_tets(self.deformed_vertices(), self.sdf, self.tets)

    def sdf_regularizer(self) -> torch.Tensor:
        """``sdf_sign_change_loss`` over the grid's edges (scalar)."""
        return sdf_sign_change_loss(self.sdf, self.edges)
